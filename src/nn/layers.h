/* Constructors of the built-in modules. Each returns NULL only on allocation failure;
 * shape errors are reported by setup. */
#ifndef SNN_NN_LAYERS_H
#define SNN_NN_LAYERS_H

#include <stdlib.h>

#include "nn/module.h"

/* containers */
snn_module *snn_sequential_new(void);
/* A Sequential container (its own ops table, also while wrapped; never its name). */
int snn_module_is_sequential(const snn_module *m);
/* Output buffer of child i of Sequential m after reserve (NULL for the last child, which
 * writes into the caller's y). Stored as child i's out_store (16-bit between typed kinds). */
const float *snn_sequential_output(snn_module *m, int i);
/* y = x + inner(x); inner must keep the shape. Takes ownership of inner. */
snn_module *snn_residual_new(snn_module *inner);

/* stateless layers (seq-to-ANN over the B = T*N rows) */
snn_module *snn_linear_new(int in_features, int out_features, int bias);
snn_module *snn_flatten_new(void);
snn_module *snn_conv1d_new(int in_ch, int out_ch, int kernel, int stride, int padding, int bias);
snn_module *snn_conv2d_new(int in_ch, int out_ch, int kernel, int stride, int padding, int bias);
snn_module *snn_batchnorm_new(int features, float eps, float momentum); /* 1d ([C] or [C,L]) and 2d ([C,H,W]) */
/* SyncBatchNorm: when m is a BatchNorm, its training statistics and backward projections are
 * summed with `sum` (over a data-parallel group; NULL turns it off) before they are used.
 * Returns 1 for a BatchNorm, 0 (nothing changed) for any other module. */
int snn_batchnorm_set_sync(snn_module *m, snn_status (*sum)(void *ctx, double *buf, size_t n), void *ctx);
snn_module *snn_layernorm_new(int features, float eps);                 /* over the last dim */
snn_module *snn_maxpool2d_new(int kernel, int stride, int padding);
snn_module *snn_avgpool2d_new(int kernel, int stride, int padding);
snn_module *snn_dropout_new(float p);   /* mask drawn per sample, fixed across the T steps */
snn_module *snn_gelu_new(void);

/* helpers shared by modules */
/* Truncated normal (|z| <= 2) with std `std` into w[0..n). */
void snn_init_trunc_normal(float *w, size_t n, float std, snn_rng *rng);
/* Uniform(-bound, bound), PyTorch's default Linear/Conv init uses bound = 1/sqrt(fan_in). */
void snn_init_uniform(float *w, size_t n, float bound, snn_rng *rng);

#endif
