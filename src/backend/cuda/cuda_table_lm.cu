/* The CUDA table's entries for the language-model ops (backend.h, "language-model ops").
 *
 * Correct and deterministic first (a fused flash-style attention is later work): every
 * value is computed by one thread in a fixed order, and block reductions are fixed trees, so
 * a run repeats itself bit for bit. Against the CPU table (tests/cuda/test_cuda_table_lm.c):
 *   bit for bit: embedding gather and gradient (each G element adds its tokens in order, one
 *     thread per (column, id bucket)), position add and gradient (one thread per element
 *     walks the rows in order), RoPE (the table's FP32 cos/sin, explicit _rn operations: no
 *     FMA, as the CPU compiled in ISO C, which does not contract), elastic bi-spike forward
 *     and backward (same operations, same order, rintf is exact);
 *   to rounding: attention (dot products in FP32 in another order than the CPU's BLAS, expf
 *     within 2 ulps of glibc's, sums of exps in double as on the CPU, a tree instead of a
 *     sequence), SwiGLU (expf). The LM loss is cuda_table_lm_loss.cu.
 * Entries that return values to the host (embedding_forward's bad token) wait for the stream
 * through a download of the table's scratch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_table_lm.h"

namespace {


/* ---------------------------------------------------------------- embedding */

__device__ __forceinline__ bool id_ok(float f, int vocab) { return (f >= 0.0f && f < (float)vocab) && f == floorf(f); }

__global__ void emb_fwd_kernel(size_t n, int D, int vocab, const float *ids, const float *W, float *y,
                               unsigned long long *bad) {
    const size_t total = n * (size_t)D;
    GRID_STRIDE(e, total) {
        const size_t i = e / (size_t)D, j = e % (size_t)D;
        const float f = ids[i];
        if (id_ok(f, vocab)) {
            y[e] = W[(size_t)f * (size_t)D + j];
        } else {
            y[e] = 0.0f;
            if (j == 0) note_bad(bad, i);
        }
    }
}

/* The backward in the CPU's order for every element (G[id][j] += dy[i][j] for i = 0, 1, ...)
 * without a thread scanning every token: the tokens are sorted by id with a stable radix sort
 * (equal ids keep increasing i), then one block per run of equal ids adds its rows in that
 * order, a thread per column. */
__global__ void emb_keys_kernel(size_t n, const float *ids, int *keys, int *order) {
    GRID_STRIDE(i, n) {
        keys[i] = (int)ids[i];
        order[i] = (int)i;
    }
}

__global__ void emb_bwd_kernel(int n, int D, const int *keys, const int *order, const float *dy, float *G) {
    const int p = blockIdx.x, id = keys[p];
    if (p > 0 && keys[p - 1] == id) return; /* not the first of its run */
    float *g = G + (size_t)id * (size_t)D;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float acc = g[j];
        for (int q = p; q < n && keys[q] == id; q++) acc = __fadd_rn(acc, dy[(size_t)order[q] * (size_t)D + j]);
        g[j] = acc;
    }
}

snn_status t_embedding_forward(const snn_backend *be, size_t n, int D, int vocab, const float *ids, const float *W,
                               float *y, long long *bad, float *bad_id) {
    SNN_TRY(snn_cuda_table_check(be, "embedding_forward"));
    if (!bad || !bad_id) return snn_error(SNN_E_INVALID, "embedding_forward: NULL bad-token outputs");
    *bad = -1;
    *bad_id = 0.0f;
    if (D <= 0 || vocab <= 0) return snn_error(SNN_E_INVALID, "embedding_forward: D and vocab must be positive");
    if (n == 0) return SNN_OK;
    if (!ids || !W || !y) return snn_error(SNN_E_INVALID, "embedding_forward: NULL pointer");
    snn_cuda *c = snn_cuda_table_ctx(be);
    unsigned long long *first = (unsigned long long *)snn_cuda_table_scratch(be);
    SNN_CU_TRY(cudaMemsetAsync(first, 0xFF, sizeof *first, st_of(be)));
    const size_t total = n * (size_t)D;
    emb_fwd_kernel<<<snn_cuda_table_grid(be, total, 256), 256, 0, st_of(be)>>>(n, D, vocab, ids, W, y, first);
    SNN_CU_LAUNCHED("embedding_forward");
    unsigned long long f = NONE;
    SNN_TRY(snn_cuda_download(c, &f, first, sizeof f));
    if (f != NONE) {
        *bad = (long long)f;
        SNN_TRY(snn_cuda_download(c, bad_id, ids + f, sizeof(float)));
    }
    return SNN_OK;
}

