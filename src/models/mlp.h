/* The dense MLP workload of the precision benchmarks (SpikingJelly's LinearWorkload):
 * a plain ANN, run with T = 1. */
#ifndef SNN_MODELS_MLP_H
#define SNN_MODELS_MLP_H

#include <stdint.h>

#include "snn/model.h"

/* (depth - 1) x [Linear(width, width) -> GELU] -> Linear(width, classes), where the first
 * Linear takes `in` features instead of `width` (depth = 1 is a single Linear(in, classes)).
 * `depth` counts the Linear layers. Parameters are named layers.<i>.weight / .bias. */
snn_status snn_mlp_create(int in, int width, int depth, int classes, uint64_t seed,
                          snn_model **out);

#endif
