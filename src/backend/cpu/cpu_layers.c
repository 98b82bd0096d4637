/* BatchNorm, dropout, token mean and the spiking self-attention core on the CPU: the
 * reference the modules (src/nn/batchnorm.c, src/nn/dropout.c, src/models/spikformer_parts.c)
 * computed themselves before they went through the op table; the arithmetic is theirs,
 * operation for operation.
 *
 * BatchNorm parallelism: each OpenMP thread owns a contiguous block of channels and walks the
 * rows in order, so every sum has the order backend.h fixes (bit-reproducible for any thread
 * count) and a [C] input (S = 1) is still read contiguously. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_layers.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"
#include "snn/rng.h"

/* Work below this many elements runs on one thread (a parallel region costs microseconds). */
#define BN_PAR_MIN 32768
#define PAR_MIN_WORK ((size_t)32768)

/* This thread's contiguous block [*c0, *c1) of the C channels. */
static void channel_block(int C, int *c0, int *c1) {
    int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    int q = C / nth, r = C % nth;
    *c0 = tid * q + (tid < r ? tid : r);
    *c1 = *c0 + q + (tid < r ? 1 : 0);
}

/* The per-(row, channel) sums in the order backend.h fixes: 32 lane partials (partial l adds
 * the k = l, l + 32, l + 64, ... in increasing k from +0.0), combined by the halving tree
 * a[l] += a[l + h] for h = 16, 8, 4, 2, 1. A GPU warp computes exactly this (one lane per
 * partial, coalesced loads, a shuffle tree), and the 32 independent accumulators vectorise
 * here. */
#define BN_LANES 32

static double lane_tree(double *a) {
    for (int h = BN_LANES / 2; h; h >>= 1)
        for (int l = 0; l < h; l++) a[l] = a[l] + a[l + h];
    return a[0];
}

/* Σ p[k] (mu NULL) or Σ (p[k] - *mu)². */
static double lane_sum(const float *p, size_t S, const double *mu) {
    double a[BN_LANES] = {0};
    size_t k0 = 0;
    if (!mu) {
        for (; k0 + BN_LANES <= S; k0 += BN_LANES)
            for (int l = 0; l < BN_LANES; l++) a[l] += p[k0 + l];
        for (size_t k = k0; k < S; k++) a[k - k0] += p[k];
    } else {
        const double m = *mu;
        for (; k0 + BN_LANES <= S; k0 += BN_LANES)
            for (int l = 0; l < BN_LANES; l++) {
                double d = (double)p[k0 + l] - m;
                a[l] += d * d;
            }
        for (size_t k = k0; k < S; k++) {
            double d = (double)p[k] - m;
            a[k - k0] += d * d;
        }
    }
    return lane_tree(a);
}

/* s0 = Σ dy[k], s1 = Σ dy[k]·((x[k] - mu)·is). */
static void lane_grad_sums(const float *x, const float *dy, size_t S, double mu, double is, double *s0,
                           double *s1) {
    double a[BN_LANES] = {0}, b[BN_LANES] = {0};
    size_t k0 = 0;
    for (; k0 + BN_LANES <= S; k0 += BN_LANES)
        for (int l = 0; l < BN_LANES; l++) {
            a[l] += dy[k0 + l];
            b[l] += dy[k0 + l] * ((x[k0 + l] - mu) * is);
        }
    for (size_t k = k0; k < S; k++) {
        a[k - k0] += dy[k];
        b[k - k0] += dy[k] * ((x[k] - mu) * is);
    }
    *s0 = lane_tree(a);
    *s1 = lane_tree(b);
}

/* The CPU stores activations in FP32 (batchnorm_x16 = 0): a 16-bit x is refused. */
static snn_status bn_args(const char *what, snn_dtype xt, size_t B, int C, size_t S, const void *x) {
    if (xt != SNN_F32)
        return snn_error(SNN_E_INVALID, "%s: the CPU table takes x in f32 only (got %s)", what, snn_dtype_name(xt));
    if (C <= 0 || (B && S && !x)) return snn_error(SNN_E_INVALID, "%s: bad arguments (C = %d)", what, C);
    return SNN_OK;
}

snn_status snn_cpu_batchnorm_stats(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, const void *xv,
                                   const double *sum, double count, double *acc) {
    (void)be;
    SNN_TRY(bn_args("batchnorm_stats", xt, B, C, S, xv));
    const float *x = xv;
    if (!acc) return snn_error(SNN_E_INVALID, "batchnorm_stats: acc is NULL");
    const size_t Cz = (size_t)C;
    const int par = B * Cz * S >= BN_PAR_MIN;
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block(C, &c0, &c1);
        for (int c = c0; c < c1; c++) acc[c] = 0.0;
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                /* the second pass around the mean: no cancellation as in E[x^2] - E[x]^2 */
                const double mu = sum ? sum[c] / count : 0.0;
                acc[c] += lane_sum(x + (i * Cz + (size_t)c) * S, S, sum ? &mu : NULL);
            }
    }
    return SNN_OK;
}

