/* Elementwise entries and reductions of the CPU table. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"

/* Below this many elements a parallel region costs more than it saves. */
#define CPU_PAR_MIN ((size_t)32768)

snn_status snn_cpu_cast(const snn_backend *be, snn_dtype t, void *dst, const float *src, size_t n) {
    (void)be;
    if (n && (!dst || !src)) return snn_error(SNN_E_INVALID, "cast: NULL buffer");
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16) return snn_error(SNN_E_INVALID, "cast: target must be f32, f16 or bf16");
    return n ? snn_convert(t, dst, SNN_F32, src, n, 0) : SNN_OK;
}

snn_status snn_cpu_round(const snn_backend *be, snn_dtype t, float *dst, const float *src, size_t n) {
    (void)be;
    if (n && (!dst || !src)) return snn_error(SNN_E_INVALID, "round: NULL buffer");
    if (t == SNN_F32) {
        if (dst != src) memmove(dst, src, n * sizeof(float));
        return SNN_OK;
    }
    if (t != SNN_F16 && t != SNN_BF16) return snn_error(SNN_E_INVALID, "round: target must be f32, f16 or bf16");
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] = snn_round_to(t, src[i], 0);
    return SNN_OK;
}

snn_status snn_cpu_scale(const snn_backend *be, float *dst, const float *src, float s, size_t n) {
    (void)be;
    if (n && (!dst || !src)) return snn_error(SNN_E_INVALID, "scale: NULL buffer");
    /* the loss scaler's unscale and clipping run this over every gradient */
#pragma omp parallel for simd schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = src[i] * s;
    return SNN_OK;
}

snn_status snn_cpu_add(const snn_backend *be, float *dst, const float *a, const float *b, size_t n) {
    (void)be;
    if (n && (!dst || !a || !b)) return snn_error(SNN_E_INVALID, "add: NULL buffer");
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
    return SNN_OK;
}

/* GELU, exact form: y = x Φ(x) = 0.5 x (1 + erf(x / √2)); dy/dx = Φ(x) + x φ(x). */
snn_status snn_cpu_gelu_forward(const snn_backend *be, const float *x, float *y, size_t n) {
    (void)be;
    if (n && (!x || !y)) return snn_error(SNN_E_INVALID, "gelu: NULL buffer");
#pragma omp parallel for schedule(static) if (n * 8 > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
    return SNN_OK;
}

snn_status snn_cpu_gelu_backward(const snn_backend *be, const float *x, const float *dy, float *dx, size_t n) {
    (void)be;
    if (n && (!x || !dy || !dx)) return snn_error(SNN_E_INVALID, "gelu backward: NULL buffer");
    const float inv_sqrt_2pi = 0.3989422804014327f;
#pragma omp parallel for schedule(static) if (n * 8 > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
        float pdf = inv_sqrt_2pi * expf(-0.5f * v * v);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
    return SNN_OK;
}

snn_status snn_cpu_colsum16_add(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out) {
    (void)be;
    if (t != SNN_F16 && t != SNN_BF16) return snn_error(SNN_E_INVALID, "colsum16: type must be f16 or bf16");
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum16: negative size");
    if (rows > 0 && cols > 0 && (!x || !out)) return snn_error(SNN_E_INVALID, "colsum16: NULL buffer");
    const uint16_t *h = x;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            uint16_t b = h[(size_t)i * cols + j];
            out[j] += t == SNN_F16 ? snn_f16_to_f32(b) : snn_bf16_to_f32(b);
        }
    return SNN_OK;
}

snn_status snn_cpu_colsum_add(const snn_backend *be, const float *x, int rows, int cols, float *out) {
    (void)be;
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum: negative size");
    if (rows > 0 && cols > 0 && (!x || !out)) return snn_error(SNN_E_INVALID, "colsum: NULL buffer");
    for (int i = 0; i < rows; i++) {
        const float *r = x + (size_t)i * cols;
        for (int j = 0; j < cols; j++) out[j] += r[j];
    }
    return SNN_OK;
}

/* The sum is split into a fixed number of chunks that depends only on n, each summed in
 * double, then the chunk sums are added in order: the same bits whatever the number of
 * threads (gradient-norm clipping depends on it). */
#define SUMSQ_CHUNKS 256
#define SUMSQ_PAR_MIN 65536

snn_status snn_cpu_sumsq(const snn_backend *be, const float *x, size_t n, double *out) {
    (void)be;
    if (!out || (n && !x)) return snn_error(SNN_E_INVALID, "sumsq: NULL buffer");
    double part[SUMSQ_CHUNKS];
    const size_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= SUMSQ_PAR_MIN)
    for (int c = 0; c < SUMSQ_CHUNKS; c++) {
        size_t lo = (size_t)c * chunk, hi = lo + chunk;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < SUMSQ_CHUNKS; c++) total += part[c];
    *out = total;
    return SNN_OK;
}

snn_status snn_cpu_nonfinite(const snn_backend *be, const float *x, size_t n, int *found) {
    (void)be;
    if (!found || (n && !x)) return snn_error(SNN_E_INVALID, "nonfinite: NULL buffer");
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
    *found = bad;
    return SNN_OK;
}
