/* RMSNorm on the CPU: y = x / sqrt(mean(x²) + eps) · w over every F-vector on its own.
 * Backward with r = 1/rms, g = dy · w:  dx = r (g - x̂ · mean(g x̂)), dw += Σ_v dy · x̂.
 * Sums in double; dw walks the vectors in order (deterministic for any thread count). */
#include <math.h>
#include <omp.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"

snn_status snn_cpu_rmsnorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x,
                                   const float *w, float *y, double *rstd) {
    (void)be;
    if (F <= 0 || (V && (!x || !w || !y || !rstd))) return snn_error(SNN_E_INVALID, "rmsnorm: bad arguments");
    const size_t f = (size_t)F;
#pragma omp parallel for schedule(static) if (V * f >= 32768)
    for (size_t v = 0; v < V; v++) {
        const float *p = x + v * f;
        float *q = y + v * f;
        double ss = 0.0;
        for (size_t j = 0; j < f; j++) ss += (double)p[j] * p[j];
        double is = 1.0 / sqrt(ss / (double)F + eps);
        rstd[v] = is;
        for (size_t j = 0; j < f; j++) q[j] = (float)(p[j] * is * w[j]);
    }
    return SNN_OK;
}

snn_status snn_cpu_rmsnorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                    const double *rstd, const float *dy, float *dx, float *dw) {
    (void)be;
    if (F <= 0 || (V && (!x || !w || !rstd || !dy || !dw))) return snn_error(SNN_E_INVALID, "rmsnorm backward: bad arguments");
    const size_t f = (size_t)F;
    if (dx) {
#pragma omp parallel for schedule(static) if (V * f >= 32768)
        for (size_t v = 0; v < V; v++) {
            const size_t o = v * f;
            const double is = rstd[v];
            double s = 0.0;
            for (size_t j = 0; j < f; j++) s += (double)dy[o + j] * w[j] * (x[o + j] * is);
            const double c = s / (double)F;
            for (size_t j = 0; j < f; j++) dx[o + j] = (float)(is * ((double)dy[o + j] * w[j] - x[o + j] * is * c));
        }
    }
    for (size_t j = 0; j < f; j++) {
        double acc = 0.0;
        for (size_t v = 0; v < V; v++) acc += (double)dy[v * f + j] * (x[v * f + j] * rstd[v]);
        dw[j] += (float)acc;
    }
    return SNN_OK;
}

/* LayerNorm: per vector, mean and biased variance in double; the forward saves mean and
 * 1/std. Backward with g = dy · w: dx = rstd (g - mean(g) - x̂ · mean(g x̂)); the weight and
 * bias gradients run OpenMP over blocks of features, each walking the vectors in order
 * (fixed summation order for any thread count). */
#define LN_PAR_MIN 32768

snn_status snn_cpu_layernorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                                     const float *b, float *y, double *mean, double *rstd) {
    (void)be;
    if (F <= 0 || (V && (!x || !w || !b || !y || !mean || !rstd)))
        return snn_error(SNN_E_INVALID, "layernorm: bad arguments");
    const size_t f = (size_t)F;
    const double e = eps;
#pragma omp parallel for schedule(static) if (V * f >= LN_PAR_MIN)
    for (size_t v = 0; v < V; v++) {
        const float *p = x + v * f;
        float *q = y + v * f;
        double s = 0.0;
        for (size_t j = 0; j < f; j++) s += p[j];
        const double mu = s / (double)F;
        double ss = 0.0;
        for (size_t j = 0; j < f; j++) {
            double d = (double)p[j] - mu;
            ss += d * d;
        }
        const double is = 1.0 / sqrt(ss / (double)F + e);
        mean[v] = mu;
        rstd[v] = is;
        for (size_t j = 0; j < f; j++) q[j] = (float)((p[j] - mu) * is * w[j] + b[j]);
    }
    return SNN_OK;
}

size_t snn_cpu_layernorm_work_bytes(const snn_backend *be, size_t V, int F) {
    (void)be;
    (void)V;
    return 2 * (size_t)(F > 0 ? F : 0) * sizeof(double);
}

snn_status snn_cpu_layernorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                      const double *mean, const double *rstd, const float *dy, float *dx,
                                      const float *dx_add, float *dw,
                                      float *db, void *work) {
    (void)be;
    if (F <= 0 || (V && (!x || !w || !mean || !rstd || !dy || !dw || !db || !work)))
        return snn_error(SNN_E_INVALID, "layernorm backward: bad arguments");
    const size_t f = (size_t)F;
    double *acc = work;
    const int par = V * f >= LN_PAR_MIN;
    if (dx) {
#pragma omp parallel for schedule(static) if (par)
        for (size_t v = 0; v < V; v++) {
            const size_t o = v * f;
            const double mu = mean[v], is = rstd[v];
            double s0 = 0.0, s1 = 0.0;
            for (size_t j = 0; j < f; j++) {
                double g = (double)dy[o + j] * w[j];
                s0 += g;
                s1 += g * ((x[o + j] - mu) * is);
            }
            const double a = s0 / (double)F, c = s1 / (double)F;
            for (size_t j = 0; j < f; j++) {
                double g = (double)dy[o + j] * w[j];
                double xh = (x[o + j] - mu) * is;
                const float d = (float)(is * (g - a - xh * c));
                dx[o + j] = dx_add ? dx_add[o + j] + d : d;
            }
        }
    }
#pragma omp parallel if (par)
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        size_t q = f / (size_t)nth, rem = f % (size_t)nth, t = (size_t)tid;
        size_t j0 = t * q + (t < rem ? t : rem), j1 = j0 + q + (t < rem ? 1 : 0);
        for (size_t j = j0; j < j1; j++) acc[j] = acc[f + j] = 0.0;
        for (size_t v = 0; v < V; v++) {
            const size_t o = v * f;
            const double mu = mean[v], is = rstd[v];
            for (size_t j = j0; j < j1; j++) {
                acc[j] += dy[o + j] * ((x[o + j] - mu) * is);
                acc[f + j] += dy[o + j];
            }
        }
        for (size_t j = j0; j < j1; j++) {
            dw[j] += (float)acc[j];
            db[j] += (float)acc[f + j];
        }
    }
    return SNN_OK;
}
