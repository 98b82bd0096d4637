/* The CPU table's BatchNorm, dropout, token-mean and spiking self-attention entries
 * (cpu_layers.c; backend.h says what each computes). */
#ifndef SNN_CPU_LAYERS_H
#define SNN_CPU_LAYERS_H

#include "backend/backend.h"

/* BatchNorm: x (and dx) FP32 only here (xt must be SNN_F32; batchnorm_x16 = 0). */
snn_status snn_cpu_batchnorm_stats(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, const void *x,
                                   const double *sum, double count, double *acc);
snn_status snn_cpu_batchnorm_forward(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, int training,
                                     float eps, float momentum, double count, const double *sum,
                                     const double *sqsum, const void *x, const float *w, const float *b,
                                     float *running_mean, float *running_var, double *mean, double *invstd,
                                     float *y);
snn_status snn_cpu_batchnorm_backward_sums(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                           const void *x, const float *dy, const double *mean,
                                           const double *invstd, double *gsum, double *gdot, float *dw,
                                           float *db);
snn_status snn_cpu_batchnorm_backward_input(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                            int training, double count, const void *x, const float *dy,
                                            const float *w, const double *mean, const double *invstd,
                                            const double *gsum, const double *gdot, void *dx);
snn_status snn_cpu_dropout_mask(const snn_backend *be, uint64_t seed, uint64_t stream, uint64_t base, float p,
                                size_t n, float *mask);
snn_status snn_cpu_dropout_apply(const snn_backend *be, int T, size_t n, const float *x, const float *mask,
                                 float *y);
snn_status snn_cpu_token_mean_forward(const snn_backend *be, size_t rows, int L, const float *x, float *y);
snn_status snn_cpu_token_mean_backward(const snn_backend *be, size_t rows, int L, const float *dy, float *dx);
snn_status snn_cpu_ssa_forward(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                               const float *x, float *y, void *work);
snn_status snn_cpu_ssa_backward(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                                const float *x, const float *dy, float *dx, void *work);
size_t snn_cpu_ssa_work_bytes(const snn_backend *be, size_t B, int C, int L, int heads);

#endif
