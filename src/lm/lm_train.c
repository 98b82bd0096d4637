/* The language-model trainer: set-up, the optimizer step over microbatches, validation and
 * the loop (contract in include/snn/lm_train.h; the microbatch seam in lm_train_internal.h;
 * checkpoints in lm_train_ckpt.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "dist/lm_cp.h"
#include "lm/lm_train_internal.h"
#include "nn/model_internal.h"
#include "snn/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long long lm_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (long long)ru.ru_maxrss * 1024;
}

static void tile(const int32_t *ids, int T, int N, int S, float *x) {
    size_t ns = (size_t)N * (size_t)S;
    for (int t = 0; t < T; t++)
        for (size_t i = 0; i < ns; i++) x[(size_t)t * ns + i] = (float)ids[i];
}

/* ---------------- evaluation ---------------- */

struct snn_lm_eval_scratch {
    int T, micro, S;
    float *x, *mask;
    int32_t *ids, *labels;
    double *token_loss;
    int64_t *idx;
};

void snn_lm_eval_scratch_free(snn_lm_eval_scratch *b) {
    if (!b) return;
    free(b->x);
    free(b->mask);
    free(b->ids);
    free(b->labels);
    free(b->token_loss);
    free(b->idx);
    free(b);
}

snn_status snn_lm_eval_scratch_create(int T, int micro, int S, snn_lm_eval_scratch **out) {
    if (!out) return snn_error(SNN_E_INVALID, "evaluation scratch: out is NULL");
    *out = NULL;
    if (T <= 0 || micro <= 0 || S <= 0)
        return snn_error(SNN_E_INVALID, "evaluation scratch: T %d, micro %d, S %d must be positive", T, micro, S);
    size_t ns = (size_t)micro * (size_t)S;
    if (ns / (size_t)micro != (size_t)S || ns > ((size_t)1 << 40) / (size_t)T)
        return snn_error(SNN_E_INVALID, "evaluation scratch: %d x %d x %d is too large", T, micro, S);
    snn_lm_eval_scratch *b = calloc(1, sizeof *b);
    if (!b) return snn_error(SNN_E_NOMEM, "out of memory for the evaluation buffers");
    b->T = T, b->micro = micro, b->S = S;
    b->x = malloc((size_t)T * ns * sizeof(float));
    b->mask = malloc(ns * sizeof(float));
    b->ids = malloc(ns * sizeof(int32_t));
    b->labels = malloc(ns * sizeof(int32_t));
    b->token_loss = malloc(ns * sizeof(double));
    b->idx = malloc((size_t)micro * sizeof(int64_t));
    if (!b->x || !b->mask || !b->ids || !b->labels || !b->token_loss || !b->idx) {
        snn_lm_eval_scratch_free(b);
        return snn_error(SNN_E_NOMEM, "out of memory for the evaluation buffers");
    }
    *out = b;
    return SNN_OK;
}

snn_status snn_lm_evaluate(snn_model *m, const snn_gpt_opts *o, const snn_token_dataset *ds, int micro, int64_t first,
                           int64_t count, snn_lm_eval_scratch *b, double *loss_sum, double *tokens) {
    if (!m || !o || !ds || !b || !loss_sum || !tokens) return snn_error(SNN_E_INVALID, "evaluate: NULL argument");
    const int S = o->seq, T = o->time_steps;
    if (micro != b->micro || S != b->S || T != b->T)
        return snn_error(SNN_E_INVALID, "evaluate: the scratch was made for T %d, micro %d, S %d (asked T %d, micro %d, S %d)",
                         b->T, b->micro, b->S, T, micro, S);
    double ls = 0, cn = 0;
    for (int64_t s0 = 0; s0 < count; s0 += micro) {
        int valid = count - s0 < micro ? (int)(count - s0) : micro;
        /* padding copies the first sample of the batch with an all-zero loss mask */
        for (int j = 0; j < micro; j++) b->idx[j] = first + s0 + (j < valid ? j : 0);
        SNN_TRY(snn_token_dataset_batch(ds, b->idx, micro, b->ids, b->labels));
        for (int j = 0; j < micro; j++)
            for (int s = 0; s < S; s++) b->mask[(size_t)j * S + s] = j < valid ? 1.0f : 0.0f;
        tile(b->ids, T, micro, S, b->x);
        const float *y;
        SNN_TRY(snn_model_forward(m, b->x, 0, &y));
        double l, c;
        SNN_TRY(snn_lm_cross_entropy(y, b->labels, b->mask, T, micro, S, o->vocab, o->reduce_sum, b->token_loss, &l, &c,
                                     NULL, 0.0f));
        ls += l;
        cn += c;
    }
    *loss_sum = ls;
    *tokens = cn;
    return SNN_OK;
}

