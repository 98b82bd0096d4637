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
 *   forward   one block per 128 queries of one head, 32 rows a warp (two 16-row strips that
 *             share every key / value fragment: half the shared-memory reads a product of
 *             16-row warps), the queries' fragments held in registers; one sweep over the key
 *             tiles up to the block's last query with the running row max m and sum l
 *             (FlashAttention's online softmax): p = exp(z - m_running) rounded to t multiplies
 *             v into an FP32 accumulator that is rescaled by exp(m_old - m_new) when m grows;
 *             y = acc (1 / l) at the end. A warp whose rows all precede a key tile skips it.
 *             The 16-bit value that multiplies v is exp(z - m_running), not the reference's
 *             normalised P: the same relative rounding (2^-9 for BF16) taken before instead of
 *             after the division, so y agrees with the reference to the 16-bit rounding of P,
 *             not bit for bit (test_cuda_table_lm's bound). Saved for the backward instead of
 *             P: [R][H][S][2] = (m, 1 / l) per query row (final values), in the first floats
 *             of P (attention_saves_probs = 0), and the output before any rounding of y,
 *             O [R][S][H hd], in `work`. (Until 2026-12-07 the forward made two sweeps, the
 *             first for m and l, so that the rounded P was the normalised one: a third more
 *             tile products and twice the exponentials.)
 *   backward  dq: one block per 64 queries. c = rowsum(dP P) is dy . O for each query row:
 *             sum_j (dy v_j) P_ij = dy . (sum_j P_ij v_j), with the P that multiplied v (its
 *             16-bit rounding) where the reference sums the unrounded P, a relative
 *             difference of about 2^-9 / sqrt(keys) in c. That replaces a sweep over the keys
 *             that recomputed P and dP. c is kept in `work` [R][H][S] for the second kernel;
 *             one sweep over the key tiles then forms dZ and accumulates dq.
 *             dk, dv: one block per 64 keys of one group, looping over the group's heads and
 *             the query tiles from the diagonal down: P^T and dZ^T recomputed (from m, 1/l, c),
 *             dv += P^T dy, dk += dZ^T q. Every output element is written by one thread once:
 *             no atomics, the same result on every run.
 * Recomputing the scores costs FLOPs (9 tile products per pair instead of the 6 of the
 * materialised path) but only the causal half is computed, and the S x S traffic goes. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_table.h"

namespace {

constexpr int FB = 64;        /* queries per block and keys per tile */
constexpr int FT = 128;       /* threads: 4 warps of 16 rows */
constexpr float LOG2E = 1.4426950408889634f;

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

/* The 16-bit type's bits, its packing of two values and its tensor-core product. */
template <typename T> struct fa;
template <> struct fa<__nv_bfloat16> {
    static __device__ __forceinline__ float unpack(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
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
    static __device__ __forceinline__ float unpack(uint16_t b) { return __half2float(__ushort_as_half(b)); }
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

/* Rows r0..r0+NR-1 of a matrix stored as E (row stride ld elements, D columns from src) into
 * a tile s[NR][D + 8] of t values: FP32 rounded (RNE), t itself copied; rows at or past S are
 * zeros. The 8 padding columns put the 8 rows a fragment load touches on distinct banks. */
template <typename T, int D, typename E, int NR = FB>
__device__ __forceinline__ void load_tile(uint16_t *s, const E *src, size_t ld, int r0, int S) {
    constexpr int V4 = D / 4, LD = D + 8;
    for (int e = threadIdx.x; e < NR * V4; e += FT) {
        const int r = e / V4, c = (e % V4) * 4;
        uint2 w = make_uint2(0u, 0u);
        if constexpr (std::is_same<E, float>::value) {
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r0 + r < S) v = *reinterpret_cast<const float4 *>(src + (size_t)(r0 + r) * ld + c);
            w.x = fa<T>::pack(v.x, v.y);
            w.y = fa<T>::pack(v.z, v.w);
        } else {
            if (r0 + r < S) w = *reinterpret_cast<const uint2 *>(src + (size_t)(r0 + r) * ld + c);
        }
        *reinterpret_cast<uint2 *>(s + r * LD + c) = w;
    }
}

/* The tiles of the loops are double-buffered: the next tile is fetched while the current one
 * is multiplied. 16-bit storage (E = T) is copied by cp.async, 16 bytes a chunk, zeros past S
 * (src-size 0); FP32 storage is converted on the way, so its fetch is load_tile's synchronous
 * one. Either way commit / wait keep the same group order (an FP32 group is empty). */
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void cp_async(void *dst, const void *src, int bytes, bool valid) {
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                     "r"(valid ? 16 : 0));
    else if (bytes == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                     "r"(valid ? 8 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                     "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* every group but the newest one complete, then the block's writes visible */
__device__ __forceinline__ void cp_wait_prev() {
    asm volatile("cp.async.wait_group 1;\n" ::);
    __syncthreads();
}

template <typename T, int D, typename E, int NR = FB>
__device__ __forceinline__ void fetch_tile(uint16_t *s, const E *src, size_t ld, int r0, int S) {
    if constexpr (std::is_same<E, float>::value) {
        load_tile<T, D, E, NR>(s, src, ld, r0, S);
    } else {
        constexpr int C = D / 8, LD = D + 8; /* 16-byte chunks a row */
        for (int e = threadIdx.x; e < NR * C; e += FT) {
            const int r = e / C, c = (e % C) * 8;
            const bool ok = r0 + r < S;
            cp_async(s + r * LD + c, ok ? (const void *)(src + (size_t)(r0 + r) * ld + c) : (const void *)src, 16,
                     ok);
        }
    }
}

/* Fragments of m16n8k16 (PTX ISA layouts; g = lane / 4, q = lane % 4):
 *   A 16 x 16 row-major at (r0, k0): {(g, 2q..2q+1), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..)}
 *   B 16 x 8: {(k 2q..2q+1, n g), (k 2q+8..2q+9, n g)}
 *   C 16 x 8: c0, c1 at (g, 2q..2q+1), c2, c3 at (g+8, 2q..2q+1).
 * Loaded with ldmatrix: lane l names row l % 8 of 8 x 8 matrix l / 8 (16-byte rows: the tile's
 * row stride D + 8 elements is a multiple of 16 bytes, and 8 rows 16 + 128 bytes apart land
 * on distinct banks); matrix i arrives in register i, without .trans as the A / C layout
 * (row g, columns 2q, 2q + 1), with .trans transposed (rows 2q, 2q + 1, column g). */
__device__ __forceinline__ void ldsm4(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], const uint16_t *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
/* A at (r0, k0): matrices (r0, k0), (r0 + 8, k0), (r0, k0 + 8), (r0 + 8, k0 + 8). */
__device__ __forceinline__ void ld_a(uint32_t a[4], const uint16_t *s, int ld, int r0, int k0) {
    const int l = threadIdx.x & 31, m = l >> 3;
    ldsm4(a, s + (r0 + (l & 7) + (m & 1) * 8) * ld + k0 + (m >> 1) * 8);
}
/* B[k][n] = s[n0 + n][k0 + k] for the two n-tiles n0, n0 + 8 (the tile's rows are B's
 * columns: keys for q k^T): b[0..1] the first, b[2..3] the second. */
__device__ __forceinline__ void ld_b_rows2(uint32_t b[4], const uint16_t *s, int ld, int n0, int k0) {
    const int l = threadIdx.x & 31, m = l >> 3;
    ldsm4(b, s + (n0 + (l & 7) + (m >> 1) * 8) * ld + k0 + (m & 1) * 8);
}
/* B[k][n] = s[k0 + k][n0 + n] for the n-tiles n0, n0 + 8 (the tile's rows are B's rows:
 * values for P v), transposed by ldmatrix. */
__device__ __forceinline__ void ld_b_cols2(uint32_t b[4], const uint16_t *s, int ld, int k0, int n0) {
    const int l = threadIdx.x & 31, m = l >> 3;
    ldsm4t(b, s + (k0 + (l & 7) + (m & 1) * 8) * ld + n0 + (m >> 1) * 8);
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
        for (int n = 0; n < 8; n += 2) {
            uint32_t b[4];
            ld_b_rows2(b, sb, LD, n * 8, k * 16);
            fa<T>::mma(acc[n], a, b);
            fa<T>::mma(acc[n + 1], a, b + 2);
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
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t b[4];
            ld_b_cols2(b, sb, LD, k * 16, n * 8);
            fa<T>::mma(out[n], a, b);
            fa<T>::mma(out[n + 1], a, b + 2);
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

/* This thread's part of a 16-row strip held as C tiles o[D/8][4] (rows i0 and i0 + 8) into a
 * matrix stored as E (FP32, or t: rounded, RNE) whose row i starts at out + i ld, each value
 * times mul (1: unchanged); rows at or past S are not written. */
template <typename T, int D, typename E>
__device__ __forceinline__ void store_strip(E *out, size_t ld, int i0, int S, const float o[D / 8][4], float mul) {
    const int q = threadIdx.x & 3;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = i0 + 8 * half;
        if (i >= S) continue;
        E *r = out + (size_t)i * ld;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float a = __fmul_rn(mul, o[n][2 * half]), b = __fmul_rn(mul, o[n][2 * half + 1]);
            if constexpr (std::is_same<E, float>::value)
                *reinterpret_cast<float2 *>(r + n * 8 + 2 * q) = make_float2(a, b);
            else
                *reinterpret_cast<uint32_t *>(r + n * 8 + 2 * q) = fa<T>::pack(a, b);
        }
    }
}

/* 2^x on the special-function unit (relative error about 2^-22; -inf gives 0). */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The exponentials run in base 2 with the score scale folded in: exp(scale a - m) =
 * 2^(a sl2 - m2) with sl2 = scale log2(e) and m2 = m log2(e), one FFMA and one ex2 per score
 * instead of expf's range reduction. Against the reference's expf that is a relative
 * difference of a few 2^-22 (m2 rounded, ex2's own error), far below the 16-bit rounding of P
 * that follows. */
__device__ __forceinline__ float prob(float acc, float sl2, float m2, float inv) {
    return __fmul_rn(ex2(fmaf(acc, sl2, -m2)), inv);
}

/* On the diagonal tile (the strip's rows and the tile's columns start at the same position
 * p0): -inf where column c (position p0 + c) lies after the strip's row r (p0 + r) or at or
 * past S, so the exponentials give 0 there. Only that tile needs it: every other tile lies
 * wholly before the block's first row and below S. rows_are_keys: the strip's rows are keys
 * and its columns queries (the dk / dv kernel's transposed scores): masked where c < r. */
template <bool rows_are_keys>
__device__ __forceinline__ void mask_diagonal(float s[8][4], int r0, int lim) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = n * 8 + 2 * (threadIdx.x & 3) + (e & 1), r = r0 + g + (e >> 1) * 8;
            const bool off = rows_are_keys ? c < r : (c > r || c >= lim);
            if (off) s[n][e] = -INFINITY;
        }
}

/* The A fragments of a warp's 16-row strip at r0 of sa over all D columns, held in registers
 * for a loop in which the strip does not change (the forward's queries). */
template <int D>
__device__ __forceinline__ void load_strip_a(uint32_t a[D / 16][4], const uint16_t *sa, int r0) {
#pragma unroll
    for (int k = 0; k < D / 16; k++) ld_a(a[k], sa, D + 8, r0, k * 16);
}

/* Elements of one 64-row tile in shared memory (rows padded to D + 8). */
template <int D> __host__ __device__ constexpr size_t tile_elems() { return (size_t)FB * (D + 8); }

/* ---- The forward takes 128 queries a block: each warp 32 rows (two 16-row strips), so every
 * key / value fragment loaded from shared memory feeds four products instead of two. */
constexpr int FM = 128;

/* acc[2][8][4] = the two A strips (registers) times the 64 rows of sb as B columns, over D. */
template <typename T, int D>
__device__ __forceinline__ void strip2_product_ra(float acc[2][8][4], const uint32_t a[2][D / 16][4],
                                                  const uint16_t *sb) {
    constexpr int LD = D + 8;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 8; n++) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.0f;
#pragma unroll
    for (int k = 0; k < D / 16; k++) {
#pragma unroll
        for (int n = 0; n < 8; n += 2) {
            uint32_t b[4];
            ld_b_rows2(b, sb, LD, n * 8, k * 16);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                fa<T>::mma(acc[m][n], a[m][k], b);
                fa<T>::mma(acc[m][n + 1], a[m][k], b + 2);
            }
        }
    }
}

/* out[2][D/8][4] += (the two 16 x 64 strips held as C tiles, rounded to T) times sb's 64 rows. */
template <typename T, int D>
__device__ __forceinline__ void strip2_times_tile(float out[2][D / 8][4], const float c[2][8][4], const uint16_t *sb) {
    constexpr int LD = D + 8;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t a[2][4];
#pragma unroll
        for (int m = 0; m < 2; m++) c_to_a<T>(a[m], c[m][2 * k], c[m][2 * k + 1]);
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t b[4];
            ld_b_cols2(b, sb, LD, k * 16, n * 8);
#pragma unroll
            for (int m = 0; m < 2; m++) {
                fa<T>::mma(out[m][n], a[m], b);
                fa<T>::mma(out[m][n + 1], a[m], b + 2);
            }
        }
    }
}

/* -inf where key k0 + c lies after query row r (rows p0 + 16 m + g + 8 h) or at or past S. */
__device__ __forceinline__ void mask_causal2(float s[2][8][4], int p0, int k0, int S) {
    const int g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = k0 + n * 8 + 2 * q + (e & 1), r = p0 + 16 * m + g + (e >> 1) * 8;
                if (c > r || c >= S) s[m][n][e] = -INFINITY;
            }
}

