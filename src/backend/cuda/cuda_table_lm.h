/* Helpers shared by the language-model entries of the CUDA table (cuda_table_lm.cu,
 * cuda_table_lm_loss.cu). */
#ifndef SNN_CUDA_TABLE_LM_H
#define SNN_CUDA_TABLE_LM_H

#include "backend/cuda/cuda_table.h"

namespace {

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* An invalid id or label (index) found by any thread: the smallest index wins. */
__device__ __forceinline__ void note_bad(unsigned long long *first, size_t i) {
    atomicMin(first, (unsigned long long)i);
}

const unsigned long long NONE = ~0ull;

/* Dynamic shared memory of S floats per block; above the default 48 KiB the kernel opts in. */
template <typename K> snn_status smem_for(K kernel, size_t bytes, const char *what) {
    if (bytes <= 48 * 1024) return SNN_OK;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return snn_error(SNN_E_UNSUPPORTED, "%s: a sequence of %zu positions needs more shared memory than the GPU has",
                         what, bytes / sizeof(float));
    }
    return SNN_OK;
}

} // namespace

#endif
