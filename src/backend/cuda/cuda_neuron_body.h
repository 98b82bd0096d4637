/* Bodies of the fused multi-step neuron kernels (one thread owns V consecutive neurons and
 * walks the whole time loop). Written as host+device functions of the thread index so the
 * host-emulation test can run exactly this code on the CPU.
 *
 * Memory behaviour: each step touches one pack of V elements per tensor per thread (16 or 8
 * bytes); the loads of U consecutive steps are issued before any of them is used, so a thread
 * keeps U independent loads in flight (the membrane recurrence only depends on registers). */
#ifndef SNN_CUDA_NEURON_BODY_H
#define SNN_CUDA_NEURON_BODY_H

#include <math.h>

#include <type_traits>

#include "backend/cuda/cuda_internal.h"


struct NeuronP {
    int kind;        /* 0 IF, 1 LIF, 2 PLIF */
    int decay_input; /* LIF/PLIF */
    int soft;        /* soft reset (v_reset = None) */
    int detach;      /* detach_reset */
    int sg;          /* surrogate id */
    float alpha, vth, vreset, k;
};

struct FwdArgs {
    NeuronP p;
    int T;
    size_t n;
    const void *x;
    const float *bias;
    size_t bias_period;
    const float *v0;
    void *s, *h, *vseq;
    float *vlast;
};

struct BwdArgs {
    NeuronP p;
    int T;
    size_t n;
    const void *h;
    const float *v0;
    const void *gs, *gvseq;
    const float *gvlast;
    void *gx;
    float *gv0, *gxsum;
    int want_gk, want_amax;
    int gk_parts; /* 1: gk[blockIdx.x] = the block's dL/dk (summed in a fixed order after); 0: atomicAdd */
};

/* FP32 exponential and division: the hardware approximations on the device (a few ulp; the
 * backward is instruction-bound in 16-bit storage), the libm ones on the host. */
SNN_HD float snn_exp(float x) {
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return expf(x);
#endif
}
SNN_HD float snn_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdividef(a, b);
#else
    return a / b;
#endif
}

/* Surrogate derivative g'(x), x = h - v_threshold (SpikingJelly's table; FP32 math). */
SNN_HD float snn_sg_grad(int sg, float a, float x) {
    switch (sg) {
    case 0: { /* Sigmoid: a·sig(z)(1-sig(z)) = a·e/(1+e)^2, e = exp(-|z|): no cancellation */
        float e = snn_exp(-fabsf(a * x));
        float d = 1.0f + e;
        return snn_div(a * e, d * d);
    }
    case 1: { /* ATan */
        float u = 1.57079632679489662f * a * x;
        return snn_div(0.5f * a, 1.0f + u * u);
    }
    case 2: /* PiecewiseQuadratic */
        return fmaxf(0.0f, a - a * a * fabsf(x));
    case 3: /* PiecewiseExp */
        return 0.5f * a * snn_exp(-a * fabsf(x));
    case 4: { /* SoftSign */
        float d = snn_div(1.0f, a) + fabsf(x);
        return snn_div(1.0f, 2.0f * a * d * d);
    }
    case 5: { /* SuperSpike */
        float d = fabsf(x) + 1.0f;
        return snn_div(a, d * d);
    }
    default: /* Erf: alpha/sqrt(pi) * exp(-(alpha x)^2) */
        return a * 0.56418958354775628f * snn_exp(-(a * x) * (a * x));
    }
}

/* Multiply and add without contraction into FMA on the device, so the forward pass rounds
 * exactly like the CPU reference (C17 mode: no contraction) and spikes match bit for bit. */
SNN_HD float snn_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Charge: h from the previous membrane v and the input x (order of operations as the
 * reference: v + k·((V_r - v) + x), or (v + k·(V_r - v)) + x). */
SNN_HD float snn_charge(const NeuronP &p, float v, float x) {
    if (p.kind == 0) return v + x;
    float vr = p.soft ? 0.0f : p.vreset;
    return p.decay_input ? v + snn_mul(p.k, (vr - v) + x) : (v + snn_mul(p.k, vr - v)) + x;
}

/* Reset after firing. */
SNN_HD float snn_reset(const NeuronP &p, float h, float s) {
    return p.soft ? h - s * p.vth : (s != 0.0f ? p.vreset : h);
}

/* U: time steps whose loads are issued together (more when few threads must keep the
 * memory system busy, e.g. long T with few neurons). */
/* TH: the type of h_seq and v_seq (the storage type TI, or FP32 while x and the spikes are
 * 16-bit: the engine's typed activations keep the saved membrane in FP32).
 * TR (void: none): the input x + bias is rounded to TR before the charge -- the engine's
 * Linear -> neuron pair whose Linear leaves its bias and its output rounding to the neuron
 * (x is then the FP32 product and the neuron sees exactly the Linear's rounded output). */
