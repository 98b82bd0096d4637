/* Helpers shared by the training loops (src/train/loop.c, evaluate.c). */
#ifndef SNN_TRAIN_INTERNAL_H
#define SNN_TRAIN_INTERNAL_H

#include <stddef.h>
#include "snn/model.h"

/* SNN_E_NUMERIC naming the first non-finite parameter or buffer of m; `what` prefixes it. */
snn_status snn_train_model_finite(const snn_model *m, const char *what);
/* *out = a * b * c; 0 on overflow. */
int snn_train_size_mul(size_t *out, size_t a, size_t b, size_t c);

#endif
