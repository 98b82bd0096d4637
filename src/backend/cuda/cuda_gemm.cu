/* GEMM through cuBLASLt: row-major C = op(A)·op(B) mapped onto column-major cuBLAS
 * (D^T = op(B)^T · op(A)^T, so cuBLAS's A is our B and vice versa). One plan per shape, type
 * and alignment: descriptors, layouts and the chosen algorithm are built once and cached, so
 * a call in the steady state is a few host-side attribute sets plus cublasLtMatmul (which
 * graph capture records). The workspace is allocated once per context. */
#include <cublasLt.h>
#include <float.h>
#include <stdlib.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_internal.h"

#define PLAN_CAP 128
#define TUNE_CANDIDATES 24 /* heuristic candidates timed by autotune (the first call of a shape) */

typedef struct {
    int trans_a, trans_b, M, N, K, a_type, b_type, c_type, lda, ldb, ldc, tf32, fast;
    int align_a, align_b, align_c; /* pointer alignment (bytes, capped at 256) */
    int has_ascale, has_bscale, has_dscale, has_amax, beta_zero;
    int a_mode, b_mode; /* snn_cuda_scale_mode of our A and B */
    int has_bias;       /* epilogue C[i][j] += bias[j]: 0 none, 1 FP32, 2 BF16, 3 F16 bias values */
    int batch;          /* strided batch count (0 or 1: one GEMM) */
    long long stride_a, stride_b, stride_c; /* elements between the batch's operands */
} plan_key;

typedef struct {
    plan_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld; /* cuBLAS's A (our B), B (our A), C, D */
    cublasLtMatmulAlgo_t algo;
    size_t ws_need;
} plan;

struct snn_cuda_gemm_state {
    cublasLtHandle_t lt;
    void *workspace;
    float *scratch; /* 4 slots of 16 bytes: scale and amax pointers cuBLASLt can use */
    size_t workspace_bytes;
    int autotune;
    int n_plans;
    plan plans[PLAN_CAP];
};

static const char *lt_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value (unsupported type/layout/attribute combination)";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "not supported on this GPU architecture";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown cuBLAS status";
    }
}
#define LT_TRY(call)                                                                             \
    do {                                                                                         \
        cublasStatus_t lt_s_ = (call);                                                           \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS)                                                      \
            return snn_error(SNN_E_UNSUPPORTED, "cuBLASLt %s failed: %s (status %d)", #call,      \
                             lt_status(lt_s_), (int)lt_s_);                                      \
    } while (0)

snn_status snn_cuda_gemm_state_create(size_t workspace_bytes, snn_cuda_gemm_state **out) {
    *out = NULL;
    snn_cuda_gemm_state *g = (snn_cuda_gemm_state *)calloc(1, sizeof *g);
    if (!g) return snn_error(SNN_E_NOMEM, "out of host memory for the cuBLASLt state");
    cublasStatus_t s = cublasLtCreate(&g->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        free(g);
        return snn_error(SNN_E_UNSUPPORTED, "cublasLtCreate failed: %s", lt_status(s));
    }
    cudaError_t e = cudaMalloc(&g->workspace, workspace_bytes);
    if (e != cudaSuccess) {
        cublasLtDestroy(g->lt);
        free(g);
        return snn_error(SNN_E_NOMEM, "cannot allocate the %zu-byte GEMM workspace: %s",
                         workspace_bytes, cudaGetErrorString(e));
    }
    g->workspace_bytes = workspace_bytes;
    e = cudaMalloc((void **)&g->scratch, 64);
    if (e != cudaSuccess) {
        cudaFree(g->workspace);
        cublasLtDestroy(g->lt);
        free(g);
        return snn_error(SNN_E_NOMEM, "cannot allocate GEMM scale slots: %s", cudaGetErrorString(e));
    }
    *out = g;
    return SNN_OK;
}

static void plan_release(plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    memset(p, 0, sizeof *p);
}

