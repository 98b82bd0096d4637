/* The CUDA table's LM cross-entropy (backend.h's lm_cross_entropy, lm_cross_entropy16)
 * against the CPU table (tests/cuda/test_cuda_table_lm.c): the T reduction is the CPU's, bit
 * for bit; expf, log and the double tree sum of the exps differ in the last bits. The label
 * check and the loss totals come back to the host through a download of the table's scratch
 * (they wait for the stream). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_table_lm.h"

namespace {

/* ---------------------------------------------------------------- LM loss */

__global__ void ce_check_kernel(const int32_t *labels, size_t NS, int V, unsigned long long *bad) {
    GRID_STRIDE(i, NS) if (labels[i] < 0 || labels[i] >= V) note_bad(bad, i);
}

/* The CPU's T reduction of one logit: FP32 adds in t order, then the scale. L: how the logits
 * are stored (FP32, or a 16-bit head's output: each value converts exactly). */
template <typename L> __device__ __forceinline__ float zred(const L *l, int T, size_t stride, float inv) {
    float s = 0.0f;
    for (int t = 0; t < T; t++) s = __fadd_rn(s, Io<L>::ld(l[(size_t)t * stride]));
    return __fmul_rn(s, inv);
}

/* The totals in token order (one thread adds: the CPU's sums of the per-token values), the
 * values staged in shared memory by the whole block a chunk at a time so that the adds, not
 * the loads, set the pace. */
#define CE_TOTAL_CHUNK 4096
__global__ void __launch_bounds__(1024) ce_total_kernel(const double *token_loss, const float *mask, size_t NS,
                                                        double *out) {
    __shared__ double sl[CE_TOTAL_CHUNK];
    __shared__ float sm[CE_TOTAL_CHUNK];
    double ls = 0.0, cn = 0.0;
    for (size_t c0 = 0; c0 < NS; c0 += CE_TOTAL_CHUNK) {
        const int n = NS - c0 < CE_TOTAL_CHUNK ? (int)(NS - c0) : CE_TOTAL_CHUNK;
        __syncthreads();
        for (int k = threadIdx.x; k < n; k += blockDim.x) {
            sl[k] = token_loss[c0 + k];
            sm[k] = mask ? mask[c0 + k] : 1.0f;
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int k = 0; k < n; k++) {
                ls = __dadd_rn(ls, sl[k]);
                cn = __dadd_rn(cn, (double)sm[k]);
            }
    }
    if (threadIdx.x == 0) {
        out[0] = ls;
        out[1] = cn;
    }
}

/* One block per token with the row's z staged in shared memory (STAGED; V floats) or read
 * again from the logits: z and its max, the exps and their sum in double, the token's loss,
 * then (dl not NULL) the gradient, stored as T (FP32, or a 16-bit type: RNE) into every time
 * slice's row of ld values, the padding columns zero. Staged, the logits are read once, four
 * at a time where the row allows (one block per SM holds a 50257-value row: the loads in
 * flight must come from each thread), and the exps replace z for the gradient. */
#define CE_THREADS 1024
template <bool STAGED, typename L>
__device__ __forceinline__ float ce_z(const float *zs, const L *l, int v, int TS, size_t stride, float inv) {
    return STAGED ? zs[v] : zred(l + v, TS, stride, inv);
}

template <typename L, typename T, bool STAGED, bool Z16 = false>
__global__ void __launch_bounds__(CE_THREADS, Z16 ? 2 : 1) ce_row_kernel(const L *logits, size_t lld, const int32_t *labels,
                                                            const float *mask, int TS, size_t NS, int V, float inv,
                                                            float gt, double *token_loss, T *dl, size_t ld,
                                                            float grad_scale) {
    extern __shared__ float zs[];
    L *zh = reinterpret_cast<L *>(zs); /* Z16: the row's own 16-bit values (TS == 1) */
    __shared__ float redf[CE_THREADS];
    __shared__ double redd[CE_THREADS];
    const size_t i = blockIdx.x, stride = NS * lld;
    const L *l = logits + i * lld;
    const float mk = mask ? mask[i] : 1.0f;
    const int lab = labels[i];
    float mx = -INFINITY;
    /* the scalar head up to a 16-byte boundary, 16-byte groups (VW values), the scalar tail;
     * the groups need every time slice's row on the same alignment (stride % VW == 0) */
    constexpr int VW = 16 / sizeof(L);
    int head = (int)((VW - (uintptr_t)l / sizeof(L) % VW) % VW), n4 = 0;
    if (STAGED && (TS == 1 || stride % VW == 0) && (uintptr_t)l % sizeof(L) == 0) {
        if (head > V) head = V;
        n4 = (V - head) / VW;
    } else {
        head = V;
    }
    for (int v = threadIdx.x; v < head; v += blockDim.x) {
        const float z = zred(l + v, TS, stride, inv);
        if (STAGED && Z16) zh[v] = l[v];
        else if (STAGED) zs[v] = z;
        mx = fmaxf(mx, z);
    }
    /* Z16 (TS == 1): four 16-byte loads in flight a thread before their stores to shared memory */
    int k0 = threadIdx.x;
    if (Z16)
        for (; k0 + 3 * (int)blockDim.x < n4; k0 += 4 * blockDim.x) {
            uint4 g[4];
#pragma unroll
            for (int u = 0; u < 4; u++) g[u] = *reinterpret_cast<const uint4 *>(l + head + VW * (k0 + u * blockDim.x));
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int v = head + VW * (k0 + u * blockDim.x);
                union {
                    uint4 u4;
                    L x[VW];
                } c;
                c.u4 = g[u];
                if (head % VW == 0) *reinterpret_cast<uint4 *>(zh + v) = g[u]; /* aligned here too */
                else
#pragma unroll
                    for (int w = 0; w < VW; w++) zh[v + w] = c.x[w];
#pragma unroll
                for (int w = 0; w < VW; w++) mx = fmaxf(mx, Io<L>::ld(c.x[w]));
            }
        }