/* ---------------- the microbatch ---------------- */

snn_status lm_micro_local(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                          float grad_scale, int backward, double *loss_sum, double *tokens) {
    lm_local_micro *L = ctx;
    const int T = L->o->time_steps, S = L->o->seq;
    if (n != L->micro) return snn_error(SNN_E_INVALID, "microbatch of %d samples, the model is planned for %d", n, L->micro);
    tile(ids, T, n, S, L->x);
    if (L->dev_loss && !mask) {
        /* the loss reads the device logits: no host copy of them (at GPT-2 124M and 8 x 1024
         * tokens that copy was 1.6 GB a microbatch, most of a step) */
        snn_model *m = L->m;
        snn_tensor_view xv = {.dtype = SNN_F32, .device = NULL, .data = L->x,
                              .numel = (size_t)T * (size_t)n * (size_t)S};
        const snn_backend *be = snn_model_backend(m);
        snn_dtype t16;
        int ld16;
        if (backward && be->lm_cross_entropy16 && snn_model_output_dy16(m, &t16, &ld16)) {
            /* a 16-bit head: it writes its logits as 16-bit rows (the values it rounds to
             * anyway), and the loss reads them and writes the gradient its GEMMs multiply,
             * once each */
            SNN_TRY(snn_model_forward_y16(m, &xv, 1, t16, ld16));
            SNN_TRY(be->upload(be, L->d_labels, labels, (size_t)n * (size_t)S * sizeof(int32_t)));
            SNN_TRY(be->lm_cross_entropy16(be, m->out, t16, (size_t)ld16, L->d_labels, NULL, T, n, S, L->o->vocab,
                                           L->o->reduce_sum, L->d_token_loss, loss_sum, tokens, t16, m->dy_store,
                                           (size_t)ld16, grad_scale));
            return snn_model_backward_dy16(m, t16, ld16);
        }
        SNN_TRY(snn_model_forward_view(m, &xv, 1, NULL));
        SNN_TRY(be->upload(be, L->d_labels, labels, (size_t)n * (size_t)S * sizeof(int32_t)));
        SNN_TRY(be->lm_cross_entropy(be, m->out, L->d_labels, NULL, T, n, S, L->o->vocab, L->o->reduce_sum,
                                     L->d_token_loss, loss_sum, tokens, backward ? m->dy_store : NULL, grad_scale));
        if (backward) SNN_TRY(snn_model_backward_stored(m, m->dy_store));
        return SNN_OK;
    }
    const float *y;
    SNN_TRY(snn_model_forward(L->m, L->x, 1, &y));
    SNN_TRY(snn_lm_cross_entropy(y, labels, mask, T, n, S, L->o->vocab, L->o->reduce_sum, L->token_loss, loss_sum, tokens,
                                 L->dlogits, grad_scale));
    if (backward) SNN_TRY(snn_model_backward(L->m, L->dlogits));
    return SNN_OK;
}

snn_status lm_trainer_set_micro(snn_lm_trainer *t, lm_micro_fn fn, void *ctx) {
    if (!t) return snn_error(SNN_E_INVALID, "lm trainer is NULL");
    if (fn && t->fused_step)
        return snn_error(SNN_E_UNSUPPORTED, "fp16 and fp8 training steps run the local microbatch only");
    t->micro_fn = fn ? fn : lm_micro_local;
    t->micro_ctx = fn ? ctx : &t->local;
    return SNN_OK;
}

/* ---------------- agreement ---------------- */

snn_status lm_agree(snn_lm_trainer *t, snn_status st) {
    if (snn_comm_size(t->comm) == 1) return st;
    int32_t bad = st != SNN_OK;
    snn_status cs = snn_comm_allreduce(t->comm, &bad, 1, SNN_COMM_I32, SNN_COMM_MAX);
    if (cs != SNN_OK) return cs;
    if (!bad) return SNN_OK;
    /* the slow path (it allocates): which rank failed and its message */
    return snn_comm_agree(t->comm, st);
}

/* ---------------- set-up ---------------- */

static snn_status precision_of(const snn_lm_training_config *c, snn_precision_config *p) {
    const snn_lm_transformer_config *t = &c->model.transformer;
    const char *mode = t->fp8 != SNN_LM_FP8_NONE ? "fp8" : t->fp16 ? "fp16" : t->bf16 ? "bf16" : "fp32";
    const char *recipe = NULL;
    if (t->fp8 != SNN_LM_FP8_NONE) {
        static const char *map[] = {NULL, "delayed", "current", "block", "mxfp8"};
        if ((int)t->fp8_recipe < 0 || (int)t->fp8_recipe > 4) return snn_error(SNN_E_INVALID, "fp8_recipe is out of range");
        recipe = map[t->fp8_recipe];
    }
    snn_status st = snn_precision_config_parse(mode, recipe, NULL, NULL, NULL, p);
    return st == SNN_OK ? SNN_OK : snn_error_prefix(st, "the precision of the transformer config");
}

