/* Batch norm and token mean on the GPU (interface: cuda_layers.h; references:
 * src/nn/batchnorm.c and the TokenMean module of src/models/spikformer_parts.c).
 *
 * Batch-norm statistics: a two-stage reduction with FP64 accumulation.
 *   1. stats: one block per (channel, chunk); a chunk is a range of rows b (and, when that
 *      gives too few blocks, of positions s) of the channel's B*S values. Each thread sums
 *      its values in double, the block reduces in a fixed tree and writes one partial
 *      (up to three doubles) to `work`.
 *   2. finish: one warp per channel adds its chunk partials in a fixed order and turns them
 *      into the statistics and per-channel coefficients of the elementwise pass.
 *   3. apply: one elementwise pass (4 floats per thread where alignment allows).
 * Why FP64: the CPU module (the reference) accumulates in double; a per-thread FP32 sum over
 * hundreds of values would lose about 1e-5 relative, the test's tolerance. The H200 runs
 * FP64 adds at half the FP32 rate, far above what these memory-bound passes need.
 * The variance is one pass over shifted values: sums of d = x - K and d^2 with K = the
 * channel's first value (x[0][c][0]); var = (sum d^2 - (sum d)^2 / n) / n. Shifting by a
 * sample of the data removes the cancellation of E[x^2] - E[x]^2 when |mean| >> std, so one
 * read of x suffices instead of the CPU's two passes.
 * The chunking depends on (B, C, S) only, not on the GPU, so results are bit-reproducible
 * across runs and devices of the same architecture. No atomics anywhere. */
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"

/* Aim for this many stats blocks (the H200 has 132 SMs: ~8 blocks of 256 threads each), but
 * give every block at least BN_MIN_CHUNK values so the partials stay few. */
#define BN_TARGET_BLOCKS 1024
#define BN_MIN_CHUNK 4096
#define BN_THREADS 256
#define BN_PART 4 /* doubles per partial (3 used) */

typedef struct {
    int rb, nb; /* rows per chunk, row chunks */
    int sb, ns; /* positions per chunk, position chunks */
} bn_plan;

static bn_plan bn_plan_of(int B, int C, int S) {
    const long long total = (long long)B * S;
    long long want = (BN_TARGET_BLOCKS + C - 1) / C, cap = total / BN_MIN_CHUNK;
    if (cap < 1) cap = 1;
    if (want > cap) want = cap;
    bn_plan p;
    const int nb = (int)(want < B ? want : B);
    p.rb = (B + nb - 1) / nb;
    p.nb = (B + p.rb - 1) / p.rb;
    p.sb = S;
    p.ns = 1;
    if (p.nb < want && S >= 2 * BN_THREADS) { /* few rows (small batch), long planes */
        const long long ns = (want + p.nb - 1) / p.nb;
        long long sb = (S + ns - 1) / ns;
        sb = (sb + BN_THREADS - 1) / BN_THREADS * BN_THREADS;
        p.sb = (int)sb;
        p.ns = (int)((S + sb - 1) / sb);
    }
    return p;
}

