/* Training checkpoints: model tensors + precision, FP8, loss-scaler and optimizer state. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/runtime.h"
#include "snn/checkpoint.h"
#include "snn/snn.h"
#include "train/checkpoint_internal.h"

static const char *role_name[3] = {"input", "weight", "grad"};

static snn_fp8_tensor_state *state_of(snn_prec_module *pm, int r) {
    return r == 0 ? &pm->sx : r == 1 ? &pm->sw : &pm->sdy;
}

static snn_status add_f32(snn_ckpt_writer *w, const char *name, const float *v, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    return snn_ckpt_writer_add_tensor(w, name, SNN_CKPT_F32, 1, shape, v);
}

/* An optimizer whose state a checkpoint of m may hold: m's own, or a container over the host
 * copy of a device model (the canonical state a sharded optimizer gathers for the write). */
static int state_of_model(const snn_optimizer *opt, const snn_model *m) {
    return snn_optimizer_for_model(opt, m) ||
           (snn_optimizer_params(opt) == m->params && snn_optimizer_numel(opt) == m->n_params);
}

/* cfg: the configuration to record (NULL = fp32); p: FP8 state (may be NULL); scaler: the loss
 * scaler to save (NULL = none). */
static snn_status save_impl(snn_model *m, const snn_precision_config *cfg, snn_precision *p,
                            const snn_loss_scaler *scaler, snn_optimizer *opt, const char *path,
                            const char *const *meta_kv) {
    if (!m || !path) return snn_error(SNN_E_INVALID, "training checkpoint save: NULL model or path");
    if (p && p->model != m)
        return snn_error(SNN_E_INVALID, "training checkpoint save: the precision was prepared for another model");
    if (opt && !state_of_model(opt, m))
        return snn_error(SNN_E_INVALID, "training checkpoint save: the optimizer belongs to another model");
    SNN_TRY(snn_model_pull_host(m)); /* a device model: save what the device holds */
    if (p) SNN_TRY(snn_precision_fp8_flush(p)); /* and the FP8 amaxes it holds */
    snn_ckpt_writer *w = NULL;
    SNN_TRY(snn_ckpt_writer_begin(&w));
    snn_status st = SNN_OK;
    char buf[1024], name[512];
    for (size_t i = 0; i < snn_model_num_tensors(m) && st == SNN_OK; i++) {
        snn_tensor_info ti;
        st = snn_model_tensor(m, i, &ti);
        int64_t shape[4];
        for (int k = 0; k < ti.rank; k++) shape[k] = ti.shape[k];
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, ti.name, SNN_CKPT_F32, ti.rank, shape, ti.data);
    }
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "format", "snn-checkpoint-v1");
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_model_config", snn_model_config_json(m));
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_model_kind", snn_model_kind(m));
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_version", snn_version());
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)snn_model_step_count(m));
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "model_step", buf);
    snn_precision_config def = snn_precision_config_default();
    if (st == SNN_OK) st = snn_precision_config_to_json(cfg ? cfg : &def, buf, sizeof buf);
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_precision_config", buf);
    for (int i = 0; p && i < p->n_mods && st == SNN_OK; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (!pm->has_fp8_state) continue;
        for (int r = 0; r < 3 && st == SNN_OK; r++) {
            snn_fp8_tensor_state *s = state_of(pm, r);
            snprintf(name, sizeof name, "__precision__.%s.%s.scale", pm->m->name, role_name[r]);
            st = add_f32(w, name, &s->scale, 1);
            if (st == SNN_OK && s->history_len > 0) {
                snprintf(name, sizeof name, "__precision__.%s.%s.amax_history", pm->m->name, role_name[r]);
                st = add_f32(w, name, s->amax_history, (size_t)s->history_len);
            }
        }
    }
    if (scaler && st == SNN_OK) {
        float scale;
        int tracker;
        snn_loss_scaler_get_state(scaler, &scale, &tracker);
        st = add_f32(w, "__precision__.loss_scale", &scale, 1);
        int64_t one[1] = {1};
        int32_t t32 = tracker;
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "__precision__.growth_tracker", SNN_CKPT_I32, 1, one, &t32);
    }
    if (opt && st == SNN_OK) {
        st = snn_ckpt_writer_add_metadata(w, "optimizer", snn_optim_kind_name(snn_optimizer_opts(opt)->kind));
        snprintf(buf, sizeof buf, "%ld", snn_optimizer_steps(opt));
        if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "optimizer_steps", buf);
        for (size_t i = 0; i < snn_optimizer_num_states(opt) && st == SNN_OK; i++) {
            snn_optim_state os;
            st = snn_optimizer_state(opt, i, &os);
            snprintf(name, sizeof name, "__optim__.%s", os.name);
            if (st == SNN_OK) st = add_f32(w, name, os.data, os.numel);
        }
    }
    for (int i = 0; meta_kv && meta_kv[i] && st == SNN_OK; i += 2) {
        if (!meta_kv[i + 1]) st = snn_error(SNN_E_INVALID, "metadata key \"%s\" has no value", meta_kv[i]);
        else st = snn_ckpt_writer_add_metadata(w, meta_kv[i], meta_kv[i + 1]);
    }
    if (st == SNN_OK) st = snn_ckpt_writer_commit(w, path);
    snn_ckpt_writer_free(w);
    return st;
}