void snn_cuda_gemm_state_destroy(snn_cuda_gemm_state *g) {
    if (!g) return;
    for (int i = 0; i < g->n_plans; i++) plan_release(&g->plans[i]);
    if (g->workspace) cudaFree(g->workspace);
    if (g->scratch) cudaFree(g->scratch);
    if (g->lt) cublasLtDestroy(g->lt);
    free(g);
}

extern "C" void snn_cuda_set_gemm_autotune(snn_cuda *c, int on) {
    snn_cuda_gemm_of(c)->autotune = on;
}

static cudaDataType_t cuda_type(snn_dtype t) {
    switch (t) {
    case SNN_F32: return CUDA_R_32F;
    case SNN_F16: return CUDA_R_16F;
    case SNN_BF16: return CUDA_R_16BF;
    case SNN_F8E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_8F_E5M2;
    }
}

static int ptr_align(const void *p) {
    int a = 256;
    while (a > 1 && ((uintptr_t)p % (uintptr_t)a)) a >>= 1;
    return a;
}

/* Block-scaled FP8 (fp8.md §3.3, §5.1): what cuBLASLt's VEC128 / BLK128x128 modes accept. */
static snn_status check_block(const snn_cuda_gemm_desc *d, const float *as, const float *bs,
                              const float *ds, const float *amax) {
    int ma = (int)d->a_scale_mode, mb = (int)d->b_scale_mode;
    if (ma < SNN_CUDA_SCALE_VEC128 || ma > SNN_CUDA_SCALE_BLK128 || mb < SNN_CUDA_SCALE_VEC128 ||
        mb > SNN_CUDA_SCALE_BLK128)
        return snn_error(SNN_E_INVALID,
                         "block-scaled FP8 GEMM needs both operands block-scaled (scale modes %d, %d; "
                         "1 = 1x128 vectors, 2 = 128x128 tiles)", ma, mb);
    if (ma == SNN_CUDA_SCALE_BLK128 && mb == SNN_CUDA_SCALE_BLK128)
        return snn_error(SNN_E_UNSUPPORTED, "block-scaled FP8 GEMM: at most one operand may use 128x128 "
                                            "tiles (cuBLASLt has no 2D x 2D kernel); quantise the other as "
                                            "1x128 vectors");
    if (d->M % 128 || d->N % 128 || d->K % 128)
        return snn_error(SNN_E_SHAPE, "block-scaled FP8 GEMM needs M, N and K multiples of 128 (M=%d N=%d K=%d): "
                                      "pad the tensors", d->M, d->N, d->K);
    if (d->fast_accum)
        return snn_error(SNN_E_UNSUPPORTED, "block-scaled FP8 GEMM always promotes partial sums to FP32: "
                                            "fast_accum must be 0");
    if (snn_cuda_is_fp8(d->c_type) || ds || amax)
        return snn_error(SNN_E_UNSUPPORTED, "block-scaled FP8 GEMM writes F32, BF16 or F16 (no FP8 output, "
                                            "d_scale or amax)");
    if (!as || !bs || !snn_aligned(as, 16) || !snn_aligned(bs, 16))
        return snn_error(SNN_E_INVALID, "block-scaled FP8 GEMM needs both scale arrays, 16-byte aligned");
    return SNN_OK;
}

