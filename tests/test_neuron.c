/* Neuron kernels, surrogates, options and the neuron module.
 *
 * - surrogates: names, defaults, g' against a central finite difference of the primitive
 *   (double, eps 1e-5, tol 1e-4 at x in {-0.75, -0.25, 0.25, 0.75}), float g' against double;
 * - fused multi-step forward == T composed single steps (bit for bit), spikes == H(h - vth);
 * - fused backward against an unfused step-by-step BPTT written here in double from the
 *   local partial derivatives of each step (every kind x surrogate x reset x detach x decay);
 * - option validation; the module against the kernels it wraps.
 * PyTorch autograd as the reference: tests/oracle_neuron.py. */
#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "neuron/neuron_module.h"
#include "neuron/surrogate_impl.h"
#include "nn/layers.h"
#include "snn/neuron.h"

static uint64_t rs;

static float *falloc(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    snn_test_poison(p, n);
    return p;
}
static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float urand(float lo, float hi) {
    float v;
    snn_test_fill_uniform(&v, 1, lo, hi, &rs);
    return v;
}

/* ------------------------------------------------------------------ surrogates */

static const char *sg_snake[SNN_SG_COUNT] = {"sigmoid", "atan", "piecewise_quadratic", "piecewise_exp",
                                             "softsign", "superspike", "erf"};
static const char *sg_class[SNN_SG_COUNT] = {"Sigmoid", "ATan", "PiecewiseQuadratic", "PiecewiseExp",
                                             "SoftSign", "SuperSpike", "Erf"};
/* The spec's defaults (SpikingJelly constructors). */
static const float sg_alpha[SNN_SG_COUNT] = {4, 2, 1, 1, 2, 1, 2};

static void test_surrogate_names(void) {
    for (int k = 0; k < SNN_SG_COUNT; k++) {
        snn_surrogate_kind got = SNN_SG_COUNT;
        CHECK(strcmp(snn_surrogate_name((snn_surrogate_kind)k), sg_snake[k]) == 0);
        CHECK(snn_surrogate_from_name(sg_snake[k], &got) == SNN_OK && got == (snn_surrogate_kind)k);
        got = SNN_SG_COUNT;
        CHECK(snn_surrogate_from_name(sg_class[k], &got) == SNN_OK && got == (snn_surrogate_kind)k);
        char up[64], low[64];
        size_t i;
        for (i = 0; sg_snake[k][i]; i++) up[i] = (char)toupper((unsigned char)sg_snake[k][i]);
        up[i] = 0;
        for (i = 0; sg_class[k][i]; i++) low[i] = (char)tolower((unsigned char)sg_class[k][i]);
        low[i] = 0;
        got = SNN_SG_COUNT;
        CHECK(snn_surrogate_from_name(up, &got) == SNN_OK && got == (snn_surrogate_kind)k);
        got = SNN_SG_COUNT;
        CHECK(snn_surrogate_from_name(low, &got) == SNN_OK && got == (snn_surrogate_kind)k);
        CHECK(snn_surrogate_default_alpha((snn_surrogate_kind)k) == sg_alpha[k]);
    }
    snn_surrogate_kind got;
    CHECK(snn_surrogate_from_name("tanh", &got) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "tanh") && strstr(snn_last_error(), "piecewise_exp"));
    CHECK(snn_surrogate_from_name("sigmoid_", &got) == SNN_E_INVALID);
    CHECK(snn_surrogate_from_name(NULL, &got) == SNN_E_INVALID);
}

