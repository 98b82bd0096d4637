/* GELU (exact erf form, src/nn/gelu.c) and the MSE loss on the firing rate
 * (src/train/loss.c's snn_loss_mse_rate). The arithmetic mirrors the CPU code operation for
 * operation with explicitly rounded intrinsics (the C build does not contract a*b+c into an
 * FMA, nvcc would), so the only differences left are erff/expf's last bits. */
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"

namespace {

unsigned grid_cap(snn_cuda *c, size_t n, unsigned block) {
    unsigned g = snn_grid(n, block), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    return g < cap ? g : cap;
}

/* CPU: 0.5f * x * (1.0f + erff(x * 1/sqrt2)), left to right */
__device__ __forceinline__ float gelu_f(float v) {
    const float e = erff(__fmul_rn(v, 0.70710678118654752f));
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, e));
}

__device__ __forceinline__ float gelu_df(float v, float dy) {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    const float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(v, 0.70710678118654752f))));
    const float pdf = __fmul_rn(inv_sqrt_2pi, expf(__fmul_rn(__fmul_rn(-0.5f, v), v)));
    return __fmul_rn(dy, __fadd_rn(cdf, __fmul_rn(v, pdf)));
}

/* x, dx stored as X; y, dy as Y (float or a 16-bit type). */
template <typename X, typename Y>
__global__ void gelu_fwd_kernel(const X *__restrict__ x, Y *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = Io<Y>::st(gelu_f(Io<X>::ld(x[i])));
}

template <typename X, typename Y>
__global__ void gelu_bwd_kernel(const X *__restrict__ x, const Y *__restrict__ dy, X *__restrict__ dx, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = Io<X>::st(gelu_df(Io<X>::ld(x[i]), Io<Y>::ld(dy[i])));
}

/* Eight consecutive values of T at p (16-byte aligned for 16-bit T, 32 bytes apart for
 * float) widened to float, and back: one or two 16-byte accesses instead of eight. */
template <typename T> __device__ __forceinline__ void ld8(const T *__restrict__ p, float v[8]) {
    if constexpr (sizeof(T) == 4) {
        const float4 a = reinterpret_cast<const float4 *>(p)[0], b = reinterpret_cast<const float4 *>(p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
        union {
            uint4 u;
            T t[8];
        } w;
        w.u = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = Io<T>::ld(w.t[k]);
    }
}
template <typename T> __device__ __forceinline__ void st8(T *__restrict__ p, const float v[8]) {
    if constexpr (sizeof(T) == 4) {
        reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        union {
            uint4 u;
            T t[8];
        } w;
#pragma unroll
        for (int k = 0; k < 8; k++) w.t[k] = Io<T>::st(v[k]);
        *reinterpret_cast<uint4 *>(p) = w.u;
    }
}

/* The same elementwise bodies eight values a thread (all pointers 16-byte aligned): the
 * scalar kernels issue 2-byte loads for 16-bit storage and ran at half the bandwidth. The
 * n % 8 last values go to the first block's first threads. */
template <typename X, typename Y>
__global__ void gelu_fwd8_kernel(const X *__restrict__ x, Y *__restrict__ y, size_t n) {
    const size_t n8 = n / 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        float v[8];
        ld8(x + 8 * i, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = gelu_f(v[k]);
        st8(y + 8 * i, v);
    }
    const size_t t = 8 * n8 + threadIdx.x;
    if (blockIdx.x == 0 && t < n) y[t] = Io<Y>::st(gelu_f(Io<X>::ld(x[t])));
}

template <typename X, typename Y>
__global__ void gelu_bwd8_kernel(const X *__restrict__ x, const Y *__restrict__ dy, X *__restrict__ dx, size_t n) {
    const size_t n8 = n / 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)gridDim.x * blockDim.x) {
        float v[8], d[8];
        ld8(x + 8 * i, v);
        ld8(dy + 8 * i, d);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = gelu_df(v[k], d[k]);
        st8(dx + 8 * i, v);
    }
    const size_t t = 8 * n8 + threadIdx.x;
    if (blockIdx.x == 0 && t < n) dx[t] = Io<X>::st(gelu_df(Io<X>::ld(x[t]), Io<Y>::ld(dy[t])));
}

template <typename X, typename Y>
void gelu_launch(snn_cuda *c, int backward, const void *x, const void *dy, void *out, size_t n) {
    const bool vec = ((uintptr_t)x & 15u) == 0 && ((uintptr_t)out & 15u) == 0 && ((uintptr_t)dy & 15u) == 0;
    cudaStream_t s = snn_cuda_stream_of(c);
    if (vec) {
        /* blockDim 256 > 7: the first block's threads cover the tail */
        const unsigned g = grid_cap(c, n / 8 > 0 ? n / 8 : 1, 256);
        if (backward) gelu_bwd8_kernel<X, Y><<<g, 256, 0, s>>>((const X *)x, (const Y *)dy, (X *)out, n);
        else gelu_fwd8_kernel<X, Y><<<g, 256, 0, s>>>((const X *)x, (Y *)out, n);
        return;
    }
    const unsigned g = grid_cap(c, n, 256);
    if (backward) gelu_bwd_kernel<X, Y><<<g, 256, 0, s>>>((const X *)x, (const Y *)dy, (X *)out, n);
    else gelu_fwd_kernel<X, Y><<<g, 256, 0, s>>>((const X *)x, (Y *)out, n);
}

template <typename X>
snn_status gelu_y(snn_cuda *c, snn_dtype yt, int backward, const void *x, const void *dy, void *out, size_t n) {
    if (yt == SNN_F32) gelu_launch<X, float>(c, backward, x, dy, out, n);
    else if (yt == SNN_BF16) gelu_launch<X, __nv_bfloat16>(c, backward, x, dy, out, n);
    else if (yt == SNN_F16) gelu_launch<X, __half>(c, backward, x, dy, out, n);
    else return snn_error(SNN_E_INVALID, "gelu: storage type %d (f32, f16, bf16)", (int)yt);
    return SNN_OK;
}

