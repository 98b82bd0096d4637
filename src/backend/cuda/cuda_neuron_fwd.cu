/* Forward neuron kernel instantiations: storage type × spike type × pack width × prefetch. */
#include "backend/cuda/cuda_neuron.h"

template <typename TI, typename TS, int V, int U>
__global__ void __launch_bounds__(NEURON_BLOCK) neuron_fwd_kernel(FwdArgs a) {
    neuron_fwd_body<TI, TS, V, U>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

template <typename TI, typename TS, int V>
static void launch_v(cudaStream_t st, const FwdArgs &a, int lng, int block) {
    unsigned grid = snn_grid(a.n / V, (unsigned)block);
    if (lng)
        neuron_fwd_kernel<TI, TS, V, 16><<<grid, block, 0, st>>>(a);
    else
        neuron_fwd_kernel<TI, TS, V, 4><<<grid, block, 0, st>>>(a);
}

template <typename TI, typename TS>
static void launch_p(cudaStream_t st, const FwdArgs &a, int pack_bytes, int lng, int block) {
    if (pack_bytes == 16) launch_v<TI, TS, 16 / sizeof(TI)>(st, a, lng, block);
    else if (pack_bytes == 8) launch_v<TI, TS, 8 / sizeof(TI)>(st, a, lng, block);
    else if (pack_bytes == 4 && sizeof(TI) == 2) launch_v<TI, TS, 2>(st, a, lng, block);
    else launch_v<TI, TS, 1>(st, a, lng, block);
}

template <typename TI>
static void launch_s(cudaStream_t st, const FwdArgs &a, snn_dtype sp, int pack_bytes, int lng,
                     int block) {
    switch (sp) {
    case SNN_F32: launch_p<TI, float>(st, a, pack_bytes, lng, block); break;
    case SNN_BF16: launch_p<TI, __nv_bfloat16>(st, a, pack_bytes, lng, block); break;
    case SNN_F16: launch_p<TI, __half>(st, a, pack_bytes, lng, block); break;
    default: launch_p<TI, snn_e4m3>(st, a, pack_bytes, lng, block); break;
    }
}

void snn_neuron_fwd_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp,
                           int pack_bytes, int lng, int block) {
    switch (io) {
    case SNN_F32: launch_s<float>(st, a, sp, pack_bytes, lng, block); break;
    case SNN_BF16: launch_s<__nv_bfloat16>(st, a, sp, pack_bytes, lng, block); break;
    default: launch_s<__half>(st, a, sp, pack_bytes, lng, block); break;
    }
}