static void draw_order(snn_lm_trainer *t, long total);

static snn_status setup(snn_lm_trainer *t) {
    snn_lm_training_config *c = &t->cfg;
    SNN_TRY(snn_lm_training_config_validate(c));
    const snn_lm_transformer_config *tr = &c->model.transformer;
    if (c->use_snn_memopt) return snn_error(SNN_E_INVALID, "use_snn_memopt is not implemented by this trainer");
    int dp;
    int64_t K;
    SNN_TRY(snn_lm_training_topology(c, snn_comm_size(t->comm), &dp, &K));
    t->staged = tr->tensor_model_parallel_size * tr->pipeline_model_parallel_size > 1;
    t->cp = tr->context_parallel_size;
    if (t->staged) {
        if (t->cp != 1)
            return snn_error(SNN_E_INVALID,
                             "context_parallel_size %d with tensor_model_parallel_size %d and pipeline_model_parallel_size "
                             "%d: this trainer runs context parallel with TP = PP = 1 only",
                             t->cp, tr->tensor_model_parallel_size, tr->pipeline_model_parallel_size);
        if (tr->fp16 || tr->fp8 != SNN_LM_FP8_NONE)
            return snn_error(SNN_E_INVALID,
                             "with tensor_model_parallel_size %d and pipeline_model_parallel_size %d the trainer runs fp32 "
                             "or bf16 only (transformer.fp16 %d, transformer.fp8 %s)",
                             tr->tensor_model_parallel_size, tr->pipeline_model_parallel_size, tr->fp16,
                             tr->fp8 != SNN_LM_FP8_NONE ? "set" : "None");
        t->dp_size = dp; /* dp_rank: the mesh's, in lm_stage_setup */
    } else {
        t->cp = tr->context_parallel_size;
        if ((long)dp * t->cp != t->dp)
            return snn_error(SNN_E_INVALID, "data_parallel_size %d * context_parallel_size %d does not match the communicator's %d",
                             dp, t->cp, t->dp);
        t->dp_size = dp;
        t->dp_rank = t->rank / t->cp; /* tp fastest, then cp (snn_mesh4); TP = PP = 1 */
        /* the CP group first: a collective every rank reaches (nothing before it can fail on one
         * rank alone) */
        if (t->cp > 1) {
            SNN_TRY(snn_mesh4_create(t->comm, 1, t->cp, 1, &t->mesh));
            t->have_mesh = 1;
        }
    }
    t->G = (long)c->global_batch_size, t->M = (long)c->micro_batch_size, t->K = (long)K;
    snn_status st = snn_token_dataset_open(c->dataset_kwargs.path, "train", c->model.vocab_size, &t->train);
    if (st != SNN_OK) return snn_error_prefix(SNN_E_INVALID, "opening the training data");
    t->S = (long)snn_token_dataset_seq_len(t->train);
    if (c->sequence_length != t->S)
        return snn_error(SNN_E_INVALID, "sequence_length %lld does not match the data's %ld", (long long)c->sequence_length, t->S);
    if (c->eval_interval > 0) {
        if (snn_token_dataset_open(c->dataset_kwargs.path, "valid", c->model.vocab_size, &t->valid) != SNN_OK)
            return snn_error_prefix(SNN_E_INVALID, "opening the validation data");
        if (snn_token_dataset_seq_len(t->valid) != t->S)
            return snn_error(SNN_E_INVALID, "valid.npy and train.npy differ in sequence length");
    }
    st = snn_gpt_opts_from_model_config(&c->model, (int)t->S, &t->o);
    if (st != SNN_OK) return snn_error_prefix(st == SNN_E_UNSUPPORTED ? SNN_E_INVALID : st, "building the model");
    SNN_TRY(snn_lm_recipe_to_json(c, &t->recipe));
    SNN_TRY(snn_lm_training_config_to_json(c, &t->cfg_json));
    if (t->cp > 1) SNN_TRY(snn_lm_cp_build(&t->o, c->seed, t->mesh.cp_comm, &t->m));
    else SNN_TRY(snn_gpt_create(&t->o, c->seed, &t->m));
    const int on_device = strcmp(t->device, "cpu") != 0;
    if (on_device) {
        /* Data parallel only: the stage and the CP ring move host memory, which a device
         * model only hands out as copies (the distributed optimizer stages its reductions
         * through the host itself). */
        if (t->staged || t->cp > 1)
            return snn_error(SNN_E_UNSUPPORTED,
                             "device %s trains data parallel only in this version: tensor, pipeline and context "
                             "parallel sizes must be 1 (got TP %d, PP %d, CP %d)",
                             t->device, tr->tensor_model_parallel_size, tr->pipeline_model_parallel_size, t->cp);
        st = snn_model_to(t->m, t->device); /* device -> prepare -> optimizer */
        if (st != SNN_OK) return snn_error_prefix(st, "placing the model on %s", t->device);
    }
    SNN_TRY(precision_of(c, &t->pcfg));
    if (t->cp > 1 && t->pcfg.mode != SNN_PRECISION_FP32)
        return snn_error(SNN_E_INVALID, "context_parallel_size %d runs in fp32 on the CPU (got %s)", t->cp,
                         snn_precision_mode_name(t->pcfg.mode));
    t->fused_step = t->pcfg.mode == SNN_PRECISION_FP16 || t->pcfg.mode == SNN_PRECISION_FP8;
    if (t->fused_step && (t->K != 1 || t->dp != 1))
        return snn_error(SNN_E_INVALID,
                         "with fp16 or fp8 the CPU trainer runs one process and one microbatch per step "
                         "(micro_batch_size == global_batch_size, data_parallel_size 1; got micro %ld, global %ld, DP %d)",
                         t->M, t->G, t->dp);
    if (t->pcfg.mode != SNN_PRECISION_FP32 &&
        (st = snn_prepare_model_for_precision(t->m, t->device, &t->pcfg, &t->prec)) != SNN_OK)
        return snn_error_prefix(st, "preparing the precision");
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = (float)c->optimizer.lr;
    oo.weight_decay = (float)c->optimizer.weight_decay;
    oo.beta1 = (float)c->optimizer.adam_beta1;
    oo.beta2 = (float)c->optimizer.adam_beta2;
    oo.eps = (float)c->optimizer.adam_eps;
    const int T = t->o.time_steps, V = t->o.vocab;
    const long total = (long)c->train_steps * t->G;
    t->oo = oo;
    if (t->staged) { /* the dense model is the checkpoint container only; the stage comes next */
        t->perm = malloc((size_t)total * sizeof *t->perm);
        if (!t->perm) return snn_error(SNN_E_NOMEM, "out of memory for the sample order");
        draw_order(t, total);
        return SNN_OK;
    }
    SNN_TRY(snn_dist_optim_create(t->comm, &oo, t->m, &t->opt));
    SNN_TRY(snn_model_plan(t->m, t->o.time_steps, (int)t->M));
    const size_t ns = (size_t)t->M * (size_t)t->S;
    if ((size_t)T * ns > ((size_t)1 << 40) / (size_t)V) return snn_error(SNN_E_INVALID, "the microbatch's logits are too large");
    t->perm = malloc((size_t)total * sizeof *t->perm);
    t->idx = malloc((size_t)t->M * sizeof *t->idx);
    t->ids = malloc(ns * sizeof(int32_t));
    t->labels = malloc(ns * sizeof(int32_t));
    t->local.x = malloc((size_t)T * ns * sizeof(float));
    t->local.dlogits = malloc((size_t)T * ns * (size_t)V * sizeof(float));
    t->local.token_loss = malloc(ns * sizeof(double));
    if (!t->perm || !t->idx || !t->ids || !t->labels || !t->local.x || !t->local.dlogits || !t->local.token_loss)
        return snn_error(SNN_E_NOMEM, "out of memory for the training buffers");
    SNN_TRY(snn_lm_eval_scratch_create(T, (int)t->M, (int)t->S, &t->eval));
    t->local.m = t->m;
    t->local.o = &t->o;
    t->local.micro = (int)t->M;
    t->micro_fn = lm_micro_local;
    t->micro_ctx = &t->local;
    if (on_device && !t->fused_step && snn_model_backend(t->m)->lm_cross_entropy) {
        const snn_backend *be = snn_model_backend(t->m);
        SNN_TRY(be->alloc(be, ns * sizeof(int32_t), (void **)&t->local.d_labels));
        SNN_TRY(be->alloc(be, ns * sizeof(double), (void **)&t->local.d_token_loss));
        t->local.dev_loss = 1;
    }
    if (t->cp > 1) {
        SNN_TRY(snn_lm_cp_micro_create(t->m, &t->o, t->mesh.cp_comm, (int)t->M, &t->cpm));
        t->micro_fn = snn_lm_cp_micro_run;
        t->micro_ctx = t->cpm;
    }
    draw_order(t, total);
    return SNN_OK;
}

