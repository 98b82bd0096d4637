/* Residual: y = x + inner(x). The inner module is child 0 (dotted names "<name>.0.*") and
 * must keep the per-sample shape. Its output gets its own arena buffer because the inner
 * backward needs that output intact (y itself holds the sum).
 *
 * Two sums are fused into a neighbour's pass where the modules allow (module.h): the forward's
 * with the 16-bit rounding of a branch that ends in a 16-bit GEMM Linear (branch_round), and
 * the backward's into the dx of a branch that starts with a SNN_MODULE_DX_ADD kind (dx_add).
 * Both give the bits of the separate passes. */
#include <string.h>

#include "backend/backend.h"
#include "nn/layers_conv.h"

typedef struct {
    float *inner_y; /* [B][numel] */
} residual_impl;

static int same_shape(snn_shape a, snn_shape b) {
    if (a.rank != b.rank) return 0;
    for (int i = 0; i < a.rank; i++)
        if (a.d[i] != b.d[i]) return 0;
    return 1;
}

static snn_status residual_setup(snn_module *m, snn_shape in) {
    char b1[64], b2[64];
    snn_module *c = m->children[0];
    c->in = in;
    snn_status st = c->ops->setup(c, in);
    if (st != SNN_OK) return snn_error_prefix(st, "%s (%s)", c->name, c->ops->kind);
    if (!same_shape(c->out, in))
        return snn_error(SNN_E_SHAPE,
                         "Residual needs its inner module to keep the shape: input %s, inner output %s",
                         snn_shape_str(in, b1, sizeof b1), snn_shape_str(c->out, b2, sizeof b2));
    m->out = in;
    m->n_params = 0;
    return SNN_OK;
}

static void residual_init(snn_module *m, snn_rng *rng) {
    snn_module *c = m->children[0];
    if (c->ops->init) c->ops->init(c, rng);
}

static void residual_reserve(snn_module *m, snn_arena *a, int T, int N) {
    residual_impl *s = m->impl;
    snn_module *c = m->children[0];
    s->inner_y = snn_arena_floats(a, (size_t)T * N * snn_shape_numel(m->out));
    if (c->ops->reserve) c->ops->reserve(c, a, T, N);
}

/* The branch's first and last modules through nested Sequentials (the modules that receive the
 * residual's dx and write the branch's output). */
static snn_module *branch_first(snn_module *m) {
    while (snn_module_is_sequential(m) && m->n_children > 0) m = m->children[0];
    return m;
}

static snn_status residual_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    residual_impl *s = m->impl;
    snn_module *c = m->children[0];
    const size_t n = snn_rows(r) * snn_shape_numel(m->out);
    SNN_TRY(c->ops->forward(c, r, x, s->inner_y));
    /* the branch's last Linear left its 16-bit rounding to this sum (module.h) */
    if (m->branch_round) return m->be->add_rounded(m->be, (snn_dtype)m->branch_round, y, x, s->inner_y, n);
    return m->be->add(m->be, y, x, s->inner_y, n);
}

static snn_status residual_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                    const float *dy, float *dx) {
    (void)y;
    residual_impl *s = m->impl;
    snn_module *c = m->children[0], *first = branch_first(c);
    /* a first module that adds the skip gradient to its dx itself (a pre-norm branch's
     * LayerNorm, SNN_MODULE_DX_ADD; not while a wrapper runs it) saves the sum below */
    const int fused = dx && dx != dy && first->ops == snn_module_own_ops(first) && (first->ops->flags & SNN_MODULE_DX_ADD);
    if (fused) first->dx_add = dy;
    /* The inner module still runs with dx == NULL: its parameter gradients are needed. */
    snn_status st = c->ops->backward(c, r, x, s->inner_y, dy, dx);
    if (fused) first->dx_add = NULL;
    SNN_TRY(st);
    if (!dx || fused) return SNN_OK;
    return m->be->add(m->be, dx, dx, dy, snn_rows(r) * snn_shape_numel(m->out));
}

static void residual_reset(snn_module *m) {
    snn_module *c = m->children[0];
    if (c->ops->reset) c->ops->reset(c);
}

static const snn_module_ops residual_ops = {
    .id = SNN_KIND_RESIDUAL, .kind = "Residual",
    .devices = SNN_DEVMASK_ALL, /* the sum is the table's; the inner module is checked on its own */
    .setup = residual_setup,
    .init = residual_init,
    .reserve = residual_reserve,
    .forward = residual_forward,
    .backward = residual_backward,
    .reset = residual_reset,
};

snn_module *snn_residual_new(snn_module *inner) {
    if (!inner) return NULL;
    snn_module *m = snn_module_new(&residual_ops, sizeof(residual_impl));
    if (!m) {
        snn_module_free(inner);
        return NULL;
    }
    if (snn_module_add_child(m, inner) != SNN_OK) { /* add_child frees inner on failure */
        snn_module_free(m);
        return NULL;
    }
    return m;
}
