/* Flatten: any per-sample shape -> [numel] (PyTorch's start_dim=1 applied per step).
 * The data layout does not change; the copy keeps the module contract (y is its own
 * buffer, x stays intact). */
#include "backend/backend.h"
#include "nn/layers_conv.h"

static snn_status flatten_setup(snn_module *m, snn_shape in) {
    char b[64];
    size_t n = snn_shape_numel(in);
    if (in.rank < 1 || n == 0 || n > 0x7fffffff)
        return snn_error(SNN_E_SHAPE, "Flatten cannot flatten per-sample shape %s",
                         snn_shape_str(in, b, sizeof b));
    m->out = snn_shape1((int)n);
    m->n_params = 0;
    return SNN_OK;
}

static snn_status flatten_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    return m->be->copy(m->be, y, x, sizeof(float) * snn_rows(r) * snn_shape_numel(m->out));
}

static snn_status flatten_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                   const float *dy, float *dx) {
    (void)x;
    (void)y;
    return dx ? m->be->copy(m->be, dx, dy, sizeof(float) * snn_rows(r) * snn_shape_numel(m->out)) : SNN_OK;
}

static const snn_module_ops flatten_ops = {
    .id = SNN_KIND_FLATTEN, .kind = "Flatten",
    .devices = SNN_DEVMASK_ALL,
    .setup = flatten_setup,
    .forward = flatten_forward,
    .backward = flatten_backward,
};

snn_module *snn_flatten_new(void) { return snn_module_new(&flatten_ops, 0); }
