/* Forward and backward of each module kind on the GPU, over the pointers cuda_model.cu
 * resolved. Each function mirrors its CPU module (src/nn, src/neuron, src/models); the CPU
 * module is the reference the whole-model parity test compares against. */
#include "backend/cuda/cuda_model_internal.h"

__global__ void gm_add_kernel(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

static snn_status add(snn_cuda_model *g, float *y, const float *a, const float *b, size_t n) {
    unsigned blocks = snn_grid(n, 256);
    unsigned cap = (unsigned)snn_cuda_sm_count(g->c) * 16u;
    gm_add_kernel<<<blocks < cap ? blocks : cap, 256, 0, snn_cuda_stream_of(g->c)>>>(y, a, b, n);
    SNN_CU_LAUNCHED("residual add");
    return SNN_OK;
}

/* y = round_to(type, y + bias[i % cols]) in place: a 16-bit layer's output (and input
 * gradient) is a 16-bit tensor, as under autocast and in the CPU reference
 * (src/precision/prec_exec.c rounds the same values). bias may be NULL. */
template <typename TH>
__global__ void gm_round_kernel(float *y, const float *bias, size_t n, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + (bias ? bias[i % cols] : 0.0f);
        y[i] = Io<TH>::ld(Io<TH>::st(v));
    }
}

static snn_status round_out(snn_cuda_model *g, float *y, const float *bias, size_t n, size_t cols) {
    unsigned blocks = snn_grid(n, 256);
    unsigned cap = (unsigned)snn_cuda_sm_count(g->c) * 16u;
    if (blocks > cap) blocks = cap;
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    if (g->o.compute == SNN_BF16)
        gm_round_kernel<__nv_bfloat16><<<blocks, 256, 0, sm>>>(y, bias, n, cols);
    else
        gm_round_kernel<__half><<<blocks, 256, 0, sm>>>(y, bias, n, cols);
    SNN_CU_LAUNCHED("round to 16 bits");
    return SNN_OK;
}

snn_status snn_gm_gemm(snn_cuda_model *g, int ta, int tb, int M, int N, int K, snn_dtype ab,
                       const void *A, int lda, const void *Bm, int ldb, float beta, float *C,
                       int ldc) {
    snn_cuda_gemm_desc d = snn_cuda_gd(ta, tb, M, N, K, ab, ab, SNN_F32, lda, ldb, ldc, 0);
    d.allow_tf32 = g->o.allow_tf32;
    return snn_cuda_gemm(g->c, &d, 1.0f, A, Bm, beta, C, NULL, NULL, NULL, NULL);
}

/* ---- Linear: y = x W^T + b over `rows` rows ---- */
static snn_status linear_fwd(snn_cuda_model *g, gnode *n) {
    snn_dtype ct = g->o.compute;
    const void *a = n->x;
    if (ct != SNN_F32) {
        SNN_TRY(snn_cuda_convert(g->c, ct, n->xc, SNN_F32, n->x, (size_t)n->rows * n->d.in_features,
                                 NULL, 0));
        a = n->xc;
    }
    SNN_TRY(snn_gm_gemm(g, 0, 1, n->rows, n->d.out_features, n->d.in_features, ct, a,
                        n->d.in_features, n->wc, n->d.in_features, 0.0f, n->y,
                        n->d.out_features));
    if (ct != SNN_F32)
        return round_out(g, n->y, n->b, (size_t)n->rows * n->d.out_features, (size_t)n->d.out_features);
    if (n->b) SNN_TRY(snn_cuda_bias_add(g->c, SNN_F32, n->y, n->b, n->rows, n->d.out_features));
    return SNN_OK;
}

static snn_status linear_bwd(snn_cuda_model *g, gnode *n) {
    snn_dtype ct = g->o.compute;
    const int in = n->d.in_features, out = n->d.out_features;
    const void *dy = n->gy, *xa = n->x;
    if (ct != SNN_F32) {
        SNN_TRY(snn_cuda_convert(g->c, ct, g->scratch_a, SNN_F32, n->gy, (size_t)n->rows * out,
                                 NULL, 0));
        dy = g->scratch_a;
        xa = n->xc;
    }
    /* dW += dy^T x ; db += column sums of dy ; dx = dy W */
    SNN_TRY(snn_gm_gemm(g, 1, 0, out, in, n->rows, ct, dy, out, xa, in, 1.0f, n->gw, in));
    if (n->gb) SNN_TRY(snn_cuda_colsum(g->c, ct, dy, n->rows, out, 1.0f, n->gb));
    if (!n->gin) return SNN_OK;
    SNN_TRY(snn_gm_gemm(g, 0, 0, n->rows, in, out, ct, dy, out, n->wc, in, 0.0f, n->gin, in));
    if (ct != SNN_F32) return round_out(g, n->gin, NULL, (size_t)n->rows * in, 1);
    return SNN_OK;
}

