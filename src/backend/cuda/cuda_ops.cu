/* Elementwise and reduction kernels: conversions, amax and FP8 quantisation (with
 * transpose), bias add and column sums, cross-entropy on the mean over T, fused SGD-momentum. */
#include <float.h>
#include <stdint.h>

#include "backend/cuda/cuda_internal.h"

/* ---- type-erased element access (runtime type; used where speed is secondary) ---- */
__device__ __forceinline__ float ld_any(snn_dtype t, const void *p, size_t i) {
    switch (t) {
    case SNN_F32: return ((const float *)p)[i];
    case SNN_BF16: return Io<__nv_bfloat16>::ld(((const __nv_bfloat16 *)p)[i]);
    case SNN_F16: return Io<__half>::ld(((const __half *)p)[i]);
    case SNN_F8E4M3: return Io<snn_e4m3>::ld(((const snn_e4m3 *)p)[i]);
    default: return Io<snn_e5m2>::ld(((const snn_e5m2 *)p)[i]);
    }
}

__device__ __forceinline__ float sat_to(snn_dtype t, float f) {
    float m = t == SNN_F16 ? 65504.0f : 3.38953139e38f; /* largest finite f16 / bf16 */
    return isnan(f) ? f : fminf(fmaxf(f, -m), m);
}

__device__ __forceinline__ void st_any(snn_dtype t, void *p, size_t i, float f, int sat) {
    switch (t) {
    case SNN_F32: ((float *)p)[i] = f; break;
    case SNN_BF16: ((__nv_bfloat16 *)p)[i] = Io<__nv_bfloat16>::st(sat ? sat_to(t, f) : f); break;
    case SNN_F16: ((__half *)p)[i] = Io<__half>::st(sat ? sat_to(t, f) : f); break;
    case SNN_F8E4M3: ((snn_e4m3 *)p)[i] = Io<snn_e4m3>::st(f); break;
    default: ((snn_e5m2 *)p)[i] = Io<snn_e5m2>::st(f); break;
    }
}

static snn_status check_type(snn_dtype t, const char *what) {
    if (snn_cuda_dsize(t) == 0)
        return snn_error(SNN_E_UNSUPPORTED, "%s: type %s is not supported on the GPU", what,
                         snn_cuda_dtype_name(t));
    return SNN_OK;
}

static unsigned grid_stride_blocks(snn_cuda *c, size_t n, unsigned block) {
    unsigned g = snn_grid(n, block), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    return g < cap ? g : cap;
}

__global__ void convert_kernel(snn_dtype dt, void *dst, snn_dtype stype, const void *src,
                               size_t n, const float *scale, int sat) {
    const float sc = scale ? *scale : 1.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st_any(dt, dst, i, ld_any(stype, src, i) * sc, sat);
}

/* The common case, FP32 to F16 / BF16 without a scale (every 16-bit GEMM operand): four
 * values a thread, one 16-byte load and one 8-byte store, the type fixed at compile time. The
 * runtime-typed kernel above moved these at about 40 % of the memory bandwidth (H200 profile
 * of the GPT-2 124M training step, 2026-12-03). */
template <typename T> struct Pack4 {
    T v[4];
};
template <typename T>
__global__ void cvt16_vec_kernel(T *__restrict__ dst, const float4 *__restrict__ src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 f = src[i];
        Pack4<T> o;
        o.v[0] = Io<T>::st(f.x);
        o.v[1] = Io<T>::st(f.y);
        o.v[2] = Io<T>::st(f.z);
        o.v[3] = Io<T>::st(f.w);
        reinterpret_cast<Pack4<T> *>(dst)[i] = o;
    }
}

static bool cvt16_vec(snn_cuda *c, snn_dtype dt, void *dst, const float *src, size_t n) {
    if (((uintptr_t)dst % 8) || ((uintptr_t)src % 16) || n < 4) return false;
    const size_t n4 = n / 4;
    const unsigned g = grid_stride_blocks(c, n4, 256);
    if (dt == SNN_BF16)
        cvt16_vec_kernel<__nv_bfloat16><<<g, 256, 0, snn_cuda_stream_of(c)>>>((__nv_bfloat16 *)dst,
                                                                              (const float4 *)src, n4);
    else
        cvt16_vec_kernel<__half><<<g, 256, 0, snn_cuda_stream_of(c)>>>((__half *)dst, (const float4 *)src, n4);
    return true;
}

