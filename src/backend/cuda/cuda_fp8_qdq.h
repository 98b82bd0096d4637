/* The CUDA op table's fp8_qdq entry (backend.h, struct snn_fp8_qdq): FP8 quantise-dequantise
 * of one GEMM operand by the recipes' rules, bit-identical to the CPU table's
 * (src/backend/cpu/cpu_fp8.c -> src/precision/fp8_quant.c). Kernels in cuda_fp8_qdq.cu. */
#ifndef SNN_CUDA_FP8_QDQ_H
#define SNN_CUDA_FP8_QDQ_H

#include "snn/cuda.h"
#include "snn/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"

/* q->x and q->out are device memory; *amax is a host float (per-tensor amax, or the largest
 * block amax). scratch: 4 bytes of device memory the entry may overwrite (the amax word).
 * Checks the arguments as the CPU does. Waits for the stream (the amax comes back). */
snn_status snn_cuda_fp8_qdq(snn_cuda *c, const snn_fp8_qdq *q, void *scratch, float *amax);
/* The fp8_codes entry (backend.h, struct snn_fp8_codes): stream-ordered, no host wait; the
 * current recipe's amax word in scratch (4 bytes of device memory). */
snn_status snn_cuda_fp8_codes(snn_cuda *c, const snn_fp8_codes *q, void *scratch);

#ifdef __cplusplus
}
#endif
#endif
