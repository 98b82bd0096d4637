/* FP8 block scaling on the device (Transformer Engine's Float8BlockScaling, reference fp8.md
 * §3.3): 1x128 vectors for inputs and gradients, 128x128 tiles for weights, FP32 scales in
 * the layouts cuBLASLt's VEC128_32F / BLK128x128_32F modes read (include/snn/cuda.h).
 *
 * One thread block of 256 threads per 128x128 tile of the source, which is read from global
 * memory once (16-byte loads) into shared memory in the source type (32 KiB for BF16/F16,
 * 64 KiB for F32). The row pass (q) has warp w own tile rows w, w+8, ...: a lane takes 4
 * consecutive elements, so a warp covers one 128-element row block and its amax is a warp
 * reduction. The column pass (qt) has thread t own column t % 128 and half t / 128 of the
 * rows (a warp reads 32 consecutive elements of a tile row: no bank conflicts), and each
 * thread writes its 64 quantised values as four 16-byte stores into one row of the
 * transpose. Global traffic is one read of the source and one write per output. */
#include <float.h>

#include "backend/cuda/cuda_internal.h"

#define BT_EDGE 128
#define BT_THREADS 256

/* TE's scale from amax with epsilon 0 (fp8.md §2.2), the CPU's snn_fp8_scale_from_amax. */
__device__ __forceinline__ float block_scale(float amax, float fp8_max, int pow2, float value_for_inf) {
    if (amax == 0.0f || !isfinite(amax)) return 1.0f;
    float s = __fdiv_rn(fp8_max, amax);
    if (isinf(s)) s = value_for_inf;
    if (pow2) s = __uint_as_float(__float_as_uint(s) & 0xFF800000u); /* 2^floor(log2 s) */
    return s;
}

template <typename S> struct SrcMax;
template <> struct SrcMax<float> { static constexpr float v = FLT_MAX; };
template <> struct SrcMax<__nv_bfloat16> { static constexpr float v = 3.38953139e38f; };
template <> struct SrcMax<__half> { static constexpr float v = 65504.0f; };

__device__ __forceinline__ float warp_max(float m) {
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

template <typename S> __device__ __forceinline__ void ld4(const S *p, float v[4]) {
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = Io<S>::ld(p[k]);
}

template <typename Q> __device__ __forceinline__ uint32_t q4(const float v[4], float s) {
    uint32_t w = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) w |= (uint32_t)Io<Q>::st(v[k] * s).b << (8 * k);
    return w;
}

/* Column pass: the thread's column amax over its 64 rows of the shared tile. */
template <typename S> __device__ __forceinline__ float col_amax(const S *tile, int half, int col) {
    float m = 0.0f;
    const S *p = tile + half * 64 * BT_EDGE + col;
    for (int i = 0; i < 64; i++) m = fmaxf(m, fabsf(Io<S>::ld(p[i * BT_EDGE])));
    return m;
}

/* Column pass: quantise the thread's 64 values with s and store them as 64 bytes of the
 * transpose's row (qt_row points at the tile's first row in it). */
template <typename S, typename Q>
__device__ __forceinline__ void col_store(const S *tile, int half, int col, float s, uint8_t *qt_row) {
    const S *p = tile + half * 64 * BT_EDGE + col;
    uint4 *dst = reinterpret_cast<uint4 *>(qt_row + half * 64);
#pragma unroll
    for (int w16 = 0; w16 < 4; w16++) {
        uint32_t word[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] = Io<S>::ld(p[(16 * w16 + 4 * j + k) * BT_EDGE]);
            word[j] = q4<Q>(v, s);
        }
        dst[w16] = make_uint4(word[0], word[1], word[2], word[3]);
    }
}