/* the query tile (128 rows), then the key and value tiles, two each */
template <int D> constexpr size_t fwd_smem() { return ((size_t)FM * (D + 8) + 4 * tile_elems<D>()) * 2; }

template <typename T, int D, typename E>
__global__ void __launch_bounds__(FT, 2) fa_fwd_kernel(int S, int H, int G, float sl2, const E *x, E *y, float *ml,
                                                       float *oc) {
    constexpr int LD = D + 8;
    constexpr size_t TE = tile_elems<D>();
    extern __shared__ __align__(16) uint16_t fsm[];
    uint16_t *sq = fsm, *skb = fsm + (size_t)FM * LD, *svb = skb + 2 * TE; /* k, v: two each */
    const int qb = (int)gridDim.x - 1 - (int)blockIdx.x; /* the longest rows first */
    const int h = blockIdx.y, g = h / (H / G), W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z;
    const E *xb = x + b * (size_t)S * W, *kx = xb + (size_t)(H + g) * D, *vx = xb + (size_t)(H + G + g) * D;
    const int q0 = qb * FM, w0 = (threadIdx.x >> 5) * 32, gr = (threadIdx.x & 31) >> 2;
    const int p0 = q0 + w0; /* the warp's first query row */
    const int last = (q0 + FM < S ? q0 + FM : S) - 1, nkb = last / FB + 1;
    fetch_tile<T, D, E, FM>(sq, xb + (size_t)h * D, W, q0, S);
    fetch_tile<T, D, E>(skb, kx, W, 0, S);
    fetch_tile<T, D, E>(svb, vx, W, 0, S);
    cp_commit();
    float m[2][2], l[2][2], s[2][8][4], o[2][D / 8][4];
    uint32_t qa[2][D / 16][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        m[i][0] = m[i][1] = -INFINITY; /* the base-2 domain */
        l[i][0] = l[i][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < D / 8; n++) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
    }
    for (int kb = 0; kb < nkb; kb++) {
        if (kb + 1 < nkb) {
            fetch_tile<T, D, E>(skb + ((kb + 1) & 1) * TE, kx, W, (kb + 1) * FB, S);
            fetch_tile<T, D, E>(svb + ((kb + 1) & 1) * TE, vx, W, (kb + 1) * FB, S);
        }
        cp_commit();
        cp_wait_prev();
        if (kb == 0) {
            load_strip_a<D>(qa[0], sq, w0);
            load_strip_a<D>(qa[1], sq, w0 + 16);
        }
        const int k0 = kb * FB;
        if (k0 <= p0 + 31) { /* a warp whose rows all precede the tile skips it */
            strip2_product_ra<T, D>(s, qa, skb + (kb & 1) * TE);
            if (k0 + FB - 1 > p0 || k0 + FB > S) mask_causal2(s, p0, k0, S);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    x0 = fmaxf(x0, fmaxf(s[i][n][0], s[i][n][1]));
                    x1 = fmaxf(x1, fmaxf(s[i][n][2], s[i][n][3]));
                }
                /* sl2 > 0: the max of the scaled scores is the scaled max; key 0 (first tile) is
                 * every row's, so the maxima are finite from there on and ex2(-inf) = 0 rescales
                 * the empty start */
                const float n0 = fmaxf(m[i][0], quad_max(x0) * sl2), n1 = fmaxf(m[i][1], quad_max(x1) * sl2);
                const float a0 = ex2(m[i][0] - n0), a1 = ex2(m[i][1] - n1);
                float e0 = 0.0f, e1 = 0.0f;
#pragma unroll
                for (int n = 0; n < 8; n++) {
                    s[i][n][0] = ex2(fmaf(s[i][n][0], sl2, -n0));
                    s[i][n][1] = ex2(fmaf(s[i][n][1], sl2, -n0));
                    s[i][n][2] = ex2(fmaf(s[i][n][2], sl2, -n1));
                    s[i][n][3] = ex2(fmaf(s[i][n][3], sl2, -n1));
                    e0 += s[i][n][0] + s[i][n][1];
                    e1 += s[i][n][2] + s[i][n][3];
                }
                l[i][0] = l[i][0] * a0 + quad_sum(e0);
                l[i][1] = l[i][1] * a1 + quad_sum(e1);
                m[i][0] = n0;
                m[i][1] = n1;
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    o[i][n][0] *= a0;
                    o[i][n][1] *= a0;
                    o[i][n][2] *= a1;
                    o[i][n][3] *= a1;
                }
            }
            strip2_times_tile<T, D>(o, s, svb + (kb & 1) * TE);
        }
        __syncthreads(); /* the next iteration fetches into the other buffer's twin */
    }
    const size_t yoff = b * (size_t)S * OW + (size_t)h * D;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const float v0 = (float)(1.0 / (double)l[i][0]), v1 = (float)(1.0 / (double)l[i][1]);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[i][n][0] = __fmul_rn(o[i][n][0], v0);
            o[i][n][1] = __fmul_rn(o[i][n][1], v0);
            o[i][n][2] = __fmul_rn(o[i][n][2], v1);
            o[i][n][3] = __fmul_rn(o[i][n][3], v1);
        }
        const int i0 = p0 + 16 * i + gr, i1 = i0 + 8;
        /* y, and the same values into O for the backward's rowsum (the caller may round y) */
        store_strip<T, D, E>(y + yoff, OW, i0, S, o[i], 1.0f);
        store_strip<T, D, float>(oc + yoff, OW, i0, S, o[i], 1.0f);
        if ((threadIdx.x & 3) == 0) {
            if (i0 < S) *reinterpret_cast<float2 *>(ml + ((b * H + h) * (size_t)S + i0) * 2) = make_float2(m[i][0], v0);
            if (i1 < S) *reinterpret_cast<float2 *>(ml + ((b * H + h) * (size_t)S + i1) * 2) = make_float2(m[i][1], v1);
        }
    }
}