extern "C" size_t snn_cuda_batchnorm_work_bytes(int B, int C, int S) {
    if (B <= 0 || C <= 0 || S <= 0) return 0;
    const bn_plan p = bn_plan_of(B, C, S);
    return (size_t)C * p.nb * p.ns * BN_PART * sizeof(double) + (size_t)C * sizeof(float4);
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sums of v[0..2] over the block, stored by thread 0 to out[0..2]; fixed order. */
__device__ __forceinline__ void block_sum3(double v0, double v1, double v2, double *out) {
    __shared__ double sh[3][32];
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    v0 = warp_sum_d(v0);
    v1 = warp_sum_d(v1);
    v2 = warp_sum_d(v2);
    if (l == 0) {
        sh[0][w] = v0;
        sh[1][w] = v1;
        sh[2][w] = v2;
    }
    __syncthreads();
    if (w == 0) {
        const int nw = blockDim.x / 32;
        v0 = warp_sum_d(l < nw ? sh[0][l] : 0.0);
        v1 = warp_sum_d(l < nw ? sh[1][l] : 0.0);
        v2 = warp_sum_d(l < nw ? sh[2][l] : 0.0);
        if (l == 0) {
            out[0] = v0;
            out[1] = v1;
            out[2] = v2;
        }
    }
}

/* Visit this thread's (b, s) of the chunk rows [b0, b1) x positions [s0, s1). Wide chunks:
 * threads stride along s within each row (coalesced). Narrow ones (s1 - s0 < threads, e.g.
 * S = 1 or L = 64): the block covers R = threads / width rows at once. */
template <typename F>
__device__ __forceinline__ void bn_visit(int b0, int b1, int s0, int s1, F &&f) {
    const int sw = s1 - s0, t = threadIdx.x, nt = blockDim.x;
    if (sw >= nt) {
        for (int b = b0; b < b1; b++)
#pragma unroll 4
            for (int s = s0 + t; s < s1; s += nt) f(b, s);
    } else {
        const int R = nt / sw;
        if (t >= R * sw) return;
        const int bo = t / sw, s = s0 + (t - bo * sw);
        for (int b = b0 + bo; b < b1; b += R) f(b, s);
    }
}

struct bn_chunk {
    int c, b0, b1, s0, s1;
};

__device__ __forceinline__ bn_chunk chunk_of(const bn_plan &p, int B, int S) {
    const int nchunk = p.nb * p.ns;
    bn_chunk k;
    k.c = blockIdx.x / nchunk;
    const int j = blockIdx.x - k.c * nchunk;
    k.b0 = (j / p.ns) * p.rb;
    k.b1 = min(B, k.b0 + p.rb);
    k.s0 = (j % p.ns) * p.sb;
    k.s1 = min(S, k.s0 + p.sb);
    return k;
}

/* Stage 1 of the forward: partial sums of d and d^2, d = x - x[0][c][0]. */
__global__ void bn_stats_kernel(const float *__restrict__ x, int B, int C, int S, bn_plan p,
                                double *part) {
    const bn_chunk k = chunk_of(p, B, S);
    const double K = x[(size_t)k.c * S];
    double a = 0.0, q = 0.0;
    bn_visit(k.b0, k.b1, k.s0, k.s1, [&](int b, int s) {
        const double d = (double)x[((size_t)b * C + k.c) * S + s] - K;
        a += d;
        q += d * d;
    });
    block_sum3(a, q, 0.0, part + (size_t)blockIdx.x * BN_PART);
}

/* Stage 1 of the backward: partial sums of dy, dy * (x - m) and x - m, m = save_mean. The
 * last one recovers the batch mean beyond save_mean's FP32 rounding (which, for
 * |mean| >> std, would otherwise shift every xhat by up to 2^-24 |mean| / std). */
__global__ void bn_grad_stats_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                     int B, int C, int S, bn_plan p, const float *save_mean,
                                     double *part) {
    const bn_chunk k = chunk_of(p, B, S);
    const double mu = save_mean[k.c];
    double a = 0.0, q = 0.0, e = 0.0;
    bn_visit(k.b0, k.b1, k.s0, k.s1, [&](int b, int s) {
        const size_t i = ((size_t)b * C + k.c) * S + s;
        const double g = dy[i], d = (double)x[i] - mu;
        a += g;
        q += g * d;
        e += d;
    });
    block_sum3(a, q, e, part + (size_t)blockIdx.x * BN_PART);
}

/* Channel c's sums over its chunks (one warp per channel, fixed order), in every lane. */
__device__ __forceinline__ double3 channel_sums(const double *part, int nchunk, int c) {
    const int lane = threadIdx.x % 32;
    double a = 0.0, q = 0.0, e = 0.0;
    for (int j = lane; j < nchunk; j += 32) {
        const double *v = part + ((size_t)c * nchunk + j) * BN_PART;
        a += v[0];
        q += v[1];
        e += v[2];
    }
    return make_double3(warp_sum_d(a), warp_sum_d(q), warp_sum_d(e));
}

/* Stage 2 of the training forward: statistics, running-stat update (PyTorch's convention,
 * unbiased variance), saved mean / invstd, and the coefficients of y = (x - hi) a + b2 with
 * hi + lo = the FP64 mean (hi its FP32 rounding), a = invstd gamma, b2 = beta - lo a: x - hi
 * is exact near the mean, so y keeps FP32 accuracy even when |mean| >> std. */
__global__ void bn_finish_kernel(const double *part, int nchunk, const float *x, int C, int S,
                                 double n, const float *gamma, const float *beta, float *rmean,
                                 float *rvar, double eps, double mom, float *save_mean,
                                 float *save_invstd, float4 *coef) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (c >= C) return; /* whole warps leave together */
    const double3 s = channel_sums(part, nchunk, c);
    if (threadIdx.x % 32) return;
    const double K = x[(size_t)c * S];
    const double ms = s.x / n; /* mean of the shifted values */
    double m2 = s.y - s.x * ms;
    if (m2 < 0.0) m2 = 0.0;
    const double mean = K + ms, var = m2 / n, unbiased = m2 / (n - 1.0);
    const double is = 1.0 / sqrt(var + eps);
    save_mean[c] = (float)mean;
    save_invstd[c] = (float)is;
    rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mean);
    rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * unbiased);
    const float hi = (float)mean;
    const double a = is * gamma[c];
    coef[c] = make_float4(hi, (float)a, (float)((double)beta[c] - (mean - (double)hi) * a), 0.0f);
}

