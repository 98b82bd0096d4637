/* snn — optimizers over one flat FP32 parameter array, gradient clipping and learning-rate
 * schedules.
 *
 * The optimizer updates FP32 master weights in place from an FP32 gradient array of the
 * same length. It keeps pointers to both arrays (it does not copy them), so they must
 * outlive it. Its state (moments, momentum buffer, step count) is FP32 / integer and can
 * be read and written for checkpoints; restoring all of it gives a bit-identical
 * continuation. A step allocates nothing and is elementwise, so its result does not depend
 * on the number of OpenMP threads.
 *
 * The updates follow PyTorch's torch.optim (1.13) exactly, in FP32 with the same scalar
 * coefficients computed in double:
 *
 *   SGD   g = grad + wd*p                        (L2 decay, only where decay applies)
 *         buf = g on the first step, else buf = momentum*buf + (1-dampening)*g
 *         d = nesterov ? g + momentum*buf : buf  (d = g when momentum == 0)
 *         p = p - lr*d
 *   Adam  g = grad + wd*p                        (L2 decay, only where decay applies)
 *         t = t+1; m = beta1*m + (1-beta1)*g; v = beta2*v + (1-beta2)*g*g
 *         p = p - (lr/(1-beta1^t)) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
 *   AdamW p = p*(1 - lr*wd)                      (decoupled decay, only where it applies)
 *         then Adam's update with g = grad
 */
#ifndef SNN_OPTIM_H
#define SNN_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_optim_kind {
    SNN_OPTIM_SGD = 0,
    SNN_OPTIM_ADAM = 1,
    SNN_OPTIM_ADAMW = 2
} snn_optim_kind;

/* Options. Unlike the model options, zero fields mean zero (momentum 0 and weight decay 0
 * are meaningful); start from snn_optim_defaults(kind) and override what you need. */
typedef struct snn_optim_opts {
    snn_optim_kind kind;
    float lr;            /* base learning rate; used by a step given lr < 0 */
    float weight_decay;  /* SGD/Adam: L2 added to the gradient; AdamW: decoupled */
    /* SGD */
    float momentum;      /* 0 = plain SGD (no state) */
    float dampening;     /* torch default 0 */
    int nesterov;        /* needs momentum > 0 and dampening == 0 */
    /* Adam, AdamW */
    float beta1, beta2;  /* in [0, 1) */
    float eps;           /* > 0 */
} snn_optim_opts;

/* PyTorch's defaults: SGD lr 0.01 (torch has none; ours), momentum 0, wd 0;
 * Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0; AdamW the same with wd 0.01. */
snn_optim_opts snn_optim_defaults(snn_optim_kind kind);
/* "sgd", "adam", "adamw" (NULL for an unknown kind) and the reverse (-1 if unknown). */
const char *snn_optim_kind_name(snn_optim_kind kind);
int snn_optim_kind_parse(const char *name);

typedef struct snn_optimizer snn_optimizer;

/* An optimizer over params[0..n) with gradients grads[0..n).
 * decay_mask: NULL = weight decay applies to every element; else decay applies to element
 * i iff decay_mask[i] != 0 (copied; biases and norm parameters usually skip decay).
 * The state starts at zero with step count 0. */
snn_status snn_optimizer_create(const snn_optim_opts *o, size_t n, float *params,
                                const float *grads, const uint8_t *decay_mask,
                                snn_optimizer **out);
/* An optimizer over the model's flat parameter and gradient arrays, with the decay mask
 * taken from each tensor's `decay` field (snn_model_tensor). It also marks the model as
 * having an optimizer, so that a later precision prepare can refuse to run. */
snn_status snn_optimizer_create_for_model(const snn_optim_opts *o, snn_model *m,
                                          snn_optimizer **out);
void snn_optimizer_free(snn_optimizer *opt);

/* One update with learning rate lr (lr < 0: the lr given at creation). skip != 0 (the loss
 * scaler found inf/nan in the gradients) leaves params, state and the step count untouched.
 * Fails (changing nothing) on a non-finite lr. */
snn_status snn_optimizer_step(snn_optimizer *opt, float lr, int skip);

/* 1 if the last (non-skipped) step wrote a NaN or an infinity into the parameters: the
 * check is fused into the update (an OR over the new values, no extra pass), so a loop can
 * stop a run whose weights diverged without reading them back. Cleared by every step. */
