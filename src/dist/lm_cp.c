/* The context-parallel language model: built as the dense gpt/spikelm tree for S/CP tokens
 * (so parameters, names and initial values are the dense model's), then its position and
 * attention modules replaced by their CP forms; and its training step (microbatch
 * forward/backward on this rank's tokens, gradients and token counts summed over DP x CP,
 * clip, optimizer update). Layout and communication: lm_cp.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/lm_cp.h"
#include "dist/lm_cp_internal.h"
#include "nn/model_internal.h"

typedef struct {
    const snn_gpt_opts *o;
    int seq, cp, rank;
    snn_comm *comm;
    snn_status st;
    int n_pos, n_rope, n_attn;
} convert_walk;

static void convert_visit(snn_module *m, void *ctx) {
    convert_walk *w = ctx;
    if (w->st != SNN_OK) return;
    const snn_gpt_opts *o = w->o;
    const int hd = o->hidden / o->heads;
    if (snn_module_kind_is(m, SNN_KIND_POSITION_EMBEDDING)) {
        w->st = snn_lm_cp_install_posemb(m, o->context, o->hidden, w->seq, w->cp, w->rank);
        w->n_pos++;
    } else if (snn_module_kind_is(m, SNN_KIND_ROPE)) {
        w->st = snn_lm_cp_install_rope(m, o->heads, o->groups, hd, o->rope_theta, o->context, w->seq, w->cp, w->rank);
        w->n_rope++;
    } else if (snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION)) {
        w->st = snn_lm_cp_install_attention(m, o->heads, o->groups, hd, w->seq, w->comm);
        w->n_attn++;
    }
}

snn_status snn_lm_cp_convert(snn_model *m, const snn_gpt_opts *o, int seq, snn_comm *cp) {
    if (!m || !o || !cp) return snn_error(SNN_E_INVALID, "snn_lm_cp_convert: NULL model, options or communicator");
    const char *kind = snn_model_kind(m);
    if (strcmp(kind, "gpt") && strcmp(kind, "spikelm"))
        return snn_error(SNN_E_INVALID, "context parallel applies to gpt and spikelm models, not %s", kind);
    if (m->arena.base || m->precision)
        return snn_error(SNN_E_STATE, "context parallel must be set up before the model is planned or prepared");
    const int n = snn_comm_size(cp);
    SNN_TRY(snn_lm_cp_check(seq, n));
    if (seq > o->context)
        return snn_error(SNN_E_INVALID, "sequence_length %d exceeds max_sequence_length %d", seq, o->context);
    if (m->in_shape.rank != 1 || m->in_shape.d[0] != seq / n)
        return snn_error(SNN_E_SHAPE, "the model takes %d tokens, context parallel %d of %d needs %d",
                         m->in_shape.d[0], n, seq, seq / n);
    convert_walk w = {o, seq, n, snn_comm_rank(cp), cp, SNN_OK, 0, 0, 0};
    snn_module_walk(m->root, convert_visit, &w);
    SNN_TRY(w.st);
    if (w.n_attn != o->layers || w.n_rope != (o->pos == SNN_LM_POS_ROPE ? o->layers : 0) ||
        w.n_pos != (o->pos == SNN_LM_POS_LEARNED_ABSOLUTE))
        return snn_error(SNN_E_INVALID, "the model's modules do not match its options (%d attention, %d rope, "
                         "%d position modules)", w.n_attn, w.n_rope, w.n_pos);
    return SNN_OK;
}

/* ---- the microbatch on this rank's tokens ---- */

struct snn_lm_cp_micro {
    snn_model *m;
    int S, sl, T, V, N, reduce_sum, cp_size, cp_rank;
    float *x, *dlogits, *mask_l;
    double *tl;
    int32_t *ids_l, *lab_l;
};

void snn_lm_cp_micro_free(snn_lm_cp_micro *c) {
    if (!c) return;
    free(c->x);
    free(c->dlogits);
    free(c->mask_l);
    free(c->tl);
    free(c->ids_l);
    free(c->lab_l);
    free(c);
}

