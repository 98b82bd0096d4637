/* Sequential container: runs children in order. Each child's output lives in its own
 * arena buffer (the next child's input, kept for backward); gradients flow back through
 * two ping-pong buffers sized for the widest activation. */
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"

typedef struct {
    float **outs;      /* outs[i] = output of child i, B * numel(child i out) */
    float *grad[2];
    size_t max_numel;
} seq_impl;

static snn_status seq_setup(snn_module *m, snn_shape in) {
    seq_impl *s = m->impl;
    if (m->n_children == 0) return snn_error(SNN_E_INVALID, "Sequential %s has no layers", m->name);
    free(s->outs);
    s->outs = calloc((size_t)m->n_children, sizeof *s->outs);
    if (!s->outs) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_shape cur = in;
    s->max_numel = snn_shape_numel(in);
    for (int i = 0; i < m->n_children; i++) {
        snn_module *c = m->children[i];
        c->in = cur;
        snn_status st = c->ops->setup(c, cur);
        if (st != SNN_OK) return snn_error_prefix(st, "%s (%s)", c->name, c->ops->kind);
        cur = c->out;
        size_t n = snn_shape_numel(cur);
        if (n > s->max_numel) s->max_numel = n;
    }
    m->out = cur;
    return SNN_OK;
}

static void seq_init(snn_module *m, snn_rng *rng) {
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]->ops->init) m->children[i]->ops->init(m->children[i], rng);
}

static void seq_reserve(snn_module *m, snn_arena *a, int T, int N) {
    seq_impl *s = m->impl;
    size_t B = (size_t)T * (size_t)N;
    for (int i = 0; i < m->n_children; i++) {
        snn_module *c = m->children[i];
        /* The last child writes straight into the caller's y. */
        s->outs[i] = i + 1 < m->n_children ? snn_arena_floats(a, B * snn_shape_numel(c->out)) : NULL;
        if (c->ops->reserve) c->ops->reserve(c, a, T, N);
    }
    s->grad[0] = snn_arena_floats(a, B * s->max_numel);
    s->grad[1] = snn_arena_floats(a, B * s->max_numel);
}

static snn_status seq_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    seq_impl *s = m->impl;
    const float *cur = x;
    for (int i = 0; i < m->n_children; i++) {
        snn_module *c = m->children[i];
        float *out = i + 1 < m->n_children ? s->outs[i] : y;
        SNN_TRY(c->ops->forward(c, r, cur, out));
        cur = out;
    }
    return SNN_OK;
}

static snn_status seq_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    seq_impl *s = m->impl;
    const float *g = dy;
    int pp = 0;
    for (int i = m->n_children - 1; i >= 0; i--) {
        snn_module *c = m->children[i];
        const float *cx = i > 0 ? s->outs[i - 1] : x;
        const float *cy = i + 1 < m->n_children ? s->outs[i] : y;
        float *gx = i > 0 ? s->grad[pp] : dx;
        SNN_TRY(c->ops->backward(c, r, cx, cy, g, gx));
        g = gx;
        pp ^= 1;
    }
    return SNN_OK;
}

static void seq_reset(snn_module *m) {
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]->ops->reset) m->children[i]->ops->reset(m->children[i]);
}

static void seq_destroy(snn_module *m) {
    seq_impl *s = m->impl;
    free(s->outs);
}

static const snn_module_ops seq_ops = {
    .id = SNN_KIND_SEQUENTIAL, .kind = "Sequential",
    .devices = SNN_DEVMASK_ALL, /* it only hands buffers on; each child is checked on its own */
    .setup = seq_setup,
    .init = seq_init,
    .reserve = seq_reserve,
    .forward = seq_forward,
    .backward = seq_backward,
    .reset = seq_reset,
    .destroy = seq_destroy,
};

snn_module *snn_sequential_new(void) { return snn_module_new(&seq_ops, sizeof(seq_impl)); }

int snn_module_is_sequential(const snn_module *m) { return snn_module_kind_is(m, SNN_KIND_SEQUENTIAL); }

const float *snn_sequential_output(snn_module *m, int i) {
    seq_impl *s = m->impl;
    return s->outs[i];
}
