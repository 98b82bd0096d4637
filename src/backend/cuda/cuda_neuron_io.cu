/* Neuron kernels for the engine's typed activations: x, spikes and the gradients in a 16-bit
 * type, the saved membrane h_seq in FP32 (so the backward's surrogate sees what the CPU
 * reference computes: the CPU keeps h in FP32). The same bodies as the tuned kernels
 * (cuda_neuron_body.h) with TH = float; one pack width (16 bytes of x) or one neuron per
 * thread, the short prefetch, the surrogate chosen at run time. The fwd32 variant reads the
 * FP32 product of the Linear before it, adds the Linear's bias and rounds to the io type in
 * the kernel (prec_store.c: the Linear leaves both to the neuron). */
#include "backend/cuda/cuda_neuron.h"

template <typename TI, typename TS, int V>
__global__ void __launch_bounds__(NEURON_BLOCK) neuron_io_fwd_kernel(FwdArgs a) {
    neuron_fwd_body<TI, TS, V, 4, float>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

/* x FP32 (a GEMM's product), + bias, rounded to TR, then the same neuron. */
template <typename TR, typename TS, int V>
__global__ void __launch_bounds__(NEURON_BLOCK) neuron_io_fwd32_kernel(FwdArgs a) {
    neuron_fwd_body<float, TS, V, 4, float, TR>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

template <typename TI, int V, bool PLIF>
__global__ void __launch_bounds__(NEURON_BLOCK, 2) neuron_io_bwd_kernel(BwdArgs a, float *gk) {
    float dk, mx;
    neuron_bwd_body<TI, V, 2, PLIF, -1, float>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x, &dk, &mx);
    if (!PLIF || !a.want_gk) return;
    __shared__ float red[NEURON_BLOCK / 32];
    dk = snn_warp_sum(dk);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = dk;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < (int)blockDim.x / 32; i++) s += red[i];
        if (a.gk_parts) gk[blockIdx.x] = s;
        else atomicAdd(gk, s);
    }
}

template <typename TI, typename TS>
static void fwd_v(cudaStream_t st, const FwdArgs &a, int wide) {
    constexpr int W = 16 / sizeof(TI);
    if (wide) neuron_io_fwd_kernel<TI, TS, W><<<snn_grid(a.n / W, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
    else neuron_io_fwd_kernel<TI, TS, 1><<<snn_grid(a.n, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
}

template <typename TI>
static void fwd_s(cudaStream_t st, const FwdArgs &a, snn_dtype sp, int wide) {
    if (sp == SNN_F32) fwd_v<TI, float>(st, a, wide);
    else fwd_v<TI, TI>(st, a, wide);
}

void snn_neuron_io_fwd_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp, int wide) {
    if (io == SNN_BF16) fwd_s<__nv_bfloat16>(st, a, sp, wide);
    else fwd_s<__half>(st, a, sp, wide);
}

template <typename TR, typename TS>
static void fwd32_v(cudaStream_t st, const FwdArgs &a, int wide) {
    if (wide) neuron_io_fwd32_kernel<TR, TS, 4><<<snn_grid(a.n / 4, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
    else neuron_io_fwd32_kernel<TR, TS, 1><<<snn_grid(a.n, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
}

/* spikes F32, in the rounding type, or E4M3 codes (an FP8 GEMM's input at unit scale) */
template <typename TR>
static void fwd32_s(cudaStream_t st, const FwdArgs &a, snn_dtype sp, int wide) {
    if (sp == SNN_F32) fwd32_v<TR, float>(st, a, wide);
    else if (sp == SNN_F8E4M3) fwd32_v<TR, snn_e4m3>(st, a, wide);
    else fwd32_v<TR, TR>(st, a, wide);
}

void snn_neuron_io_fwd32_launch(cudaStream_t st, const FwdArgs &a, snn_dtype io, snn_dtype sp, int wide) {
    if (io == SNN_BF16) fwd32_s<__nv_bfloat16>(st, a, sp, wide);
    else fwd32_s<__half>(st, a, sp, wide);
}

template <typename TI, bool PLIF>
static void bwd_v(cudaStream_t st, const BwdArgs &a, int wide, float *gk) {
    constexpr int W = 16 / sizeof(TI);
    if (wide) neuron_io_bwd_kernel<TI, W, PLIF><<<snn_grid(a.n / W, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a, gk);
    else neuron_io_bwd_kernel<TI, 1, PLIF><<<snn_grid(a.n, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a, gk);
}

template <typename TI>
static void bwd_k(cudaStream_t st, const BwdArgs &a, int wide, float *gk) {
    if (a.p.kind == 2) bwd_v<TI, true>(st, a, wide, gk);
    else bwd_v<TI, false>(st, a, wide, gk);
}

void snn_neuron_io_bwd_launch(cudaStream_t st, const BwdArgs &a, snn_dtype io, int wide, float *gk) {
    if (io == SNN_BF16) bwd_k<__nv_bfloat16>(st, a, wide, gk);
    else bwd_k<__half>(st, a, wide, gk);
}