/* Eval forward: coefficients from the running statistics. */
__global__ void bn_eval_coef_kernel(int C, const float *gamma, const float *beta,
                                    const float *rmean, const float *rvar, double eps,
                                    float4 *coef) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const double is = 1.0 / sqrt((double)rvar[c] + eps);
    coef[c] = make_float4(rmean[c], (float)(is * gamma[c]), beta[c], 0.0f);
}

/* Stage 2 of the backward: dbeta += sum dy, dgamma += sum dy*xhat, and the coefficients of
 * dx = k dy + q (x - mean) + r, i.e. dx = k (dy - mean(dy) - xhat mean(dy xhat)) with
 * k = gamma invstd, q = -k invstd mean(dy xhat), r = -k mean(dy). The batch mean is
 * m + delta (m = save_mean, delta = mean(x - m)); the elementwise pass computes x - m and
 * delta folds into the constant: r2 = r - q delta. */
__global__ void bn_grad_finish_kernel(const double *part, int nchunk, int C, double n,
                                      const float *gamma, const float *save_mean,
                                      const float *save_invstd, float *dgamma, float *dbeta,
                                      float4 *coef) {
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (c >= C) return;
    const double3 s = channel_sums(part, nchunk, c);
    if (threadIdx.x % 32) return;
    const double is = save_invstd[c], delta = s.z / n;
    const double sxh = (s.y - delta * s.x) * is; /* sum dy * xhat, xhat around the batch mean */
    dbeta[c] += (float)s.x;
    dgamma[c] += (float)sxh;
    const double k = (double)gamma[c] * is, q = -k * is * (sxh / n), r = -k * (s.x / n);
    coef[c] = make_float4(save_mean[c], (float)k, (float)q, (float)(r - q * delta));
}

/* Stage 3: elementwise over [B][C][S] in units of V floats (V divides S, so a unit lies in one
 * channel). Forward: y = (x - hi) a + b2; backward: dx = k dy + q (x - m) + r2. */
template <int V, bool BWD>
__global__ void bn_apply_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                float *__restrict__ out, const float4 *__restrict__ coef,
                                unsigned nunits, unsigned s_units, unsigned C) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < nunits;
         i += gridDim.x * blockDim.x) {
        const float4 cf = coef[(i / s_units) % C];
        const Pack<float, V> xv = pack_ld<float, V>(x + (size_t)i * V);
        Pack<float, V> o;
        if (BWD) {
            const Pack<float, V> gv = pack_ld<float, V>(dy + (size_t)i * V);
#pragma unroll
            for (int t = 0; t < V; t++) o.v[t] = fmaf(cf.y, gv.v[t], fmaf(cf.z, xv.v[t] - cf.x, cf.w));
        } else {
#pragma unroll
            for (int t = 0; t < V; t++) o.v[t] = fmaf(xv.v[t] - cf.x, cf.y, cf.z);
        }
        pack_st<float, V>(out + (size_t)i * V, o);
    }
}

static unsigned capped(snn_cuda *c, size_t work, unsigned block) {
    unsigned g = snn_grid(work, block), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    if (cap < 1) cap = 1;
    return g < cap ? g : cap;
}

template <bool BWD>
static snn_status bn_apply(snn_cuda *c, const float *x, const float *dy, float *out,
                           const float4 *coef, int B, int C, int S) {
    const size_t n = (size_t)B * C * S;
    cudaStream_t st = snn_cuda_stream_of(c);
    const bool v4 = S % 4 == 0 && snn_aligned(x, 16) && snn_aligned(out, 16) &&
                    (!BWD || snn_aligned(dy, 16));
    if (v4)
        bn_apply_kernel<4, BWD><<<capped(c, n / 4, 256), 256, 0, st>>>(
            x, dy, out, coef, (unsigned)(n / 4), (unsigned)(S / 4), (unsigned)C);
    else
        bn_apply_kernel<1, BWD><<<capped(c, n, 256), 256, 0, st>>>(x, dy, out, coef, (unsigned)n,
                                                                   (unsigned)S, (unsigned)C);
    SNN_CU_LAUNCHED("batchnorm apply");
    return SNN_OK;
}