static void test_surrogate_math(void) {
    const double xs[4] = {-0.75, -0.25, 0.25, 0.75}, eps = 1e-5;
    for (int k = 0; k < SNN_SG_COUNT; k++) {
        snn_surrogate_kind sk = (snn_surrogate_kind)k;
        double alphas[3] = {sg_alpha[k], urand(0.5f, 3.0f), urand(3.0f, 6.0f)};
        for (int ai = 0; ai < 3; ai++) {
            double a = alphas[ai];
            if (sk == SNN_SG_SUPERSPIKE) {
                CHECK(isnan(snn_surrogate_primitive_f64(sk, a, 0.25)));
                CHECK(isnan(snn_surrogate_primitive(sk, (float)a, 0.25f)));
            } else {
                for (int i = 0; i < 4; i++) {
                    double fd = (snn_surrogate_primitive_f64(sk, a, xs[i] + eps) -
                                 snn_surrogate_primitive_f64(sk, a, xs[i] - eps)) / (2 * eps);
                    double g = snn_surrogate_grad_f64(sk, a, xs[i]);
                    CHECK_MSG(fabs(fd - g) <= 1e-4, "%s alpha %g x %g: grad %.9g, finite difference %.9g",
                              sg_snake[k], a, xs[i], g, fd);
                }
                /* A primitive is a smooth step: 1/2 at 0, increasing, from ~0 to ~1. */
                CHECK(fabs(snn_surrogate_primitive_f64(sk, a, 0.0) - 0.5) < 1e-15);
                CHECK(snn_surrogate_primitive_f64(sk, a, -1000.0) < 0.01);
                CHECK(snn_surrogate_primitive_f64(sk, a, 1000.0) > 0.99);
                double prev = -1;
                for (double x = -3; x <= 3; x += 0.01) {
                    double p = snn_surrogate_primitive_f64(sk, a, x);
                    CHECK(p >= prev - 1e-15);
                    prev = p;
                }
            }
            /* The float derivative (used by the kernels) agrees with the double one. */
            double worst = 0;
            for (int i = 0; i < 2000; i++) {
                float x = urand(-4.0f, 4.0f);
                if (i == 0) x = 0.0f;
                double gf = snn_surrogate_grad(sk, (float)a, x);
                double gd = snn_surrogate_grad_f64(sk, (double)(float)a, (double)x);
                CHECK(gd >= 0);
                /* relative, except near a zero of g' (PiecewiseQuadratic's edge), where
                 * float cancellation leaves an error of a few ulp of the peak value */
                double e = fabs(gf - gd) / (fabs(gd) + 1e-2 * snn_surrogate_grad_f64(sk, a, 0.0));
                if (e > worst) worst = e;
            }
            CHECK_MSG(worst <= 1e-5, "%s alpha %g: float grad off by %.3g (relative)", sg_snake[k], a, worst);
            /* Peak values at x = 0 from the spec's formulas (g' peaks at 0 for all). */
            const double pi = 3.14159265358979323846;
            double peak[SNN_SG_COUNT] = {a / 4, a / 2, a, a / 2, a / 2, a, a / sqrt(pi)};
            CHECK(fabs(snn_surrogate_grad_f64(sk, a, 0.0) - peak[k]) <= 1e-12 * a);
        }
    }
    CHECK(isnan(snn_surrogate_grad((snn_surrogate_kind)SNN_SG_COUNT, 1.0f, 0.0f)));
    CHECK(strcmp(snn_surrogate_name((snn_surrogate_kind)42), "unknown") == 0);
}

/* The vectorisable exp behind the float surrogates. */
static void test_expf_fast(void) {
    double worst = 0;
    for (int i = 0; i <= 400000; i++) {
        float x = -87.0f + 175.0f * (float)i / 400000.0f;
        if (i % 7 == 3) x = urand(-87.0f, 88.0f);
        double e = fabs((double)snn_expf_fast(x) - exp((double)x)) / exp((double)x);
        if (e > worst) worst = e;
    }
    CHECK_MSG(worst <= 3e-7, "snn_expf_fast relative error %.3g", worst);
    CHECK(snn_expf_fast(0.0f) == 1.0f && snn_expf_fast(-87.5f) == 0.0f && snn_expf_fast(-1e30f) == 0.0f);
    CHECK(isnan(snn_expf_fast(NAN)));
}

/* ------------------------------------------------------------------ options */

