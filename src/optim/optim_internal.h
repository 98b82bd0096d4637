#ifndef SNN_OPTIM_INTERNAL_H
#define SNN_OPTIM_INTERNAL_H

#include "backend/backend.h"
#include "snn/optim.h"

/* snn_clip_grad_norm on the gradients' device: *norm_out = ||g||_2 (FP32 of the double sum);
 * with max_norm >= 0 the gradients are scaled by max_norm / (norm + 1e-6) when that is < 1. */
snn_status snn_clip_grad_norm_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out);

/* snn_optimizer_create over arrays in the memory of `be`'s device (params, grads and the
 * state live there; decay_mask is host memory, copied). */
snn_status snn_optimizer_create_on(const snn_backend *be, const snn_optim_opts *o, size_t n, float *params,
                                   const float *grads, const uint8_t *decay_mask, snn_optimizer **out);

/* After every update, ++*version (a model's param_version: an optimizer over a slice of a
 * model's parameters must report its writes too). */
void snn_optimizer_track_version(snn_optimizer *opt, uint64_t *version);

#endif
