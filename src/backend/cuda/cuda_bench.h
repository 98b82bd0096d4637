/* GPU workloads of `snn bench` (linear, fcsnn) and of the bench/cuda drivers: build a network
 * from host weights, warm up, capture the training step and the inference step as CUDA
 * graphs, time graph replays with CUDA events, check, tear down. One call is one
 * (trial, precision) run of the benchmark protocol (docs/benchmarks.md). C interface; the
 * implementation is CUDA C++ (cuda_bench_common.cu, cuda_bench_linear.cu,
 * cuda_bench_fcsnn.cu). Library rules: errors come back as snn_status with a message. */
#ifndef SNN_CUDA_BENCH_H
#define SNN_CUDA_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "snn/cuda_bench.h" /* the public part: types, check, run, device info */

#ifdef __cplusplus
extern "C" {
#endif

/* Internal to the three .cu files. */
snn_status snn_cuda_bench_run_linear(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
                                     const snn_cuda_bench_data *d, snn_cuda_bench_result *out);
snn_status snn_cuda_bench_run_fcsnn(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
                                    const snn_cuda_bench_data *d, snn_cuda_bench_result *out);

#ifdef __cplusplus
}
#endif
#endif
