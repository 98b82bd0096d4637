/* snn train / eval on the GPU: the same loop as the CPU path (shuffle, encode, step, evaluate
 * each epoch, metrics.jsonl, checkpoint), over the whole-model runner of include/snn/cuda.h.
 * A step is asynchronous; the loss and accuracy sums are read back every few steps for the
 * progress line and at the end of each epoch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "snn/checkpoint.h"
#include "snn/prepare.h"
#include "snn/train.h"
#include "train_cuda.h"

int device_is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

void train_fp8_state_free(train_fp8_state *s) {
    free(s->scales);
    free(s->histories);
    memset(s, 0, sizeof *s);
}

snn_precision_config gpu_precision_config(const precision_flags *pf, const struct snn_ckpt *ck) {
    if (precision_flags_given(pf) || !ck) return precision_flags_config(pf);
    snn_precision_config c = snn_precision_config_default();
    const char *pc = snn_ckpt_metadata(ck, "snn_precision_config");
    if (!pc || snn_precision_config_from_json(pc, &c) != SNN_OK) c = snn_precision_config_default();
    return c;
}

#ifndef SNN_HAVE_CUDA

/* device_parse exits 2 with "built without CUDA" before any of these could run */
int train_cuda_run(snn_model *m, const snn_train_opts *o, const snn_train_position *pos, const struct snn_ckpt *resume,
                   const snn_dataset *train, const snn_dataset *test, const char *model_name, const char *device,
                   const snn_precision_config *pcfg, int quiet, int json) {
    (void)m; (void)o; (void)pos; (void)resume; (void)train; (void)test; (void)model_name; (void)pcfg;
    (void)quiet; (void)json;
    device_parse(NULL, device);
    return 2;
}

snn_status train_cuda_fp8_resume(snn_model *m, const snn_precision_config *pcfg, snn_optimizer *opt,
                                 const struct snn_ckpt *ck, train_fp8_state *out) {
    (void)m; (void)pcfg; (void)opt; (void)ck; (void)out;
    return SNN_E_UNSUPPORTED;
}

gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg,
                          const struct snn_ckpt *ck) {
    (void)m; (void)T; (void)N; (void)pcfg; (void)ck;
    device_parse(NULL, device);
    return NULL;
}
snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y) {
    (void)s; (void)xb; (void)valid; (void)y;
    return SNN_E_UNSUPPORTED;
}
void gpu_infer_close(gpu_infer *s) { (void)s; }

gpu_dp *gpu_dp_open(snn_model *m, struct snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse) {
    (void)m; (void)world; (void)T; (void)N; (void)pcfg; (void)oo; (void)clip; (void)use_mse;
    device_parse(NULL, device);
    return NULL;
}
struct snn_cuda_model *gpu_dp_model(gpu_dp *s) { (void)s; return NULL; }
snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta) {
    (void)s; (void)m; (void)opt; (void)path; (void)meta;
    return SNN_E_UNSUPPORTED;
}
void gpu_dp_close(gpu_dp *s) { (void)s; }

snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, const struct snn_ckpt *ck, double *acc,
                     double *loss) {
    (void)m; (void)ds; (void)T; (void)N; (void)enc; (void)seed; (void)pcfg; (void)ck; (void)acc; (void)loss;
    device_parse(NULL, device);
    return SNN_E_UNSUPPORTED;
}

#else

#include "snn/cuda.h"
#include "snn/dist.h"

static snn_dtype compute_type(const snn_precision_config *p) {
    switch (p->mode) {
    case SNN_PRECISION_FP32: return SNN_F32;
    case SNN_PRECISION_BF16: return SNN_BF16;
    case SNN_PRECISION_FP16: return SNN_F16;
    case SNN_PRECISION_FP8: return SNN_F8E4M3; /* the recipe travels in opts.fp8 */
    default:
        die_usage("--precision %s is not available with --device cuda", snn_precision_mode_name(p->mode));
    }
    return SNN_F32;
}

/* ---- FP8 state and checkpoints ----
 * The checkpoint format of FP8 training is the CPU's (snn_training_checkpoint_save: per
 * converted module and operand a scale and an amax history). The tool reads and writes it
 * through a CPU precision prepared over the host model just for that and released again
 * (the runner refuses a model that still carries one): snn_prepare_model_for_state, which
 * accepts the model's optimizer since that precision only carries state in and out. */