static void test_options(void) {
    for (int kind = 0; kind < 3; kind++) {
        snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
        CHECK(o.kind == (snn_neuron_kind)kind && o.tau == 2.0f && o.decay_input == 1 && o.v_threshold == 1.0f);
        CHECK(o.soft_reset == 0 && o.v_reset == 0.0f && o.detach_reset == 0 && o.surrogate == SNN_SG_SIGMOID);
        CHECK(snn_neuron_alpha(&o) == 4.0f);
        CHECK(snn_neuron_opts_validate(&o) == SNN_OK);
    }
    const char *names[3] = {"IFNode", "LIFNode", "ParametricLIFNode"}, *shorts[3] = {"IF", "lif", "Plif"};
    for (int kind = 0; kind < 3; kind++) {
        snn_neuron_kind got = 9;
        CHECK(strcmp(snn_neuron_kind_name((snn_neuron_kind)kind), names[kind]) == 0);
        CHECK(snn_neuron_kind_from_name(names[kind], &got) == SNN_OK && got == (snn_neuron_kind)kind);
        got = 9;
        CHECK(snn_neuron_kind_from_name(shorts[kind], &got) == SNN_OK && got == (snn_neuron_kind)kind);
    }
    snn_neuron_kind gk;
    CHECK(snn_neuron_kind_from_name("izhikevich", &gk) == SNN_E_INVALID && strstr(snn_last_error(), "izhikevich"));

    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 1.0f;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "tau") &&
          strstr(snn_last_error(), "got 1"));
    o.tau = 0.5f;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "0.5"));
    o.tau = NAN;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID);
    o = snn_neuron_defaults(SNN_NEURON_PLIF);
    o.tau = 0.9f;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "init_tau") &&
          strstr(snn_last_error(), "0.9") && strstr(snn_last_error(), "ParametricLIFNode"));
    o = snn_neuron_defaults(SNN_NEURON_IF);
    o.tau = 0.5f; /* IF has no tau */
    CHECK(snn_neuron_opts_validate(&o) == SNN_OK);
    o.v_threshold = NAN;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "v_threshold"));
    o.v_threshold = INFINITY;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID);
    o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.v_reset = NAN;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "v_reset"));
    o.soft_reset = 1; /* v_reset = None: the value is unused */
    CHECK(snn_neuron_opts_validate(&o) == SNN_OK);
    o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.surrogate = (snn_surrogate_kind)7;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "surrogate"));
    o.surrogate = SNN_SG_SOFTSIGN;
    o.alpha = -1.0f;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID && strstr(snn_last_error(), "SoftSign"));
    o.alpha = 0.0f;
    CHECK(snn_neuron_opts_validate(&o) == SNN_OK && snn_neuron_alpha(&o) == 2.0f);
    o.alpha = INFINITY;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID);
    o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.kind = (snn_neuron_kind)5;
    CHECK(snn_neuron_opts_validate(&o) == SNN_E_INVALID);
    CHECK(snn_neuron_opts_validate(NULL) == SNN_E_INVALID);

    /* Decay helpers: PLIF starts at sigmoid(w0) = 1/tau0. */
    CHECK(snn_plif_w0(2.0f) == 0.0f && snn_plif_k(0.0f) == 0.5f);
    float taus[4] = {1.5f, 2.0f, 5.0f, urand(1.1f, 10.0f)};
    for (int i = 0; i < 4; i++) {
        CHECK(snn_neuron_lif_k(taus[i]) == 1.0f / taus[i]);
        CHECK(fabsf(snn_plif_w0(taus[i]) - (float)(-log(taus[i] - 1.0))) == 0.0f);
        CHECK(fabs(snn_plif_k(snn_plif_w0(taus[i])) - 1.0 / taus[i]) <= 2e-7 / taus[i]);
    }
}

/* ------------------------------------------------------------------ kernels */

static float test_k(const snn_neuron_opts *o) {
    if (o->kind == SNN_NEURON_LIF) return 1.0f / o->tau;
    if (o->kind == SNN_NEURON_PLIF) return (float)(1.0 / (1.0 + exp(-urand(-1.5f, 1.5f))));
    return 0.0f;
}

/* Unfused BPTT in double: walk the steps backwards and apply each step's local partial
 * derivatives through the chain rule (spike path and reset path kept separate), using the
 * forward's own h, v sequences.
 * Alongside, the same recurrence over absolute values (gx_abs, gv0_abs, gk_scale): the
 * sum of the magnitudes of everything that flows into each result, the scale a float
 * rounding error of that result is proportional to (entries that cancel to ~0 carry the
 * rounding of their large terms). */
