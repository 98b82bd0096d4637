/* Vocab-parallel embedding and cross-entropy (lm_stage.h).
 *
 * The embedding is a wrapper around an Embedding of the local rows, named "@" so that its
 * weight keeps the canonical name ("wte.weight") and a tied head can point at it. Its
 * forward validates the ids against the FULL vocabulary (as the dense embedding does),
 * copies the rows it holds, writes zeros for the others, and sums over TP: every id is
 * held by exactly one rank, so the sum is the dense row exactly. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "dist/lm_stage.h"
#include "nn/lm_layers.h"

typedef struct {
    int vocab, lo, local, dim, seq;
    snn_comm *tp;
    int tp_size, tp_rank;
    int sp;      /* sequence parallel: the output is this rank's [S/TP, dim] shard */
    float *buf;  /* SP: [rows][S][dim] (arena) */
} vpe_impl;

static _Atomic unsigned long long lm_calls;

unsigned long long snn_lm_tp_comm_calls(void) { return lm_calls; }

static snn_status tally(snn_status st) {
    lm_calls++;
    return st;
}

static snn_status vpe_setup(snn_module *m, snn_shape in) {
    vpe_impl *e = m->impl;
    snn_module *c = m->children[0];
    c->in = in;
    SNN_TRY(c->ops->setup(c, in));
    e->seq = in.d[0];
    m->out = c->out;
    if (e->sp) {
        if (e->seq % e->tp_size)
            return snn_error(SNN_E_SHAPE, "%s: sequence parallel needs the sequence %d divisible by %d ranks", m->name,
                             e->seq, e->tp_size);
        m->out.d[0] = e->seq / e->tp_size;
    }
    m->n_params = 0;
    return SNN_OK;
}

static void vpe_reserve(snn_module *m, snn_arena *a, int T, int N) {
    vpe_impl *e = m->impl;
    if (e->sp) e->buf = snn_arena_floats(a, (size_t)T * (size_t)N * (size_t)e->seq * (size_t)e->dim);
}

static void vpe_init(snn_module *m, snn_rng *rng) {
    snn_module *c = m->children[0];
    if (c->ops->init) c->ops->init(c, rng);
}

static snn_status vpe_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    vpe_impl *e = m->impl;
    const size_t R = snn_rows(r), n = R * (size_t)e->seq, D = (size_t)e->dim;
    const float *W = m->children[0]->params[0].data;
    float *full = e->sp ? e->buf : y;
    for (size_t i = 0; i < n; i++) {
        float f = x[i];
        if (!(f >= 0.0f && f < (float)e->vocab) || f != floorf(f))
            return snn_error(SNN_E_INVALID, "Embedding %s: token %zu is %g, not an id in [0, %d)", m->name, i,
                             (double)f, e->vocab);
        int id = (int)f - e->lo;
        if (id >= 0 && id < e->local) memcpy(full + i * D, W + (size_t)id * D, D * sizeof(float));
        else memset(full + i * D, 0, D * sizeof(float));
    }
    if (e->tp_size == 1) return SNN_OK;
    if (!e->tp) return snn_error(SNN_E_STATE, "%s: vocab-parallel embedding built without a TP communicator", m->name);
    SNN_TRY(tally(snn_comm_allreduce(e->tp, full, n * D, SNN_COMM_F32, SNN_COMM_SUM)));
    if (e->sp) { /* reduce-scatter along the sequence: keep this rank's positions */
        const size_t Sl = (size_t)e->seq / (size_t)e->tp_size, S = (size_t)e->seq;
        for (size_t b = 0; b < R; b++)
            memcpy(y + b * Sl * D, full + (b * S + (size_t)e->tp_rank * Sl) * D, Sl * D * sizeof(float));
    }
    return SNN_OK;
}

