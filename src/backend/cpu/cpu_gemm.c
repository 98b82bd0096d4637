/* CPU GEMM: FP32 through CBLAS (OpenBLAS or BLIS, chosen at configure time). */
#include <cblas.h>

#include "backend/backend.h"

static void cpu_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static const snn_backend cpu_backend = {
    .name = "cpu",
    .gemm_f32 = cpu_gemm_f32,
};

const snn_backend *snn_backend_cpu(void) { return &cpu_backend; }