static void ref_backward(const snn_neuron_opts *o, double k, int T, size_t n, const float *x,
                         const float *v0, const float *h, const float *vseq, const float *gs,
                         const float *gvs, const float *gvl, double *gx, double *gv0, double *gk,
                         double *gx_abs, double *gv0_abs, double *gk_scale) {
    const double vth = o->v_threshold, vreset = o->v_reset, alpha = snn_neuron_alpha(o);
    const double vr = o->soft_reset ? 0.0 : vreset;
    *gk = *gk_scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double dv_next = 0; /* dL/dv_t arriving through h_{t+1} */
        double dv_next_abs = 0;
        for (int t = T - 1; t >= 0; t--) {
            size_t e = (size_t)t * n + i;
            double hh = h[e], s = hh >= vth ? 1.0 : 0.0;
            double ds_dh = snn_surrogate_grad_f64(o->surrogate, alpha, hh - vth);
            /* v = s vreset + (1 - s) h  or  v = h - s vth */
            double dv_ds = o->detach_reset ? 0.0 : (o->soft_reset ? -vth : vreset - hh);
            double dv_dh = o->soft_reset ? 1.0 : 1.0 - s;
            double dL_dv = dv_next + (gvs ? gvs[e] : 0.0) + (t == T - 1 && gvl ? gvl[i] : 0.0);
            double dL_ds = gs[e] + dL_dv * dv_ds;
            double dL_dh = dL_ds * ds_dh + dL_dv * dv_dh;
            double vprev = t > 0 ? vseq[e - n] : v0[i];
            double dh_dv, dh_dx, dh_dk;
            if (o->kind == SNN_NEURON_IF) {
                dh_dv = 1, dh_dx = 1, dh_dk = 0;
            } else if (o->decay_input) { /* h = v + k (x - (v - vr)) */
                dh_dv = 1 - k, dh_dx = k, dh_dk = x[e] - (vprev - vr);
            } else { /* h = v - k (v - vr) + x */
                dh_dv = 1 - k, dh_dx = 1, dh_dk = -(vprev - vr);
            }
            gx[e] = dL_dh * dh_dx;
            *gk += dL_dh * dh_dk;
            dv_next = dL_dh * dh_dv;
            double dL_dv_abs = dv_next_abs + (gvs ? fabs(gvs[e]) : 0.0) + (t == T - 1 && gvl ? fabs(gvl[i]) : 0.0);
            /* g' itself is a float result: a few ulp of its peak (cancellation at the
             * edge of PiecewiseQuadratic's support), hence the 5 % of the peak. */
            double ds_dh_abs = ds_dh + 0.05 * snn_surrogate_grad_f64(o->surrogate, alpha, 0.0);
            double dL_dh_abs = (fabs(gs[e]) + dL_dv_abs * fabs(dv_ds)) * ds_dh_abs + dL_dv_abs * (fabs(dv_dh) + 1.0);
            gx_abs[e] = dL_dh_abs * fabs(dh_dx);
            *gk_scale += dL_dh_abs * (fabs(x[e]) + fabs(vprev) + fabs(vr));
            dv_next_abs = dL_dh_abs * fabs(dh_dv);
        }
        gv0[i] = dv_next;
        gv0_abs[i] = dv_next_abs;
    }
}

/* The step equations in double, written from the spec (charge in SpikingJelly's torch form,
 * reset with s as a number): returns the worst |c - ref| / (1 + |ref|) over h and v, and
 * counts spikes that differ where the reference h is not within 1e-5 of the threshold. */
static double ref_forward(const snn_neuron_opts *o, double k, int T, size_t n, const float *x,
                          const float *v0, const float *s, const float *h, const float *vseq, int *bad) {
    const double vth = o->v_threshold, vreset = o->v_reset;
    const double vr = o->soft_reset ? 0.0 : vreset;
    double worst = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        double v = v0[i];
        for (int t = 0; t < T; t++) {
            size_t e = (size_t)t * n + i;
            double hh;
            if (o->kind == SNN_NEURON_IF) hh = v + x[e];
            else if (o->decay_input) hh = v + (x[e] - (v - vr)) * k;
            else hh = v - (v - vr) * k + x[e];
            double sp = hh - vth >= 0 ? 1.0 : 0.0;
            if (fabs(hh - vth) < 1e-5) break; /* float rounding may go either way from here */
            v = o->soft_reset ? hh - sp * vth : sp * vreset + (1.0 - sp) * hh;
            *bad += s[e] != (float)sp;
            worst = fmax(worst, fabs(h[e] - hh) / (1.0 + fabs(hh)));
            worst = fmax(worst, fabs(vseq[e] - v) / (1.0 + fabs(v)));
        }
    }
    return worst;
}

/* max |a - ref| / scale, per entry */
static double rel_to_scale(const float *a, const double *ref, const double *scale, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / fmax(scale[i], 1e-30);
        if (isnan(a[i])) e = INFINITY;
        if (e > worst) worst = e;
    }
    return worst;
}

static double worst_fwd_bwd = 0, worst_fwd = 0;