static snn_status bn_check(const char *what, int B, int C, int S, const void *work) {
    if (B <= 0 || C <= 0 || S <= 0)
        return snn_error(SNN_E_INVALID, "%s needs positive B, C and S (got %d, %d, %d)", what, B,
                         C, S);
    if ((long long)B * C * S > (long long)INT_MAX)
        return snn_error(SNN_E_INVALID, "%s: B*C*S = %lld is too large (2^31 elements at most)",
                         what, (long long)B * C * S);
    if (!work || !snn_aligned(work, 16))
        return snn_error(SNN_E_INVALID,
                         "%s needs a 16-byte aligned work buffer of "
                         "snn_cuda_batchnorm_work_bytes(B, C, S) bytes",
                         what);
    return SNN_OK;
}

extern "C" snn_status snn_cuda_batchnorm_forward(snn_cuda *c, int training, const float *x,
                                                 float *y, int B, int C, int S,
                                                 const float *gamma, const float *beta,
                                                 float *running_mean, float *running_var,
                                                 float eps, float momentum, float *save_mean,
                                                 float *save_invstd, void *work) {
    SNN_TRY(bn_check("batchnorm_forward", B, C, S, work));
    if (!c || !x || !y || !gamma || !beta || !running_mean || !running_var)
        return snn_error(SNN_E_INVALID, "batchnorm_forward needs a context, x, y, gamma, beta "
                                        "and the running statistics");
    if (!(eps >= 0.0f) || isinf(eps))
        return snn_error(SNN_E_INVALID, "batchnorm_forward: eps must be finite and >= 0 (got %g)",
                         (double)eps);
    const bn_plan p = bn_plan_of(B, C, S);
    const int nchunk = p.nb * p.ns;
    double *part = (double *)work;
    float4 *coef = (float4 *)(part + (size_t)C * nchunk * BN_PART);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (training) {
        if ((long long)B * S < 2)
            return snn_error(SNN_E_INVALID,
                             "batchnorm_forward needs more than one value per channel in "
                             "training (B = %d, S = %d)",
                             B, S);
        if (!save_mean || !save_invstd)
            return snn_error(SNN_E_INVALID, "batchnorm_forward needs save_mean and save_invstd "
                                            "in training");
        if (!(momentum >= 0.0f && momentum <= 1.0f))
            return snn_error(SNN_E_INVALID, "batchnorm_forward: momentum must be in [0, 1] "
                                            "(got %g)", (double)momentum);
        bn_stats_kernel<<<(unsigned)(C * nchunk), BN_THREADS, 0, st>>>(x, B, C, S, p, part);
        SNN_CU_LAUNCHED("batchnorm stats");
        bn_finish_kernel<<<(unsigned)((C + 7) / 8), 256, 0, st>>>(
            part, nchunk, x, C, S, (double)B * S, gamma, beta, running_mean, running_var,
            (double)eps, (double)momentum, save_mean, save_invstd, coef);
        SNN_CU_LAUNCHED("batchnorm finish");
    } else {
        bn_eval_coef_kernel<<<(unsigned)((C + 255) / 256), 256, 0, st>>>(
            C, gamma, beta, running_mean, running_var, (double)eps, coef);
        SNN_CU_LAUNCHED("batchnorm eval coefficients");
    }
    return bn_apply<false>(c, x, NULL, y, coef, B, C, S);
}

extern "C" snn_status snn_cuda_batchnorm_backward(snn_cuda *c, const float *x, const float *dy,
                                                  float *dx, int B, int C, int S,
                                                  const float *gamma, const float *save_mean,
                                                  const float *save_invstd, float *dgamma,
                                                  float *dbeta, void *work) {
    SNN_TRY(bn_check("batchnorm_backward", B, C, S, work));
    if (!c || !x || !dy || !gamma || !save_mean || !save_invstd || !dgamma || !dbeta)
        return snn_error(SNN_E_INVALID, "batchnorm_backward needs a context, x, dy, gamma, the "
                                        "saved statistics, dgamma and dbeta");
    const bn_plan p = bn_plan_of(B, C, S);
    const int nchunk = p.nb * p.ns;
    double *part = (double *)work;
    float4 *coef = (float4 *)(part + (size_t)C * nchunk * BN_PART);
    cudaStream_t st = snn_cuda_stream_of(c);
    bn_grad_stats_kernel<<<(unsigned)(C * nchunk), BN_THREADS, 0, st>>>(x, dy, B, C, S, p,
                                                                         save_mean, part);
    SNN_CU_LAUNCHED("batchnorm grad stats");
    bn_grad_finish_kernel<<<(unsigned)((C + 7) / 8), 256, 0, st>>>(
        part, nchunk, C, (double)B * S, gamma, save_mean, save_invstd, dgamma, dbeta, coef);
    SNN_CU_LAUNCHED("batchnorm grad finish");
    if (!dx) return SNN_OK; /* only the parameter gradients wanted */
    return bn_apply<true>(c, x, dy, dx, coef, B, C, S);
}

