/* Causal self-attention core under context parallel.
 *
 * Input per sample: this rank's sl = S/CP tokens of the fused q|k|v row [sl, W],
 * W = (heads + 2*groups) * hd (the dense core's layout, attention.c). Forward:
 *   1. pack the k|v part of every local token: send [R][sl][KVW], KVW = 2*groups*hd;
 *   2. all-gather over the CP group -> [CP][R][sl][KVW], put back in global order
 *      (snn_lm_cp_unshard) -> kv [R][S][KVW];
 *   3. per folded row and head: Z = scale Q_local K^T [sl][S], row l keeps keys
 *      0..pos(l) (pos = the global position), softmax, O = P V.
 * The probabilities P [R][heads][sl][S] and the gathered kv stay for the backward:
 *   dV = P^T dO, dZ = P .* (dP - rowsum(dP .* P)) with dP = dO V^T, dQ = scale dZ K,
 *   dK = scale dZ^T Q  -- dK, dV for every global position, from this rank's queries only.
 * The contributions of all ranks are summed by one all-reduce of the [R][S][KVW] buffer
 * and each rank copies its own tokens' rows into dx (a reduce-scatter would move 1/CP of
 * the data; the comm layer has all-reduce, and its sum is added in one fixed order, so the
 * result is the same on every rank and for every thread count).
 * Both directions are collectives: every rank of the group calls them, also when dx is
 * NULL. Buffers come from the model's arena; a step allocates nothing. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/lm_cp.h"
#include "dist/lm_cp_internal.h"
#include "nn/lm_layers.h"

typedef struct {
    int offset; /* first member, as the dense modules' (never used here) */
    int heads, groups, hd, seq, sl, cp, rank;
    snn_comm *comm;
    int *pos;            /* [sl] global positions (malloc'd, destroy frees) */
    float *send;         /* [R][sl][KVW] */
    float *kv;           /* [R][S][KVW] gathered keys|values in global order */
    float *buf;          /* [R][S][KVW]: the gathered shards (forward), dK|dV (backward) */
    float *P;            /* [R][heads][sl][S] */
    float *scratch;      /* [threads][sl*S] */
    int threads;
    int have_forward;
} cpattn_impl;

static snn_status cpattn_setup(snn_module *m, snn_shape in) {
    cpattn_impl *a = m->impl;
    char b[64];
    if (a->heads <= 0 || a->groups <= 0 || a->heads % a->groups || a->hd <= 0 || !a->comm)
        return snn_error(SNN_E_INVALID,
                         "CP attention needs heads divisible by query groups, a positive head size and a "
                         "communicator (got heads %d, groups %d, head size %d)",
                         a->heads, a->groups, a->hd);
    a->cp = snn_comm_size(a->comm);
    a->rank = snn_comm_rank(a->comm);
    SNN_TRY(snn_lm_cp_check(a->seq, a->cp));
    a->sl = a->seq / a->cp;
    int W = (a->heads + 2 * a->groups) * a->hd;
    if (in.rank != 2 || in.d[1] != W || in.d[0] != a->sl)
        return snn_error(SNN_E_SHAPE, "CP attention expects [%d, %d] (S %d / CP %d tokens, fused q|k|v), got %s",
                         a->sl, W, a->seq, a->cp, snn_shape_str(in, b, sizeof b));
    free(a->pos);
    a->pos = malloc((size_t)a->sl * sizeof(int));
    if (!a->pos) return snn_error(SNN_E_NOMEM, "CP attention: out of memory");
    for (int l = 0; l < a->sl; l++) a->pos[l] = snn_lm_cp_position(a->seq, a->cp, a->rank, l);
    m->out = snn_shape2(a->sl, a->heads * a->hd);
    m->n_params = 0;
    return SNN_OK;
}