snn_status t_embedding_backward(const snn_backend *be, size_t n, int D, const float *ids, const float *dy, float *G) {
    SNN_TRY(snn_cuda_table_check(be, "embedding_backward"));
    if (D <= 0) return snn_error(SNN_E_INVALID, "embedding_backward: D must be positive");
    if (n == 0) return SNN_OK;
    if (!ids || !dy || !G) return snn_error(SNN_E_INVALID, "embedding_backward: NULL pointer");
    if (n > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "embedding_backward: %zu tokens in one call", n);
    const int ni = (int)n;
    size_t temp = 0;
    SNN_CU_TRY(cub::DeviceRadixSort::SortPairs(NULL, temp, (const int *)NULL, (int *)NULL, (const int *)NULL,
                                               (int *)NULL, ni, 0, 32, st_of(be)));
    const size_t arr = (n * sizeof(int) + 255) / 256 * 256;
    void *ws;
    SNN_TRY(snn_cuda_table_ws(be, 4 * arr + temp, &ws));
    int *keys = (int *)ws, *order = (int *)((char *)ws + arr), *skeys = (int *)((char *)ws + 2 * arr),
        *sorder = (int *)((char *)ws + 3 * arr);
    emb_keys_kernel<<<snn_cuda_table_grid(be, n, 256), 256, 0, st_of(be)>>>(n, ids, keys, order);
    SNN_CU_LAUNCHED("embedding_backward (keys)");
    SNN_CU_TRY(cub::DeviceRadixSort::SortPairs((char *)ws + 4 * arr, temp, keys, skeys, order, sorder, ni, 0, 32,
                                               st_of(be)));
    emb_bwd_kernel<<<(unsigned)ni, D >= 256 ? 256 : 32 * ((D + 31) / 32), 0, st_of(be)>>>(ni, D, skeys, sorder, dy, G);
    SNN_CU_LAUNCHED("embedding_backward");
    return SNN_OK;
}

/* ---------------------------------------------------------------- positions */

__global__ void pos_fwd_kernel(size_t R, size_t L, const float *x, const float *W, float *y) {
    GRID_STRIDE(e, R * L) y[e] = __fadd_rn(x[e], W[e % L]);
}

__global__ void pos_bwd_kernel(size_t R, size_t L, const float *dy, float *G) {
    GRID_STRIDE(i, L) {
        float g = G[i];
        for (size_t b = 0; b < R; b++) g = __fadd_rn(g, dy[b * L + i]);
        G[i] = g;
    }
}

snn_status t_posemb_forward(const snn_backend *be, size_t R, size_t L, const float *x, const float *W, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "posemb_forward"));
    if (!R || !L) return SNN_OK;
    if (!x || !W || !y) return snn_error(SNN_E_INVALID, "posemb_forward: NULL pointer");
    pos_fwd_kernel<<<snn_cuda_table_grid(be, R * L, 256), 256, 0, st_of(be)>>>(R, L, x, W, y);
    SNN_CU_LAUNCHED("posemb_forward");
    return SNN_OK;
}

snn_status t_posemb_backward(const snn_backend *be, size_t R, size_t L, const float *dy, float *G) {
    SNN_TRY(snn_cuda_table_check(be, "posemb_backward"));
    if (!R || !L) return SNN_OK;
    if (!dy || !G) return snn_error(SNN_E_INVALID, "posemb_backward: NULL pointer");
    pos_bwd_kernel<<<snn_grid(L, 128), 128, 0, st_of(be)>>>(R, L, dy, G);
    SNN_CU_LAUNCHED("posemb_backward");
    return SNN_OK;
}

/* ---------------------------------------------------------------- RoPE */

/* One thread per rotated pair (both outputs from both inputs: safe in place) or per copied
 * value of the row's tail. */
__global__ void rope_kernel(size_t rows, int S, int W, int rot, int hd, const float *cs, const float *sn, float sign,
                            const float *x, float *y) {
    const int h2 = hd / 2;
    const size_t pairs = (size_t)rot * (size_t)h2, rest = (size_t)W - (size_t)rot * (size_t)hd;
    const size_t copy = x == y ? 0 : rest, per = pairs + copy;
    GRID_STRIDE(e, rows * per) {
        const size_t row = e / per, k = e % per;
        const float *xr = x + row * (size_t)W;
        float *yr = y + row * (size_t)W;
        if (k < pairs) {
            const int h = (int)(k / (size_t)h2), i = (int)(k % (size_t)h2);
            const size_t s = row % (size_t)S;
            const float c = cs[s * (size_t)h2 + i], si = __fmul_rn(sign, sn[s * (size_t)h2 + i]);
            const float a = xr[(size_t)h * hd + i], w = xr[(size_t)h * hd + i + h2];
            yr[(size_t)h * hd + i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(w, si));
            yr[(size_t)h * hd + i + h2] = __fadd_rn(__fmul_rn(a, si), __fmul_rn(w, c));
        } else {
            const size_t col = (size_t)rot * (size_t)hd + (k - pairs);
            yr[col] = xr[col];
        }
    }
}

snn_status t_rope_apply(const snn_backend *be, size_t R, int S, int W, int rot, int hd, const float *cs,
                        const float *sn, float sign, const float *x, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "rope_apply"));
    if (S < 0 || hd <= 0 || hd % 2 || rot < 0 || (size_t)rot * (size_t)hd > (size_t)(W > 0 ? W : 0))
        return snn_error(SNN_E_INVALID, "rope_apply: bad geometry (S %d, W %d, rot %d, hd %d)", S, W, rot, hd);
    if (!R || !S) return SNN_OK;
    if (!cs || !sn || !x || !y) return snn_error(SNN_E_INVALID, "rope_apply: NULL pointer");
    const size_t rows = R * (size_t)S, per = (size_t)rot * (size_t)(hd / 2) + (x == y ? 0 : (size_t)W - (size_t)rot * hd);
    if (!per) return SNN_OK;
    rope_kernel<<<snn_cuda_table_grid(be, rows * per, 256), 256, 0, st_of(be)>>>(rows, S, W, rot, hd, cs, sn, sign, x,
                                                                                    y);
    SNN_CU_LAUNCHED("rope_apply");
    return SNN_OK;
}

