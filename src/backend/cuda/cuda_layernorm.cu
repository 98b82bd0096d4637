/* LayerNorm over the last dimension on the GPU, the same arithmetic as src/nn/layernorm.c:
 * per F-vector mean and biased variance in double, y = (x - mean) * rstd * w + b; backward
 * dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = dy w, in double; weight and bias
 * gradients are column sums over the vectors, done in two deterministic stages (fixed chunks of
 * vectors, then the chunks in order) and ADDED to dw, db like the CPU module does.
 * One warp per vector for the row-wise parts. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layernorm.h"

#define LN_WARPS 8
#define LN_CHUNKS 256 /* partial sums per feature: enough blocks to fill the GPU */

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* y (and the backward's dy) stored as Y: FP32, or a 16-bit type rounded to (RNE) where the
 * module after the norm multiplies it in that type anyway (snn_module.out_store). */
template <typename Y>
__global__ void __launch_bounds__(LN_WARPS * 32)
ln_fwd_kernel(const float *__restrict__ x, Y *__restrict__ y, size_t V, int F,
              const float *__restrict__ w, const float *__restrict__ b, double eps,
              double *__restrict__ mean, double *__restrict__ rstd) {
    const int lane = threadIdx.x & 31;
    for (size_t v = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32; v < V;
         v += (size_t)gridDim.x * LN_WARPS) {
        const float *p = x + v * F;
        double s = 0.0;
        for (int j = lane; j < F; j += 32) s += p[j];
        const double mu = warp_sum_d(s) / (double)F;
        double ss = 0.0;
        for (int j = lane; j < F; j += 32) {
            double d = (double)p[j] - mu;
            ss += d * d;
        }
        const double is = 1.0 / sqrt(warp_sum_d(ss) / (double)F + eps);
        if (lane == 0 && mean) {
            mean[v] = mu;
            rstd[v] = is;
        }
        Y *q = y + v * F;
        for (int j = lane; j < F; j += 32) q[j] = Io<Y>::st((float)((p[j] - mu) * is * w[j] + b[j]));
    }
}

template <typename Y>
__global__ void __launch_bounds__(LN_WARPS * 32)
ln_dx_kernel(const float *__restrict__ x, const Y *__restrict__ dy, float *__restrict__ dx,
             const float *__restrict__ dx_add,
             size_t V, int F, const float *__restrict__ w, const double *__restrict__ mean,
             const double *__restrict__ rstd) {
    const int lane = threadIdx.x & 31;
    for (size_t v = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32; v < V;
         v += (size_t)gridDim.x * LN_WARPS) {
        const size_t o = v * F;
        const double mu = mean[v], is = rstd[v];
        double s0 = 0.0, s1 = 0.0;
        for (int j = lane; j < F; j += 32) {
            double g = (double)Io<Y>::ld(dy[o + j]) * w[j];
            s0 += g;
            s1 += g * ((x[o + j] - mu) * is);
        }
        const double a = warp_sum_d(s0) / (double)F, bb = warp_sum_d(s1) / (double)F;
        for (int j = lane; j < F; j += 32) {
            double g = (double)Io<Y>::ld(dy[o + j]) * w[j];
            double xh = (x[o + j] - mu) * is;
            const float d = (float)(is * (g - a - xh * bb));
            dx[o + j] = dx_add ? __fadd_rn(dx_add[o + j], d) : d;
        }
    }
}

static snn_status ln_check(const char *what, size_t V, int F) {
    if (V == 0 || F <= 0)
        return snn_error(SNN_E_INVALID, "%s needs positive vector count and features (got %zu, %d)",
                         what, V, F);
    return SNN_OK;
}

static unsigned ln_blocks(snn_cuda *c, size_t V) {
    size_t g = (V + LN_WARPS - 1) / LN_WARPS, cap = (size_t)snn_cuda_sm_count(c) * 32;
    return (unsigned)(g < cap ? g : cap);
}

/* dx with the row held in registers: lane l owns features 4 (l + 32 k) .. + 3 for k < K
 * (16-byte loads of x, dy and w; dy 8-byte for a 16-bit Y), so x and dy are read once. The
 * same double arithmetic per element as ln_dx_kernel, each lane's sums over its own features
 * in k order, then the warp's tree. For rows of F = 4 q features, F <= 128 K. */
template <typename Y> struct Vec4;
template <> struct Vec4<float> {
    static __device__ __forceinline__ void ld(const float *p, float v[4]) {
        const float4 a = *reinterpret_cast<const float4 *>(p);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    }
};
template <typename H> struct Vec4h {
    static __device__ __forceinline__ void ld(const H *p, float v[4]) {
        union {
            uint2 u;
            H h[4];
        } a;
        a.u = *reinterpret_cast<const uint2 *>(p);
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = Io<H>::ld(a.h[i]);
    }
};
template <> struct Vec4<__nv_bfloat16> : Vec4h<__nv_bfloat16> {};
template <> struct Vec4<__half> : Vec4h<__half> {};

template <typename Y, int K>
__global__ void __launch_bounds__(LN_WARPS * 32)
ln_dx_reg_kernel(const float *__restrict__ x, const Y *__restrict__ dy, float *__restrict__ dx,
                 const float *__restrict__ dx_add, size_t V, int F, const float *__restrict__ w,
                 const double *__restrict__ mean, const double *__restrict__ rstd) {
    const int lane = threadIdx.x & 31;
    for (size_t v = (size_t)blockIdx.x * LN_WARPS + threadIdx.x / 32; v < V;
         v += (size_t)gridDim.x * LN_WARPS) {
        const size_t o = v * F;
        const double mu = mean[v], is = rstd[v];
        float xr[K][4], gr[K][4];
        double s0 = 0.0, s1 = 0.0;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = 4 * (lane + 32 * k);
            if (j < F) {
                Vec4<float>::ld(x + o + j, xr[k]);
                Vec4<Y>::ld(dy + o + j, gr[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = 4 * (lane + 32 * k);
            if (j < F) {
                float wv[4];
                Vec4<float>::ld(w + j, wv);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const double g = (double)gr[k][e] * wv[e];
                    s0 += g;
                    s1 += g * ((xr[k][e] - mu) * is);
                }
            }
        }
        const double a = warp_sum_d(s0) / (double)F, bb = warp_sum_d(s1) / (double)F;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int j = 4 * (lane + 32 * k);
            if (j < F) {
                float wv[4], ad[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4];
                Vec4<float>::ld(w + j, wv);
                if (dx_add) Vec4<float>::ld(dx_add + o + j, ad);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const double g = (double)gr[k][e] * wv[e];
                    const double xh = (xr[k][e] - mu) * is;
                    const float t = (float)(is * (g - a - xh * bb));
                    d[e] = dx_add ? __fadd_rn(ad[e], t) : t;
                }
                *reinterpret_cast<float4 *>(dx + o + j) = make_float4(d[0], d[1], d[2], d[3]);
            }
        }
    }
}

