/* Flash-style causal attention for 16-bit products: the CUDA table's attention_forward /
 * attention_backward when t is F16 / BF16, the head size is 32 or 64 and S >= 2 (else the
 * cuBLASLt path of cuda_attn_gemm.cu; SNN_CUDA_ATTENTION=gemm forces that one).
 *
 * The contract is backend.h's: P = softmax(scale q k^T) over keys 0..i, rounded to t where it
 * multiplies v, y = P v; backward dP = dy v^T, dZ = P (dP - rowsum(dP P)), rounded to t where
 * it multiplies, dq = scale dZ k, dk = scale sum_h dZ^T q, dv = sum_h P^T dy. What changes is
 * where the S x S matrices live: in registers, one 64 x 64 tile at a time, never in memory.
 * The products are mma.sync m16n8k16 with FP32 accumulation; operands are rounded to t (RNE)
 * as the tiles are loaded from the FP32 arrays, so no cast pass runs either.
 *
 *   forward   one block per 64 queries of one head. Pass 1 over the key tiles up to the
 *             diagonal: the row max m and the sum l of exp(z - m) (online: l rescaled when m
 *             grows). Pass 2: p = exp(z - m) (1 / l) exactly as the reference normalises it,
 *             rounded to t, y += p v. Saved for the backward instead of P: [R][H][S][2] =
 *             (m, 1 / l) per query row, in the first floats of P (attention_saves_probs = 0).
 *             Two passes instead of the usual rescaled single pass so that the 16-bit P that
 *             multiplies v is the reference's normalised P, not exp(z - running max).
 *   backward  dq: one block per 64 queries; a first sweep over the key tiles recomputes P and
 *             dP and sums c = rowsum(dP P) (double per thread), kept in `work` [R][H][S] for
 *             the second kernel; a second sweep forms dZ and accumulates dq.
 *             dk, dv: one block per 64 keys of one group, looping over the group's heads and
 *             the query tiles from the diagonal down: P^T and dZ^T recomputed (from m, 1/l, c),
 *             dv += P^T dy, dk += dZ^T q. Every output element is written by one thread once:
 *             no atomics, the same result on every run.
 * Recomputing the scores costs FLOPs (10 tile products per pair instead of the 6 of the
 * materialised path) but only the causal half is computed, and the S x S traffic goes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_table.h"

namespace {

constexpr int FB = 64;        /* queries per block and keys per tile */
constexpr int FT = 128;       /* threads: 4 warps of 16 rows */

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