/* ---------------------------------------------------------------- attention */

#define ATT_THREADS 128

/* SNN_CUDA_ATTENTION=naive: the per-query kernels below instead of cuda_attn_gemm.cu's GEMMs
 * (the reference they are checked against, and the baseline of its benchmark); read at
 * every call (two per layer and step), so a test can switch it */
bool attn_naive() {
    const char *a = getenv("SNN_CUDA_ATTENTION");
    return a && !strcmp(a, "naive");
}

snn_status attn_check(const char *what, int R, int S, int H, int G, int hd) {
    if (R < 0 || S < 0 || H <= 0 || G <= 0 || H % G || hd <= 0)
        return snn_error(SNN_E_INVALID, "%s: bad geometry (R %d, S %d, heads %d, groups %d, head size %d)", what, R, S,
                         H, G, hd);
    return SNN_OK;
}


/* One block per (row b, head h, query i): the scores of keys 0..i, their softmax (max,
 * exps, the sum in double), the probabilities into P (zeros after i) and y_i = P_i v. */
__global__ void __launch_bounds__(ATT_THREADS) attn_fwd_kernel(int S, int H, int G, int hd, float scale,
                                                              const float *x, float *y, float *P) {
    extern __shared__ float z[];
    __shared__ float redf[ATT_THREADS];
    __shared__ double redd[ATT_THREADS];
    const int i = blockIdx.x % S, h = (blockIdx.x / S) % H;
    const size_t b = blockIdx.x / ((size_t)S * H);
    const int rep = H / G, g = h / rep, W = (H + 2 * G) * hd, OW = H * hd;
    const float *xb = x + b * (size_t)S * W;
    const float *q = xb + (size_t)i * W + (size_t)h * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float *k = xb + (size_t)j * W + (size_t)(H + g) * hd;
        float d = 0.0f;
        for (int e = 0; e < hd; e++) d = fmaf(q[e], k[e], d);
        d = __fmul_rn(scale, d);
        z[j] = d;
        mx = fmaxf(mx, d);
    }
    mx = snn_block_max_f(mx, redf);
    double sum = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float p = expf(__fsub_rn(z[j], mx));
        z[j] = p;
        sum += (double)p;
    }
    sum = snn_block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    float *Pr = P + ((b * H + h) * (size_t)S + i) * (size_t)S;
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        float p = 0.0f;
        if (j <= i) {
            p = __fmul_rn(z[j], inv);
            z[j] = p;
        }
        Pr[j] = p;
    }
    __syncthreads();
    float *o = y + (b * (size_t)S + i) * OW + (size_t)h * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc = fmaf(z[j], xb[(size_t)j * W + (size_t)(H + G + g) * hd + e], acc);
        o[e] = acc;
    }
}

snn_status attn_type_check(const char *what, snn_dtype t) {
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16)
        return snn_error(SNN_E_INVALID, "%s: operand type must be f32, f16 or bf16", what);
    if (t != SNN_F32 && attn_naive())
        return snn_error(SNN_E_UNSUPPORTED, "%s: SNN_CUDA_ATTENTION=naive runs FP32 products only", what);
    return SNN_OK;
}

snn_status t_attention_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd, float scale,
                               const float *x, float *y, float *P, void *work) {
    SNN_TRY(snn_cuda_table_check(be, "attention_forward"));
    SNN_TRY(attn_check("attention_forward", R, S, H, G, hd));
    SNN_TRY(attn_type_check("attention_forward", t));
    if (!R || !S) return SNN_OK;
    if (!x || !y || !P) return snn_error(SNN_E_INVALID, "attention_forward: NULL pointer");
    const size_t blocks = (size_t)R * H * S, smem = (size_t)S * sizeof(float);
    if (blocks > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_forward: %zu query rows", blocks);
    if (snn_cuda_attn_flash_ok(t, R, S, H, hd)) {
        if (!work) return snn_error(SNN_E_INVALID, "attention_forward: NULL work (the flash path saves its output there)");
        return snn_cuda_attn_flash_forward(be, t, 0, R, S, H, G, hd, scale, x, y, P, (float *)work);
    }
    if (!attn_naive()) return snn_cuda_attn_gemm_forward(be, t, R, S, H, G, hd, scale, x, y, P);
    SNN_TRY(smem_for(attn_fwd_kernel, smem, "attention_forward"));
    attn_fwd_kernel<<<(unsigned)blocks, ATT_THREADS, smem, st_of(be)>>>(S, H, G, hd, scale, x, y, P);
    SNN_CU_LAUNCHED("attention_forward");
    return SNN_OK;
}

/* Backward, pass 1: one block per (b, h, i): dP_ij = dy_i v_j (j <= i), c = Σ_j dP P (double),
 * dZ_ij = P_ij (dP_ij - c) into dZ [R][H][S][S], dq_i = scale Σ_j dZ_ij k_j. */
__global__ void __launch_bounds__(ATT_THREADS) attn_bwd_q_kernel(int S, int H, int G, int hd, float scale,
                                                                const float *x, const float *P, const float *dy,
                                                                float *dx, float *dZ) {
    extern __shared__ float dz[];
    __shared__ double redd[ATT_THREADS];
    const int i = blockIdx.x % S, h = (blockIdx.x / S) % H;
    const size_t b = blockIdx.x / ((size_t)S * H);
    const int rep = H / G, g = h / rep, W = (H + 2 * G) * hd, OW = H * hd;
    const float *xb = x + b * (size_t)S * W;
    const float *go = dy + (b * (size_t)S + i) * OW + (size_t)h * hd;
    const float *Pr = P + ((b * H + h) * (size_t)S + i) * (size_t)S;
    double acc = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float *v = xb + (size_t)j * W + (size_t)(H + G + g) * hd;
        float d = 0.0f;
        for (int e = 0; e < hd; e++) d = fmaf(go[e], v[e], d);
        dz[j] = d;
        acc += (double)d * (double)Pr[j];
    }
    const float c = (float)snn_block_sum_d(acc, redd);
    float *dZr = dZ + ((b * H + h) * (size_t)S + i) * (size_t)S;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float d = __fmul_rn(Pr[j], __fsub_rn(dz[j], c));
        dz[j] = d;
        dZr[j] = d;
    }
    __syncthreads();
    float *dq = dx + (b * (size_t)S + i) * W + (size_t)h * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float a = 0.0f;
        for (int j = 0; j <= i; j++) a = fmaf(dz[j], xb[(size_t)j * W + (size_t)(H + g) * hd + e], a);
        dq[e] = __fmul_rn(scale, a);
    }
}