static void check_case(const snn_neuron_opts *o, int T, size_t n, int with_v0, int with_gvs, int with_gvl) {
    const size_t Tn = (size_t)T * n;
    float k = test_k(o);
    float vr = o->soft_reset ? 0.0f : o->v_reset, vth = o->v_threshold;
    float *x = falloc(Tn), *v0 = falloc(n), *s = falloc(Tn), *h = falloc(Tn), *vs = falloc(Tn), *vl = falloc(n);
    snn_test_fill_uniform(x, Tn, -0.5f * vth, 1.0f * vth, &rs);
    if (with_v0) snn_test_fill_uniform(v0, n, -0.5f * vth, 1.0f * vth, &rs);
    else for (size_t i = 0; i < n; i++) v0[i] = vr;
    snn_neuron_forward(o, k, T, n, x, with_v0 ? v0 : NULL, s, h, vs, vl);

    /* T single steps compose to the same bits. */
    float *s2 = falloc(Tn), *h2 = falloc(Tn), *vs2 = falloc(Tn), *v = falloc(n);
    memcpy(v, v0, n * sizeof(float));
    for (int t = 0; t < T; t++) {
        snn_neuron_step(o, k, n, x + (size_t)t * n, v, s2 + (size_t)t * n, h2 + (size_t)t * n);
        memcpy(vs2 + (size_t)t * n, v, n * sizeof(float));
    }
    CHECK_MSG(memcmp(s, s2, Tn * 4) == 0 && memcmp(h, h2, Tn * 4) == 0 && memcmp(vs, vs2, Tn * 4) == 0 &&
              memcmp(vl, v, n * 4) == 0, "fused forward != composed steps (kind %d soft %d T %d n %zu)",
              o->kind, o->soft_reset, T, n);
    /* The equations themselves, independently in double. */
    int bad;
    double ef = ref_forward(o, k, T, n, x, v0, s, h, vs, &bad);
    worst_fwd = fmax(worst_fwd, ef);
    CHECK_MSG(bad == 0 && ef <= 1e-5, "forward vs double reference: %d spikes differ, h/v error %.3g "
              "(kind %d soft %d decay %d T %d n %zu)", bad, ef, o->kind, o->soft_reset, o->decay_input, T, n);
    /* Spikes are exactly the Heaviside of h - vth; v_last is the last v_seq row. */
    int heav = 1;
    for (size_t i = 0; i < Tn; i++) heav &= s[i] == (h[i] >= vth ? 1.0f : 0.0f);
    CHECK(heav);
    CHECK(T == 0 || memcmp(vl, vs + (size_t)(T - 1) * n, n * 4) == 0);
    /* Optional outputs do not change the spikes. */
    snn_test_poison(s2, Tn);
    snn_neuron_forward(o, k, T, n, x, with_v0 ? v0 : NULL, s2, NULL, NULL, NULL);
    CHECK(memcmp(s, s2, Tn * 4) == 0);

    /* Backward against the unfused reference. */
    float *gs = falloc(Tn), *gvs = falloc(Tn), *gvl = falloc(n), *gx = falloc(Tn), *gv0 = falloc(n);
    snn_test_fill_uniform(gs, Tn, -1, 1, &rs);
    snn_test_fill_uniform(gvs, Tn, -1, 1, &rs);
    snn_test_fill_uniform(gvl, n, -1, 1, &rs);
    double gk = NAN;
    snn_neuron_backward(o, k, T, n, h, with_v0 ? v0 : NULL, gs, with_gvs ? gvs : NULL, with_gvl ? gvl : NULL,
                        gx, gv0, &gk);
    double *rgx = dalloc(Tn), *rgv0 = dalloc(n), rgk, *sgx = dalloc(Tn), *sgv0 = dalloc(n), sgk;
    ref_backward(o, k, T, n, x, v0, h, vs, gs, with_gvs ? gvs : NULL, with_gvl ? gvl : NULL, rgx, rgv0, &rgk,
                 sgx, sgv0, &sgk);
    double e1 = rel_to_scale(gx, rgx, sgx, Tn), e2 = rel_to_scale(gv0, rgv0, sgv0, n);
    double e3 = o->kind == SNN_NEURON_IF ? fabs(gk) : fabs(gk - rgk) / fmax(sgk, 1e-30);
    worst_fwd_bwd = fmax(worst_fwd_bwd, fmax(e1, fmax(e2, e3)));
    CHECK_MSG(e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5,
              "backward vs unfused reference: gx %.3g gv0 %.3g gk %.3g (kind %d sg %d soft %d detach %d decay %d "
              "T %d n %zu)", e1, e2, e3, o->kind, o->surrogate, o->soft_reset, o->detach_reset, o->decay_input, T, n);

    /* Optional gradient outputs are independent: the same bits with others left out. */
    float *gx2 = falloc(Tn), *gv02 = falloc(n);
    double gk2 = NAN;
    snn_neuron_backward(o, k, T, n, h, with_v0 ? v0 : NULL, gs, with_gvs ? gvs : NULL, with_gvl ? gvl : NULL,
                        gx2, NULL, NULL);
    CHECK(memcmp(gx, gx2, Tn * 4) == 0);
    snn_neuron_backward(o, k, T, n, h, with_v0 ? v0 : NULL, gs, with_gvs ? gvs : NULL, with_gvl ? gvl : NULL,
                        NULL, gv02, &gk2);
    CHECK(memcmp(gv0, gv02, n * 4) == 0 && (gk2 == gk || (isnan(gk) && isnan(gk2))));
    free(gx2), free(gv02), free(rgx), free(rgv0), free(sgx), free(sgv0);
    free(gs), free(gvs), free(gvl), free(gx), free(gv0);
    free(s2), free(h2), free(vs2), free(v);
    free(x), free(v0), free(s), free(h), free(vs), free(vl);
}