static snn_status check_desc(const snn_cuda_gemm_desc *d, float beta, const float *as,
                             const float *bs, const float *ds, const float *amax) {
    if (d->M <= 0 || d->N <= 0 || d->K <= 0)
        return snn_error(SNN_E_SHAPE, "GEMM sizes must be positive (M=%d N=%d K=%d)", d->M, d->N,
                         d->K);
    /* stored column counts (row-major): op(A) is M x K, op(B) is K x N */
    int ca = d->trans_a ? d->M : d->K, cb = d->trans_b ? d->K : d->N;
    if (d->lda < ca || d->ldb < cb || d->ldc < d->N)
        return snn_error(SNN_E_SHAPE,
                         "GEMM leading dimensions too small: lda=%d (needs >= %d), ldb=%d "
                         "(needs >= %d), ldc=%d (needs >= %d)",
                         d->lda, ca, d->ldb, cb, d->ldc, d->N);
    snn_dtype a = d->a_type, b = d->b_type, c = d->c_type;
    int fp8 = snn_cuda_is_fp8(a) || snn_cuda_is_fp8(b);
    if (!fp8 && (as || bs || ds || amax))
        return snn_error(SNN_E_INVALID, "GEMM scale/amax pointers apply to FP8 operands only");
    if (a == SNN_F32 || b == SNN_F32) {
        if (a != SNN_F32 || b != SNN_F32 || c != SNN_F32)
            return snn_error(SNN_E_UNSUPPORTED, "FP32 GEMM needs A, B and C in f32 (got %s, %s, %s)",
                             snn_cuda_dtype_name(a), snn_cuda_dtype_name(b), snn_cuda_dtype_name(c));
        return SNN_OK;
    }
    if (snn_cuda_is_16(a) || snn_cuda_is_16(b)) {
        if (a != b || (c != SNN_F32 && c != a))
            return snn_error(SNN_E_UNSUPPORTED,
                             "16-bit GEMM needs A and B of one type and C f32 or that type (got "
                             "%s, %s, %s)",
                             snn_cuda_dtype_name(a), snn_cuda_dtype_name(b), snn_cuda_dtype_name(c));
        return SNN_OK;
    }
    if (!fp8 || !snn_cuda_is_fp8(a) || !snn_cuda_is_fp8(b))
        return snn_error(SNN_E_UNSUPPORTED, "unsupported GEMM operand types %s x %s",
                         snn_cuda_dtype_name(a), snn_cuda_dtype_name(b));
    if (a == SNN_F8E5M2 && b == SNN_F8E5M2)
        return snn_error(SNN_E_UNSUPPORTED, "FP8 GEMM with both operands E5M2 is not supported by "
                                            "cuBLASLt; quantise one of them as E4M3");
    if (d->trans_a != 0 || d->trans_b != 1)
        return snn_error(SNN_E_UNSUPPORTED,
                         "FP8 GEMM needs both operands K-contiguous (trans_a=0, trans_b=1; Hopper "
                         "supports only the TN layout); transpose the operand first");
    if (d->K % 16 || d->lda % 16 || d->ldb % 16)
        return snn_error(SNN_E_SHAPE, "FP8 GEMM needs K, lda and ldb multiples of 16 (K=%d lda=%d "
                                      "ldb=%d): pad the tensors",
                         d->K, d->lda, d->ldb);
    if (d->a_scale_mode != SNN_CUDA_SCALE_TENSOR || d->b_scale_mode != SNN_CUDA_SCALE_TENSOR)
        SNN_TRY(check_block(d, as, bs, ds, amax));
    if (snn_cuda_is_fp8(c) && beta != 0.0f)
        return snn_error(SNN_E_UNSUPPORTED, "an FP8 GEMM output cannot accumulate (beta must be 0)");
    if (!snn_cuda_is_fp8(c) && c != SNN_F32 && !snn_cuda_is_16(c))
        return snn_error(SNN_E_UNSUPPORTED, "unsupported FP8 GEMM output type %s",
                         snn_cuda_dtype_name(c));
    if (!snn_cuda_is_fp8(c) && ds)
        return snn_error(SNN_E_INVALID, "d_scale applies to FP8 GEMM outputs only");
    return SNN_OK;
}

