/* The language-model trainer with tensor / pipeline parallel (TP * PP > 1).
 *
 * The ranks form the (dp, pp, tp) mesh of src/dist/comm.h; each holds its stage of the
 * model (src/dist/lm_stage.h) and AdamW over the stage's local parameters: the optimizer
 * state is sharded by TP and PP along with the weights, and with DP > 1 further over DP by
 * the distributed optimizer (src/dist/dist_optim.h: each DP rank owns a contiguous slice
 * of its stage's flat buffer, the updated slices are all-gathered). A step hands the whole
 * step's K = global / (micro DP) microbatches of this DP rank to the 1F1B pipeline: the
 * per-token loss over the global batch, gradients of the tied copy, shared key/value rows
 * and sequence-parallel replicated tensors summed over their ranks, all gradients summed
 * over DP (snn_lm_stage_reduce_grads), the global norm over TP and PP (the DP replicas
 * hold the same summed gradients) and its clip, then AdamW.
 *
 * The dense model of the trainer (t->m) stays the canonical container: a checkpoint
 * gathers the stage's weights into it, and the AdamW moments the same way (they have the
 * weights' shapes and shard rules: each moment is put in the stage's parameter buffer in
 * turn and gathered like the weights), so the file is the one a DP-only run writes and
 * any topology resumes it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "lm/lm_train_internal.h"

snn_status lm_stage_setup(snn_lm_trainer *t, const snn_optim_opts *oo) {
    const snn_lm_transformer_config *tr = &t->cfg.model.transformer;
    const int TP = tr->tensor_model_parallel_size, PP = tr->pipeline_model_parallel_size;
    const int bf16 = t->pcfg.mode == SNN_PRECISION_BF16;
    SNN_TRY(snn_mesh_create(t->comm, PP, TP, &t->smesh));
    t->dp_rank = t->smesh.dp;
    SNN_TRY(snn_lm_stage_create(&t->o, &t->smesh, tr->sequence_parallel, t->cfg.seed, &t->stage));
    if (bf16) {
        snn_status st = snn_prepare_model_for_precision(t->stage->model, "cpu", &t->pcfg, &t->sprec);
        if (st != SNN_OK) return snn_error_prefix(st, "preparing the stage's precision");
    }
    SNN_TRY(snn_lm_pipeline_plan(t->stage, (int)t->M, (int)t->K, bf16));
    if (t->dp_size > 1) SNN_TRY(snn_dist_optim_create(t->smesh.dp_comm, oo, t->stage->model, &t->sdopt));
    else SNN_TRY(snn_optimizer_create_for_model(oo, t->stage->model, &t->sopt));
    const size_t ns = (size_t)t->K * (size_t)t->M * (size_t)t->S;
    t->kids = malloc(ns * sizeof(int32_t));
    t->klabels = malloc(ns * sizeof(int32_t));
    t->kidx = malloc((size_t)t->K * (size_t)t->M * sizeof(int64_t));
    if (!t->kids || !t->klabels || !t->kidx) return snn_error(SNN_E_NOMEM, "out of memory for the step's batches");
    return SNN_OK;
}

void lm_stage_free(snn_lm_trainer *t) {
    free(t->kids), free(t->klabels), free(t->kidx);
    snn_optimizer_free(t->sopt);
    snn_dist_optim_free(t->sdopt);
    snn_precision_free(t->sprec);
    snn_lm_stage_free(t->stage);
    if (t->smesh.world) snn_mesh_free(&t->smesh);
}

/* Samples [first, first + K M) of the order (perm != NULL) or of the split itself. */
static snn_status load_batches(snn_lm_trainer *t, const snn_token_dataset *ds, const int64_t *perm, int64_t first) {
    const long n = t->K * t->M;
    for (long j = 0; j < n; j++) t->kidx[j] = perm ? perm[first + j] : first + j;
    return snn_token_dataset_batch(ds, t->kidx, (int)n, t->kids, t->klabels);
}

