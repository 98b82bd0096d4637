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
 * With t = F16 / BF16 (a 16-bit precision mode) the operands are rounded to t (RNE, the
 * contract's rounding: x, dy and the saved P by a cast; P in the forward and dZ by the softmax
 * kernels, which write the 16-bit copy as they compute the row, so P and dZ make no extra
 * pass) and the products run on the tensor cores with FP32 accumulation; the copies live in
 * the table's workspace for the call. The full S x S
 * products are computed and the upper triangle is overwritten with zeros (twice the causal
 * FLOPs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_table.h"

namespace {

#define ROW_THREADS 128

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

/* One block per row r of Z [rows][S] (query i = r % S): keep columns 0..i, softmax, zeros after.
 * With P16 (a 16-bit mode) the same row is also written rounded to T there: the PV GEMM's
 * operand, without a separate cast pass over P. */
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) causal_softmax_kernel(int S, float *Z, T *P16) {
    __shared__ float redf[ROW_THREADS];
    __shared__ double redd[ROW_THREADS];
    const size_t r = blockIdx.x;
    const int i = (int)(r % (size_t)S);
    float *z = Z + r * (size_t)S;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, z[j]);
    mx = snn_block_max_f(mx, redf);
    double sum = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) {
        const float p = expf(__fsub_rn(z[j], mx));
        z[j] = p;
        sum += (double)p;
    }
    sum = snn_block_sum_d(sum, redd);
    const float inv = (float)(1.0 / sum);
    T *q = P16 ? P16 + r * (size_t)S : NULL;
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        const float p = j <= i ? __fmul_rn(z[j], inv) : 0.0f;
        z[j] = p;
        if (q) q[j] = Io<T>::st(p);
    }
}

/* dZ = P (dP - c), c = sum_{j <= i} dP_ij P_ij (double), over dP; zeros after i. Written in
 * place (FP32), or, with D16 (a 16-bit mode), only rounded to T there: the dQ / dK GEMMs'
 * operand. */
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) softmax_grad_kernel(int S, const float *P, float *D, T *D16) {
    __shared__ double redd[ROW_THREADS];
    const size_t r = blockIdx.x;
    const int i = (int)(r % (size_t)S);
    const float *p = P + r * (size_t)S;
    float *d = D + r * (size_t)S;
    double acc = 0.0;
    for (int j = threadIdx.x; j <= i; j += blockDim.x) acc += (double)d[j] * (double)p[j];
    const float c = (float)snn_block_sum_d(acc, redd);
    T *q = D16 ? D16 + r * (size_t)S : NULL;
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        const float v = j <= i ? __fmul_rn(p[j], __fsub_rn(d[j], c)) : 0.0f;
        if (q) q[j] = Io<T>::st(v);
        else d[j] = v;
    }
}

/* The two row kernels for t: FP32 in place, or with the 16-bit copy into dst16. */
snn_status softmax_rows(const snn_backend *be, snn_dtype t, size_t rows, int S, float *Z, void *dst16) {
    const unsigned g = (unsigned)rows;
    if (t == SNN_BF16) causal_softmax_kernel<__nv_bfloat16><<<g, ROW_THREADS, 0, st_of(be)>>>(S, Z, (__nv_bfloat16 *)dst16);
    else if (t == SNN_F16) causal_softmax_kernel<__half><<<g, ROW_THREADS, 0, st_of(be)>>>(S, Z, (__half *)dst16);
    else causal_softmax_kernel<float><<<g, ROW_THREADS, 0, st_of(be)>>>(S, Z, NULL);
    SNN_CU_LAUNCHED("attention_forward (softmax)");
    return SNN_OK;
}

snn_status softmax_grad_rows(const snn_backend *be, snn_dtype t, size_t rows, int S, const float *P, float *D,
                             void *dst16) {
    const unsigned g = (unsigned)rows;
    if (t == SNN_BF16) softmax_grad_kernel<__nv_bfloat16><<<g, ROW_THREADS, 0, st_of(be)>>>(S, P, D, (__nv_bfloat16 *)dst16);
    else if (t == SNN_F16) softmax_grad_kernel<__half><<<g, ROW_THREADS, 0, st_of(be)>>>(S, P, D, (__half *)dst16);
    else softmax_grad_kernel<float><<<g, ROW_THREADS, 0, st_of(be)>>>(S, P, D, NULL);
    SNN_CU_LAUNCHED("attention_backward (softmax)");
    return SNN_OK;
}