static snn_status prepare_for_state(snn_model *m, const snn_precision_config *pcfg, snn_precision **p) {
    return snn_prepare_model_for_state(m, pcfg, p);
}

static snn_status fp8_collect(snn_precision *p, train_fp8_state *s) {
    memset(s, 0, sizeof *s);
    SNN_TRY_TOOL(snn_precision_fp8_export_state(p, &s->n, &s->history_len, NULL, NULL));
    size_t hl = (size_t)(s->history_len ? s->history_len : 1);
    s->scales = malloc(sizeof(float) * 3 * (size_t)(s->n ? s->n : 1));
    s->histories = malloc(sizeof(float) * 3 * hl * (size_t)(s->n ? s->n : 1));
    if (!s->scales || !s->histories) return SNN_E_NOMEM;
    return snn_precision_fp8_export_state(p, NULL, NULL, s->scales, s->history_len ? s->histories : NULL);
}

/* A checkpoint's FP8 state (and with opt, parameters and optimizer state: a resume). */
static snn_status fp8_state_from_ckpt(snn_model *m, const snn_precision_config *pcfg, snn_optimizer *opt,
                                      const struct snn_ckpt *ck, train_fp8_state *out) {
    snn_precision *p = NULL;
    memset(out, 0, sizeof *out);
    snn_status st = prepare_for_state(m, pcfg, &p);
    if (st == SNN_OK) st = snn_training_checkpoint_restore(m, p, opt, ck);
    if (st == SNN_OK) st = fp8_collect(p, out);
    snn_precision_free(p);
    if (st != SNN_OK) train_fp8_state_free(out);
    return st;
}

snn_status train_cuda_fp8_resume(snn_model *m, const snn_precision_config *pcfg, snn_optimizer *opt,
                                 const struct snn_ckpt *ck, train_fp8_state *out) {
    return fp8_state_from_ckpt(m, pcfg, opt, ck, out);
}

static snn_status fp8_load(snn_cuda_model *g, const train_fp8_state *s) {
    if (!s->n) return SNN_OK;
    return snn_cuda_model_fp8_load_state(g, s->n, s->history_len, s->scales, s->histories);
}

/* The training checkpoint of an fp8 run: the runner's FP8 state into a CPU precision, then
 * the CPU's writer. A runner whose recipe keeps no state (current, block) leaves the CPU
 * precision's initial state, which is what the CPU saves for those recipes. */
static snn_status save_fp8_checkpoint(snn_cuda_model *g, snn_model *m, const snn_precision_config *pcfg,
                                      snn_optimizer *opt, const char *path, const char *const *meta) {
    int n = 0, hl = 0;
    SNN_TRY_TOOL(snn_cuda_model_fp8_state(g, &n, &hl, NULL, NULL));
    float *sc = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1));
    float *hs = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1) * (size_t)(hl ? hl : 1));
    snn_precision *p = NULL;
    snn_status st = sc && hs ? SNN_OK : SNN_E_NOMEM;
    if (st == SNN_OK) st = snn_cuda_model_fp8_state(g, NULL, NULL, sc, hl ? hs : NULL);
    if (st == SNN_OK) st = prepare_for_state(m, pcfg, &p);
    /* history 0 (current, block scaling) loads nothing: the CPU precision's initial state */
    if (st == SNN_OK) st = snn_precision_fp8_load_state(p, n, hl, sc, hs);
    if (st == SNN_OK) st = snn_training_checkpoint_save(m, p, opt, path, meta);
    snn_precision_free(p);
    free(sc);
    free(hs);
    return st;
}

static snn_status snn_cuda_open_for_tool(const char *device, snn_cuda **out) {
    return snn_cuda_create(device_parse(NULL, device), 0, out);
}

