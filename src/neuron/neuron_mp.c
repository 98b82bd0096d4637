/* Mixed-precision multi-step neuron kernels (CPU reference of SpikingJelly's Triton mixed
 * path, reference spikingjelly-core.md §5.3). The rounding rules are listed in
 * include/snn/neuron.h above snn_neuron_forward_mp; docs/neurons.md ("Neuron precision")
 * explains them.
 *
 * Each arithmetic result is rounded to the arithmetic dtype right after the FP32 operation
 * that produced it. Every operand is already a value of that dtype, so "FP32 op, then
 * round" is the correctly rounded result of the dtype's own operation (FP32 has more than
 * 2p + 2 bits for p = 11 (FP16) and smaller, where double rounding is known to be
 * harmless). With every dtype FP32 each rounding is the identity and the operations are
 * those of neuron_kernels.c in the same order, so the results are bit-identical (the
 * PLIF k-gradient is summed over the same blocks and chunks for that reason).
 *
 * Layout and parallel split as in neuron_kernels.c: blocks of MP_BLOCK consecutive
 * neurons walk the T steps; blocks are independent. */
#include <string.h>

#include "core/error_internal.h"
#include "neuron/neuron_mp.h"
#include "neuron/surrogate_impl.h"
#include "snn/neuron.h"

/* Must match neuron_kernels.c: the PLIF k-gradient sums per block and per chunk of blocks
 * in a fixed order, and FP32 results have to be bit-identical to the plain kernel's. */
#define MP_BLOCK 256
#define MP_PAR_MIN 32768
#define MP_MAX_CHUNKS 64

enum { MP_IF = 0, MP_DECAY = 1, MP_NODECAY = 2 };

/* Round to t and back. FP8 saturates (to +-448 / +-57344): an FP8 membrane that clipped to
 * inf (E5M2) or NaN (E4M3 has no inf) would poison the whole recurrence, while a clipped
 * membrane still fires and resets. FP16/BF16 overflow to inf, as the hardware casts do. */
static inline float mp_r(snn_dtype t, float f) {
    switch (t) {
    case SNN_F32: return f;
    case SNN_F16: return snn_f16_to_f32(snn_f32_to_f16(f));
    case SNN_BF16: return snn_bf16_to_f32(snn_f32_to_bf16(f));
    case SNN_F8E4M3: return snn_e4m3_to_f32(snn_f32_to_e4m3(f, 1));
    default: return snn_e5m2_to_f32(snn_f32_to_e5m2(f, 1));
    }
}

static int mp_is_fp8(snn_dtype t) { return t == SNN_F8E4M3 || t == SNN_F8E5M2; }

snn_status snn_neuron_mp_check(const snn_neuron_opts *o, int T, snn_dtype S, snn_dtype F, snn_dtype B, int with_b) {
    if (!o) return snn_error(SNN_E_INVALID, "neuron mixed precision: options are NULL");
    if (T < 0) return snn_error(SNN_E_INVALID, "neuron mixed precision: T = %d is negative", T);
    if ((unsigned)S > SNN_F8E5M2)
        return snn_error(SNN_E_INVALID,
                         "neuron storage dtype %d is not one of f32, f16, bf16, f8e4m3, f8e5m2", (int)S);
    const snn_dtype ar[2] = {F, B};
    const char *what[2] = {"forward", "backward"};
    for (int i = 0; i < 1 + with_b; i++) {
        if ((unsigned)ar[i] > SNN_F8E5M2)
            return snn_error(SNN_E_INVALID,
                             "neuron %s arithmetic dtype %d is not one of f32, f16, bf16, f8e4m3, f8e5m2", what[i],
                             (int)ar[i]);
        if (mp_is_fp8(ar[i]) && ar[i] != S)
            return snn_error(SNN_E_INVALID,
                             "neuron %s arithmetic in %s needs the same FP8 storage (storage is %s): FP8 "
                             "arithmetic runs in the storage's format",
                             what[i], snn_dtype_name(ar[i]), snn_dtype_name(S));
    }
    return SNN_OK;
}

