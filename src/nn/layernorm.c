/* LayerNorm over the last dimension: per-sample shape [..., F], every F-vector of every
 * one of the B = T*N rows is normalised on its own (biased variance, like PyTorch), then
 * scaled and shifted by weight/bias [F].
 *
 * The forward saves mean and 1/std per vector (2 doubles per F values); backward recomputes
 * x_hat from the intact input. The arithmetic is the op table's (layernorm_forward /
 * layernorm_backward; the CPU reference is src/backend/cpu/cpu_norm.c, in double). */
#include <math.h>

#include "backend/backend.h"
#include "nn/layers.h"

typedef struct {
    int features;
    float eps;
    size_t per_sample;     /* F-vectors per sample (numel / F) */
    double *mean, *rstd;   /* [vectors] of the last forward (arena) */
    void *acc;             /* the backend's backward scratch (arena) */
    int have_forward;
} ln_impl;

enum { P_WEIGHT, P_BIAS };

static snn_status ln_setup(snn_module *m, snn_shape in) {
    ln_impl *l = m->impl;
    char s[64];
    if (l->features <= 0)
        return snn_error(SNN_E_INVALID, "LayerNorm needs a positive number of features (got %d)",
                         l->features);
    if (!(l->eps >= 0.0f) || !isfinite(l->eps))
        return snn_error(SNN_E_INVALID, "LayerNorm eps must be a finite value >= 0 (got %g)",
                         (double)l->eps);
    if (in.rank < 1 || in.d[in.rank - 1] != l->features)
        return snn_error(SNN_E_SHAPE,
                         "LayerNorm(%d) expects inputs whose last dimension is %d, got %s",
                         l->features, l->features, snn_shape_str(in, s, sizeof s));
    l->per_sample = snn_shape_numel(in) / (size_t)l->features;
    m->out = in;
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape1(l->features), SNN_PARAM_WEIGHT, 0);
    snn_module_add_param(m, "bias", snn_shape1(l->features), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void ln_init(snn_module *m, snn_rng *rng) {
    (void)rng;
    ln_impl *l = m->impl;
    for (int j = 0; j < l->features; j++) {
        m->params[P_WEIGHT].data[j] = 1.0f;
        m->params[P_BIAS].data[j] = 0.0f;
    }
}

static void ln_reserve(snn_module *m, snn_arena *a, int T, int N) {
    ln_impl *l = m->impl;
    size_t vec = (size_t)T * (size_t)N * l->per_sample;
    l->mean = snn_arena_take(a, vec * sizeof(double));
    l->rstd = snn_arena_take(a, vec * sizeof(double));
    l->acc = snn_arena_take(a, m->be->layernorm_work_bytes(m->be, vec, l->features));
    l->have_forward = 0;
}

static snn_status ln_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    ln_impl *l = m->impl;
    if (!l->mean) return snn_error(SNN_E_STATE, "LayerNorm %s: reserve must run before forward", m->name);
    if (m->in_store) return snn_error(SNN_E_STATE, "LayerNorm %s: its input cannot be stored 16-bit", m->name);
    if (m->out_store) /* y (and dy) 16-bit: the GEMM after it multiplies them in that type (prec_store.c) */
        SNN_TRY(m->be->layernorm_forward_io(m->be, (snn_dtype)m->out_store, snn_rows(r) * l->per_sample, l->features,
                                            l->eps, x, m->params[P_WEIGHT].data, m->params[P_BIAS].data, y, l->mean,
                                            l->rstd));
    else
        SNN_TRY(m->be->layernorm_forward(m->be, snn_rows(r) * l->per_sample, l->features, l->eps, x,
                                         m->params[P_WEIGHT].data, m->params[P_BIAS].data, y, l->mean, l->rstd));
    l->have_forward = 1;
    return SNN_OK;
}

static snn_status ln_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                              const float *dy, float *dx) {
    (void)y;
    ln_impl *l = m->impl;
    if (!l->have_forward)
        return snn_error(SNN_E_STATE, "LayerNorm %s: backward called before forward", m->name);
    if (m->out_store)
        return m->be->layernorm_backward_io(m->be, (snn_dtype)m->out_store, snn_rows(r) * l->per_sample, l->features,
                                            x, m->params[P_WEIGHT].data, l->mean, l->rstd, dy, dx, m->dx_add,
                                            m->params[P_WEIGHT].grad, m->params[P_BIAS].grad, l->acc);
    return m->be->layernorm_backward(m->be, snn_rows(r) * l->per_sample, l->features, x, m->params[P_WEIGHT].data,
                                     l->mean, l->rstd, dy, dx, m->dx_add, m->params[P_WEIGHT].grad, m->params[P_BIAS].grad,
                                     l->acc);
}

static void ln_describe(const snn_module *m, snn_module_desc *d) {
    const ln_impl *l = m->impl;
    d->in_features = d->out_features = l->features;
    d->eps = l->eps;
}

static const snn_module_ops ln_ops = {
    .describe = ln_describe,
    .id = SNN_KIND_LAYERNORM,
    .kind = "LayerNorm",
    .devices = SNN_DEVMASK_ALL,
    /* typed io: its output side only (y, dy); dx_add: a pre-norm residual branch's skip
     * gradient joins its dx (residual.c) */
    .flags = SNN_MODULE_TYPED_IO | SNN_MODULE_DX_ADD,
    .setup = ln_setup,
    .init = ln_init,
    .reserve = ln_reserve,
    .forward = ln_forward,
    .backward = ln_backward,
};

snn_module *snn_layernorm_new(int features, float eps) {
    snn_module *m = snn_module_new(&ln_ops, sizeof(ln_impl));
    if (!m) return NULL;
    ln_impl *l = m->impl;
    l->features = features;
    l->eps = eps;
    return m;
}