template <typename S, typename Q>
__global__ void __launch_bounds__(BT_THREADS)
    quant_block_kernel(const S *__restrict__ src, int rows, int cols, int tiles, int pow2, float fp8_max,
                       uint8_t *q, float *q_sinv, uint8_t *qt, float *qt_sinv) {
    const int r0 = blockIdx.y * BT_EDGE, c0 = blockIdx.x * BT_EDGE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = threadIdx.x & 127, half = threadIdx.x >> 7;
    const size_t C = (size_t)cols;
    const float vfi = SrcMax<S>::v;
    extern __shared__ uint4 smem_tile[]; /* [128][128] elements of S */
    S *tile = reinterpret_cast<S *>(smem_tile);
    __shared__ float red[8];
    __shared__ float cmax[2][BT_EDGE];
    float tile_s = 1.0f;

    { /* the tile into shared memory, 16 bytes per load (cols % 128 == 0 keeps rows aligned) */
        constexpr int V = 16 / sizeof(S), PER_ROW = BT_EDGE / V;
        for (int i = threadIdx.x; i < BT_EDGE * PER_ROW; i += BT_THREADS) {
            const int r = i / PER_ROW, c = (i % PER_ROW) * V;
            smem_tile[i] = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + r) * C + c0 + c);
        }
        __syncthreads();
    }

    if (tiles) { /* one amax for the whole tile */
        float m = 0.0f;
        for (int r = warp; r < BT_EDGE; r += 8) {
            float v[4];
            ld4<S>(tile + r * BT_EDGE + 4 * lane, v);
#pragma unroll
            for (int k = 0; k < 4; k++) m = fmaxf(m, fabsf(v[k]));
        }
        m = warp_max(m);
        if (lane == 0) red[warp] = m;
        __syncthreads();
        m = red[0];
#pragma unroll
        for (int w = 1; w < 8; w++) m = fmaxf(m, red[w]);
        tile_s = block_scale(m, fp8_max, pow2, vfi);
        if (threadIdx.x == 0) {
            const float d = __frcp_rn(tile_s);
            const int bi = r0 / BT_EDGE, bj = c0 / BT_EDGE;
            if (q_sinv) q_sinv[(size_t)bi * ((cols / BT_EDGE + 3) & ~3) + bj] = d;
            if (qt_sinv) qt_sinv[(size_t)bj * ((rows / BT_EDGE + 3) & ~3) + bi] = d;
        }
    }

    if (q) { /* row pass */
        for (int r = warp; r < BT_EDGE; r += 8) {
            float v[4];
            ld4<S>(tile + r * BT_EDGE + 4 * lane, v);
            float s = tile_s;
            if (!tiles) {
                float m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
                m = warp_max(m);
                s = block_scale(m, fp8_max, pow2, vfi);
                if (lane == 0) q_sinv[(size_t)(c0 / BT_EDGE) * rows + r0 + r] = __frcp_rn(s);
            }
            *reinterpret_cast<uint32_t *>(q + (size_t)(r0 + r) * C + c0 + 4 * lane) = q4<Q>(v, s);
        }
    }

    if (qt) { /* column pass */
        float s = tile_s;
        if (!tiles) {
            cmax[half][col] = col_amax<S>(tile, half, col);
            __syncthreads();
            s = block_scale(fmaxf(cmax[0][col], cmax[1][col]), fp8_max, pow2, vfi);
            if (half == 0) qt_sinv[(size_t)(r0 / BT_EDGE) * C + c0 + col] = __frcp_rn(s);
        }
        col_store<S, Q>(tile, half, col, s, qt + (size_t)(c0 + col) * rows + r0);
    }
}

/* The F32 tile (64 KiB) needs the opt-in above the default 48 KiB of dynamic shared memory;
 * set once per kernel (a host-side attribute, not a stream operation). */
