/* GELU, exact form: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); any shape. The arithmetic
 * is the op table's (gelu_forward / gelu_backward). */
#include "backend/backend.h"
#include "nn/layers_conv.h"

static snn_status gelu_setup(snn_module *m, snn_shape in) {
    m->out = in;
    m->n_params = 0;
    return SNN_OK;
}

/* x / dx stored as in_store says, y / dy as out_store (16-bit boundaries, prec_store.c):
 * the typed entries; FP32 on both sides: the plain ones. */
static int typed(const snn_module *m) { return m->in_store || m->out_store; }

static snn_status gelu_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    const size_t n = snn_rows(r) * snn_shape_numel(m->out);
    if (typed(m)) return m->be->gelu_forward_io(m->be, (snn_dtype)m->in_store, (snn_dtype)m->out_store, x, y, n);
    return m->be->gelu_forward(m->be, x, y, n);
}

static snn_status gelu_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    if (!dx) return SNN_OK;
    const size_t n = snn_rows(r) * snn_shape_numel(m->out);
    if (typed(m))
        return m->be->gelu_backward_io(m->be, (snn_dtype)m->in_store, (snn_dtype)m->out_store, x, dy, dx, n);
    return m->be->gelu_backward(m->be, x, dy, dx, n);
}

static const snn_module_ops gelu_ops = {
    .id = SNN_KIND_GELU, .kind = "GELU",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_TYPED_IO,
    .setup = gelu_setup,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

snn_module *snn_gelu_new(void) { return snn_module_new(&gelu_ops, 0); }