/* The saved (m2, 1/l) of query row i; zeros past S (those rows are never written), which make
 * their probabilities 0: their q and dy rows are zeros, so the scores are 0 and 2^0 0 = 0. */
__device__ __forceinline__ float2 row_state(const float *ml, size_t row0, int i, int S) {
    return i < S ? *reinterpret_cast<const float2 *>(ml + (row0 + i) * 2) : make_float2(0.0f, 0.0f);
}

/* Shared memory of the backward kernels (dynamic: more than the 48 kB of a static array). */
template <int D> constexpr size_t dq_smem() { return 6 * tile_elems<D>() * 2; }
template <int D> constexpr size_t kv_smem() { return 6 * tile_elems<D>() * 2 + 2 * FB * (8 + 4); }

template <typename T, int D, typename E>
__global__ void __launch_bounds__(FT) fa_bwd_q_kernel(int S, int H, int G, float scale, float sl2, const E *x,
                                                      const float *ml, const float *oc, const E *dy, E *dx,
                                                      float *crow) {
    constexpr int LD = D + 8;
    constexpr size_t TE = tile_elems<D>();
    extern __shared__ __align__(16) uint16_t fsm[];
    uint16_t *sq = fsm, *sdo = fsm + TE, *skb = fsm + 2 * TE, *svb = fsm + 4 * TE; /* k, v: two each */
    const int qb = (int)gridDim.x - 1 - (int)blockIdx.x;
    const int h = blockIdx.y, g = h / (H / G), W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z, row0 = (b * H + h) * (size_t)S;
    const E *xb = x + b * (size_t)S * W, *kx = xb + (size_t)(H + g) * D, *vx = xb + (size_t)(H + G + g) * D;
    const int q0 = qb * FB, r0 = (threadIdx.x >> 5) * 16, gr = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    const int i0 = q0 + r0 + gr, i1 = i0 + 8;
    fetch_tile<T, D, E>(sq, xb + (size_t)h * D, W, q0, S);
    fetch_tile<T, D, E>(sdo, dy + b * (size_t)S * OW + (size_t)h * D, OW, q0, S);
    fetch_tile<T, D, E>(skb, kx, W, 0, S);
    fetch_tile<T, D, E>(svb, vx, W, 0, S);
    cp_commit();
    const float2 st0 = row_state(ml, row0, i0, S), st1 = row_state(ml, row0, i1, S);
    float s[8][4], dp[8][4], o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float cr0 = 0.0f, cr1 = 0.0f;
    for (int kb = 0; kb <= qb; kb++) {
        const int nb = (kb + 1) & 1;
        if (kb < qb) {
            fetch_tile<T, D, E>(skb + nb * TE, kx, W, (kb + 1) * FB, S);
            fetch_tile<T, D, E>(svb + nb * TE, vx, W, (kb + 1) * FB, S);
        }
        cp_commit();
        cp_wait_prev();
        if (kb == 0) {
            /* c = dy . O per row (the 16-bit dy the products use, the forward's FP32 O): the
             * quad's four threads take a quarter of the head each */
            float c0 = 0.0f, c1 = 0.0f;
            const float *o0 = oc + (b * (size_t)S + i0) * OW + (size_t)h * D, *o1 = o0 + (size_t)8 * OW;
#pragma unroll
            for (int d = q * (D / 4); d < (q + 1) * (D / 4); d++) {
                if (i0 < S) c0 = fmaf(fa<T>::unpack(sdo[(r0 + gr) * LD + d]), o0[d], c0);
                if (i1 < S) c1 = fmaf(fa<T>::unpack(sdo[(r0 + gr + 8) * LD + d]), o1[d], c1);
            }
            cr0 = quad_sum(c0);
            cr1 = quad_sum(c1);
            if (q == 0) {
                if (i0 < S) crow[row0 + i0] = cr0;
                if (i1 < S) crow[row0 + i1] = cr1;
            }
        }
        const uint16_t *sk = skb + (kb & 1) * TE, *sv = svb + (kb & 1) * TE;
        strip_product<T, D>(s, sq, r0, sk);
        strip_product<T, D>(dp, sdo, r0, sv);
        if (kb == qb) mask_diagonal<false>(s, r0, S - q0);
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = __fmul_rn(prob(s[n][0], sl2, st0.x, st0.y), __fsub_rn(dp[n][0], cr0));
            s[n][1] = __fmul_rn(prob(s[n][1], sl2, st0.x, st0.y), __fsub_rn(dp[n][1], cr0));
            s[n][2] = __fmul_rn(prob(s[n][2], sl2, st1.x, st1.y), __fsub_rn(dp[n][2], cr1));
            s[n][3] = __fmul_rn(prob(s[n][3], sl2, st1.x, st1.y), __fsub_rn(dp[n][3], cr1));
        }
        strip_times_tile<T, D>(o, s, sk);
        __syncthreads();
    }
    store_strip<T, D, E>(dx + b * (size_t)S * W + (size_t)h * D, W, i0, S, o, scale);
}