snn_cuda_gemm_desc desc(snn_dtype ab, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc) {
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta;
    d.trans_b = tb;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_type = d.b_type = ab;
    d.c_type = SNN_F32;
    d.lda = lda;
    d.ldb = ldb;
    d.ldc = ldc;
    return d;
}

/* An operand: base pointer and element size (the batched GEMM counts strides in elements). */
struct opnd {
    const char *p;
    size_t es;
    const void *at(size_t i) const { return p + i * es; }
};

/* C_h = alpha op(A_h) op(B_g) for the H heads of one row: A, C step per head by sa, sc; B
 * steps by sb per group (the heads of a group share it). */
snn_status per_head(snn_cuda *c, const snn_cuda_gemm_desc *d, int H, int G, long long sa, long long sb, long long sc,
                    float alpha, opnd A, opnd B, float *C) {
    if (G == H) return snn_cuda_gemm_batched(c, d, H, sa, sb, sc, alpha, A.p, B.p, 0.0f, C);
    const int rep = H / G;
    for (int h = 0; h < H; h++)
        SNN_TRY(snn_cuda_gemm(c, d, alpha, A.at((size_t)h * sa), B.at((size_t)(h / rep) * sb), 0.0f,
                              C + (size_t)h * sc, NULL, NULL, NULL, NULL));
    return SNN_OK;
}

/* C_g = alpha sum_{h of g} op(A_h) op(B_h) (overwritten): batched when every group has one head. */
snn_status per_group_sum(snn_cuda *c, const snn_cuda_gemm_desc *d, int H, int G, long long sa, long long sb,
                         long long sc, float alpha, opnd A, opnd B, float *C) {
    if (G == H) return snn_cuda_gemm_batched(c, d, H, sa, sb, sc, alpha, A.p, B.p, 0.0f, C);
    const int rep = H / G;
    for (int h = 0; h < H; h++)
        SNN_TRY(snn_cuda_gemm(c, d, alpha, A.at((size_t)h * sa), B.at((size_t)h * sb), h % rep ? 1.0f : 0.0f,
                              C + (size_t)(h / rep) * sc, NULL, NULL, NULL, NULL));
    return SNN_OK;
}

/* 16-bit operand copies (t F16 / BF16: the cast is the RNE rounding the contract asks for);
 * for t = F32 the FP32 arrays themselves. */
snn_status operand(const snn_backend *be, snn_dtype t, const float *src, size_t n, char **ws, opnd *out) {
    if (t == SNN_F32) {
        *out = opnd{(const char *)src, sizeof(float)};
        return SNN_OK;
    }
    SNN_TRY(be->cast(be, t, *ws, src, n));
    *out = opnd{*ws, 2};
    *ws += (n * 2 + 255) / 256 * 256;
    return SNN_OK;
}

size_t ws_bytes(snn_dtype t, size_t n) { return t == SNN_F32 ? 0 : (n * 2 + 255) / 256 * 256; }

} // namespace

