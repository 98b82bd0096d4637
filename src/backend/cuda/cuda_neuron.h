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
void snn_neuron_bwd_launch(cudaStream_t st, const BwdArgs &a, snn_dtype io, int pack_bytes,
                           int lng, int block, float *gk, float *amax);

#endif
