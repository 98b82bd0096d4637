/* Mixed-precision multi-step neurons on the GPU (storage S, forward arithmetic F, backward
 * arithmetic B): argument checks, the constants, the kernels and their dispatch. The kernel
 * bodies and the contract are in cuda_neuron_mp.h; the CPU emulation they reproduce bit for
 * bit is src/neuron/neuron_mp.c.
 *
 * One thread per neuron walking the T steps, blocks of SNN_CUDA_MP_BLOCK (256) threads: that
 * is also the CPU's block of the dL/dk sum, so a block's partials are summed in shared memory
 * in the CPU's order, and a one-block kernel sums the blocks in the CPU's chunks. Storage
 * dtype, forward arithmetic dtype and spike type are template parameters (the rounding after
 * every operation is then a single conversion, no per-operation switch); the backward's F
 * (only used to rebuild v_{t-1} for dL/dk) is a run-time value. */
#include "backend/cuda/cuda_neuron_mp.h"
#include "neuron/neuron_mp.h"

static int mp_fp8(snn_dtype t) { return t == SNN_F8E4M3 || t == SNN_F8E5M2; }

/* Round as the CPU's mp_r: FP8 saturating, FP16/BF16 overflowing to inf. */
static float mp_r(snn_dtype t, float f) { return snn_round_to(t, f, mp_fp8(t)); }

static int mp_mode(const snn_neuron_opts *o) {
    if (o->kind == SNN_NEURON_IF) return MPK_IF;
    return o->decay_input ? MPK_DECAY : MPK_NODECAY;
}

/* The CPU's rules (snn_neuron_mp_check), plus what the GPU needs known: kind, surrogate. */
static snn_status mp_check(const snn_neuron_opts *o, int T, snn_dtype S, snn_dtype F, snn_dtype B, int with_b) {
    SNN_TRY(snn_neuron_mp_check(o, T, S, F, B, with_b));
    if ((unsigned)o->kind > SNN_NEURON_PLIF)
        return snn_error(SNN_E_INVALID, "GPU neuron mixed precision: unknown neuron kind %d", (int)o->kind);
    if ((unsigned)o->surrogate >= SNN_SG_COUNT)
        return snn_error(SNN_E_INVALID, "GPU neuron mixed precision: unknown surrogate id %d (0..%d)",
                         (int)o->surrogate, SNN_SG_COUNT - 1);
    return SNN_OK;
}

snn_status snn_cuda_mp_fwd_args(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                snn_dtype spike_type, MpFwdArgs *a) {
    SNN_TRY(mp_check(o, T, S, F, F, 0));
    if (spike_type != SNN_F32 && spike_type != SNN_BF16 && spike_type != SNN_F16)
        return snn_error(SNN_E_INVALID, "GPU neuron mixed precision: spike dtype %s is not one of f32, bf16, f16",
                         snn_dtype_name(spike_type));
    memset(a, 0, sizeof *a);
    const float vr = o->soft_reset ? 0.0f : o->v_reset;
    a->T = T;
    a->n = n;
    a->mode = mp_mode(o);
    a->soft = o->soft_reset != 0;
    a->vth = o->v_threshold;
    a->kF = mp_r(F, k);
    a->vrF = mp_r(F, vr);
    a->vthF = mp_r(F, o->v_threshold);
    a->v_resetF = mp_r(F, o->v_reset);
    a->vinit = mp_r(F, vr);
    return SNN_OK;
}

snn_status snn_cuda_mp_bwd_args(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                snn_dtype B, int want_k, MpBwdArgs *a) {
    SNN_TRY(mp_check(o, T, S, F, B, 1));
    memset(a, 0, sizeof *a);
    const int mode = mp_mode(o);
    const float vr = o->soft_reset ? 0.0f : o->v_reset;
    a->T = T;
    a->n = n;
    a->mode = mode;
    a->soft = o->soft_reset != 0;
    a->detach = o->detach_reset != 0;
    a->want_k = want_k && mode != MPK_IF;
    a->sg = (int)o->surrogate;
    a->F = (int)F;
    a->alpha = snn_neuron_alpha(o);
    a->vth = o->v_threshold;
    a->vrB = mp_r(B, vr);
    a->vthB = mp_r(B, o->v_threshold);
    a->aB = mp_r(B, mode == MPK_IF ? 1.0f : 1.0f - k);
    a->cB = mp_r(B, mode == MPK_DECAY ? k : 1.0f);
    a->vr32 = vr;
    a->vthF = mp_r(F, o->v_threshold);
    a->v_resetF = mp_r(F, o->v_reset);
    a->vinitS = mp_r(S, mp_r(F, vr));
    return SNN_OK;
}