/* The register form where the row fits (F = 4 q <= 1024) and every row starts 16-byte
 * aligned; 0 when it does not apply. */
template <typename Y>
static int ln_dx_reg(snn_cuda *c, const float *x, const Y *dy, float *dx, const float *dx_add, size_t V, int F,
                     const float *w, const double *mean, const double *rstd) {
    const int K = (F + 127) / 128;
    auto al = [](const void *p, size_t b) { return p == NULL || (uintptr_t)p % b == 0; };
    if (F % 4 || K > 8 || !al(x, 16) || !al(dx, 16) || !al(dx_add, 16) || !al(w, 16) || !al(dy, 4 * sizeof(Y)))
        return 0;
    const unsigned g = ln_blocks(c, V);
    cudaStream_t sm = snn_cuda_stream_of(c);
#define LN_DX_K(KK)                                                                                          \
    case KK:                                                                                                 \
        ln_dx_reg_kernel<Y, KK><<<g, LN_WARPS * 32, 0, sm>>>(x, dy, dx, dx_add, V, F, w, mean, rstd);          \
        return 1;
    switch (K) {
        LN_DX_K(1) LN_DX_K(2) LN_DX_K(3) LN_DX_K(4) LN_DX_K(5) LN_DX_K(6) LN_DX_K(7) LN_DX_K(8)
    }
#undef LN_DX_K
    return 0;
}

