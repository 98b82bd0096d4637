/* Backward neuron kernel instantiations: storage type × pack width × prefetch × PLIF, with
 * the block reduction of the PLIF dL/dk partials and of max|gx|; plus IF/LIF kernels with
 * the surrogate fixed at compile time (Sigmoid, ATan: the defaults of SpikingJelly and of
 * the Open Neuromorphic workload) for the short prefetch. */
#include "backend/cuda/cuda_neuron.h"

template <typename TI, int V, int U, bool PLIF, int SG>
__global__ void __launch_bounds__(NEURON_BLOCK, (U >= 8 ? 1 : 2)) neuron_bwd_kernel(BwdArgs a, float *gk,
                                                                     float *amax) {
    float dk, mx;
    neuron_bwd_body<TI, V, U, PLIF, SG>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x, &dk,
                                        &mx);
    if (SG >= 0 || (!a.want_gk && !a.want_amax)) return;
    /* Block reduction, then one atomic per block (every thread reaches here). */
    __shared__ float red_k[NEURON_BLOCK / 32], red_m[NEURON_BLOCK / 32];
    dk = snn_warp_sum(dk);
    mx = snn_warp_max(mx);
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) {
        red_k[w] = dk;
        red_m[w] = mx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sk = 0.0f, sm = 0.0f;
        for (int i = 0; i < (int)blockDim.x / 32; i++) {
            sk += red_k[i];
            sm = fmaxf(sm, red_m[i]);
        }
        if (a.want_gk && a.gk_parts) gk[blockIdx.x] = sk;
        else if (a.want_gk) atomicAdd(gk, sk);
        if (a.want_amax) snn_atomic_max_pos(amax, sm);
    }
}

template <typename TI, int V, bool PLIF>
static void launch_u(cudaStream_t st, const BwdArgs &a, int lng, int block, float *gk,
                     float *amax, int spec) {
    /* 8-wide packs hold two steps in flight normally: more would pass 128 registers */
    constexpr int US = V >= 8 ? 2 : 4;
    unsigned grid = snn_grid(a.n / V, (unsigned)block);
    if (lng)
        neuron_bwd_kernel<TI, V, 8, PLIF, -1><<<grid, block, 0, st>>>(a, gk, amax);
    else if (!PLIF && spec && !a.want_amax && a.p.sg == 0)
        neuron_bwd_kernel<TI, V, US, false, 0><<<grid, block, 0, st>>>(a, gk, amax);
    else if (!PLIF && spec && !a.want_amax && a.p.sg == 1)
        neuron_bwd_kernel<TI, V, US, false, 1><<<grid, block, 0, st>>>(a, gk, amax);
    else
        neuron_bwd_kernel<TI, V, US, PLIF, -1><<<grid, block, 0, st>>>(a, gk, amax);
}

template <typename TI, int V>
static void launch_k(cudaStream_t st, const BwdArgs &a, int lng, int block, float *gk,
                     float *amax, int spec) {
    if (a.p.kind == 2) launch_u<TI, V, true>(st, a, lng, block, gk, amax, spec);
    else launch_u<TI, V, false>(st, a, lng, block, gk, amax, spec);
}

template <typename TI>
static void launch_p(cudaStream_t st, const BwdArgs &a, int pack_bytes, int lng, int block,
                     float *gk, float *amax, int spec) {
    if (pack_bytes == 16) launch_k<TI, 16 / sizeof(TI)>(st, a, lng, block, gk, amax, spec);
    else if (pack_bytes == 8) launch_k<TI, 8 / sizeof(TI)>(st, a, lng, block, gk, amax, spec);
    else if (pack_bytes == 4 && sizeof(TI) == 2) launch_k<TI, 2>(st, a, lng, block, gk, amax, spec);
    else launch_k<TI, 1>(st, a, lng, block, gk, amax, spec);
}

void snn_neuron_bwd_launch(cudaStream_t st, const BwdArgs &a, snn_dtype io, int pack_bytes,
                           int lng, int block, float *gk, float *amax, int spec) {
    switch (io) {
    case SNN_F32: launch_p<float>(st, a, pack_bytes, lng, block, gk, amax, spec); break;
    case SNN_BF16: launch_p<__nv_bfloat16>(st, a, pack_bytes, lng, block, gk, amax, spec); break;
    default: launch_p<__half>(st, a, pack_bytes, lng, block, gk, amax, spec); break;
    }
}
