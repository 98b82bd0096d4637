/* Spiking self-attention core on the GPU (src/models/spikformer_parts.c is the reference).
 *
 * Per (sample b, head h), with q, k, v the head's [d][L] channel-major slices of qkv:
 *   A = V K^T (d x d),  y = scale * A Q            (token-major: Y = Q K^T V * scale)
 *   backward: dA = scale * dY Q^T, dQ = scale * A^T dY, dV = dA K, dK = dA^T V.
 * Associating as Q (K^T V) keeps the intermediate at d x d instead of L x L and needs no
 * softmax. One block per (b, h): the first pass streams tiles of TL tokens of the inputs
 * through shared memory and accumulates A (and dA) with each element owned by one thread
 * (a fixed summation order over tokens: deterministic); the second pass streams the tokens
 * again and writes the outputs. A and dA live in shared memory when they fit next to the
 * tiles (48 KiB of dynamic shared memory, no opt-in attribute needed), else in `work`.
 * Spike inputs give integer sums below 2^24, so the forward is exact in FP32.
 * Head dimensions 16 and 32 take register-tiled kernels (ssa_fwd_fast / ssa_bwd_fast, below
 * the generic ones) with the same per-element summation order. */
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"

#define SSA_THREADS 256
#define SSA_SMEM_MAX 49152 /* default dynamic shared memory limit of one block */