static void cpattn_reserve(snn_module *m, snn_arena *ar, int T, int N) {
    cpattn_impl *a = m->impl;
    const size_t R = (size_t)T * (size_t)N, KVW = 2 * (size_t)a->groups * a->hd;
    const size_t SL = (size_t)a->sl * (size_t)a->seq;
    a->threads = omp_get_max_threads();
    a->send = snn_arena_floats(ar, R * a->sl * KVW);
    a->kv = snn_arena_floats(ar, R * a->seq * KVW);
    a->buf = snn_arena_floats(ar, R * a->seq * KVW);
    a->P = snn_arena_floats(ar, R * (size_t)a->heads * SL);
    a->scratch = snn_arena_floats(ar, (size_t)a->threads * SL);
    a->have_forward = 0;
}

/* Row l of Z [sl][S]: softmax over keys 0..pos[l], zeros after. */
static void masked_softmax(float *Z, int sl, int S, const int *pos) { snn_attn_softmax_rows(Z, sl, S, S, 0, pos); }

static snn_status cpattn_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    cpattn_impl *a = m->impl;
    if (!a->P) return snn_error(SNN_E_STATE, "%s: reserve must run before forward", m->name);
    const int sl = a->sl, S = a->seq, hd = a->hd, H = a->heads, G = a->groups, rep = H / G;
    const int W = (H + 2 * G) * hd, OW = H * hd, KVW = 2 * G * hd;
    const long R = (long)snn_rows(r);
    const float scale = 1.0f / sqrtf((float)hd);
    const snn_backend *be = r->be;
    const size_t SL = (size_t)sl * S;
    for (long b = 0; b < R; b++)
        for (int l = 0; l < sl; l++)
            memcpy(a->send + ((size_t)b * sl + l) * KVW, x + ((size_t)b * sl + l) * W + (size_t)H * hd,
                   (size_t)KVW * sizeof(float));
    snn_status st = snn_comm_allgather(a->comm, a->send, (size_t)R * sl * KVW, SNN_COMM_F32, a->buf);
    if (st != SNN_OK) return st;
    snn_lm_cp_unshard(a->buf, a->kv, (size_t)R, S, a->cp, (size_t)KVW * sizeof(float));
#pragma omp parallel for schedule(static) if (R > 1)
    for (long b = 0; b < R; b++) {
        const float *xb = x + (size_t)b * sl * W, *kvb = a->kv + (size_t)b * S * KVW;
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            float *P = a->P + ((size_t)b * H + h) * SL;
            be->gemm_f32(0, 1, sl, S, hd, scale, xb + (size_t)h * hd, W, kvb + (size_t)g * hd, KVW, 0.0f, P, S);
            masked_softmax(P, sl, S, a->pos);
            be->gemm_f32(0, 0, sl, hd, S, 1.0f, P, S, kvb + (size_t)(G + g) * hd, KVW, 0.0f,
                         y + (size_t)b * sl * OW + (size_t)h * hd, OW);
        }
    }
    a->have_forward = 1;
    return SNN_OK;
}

static snn_status cpattn_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    cpattn_impl *a = m->impl;
    if (!a->have_forward) return snn_error(SNN_E_STATE, "%s: backward called before forward", m->name);
    const int sl = a->sl, S = a->seq, hd = a->hd, H = a->heads, G = a->groups, rep = H / G;
    const int W = (H + 2 * G) * hd, OW = H * hd, KVW = 2 * G * hd;
    const long R = (long)snn_rows(r);
    const float scale = 1.0f / sqrtf((float)hd);
    const snn_backend *be = r->be;
    const size_t SL = (size_t)sl * S;
    float *dkv = a->buf;
    memset(dkv, 0, (size_t)R * S * KVW * sizeof(float));
