/* Mixed-precision multi-step neurons on the GPU: SpikingJelly's Triton mixed path with
 * storage S, forward arithmetic F and backward arithmetic B, bit-identical to the CPU
 * emulation snn_neuron_forward_mp / snn_neuron_backward_mp (include/snn/neuron.h lists the
 * rounding rules; this file follows them operation by operation). Internal header: the C
 * part is usable from C (tests, the CLI), the kernel bodies below it are CUDA C++ and are
 * written as host+device functions of the neuron index, so the host-emulation test
 * (tests/cuda/test_cuda_emul.cu) runs exactly this code on the CPU.
 *
 * Buffers (device memory; T steps of n neurons, [T][n] row-major):
 *   x [T][n], v0 [n], h_seq [T][n], v_last [n]: stored in S (FP8 storage = one byte a value,
 *     FP16/BF16 two, FP32 four), exactly what SpikingJelly keeps in the storage dtype;
 *   s [T][n]: spikes 0/1 in spike_type (f32, bf16 or f16: SpikingJelly's spike dtypes);
 *   gs [T][n], gv_last [n], gx [T][n], gv0 [n]: FP32 (gs and gv_last are read as B values;
 *     gx and gv0 are FP32 holding B values, as the CPU returns them);
 *   gk: snn_cuda_neuron_mp_gk_len(n) doubles; gk[0] receives dL/dk (overwritten), the rest
 *     is scratch for the block sums.
 * Accepted dtypes and NULL conventions are those of the CPU functions: S, F, B each f32 |
 * f16 | bf16 | f8e4m3 | f8e5m2, an FP8 arithmetic dtype must equal S, anything else is
 * SNN_E_INVALID; v0 NULL starts at V_r; h_seq, v_last, gs, gv_last, gx, gv0, gk may be NULL
 * (the backward needs h_seq when T > 0 and n > 0). T = 0 or n = 0 is accepted (nothing but
 * v_last / gv0 / gk to write). Calls are asynchronous on the context's stream.
 *
 * dL/dk (LIF and PLIF; IF gives 0) is summed exactly like the CPU: per-neuron partials (in
 * double for B = f32, FP32 for FP8, B for FP16/BF16), summed in double over blocks of 256
 * consecutive neurons in index order, then over min(#blocks, 64) chunks of consecutive
 * blocks, then over the chunks, then divided by k (decay_input). Same order, same
 * roundings: the result is bit-identical too. */
#ifndef SNN_CUDA_NEURON_MP_H
#define SNN_CUDA_NEURON_MP_H

#include <stddef.h>

#include "snn/cuda.h"
#include "snn/neuron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Neurons per block of the dL/dk sum (the CPU's MP_BLOCK) and its chunk count cap. */
#define SNN_CUDA_MP_BLOCK 256
#define SNN_CUDA_MP_MAX_CHUNKS 64

/* snn_cuda_neuron_mp_gk_len, snn_cuda_neuron_forward_mp, snn_cuda_neuron_backward_mp: include/snn/cuda.h */

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------------------------------
 * Kernel bodies (CUDA C++, host + device). */
#ifdef __CUDACC__
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_rn.h" /* rn_fadd, rn_fmul, ...: no FMA contraction, host and device */

enum { MPK_IF = 0, MPK_DECAY = 1, MPK_NODECAY = 2 };

/* Storage C++ type of a dtype. */
template <int D> struct MpT;
template <> struct MpT<SNN_F32> { typedef float T; };
template <> struct MpT<SNN_F16> { typedef __half T; };
template <> struct MpT<SNN_BF16> { typedef __nv_bfloat16 T; };
template <> struct MpT<SNN_F8E4M3> { typedef snn_e4m3 T; };
template <> struct MpT<SNN_F8E5M2> { typedef snn_e5m2 T; };

/* Round to D and back: FP16/BF16 round to nearest even and overflow to inf (the hardware
 * casts), FP8 saturates (SATFINITE), as the CPU's mp_r. */
template <int D> SNN_HD float mp_rnd(float f) {
    typedef typename MpT<D>::T TT;
    return Io<TT>::ld(Io<TT>::st(f));
}