/* rows x cols of FP32 (leading dimension lds) into a 16-bit copy of prows x pcols (leading
 * dimension ldd), the elements outside rows x cols written as zeros: a GEMM operand padded to
 * extents cuBLASLt's aligned kernels take (the LM head's vocabulary of 50257 ran on align1
 * kernels at about a tenth of the tensor-core rate); zeros in the padded K contribute nothing. */
template <typename T>
__global__ void cvt16_2d_kernel(T *__restrict__ dst, size_t ldd, int prows, int pcols, const float *__restrict__ src,
                                size_t lds, int rows, int cols) {
    for (int r = blockIdx.y; r < prows; r += gridDim.y) {
        const float *s = src + (size_t)r * lds;
        T *d = dst + (size_t)r * ldd;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < pcols; j += gridDim.x * blockDim.x)
            d[j] = Io<T>::st(r < rows && j < cols ? s[j] : 0.0f);
    }
}

extern "C" snn_status snn_cuda_convert_2d(snn_cuda *c, snn_dtype dst_type, void *dst, size_t ldd, int prows,
                                          int pcols, const float *src, size_t lds, int rows, int cols) {
    if (dst_type != SNN_BF16 && dst_type != SNN_F16)
        return snn_error(SNN_E_UNSUPPORTED, "convert_2d: type %s (f16, bf16)", snn_cuda_dtype_name(dst_type));
    if (rows < 0 || cols < 0 || prows < rows || pcols < cols || (prows > 0 && ldd < (size_t)pcols) ||
        (rows > 0 && lds < (size_t)cols))
        return snn_error(SNN_E_INVALID, "convert_2d: %d x %d (padded %d x %d) in leading dimensions %zu, %zu", rows,
                         cols, prows, pcols, ldd, lds);
    if (prows == 0 || pcols == 0) return SNN_OK;
    const dim3 grid((unsigned)((pcols + 255) / 256 < 8 ? (pcols + 255) / 256 : 8),
                    (unsigned)(prows < 65535 ? prows : 65535));
    if (dst_type == SNN_BF16)
        cvt16_2d_kernel<__nv_bfloat16><<<grid, 256, 0, snn_cuda_stream_of(c)>>>((__nv_bfloat16 *)dst, ldd, prows,
                                                                                pcols, src, lds, rows, cols);
    else
        cvt16_2d_kernel<__half><<<grid, 256, 0, snn_cuda_stream_of(c)>>>((__half *)dst, ldd, prows, pcols, src, lds,
                                                                         rows, cols);
    SNN_CU_LAUNCHED("convert_2d");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_convert(snn_cuda *c, snn_dtype dst_type, void *dst,
                                       snn_dtype src_type, const void *src, size_t n,
                                       const float *scale, unsigned flags) {
    SNN_TRY(check_type(dst_type, "convert"));
    SNN_TRY(check_type(src_type, "convert"));
    if (n == 0) return SNN_OK;
    if (src_type == SNN_F32 && (dst_type == SNN_BF16 || dst_type == SNN_F16) && !scale &&
        !(flags & SNN_CONVERT_SATURATE) && cvt16_vec(c, dst_type, dst, (const float *)src, n)) {
        SNN_CU_LAUNCHED("convert");
        const size_t done = n / 4 * 4;
        if (done == n) return SNN_OK;
        dst = (char *)dst + done * 2;
        src = (const float *)src + done;
        n -= done;
    }
    convert_kernel<<<grid_stride_blocks(c, n, 256), 256, 0, snn_cuda_stream_of(c)>>>(
        dst_type, dst, src_type, src, n, scale, (flags & SNN_CONVERT_SATURATE) ? 1 : 0);
    SNN_CU_LAUNCHED("convert");
    return SNN_OK;
}

/* ---- amax ---- */
__global__ void amax_kernel(snn_dtype t, const void *x, size_t n, float *amax) {
    float m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(ld_any(t, x, i))); /* fmaxf drops NaN */
    __shared__ float red[32];
    m = snn_warp_max(m);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
        m = snn_warp_max(m);
        if (threadIdx.x == 0) snn_atomic_max_pos(amax, m);
    }
}