#pragma unroll(Z16 ? 1 : 4)
    for (int k = k0; k < n4; k += blockDim.x) {
        const int v = head + VW * k;
        float s[VW];
#pragma unroll
        for (int u = 0; u < VW; u++) s[u] = 0.0f;
        for (int t = 0; t < TS; t++) {
            union {
                uint4 u;
                L x[VW];
            } g;
            g.u = *reinterpret_cast<const uint4 *>(l + (size_t)t * stride + v);
#pragma unroll
            for (int u = 0; u < VW; u++) s[u] = __fadd_rn(s[u], Io<L>::ld(g.x[u]));
            if (Z16)
#pragma unroll
                for (int u = 0; u < VW; u++) zh[v + u] = g.x[u];
        }
#pragma unroll
        for (int u = 0; u < VW; u++) {
            const float z = __fmul_rn(s[u], inv);
            if (!Z16) zs[v + u] = z;
            mx = fmaxf(mx, z);
        }
    }
    for (int v = head + VW * n4 + threadIdx.x; v < V; v += blockDim.x) {
        const float z = zred(l + v, TS, stride, inv);
        if (STAGED && Z16) zh[v] = l[v];
        else if (STAGED) zs[v] = z;
        mx = fmaxf(mx, z);
    }
    mx = snn_block_max_f(mx, redf); /* its barriers also publish zs */
    const float zl = zred(l + lab, TS, stride, inv);
    double se = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        /* Z16 (TS == 1, inv == 1): z is the stored value itself */
        const float e = expf(__fsub_rn(Z16 ? Io<L>::ld(zh[v]) : ce_z<STAGED>(zs, l, v, TS, stride, inv), mx));
        if (STAGED && !Z16) zs[v] = e; /* the gradient's exps: one expf per value */
        se += (double)e;
    }
    se = snn_block_sum_d(se, redd); /* its barriers publish the exps */
    if (threadIdx.x == 0) token_loss[i] = (double)mk * ((double)mx + log(se) - (double)zl);
    if (!dl) return;
    const float c = __fmul_rn(__fmul_rn(grad_scale, mk), gt), is = (float)(1.0 / se);
    /* eight gradients a thread per 16-byte store where the rows allow (ld % 8 == 0) */
    auto grad = [&](size_t v) -> T {
        float g = 0.0f;
        if (v < (size_t)V) {
            const float e = Z16      ? expf(__fsub_rn(Io<L>::ld(zh[v]), mx))
                            : STAGED ? zs[v]
                                     : expf(__fsub_rn(zred(l + v, TS, stride, inv), mx));
            g = __fmul_rn(c, __fsub_rn(__fmul_rn(e, is), (int)v == lab ? 1.0f : 0.0f));
        }
        return Io<T>::st(g);
    };
    if (sizeof(T) == 2 && ld % 8 == 0 && (uintptr_t)dl % 16 == 0) {
        for (size_t v0 = (size_t)threadIdx.x * 8; v0 < ld; v0 += (size_t)blockDim.x * 8) {
            union {
                T h[16 / sizeof(T)];
                uint4 u;
            } o;
#pragma unroll
            for (int u = 0; u < (int)(16 / sizeof(T)); u++) o.h[u] = grad(v0 + u);
            for (int t = 0; t < TS; t++) *reinterpret_cast<uint4 *>(dl + ((size_t)t * NS + i) * ld + v0) = o.u;
        }
    } else {
        for (size_t v = threadIdx.x; v < ld; v += blockDim.x) {
            const T o = grad(v);
            for (int t = 0; t < TS; t++) dl[((size_t)t * NS + i) * ld + v] = o;
        }
    }
}