static void test_kernels(void) {
    const size_t sizes[3] = {1, 37, 300}; /* 300 spans two 256-neuron blocks */
    const int Ts[3] = {1, 5, 16};
    int c = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int sg = 0; sg < SNN_SG_COUNT; sg++)
            for (int soft = 0; soft < 2; soft++)
                for (int detach = 0; detach < 2; detach++)
                    for (int decay = 0; decay < 2; decay++, c++) {
                        snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
                        o.surrogate = (snn_surrogate_kind)sg;
                        o.soft_reset = soft;
                        o.detach_reset = detach;
                        o.decay_input = decay;
                        o.tau = (float[]){1.5f, 2.0f, 5.0f}[c % 3];
                        o.v_threshold = (c / 3) % 2 ? 0.5f : 1.0f;
                        o.v_reset = (c / 6) % 2 ? -0.2f : 0.0f;
                        o.alpha = c % 4 == 0 ? urand(0.5f, 3.0f) : 0.0f;
                        CHECK(snn_neuron_opts_validate(&o) == SNN_OK);
                        for (int i = 0; i < 3; i++)
                            check_case(&o, Ts[(c + i) % 3], sizes[i], (c + i) % 2, (c + i) % 3 == 0, (c + i) % 4 != 1);
                    }
    fprintf(stderr, "forward vs double reference: worst %.3g; fused vs unfused backward: worst %.3g\n",
            worst_fwd, worst_fwd_bwd);
    /* T = 0: nothing happens, the state passes through. */
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_PLIF);
    float v0[3] = {0.1f, 0.2f, 0.3f}, vl[3], gvl[3] = {1, 2, 3}, gv0[3];
    double gk = NAN;
    snn_neuron_forward(&o, 0.5f, 0, 3, NULL, v0, NULL, NULL, NULL, vl);
    CHECK(memcmp(v0, vl, sizeof vl) == 0);
    snn_neuron_backward(&o, 0.5f, 0, 3, NULL, v0, NULL, NULL, gvl, NULL, gv0, &gk);
    CHECK(memcmp(gvl, gv0, sizeof gv0) == 0 && gk == 0.0);
}

/* A membrane exactly at threshold fires (H(0) = 1); one ulp below does not. */
static void test_threshold_edge(void) {
    for (int kind = 0; kind < 2; kind++) {
        snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
        o.v_threshold = urand(0.25f, 2.0f);
        float vth = o.v_threshold;
        /* IF: h = 0 + x; LIF (k = 1/2, V_r = 0, v = 0): h = x / 2, exact. */
        float scale = kind == 0 ? 1.0f : 2.0f;
        float x[2] = {vth * scale, nextafterf(vth, 0.0f) * scale}, v0[2] = {0, 0}, s[2], h[2], v[2] = {0, 0};
        snn_neuron_forward(&o, 0.5f, 1, 2, x, v0, s, h, NULL, NULL);
        CHECK(h[0] == vth && h[1] < vth && s[0] == 1.0f && s[1] == 0.0f);
        snn_neuron_step(&o, 0.5f, 2, x, v, s, h);
        CHECK(h[0] == vth && s[0] == 1.0f && s[1] == 0.0f && v[0] == 0.0f && v[1] == h[1]);
    }
}

