/* snn — the GPU workloads of `snn bench` (linear, fcsnn) and of the bench/cuda drivers:
 * build a network from host weights, warm up, capture the training step and the inference
 * step as CUDA graphs, time graph replays with CUDA events, check, tear down. One call is one
 * (trial, precision) run of the benchmark protocol (docs/benchmarks.md). Built with
 * -DSNN_CUDA=ON; errors come back as snn_status with a message.
 *
 * The library's CUDA sources declare the same types in src/backend/cuda/cuda_bench.h; the
 * two must stay identical (that header is meant to include this one). */
#ifndef SNN_CUDA_BENCH_API_H
#define SNN_CUDA_BENCH_API_H

#include <stddef.h>
#include <stdint.h>

#include "cuda.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SNN_CUDA_BENCH_FP32 = 0, /* FP32 GEMMs, TF32 off */
    SNN_CUDA_BENCH_FP16 = 1, /* FP16 operands/activations, FP32 master weights, loss scale 1024 */
    SNN_CUDA_BENCH_BF16 = 2, /* BF16 operands/activations, FP32 master weights */
    SNN_CUDA_BENCH_FP8 = 3   /* E4M3 forward / E5M2 gradient GEMMs, per-tensor scaling
                                (current, or delayed with cfg.fp8_delayed), or block scaling
                                with cfg.fp8_block */
} snn_cuda_bench_precision;

typedef enum { SNN_CUDA_BENCH_LINEAR = 0, SNN_CUDA_BENCH_FCSNN = 1 } snn_cuda_bench_kind;

typedef struct snn_cuda_bench_cfg {
    snn_cuda_bench_kind kind;
    int T;                         /* time steps (1 for linear) */
    int N;                         /* batch */
    int in, width, depth, classes; /* depth counts Linear layers (fcsnn: depth-1 LIF blocks) */
    float tau;                     /* fcsnn LIF time constant */
    float lr, momentum;            /* SGD (linear: momentum must be 0: no momentum buffers) */
    int warmup, training_steps, inference_steps;
    int overlap_optimizer;         /* fcsnn: SGD of each layer on a second stream */
    int autotune;                  /* time cuBLASLt candidates on the first call of a shape */
    /* FP8 recipe (zero = per-tensor current scaling). fp8_delayed 1: delayed scaling, the
     * amax histories and scales on the device (cuda_bench_impl.h), fp8_history_len values
     * (0 = 1024), scale target fp8_max·2^-fp8_margin, fp8_most_recent 1: the window is this
     * step's amax only ("most_recent"; default "max"). */
    int fp8_delayed, fp8_history_len, fp8_margin, fp8_most_recent;
    /* fp8_block 1: Float8BlockScaling instead (E4M3 everywhere, 1x128 vectors for inputs and
     * gradients, 128x128 tiles for weights, cuBLASLt's block-scale modes; every GEMM
     * dimension a multiple of 128); scales powers of two unless fp8_block_fp32_scales. */
    int fp8_block, fp8_block_fp32_scales;
    /* fcsnn neuron mixed precision (--neuron-storage/--neuron-fwd/--neuron-bwd; storage
     * UNSET = the plain fused FP32 neurons). With a storage dtype S every LIF layer runs
     * cuda_neuron_mp's kernels: the Linear output plus bias (rounded to the activation
     * type, as the CPU's converted Linear writes it) converted to S, charge and reset in F,
     * h_seq saved in S, BPTT in B, dL/dx FP32 (then rounded to the activation type for the
     * GEMMs). Validated as the CPU does (snn_precision_config_validate). */
    snn_neuron_storage neuron_storage;
    snn_neuron_compute neuron_fwd, neuron_bwd;
} snn_cuda_bench_cfg;

/* Host data of one run. weights[l] is Linear l's [out][in] FP32 weight, biases[l] its [out]
 * bias (l = 0 .. depth-1, the head last); x is [T][N][in] FP32, y is [N] int32 in
 * [0, classes). All are read during the call only. */
typedef struct snn_cuda_bench_data {
    const float *const *weights;
    const float *const *biases;
    const float *x;
    const int32_t *y;
} snn_cuda_bench_data;

typedef struct snn_cuda_bench_result {
    double prep_ms;                  /* build + upload + eager step + capture + reset (untimed) */
    double train_ms, train_cpu_ms;   /* per training step: GPU time (events), process CPU time */
    double infer_ms, infer_cpu_ms;   /* per inference step */
    double forward_ms, loss_ms, backward_optimizer_ms, optimizer_ms; /* per-step split */
    double final_loss;
    int loss_finite;                 /* every loss of warm-up and timed training was finite */
    double update_max_abs;           /* max |p_end - p_base| over every weight and bias */
    double checksum;                 /* sum (double) of the last inference output [T][N][C] */
    int output_finite;
    size_t train_alloc_bytes;        /* every buffer the run allocated (counted exactly) */
    size_t infer_alloc_bytes;        /* the buffers an inference step reads or writes */
    size_t device_used_bytes;        /* cudaMemGetInfo: in use after capture minus before build */
    int layers, fp8_layers;          /* Linear layers, and how many ran FP8 GEMMs */
    int head_fp8;                    /* the output Linear ran FP8 GEMMs */
    double spike_rate_first, spike_rate_last; /* fcsnn: last hidden layer, after the eager
                                                 step / after timed training */
} snn_cuda_bench_result;

/* Check a configuration against what the GPU workloads implement (sizes, FP8 alignment). */
snn_status snn_cuda_bench_check(const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p);

/* One run on context c. The context's GEMM plan cache is reused across calls (the first
 * call of a shape pays cuBLASLt's heuristic and, with autotune, candidate timing, inside
 * prep_ms). Everything allocated is freed before returning. */
snn_status snn_cuda_bench_run(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
                              const snn_cuda_bench_data *d, snn_cuda_bench_result *out);

/* Device and software versions for benchmark metadata. */
typedef struct snn_cuda_bench_device {
    char name[256];
    int cc_major, cc_minor, sm_count;
    int runtime_version, driver_version; /* CUDA's integer form: 12080 = 12.8 */
    size_t total_memory;
    int device;
} snn_cuda_bench_device;
snn_status snn_cuda_bench_device_info(snn_cuda *c, snn_cuda_bench_device *out);

#ifdef __cplusplus
}
#endif
#endif
