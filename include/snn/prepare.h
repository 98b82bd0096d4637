/* snn — preparing a model for a precision configuration, and the one training step that
 * works for all four modes (SpikingJelly's prepare_model_for_precision and
 * PrecisionArtifacts, in C).
 *
 * Order, enforced: build the model (and move it to its device) -> prepare -> create the
 * optimizer. An optimizer created before prepare is refused by prepare (FP8 preparation
 * changes how parameters are used, and an earlier optimizer would not see it).
 *
 * What prepare does, in the reference's order:
 *   1. capability check for (mode, recipe, device): a combination that cannot run is an
 *      error saying why, never a fallback. The CPU runs every mode and recipe exactly
 *      (FP8 by quantise -> dequantise -> FP32 GEMM).
 *   2. module conversion: fp16/bf16: every GEMM module (Linear, Conv1d, Conv2d) computes on
 *      16-bit operands with FP32 accumulation and stores its output in 16 bits; fp8: in
 *      addition, aligned Linear (in % 16 == 0, out % 8 == 0) and pointwise Conv1d run FP8
 *      GEMMs (E4M3 forward operands, E5M2 gradients) under the recipe; norms, neurons,
 *      softmax and losses stay FP32.
 *   3. fp8 that converted nothing is an error.
 *   4. neuron precision (storage / forward / backward dtypes) on every IF/LIF/PLIF module,
 *      all or nothing.
 *   5. the FP16 loss scaler. */
#ifndef SNN_PREPARE_H
#define SNN_PREPARE_H

#include "error.h"
#include "model.h"
#include "optim.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_precision snn_precision;

/* device: "cpu" (or NULL), "cuda", "cuda:N": the device the model is on (place it first with
 * snn_model_to; a different device is refused). Every mode runs on both devices (fp8 on a
 * GPU as the CPU's exact quantise-dequantise emulation in this version). The model is changed in place; free the
 * precision object before the model. */
snn_status snn_prepare_model_for_precision(snn_model *m, const char *device,
                                           const snn_precision_config *cfg,
                                           snn_precision **out);
void snn_precision_free(snn_precision *p);
const snn_precision_config *snn_precision_config_of(const snn_precision *p);
/* The prepared precision of a model (NULL if none). */
snn_precision *snn_model_precision(snn_model *m);

/* Backward + optimizer step for every mode. dy is dL/dy of the model's last forward
 * (unscaled; it is not modified). fp16: dy is multiplied by the loss scale, gradients are
 * unscaled before clipping, a step with inf/nan gradients is skipped and the scale backs
 * off. clip_norm > 0 clips the global gradient norm. lr < 0 uses the optimizer's lr.
 * *grad_norm (may be NULL) receives the pre-clip norm of the unscaled gradients (NaN if
 * not finite); *skipped (may be NULL) whether the step was skipped. FP8 delayed scaling
 * updates its scales after the step. Zeroes the gradients first. */
snn_status snn_precision_backward(snn_precision *p, const float *dy, snn_optimizer *opt,
                                  float lr, float clip_norm, float *grad_norm, int *skipped);

/* JSON report: {"config", "policy", "capability_report", "conversion_report", "neurons"}.
 * The string is owned by p and valid until the next call or snn_precision_free. */
const char *snn_precision_describe(snn_precision *p);

/* Spike-aware FP8 (on by default): a converted GEMM whose input comes straight from an
 * IF/LIF/PLIF neuron takes the spikes as E4M3 with unit scale (0x00 / 0x38), skipping the
 * amax pass and the quantisation of that operand. Spikes are 0/1, exact in E4M3, so the
 * result is bit-identical to the generic path. Switch it off to compare. */
snn_status snn_precision_set_spike_fp8(snn_precision *p, int enabled);
/* Number of modules that take the spike path (0 when switched off). */
int snn_precision_spike_fp8_modules(const snn_precision *p);

/* Current loss scale (1 when the mode has no scaler). */
float snn_precision_loss_scale(const snn_precision *p);

/* Bytes of the precision's own scratch: the 16-bit / FP8 operand copies of the converted
 * modules and fp16's scaled dL/dy, sized by snn_model_plan (0 before it, and for NULL).
 * Memory reports add it to snn_model_arena_bytes, which does not count it. */
