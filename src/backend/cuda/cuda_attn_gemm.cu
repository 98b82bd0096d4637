/* Causal softmax attention of the CUDA table through cuBLASLt (the default; the per-query
 * kernels of cuda_table_lm.cu remain as the reference and run with SNN_CUDA_ATTENTION=naive).
 *
 * The contract is backend.h's attention_forward / attention_backward: P = softmax(scale q k^T)
 * with the max subtracted, the exps summed in double and zeros above the diagonal, saved in
 * P [R][H][S][S]; the backward from P. Per folded row b the products are strided-batched FP32
 * GEMMs over the heads (no TF32: the values are the CPU table's to FP32 rounding, its BLAS
 * being another order of the same sums). Query head h reads group g = h / (H / G): with
 * G = H one batch of H products per b; with query groups one product per head (the heads of
 * a group read its keys and values), and the key/value gradients of a group, sums over its
 * heads, accumulate head by head.
 *   forward   Z = scale Q K^T (every b), the masked row softmax in place (one launch over all
 *             R H S rows), Y = P V;
 *   backward  dV = sum_h P^T dY, dP = dY V^T into work, dZ = P (dP - rowsum(dP P)) (rowsum
 *             in double) in place, dQ = scale dZ K, dK = scale sum_h dZ^T Q.
 * The full S x S products are computed and the upper triangle is overwritten with zeros: at
 * hd = 64 and S = 1024 that is twice the causal FLOPs on tensor-free FP32 arithmetic, still
 * an order of magnitude faster than one block per query. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_table.h"

namespace {

#define ROW_THREADS 128

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

__device__ float row_max(float v, float *red) {
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

/* One block per row r of Z [rows][S] (query i = r % S): keep columns 0..i, softmax, zeros after. */
__global__ void __launch_bounds__(ROW_THREADS) causal_softmax_kernel(int S, float *Z) {
    __shared__ float redf[ROW_THREADS];
    __shared__ double redd[ROW_THREADS];
    const size_t r = blockIdx.x;
    const int i = (int)(r % (size_t)S);
    float *z = Z + r * (size_t)S;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, z[j]);
    mx = row_max(mx, redf);
    double sum = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float p = expf(__fsub_rn(z[j], mx));
        z[j] = p;
        sum += (double)p;
    }
    sum = snn_block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    for (int j = threadIdx.x; j < S; j += blockDim.x) z[j] = j <= i ? __fmul_rn(z[j], inv) : 0.0f;
}

/* dZ = P (dP - c), c = sum_{j <= i} dP_ij P_ij (double), in place over dP; zeros after i. */
__global__ void __launch_bounds__(ROW_THREADS) softmax_grad_kernel(int S, const float *P, float *D) {
    __shared__ double redd[ROW_THREADS];
    const size_t r = blockIdx.x;
    const int i = (int)(r % (size_t)S);
    const float *p = P + r * (size_t)S;
    float *d = D + r * (size_t)S;
    double acc = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) acc += (double)d[j] * (double)p[j];
    const float c = (float)snn_block_sum_d(acc, redd);
    for (int j = threadIdx.x; j < S; j += blockDim.x) d[j] = j <= i ? __fmul_rn(p[j], __fsub_rn(d[j], c)) : 0.0f;
}

snn_cuda_gemm_desc f32_desc(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc) {
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta;
    d.trans_b = tb;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_type = d.b_type = d.c_type = SNN_F32;
    d.lda = lda;
    d.ldb = ldb;
    d.ldc = ldc;
    return d;
}

/* C_h = alpha op(A_h) op(B_g) + beta C_h for the H heads of one row: A, C step per head by
 * sa, sc; B steps by sb per group (heads of a group share it). */
snn_status per_head(snn_cuda *c, const snn_cuda_gemm_desc *d, int H, int G, long long sa, long long sb, long long sc,
                    float alpha, const float *A, const float *B, float *C) {
    if (G == H) return snn_cuda_gemm_batched(c, d, H, sa, sb, sc, alpha, A, B, 0.0f, C);
    const int rep = H / G;
    for (int h = 0; h < H; h++)
        SNN_TRY(snn_cuda_gemm(c, d, alpha, A + (size_t)h * sa, B + (size_t)(h / rep) * sb, 0.0f, C + (size_t)h * sc,
                              NULL, NULL, NULL, NULL));
    return SNN_OK;
}