static snn_status evaluate_gpu(snn_cuda_model *g, const snn_dataset *ds, int T, int N, int C,
                               snn_encoding enc, uint64_t seed, double *acc, double *loss) {
    int n = snn_dataset_size(ds);
    size_t F = snn_dataset_features(ds);
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = enc == SNN_ENCODING_DIRECT ? NULL : malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    float *y = malloc(sizeof(float) * (size_t)C * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)N);
    double *mean = malloc(sizeof(double) * (size_t)C);
    snn_status st = (xb && y && yb && idx && mean && (xt || enc == SNN_ENCODING_DIRECT)) ? SNN_OK : SNN_E_NOMEM;
    long correct = 0;
    double loss_sum = 0;
    for (int start = 0; start < n && st == SNN_OK; start += N) {
        int valid = n - start < N ? n - start : N;
        for (int i = 0; i < valid; i++) idx[i] = (uint32_t)(start + i);
        st = snn_dataset_batch(ds, idx, valid, xb, yb);
        if (st == SNN_OK && xt)
            st = snn_encode(enc, xb, valid, F, T, seed, 0xE7A1000000000000ull + (uint64_t)start, xt);
        if (st == SNN_OK) st = snn_cuda_model_forward(g, xt ? xt : xb, xt != NULL, valid, y);
        if (st == SNN_OK) snn_score_batch(y, T, N, C, yb, valid, mean, &correct, &loss_sum);
    }
    free(xb); free(xt); free(y); free(yb); free(idx); free(mean);
    if (st != SNN_OK) return st;
    *acc = (double)correct / n;
    *loss = loss_sum / n;
    return SNN_OK;
}

snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, const struct snn_ckpt *ck, double *acc,
                     double *loss) {
    snn_dtype ct = compute_type(&pcfg);
    train_fp8_state f8 = {0};
    if (ct == SNN_F8E4M3 && ck) SNN_TRY_TOOL(fp8_state_from_ckpt(m, &pcfg, NULL, ck, &f8));
    int n = snn_dataset_size(ds);
    if (n <= 0) return SNN_E_INVALID;
    if (N > n) N = n;
    snn_cuda *c = NULL;
    snn_status st0 = snn_cuda_open_for_tool(device, &c);
    if (st0 != SNN_OK) {
        train_fp8_state_free(&f8);
        return st0;
    }
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = ct, .fp8 = &pcfg, .neuron = &pcfg};
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_cuda_model *g = NULL;
    snn_status st = snn_cuda_model_create(c, m, &o, &oo, &g);
    if (st == SNN_OK) st = fp8_load(g, &f8);
    train_fp8_state_free(&f8);
    if (st == SNN_OK)
        st = evaluate_gpu(g, ds, T, N, (int)snn_model_output_numel(m), enc, seed, acc, loss);
    snn_cuda_model_destroy(g);
    snn_cuda_destroy(c);
    return st;
}

struct gpu_infer {
    snn_cuda *c;
    snn_cuda_model *g;
};

gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg,
                          const struct snn_ckpt *ck) {
    gpu_infer *s = calloc(1, sizeof *s);
    if (!s) die_status(SNN_E_NOMEM, "allocating");
    snn_dtype ct = compute_type(&pcfg);
    train_fp8_state f8 = {0};
    snn_status st = SNN_OK;
    if (ct == SNN_F8E4M3 && ck && (st = fp8_state_from_ckpt(m, &pcfg, NULL, ck, &f8)) != SNN_OK)
        die_status(st, "reading the checkpoint's FP8 state");
    st = snn_cuda_open_for_tool(device, &s->c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = ct, .fp8 = &pcfg, .neuron = &pcfg};
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    st = snn_cuda_model_create(s->c, m, &o, &oo, &s->g);
    if (st == SNN_OK) st = fp8_load(s->g, &f8);
    train_fp8_state_free(&f8);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    return s;
}

snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y) {
    return snn_cuda_model_forward(s->g, xb, 0, valid, y);
}

void gpu_infer_close(gpu_infer *s) {
    if (!s) return;
    snn_cuda_model_destroy(s->g);
    snn_cuda_destroy(s->c);
    free(s);
}

struct gpu_dp {
    snn_cuda *c;
    snn_comm *nccl;
    snn_cuda_collectives coll;
    snn_cuda_model *g;
    snn_precision_config pcfg;
    snn_dtype ct;
};

gpu_dp *gpu_dp_open(snn_model *m, snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse) {
    gpu_dp *s = calloc(1, sizeof *s);
    if (!s) die_status(SNN_E_NOMEM, "allocating");
    s->pcfg = *pcfg;
    s->ct = compute_type(&s->pcfg);
    int dev = device_parse(NULL, device);
    if (!strcmp(device, "cuda")) dev = snn_comm_local_rank(world);
    snn_status st = snn_comm_nccl_create(world, dev, &s->nccl);
    if (st != SNN_OK) die_status(st, "creating the NCCL communicator");
    st = snn_cuda_create(dev, 0, &s->c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    s->coll = snn_ddp_cuda_collectives(s->nccl);
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = s->ct, .loss = use_mse ? SNN_CUDA_LOSS_MSE_RATE : SNN_CUDA_LOSS_CE,
                             .clip = clip, .fp8 = &s->pcfg, .neuron = &s->pcfg, .dp = &s->coll};
    st = snn_cuda_model_create(s->c, m, &o, oo, &s->g);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    return s;
}

