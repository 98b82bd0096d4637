#ifndef SNN_OPTIM_INTERNAL_H
#define SNN_OPTIM_INTERNAL_H

#include "backend/backend.h"

/* snn_clip_grad_norm on the gradients' device: *norm_out = ||g||_2 (FP32 of the double sum);
 * with max_norm >= 0 the gradients are scaled by max_norm / (norm + 1e-6) when that is < 1. */
snn_status snn_clip_grad_norm_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out);

#endif
