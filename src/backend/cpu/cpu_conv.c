/* The CPU table's convolution and pooling entries (backend.h): the batched im2col / col2im
 * over cpu_im2col.c's one-sample routines, the layout changes around a convolution's GEMM,
 * its bias gradient, the grouped-dW reduction, a batched transpose, and max / average
 * pooling (the loops src/nn/pool.c ran before the op table). Loops run OpenMP over samples,
 * channels or planes; every output element is computed by one thread in a fixed order, so
 * the results do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_im2col.h"
#include "core/error_internal.h"

/* Loops touching fewer floats than this stay on one thread (nn/layers_conv.h's
 * SNN_PAR_MIN_WORK: a parallel region costs microseconds). */
#define PAR_MIN_WORK ((size_t)32768)

static snn_status check_geom(const char *what, const snn_conv_geom *g, int nb) {
    if (!g || nb < 0 || g->C <= 0 || g->H <= 0 || g->W <= 0 || g->kh <= 0 || g->kw <= 0 || g->sh <= 0 ||
        g->sw <= 0 || g->ph < 0 || g->pw < 0 || g->Ho <= 0 || g->Wo <= 0 ||
        g->Ho != (g->H + 2 * g->ph - g->kh) / g->sh + 1 || g->Wo != (g->W + 2 * g->pw - g->kw) / g->sw + 1 ||
        g->H + 2 * g->ph < g->kh || g->W + 2 * g->pw < g->kw)
        return snn_error(SNN_E_INVALID, "%s: bad geometry or sample count", what);
    return SNN_OK;
}

snn_status snn_cpu_im2col(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, float *col,
                          size_t ld) {
    (void)be;
    SNN_TRY(check_geom("im2col", g, nb));
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo, in_n = (size_t)g->C * g->H * g->W;
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "im2col: ld %zu < %d samples x %zu", ld, nb, P);
    if (nb && (!x || !col)) return snn_error(SNN_E_INVALID, "im2col: NULL buffer");
    /* nb = 1 (the per-sample convolution, itself inside a parallel region) stays serial */
#pragma omp parallel for schedule(static) if(nb > 1 && (size_t)nb * K * P > PAR_MIN_WORK)
    for (int s = 0; s < nb; s++) snn_im2col_f32(g, x + (size_t)s * in_n, col + (size_t)s * P, ld);
    return SNN_OK;
}

/* x[i] = round_to(t, x[i]) for i < n (t SNN_F32: nothing). */
static snn_status round_out(snn_dtype t, float *x, size_t n, const char *what) {
    if (t == SNN_F32) return SNN_OK;
    if (t != SNN_F16 && t != SNN_BF16) return snn_error(SNN_E_INVALID, "%s: round must be f32, f16 or bf16", what);
    for (size_t i = 0; i < n; i++) x[i] = snn_round_to(t, x[i], 0);
    return SNN_OK;
}

snn_status snn_cpu_col2im(const snn_backend *be, const snn_conv_geom *g, int nb, const float *col, size_t ld,
                          snn_dtype round, float *dx) {
    (void)be;
    SNN_TRY(check_geom("col2im", g, nb));
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo, in_n = (size_t)g->C * g->H * g->W;
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "col2im: ld %zu < %d samples x %zu", ld, nb, P);
    if (nb && (!dx || !col)) return snn_error(SNN_E_INVALID, "col2im: NULL buffer");
#pragma omp parallel for schedule(static) if(nb > 1 && (size_t)nb * K * P > PAR_MIN_WORK)
    for (int s = 0; s < nb; s++) snn_col2im_f32(g, col + (size_t)s * P, ld, dx + (size_t)s * in_n);
    return round_out(round, dx, (size_t)nb * in_n, "col2im");
}

snn_status snn_cpu_conv_scatter(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld,
                                const float *bias, snn_dtype round, float *y) {
    (void)be;
    if (nb < 0 || O < 0) return snn_error(SNN_E_INVALID, "conv_scatter: negative size");
    if (!nb || !O || !P) return SNN_OK;
    if (!y || (!src && !bias)) return snn_error(SNN_E_INVALID, "conv_scatter: NULL buffer");
    if (src && ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "conv_scatter: ld %zu < %d x %zu", ld, nb, P);
    const size_t out_n = (size_t)O * P;
#pragma omp parallel for schedule(static) if(nb > 1 && (size_t)nb * out_n > PAR_MIN_WORK)
    for (int s = 0; s < nb; s++) {
        float *ys = y + (size_t)s * out_n;
        for (int o = 0; o < O; o++) {
            float *dst = ys + (size_t)o * P, bo = bias ? bias[o] : 0.0f;
            if (!src) {
                for (size_t p = 0; p < P; p++) dst[p] = bo;
                continue;
            }
            const float *row = src + (size_t)o * ld + (size_t)s * P;
            for (size_t p = 0; p < P; p++) dst[p] = row[p] + bo;
        }
    }
    return round_out(round, y, (size_t)nb * out_n, "conv_scatter");
}