static snn_status plan_build(snn_cuda_gemm_state *g, const plan_key *k, plan *p) {
    memset(p, 0, sizeof *p);
    p->key = *k;
    snn_dtype at = (snn_dtype)k->a_type, bt = (snn_dtype)k->b_type, ct = (snn_dtype)k->c_type;
    cublasComputeType_t ctype = (at == SNN_F32 && k->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                           : CUBLAS_COMPUTE_32F;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, ctype, CUDA_R_32F));
    cublasOperation_t ta = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLAS A = our B */
    cublasOperation_t tb = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLAS B = our A */
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->has_bias) {
        /* cuBLAS's rows are our columns: its per-row bias is our bias[j] */
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt32 = k->has_bias == 2 ? CUDA_R_16BF : k->has_bias == 3 ? CUDA_R_16F : CUDA_R_32F;
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt32, sizeof bt32));
    }
    if (snn_cuda_is_fp8(at)) {
        int8_t fast = (int8_t)(k->fast ? 1 : 0);
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                              sizeof fast));
    }
    if (k->a_mode || k->b_mode) { /* our A is cuBLAS's B and vice versa */
        static const int32_t lt_mode[3] = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                                           CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                                           CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F};
        int32_t ma = lt_mode[k->b_mode], mb = lt_mode[k->a_mode];
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
    }
    /* cuBLAS m = N, n = M, k = K. Stored shapes (column-major rows x cols, ld): */
    uint64_t a_rows = k->trans_b ? (uint64_t)k->K : (uint64_t)k->N;
    uint64_t a_cols = k->trans_b ? (uint64_t)k->N : (uint64_t)k->K;
    uint64_t b_rows = k->trans_a ? (uint64_t)k->M : (uint64_t)k->K;
    uint64_t b_cols = k->trans_a ? (uint64_t)k->K : (uint64_t)k->M;
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, cuda_type(bt), a_rows, a_cols, k->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(at), b_rows, b_cols, k->lda));
    /* With an FP8 output, C (never read: beta = 0) must be declared 16-bit. */
    snn_dtype c_decl = snn_cuda_is_fp8(ct) ? SNN_BF16 : ct;
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(c_decl), (uint64_t)k->N, (uint64_t)k->M,
                                      k->ldc));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->ld, cuda_type(ct), (uint64_t)k->N, (uint64_t)k->M,
                                      k->ldc));
    if (k->batch > 1) {
        const int32_t n = k->batch;
        const int64_t sa = k->stride_b, sb = k->stride_a, sc = k->stride_c; /* cuBLAS's A is our B */
        cublasLtMatrixLayout_t l[4] = {p->la, p->lb, p->lc, p->ld};
        const int64_t st[4] = {sa, sb, sc, sc};
        for (int i = 0; i < 4; i++) {
            LT_TRY(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
            LT_TRY(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i],
                                                    sizeof st[i]));
        }
    }
    return SNN_OK;
}

/* Set the per-call pointer attributes (scales, amax) on a plan's descriptor. */
static snn_status plan_pointers(plan *p, const float *as, const float *bs, const float *ds,
                                float *amax) {
    if (!snn_cuda_is_fp8((snn_dtype)p->key.a_type)) return SNN_OK;
    /* our A is cuBLAS's B and vice versa */
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &as,
                                          sizeof as));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &bs,
                                          sizeof bs));
    if (snn_cuda_is_fp8((snn_dtype)p->key.c_type))
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &ds,
                                              sizeof ds));
    if (p->key.has_amax || amax)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax,
                                              sizeof amax));
    return SNN_OK;
}

static snn_status plan_bias(plan *p, const void *bias) {
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    return SNN_OK;
}

static snn_status run_plan(snn_cuda_gemm_state *g, cudaStream_t st, plan *p,
                           const cublasLtMatmulAlgo_t *algo, float alpha, const void *A,
                           const void *B, float beta, void *C) {
    const void *cptr = snn_cuda_is_fp8((snn_dtype)p->key.c_type) ? NULL : C;
    LT_TRY(cublasLtMatmul(g->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, cptr, p->lc, C, p->ld,
                          algo, g->workspace, g->workspace_bytes, st));
    return SNN_OK;
}