template <typename T, int D, typename E>
__global__ void __launch_bounds__(FT, 3) fa_bwd_kv_kernel(int S, int H, int G, float scale, float sl2, const E *x,
                                                       const float *ml, const E *dy, const float *crow, E *dx) {
    constexpr size_t TE = tile_elems<D>();
    extern __shared__ __align__(16) uint16_t fsm[];
    uint16_t *sk = fsm, *sv = fsm + TE, *sqb = fsm + 2 * TE, *sdob = fsm + 4 * TE; /* q, dy: two each */
    float2 *smlb = reinterpret_cast<float2 *>(fsm + 6 * TE); /* (m, 1/l) of the tile's queries: two */
    float *scb = reinterpret_cast<float *>(smlb + 2 * FB);    /* their rowsums: two */
    const int kb = blockIdx.x; /* the first key tiles have the most queries: they start first */
    const int g = blockIdx.y, rep = H / G, W = (H + 2 * G) * D, OW = H * D;
    const size_t b = blockIdx.z;
    const E *xb = x + b * (size_t)S * W, *dyb = dy + b * (size_t)S * OW;
    const int k0 = kb * FB, r0 = (threadIdx.x >> 5) * 16, gr = (threadIdx.x & 31) >> 2;
    const int j0 = k0 + r0 + gr; /* this thread's two key rows: j0, j0 + 8 */
    const int nqb = (S + FB - 1) / FB, q = threadIdx.x & 3;
    /* the (head, query tile) pairs in order: head by head, query tiles from the diagonal down */
    const int per = nqb - kb, n_it = rep * per;
    auto fetch = [&](int it, int buf) {
        const int h = g * rep + it / per, q0 = (kb + it % per) * FB;
        const size_t row0 = (b * H + h) * (size_t)S;
        fetch_tile<T, D, E>(sqb + buf * TE, xb + (size_t)h * D, W, q0, S);
        fetch_tile<T, D, E>(sdob + buf * TE, dyb + (size_t)h * D, OW, q0, S);
        if (threadIdx.x < FB) {
            /* zeros past S (never written by the forward): probabilities 0 there */
            const int i = q0 + threadIdx.x;
            const bool ok = i < S;
            cp_async(smlb + buf * FB + threadIdx.x, ok ? (const void *)(ml + (row0 + i) * 2) : (const void *)ml, 8, ok);
            cp_async(scb + buf * FB + threadIdx.x, ok ? (const void *)(crow + row0 + i) : (const void *)crow, 4, ok);
        }
    };
    fetch_tile<T, D, E>(sk, xb + (size_t)(H + g) * D, W, k0, S);
    fetch_tile<T, D, E>(sv, xb + (size_t)(H + G + g) * D, W, k0, S);
    fetch(0, 0);
    cp_commit();
    float dk[D / 8][4], dv[D / 8][4], s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int it = 0; it < n_it; it++) {
        if (it + 1 < n_it) fetch(it + 1, (it + 1) & 1);
        cp_commit();
        cp_wait_prev();
        const int buf = it & 1, qb = kb + it % per;
        const uint16_t *sq = sqb + buf * TE, *sdo = sdob + buf * TE;
        const float2 *sml = smlb + buf * FB;
        const float *sc = scb + buf * FB;
        strip_product<T, D>(s, sk, r0, sq);   /* S^T: keys x queries */
        strip_product<T, D>(dp, sv, r0, sdo); /* dP^T */
        if (qb == kb) mask_diagonal<true>(s, r0, 0);
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = n * 8 + 2 * q + (e & 1);
                const float2 st = sml[c];
                const float p = prob(s[n][e], sl2, st.x, st.y);
                s[n][e] = p;
                dp[n][e] = __fmul_rn(p, __fsub_rn(dp[n][e], sc[c]));
            }
        strip_times_tile<T, D>(dv, s, sdo);
        strip_times_tile<T, D>(dk, dp, sq);
        __syncthreads();
    }
    E *dko = dx + b * (size_t)S * W + (size_t)(H + g) * D;
    store_strip<T, D, E>(dko, W, j0, S, dk, scale);
    store_strip<T, D, E>(dko + (size_t)G * D, W, j0, S, dv, 1.0f);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* work: c [R][H][S] floats, then (from a 16-byte boundary) O [R][S][H hd] */
