/* LayerNorm over the last dimension on the GPU (cuda_layernorm.cu); src/nn/layernorm.c is the
 * reference. x, y [V][F] FP32 (V vectors of F features); save_mean/save_rstd [V] doubles
 * (both NULL in evaluation). Backward: dx overwritten (may be NULL), dgamma/dbeta [F] ADDED to;
 * work: device scratch of snn_cuda_layernorm_work_bytes(V, F) bytes. Enqueue only. */
#ifndef SNN_CUDA_LAYERNORM_H
#define SNN_CUDA_LAYERNORM_H

#include <stddef.h>

#include "snn/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t snn_cuda_layernorm_work_bytes(size_t V, int F);
snn_status snn_cuda_layernorm_forward(snn_cuda *c, const float *x, float *y, size_t V, int F,
                                      const float *gamma, const float *beta, float eps,
                                      double *save_mean, double *save_rstd);
snn_status snn_cuda_layernorm_backward(snn_cuda *c, const float *x, const float *dy, float *dx,
                                       size_t V, int F, const float *gamma,
                                       const double *save_mean, const double *save_rstd,
                                       float *dgamma, float *dbeta, void *work);
/* The same with y and dy stored as yt (F32, F16 or BF16; x and dx stay FP32). */
snn_status snn_cuda_layernorm_forward_t(snn_cuda *c, snn_dtype yt, const float *x, void *y, size_t V, int F,
                                        const float *gamma, const float *beta, float eps, double *save_mean,
                                        double *save_rstd);
/* dx_add (may be NULL; not overlapping dx): dx = dx_add + the gradient (backend.h). */
snn_status snn_cuda_layernorm_backward_t(snn_cuda *c, snn_dtype yt, const float *x, const void *dy, float *dx,
                                         const float *dx_add, size_t V, int F, const float *gamma, const double *save_mean,
                                         const double *save_rstd, float *dgamma, float *dbeta, void *work);

#ifdef __cplusplus
}
#endif
#endif