static snn_status plan_choose(snn_cuda_gemm_state *g, cudaStream_t st, plan *p, float alpha,
                              const void *A, const void *B, float beta, void *C) {
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = g->workspace_bytes;
    uint32_t al[4] = {(uint32_t)p->key.align_b, (uint32_t)p->key.align_a,
                      (uint32_t)p->key.align_c, (uint32_t)p->key.align_c};
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4);
    if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4);
    cublasLtMatmulHeuristicResult_t res[TUNE_CANDIDATES];
    int found = 0;
    if (!s)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->ld, pref,
                                           TUNE_CANDIDATES, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0)
        return snn_error(SNN_E_UNSUPPORTED,
                         "cuBLASLt has no algorithm for this GEMM (M=%d N=%d K=%d, %s x %s -> %s, "
                         "trans_a=%d trans_b=%d): %s",
                         p->key.M, p->key.N, p->key.K, snn_cuda_dtype_name((snn_dtype)p->key.a_type),
                         snn_cuda_dtype_name((snn_dtype)p->key.b_type),
                         snn_cuda_dtype_name((snn_dtype)p->key.c_type), p->key.trans_a,
                         p->key.trans_b, s ? lt_status(s) : "no candidate");
    int best = 0;
    if (g->autotune && p->key.beta_zero && found > 1) {
        /* Time each candidate on the real operands (beta = 0: repeats are harmless). */
        cudaEvent_t e0, e1;
        SNN_CU_TRY(cudaEventCreate(&e0));
        SNN_CU_TRY(cudaEventCreate(&e1));
        float best_ms = FLT_MAX;
        for (int i = 0; i < found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            if (run_plan(g, st, p, &res[i].algo, alpha, A, B, beta, C) != SNN_OK) continue;
            cudaEventRecord(e0, st);
            for (int r = 0; r < 3; r++) run_plan(g, st, p, &res[i].algo, alpha, A, B, beta, C);
            cudaEventRecord(e1, st);
            if (cudaEventSynchronize(e1) != cudaSuccess) break;
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            if (ms < best_ms) {
                best_ms = ms;
                best = i;
            }
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        snn_clear_error();
    }
    p->algo = res[best].algo;
    p->ws_need = res[best].workspaceSize;
    return SNN_OK;
}

extern "C" snn_status snn_cuda_gemm(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha,
                                    const void *A, const void *B, float beta, void *C,
                                    const float *a_scale, const float *b_scale,
                                    const float *d_scale, float *d_amax) {
    return snn_cuda_gemm_bias(c, d, alpha, A, B, beta, C, a_scale, b_scale, d_scale, d_amax, NULL);
}

static snn_status gemm_run(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                           float beta, void *C, const float *a_scale, const float *b_scale, const float *d_scale,
                           float *d_amax, const void *bias, snn_dtype bias_type, int batch, long long sa,
                           long long sb, long long sc);

snn_status snn_cuda_gemm_bias(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                              float beta, void *C, const float *a_scale, const float *b_scale, const float *d_scale,
                              float *d_amax, const float *bias) {
    return gemm_run(c, d, alpha, A, B, beta, C, a_scale, b_scale, d_scale, d_amax, bias, SNN_F32, 1, 0, 0, 0);
}

snn_status snn_cuda_gemm_bias_t(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                                float beta, void *C, const void *bias, snn_dtype bias_type) {
    if (bias_type != SNN_F32 && (bias_type != d->c_type || !snn_cuda_is_16(bias_type)))
        return snn_error(SNN_E_UNSUPPORTED, "GEMM bias epilogue: a %s bias needs a %s output (got %s)",
                         snn_cuda_dtype_name(bias_type), snn_cuda_dtype_name(bias_type),
                         snn_cuda_dtype_name(d->c_type));
    return gemm_run(c, d, alpha, A, B, beta, C, NULL, NULL, NULL, NULL, bias, bias_type, 1, 0, 0, 0);
}

snn_status snn_cuda_gemm_batched(snn_cuda *c, const snn_cuda_gemm_desc *d, int batch, long long stride_a,
                                 long long stride_b, long long stride_c, float alpha, const void *A, const void *B,
                                 float beta, void *C) {
    if (batch < 1 || stride_a < 0 || stride_b < 0 || stride_c < 0)
        return snn_error(SNN_E_INVALID, "batched GEMM: batch %d must be positive and the strides non-negative", batch);
    if (snn_cuda_is_fp8(d->a_type) || snn_cuda_is_fp8(d->b_type))
        return snn_error(SNN_E_UNSUPPORTED, "batched GEMM: FP8 operands are not supported");
    return gemm_run(c, d, alpha, A, B, beta, C, NULL, NULL, NULL, NULL, NULL, SNN_F32, batch, stride_a, stride_b,
                    stride_c);
}

