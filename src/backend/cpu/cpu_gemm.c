/* CPU GEMM: FP32 through CBLAS (OpenBLAS or BLIS, chosen at configure time), with the
 * descriptor's epilogue. 16-bit operands arrive already rounded (snn_gemm.ab_type), so the
 * FP32 product of two such values is exact and the CPU computes what a 16-bit GEMM with
 * FP32 accumulation does, up to summation order. */
#include <cblas.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"

void snn_cpu_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

snn_status snn_cpu_gemm(const snn_backend *be, const snn_gemm *g) {
    if (!g || g->M < 0 || g->N < 0 || g->K < 0)
        return snn_error(SNN_E_INVALID, "gemm: bad descriptor (NULL or negative sizes)");
    if (g->M == 0 || g->N == 0) return SNN_OK;
    if (!g->C || (g->K && (!g->A || !g->B)))
        return snn_error(SNN_E_INVALID, "gemm: NULL operand for a %dx%dx%d product", g->M, g->N, g->K);
    /* row-major leading dimensions: at least the stored row's width */
    int a_cols = g->trans_a ? g->M : g->K, b_cols = g->trans_b ? g->K : g->N;
    if (g->lda < (a_cols > 1 ? a_cols : 1) || g->ldb < (b_cols > 1 ? b_cols : 1) || g->ldc < (g->N > 1 ? g->N : 1))
        return snn_error(SNN_E_SHAPE, "gemm: leading dimensions %d, %d, %d are smaller than the rows they hold "
                         "(%d, %d, %d)", g->lda, g->ldb, g->ldc, a_cols, b_cols, g->N);
    if (g->a_store != SNN_F32 || g->b_store != SNN_F32 || g->c_store != SNN_F32 || g->bias_store != SNN_F32)
        return snn_error(SNN_E_UNSUPPORTED,
                         "gemm: the CPU table takes FP32 operands only (stored as %s, %s, %s, bias %s)",
                         snn_dtype_name(g->a_store), snn_dtype_name(g->b_store), snn_dtype_name(g->c_store),
                         snn_dtype_name(g->bias_store));
    float beta = g->beta;
    if (g->bias) {
        /* C = beta C + bias, then the product accumulates onto it */
        for (int i = 0; i < g->M; i++) {
            float *c = g->C + (size_t)i * g->ldc;
            if (beta == 0.0f)
                for (int j = 0; j < g->N; j++) c[j] = g->bias[j];
            else
                for (int j = 0; j < g->N; j++) c[j] = beta * c[j] + g->bias[j];
        }
        beta = 1.0f;
    }
    snn_cpu_gemm_f32(g->trans_a, g->trans_b, g->M, g->N, g->K, g->alpha, g->A, g->lda, g->B, g->ldb, beta, g->C,
                     g->ldc);
    if (g->c_round != SNN_F32)
        for (int i = 0; i < g->M; i++) SNN_TRY(snn_cpu_round(be, g->c_round, g->C + (size_t)i * g->ldc, g->C + (size_t)i * g->ldc, (size_t)g->N));
    return SNN_OK;
}