snn_status snn_cpu_batchnorm_forward(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, int training,
                                     float eps, float momentum, double count, const double *sum,
                                     const double *sqsum, const void *xv, const float *w, const float *b,
                                     float *running_mean, float *running_var, double *mean, double *invstd,
                                     float *y) {
    (void)be;
    SNN_TRY(bn_args("batchnorm_forward", xt, B, C, S, xv));
    const float *x = xv;
    if (!w || !b || !running_mean || !running_var || !mean || !invstd || (B && S && !y) ||
        (training && (!sum || !sqsum)))
        return snn_error(SNN_E_INVALID, "batchnorm_forward: NULL argument");
    const size_t Cz = (size_t)C;
    const double mom = momentum, e = eps;
    const int par = B * Cz * S >= BN_PAR_MIN;
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block(C, &c0, &c1);
        if (training) {
            for (int c = c0; c < c1; c++) {
                double mu = sum[c] / count;
                double var = sqsum[c] / count;
                double unbiased = sqsum[c] / (count - 1.0);
                mean[c] = mu;
                invstd[c] = 1.0 / sqrt(var + e);
                running_mean[c] = (float)((1.0 - mom) * running_mean[c] + mom * mu);
                running_var[c] = (float)((1.0 - mom) * running_var[c] + mom * unbiased);
            }
        } else {
            for (int c = c0; c < c1; c++) {
                mean[c] = running_mean[c];
                invstd[c] = 1.0 / sqrt((double)running_var[c] + e);
            }
        }
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * Cz + (size_t)c) * S;
                const double mu = mean[c], sc = invstd[c] * w[c], sh = b[c];
                for (size_t k = 0; k < S; k++) y[o + k] = (float)((x[o + k] - mu) * sc + sh);
            }
    }
    return SNN_OK;
}

snn_status snn_cpu_batchnorm_backward_sums(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                           const void *xv, const float *dy, const double *mean,
                                           const double *invstd, double *gsum, double *gdot, float *dw,
                                           float *db) {
    (void)be;
    SNN_TRY(bn_args("batchnorm_backward_sums", xt, B, C, S, xv));
    const float *x = xv;
    if (!mean || !invstd || !gsum || !gdot || !dw || !db || (B && S && !dy))
        return snn_error(SNN_E_INVALID, "batchnorm_backward_sums: NULL argument");
    const size_t Cz = (size_t)C;
    const int par = B * Cz * S >= BN_PAR_MIN;
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block(C, &c0, &c1);
        /* sum dy and sum dy * x_hat: the bias and weight gradients, and (in training) the
         * two projections the batch statistics subtract from dx */
        for (int c = c0; c < c1; c++) gsum[c] = gdot[c] = 0.0;
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * Cz + (size_t)c) * S;
                double s0, s1;
                lane_grad_sums(x + o, dy + o, S, mean[c], invstd[c], &s0, &s1);
                gsum[c] += s0;
                gdot[c] += s1;
            }
        for (int c = c0; c < c1; c++) {
            db[c] += (float)gsum[c];
            dw[c] += (float)gdot[c];
        }
    }
    return SNN_OK;
}

snn_status snn_cpu_batchnorm_backward_input(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                            int training, double count, const void *xv, const float *dy,
                                            const float *w, const double *mean, const double *invstd,
                                            const double *gsum, const double *gdot, void *dxv) {
    (void)be;
    SNN_TRY(bn_args("batchnorm_backward_input", xt, B, C, S, xv));
    const float *x = xv;
    float *dx = dxv;
    if (!w || !mean || !invstd || (B && S && (!dy || !dx)) || (training && (!gsum || !gdot)))
        return snn_error(SNN_E_INVALID, "batchnorm_backward_input: NULL argument");
    const size_t Cz = (size_t)C;
    const int par = B * Cz * S >= BN_PAR_MIN;
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block(C, &c0, &c1);
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * Cz + (size_t)c) * S;
                const double mu = mean[c], is = invstd[c], k_ = w[c] * is;
                if (training) {
                    /* dx = w/std * (dy - mean(dy) - x_hat * mean(dy * x_hat)) */
                    const double a = gsum[c] / count, bb = gdot[c] / count;
                    for (size_t k = 0; k < S; k++) {
                        double xh = (x[o + k] - mu) * is;
                        dx[o + k] = (float)(k_ * (dy[o + k] - a - xh * bb));
                    }
                } else {
                    for (size_t k = 0; k < S; k++) dx[o + k] = (float)(k_ * dy[o + k]);
                }
            }
    }
    return SNN_OK;
}

snn_status snn_cpu_dropout_mask(const snn_backend *be, uint64_t seed, uint64_t stream, uint64_t base, float p,
                                size_t n, float *mask) {
    (void)be;
    if (n && !mask) return snn_error(SNN_E_INVALID, "dropout_mask: mask is NULL");
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for schedule(static) if (n * 8 > PAR_MIN_WORK)
    for (long i = 0; i < (long)n; i++)
        mask[i] = snn_rng_uniform(seed, stream, base + (uint64_t)i) >= p ? scale : 0.0f;
    return SNN_OK;
}