/* Stage 1: chunk c of the vectors, feature j -> work[c][j] (dw part) and work[c][F + j]. */
template <typename Y>
__global__ void ln_wsum_kernel(const float *__restrict__ x, const Y *__restrict__ dy, size_t V,
                               int F, const double *__restrict__ mean,
                               const double *__restrict__ rstd, double *__restrict__ work,
                               size_t per_chunk) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int c = blockIdx.y;
    if (j >= F) return;
    size_t v0 = (size_t)c * per_chunk, v1 = v0 + per_chunk;
    if (v1 > V) v1 = V;
    double aw = 0.0, ab = 0.0;
    for (size_t v = v0; v < v1; v++) {
        const size_t o = v * F + j;
        const float g = Io<Y>::ld(dy[o]);
        aw += g * ((x[o] - mean[v]) * rstd[v]);
        ab += g;
    }
    work[(size_t)c * 2 * F + j] = aw;
    work[(size_t)c * 2 * F + F + j] = ab;
}

/* Stage 2: 32 features a block, each summed by LN_FWARPS warps over every LN_FWARPS-th chunk
 * and the parts added in order (a fixed order: the same result on every run). With 768
 * features there are only 24 blocks: the warps' loads in flight are what this stage waits on. */
#define LN_FWARPS 32
__global__ void __launch_bounds__(LN_FWARPS * 32)
    ln_wfinal_kernel(const double *__restrict__ work, int chunks, int F, float *__restrict__ dw,
                     float *__restrict__ db) {
    __shared__ double part[LN_FWARPS][32][2];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, j = blockIdx.x * 32 + lane;
    double aw = 0.0, ab = 0.0;
    if (j < F)
        for (int c = wp; c < chunks; c += LN_FWARPS) {
            aw += work[(size_t)c * 2 * F + j];
            ab += work[(size_t)c * 2 * F + F + j];
        }
    part[wp][lane][0] = aw;
    part[wp][lane][1] = ab;
    __syncthreads();
    if (wp || j >= F) return;
    aw = ab = 0.0;
    for (int w = 0; w < LN_FWARPS; w++) {
        aw += part[w][lane][0];
        ab += part[w][lane][1];
    }
    dw[j] += (float)aw;
    db[j] += (float)ab;
}

extern "C" size_t snn_cuda_layernorm_work_bytes(size_t V, int F) {
    (void)V;
    return (size_t)LN_CHUNKS * 2 * (size_t)(F > 0 ? F : 0) * sizeof(double);
}

template <typename Y>
snn_status ln_forward(snn_cuda *c, const float *x, void *y, size_t V, int F, const float *gamma, const float *beta,
                      float eps, double *save_mean, double *save_rstd) {
    SNN_TRY(ln_check("LayerNorm forward", V, F));
    if (!x || !y || !gamma || !beta || (!save_mean != !save_rstd))
        return snn_error(SNN_E_INVALID, "LayerNorm forward: NULL pointer");
    ln_fwd_kernel<Y><<<ln_blocks(c, V), LN_WARPS * 32, 0, snn_cuda_stream_of(c)>>>(x, (Y *)y, V, F, gamma, beta,
                                                                                 (double)eps, save_mean, save_rstd);
    SNN_CU_LAUNCHED("LayerNorm forward");
    return SNN_OK;
}

