/* GELU, exact form: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); any shape. The arithmetic
 * is the op table's (gelu_forward / gelu_backward). */
#include "backend/backend.h"
#include "nn/layers_conv.h"

static snn_status gelu_setup(snn_module *m, snn_shape in) {
    m->out = in;
    m->n_params = 0;
    return SNN_OK;
}

static snn_status gelu_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    return m->be->gelu_forward(m->be, x, y, snn_rows(r) * snn_shape_numel(m->out));
}

static snn_status gelu_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    if (!dx) return SNN_OK;
    return m->be->gelu_backward(m->be, x, dy, dx, snn_rows(r) * snn_shape_numel(m->out));
}

static const snn_module_ops gelu_ops = {
    .id = SNN_KIND_GELU, .kind = "GELU",
    .devices = SNN_DEVMASK_ALL,
    .setup = gelu_setup,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

snn_module *snn_gelu_new(void) { return snn_module_new(&gelu_ops, 0); }