/* Pass 2: one block per (b, group g, key j): dk_j = scale Σ_{h of g} Σ_{i >= j} dZ_ij q_i,
 * dv_j = Σ_{h of g} Σ_{i >= j} P_ij dy_i (overwritten, heads and queries in order). */
__global__ void attn_bwd_kv_kernel(int S, int H, int G, int hd, float scale, const float *x, const float *P,
                                   const float *dy, float *dx, const float *dZ) {
    const int j = blockIdx.x % S, g = (blockIdx.x / S) % G;
    const size_t b = blockIdx.x / ((size_t)S * G);
    const int rep = H / G, W = (H + 2 * G) * hd, OW = H * hd;
    const float *xb = x + b * (size_t)S * W;
    float *dk = dx + (b * (size_t)S + j) * W + (size_t)(H + g) * hd, *dv = dk + (size_t)G * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float ak = 0.0f, av = 0.0f;
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t base = (b * H + h) * (size_t)S;
            for (int i = j; i < S; i++) {
                const size_t pij = (base + i) * (size_t)S + j;
                ak = fmaf(dZ[pij], xb[(size_t)i * W + (size_t)h * hd + e], ak);
                av = fmaf(P[pij], dy[(b * (size_t)S + i) * OW + (size_t)h * hd + e], av);
            }
        }
        dk[e] = __fmul_rn(scale, ak);
        dv[e] = av;
    }
}

int t_attention_saves_probs(const snn_backend *be, snn_dtype t, int R, int S, int H, int hd) {
    (void)be;
    return !snn_cuda_attn_flash_ok(t, R, S, H, hd);
}

/* 16-bit storage of x, y, dy and dx: the flash path only. */
int t_attention_io16(const snn_backend *be, snn_dtype t, int S, int H, int hd) {
    (void)be;
    return snn_cuda_attn_flash_ok(t, 1, S, H, hd);
}

snn_status io16_check(const char *what, snn_dtype t, int R, int S, int H, int G, int hd, const void *a,
                      const void *b, const void *c, const void *d, const void *w) {
    SNN_TRY(attn_check(what, R, S, H, G, hd));
    if (!snn_cuda_attn_flash_ok(t, R, S, H, hd))
        return snn_error(SNN_E_UNSUPPORTED, "%s: 16-bit attention storage needs the flash path (f16 / bf16, head "
                         "size 32 or 64, S >= 2, SNN_CUDA_ATTENTION unset)", what);
    if (R && S && (!a || !b || !c || !d || !w)) return snn_error(SNN_E_INVALID, "%s: NULL pointer", what);
    return SNN_OK;
}

snn_status t_attention_forward_io(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd, float scale,
                                  const void *x, void *y, float *P, void *work) {
    SNN_TRY(snn_cuda_table_check(be, "attention_forward_io"));
    SNN_TRY(io16_check("attention_forward_io", t, R, S, H, G, hd, x, y, P, P, work));
    if (!R || !S) return SNN_OK;
    return snn_cuda_attn_flash_forward(be, t, 1, R, S, H, G, hd, scale, x, y, P, (float *)work);
}

snn_status t_attention_backward_io(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                   float scale, const void *x, const float *P, const void *dy, void *dx, void *work) {
    SNN_TRY(snn_cuda_table_check(be, "attention_backward_io"));
    SNN_TRY(io16_check("attention_backward_io", t, R, S, H, G, hd, x, P, dy, dx, work));
    if (!R || !S) return SNN_OK;
    return snn_cuda_attn_flash_backward(be, t, 1, R, S, H, G, hd, scale, x, P, dy, dx, (float *)work);
}