/* ---- Convolution: im2col (in the compute type) + one GEMM + NHWC -> NCHW ---- */
static snn_status conv_fwd(snn_cuda_model *g, gnode *n) {
    snn_dtype ct = g->o.compute;
    SNN_TRY(snn_cuda_im2col(g->c, ct, n->xc, n->ldcol, n->x, g->B, n->C, n->H, n->W, n->k, n->s,
                            n->p));
    float *yn = (float *)g->scratch_a;
    SNN_TRY(snn_gm_gemm(g, 0, 1, g->B * n->P, n->O, n->Kc, ct, n->xc, n->ldcol, n->wc, n->Kc, 0.0f,
                        yn, n->O));
    /* bias, layout change and (16-bit compute) rounding of the output in one pass */
    return snn_cuda_nhwc_to_nchw_round(g->c, n->y, yn, n->b, g->B, n->O, n->P, ct);
}

static snn_status conv_bwd(snn_cuda_model *g, gnode *n) {
    snn_dtype ct = g->o.compute;
    const int BP = g->B * n->P;
    void *dyn = g->scratch_b;
    SNN_TRY(snn_cuda_nchw_to_nhwc(g->c, ct, dyn, n->gy, g->B, n->O, n->P));
    SNN_TRY(snn_gm_gemm(g, 1, 0, n->O, n->Kc, BP, ct, dyn, n->O, n->xc, n->ldcol, 1.0f, n->gw,
                        n->Kc));
    if (n->gb) SNN_TRY(snn_cuda_colsum(g->c, ct, dyn, BP, n->O, 1.0f, n->gb));
    if (!n->gin) return SNN_OK;
    float *dcol = (float *)g->scratch_c;
    SNN_TRY(snn_gm_gemm(g, 0, 0, BP, n->Kc, n->O, ct, dyn, n->O, n->wc, n->Kc, 0.0f, dcol, n->Kc));
    return snn_cuda_col2im_round(g->c, n->gin, dcol, n->Kc, g->B, n->C, n->H, n->W, n->k, n->s,
                                 n->p, ct);
}

/* ---- neurons ---- */
static snn_status neuron_fwd(snn_cuda_model *g, gnode *n, int training) {
    if (g->nprec) return snn_gm_nprec_forward(g, n, training);
    if (n->plif) return snn_gm_plif_forward(g, n, training);
    size_t cnt = (size_t)g->N * n->in_numel;
    return snn_cuda_neuron_forward(g->c, &n->nopt, n->nk, g->T, cnt, SNN_F32, SNN_F32, n->x, NULL,
                                   0, NULL, n->y, training ? n->h : NULL, NULL, NULL);
}

static snn_status neuron_bwd(snn_cuda_model *g, gnode *n) {
    if (g->nprec) return snn_gm_nprec_backward(g, n);
    if (n->plif) return snn_gm_plif_backward(g, n);
    size_t cnt = (size_t)g->N * n->in_numel;
    return snn_cuda_neuron_backward(g->c, &n->nopt, n->nk, g->T, cnt, SNN_F32, n->h, NULL, n->gy,
                                    NULL, NULL, n->gin, NULL, NULL, NULL, NULL);
}

static snn_status fwd_impl(snn_cuda_model *g, gnode *n, int training) {
    snn_cuda *c = g->c;
    switch (n->kind) {
    case GK_SEQ:
        for (int i = 0; i < n->n_kids; i++) SNN_TRY(snn_gm_forward(g, n->kids[i], training));
        return SNN_OK;
    case GK_RES:
        SNN_TRY(snn_gm_forward(g, n->kids[0], training));
        return add(g, n->y, n->x, n->kids[0]->y, (size_t)g->B * n->out_numel);
    case GK_ALIAS: return SNN_OK;
    case GK_LINEAR: return n->f8 ? snn_gm_fp8_forward(g, n, training) : linear_fwd(g, n);
    case GK_CONV: return n->f8 ? snn_gm_fp8_forward(g, n, training) : conv_fwd(g, n);
    case GK_BN:
        return snn_cuda_batchnorm_forward(c, training, n->x, n->y, g->B, n->C, n->S, n->w, n->b,
                                          n->rmean, n->rvar, n->d.eps, n->d.momentum,
                                          training ? n->mean : NULL, training ? n->invstd : NULL,
                                          g->bn_work);
    case GK_MAXPOOL:
        return snn_cuda_maxpool2d_forward(c, n->x, n->y, n->arg, g->B, n->C, n->H, n->W, n->k,
                                          n->s, n->p);
    case GK_NEURON: return neuron_fwd(g, n, training);
    case GK_DROPOUT: return snn_gm_dropout_forward(g, n, training);
    case GK_AVGPOOL: return snn_gm_avgpool_forward(g, n);
    case GK_GELU: return snn_cuda_gelu_forward(c, n->x, n->y, (size_t)g->B * n->in_numel);
    case GK_TMEAN: return snn_cuda_token_mean_forward(c, n->x, n->y, g->B, n->C, n->L);
    case GK_LN:
        return snn_cuda_layernorm_forward(c, n->x, n->y, n->V, n->d.in_features, n->w, n->b,
                                          n->d.eps, training ? n->lmean : NULL,
                                          training ? n->lrstd : NULL);
    case GK_SSA:
        return snn_cuda_ssa_forward(c, n->x, n->y, g->B, n->C, n->L, n->heads, n->d.scale,
                                    g->ssa_work);
    }
    return snn_error(SNN_E_STATE, "unknown GPU module kind");
}

