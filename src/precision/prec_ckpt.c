/* Training checkpoints: model tensors + precision, FP8, loss-scaler and optimizer state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "precision/runtime.h"
#include "snn/checkpoint.h"
#include "snn/snn.h"

static const char *role_name[3] = {"input", "weight", "grad"};

static snn_fp8_tensor_state *state_of(snn_prec_module *pm, int r) {
    return r == 0 ? &pm->sx : r == 1 ? &pm->sw : &pm->sdy;
}

static snn_status add_f32(snn_ckpt_writer *w, const char *name, const float *v, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    return snn_ckpt_writer_add_tensor(w, name, SNN_CKPT_F32, 1, shape, v);
}

/* cfg: the configuration to record (NULL = fp32); p: FP8 state (may be NULL); scaler: the loss
 * scaler to save (NULL = none). */
static snn_status save_impl(snn_model *m, const snn_precision_config *cfg, snn_precision *p,
                            const snn_loss_scaler *scaler, snn_optimizer *opt, const char *path,
                            const char *const *meta_kv) {
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
    char want[1024];
    SNN_TRY(snn_precision_config_to_json(cfg, want, sizeof want));
    const char *have = snn_ckpt_metadata(c, "snn_precision_config");
    snn_precision_config hc = snn_precision_config_default();
    if (have && snn_precision_config_from_json(have, &hc) != SNN_OK)
        return snn_error(SNN_E_FORMAT, "%s: its snn_precision_config metadata is invalid: %s", snn_ckpt_path(c),
                         snn_last_error());
    char got[1024];
    SNN_TRY(snn_precision_config_to_json(&hc, got, sizeof got));
    if (strcmp(got, want))
        return snn_error(SNN_E_INVALID,
                         "%s was trained with precision configuration %s, which does not match the requested %s; "
                         "use the checkpoint's configuration (omit the precision flags) or retrain",
                         snn_ckpt_path(c), got, want);
    return SNN_OK;
}

static snn_status restore_impl(snn_model *m, const snn_precision_config *cfg, snn_precision *p,
                               snn_loss_scaler *scaler, snn_optimizer *opt, const snn_ckpt *c) {
    snn_precision_config def = snn_precision_config_default();
    SNN_TRY(snn_precision_check_checkpoint(cfg ? cfg : &def, c));
    SNN_TRY(snn_model_load_weights(m, c));
    const char *ms = snn_ckpt_metadata(c, "model_step");
    if (ms) snn_model_set_step_count(m, strtoull(ms, NULL, 10));
    char name[512];
    for (int i = 0; p && i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (!pm->has_fp8_state) continue;
        for (int r = 0; r < 3; r++) {
            snn_fp8_tensor_state *s = state_of(pm, r);
            float scale;
            snprintf(name, sizeof name, "__precision__.%s.%s.scale", pm->m->name, role_name[r]);
            SNN_TRY(snn_ckpt_read(c, name, SNN_CKPT_F32, &scale, sizeof scale));
            float *hist = NULL;
            if (s->history_len > 0) {
                hist = malloc(sizeof(float) * (size_t)s->history_len);
                if (!hist) return snn_error(SNN_E_NOMEM, "out of memory");
                snprintf(name, sizeof name, "__precision__.%s.%s.amax_history", pm->m->name, role_name[r]);
                snn_status st = snn_ckpt_read(c, name, SNN_CKPT_F32, hist, sizeof(float) * (size_t)s->history_len);
                if (st != SNN_OK) {
                    free(hist);
                    return st;
                }
            }
            snn_status st = snn_fp8_state_load(s, scale, hist, s->history_len);
            free(hist);
            SNN_TRY(st);
        }
    }
    if (scaler) {
        float scale;
        int32_t tracker;
        SNN_TRY(snn_ckpt_read(c, "__precision__.loss_scale", SNN_CKPT_F32, &scale, sizeof scale));
        SNN_TRY(snn_ckpt_read(c, "__precision__.growth_tracker", SNN_CKPT_I32, &tracker, sizeof tracker));
        SNN_TRY(snn_loss_scaler_set_state(scaler, scale, tracker));
    }
    if (opt) {
        const char *kind = snn_ckpt_metadata(c, "optimizer");
        const char *mine = snn_optim_kind_name(snn_optimizer_opts(opt)->kind);
        if (!kind || strcmp(kind, mine))
            return snn_error(SNN_E_INVALID, "%s holds %s optimizer state, but the optimizer is %s", snn_ckpt_path(c),
                             kind ? kind : "no", mine);
        for (size_t i = 0; i < snn_optimizer_num_states(opt); i++) {
            snn_optim_state os;
            SNN_TRY(snn_optimizer_state(opt, i, &os));
            snprintf(name, sizeof name, "__optim__.%s", os.name);
            SNN_TRY(snn_ckpt_read(c, name, SNN_CKPT_F32, os.data, os.numel * sizeof(float)));
        }
        const char *steps = snn_ckpt_metadata(c, "optimizer_steps");
        SNN_TRY(snn_optimizer_set_steps(opt, steps ? strtol(steps, NULL, 10) : 0));
    }
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