size_t t_attention_work_bytes(const snn_backend *be, int R, int H, int S) {
    (void)be;
    if (R <= 0 || H <= 0 || S <= 0) return 0;
    /* the cuBLASLt path's dZ [R][H][S][S], or what the flash path keeps (its output and the
     * rowsums), whichever is larger: the path is chosen per call, by the operand type */
    const size_t dz = (size_t)R * H * S * S, flash = snn_cuda_attn_flash_work_floats(R, H, S);
    return (dz > flash ? dz : flash) * sizeof(float);
}

snn_status t_attention_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd, float scale,
                                const float *x, const float *P, const float *dy, float *dx, void *work) {
    SNN_TRY(snn_cuda_table_check(be, "attention_backward"));
    SNN_TRY(attn_check("attention_backward", R, S, H, G, hd));
    SNN_TRY(attn_type_check("attention_backward", t));
    if (!R || !S) return SNN_OK;
    if (!x || !P || !dy || !dx || !work) return snn_error(SNN_E_INVALID, "attention_backward: NULL pointer");
    const size_t qb = (size_t)R * H * S, kb = (size_t)R * G * S, smem = (size_t)S * sizeof(float);
    if (qb > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_backward: %zu query rows", qb);
    if (snn_cuda_attn_flash_ok(t, R, S, H, hd))
        return snn_cuda_attn_flash_backward(be, t, 0, R, S, H, G, hd, scale, x, P, dy, dx, (float *)work);
    if (!attn_naive()) return snn_cuda_attn_gemm_backward(be, t, R, S, H, G, hd, scale, x, P, dy, dx, (float *)work);
    SNN_TRY(smem_for(attn_bwd_q_kernel, smem, "attention_backward"));
    attn_bwd_q_kernel<<<(unsigned)qb, ATT_THREADS, smem, st_of(be)>>>(S, H, G, hd, scale, x, P, dy, dx,
                                                                       (float *)work);
    SNN_CU_LAUNCHED("attention_backward (queries)");
    const unsigned kt = hd >= 128 ? 128 : hd >= 64 ? 64 : 32;
    attn_bwd_kv_kernel<<<(unsigned)kb, kt, 0, st_of(be)>>>(S, H, G, hd, scale, x, P, dy, dx, (const float *)work);
    SNN_CU_LAUNCHED("attention_backward (keys, values)");
    return SNN_OK;
}

/* ---------------------------------------------------------------- attention on a KV cache */

/* x's keys and values of positions off..off+S-1 into the cache: plain copies (widened from a
 * 16-bit x: attention_cached_io). */
template <typename E>
__global__ void kv_store_kernel(size_t n, int S, int H, int G, int hd, int cap, int off, const E *x, float *kc,
                                float *vc) {
    const int W = (H + 2 * G) * hd;
    GRID_STRIDE(i, n) {
        const int e = (int)(i % (size_t)hd), g = (int)((i / hd) % (size_t)G), s = (int)((i / ((size_t)hd * G)) % S);
        const size_t b = i / ((size_t)hd * G * S);
        const E *xr = x + (b * (size_t)S + s) * W;
        const size_t c = ((b * G + g) * (size_t)cap + (size_t)(off + s)) * hd + e;
        kc[c] = Io<E>::ld(xr[(size_t)(H + g) * hd + e]);
        vc[c] = Io<E>::ld(xr[(size_t)(H + G + g) * hd + e]);
    }
}

/* One block per (row b, head h, query s) against the n = off+s+1 cached keys: the scores in
 * shared memory, their max, the exps and their sum (double, a fixed tree), then y = P v with
 * the keys split over blockDim / hd thread groups whose partial rows add in group order. */
template <typename E>
__global__ void __launch_bounds__(ATT_THREADS) attn_cached_kernel(int S, int H, int G, int hd, int cap, int off,
                                                                 float scale, const E *x, const float *kc,
                                                                 const float *vc, E *y) {
    extern __shared__ float sm[];
    float *z = sm, *part = sm + cap; /* part: [ATT_THREADS] partial outputs */
    __shared__ float redf[ATT_THREADS];
    __shared__ double redd[ATT_THREADS];
    const int s = blockIdx.x % S, h = (blockIdx.x / S) % H;
    const size_t b = blockIdx.x / ((size_t)S * H);
    const int rep = H / G, g = h / rep, W = (H + 2 * G) * hd, OW = H * hd, n = off + s + 1;
    const E *q = x + (b * (size_t)S + s) * W + (size_t)h * hd;
    const float *K = kc + (b * G + g) * (size_t)cap * hd, *V = vc + (b * G + g) * (size_t)cap * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float *k = K + (size_t)j * hd;
        float d = 0.0f;
        for (int e = 0; e < hd; e++) d = fmaf(Io<E>::ld(q[e]), k[e], d);
        d = __fmul_rn(scale, d);
        z[j] = d;
        mx = fmaxf(mx, d);
    }
    mx = snn_block_max_f(mx, redf);
    double sum = 0.0;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float p = expf(__fsub_rn(z[j], mx));
        z[j] = p;
        sum += (double)p;
    }
    sum = snn_block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    E *o = y + (b * (size_t)S + s) * OW + (size_t)h * hd;
    const int groups = hd <= (int)blockDim.x ? (int)blockDim.x / hd : 1;
    for (int e0 = 0; e0 < hd; e0 += (int)blockDim.x) {
        const int t = threadIdx.x, e = groups > 1 ? t % hd : e0 + t, grp = groups > 1 ? t / hd : 0;
        float acc = 0.0f;
        if (grp < groups && e < hd)
            for (int j = grp; j < n; j += groups) acc = fmaf(z[j], V[(size_t)j * hd + e], acc);
        part[t] = acc;
        __syncthreads();
        if (grp == 0 && e < hd) {
            float r = part[t];
            for (int k = 1; k < groups; k++) r = __fadd_rn(r, part[k * hd + t]);
            o[e] = Io<E>::st(__fmul_rn(r, inv));
        }
        __syncthreads();
        if (groups > 1) break;
    }
}