static int mp_mode(const snn_neuron_opts *o) {
    if (o->kind == SNN_NEURON_IF) return MP_IF;
    return o->decay_input ? MP_DECAY : MP_NODECAY;
}

/* ---------------------------------------------------------------- forward */

typedef struct {
    int T;
    size_t n;
    snn_dtype S, F;
    int mode, soft;
    float vth;          /* FP32: the spike test h - V_th stays FP32 */
    float kF, vrF, vthF, v_resetF; /* constants materialised in F */
    float vinit;        /* F value the membrane starts from without v0 */
    const float *x, *v0;
    float *s, *h_seq, *v_last;
} mp_fwd_args;

/* The charge in the fused-kernel order of neuron_kernels.c, each result rounded to F. */
static inline float mp_charge(const mp_fwd_args *A, float v, float x) {
    const snn_dtype F = A->F;
    if (A->mode == MP_IF) return mp_r(F, v + x);
    float t = mp_r(F, A->vrF - v);
    if (A->mode == MP_DECAY) {
        t = mp_r(F, t + x);
        t = mp_r(F, A->kF * t);
        return mp_r(F, v + t);
    }
    t = mp_r(F, A->kF * t);
    t = mp_r(F, v + t);
    return mp_r(F, t + x);
}

static void mp_fwd_block(const mp_fwd_args *A, size_t i0, size_t len) {
    float v[MP_BLOCK];
    const snn_dtype S = A->S, F = A->F;
    const size_t n = A->n;
    for (size_t j = 0; j < len; j++) v[j] = A->v0 ? mp_r(F, mp_r(S, A->v0[i0 + j])) : A->vinit;
    for (int t = 0; t < A->T; t++) {
        size_t off = (size_t)t * n + i0;
        for (size_t j = 0; j < len; j++) {
            /* x lives in S; the arithmetic reads it as an F value */
            float x = mp_r(F, mp_r(S, A->x[off + j]));
            float h = mp_charge(A, v[j], x);
            int sp = h >= A->vth; /* h - V_th >= 0 in FP32 (exact: h is an F value) */
            A->s[off + j] = sp ? 1.0f : 0.0f;
            /* the membrane stays in F between steps (§5.3: not re-quantised to S) */
            v[j] = sp ? (A->soft ? mp_r(F, h - A->vthF) : A->v_resetF) : h;
            if (A->h_seq) A->h_seq[off + j] = mp_r(S, h);
        }
    }
    if (A->v_last)
        for (size_t j = 0; j < len; j++) A->v_last[i0 + j] = mp_r(S, v[j]);
}

snn_status snn_neuron_forward_mp(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                 const float *x, const float *v0, float *s, float *h_seq, float *v_last) {
    SNN_TRY(snn_neuron_mp_check(o, T, S, F, F, 0));
    const int mode = mp_mode(o);
    const float vr = o->soft_reset ? 0.0f : o->v_reset;
    mp_fwd_args A = {
        .T = T, .n = n, .S = S, .F = F, .mode = mode, .soft = o->soft_reset != 0,
        .vth = o->v_threshold, .kF = mp_r(F, k), .vrF = mp_r(F, vr), .vthF = mp_r(F, o->v_threshold),
        .v_resetF = mp_r(F, o->v_reset), .vinit = mp_r(F, vr),
        .x = x, .v0 = v0, .s = s, .h_seq = h_seq, .v_last = v_last,
    };
    const long nb = (long)((n + MP_BLOCK - 1) / MP_BLOCK);
    const int par = (size_t)(T > 0 ? T : 1) * n >= MP_PAR_MIN;
#pragma omp parallel for schedule(static) if (par)
    for (long b = 0; b < nb; b++) {
        size_t i0 = (size_t)b * MP_BLOCK;
        mp_fwd_block(&A, i0, n - i0 < MP_BLOCK ? n - i0 : MP_BLOCK);
    }
    return SNN_OK;
}

/* ---------------------------------------------------------------- backward */