/* the sample order: every rank draws the same permutation */
static void draw_order(snn_lm_trainer *t, long total) {
    snn_rng rng = snn_rng_make(t->cfg.seed, 0x5a3d);
    for (long i = 0; i < total; i++) t->perm[i] = i;
    for (long i = total - 1; i > 0; i--) {
        long j = (long)(snn_rng_next_uniform(&rng) * (float)(i + 1));
        if (j > i) j = i;
        int64_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
}

snn_status snn_lm_trainer_create(const snn_lm_training_config *cfg, snn_comm *comm, snn_lm_trainer **out) {
    return snn_lm_trainer_create_on(cfg, comm, "cpu", out);
}

snn_status snn_lm_trainer_create_on(const snn_lm_training_config *cfg, snn_comm *comm, const char *device,
                                    snn_lm_trainer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "lm trainer: out is NULL");
    *out = NULL;
    if (!cfg || !comm) return snn_error(SNN_E_INVALID, "lm trainer: NULL config or communicator");
    if (!device) device = "cpu";
    if (strlen(device) >= sizeof ((snn_lm_trainer *)0)->device)
        return snn_error(SNN_E_INVALID, "lm trainer: unknown device '%.40s' (use cpu, cuda or cuda:N)", device);
    snn_lm_trainer *t = calloc(1, sizeof *t);
    if (!t) return snn_error(SNN_E_NOMEM, "out of memory for the trainer");
    snprintf(t->device, sizeof t->device, "%s", device);
    t->cfg = *cfg;
    t->comm = comm;
    t->rank = snn_comm_rank(comm);
    t->dp = snn_comm_size(comm);
    t->last.lm_loss = t->last.grad_norm = NAN;
    t->last.update_successful = 1;
    snn_status st = lm_agree(t, setup(t));
    /* collective set-up of the stage after the local set-up agreed */
    if (st == SNN_OK && t->staged) st = lm_agree(t, lm_stage_setup(t, &t->oo));
    /* identical seeds give identical weights; rank 0's are the reference all the same */
    if (st == SNN_OK && !t->staged && t->dp > 1) {
        float *p = snn_model_params(t->m); /* a device model: the host copy, pushed back below */
        st = p ? snn_comm_broadcast(comm, p, snn_model_num_params(t->m), SNN_COMM_F32, 0) : SNN_E_STATE;
        if (st == SNN_OK) st = snn_model_push_host(t->m);
    }
    if (st == SNN_OK && cfg->resume[0]) st = snn_lm_trainer_load(t, cfg->resume);
    if (st != SNN_OK) {
        snn_lm_trainer_free(t);
        return st;
    }
    snn_lm_train_info *in = &t->info;
    in->rank = t->rank;
    in->data_parallel_size = t->dp_size;
    in->num_microbatches = t->K;
    in->spiking = t->o.spiking;
    in->time_steps = t->o.time_steps;
    in->seq_len = (int)t->S;
    in->vocab = t->o.vocab;
    in->parameters = snn_model_num_params(t->m);
    in->precision = snn_precision_mode_name(t->pcfg.mode);
    in->start_step = t->step;
    if (t->staged && !t->sdopt) { /* AdamW on the local stage: sharded by TP and PP */
        size_t k = snn_optimizer_num_states(t->sopt), n = snn_model_num_params(t->stage->model);
        in->optimizer_state_bytes = k * n * sizeof(float);
        in->optimizer_state_bytes_full = k * in->parameters * sizeof(float);
        in->optimizer_slice_begin = 0;
        in->optimizer_slice_len = n;
    } else if (t->staged) { /* and over DP: the slice of the stage's buffer */
        in->optimizer_state_bytes = snn_dist_optim_state_bytes(t->sdopt);
        in->optimizer_state_bytes_full =
            snn_optimizer_num_states(snn_dist_optim_local(t->sdopt)) * in->parameters * sizeof(float);
        in->optimizer_slice_begin = snn_dist_optim_begin(t->sdopt);
        in->optimizer_slice_len = snn_dist_optim_len(t->sdopt);
    } else {
        in->optimizer_state_bytes = snn_dist_optim_state_bytes(t->opt);
        in->optimizer_state_bytes_full = snn_dist_optim_full_state_bytes(t->opt);
        in->optimizer_slice_begin = snn_dist_optim_begin(t->opt);
        in->optimizer_slice_len = snn_dist_optim_len(t->opt);
    }
    *out = t;
    return SNN_OK;
}