namespace {

/* Launch plan shared by the size query and the launches so they always agree. */
struct ssa_plan {
    int tl;          /* tokens per tile */
    int mats_smem;   /* 1: A (and dA) in shared memory; 0: in work */
    size_t smem;     /* dynamic shared memory bytes */
};

/* nmat: d x d matrices (1 forward, 2 backward); ntile: [d][TL+1] tiles in flight. Prefers
 * the matrices in shared memory with tiles of at least 8 tokens; else the matrices go to
 * global scratch and the tiles take what fits. Returns 0 when even one-token tiles do not
 * fit (d in the thousands). */
static int ssa_plan_make(int d, int nmat, int ntile, ssa_plan *p) {
    static const int tls[] = {32, 16, 8, 4, 2, 1};
    const size_t mats = (size_t)nmat * d * d * sizeof(float);
    for (int in_smem = 1; in_smem >= 0; in_smem--) {
        for (int i = 0; i < 6; i++) {
            const int tl = tls[i];
            if (in_smem && tl < 8) break;
            size_t need = (size_t)ntile * d * (tl + 1) * sizeof(float) + (in_smem ? mats : 0);
            if (need <= SSA_SMEM_MAX) {
                p->tl = tl;
                p->mats_smem = in_smem;
                p->smem = need;
                return 1;
            }
        }
    }
    return 0;
}

static snn_status ssa_check(const char *what, const void *a, const void *b, const void *c,
                            int B, int D, int L, int heads) {
    if (!a || !b || !c)
        return snn_error(SNN_E_INVALID, "%s: NULL context or device buffer", what);
    if (B <= 0 || D <= 0 || L <= 0 || heads <= 0)
        return snn_error(SNN_E_INVALID, "%s: B, D, L and heads must be positive (got %d, %d, %d, %d)",
                         what, B, D, L, heads);
    if (D % heads)
        return snn_error(SNN_E_INVALID, "%s: D = %d is not divisible by %d heads", what, D, heads);
    if ((size_t)B * (size_t)heads > 0x7fffffffu)
        return snn_error(SNN_E_INVALID, "%s: B * heads = %zu blocks is too many", what,
                         (size_t)B * (size_t)heads);
    return SNN_OK;
}

/* s[c][t] = src[c][l0 + t] (0 past the sequence end), row stride tlp = tl + 1 (odd: a warp
 * reading one column of consecutive rows hits distinct banks). */
__device__ __forceinline__ void load_tile(float *s, const float *src, int d, int L, int l0,
                                          int tl, int tlp) {
    const int n = d * tl;
    for (int e = threadIdx.x; e < n; e += blockDim.x) {
        const int c = e / tl, t = e - c * tl, l = l0 + t;
        s[c * tlp + t] = l < L ? src[(size_t)c * L + l] : 0.0f;
    }
}

/* Forward register tiling: a thread computes 4 rows that share one column / token, so each
 * value of the shared column is loaded once for 4 FMAs (measured on an H200: the same
 * tiling made the backward slower, 175 -> 229 us at Spikformer-S sizes, so it keeps one
 * element per thread). Rows past d are read clamped to row d-1 and not stored. Every output element is still one sequential sum over
 * its index (fixed order: deterministic). */
#define SSA_R 4

__device__ __forceinline__ int ssa_row(int i, int d) { return i < d ? i : d - 1; }

__global__ void __launch_bounds__(SSA_THREADS)
    ssa_fwd_kernel(const float *__restrict__ qkv, float *__restrict__ y, int D, int L, int heads,
                   int d, int tl, float scale, float *work) {
    extern __shared__ float sm[];
    const int tlp = tl + 1, dd = d * d, nrb = (d + SSA_R - 1) / SSA_R;
    const int bh = blockIdx.x, b = bh / heads, h = bh - b * heads;
    const size_t DL = (size_t)D * L;
    const float *q = qkv + (size_t)b * 3 * DL + (size_t)h * d * L;
    const float *k = q + DL, *v = k + DL;
    float *yo = y + (size_t)b * DL + (size_t)h * d * L;
    float *tk = sm, *tv = sm + (size_t)d * tlp;
    float *A = work ? work + (size_t)bh * dd : sm + 2 * (size_t)d * tlp;

    /* A[i][j] = sum_l v[i][l] k[j][l]; a thread owns the same items in every tile */
    const int n1 = nrb * d;
    for (int e = threadIdx.x; e < dd; e += blockDim.x) A[e] = 0.0f;
    __syncthreads(); /* the zeroing and the items below map elements to threads differently */
    for (int l0 = 0; l0 < L; l0 += tl) {
        load_tile(tk, k, d, L, l0, tl, tlp);
        load_tile(tv, v, d, L, l0, tl, tlp);
        __syncthreads();
        for (int it = threadIdx.x; it < n1; it += blockDim.x) {
            const int rb = it / d, j = it - rb * d, i0 = rb * SSA_R;
            const float *kj = tk + j * tlp, *vr[SSA_R];
            float a[SSA_R];
#pragma unroll
            for (int r = 0; r < SSA_R; r++) {
                vr[r] = tv + ssa_row(i0 + r, d) * tlp;
                a[r] = i0 + r < d ? A[(i0 + r) * d + j] : 0.0f;
            }
            for (int t = 0; t < tl; t++) {
                const float kv = kj[t];
#pragma unroll
                for (int r = 0; r < SSA_R; r++) a[r] = fmaf(vr[r][t], kv, a[r]);
            }
#pragma unroll
            for (int r = 0; r < SSA_R; r++)
                if (i0 + r < d) A[(i0 + r) * d + j] = a[r];
        }
        __syncthreads(); /* tiles are overwritten next; A complete after the last pass */
    }

    /* y[i][l] = scale * sum_j A[i][j] q[j][l] */
    float *tq = tk;
    const int n2 = nrb * tl;
    for (int l0 = 0; l0 < L; l0 += tl) {
        load_tile(tq, q, d, L, l0, tl, tlp);
        __syncthreads();
        for (int it = threadIdx.x; it < n2; it += blockDim.x) {
            const int rb = it / tl, t = it - rb * tl, l = l0 + t, i0 = rb * SSA_R;
            if (l >= L) continue;
            const float *ar[SSA_R];
            float s[SSA_R];
#pragma unroll
            for (int r = 0; r < SSA_R; r++) {
                ar[r] = A + (size_t)ssa_row(i0 + r, d) * d;
                s[r] = 0.0f;
            }
            for (int j = 0; j < d; j++) {
                const float qv = tq[j * tlp + t];
#pragma unroll
                for (int r = 0; r < SSA_R; r++) s[r] = fmaf(ar[r][j], qv, s[r]);
            }
#pragma unroll
            for (int r = 0; r < SSA_R; r++)
                if (i0 + r < d) yo[(size_t)(i0 + r) * L + l] = s[r] * scale;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(SSA_THREADS)
    ssa_bwd_kernel(const float *__restrict__ qkv, const float *__restrict__ dy,
                   float *__restrict__ dqkv, int D, int L, int heads, int d, int tl, float scale,
                   float *work) {
    extern __shared__ float sm[];
    const int tlp = tl + 1, dd = d * d;
    const int bh = blockIdx.x, b = bh / heads, h = bh - b * heads;
    const size_t DL = (size_t)D * L, off = (size_t)b * 3 * DL + (size_t)h * d * L;
    const float *q = qkv + off, *k = q + DL, *v = k + DL;
    const float *g = dy + (size_t)b * DL + (size_t)h * d * L;
    float *dq = dqkv + off, *dk = dq + DL, *dv = dk + DL;
    const size_t ts = (size_t)d * tlp;
    float *tk = sm, *tv = sm + ts, *tg = sm + 2 * ts, *tq = sm + 3 * ts;
    float *A = work ? work + (size_t)bh * 2 * dd : sm + 4 * ts;
    float *dA = A + dd;

    /* pass 1: A[i][j] = sum_l v[i][l] k[j][l], dA[i][j] = scale * sum_l g[i][l] q[j][l] */
    for (int e = threadIdx.x; e < dd; e += blockDim.x) {
        A[e] = 0.0f;
        dA[e] = 0.0f;
    }
    for (int l0 = 0; l0 < L; l0 += tl) {
        load_tile(tk, k, d, L, l0, tl, tlp);
        load_tile(tv, v, d, L, l0, tl, tlp);
        load_tile(tg, g, d, L, l0, tl, tlp);
        load_tile(tq, q, d, L, l0, tl, tlp);
        __syncthreads();
        for (int e = threadIdx.x; e < dd; e += blockDim.x) {
            const int i = e / d, j = e - i * d;
            const float *vi = tv + i * tlp, *kj = tk + j * tlp;
            const float *gi = tg + i * tlp, *qj = tq + j * tlp;
            float sa = A[e], sd = dA[e];
            for (int t = 0; t < tl; t++) {
                sa = fmaf(vi[t], kj[t], sa);
                sd = fmaf(gi[t], qj[t], sd);
            }
            A[e] = sa;
            dA[e] = sd;
        }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < dd; e += blockDim.x) dA[e] *= scale; /* own elements */
    __syncthreads();

    /* pass 2, per token l and channel c:
     *   dq[c][l] = scale * sum_i A[i][c] g[i][l]
     *   dv[c][l] = sum_j dA[c][j] k[j][l]
     *   dk[c][l] = sum_i dA[i][c] v[i][l] */
    const int n = d * tl;
    for (int l0 = 0; l0 < L; l0 += tl) {
        load_tile(tk, k, d, L, l0, tl, tlp);
        load_tile(tv, v, d, L, l0, tl, tlp);
        load_tile(tg, g, d, L, l0, tl, tlp);
        __syncthreads();
        for (int e = threadIdx.x; e < n; e += blockDim.x) {
            const int c = e / tl, t = e - c * tl, l = l0 + t;
            if (l >= L) continue;
            const float *dAc = dA + (size_t)c * d;
            float sq = 0.0f, sv = 0.0f, sk = 0.0f;
            for (int m = 0; m < d; m++) {
                sq = fmaf(A[(size_t)m * d + c], tg[m * tlp + t], sq);
                sv = fmaf(dAc[m], tk[m * tlp + t], sv);
                sk = fmaf(dA[(size_t)m * d + c], tv[m * tlp + t], sk);
            }
            const size_t o = (size_t)c * L + l;
            dq[o] = sq * scale;
            dk[o] = sk;
            dv[o] = sv;
        }
        __syncthreads();
    }
}

/* ---- Register-tiled kernels for head dimensions 16 and 32 (Spikformer: d = 32) ----
 * The generic kernels above issue about two shared-memory loads per FMA and are limited by
 * shared-memory wavefronts. These keep partial sums in registers and read shared operands
 * as float4, mostly as warp-wide broadcasts:
 *  - tiles of TL = 64 tokens, channel-major [c][TLP] with TLP = 68 (= 4 mod 32: a warp
 *    reading float4s of 32 consecutive rows touches each bank once per 8-lane phase);
 *  - d x d matrices with row stride LDM = DH + 4 (float4-aligned, transposed stores spread
 *    over 8 bank groups);
 *  - pass 1 (A = V K^T, dA = scale G Q^T): a thread owns RI rows of one column j and keeps
 *    them in registers across all token tiles; per 4 tokens it reads one float4 of row j
 *    and RI broadcast float4s;
 *  - pass 2 (y, dq, dk, dv): lane = token, a warp owns CB = DH/4 channels, reads the
 *    token's value once per sum index and CB/4 broadcast float4s of the matrix row.
 * Every output element is still one sequential sum over its index (tokens in order, then
 * one scale multiply), as in the generic kernels: deterministic and, for spikes, exact.
 * Shared memory (DH = 32): forward 30 KiB, backward 47.5 KiB (no opt-in needed). */
#define SSA_TL 64
#define SSA_TLP (SSA_TL + 4)

/* s[c][t] = src[c][l0 + t] for t < TL (0 past the end); lanes run along t: coalesced
 * global reads, conflict-free stores. Asynchronous 4-byte copies (cp.async, sm_80+) put
 * all of a thread's loads in flight at once without holding registers; a zero source size
 * fills the padding. Callers finish with ssa_async_wait() and __syncthreads(). */
template <int DH>
__device__ __forceinline__ void load_tile64(float *s, const float *__restrict__ src, int L,
                                            int l0) {
#pragma unroll 1 /* the copies do not block: unrolling would only hold addresses */
    for (int e = threadIdx.x; e < DH * SSA_TL; e += SSA_THREADS) {
        const int c = e / SSA_TL, t = e - c * SSA_TL, l = l0 + t;
        const float *p = l < L ? src + (size_t)c * L + l : src;
        const unsigned dst = (unsigned)__cvta_generic_to_shared(s + c * SSA_TLP + t);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(p),
                     "r"(l < L ? 4 : 0)
                     : "memory");
    }
}
__device__ __forceinline__ void ssa_async_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* acc[r] += sum over tokens t < nt (in order) of x[i0 + r][t] * y[j][t]; tiles zero-padded
 * to a multiple of 4 tokens (adding +0 products leaves the sums unchanged) */
template <int DH, int RI>
__device__ __forceinline__ void acc_rows(float *acc, const float *x, const float *y, int i0,
                                         int j, int nt) {
    const float *yj = y + j * SSA_TLP;
#pragma unroll 1
    for (int t = 0; t < nt; t += 4) {
        const float4 b = *reinterpret_cast<const float4 *>(yj + t);
#pragma unroll
        for (int r = 0; r < RI; r++) {
            const float4 a = *reinterpret_cast<const float4 *>(x + (i0 + r) * SSA_TLP + t);
            acc[r] = fmaf(a.x, b.x, acc[r]);
            acc[r] = fmaf(a.y, b.y, acc[r]);
            acc[r] = fmaf(a.z, b.z, acc[r]);
            acc[r] = fmaf(a.w, b.w, acc[r]);
        }
    }
}

template <int DH>
__global__ void __launch_bounds__(SSA_THREADS, 4)
    ssa_fwd_fast(const float *__restrict__ qkv, float *__restrict__ y, int D, int L, int heads,
                 float scale) {
    extern __shared__ float4 ssa_smem4[];
    float *sm = reinterpret_cast<float *>(ssa_smem4);
    constexpr int LDM = DH + 4, RI = DH * DH / SSA_THREADS, CB = DH / 4;
    static_assert(RI >= 1 && DH * DH % SSA_THREADS == 0 && CB % 4 == 0, "fast SSA shape");
    const int bh = blockIdx.x, b = bh / heads, h = bh - b * heads;
    const size_t DL = (size_t)D * L;
    const float *q = qkv + (size_t)b * 3 * DL + (size_t)h * DH * L;
    const float *k = q + DL, *v = k + DL;
    float *yo = y + (size_t)b * DL + (size_t)h * DH * L;
    float *tk = sm, *tv = tk + DH * SSA_TLP, *tq = tv + DH * SSA_TLP;
    float *AT = tq + DH * SSA_TLP; /* AT[j][i] = A[i][j] */
    const int ntiles = (L + SSA_TL - 1) / SSA_TL;

    /* pass 1: A[i][j] = sum_l v[i][l] k[j][l], rows i0..i0+RI-1 of column j per thread */
    const int j = threadIdx.x % DH, i0 = threadIdx.x / DH * RI;
    float acc[RI];
#pragma unroll
    for (int r = 0; r < RI; r++) acc[r] = 0.0f;
    for (int tile = 0; tile < ntiles; tile++) {
        const int l0 = tile * SSA_TL, nt = min(SSA_TL, L - l0);
        if (tile) __syncthreads(); /* the previous tile has been read */
        load_tile64<DH>(tk, k, L, l0);
        load_tile64<DH>(tv, v, L, l0);
        if (ntiles == 1) load_tile64<DH>(tq, q, L, l0);
        ssa_async_wait();
        __syncthreads();
        acc_rows<DH, RI>(acc, tv, tk, i0, j, nt);
    }
#pragma unroll
    for (int r = 0; r < RI; r++) AT[j * LDM + i0 + r] = acc[r];

    /* pass 2: y[i][l] = scale * sum_j A[i][j] q[j][l]; lane = token, warp = CB channels */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = (warp & 1) * 32 + lane, c0 = (warp >> 1) * CB;
    for (int tile = 0; tile < ntiles; tile++) {
        const int l0 = tile * SSA_TL;
        if (ntiles > 1) {
            __syncthreads(); /* tq free (and AT complete) */
            load_tile64<DH>(tq, q, L, l0);
            ssa_async_wait();
        }
        __syncthreads();
        if (l0 + t >= L) continue;
        float s[CB];
#pragma unroll
        for (int r = 0; r < CB; r++) s[r] = 0.0f;
#pragma unroll 4
        for (int m = 0; m < DH; m++) {
            const float qv = tq[m * SSA_TLP + t];
#pragma unroll
            for (int r = 0; r < CB; r += 4) {
                const float4 a = *reinterpret_cast<const float4 *>(AT + m * LDM + c0 + r);
                s[r] = fmaf(a.x, qv, s[r]);
                s[r + 1] = fmaf(a.y, qv, s[r + 1]);
                s[r + 2] = fmaf(a.z, qv, s[r + 2]);
                s[r + 3] = fmaf(a.w, qv, s[r + 3]);
            }
        }
#pragma unroll
        for (int r = 0; r < CB; r++) yo[(size_t)(c0 + r) * L + l0 + t] = s[r] * scale;
    }
}

template <int DH>
__global__ void __launch_bounds__(SSA_THREADS, 4)
    ssa_bwd_fast(const float *__restrict__ qkv, const float *__restrict__ dy,
                 float *__restrict__ dqkv, int D, int L, int heads, float scale) {
    extern __shared__ float4 ssa_smem4[];
    float *sm = reinterpret_cast<float *>(ssa_smem4);
    constexpr int LDM = DH + 4, RI = DH * DH / (SSA_THREADS / 2), CB = DH / 4;
    static_assert(RI >= 1 && DH * DH % (SSA_THREADS / 2) == 0 && CB % 4 == 0, "fast SSA shape");
    const int bh = blockIdx.x, b = bh / heads, h = bh - b * heads;
    const size_t DL = (size_t)D * L, off = (size_t)b * 3 * DL + (size_t)h * DH * L;
    const float *q = qkv + off, *k = q + DL, *v = k + DL;
    const float *g = dy + (size_t)b * DL + (size_t)h * DH * L;
    float *dq = dqkv + off, *dk = dq + DL, *dv = dk + DL;
    float *tk = sm, *tv = tk + DH * SSA_TLP, *tg = tv + DH * SSA_TLP, *tq = tg + DH * SSA_TLP;
    float *A = tq + DH * SSA_TLP, *dA = A + DH * LDM, *dAT = dA + DH * LDM;
    const int ntiles = (L + SSA_TL - 1) / SSA_TL;

    /* pass 1: warps 0-3 A[i][j] = sum_l v[i][l] k[j][l], warps 4-7 dA[i][j] = scale *
     * sum_l g[i][l] q[j][l]; rows i0..i0+RI-1 of column j per thread */
    const int second = threadIdx.x >= SSA_THREADS / 2; /* warp-uniform */
    const int u = threadIdx.x % (SSA_THREADS / 2), j = u % DH, i0 = u / DH * RI;
    const float *X = second ? tg : tv, *Y = second ? tq : tk;
    float acc[RI];
#pragma unroll
    for (int r = 0; r < RI; r++) acc[r] = 0.0f;
    for (int tile = 0; tile < ntiles; tile++) {
        const int l0 = tile * SSA_TL, nt = min(SSA_TL, L - l0);
        if (tile) __syncthreads();
        load_tile64<DH>(tk, k, L, l0);
        load_tile64<DH>(tv, v, L, l0);
        load_tile64<DH>(tg, g, L, l0);
        load_tile64<DH>(tq, q, L, l0);
        ssa_async_wait();
        __syncthreads();
        acc_rows<DH, RI>(acc, X, Y, i0, j, nt);
    }
    if (second) {
#pragma unroll
        for (int r = 0; r < RI; r++) {
            const float s = acc[r] * scale;
            dA[(i0 + r) * LDM + j] = s;
            dAT[j * LDM + i0 + r] = s;
        }
    } else {
#pragma unroll
        for (int r = 0; r < RI; r++) A[(i0 + r) * LDM + j] = acc[r];
    }

    /* pass 2, lane = token, warp = CB channels c:
     *   dq[c][l] = scale * sum_m A[m][c] g[m][l]
     *   dv[c][l] = sum_m dA[c][m] k[m][l]   (dAT row m)
     *   dk[c][l] = sum_m dA[m][c] v[m][l] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = (warp & 1) * 32 + lane, c0 = (warp >> 1) * CB;
    for (int tile = 0; tile < ntiles; tile++) {
        const int l0 = tile * SSA_TL;
        if (ntiles > 1) { /* the last pass-1 tile is the first one needed here only when L fits */
            __syncthreads();
            load_tile64<DH>(tk, k, L, l0);
            load_tile64<DH>(tv, v, L, l0);
            load_tile64<DH>(tg, g, L, l0);
            ssa_async_wait();
        }
        __syncthreads(); /* matrices complete; tiles loaded */
        if (l0 + t >= L) continue;
        float sq[CB], sv[CB], sk[CB];
#pragma unroll
        for (int r = 0; r < CB; r++) sq[r] = sv[r] = sk[r] = 0.0f;
#pragma unroll 1
        for (int m = 0; m < DH; m++) {
            const float gm = tg[m * SSA_TLP + t], km = tk[m * SSA_TLP + t],
                        vm = tv[m * SSA_TLP + t];
            const float *Am = A + m * LDM + c0, *dATm = dAT + m * LDM + c0,
                        *dAm = dA + m * LDM + c0;
#pragma unroll
            for (int r = 0; r < CB; r += 4) {
                const float4 a = *reinterpret_cast<const float4 *>(Am + r);
                const float4 e = *reinterpret_cast<const float4 *>(dATm + r);
                const float4 f = *reinterpret_cast<const float4 *>(dAm + r);
                sq[r] = fmaf(a.x, gm, sq[r]);
                sq[r + 1] = fmaf(a.y, gm, sq[r + 1]);
                sq[r + 2] = fmaf(a.z, gm, sq[r + 2]);
                sq[r + 3] = fmaf(a.w, gm, sq[r + 3]);
                sv[r] = fmaf(e.x, km, sv[r]);
                sv[r + 1] = fmaf(e.y, km, sv[r + 1]);
                sv[r + 2] = fmaf(e.z, km, sv[r + 2]);
                sv[r + 3] = fmaf(e.w, km, sv[r + 3]);
                sk[r] = fmaf(f.x, vm, sk[r]);
                sk[r + 1] = fmaf(f.y, vm, sk[r + 1]);
                sk[r + 2] = fmaf(f.z, vm, sk[r + 2]);
                sk[r + 3] = fmaf(f.w, vm, sk[r + 3]);
            }
        }
#pragma unroll
        for (int r = 0; r < CB; r++) {
            const size_t o = (size_t)(c0 + r) * L + l0 + t;
            dq[o] = sq[r] * scale;
            dk[o] = sk[r];
            dv[o] = sv[r];
        }
    }
}

template <int DH>
static constexpr size_t ssa_fast_smem(int bwd) {
    return ((size_t)(bwd ? 4 : 3) * DH * SSA_TLP + (size_t)(bwd ? 3 : 1) * DH * (DH + 4)) *
           sizeof(float);
}
static_assert(ssa_fast_smem<32>(1) <= SSA_SMEM_MAX, "fast SSA backward exceeds 48 KiB");

} // namespace

