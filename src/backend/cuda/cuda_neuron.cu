/* Fused multi-step IF/LIF/PLIF forward and BPTT backward kernels (bodies in
 * cuda_neuron_body.h). Dispatch picks the storage types and the vector width: 16-byte packs
 * when n and every pointer allow it, one neuron per thread otherwise. */
#include "backend/cuda/cuda_neuron_body.h"

#define NEURON_BLOCK 256

template <typename TI, typename TS, int V>
__global__ void __launch_bounds__(NEURON_BLOCK) neuron_fwd_kernel(FwdArgs a) {
    neuron_fwd_body<TI, TS, V>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

template <typename TI, int V, bool PLIF>
__global__ void __launch_bounds__(NEURON_BLOCK, 2) neuron_bwd_kernel(BwdArgs a, float *gk,
                                                                     float *amax) {
    float dk, mx;
    neuron_bwd_body<TI, V, PLIF>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x, &dk, &mx);
    if (!a.want_gk && !a.want_amax) return;
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
        for (int i = 0; i < NEURON_BLOCK / 32; i++) {
            sk += red_k[i];
            sm = fmaxf(sm, red_m[i]);
        }
        if (a.want_gk) atomicAdd(gk, sk);
        if (a.want_amax) snn_atomic_max_pos(amax, sm);
    }
}

static float default_alpha(int sg) {
    static const float d[SNN_SG_COUNT] = {4.0f, 2.0f, 1.0f, 1.0f, 2.0f, 1.0f, 2.0f};
    return (sg >= 0 && sg < SNN_SG_COUNT) ? d[sg] : 0.0f;
}

static snn_status make_params(const snn_neuron_opts *o, float k, int T, size_t n, NeuronP *p) {
    if (!o) return snn_error(SNN_E_INVALID, "neuron options are NULL");
    if (o->kind < SNN_NEURON_IF || o->kind > SNN_NEURON_PLIF)
        return snn_error(SNN_E_INVALID, "unknown neuron kind %d", (int)o->kind);
    if ((int)o->surrogate < 0 || o->surrogate >= SNN_SG_COUNT)
        return snn_error(SNN_E_INVALID, "unknown surrogate id %d (0..%d)", (int)o->surrogate,
                         SNN_SG_COUNT - 1);
    if (T <= 0 || n == 0)
        return snn_error(SNN_E_SHAPE, "neuron kernels need T > 0 and n > 0 (T=%d n=%zu)", T, n);
    if (o->kind != SNN_NEURON_IF && !(k > 0.0f && k < 1.0f))
        return snn_error(SNN_E_INVALID, "neuron decay k must lie in (0, 1) (1/tau or sigmoid(w)), "
                                        "got %g",
                         (double)k);
    p->kind = (int)o->kind;
    p->decay_input = o->decay_input;
    p->soft = o->soft_reset;
    p->detach = o->detach_reset;
    p->sg = (int)o->surrogate;
    p->alpha = o->alpha != 0.0f ? o->alpha : default_alpha(p->sg);
    p->vth = o->v_threshold;
    p->vreset = o->v_reset;
    p->k = k;
    if (p->sg == SNN_SG_SOFTSIGN && !(p->alpha > 0.0f))
        return snn_error(SNN_E_INVALID, "SoftSign surrogate needs alpha > 0");
    if (!isfinite(p->vth) || !isfinite(p->vreset) || !isfinite(p->alpha))
        return snn_error(SNN_E_INVALID, "neuron threshold, reset and alpha must be finite");
    return SNN_OK;
}

