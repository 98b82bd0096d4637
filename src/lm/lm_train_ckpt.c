/* Language-model training checkpoints, reshardable over DP.
 *
 * step_XXXXXXX/checkpoint.safetensors is an snn training checkpoint (prepare.h): the model
 * tensors, the precision state, "__optim__.exp_avg" / "__optim__.exp_avg_sq" over the WHOLE
 * flat parameter buffer (canonical order, whatever the DP size that wrote it) and the
 * metadata lm_recipe, lm_training_config, optimizer_step, consumed_samples,
 * scheduler_samples, data_parallel_size (informative). Saving gathers the optimizer slices
 * to DP rank 0 (into a temporary unsharded optimizer that lives for the write only), which
 * writes a hidden sibling directory and renames it. Loading: every rank reads the file and
 * takes the weights, the precision state and its own slice of the optimizer state, so a
 * checkpoint written at DP 2 resumes at DP 1 or DP 4. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "lm/lm_train_internal.h"
#include "nn/model_internal.h"
#include "snn/checkpoint.h"

static snn_optimizer *lm_local_optimizer(snn_lm_trainer *t) {
    return t->staged ? (t->sdopt ? snn_dist_optim_local(t->sdopt) : t->sopt) : snn_dist_optim_local(t->opt);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* Rank 0: write dir atomically (a hidden sibling directory, then rename). */