snn_status snn_training_checkpoint_save(snn_model *m, snn_precision *p, snn_optimizer *opt, const char *path,
                                        const char *const *meta_kv) {
    return save_impl(m, p ? &p->cfg : NULL, p, p && p->use_scaler ? &p->scaler : NULL, opt, path, meta_kv);
}

snn_status snn_training_checkpoint_save_cfg(snn_model *m, const snn_precision_config *cfg,
                                            const snn_loss_scaler *scaler, snn_optimizer *opt, const char *path,
                                            const char *const *meta_kv) {
    if (cfg && cfg->mode == SNN_PRECISION_FP8)
        return snn_error(SNN_E_UNSUPPORTED, "an fp8 training checkpoint needs the prepared precision "
                         "(snn_training_checkpoint_save): its FP8 scaling state lives there");
    int fp16 = cfg && cfg->mode == SNN_PRECISION_FP16;
    if (fp16 && !scaler)
        return snn_error(SNN_E_INVALID, "an fp16 training checkpoint needs the loss scaler's state");
    return save_impl(m, cfg, NULL, fp16 ? scaler : NULL, opt, path, meta_kv);
}

snn_status snn_precision_check_checkpoint(const snn_precision_config *cfg, const snn_ckpt *c) {
    if (!cfg || !c) return snn_error(SNN_E_INVALID, "snn_precision_check_checkpoint: NULL argument");
    char want[1024];
    SNN_TRY(snn_precision_config_to_json(cfg, want, sizeof want));
    const char *have = snn_ckpt_metadata(c, "snn_precision_config");
    snn_precision_config hc = snn_precision_config_default();
    if (have && snn_precision_config_from_json(have, &hc) != SNN_OK)
        return snn_error_prefix(SNN_E_FORMAT, "%s: its snn_precision_config metadata is invalid", snn_ckpt_path(c));
    char got[1024];
    SNN_TRY(snn_precision_config_to_json(&hc, got, sizeof got));
    if (strcmp(got, want))
        return snn_error(SNN_E_INVALID,
                         "%s was trained with precision configuration %s, which does not match the requested %s; "
                         "use the checkpoint's configuration (omit the precision flags) or retrain",
                         snn_ckpt_path(c), got, want);
    return SNN_OK;
}