extern "C" snn_status snn_cuda_amax(snn_cuda *c, snn_dtype type, const void *x, size_t n,
                                    float *amax) {
    SNN_TRY(check_type(type, "amax"));
    if (n == 0) return SNN_OK;
    amax_kernel<<<grid_stride_blocks(c, n, 256), 256, 0, snn_cuda_stream_of(c)>>>(type, x, n, amax);
    SNN_CU_LAUNCHED("amax");
    return SNN_OK;
}

/* ---- FP8 quantisation with optional transposed copy ---- */
__device__ __forceinline__ float scale_from_amax(float amax, float fp8_max) {
    if (!(amax > 0.0f) || isinf(amax) || isnan(amax)) return 1.0f;
    float s = __fdiv_rn(fp8_max, amax);
    return isinf(s) ? FLT_MAX : s;
}

#define TQ 32 /* transpose tile edge; block is TQ x 8 threads */

template <typename TQT>
__global__ void quantize_kernel(TQT *q, TQT *qt, snn_dtype stype, const void *src, int rows,
                                int cols, const float *amax, float fp8_max, float *scale_inv) {
    __shared__ float tile[TQ][TQ + 1];
    const float s = scale_from_amax(*amax, fp8_max);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
        *scale_inv = __frcp_rn(s);
    const int c0 = blockIdx.x * TQ, r0 = blockIdx.y * TQ;
    for (int dy = threadIdx.y; dy < TQ; dy += blockDim.y) {
        int r = r0 + dy, cc = c0 + threadIdx.x;
        if (r < rows && cc < cols) {
            float v = ld_any(stype, src, (size_t)r * cols + cc) * s;
            if (q) q[(size_t)r * cols + cc] = Io<TQT>::st(v);
            tile[dy][threadIdx.x] = v;
        }
    }
    if (!qt) return;
    __syncthreads();
    for (int dy = threadIdx.y; dy < TQ; dy += blockDim.y) {
        int cc = c0 + dy, r = r0 + threadIdx.x; /* output row = input column */
        if (cc < cols && r < rows) qt[(size_t)cc * rows + r] = Io<TQT>::st(tile[threadIdx.x][dy]);
    }
}

extern "C" snn_status snn_cuda_quantize_fp8(snn_cuda *c, snn_dtype q_type, void *q, void *qt,
                                            snn_dtype src_type, const void *src, int rows,
                                            int cols, const float *amax, float *scale_inv) {
    SNN_TRY(check_type(src_type, "quantize_fp8"));
    if (!snn_cuda_is_fp8(q_type))
        return snn_error(SNN_E_INVALID, "quantize_fp8 needs an FP8 target type, got %s",
                         snn_cuda_dtype_name(q_type));
    if (rows <= 0 || cols <= 0 || !amax || !scale_inv)
        return snn_error(SNN_E_INVALID, "quantize_fp8 needs positive sizes, amax and scale_inv");
    dim3 grid((cols + TQ - 1) / TQ, (rows + TQ - 1) / TQ), block(TQ, 8);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (q_type == SNN_F8E4M3)
        quantize_kernel<snn_e4m3><<<grid, block, 0, st>>>((snn_e4m3 *)q, (snn_e4m3 *)qt, src_type,
                                                          src, rows, cols, amax, 448.0f, scale_inv);
    else
        quantize_kernel<snn_e5m2><<<grid, block, 0, st>>>((snn_e5m2 *)q, (snn_e5m2 *)qt, src_type,
                                                          src, rows, cols, amax, 57344.0f, scale_inv);
    SNN_CU_LAUNCHED("quantize_fp8");
    return SNN_OK;
}

/* Byte transpose through a 64x64 shared tile; each thread moves 4-byte words on the read
 * side so a warp reads 128 contiguous bytes. */
