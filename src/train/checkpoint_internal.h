/* Helpers shared by the checkpoint loaders (model weights here, training state in
 * src/precision/prec_ckpt.c). */
#ifndef SNN_CHECKPOINT_INTERNAL_H
#define SNN_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include "snn/checkpoint.h"
#include "snn/model.h"

/* Index of the first NaN/inf among n little-endian F32 values at p (any alignment), or n. */
size_t snn_ckpt_first_nonfinite_f32(const void *p, size_t n);
/* Every model tensor present in the checkpoint as F32 of the model's shape and finite;
 * nothing is copied. */
snn_status snn_model_check_weights(const snn_model *m, const snn_ckpt *ckpt);

#endif