snn_status snn_lm_cp_micro_create(snn_model *m, const snn_gpt_opts *o, snn_comm *cp, int micro, snn_lm_cp_micro **out) {
    if (!m || !o || !cp || !out) return snn_error(SNN_E_INVALID, "snn_lm_cp_micro_create: NULL argument");
    *out = NULL;
    const int n = snn_comm_size(cp);
    SNN_TRY(snn_lm_cp_check(o->seq, n));
    if (micro <= 0 || micro > (1 << 20))
        return snn_error(SNN_E_INVALID, "micro_batch_size must be in 1..%d (got %d)", 1 << 20, micro);
    if (snn_model_input_numel(m) != (size_t)(o->seq / n))
        return snn_error(SNN_E_SHAPE, "the CP model takes %zu tokens, not S / CP = %d", snn_model_input_numel(m), o->seq / n);
    snn_lm_cp_micro *c = calloc(1, sizeof *c);
    if (!c) return snn_error(SNN_E_NOMEM, "out of memory");
    c->m = m;
    c->S = o->seq;
    c->sl = o->seq / n;
    c->T = o->time_steps;
    c->V = o->vocab;
    c->N = micro;
    c->reduce_sum = o->reduce_sum;
    c->cp_size = n;
    c->cp_rank = snn_comm_rank(cp);
    const size_t ns = (size_t)c->N * (size_t)c->sl;
    /* T * N * sl * V logits; the model's own checks bound each factor, the product is
     * checked here before it sizes a buffer */
    size_t nl;
    if (__builtin_mul_overflow(ns * (size_t)c->T, (size_t)c->V, &nl) || nl > ((size_t)1 << 34)) {
        snn_status e = snn_error(SNN_E_INVALID, "CP microbatch logits (%zu x %d x %d) are too large", ns, c->T, c->V);
        free(c);
        return e;
    }
    c->x = malloc(ns * (size_t)c->T * sizeof(float));
    c->dlogits = malloc(nl * sizeof(float));
    c->mask_l = malloc(ns * sizeof(float));
    c->tl = malloc(ns * sizeof(double));
    c->ids_l = malloc(ns * sizeof(int32_t));
    c->lab_l = malloc(ns * sizeof(int32_t));
    if (!c->x || !c->dlogits || !c->mask_l || !c->tl || !c->ids_l || !c->lab_l) {
        snn_lm_cp_micro_free(c);
        return snn_error(SNN_E_NOMEM, "CP training buffers: out of memory");
    }
    *out = c;
    return SNN_OK;
}

/* Every rank of a CP group holds the same full samples, so checking all of them (not only
 * this rank's tokens) gives every rank the same verdict before the first collective: a bad
 * token is refused everywhere instead of leaving the other ranks waiting in an all-gather. */
static snn_status check_tokens(int V, const int32_t *ids, const int32_t *labels, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V || labels[i] < 0 || labels[i] >= V)
            return snn_error(SNN_E_INVALID, "token %zu of the microbatch: id %d / label %d outside the vocabulary "
                             "of %d", i, ids[i], labels[i], V);
    return SNN_OK;
}

