/* Neuron mixed precision in the whole-model runner: SpikingJelly's per-neuron storage S,
 * forward arithmetic F and backward arithmetic B (the precision config's neuron_storage,
 * neuron_fwd, neuron_bwd), as the CPU's converted neurons run them
 * (src/precision/prec_exec.c, nrn_forward / nrn_backward):
 *  - every multi-step IF/LIF/PLIF neuron of the model runs the mixed kernels, whatever the
 *    model mode (the GEMM modules keep the runner's compute type; fp8 too);
 *  - x arrives as the FP32 activation and is rounded to S (RNE; FP8 saturating), which is
 *    what the CPU kernel does to its FP32 input; the membrane starts at V_r (no v0);
 *  - the training forward saves h_seq in S; the final membrane is not kept (the CPU writes
 *    it into the module's state, which a step never reads back);
 *  - spikes leave as FP32 0/1, dL/dx as FP32 holding B values;
 *  - PLIF: dL/dw += dL/dk k (1 - k) with k = sigmoid(w) in double, as the CPU module.
 * The neuron kernels are cuda_neuron_mp's (bit-identical to the CPU). IF and LIF call its
 * launchers. PLIF cannot: their decay k is a host argument, and inside a captured graph k
 * must follow w, which the optimizer changes every step; so the PLIF kernels below run the
 * same bodies with the k-dependent constants recomputed on the device from w (the same
 * roundings the host argument builders apply). Every buffer is planned at create; a step
 * only launches kernels (no allocation, no synchronisation): capture-safe. */
#include "backend/cuda/cuda_model_internal.h"
#include "backend/cuda/cuda_neuron_mp.h"

namespace {

/* snn_plif_k: in double, rounded once to float by the caller */
__device__ __forceinline__ double np_plif_k(const float *w) { return 1.0 / (1.0 + exp(-(double)*w)); }

/* x rounded to the storage type (Io::st: RNE, FP8 SATFINITE, the CPU's mp_r) */
template <typename TS> __global__ void np_store_kernel(TS *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = Io<TS>::st(src[i]);
}

template <int S, int F> __global__ void __launch_bounds__(SNN_CUDA_MP_BLOCK) np_plif_fwd_kernel(MpFwdArgs a, const float *w) {
    a.kF = mp_rnd<F>((float)np_plif_k(w)); /* snn_cuda_mp_fwd_args: kF = F(k) */
    const size_t i = (size_t)blockIdx.x * SNN_CUDA_MP_BLOCK + threadIdx.x;
    if (i < a.n) mp_fwd_body<S, F, float>(a, i);
}

template <int S, int B>
__global__ void __launch_bounds__(SNN_CUDA_MP_BLOCK) np_plif_bwd_kernel(MpBwdArgs a, const float *w, double *blk) {
    const float k = (float)np_plif_k(w);
    /* snn_cuda_mp_bwd_args: a = B(1 - k), c = B(k) with decay_input, else B(1) */
    a.aB = mp_rnd<B>(rn_fsub(1.0f, k));
    a.cB = mp_rnd<B>(a.mode == MPK_DECAY ? k : 1.0f);
    __shared__ double part[SNN_CUDA_MP_BLOCK];
    const size_t i0 = (size_t)blockIdx.x * SNN_CUDA_MP_BLOCK, i = i0 + threadIdx.x;
    part[threadIdx.x] = i < a.n ? mp_bwd_body<S, B>(a, i) : 0.0;
    __syncthreads();
    if (threadIdx.x == 0) {
        const size_t len = a.n - i0 < SNN_CUDA_MP_BLOCK ? a.n - i0 : SNN_CUDA_MP_BLOCK;
        blk[blockIdx.x] = mp_seq_sum(part, len);
    }
}

/* gk[0] <- dL/dk in the CPU's chunk order (as mp_gk_finish, k from w), then the chain rule
 * into the weight's gradient exactly as nrn_backward: gw += (float)(gk k (1 - k)). */
__global__ void __launch_bounds__(SNN_CUDA_MP_MAX_CHUNKS) np_plif_finish(double *gk, long long nb, int decay,
                                                                         const float *w, float *gw) {
    __shared__ double part[SNN_CUDA_MP_MAX_CHUNKS];
    const int nch = mp_chunks(nb), ch = threadIdx.x;
    if (ch < nch) {
        long long b0, b1;
        mp_chunk_range(nb, nch, ch, &b0, &b1);
        part[ch] = mp_seq_sum(gk + 1 + b0, (size_t)(b1 - b0));
    }
    __syncthreads();
    if (ch == 0) {
        const double kd = np_plif_k(w);
        const double tot = mp_gk_total(part, nch, decay, (float)kd);
        gk[0] = tot;
        *gw = __fadd_rn(*gw, (float)__dmul_rn(__dmul_rn(tot, kd), __dadd_rn(1.0, -kd)));
    }
}

template <int S> void plif_fwd_f(cudaStream_t st, unsigned grid, const MpFwdArgs &a, snn_dtype F, const float *w) {
    switch (F) {
    case SNN_F32: np_plif_fwd_kernel<S, SNN_F32><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w); break;
    case SNN_F16: np_plif_fwd_kernel<S, SNN_F16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w); break;
    case SNN_BF16: np_plif_fwd_kernel<S, SNN_BF16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w); break;
    default: np_plif_fwd_kernel<S, S><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w); break;
    }
}