void snn_lm_trainer_free(snn_lm_trainer *t) {
    if (!t) return;
    lm_stage_free(t);
    free(t->perm), free(t->idx), free(t->ids), free(t->labels);
    free(t->local.x), free(t->local.dlogits), free(t->local.token_loss);
    snn_lm_eval_scratch_free(t->eval);
    snn_token_dataset_free(t->train);
    snn_token_dataset_free(t->valid);
    snn_dist_optim_free(t->opt);
    snn_precision_free(t->prec);
    snn_lm_cp_micro_free(t->cpm);
    if (t->m && (t->local.d_labels || t->local.d_token_loss)) { /* device memory of the model's table */
        const snn_backend *be = snn_model_backend(t->m);
        be->free(be, t->local.d_labels);
        be->free(be, t->local.d_token_loss);
    }
    snn_model_free(t->m);
    if (t->have_mesh) snn_mesh4_free(&t->mesh); /* after the model: its CP attention holds mesh.cp_comm */
    free(t->recipe);
    free(t->cfg_json);
    free(t);
}

const snn_lm_train_info *snn_lm_trainer_info(const snn_lm_trainer *t) { return t ? &t->info : NULL; }
snn_model *snn_lm_trainer_model(snn_lm_trainer *t) { return t ? t->m : NULL; }
long snn_lm_trainer_step_count(const snn_lm_trainer *t) { return t ? t->step : 0; }