#define TB 64
__global__ void transpose_u8_kernel(uint8_t *dst, const uint8_t *src, int rows, int cols) {
    __shared__ uint8_t tile[TB][TB + 4];
    const int c0 = blockIdx.x * TB, r0 = blockIdx.y * TB;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; /* 16 x 16 threads */
    const bool fast = (cols % 4 == 0) && c0 + TB <= cols;
    for (int dy = ty; dy < TB; dy += 16) {
        int r = r0 + dy;
        if (r >= rows) break;
        if (fast) {
            uint32_t w = *(const uint32_t *)(src + (size_t)r * cols + c0 + 4 * tx);
            tile[dy][4 * tx + 0] = (uint8_t)w;
            tile[dy][4 * tx + 1] = (uint8_t)(w >> 8);
            tile[dy][4 * tx + 2] = (uint8_t)(w >> 16);
            tile[dy][4 * tx + 3] = (uint8_t)(w >> 24);
        } else {
            for (int k = 0; k < 4; k++) {
                int cc = c0 + 4 * tx + k;
                if (cc < cols) tile[dy][4 * tx + k] = src[(size_t)r * cols + cc];
            }
        }
    }
    __syncthreads();
    const bool fast_out = (rows % 4 == 0) && r0 + TB <= rows;
    for (int dy = ty; dy < TB; dy += 16) { /* dy: output row offset = input column */
        int cc = c0 + dy;
        if (cc >= cols) break;
        if (fast_out) {
            uint32_t w = (uint32_t)tile[4 * tx + 0][dy] | ((uint32_t)tile[4 * tx + 1][dy] << 8) |
                         ((uint32_t)tile[4 * tx + 2][dy] << 16) |
                         ((uint32_t)tile[4 * tx + 3][dy] << 24);
            *(uint32_t *)(dst + (size_t)cc * rows + r0 + 4 * tx) = w;
        } else {
            for (int k = 0; k < 4; k++) {
                int r = r0 + 4 * tx + k;
                if (r < rows) dst[(size_t)cc * rows + r] = tile[4 * tx + k][dy];
            }
        }
    }
}

extern "C" snn_status snn_cuda_transpose_u8(snn_cuda *c, void *dst, const void *src, int rows,
                                            int cols) {
    if (rows <= 0 || cols <= 0) return snn_error(SNN_E_SHAPE, "transpose needs positive sizes");
    if (!snn_aligned(src, 4) || !snn_aligned(dst, 4))
        return snn_error(SNN_E_INVALID, "transpose_u8 needs 4-byte aligned buffers");
    dim3 grid((cols + TB - 1) / TB, (rows + TB - 1) / TB);
    transpose_u8_kernel<<<grid, 256, 0, snn_cuda_stream_of(c)>>>((uint8_t *)dst,
                                                                 (const uint8_t *)src, rows, cols);
    SNN_CU_LAUNCHED("transpose_u8");
    return SNN_OK;
}

/* ---- bias add and column sums ---- */
__global__ void bias_add_kernel(snn_dtype t, void *x, const float *bias, size_t rows, size_t cols) {
    size_t n = rows * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        st_any(t, x, i, ld_any(t, x, i) + bias[i % cols], 0);
}

extern "C" snn_status snn_cuda_bias_add(snn_cuda *c, snn_dtype type, void *x, const float *bias,
                                        int rows, int cols) {
    if (type != SNN_F32 && !snn_cuda_is_16(type))
        return snn_error(SNN_E_UNSUPPORTED, "bias_add supports f32, bf16, f16 (got %s)",
                         snn_cuda_dtype_name(type));
    if (rows <= 0 || cols <= 0) return snn_error(SNN_E_SHAPE, "bias_add needs positive sizes");
    size_t n = (size_t)rows * cols;
    bias_add_kernel<<<grid_stride_blocks(c, n, 256), 256, 0, snn_cuda_stream_of(c)>>>(
        type, x, bias, (size_t)rows, (size_t)cols);
    SNN_CU_LAUNCHED("bias_add");
    return SNN_OK;
}

/* 32 columns per block; threadIdx.y walks rows; fixed-order tree: deterministic. */
__global__ void colsum_kernel(snn_dtype t, const void *x, int rows, int cols, float beta,
                              float *out) {
    __shared__ float red[32][33];
    const int j = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < cols)
        for (int r = threadIdx.y; r < rows; r += blockDim.y)
            acc += ld_any(t, x, (size_t)r * cols + j);
    red[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float s = 0.0f;
        for (int k = 0; k < (int)blockDim.y; k++) s += red[k][threadIdx.x];
        out[j] = (beta == 0.0f ? 0.0f : beta * out[j]) + s;
    }
}