/* The arguments, and the labels checked on the device before anything is written. */
snn_status ce_begin(const snn_backend *be, const float *logits, const int32_t *labels, const double *token_loss,
                    const double *loss_sum, const double *count, int T, int N, int S, int V, size_t *NS) {
    SNN_TRY(snn_cuda_table_check(be, "lm_cross_entropy"));
    if (!logits || !labels || !token_loss || !loss_sum || !count)
        return snn_error(SNN_E_INVALID, "LM loss: logits, labels and outputs must not be NULL");
    if (T <= 0 || N <= 0 || S <= 0 || V <= 0)
        return snn_error(SNN_E_INVALID, "LM loss: T, N, S and V must be positive (got %d, %d, %d, %d)", T, N, S, V);
    snn_cuda *c = snn_cuda_table_ctx(be);
    *NS = (size_t)N * (size_t)S;
    if (*NS > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "LM loss: %zu tokens in one call", *NS);
    /* the scratch: [0] the first bad label, [1..2] the totals */
    unsigned long long *bad = (unsigned long long *)snn_cuda_table_scratch(be);
    SNN_CU_TRY(cudaMemsetAsync(bad, 0xFF, sizeof *bad, st_of(be)));
    ce_check_kernel<<<snn_cuda_table_grid(be, *NS, 256), 256, 0, st_of(be)>>>(labels, *NS, V, bad);
    SNN_CU_LAUNCHED("LM loss label check");
    unsigned long long f = NONE;
    SNN_TRY(snn_cuda_download(c, &f, bad, sizeof f));
    if (f != NONE) {
        int32_t lab = 0;
        SNN_TRY(snn_cuda_download(c, &lab, labels + f, sizeof lab));
        return snn_error(SNN_E_INVALID, "LM loss: label %d at token %lld is outside [0, %d)", (int)lab, (long long)f,
                         V);
    }
    return SNN_OK;
}

/* The totals in token order, to the host. */
snn_status ce_end(const snn_backend *be, const double *token_loss, const float *mask, size_t NS, double *loss_sum,
                  double *count) {
    double *tot = (double *)snn_cuda_table_scratch(be) + 1;
    ce_total_kernel<<<1, 1024, 0, st_of(be)>>>(token_loss, mask, NS, tot);
    SNN_CU_LAUNCHED("LM loss totals");
    double h[2];
    SNN_TRY(snn_cuda_download(snn_cuda_table_ctx(be), h, tot, sizeof h));
    *loss_sum = h[0];
    *count = h[1];
    return SNN_OK;
}

template <typename L, typename T>
snn_status ce_launch(const snn_backend *be, const L *logits, size_t lld, const int32_t *labels, const float *mask,
                     int TS, size_t NS, int V, float inv, float gt, double *token_loss, void *dl, size_t ld,
                     float grad_scale) {
    const size_t smem = (size_t)V * sizeof(float);
    int dev = 0, optin = 0;
    SNN_CU_TRY(cudaGetDevice(&dev));
    SNN_CU_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    /* one time step of 16-bit logits: the row staged as its own 16-bit values (half the shared
     * memory, so two blocks share an SM and one's loads overlap the other's exps and stores;
     * the exps are taken again for the gradient, the same values) */
    if constexpr (sizeof(L) == 2) {
        const size_t smem16 = ((size_t)V * 2 + 15) / 16 * 16;
        if (TS == 1 && smem16 + 12 * 1024 + 1024 <= (size_t)optin &&
            smem_for(ce_row_kernel<L, T, true, true>, smem16, "LM loss") == SNN_OK) {
            /* all of the SM's unified memory as shared memory (a hint: two such blocks need 226 kB) */
            (void)cudaFuncSetAttribute(ce_row_kernel<L, T, true, true>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       (int)cudaSharedmemCarveoutMaxShared);
            (void)cudaGetLastError();
            ce_row_kernel<L, T, true, true><<<(unsigned)NS, CE_THREADS, smem16, st_of(be)>>>(
                logits, lld, labels, mask, TS, NS, V, inv, gt, token_loss, (T *)dl, ld, grad_scale);
            SNN_CU_LAUNCHED("LM loss");
            return SNN_OK;
        }
        snn_clear_error();
    }
    /* the static reduction buffers take 12 kB of the block's shared memory */
    if (smem + 12 * 1024 + 1024 <= (size_t)optin && smem_for(ce_row_kernel<L, T, true>, smem, "LM loss") == SNN_OK) {
        ce_row_kernel<L, T, true><<<(unsigned)NS, CE_THREADS, smem, st_of(be)>>>(
            logits, lld, labels, mask, TS, NS, V, inv, gt, token_loss, (T *)dl, ld, grad_scale);
    } else {
        snn_clear_error();
        ce_row_kernel<L, T, false><<<(unsigned)NS, CE_THREADS, 0, st_of(be)>>>(
            logits, lld, labels, mask, TS, NS, V, inv, gt, token_loss, (T *)dl, ld, grad_scale);
    }
    SNN_CU_LAUNCHED("LM loss");
    return SNN_OK;
}