/* The 16-bit type's bits, its packing of two values and its tensor-core product. */
template <typename T> struct fa;
template <> struct fa<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
               (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct fa<__half> {
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | (uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16;
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

/* Rows r0..r0+63 of an FP32 matrix (row stride ld floats, D columns from src) into a tile
 * s[64][D + 8] of t values (RNE); rows at or past S are zeros. The 8 padding columns put the
 * 8 rows a fragment load touches on distinct banks. */
template <typename T, int D>
__device__ __forceinline__ void load_tile(uint16_t *s, const float *src, size_t ld, int r0, int S) {
    constexpr int V4 = D / 4, LD = D + 8;
    for (int e = threadIdx.x; e < FB * V4; e += FT) {
        const int r = e / V4, c = (e % V4) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < S) v = *reinterpret_cast<const float4 *>(src + (size_t)(r0 + r) * ld + c);
        uint2 w;
        w.x = fa<T>::pack(v.x, v.y);
        w.y = fa<T>::pack(v.z, v.w);
        *reinterpret_cast<uint2 *>(s + r * LD + c) = w;
    }
}

/* Fragments of m16n8k16 (PTX ISA layouts; g = lane / 4, q = lane % 4):
 *   A 16 x 16 row-major at (r0, k0): {(g, 2q..2q+1), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..)}
 *   B 16 x 8: {(k 2q..2q+1, n g), (k 2q+8..2q+9, n g)}
 *   C 16 x 8: c0, c1 at (g, 2q..2q+1), c2, c3 at (g+8, 2q..2q+1). */
__device__ __forceinline__ void ld_a(uint32_t a[4], const uint16_t *s, int ld, int r0, int k0) {
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const uint16_t *p = s + (r0 + g) * ld + k0 + 2 * q;
    a[0] = *reinterpret_cast<const uint32_t *>(p);
    a[1] = *reinterpret_cast<const uint32_t *>(p + 8 * ld);
    a[2] = *reinterpret_cast<const uint32_t *>(p + 8);
    a[3] = *reinterpret_cast<const uint32_t *>(p + 8 * ld + 8);
}
/* B[k][n] = s[n0 + n][k0 + k]: the tile's rows are B's columns (keys for q k^T). */
__device__ __forceinline__ void ld_b_rows(uint32_t b[2], const uint16_t *s, int ld, int n0, int k0) {
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const uint16_t *p = s + (n0 + g) * ld + k0 + 2 * q;
    b[0] = *reinterpret_cast<const uint32_t *>(p);
    b[1] = *reinterpret_cast<const uint32_t *>(p + 8);
}
/* B[k][n] = s[k0 + k][n0 + n]: the tile's rows are B's rows (values for P v). Two 16-bit
 * loads per register; with the padded row the 32 lanes touch 16 distinct banks. */
__device__ __forceinline__ void ld_b_cols(uint32_t b[2], const uint16_t *s, int ld, int k0, int n0) {
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const uint16_t *p = s + (k0 + 2 * q) * ld + n0 + g;
    b[0] = (uint32_t)p[0] | (uint32_t)p[ld] << 16;
    b[1] = (uint32_t)p[8 * ld] | (uint32_t)p[9 * ld] << 16;
}
/* Two C tiles (n-tiles 2k, 2k + 1 of a 16-row strip) as the A fragment of the next product:
 * the 16 columns they cover become its 16 k. */
template <typename T>
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = fa<T>::pack(c0[0], c0[1]);
    a[1] = fa<T>::pack(c0[2], c0[3]);
    a[2] = fa<T>::pack(c1[0], c1[1]);
    a[3] = fa<T>::pack(c1[2], c1[3]);
}

/* acc[8][4] = A-strip (16 rows at r0 of sa) times the 64 rows of sb as B columns, over D. */
template <typename T, int D>
__device__ __forceinline__ void strip_product(float acc[8][4], const uint16_t *sa, int r0, const uint16_t *sb) {
    constexpr int LD = D + 8;
#pragma unroll
    for (int n = 0; n < 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
        uint32_t a[4];
        ld_a(a, sa, LD, r0, k * 16);
#pragma unroll
        for (int n = 0; n < 8; n++) {
            uint32_t b[2];
            ld_b_rows(b, sb, LD, n * 8, k * 16);
            fa<T>::mma(acc[n], a, b);
        }
    }
}

/* out[D/8][4] += (the 16 x 64 strip held as C tiles, rounded to T) times sb's 64 rows. */
template <typename T, int D>
__device__ __forceinline__ void strip_times_tile(float out[D / 8][4], const float c[8][4], const uint16_t *sb) {
    constexpr int LD = D + 8;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t a[4];
        c_to_a<T>(a, c[2 * k], c[2 * k + 1]);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            uint32_t b[2];
            ld_b_cols(b, sb, LD, k * 16, n * 8);
            fa<T>::mma(out[n], a, b);
        }
    }
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ double quad_sum_d(double v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* The C element (n, e) of a strip: row offset (e >= 2 ? 8 : 0) + g, column n 8 + 2 q + (e & 1). */
__device__ __forceinline__ int c_col(int n, int e) { return n * 8 + 2 * (threadIdx.x & 3) + (e & 1); }

/* p = exp(z - m) inv on the reference's operations, z = scale acc; 0 where masked. */
__device__ __forceinline__ float prob(float acc, float scale, float m, float inv, bool ok) {
    return ok ? __fmul_rn(expf(__fsub_rn(__fmul_rn(scale, acc), m)), inv) : 0.0f;
}

template <typename T, int D>
__global__ void __launch_bounds__(FT) fa_fwd_kernel(int S, int H, int G, float scale, const float *x, float *y,
                                                    float *ml) {
    constexpr int LD = D + 8;
    __shared__ __align__(16) uint16_t sq[FB * LD], sk[FB * LD], sv[FB * LD];
    const int qb = (int)gridDim.x - 1 - (int)blockIdx.x; /* the longest rows first */
    const int h = blockIdx.y, g = h / (H / G), W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z;
    const float *xb = x + b * (size_t)S * W;
    const int q0 = qb * FB, r0 = (threadIdx.x >> 5) * 16, gr = (threadIdx.x & 31) >> 2;
    const int i0 = q0 + r0 + gr, i1 = i0 + 8; /* this thread's two query rows */
    const int last = min(q0 + FB - 1, S - 1) / FB;
    load_tile<T, D>(sq, xb + (size_t)h * D, W, q0, S);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float s[8][4];
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads();
        load_tile<T, D>(sk, xb + (size_t)(H + g) * D, W, kb * FB, S);
        __syncthreads();
        strip_product<T, D>(s, sq, r0, sk);
        float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = kb * FB + c_col(n, e), i = e < 2 ? i0 : i1;
                const float z = j <= i && j < S ? __fmul_rn(scale, s[n][e]) : -INFINITY;
                s[n][e] = z;
                if (e < 2) x0 = fmaxf(x0, z);
                else x1 = fmaxf(x1, z);
            }
        const float n0 = fmaxf(m0, quad_max(x0)), n1 = fmaxf(m1, quad_max(x1));
        float e0 = 0.0f, e1 = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float z = s[n][e];
                if (e < 2) e0 += z == -INFINITY ? 0.0f : expf(__fsub_rn(z, n0));
                else e1 += z == -INFINITY ? 0.0f : expf(__fsub_rn(z, n1));
            }
        l0 = (m0 == -INFINITY ? 0.0f : l0 * expf(m0 - n0)) + quad_sum(e0);
        l1 = (m1 == -INFINITY ? 0.0f : l1 * expf(m1 - n1)) + quad_sum(e1);
        m0 = n0;
        m1 = n1;
    }
    const float v0 = (float)(1.0 / (double)l0), v1 = (float)(1.0 / (double)l1);
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads();
        load_tile<T, D>(sk, xb + (size_t)(H + g) * D, W, kb * FB, S);
        load_tile<T, D>(sv, xb + (size_t)(H + G + g) * D, W, kb * FB, S);
        __syncthreads();
        strip_product<T, D>(s, sq, r0, sk);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = kb * FB + c_col(n, e), i = e < 2 ? i0 : i1;
                s[n][e] = e < 2 ? prob(s[n][e], scale, m0, v0, j <= i && j < S)
                                : prob(s[n][e], scale, m1, v1, j <= i && j < S);
            }
        strip_times_tile<T, D>(o, s, sv);
    }
    const int q = threadIdx.x & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = half ? i1 : i0;
        if (i >= S) continue;
        float *yo = y + (b * (size_t)S + i) * OW + (size_t)h * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<float2 *>(yo + n * 8 + 2 * q) = make_float2(o[n][2 * half], o[n][2 * half + 1]);
        if (q == 0) {
            float *st = ml + ((b * H + h) * (size_t)S + i) * 2;
            st[0] = half ? m1 : m0;
            st[1] = half ? v1 : v0;
        }
    }
}