extern "C" snn_status snn_cuda_colsum(snn_cuda *c, snn_dtype type, const void *x, int rows,
                                      int cols, float beta, float *out) {
    if (type != SNN_F32 && !snn_cuda_is_16(type))
        return snn_error(SNN_E_UNSUPPORTED, "colsum supports f32, bf16, f16 (got %s)",
                         snn_cuda_dtype_name(type));
    if (rows <= 0 || cols <= 0) return snn_error(SNN_E_SHAPE, "colsum needs positive sizes");
    colsum_kernel<<<(cols + 31) / 32, dim3(32, 32), 0, snn_cuda_stream_of(c)>>>(type, x, rows, cols,
                                                                              beta, out);
    SNN_CU_LAUNCHED("colsum");
    return SNN_OK;
}

/* ---- cross-entropy on the mean over T ---- */
#define CE_BLOCK 128
__device__ float block_reduce(float v, bool is_max, float *red) {
    v = is_max ? snn_warp_max(v) : snn_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous reduction */
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = is_max ? -INFINITY : 0.0f;
    for (int i = 0; i < CE_BLOCK / 32; i++) r = is_max ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

__global__ void __launch_bounds__(CE_BLOCK)
    ce_kernel(int T, int B, int C, const float *logits, const float *bias, const int32_t *labels,
              float *work, snn_dtype dlt, void *dl, float grad_scale) {
    extern __shared__ float m[]; /* C mean logits */
    __shared__ float red[CE_BLOCK / 32];
    const int b = blockIdx.x;
    const float invT = 1.0f / (float)T;
    float mx = -INFINITY;
    for (int cc = threadIdx.x; cc < C; cc += CE_BLOCK) {
        float s = 0.0f;
        for (int t = 0; t < T; t++) s += logits[((size_t)t * B + b) * C + cc];
        s = s * invT + (bias ? bias[cc] : 0.0f);
        m[cc] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce(mx, true, red);
    float se = 0.0f;
    for (int cc = threadIdx.x; cc < C; cc += CE_BLOCK) se += expf(m[cc] - mx);
    se = block_reduce(se, false, red);
    const float lse = mx + logf(se);
    const int y = labels[b];
    const bool ok = y >= 0 && y < C;
    if (threadIdx.x == 0) work[b] = ok ? lse - m[y] : NAN;
    const float g = grad_scale / ((float)B * (float)T);
    for (int cc = threadIdx.x; cc < C; cc += CE_BLOCK) {
        float d = ok ? (expf(m[cc] - lse) - (cc == y ? 1.0f : 0.0f)) * g : NAN;
        for (int t = 0; t < T; t++) st_any(dlt, dl, ((size_t)t * B + b) * C + cc, d, 0);
    }
}

__global__ void __launch_bounds__(CE_BLOCK) mean_kernel(const float *work, int B, float *loss) {
    __shared__ float red[CE_BLOCK / 32];
    float s = 0.0f;
    for (int i = threadIdx.x; i < B; i += CE_BLOCK) s += work[i];
    s = block_reduce(s, false, red);
    if (threadIdx.x == 0) *loss = s / (float)B;
}

extern "C" snn_status snn_cuda_ce_mean_t(snn_cuda *c, int T, int B, int C, const float *logits,
                                         const float *bias, const int32_t *labels, float *loss,
                                         float *work, snn_dtype dl_type, void *dlogits,
                                         float grad_scale) {
    if (T <= 0 || B <= 0 || C <= 0)
        return snn_error(SNN_E_SHAPE, "cross-entropy needs positive T, B, C (%d, %d, %d)", T, B, C);
    if (C > 12288)
        return snn_error(SNN_E_UNSUPPORTED, "cross-entropy on the GPU supports up to 12288 classes "
                                            "(got %d)",
                         C);
    if (dl_type != SNN_F32 && !snn_cuda_is_16(dl_type))
        return snn_error(SNN_E_UNSUPPORTED, "dlogits type must be f32, bf16 or f16");
    if (!logits || !labels || !loss || !work || !dlogits)
        return snn_error(SNN_E_INVALID, "cross-entropy: NULL buffer");
    cudaStream_t st = snn_cuda_stream_of(c);
    ce_kernel<<<B, CE_BLOCK, (size_t)C * sizeof(float), st>>>(T, B, C, logits, bias, labels, work,
                                                             dl_type, dlogits, grad_scale);
    SNN_CU_LAUNCHED("cross_entropy");
    mean_kernel<<<1, CE_BLOCK, 0, st>>>(work, B, loss);
    SNN_CU_LAUNCHED("cross_entropy_mean");
    return SNN_OK;
}

/* ---- SGD with momentum on FP32 masters ---- */
template <typename TW, int V>
__global__ void sgd_kernel(snn_cuda_sgd h, size_t n, float *w, const float *grad, float *buf,
                           TW *work, float *amax, const int *skip) {
    const bool upd = !(skip && *skip);
    float mx = 0.0f;
    for (size_t i0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * V; i0 < n;
         i0 += (size_t)gridDim.x * blockDim.x * V) {
        Pack<float, V> wp = pack_ld<float, V>(w + i0);
        if (upd) {
            Pack<float, V> gp = pack_ld<float, V>(grad + i0), bp;
            if (h.momentum != 0.0f) bp = pack_ld<float, V>(buf + i0);
#pragma unroll
            for (int j = 0; j < V; j++) {
                float g = gp.v[j] * h.grad_scale + h.weight_decay * wp.v[j];
                float d = g;
                if (h.momentum != 0.0f) {
                    bp.v[j] = h.momentum * bp.v[j] + g;
                    d = h.nesterov ? g + h.momentum * bp.v[j] : bp.v[j];
                }
                wp.v[j] -= h.lr * d;
            }
            pack_st<float, V>(w + i0, wp);
            if (h.momentum != 0.0f) pack_st<float, V>(buf + i0, bp);
        }
        if (work) {
            Pack<TW, V> op;
#pragma unroll
            for (int j = 0; j < V; j++) op.v[j] = Io<TW>::st(wp.v[j]);
            pack_st<TW, V>(work + i0, op);
        }
#pragma unroll
        for (int j = 0; j < V; j++) mx = fmaxf(mx, fabsf(wp.v[j]));
    }
    if (!amax) return;
    __shared__ float red[32];
    mx = snn_warp_max(mx);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        mx = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
        mx = snn_warp_max(mx);
        if (threadIdx.x == 0) snn_atomic_max_pos(amax, mx);
    }
}

template <typename TW>
static void sgd_launch(snn_cuda *c, const snn_cuda_sgd *h, size_t n, float *w, const float *g,
                       float *buf, void *work, float *amax, const int *skip, int vec) {
    cudaStream_t st = snn_cuda_stream_of(c);
    if (vec)
        sgd_kernel<TW, 4><<<grid_stride_blocks(c, n / 4, 256), 256, 0, st>>>(
            *h, n, w, g, buf, (TW *)work, amax, skip);
    else
        sgd_kernel<TW, 1><<<grid_stride_blocks(c, n, 256), 256, 0, st>>>(*h, n, w, g, buf,
                                                                         (TW *)work, amax, skip);
}

extern "C" snn_status snn_cuda_sgd_update(snn_cuda *c, const snn_cuda_sgd *h, size_t n, float *w,
                                          const float *grad, float *buf, snn_dtype work_type,
                                          void *work, float *amax, const int *skip) {
    if (!h || !w || !grad) return snn_error(SNN_E_INVALID, "sgd_update: NULL argument");
    if (h->momentum != 0.0f && !buf)
        return snn_error(SNN_E_INVALID, "sgd_update: momentum needs a buffer");
    if (work && !snn_cuda_is_16(work_type))
        return snn_error(SNN_E_UNSUPPORTED, "sgd_update: the working copy must be bf16 or f16");
    if (n == 0) return SNN_OK;
    int vec = n % 4 == 0 && snn_aligned(w, 16) && snn_aligned(grad, 16) &&
              (!buf || snn_aligned(buf, 16)) && (!work || snn_aligned(work, 8));
    if (!work || work_type == SNN_BF16)
        sgd_launch<__nv_bfloat16>(c, h, n, w, grad, buf, work, amax, skip, vec);
    else
        sgd_launch<__half>(c, h, n, w, grad, buf, work, amax, skip, vec);
    SNN_CU_LAUNCHED("sgd_update");
    return SNN_OK;
}
