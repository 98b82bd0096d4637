/* One training step with its values on the model's device (step.c): forward, loss, backward,
 * clip and update without the host in between; one graph on a table with graphs. */
#ifndef SNN_TRAIN_STEP_H
#define SNN_TRAIN_STEP_H

#include <stdint.h>

#include "snn/model.h"
#include "snn/optim.h"
#include "snn/prepare.h"

typedef struct snn_train_step snn_train_step;

typedef struct snn_train_step_result {
    float loss, grad_norm; /* grad_norm NaN when FP16 skipped the step, or when not measured */
    int correct, skipped, nonfinite;
} snn_train_step_result;

/* Whether the step runs this model, precision and optimizer: no data-parallel hook, the
 * model's own optimizer, a table with the step's entries, and SNN_TRAIN_STEP is not "host" in
 * the environment; on a device (not the CPU) only with SNN_TRAIN_STEP=device for now. */
int snn_train_step_supported(const snn_model *m, const snn_precision *p, const snn_optimizer *opt);
/* For a planned model: kind 0 cross-entropy of the mean over T, 1 the rate's squared error;
 * max_norm > 0 clips the gradient norm; measure_norm: report the norm without clipping too
 * (a pass over the gradients; else the result's grad_norm is NaN when not clipping); host_dx: a [T][N][classes] host array for the loss's
 * gradient on the CPU (a device model uses its own). Allocates everything the step needs. */
snn_status snn_train_step_create(snn_model *m, snn_precision *p, snn_optimizer *opt, int kind, float max_norm,
                                 int measure_norm, float *host_dx, snn_train_step **out);
/* One step on x ([T][N][features] f32: device memory of the model's device, or a host array,
 * best the model's input buffer) with labels [N] (host) at learning rate lr. */
snn_status snn_train_step_run(snn_train_step *s, const snn_tensor_view *x, const int32_t *labels, float lr,
                              snn_train_step_result *r);
void snn_train_step_free(snn_train_step *s);

#endif