snn_status gelu_any(snn_cuda *c, snn_dtype xt, snn_dtype yt, int backward, const void *x, const void *dy, void *out,
                    size_t n) {
    if (!c || !x || !out || (backward && !dy)) return snn_error(SNN_E_INVALID, "gelu: NULL context or buffer");
    if (n == 0) return SNN_OK;
    if (xt == SNN_F32) SNN_TRY(gelu_y<float>(c, yt, backward, x, dy, out, n));
    else if (xt == SNN_BF16) SNN_TRY(gelu_y<__nv_bfloat16>(c, yt, backward, x, dy, out, n));
    else if (xt == SNN_F16) SNN_TRY(gelu_y<__half>(c, yt, backward, x, dy, out, n));
    else return snn_error(SNN_E_INVALID, "gelu: storage type %d (f32, f16, bf16)", (int)xt);
    SNN_CU_LAUNCHED(backward ? "gelu_backward" : "gelu_forward");
    return SNN_OK;
}

} // namespace

extern "C" snn_status snn_cuda_gelu_forward(snn_cuda *c, const float *x, float *y, size_t n) {
    return gelu_any(c, SNN_F32, SNN_F32, 0, x, NULL, y, n);
}

extern "C" snn_status snn_cuda_gelu_backward(snn_cuda *c, const float *x, const float *dy, float *dx, size_t n) {
    return gelu_any(c, SNN_F32, SNN_F32, 1, x, dy, dx, n);
}

extern "C" snn_status snn_cuda_gelu_io(snn_cuda *c, snn_dtype xt, snn_dtype yt, int backward, const void *x,
                                       const void *dy, void *out, size_t n) {
    return gelu_any(c, xt, yt, backward, x, dy, out, n);
}

/* ---- MSE on the rate ----
 * One block: the loss is a handful of values per sample, and a single block makes the sum
 * order fixed (deterministic) without a second kernel or scratch memory. Rates and the
 * loss run in double exactly as the CPU code (sum over t in increasing order, / T). */
#define MSE_THREADS 512

namespace {

__device__ __forceinline__ double rate_at(const float *out, int T, size_t NC, size_t idx) {
    double s = 0.0;
    for (int t = 0; t < T; t++) s = __dadd_rn(s, (double)out[(size_t)t * NC + idx]);
    return s / (double)T;
}

__global__ void __launch_bounds__(MSE_THREADS)
    mse_rate_kernel(int T, int B, int C, const float *__restrict__ out,
                    const int32_t *__restrict__ labels, float *loss, float *dout,
                    float grad_scale, int *correct) {
    __shared__ double red[MSE_THREADS];
    __shared__ int hred[MSE_THREADS];
    const size_t NC = (size_t)B * (size_t)C;
    const double gscale = 2.0 / ((double)NC * (double)T);
    double total = 0.0;
    for (size_t idx = threadIdx.x; idx < NC; idx += MSE_THREADS) {
        const int b = (int)(idx / (size_t)C), cc = (int)(idx - (size_t)b * C);
        const int y = labels[b];
        /* a label outside [0, C) cannot be refused without a host sync: it poisons the
         * loss and its sample's gradient with NaN (as the GPU cross-entropy does) */
        const bool ok = y >= 0 && y < C;
        const double d = rate_at(out, T, NC, idx) - (cc == y ? 1.0 : 0.0);
        total = ok ? __dadd_rn(total, __dmul_rn(d, d)) : (double)NAN;
        if (dout) {
            /* CPU: (float)(d * gscale); grad_scale 1 leaves that bit-identical */
            const float gv = ok ? (float)__dmul_rn(__dmul_rn(d, gscale), (double)grad_scale) : NAN;
            for (int t = 0; t < T; t++) dout[(size_t)t * NC + idx] = gv;
        }
    }
    int hits = 0;
    for (int b = threadIdx.x; b < B; b += MSE_THREADS) {
        const size_t row = (size_t)b * (size_t)C;
        double best = 0.0;
        int arg = 0;
        for (int cc = 0; cc < C; cc++) {
            const double r = rate_at(out, T, NC, row + (size_t)cc);
            if (cc == 0 || r > best) { /* first maximum, as the CPU code */
                best = r;
                arg = cc;
            }
        }
        hits += arg == labels[b];
    }
    red[threadIdx.x] = total;
    hred[threadIdx.x] = hits;
    __syncthreads();
    for (int s = MSE_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
            hred[threadIdx.x] += hred[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss = (float)(red[0] / (double)NC);
        if (correct) *correct = hred[0];
    }
}

} // namespace

extern "C" snn_status snn_cuda_mse_rate(snn_cuda *c, int T, int B, int C, const float *out,
                                        const int32_t *labels, float *loss, float *dout,
                                        float grad_scale, int *correct) {
    if (!c || !out || !labels || !loss)
        return snn_error(SNN_E_INVALID, "mse_rate: the context, output, label and loss pointers "
                                        "must not be NULL");
    if (T <= 0 || B <= 0 || C <= 0)
        return snn_error(SNN_E_INVALID, "mse_rate: T, B and C must be positive (got %d, %d, %d)",
                         T, B, C);
    mse_rate_kernel<<<1, MSE_THREADS, 0, snn_cuda_stream_of(c)>>>(T, B, C, out, labels, loss, dout,
                                                                 grad_scale, correct);
    SNN_CU_LAUNCHED("mse_rate");
    return SNN_OK;
}