template <typename E>
snn_status cached_run(const snn_backend *be, const char *what, int R, int S, int H, int G, int hd, int cap, int off,
                      float scale, const void *x, float *kc, float *vc, void *y) {
    SNN_TRY(snn_cuda_table_check(be, what));
    SNN_TRY(attn_check(what, R, S, H, G, hd));
    if (cap <= 0 || off < 0 || (long)off + S > cap)
        return snn_error(SNN_E_INVALID, "%s: positions %d..%d do not fit the cache of %d", what, off, off + S - 1,
                         cap);
    if (!R || !S) return SNN_OK;
    if (!x || !kc || !vc || !y) return snn_error(SNN_E_INVALID, "%s: NULL pointer", what);
    const size_t n = (size_t)R * S * G * hd, blocks = (size_t)R * H * S;
    const size_t smem = ((size_t)cap + ATT_THREADS) * sizeof(float);
    if (blocks > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "%s: %zu query rows", what, blocks);
    SNN_TRY(smem_for(attn_cached_kernel<E>, smem, what));
    kv_store_kernel<E><<<snn_cuda_table_grid(be, n, 256), 256, 0, st_of(be)>>>(n, S, H, G, hd, cap, off,
                                                                               (const E *)x, kc, vc);
    SNN_CU_LAUNCHED("attention_cached (store)");
    attn_cached_kernel<E><<<(unsigned)blocks, ATT_THREADS, smem, st_of(be)>>>(S, H, G, hd, cap, off, scale,
                                                                             (const E *)x, kc, vc, (E *)y);
    SNN_CU_LAUNCHED("attention_cached");
    return SNN_OK;
}

snn_status t_attention_cached(const snn_backend *be, int R, int S, int H, int G, int hd, int cap, int off, float scale,
                              const float *x, float *kc, float *vc, float *y) {
    return cached_run<float>(be, "attention_cached", R, S, H, G, hd, cap, off, scale, x, kc, vc, y);
}

snn_status t_attention_cached_io(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd, int cap,
                                 int off, float scale, const void *x, float *kc, float *vc, void *y) {
    if (t == SNN_BF16)
        return cached_run<__nv_bfloat16>(be, "attention_cached_io", R, S, H, G, hd, cap, off, scale, x, kc, vc, y);
    if (t == SNN_F16)
        return cached_run<__half>(be, "attention_cached_io", R, S, H, G, hd, cap, off, scale, x, kc, vc, y);
    return snn_error(SNN_E_INVALID, "attention_cached_io: storage must be f16 or bf16");
}

/* ---------------------------------------------------------------- SwiGLU */

__global__ void swiglu_fwd_kernel(size_t V, int F, const float *x, float *y) {
    GRID_STRIDE(e, V * (size_t)F) {
        const size_t v = e / (size_t)F, j = e % (size_t)F;
        const float a = x[v * 2 * F + j], u = x[v * 2 * F + F + j];
        y[e] = __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, expf(-a))), u);
    }
}

__global__ void swiglu_bwd_kernel(size_t V, int F, const float *x, const float *dy, float *dx) {
    GRID_STRIDE(e, V * (size_t)F) {
        const size_t v = e / (size_t)F, j = e % (size_t)F;
        const float a = x[v * 2 * F + j], u = x[v * 2 * F + F + j], g = dy[e];
        const float sg = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-a)));
        dx[v * 2 * F + j] =
            __fmul_rn(__fmul_rn(__fmul_rn(g, u), sg), __fadd_rn(1.0f, __fmul_rn(a, __fsub_rn(1.0f, sg))));
        dx[v * 2 * F + F + j] = __fmul_rn(__fmul_rn(g, a), sg);
    }
}

snn_status t_swiglu_forward(const snn_backend *be, size_t V, int F, const float *x, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "swiglu_forward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "swiglu_forward: F must be positive (got %d)", F);
    if (!V) return SNN_OK;
    if (!x || !y) return snn_error(SNN_E_INVALID, "swiglu_forward: NULL pointer");
    swiglu_fwd_kernel<<<snn_cuda_table_grid(be, V * (size_t)F, 256), 256, 0, st_of(be)>>>(V, F, x, y);
    SNN_CU_LAUNCHED("swiglu_forward");
    return SNN_OK;
}