static snn_status vpe_backward(snn_module *m, const snn_run *r, const float *x, const float *y, const float *dy,
                               float *dx) {
    (void)y;
    vpe_impl *e = m->impl;
    const size_t R = snn_rows(r), n = R * (size_t)e->seq, D = (size_t)e->dim;
    float *G = m->children[0]->params[0].grad;
    if (e->sp) { /* all-gather the sequence shards of dy: buf [rank][rows][S/TP][dim] */
        const size_t Sl = (size_t)e->seq / (size_t)e->tp_size, S = (size_t)e->seq;
        SNN_TRY(tally(snn_comm_allgather(e->tp, dy, R * Sl * D, SNN_COMM_F32, e->buf)));
        for (size_t p = 0; p < (size_t)e->tp_size; p++)
            for (size_t b = 0; b < R; b++)
                for (size_t k = 0; k < Sl; k++) {
                    int id = (int)x[b * S + p * Sl + k] - e->lo;
                    if (id < 0 || id >= e->local) continue;
                    float *g = G + (size_t)id * D;
                    const float *d = e->buf + ((p * R + b) * Sl + k) * D;
                    for (size_t j = 0; j < D; j++) g[j] += d[j];
                }
    } else {
        /* dy is the full (replicated) gradient; each rank scatters the rows it holds */
        for (size_t i = 0; i < n; i++) {
            int id = (int)x[i] - e->lo;
            if (id < 0 || id >= e->local) continue;
            float *g = G + (size_t)id * D;
            const float *d = dy + i * D;
            for (size_t j = 0; j < D; j++) g[j] += d[j];
        }
    }
    if (dx) memset(dx, 0, n * sizeof(float));
    return SNN_OK;
}

static const snn_module_ops vpe_ops = {
    .id = SNN_KIND_VOCAB_PARALLEL_EMBEDDING, .kind = "VocabParallelEmbedding",
    .setup = vpe_setup,
    .init = vpe_init,
    .reserve = vpe_reserve,
    .forward = vpe_forward,
    .backward = vpe_backward,
};

snn_module *snn_vocab_parallel_embedding_new(int vocab, int lo, int local, int dim, snn_comm *tp, int tp_rank,
                                             int tp_size, int sp) {
    snn_module *inner = snn_embedding_new(local, dim);
    if (!inner) return NULL;
    snn_module *m = snn_module_new(&vpe_ops, sizeof(vpe_impl));
    if (!m) {
        snn_module_free(inner);
        return NULL;
    }
    vpe_impl *e = m->impl;
    e->vocab = vocab;
    e->lo = lo;
    e->local = local;
    e->dim = dim;
    e->tp = tp;
    e->tp_size = tp_size;
    e->tp_rank = tp_rank;
    e->sp = sp && tp_size > 1;
    snprintf(inner->name, sizeof inner->name, "@");
    if (snn_module_add_child(m, inner) != SNN_OK) {
        snn_module_free(m);
        return NULL;
    }
    return m;
}

snn_module *snn_vocab_parallel_embedding_inner(snn_module *m) {
    if (!snn_module_kind_is(m, SNN_KIND_VOCAB_PARALLEL_EMBEDDING)) return NULL;
    return m->children[0];
}

static inline float zred(const float *l, int T, size_t stride, float inv) {
    float s = 0.0f;
    for (int t = 0; t < T; t++) s += l[(size_t)t * stride];
    return s * inv;
}

