/* snn — spiking neurons (IF, LIF, ParametricLIF) and surrogate gradients.
 *
 * Equations (SpikingJelly): with V_r = v_reset (hard reset) or 0 (soft reset),
 *   IF:   h = v + x
 *   LIF:  h = v + (x - (v - V_r)) / tau        (decay_input)
 *         h = v - (v - V_r) / tau + x          (no decay_input)
 *   PLIF: as LIF with 1/tau = k = sigmoid(w), w learnable, w0 = -ln(tau0 - 1)
 *   s = H(h - v_threshold); hard: v' = s v_reset + (1 - s) h; soft: v' = h - s v_threshold.
 * The multi-step kernels run the whole recurrence over T in one pass and save the
 * pre-reset membrane h for BPTT. */
#ifndef SNN_NEURON_H
#define SNN_NEURON_H

#include <stddef.h>
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_neuron_kind { SNN_NEURON_IF = 0, SNN_NEURON_LIF = 1, SNN_NEURON_PLIF = 2 } snn_neuron_kind;

/* Surrogate ids follow SpikingJelly's Triton numbering. */
typedef enum snn_surrogate_kind {
    SNN_SG_SIGMOID = 0,             /* alpha 4 */
    SNN_SG_ATAN = 1,                /* alpha 2 */
    SNN_SG_PIECEWISE_QUADRATIC = 2, /* alpha 1 */
    SNN_SG_PIECEWISE_EXP = 3,       /* alpha 1 */
    SNN_SG_SOFTSIGN = 4,            /* alpha 2 */
    SNN_SG_SUPERSPIKE = 5,          /* alpha 1 */
    SNN_SG_ERF = 6,                 /* alpha 2 */
    SNN_SG_COUNT
} snn_surrogate_kind;

typedef struct snn_neuron_opts {
    snn_neuron_kind kind;
    float tau;            /* LIF tau / PLIF initial tau, > 1 (default 2) */
    int decay_input;      /* default 1 */
    float v_threshold;    /* default 1 */
    int soft_reset;       /* 0: hard reset to v_reset (default); 1: v_reset = None */
    float v_reset;        /* default 0 */
    int detach_reset;     /* default 0 */
    snn_surrogate_kind surrogate; /* default Sigmoid */
    float alpha;          /* surrogate alpha; 0 takes the surrogate's default */
} snn_neuron_opts;

/* The reference defaults for a neuron kind (tau 2, threshold 1, hard reset to 0, Sigmoid(4)). */
snn_neuron_opts snn_neuron_defaults(snn_neuron_kind kind);
/* Check tau > 1, finite values, known surrogate (SoftSign needs alpha > 0). */
snn_status snn_neuron_opts_validate(const snn_neuron_opts *o);
const char *snn_surrogate_name(snn_surrogate_kind k);
snn_status snn_surrogate_from_name(const char *name, snn_surrogate_kind *out);
float snn_surrogate_default_alpha(snn_surrogate_kind k);
/* Surrogate derivative g'(x) and primitive g(x) (x = h - v_threshold). SuperSpike has no
 * primitive; its primitive returns NAN. */
float snn_surrogate_grad(snn_surrogate_kind k, float alpha, float x);
float snn_surrogate_primitive(snn_surrogate_kind k, float alpha, float x);

/* Decay factor k used by the dynamics: 1/tau (LIF), sigmoid(w) (PLIF), unused for IF. */
float snn_neuron_lif_k(float tau);   /* 1/tau, rounded once to float */
float snn_plif_k(float w);           /* sigmoid(w), computed in double, rounded once */
float snn_plif_w0(float tau);        /* -ln(tau - 1): the w with sigmoid(w) = 1/tau */

/* The alpha a surrogate runs with: o->alpha, or the surrogate's default when 0. */
float snn_neuron_alpha(const snn_neuron_opts *o);
/* SpikingJelly class names: "IFNode", "LIFNode", "ParametricLIFNode". */
const char *snn_neuron_kind_name(snn_neuron_kind k);
/* Accepts the class names and "if", "lif", "plif" (case-insensitive). */
snn_status snn_neuron_kind_from_name(const char *name, snn_neuron_kind *out);
/* Double-precision surrogate derivative and primitive (same formulas; used to check the
 * float versions against finite differences). SuperSpike's primitive is NAN. */
double snn_surrogate_grad_f64(snn_surrogate_kind k, double alpha, double x);
double snn_surrogate_primitive_f64(snn_surrogate_kind k, double alpha, double x);

/* Multi-step forward over T steps of n neurons. x, s, h_seq, v_seq are [T][n].
 * v0: initial membrane [n] or NULL (starts at v_reset, or 0 for soft reset).
 * h_seq (pre-reset membrane, needed by backward) and v_seq (post-reset membrane) may be
 * NULL. v_last [n] (may be NULL) receives the membrane after the last step. */