typedef struct {
    int T;
    size_t n;
    snn_dtype S, F, B;
    int mode, soft, detach, want_k;
    snn_surrogate_kind sg;
    float alpha, vth;   /* FP32: surrogate argument h - V_th and the surrogate itself */
    float vrB, vthB;    /* constants in B */
    float aB, cB;       /* dh_t/dv_{t-1} = 1 or 1 - k, dh_t/dx_t = k or 1, in B */
    float vr32;         /* FP32 V_r: the FP32 k-gradient follows neuron_kernels.c */
    float vthF, v_resetF, vinitS; /* to rebuild the stored v_{t-1} (PLIF) */
    const float *h_seq, *v0, *gs, *gv_last;
    float *gx, *gv0;
} mp_bwd_args;

/* Surrogate derivative in FP32 (reference: "exponentials and sensitive surrogate
 * operations remain FP32"), the same functions the plain kernel uses. */
static inline float mp_sg(snn_surrogate_kind kind, float a, float z) {
    switch (kind) {
    case SNN_SG_SIGMOID: return snn_sg_sigmoid(a, z);
    case SNN_SG_ATAN: return snn_sg_atan(a, z);
    case SNN_SG_PIECEWISE_QUADRATIC: return snn_sg_pw_quadratic(a, z);
    case SNN_SG_PIECEWISE_EXP: return snn_sg_pw_exp(a, z);
    case SNN_SG_SOFTSIGN: return snn_sg_softsign(a, z);
    case SNN_SG_SUPERSPIKE: return snn_sg_superspike(a, z);
    case SNN_SG_ERF: return snn_sg_erf(a, z);
    default: return 0.0f;
    }
}

/* The membrane after step t-1 as the forward stored it, rebuilt from the stored h_{t-1}:
 * the reset in the forward arithmetic F, then rounded to S. (The fused kernels read a
 * stored v_seq instead; we keep only h, as neuron_kernels.c does.) */
static inline float mp_prev_v(const mp_bwd_args *A, float hp) {
    if (!(hp >= A->vth)) return hp; /* no spike (NaN included, as nk_reset) */
    return mp_r(A->S, A->soft ? mp_r(A->F, hp - A->vthF) : A->v_resetF);
}

static double mp_bwd_block(const mp_bwd_args *A, size_t i0, size_t len) {
    float carry[MP_BLOCK], accf[MP_BLOCK];
    double accd[MP_BLOCK];
    const snn_dtype S = A->S, B = A->B;
    const size_t n = A->n;
    const int soft = A->soft, detach = A->detach, want_k = A->want_k;
    const int k_fp8 = mp_is_fp8(B), k_f32 = B == SNN_F32;
    for (size_t j = 0; j < len; j++) {
        carry[j] = A->gv_last ? mp_r(B, A->gv_last[i0 + j]) : 0.0f;
        accf[j] = 0.0f;
        accd[j] = 0.0;
    }
    for (int t = A->T - 1; t >= 0; t--) {
        size_t off = (size_t)t * n + i0;
        for (size_t j = 0; j < len; j++) {
            float h = mp_r(S, A->h_seq[off + j]); /* h as stored */
            float sig = mp_r(B, mp_sg(A->sg, A->alpha, h - A->vth));
            float hB = mp_r(B, h);
            float G = carry[j] + 0.0f; /* as the plain kernel: -0 becomes +0 */
            float gS = A->gs ? mp_r(B, A->gs[off + j]) : 0.0f;
            float sp = h >= A->vth ? 1.0f : 0.0f;
            float gh;
            if (!soft && !detach) {
                float u = mp_r(B, A->vrB - hB);
                u = mp_r(B, G * u);
                u = mp_r(B, gS + u);
                u = mp_r(B, u * sig);
                gh = mp_r(B, u + G * (1.0f - sp));
            } else if (!soft) {
                gh = mp_r(B, mp_r(B, gS * sig) + G * (1.0f - sp));
            } else if (!detach) {
                float u = mp_r(B, A->vthB * G);
                u = mp_r(B, gS - u);
                u = mp_r(B, u * sig);
                gh = mp_r(B, u + G);
            } else {
                gh = mp_r(B, mp_r(B, gS * sig) + G);
            }
            if (A->gx) A->gx[off + j] = mp_r(B, gh * A->cB);
            carry[j] = mp_r(B, gh * A->aB);
            if (want_k) {
                float vp = t > 0 ? mp_prev_v(A, mp_r(S, A->h_seq[off - n + j]))
                                 : (A->v0 ? mp_r(S, A->v0[i0 + j]) : A->vinitS);
                /* dh/dk = V_r - v + x = (h - v)/k (decay_input; the 1/k is applied once to
                 * the total) or V_r - v. FP32 arithmetic: in double, exactly as the plain
                 * kernel; FP8: the partial in FP32 (as the reference); FP16/BF16: the
                 * term and the partial in B. */
                if (k_f32) {
                    double d = A->mode == MP_DECAY ? (double)h - (double)vp : (double)A->vr32 - (double)vp;
                    accd[j] += (double)gh * d;
                } else if (k_fp8) {
                    float d = A->mode == MP_DECAY ? h - vp : A->vr32 - vp;
                    accf[j] += gh * d;
                } else {
                    float d = A->mode == MP_DECAY ? mp_r(B, hB - mp_r(B, vp)) : mp_r(B, A->vrB - mp_r(B, vp));
                    accf[j] = mp_r(B, accf[j] + mp_r(B, gh * d));
                }
            }
        }
    }
    if (A->gv0) memcpy(A->gv0 + i0, carry, len * sizeof(float));
    double sum = 0.0;
    if (want_k)
        for (size_t j = 0; j < len; j++) sum += k_f32 ? accd[j] : (double)accf[j];
    return sum;
}

