/* The operation table: what a device must provide. The CPU table is the reference;
 * a CUDA table implements the same entries. Pointers are device pointers of that backend. */
#ifndef SNN_BACKEND_H
#define SNN_BACKEND_H

#include <stddef.h>

typedef struct snn_backend {
    const char *name;
    /* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, FP32 (BLAS on the CPU). */
    void (*gemm_f32)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);
} snn_backend;

const snn_backend *snn_backend_cpu(void);

#endif