snn_status snn_lm_vocab_parallel_ce(snn_comm *tp, const float *logits, const int32_t *labels, int T, int N,
                                    int S, int V, int lo, int Vl, int reduce_sum, float *mx, double *red,
                                    double *token_loss, double *loss_sum, double *count, float *dlogits,
                                    float grad_scale) {
    if (!logits || !labels || !mx || !red || !token_loss || !loss_sum || !count || !dlogits)
        return snn_error(SNN_E_INVALID, "vocab-parallel LM loss: NULL buffer");
    if (T <= 0 || N <= 0 || S <= 0 || Vl <= 0 || lo < 0 || lo + Vl > V)
        return snn_error(SNN_E_INVALID, "vocab-parallel LM loss: bad sizes (T %d, N %d, S %d, rows %d..%d of %d)", T,
                         N, S, lo, lo + Vl, V);
    const long long NS = (long long)N * S;
    for (long long i = 0; i < NS; i++)
        if (labels[i] < 0 || labels[i] >= V)
            return snn_error(SNN_E_INVALID, "LM loss: label %d at token %lld is outside [0, %d)", (int)labels[i], i, V);
    const size_t stride = (size_t)NS * (size_t)Vl;
    const float inv = reduce_sum ? 1.0f : 1.0f / (float)T, gt = inv;
    /* pass 1: the T-reduced logits z (kept in the t = 0 slice of dlogits) and the local max */
    for (long long i = 0; i < NS; i++) {
        const float *l = logits + (size_t)i * Vl;
        float *d = dlogits + (size_t)i * Vl, m = -INFINITY;
        for (int v = 0; v < Vl; v++) {
            d[v] = zred(l + v, T, stride, inv);
            m = d[v] > m ? d[v] : m;
        }
        mx[i] = m;
    }
    if (tp) SNN_TRY(tally(snn_comm_allreduce(tp, mx, (size_t)NS, SNN_COMM_F32, SNN_COMM_MAX)));
    /* pass 2: local sums of exp(z - max) and the label's z where this rank holds it */
    for (long long i = 0; i < NS; i++) {
        float *d = dlogits + (size_t)i * Vl;
        const int lab = labels[i] - lo;
        double se = 0.0;
        for (int v = 0; v < Vl; v++) {
            float zv = d[v];
            d[v] = expf(zv - mx[i]);
            se += d[v];
            if (v == lab) red[2 * i + 1] = (double)zv;
        }
        red[2 * i] = se;
        if (lab < 0 || lab >= Vl) red[2 * i + 1] = 0.0;
    }
    if (tp) SNN_TRY(tally(snn_comm_allreduce(tp, red, 2 * (size_t)NS, SNN_COMM_F64, SNN_COMM_SUM)));
    double ls = 0.0;
    for (long long i = 0; i < NS; i++) {
        const double se = red[2 * i];
        token_loss[i] = (double)mx[i] + log(se) - red[2 * i + 1];
        ls += token_loss[i];
        float *d = dlogits + (size_t)i * Vl;
        const int lab = labels[i] - lo;
        const float c = grad_scale * gt, is = (float)(1.0 / se);
        for (int v = 0; v < Vl; v++) {
            float g = c * (d[v] * is - (v == lab ? 1.0f : 0.0f));
            for (int t = 0; t < T; t++) d[(size_t)t * stride + v] = g;
        }
    }
    *loss_sum = ls;
    *count = (double)NS;
    return SNN_OK;
}

/* ---- sequence parallel: gather / scatter along the sequence ---------------------------------
 * Activations [rows][S][h] (full) and [rows][S/TP][h] (this rank's positions
 * [r S/TP, (r+1) S/TP)). Gather (before a column layer): forward all-gather of the shards;
 * backward: the column layer's input gradient is a partial sum over TP, summed and cut to
 * this rank's positions (a reduce-scatter). Scatter (after a row layer, whose output is a
 * partial sum): forward reduce-scatter, then the full bias on the shard; backward
 * all-gather of the gradient. The reduce-scatter is an all-reduce followed by the cut (the
 * communicator has no reduce-scatter): the same values, twice the bytes of a true one. */
typedef struct {
    snn_comm *tp;
    int P, r, S, h, bias;
    int scatter;
    float *buf; /* [rows][S][h] (arena) */
} sp_impl;

