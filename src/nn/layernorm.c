/* LayerNorm over the last dimension: per-sample shape [..., F], every F-vector of every
 * one of the B = T*N rows is normalised on its own (biased variance, like PyTorch), then
 * scaled and shifted by weight/bias [F].
 *
 * The forward saves mean and 1/std per vector (2 doubles per F values); backward recomputes
 * x_hat from the intact input. Arithmetic runs in double (as in batchnorm.c: the input
 * gradient cancels for short vectors). Vectors are independent, so dx runs OpenMP over vectors;
 * the weight/bias gradients sum over vectors and run OpenMP over blocks of features, each
 * walking the vectors in order (fixed summation order for any thread count). */
#include <math.h>
#include <omp.h>

#include "nn/layers.h"

typedef struct {
    int features;
    float eps;
    size_t per_sample;     /* F-vectors per sample (numel / F) */
    double *mean, *rstd;   /* [vectors] of the last forward (arena) */
    double *acc;           /* [2F] weight/bias gradient sums (arena scratch) */
    int have_forward;
} ln_impl;

enum { P_WEIGHT, P_BIAS };

#define LN_PAR_MIN 32768

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
    l->acc = snn_arena_take(a, 2 * (size_t)l->features * sizeof(double));
    l->have_forward = 0;
}

static snn_status ln_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    ln_impl *l = m->impl;
    const long long V = (long long)(snn_rows(r) * l->per_sample);
    const size_t F = (size_t)l->features;
    const float *w = m->params[P_WEIGHT].data, *bias = m->params[P_BIAS].data;
    double *mean = l->mean, *rstd = l->rstd;
    const double eps = l->eps;
    if (!mean) return snn_error(SNN_E_STATE, "LayerNorm %s: reserve must run before forward", m->name);
#pragma omp parallel for schedule(static) if ((size_t)V * F >= LN_PAR_MIN)
    for (long long v = 0; v < V; v++) {
        const float *p = x + (size_t)v * F;
        float *q = y + (size_t)v * F;
        double s = 0.0;
        for (size_t j = 0; j < F; j++) s += p[j];
        const double mu = s / (double)F;
        double ss = 0.0;
        for (size_t j = 0; j < F; j++) {
            double d = (double)p[j] - mu;
            ss += d * d;
        }
        const double is = 1.0 / sqrt(ss / (double)F + eps);
        mean[v] = mu;
        rstd[v] = is;
        for (size_t j = 0; j < F; j++) q[j] = (float)((p[j] - mu) * is * w[j] + bias[j]);
    }
    l->have_forward = 1;
    return SNN_OK;
}

static snn_status ln_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                              const float *dy, float *dx) {
    (void)y;
    ln_impl *l = m->impl;
    if (!l->have_forward)
        return snn_error(SNN_E_STATE, "LayerNorm %s: backward called before forward", m->name);
    const long long V = (long long)(snn_rows(r) * l->per_sample);
    const size_t F = (size_t)l->features;
    const float *w = m->params[P_WEIGHT].data;
    float *dw = m->params[P_WEIGHT].grad, *db = m->params[P_BIAS].grad;
    const double *mean = l->mean, *rstd = l->rstd;
    double *acc = l->acc;
    const int par = (size_t)V * F >= LN_PAR_MIN;

    if (dx) {
        /* with g = dy * w: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) */
#pragma omp parallel for schedule(static) if (par)
        for (long long v = 0; v < V; v++) {
            const size_t o = (size_t)v * F;
            const double mu = mean[v], is = rstd[v];
            double s0 = 0.0, s1 = 0.0;
            for (size_t j = 0; j < F; j++) {
                double g = (double)dy[o + j] * w[j];
                s0 += g;
                s1 += g * ((x[o + j] - mu) * is);
            }
            const double a = s0 / (double)F, b = s1 / (double)F;
            for (size_t j = 0; j < F; j++) {
                double g = (double)dy[o + j] * w[j];
                double xh = (x[o + j] - mu) * is;
                dx[o + j] = (float)(is * (g - a - xh * b));
            }
        }
    }
#pragma omp parallel if (par)
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        size_t q = F / (size_t)nth, rem = F % (size_t)nth, t = (size_t)tid;
        size_t j0 = t * q + (t < rem ? t : rem), j1 = j0 + q + (t < rem ? 1 : 0);
        for (size_t j = j0; j < j1; j++) acc[j] = acc[F + j] = 0.0;
        for (long long v = 0; v < V; v++) {
            const size_t o = (size_t)v * F;
            const double mu = mean[v], is = rstd[v];
            for (size_t j = j0; j < j1; j++) {
                acc[j] += dy[o + j] * ((x[o + j] - mu) * is);
                acc[F + j] += dy[o + j];
            }
        }
        for (size_t j = j0; j < j1; j++) {
            dw[j] += (float)acc[j];
            db[j] += (float)acc[F + j];
        }
    }
    return SNN_OK;
}

static void ln_describe(const snn_module *m, snn_module_desc *d) {
    const ln_impl *l = m->impl;
    d->in_features = d->out_features = l->features;
    d->eps = l->eps;
}

static const snn_module_ops ln_ops = {
    .describe = ln_describe,
    .kind = "LayerNorm",
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