template <int S>
void plif_bwd_b(cudaStream_t st, unsigned grid, const MpBwdArgs &a, snn_dtype B, const float *w, double *blk) {
    switch (B) {
    case SNN_F32: np_plif_bwd_kernel<S, SNN_F32><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w, blk); break;
    case SNN_F16: np_plif_bwd_kernel<S, SNN_F16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w, blk); break;
    case SNN_BF16: np_plif_bwd_kernel<S, SNN_BF16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w, blk); break;
    default: np_plif_bwd_kernel<S, S><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, w, blk); break;
    }
}

unsigned np_grid(size_t n) { return (unsigned)((n + SNN_CUDA_MP_BLOCK - 1) / SNN_CUDA_MP_BLOCK); }

int count_neurons(const gnode *n) {
    int c = n->kind == GK_NEURON;
    for (int i = 0; i < n->n_kids; i++) c += count_neurons(n->kids[i]);
    return c;
}

} // namespace

snn_status snn_gm_nprec_init(snn_cuda_model *g, const snn_precision_config *cfg) {
    g->nprec = 0;
    g->o.neuron = NULL; /* the caller's config may go away; what is needed is copied below */
    if (!cfg) return SNN_OK;
    /* the CPU's rules and messages (neuron_fwd/bwd without a storage, fp8 arithmetic
     * without an FP8 storage, ...) whenever a neuron field is not the default */
    if (cfg->neuron_storage != SNN_NEURON_STORAGE_UNSET || cfg->neuron_fwd != SNN_NEURON_COMPUTE_FP32 ||
        cfg->neuron_bwd != SNN_NEURON_COMPUTE_FP32)
        SNN_TRY(snn_precision_config_validate(cfg));
    if (cfg->neuron_storage == SNN_NEURON_STORAGE_UNSET) return SNN_OK;
    if (count_neurons(g->root) == 0)
        return snn_error(SNN_E_INVALID,
                         "neuron precision requested (neuron_storage=%s), but the model has no multi-step "
                         "IF/LIF/PLIF neurons",
                         snn_neuron_storage_name(cfg->neuron_storage));
    g->nS = snn_neuron_storage_dtype(cfg->neuron_storage);
    g->nF = snn_neuron_compute_dtype(cfg->neuron_fwd, cfg->neuron_storage);
    g->nB = snn_neuron_compute_dtype(cfg->neuron_bwd, cfg->neuron_storage);
    g->nprec = 1;
    return SNN_OK;
}

void snn_gm_nprec_plan(snn_cuda_model *g, gnode *n) {
    const size_t cnt = (size_t)g->B * n->in_numel, es = snn_cuda_dsize(g->nS);
    n->h = (float *)g->act.take(cnt * es); /* h_seq in S */
    n->xs = g->nS == SNN_F32 ? NULL : g->act.take(cnt * es);
    if (n->plif) n->gkd = (double *)g->act.take(snn_cuda_neuron_mp_gk_len((size_t)g->N * n->in_numel) * sizeof(double));
}