template <typename TI, typename TS>
static snn_status fwd_launch(cudaStream_t st, const FwdArgs &a, int vec) {
    if (vec) {
        constexpr int V = 16 / sizeof(TI);
        neuron_fwd_kernel<TI, TS, V><<<snn_grid(a.n / V, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
    } else {
        neuron_fwd_kernel<TI, TS, 1><<<snn_grid(a.n, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a);
    }
    SNN_CU_LAUNCHED("neuron_forward");
    return SNN_OK;
}

template <typename TI>
static snn_status fwd_spike(cudaStream_t st, const FwdArgs &a, snn_dtype spike_type, int vec) {
    switch (spike_type) {
    case SNN_F32: return fwd_launch<TI, float>(st, a, vec);
    case SNN_BF16: return fwd_launch<TI, __nv_bfloat16>(st, a, vec);
    case SNN_F16: return fwd_launch<TI, __half>(st, a, vec);
    case SNN_F8E4M3: return fwd_launch<TI, snn_e4m3>(st, a, vec);
    default:
        return snn_error(SNN_E_UNSUPPORTED, "spike type %s is not supported (f32, bf16, f16, "
                                            "f8e4m3)",
                         snn_cuda_dtype_name(spike_type));
    }
}

extern "C" snn_status snn_cuda_neuron_forward(snn_cuda *c, const snn_neuron_opts *o, float k,
                                              int T, size_t n, snn_dtype io_type,
                                              snn_dtype spike_type, const void *x,
                                              const float *bias, size_t bias_period,
                                              const float *v0, void *s, void *h_seq,
                                              void *v_seq, float *v_last) {
    FwdArgs a;
    memset(&a, 0, sizeof a);
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!x || !s) return snn_error(SNN_E_INVALID, "neuron forward needs x and s");
    if (bias && bias_period == 0)
        return snn_error(SNN_E_INVALID, "neuron forward: bias given with bias_period 0");
    size_t es = snn_cuda_dsize(io_type);
    if (io_type != SNN_F32 && !snn_cuda_is_16(io_type))
        return snn_error(SNN_E_UNSUPPORTED, "neuron storage type %s is not supported (f32, bf16, "
                                            "f16)",
                         snn_cuda_dtype_name(io_type));
    a.T = T;
    a.n = n;
    a.x = x;
    a.bias = bias;
    a.bias_period = bias ? bias_period : 1;
    a.v0 = v0;
    a.s = s;
    a.h = h_seq;
    a.vseq = v_seq;
    a.vlast = v_last;
    const size_t V = 16 / es;
    const size_t sbytes = V * snn_cuda_dsize(spike_type);
    int vec = n % V == 0 && (!bias || a.bias_period % V == 0) && snn_aligned(x, 16) &&
              snn_aligned(s, sbytes) && (!h_seq || snn_aligned(h_seq, 16)) &&
              (!v_seq || snn_aligned(v_seq, 16));
    cudaStream_t st = snn_cuda_stream_of(c);
    switch (io_type) {
    case SNN_F32: return fwd_spike<float>(st, a, spike_type, vec);
    case SNN_BF16: return fwd_spike<__nv_bfloat16>(st, a, spike_type, vec);
    default: return fwd_spike<__half>(st, a, spike_type, vec);
    }
}

template <typename TI, bool PLIF>
static void bwd_launch2(cudaStream_t st, const BwdArgs &a, int vec, float *gk, float *amax) {
    if (vec) {
        constexpr int V = 16 / sizeof(TI);
        neuron_bwd_kernel<TI, V, PLIF>
            <<<snn_grid(a.n / V, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a, gk, amax);
    } else {
        neuron_bwd_kernel<TI, 1, PLIF>
            <<<snn_grid(a.n, NEURON_BLOCK), NEURON_BLOCK, 0, st>>>(a, gk, amax);
    }
}

template <typename TI>
static snn_status bwd_launch(cudaStream_t st, const BwdArgs &a, int vec, float *gk, float *amax) {
    if (a.p.kind == SNN_NEURON_PLIF)
        bwd_launch2<TI, true>(st, a, vec, gk, amax);
    else
        bwd_launch2<TI, false>(st, a, vec, gk, amax);
    SNN_CU_LAUNCHED("neuron_backward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_neuron_backward(snn_cuda *c, const snn_neuron_opts *o, float k,
                                               int T, size_t n, snn_dtype io_type,
                                               const void *h_seq, const float *v0,
                                               const void *gs, const void *gv_seq,
                                               const float *gv_last, void *gx, float *gv0,
                                               float *gk, float *gx_tsum, float *gx_amax) {
    BwdArgs a;
    memset(&a, 0, sizeof a);
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!h_seq || !gs || !gx) return snn_error(SNN_E_INVALID, "neuron backward needs h_seq, gs and gx");
    if (io_type != SNN_F32 && !snn_cuda_is_16(io_type))
        return snn_error(SNN_E_UNSUPPORTED, "neuron storage type %s is not supported (f32, bf16, "
                                            "f16)",
                         snn_cuda_dtype_name(io_type));
    a.T = T;
    a.n = n;
    a.h = h_seq;
    a.v0 = v0;
    a.gs = gs;
    a.gvseq = gv_seq;
    a.gvlast = gv_last;
    a.gx = gx;
    a.gv0 = gv0;
    a.gxsum = gx_tsum;
    a.want_gk = gk != NULL && o->kind == SNN_NEURON_PLIF;
    a.want_amax = gx_amax != NULL;
    const size_t V = 16 / snn_cuda_dsize(io_type);
    int vec = n % V == 0 && snn_aligned(h_seq, 16) && snn_aligned(gs, 16) && snn_aligned(gx, 16) &&
              (!gv_seq || snn_aligned(gv_seq, 16));
    cudaStream_t st = snn_cuda_stream_of(c);
    switch (io_type) {
    case SNN_F32: return bwd_launch<float>(st, a, vec, gk, gx_amax);
    case SNN_BF16: return bwd_launch<__nv_bfloat16>(st, a, vec, gk, gx_amax);
    default: return bwd_launch<__half>(st, a, vec, gk, gx_amax);
    }
}