snn_status snn_lm_cp_micro_run(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                               float grad_scale, int backward, double *loss_sum, double *count) {
    snn_lm_cp_micro *c = ctx;
    if (!c || !ids || !labels || !loss_sum || !count)
        return snn_error(SNN_E_INVALID, "CP microbatch: NULL argument");
    if (n != c->N) return snn_error(SNN_E_INVALID, "CP microbatch of %d samples, the model is planned for %d", n, c->N);
    SNN_TRY(check_tokens(c->V, ids, labels, (size_t)c->N * (size_t)c->S));
    const size_t ns = (size_t)c->N * (size_t)c->sl;
    snn_lm_cp_shard(ids, c->ids_l, (size_t)c->N, c->S, c->cp_size, c->cp_rank, sizeof(int32_t));
    snn_lm_cp_shard(labels, c->lab_l, (size_t)c->N, c->S, c->cp_size, c->cp_rank, sizeof(int32_t));
    if (mask) snn_lm_cp_shard(mask, c->mask_l, (size_t)c->N, c->S, c->cp_size, c->cp_rank, sizeof(float));
    /* the prompt tiled T times along the batch: folded row t*N + n (lm.h) */
    for (int t = 0; t < c->T; t++)
        for (size_t i = 0; i < ns; i++) c->x[(size_t)t * ns + i] = (float)c->ids_l[i];
    const float *y;
    /* training mode also without a backward: the forward is the same, the CP attention
     * keeps what a backward would need (validation calls it with backward 0) */
    SNN_TRY(snn_model_forward(c->m, c->x, 1, &y));
    SNN_TRY(snn_lm_cross_entropy(y, c->lab_l, mask ? c->mask_l : NULL, c->T, c->N, c->sl, c->V, c->reduce_sum, c->tl,
                                 loss_sum, count, backward ? c->dlogits : NULL, grad_scale));
    return backward ? snn_model_backward(c->m, c->dlogits) : SNN_OK;
}

/* ---- the CP model with its own step ---- */

struct snn_lm_cp {
    snn_model *m;
    snn_lm_cp_micro *mb;
    snn_comm *cp, *grad;
    int S, sl, N, cp_size, cp_rank;
    float *mask_l;
};

void snn_lm_cp_free(snn_lm_cp *c) {
    if (!c) return;
    snn_lm_cp_micro_free(c->mb);
    snn_model_free(c->m);
    free(c->mask_l);
    free(c);
}

snn_model *snn_lm_cp_model(snn_lm_cp *c) { return c ? c->m : NULL; }
int snn_lm_cp_local_seq(const snn_lm_cp *c) { return c ? c->sl : 0; }

snn_status snn_lm_cp_build(const snn_gpt_opts *o, uint64_t seed, snn_comm *cp, snn_model **out) {
    if (!o || !cp || !out) return snn_error(SNN_E_INVALID, "snn_lm_cp_build: NULL argument");
    *out = NULL;
    SNN_TRY(snn_gpt_opts_check(o));
    const int n = snn_comm_size(cp);
    SNN_TRY(snn_lm_cp_check(o->seq, n));
    snn_gpt_opts local = *o;
    local.seq = o->seq / n;
    snn_model *m;
    SNN_TRY(snn_gpt_create(&local, seed, &m));
    snn_status st = snn_lm_cp_convert(m, &local, o->seq, cp);
    if (st != SNN_OK) {
        snn_model_free(m);
        return st;
    }
    *out = m;
    return SNN_OK;
}

snn_status snn_lm_cp_create(const snn_gpt_opts *o, uint64_t seed, snn_comm *cp, snn_comm *grad, int micro,
                            snn_lm_cp **out) {
    if (!o || !cp || !out) return snn_error(SNN_E_INVALID, "snn_lm_cp_create: NULL options, communicator or output");
    *out = NULL;
    if (micro <= 0 || micro > (1 << 20))
        return snn_error(SNN_E_INVALID, "micro_batch_size must be in 1..%d (got %d)", 1 << 20, micro);
    snn_lm_cp *c = calloc(1, sizeof *c);
    if (!c) return snn_error(SNN_E_NOMEM, "out of memory");
    c->cp = cp;
    c->grad = grad ? grad : cp;
    c->S = o->seq;
    c->N = micro;
    c->cp_size = snn_comm_size(cp);
    c->cp_rank = snn_comm_rank(cp);
    snn_status st = snn_lm_cp_build(o, seed, cp, &c->m);
    if (st == SNN_OK) st = snn_model_plan(c->m, o->time_steps, micro);
    if (st == SNN_OK) st = snn_lm_cp_micro_create(c->m, o, cp, micro, &c->mb);
    if (st == SNN_OK) {
        c->sl = c->S / c->cp_size;
        c->mask_l = malloc((size_t)micro * (size_t)c->sl * sizeof(float));
        if (!c->mask_l) st = snn_error(SNN_E_NOMEM, "out of memory");
    }
    if (st != SNN_OK) {
        snn_lm_cp_free(c);
        return st;
    }
    *out = c;
    return SNN_OK;
}