/* The saved (m, 1/l) of query row i (zeros past S: those rows are never written). */
__device__ __forceinline__ float2 row_state(const float *ml, size_t row0, int i, int S) {
    return i < S ? *reinterpret_cast<const float2 *>(ml + (row0 + i) * 2) : make_float2(0.0f, 0.0f);
}

template <typename T, int D>
__global__ void __launch_bounds__(FT) fa_bwd_q_kernel(int S, int H, int G, float scale, const float *x,
                                                      const float *ml, const float *dy, float *dx, float *crow) {
    constexpr int LD = D + 8;
    __shared__ __align__(16) uint16_t sq[FB * LD], sdo[FB * LD], sk[FB * LD], sv[FB * LD];
    const int qb = (int)gridDim.x - 1 - (int)blockIdx.x;
    const int h = blockIdx.y, g = h / (H / G), W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z, row0 = (b * H + h) * (size_t)S;
    const float *xb = x + b * (size_t)S * W;
    const int q0 = qb * FB, r0 = (threadIdx.x >> 5) * 16, gr = (threadIdx.x & 31) >> 2;
    const int i0 = q0 + r0 + gr, i1 = i0 + 8;
    const int last = min(q0 + FB - 1, S - 1) / FB;
    load_tile<T, D>(sq, xb + (size_t)h * D, W, q0, S);
    load_tile<T, D>(sdo, dy + b * (size_t)S * OW + (size_t)h * D, OW, q0, S);
    const float2 st0 = row_state(ml, row0, i0, S), st1 = row_state(ml, row0, i1, S);
    float s[8][4], dp[8][4];
    double c0 = 0.0, c1 = 0.0;
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads();
        load_tile<T, D>(sk, xb + (size_t)(H + g) * D, W, kb * FB, S);
        load_tile<T, D>(sv, xb + (size_t)(H + G + g) * D, W, kb * FB, S);
        __syncthreads();
        strip_product<T, D>(s, sq, r0, sk);
        strip_product<T, D>(dp, sdo, r0, sv);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = kb * FB + c_col(n, e), i = e < 2 ? i0 : i1;
                const float2 st = e < 2 ? st0 : st1;
                const float p = prob(s[n][e], scale, st.x, st.y, j <= i && j < S);
                if (e < 2) c0 += (double)dp[n][e] * (double)p;
                else c1 += (double)dp[n][e] * (double)p;
            }
    }
    const float cr0 = (float)quad_sum_d(c0), cr1 = (float)quad_sum_d(c1);
    if ((threadIdx.x & 3) == 0) {
        if (i0 < S) crow[row0 + i0] = cr0;
        if (i1 < S) crow[row0 + i1] = cr1;
    }
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int kb = 0; kb <= last; kb++) {
        __syncthreads();
        load_tile<T, D>(sk, xb + (size_t)(H + g) * D, W, kb * FB, S);
        load_tile<T, D>(sv, xb + (size_t)(H + G + g) * D, W, kb * FB, S);
        __syncthreads();
        strip_product<T, D>(s, sq, r0, sk);
        strip_product<T, D>(dp, sdo, r0, sv);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = kb * FB + c_col(n, e), i = e < 2 ? i0 : i1;
                const bool ok = j <= i && j < S;
                const float2 st = e < 2 ? st0 : st1;
                const float p = prob(s[n][e], scale, st.x, st.y, ok);
                s[n][e] = ok ? __fmul_rn(p, __fsub_rn(dp[n][e], e < 2 ? cr0 : cr1)) : 0.0f;
            }
        strip_times_tile<T, D>(o, s, sk);
    }
    const int q = threadIdx.x & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = half ? i1 : i0;
        if (i >= S) continue;
        float *dq = dx + (b * (size_t)S + i) * W + (size_t)h * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<float2 *>(dq + n * 8 + 2 * q) =
                make_float2(__fmul_rn(scale, o[n][2 * half]), __fmul_rn(scale, o[n][2 * half + 1]));
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(FT) fa_bwd_kv_kernel(int S, int H, int G, float scale, const float *x,
                                                       const float *ml, const float *dy, const float *crow,
                                                       float *dx) {
    constexpr int LD = D + 8;
    __shared__ __align__(16) uint16_t sk[FB * LD], sv[FB * LD], sq[FB * LD], sdo[FB * LD];
    __shared__ float sm[FB], sinv[FB], sc[FB];
    const int kb = blockIdx.x; /* the first key tiles have the most queries: they start first */
    const int g = blockIdx.y, rep = H / G, W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z;
    const float *xb = x + b * (size_t)S * W;
    const int k0 = kb * FB, r0 = (threadIdx.x >> 5) * 16, gr = (threadIdx.x & 31) >> 2;
    const int j0 = k0 + r0 + gr, j1 = j0 + 8; /* this thread's two key rows */
    const int nqb = (S + FB - 1) / FB;
    load_tile<T, D>(sk, xb + (size_t)(H + g) * D, W, k0, S);
    load_tile<T, D>(sv, xb + (size_t)(H + G + g) * D, W, k0, S);
    float dk[D / 8][4], dv[D / 8][4], s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        const size_t row0 = (b * H + h) * (size_t)S;
        for (int qb = kb; qb < nqb; qb++) {
            const int q0 = qb * FB;
            __syncthreads();
            load_tile<T, D>(sq, xb + (size_t)h * D, W, q0, S);
            load_tile<T, D>(sdo, dy + b * (size_t)S * OW + (size_t)h * D, OW, q0, S);
            if (threadIdx.x < FB) {
                const int i = q0 + threadIdx.x;
                const float2 st = row_state(ml, row0, i, S);
                sm[threadIdx.x] = st.x;
                sinv[threadIdx.x] = st.y;
                sc[threadIdx.x] = i < S ? crow[row0 + i] : 0.0f;
            }
            __syncthreads();
            strip_product<T, D>(s, sk, r0, sq);   /* S^T: keys x queries */
            strip_product<T, D>(dp, sv, r0, sdo); /* dP^T */
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = c_col(n, e), i = q0 + c, j = e < 2 ? j0 : j1;
                    const bool ok = j <= i && i < S && j < S;
                    const float p = prob(s[n][e], scale, sm[c], sinv[c], ok);
                    s[n][e] = p;
                    dp[n][e] = ok ? __fmul_rn(p, __fsub_rn(dp[n][e], sc[c])) : 0.0f;
                }
            strip_times_tile<T, D>(dv, s, sdo);
            strip_times_tile<T, D>(dk, dp, sq);
        }
    }
    const int q = threadIdx.x & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int j = half ? j1 : j0;
        if (j >= S) continue;
        float *dko = dx + (b * (size_t)S + j) * W + (size_t)(H + g) * D, *dvo = dko + (size_t)G * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            *reinterpret_cast<float2 *>(dko + n * 8 + 2 * q) =
                make_float2(__fmul_rn(scale, dk[n][2 * half]), __fmul_rn(scale, dk[n][2 * half + 1]));
            *reinterpret_cast<float2 *>(dvo + n * 8 + 2 * q) = make_float2(dv[n][2 * half], dv[n][2 * half + 1]);
        }
    }
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <typename T, int D>
void launch_fwd(cudaStream_t st, int R, int S, int H, int G, float scale, const float *x, float *y, float *ml) {
    const dim3 grid((unsigned)((S + FB - 1) / FB), (unsigned)H, (unsigned)R);
    fa_fwd_kernel<T, D><<<grid, FT, 0, st>>>(S, H, G, scale, x, y, ml);
}