/* The same with the dtype known only at run time (constants, the backward's use of F). */
SNN_HD float mp_rnd_rt(int d, float f) {
    switch (d) {
    case SNN_F16: return mp_rnd<SNN_F16>(f);
    case SNN_BF16: return mp_rnd<SNN_BF16>(f);
    case SNN_F8E4M3: return mp_rnd<SNN_F8E4M3>(f);
    case SNN_F8E5M2: return mp_rnd<SNN_F8E5M2>(f);
    default: return f;
    }
}

/* snn_expf_fast (src/neuron/surrogate_impl.h) operation by operation: clamp, n = rint(x
 * log2e), Cody-Waite reduction, degree-7 Taylor polynomial (Horner), times 2^n. */
SNN_HD float mp_expf(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-06f;
    float xc = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f;
    float nn = rintf(rn_fmul(xc, log2e));
    float r = rn_fsub(rn_fsub(xc, rn_fmul(nn, ln2_hi)), rn_fmul(nn, ln2_lo));
    float p = 1.0f / 5040.0f;
    p = rn_fadd(rn_fmul(p, r), 1.0f / 720.0f);
    p = rn_fadd(rn_fmul(p, r), 1.0f / 120.0f);
    p = rn_fadd(rn_fmul(p, r), 1.0f / 24.0f);
    p = rn_fadd(rn_fmul(p, r), 1.0f / 6.0f);
    p = rn_fadd(rn_fmul(p, r), 0.5f);
    p = rn_fadd(rn_fmul(p, r), 1.0f);
    p = rn_fadd(rn_fmul(p, r), 1.0f);
    uint32_t bits = (uint32_t)((int)nn + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    float y = x < -87.0f ? 0.0f : rn_fmul(p, two_n);
    return x == x ? y : x;
}

/* The surrogate derivatives of surrogate_impl.h (what the CPU's mixed path calls), same
 * operations in the same order. */
SNN_HD float mp_sg(int sg, float a, float x) {
    switch (sg) {
    case SNN_SG_SIGMOID: {
        float e = mp_expf(-fabsf(rn_fmul(a, x)));
        float d = rn_fadd(1.0f, e);
        return rn_fdiv(rn_fmul(a, e), rn_fmul(d, d));
    }
    case SNN_SG_ATAN: {
        float z = rn_fmul(rn_fmul(0.5f * 3.14159265358979323846f, a), x);
        return rn_fdiv(rn_fmul(0.5f, a), rn_fadd(1.0f, rn_fmul(z, z)));
    }
    case SNN_SG_PIECEWISE_QUADRATIC: return fmaxf(0.0f, rn_fsub(a, rn_fmul(rn_fmul(a, a), fabsf(x))));
    case SNN_SG_PIECEWISE_EXP: return rn_fmul(rn_fmul(0.5f, a), mp_expf(rn_fmul(-a, fabsf(x))));
    case SNN_SG_SOFTSIGN: {
        float d = rn_fadd(rn_fdiv(1.0f, a), fabsf(x));
        return rn_fdiv(1.0f, rn_fmul(rn_fmul(rn_fmul(2.0f, a), d), d));
    }
    case SNN_SG_SUPERSPIKE: {
        float d = rn_fadd(fabsf(x), 1.0f);
        return rn_fdiv(a, rn_fmul(d, d));
    }
    case SNN_SG_ERF: {
        float z = rn_fmul(a, x);
        return rn_fmul(rn_fmul(a, 0.56418958354775628695f), mp_expf(rn_fmul(-z, z)));
    }
    default: return 0.0f;
    }
}

struct MpFwdArgs {
    int T;
    size_t n;
    int mode, soft;
    float vth;                       /* FP32 spike test */
    float kF, vrF, vthF, v_resetF;   /* constants in F */
    float vinit;                     /* F value of the membrane without v0 */
    const void *x, *v0;
    void *s, *h, *vlast;
};

struct MpBwdArgs {
    int T;
    size_t n;
    int mode, soft, detach, want_k, sg, F;
    float alpha, vth;
    float vrB, vthB, aB, cB; /* constants in B */
    float vr32;              /* FP32 V_r (FP32 and FP8 k-gradient terms) */
    float vthF, v_resetF, vinitS;
    const void *h, *v0;
    const float *gs, *gvlast;
    float *gx, *gv0;
};

/* The charge in the plain kernel's order, every result rounded to F. */
template <int F> SNN_HD float mp_charge(const MpFwdArgs &a, float v, float x) {
    if (a.mode == MPK_IF) return mp_rnd<F>(rn_fadd(v, x));
    float t = mp_rnd<F>(rn_fsub(a.vrF, v));
    if (a.mode == MPK_DECAY) {
        t = mp_rnd<F>(rn_fadd(t, x));
        t = mp_rnd<F>(rn_fmul(a.kF, t));
        return mp_rnd<F>(rn_fadd(v, t));
    }
    t = mp_rnd<F>(rn_fmul(a.kF, t));
    t = mp_rnd<F>(rn_fadd(v, t));
    return mp_rnd<F>(rn_fadd(t, x));
}

/* Neuron i over all T steps (one thread per neuron; consecutive threads read consecutive
 * neurons, so every step's loads and stores are coalesced). */
template <int S, int F, typename TSP> SNN_HD void mp_fwd_body(const MpFwdArgs &a, size_t i) {
    typedef typename MpT<S>::T TS;
    const TS *x = (const TS *)a.x;
    TSP *s = (TSP *)a.s;
    TS *h = (TS *)a.h;
    const size_t n = a.n;
    float v = a.v0 ? mp_rnd<F>(Io<TS>::ld(((const TS *)a.v0)[i])) : a.vinit;
    for (int t = 0; t < a.T; t++) {
        const size_t off = (size_t)t * n + i;
        float xv = mp_rnd<F>(Io<TS>::ld(x[off]));
        float hv = mp_charge<F>(a, v, xv);
        bool sp = hv >= a.vth;
        s[off] = Io<TSP>::spike(sp);
        /* the membrane stays an F value between steps; only what is stored is rounded to S */
        v = sp ? (a.soft ? mp_rnd<F>(rn_fsub(hv, a.vthF)) : a.v_resetF) : hv;
        if (h) h[off] = Io<TS>::st(hv);
    }
    if (a.vlast) ((TS *)a.vlast)[i] = Io<TS>::st(v);
}

/* Neuron i of the backward; returns its dL/dk partial (0 unless a.want_k), as a double. */
template <int S, int B> SNN_HD double mp_bwd_body(const MpBwdArgs &a, size_t i) {
    typedef typename MpT<S>::T TS;
    const TS *hs = (const TS *)a.h;
    const size_t n = a.n;
    const bool k_fp8 = B == SNN_F8E4M3 || B == SNN_F8E5M2, k_f32 = B == SNN_F32;
    float carry = a.gvlast ? mp_rnd<B>(a.gvlast[i]) : 0.0f;
    float accf = 0.0f;
    double accd = 0.0;
    for (int t = a.T - 1; t >= 0; t--) {
        const size_t off = (size_t)t * n + i;
        const float h = Io<TS>::ld(hs[off]); /* h as stored */
        const float sig = mp_rnd<B>(mp_sg(a.sg, a.alpha, rn_fsub(h, a.vth)));
        const float hB = mp_rnd<B>(h);
        const float G = rn_fadd(carry, 0.0f); /* -0 becomes +0, as the plain kernel */
        const float gS = a.gs ? mp_rnd<B>(a.gs[off]) : 0.0f;
        const float sp = h >= a.vth ? 1.0f : 0.0f;
        float gh;
        if (!a.soft && !a.detach) {
            float u = mp_rnd<B>(rn_fsub(a.vrB, hB));
            u = mp_rnd<B>(rn_fmul(G, u));
            u = mp_rnd<B>(rn_fadd(gS, u));
            u = mp_rnd<B>(rn_fmul(u, sig));
            gh = mp_rnd<B>(rn_fadd(u, rn_fmul(G, 1.0f - sp)));
        } else if (!a.soft) {
            gh = mp_rnd<B>(rn_fadd(mp_rnd<B>(rn_fmul(gS, sig)), rn_fmul(G, 1.0f - sp)));
        } else if (!a.detach) {
            float u = mp_rnd<B>(rn_fmul(a.vthB, G));
            u = mp_rnd<B>(rn_fsub(gS, u));
            u = mp_rnd<B>(rn_fmul(u, sig));
            gh = mp_rnd<B>(rn_fadd(u, G));
        } else {
            gh = mp_rnd<B>(rn_fadd(mp_rnd<B>(rn_fmul(gS, sig)), G));
        }
        if (a.gx) a.gx[off] = mp_rnd<B>(rn_fmul(gh, a.cB));
        carry = mp_rnd<B>(rn_fmul(gh, a.aB));
        if (a.want_k) {
            /* v_{t-1} as the forward stored it: S(reset in F) of the stored h_{t-1} */
            float vp;
            if (t > 0) {
                const float hp = Io<TS>::ld(hs[off - n]);
                vp = !(hp >= a.vth) ? hp
                                    : mp_rnd<S>(a.soft ? mp_rnd_rt(a.F, rn_fsub(hp, a.vthF)) : a.v_resetF);
            } else {
                vp = a.v0 ? Io<TS>::ld(((const TS *)a.v0)[i]) : a.vinitS;
            }
            if (k_f32) {
                double d = a.mode == MPK_DECAY ? (double)h - (double)vp : (double)a.vr32 - (double)vp;
                accd = rn_dadd(accd, rn_dmul((double)gh, d));
            } else if (k_fp8) {
                float d = a.mode == MPK_DECAY ? rn_fsub(h, vp) : rn_fsub(a.vr32, vp);
                accf = rn_fadd(accf, rn_fmul(gh, d));
            } else {
                float d = a.mode == MPK_DECAY ? mp_rnd<B>(rn_fsub(hB, mp_rnd<B>(vp)))
                                              : mp_rnd<B>(rn_fsub(a.vrB, mp_rnd<B>(vp)));
                accf = mp_rnd<B>(rn_fadd(accf, mp_rnd<B>(rn_fmul(gh, d))));
            }
        }
    }
    if (a.gv0) a.gv0[i] = carry;
    if (!a.want_k) return 0.0;
    return k_f32 ? accd : (double)accf;
}

/* Sequential double sum in index order (the CPU's loops: start at +0, add one by one). */
SNN_HD double mp_seq_sum(const double *p, size_t len) {
    double s = 0.0;
    for (size_t j = 0; j < len; j++) s = rn_dadd(s, p[j]);
    return s;
}
/* Number of chunks and the block range of chunk ch (the CPU's split, in 64-bit). */
SNN_HD int mp_chunks(long long nb) { return nb < SNN_CUDA_MP_MAX_CHUNKS ? (int)nb : SNN_CUDA_MP_MAX_CHUNKS; }
SNN_HD void mp_chunk_range(long long nb, int nch, int ch, long long *b0, long long *b1) {
    *b0 = nb * ch / nch;
    *b1 = nb * (ch + 1) / nch;
}
/* The total from the chunk sums: their sum in order, divided by k for decay_input. */
SNN_HD double mp_gk_total(const double *part, int nch, int decay, float k) {
    double s = mp_seq_sum(part, (size_t)nch);
    if (decay) {
#ifdef __CUDA_ARCH__
        s = __ddiv_rn(s, (double)k);
#else
        s /= (double)k;
#endif
    }
    return s;
}

/* Argument checks of the CPU (mp_check) plus the kind, surrogate and spike type, and the
 * constants as the CPU materialises them. Host code, shared by the launchers and the
 * host-emulation test. */
snn_status snn_cuda_mp_fwd_args(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                snn_dtype spike_type, MpFwdArgs *a);
snn_status snn_cuda_mp_bwd_args(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                snn_dtype B, int want_k, MpBwdArgs *a);

#endif /* __CUDACC__ */
#endif