/* ---------------- the step ---------------- */

static snn_status local_phase(snn_lm_trainer *t, double *ls, double *cn) {
    /* the loss mask is all ones in training: the global token count is known up front */
    const float scale = (float)(1.0 / ((double)t->G * (double)t->S));
    /* the ranks of one CP group read the same samples: the DP coordinate picks the slice */
    const long base = t->consumed + (long)t->dp_rank * (t->G / t->dp_size);
    *ls = 0, *cn = 0;
    for (long k = 0; k < t->K; k++) {
        for (long j = 0; j < t->M; j++) t->idx[j] = t->perm[base + k * t->M + j];
        SNN_TRY(snn_token_dataset_batch(t->train, t->idx, (int)t->M, t->ids, t->labels));
        double l, c;
        SNN_TRY(t->micro_fn(t->micro_ctx, t->ids, t->labels, NULL, (int)t->M, scale, !t->fused_step, &l, &c));
        *ls += l;
        *cn += c;
    }
    return SNN_OK;
}

snn_status snn_lm_trainer_step(snn_lm_trainer *t, snn_lm_step_metrics *out) {
    if (!t) return snn_error(SNN_E_INVALID, "lm trainer is NULL");
    if (t->step >= t->cfg.train_steps)
        return snn_error(SNN_E_INVALID, "the run is complete (%ld of %lld steps)", t->step, (long long)t->cfg.train_steps);
    const snn_lm_training_config *c = &t->cfg;
    double t0 = now_s();
    double ls = 0, cn = 0;
    float lr = (float)snn_lm_lr_at(c, t->sched), gn = NAN;
    int skipped = 0;
    snn_status st;
    if (t->staged) { /* the whole step through the stage's 1F1B pipeline */
        st = lm_stage_step(t, lr, &ls, &cn, &gn);
        skipped = !isfinite(gn);
    } else {
        snn_model_zero_grad(t->m);
        SNN_TRY(lm_agree(t, local_phase(t, &ls, &cn)));
        if (t->fused_step)
            st = snn_precision_backward(t->prec, t->local.dlogits, snn_dist_optim_local(t->opt), lr,
                                        (float)c->optimizer.clip_grad, &gn, &skipped);
        else
            st = snn_dist_optim_step(t->opt, lr, (float)c->optimizer.clip_grad, 0, &gn, &skipped);
    }
    SNN_TRY(lm_agree(t, st));
    t->step++;
    t->consumed += t->G;
    if (!skipped) t->sched += t->G;
    double dt = now_s() - t0;
    long long rss = lm_peak_rss_bytes();
    double sums[3] = {ls, cn, (double)rss}, maxs[2] = {dt, (double)rss};
    if (snn_comm_size(t->comm) > 1) { /* the stage's loss sums are global already */
        if (t->staged) SNN_TRY(snn_comm_allreduce(t->comm, &sums[2], 1, SNN_COMM_F64, SNN_COMM_SUM));
        else SNN_TRY(snn_comm_allreduce(t->comm, sums, 3, SNN_COMM_F64, SNN_COMM_SUM));
        SNN_TRY(snn_comm_allreduce(t->comm, maxs, 2, SNN_COMM_F64, SNN_COMM_MAX));
    }
    if (t->step > c->timing_warmup_steps) {
        t->train_secs += maxs[0];
        t->timed++;
    }
    snn_lm_step_metrics *m = &t->last;
    const double tokens_per_step = (double)t->G * (double)t->S;
    m->optimizer_step = t->step;
    m->consumed_samples = t->consumed;
    m->loss_sum = sums[0];
    m->tokens = sums[1];
    m->lm_loss = sums[0] / sums[1];
    m->grad_norm = gn;
    m->lr = lr;
    m->update_successful = !skipped;
    m->step_seconds = maxs[0];
    m->timed_steps = t->timed;
    m->training_seconds = t->train_secs;
    m->semantic_tokens_per_second = t->timed ? (double)t->timed * tokens_per_step / t->train_secs : 0;
    m->neural_steps_per_second = m->semantic_tokens_per_second * t->o.time_steps;
    m->peak_memory_bytes = (long long)maxs[1];
    m->total_peak_memory_bytes = (long long)sums[2];
    if (out) *out = *m;
    return SNN_OK;
}