/* C_g = alpha sum_{h of g} op(A_h) op(B_h) (overwritten): batched when every group has one head. */
snn_status per_group_sum(snn_cuda *c, const snn_cuda_gemm_desc *d, int H, int G, long long sa, long long sb,
                         long long sc, float alpha, const float *A, const float *B, float *C) {
    if (G == H) return snn_cuda_gemm_batched(c, d, H, sa, sb, sc, alpha, A, B, 0.0f, C);
    const int rep = H / G;
    for (int h = 0; h < H; h++)
        SNN_TRY(snn_cuda_gemm(c, d, alpha, A + (size_t)h * sa, B + (size_t)h * sb, h % rep ? 1.0f : 0.0f,
                              C + (size_t)(h / rep) * sc, NULL, NULL, NULL, NULL));
    return SNN_OK;
}

} // namespace

snn_status snn_cuda_attn_gemm_forward(const snn_backend *be, int R, int S, int H, int G, int hd, float scale,
                                      const float *x, float *y, float *P) {
    snn_cuda *c = snn_cuda_table_ctx(be);
    const int W = (H + 2 * G) * hd, OW = H * hd;
    const long long SS = (long long)S * S;
    const snn_cuda_gemm_desc qk = f32_desc(0, 1, S, S, hd, W, W, S), pv = f32_desc(0, 0, S, hd, S, S, W, OW);
    for (int b = 0; b < R; b++) {
        const float *X = x + (size_t)b * S * W;
        SNN_TRY(per_head(c, &qk, H, G, hd, hd, SS, scale, X, X + (size_t)H * hd, P + (size_t)b * H * SS));
    }
    const size_t rows = (size_t)R * H * S;
    if (rows > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_forward: %zu query rows", rows);
    causal_softmax_kernel<<<(unsigned)rows, ROW_THREADS, 0, st_of(be)>>>(S, P);
    SNN_CU_LAUNCHED("attention_forward (softmax)");
    for (int b = 0; b < R; b++) {
        const float *X = x + (size_t)b * S * W;
        SNN_TRY(per_head(c, &pv, H, G, SS, hd, hd, 1.0f, P + (size_t)b * H * SS, X + (size_t)(H + G) * hd,
                         y + (size_t)b * S * OW));
    }
    return SNN_OK;
}

snn_status snn_cuda_attn_gemm_backward(const snn_backend *be, int R, int S, int H, int G, int hd, float scale,
                                       const float *x, const float *P, const float *dy, float *dx, float *dZ) {
    snn_cuda *c = snn_cuda_table_ctx(be);
    const int W = (H + 2 * G) * hd, OW = H * hd;
    const long long SS = (long long)S * S;
    const snn_cuda_gemm_desc ptdy = f32_desc(1, 0, S, hd, S, S, OW, W); /* dV_g += P_h^T dY_h */
    const snn_cuda_gemm_desc dyvt = f32_desc(0, 1, S, S, hd, OW, W, S); /* dP_h = dY_h V_g^T */
    const snn_cuda_gemm_desc dzk = f32_desc(0, 0, S, hd, S, S, W, W);   /* dQ_h = scale dZ_h K_g */
    const snn_cuda_gemm_desc dztq = f32_desc(1, 0, S, hd, S, S, W, W);  /* dK_g += scale dZ_h^T Q_h */
    for (int b = 0; b < R; b++) {
        const float *X = x + (size_t)b * S * W, *DY = dy + (size_t)b * S * OW, *Pb = P + (size_t)b * H * SS;
        float *DX = dx + (size_t)b * S * W;
        SNN_TRY(per_group_sum(c, &ptdy, H, G, SS, hd, hd, 1.0f, Pb, DY, DX + (size_t)(H + G) * hd));
        SNN_TRY(per_head(c, &dyvt, H, G, hd, hd, SS, 1.0f, DY, X + (size_t)(H + G) * hd, dZ + (size_t)b * H * SS));
    }
    const size_t rows = (size_t)R * H * S;
    if (rows > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_backward: %zu query rows", rows);
    softmax_grad_kernel<<<(unsigned)rows, ROW_THREADS, 0, st_of(be)>>>(S, P, dZ);
    SNN_CU_LAUNCHED("attention_backward (softmax)");
    for (int b = 0; b < R; b++) {
        const float *X = x + (size_t)b * S * W, *Db = dZ + (size_t)b * H * SS;
        float *DX = dx + (size_t)b * S * W;
        SNN_TRY(per_head(c, &dzk, H, G, SS, hd, hd, scale, Db, X + (size_t)H * hd, DX));
        SNN_TRY(per_group_sum(c, &dztq, H, G, SS, hd, hd, scale, Db, X, DX + (size_t)H * hd));
    }
    return SNN_OK;
}
