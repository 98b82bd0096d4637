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

snn_status snn_cpu_add_rounded(const snn_backend *be, snn_dtype t, float *dst, const float *a, const float *b,
                               size_t n) {
    (void)be;
    if (n && (!dst || !a || !b)) return snn_error(SNN_E_INVALID, "add_rounded: NULL buffer");
    if (t == SNN_F32) return snn_cpu_add(be, dst, a, b, n);
    if (t != SNN_F16 && t != SNN_BF16) return snn_error(SNN_E_INVALID, "add_rounded: type must be f32, f16 or bf16");
#pragma omp parallel for schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = a[i] + snn_round_to(t, b[i], 0);
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

/* backend.h's column-sum order: 32 lane partials, a halving tree, then into out. Blocks of
 * 64 columns keep the 32 x 64 partials on the stack (8 KiB); columns are independent, so the
 * blocks run in parallel without changing a bit. LOAD(i) reads element i as a float. */
#define COLSUM_LANES 32
#define COLSUM_BLOCK 64
#define COLSUM_BODY(LOAD)                                                                       \
    _Pragma("omp parallel for schedule(static) if ((size_t)rows * (size_t)cols > CPU_PAR_MIN)") \
    for (int j0 = 0; j0 < cols; j0 += COLSUM_BLOCK) {                                           \
        const int w = cols - j0 < COLSUM_BLOCK ? cols - j0 : COLSUM_BLOCK;                      \
        float a[COLSUM_LANES][COLSUM_BLOCK];                                                    \
        memset(a, 0, sizeof a);                                                                 \
        for (int i = 0; i < rows; i++) {                                                        \
            float *al = a[i % COLSUM_LANES];                                                    \
            const size_t base = (size_t)i * (size_t)cols + (size_t)j0;                          \
            for (int k = 0; k < w; k++) al[k] += LOAD(base + (size_t)k);                        \
        }                                                                                       \
        for (int h = COLSUM_LANES / 2; h >= 1; h /= 2)                                          \
            for (int l = 0; l < h; l++)                                                         \
                for (int k = 0; k < w; k++) a[l][k] += a[l + h][k];                             \
        for (int k = 0; k < w; k++) out[j0 + k] += a[0][k];                                     \
    }

static inline float ld_bf16(const uint16_t *h, size_t i) { return snn_bf16_to_f32(h[i]); }
static inline float ld_f16(const uint16_t *h, size_t i) { return snn_f16_to_f32(h[i]); }
static inline float ld_e4m3(const uint8_t *q, size_t i) { return snn_e4m3_to_f32(q[i]); }

snn_status snn_cpu_colsum16_add(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out) {
    (void)be;
    if (t != SNN_F16 && t != SNN_BF16 && t != SNN_F8E4M3)
        return snn_error(SNN_E_INVALID, "colsum16: type must be f16, bf16 or f8e4m3");
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum16: negative size");
    if (rows > 0 && cols > 0 && (!x || !out)) return snn_error(SNN_E_INVALID, "colsum16: NULL buffer");
    const uint16_t *h = x;
#define LD_BF16(i) ld_bf16(h, (i))
#define LD_F16(i) ld_f16(h, (i))
    if (t == SNN_F8E4M3) {
        const uint8_t *q = x;
#define LD_E4M3(i) ld_e4m3(q, (i))
        COLSUM_BODY(LD_E4M3)
#undef LD_E4M3
    } else if (t == SNN_BF16) {
        COLSUM_BODY(LD_BF16)
    } else {
        COLSUM_BODY(LD_F16)
    }
#undef LD_BF16
#undef LD_F16
    return SNN_OK;
}

snn_status snn_cpu_colsum_add(const snn_backend *be, const float *x, int rows, int cols, float *out) {
    (void)be;
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum: negative size");
    if (rows > 0 && cols > 0 && (!x || !out)) return snn_error(SNN_E_INVALID, "colsum: NULL buffer");
#define LD_F32(i) x[(i)]
    COLSUM_BODY(LD_F32)
#undef LD_F32
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