extern "C" size_t snn_cuda_neuron_mp_gk_len(size_t n) {
    return 1 + (n + SNN_CUDA_MP_BLOCK - 1) / SNN_CUDA_MP_BLOCK;
}

/* ---------------------------------------------------------------- kernels */

template <int S, int F, typename TSP>
__global__ void __launch_bounds__(SNN_CUDA_MP_BLOCK) mp_fwd_kernel(MpFwdArgs a) {
    const size_t i = (size_t)blockIdx.x * SNN_CUDA_MP_BLOCK + threadIdx.x;
    if (i < a.n) mp_fwd_body<S, F, TSP>(a, i);
}

/* blk: the block sums of the dL/dk partials (NULL: not wanted). */
template <int S, int B>
__global__ void __launch_bounds__(SNN_CUDA_MP_BLOCK) mp_bwd_kernel(MpBwdArgs a, double *blk) {
    __shared__ double part[SNN_CUDA_MP_BLOCK];
    const size_t i0 = (size_t)blockIdx.x * SNN_CUDA_MP_BLOCK, i = i0 + threadIdx.x;
    const double p = i < a.n ? mp_bwd_body<S, B>(a, i) : 0.0;
    if (!blk) return; /* uniform over the grid: no thread waits at the barrier below */
    part[threadIdx.x] = p;
    __syncthreads();
    if (threadIdx.x == 0) {
        const size_t len = a.n - i0 < SNN_CUDA_MP_BLOCK ? a.n - i0 : SNN_CUDA_MP_BLOCK;
        blk[blockIdx.x] = mp_seq_sum(part, len);
    }
}

/* gk[1 .. nb]: block sums; gk[0] <- the total in the CPU's chunk order. */
__global__ void __launch_bounds__(SNN_CUDA_MP_MAX_CHUNKS) mp_gk_finish(double *gk, long long nb, int decay, float k) {
    __shared__ double part[SNN_CUDA_MP_MAX_CHUNKS];
    const int nch = mp_chunks(nb), ch = threadIdx.x;
    if (ch < nch) {
        long long b0, b1;
        mp_chunk_range(nb, nch, ch, &b0, &b1);
        part[ch] = mp_seq_sum(gk + 1 + b0, (size_t)(b1 - b0));
    }
    __syncthreads();
    if (ch == 0) gk[0] = mp_gk_total(part, nch, decay, k);
}

/* ---------------------------------------------------------------- dispatch */

template <int S, int F>
static void fwd_sp(cudaStream_t st, unsigned grid, const MpFwdArgs &a, snn_dtype sp) {
    switch (sp) {
    case SNN_BF16: mp_fwd_kernel<S, F, __nv_bfloat16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a); break;
    case SNN_F16: mp_fwd_kernel<S, F, __half><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a); break;
    default: mp_fwd_kernel<S, F, float><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a); break;
    }
}

/* F is FP32, FP16, BF16 or S itself (FP8 arithmetic only in the storage's format). */
template <int S>
static void fwd_f(cudaStream_t st, unsigned grid, const MpFwdArgs &a, snn_dtype F, snn_dtype sp) {
    switch (F) {
    case SNN_F32: fwd_sp<S, SNN_F32>(st, grid, a, sp); break;
    case SNN_F16: fwd_sp<S, SNN_F16>(st, grid, a, sp); break;
    case SNN_BF16: fwd_sp<S, SNN_BF16>(st, grid, a, sp); break;
    default: fwd_sp<S, S>(st, grid, a, sp); break;
    }
}

template <int S>
static void bwd_b(cudaStream_t st, unsigned grid, const MpBwdArgs &a, snn_dtype B, double *blk) {
    switch (B) {
    case SNN_F32: mp_bwd_kernel<S, SNN_F32><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, blk); break;
    case SNN_F16: mp_bwd_kernel<S, SNN_F16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, blk); break;
    case SNN_BF16: mp_bwd_kernel<S, SNN_BF16><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, blk); break;
    default: mp_bwd_kernel<S, S><<<grid, SNN_CUDA_MP_BLOCK, 0, st>>>(a, blk); break;
    }
}

