/* GELU, exact form: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2));
 * dy/dx = Phi(x) + x phi(x) with phi the standard normal density. Any shape. */
#include <math.h>

#include "nn/layers_conv.h"

static snn_status gelu_setup(snn_module *m, snn_shape in) {
    m->out = in;
    m->n_params = 0;
    return SNN_OK;
}

static snn_status gelu_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    const long n = (long)(snn_rows(r) * snn_shape_numel(m->out));
#pragma omp parallel for schedule(static) if((size_t)n * 8 > SNN_PAR_MIN_WORK)
    for (long i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
    return SNN_OK;
}

static snn_status gelu_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    if (!dx) return SNN_OK;
    const long n = (long)(snn_rows(r) * snn_shape_numel(m->out));
    const float inv_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for schedule(static) if((size_t)n * 8 > SNN_PAR_MIN_WORK)
    for (long i = 0; i < n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
    return SNN_OK;
}

static const snn_module_ops gelu_ops = {
    .kind = "GELU",
    .setup = gelu_setup,
    .forward = gelu_forward,
    .backward = gelu_backward,
};

snn_module *snn_gelu_new(void) { return snn_module_new(&gelu_ops, 0); }