extern "C" size_t snn_cuda_ssa_work_bytes(int B, int D, int L, int heads) {
    if (B <= 0 || D <= 0 || L <= 0 || heads <= 0 || D % heads) return 0;
    const int d = D / heads;
    size_t need = 0;
    ssa_plan f = {32, 1, 0}, bw = {32, 1, 0};
    if (ssa_plan_make(d, 1, 2, &f) && !f.mats_smem)
        need = (size_t)B * heads * (size_t)d * d * sizeof(float);
    if (ssa_plan_make(d, 2, 4, &bw) && !bw.mats_smem) {
        size_t nb = (size_t)B * heads * 2 * (size_t)d * d * sizeof(float);
        if (nb > need) need = nb;
    }
    return need;
}

/* Short sequences (L = 4 in tiny models) would spend most of a 32-token tile on padding:
 * shrink the tile to the power of two covering L (the shared memory planned for p.tl
 * still covers it). */
static int ssa_tile_for(int tl, int L) {
    int t = 1;
    while (t < L && t < tl) t *= 2;
    return t;
}

static snn_status ssa_prepare(const char *what, int d, int nmat, int ntile, void *work,
                              ssa_plan *p) {
    if (!ssa_plan_make(d, nmat, ntile, p))
        return snn_error(SNN_E_UNSUPPORTED, "%s: head dimension %d is too large for the GPU "
                                            "attention kernel",
                         what, d);
    if (!p->mats_smem && !work)
        return snn_error(SNN_E_INVALID, "%s: head dimension %d needs device scratch: pass work of "
                                        "snn_cuda_ssa_work_bytes() bytes",
                         what, d);
    return SNN_OK;
}