int snn_optimizer_nonfinite(const snn_optimizer *opt);

const snn_optim_opts *snn_optimizer_opts(const snn_optimizer *opt);
size_t snn_optimizer_numel(const snn_optimizer *opt);
/* The parameter array the optimizer updates (NULL for NULL): lets a caller check that an
 * optimizer belongs to a given model (snn_model_params). */
const float *snn_optimizer_params(const snn_optimizer *opt);
/* 1 if opt updates the parameters of m (on whatever device m is placed), 0 otherwise. */
int snn_optimizer_for_model(const snn_optimizer *opt, const snn_model *m);

/* Checkpointing. State tensors, each of snn_optimizer_numel() floats, in a fixed order:
 *   SGD with momentum: "momentum_buffer"; SGD without momentum: none;
 *   Adam/AdamW: "exp_avg", "exp_avg_sq".
 * `data` points into the optimizer: read it to save, write it to restore. */
typedef struct snn_optim_state {
    const char *name;
    size_t numel;
    float *data;
} snn_optim_state;
size_t snn_optimizer_num_states(const snn_optimizer *opt);
snn_status snn_optimizer_state(snn_optimizer *opt, size_t i, snn_optim_state *info);
/* By name; SNN_E_INVALID if this optimizer has no such state. */
snn_status snn_optimizer_find_state(snn_optimizer *opt, const char *name, snn_optim_state *info);
/* Completed (non-skipped) steps. Adam's bias correction uses it; SGD's momentum buffer is
 * taken to be initialised iff it is > 0. Restore it together with the state tensors. */
long snn_optimizer_steps(const snn_optimizer *opt);
snn_status snn_optimizer_set_steps(snn_optimizer *opt, long steps);

/* Clip the global L2 norm of grads[0..n) (all gradients as one vector, accumulated in
 * double in a fixed order, so the result does not depend on the thread count).
 * As torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), clamped to 1, and
 * grads *= coef when coef < 1. Returns the norm before clipping. A non-finite norm is
 * returned as is and the gradients are left alone (the loss scaler decides what to do).
 * A negative or NaN max_norm only measures (no clipping). */
float snn_clip_grad_norm(float *grads, size_t n, float max_norm);

/* Learning-rate schedules. `step` counts optimizer steps from 0 (the lr of the first step).
 * With W = warmup_steps, f = warmup_start_factor, base = base_lr, s = step - W:
 *   step < W:  lr = base * (f + (1 - f) * step / W)        (linear warm-up, as LinearLR)
 *   step >= W: constant  lr = base
 *              cosine    lr = min_lr + (base - min_lr) * (1 + cos(pi * s / C)) / 2
 *                        with C = total_steps - W; lr = min_lr for s >= C
 *                        (CosineAnnealingLR(T_max=C, eta_min=min_lr) for s <= C)
 *              step      lr = base * gamma^floor(s / step_size)   (StepLR)
 * i.e. torch's SequentialLR([LinearLR(f, total_iters=W), main], milestones=[W]).
 * Computed in double, returned as float. */
typedef enum snn_lr_kind {
    SNN_LR_CONSTANT = 0,
    SNN_LR_COSINE = 1,
    SNN_LR_STEP = 2
} snn_lr_kind;

typedef struct snn_lr_sched {
    snn_lr_kind kind;
    float base_lr;
    long warmup_steps;          /* 0 = no warm-up */
    float warmup_start_factor;  /* in [0, 1]: lr of step 0 is base_lr * factor */
    long total_steps;           /* cosine: all steps, warm-up included (> warmup_steps) */
    float min_lr;               /* cosine: final lr, in [0, base_lr] */
    long step_size;             /* step: steps between decays (> 0) */
    float gamma;                /* step: decay factor (> 0) */
} snn_lr_sched;

/* Check a schedule once at set-up (a message says which field is wrong). */
snn_status snn_lr_sched_check(const snn_lr_sched *s);
/* The lr for `step` (step < 0 is taken as 0); NaN for a schedule that fails the check, so
 * that snn_optimizer_step refuses it instead of training with a wrong rate. */
float snn_lr_schedule(const snn_lr_sched *s, long step);
/* "constant", "cosine", "step" and the reverse (-1 if unknown). */
const char *snn_lr_kind_name(snn_lr_kind kind);
int snn_lr_kind_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