snn_status snn_cuda_attn_gemm_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                      float scale, const float *x, float *y, float *P) {
    snn_cuda *c = snn_cuda_table_ctx(be);
    const int W = (H + 2 * G) * hd, OW = H * hd;
    const long long SS = (long long)S * S;
    const size_t nx = (size_t)R * S * W, nP = (size_t)R * H * SS;
    char *ws = NULL;
    if (t != SNN_F32) SNN_TRY(snn_cuda_table_ws(be, ws_bytes(t, nx) + ws_bytes(t, nP), (void **)&ws));
    opnd X, Pm;
    SNN_TRY(operand(be, t, x, nx, &ws, &X));
    const snn_cuda_gemm_desc qk = desc(t, 0, 1, S, S, hd, W, W, S), pv = desc(t, 0, 0, S, hd, S, S, W, OW);
    for (int b = 0; b < R; b++) {
        const size_t xb = (size_t)b * S * W;
        SNN_TRY(per_head(c, &qk, H, G, hd, hd, SS, scale, opnd{(const char *)X.at(xb), X.es},
                         opnd{(const char *)X.at(xb + (size_t)H * hd), X.es}, P + (size_t)b * H * SS));
    }
    const size_t rows = (size_t)R * H * S;
    if (rows > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_forward: %zu query rows", rows);
    /* P's 16-bit copy is written by the softmax itself */
    Pm = t == SNN_F32 ? opnd{(const char *)P, sizeof(float)} : opnd{ws, 2};
    SNN_TRY(softmax_rows(be, t, rows, S, P, t == SNN_F32 ? NULL : ws));
    for (int b = 0; b < R; b++) {
        const size_t xb = (size_t)b * S * W;
        SNN_TRY(per_head(c, &pv, H, G, SS, hd, hd, 1.0f, opnd{(const char *)Pm.at((size_t)b * H * SS), Pm.es},
                         opnd{(const char *)X.at(xb + (size_t)(H + G) * hd), X.es}, y + (size_t)b * S * OW));
    }
    return SNN_OK;
}

snn_status snn_cuda_attn_gemm_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                       float scale, const float *x, const float *P, const float *dy, float *dx,
                                       float *dZ) {
    snn_cuda *c = snn_cuda_table_ctx(be);
    const int W = (H + 2 * G) * hd, OW = H * hd;
    const long long SS = (long long)S * S;
    const size_t nx = (size_t)R * S * W, ny = (size_t)R * S * OW, nP = (size_t)R * H * SS;
    char *ws = NULL;
    if (t != SNN_F32)
        SNN_TRY(snn_cuda_table_ws(be, ws_bytes(t, nx) + ws_bytes(t, ny) + ws_bytes(t, nP), (void **)&ws));
    opnd X, DY, Pm, DZ;
    SNN_TRY(operand(be, t, x, nx, &ws, &X));
    SNN_TRY(operand(be, t, dy, ny, &ws, &DY));
    char *ws_p = ws; /* P's copy, later dZ's */
    SNN_TRY(operand(be, t, P, nP, &ws, &Pm));
    const snn_cuda_gemm_desc ptdy = desc(t, 1, 0, S, hd, S, S, OW, W); /* dV_g += P_h^T dY_h */
    const snn_cuda_gemm_desc dyvt = desc(t, 0, 1, S, S, hd, OW, W, S); /* dP_h = dY_h V_g^T */
    const snn_cuda_gemm_desc dzk = desc(t, 0, 0, S, hd, S, S, W, W);   /* dQ_h = scale dZ_h K_g */
    const snn_cuda_gemm_desc dztq = desc(t, 1, 0, S, hd, S, S, W, W);  /* dK_g += scale dZ_h^T Q_h */
    for (int b = 0; b < R; b++) {
        const size_t xb = (size_t)b * S * W, yb = (size_t)b * S * OW;
        float *DX = dx + xb;
        const opnd DYb{(const char *)DY.at(yb), DY.es}, V{(const char *)X.at(xb + (size_t)(H + G) * hd), X.es};
        SNN_TRY(per_group_sum(c, &ptdy, H, G, SS, hd, hd, 1.0f, opnd{(const char *)Pm.at((size_t)b * H * SS), Pm.es},
                              DYb, DX + (size_t)(H + G) * hd));
        SNN_TRY(per_head(c, &dyvt, H, G, hd, hd, SS, 1.0f, DYb, V, dZ + (size_t)b * H * SS));
    }
    const size_t rows = (size_t)R * H * S;
    if (rows > 0x7fffffffu) return snn_error(SNN_E_UNSUPPORTED, "attention_backward: %zu query rows", rows);
    /* dZ's 16-bit copy (over P's, whose GEMMs are done) is written by the softmax gradient */
    DZ = t == SNN_F32 ? opnd{(const char *)dZ, sizeof(float)} : opnd{ws_p, 2};
    SNN_TRY(softmax_grad_rows(be, t, rows, S, P, dZ, t == SNN_F32 ? NULL : ws_p));
    for (int b = 0; b < R; b++) {
        const size_t xb = (size_t)b * S * W;
        float *DX = dx + xb;
        const opnd Db{(const char *)DZ.at((size_t)b * H * SS), DZ.es};
        SNN_TRY(per_head(c, &dzk, H, G, SS, hd, hd, scale, Db, opnd{(const char *)X.at(xb + (size_t)H * hd), X.es}, DX));
        SNN_TRY(per_group_sum(c, &dztq, H, G, SS, hd, hd, scale, Db, opnd{(const char *)X.at(xb), X.es},
                              DX + (size_t)H * hd));
    }
    return SNN_OK;
}
