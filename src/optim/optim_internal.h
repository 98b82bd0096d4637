#ifndef SNN_OPTIM_INTERNAL_H
#define SNN_OPTIM_INTERNAL_H

#include "backend/backend.h"
#include "snn/optim.h"

/* snn_clip_grad_norm on the gradients' device: *norm_out = ||g||_2 (FP32 of the double sum);
 * with max_norm >= 0 the gradients are scaled by max_norm / (norm + 1e-6) when that is < 1. */
snn_status snn_clip_grad_norm_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out);

/* The same measurement without the scaling pass: *coef_out is the factor the gradients
 * would be multiplied by (1 when they are not clipped), for snn_optimizer_step_scaled to
 * apply inside the update. One pass over the gradients fewer, the same updated weights bit
 * for bit; the gradient array keeps the unclipped values (a coefficient that underflows to
 * zero is the exception: it is applied to the array here and *coef_out stays 1). */
snn_status snn_clip_coef_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out,
                            float *coef_out);

/* snn_optimizer_step with every gradient multiplied by gscale (in (0, 1]; one rounded
 * product per element, backend.h's snn_optim_update.gscale) as the update reads it. */
snn_status snn_optimizer_step_scaled(snn_optimizer *opt, float lr, int skip, float gscale);

/* snn_optimizer_step_scaled that also writes the copies of the updated weights (backend.h's
 * snn_optim_copy: offsets into this optimizer's parameters, sorted, disjoint) in the update's
 * pass. Nothing is written when the step is skipped. */
struct snn_optim_copy;
snn_status snn_optimizer_step_copies(snn_optimizer *opt, float lr, int skip, float gscale,
                                     const struct snn_optim_copy *copies, int n_copies);

/* snn_optimizer_create over arrays in the memory of `be`'s device (params, grads and the
 * state live there; decay_mask is host memory, copied). */
snn_status snn_optimizer_create_on(const snn_backend *be, const snn_optim_opts *o, size_t n, float *params,
                                   const float *grads, const uint8_t *decay_mask, snn_optimizer **out);

/* The training step on a device (src/train/step.c) runs the update as the op table's
 * optim_step. begin: the host's part before it (a restored state uploaded, the learning rate
 * checked; lr < 0 means the optimizer's own) and the update's scalars and arrays; end: after
 * it, with what the device reported (a skipped update leaves the step count alone). */
typedef struct snn_optim_arrays {
    size_t n;
    float *w;
    const float *g;
    float *s0, *s1;
    const uint8_t *mask;
} snn_optim_arrays;
snn_status snn_optimizer_begin_step(snn_optimizer *opt, float lr, snn_optim_update *u, snn_optim_arrays *a);
void snn_optimizer_end_step(snn_optimizer *opt, int skipped, int nonfinite);

/* After every update, ++*version (a model's param_version: an optimizer over a slice of a
 * model's parameters must report its writes too). */
void snn_optimizer_track_version(snn_optimizer *opt, uint64_t *version);

#endif
