/* RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight (no bias, no
 * mean subtraction), every F-vector of every row on its own. The arithmetic is the op
 * table's (rmsnorm_forward / rmsnorm_backward, src/backend/cpu/cpu_norm.c on the CPU): this
 * file is the whole module kind, for every device. */
#include <math.h>

#include "backend/backend.h"
#include "nn/lm_layers.h"

typedef struct {
    int features;
    float eps;
    size_t per_sample;
    double *rstd; /* [vectors] (arena) */
    int have_forward;
} rms_impl;

static snn_status rms_setup(snn_module *m, snn_shape in) {
    rms_impl *l = m->impl;
    char s[64];
    if (l->features <= 0 || !(l->eps >= 0.0f) || !isfinite(l->eps))
        return snn_error(SNN_E_INVALID, "RMSNorm needs positive features and a finite eps >= 0 (got %d, %g)",
                         l->features, (double)l->eps);
    if (in.rank < 1 || in.d[in.rank - 1] != l->features)
        return snn_error(SNN_E_SHAPE, "RMSNorm(%d) expects a last dimension of %d, got %s", l->features,
                         l->features, snn_shape_str(in, s, sizeof s));
    l->per_sample = snn_shape_numel(in) / (size_t)l->features;
    m->out = in;
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape1(l->features), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void rms_init(snn_module *m, snn_rng *rng) {
    (void)rng;
    for (size_t j = 0; j < m->params[0].numel; j++) m->params[0].data[j] = 1.0f;
}

static void rms_reserve(snn_module *m, snn_arena *a, int T, int N) {
    rms_impl *l = m->impl;
    l->rstd = snn_arena_take(a, (size_t)T * (size_t)N * l->per_sample * sizeof(double));
    l->have_forward = 0;
}

static snn_status rms_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    rms_impl *l = m->impl;
    if (!l->rstd) return snn_error(SNN_E_STATE, "RMSNorm %s: reserve must run before forward", m->name);
    SNN_TRY(m->be->rmsnorm_forward(m->be, snn_rows(r) * l->per_sample, l->features, l->eps, x, m->params[0].data, y,
                                   l->rstd));
    l->have_forward = 1;
    return SNN_OK;
}

static snn_status rms_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)y;
    rms_impl *l = m->impl;
    if (!l->have_forward) return snn_error(SNN_E_STATE, "RMSNorm %s: backward before forward", m->name);
    return m->be->rmsnorm_backward(m->be, snn_rows(r) * l->per_sample, l->features, x, m->params[0].data, l->rstd,
                                   dy, dx, m->params[0].grad);
}

static const snn_module_ops rms_ops = {
    .id = SNN_KIND_RMSNORM, .kind = "RMSNorm",
    .devices = SNN_DEVMASK_ALL,
    .setup = rms_setup,
    .init = rms_init,
    .reserve = rms_reserve,
    .forward = rms_forward,
    .backward = rms_backward,
};

snn_module *snn_rmsnorm_new(int features, float eps) {
    snn_module *m = snn_module_new(&rms_ops, sizeof(rms_impl));
    if (!m) return NULL;
    rms_impl *l = m->impl;
    l->features = features;
    l->eps = eps;
    return m;
}