snn_status snn_cpu_conv_gather(const snn_backend *be, int nb, int O, size_t P, const float *src, float *dst,
                               size_t ld) {
    (void)be;
    if (nb < 0 || O < 0) return snn_error(SNN_E_INVALID, "conv_gather: negative size");
    if (!nb || !O || !P) return SNN_OK;
    if (!src || !dst) return snn_error(SNN_E_INVALID, "conv_gather: NULL buffer");
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "conv_gather: ld %zu < %d x %zu", ld, nb, P);
    const size_t out_n = (size_t)O * P;
#pragma omp parallel for schedule(static) if(nb > 1 && (size_t)nb * out_n > PAR_MIN_WORK)
    for (int s = 0; s < nb; s++) {
        const float *ss = src + (size_t)s * out_n;
        for (int o = 0; o < O; o++) memcpy(dst + (size_t)o * ld + (size_t)s * P, ss + (size_t)o * P, sizeof(float) * P);
    }
    return SNN_OK;
}

snn_status snn_cpu_conv_bias_grad(const snn_backend *be, size_t B, int O, size_t P, const float *dy, float *db) {
    (void)be;
    if (O < 0) return snn_error(SNN_E_INVALID, "conv_bias_grad: negative size");
    if (!O) return SNN_OK;
    if (!db || (B && P && !dy)) return snn_error(SNN_E_INVALID, "conv_bias_grad: NULL buffer");
    const size_t out_n = (size_t)O * P;
    /* one thread per channel, samples in order: deterministic */
#pragma omp parallel for schedule(static) if(B * out_n > PAR_MIN_WORK)
    for (int o = 0; o < O; o++) {
        double acc = 0.0;
        for (size_t b = 0; b < B; b++) {
            const float *d = dy + b * out_n + (size_t)o * P;
            for (size_t p = 0; p < P; p++) acc += d[p];
        }
        db[o] += (float)acc;
    }
    return SNN_OK;
}

snn_status snn_cpu_sum_groups_add(const snn_backend *be, int groups, size_t n, const float *part, float *dst) {
    (void)be;
    if (groups < 0) return snn_error(SNN_E_INVALID, "sum_groups_add: negative group count");
    if (!n) return SNN_OK;
    if (!dst || (groups && !part)) return snn_error(SNN_E_INVALID, "sum_groups_add: NULL buffer");
#pragma omp parallel for schedule(static) if(n * (size_t)groups > PAR_MIN_WORK)
    for (long i = 0; i < (long)n; i++) {
        float acc = 0.0f;
        for (int gi = 0; gi < groups; gi++) acc += part[(size_t)gi * n + (size_t)i];
        dst[i] += acc;
    }
    return SNN_OK;
}

/* Tiles of 32 x 32: reads and writes both walk memory in rows of the tile. */
#define TR_TILE 32

snn_status snn_cpu_transpose(const snn_backend *be, size_t B, int R, int C, const float *x, float *y) {
    (void)be;
    if (R < 0 || C < 0) return snn_error(SNN_E_INVALID, "transpose: negative size");
    if (!B || !R || !C) return SNN_OK;
    if (!x || !y) return snn_error(SNN_E_INVALID, "transpose: NULL buffer");
    const size_t n = (size_t)R * C;
#pragma omp parallel for schedule(static) if(B * n > PAR_MIN_WORK)
    for (long b = 0; b < (long)B; b++) {
        const float *xb = x + (size_t)b * n;
        float *yb = y + (size_t)b * n;
        for (int r0 = 0; r0 < R; r0 += TR_TILE)
            for (int c0 = 0; c0 < C; c0 += TR_TILE) {
                const int r1 = r0 + TR_TILE < R ? r0 + TR_TILE : R, c1 = c0 + TR_TILE < C ? c0 + TR_TILE : C;
                for (int r = r0; r < r1; r++)
                    for (int c = c0; c < c1; c++) yb[(size_t)c * R + r] = xb[(size_t)r * C + c];
            }
    }
    return SNN_OK;
}

/* ---- pooling ---- */