/* Large enough to run in parallel: results must not depend on the thread count. */
static void test_threads(void) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_PLIF);
    o.surrogate = SNN_SG_ATAN;
    const int T = 4;
    const size_t n = 40000 + 13, Tn = (size_t)T * n;
    float *x = falloc(Tn), *s = falloc(Tn), *h = falloc(Tn), *gs = falloc(Tn), *gx1 = falloc(Tn), *gx2 = falloc(Tn);
    float *s1 = falloc(Tn);
    snn_test_fill_uniform(x, Tn, -0.5f, 1.0f, &rs);
    snn_test_fill_uniform(gs, Tn, -1, 1, &rs);
    int nt = omp_get_max_threads();
    double gk1, gk2;
    omp_set_num_threads(1);
    snn_neuron_forward(&o, 0.4f, T, n, x, NULL, s1, NULL, NULL, NULL);
    snn_neuron_forward(&o, 0.4f, T, n, x, NULL, s, h, NULL, NULL);
    snn_neuron_backward(&o, 0.4f, T, n, h, NULL, gs, NULL, NULL, gx1, NULL, &gk1);
    omp_set_num_threads(nt > 1 ? nt : 3);
    snn_neuron_forward(&o, 0.4f, T, n, x, NULL, s, h, NULL, NULL);
    snn_neuron_backward(&o, 0.4f, T, n, h, NULL, gs, NULL, NULL, gx2, NULL, &gk2);
    omp_set_num_threads(nt);
    CHECK(memcmp(s, s1, Tn * 4) == 0 && memcmp(gx1, gx2, Tn * 4) == 0 && gk1 == gk2);
    free(x), free(s), free(h), free(gs), free(gx1), free(gx2), free(s1);
}

/* ------------------------------------------------------------------ module */

typedef struct {
    snn_module *m;
    snn_arena a;
    float w, wgrad;
} mod_fixture;

static snn_status mod_build(mod_fixture *f, const snn_neuron_opts *o, snn_shape in, int T, int N) {
    memset(f, 0, sizeof *f);
    f->m = snn_neuron_module_new(o);
    snn_status st = f->m->ops->setup(f->m, in);
    if (st != SNN_OK) return st;
    if (f->m->n_params == 1) {
        f->m->params[0].data = &f->w;
        f->m->params[0].grad = &f->wgrad;
    }
    snn_rng rng = snn_rng_make(7, 0);
    f->m->ops->init(f->m, &rng);
    snn_arena_begin_measure(&f->a);
    f->m->ops->reserve(f->m, &f->a, T, N);
    st = snn_arena_allocate(&f->a, f->a.used);
    if (st == SNN_OK) f->m->ops->reserve(f->m, &f->a, T, N);
    return st;
}

static void mod_free(mod_fixture *f) {
    snn_arena_free(&f->a);
    snn_module_free(f->m);
}