snn_status t_lm_cross_entropy(const snn_backend *be, const float *logits, const int32_t *labels, const float *mask,
                              int T, int N, int S, int V, int reduce_sum, double *token_loss, double *loss_sum,
                              double *count, float *dlogits, float grad_scale) {
    size_t NS = 0;
    SNN_TRY(ce_begin(be, logits, labels, token_loss, loss_sum, count, T, N, S, V, &NS));
    const float inv = reduce_sum ? 1.0f : 1.0f / (float)T, gt = reduce_sum ? 1.0f : 1.0f / (float)T;
    const snn_status st = ce_launch<float, float>(be, logits, (size_t)V, labels, mask, T, NS, V, inv, gt,
                                                  token_loss, dlogits, (size_t)V, grad_scale);
    SNN_TRY(st);
    return ce_end(be, token_loss, mask, NS, loss_sum, count);
}

/* The gradient type T with the logits stored as L (FP32 rows of V, or T rows of lld). */
template <typename T>
snn_status ce16_launch(const snn_backend *be, const void *logits, snn_dtype lt, size_t lld, const int32_t *labels,
                       const float *mask, int TS, size_t NS, int V, float inv, float gt, double *token_loss, void *dl,
                       size_t ld, float grad_scale) {
    if (lt == SNN_F32)
        return ce_launch<float, T>(be, (const float *)logits, lld, labels, mask, TS, NS, V, inv, gt, token_loss, dl,
                                   ld, grad_scale);
    return ce_launch<T, T>(be, (const T *)logits, lld, labels, mask, TS, NS, V, inv, gt, token_loss, dl, ld,
                           grad_scale);
}

snn_status t_lm_cross_entropy16(const snn_backend *be, const void *logits, snn_dtype lt, size_t lld,
                                const int32_t *labels, const float *mask, int T, int N, int S, int V, int reduce_sum,
                                double *token_loss, double *loss_sum, double *count, snn_dtype t, void *dlogits,
                                size_t ld, float grad_scale) {
    if (t != SNN_BF16 && t != SNN_F16)
        return snn_error(SNN_E_INVALID, "lm_cross_entropy16: the gradient type must be f16 or bf16");
    if (lt != SNN_F32 && lt != t)
        return snn_error(SNN_E_INVALID, "lm_cross_entropy16: logits stored as %s with a %s gradient (f32 or the "
                         "gradient's type)", snn_cuda_dtype_name(lt), snn_cuda_dtype_name(t));
    if (!dlogits) return snn_error(SNN_E_INVALID, "lm_cross_entropy16: NULL dlogits");
    if (V > 0 && (ld < (size_t)V || lld < (size_t)V))
        return snn_error(SNN_E_SHAPE, "lm_cross_entropy16: rows of %zu (logits) and %zu (gradient) values cannot "
                         "hold a vocabulary of %d", lld, ld, V);
    if (lt == SNN_F32 && lld != (size_t)V)
        return snn_error(SNN_E_SHAPE, "lm_cross_entropy16: FP32 logits are rows of the vocabulary (%d), not %zu", V,
                         lld);
    size_t NS = 0;
    SNN_TRY(ce_begin(be, (const float *)logits, labels, token_loss, loss_sum, count, T, N, S, V, &NS));
    const float inv = reduce_sum ? 1.0f : 1.0f / (float)T, gt = reduce_sum ? 1.0f : 1.0f / (float)T;
    SNN_TRY(t == SNN_BF16 ? ce16_launch<__nv_bfloat16>(be, logits, lt, lld, labels, mask, T, NS, V, inv, gt,
                                                         token_loss, dlogits, ld, grad_scale)
                          : ce16_launch<__half>(be, logits, lt, lld, labels, mask, T, NS, V, inv, gt, token_loss,
                                                dlogits, ld, grad_scale));
    return ce_end(be, token_loss, mask, NS, loss_sum, count);
}

} // namespace

void snn_cuda_install_lm_loss(snn_backend *be) {
    be->lm_cross_entropy = t_lm_cross_entropy;
    be->lm_cross_entropy16 = t_lm_cross_entropy16;
}