snn_cuda_model *gpu_dp_model(gpu_dp *s) { return s ? s->g : NULL; }

snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta) {
    SNN_TRY_TOOL(snn_cuda_model_download(s->g));
    float scale;
    int tracker;
    SNN_TRY_TOOL(snn_cuda_model_save_state(s->g, opt, &scale, &tracker));
    SNN_TRY_TOOL(snn_model_check_finite(m));
    if (s->ct == SNN_F8E4M3) return save_fp8_checkpoint(s->g, m, &s->pcfg, opt, path, meta);
    snn_loss_scaler scaler;
    snn_loss_scaler_init(&scaler, NULL);
    if (s->ct == SNN_F16) SNN_TRY_TOOL(snn_loss_scaler_set_state(&scaler, scale, tracker));
    return snn_training_checkpoint_save_cfg(m, &s->pcfg, &scaler, opt, path, meta);
}

void gpu_dp_close(gpu_dp *s) {
    if (!s) return;
    snn_cuda_model_destroy(s->g);
    snn_cuda_destroy(s->c);
    snn_comm_free(s->nccl);
    free(s);
}

static void metrics_line(FILE *f, const char *path, int epoch, long step, double tl, double ta, double tel,
                         double tea, double sps, double dt, double wall, int partial, const char *device) {
    if (fprintf(f,
                "{\"epoch\":%d,\"step\":%ld,\"train_loss\":%.6f,\"train_accuracy\":%.6f,\"test_loss\":%.6f,"
                "\"test_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_s\":%.3f,\"wall_s\":%.3f%s,\"device\":\"%s\"}\n",
                epoch, step, tl, ta, tel, tea, sps, dt, wall, partial ? ",\"partial\":true" : "", device) < 0 ||
        fflush(f) != 0)
        die_usage("cannot write '%s'", path);
}