snn_status snn_lm_trainer_validate(snn_lm_trainer *t, double *loss_sum, double *tokens) {
    if (!t || !loss_sum || !tokens) return snn_error(SNN_E_INVALID, "validate: NULL argument");
    snn_status st = SNN_OK;
    double v[2] = {0, 0};
    if (!t->valid) st = snn_error(SNN_E_INVALID, "validate: the run has no validation data (eval_interval 0)");
    const int64_t count = t->cfg.eval_steps * t->G, per = count / t->dp_size;
    if (st == SNN_OK && t->staged) {
        st = lm_stage_validate(t, &v[0], &v[1]);
    } else if (st == SNN_OK && t->cp > 1) {
        /* the CP model runs through its microbatch (forward only): per is a multiple of M
         * (global % (micro * DP) == 0); the per-rank sums add up over DP x CP below */
        const int64_t rows = snn_token_dataset_rows(t->valid), first = (int64_t)t->dp_rank * per;
        for (int64_t b = 0; b < per && st == SNN_OK; b += t->M) {
            for (long j = 0; j < t->M; j++) t->idx[j] = (first + b + j) % rows;
            double l = 0, n = 0;
            st = snn_token_dataset_batch(t->valid, t->idx, (int)t->M, t->ids, t->labels);
            if (st == SNN_OK) st = t->micro_fn(t->micro_ctx, t->ids, t->labels, NULL, (int)t->M, 0.0f, 0, &l, &n);
            v[0] += l;
            v[1] += n;
        }
    } else if (st == SNN_OK)
        st = snn_lm_evaluate(t->m, &t->o, t->valid, (int)t->M, (int64_t)t->dp_rank * per, per, t->eval, &v[0], &v[1]);
    SNN_TRY(lm_agree(t, st));
    if (!t->staged && t->dp > 1) SNN_TRY(snn_comm_allreduce(t->comm, v, 2, SNN_COMM_F64, SNN_COMM_SUM));
    *loss_sum = v[0];
    *tokens = v[1];
    return SNN_OK;
}

/* ---------------- the loop ---------------- */

static void emit(snn_lm_train_callback cb, void *user, snn_lm_train_event_kind k, const snn_lm_step_metrics *m,
                 const char *json, double vloss, const char *ckpt) {
    if (!cb) return;
    snn_lm_train_event e = {k, m, json, vloss, ckpt};
    cb(&e, user);
}