snn_status snn_gm_nprec_forward(snn_cuda_model *g, gnode *n, int training) {
    const size_t cnt = (size_t)g->N * n->in_numel, all = (size_t)g->T * cnt;
    cudaStream_t st = snn_cuda_stream_of(g->c);
    const void *xs = n->x;
    if (n->xs) {
        unsigned blocks = snn_grid(all, 256), cap = (unsigned)snn_cuda_sm_count(g->c) * 16u;
        if (blocks > cap) blocks = cap;
        switch (g->nS) {
        case SNN_F16: np_store_kernel<__half><<<blocks, 256, 0, st>>>((__half *)n->xs, n->x, all); break;
        case SNN_BF16: np_store_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>((__nv_bfloat16 *)n->xs, n->x, all); break;
        case SNN_F8E4M3: np_store_kernel<snn_e4m3><<<blocks, 256, 0, st>>>((snn_e4m3 *)n->xs, n->x, all); break;
        default: np_store_kernel<snn_e5m2><<<blocks, 256, 0, st>>>((snn_e5m2 *)n->xs, n->x, all); break;
        }
        SNN_CU_LAUNCHED("neuron input to storage dtype");
        xs = n->xs;
    }
    void *h = training ? (void *)n->h : NULL;
    if (!n->plif)
        return snn_cuda_neuron_forward_mp(g->c, &n->nopt, n->nk, g->T, cnt, g->nS, g->nF, SNN_F32, xs, NULL, n->y,
                                          h, NULL);
    MpFwdArgs a;
    SNN_TRY(snn_cuda_mp_fwd_args(&n->nopt, n->nk, g->T, cnt, g->nS, g->nF, SNN_F32, &a));
    if (cnt == 0) return SNN_OK;
    a.x = xs;
    a.s = n->y;
    a.h = h;
    const unsigned grid = np_grid(cnt);
    switch (g->nS) {
    case SNN_F32: plif_fwd_f<SNN_F32>(st, grid, a, g->nF, n->w); break;
    case SNN_F16: plif_fwd_f<SNN_F16>(st, grid, a, g->nF, n->w); break;
    case SNN_BF16: plif_fwd_f<SNN_BF16>(st, grid, a, g->nF, n->w); break;
    case SNN_F8E4M3: plif_fwd_f<SNN_F8E4M3>(st, grid, a, g->nF, n->w); break;
    default: plif_fwd_f<SNN_F8E5M2>(st, grid, a, g->nF, n->w); break;
    }
    SNN_CU_LAUNCHED("PLIF forward (neuron precision)");
    return SNN_OK;
}

snn_status snn_gm_nprec_backward(snn_cuda_model *g, gnode *n) {
    const size_t cnt = (size_t)g->N * n->in_numel;
    /* only spikes leave the layer: no gradient on the final membrane; v0 is the reset value */
    if (!n->plif)
        return snn_cuda_neuron_backward_mp(g->c, &n->nopt, n->nk, g->T, cnt, g->nS, g->nF, g->nB, n->h, NULL,
                                           n->gy, NULL, n->gin, NULL, NULL);
    MpBwdArgs a;
    SNN_TRY(snn_cuda_mp_bwd_args(&n->nopt, n->nk, g->T, cnt, g->nS, g->nF, g->nB, 1, &a));
    if (cnt == 0 || !a.want_k) return SNN_OK; /* PLIF always has a k: want_k is set */
    a.h = n->h;
    a.gs = n->gy;
    a.gx = n->gin;
    cudaStream_t st = snn_cuda_stream_of(g->c);
    const unsigned grid = np_grid(cnt);
    double *blk = n->gkd + 1;
    switch (g->nS) {
    case SNN_F32: plif_bwd_b<SNN_F32>(st, grid, a, g->nB, n->w, blk); break;
    case SNN_F16: plif_bwd_b<SNN_F16>(st, grid, a, g->nB, n->w, blk); break;
    case SNN_BF16: plif_bwd_b<SNN_BF16>(st, grid, a, g->nB, n->w, blk); break;
    case SNN_F8E4M3: plif_bwd_b<SNN_F8E4M3>(st, grid, a, g->nB, n->w, blk); break;
    default: plif_bwd_b<SNN_F8E5M2>(st, grid, a, g->nB, n->w, blk); break;
    }
    SNN_CU_LAUNCHED("PLIF backward (neuron precision)");
    np_plif_finish<<<1, SNN_CUDA_MP_MAX_CHUNKS, 0, st>>>(n->gkd, (long long)grid, a.mode == MPK_DECAY, n->w, n->gw);
    SNN_CU_LAUNCHED("PLIF dL/dw (neuron precision)");
    return SNN_OK;
}
