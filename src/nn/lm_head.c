/* Output head: logits [S, vocab] = x [S, dim] W^T with W [vocab, dim], no bias (GPT-2).
 * Tied: W is the token embedding's weight; the head declares no parameter and adds its
 * gradient into the embedding's (the embedding module must outlive it, as in one model). */
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"

typedef struct {
    int dim, vocab;
    snn_module *tied;
} head_impl;

static snn_param *head_weight(snn_module *m) {
    head_impl *h = m->impl;
    return h->tied ? &h->tied->params[0] : &m->params[0];
}

static snn_status head_setup(snn_module *m, snn_shape in) {
    head_impl *h = m->impl;
    char b[64];
    if (h->dim <= 0 || h->vocab <= 0)
        return snn_error(SNN_E_INVALID, "LMHead needs positive sizes (got %d, %d)", h->dim, h->vocab);
    if (in.rank < 1 || in.d[in.rank - 1] != h->dim)
        return snn_error(SNN_E_SHAPE, "LMHead expects a last dimension of %d, got %s", h->dim,
                         snn_shape_str(in, b, sizeof b));
    if (h->tied) {
        const snn_param *w = &h->tied->params[0];
        if (strcmp(snn_module_own_ops(h->tied)->kind, "Embedding") || h->tied->n_params < 1 ||
            w->shape.rank != 2 || w->shape.d[0] != h->vocab || w->shape.d[1] != h->dim)
            return snn_error(SNN_E_SHAPE, "LMHead: the tied module must be an Embedding(%d, %d) set up first",
                             h->vocab, h->dim);
    }
    m->out = in;
    m->out.d[in.rank - 1] = h->vocab;
    m->n_params = 0;
    if (!h->tied) snn_module_add_param(m, "weight", snn_shape2(h->vocab, h->dim), SNN_PARAM_WEIGHT, 1);
    return SNN_OK;
}

static void head_init(snn_module *m, snn_rng *rng) {
    head_impl *h = m->impl;
    if (!h->tied) snn_init_trunc_normal(m->params[0].data, m->params[0].numel, 0.02f, rng);
}

static snn_status head_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    head_impl *h = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)h->dim));
    r->be->gemm_f32(0, 1, rows, h->vocab, h->dim, 1.0f, x, h->dim, head_weight(m)->data, h->dim, 0.0f,
                    y, h->vocab);
    return SNN_OK;
}

static snn_status head_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    head_impl *h = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)h->dim));
    snn_param *w = head_weight(m);
    r->be->gemm_f32(1, 0, h->vocab, h->dim, rows, 1.0f, dy, h->vocab, x, h->dim, 1.0f, w->grad, h->dim);
    if (dx) r->be->gemm_f32(0, 0, rows, h->dim, h->vocab, 1.0f, dy, h->vocab, w->data, h->dim, 0.0f, dx, h->dim);
    return SNN_OK;
}

static const snn_module_ops head_ops = {
    .kind = "LMHead",
    .setup = head_setup,
    .init = head_init,
    .forward = head_forward,
    .backward = head_backward,
};

snn_module *snn_lm_head_new(int dim, int vocab, snn_module *tied) {
    snn_module *m = snn_module_new(&head_ops, sizeof(head_impl));
    if (!m) return NULL;
    head_impl *h = m->impl;
    h->dim = dim;
    h->vocab = vocab;
    h->tied = tied;
    return m;
}