#pragma omp parallel for schedule(static) if (R > 1)
    for (long b = 0; b < R; b++) {
        float *dP = a->scratch + (size_t)omp_get_thread_num() * SL;
        const float *xb = x + (size_t)b * sl * W, *kvb = a->kv + (size_t)b * S * KVW;
        float *dkvb = dkv + (size_t)b * S * KVW;
        const float *dyb = dy + (size_t)b * sl * OW;
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            const float *P = a->P + ((size_t)b * H + h) * SL;
            const float *k = kvb + (size_t)g * hd, *v = kvb + (size_t)(G + g) * hd;
            /* dV += P^T dO */
            be->gemm_f32(1, 0, S, hd, sl, 1.0f, P, S, dyb + (size_t)h * hd, OW, 1.0f, dkvb + (size_t)(G + g) * hd,
                         KVW);
            /* dP = dO V^T, then dZ in place */
            be->gemm_f32(0, 1, sl, S, hd, 1.0f, dyb + (size_t)h * hd, OW, v, KVW, 0.0f, dP, S);
            for (int i = 0; i < sl; i++) {
                const float *p = P + (size_t)i * S;
                float *d = dP + (size_t)i * S;
                const int n = a->pos[i] + 1;
                double acc = 0.0;
                for (int j = 0; j < n; j++) acc += (double)d[j] * p[j];
                float c = (float)acc;
                for (int j = 0; j < n; j++) d[j] = p[j] * (d[j] - c);
                for (int j = n; j < S; j++) d[j] = 0.0f;
            }
            /* dQ = scale dZ K (overwrite), dK += scale dZ^T Q */
            if (dx) be->gemm_f32(0, 0, sl, hd, S, scale, dP, S, k, KVW, 0.0f, dx + (size_t)b * sl * W + (size_t)h * hd, W);
            be->gemm_f32(1, 0, S, hd, sl, scale, dP, S, xb + (size_t)h * hd, W, 1.0f, dkvb + (size_t)g * hd, KVW);
        }
    }
    snn_status st = snn_comm_allreduce(a->comm, dkv, (size_t)R * S * KVW, SNN_COMM_F32, SNN_COMM_SUM);
    if (st != SNN_OK) return st;
    if (!dx) return SNN_OK;
    for (long b = 0; b < R; b++)
        for (int l = 0; l < sl; l++)
            memcpy(dx + ((size_t)b * sl + l) * W + (size_t)H * hd, dkv + ((size_t)b * S + a->pos[l]) * KVW,
                   (size_t)KVW * sizeof(float));
    return SNN_OK;
}

static void cpattn_destroy(snn_module *m) {
    cpattn_impl *a = m->impl;
    free(a->pos);
    a->pos = NULL;
}

static const snn_module_ops cpattn_ops = {
    .id = SNN_KIND_CP_CAUSAL_SELF_ATTENTION, .kind = "CPCausalSelfAttention",
    .setup = cpattn_setup,
    .reserve = cpattn_reserve,
    .forward = cpattn_forward,
    .backward = cpattn_backward,
    .destroy = cpattn_destroy,
};

snn_module *snn_lm_cp_attention_new(int heads, int groups, int head_dim, int seq, snn_comm *cp) {
    snn_module *m = snn_module_new(&cpattn_ops, sizeof(cpattn_impl));
    if (!m) return NULL;
    cpattn_impl *a = m->impl;
    a->heads = heads;
    a->groups = groups;
    a->hd = head_dim;
    a->seq = seq;
    a->comm = cp;
    return m;
}

snn_status snn_lm_cp_install_attention(snn_module *m, int heads, int groups, int hd, int seq, snn_comm *cp) {
    cpattn_impl *a = calloc(1, sizeof *a);
    if (!a) return snn_error(SNN_E_NOMEM, "CP attention: out of memory");
    a->heads = heads;
    a->groups = groups;
    a->hd = hd;
    a->seq = seq;
    a->comm = cp;
    const snn_shape out = m->out;
    SNN_TRY(snn_lm_cp_swap(m, &cpattn_ops, a));
    SNN_TRY(cpattn_setup(m, m->in));
    if (m->out.rank != out.rank || m->out.d[0] != out.d[0] || m->out.d[1] != out.d[1])
        return snn_error(SNN_E_SHAPE, "%s: CP attention changes the output shape", m->name);
    return SNN_OK;
}