extern "C" snn_status snn_cuda_ssa_forward(snn_cuda *c, const float *qkv, float *y, int B, int D,
                                           int L, int heads, float scale, void *work) {
    SNN_TRY(ssa_check("ssa_forward", c, qkv, y, B, D, L, heads));
    const int d = D / heads;
    if (d == 32 || d == 16) {
        auto kern = d == 32 ? ssa_fwd_fast<32> : ssa_fwd_fast<16>;
        kern<<<B * heads, SSA_THREADS, d == 32 ? ssa_fast_smem<32>(0) : ssa_fast_smem<16>(0),
               snn_cuda_stream_of(c)>>>(qkv, y, D, L, heads, scale);
        SNN_CU_LAUNCHED("ssa_forward");
        return SNN_OK;
    }
    ssa_plan p = {32, 1, 0};
    SNN_TRY(ssa_prepare("ssa_forward", d, 1, 2, work, &p));
    ssa_fwd_kernel<<<B * heads, SSA_THREADS, p.smem, snn_cuda_stream_of(c)>>>(
        qkv, y, D, L, heads, d, ssa_tile_for(p.tl, L), scale, p.mats_smem ? nullptr : (float *)work);
    SNN_CU_LAUNCHED("ssa_forward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_ssa_backward(snn_cuda *c, const float *qkv, const float *dy,
                                            float *dqkv, int B, int D, int L, int heads,
                                            float scale, void *work) {
    SNN_TRY(ssa_check("ssa_backward", c, qkv, dy, B, D, L, heads));
    if (!dqkv) return snn_error(SNN_E_INVALID, "ssa_backward: dqkv is NULL");
    const int d = D / heads;
    if (d == 32 || d == 16) {
        auto kern = d == 32 ? ssa_bwd_fast<32> : ssa_bwd_fast<16>;
        kern<<<B * heads, SSA_THREADS, d == 32 ? ssa_fast_smem<32>(1) : ssa_fast_smem<16>(1),
               snn_cuda_stream_of(c)>>>(qkv, dy, dqkv, D, L, heads, scale);
        SNN_CU_LAUNCHED("ssa_backward");
        return SNN_OK;
    }
    ssa_plan p = {32, 1, 0};
    SNN_TRY(ssa_prepare("ssa_backward", d, 2, 4, work, &p));
    ssa_bwd_kernel<<<B * heads, SSA_THREADS, p.smem, snn_cuda_stream_of(c)>>>(
        qkv, dy, dqkv, D, L, heads, d, ssa_tile_for(p.tl, L), scale, p.mats_smem ? nullptr : (float *)work);
    SNN_CU_LAUNCHED("ssa_backward");
    return SNN_OK;
}