inline size_t o_offset(int R, int H, int S) { return ((size_t)R * H * S + 3) / 4 * 4; }

/* Grids of at most 65535 folded rows (gridDim.z): longer batches run in slices of rows, each
 * with its own offsets into x, y, the saved state and work. */
constexpr int ZMAX = 65535;

template <typename T, int D, typename E>
void launch_fwd(cudaStream_t st, int R, int S, int H, int G, float scale, const void *x, void *y, float *ml,
                float *work) {
    const int W = (H + 2 * G) * D, OW = H * D;
    float *oc = work + o_offset(R, H, S);
    /* above the 48 kB default (see launch_bwd) */
    cudaFuncSetAttribute(fa_fwd_kernel<T, D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_smem<D>());
    for (int r0 = 0; r0 < R; r0 += ZMAX) {
        const int n = R - r0 < ZMAX ? R - r0 : ZMAX;
        const size_t rs = (size_t)r0 * S;
        const dim3 grid((unsigned)((S + FM - 1) / FM), (unsigned)H, (unsigned)n);
        fa_fwd_kernel<T, D, E><<<grid, FT, fwd_smem<D>(), st>>>(S, H, G, scale * LOG2E, (const E *)x + rs * W,
                                                                (E *)y + rs * OW, ml + rs * H * 2, oc + rs * OW);
    }
}