snn_status t_swiglu_backward(const snn_backend *be, size_t V, int F, const float *x, const float *dy, float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "swiglu_backward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "swiglu_backward: F must be positive (got %d)", F);
    if (!V) return SNN_OK;
    if (!x || !dy || !dx) return snn_error(SNN_E_INVALID, "swiglu_backward: NULL pointer");
    swiglu_bwd_kernel<<<snn_cuda_table_grid(be, V * (size_t)F, 256), 256, 0, st_of(be)>>>(V, F, x, dy, dx);
    SNN_CU_LAUNCHED("swiglu_backward");
    return SNN_OK;
}

/* ---------------------------------------------------------------- elastic bi-spike */

__device__ __forceinline__ float bis_fire(float v, float a) {
    float z = __fdiv_rn(v, a);
    z = z > 1.0f ? 1.0f : (z < -1.0f ? -1.0f : z);
    return __fmul_rn(a, rintf(z));
}

__global__ void bis_bwd_kernel(int T, size_t E, float d, float a, const float *v, const float *y, const float *dy,
                               float *dx) {
    GRID_STRIDE(e, E) {
        float carry = 0.0f;
        for (int t = T - 1; t >= 0; t--) {
            const size_t i = (size_t)t * E + e;
            const float dv = __fadd_rn(fabsf(__fdiv_rn(v[i], a)) <= 1.0f ? dy[i] : 0.0f, carry);
            dx[i] = dv;
            if (t > 0) carry = __fmul_rn(__fmul_rn(dv, d), __fsub_rn(a, y[i - E]));
        }
    }
}

/* The typed forms: y / dy stored as Y; the backward takes s_{t-1} from v again. TT > 0: T is
 * TT and each element's T values are loaded before the recurrence runs over them in registers
 * (T loads in flight a thread, each v / a divided once); TT == 0: any T, one step at a time.
 * The same rounded operations in the same order either way. */
template <typename Y, int TT>
__global__ void bis_fwd_io_kernel(int T, size_t E, float d, float a, const float *x, Y *y, float *v) {
    GRID_STRIDE(e, E) {
        if (TT > 0) {
            float xs[TT > 0 ? TT : 1];
#pragma unroll
            for (int t = 0; t < TT; t++) xs[t] = x[(size_t)t * E + e];
            float vv = 0.0f, sp = 0.0f;
#pragma unroll
            for (int t = 0; t < TT; t++) {
                const size_t i = (size_t)t * E + e;
                vv = t == 0 ? xs[0] : __fadd_rn(__fmul_rn(__fmul_rn(vv, d), __fsub_rn(a, sp)), xs[t]);
                sp = bis_fire(vv, a);
                v[i] = vv;
                y[i] = Io<Y>::st(sp);
            }
        } else {
            float vv = 0.0f, sp = 0.0f;
            for (int t = 0; t < T; t++) {
                const size_t i = (size_t)t * E + e;
                vv = t == 0 ? x[i] : __fadd_rn(__fmul_rn(__fmul_rn(vv, d), __fsub_rn(a, sp)), x[i]);
                sp = bis_fire(vv, a);
                v[i] = vv;
                y[i] = Io<Y>::st(sp);
            }
        }
    }
}

template <typename Y, int TT>
__global__ void bis_bwd_io_kernel(int T, size_t E, float d, float a, const float *v, const Y *dy, float *dx) {
    GRID_STRIDE(e, E) {
        if (TT > 0) {
            float z[TT > 0 ? TT : 1], g[TT > 0 ? TT : 1];
#pragma unroll
            for (int t = 0; t < TT; t++) {
                z[t] = v[(size_t)t * E + e];
                g[t] = Io<Y>::ld(dy[(size_t)t * E + e]);
            }
#pragma unroll
            for (int t = 0; t < TT; t++) z[t] = __fdiv_rn(z[t], a); /* bis_fire's and the window's v / a */
            float carry = 0.0f;
#pragma unroll
            for (int t = TT - 1; t >= 0; t--) {
                const float dv = __fadd_rn(fabsf(z[t]) <= 1.0f ? g[t] : 0.0f, carry);
                dx[(size_t)t * E + e] = dv;
                if (t > 0) {
                    const float zc = z[t - 1] > 1.0f ? 1.0f : (z[t - 1] < -1.0f ? -1.0f : z[t - 1]);
                    carry = __fmul_rn(__fmul_rn(dv, d), __fsub_rn(a, __fmul_rn(a, rintf(zc))));
                }
            }
        } else {
            float carry = 0.0f;
            for (int t = T - 1; t >= 0; t--) {
                const size_t i = (size_t)t * E + e;
                const float dv = __fadd_rn(fabsf(__fdiv_rn(v[i], a)) <= 1.0f ? Io<Y>::ld(dy[i]) : 0.0f, carry);
                dx[i] = dv;
                if (t > 0) carry = __fmul_rn(__fmul_rn(dv, d), __fsub_rn(a, bis_fire(v[i - E], a)));
            }
        }
    }
}

/* kernel<Y, T> for T in 1..8, kernel<Y, 0> otherwise */
#define BIS_LAUNCH(K, Y, ...)                                                                                     \
    switch (T) {                                                                                                  \
    case 1: K<Y, 1><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 2: K<Y, 2><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 3: K<Y, 3><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 4: K<Y, 4><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 5: K<Y, 5><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 6: K<Y, 6><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 7: K<Y, 7><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    case 8: K<Y, 8><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                                \
    default: K<Y, 0><<<g, 256, 0, st_of(be)>>>(__VA_ARGS__); break;                                               \
    }

