/* cuBLASLt state owned by a CUDA context (internal). */
#ifndef SNN_CUDA_GEMM_H
#define SNN_CUDA_GEMM_H

#include "snn/cuda.h"

typedef struct snn_cuda_gemm_state snn_cuda_gemm_state;

snn_status snn_cuda_gemm_state_create(size_t workspace_bytes, snn_cuda_gemm_state **out);
void snn_cuda_gemm_state_destroy(snn_cuda_gemm_state *g);
snn_cuda_gemm_state *snn_cuda_gemm_of(snn_cuda *c);

#endif
