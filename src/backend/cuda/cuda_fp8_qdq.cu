/* FP8 quantise-dequantise for the CUDA op table (cuda_fp8_qdq.h), bit-identical to the CPU
 * table's fp8_qdq (src/backend/cpu/cpu_fp8.c -> src/precision/fp8_quant.c).
 *
 * How it matches the CPU, rule by rule:
 *   - amax: max |x| with NaN ignored (a NaN never compares greater), inf kept. A max is
 *     exact and order-free, so a tree / atomic reduction gives the CPU's value. Non-negative
 *     floats order as their bit patterns, so the global max is an atomicMax on the bits.
 *   - element: out = decode(sat_rne(x * s)) * d, two FP32 multiplies each rounded on its
 *     own (__fmul_rn: nothing to contract), the FP8 cast the backend's storage traits
 *     (Io<snn_e4m3/e5m2>: the SATFINITE conversion, round to nearest even, inf to the largest
 *     finite value, as the CPU's saturating fp8_encode; test_cuda_mxfp8 and test_cuda_backend
 *     hold it to the CPU bit for bit). FTZ is off in this build (no fast math), so subnormal
 *     products and scales are kept as on the CPU.
 *   - per tensor, delayed: s, d as given; one fused kernel (amax and qdq).
 *   - per tensor, current: amax kernel, then the scale on the host with the library's own
 *     snn_fp8_scale_from_amax and d = 1/s (the CPU's code, not a copy), then the qdq kernel.
 *   - blocks (block recipe: TE's rule with the hp_dtype's max for an infinite scale and the
 *     pow2 option; mxfp8: E8M0 scale 2^ceil(log2(amax * fl(1/fmax)))): one generic kernel
 *     for any block_rows x block_cols, blocks in the CPU's layout (row-major grid of
 *     ceil(rows/br) x ceil(cols/bc), partial edge blocks are blocks of their own). A group
 *     of G threads owns one block: G = 1 for column blocks (bc == 1: neighbouring threads
 *     read neighbouring columns, coalesced), a warp for blocks up to 4096 elements, the
 *     whole 256-thread CTA above. The group reads its block for the amax, every thread of
 *     it computes the same scale (transcriptions of block_scale's two rules: IEEE division,
 *     the same bit masks), then it writes the qdq values. out may be x (every element is
 *     read before its group writes).
 */
#include <float.h>
#include <type_traits>
#include <math.h>

#include "backend/cuda/cuda_fp8_qdq.h"
#include "backend/cuda/cuda_internal.h"
extern "C" {
#include "precision/fp8.h"
}

namespace {

/* ---------------------------------------------------------------- rules (host and device) */

SNN_HD uint32_t q_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}
SNN_HD float q_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
SNN_HD float q_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
SNN_HD float q_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

template <int E5> SNN_HD float q_qdq(float x, float s, float d) {
    typedef typename std::conditional<E5 != 0, snn_e5m2, snn_e4m3>::type Q;
    return q_mul(Io<Q>::ld(Io<Q>::st(q_mul(x, s))), d);
}

/* snn_fp8_scale_from_amax: TE's rule with amax_epsilon 0. */
SNN_HD float q_scale_from_amax(float amax, float fmax, int pow2, float vfi) {
    const uint32_t a = q_bits(amax) & 0x7FFFFFFFu;
    if (amax == 0.0f || a >= 0x7F800000u) return 1.0f; /* zero, inf, NaN */
    float s = q_div(fmax, amax);
    if ((q_bits(s) & 0x7FFFFFFFu) == 0x7F800000u) s = vfi;
    if (pow2) s = q_float(q_bits(s) & 0xFF800000u);
    return s;
}

/* block_scale of src/precision/fp8_quant.c: mxfp8 -> E8M0 (snn_e8m0_from_amax, then
 * snn_e8m0_inv_scale and snn_e8m0_to_f32); block -> TE's rule, d = 1/s. */
__device__ __forceinline__ void q_block_scale(int mx, float fmax, int pow2, float vfi, float amax, float *s,
                                              float *d) {
    if (mx) {
        snn_e8m0_scales(amax, fmax, s, d);
    } else {
        *s = q_scale_from_amax(amax, fmax, pow2, vfi);
        *d = q_div(1.0f, *s);
    }
}