static snn_status sp_setup(snn_module *m, snn_shape in) {
    sp_impl *p = m->impl;
    char b[64];
    const int Sin = p->scatter ? p->S : p->S / p->P;
    if (p->S % p->P || in.rank != 2 || in.d[0] != Sin || in.d[1] != p->h)
        return snn_error(SNN_E_SHAPE, "%s: sequence %s expects [%d, %d] (sequence %d over %d ranks), got %s", m->name,
                         p->scatter ? "scatter" : "gather", Sin, p->h, p->S, p->P, snn_shape_str(in, b, sizeof b));
    m->out = snn_shape2(p->scatter ? p->S / p->P : p->S, p->h);
    m->n_params = 0;
    if (p->scatter && p->bias) snn_module_add_param(m, "bias", snn_shape1(p->h), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void sp_init(snn_module *m, snn_rng *rng) {
    (void)rng;
    if (m->n_params) memset(m->params[0].data, 0, m->params[0].numel * sizeof(float));
}

static void sp_reserve(snn_module *m, snn_arena *a, int T, int N) {
    sp_impl *p = m->impl;
    p->buf = snn_arena_floats(a, (size_t)T * (size_t)N * (size_t)p->S * (size_t)p->h);
}

/* buf [rank][rows][Sl][h] <-> full [rows][S][h] */
static void from_ranks(const sp_impl *p, size_t R, const float *buf, float *full) {
    const size_t Sl = (size_t)(p->S / p->P), h = (size_t)p->h;
    for (size_t q = 0; q < (size_t)p->P; q++)
        for (size_t b = 0; b < R; b++)
            memcpy(full + (b * (size_t)p->S + q * Sl) * h, buf + (q * R + b) * Sl * h, Sl * h * sizeof(float));
}

static void cut(const sp_impl *p, size_t R, const float *full, float *part) {
    const size_t Sl = (size_t)(p->S / p->P), h = (size_t)p->h;
    for (size_t b = 0; b < R; b++)
        memcpy(part + b * Sl * h, full + (b * (size_t)p->S + (size_t)p->r * Sl) * h, Sl * h * sizeof(float));
}

static snn_status sp_need(const snn_module *m) {
    const sp_impl *p = m->impl;
    if (!p->tp) return snn_error(SNN_E_STATE, "%s: sequence-parallel layer built without a TP communicator", m->name);
    return SNN_OK;
}

static snn_status sp_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    sp_impl *p = m->impl;
    SNN_TRY(sp_need(m));
    const size_t R = snn_rows(r), full = R * (size_t)p->S * (size_t)p->h, part = full / (size_t)p->P;
    if (!p->scatter) {
        SNN_TRY(tally(snn_comm_allgather(p->tp, x, part, SNN_COMM_F32, p->buf)));
        from_ranks(p, R, p->buf, y);
        return SNN_OK;
    }
    memcpy(p->buf, x, full * sizeof(float));
    SNN_TRY(tally(snn_comm_allreduce(p->tp, p->buf, full, SNN_COMM_F32, SNN_COMM_SUM)));
    cut(p, R, p->buf, y);
    if (m->n_params) {
        const float *bias = m->params[0].data;
        for (size_t i = 0; i < part / (size_t)p->h; i++)
            for (int f = 0; f < p->h; f++) y[i * (size_t)p->h + (size_t)f] += bias[f];
    }
    return SNN_OK;
}

static snn_status sp_backward(snn_module *m, const snn_run *r, const float *x, const float *y, const float *dy,
                              float *dx) {
    (void)x;
    (void)y;
    sp_impl *p = m->impl;
    SNN_TRY(sp_need(m));
    const size_t R = snn_rows(r), full = R * (size_t)p->S * (size_t)p->h, part = full / (size_t)p->P;
    if (!p->scatter) {
        if (!dx) return SNN_OK;
        memcpy(p->buf, dy, full * sizeof(float));
        SNN_TRY(tally(snn_comm_allreduce(p->tp, p->buf, full, SNN_COMM_F32, SNN_COMM_SUM)));
        cut(p, R, p->buf, dx);
        return SNN_OK;
    }
    if (m->n_params) { /* this rank's positions; summed over TP with the other replicated gradients */
        float *db = m->params[0].grad;
        for (size_t i = 0; i < part / (size_t)p->h; i++)
            for (int f = 0; f < p->h; f++) db[f] += dy[i * (size_t)p->h + (size_t)f];
    }
    if (!dx) return SNN_OK;
    SNN_TRY(tally(snn_comm_allgather(p->tp, dy, part, SNN_COMM_F32, p->buf)));
    from_ranks(p, R, p->buf, dx);
    return SNN_OK;
}

static const snn_module_ops sp_ops = {
    .id = SNN_KIND_SEQUENCE_PARALLEL, .kind = "SequenceParallel",
    .setup = sp_setup,
    .init = sp_init,
    .reserve = sp_reserve,
    .forward = sp_forward,
    .backward = sp_backward,
};

static snn_module *sp_new(int scatter, int S, int h, int bias, snn_comm *tp, int tp_rank, int tp_size) {
    snn_module *m = snn_module_new(&sp_ops, sizeof(sp_impl));
    if (!m) return NULL;
    sp_impl *p = m->impl;
    p->tp = tp;
    p->P = tp_size;
    p->r = tp_rank;
    p->S = S;
    p->h = h;
    p->bias = bias;
    p->scatter = scatter;
    return m;
}

snn_module *snn_sp_gather_new(int S, int h, snn_comm *tp, int tp_rank, int tp_size) {
    return sp_new(0, S, h, 0, tp, tp_rank, tp_size);
}

snn_module *snn_sp_scatter_new(int S, int h, int bias, snn_comm *tp, int tp_rank, int tp_size) {
    return sp_new(1, S, h, bias, tp, tp_rank, tp_size);
}