template <typename Y>
snn_status ln_backward(snn_cuda *c, const float *x, const void *dyv, float *dx, const float *dx_add, size_t V, int F,
                       const float *gamma,
                       const double *save_mean, const double *save_rstd, float *dgamma, float *dbeta, void *work) {
    SNN_TRY(ln_check("LayerNorm backward", V, F));
    if (!x || !dyv || !gamma || !save_mean || !save_rstd || !dgamma || !dbeta || !work)
        return snn_error(SNN_E_INVALID, "LayerNorm backward: NULL pointer");
    const Y *dy = (const Y *)dyv;
    cudaStream_t sm = snn_cuda_stream_of(c);
    if (dx) {
        if (!ln_dx_reg<Y>(c, x, dy, dx, dx_add, V, F, gamma, save_mean, save_rstd))
            ln_dx_kernel<Y><<<ln_blocks(c, V), LN_WARPS * 32, 0, sm>>>(x, dy, dx, dx_add, V, F, gamma, save_mean,
                                                                       save_rstd);
        SNN_CU_LAUNCHED("LayerNorm backward (dx)");
    }
    size_t per = (V + LN_CHUNKS - 1) / LN_CHUNKS;
    int chunks = (int)((V + per - 1) / per);
    dim3 g1((unsigned)((F + 127) / 128), (unsigned)chunks);
    ln_wsum_kernel<Y><<<g1, 128, 0, sm>>>(x, dy, V, F, save_mean, save_rstd, (double *)work, per);
    SNN_CU_LAUNCHED("LayerNorm backward (weight sums)");
    ln_wfinal_kernel<<<(unsigned)((F + 31) / 32), LN_FWARPS * 32, 0, sm>>>((const double *)work, chunks, F, dgamma, dbeta);
    SNN_CU_LAUNCHED("LayerNorm backward (weight gradients)");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_layernorm_forward(snn_cuda *c, const float *x, float *y, size_t V,
                                                 int F, const float *gamma, const float *beta,
                                                 float eps, double *save_mean, double *save_rstd) {
    return ln_forward<float>(c, x, y, V, F, gamma, beta, eps, save_mean, save_rstd);
}

extern "C" snn_status snn_cuda_layernorm_backward(snn_cuda *c, const float *x, const float *dy,
                                                  float *dx, size_t V, int F,
                                                  const float *gamma, const double *save_mean,
                                                  const double *save_rstd, float *dgamma,
                                                  float *dbeta, void *work) {
    return ln_backward<float>(c, x, dy, dx, NULL, V, F, gamma, save_mean, save_rstd, dgamma, dbeta, work);
}

extern "C" snn_status snn_cuda_layernorm_forward_t(snn_cuda *c, snn_dtype yt, const float *x, void *y, size_t V,
                                                   int F, const float *gamma, const float *beta, float eps,
                                                   double *save_mean, double *save_rstd) {
    if (yt == SNN_F32) return ln_forward<float>(c, x, y, V, F, gamma, beta, eps, save_mean, save_rstd);
    if (yt == SNN_BF16) return ln_forward<__nv_bfloat16>(c, x, y, V, F, gamma, beta, eps, save_mean, save_rstd);
    if (yt == SNN_F16) return ln_forward<__half>(c, x, y, V, F, gamma, beta, eps, save_mean, save_rstd);
    return snn_error(SNN_E_INVALID, "LayerNorm forward: output storage must be f32, f16 or bf16");
}

extern "C" snn_status snn_cuda_layernorm_backward_t(snn_cuda *c, snn_dtype yt, const float *x, const void *dy,
                                                    float *dx, const float *dx_add, size_t V, int F,
                                                    const float *gamma,
                                                    const double *save_mean, const double *save_rstd,
                                                    float *dgamma, float *dbeta, void *work) {
    if (yt == SNN_F32)
        return ln_backward<float>(c, x, dy, dx, dx_add, V, F, gamma, save_mean, save_rstd, dgamma, dbeta, work);
    if (yt == SNN_BF16)
        return ln_backward<__nv_bfloat16>(c, x, dy, dx, dx_add, V, F, gamma, save_mean, save_rstd, dgamma, dbeta, work);
    if (yt == SNN_F16)
        return ln_backward<__half>(c, x, dy, dx, dx_add, V, F, gamma, save_mean, save_rstd, dgamma, dbeta, work);
    return snn_error(SNN_E_INVALID, "LayerNorm backward: gradient storage must be f32, f16 or bf16");
}
