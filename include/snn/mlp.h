/* snn — the dense MLP workload of the precision benchmarks (SpikingJelly's LinearWorkload):
 * a plain ANN run with T = 1, whose GEMMs are what the precision modes (FP8 above all) can
 * speed up, with no neuron or time-step work in the way. `snn bench linear` and
 * `snn bench crossover` measure on it. */
#ifndef SNN_MLP_H
#define SNN_MLP_H

#include <stdint.h>

#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (depth - 1) x [Linear(width, width) -> GELU] -> Linear(width, classes), where the first
 * Linear takes `in` features instead of `width` (depth = 1 is a single Linear(in, classes)).
 * `depth` counts the Linear layers. Parameters are named layers.<i>.weight / .bias and drawn
 * from `seed`. */
snn_status snn_mlp_create(int in, int width, int depth, int classes, uint64_t seed, snn_model **out);

#ifdef __cplusplus
}
#endif
#endif