static snn_status bis_io_check(const snn_backend *be, const char *what, int T, snn_dtype yt) {
    SNN_TRY(snn_cuda_table_check(be, what));
    if (T < 0) return snn_error(SNN_E_INVALID, "%s: negative T (%d)", what, T);
    if (yt != SNN_F32 && yt != SNN_BF16 && yt != SNN_F16)
        return snn_error(SNN_E_INVALID, "%s: y stored as %s (FP32, BF16 or FP16)", what, snn_dtype_name(yt));
    return SNN_OK;
}

snn_status t_bispike_forward_io(const snn_backend *be, int T, size_t E, float decay, float amp, snn_dtype yt,
                                const float *x, void *y, float *v) {
    SNN_TRY(bis_io_check(be, "bispike_forward", T, yt));
    if (!T || !E) return SNN_OK;
    if (!x || !y || !v) return snn_error(SNN_E_INVALID, "bispike_forward: NULL pointer");
    const unsigned g = snn_cuda_table_grid(be, E, 256);
    if (yt == SNN_BF16) {
        BIS_LAUNCH(bis_fwd_io_kernel, __nv_bfloat16, T, E, decay, amp, x, (__nv_bfloat16 *)y, v)
    } else if (yt == SNN_F16) {
        BIS_LAUNCH(bis_fwd_io_kernel, __half, T, E, decay, amp, x, (__half *)y, v)
    } else {
        BIS_LAUNCH(bis_fwd_io_kernel, float, T, E, decay, amp, x, (float *)y, v)
    }
    SNN_CU_LAUNCHED("bispike_forward");
    return SNN_OK;
}

snn_status t_bispike_backward_io(const snn_backend *be, int T, size_t E, float decay, float amp, snn_dtype yt,
                                 const float *v, const void *dy, float *dx) {
    SNN_TRY(bis_io_check(be, "bispike_backward", T, yt));
    if (!T || !E) return SNN_OK;
    if (!v || !dy || !dx) return snn_error(SNN_E_INVALID, "bispike_backward: NULL pointer");
    const unsigned g = snn_cuda_table_grid(be, E, 256);
    if (yt == SNN_BF16) {
        BIS_LAUNCH(bis_bwd_io_kernel, __nv_bfloat16, T, E, decay, amp, v, (const __nv_bfloat16 *)dy, dx)
    } else if (yt == SNN_F16) {
        BIS_LAUNCH(bis_bwd_io_kernel, __half, T, E, decay, amp, v, (const __half *)dy, dx)
    } else {
        BIS_LAUNCH(bis_bwd_io_kernel, float, T, E, decay, amp, v, (const float *)dy, dx)
    }
    SNN_CU_LAUNCHED("bispike_backward");
    return SNN_OK;
}

snn_status t_bispike_forward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *x, float *y,
                             float *v) {
    SNN_TRY(snn_cuda_table_check(be, "bispike_forward"));
    if (T < 0) return snn_error(SNN_E_INVALID, "bispike_forward: negative T (%d)", T);
    if (!T || !E) return SNN_OK;
    if (!x || !y || !v) return snn_error(SNN_E_INVALID, "bispike_forward: NULL pointer");
    /* the typed kernel with FP32 y: the same operations */
    const unsigned g = snn_cuda_table_grid(be, E, 256);
    BIS_LAUNCH(bis_fwd_io_kernel, float, T, E, decay, amp, x, y, v)
    SNN_CU_LAUNCHED("bispike_forward");
    return SNN_OK;
}

snn_status t_bispike_backward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *v,
                              const float *y, const float *dy, float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "bispike_backward"));
    if (T < 0) return snn_error(SNN_E_INVALID, "bispike_backward: negative T (%d)", T);
    if (!T || !E) return SNN_OK;
    if (!v || !y || !dy || !dx) return snn_error(SNN_E_INVALID, "bispike_backward: NULL pointer");
    bis_bwd_kernel<<<snn_cuda_table_grid(be, E, 256), 256, 0, st_of(be)>>>(T, E, decay, amp, v, y, dy, dx);
    SNN_CU_LAUNCHED("bispike_backward");
    return SNN_OK;
}

} // namespace

void snn_cuda_install_lm(snn_backend *be) {
    be->embedding_forward = t_embedding_forward;
    be->embedding_backward = t_embedding_backward;
    be->posemb_forward = t_posemb_forward;
    be->posemb_backward = t_posemb_backward;
    be->rope_apply = t_rope_apply;
    be->attention_forward = t_attention_forward;
    be->attention_backward = t_attention_backward;
    be->attention_work_bytes = t_attention_work_bytes;
    be->attention_saves_probs = t_attention_saves_probs;
    be->attention_io16 = t_attention_io16;
    be->attention_forward_io = t_attention_forward_io;
    be->attention_backward_io = t_attention_backward_io;
    be->attention_cached = t_attention_cached;
    be->attention_cached_io = t_attention_cached_io;
    be->swiglu_forward = t_swiglu_forward;
    be->swiglu_backward = t_swiglu_backward;
    be->bispike_forward = t_bispike_forward;
    be->bispike_backward = t_bispike_backward;
    be->bispike_forward_io = t_bispike_forward_io;
    be->bispike_backward_io = t_bispike_backward_io;
}