void snn_neuron_forward(const snn_neuron_opts *o, float k, int T, size_t n, const float *x,
                        const float *v0, float *s, float *h_seq, float *v_seq, float *v_last);

/* BPTT backward. gs: dL/ds [T][n]. gv_seq: dL/dv_t [T][n] or NULL (only gv_last then);
 * gv_last: dL/dv after the last step [n] or NULL. h_seq from the forward.
 * v0 is the forward's initial membrane (NULL as in forward). gx [T][n] written (may be
 * NULL when only gk is wanted); gs NULL counts as zero; gv0 [n] may be NULL; gk (PLIF:
 * dL/dk summed over everything, in double, overwritten) may be NULL. For PLIF the previous
 * membrane v_{t-1} is recomputed from h_{t-1} (v_{t-1} = reset(h_{t-1})). */
void snn_neuron_backward(const snn_neuron_opts *o, float k, int T, size_t n, const float *h_seq,
                         const float *v0, const float *gs, const float *gv_seq,
                         const float *gv_last, float *gx, float *gv0, double *gk);

/* Single-step forward: v [n] in/out; s [n]; h [n] may be NULL. */
void snn_neuron_step(const snn_neuron_opts *o, float k, size_t n, const float *x, float *v,
                     float *s, float *h);

/* ---- Mixed precision (SpikingJelly's Triton mixed path, spikingjelly-core.md §5.3) ------
 * Emulated exactly on the CPU: a value "in dtype D" is an FP32 holding a value of D, and
 * "rounded to D" is snn_round_to(D, ., sat) (RNE; FP8 saturating to +-448 / +-57344, FP16
 * and BF16 overflowing to inf as hardware casts do).
 *   S storage: f32 | f16 | bf16 | f8e4m3 | f8e5m2 (the dtype of x, v0 and of the stored
 *     h_seq and v_last);
 *   F forward arithmetic, B backward arithmetic: the same five; an FP8 arithmetic dtype
 *     must equal S (SpikingJelly's compute "fp8" = the storage's FP8 format, see
 *     snn_neuron_compute_dtype). Anything else is SNN_E_INVALID.
 * Forward, per element and step:
 *   - x and v0 are rounded to S (their storage), then read as F values (rounded to F);
 *     without v0 the membrane starts at V_r rounded to F;
 *   - constants k, V_r, v_reset, V_th are rounded to F once;
 *   - the charge is evaluated in the plain kernel's order with every operation's result
 *     rounded to F: IF h = F(v + x); decay_input t = F(V_r - v), t = F(t + x),
 *     t = F(k t), h = F(v + t); otherwise t = F(V_r - v), t = F(k t), t = F(v + t),
 *     h = F(t + x);
 *   - fire: s = [h - V_th >= 0] with the FP32 threshold (the subtraction stays FP32);
 *   - reset in F: hard v = s ? F(v_reset) : h; soft v = s ? F(h - F(V_th)) : h;
 *   - the membrane carried to the next step stays an F value: §5.3 keeps it in registers
 *     and does NOT re-quantise it to S between steps; only what is written is rounded
 *     to S: h_seq[t] = S(h), v_last = S(v after the last step). Spikes are 0/1 (FP32).
 * Backward (reads the stored h_seq; arithmetic in B, each result rounded to B):
 *   - sigma = B(g'(h - V_th)): argument and surrogate in FP32, the result rounded to B;
 *   - s is recomputed as [h >= V_th] from the stored h;
 *   - gs, gv_last are read as B values; V_r, V_th, a = 1 - k (1 for IF), c = k (or 1)
 *     rounded to B once; the gH formula of snn_neuron_backward, operation by operation
 *     in its order, each result rounded to B; gx = B(gH c), carry = B(gH a); gx and gv0
 *     are written as FP32 holding B values (not re-rounded to S: the reference returns
 *     dL/dx in x's original dtype);
 *   - PLIF dL/dk: the previous membrane is rebuilt from the stored h_{t-1} as the forward
 *     stored it (S(reset in F)); v0 is read as S(v0). Per element, the term gH dh/dk and
 *     its running sum over t are kept in B for FP16/BF16, in FP32 for FP8 (as the
 *     reference keeps FP8 partials in FP32) and in double for FP32 (as
 *     snn_neuron_backward); the per-element partials are summed in double.
 * With S = F = B = f32 the results are bit-identical to snn_neuron_forward/backward.
 * Same buffers and NULL conventions as snn_neuron_forward/backward (no v_seq/gv_seq). */
snn_status snn_neuron_forward_mp(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S,
                                 snn_dtype F, const float *x, const float *v0, float *s,
                                 float *h_seq, float *v_last);
snn_status snn_neuron_backward_mp(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S,
                                  snn_dtype F, snn_dtype B, const float *h_seq, const float *v0,
                                  const float *gs, const float *gv_last, float *gx, float *gv0,
                                  double *gk);

#ifdef __cplusplus
}
#endif
#endif