template <typename T, int D, typename E>
void launch_bwd(cudaStream_t st, int R, int S, int H, int G, float scale, const void *x, const float *ml,
                const void *dy, void *dx, float *work) {
    /* above the 48 kB default, asked for on every launch: the attribute belongs to the current
     * device (a host call, no stream work); a refusal shows as the launch error that
     * SNN_CU_LAUNCHED reports */
    cudaFuncSetAttribute(fa_bwd_q_kernel<T, D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem<D>());
    cudaFuncSetAttribute(fa_bwd_kv_kernel<T, D, E>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kv_smem<D>());
    const int W = (H + 2 * G) * D, OW = H * D;
    const unsigned nb = (unsigned)((S + FB - 1) / FB);
    const float sl2 = scale * LOG2E;
    const float *oc = work + o_offset(R, H, S);
    for (int r0 = 0; r0 < R; r0 += ZMAX) {
        const unsigned n = (unsigned)(R - r0 < ZMAX ? R - r0 : ZMAX);
        const size_t rs = (size_t)r0 * S;
        const E *xs = (const E *)x + rs * W, *dys = (const E *)dy + rs * OW;
        E *dxs = (E *)dx + rs * W;
        fa_bwd_q_kernel<T, D, E><<<dim3(nb, (unsigned)H, n), FT, dq_smem<D>(), st>>>(
            S, H, G, scale, sl2, xs, ml + rs * H * 2, oc + rs * OW, dys, dxs, work + rs * H);
        fa_bwd_kv_kernel<T, D, E><<<dim3(nb, (unsigned)G, n), FT, kv_smem<D>(), st>>>(
            S, H, G, scale, sl2, xs, ml + rs * H * 2, dys, work + rs * H, dxs);
    }
}

