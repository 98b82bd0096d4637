/* Internal helpers of the CUDA backend: error plumbing, storage-type traits usable on the
 * host and the device (so kernel bodies can also be run on the CPU by the host-emulation
 * test), vector packs for 16-byte accesses. CUDA C++ only. */
#ifndef SNN_CUDA_INTERNAL_H
#define SNN_CUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "snn/cuda.h"
extern "C" {
#include "core/error_internal.h"
}

#define SNN_HD __host__ __device__ __forceinline__

/* Turn a CUDA error into an snn_status with a message naming the call. */
snn_status snn_cuda_fail(cudaError_t e, const char *what);
#define SNN_CU_TRY(call)                                                                         \
    do {                                                                                         \
        cudaError_t snn_cu_e_ = (call);                                                          \
        if (snn_cu_e_ != cudaSuccess) return snn_cuda_fail(snn_cu_e_, #call);                    \
    } while (0)
/* rows x cols of FP32 (leading dimension lds) into F16 / BF16 of prows x pcols with leading
 * dimension ldd, zeros outside rows x cols (cuda_ops.cu): a GEMM operand padded to aligned
 * extents. */
extern "C" snn_status snn_cuda_convert_2d(snn_cuda *c, snn_dtype dst_type, void *dst, size_t ldd, int prows,
                                          int pcols, const float *src, size_t lds, int rows, int cols);
/* After a kernel launch: launch-configuration errors show up here. */
#define SNN_CU_LAUNCHED(name) SNN_CU_TRY(cudaGetLastError())

cudaStream_t snn_cuda_stream_of(snn_cuda *c);
void snn_cuda_neuron_tuning_of(snn_cuda *c, int *pack_bytes, int *prefetch);
int snn_cuda_sm_count(snn_cuda *c);

/* One-byte FP8 storage types (raw bits; conversions below). */
struct snn_e4m3 { uint8_t b; };
struct snn_e5m2 { uint8_t b; };

/* Storage traits: ld() widens to FP32, st() narrows with round-to-nearest-even
 * (FP8: saturating, as the hardware's SATFINITE conversion). */
template <typename T> struct Io;
template <> struct Io<float> {
    static SNN_HD float ld(float v) { return v; }
    static SNN_HD float st(float f) { return f; }
    static SNN_HD float spike(bool s) { return s ? 1.0f : 0.0f; }
};
template <> struct Io<__nv_bfloat16> {
    static SNN_HD float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
    static SNN_HD __nv_bfloat16 st(float f) { return __float2bfloat16_rn(f); }
    static SNN_HD __nv_bfloat16 spike(bool s) { return __float2bfloat16_rn(s ? 1.0f : 0.0f); }
};
template <> struct Io<__half> {
    static SNN_HD float ld(__half v) { return __half2float(v); }
    static SNN_HD __half st(float f) { return __float2half_rn(f); }
    static SNN_HD __half spike(bool s) { return __float2half_rn(s ? 1.0f : 0.0f); }
};
template <> struct Io<snn_e4m3> {
    static SNN_HD float ld(snn_e4m3 v) {
        __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v.b, __NV_E4M3);
        return __half2float(__half(h));
    }
    static SNN_HD snn_e4m3 st(float f) {
        snn_e4m3 r;
        r.b = (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
        return r;
    }
    /* 1.0 in E4M3 is 0x38: spikes need no conversion. */
    static SNN_HD snn_e4m3 spike(bool s) {
        snn_e4m3 r;
        r.b = s ? 0x38 : 0x00;
        return r;
    }
};
template <> struct Io<snn_e5m2> {
    static SNN_HD float ld(snn_e5m2 v) {
        __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v.b, __NV_E5M2);
        return __half2float(__half(h));
    }
    static SNN_HD snn_e5m2 st(float f) {
        snn_e5m2 r;
        r.b = (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
        return r;
    }
    static SNN_HD snn_e5m2 spike(bool s) {
        snn_e5m2 r;
        r.b = s ? 0x3C : 0x00;
        return r;
    }
};

#ifdef __CUDACC__
/* RNE to F16 / BF16 and back; the hardware casts overflow to inf like snn_round_to. */
template <typename T> __device__ __forceinline__ float snn_rnd16(float f) { return Io<T>::ld(Io<T>::st(f)); }
#endif

/* V consecutive elements moved as one access (16 bytes for 8 × 16-bit or 4 × FP32). */
template <typename T, int V> struct alignas(sizeof(T) * V) Pack {
    T v[V];
};

template <typename T, int V> SNN_HD Pack<T, V> pack_ld(const T *p) {
    return *reinterpret_cast<const Pack<T, V> *>(p);
}
template <typename T, int V> SNN_HD void pack_st(T *p, const Pack<T, V> &x) {
    *reinterpret_cast<Pack<T, V> *>(p) = x;
}

static inline int snn_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* A GEMM descriptor (TF32 off; set allow_tf32 afterwards to change that). */
static inline snn_cuda_gemm_desc snn_cuda_gd(int ta, int tb, int M, int N, int K, snn_dtype a,
                                             snn_dtype b, snn_dtype c, int lda, int ldb, int ldc,
                                             int fast_accum) {
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta;
    d.trans_b = tb;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_type = a;
    d.b_type = b;
    d.c_type = c;
    d.lda = lda;
    d.ldb = ldb;
    d.ldc = ldc;
    d.fast_accum = fast_accum;
    return d;
}

/* max over non-negative floats through their bit patterns (IEEE order equals unsigned order
 * for x >= 0); NaN partials must be dropped before (fmaxf does that). */
#ifdef __CUDACC__
__device__ __forceinline__ void snn_atomic_max_pos(float *addr, float v) {
    if (v > 0.0f) atomicMax(reinterpret_cast<unsigned int *>(addr), __float_as_uint(v));
}
__device__ __forceinline__ float snn_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float snn_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Max of one float per thread over the block (blockDim.x a power of two), a fixed tree; red:
 * blockDim.x floats of shared memory, reusable after. */
__device__ __forceinline__ float snn_block_max_f(float v, float *red) {
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = fmaxf(red[t], red[t + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}
/* Sum of one double per thread over the block (blockDim.x a power of two), as a tree of
 * rounded adds (deterministic); red: blockDim.x doubles of shared memory, reusable after. */
__device__ __forceinline__ double snn_block_sum_d(double v, double *red) {
    const int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = __dadd_rn(red[t], red[t + s]);
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}
#endif

/* snn_f32_to_e8m0_ceil (src/core/dtype.c): the E8M0 exponent of 2^ceil(log2 x); 0xFF for
 * NaN or a negative x. The MXFP8 scale rule of the CPU. */
SNN_HD unsigned snn_e8m0_ceil(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0xFFu;
    if (a == 0) return 0x00u;
    if (u & 0x80000000u) return 0xFFu;
    if (a >= 0x7F000000u) return 0xFEu;
    const uint32_t e = a >> 23, m = a & 0x7FFFFFu;
    if (e == 0) return m > 0x400000u ? 0x01u : 0x00u;
    return e + (m != 0);
}
/* The MXFP8 block scale of the CPU (snn_e8m0_from_amax, snn_e8m0_inv_scale, snn_e8m0_to_f32):
 * X = 2^ceil(log2(amax · fl(1/fmax))) as E8M0; s = 1/X multiplies before the cast, d = X
 * after (both NaN for the NaN code, 2^-127 at the ends of the range). */
#ifdef __CUDACC__
__device__ __forceinline__ void snn_e8m0_scales(float amax, float fmax, float *s, float *d) {
    const unsigned e = snn_e8m0_ceil(__fmul_rn(amax, __fdiv_rn(1.0f, fmax)));
    if (e == 0xFFu) {
        *s = *d = __uint_as_float(0x7FC00000u);
        return;
    }
    *s = e == 0xFEu ? __uint_as_float(0x00400000u) : __uint_as_float((254u - e) << 23);
    *d = e == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}
#endif

static inline int snn_cuda_is_16(snn_dtype t) { return t == SNN_F16 || t == SNN_BF16; }
static inline int snn_cuda_is_fp8(snn_dtype t) { return t == SNN_F8E4M3 || t == SNN_F8E5M2; }
static inline size_t snn_cuda_dsize(snn_dtype t) {
    switch (t) {
    case SNN_F32: return 4;
    case SNN_F16:
    case SNN_BF16: return 2;
    case SNN_F8E4M3:
    case SNN_F8E5M2: return 1;
    default: return 0;
    }
}
const char *snn_cuda_dtype_name(snn_dtype t);

/* Grid size for an elementwise kernel over `work` items, capped to keep the grid sane. */
static inline unsigned snn_grid(size_t work, unsigned block) {
    size_t g = (work + block - 1) / block;
    if (g < 1) g = 1;
    if (g > 0x7fffffffu) g = 0x7fffffffu;
    return (unsigned)g;
}

#endif
