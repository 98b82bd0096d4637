/* RMSNorm on the CPU: y = x / sqrt(mean(x²) + eps) · w over every F-vector on its own.
 * Backward with r = 1/rms, g = dy · w:  dx = r (g - x̂ · mean(g x̂)), dw += Σ_v dy · x̂.
 * Sums in double; dw walks the vectors in order (deterministic for any thread count). */
#include <math.h>

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
