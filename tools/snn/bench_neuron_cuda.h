/* snn bench neuron on the GPU (bench_neuron_cuda.c); the context is bench_cuda_open's. */
#ifndef SNN_TOOL_BENCH_NEURON_CUDA_H
#define SNN_TOOL_BENCH_NEURON_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "snn/snn.h"

/* Copy bandwidth of the GPU in GB/s (read + write), median of `repeats` copies of `bytes`. */
double bench_neuron_cuda_copy_gbs(size_t bytes, int repeats);
/* Time `repeats` forward and backward calls (after `warmup`) over T x N neurons stored as io
 * (F32, BF16 or F16); seconds per call into fwd/bwd; ok_*: spikes in {0, 1}, finite h and gx. */
int bench_neuron_cuda_run(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype io, int warmup,
                          int repeats, uint64_t seed, double *fwd, double *bwd, int *ok_fwd, int *ok_bwd);
/* The same for the mixed-precision kernels (snn_cuda_neuron_forward_mp / backward_mp):
 * x, h_seq stored in S (1, 2 or 4 bytes a value), spikes FP32, gs and gx FP32; forward
 * arithmetic F, backward B (dtype rules of snn_neuron_forward_mp). No dL/dk (as the plain
 * rows). Returns -1 without CUDA. */
int bench_neuron_cuda_run_mp(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype S, snn_dtype F,
                             snn_dtype B, int warmup, int repeats, uint64_t seed, double *fwd, double *bwd,
                             int *ok_fwd, int *ok_bwd);

#endif
