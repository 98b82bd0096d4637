/* Fused multi-step neuron kernels (CPU reference).
 *
 * Layout [T][n]: step t of neuron i is at t*n + i. Neurons are processed in blocks of
 * NK_BLOCK consecutive neurons; a block keeps its membrane (forward) or its carried
 * gradient (backward) in a small local array and walks the T steps, so each inner loop is
 * a contiguous, branch-free pass over the block that the compiler vectorises. Blocks are
 * independent and are spread over OpenMP threads.
 *
 * The mode flags are passed as constants into always-inline block functions, so each
 * (charge mode, reset mode, detach) combination gets its own specialised loop. */
#include <string.h>

#include "neuron/surrogate_impl.h"
#include "snn/neuron.h"

#define NK_BLOCK 256
/* Below this many neuron-steps a parallel region costs more than it saves. */
#define NK_PAR_MIN 32768
/* The PLIF k-gradient is reduced over a fixed number of chunks and summed in chunk order,
 * so the result does not depend on the thread count. */
#define NK_MAX_CHUNKS 64

#if defined(__GNUC__)
#define NK_INLINE static inline __attribute__((always_inline))
#else
#define NK_INLINE static inline
#endif

enum { NK_IF = 0, NK_DECAY = 1, NK_NODECAY = 2 };

/* Charge as the fused SpikingJelly kernels evaluate it (r = k precomputed):
 * IF h = v + x; decay_input h = v + k (V_r - v + x); otherwise h = v + k (V_r - v) + x. */
NK_INLINE float nk_charge(const int mode, float v, float x, float k, float vr) {
    if (mode == NK_IF) return v + x;
    if (mode == NK_DECAY) return v + k * (vr - v + x);
    return v + k * (vr - v) + x;
}

/* Reset with s = H(h - vth) in {0, 1}: hard v' = s v_reset + (1 - s) h, soft v' = h - s vth.
 * Written as selects, which give the same values for finite h. */
NK_INLINE float nk_reset(const int soft, float h, float vth, float vr) {
    if (soft) return h >= vth ? h - vth : h;
    return h >= vth ? vr : h;
}

static int nk_mode(const snn_neuron_opts *o) {
    if (o->kind == SNN_NEURON_IF) return NK_IF;
    return o->decay_input ? NK_DECAY : NK_NODECAY;
}

/* V_r: the leak target and the initial membrane (v_reset for hard reset, 0 for soft). */
static float nk_vr(const snn_neuron_opts *o) { return o->soft_reset ? 0.0f : o->v_reset; }

/* ---------------------------------------------------------------- forward */

NK_INLINE void nk_fwd_block(const int mode, const int soft, int T, size_t n, size_t i0, size_t len,
                            float k, float vth, float vr, const float *x, const float *v0, float *s,
                            float *h_seq, float *v_seq, float *v_last) {
    float v[NK_BLOCK], hb[NK_BLOCK];
    if (v0)
        memcpy(v, v0 + i0, len * sizeof(float));
    else
        for (size_t j = 0; j < len; j++) v[j] = vr;
    for (int t = 0; t < T; t++) {
        size_t off = (size_t)t * n + i0;
        const float *restrict xt = x + off;
        float *restrict st = s + off;
        float *restrict ht = h_seq ? h_seq + off : hb;
        for (size_t j = 0; j < len; j++) {
            float h = nk_charge(mode, v[j], xt[j], k, vr);
            st[j] = h >= vth ? 1.0f : 0.0f;
            v[j] = nk_reset(soft, h, vth, vr);
            ht[j] = h;
        }
        if (v_seq) memcpy(v_seq + off, v, len * sizeof(float));
    }
    if (v_last) memcpy(v_last + i0, v, len * sizeof(float));
}

#define NK_FWD(M, S) nk_fwd_block(M, S, T, n, i0, len, k, vth, vr, x, v0, s, h_seq, v_seq, v_last)

void snn_neuron_forward(const snn_neuron_opts *o, float k, int T, size_t n, const float *x,
                        const float *v0, float *s, float *h_seq, float *v_seq, float *v_last) {
    const int mode = nk_mode(o), soft = o->soft_reset != 0;
    const float vth = o->v_threshold, vr = nk_vr(o);
    const long nb = (long)((n + NK_BLOCK - 1) / NK_BLOCK);
    const int par = (size_t)(T > 0 ? T : 1) * n >= NK_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (long b = 0; b < nb; b++) {
        size_t i0 = (size_t)b * NK_BLOCK;
        size_t len = n - i0 < NK_BLOCK ? n - i0 : NK_BLOCK;
        switch (mode * 2 + soft) {
        case NK_IF * 2 + 0: NK_FWD(NK_IF, 0); break;
        case NK_IF * 2 + 1: NK_FWD(NK_IF, 1); break;
        case NK_DECAY * 2 + 0: NK_FWD(NK_DECAY, 0); break;
        case NK_DECAY * 2 + 1: NK_FWD(NK_DECAY, 1); break;
        case NK_NODECAY * 2 + 0: NK_FWD(NK_NODECAY, 0); break;
        default: NK_FWD(NK_NODECAY, 1); break;
        }
    }
}