snn_status snn_cpu_dropout_apply(const snn_backend *be, int T, size_t n, const float *x, const float *mask,
                                 float *y) {
    (void)be;
    if (T < 0 || (T && n && (!x || !mask || !y))) return snn_error(SNN_E_INVALID, "dropout_apply: bad arguments");
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float *yt = y + (size_t)t * n;
#pragma omp parallel for schedule(static) if (n > PAR_MIN_WORK)
        for (long i = 0; i < (long)n; i++) yt[i] = xt[i] * mask[i];
    }
    return SNN_OK;
}

snn_status snn_cpu_token_mean_forward(const snn_backend *be, size_t rows, int L, const float *x, float *y) {
    (void)be;
    if (L <= 0 || (rows && (!x || !y))) return snn_error(SNN_E_INVALID, "token_mean_forward: bad arguments");
    const float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {
        const float *p = x + i * (size_t)L;
        float s = 0;
        for (int l = 0; l < L; l++) s += p[l];
        y[i] = s * inv;
    }
    return SNN_OK;
}

snn_status snn_cpu_token_mean_backward(const snn_backend *be, size_t rows, int L, const float *dy, float *dx) {
    (void)be;
    if (L <= 0 || (rows && (!dy || !dx))) return snn_error(SNN_E_INVALID, "token_mean_backward: bad arguments");
    const float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {
        float g = dy[i] * inv;
        float *p = dx + i * (size_t)L;
        for (int l = 0; l < L; l++) p[l] = g;
    }
    return SNN_OK;
}

/* ---- spiking self-attention: two FP32 GEMMs per (row, head) forward, four backward; the
 * work area holds A [B][heads][d][d] (saved by the forward) and dA (backward scratch) ---- */

static snn_status ssa_args(const char *what, size_t B, int C, int L, int heads, const void *x, const void *y,
                           const void *work) {
    if (C <= 0 || L <= 0 || heads <= 0 || C % heads)
        return snn_error(SNN_E_INVALID, "%s: C = %d, L = %d, heads = %d (C must be a positive multiple of heads)",
                         what, C, L, heads);
    if (B && (!x || !y || !work)) return snn_error(SNN_E_INVALID, "%s: NULL argument", what);
    return SNN_OK;
}

size_t snn_cpu_ssa_work_bytes(const snn_backend *be, size_t B, int C, int L, int heads) {
    (void)be;
    (void)L;
    if (C <= 0 || heads <= 0 || C % heads) return 0;
    const size_t d = (size_t)(C / heads);
    return 2 * B * (size_t)heads * d * d * sizeof(float);
}

snn_status snn_cpu_ssa_forward(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                               const float *x, float *y, void *work) {
    SNN_TRY(ssa_args("ssa_forward", B, C, L, heads, x, y, work));
    const int H = heads, d = C / H;
    float *attn = work;
    for (size_t b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const float *q = x + b * 3 * (size_t)C * L + (size_t)h * d * L;
            const float *k = q + (size_t)C * L;
            const float *v = k + (size_t)C * L;
            float *A = attn + (b * H + (size_t)h) * d * d;
            float *out = y + b * (size_t)C * L + (size_t)h * d * L;
            snn_cpu_gemm_f32(0, 1, d, d, L, 1.0f, v, L, k, L, 0.0f, A, d);
            snn_cpu_gemm_f32(0, 0, d, L, d, scale, A, d, q, L, 0.0f, out, L);
        }
    }
    (void)be;
    return SNN_OK;
}

snn_status snn_cpu_ssa_backward(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                                const float *x, const float *dy, float *dx, void *work) {
    SNN_TRY(ssa_args("ssa_backward", B, C, L, heads, x, dx, work));
    if (B && !dy) return snn_error(SNN_E_INVALID, "ssa_backward: dy is NULL");
    const int H = heads, d = C / H;
    const float *attn = work;
    float *dAs = (float *)work + B * (size_t)H * d * d;
    for (size_t b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t off = b * 3 * (size_t)C * L + (size_t)h * d * L;
            const float *q = x + off, *k = q + (size_t)C * L, *v = k + (size_t)C * L;
            float *dq = dx + off, *dk = dq + (size_t)C * L, *dv = dk + (size_t)C * L;
            const float *A = attn + (b * H + (size_t)h) * d * d;
            float *dA = dAs + (b * H + (size_t)h) * d * d;
            const float *g = dy + b * (size_t)C * L + (size_t)h * d * L;
            /* Y = s A Q: dA = s dY Q^T, dQ = s A^T dY; A = V K^T: dV = dA K, dK = dA^T V */
            snn_cpu_gemm_f32(0, 1, d, d, L, scale, g, L, q, L, 0.0f, dA, d);
            snn_cpu_gemm_f32(1, 0, d, L, d, scale, A, d, g, L, 0.0f, dq, L);
            snn_cpu_gemm_f32(0, 0, d, L, d, 1.0f, dA, d, k, L, 0.0f, dv, L);
            snn_cpu_gemm_f32(1, 0, d, L, d, 1.0f, dA, d, v, L, 0.0f, dk, L);
        }
    }
    (void)be;
    return SNN_OK;
}