template <typename S, typename Q>
static cudaError_t launch_one(cudaStream_t st, dim3 grid, float fmax, const void *src, int rows, int cols, int tiles,
                              int pow2, void *q, float *q_sinv, void *qt, float *qt_sinv) {
    const int bytes = BT_EDGE * BT_EDGE * (int)sizeof(S);
    static bool attr_set = false;
    if (!attr_set) {
        cudaError_t e = cudaFuncSetAttribute(quant_block_kernel<S, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             bytes);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    quant_block_kernel<S, Q><<<grid, BT_THREADS, bytes, st>>>((const S *)src, rows, cols, tiles, pow2, fmax,
                                                             (uint8_t *)q, q_sinv, (uint8_t *)qt, qt_sinv);
    return cudaGetLastError();
}

template <typename S>
static cudaError_t launch_t(cudaStream_t st, dim3 grid, int e4, const void *src, int rows, int cols, int tiles,
                            int pow2, void *q, float *q_sinv, void *qt, float *qt_sinv) {
    if (e4) return launch_one<S, snn_e4m3>(st, grid, 448.0f, src, rows, cols, tiles, pow2, q, q_sinv, qt, qt_sinv);
    return launch_one<S, snn_e5m2>(st, grid, 57344.0f, src, rows, cols, tiles, pow2, q, q_sinv, qt, qt_sinv);
}

extern "C" size_t snn_cuda_fp8_block_scale_count(int tiles, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return 0;
    size_t br = ((size_t)rows + BT_EDGE - 1) / BT_EDGE, bc = ((size_t)cols + BT_EDGE - 1) / BT_EDGE;
    return tiles ? br * ((bc + 3) & ~(size_t)3) : bc * (size_t)rows;
}

extern "C" snn_status snn_cuda_quantize_fp8_block(snn_cuda *c, snn_dtype q_type, int tiles, int pow2,
                                                  snn_dtype src_type, const void *src, int rows, int cols,
                                                  void *q, float *q_sinv, void *qt, float *qt_sinv) {
    if (q_type != SNN_F8E4M3 && q_type != SNN_F8E5M2)
        return snn_error(SNN_E_INVALID, "FP8 block quantisation needs an E4M3 or E5M2 target (got %s)",
                         snn_cuda_dtype_name(q_type));
    if (src_type != SNN_F32 && src_type != SNN_BF16 && src_type != SNN_F16)
        return snn_error(SNN_E_INVALID, "FP8 block quantisation reads F32, BF16 or F16 (got %s)",
                         snn_cuda_dtype_name(src_type));
    if (!src || rows <= 0 || cols <= 0 || rows % BT_EDGE || cols % BT_EDGE)
        return snn_error(SNN_E_SHAPE,
                         "FP8 block quantisation needs a [rows][cols] source with both dimensions multiples "
                         "of 128 (got %d x %d): pad the tensor",
                         rows, cols);
    if (!!q != !!q_sinv || !!qt != !!qt_sinv || (!q && !qt))
        return snn_error(SNN_E_INVALID, "FP8 block quantisation: give q with q_sinv and/or qt with qt_sinv");
    if ((q && !snn_aligned(q, 16)) || (qt && !snn_aligned(qt, 16)) || !snn_aligned(src, 16))
        return snn_error(SNN_E_INVALID, "FP8 block quantisation needs 16-byte aligned source and outputs");
    dim3 grid((unsigned)(cols / BT_EDGE), (unsigned)(rows / BT_EDGE));
    cudaStream_t st = snn_cuda_stream_of(c);
    const int e4 = q_type == SNN_F8E4M3;
    cudaError_t e;
    if (src_type == SNN_F32) e = launch_t<float>(st, grid, e4, src, rows, cols, !!tiles, !!pow2, q, q_sinv, qt, qt_sinv);
    else if (src_type == SNN_BF16)
        e = launch_t<__nv_bfloat16>(st, grid, e4, src, rows, cols, !!tiles, !!pow2, q, q_sinv, qt, qt_sinv);
    else e = launch_t<__half>(st, grid, e4, src, rows, cols, !!tiles, !!pow2, q, q_sinv, qt, qt_sinv);
    if (e != cudaSuccess) return snn_cuda_fail(e, "quant_block_kernel");
    return SNN_OK;
}