int train_cuda_run(snn_model *m, const snn_train_opts *o, const snn_train_position *rpos, const struct snn_ckpt *resume,
                   const snn_dataset *train, const snn_dataset *test, const char *model_name, const char *device,
                   const snn_precision_config *pcfg_in, int quiet, int json) {
    snn_precision_config pcfg = *pcfg_in;
    snn_dtype ct = compute_type(&pcfg);
    snn_status st = snn_train_opts_check(o);
    if (st != SNN_OK) die_status(st, "checking the training options");
    int ntrain = snn_dataset_size(train);
    int N = o->batch_size < ntrain ? o->batch_size : ntrain, T = o->T;
    int nb = ntrain / N;
    long total_steps = (long)o->epochs * nb;
    snn_lr_sched sched = {.kind = o->schedule, .base_lr = o->optim.lr, .warmup_steps = o->warmup,
                          .warmup_start_factor = 0.1f, .total_steps = total_steps > o->warmup ? total_steps : o->warmup + 1,
                          .min_lr = 0, .step_size = nb, .gamma = 0.5f};
    if (snn_lr_sched_check(&sched) != SNN_OK) die_status(SNN_E_INVALID, "learning-rate schedule");
    /* The runner keeps the optimizer state; this host optimizer carries it in and out of
     * checkpoints (the same layout, so CPU and GPU checkpoints resume on either). */
    snn_optimizer *opt = NULL;
    st = snn_optimizer_create_for_model(&o->optim, m, &opt);
    if (st != SNN_OK) die_status(st, "creating the optimizer");
    snn_loss_scaler scaler0;
    snn_loss_scaler_init(&scaler0, NULL);
    train_fp8_state fp8 = {0};
    snn_train_position pos = {.epoch = 1, .steps_per_epoch = nb, .total_steps = total_steps, .train_samples = ntrain};
    if (resume) {
        if (rpos->train_samples != ntrain || rpos->steps_per_epoch != nb)
            die_usage("the checkpoint's run has %d training samples in %d steps an epoch, this one %d in %d",
                      rpos->train_samples, rpos->steps_per_epoch, ntrain, nb);
        st = pcfg.mode == SNN_PRECISION_FP8 ? train_cuda_fp8_resume(m, &pcfg, opt, resume, &fp8)
                                            : snn_training_checkpoint_restore_cfg(m, &pcfg, &scaler0, opt, resume);
        if (st != SNN_OK) die_status(st, "resuming");
        pos = *rpos;
        pos.total_steps = total_steps;
    }
    snn_cuda *c = NULL;
    st = snn_cuda_open_for_tool(device, &c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    size_t F = snn_dataset_features(train), C = snn_model_output_numel(m);
    snn_cuda_model_opts co = {.T = T, .N = N, .compute = ct,
                              .loss = o->loss == SNN_TRAIN_LOSS_MSE_RATE ? SNN_CUDA_LOSS_MSE_RATE : SNN_CUDA_LOSS_CE,
                              .clip = o->clip, .fp8 = &pcfg, .neuron = &pcfg};
    snn_cuda_model *g = NULL;
    st = snn_cuda_model_create(c, m, &co, &o->optim, &g);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    if (resume) {
        float scale;
        int tracker;
        snn_loss_scaler_get_state(&scaler0, &scale, &tracker);
        st = snn_cuda_model_load_state(g, opt, scale, tracker);
        if (st == SNN_OK && ct == SNN_F8E4M3) st = fp8_load(g, &fp8);
        if (st != SNN_OK) die_status(st, "putting the resumed optimizer state on the GPU");
    }
    train_fp8_state_free(&fp8);
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = o->encoding == SNN_ENCODING_DIRECT ? NULL : malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *order = malloc(sizeof(uint32_t) * (size_t)ntrain);
    if (!xb || !yb || !order || (!xt && o->encoding != SNN_ENCODING_DIRECT)) die_status(SNN_E_NOMEM, "allocating batches");
    char path[4200];
    st = snn_run_dir_clean(o->out_dir, "model.safetensors", NULL);
    if (st != SNN_OK) die_status(st, NULL);
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
    if (resume && (st = snn_metrics_trim(path, pos.step)) != SNN_OK) die_status(st, NULL);
    FILE *metrics = fopen(path, resume ? "a" : "w");
    if (!metrics) die_usage("cannot write '%s'", path);
    int tty = !quiet && isatty(2);
    if (!quiet)
        fprintf(stderr, "snn: training %s (%zu parameters) on %s with %s (%s, %.0f MiB of device memory): %d samples, T=%d, batch %d, %s lr %g, %d epochs\n",
                model_name, snn_model_num_params(m), o->dataset, device,
                ct == SNN_F8E4M3 ? "fp8 (bf16 where a GEMM does not convert)" : snn_dtype_name(ct),
                (double)snn_cuda_model_device_bytes(g) / 1048576.0, ntrain, T, N,
                snn_optim_kind_name(o->optim.kind), (double)o->optim.lr, o->epochs);
    double train_time = 0, t_start = now_seconds(), test_acc = 0, test_loss = 0;
    long samples = 0;
    while (pos.epoch <= o->epochs && !(o->max_steps && pos.step >= o->max_steps)) {
        int epoch = pos.epoch;
        st = snn_dataset_shuffle(train, o->seed, (uint64_t)epoch, order);
        if (st != SNN_OK) die_status(st, "shuffling");
        double loss_sum = 0, t0 = now_seconds();
        long correct = 0, seen = 0, counted = 0;
        while (pos.batch < nb && !(o->max_steps && pos.step >= o->max_steps)) {
            int b = pos.batch;
            st = snn_dataset_batch(train, order + (size_t)b * N, N, xb, yb);
            if (st == SNN_OK && xt)
                st = snn_encode(o->encoding, xb, N, F, T, o->seed, ((uint64_t)epoch << 32) | (uint64_t)b, xt);
            if (st == SNN_OK)
                st = snn_cuda_model_train_step(g, xt ? xt : xb, xt != NULL, yb, snn_lr_schedule(&sched, pos.step));
            if (st != SNN_OK) die_status(st, "training step");
            pos.step++;
            pos.batch++;
            seen += N;
            if ((b % 32 == 31) || pos.batch == nb || (o->max_steps && pos.step >= o->max_steps)) {
                double l;
                long cc, ss;
                st = snn_cuda_model_take_stats(g, &l, &cc, &ss);
                if (st != SNN_OK) die_status(st, "training step");
                loss_sum += l;
                correct += cc;
                counted += ss;
                if (!isfinite(l)) die_status(snn_error(SNN_E_NUMERIC, "the loss became %f near step %ld; lower --lr", l, pos.step), "training");
                if (tty) {
                    fprintf(stderr, "\repoch %d/%d %d/%d loss %.4f acc %.3f %.0f samples/s ", epoch, o->epochs, pos.batch, nb,
                            loss_sum / counted, (double)correct / ((double)counted * N), seen / (now_seconds() - t0));
                    fflush(stderr);
                }
            }
        }
        double dt = now_seconds() - t0;
        train_time += dt;
        samples += seen;
        if (tty) fputc('\n', stderr);
        int partial = pos.batch < nb;
        st = evaluate_gpu(g, test, T, N, (int)C, o->encoding, o->seed, &test_acc, &test_loss);
        if (st != SNN_OK) die_status(st, "evaluating");
        double tl = counted ? loss_sum / counted : 0, ta = counted ? (double)correct / ((double)counted * N) : 0;
        metrics_line(metrics, path, epoch, pos.step, tl, ta, test_loss, test_acc, dt > 0 ? seen / dt : 0, dt,
                     now_seconds() - t_start, partial, device);
        if (!quiet)
            fprintf(stderr, "epoch %d: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f samples/s, %.1f s\n",
                    epoch, tl, ta, test_loss, test_acc, dt > 0 ? seen / dt : 0, dt);
        if (!partial) {
            pos.epochs_done = epoch;
            pos.epoch = epoch + 1;
            pos.batch = 0;
        }
    }
    if (fclose(metrics) != 0) die_usage("cannot write '%s'", path);
    st = snn_cuda_model_download(g);
    if (st != SNN_OK) die_status(st, "copying the model back from the GPU");
    snn_loss_scaler scaler = scaler0;
    {
        float scale;
        int tracker;
        st = snn_cuda_model_save_state(g, opt, &scale, &tracker);
        if (st == SNN_OK && ct == SNN_F16) st = snn_loss_scaler_set_state(&scaler, scale, tracker);
        if (st != SNN_OK) die_status(st, "copying the optimizer state back from the GPU");
    }
    for (size_t i = 0; i < snn_model_num_params(m); i++)
        if (!isfinite(snn_model_params(m)[i]))
            die_status(snn_error(SNN_E_NUMERIC, "parameter %zu became %g: refusing to write the checkpoint (lower --lr)",
                                 i, (double)snn_model_params(m)[i]), "training");
    snprintf(path, sizeof path, "%s/model.safetensors", o->out_dir);
    char mbuf[4096];
    const char *kv[24];
    st = snn_train_metadata(o, &pos, mbuf, sizeof mbuf, kv, 20);
    if (st != SNN_OK) die_status(st, "saving the checkpoint");
    size_t k = 0;
    while (kv[k]) k++;
    kv[k++] = "trained_on";
    kv[k++] = device;
    kv[k++] = "gpu_compute";
    kv[k++] = snn_dtype_name(ct);
    kv[k] = NULL;
    st = ct == SNN_F8E4M3 ? save_fp8_checkpoint(g, m, &pcfg, opt, path, kv)
                          : snn_training_checkpoint_save_cfg(m, &pcfg, &scaler, opt, path, kv);
    if (st != SNN_OK) die_status(st, "saving the checkpoint");
    double wall = now_seconds() - t_start;
    printf("test accuracy: %.4f\n", test_acc);
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model_name);
        cJSON_AddStringToObject(j, "dataset", o->dataset ? o->dataset : "");
        cJSON_AddNumberToObject(j, "test_accuracy", test_acc);
        cJSON_AddNumberToObject(j, "test_loss", test_loss);
        cJSON_AddNumberToObject(j, "samples_per_s", train_time > 0 ? samples / train_time : 0);
        cJSON_AddNumberToObject(j, "wall_s", wall);
        cJSON_AddNumberToObject(j, "train_s", train_time);
        cJSON_AddNumberToObject(j, "epochs", pos.epochs_done);
        cJSON_AddNumberToObject(j, "steps", (double)pos.step);
        cJSON_AddNumberToObject(j, "T", T);
        cJSON_AddNumberToObject(j, "batch_size", N);
        cJSON_AddNumberToObject(j, "parameters", (double)snn_model_num_params(m));
        cJSON_AddStringToObject(j, "precision", snn_precision_mode_name(pcfg.mode));
        cJSON_AddStringToObject(j, "device", device);
        cJSON_AddStringToObject(j, "checkpoint", path);
        print_json_line(j);
    }
    free(xb); free(xt); free(yb); free(order);
    snn_optimizer_free(opt);
    snn_cuda_model_destroy(g);
    snn_cuda_destroy(c);
    return finish_stdout();
}

#endif