size_t snn_precision_scratch_bytes(const snn_precision *p);

/* ---- FP8 delayed-scaling state as flat arrays ----
 * The layout of the GPU runner (snn_cuda_model_fp8_state in cuda.h): the converted modules
 * that keep FP8 state, in module order; per module three tensor states (input, weight,
 * output gradient). scales [n_modules][3], histories [n_modules][3][history_len]. A trainer
 * that keeps the state elsewhere (the GPU) carries it in and out of the CPU's checkpoint
 * format through a precision prepared only for that (snn_prepare_model_for_state).
 *
 * Export: *n_modules (may be NULL) receives the count (0 without FP8 modules), *history_len
 * (may be NULL) the amax history length (0 for the stateless recipes: current and block
 * scaling); scales and histories (may be NULL: only the counts) receive the values. */
snn_status snn_precision_fp8_export_state(const snn_precision *p, int *n_modules, int *history_len,
                                          float *scales, float *histories);
/* Load state in that layout. history_len 0 (a stateless recipe) loads nothing and leaves the
 * precision's initial state; otherwise every FP8 state of p must have history_len values
 * and the arrays must cover at least p's FP8 modules (n_modules), else SNN_E_STATE. */
snn_status snn_precision_fp8_load_state(snn_precision *p, int n_modules, int history_len, const float *scales,
                                        const float *histories);
/* Prepare a CPU precision over m only to carry state in and out of checkpoints
 * (snn_training_checkpoint_restore / _save with the FP8 state above), when m already has its
 * optimizer: snn_prepare_model_for_precision refuses that, because an optimizer created
 * before preparation would not train what FP8 conversion changes; a precision used for
 * state only trains nothing. Free it (snn_precision_free) before training m elsewhere. */
snn_status snn_prepare_model_for_state(snn_model *m, const snn_precision_config *cfg, snn_precision **out);

/* ---- training checkpoints ----
 * A training checkpoint is a model checkpoint (snn_model_load opens it) plus, as plain
 * tensors and metadata: the precision configuration ("snn_precision_config"), FP8 recipe
 * state ("__precision__.<module>.<input|weight|grad>.scale" and ".amax_history"), the loss
 * scaler ("__precision__.loss_scale", "__precision__.growth_tracker"), the optimizer state
 * ("__optim__.<name>", metadata "optimizer", "optimizer_steps") and the model's step count.
 * Nothing executable. p and opt may be NULL. */
struct snn_ckpt;
snn_status snn_training_checkpoint_save(snn_model *m, snn_precision *p, snn_optimizer *opt,
                                        const char *path, const char *const *meta_kv);
/* Restore into a model built from the same checkpoint and prepared with the same precision
 * configuration (a different one is refused: the message names both). Loads weights, FP8
 * and scaler state, optimizer state and the step count, so training continues
 * bit-identically. p and opt may be NULL (then their state is not restored). */
snn_status snn_training_checkpoint_restore(snn_model *m, snn_precision *p, snn_optimizer *opt,
                                           const struct snn_ckpt *c);
/* The same for a trainer that keeps the precision state itself (the GPU runner): cfg is the
 * configuration to record / to match (NULL = fp32; fp8 is refused: its scaling state lives in
 * the prepared precision); scaler is the FP16 loss scaler's state, saved / restored when cfg
 * is fp16 (required then, ignored otherwise). The files are the same as above, so a
 * checkpoint written either way resumes the other way. */
snn_status snn_training_checkpoint_save_cfg(snn_model *m, const snn_precision_config *cfg,
                                            const snn_loss_scaler *scaler, snn_optimizer *opt,
                                            const char *path, const char *const *meta_kv);
snn_status snn_training_checkpoint_restore_cfg(snn_model *m, const snn_precision_config *cfg,
                                               snn_loss_scaler *scaler, snn_optimizer *opt,
                                               const struct snn_ckpt *c);
/* Check only the precision: the checkpoint's recorded configuration must equal cfg
 * (a checkpoint without one counts as fp32). */
snn_status snn_precision_check_checkpoint(const snn_precision_config *cfg, const struct snn_ckpt *c);

#ifdef __cplusplus
}
#endif
#endif