/* The instantiation for (t, head size, storage): t's type T, E = T for 16-bit storage. */
template <template <typename, int, typename> class F, typename... A>
void dispatch(snn_dtype t, int hd, int io16, A... args) {
    if (t == SNN_BF16) {
        if (hd == 64) io16 ? F<__nv_bfloat16, 64, __nv_bfloat16>::run(args...) : F<__nv_bfloat16, 64, float>::run(args...);
        else io16 ? F<__nv_bfloat16, 32, __nv_bfloat16>::run(args...) : F<__nv_bfloat16, 32, float>::run(args...);
    } else {
        if (hd == 64) io16 ? F<__half, 64, __half>::run(args...) : F<__half, 64, float>::run(args...);
        else io16 ? F<__half, 32, __half>::run(args...) : F<__half, 32, float>::run(args...);
    }
}
template <typename T, int D, typename E> struct fwd_op {
    template <typename... A> static void run(A... a) { launch_fwd<T, D, E>(a...); }
};
template <typename T, int D, typename E> struct bwd_op {
    template <typename... A> static void run(A... a) { launch_bwd<T, D, E>(a...); }
};

} // namespace

int snn_cuda_attn_flash_ok(snn_dtype t, int R, int S, int H, int hd) {
    (void)R; /* any number of folded rows: the launches slice them */
    const char *a = getenv("SNN_CUDA_ATTENTION");
    if (a && *a) return 0; /* gemm / naive: the materialised paths */
    return (t == SNN_BF16 || t == SNN_F16) && (hd == 32 || hd == 64) && S >= 2 && H <= 65535;
}