/* ---- Token mean: rows of L contiguous values, G lanes per row (G = L rounded up to a power
 * of two, at most 32) so short rows do not leave most of a warp idle. The row loop runs the
 * same number of times in every lane of a warp, so the shuffles see the whole warp. ---- */
template <int G>
__global__ void tmean_fwd_kernel(const float *__restrict__ x, float *__restrict__ y, int rows,
                                 int L, float inv) {
    const int gpw = 32 / G, lane = threadIdx.x % 32, g = lane / G, l0 = lane % G;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int nwarps = gridDim.x * blockDim.x / 32;
    for (long long r0 = (long long)warp * gpw; r0 < rows; r0 += (long long)nwarps * gpw) {
        const int row = (int)r0 + g;
        float s = 0.0f;
        if (row < rows) {
            const float *p = x + (size_t)row * L;
            for (int l = l0; l < L; l += G) s += p[l];
        }
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (row < rows && l0 == 0) y[row] = s * inv;
    }
}

template <int G>
__global__ void tmean_bwd_kernel(const float *__restrict__ dy, float *__restrict__ dx, int rows,
                                 int L, float inv) {
    const int gpw = 32 / G, lane = threadIdx.x % 32, g = lane / G, l0 = lane % G;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int nwarps = gridDim.x * blockDim.x / 32;
    for (long long r0 = (long long)warp * gpw; r0 < rows; r0 += (long long)nwarps * gpw) {
        const int row = (int)r0 + g;
        if (row >= rows) continue;
        const float v = dy[row] * inv; /* the CPU module's rounding: dy * (1/L) */
        float *p = dx + (size_t)row * L;
        for (int l = l0; l < L; l += G) p[l] = v;
    }
}

static int tmean_group(int L) {
    int g = 1;
    while (g < L && g < 32) g *= 2;
    return g;
}

template <bool BWD>
static void tmean_launch(snn_cuda *c, const float *in, float *out, int rows, int L, float inv) {
    const int G = tmean_group(L);
    const size_t threads = ((size_t)rows + (32 / G) - 1) / (32 / G) * 32;
    const unsigned grid = capped(c, threads, 256);
    cudaStream_t st = snn_cuda_stream_of(c);
#define TM_CASE(g)                                                                               \
    case g:                                                                                      \
        if (BWD) tmean_bwd_kernel<g><<<grid, 256, 0, st>>>(in, out, rows, L, inv);               \
        else tmean_fwd_kernel<g><<<grid, 256, 0, st>>>(in, out, rows, L, inv);                   \
        break;
    switch (G) {
        TM_CASE(1)
        TM_CASE(2)
        TM_CASE(4)
        TM_CASE(8)
        TM_CASE(16)
    default:
        TM_CASE(32)
    }
#undef TM_CASE
}

static snn_status tmean_check(const char *what, int B, int D, int L) {
    if (B <= 0 || D <= 0 || L <= 0)
        return snn_error(SNN_E_INVALID, "%s needs positive B, D and L (got %d, %d, %d)", what, B,
                         D, L);
    if ((long long)B * D * L > (long long)INT_MAX)
        return snn_error(SNN_E_INVALID, "%s: B*D*L = %lld is too large (2^31 elements at most)",
                         what, (long long)B * D * L);
    return SNN_OK;
}

extern "C" snn_status snn_cuda_token_mean_forward(snn_cuda *c, const float *x, float *y, int B,
                                                  int D, int L) {
    SNN_TRY(tmean_check("token_mean_forward", B, D, L));
    if (!c || !x || !y) return snn_error(SNN_E_INVALID, "token_mean_forward needs a context, x and y");
    tmean_launch<false>(c, x, y, B * D, L, 1.0f / (float)L);
    SNN_CU_LAUNCHED("token_mean_forward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_token_mean_backward(snn_cuda *c, const float *dy, float *dx, int B,
                                                   int D, int L) {
    SNN_TRY(tmean_check("token_mean_backward", B, D, L));
    if (!c || !dy || !dx)
        return snn_error(SNN_E_INVALID, "token_mean_backward needs a context, dy and dx");
    tmean_launch<true>(c, dy, dx, B * D, L, 1.0f / (float)L);
    SNN_CU_LAUNCHED("token_mean_backward");
    return SNN_OK;
}