snn_status snn_lm_trainer_run(snn_lm_trainer *t, snn_lm_train_callback cb, void *user) {
    if (!t) return snn_error(SNN_E_INVALID, "lm trainer is NULL");
    const snn_lm_training_config *c = &t->cfg;
    char line[2048];
    /* the optimizer state per rank, MAX and SUM over DP (1/DP of the unsharded total) */
    double ob[2] = {(double)t->info.optimizer_state_bytes, (double)t->info.optimizer_state_bytes};
    if (snn_comm_size(t->comm) > 1) {
        SNN_TRY(snn_comm_allreduce(t->comm, &ob[0], 1, SNN_COMM_F64, SNN_COMM_MAX));
        SNN_TRY(snn_comm_allreduce(t->comm, &ob[1], 1, SNN_COMM_F64, SNN_COMM_SUM));
    }
    snprintf(line, sizeof line,
             "{\"event\":\"start\",\"model\":\"%s\",\"parameters\":%zu,\"data_parallel_size\":%d,\"num_microbatches\":%lld,"
             "\"micro_batch_size\":%ld,\"global_batch_size\":%ld,\"start_step\":%ld,\"distributed_optimizer\":%d,"
             "\"tensor_parallel_size\":%d,\"pipeline_parallel_size\":%d,\"sequence_parallel\":%d,"
             "\"optimizer_state_bytes_max\":%.0f,\"optimizer_state_bytes_sum\":%.0f,\"optimizer_state_bytes_unsharded\":%zu,"
             "\"precision\":\"%s\",\"context_parallel_size\":%d}",
             t->o.spiking ? "spikelm" : "gpt", t->info.parameters, t->dp_size, (long long)t->K, t->M, t->G, t->step,
             !t->staged || t->sdopt != NULL, c->model.transformer.tensor_model_parallel_size, c->model.transformer.pipeline_model_parallel_size,
             c->model.transformer.sequence_parallel, ob[0], ob[1], t->info.optimizer_state_bytes_full, t->info.precision,
             t->cp);
    emit(cb, user, SNN_LM_EVENT_START, NULL, line, NAN, NULL);
    double last_vloss = NAN;
    while (t->step < c->train_steps) {
        SNN_TRY(snn_lm_trainer_step(t, NULL));
        const snn_lm_step_metrics *m = &t->last;
        long step = t->step;
        if (c->eval_interval > 0 && step % c->eval_interval == 0) {
            double vl, vc;
            SNN_TRY(snn_lm_trainer_validate(t, &vl, &vc));
            last_vloss = vl / vc;
            snprintf(line, sizeof line,
                     "{\"optimizer_step\":%ld,\"validation_lm_loss\":%.9g,\"validation_perplexity\":%.9g,"
                     "\"validation_tokens\":%.0f}",
                     step, last_vloss, exp(last_vloss), vc);
            emit(cb, user, SNN_LM_EVENT_VALIDATION, m, line, last_vloss, NULL);
        }
        if (step % c->log_interval == 0 || step == c->train_steps) {
            snprintf(line, sizeof line,
                     "{\"optimizer_step\":%ld,\"consumed_samples\":%ld,\"lm_loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,"
                     "\"update_successful\":%d,\"timed_steps\":%ld,\"training_seconds\":%.6g,"
                     "\"semantic_tokens_per_second\":%.6g,\"neural_steps_per_second\":%.6g,\"step_seconds\":%.6g,"
                     "\"peak_memory_bytes\":%lld,\"total_peak_memory_bytes\":%lld}",
                     step, m->consumed_samples, m->lm_loss, m->grad_norm, m->lr, m->update_successful, m->timed_steps,
                     m->training_seconds, m->semantic_tokens_per_second, m->neural_steps_per_second, m->step_seconds,
                     m->peak_memory_bytes, m->total_peak_memory_bytes);
            emit(cb, user, SNN_LM_EVENT_LOG, m, line, NAN, NULL);
        }
        if ((c->checkpoint_interval > 0 && step % c->checkpoint_interval == 0) || step == c->train_steps) {
            double secs;
            SNN_TRY(snn_lm_trainer_save(t, t->last_dir, sizeof t->last_dir, &secs));
            snprintf(line, sizeof line, "{\"optimizer_step\":%ld,\"checkpoint\":\"%s\",\"checkpoint_seconds\":%.6g}", step,
                     t->last_dir, secs);
            emit(cb, user, SNN_LM_EVENT_CHECKPOINT, m, line, NAN, t->last_dir);
        }
    }
    const snn_lm_step_metrics *m = &t->last;
    snprintf(line, sizeof line,
             "{\"optimizer_step\":%ld,\"consumed_samples\":%ld,\"lm_loss\":%.9g,\"grad_norm\":%.9g,\"update_successful\":%d,"
             "\"validation_lm_loss\":%.9g,\"timed_steps\":%ld,\"training_seconds\":%.6g,\"semantic_tokens_per_second\":%.6g,"
             "\"neural_steps_per_second\":%.6g,\"peak_memory_bytes\":%lld,\"total_peak_memory_bytes\":%lld,"
             "\"tensor_parallel_size\":%d,\"pipeline_parallel_size\":%d,\"context_parallel_size\":%d,\"data_parallel_size\":%d,"
             "\"use_snn_memopt\":0,\"selective_recompute\":0,\"parameters\":%zu,\"time_steps\":%d,"
             "\"optimizer_state_bytes_max\":%.0f,\"optimizer_state_bytes_unsharded\":%zu,\"checkpoint\":\"%s\"}",
             t->step, t->consumed, m->lm_loss, m->grad_norm, m->update_successful,
             isfinite(last_vloss) ? last_vloss : -1.0, m->timed_steps, m->training_seconds, m->semantic_tokens_per_second,
             m->neural_steps_per_second, m->peak_memory_bytes, m->total_peak_memory_bytes,
             c->model.transformer.tensor_model_parallel_size, c->model.transformer.pipeline_model_parallel_size, t->cp,
             t->dp_size, t->info.parameters,
             t->o.time_steps, ob[0], t->info.optimizer_state_bytes_full, t->last_dir);
    snn_status st = SNN_OK;
    if (t->rank == 0) {
        char mp[4200];
        snprintf(mp, sizeof mp, "%s/metrics.json", c->checkpoint_dir);
        FILE *mf = fopen(mp, "w");
        if (!mf || fprintf(mf, "%s\n", line) < 0) st = snn_error(SNN_E_IO, "cannot write %s", mp);
        if (mf && fclose(mf)) st = snn_error(SNN_E_IO, "cannot write %s", mp);
    }
    SNN_TRY(lm_agree(t, st));
    emit(cb, user, SNN_LM_EVENT_END, m, line, last_vloss, t->last_dir);
    return SNN_OK;
}