/* Threads per block of the generic kernel's group (see the top comment). */
SNN_HD int q_group(int br, int bc) {
    if (bc == 1) return 1;
    return (long long)br * bc <= 4096 ? 32 : 256;
}

/* Block b of the row-major grid: first row and column, height and width (edges clipped). */
SNN_HD void q_block_of(long long b, int rows, int cols, int br, int bc, int grid_cols, int *r0, int *c0, int *h,
                       int *w) {
    const int bi = (int)(b / grid_cols), bj = (int)(b % grid_cols);
    *r0 = bi * br;
    *c0 = bj * bc;
    *h = rows - *r0 < br ? rows - *r0 : br;
    *w = cols - *c0 < bc ? cols - *c0 : bc;
}

} // namespace

namespace {

#define QDQ_THREADS 256

/* The CTA's max (NaN-free, non-negative values) into *gbits as bits; every thread calls. */
__device__ __forceinline__ void cta_max_to_global(float m, unsigned *gbits) {
    __shared__ unsigned cmax;
    if (threadIdx.x == 0) cmax = 0u;
    __syncthreads();
    m = snn_warp_max(m);
    if ((threadIdx.x & 31) == 0 && m > 0.0f) atomicMax(&cmax, __float_as_uint(m));
    __syncthreads();
    if (threadIdx.x == 0 && cmax) atomicMax(gbits, cmax);
}

/* Per tensor: want_amax -> max |x| into *gbits; want_qdq -> out = qdq(x) with s, d. */
template <int E5>
__global__ void __launch_bounds__(QDQ_THREADS)
    qdq_tensor_kernel(const float *x, size_t n, float s, float d, int want_amax, int want_qdq, float *out,
                      unsigned *gbits) {
    float m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        const float a = fabsf(v);
        m = a > m ? a : m; /* NaN ignored */
        if (want_qdq) out[i] = q_qdq<E5>(v, s, d);
    }
    if (want_amax) cta_max_to_global(m, gbits);
}

struct blk_args {
    const float *x;
    float *out;
    int rows, cols, br, bc, grid_cols;
    long long nblocks;
    int mx, pow2;
    float fmax, vfi;
    unsigned *gbits;
};

/* Blocks: G threads per block (1, 32 or the CTA's QDQ_THREADS), see the top comment. No thread
 * leaves early: the CTA meets at __syncthreads. */
template <int E5> __global__ void __launch_bounds__(QDQ_THREADS) qdq_blocks_kernel(blk_args a, int G) {
    __shared__ float wred[QDQ_THREADS / 32];
    const int tid = threadIdx.x, lane = tid % G;
    const long long b = (long long)blockIdx.x * (blockDim.x / G) + tid / G;
    int r0 = 0, c0 = 0, h = 0, w = 1;
    if (b < a.nblocks) q_block_of(b, a.rows, a.cols, a.br, a.bc, a.grid_cols, &r0, &c0, &h, &w);
    /* element k = rr * w + cc of the block, visited from k = lane in steps of G */
    const int dr = G / w, dc = G % w;
    float m = 0.0f;
    {
        int rr = lane / w, cc = lane % w;
        while (rr < h) {
            const float v = fabsf(a.x[(size_t)(r0 + rr) * a.cols + (size_t)(c0 + cc)]);
            m = v > m ? v : m; /* NaN ignored */
            rr += dr;
            cc += dc;
            if (cc >= w) {
                cc -= w;
                rr++;
            }
        }
    }
    if (G >= 32) m = snn_warp_max(m);
    if (G > 32) { /* G == blockDim.x: one block per CTA */
        if ((tid & 31) == 0) wred[tid >> 5] = m;
        __syncthreads();
        m = 0.0f;
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) m = wred[k] > m ? wred[k] : m;
    }
    float s, d;
    q_block_scale(a.mx, a.fmax, a.pow2, a.vfi, m, &s, &d);
    {
        int rr = lane / w, cc = lane % w;
        while (rr < h) {
            const size_t i = (size_t)(r0 + rr) * a.cols + (size_t)(c0 + cc);
            a.out[i] = q_qdq<E5>(a.x[i], s, d);
            rr += dr;
            cc += dc;
            if (cc >= w) {
                cc -= w;
                rr++;
            }
        }
    }
    cta_max_to_global(m, a.gbits);
}