static unsigned mp_grid(size_t n) { return (unsigned)((n + SNN_CUDA_MP_BLOCK - 1) / SNN_CUDA_MP_BLOCK); }

extern "C" snn_status snn_cuda_neuron_forward_mp(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                                 snn_dtype S, snn_dtype F, snn_dtype spike_type, const void *x,
                                                 const void *v0, void *s, void *h_seq, void *v_last) {
    MpFwdArgs a;
    SNN_TRY(snn_cuda_mp_fwd_args(o, k, T, n, S, F, spike_type, &a));
    if (!c) return snn_error(SNN_E_INVALID, "GPU neuron mixed-precision forward: no CUDA context");
    if (n == 0) return SNN_OK;
    if (T > 0 && (!x || !s))
        return snn_error(SNN_E_INVALID, "GPU neuron mixed-precision forward needs x and s (T = %d, n = %zu)", T, n);
    if (n > (size_t)0x7fffffff * SNN_CUDA_MP_BLOCK)
        return snn_error(SNN_E_SHAPE, "GPU neuron mixed-precision forward: n = %zu is too large for one grid", n);
    a.x = x;
    a.v0 = v0;
    a.s = s;
    a.h = h_seq;
    a.vlast = v_last;
    cudaStream_t st = snn_cuda_stream_of(c);
    const unsigned grid = mp_grid(n);
    switch (S) {
    case SNN_F32: fwd_f<SNN_F32>(st, grid, a, F, spike_type); break;
    case SNN_F16: fwd_f<SNN_F16>(st, grid, a, F, spike_type); break;
    case SNN_BF16: fwd_f<SNN_BF16>(st, grid, a, F, spike_type); break;
    case SNN_F8E4M3: fwd_f<SNN_F8E4M3>(st, grid, a, F, spike_type); break;
    default: fwd_f<SNN_F8E5M2>(st, grid, a, F, spike_type); break;
    }
    SNN_CU_LAUNCHED("neuron_forward_mp");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_neuron_backward_mp(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                                  snn_dtype S, snn_dtype F, snn_dtype B, const void *h_seq,
                                                  const void *v0, const float *gs, const float *gv_last, float *gx,
                                                  float *gv0, double *gk) {
    MpBwdArgs a;
    SNN_TRY(snn_cuda_mp_bwd_args(o, k, T, n, S, F, B, gk != NULL, &a));
    if (!c) return snn_error(SNN_E_INVALID, "GPU neuron mixed-precision backward: no CUDA context");
    if (!h_seq && T > 0 && n > 0)
        return snn_error(SNN_E_INVALID,
                         "GPU neuron mixed-precision backward: h_seq is NULL (run a forward that saves it)");
    if (n > (size_t)0x7fffffff * SNN_CUDA_MP_BLOCK)
        return snn_error(SNN_E_SHAPE, "GPU neuron mixed-precision backward: n = %zu is too large for one grid", n);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (gk && (!a.want_k || n == 0)) {
        /* IF (no k) or no neurons: the CPU's sum is +0 */
        SNN_CU_TRY(cudaMemsetAsync(gk, 0, sizeof(double), st));
    }
    if (n == 0) return SNN_OK;
    a.h = h_seq;
    a.v0 = v0;
    a.gs = gs;
    a.gvlast = gv_last;
    a.gx = gx;
    a.gv0 = gv0;
    double *blk = a.want_k ? gk + 1 : NULL;
    const unsigned grid = mp_grid(n);
    switch (S) {
    case SNN_F32: bwd_b<SNN_F32>(st, grid, a, B, blk); break;
    case SNN_F16: bwd_b<SNN_F16>(st, grid, a, B, blk); break;
    case SNN_BF16: bwd_b<SNN_BF16>(st, grid, a, B, blk); break;
    case SNN_F8E4M3: bwd_b<SNN_F8E4M3>(st, grid, a, B, blk); break;
    default: bwd_b<SNN_F8E5M2>(st, grid, a, B, blk); break;
    }
    SNN_CU_LAUNCHED("neuron_backward_mp");
    if (a.want_k) {
        mp_gk_finish<<<1, SNN_CUDA_MP_MAX_CHUNKS, 0, st>>>(gk, (long long)grid, a.mode == MPK_DECAY, k);
        SNN_CU_LAUNCHED("neuron_backward_mp dL/dk");
    }
    return SNN_OK;
}