/* A decimal integer in 0..max, the whole string (metadata is text from the file). */
static snn_status meta_uint(const snn_ckpt *c, const char *key, uint64_t max, uint64_t *out) {
    const char *v = snn_ckpt_metadata(c, key);
    *out = 0;
    if (!v) return SNN_OK;
    uint64_t n = 0;
    const char *q = v;
    for (; *q >= '0' && *q <= '9'; q++)
        if (__builtin_mul_overflow(n, 10u, &n) || __builtin_add_overflow(n, (uint64_t)(*q - '0'), &n) || n > max)
            break;
    if (q == v || *q || n > max)
        return snn_error(SNN_E_FORMAT, "%s: metadata \"%s\" must be an integer in 0..%llu, got \"%.40s\"",
                         snn_ckpt_path(c), key, (unsigned long long)max, v);
    *out = n;
    return SNN_OK;
}

/* One F32 tensor of exactly n values, all finite (and >= 0 when nonneg). */
static snn_status find_f32(const snn_ckpt *c, const char *name, size_t n, int nonneg, snn_ckpt_tensor *t) {
    SNN_TRY(snn_ckpt_find(c, name, t));
    if (t->dtype != SNN_CKPT_F32 || t->numel != n)
        return snn_error(SNN_E_SHAPE, "%s: tensor \"%s\" must be F32 with %zu values, it is %s with %zu",
                         snn_ckpt_path(c), name, n, snn_ckpt_dtype_name(t->dtype), t->numel);
    size_t bad = snn_ckpt_first_nonfinite_f32(t->data, n);
    if (bad < n)
        return snn_error(SNN_E_NUMERIC, "%s: tensor \"%s\" holds a NaN or an infinity at index %zu",
                         snn_ckpt_path(c), name, bad);
    for (size_t i = 0; nonneg && i < n; i++) {
        float v;
        memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
        if (v < 0)
            return snn_error(SNN_E_NUMERIC, "%s: tensor \"%s\" holds %g at index %zu; it must be >= 0",
                             snn_ckpt_path(c), name, (double)v, i);
    }
    return SNN_OK;
}

/* Everything is checked before anything is written (the model, the FP8 state, the loss
 * scaler, the optimizer), so a bad checkpoint leaves the training state as it was. */
