/* SwiGLU gate: [.., 2F] -> [.., F], y = silu(a) * u with a = x[:F] (gate), u = x[F:] (up),
 * the layout of Megatron's fused gated fc1. silu(a) = a * sigmoid(a);
 * dL/da = dy * u * sigmoid(a) * (1 + a * (1 - sigmoid(a))), dL/du = dy * silu(a).
 * The arithmetic is the op table's (swiglu_forward / swiglu_backward). */
#include "backend/backend.h"
#include "nn/lm_layers.h"

typedef struct {
    int features;
    size_t vectors; /* per sample */
} swiglu_impl;

static snn_status swiglu_setup(snn_module *m, snn_shape in) {
    swiglu_impl *s = m->impl;
    char b[64];
    if (s->features <= 0 || in.rank < 1 || in.d[in.rank - 1] != 2 * s->features)
        return snn_error(SNN_E_SHAPE, "SwiGLU(%d) expects a last dimension of %d, got %s", s->features,
                         2 * s->features, snn_shape_str(in, b, sizeof b));
    s->vectors = snn_shape_numel(in) / (size_t)(2 * s->features);
    m->out = in;
    m->out.d[in.rank - 1] = s->features;
    m->n_params = 0;
    return SNN_OK;
}

static snn_status swiglu_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    swiglu_impl *s = m->impl;
    return m->be->swiglu_forward(m->be, snn_rows(r) * s->vectors, s->features, x, y);
}

static snn_status swiglu_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    if (!dx) return SNN_OK;
    swiglu_impl *s = m->impl;
    return m->be->swiglu_backward(m->be, snn_rows(r) * s->vectors, s->features, x, dy, dx);
}

static const snn_module_ops swiglu_ops = {
    .id = SNN_KIND_SWIGLU, .kind = "SwiGLU",
    .devices = SNN_DEVMASK_ALL,
    .setup = swiglu_setup,
    .forward = swiglu_forward,
    .backward = swiglu_backward,
};

snn_module *snn_swiglu_new(int features) {
    snn_module *m = snn_module_new(&swiglu_ops, sizeof(swiglu_impl));
    if (!m) return NULL;
    ((swiglu_impl *)m->impl)->features = features;
    return m;
}