snn_status snn_lm_cp_microbatch(snn_lm_cp *c, const int32_t *ids, const int32_t *labels, const float *mask,
                                float grad_scale, double *loss_sum, double *count) {
    if (!c) return snn_error(SNN_E_INVALID, "snn_lm_cp_microbatch: NULL");
    return snn_lm_cp_micro_run(c->mb, ids, labels, mask, c->N, grad_scale, 1, loss_sum, count);
}

snn_status snn_lm_cp_reduce_grads(snn_lm_cp *c) {
    if (!c) return snn_error(SNN_E_INVALID, "snn_lm_cp_reduce_grads: NULL");
    return snn_comm_allreduce(c->grad, snn_model_grads(c->m), snn_model_num_params(c->m), SNN_COMM_F32, SNN_COMM_SUM);
}

snn_status snn_lm_cp_train_step(snn_lm_cp *c, snn_optimizer *opt, const int32_t *ids, const int32_t *labels,
                                const float *mask, int K, float lr, float clip, double *loss, float *grad_norm) {
    if (!c || !opt || !ids || !labels || K <= 0)
        return snn_error(SNN_E_INVALID, "snn_lm_cp_train_step: NULL argument or K <= 0");
    if (!snn_optimizer_for_model(opt, c->m))
        return snn_error(SNN_E_INVALID, "snn_lm_cp_train_step: the optimizer belongs to another model");
    const size_t per = (size_t)c->N * (size_t)c->S;
    SNN_TRY(check_tokens(c->mb->V, ids, labels, (size_t)K * per));
    /* the whole global batch's token count first: every rank's gradients are scaled by it */
    double tot[2] = {0.0, 0.0};
    for (int k = 0; k < K; k++) {
        if (!mask) {
            tot[1] += (double)c->N * c->sl;
            continue;
        }
        snn_lm_cp_shard(mask + (size_t)k * per, c->mask_l, (size_t)c->N, c->S, c->cp_size, c->cp_rank, sizeof(float));
        for (size_t i = 0; i < (size_t)c->N * c->sl; i++) tot[1] += c->mask_l[i];
    }
    SNN_TRY(snn_comm_allreduce(c->grad, &tot[1], 1, SNN_COMM_F64, SNN_COMM_SUM));
    if (!(tot[1] > 0.0)) return snn_error(SNN_E_INVALID, "the global batch has no tokens to learn from (mask all zero)");
    const double global_count = tot[1];
    const float scale = (float)(1.0 / global_count);
    snn_model_zero_grad(c->m);
    tot[0] = tot[1] = 0.0;
    for (int k = 0; k < K; k++) {
        double l, n;
        SNN_TRY(snn_lm_cp_microbatch(c, ids + (size_t)k * per, labels + (size_t)k * per,
                                     mask ? mask + (size_t)k * per : NULL, scale, &l, &n));
        tot[0] += l;
        tot[1] += n;
    }
    SNN_TRY(snn_lm_cp_reduce_grads(c));
    SNN_TRY(snn_comm_allreduce(c->grad, tot, 2, SNN_COMM_F64, SNN_COMM_SUM));
    /* every rank holds the same summed gradients: the same norm, the same update */
    float gn = snn_clip_grad_norm(snn_model_grads(c->m), snn_model_num_params(c->m), clip > 0 ? clip : -1.0f);
    SNN_TRY(snn_optimizer_step(opt, lr, !isfinite(gn)));
    if (loss) *loss = tot[0] / tot[1];
    if (grad_norm) *grad_norm = gn;
    return SNN_OK;
}