snn_status lm_stage_step(snn_lm_trainer *t, float lr, double *loss_sum, double *tokens, float *grad_norm) {
    const long base = t->consumed + (long)t->dp_rank * (t->G / t->dp_size);
    SNN_TRY(lm_agree(t, load_batches(t, t->train, t->perm, base)));
    if (!t->sdopt) {
        double loss;
        SNN_TRY(snn_lm_stage_train_step(t->stage, t->sopt, t->kids, t->klabels, lr, (float)t->cfg.optimizer.clip_grad,
                                        &loss, grad_norm));
        *tokens = (double)t->G * (double)t->S; /* no padding in training */
        *loss_sum = loss * *tokens;
        return SNN_OK;
    }
    /* snn_lm_stage_train_step with the DP-sharded AdamW */
    snn_lm_stage *s = t->stage;
    double tot[2];
    snn_model_zero_grad(s->model);
    SNN_TRY(snn_lm_pipeline_train(s, t->kids, t->klabels, (float)(1.0 / ((double)t->G * (double)t->S)), &tot[0], &tot[1]));
    SNN_TRY(snn_lm_stage_reduce_grads(s));
    SNN_TRY(snn_lm_stage_clip_grad_norm(s, (float)t->cfg.optimizer.clip_grad, grad_norm));
    SNN_TRY(snn_dist_optim_apply(t->sdopt, lr, !isfinite(*grad_norm)));
    SNN_TRY(snn_comm_allreduce(t->smesh.dp_comm, tot, 2, SNN_COMM_F64, SNN_COMM_SUM));
    *loss_sum = tot[0];
    *tokens = tot[1];
    return SNN_OK;
}

snn_status lm_stage_validate(snn_lm_trainer *t, double *loss_sum, double *tokens) {
    const long chunk = t->K * t->M;
    const int64_t per = (int64_t)t->cfg.eval_steps * t->G / t->dp_size, first = (int64_t)t->dp_rank * per;
    double v[2] = {0, 0};
    for (int64_t s0 = 0; s0 < per; s0 += chunk) {
        double l, c;
        SNN_TRY(load_batches(t, t->valid, NULL, first + s0));
        SNN_TRY(snn_lm_pipeline_eval(t->stage, t->kids, t->klabels, &l, &c));
        v[0] += l;
        v[1] += c;
    }
    if (t->dp_size > 1) SNN_TRY(snn_comm_allreduce(t->smesh.dp_comm, v, 2, SNN_COMM_F64, SNN_COMM_SUM));
    *loss_sum = v[0];
    *tokens = v[1];
    return SNN_OK;
}

snn_status lm_stage_gather(snn_lm_trainer *t, snn_optimizer *full) {
    snn_model *sm = t->stage->model;
    const size_t n = snn_model_num_params(sm), N = snn_model_num_params(t->m);
    float *params = snn_model_params(sm);
    /* the stage's whole state: the plain optimizer's, or the DP slices brought to DP rank 0
     * (the TP / PP groups of the other DP coordinates then skip the moments: their gathers
     * run in their own groups, and only world rank 0, at dp 0, writes) */
    snn_optimizer *src = t->sopt, *tmp = NULL;
    if (t->sdopt) {
        snn_optimizer *loc = snn_dist_optim_local(t->sdopt);
        SNN_TRY(snn_optimizer_create(snn_optimizer_opts(loc), n, params, snn_model_grads(sm), NULL, &tmp));
        snn_status gs = snn_dist_optim_gather(t->sdopt, 0, t->dp_rank == 0 ? tmp : NULL);
        if (gs != SNN_OK) {
            snn_optimizer_free(tmp);
            return gs;
        }
        src = t->dp_rank == 0 ? tmp : NULL;
    }
    float *keep = malloc(n * sizeof(float));
    if (!keep) {
        snn_optimizer_free(tmp);
        return snn_error(SNN_E_NOMEM, "out of memory for the checkpoint gather");
    }
    memcpy(keep, params, n * sizeof(float));
    snn_status st = SNN_OK;
    for (size_t i = 0; src && st == SNN_OK && i < snn_optimizer_num_states(src); i++) {
        snn_optim_state os, fs;
        st = snn_optimizer_state(src, i, &os);
        if (st == SNN_OK && os.numel != n) st = snn_error(SNN_E_STATE, "optimizer state %s is not per parameter", os.name);
        if (st != SNN_OK) break;
        memcpy(params, os.data, n * sizeof(float));
        st = snn_lm_stage_gather(t->stage, t->m);
        if (st == SNN_OK && full) st = snn_optimizer_find_state(full, os.name, &fs);
        if (st == SNN_OK && full) {
            if (fs.numel != N) st = snn_error(SNN_E_STATE, "the canonical optimizer state %s has the wrong size", fs.name);
            else memcpy(fs.data, snn_model_params(t->m), N * sizeof(float));
        }
    }
    memcpy(params, keep, n * sizeof(float));
    free(keep);
    if (st == SNN_OK && full && src) st = snn_optimizer_set_steps(full, snn_optimizer_steps(src));
    snn_optimizer_free(tmp);
    SNN_TRY(st);
    return snn_lm_stage_gather(t->stage, t->m);
}

