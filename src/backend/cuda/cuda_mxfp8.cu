/* MXFP8 quantise-dequantise (cuda_mxfp8.h). The rules are the CPU's, transcribed:
 * block scale X = E8M0 ceil of amax · fl(1/fmt_max) (snn_e8m0_from_amax), elements
 * encode(x · 1/X) saturating round-to-nearest-even, value decode(code) · X — each an FP32
 * multiply rounded on its own (__fmul_rn: no contraction). amax ignores NaN as the CPU's. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_mxfp8.h"


template <typename Q> __device__ __forceinline__ float mx_qdq(float v, float s, float d) {
    return __fmul_rn(Io<Q>::ld(Io<Q>::st(__fmul_rn(v, s))), d);
}

__device__ __forceinline__ size_t mx_idx(int r, int k, int K, int L) {
    return L == 1 ? (size_t)r * K + k : ((size_t)(r / L) * K + k) * L + r % L;
}

/* Row-wise: one warp per 1x32 block, lane = element (partial blocks: missing lanes give 0,
 * which no amax exceeds). */
template <typename Q>
__global__ void mx_rowwise_kernel(const float *__restrict__ src, int rows, int K, int L, int raw,
                                  float fmax, float *__restrict__ dst) {
    const int nb = (K + 31) / 32;
    const long long w = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (w >= (long long)rows * nb) return; /* whole warps leave together */
    const int r = (int)(w / nb), k = (int)(w % nb) * 32 + (int)(threadIdx.x & 31);
    const bool in = k < K;
    const float v = in ? src[mx_idx(r, k, K, L)] : 0.0f;
    if (raw) {
        if (in) dst[(size_t)r * K + k] = v;
        return;
    }
    const float amax = snn_warp_max(fabsf(v));
    float s, d;
    snn_e8m0_scales(amax, fmax, &s, &d);
    if (in) dst[(size_t)r * K + k] = mx_qdq<Q>(v, s, d);
}

/* Column-wise: one thread per 32x1 block (columns on the fast index: coalesced rows). */
template <typename Q>
__global__ void mx_colwise_kernel(const float *__restrict__ src, int rows, int K, int L, float fmax,
                                  float *__restrict__ dst) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x, r0 = blockIdx.y * 32;
    if (k >= K) return;
    const int r1 = r0 + 32 < rows ? r0 + 32 : rows;
    float amax = 0.0f;
    for (int r = r0; r < r1; r++) amax = fmaxf(amax, fabsf(src[mx_idx(r, k, K, L)]));
    float s, d;
    snn_e8m0_scales(amax, fmax, &s, &d);
    for (int r = r0; r < r1; r++) dst[(size_t)r * K + k] = mx_qdq<Q>(src[mx_idx(r, k, K, L)], s, d);
}

template <typename Q>
static snn_status mx_launch(snn_cuda *c, int colwise, const float *src, int rows, int cols, int L, int raw,
                            float fmax, float *dst) {
    cudaStream_t sm = snn_cuda_stream_of(c);
    if (colwise && !raw) {
        dim3 grid((unsigned)((cols + 127) / 128), (unsigned)((rows + 31) / 32));
        mx_colwise_kernel<Q><<<grid, 128, 0, sm>>>(src, rows, cols, L, fmax, dst);
    } else {
        const long long warps = (long long)rows * ((cols + 31) / 32);
        mx_rowwise_kernel<Q><<<(unsigned)((warps + 7) / 8), 256, 0, sm>>>(src, rows, cols, L, raw, fmax, dst);
    }
    SNN_CU_LAUNCHED("mxfp8 quantise-dequantise");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_mxfp8_qdq(snn_cuda *c, snn_dtype t, int colwise, const float *src, int rows,
                                         int cols, int L, int raw, float *dst) {
    if (!c || !src || !dst || rows <= 0 || cols <= 0 || L <= 0 || rows % L)
        return snn_error(SNN_E_INVALID, "mxfp8 qdq: bad arguments (rows %d, cols %d, L %d)", rows, cols, L);
    if (t == SNN_F8E4M3) return mx_launch<snn_e4m3>(c, colwise, src, rows, cols, L, raw, 448.0f, dst);
    if (t == SNN_F8E5M2) return mx_launch<snn_e5m2>(c, colwise, src, rows, cols, L, raw, 57344.0f, dst);
    return snn_error(SNN_E_INVALID, "mxfp8 qdq: element format must be f8e4m3 or f8e5m2");
}