snn_status snn_neuron_backward_mp(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                                  snn_dtype B, const float *h_seq, const float *v0, const float *gs,
                                  const float *gv_last, float *gx, float *gv0, double *gk) {
    SNN_TRY(snn_neuron_mp_check(o, T, S, F, B, 1));
    if (!h_seq && T > 0 && n > 0)
        return snn_error(SNN_E_INVALID, "neuron mixed-precision backward: h_seq is NULL (run a forward that saves it)");
    const int mode = mp_mode(o);
    const float vr = o->soft_reset ? 0.0f : o->v_reset;
    mp_bwd_args A = {
        .T = T, .n = n, .S = S, .F = F, .B = B, .mode = mode, .soft = o->soft_reset != 0,
        .detach = o->detach_reset != 0, .want_k = gk != NULL && mode != MP_IF,
        .sg = o->surrogate, .alpha = snn_neuron_alpha(o), .vth = o->v_threshold,
        .vrB = mp_r(B, vr), .vthB = mp_r(B, o->v_threshold),
        .aB = mp_r(B, mode == MP_IF ? 1.0f : 1.0f - k), .cB = mp_r(B, mode == MP_DECAY ? k : 1.0f),
        .vr32 = vr, .vthF = mp_r(F, o->v_threshold), .v_resetF = mp_r(F, o->v_reset),
        .vinitS = mp_r(S, mp_r(F, vr)),
        .h_seq = h_seq, .v0 = v0, .gs = gs, .gv_last = gv_last, .gx = gx, .gv0 = gv0,
    };
    const long nb = (long)((n + MP_BLOCK - 1) / MP_BLOCK);
    const int par = (size_t)(T > 0 ? T : 1) * n >= MP_PAR_MIN;
    const int nch = nb < MP_MAX_CHUNKS ? (int)nb : MP_MAX_CHUNKS;
    double part[MP_MAX_CHUNKS];
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int ch = 0; ch < nch; ch++) {
        long b0 = (long)((long long)nb * ch / nch), b1 = (long)((long long)nb * (ch + 1) / nch);
        double sum = 0.0;
        for (long b = b0; b < b1; b++) {
            size_t i0 = (size_t)b * MP_BLOCK;
            sum += mp_bwd_block(&A, i0, n - i0 < MP_BLOCK ? n - i0 : MP_BLOCK);
        }
        part[ch] = sum;
    }
    if (gk) {
        double sum = 0.0;
        for (int ch = 0; ch < nch && A.want_k; ch++) sum += part[ch];
        if (A.want_k && mode == MP_DECAY) sum /= (double)k;
        *gk = sum;
    }
    return SNN_OK;
}