static snn_status check_pool(const char *what, const snn_conv_geom *g) {
    SNN_TRY(check_geom(what, g, 1));
    if (g->ph > g->kh / 2 || g->pw > g->kw / 2)
        return snn_error(SNN_E_INVALID, "%s: padding %dx%d exceeds half the kernel %dx%d", what, g->ph, g->pw, g->kh,
                         g->kw);
    return SNN_OK;
}

/* Window [*a, *b) of output o along one axis, clipped to the image. */
static inline void window(int o, int s, int p, int k, int n, int *a, int *b) {
    int lo = o * s - p, hi = lo + k;
    *a = lo < 0 ? 0 : lo;
    *b = hi > n ? n : hi;
}

snn_status snn_cpu_maxpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y,
                                   int32_t *argmax) {
    (void)be;
    SNN_TRY(check_pool("maxpool_forward", g));
    if (!x || !y || !argmax) return snn_error(SNN_E_INVALID, "maxpool_forward: NULL buffer");
    const long planes = g->C;
    const size_t in_n = (size_t)g->H * g->W, out_n = (size_t)g->Ho * g->Wo;
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * in_n;
        float *yp = y + (size_t)pl * out_n;
        int32_t *ap = argmax + (size_t)pl * out_n;
        for (int oh = 0; oh < g->Ho; oh++) {
            int h0, h1;
            window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
            for (int ow = 0; ow < g->Wo; ow++) {
                int w0, w1;
                window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
                size_t o = (size_t)oh * g->Wo + ow;
                float best = -INFINITY;
                int32_t arg = h0 * g->W + w0;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) {
                        float v = xp[(size_t)ih * g->W + iw];
                        /* first maximum wins; a NaN propagates (PyTorch does the same) */
                        if (v > best || isnan(v)) {
                            best = v;
                            arg = ih * g->W + iw;
                            if (isnan(v)) goto done;
                        }
                    }
            done:
                yp[o] = best;
                ap[o] = arg;
            }
        }
    }
    return SNN_OK;
}

snn_status snn_cpu_maxpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy,
                                    const int32_t *argmax, float *dx) {
    (void)be;
    SNN_TRY(check_pool("maxpool_backward", g));
    if (!dy || !dx || !argmax) return snn_error(SNN_E_INVALID, "maxpool_backward: NULL buffer");
    const long planes = g->C;
    const size_t in_n = (size_t)g->H * g->W, out_n = (size_t)g->Ho * g->Wo;
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * in_n;
        const float *gp = dy + (size_t)pl * out_n;
        const int32_t *ap = argmax + (size_t)pl * out_n;
        memset(dp, 0, sizeof(float) * in_n);
        for (size_t o = 0; o < out_n; o++) dp[ap[o]] += gp[o];
    }
    return SNN_OK;
}

snn_status snn_cpu_avgpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y) {
    (void)be;
    SNN_TRY(check_pool("avgpool_forward", g));
    if (!x || !y) return snn_error(SNN_E_INVALID, "avgpool_forward: NULL buffer");
    const long planes = g->C;
    const size_t in_n = (size_t)g->H * g->W, out_n = (size_t)g->Ho * g->Wo;
    const float inv = 1.0f / (float)(g->kh * g->kw);
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * in_n;
        float *yp = y + (size_t)pl * out_n;
        for (int oh = 0; oh < g->Ho; oh++) {
            int h0, h1;
            window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
            for (int ow = 0; ow < g->Wo; ow++) {
                int w0, w1;
                window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
                float acc = 0.0f;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) acc += xp[(size_t)ih * g->W + iw];
                yp[(size_t)oh * g->Wo + ow] = acc * inv;
            }
        }
    }
    return SNN_OK;
}

snn_status snn_cpu_avgpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy, float *dx) {
    (void)be;
    SNN_TRY(check_pool("avgpool_backward", g));
    if (!dy || !dx) return snn_error(SNN_E_INVALID, "avgpool_backward: NULL buffer");
    const long planes = g->C;
    const size_t in_n = (size_t)g->H * g->W, out_n = (size_t)g->Ho * g->Wo;
    const float inv = 1.0f / (float)(g->kh * g->kw);
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * in_n;
        const float *gp = dy + (size_t)pl * out_n;
        memset(dp, 0, sizeof(float) * in_n);
        for (int oh = 0; oh < g->Ho; oh++) {
            int h0, h1;
            window(oh, g->sh, g->ph, g->kh, g->H, &h0, &h1);
            for (int ow = 0; ow < g->Wo; ow++) {
                int w0, w1;
                window(ow, g->sw, g->pw, g->kw, g->W, &w0, &w1);
                float gv = gp[(size_t)oh * g->Wo + ow] * inv;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) dp[(size_t)ih * g->W + iw] += gv;
            }
        }
    }
    return SNN_OK;
}