static snn_status restore_impl(snn_model *m, const snn_precision_config *cfg, snn_precision *p,
                               snn_loss_scaler *scaler, snn_optimizer *opt, const snn_ckpt *c) {
    if (!m || !c) return snn_error(SNN_E_INVALID, "training checkpoint restore: NULL model or checkpoint");
    if (p && p->model != m)
        return snn_error(SNN_E_INVALID, "training checkpoint restore: the precision was prepared for another model");
    if (opt && !snn_optimizer_for_model(opt, m))
        return snn_error(SNN_E_INVALID, "training checkpoint restore: the optimizer belongs to another model");
    snn_precision_config def = snn_precision_config_default();
    SNN_TRY(snn_precision_check_checkpoint(cfg ? cfg : &def, c));
    SNN_TRY(snn_model_check_weights(m, c));
    if (p) SNN_TRY(snn_precision_fp8_flush(p)); /* nothing of the old state left on the device */
    snn_model_graph_invalidate(m); /* restored FP8 scales reach the kernels by value */
    uint64_t model_step, opt_steps;
    SNN_TRY(meta_uint(c, "model_step", UINT64_MAX, &model_step));
    SNN_TRY(meta_uint(c, "optimizer_steps", (uint64_t)LONG_MAX, &opt_steps));
    char name[512];
    snn_ckpt_tensor t;
    /* pass 0 checks, pass 1 applies */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; p && i < p->n_mods; i++) {
            snn_prec_module *pm = &p->mods[i];
            if (!pm->has_fp8_state) continue;
            for (int r = 0; r < 3; r++) {
                snn_fp8_tensor_state *s = state_of(pm, r), probe = *s;
                float scale;
                snprintf(name, sizeof name, "__precision__.%s.%s.scale", pm->m->name, role_name[r]);
                SNN_TRY(find_f32(c, name, 1, 0, &t));
                memcpy(&scale, t.data, 4);
                float *hist = NULL;
                if (s->history_len > 0) {
                    snprintf(name, sizeof name, "__precision__.%s.%s.amax_history", pm->m->name, role_name[r]);
                    SNN_TRY(find_f32(c, name, (size_t)s->history_len, 1, &t));
                    hist = malloc(sizeof(float) * (size_t)s->history_len);
                    if (!hist) return snn_error(SNN_E_NOMEM, "out of memory restoring the FP8 state");
                    memcpy(hist, t.data, sizeof(float) * (size_t)s->history_len);
                }
                /* pass 0 loads into a copy whose history points at scratch: range checks only */
                float *scratch = NULL;
                if (pass == 0 && s->history_len > 0) {
                    scratch = malloc(sizeof(float) * (size_t)s->history_len);
                    if (!scratch) {
                        free(hist);
                        return snn_error(SNN_E_NOMEM, "out of memory restoring the FP8 state");
                    }
                    probe.amax_history = scratch;
                }
                snn_status st = snn_fp8_state_load(pass == 0 ? &probe : s, scale, hist, s->history_len);
                free(scratch);
                free(hist);
                if (st != SNN_OK) return snn_error_prefix(st, "%s: module %s", snn_ckpt_path(c), pm->m->name);
            }
        }
        if (scaler) {
            float scale;
            int32_t tracker;
            SNN_TRY(find_f32(c, "__precision__.loss_scale", 1, 0, &t));
            memcpy(&scale, t.data, 4);
            SNN_TRY(snn_ckpt_read(c, "__precision__.growth_tracker", SNN_CKPT_I32, &tracker, sizeof tracker));
            snn_loss_scaler probe = *scaler;
            SNN_TRY(snn_loss_scaler_set_state(pass == 0 ? &probe : scaler, scale, tracker));
        }
        if (opt) {
            const char *kind = snn_ckpt_metadata(c, "optimizer");
            const char *mine = snn_optim_kind_name(snn_optimizer_opts(opt)->kind);
            if (!kind || strcmp(kind, mine))
                return snn_error(SNN_E_INVALID, "%s holds %.40s optimizer state, but the optimizer is %s",
                                 snn_ckpt_path(c), kind ? kind : "no", mine);
            for (size_t i = 0; i < snn_optimizer_num_states(opt); i++) {
                snn_optim_state os;
                SNN_TRY(snn_optimizer_state(opt, i, &os));
                snprintf(name, sizeof name, "__optim__.%s", os.name);
                /* Adam's second moment under a square root: negative values are NaN later */
                SNN_TRY(find_f32(c, name, os.numel, strstr(os.name, "exp_avg_sq") != NULL, &t));
                if (pass == 1) memcpy(os.data, t.data, t.nbytes);
            }
            if (pass == 1) SNN_TRY(snn_optimizer_set_steps(opt, (long)opt_steps));
        }
    }
    SNN_TRY(snn_model_load_weights(m, c));
    if (snn_ckpt_metadata(c, "model_step")) snn_model_set_step_count(m, model_step);
    return SNN_OK;
}

snn_status snn_training_checkpoint_restore(snn_model *m, snn_precision *p, snn_optimizer *opt, const snn_ckpt *c) {
    return restore_impl(m, p ? &p->cfg : NULL, p, p && p->use_scaler ? &p->scaler : NULL, opt, c);
}

snn_status snn_training_checkpoint_restore_cfg(snn_model *m, const snn_precision_config *cfg, snn_loss_scaler *scaler,
                                               snn_optimizer *opt, const snn_ckpt *c) {
    if (cfg && cfg->mode == SNN_PRECISION_FP8)
        return snn_error(SNN_E_UNSUPPORTED, "an fp8 training checkpoint restores into a prepared precision "
                         "(snn_training_checkpoint_restore)");
    int fp16 = cfg && cfg->mode == SNN_PRECISION_FP16;
    if (fp16 && !scaler)
        return snn_error(SNN_E_INVALID, "restoring an fp16 training checkpoint needs a loss scaler to restore into");
    return restore_impl(m, cfg, NULL, fp16 ? scaler : NULL, opt, c);
}