template <typename T, int D>
void launch_bwd(cudaStream_t st, int R, int S, int H, int G, float scale, const float *x, const float *ml,
                const float *dy, float *dx, float *crow) {
    const unsigned nb = (unsigned)((S + FB - 1) / FB);
    fa_bwd_q_kernel<T, D><<<dim3(nb, (unsigned)H, (unsigned)R), FT, 0, st>>>(S, H, G, scale, x, ml, dy, dx, crow);
    fa_bwd_kv_kernel<T, D><<<dim3(nb, (unsigned)G, (unsigned)R), FT, 0, st>>>(S, H, G, scale, x, ml, dy, crow, dx);
}

} // namespace

int snn_cuda_attn_flash_ok(snn_dtype t, int R, int S, int H, int hd) {
    const char *a = getenv("SNN_CUDA_ATTENTION");
    if (a && *a) return 0; /* gemm / naive: the materialised paths */
    return (t == SNN_BF16 || t == SNN_F16) && (hd == 32 || hd == 64) && S >= 2 && R <= 65535 && H <= 65535;
}

snn_status snn_cuda_attn_flash_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                       float scale, const float *x, float *y, float *P) {
    if (!aligned16(x) || !aligned16(y) || !aligned16(P))
        return snn_error(SNN_E_INVALID, "attention_forward: device buffers must be 16-byte aligned");
    cudaStream_t st = st_of(be);
    if (t == SNN_BF16 && hd == 64) launch_fwd<__nv_bfloat16, 64>(st, R, S, H, G, scale, x, y, P);
    else if (t == SNN_BF16) launch_fwd<__nv_bfloat16, 32>(st, R, S, H, G, scale, x, y, P);
    else if (hd == 64) launch_fwd<__half, 64>(st, R, S, H, G, scale, x, y, P);
    else launch_fwd<__half, 32>(st, R, S, H, G, scale, x, y, P);
    SNN_CU_LAUNCHED("attention_forward (flash)");
    return SNN_OK;
}

snn_status snn_cuda_attn_flash_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                        float scale, const float *x, const float *P, const float *dy, float *dx,
                                        float *work) {
    if (!aligned16(x) || !aligned16(P) || !aligned16(dy) || !aligned16(dx))
        return snn_error(SNN_E_INVALID, "attention_backward: device buffers must be 16-byte aligned");
    cudaStream_t st = st_of(be);
    if (t == SNN_BF16 && hd == 64) launch_bwd<__nv_bfloat16, 64>(st, R, S, H, G, scale, x, P, dy, dx, work);
    else if (t == SNN_BF16) launch_bwd<__nv_bfloat16, 32>(st, R, S, H, G, scale, x, P, dy, dx, work);
    else if (hd == 64) launch_bwd<__half, 64>(st, R, S, H, G, scale, x, P, dy, dx, work);
    else launch_bwd<__half, 32>(st, R, S, H, G, scale, x, P, dy, dx, work);
    SNN_CU_LAUNCHED("attention_backward (flash)");
    return SNN_OK;
}