snn_status launch_tensor(snn_cuda *c, int e5, const float *x, size_t n, float s, float d, int want_amax,
                         int want_qdq, float *out, unsigned *gbits) {
    unsigned grid = snn_grid(n, QDQ_THREADS), cap = (unsigned)snn_cuda_sm_count(c) * 8u;
    if (cap && grid > cap) grid = cap;
    cudaStream_t st = snn_cuda_stream_of(c);
    if (e5) qdq_tensor_kernel<1><<<grid, QDQ_THREADS, 0, st>>>(x, n, s, d, want_amax, want_qdq, out, gbits);
    else qdq_tensor_kernel<0><<<grid, QDQ_THREADS, 0, st>>>(x, n, s, d, want_amax, want_qdq, out, gbits);
    SNN_CU_LAUNCHED("fp8_qdq per tensor");
    return SNN_OK;
}

/* The scale a codes pass quantises with: the given one, or current scaling's from the amax
 * word of the pass before (*cur_bits). */
__device__ __forceinline__ void codes_scale(int current, const unsigned *cur_bits, float fmax, int pow2, float *s,
                                            float *d) {
    if (!current) return;
    *s = q_scale_from_amax(__uint_as_float(*cur_bits), fmax, pow2, FLT_MAX);
    *d = q_div(1.0f, *s);
}

/* The end of a codes pass (every thread calls: the CTA max meets at __syncthreads): the first
 * thread stores 1/s, and the amax goes to its slot (current scaling's is the word it read). */
__device__ __forceinline__ void codes_finish(bool first, float d, float m, int current, const unsigned *cur_bits,
                                             float *sinv, unsigned *amax_bits) {
    if (first) *sinv = d;
    if (!amax_bits) return;
    if (current) {
        if (first && *cur_bits) atomicMax(amax_bits, *cur_bits);
    } else {
        cta_max_to_global(m, amax_bits);
    }
}

/* FP8 codes (backend.h's snn_fp8_codes): 32 x 32 tiles, rows on x (the long dimension). Each
 * tile writes its codes row-major into q and, through shared memory, transposed into qt; the
 * padding of either (columns past cols in q, past rows in qt) gets code 0. current: the scale
 * comes from the amax word of the pass before (*cur_bits). A block walks tiles with a stride of
 * the grid, so the amax takes one atomic per block, not per tile; the first thread of block 0
 * stores 1/s. */
template <int E5>
__global__ void __launch_bounds__(256)
    codes_kernel(const float *__restrict__ x, int rows, int cols, int current, float fmax, int pow2, float s0,
                 float d0, uint8_t *q, int ldq, uint8_t *qt, int ldqt, const unsigned *cur_bits, float *sinv,
                 unsigned *amax_bits, int tiles_x, long long tiles) {
    typedef typename std::conditional<E5 != 0, snn_e5m2, snn_e4m3>::type Q;
    __shared__ uint8_t tile[32][33];
    float s = s0, d = d0;
    codes_scale(current, cur_bits, fmax, pow2, &s, &d);
    float m = 0.0f;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int r0 = (int)(t % tiles_x) * 32, k0 = (int)(t / tiles_x) * 32;
        for (int j = threadIdx.y; j < 32; j += 8) {
            const int r = r0 + j, k = k0 + threadIdx.x;
            uint8_t code = 0;
            if (r < rows && k < cols) {
                const float v = x[(size_t)r * (size_t)cols + (size_t)k];
                const float a = fabsf(v);
                m = a > m ? a : m; /* NaN ignored */
                code = Io<Q>::st(q_mul(v, s)).b;
            }
            if (q && r < rows && k < ldq) q[(size_t)r * (size_t)ldq + (size_t)k] = code;
            if (qt) tile[j][threadIdx.x] = code;
        }
        if (qt) {
            __syncthreads();
            for (int j = threadIdx.y; j < 32; j += 8) {
                const int k = k0 + j, r = r0 + threadIdx.x;
                if (k < cols && r < ldqt) qt[(size_t)k * (size_t)ldqt + (size_t)r] = tile[threadIdx.x][j];
            }
            __syncthreads(); /* the tile is rewritten by the next iteration */
        }
    }
    /* warps are the tile's rows (blockDim.x == 32) for the CTA max */
    codes_finish(blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0, d, m, current, cur_bits, sinv, amax_bits);
}

