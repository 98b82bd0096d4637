/* cuBLASLt state owned by a CUDA context (internal). */
#ifndef SNN_CUDA_GEMM_H
#define SNN_CUDA_GEMM_H

#include "snn/cuda.h"

typedef struct snn_cuda_gemm_state snn_cuda_gemm_state;

snn_status snn_cuda_gemm_state_create(size_t workspace_bytes, snn_cuda_gemm_state **out);
void snn_cuda_gemm_state_destroy(snn_cuda_gemm_state *g);
snn_cuda_gemm_state *snn_cuda_gemm_of(snn_cuda *c);

/* snn_cuda_gemm with cuBLASLt's bias epilogue: C[i][j] = alpha (A B)[i][j] + beta C[i][j] + bias[j]
 * (bias: N device FP32 values, 16-byte aligned; NULL = snn_cuda_gemm). Not for FP8 operands. */
snn_status snn_cuda_gemm_bias(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                              float beta, void *C, const float *a_scale, const float *b_scale, const float *d_scale,
                              float *d_amax, const float *bias);

/* The same with the bias stored as bias_type: F32, or the output's own 16-bit type (a 16-bit
 * GEMM module's rounded bias, snn_gemm.bias_store). No FP8 operands, no scales. */
snn_status snn_cuda_gemm_bias_t(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A, const void *B,
                                float beta, void *C, const void *bias, snn_dtype bias_type);

/* `batch` GEMMs of descriptor d (no FP8, no scales): operand i of the batch at A + i stride_a,
 * B + i stride_b, C + i stride_c (elements of their types; a stride of 0 reuses the operand). */
snn_status snn_cuda_gemm_batched(snn_cuda *c, const snn_cuda_gemm_desc *d, int batch, long long stride_a,
                                 long long stride_b, long long stride_c, float alpha, const void *A, const void *B,
                                 float beta, void *C);

#endif
