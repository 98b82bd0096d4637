/* Internal: the argument rules of the mixed-precision neuron path (snn_neuron_forward_mp /
 * backward_mp in include/snn/neuron.h), shared with the GPU kernels (cuda_neuron_mp.cu) so
 * both refuse exactly the same S/F/B combinations with the same messages. */
#ifndef SNN_NEURON_MP_H
#define SNN_NEURON_MP_H

#include "snn/neuron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options present, T >= 0, S/F (and B when with_b) among f32, f16, bf16, f8e4m3, f8e5m2, and
 * FP8 arithmetic only in the storage's own FP8 format. */
snn_status snn_neuron_mp_check(const snn_neuron_opts *o, int T, snn_dtype S, snn_dtype F, snn_dtype B,
                               int with_b);

#ifdef __cplusplus
}
#endif
#endif
