/* Launchers of the neuron kernels (cuda_neuron_fwd.cu, cuda_neuron_bwd.cu), called by the
 * public entry points in cuda_neuron.cu. V: neurons per thread (1 or a pack of pack_bytes);
 * lng: long prefetch. Internal. */
#ifndef SNN_CUDA_NEURON_H
#define SNN_CUDA_NEURON_H

#include "backend/cuda/cuda_neuron_body.h"

#define NEURON_BLOCK 256

/* block: threads per block (NEURON_BLOCK, or fewer so that few threads still spread over
 * every multiprocessor). */
void snn_neuron_fwd_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp,
                           int pack_bytes, int lng, int block);
/* snn_cuda_neuron_backward (include/snn/cuda.h) with gk_parts: 1 writes each block's dL/dk
 * into gk[block] (at most (n + 31) / 32 blocks) instead of adding it atomically, for a sum in a
 * fixed order after (the engine's entry: the same bits on every run). */
snn_status snn_cuda_neuron_backward_parts(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                          snn_dtype io_type, const void *h_seq, const float *v0, const void *gs,
                                          const void *gv_seq, const float *gv_last, void *gx, float *gv0,
                                          float *gk, int gk_parts, float *gx_tsum, float *gx_amax);
/* spec: allow the kernels with the surrogate fixed at compile time (IF/LIF, Sigmoid or ATan,
 * short prefetch, no max|gx|). */
void snn_neuron_bwd_launch(cudaStream_t st, const BwdArgs &a, snn_dtype io, int pack_bytes,
                           int lng, int block, float *gk, float *amax, int spec);

/* The typed-activation kernels (cuda_neuron_io.cu): x, spikes (sp: io or F32), gs, gx in the
 * 16-bit io type, h_seq FP32. wide: 16 bytes of x per thread (n a multiple of 16 / size(io),
 * every pointer aligned for it), else one neuron per thread. gk: PLIF's dL/dk accumulator. */
void snn_neuron_io_fwd_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp, int wide);
/* x FP32 plus bias[i % bias_period], rounded to io (F16/BF16), then the io neuron; spikes sp:
 * io, F32 or E4M3 codes. */
void snn_neuron_io_fwd32_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp, int wide);
void snn_neuron_io_bwd_launch(cudaStream_t st, const BwdArgs &a, snn_dtype io, int wide, float *gk);

/* Benchmark-only override of the launch shape, process-wide (not in the public header: the
 * benchmark and the neuron test declare it themselves). pack_bytes 0 (keep the context's
 * tuning), 1, 4 (16-bit storage: 2 neurons per thread), 8 or 16; block 0 (automatic), 64, 128
 * or 256 threads; generic 1 = never use the fixed-surrogate backward kernels. Results do not
 * depend on it. Returns SNN_E_INVALID for other values. */
extern "C" snn_status snn_cuda_neuron_bench_override(int pack_bytes, int block, int generic);

#endif