static snn_status write_dir(snn_lm_trainer *t, snn_optimizer *opt, const char *dir) {
    const snn_lm_training_config *c = &t->cfg;
    char tmp[4300], file[4400], s1[32], s2[32], s3[32], s4[32], s5[32], s6[32];
    snprintf(tmp, sizeof tmp, "%s/.step_%07ld.tmp.%ld", c->checkpoint_dir, t->step, (long)getpid());
    if (mkdir_p(c->checkpoint_dir) || mkdir(tmp, 0777))
        return snn_error(SNN_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    snprintf(file, sizeof file, "%s/%s", tmp, LM_TRAIN_CKPT_FILE);
    snprintf(s1, sizeof s1, "%ld", t->step);
    snprintf(s2, sizeof s2, "%ld", t->consumed);
    snprintf(s3, sizeof s3, "%ld", t->sched);
    snprintf(s4, sizeof s4, "%d", t->staged ? t->dp_size : t->dp);
    snprintf(s5, sizeof s5, "%d", t->cfg.model.transformer.tensor_model_parallel_size);
    snprintf(s6, sizeof s6, "%d", t->cfg.model.transformer.pipeline_model_parallel_size);
    /* the sizes are informative: the tensors are canonical whatever the topology */
    const char *kv[] = {"lm_recipe",        t->recipe, "lm_training_config", t->cfg_json, "optimizer_step", s1,
                        "consumed_samples", s2,        "scheduler_samples",  s3,          "data_parallel_size", s4,
                        "tensor_parallel_size", s5, "pipeline_parallel_size", s6, NULL};
    snn_status st = snn_training_checkpoint_save(t->m, t->prec, opt, file, kv);
    if (st == SNN_OK && rename(tmp, dir)) st = snn_error(SNN_E_IO, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (st != SNN_OK) {
        unlink(file);
        rmdir(tmp);
    }
    return st;
}

snn_status snn_lm_trainer_save(snn_lm_trainer *t, char *dir_out, size_t cap, double *seconds) {
    if (!t) return snn_error(SNN_E_INVALID, "lm trainer is NULL");
    double t0 = now_s();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/step_%07ld", t->cfg.checkpoint_dir, t->step);
    snn_status st = SNN_OK;
    snn_optimizer *full = NULL;
    if (t->rank == 0) {
        struct stat sb;
        if (!t->cfg.checkpoint_dir[0]) st = snn_error(SNN_E_INVALID, "no checkpoint_dir to save into");
        else if (!stat(dir, &sb)) st = snn_error(SNN_E_INVALID, "checkpoint %s exists already", dir);
        /* the canonical optimizer state, for the write only */
        if (st == SNN_OK && (t->dp > 1 || t->staged)) {
            snn_optimizer *loc = lm_local_optimizer(t);
            st = snn_optimizer_create(snn_optimizer_opts(loc), snn_model_num_params(t->m), snn_model_params(t->m),
                                      snn_model_grads(t->m), NULL, &full);
        }
    }
    st = lm_agree(t, st);
    if (st == SNN_OK && t->staged) st = lm_agree(t, lm_stage_gather(t, full));
    else if (st == SNN_OK && t->dp > 1) st = snn_dist_optim_gather(t->opt, 0, full);
    /* a device model's tensors are host copies refreshed by the getters: refresh them
     * before the writer reads them (on the CPU these are the arrays themselves) */
    if (st == SNN_OK && t->rank == 0 && t->m->owned_be && (!snn_model_params(t->m) || !snn_model_buffers(t->m)))
        st = snn_error(SNN_E_STATE, "copying the model from %s for the checkpoint failed", snn_model_device(t->m));
    if (st == SNN_OK && t->rank == 0) st = write_dir(t, full ? full : snn_dist_optim_local(t->opt), dir);
    snn_optimizer_free(full);
    SNN_TRY(lm_agree(t, st));
    double secs = now_s() - t0;
    if (snn_comm_size(t->comm) > 1) SNN_TRY(snn_comm_allreduce(t->comm, &secs, 1, SNN_COMM_F64, SNN_COMM_MAX));
    if (dir_out && cap) snprintf(dir_out, cap, "%s", dir);
    if (seconds) *seconds = secs;
    return SNN_OK;
}

/* A decimal integer in 0..LONG_MAX, the whole string. */
static int parse_count(const char *s, long *out) {
    if (!s || !*s) return 0;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        if (__builtin_mul_overflow(v, 10L, &v) || __builtin_add_overflow(v, (long)(*p - '0'), &v)) return 0;
    }
    *out = v;
    return 1;
}

static snn_status load_local(snn_lm_trainer *t, const char *path) {
    char rp[4200];
    struct stat sb;
    snprintf(rp, sizeof rp, "%s/%s", path, LM_TRAIN_CKPT_FILE);
    if (stat(rp, &sb)) snprintf(rp, sizeof rp, "%s", path);
    snn_ckpt *ck;
    snn_status st = snn_ckpt_open(rp, &ck);
    if (st != SNN_OK) return snn_error_prefix(SNN_E_INVALID, "opening the checkpoint to resume");
    const char *r = snn_ckpt_metadata(ck, "lm_recipe"), *s = snn_ckpt_metadata(ck, "optimizer_step"),
               *cs = snn_ckpt_metadata(ck, "consumed_samples"), *ss = snn_ckpt_metadata(ck, "scheduler_samples");
    long step = 0, consumed = 0, sched = 0, osteps = 0;
    const void *state[8];
    size_t ns = snn_optimizer_num_states(lm_local_optimizer(t)), n = snn_model_num_params(t->m);
    if (!r || !s || !cs || !ss) {
        st = snn_error(SNN_E_INVALID, "%s is not a checkpoint of snn lm train", rp);
    } else if (strcmp(r, t->recipe)) {
        st = snn_error(SNN_E_INVALID, "the checkpoint's recipe does not match this run (checkpoint %s, this run %s)", r,
                       t->recipe);
    } else if (!parse_count(s, &step) || !parse_count(cs, &consumed) || !parse_count(ss, &sched) ||
               step > t->cfg.train_steps || consumed != step * t->G || sched > consumed) {
        st = snn_error(SNN_E_INVALID,
                       "checkpoint step %.20s / consumed samples %.20s / scheduler samples %.20s do not fit train_steps "
                       "%lld and global batch %ld",
                       s, cs, ss, (long long)t->cfg.train_steps, t->G);
    } else if (ns > sizeof state / sizeof state[0]) {
        st = snn_error(SNN_E_STATE, "the optimizer has %zu state tensors", ns);
    }
    /* the optimizer state, canonical, over the whole buffer: this rank takes its slice */
    const char *kind = snn_ckpt_metadata(ck, "optimizer");
    const char *mine = snn_optim_kind_name(snn_optimizer_opts(lm_local_optimizer(t))->kind);
    if (st == SNN_OK && (!kind || strcmp(kind, mine)))
        st = snn_error(SNN_E_INVALID, "%s holds %.40s optimizer state, this run uses %s", rp, kind ? kind : "no", mine);
    if (st == SNN_OK && !parse_count(snn_ckpt_metadata(ck, "optimizer_steps"), &osteps))
        st = snn_error(SNN_E_FORMAT, "%s: metadata \"optimizer_steps\" is missing or not a count", rp);
    for (size_t i = 0; st == SNN_OK && i < ns; i++) {
        snn_optim_state os;
        snn_ckpt_tensor ct;
        char name[256];
        st = snn_optimizer_state(lm_local_optimizer(t), i, &os);
        snprintf(name, sizeof name, "__optim__.%s", os.name);
        if (st == SNN_OK) st = snn_ckpt_find(ck, name, &ct);
        if (st == SNN_OK && (ct.dtype != SNN_CKPT_F32 || ct.numel != n))
            st = snn_error(SNN_E_SHAPE, "%s: tensor \"%s\" must be F32 with %zu values (the model's parameters), it has %zu",
                           rp, name, n, ct.numel);
        if (st == SNN_OK) state[i] = ct.data;
    }
    /* weights and precision state first (checked whole before anything is written), then
     * the optimizer slice (checked before it is written) */
    /* (on a device model the restore sends the weights there: snn_model_load_weights) */
    if (st == SNN_OK) st = snn_training_checkpoint_restore(t->m, t->prec, NULL, ck);
    if (st == SNN_OK && t->staged) st = lm_stage_scatter(t, state, ns, osteps, rp);
    else if (st == SNN_OK) st = snn_dist_optim_load_slice(t->opt, state, ns, osteps, rp);
    snn_ckpt_close(ck);
    if (st != SNN_OK) return st;
    t->step = step;
    t->consumed = consumed;
    t->sched = sched;
    return SNN_OK;
}

snn_status snn_lm_trainer_load(snn_lm_trainer *t, const char *path) {
    if (!t || !path) return snn_error(SNN_E_INVALID, "lm trainer load: NULL argument");
    SNN_TRY(lm_agree(t, load_local(t, path)));
    t->info.start_step = t->step;
    return SNN_OK;
}