static snn_status gemm_run(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                           float beta, void *C, const float *a_scale, const float *b_scale, const float *d_scale,
                           float *d_amax, const void *bias, snn_dtype bias_type, int batch, long long sa,
                           long long sb, long long sc) {
    SNN_TRY(check_desc(d, beta, a_scale, b_scale, d_scale, d_amax));
    if (bias && snn_cuda_is_fp8(d->a_type))
        return snn_error(SNN_E_UNSUPPORTED, "GEMM bias epilogue: FP8 operands are not supported here");
    snn_cuda_gemm_state *g = snn_cuda_gemm_of(c);
    plan_key k;
    memset(&k, 0, sizeof k);
    k.trans_a = !!d->trans_a;
    k.trans_b = !!d->trans_b;
    k.M = d->M;
    k.N = d->N;
    k.K = d->K;
    k.a_type = d->a_type;
    k.b_type = d->b_type;
    k.c_type = d->c_type;
    k.lda = d->lda;
    k.ldb = d->ldb;
    k.ldc = d->ldc;
    k.tf32 = !!d->allow_tf32;
    k.fast = !!d->fast_accum;
    k.align_a = ptr_align(A);
    k.align_b = ptr_align(B);
    k.align_c = ptr_align(C);
    k.has_ascale = a_scale != NULL;
    k.has_bscale = b_scale != NULL;
    k.has_dscale = d_scale != NULL;
    k.has_amax = d_amax != NULL;
    k.beta_zero = beta == 0.0f;
    k.a_mode = (int)d->a_scale_mode;
    k.b_mode = (int)d->b_scale_mode;
    k.has_bias = !bias ? 0 : bias_type == SNN_BF16 ? 2 : bias_type == SNN_F16 ? 3 : 1;
    if (batch > 1) {
        k.batch = batch;
        k.stride_a = sa;
        k.stride_b = sb;
        k.stride_c = sc;
    }
    plan *p = NULL;
    for (int i = 0; i < g->n_plans; i++)
        if (!memcmp(&g->plans[i].key, &k, sizeof k)) {
            p = &g->plans[i];
            break;
        }
    cudaStream_t st = snn_cuda_stream_of(c);
    /* cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED at matmul time, seen on an H200 with
     * cuBLASLt 13) scale pointers that are not 16-byte aligned: stage such values through
     * aligned slots (a 4-byte device copy, captured like any other node). */
    const float *sp[3] = {a_scale, b_scale, d_scale};
    for (int i = 0; i < 3; i++)
        if (sp[i] && !snn_aligned(sp[i], 16)) {
            SNN_CU_TRY(cudaMemcpyAsync(g->scratch + 4 * i, sp[i], 4, cudaMemcpyDeviceToDevice, st));
            sp[i] = g->scratch + 4 * i;
        }
    a_scale = sp[0];
    b_scale = sp[1];
    d_scale = sp[2];
    float *amax_user = d_amax;
    if (d_amax && !snn_aligned(d_amax, 16)) d_amax = g->scratch + 12;
    if (!p) {
        if (g->n_plans == PLAN_CAP) { /* full: start over (plans are cheap to rebuild) */
            for (int i = 0; i < g->n_plans; i++) plan_release(&g->plans[i]);
            g->n_plans = 0;
        }
        p = &g->plans[g->n_plans];
        snn_status s = plan_build(g, &k, p);
        if (!s) s = plan_pointers(p, a_scale, b_scale, d_scale, d_amax);
        if (!s && bias) s = plan_bias(p, bias);
        if (!s) s = plan_choose(g, st, p, alpha, A, B, beta, C);
        if (s) {
            plan_release(p);
            return s;
        }
        g->n_plans++;
    } else {
        SNN_TRY(plan_pointers(p, a_scale, b_scale, d_scale, d_amax));
        if (bias) SNN_TRY(plan_bias(p, bias));
    }
    SNN_TRY(run_plan(g, st, p, &p->algo, alpha, A, B, beta, C));
    if (d_amax != amax_user)
        SNN_CU_TRY(cudaMemcpyAsync(amax_user, d_amax, 4, cudaMemcpyDeviceToDevice, st));
    return SNN_OK;
}