/* The row-major codes alone (qt NULL, ldq a multiple of 16, q 16-byte aligned): 16 codes a
 * thread, stored as one 16-byte word, read as four float4 where the row has them (vec: cols a
 * multiple of 4 and x 16-byte aligned). The same codes, padding and amax as codes_kernel; the
 * tile kernel's byte stores and shared memory are what this form saves (the forward's input,
 * every step). */
template <int E5>
__global__ void __launch_bounds__(256)
    codes_rows_kernel(const float *__restrict__ x, int rows, int cols, int vec, int current, float fmax, int pow2,
                      float s0, float d0, uint8_t *__restrict__ q, int ldq, const unsigned *cur_bits, float *sinv,
                      unsigned *amax_bits) {
    typedef typename std::conditional<E5 != 0, snn_e5m2, snn_e4m3>::type Q;
    float s = s0, d = d0;
    codes_scale(current, cur_bits, fmax, pow2, &s, &d);
    const int gpr = ldq / 16;
    const size_t groups = (size_t)rows * (size_t)gpr;
    float m = 0.0f;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        const size_t r = g / (size_t)gpr;
        const int c0 = (int)(g - r * (size_t)gpr) * 16;
        const float *xr = x + r * (size_t)cols;
        float v[16];
        if (vec && c0 + 16 <= cols) {
            const float4 *p4 = reinterpret_cast<const float4 *>(xr + c0);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float4 f = p4[i];
                v[4 * i] = f.x;
                v[4 * i + 1] = f.y;
                v[4 * i + 2] = f.z;
                v[4 * i + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) v[i] = c0 + i < cols ? xr[c0 + i] : 0.0f;
        }
        uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int i = 0; i < 16; i++) {
            if (c0 + i >= cols) continue; /* padding: code 0 */
            const float a = fabsf(v[i]);
            m = a > m ? a : m; /* NaN ignored */
            w[i / 4] |= (uint32_t)Io<Q>::st(q_mul(v[i], s)).b << (8 * (i % 4));
        }
        *reinterpret_cast<uint4 *>(q + r * (size_t)ldq + (size_t)c0) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    codes_finish(blockIdx.x == 0 && threadIdx.x == 0, d, m, current, cur_bits, sinv, amax_bits);
}

} // namespace