size_t snn_cuda_attn_flash_work_floats(int R, int H, int S) { return o_offset(R, H, S) + (size_t)R * H * S * 64; }

snn_status snn_cuda_attn_flash_forward(const snn_backend *be, snn_dtype t, int io16, int R, int S, int H, int G,
                                       int hd, float scale, const void *x, void *y, float *P, float *work) {
    if (!aligned16(x) || !aligned16(y) || !aligned16(P) || !aligned16(work))
        return snn_error(SNN_E_INVALID, "attention_forward: device buffers must be 16-byte aligned");
    dispatch<fwd_op>(t, hd, io16, st_of(be), R, S, H, G, scale, x, y, P, work);
    SNN_CU_LAUNCHED("attention_forward (flash)");
    return SNN_OK;
}

snn_status snn_cuda_attn_flash_backward(const snn_backend *be, snn_dtype t, int io16, int R, int S, int H, int G,
                                        int hd, float scale, const void *x, const float *P, const void *dy,
                                        void *dx, float *work) {
    if (!aligned16(x) || !aligned16(P) || !aligned16(dy) || !aligned16(dx) || !aligned16(work))
        return snn_error(SNN_E_INVALID, "attention_backward: device buffers must be 16-byte aligned");
    dispatch<bwd_op>(t, hd, io16, st_of(be), R, S, H, G, scale, x, P, dy, dx, work);
    SNN_CU_LAUNCHED("attention_backward (flash)");
    return SNN_OK;
}
