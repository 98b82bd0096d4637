/* The CPU table's convolution and pooling entries (backend.h says what each computes). */
#ifndef SNN_CPU_CONV_H
#define SNN_CPU_CONV_H

#include "backend/backend.h"

snn_status snn_cpu_im2col(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, float *col,
                          size_t ld);
snn_status snn_cpu_col2im(const snn_backend *be, const snn_conv_geom *g, int nb, const float *col, size_t ld,
                          snn_dtype round, float *dx);
snn_status snn_cpu_conv_scatter(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld,
                                const float *bias, snn_dtype round, float *y);
snn_status snn_cpu_conv_gather(const snn_backend *be, int nb, int O, size_t P, const float *src, float *dst,
                               size_t ld);
snn_status snn_cpu_conv_bias_grad(const snn_backend *be, size_t B, int O, size_t P, const float *dy, float *db);
snn_status snn_cpu_sum_groups_add(const snn_backend *be, int groups, size_t n, const float *part, float *dst);
snn_status snn_cpu_transpose(const snn_backend *be, size_t B, int R, int C, const float *x, float *y);
snn_status snn_cpu_maxpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y,
                                   int32_t *argmax);
snn_status snn_cpu_maxpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy,
                                    const int32_t *argmax, float *dx);
snn_status snn_cpu_avgpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y);
snn_status snn_cpu_avgpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy, float *dx);

#endif