snn_status lm_stage_scatter(snn_lm_trainer *t, const void *const *state, size_t nstates, long steps, const char *src) {
    snn_model *sm = t->stage->model;
    const size_t n = snn_model_num_params(sm), N = snn_model_num_params(t->m);
    snn_optimizer *opt = t->sdopt ? snn_dist_optim_local(t->sdopt) : t->sopt;
    if (nstates != snn_optimizer_num_states(opt) || nstates > 8)
        return snn_error(SNN_E_INVALID, "%s: %zu optimizer state tensors given, the optimizer has %zu", src, nstates,
                         snn_optimizer_num_states(opt));
    for (size_t i = 0; i < nstates; i++) {
        snn_optim_state os;
        SNN_TRY(snn_optimizer_state(opt, i, &os));
        int nonneg = strstr(os.name, "exp_avg_sq") != NULL;
        for (size_t k = 0; k < N; k++) {
            float v;
            memcpy(&v, (const unsigned char *)state[i] + k * sizeof(float), sizeof v);
            if (!isfinite(v) || (nonneg && v < 0))
                return snn_error(SNN_E_NUMERIC, "%s: optimizer state \"%s\" holds %g at index %zu", src, os.name, (double)v,
                                 k);
        }
    }
    float *dense = snn_model_params(t->m);
    float *keep = malloc(N * sizeof(float));
    /* with the DP-sharded optimizer: the stage's whole state first, then this rank's slice */
    float *stage_state = t->sdopt ? malloc(nstates * n * sizeof(float)) : NULL;
    if (!keep || (t->sdopt && !stage_state)) {
        free(keep);
        free(stage_state);
        return snn_error(SNN_E_NOMEM, "out of memory for the checkpoint load");
    }
    memcpy(keep, dense, N * sizeof(float));
    snn_status st = SNN_OK;
    for (size_t i = 0; st == SNN_OK && i < nstates; i++) {
        snn_optim_state os;
        float *dst = stage_state ? stage_state + i * n : NULL;
        if (!dst) {
            st = snn_optimizer_state(t->sopt, i, &os);
            if (st == SNN_OK && os.numel != n) st = snn_error(SNN_E_STATE, "optimizer state %s is not per parameter", os.name);
            dst = os.data;
        }
        if (st != SNN_OK) break;
        memcpy(dense, state[i], N * sizeof(float));
        st = snn_lm_stage_load_dense(t->stage, t->m);
        if (st == SNN_OK) memcpy(dst, snn_model_params(sm), n * sizeof(float));
    }
    memcpy(dense, keep, N * sizeof(float));
    free(keep);
    if (st == SNN_OK && stage_state) {
        const void *ptrs[8];
        for (size_t i = 0; i < nstates; i++) ptrs[i] = stage_state + i * n;
        st = snn_dist_optim_load_slice(t->sdopt, ptrs, nstates, steps, src);
    } else if (st == SNN_OK) {
        st = snn_optimizer_set_steps(t->sopt, steps);
    }
    free(stage_state);
    SNN_TRY(st);
    return snn_lm_stage_load_dense(t->stage, t->m);
}
