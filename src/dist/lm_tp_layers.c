/* Vocab-parallel embedding and cross-entropy (lm_stage.h).
 *
 * The embedding is a wrapper around an Embedding of the local rows, named "@" so that its
 * weight keeps the canonical name ("wte.weight") and a tied head can point at it. Its
 * forward validates the ids against the FULL vocabulary (as the dense embedding does),
 * copies the rows it holds, writes zeros for the others, and sums over TP: every id is
 * held by exactly one rank, so the sum is the dense row exactly. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dist/lm_stage.h"
#include "nn/lm_layers.h"

typedef struct {
    int vocab, lo, local, dim, seq;
    snn_comm *tp;
    int tp_size;
} vpe_impl;

static snn_status vpe_setup(snn_module *m, snn_shape in) {
    vpe_impl *e = m->impl;
    snn_module *c = m->children[0];
    c->in = in;
    SNN_TRY(c->ops->setup(c, in));
    e->seq = in.d[0];
    m->out = c->out;
    m->n_params = 0;
    return SNN_OK;
}

static void vpe_init(snn_module *m, snn_rng *rng) {
    snn_module *c = m->children[0];
    if (c->ops->init) c->ops->init(c, rng);
}

static snn_status vpe_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    vpe_impl *e = m->impl;
    const size_t n = snn_rows(r) * (size_t)e->seq, D = (size_t)e->dim;
    const float *W = m->children[0]->params[0].data;
    for (size_t i = 0; i < n; i++) {
        float f = x[i];
        if (!(f >= 0.0f && f < (float)e->vocab) || f != floorf(f))
            return snn_error(SNN_E_INVALID, "Embedding %s: token %zu is %g, not an id in [0, %d)", m->name, i,
                             (double)f, e->vocab);
        int id = (int)f - e->lo;
        if (id >= 0 && id < e->local) memcpy(y + i * D, W + (size_t)id * D, D * sizeof(float));
        else memset(y + i * D, 0, D * sizeof(float));
    }
    if (e->tp_size == 1) return SNN_OK;
    if (!e->tp) return snn_error(SNN_E_STATE, "%s: vocab-parallel embedding built without a TP communicator", m->name);
    return snn_comm_allreduce(e->tp, y, n * D, SNN_COMM_F32, SNN_COMM_SUM);
}

static snn_status vpe_backward(snn_module *m, const snn_run *r, const float *x, const float *y, const float *dy,
                               float *dx) {
    (void)y;
    vpe_impl *e = m->impl;
    const size_t n = snn_rows(r) * (size_t)e->seq, D = (size_t)e->dim;
    float *G = m->children[0]->params[0].grad;
    /* dy is the full (replicated) gradient; each rank scatters the rows it holds */
    for (size_t i = 0; i < n; i++) {
        int id = (int)x[i] - e->lo;
        if (id < 0 || id >= e->local) continue;
        float *g = G + (size_t)id * D;
        const float *d = dy + i * D;
        for (size_t j = 0; j < D; j++) g[j] += d[j];
    }
    if (dx) memset(dx, 0, n * sizeof(float));
    return SNN_OK;
}

static const snn_module_ops vpe_ops = {
    .kind = "VocabParallelEmbedding",
    .setup = vpe_setup,
    .init = vpe_init,
    .forward = vpe_forward,
    .backward = vpe_backward,
};

snn_module *snn_vocab_parallel_embedding_new(int vocab, int lo, int local, int dim, snn_comm *tp, int tp_size) {
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
    snprintf(inner->name, sizeof inner->name, "@");
    if (snn_module_add_child(m, inner) != SNN_OK) {
        snn_module_free(m);
        return NULL;
    }
    return m;
}

snn_module *snn_vocab_parallel_embedding_inner(snn_module *m) {
    if (!m || snn_module_own_ops(m) != &vpe_ops) return NULL;
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
    if (tp) SNN_TRY(snn_comm_allreduce(tp, mx, (size_t)NS, SNN_COMM_F32, SNN_COMM_MAX));
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
    if (tp) SNN_TRY(snn_comm_allreduce(tp, red, 2 * (size_t)NS, SNN_COMM_F64, SNN_COMM_SUM));
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