template <typename TI, typename TS, int V, int U, typename TH = TI, typename TR = void>
SNN_HD void neuron_fwd_body(const FwdArgs &a, size_t tid) {
    const size_t i0 = tid * V;
    if (i0 >= a.n) return;
    const NeuronP p = a.p;
    const size_t n = a.n;
    const TI *x = (const TI *)a.x;
    TS *s = (TS *)a.s;
    TH *h = (TH *)a.h, *vs = (TH *)a.vseq;
    float v[V], b[V];
    const float vinit = p.soft ? 0.0f : p.vreset;
#pragma unroll
    for (int j = 0; j < V; j++) {
        v[j] = a.v0 ? a.v0[i0 + j] : vinit;
        b[j] = a.bias ? a.bias[(i0 + j) % a.bias_period] : 0.0f;
    }
    for (int t0 = 0; t0 < a.T; t0 += U) {
        Pack<TI, V> xp[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (t0 + u < a.T) xp[u] = pack_ld<TI, V>(x + (size_t)(t0 + u) * n + i0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (t0 + u >= a.T) break;
            const size_t off = (size_t)(t0 + u) * n + i0;
            Pack<TS, V> sp;
            Pack<TH, V> hp, vp;
#pragma unroll
            for (int j = 0; j < V; j++) {
                float xin = Io<TI>::ld(xp[u].v[j]) + b[j];
                if constexpr (!std::is_void<TR>::value) xin = Io<TR>::ld(Io<TR>::st(xin));
                float hv = snn_charge(p, v[j], xin);
                bool fire = hv >= p.vth; /* Heaviside: Θ(0) = 1 */
                v[j] = snn_reset(p, hv, fire ? 1.0f : 0.0f);
                sp.v[j] = Io<TS>::spike(fire);
                hp.v[j] = Io<TH>::st(hv);
                vp.v[j] = Io<TH>::st(v[j]);
            }
            pack_st<TS, V>(s + off, sp);
            if (h) pack_st<TH, V>(h + off, hp);
            if (vs) pack_st<TH, V>(vs + off, vp);
        }
    }
    if (a.vlast) {
#pragma unroll
        for (int j = 0; j < V; j++) a.vlast[i0 + j] = v[j];
    }
}

/* Reverse-time BPTT; returns this thread's PLIF dL/dk partial in *gk and max|gx| in *amax.
 * SG >= 0: the surrogate fixed at compile time (the per-element switch over 7 surrogates
 * costs compares and branches in a loop that is instruction-bound in 16-bit storage);
 * SG = -1: chosen at run time from a.p.sg. The fixed-surrogate variants also skip max|gx|
 * (the launcher uses them only when no gx_amax is asked for). */
template <typename TI, int V, int U, bool PLIF, int SG = -1, typename TH = TI>
SNN_HD void neuron_bwd_body(const BwdArgs &a, size_t tid, float *gk, float *amax) {
    *gk = 0.0f;
    *amax = 0.0f;
    const size_t i0 = tid * V;
    if (i0 >= a.n) return;
    const NeuronP p = a.p;
    const size_t n = a.n;
    const TH *h = (const TH *)a.h;
    const TI *gs = (const TI *)a.gs, *gv = (const TI *)a.gvseq;
    TI *gx = (TI *)a.gx;
    constexpr bool plif = PLIF; /* a template flag: the PLIF extras cost registers */
    const float lk = p.kind == 0 ? 1.0f : 1.0f - p.k;             /* dh_t / dv_{t-1} */
    const float cx = (p.kind != 0 && p.decay_input) ? p.k : 1.0f;  /* dh_t / dx_t */
    const float vinit = p.soft ? 0.0f : p.vreset;
    const int sg = SG >= 0 ? SG : p.sg;
    float carry[V], tsum[V];
    float dk = 0.0f, mx = 0.0f;
#pragma unroll
    for (int j = 0; j < V; j++) {
        carry[j] = a.gvlast ? a.gvlast[i0 + j] : 0.0f;
        tsum[j] = 0.0f;
    }
    for (int tc = a.T - 1; tc >= 0; tc -= U) {
        /* hp[u] = h[tc-u]; hp[U] = h[tc-U] (PLIF needs h_{t-1} to rebuild v_{t-1}). */
        Pack<TH, V> hp[U + 1];
        Pack<TI, V> gp[U], vp[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = tc - u;
            if (t < 0) break;
            const size_t off = (size_t)t * n + i0;
            hp[u] = pack_ld<TH, V>(h + off);
            gp[u] = pack_ld<TI, V>(gs + off);
            if (gv) vp[u] = pack_ld<TI, V>(gv + off);
        }
        if (plif && tc - U >= 0)
            hp[U] = pack_ld<TH, V>(h + (size_t)(tc - U) * n + i0);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = tc - u;
            if (t < 0) break;
            Pack<TI, V> out;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float hv = Io<TH>::ld(hp[u].v[j]);
                const float gsv = Io<TI>::ld(gp[u].v[j]);
                const float G = (gv ? Io<TI>::ld(vp[u].v[j]) : 0.0f) + carry[j];
                const float x = hv - p.vth;
                const float sig = snn_sg_grad(sg, p.alpha, x);
                const float sv = x >= 0.0f ? 1.0f : 0.0f;
                float gH;
                if (!p.soft)
                    gH = p.detach ? gsv * sig + G * (1.0f - sv)
                                  : (gsv + G * (p.vreset - hv)) * sig + G * (1.0f - sv);
                else
                    gH = p.detach ? gsv * sig + G : (gsv - p.vth * G) * sig + G;
                const float gxv = gH * cx;
                carry[j] = gH * lk;
                out.v[j] = Io<TI>::st(gxv);
                tsum[j] += gxv;
                if (SG < 0) mx = fmaxf(mx, fabsf(Io<TI>::ld(out.v[j]))); /* see above */
                if (plif) {
                    float vprev;
                    if (t == 0) {
                        vprev = a.v0 ? a.v0[i0 + j] : vinit;
                    } else {
                        const float hprev = Io<TH>::ld(hp[u + 1].v[j]);
                        vprev = snn_reset(p, hprev, hprev >= p.vth ? 1.0f : 0.0f);
                    }
                    const float dhdk = p.decay_input ? (hv - vprev) / p.k
                                                     : (p.soft ? 0.0f : p.vreset) - vprev;
                    dk += gH * dhdk;
                }
            }
            pack_st<TI, V>(gx + (size_t)t * n + i0, out);
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
        if (a.gv0) a.gv0[i0 + j] = carry[j];
        if (a.gxsum) a.gxsum[i0 + j] = tsum[j];
    }
    *gk = dk;
    *amax = mx;
}

#endif