/* Single step, written as its own plain loop (not through the block kernel) so the test
 * that composes T single steps checks the fused kernel's indexing independently. */
void snn_neuron_step(const snn_neuron_opts *o, float k, size_t n, const float *x, float *v,
                     float *s, float *h) {
    const int mode = nk_mode(o), soft = o->soft_reset != 0;
    const float vth = o->v_threshold, vr = nk_vr(o);
    for (size_t i = 0; i < n; i++) {
        float hv;
        switch (mode) {
        case NK_IF: hv = nk_charge(NK_IF, v[i], x[i], k, vr); break;
        case NK_DECAY: hv = nk_charge(NK_DECAY, v[i], x[i], k, vr); break;
        default: hv = nk_charge(NK_NODECAY, v[i], x[i], k, vr); break;
        }
        s[i] = hv >= vth ? 1.0f : 0.0f;
        v[i] = soft ? nk_reset(1, hv, vth, vr) : nk_reset(0, hv, vth, vr);
        if (h) h[i] = hv;
    }
}

/* ---------------------------------------------------------------- backward */

/* sig[j] = g'(h[j] - vth) for one row of a block; the switch sits outside the loop. */
static void nk_sg_row(snn_surrogate_kind kind, float a, float vth, const float *restrict h,
                      float *restrict sig, size_t len) {
    switch (kind) {
    case SNN_SG_SIGMOID: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_sigmoid(a, h[j] - vth); break;
    case SNN_SG_ATAN: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_atan(a, h[j] - vth); break;
    case SNN_SG_PIECEWISE_QUADRATIC:
        for (size_t j = 0; j < len; j++) sig[j] = snn_sg_pw_quadratic(a, h[j] - vth);
        break;
    case SNN_SG_PIECEWISE_EXP: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_pw_exp(a, h[j] - vth); break;
    case SNN_SG_SOFTSIGN: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_softsign(a, h[j] - vth); break;
    case SNN_SG_SUPERSPIKE: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_superspike(a, h[j] - vth); break;
    case SNN_SG_ERF: for (size_t j = 0; j < len; j++) sig[j] = snn_sg_erf(a, h[j] - vth); break;
    default: for (size_t j = 0; j < len; j++) sig[j] = 0.0f; break;
    }
}

typedef struct {
    int T;
    size_t n;
    snn_surrogate_kind sg;
    float alpha, vth, vr, k;
    float a; /* dh_t/dv_{t-1}: 1 (IF) or 1 - k */
    float c; /* dh_t/dx_t: k (decay_input) or 1 */
    int decay_input;
    const float *h_seq, *v0, *gs, *gv_seq, *gv_last;
    float *gx, *gv0;
} nk_bwd_args;

/* Reverse BPTT over one block (docs/neurons.md): with G the total gradient on v_t,
 *   gH = gS sig + G dv_t/dh_t,  gx_t = gH c,  carry = gH a,  gv0 = final carry.
 * Returns the block's contribution to dL/dk when want_k (times k for decay_input, see
 * below), else 0. */