extern "C" snn_status snn_cuda_fp8_codes(snn_cuda *c, const snn_fp8_codes *q, void *scratch) {
    if (!c || !scratch) return snn_error(SNN_E_INVALID, "fp8_codes: no CUDA context");
    if (!q || q->rows < 0 || q->cols < 0) return snn_error(SNN_E_INVALID, "fp8_codes: bad arguments");
    const float fmax = snn_fp8_max(q->fp8);
    if (fmax == 0.0f) return snn_error(SNN_E_INVALID, "fp8_codes: %s is not an FP8 format", snn_dtype_name(q->fp8));
    if (!q->sinv) return snn_error(SNN_E_INVALID, "fp8_codes: sinv (the GEMM's factor) is required");
    if ((q->q && q->ldq < q->cols) || (q->qt && q->ldqt < q->rows))
        return snn_error(SNN_E_SHAPE, "fp8_codes: leading dimensions too small (ldq %d for %d columns, ldqt %d "
                                      "for %d rows)", q->ldq, q->cols, q->ldqt, q->rows);
    if (!q->current && !(q->scale > 0.0f && q->scale_inv > 0.0f))
        return snn_error(SNN_E_INVALID, "fp8_codes: a given scale must be positive (%g, %g)", (double)q->scale,
                         (double)q->scale_inv);
    const size_t n = (size_t)q->rows * (size_t)q->cols;
    if (n && !q->x) return snn_error(SNN_E_INVALID, "fp8_codes: NULL input");
    const int rp = q->qt && q->ldqt > q->rows ? q->ldqt : q->rows;
    const int cp = q->q && q->ldq > q->cols ? q->ldq : q->cols;
    const long long gx = ((long long)rp + 31) / 32, gy = ((long long)cp + 31) / 32;
    if (gx > 0x7FFFFFFFLL)
        return snn_error(SNN_E_SHAPE, "fp8_codes: %d x %d is too large for one launch", q->rows, q->cols);
    const int e5 = q->fp8 == SNN_F8E5M2;
    unsigned *cur = (unsigned *)scratch;
    cudaStream_t st = snn_cuda_stream_of(c);
    if (q->current) {
        /* this tensor's amax first (the scale of every code depends on it) */
        SNN_CU_TRY(cudaMemsetAsync(cur, 0, sizeof(unsigned), st));
        if (n) SNN_TRY(launch_tensor(c, e5, q->x, n, 1.0f, 1.0f, 1, 0, NULL, cur));
    }
    if (!gx || !gy) { /* nothing to code: the factor alone */
        const float d = q->current ? 1.0f : q->scale_inv;
        return snn_cuda_upload(c, q->sinv, &d, sizeof d);
    }
    unsigned *ab = (unsigned *)q->amax;
    const unsigned cap = (unsigned)snn_cuda_sm_count(c) * 8u;
    if (!q->qt && q->ldq % 16 == 0 && ((uintptr_t)q->q & 15) == 0) {
        const size_t groups = (size_t)q->rows * (size_t)(q->ldq / 16);
        unsigned grid = snn_grid(groups, 256);
        if (cap && grid > cap) grid = cap;
        const int vec = q->cols % 4 == 0 && ((uintptr_t)q->x & 15) == 0;
        if (e5)
            codes_rows_kernel<1><<<grid, 256, 0, st>>>(q->x, q->rows, q->cols, vec, q->current, fmax, q->pow2,
                                                       q->scale, q->scale_inv, (uint8_t *)q->q, q->ldq, cur, q->sinv,
                                                       ab);
        else
            codes_rows_kernel<0><<<grid, 256, 0, st>>>(q->x, q->rows, q->cols, vec, q->current, fmax, q->pow2,
                                                       q->scale, q->scale_inv, (uint8_t *)q->q, q->ldq, cur, q->sinv,
                                                       ab);
        SNN_CU_LAUNCHED("fp8_codes (rows)");
        return SNN_OK;
    }
    const long long tiles = gx * gy;
    const unsigned grid = (unsigned)(cap && tiles > (long long)cap ? cap : tiles);
    const dim3 block(32, 8);
    if (e5)
        codes_kernel<1><<<grid, block, 0, st>>>(q->x, q->rows, q->cols, q->current, fmax, q->pow2, q->scale,
                                                q->scale_inv, (uint8_t *)q->q, q->ldq, (uint8_t *)q->qt, q->ldqt,
                                                cur, q->sinv, ab, (int)gx, tiles);
    else
        codes_kernel<0><<<grid, block, 0, st>>>(q->x, q->rows, q->cols, q->current, fmax, q->pow2, q->scale,
                                                q->scale_inv, (uint8_t *)q->q, q->ldq, (uint8_t *)q->qt, q->ldqt,
                                                cur, q->sinv, ab, (int)gx, tiles);
    SNN_CU_LAUNCHED("fp8_codes");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_fp8_qdq(snn_cuda *c, const snn_fp8_qdq *q, void *scratch, float *amax) {
    if (!c || !scratch) return snn_error(SNN_E_INVALID, "fp8_qdq: no CUDA context");
    if (!q || !amax || q->rows < 0 || q->cols < 0 || (q->rows && q->cols && (!q->x || !q->out)))
        return snn_error(SNN_E_INVALID, "fp8_qdq: bad arguments");
    const float fmax = snn_fp8_max(q->fp8);
    if (fmax == 0.0f) return snn_error(SNN_E_INVALID, "fp8_qdq: %s is not an FP8 format", snn_dtype_name(q->fp8));
    const int e5 = q->fp8 == SNN_F8E5M2;
    const size_t n = (size_t)q->rows * (size_t)q->cols;
    unsigned *gbits = (unsigned *)scratch;
    cudaStream_t st = snn_cuda_stream_of(c);
    if (q->recipe == SNN_FP8_RECIPE_DELAYED || q->recipe == SNN_FP8_RECIPE_CURRENT) {
        if (n == 0) {
            *amax = 0.0f;
            return SNN_OK;
        }
        SNN_CU_TRY(cudaMemsetAsync(gbits, 0, sizeof(unsigned), st));
        unsigned bits = 0;
        if (q->recipe == SNN_FP8_RECIPE_DELAYED) {
            SNN_TRY(launch_tensor(c, e5, q->x, n, q->scale, q->scale_inv, 1, 1, q->out, gbits));
            SNN_TRY(snn_cuda_download(c, &bits, gbits, sizeof bits));
        } else {
            SNN_TRY(launch_tensor(c, e5, q->x, n, 1.0f, 1.0f, 1, 0, q->out, gbits));
            SNN_TRY(snn_cuda_download(c, &bits, gbits, sizeof bits));
            float a;
            memcpy(&a, &bits, sizeof a);
            /* the library's own rule on the host, as the CPU table */
            const float s = snn_fp8_scale_from_amax(a, fmax, q->pow2, FLT_MAX), d = 1.0f / s;
            SNN_TRY(launch_tensor(c, e5, q->x, n, s, d, 0, 1, q->out, gbits));
        }
        memcpy(amax, &bits, sizeof *amax);
        return SNN_OK;
    }
    if (q->recipe != SNN_FP8_RECIPE_BLOCK && q->recipe != SNN_FP8_RECIPE_MXFP8)
        return snn_error(SNN_E_INVALID, "fp8_qdq: unknown recipe %d", (int)q->recipe);
    if (q->block_rows <= 0 || q->block_cols <= 0)
        return snn_error(SNN_E_INVALID, "fp8_qdq: block recipes need block sizes");
    if (n == 0) {
        *amax = 0.0f;
        return SNN_OK;
    }
    blk_args a;
    a.x = q->x;
    a.out = q->out;
    a.rows = q->rows;
    a.cols = q->cols;
    a.br = q->block_rows;
    a.bc = q->block_cols;
    a.grid_cols = (q->cols + q->block_cols - 1) / q->block_cols;
    a.nblocks = (long long)((q->rows + q->block_rows - 1) / q->block_rows) * a.grid_cols;
    a.mx = q->recipe == SNN_FP8_RECIPE_MXFP8;
    a.pow2 = q->pow2;
    a.fmax = fmax;
    a.vfi = (float)snn_dtype_max(q->hp_dtype); /* as quantize_blocks: double -> float */
    a.gbits = gbits;
    const int G = q_group(a.br, a.bc);
    const long long per_cta = QDQ_THREADS / G, ctas = (a.nblocks + per_cta - 1) / per_cta;
    if (ctas > 0x7FFFFFFFLL) return snn_error(SNN_E_INVALID, "fp8_qdq: %lld blocks are too many", a.nblocks);
    SNN_CU_TRY(cudaMemsetAsync(gbits, 0, sizeof(unsigned), st));
    if (e5) qdq_blocks_kernel<1><<<(unsigned)ctas, QDQ_THREADS, 0, st>>>(a, G);
    else qdq_blocks_kernel<0><<<(unsigned)ctas, QDQ_THREADS, 0, st>>>(a, G);
    SNN_CU_LAUNCHED("fp8_qdq blocks");
    unsigned bits = 0;
    SNN_TRY(snn_cuda_download(c, &bits, gbits, sizeof bits));
    memcpy(amax, &bits, sizeof *amax);
    return SNN_OK;
}