static snn_status bwd_impl(snn_cuda_model *g, gnode *n) {
    snn_cuda *c = g->c;
    switch (n->kind) {
    case GK_SEQ:
        for (int i = n->n_kids - 1; i >= 0; i--) SNN_TRY(snn_gm_backward(g, n->kids[i]));
        return SNN_OK;
    case GK_RES:
        SNN_TRY(snn_gm_backward(g, n->kids[0]));
        if (!n->gin) return SNN_OK;
        return add(g, n->gin, n->gy, n->kids[0]->gin, (size_t)g->B * n->in_numel);
    case GK_ALIAS: return SNN_OK;
    case GK_LINEAR: return n->f8 ? snn_gm_fp8_backward(g, n) : linear_bwd(g, n);
    case GK_CONV: return n->f8 ? snn_gm_fp8_backward(g, n) : conv_bwd(g, n);
    case GK_BN:
        return snn_cuda_batchnorm_backward(c, n->x, n->gy, n->gin, g->B, n->C, n->S, n->w,
                                           n->mean, n->invstd, n->gw, n->gb, g->bn_work);
    case GK_MAXPOOL:
        return snn_cuda_maxpool2d_backward(c, n->gy, n->arg, n->gin, g->B, n->C, n->H, n->W, n->k,
                                           n->s, n->p);
    case GK_NEURON: return neuron_bwd(g, n);
    case GK_DROPOUT: return snn_gm_dropout_backward(g, n);
    case GK_AVGPOOL: return snn_gm_avgpool_backward(g, n);
    case GK_GELU: return snn_cuda_gelu_backward(c, n->x, n->gy, n->gin, (size_t)g->B * n->in_numel);
    case GK_TMEAN: return snn_cuda_token_mean_backward(c, n->gy, n->gin, g->B, n->C, n->L);
    case GK_LN:
        return snn_cuda_layernorm_backward(c, n->x, n->gy, n->gin, n->V, n->d.in_features, n->w,
                                           n->lmean, n->lrstd, n->gw, n->gb, g->ln_work);
    case GK_SSA:
        return snn_cuda_ssa_backward(c, n->x, n->gy, n->gin, g->B, n->C, n->L, n->heads,
                                     n->d.scale, g->ssa_work);
    }
    return snn_error(SNN_E_STATE, "unknown GPU module kind");
}

/* Profiling (snn_cuda_model_profile): leaves are timed one by one with events and a
 * synchronisation each, so the numbers include no overlap; containers just recurse. */
static snn_status timed(snn_cuda_model *g, gnode *n, int bwd, int training) {
    int leaf = n->kind != GK_SEQ && n->kind != GK_RES && n->kind != GK_ALIAS;
    if (!g->prof || !leaf) {
        if (!bwd) return fwd_impl(g, n, training);
        SNN_TRY(bwd_impl(g, n));
        return leaf ? snn_gm_ddp_leaf_done(g, n) : SNN_OK;
    }
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    SNN_CU_TRY(cudaEventRecord(g->ev[0], sm));
    snn_status st = bwd ? bwd_impl(g, n) : fwd_impl(g, n, training);
    if (st == SNN_OK && bwd) st = snn_gm_ddp_leaf_done(g, n);
    SNN_CU_TRY(cudaEventRecord(g->ev[1], sm));
    SNN_CU_TRY(cudaEventSynchronize(g->ev[1]));
    float ms = 0;
    cudaEventElapsedTime(&ms, g->ev[0], g->ev[1]);
    if (bwd) n->bwd_ms += ms;
    else n->fwd_ms += ms;
    return st;
}

snn_status snn_gm_forward(snn_cuda_model *g, gnode *n, int training) { return timed(g, n, 0, training); }
snn_status snn_gm_backward(snn_cuda_model *g, gnode *n) { return timed(g, n, 1, 1); }
