/* Learned absolute positions: y[s] = x[s] + weight[offset + s] for a [S, dim] sample.
 * The offset is 0 in training and the cache position while decoding. */
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"

typedef struct {
    int offset; /* first member: snn_lm_set_offset writes it */
    int max_len, dim, seq;
} pos_impl;

static snn_status pos_setup(snn_module *m, snn_shape in) {
    pos_impl *p = m->impl;
    char b[64];
    if (p->max_len <= 0 || p->dim <= 0)
        return snn_error(SNN_E_INVALID, "PositionEmbedding needs a positive length and width (got %d, %d)",
                         p->max_len, p->dim);
    if (in.rank != 2 || in.d[1] != p->dim || in.d[0] > p->max_len)
        return snn_error(SNN_E_SHAPE, "PositionEmbedding(%d, %d) expects [S <= %d, %d], got %s",
                         p->max_len, p->dim, p->max_len, p->dim, snn_shape_str(in, b, sizeof b));
    p->seq = in.d[0];
    m->out = in;
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape2(p->max_len, p->dim), SNN_PARAM_WEIGHT, 1);
    return SNN_OK;
}

static void pos_init(snn_module *m, snn_rng *rng) {
    snn_init_trunc_normal(m->params[0].data, m->params[0].numel, 0.01f, rng);
}

static snn_status pos_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    pos_impl *p = m->impl;
    if (p->offset < 0 || p->offset + p->seq > p->max_len)
        return snn_error(SNN_E_INVALID, "PositionEmbedding %s: positions %d..%d exceed the context %d",
                         m->name, p->offset, p->offset + p->seq - 1, p->max_len);
    const size_t L = (size_t)p->seq * (size_t)p->dim;
    return m->be->posemb_forward(m->be, snn_rows(r), L, x, m->params[0].data + (size_t)p->offset * (size_t)p->dim, y);
}

static snn_status pos_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)x;
    (void)y;
    pos_impl *p = m->impl;
    const size_t R = snn_rows(r), L = (size_t)p->seq * (size_t)p->dim;
    SNN_TRY(m->be->posemb_backward(m->be, R, L, dy, m->params[0].grad + (size_t)p->offset * (size_t)p->dim));
    return dx && dx != dy ? m->be->copy(m->be, dx, dy, R * L * sizeof(float)) : SNN_OK;
}

static const snn_module_ops pos_ops = {
    .id = SNN_KIND_POSITION_EMBEDDING, .kind = "PositionEmbedding",
    .devices = SNN_DEVMASK_ALL,
    .setup = pos_setup,
    .init = pos_init,
    .forward = pos_forward,
    .backward = pos_backward,
};

snn_module *snn_posemb_new(int max_len, int dim) {
    snn_module *m = snn_module_new(&pos_ops, sizeof(pos_impl));
    if (!m) return NULL;
    pos_impl *p = m->impl;
    p->max_len = max_len;
    p->dim = dim;
    return m;
}

snn_status snn_lm_set_offset(snn_module *m, int offset) {
    if (!snn_module_kind_is(m, SNN_KIND_POSITION_EMBEDDING) && !snn_module_kind_is(m, SNN_KIND_ROPE) &&
        !snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION))
        return snn_error(SNN_E_INVALID, "%s (%s) has no position offset", m->name, snn_module_own_ops(m)->kind);
    if (offset < 0) return snn_error(SNN_E_INVALID, "position offset must be >= 0 (got %d)", offset);
    if (*(int *)m->impl != offset) snn_graph_invalidate_all(); /* kernels take the offset by value */
    *(int *)m->impl = offset;
    return SNN_OK;
}