NK_INLINE double nk_bwd_block(const int soft, const int detach, const int want_k,
                              const nk_bwd_args *A, size_t i0, size_t len) {
    float carry[NK_BLOCK], sig[NK_BLOCK];
    double acc[NK_BLOCK];
    const size_t n = A->n;
    const float vth = A->vth, vr = A->vr, a = A->a, c = A->c;
    if (A->gv_last)
        memcpy(carry, A->gv_last + i0, len * sizeof(float));
    else
        for (size_t j = 0; j < len; j++) carry[j] = 0.0f;
    if (want_k)
        for (size_t j = 0; j < len; j++) acc[j] = 0.0;
    for (int t = A->T - 1; t >= 0; t--) {
        size_t off = (size_t)t * n + i0;
        const float *restrict ht = A->h_seq + off;
        const float *restrict gst = A->gs ? A->gs + off : NULL;
        const float *restrict gvt = A->gv_seq ? A->gv_seq + off : NULL;
        float *restrict gxt = A->gx ? A->gx + off : NULL;
        nk_sg_row(A->sg, A->alpha, vth, ht, sig, len);
        for (size_t j = 0; j < len; j++) {
            float h = ht[j];
            float G = carry[j] + (gvt ? gvt[j] : 0.0f);
            float gS = gst ? gst[j] : 0.0f;
            float sp = h >= vth ? 1.0f : 0.0f;
            float gh;
            if (!soft && !detach) gh = (gS + G * (vr - h)) * sig[j] + G * (1.0f - sp);
            else if (!soft) gh = gS * sig[j] + G * (1.0f - sp);
            else if (!detach) gh = (gS - vth * G) * sig[j] + G;
            else gh = gS * sig[j] + G;
            if (gxt) gxt[j] = gh * c;
            carry[j] = gh * a;
            if (want_k) {
                /* v_{t-1} is recomputed from h_{t-1}, so the forward only keeps h. */
                float vp = t > 0 ? nk_reset(soft, A->h_seq[off - n + j], vth, vr)
                                 : (A->v0 ? A->v0[i0 + j] : vr);
                /* decay_input: dh/dk = V_r - v + x = (h - v)/k; the 1/k is applied once
                 * to the total. Otherwise dh/dk = V_r - v. */
                double d = A->decay_input ? (double)h - (double)vp : (double)vr - (double)vp;
                acc[j] += (double)gh * d;
            }
        }
    }
    if (A->gv0) memcpy(A->gv0 + i0, carry, len * sizeof(float));
    double sum = 0.0;
    if (want_k)
        for (size_t j = 0; j < len; j++) sum += acc[j];
    return sum;
}

#define NK_BWD(S, D, K) nk_bwd_block(S, D, K, &A, i0, len)

static double nk_bwd_range(const nk_bwd_args *ap, int soft, int detach, int want_k, long b0, long b1) {
    const nk_bwd_args A = *ap;
    double sum = 0.0;
    for (long b = b0; b < b1; b++) {
        size_t i0 = (size_t)b * NK_BLOCK;
        size_t len = A.n - i0 < NK_BLOCK ? A.n - i0 : NK_BLOCK;
        switch (soft * 4 + detach * 2 + want_k) {
        case 0: sum += NK_BWD(0, 0, 0); break;
        case 1: sum += NK_BWD(0, 0, 1); break;
        case 2: sum += NK_BWD(0, 1, 0); break;
        case 3: sum += NK_BWD(0, 1, 1); break;
        case 4: sum += NK_BWD(1, 0, 0); break;
        case 5: sum += NK_BWD(1, 0, 1); break;
        case 6: sum += NK_BWD(1, 1, 0); break;
        default: sum += NK_BWD(1, 1, 1); break;
        }
    }
    return sum;
}

void snn_neuron_backward(const snn_neuron_opts *o, float k, int T, size_t n, const float *h_seq,
                         const float *v0, const float *gs, const float *gv_seq,
                         const float *gv_last, float *gx, float *gv0, double *gk) {
    const int mode = nk_mode(o);
    nk_bwd_args A = {
        .T = T,
        .n = n,
        .sg = o->surrogate,
        .alpha = snn_neuron_alpha(o),
        .vth = o->v_threshold,
        .vr = nk_vr(o),
        .k = k,
        .a = mode == NK_IF ? 1.0f : 1.0f - k,
        .c = mode == NK_DECAY ? k : 1.0f,
        .decay_input = mode == NK_DECAY,
        .h_seq = h_seq,
        .v0 = v0,
        .gs = gs,
        .gv_seq = gv_seq,
        .gv_last = gv_last,
        .gx = gx,
        .gv0 = gv0,
    };
    const int soft = o->soft_reset != 0, detach = o->detach_reset != 0;
    const int want_k = gk != NULL && mode != NK_IF;
    const long nb = (long)((n + NK_BLOCK - 1) / NK_BLOCK);
    const int par = (size_t)(T > 0 ? T : 1) * n >= NK_PAR_MIN;
    const int nch = nb < NK_MAX_CHUNKS ? (int)nb : NK_MAX_CHUNKS;
    double part[NK_MAX_CHUNKS];
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int ch = 0; ch < nch; ch++) {
        long b0 = (long)((long long)nb * ch / nch), b1 = (long)((long long)nb * (ch + 1) / nch);
        part[ch] = nk_bwd_range(&A, soft, detach, want_k, b0, b1);
    }
    if (gk) {
        double sum = 0.0;
        for (int ch = 0; ch < nch && want_k; ch++) sum += part[ch];
        if (want_k && A.decay_input) sum /= (double)k;
        *gk = sum;
    }
}