static void test_module(void) {
    const char *kinds[3] = {"IFNode", "LIFNode", "ParametricLIFNode"};
    const int T = 5, N = 3;
    snn_shape in = snn_shape3(2, 3, 7);
    const size_t n = (size_t)N * 42, Tn = (size_t)T * n;
    for (int kind = 0; kind < 3; kind++) {
        for (int variant = 0; variant < 4; variant++) {
            snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
            o.tau = urand(1.2f, 6.0f);
            o.soft_reset = variant & 1;
            o.detach_reset = (variant >> 1) & 1;
            o.decay_input = variant != 2;
            o.v_reset = -0.1f;
            o.surrogate = (snn_surrogate_kind)((kind * 4 + variant) % SNN_SG_COUNT);
            mod_fixture f;
            CHECK(mod_build(&f, &o, in, T, N) == SNN_OK);
            snn_module *m = f.m;
            CHECK(strcmp(m->ops->kind, kinds[kind]) == 0 && snn_module_is_neuron(m));
            CHECK(m->out.rank == 3 && m->out.d[0] == 2 && m->out.d[1] == 3 && m->out.d[2] == 7);
            snn_neuron_opts *mo = snn_neuron_module_opts(m);
            CHECK(mo && mo->tau == o.tau && mo->surrogate == o.surrogate && mo->soft_reset == o.soft_reset);
            float k;
            if (kind == 2) {
                CHECK(m->n_params == 1 && strcmp(m->params[0].name, "w") == 0 && m->params[0].numel == 1 &&
                      m->params[0].kind == SNN_PARAM_WEIGHT && m->params[0].decay == 0);
                CHECK(f.w == (float)(-log((double)o.tau - 1.0)));
                f.w += urand(-0.5f, 0.5f); /* as if trained */
                k = (float)(1.0 / (1.0 + exp(-(double)f.w)));
            } else {
                CHECK(m->n_params == 0);
                k = kind == 1 ? 1.0f / o.tau : 0.0f;
            }
            CHECK(snn_neuron_module_decay(m) == k);

            float *x = falloc(Tn), *y = falloc(Tn), *y2 = falloc(Tn), *s = falloc(Tn), *h = falloc(Tn);
            float *vl = falloc(n), *dy = falloc(Tn), *dx = falloc(Tn), *gx = falloc(Tn);
            snn_test_fill_uniform(x, Tn, -0.5f, 1.0f, &rs);
            snn_test_fill_uniform(dy, Tn, -1, 1, &rs);
            snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
            CHECK(m->ops->forward(m, &r, x, y) == SNN_OK);
            snn_neuron_forward(&o, k, T, n, x, NULL, s, h, NULL, vl);
            CHECK(memcmp(y, s, Tn * 4) == 0);
            CHECK(memcmp(snn_neuron_module_h_seq(m), h, Tn * 4) == 0);
            CHECK(memcmp(snn_neuron_module_v(m), vl, n * 4) == 0);
            /* Each forward starts from the reset membrane. */
            CHECK(m->ops->forward(m, &r, x, y2) == SNN_OK && memcmp(y, y2, Tn * 4) == 0);

            double gk = 0;
            f.wgrad = 0.25f;
            CHECK(m->ops->backward(m, &r, x, y, dy, dx) == SNN_OK);
            snn_neuron_backward(&o, k, T, n, h, NULL, dy, NULL, NULL, gx, NULL, kind == 2 ? &gk : NULL);
            CHECK(memcmp(dx, gx, Tn * 4) == 0);
            if (kind == 2) {
                double kd = 1.0 / (1.0 + exp(-(double)f.w));
                float want = 0.25f + (float)(gk * kd * (1 - kd));
                CHECK_MSG(fabsf(f.wgrad - want) <= 1e-6f * fabsf(want), "w grad %.9g want %.9g", f.wgrad, want);
                /* Gradients add up, and dx may be NULL. */
                float g1 = f.wgrad;
                CHECK(m->ops->backward(m, &r, x, y, dy, NULL) == SNN_OK);
                CHECK(fabsf((f.wgrad - g1) - (g1 - 0.25f)) <= 1e-6f * fabsf(g1));
            }
            /* reset() restores the membrane; inference keeps no h; backward then refuses. */
            m->ops->reset(m);
            float v_init = o.soft_reset ? 0.0f : o.v_reset;
            int all = 1;
            for (size_t i = 0; i < n; i++) all &= snn_neuron_module_v(m)[i] == v_init;
            CHECK(all);
            r.training = 0;
            CHECK(m->ops->forward(m, &r, x, y2) == SNN_OK && memcmp(y, y2, Tn * 4) == 0);
            CHECK(snn_neuron_module_h_seq(m) == NULL);
            CHECK(m->ops->backward(m, &r, x, y, dy, dx) == SNN_E_STATE);
            r.training = 1;
            r.T = T + 1;
            CHECK(m->ops->forward(m, &r, x, y2) == SNN_E_STATE && strstr(snn_last_error(), "T=6"));
            free(x), free(y), free(y2), free(s), free(h), free(vl), free(dy), free(dx), free(gx);
            mod_free(&f);
        }
    }
    /* Setup reports invalid options with the value. */
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 0.75f;
    snn_module *m = snn_neuron_module_new(&o);
    CHECK(m->ops->setup(m, snn_shape1(4)) == SNN_E_INVALID && strstr(snn_last_error(), "0.75"));
    snn_module_free(m);
    m = snn_neuron_module_new(NULL);
    CHECK(strcmp(m->ops->kind, "LIFNode") == 0 && snn_neuron_module_decay(m) == 0.5f);
    snn_module_free(m);
    o = snn_neuron_defaults(SNN_NEURON_IF);
    m = snn_neuron_module_new(&o);
    CHECK(snn_neuron_module_decay(m) == 0.0f);
    snn_module_free(m);
    m = snn_linear_new(3, 4, 1);
    CHECK(!snn_module_is_neuron(m) && snn_neuron_module_opts(m) == NULL);
    snn_module_free(m);
    /* Still a neuron while a precision wrapper has replaced its ops table. */
    m = snn_neuron_module_new(NULL);
    static const snn_module_ops wrapper = {.kind = "Wrapper"};
    m->own_ops = m->ops;
    m->ops = &wrapper;
    CHECK(snn_module_is_neuron(m) && snn_neuron_module_opts(m) != NULL);
    /* The kind id comes from the own table too; the wrapper's (id 0) is no kind. */
    CHECK(snn_module_kind_is(m, SNN_KIND_LIF_NODE) && !snn_module_kind_is(m, SNN_KIND_IF_NODE) &&
          !snn_module_kind_is(m, SNN_KIND_NONE) && !snn_module_kind_is(NULL, SNN_KIND_LIF_NODE));
    m->ops = m->own_ops;
    m->own_ops = NULL;
    snn_module_free(m);
}

int main(void) {
    rs = snn_test_seed();
    test_surrogate_names();
    test_surrogate_math();
    test_expf_fast();
    test_options();
    test_kernels();
    test_threshold_edge();
    test_threads();
    test_module();
    return snn_test_finish("test_neuron");
}
