/* Mixed-precision neuron parity cases, shared by the GPU test (test_cuda_neuron_mp.c) and the
 * host-emulation test (test_cuda_emul.cu, which runs the GPU kernel bodies on the CPU). The
 * oracle is the CPU emulation snn_neuron_forward_mp / snn_neuron_backward_mp fed with the
 * same FP32 inputs; the implementation gets them converted to the storage dtype S (as a
 * model would hold them). Written in the common subset of C and C++.
 *
 * What must hold, bit for bit: spikes, h_seq, v_last (stored in S, widened to FP32 here),
 * gx, gv0 (FP32) and dL/dk (a double: same partials, same summation order). Every output is
 * poisoned with 0xFF bytes (NaN in every type) first, and the reference values are checked
 * not to be NaN, so an unwritten element cannot pass. */
#ifndef SNN_TEST_NEURON_MP_CASE_H
#define SNN_TEST_NEURON_MP_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/dtype.h"
#include "snn/neuron.h"

typedef struct {
    snn_neuron_opts o;
    float k;
    int T;
    size_t n;
    snn_dtype S, F, B, sp;
    int use_v0, use_gs, use_gvlast, want_h, want_vlast, want_gx, want_gv0, want_gk, big_x;
} mpcase;

/* Host buffers as the implementation sees them. */
typedef struct {
    const void *x, *v0; /* S */
    void *s;            /* sp */
    void *h, *vlast;    /* S, may be NULL */
} mp_fwd_io;

typedef struct {
    const void *h, *v0; /* S */
    const float *gs, *gvlast;
    float *gx, *gv0;
    double *gk; /* one double, may be NULL */
} mp_bwd_io;

typedef snn_status (*mp_fwd_fn)(const mpcase *c, mp_fwd_io *io, void *ctx);
typedef snn_status (*mp_bwd_fn)(const mpcase *c, mp_bwd_io *io, void *ctx);
/* Status of the implementation for these dtypes (n = 0, no buffers): refusal check. */
typedef snn_status (*mp_fwd_status_fn)(snn_dtype S, snn_dtype F, void *ctx);
typedef snn_status (*mp_bwd_status_fn)(snn_dtype S, snn_dtype F, snn_dtype B, void *ctx);

static void *mpc_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(p, 0xFF, bytes ? bytes : 1);
    return p;
}

static unsigned mpc_sat(snn_dtype t) {
    return (t == SNN_F8E4M3 || t == SNN_F8E5M2) ? (unsigned)SNN_CONVERT_SATURATE : 0u;
}

/* FP32 -> t (as the model's cast to storage: FP8 saturating). */
static void *mpc_to(snn_dtype t, const float *src, size_t n) {
    void *p = mpc_alloc(n * snn_dtype_size(t));
    if (snn_convert(t, p, SNN_F32, src, n, mpc_sat(t)) != SNN_OK) exit(2);
    return p;
}

static float *mpc_from(snn_dtype t, const void *src, size_t n) {
    float *p = (float *)mpc_alloc(n * sizeof(float));
    if (snn_convert(SNN_F32, p, t, src, n, 0) != SNN_OK) exit(2);
    return p;
}

static uint32_t mpc_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void mpc_desc(const mpcase *c, char *b, size_t cap) {
    snprintf(b, cap, "%s T=%d n=%zu S=%s F=%s B=%s sp=%s sg=%d soft=%d detach=%d decay=%d vth=%g vr=%g k=%g",
             snn_neuron_kind_name(c->o.kind), c->T, c->n, snn_dtype_name(c->S), snn_dtype_name(c->F),
             snn_dtype_name(c->B), snn_dtype_name(c->sp), (int)c->o.surrogate, c->o.soft_reset, c->o.detach_reset,
             c->o.decay_input, (double)c->o.v_threshold, (double)c->o.v_reset, (double)c->k);
}

/* got (stored as t) against the FP32 reference, bit for bit. */
static void mpc_cmp(const char *what, const mpcase *c, snn_dtype t, const void *got, const float *ref, size_t n) {
    float *g = mpc_from(t, got, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (isnan(ref[i]) || mpc_bits(g[i]) != mpc_bits(ref[i])) {
            if (!bad) first = i;
            bad++;
        }
    char d[256];
    mpc_desc(c, d, sizeof d);
    CHECK_MSG(bad == 0, "%s: %zu of %zu differ, first [%zu] got %.9g ref %.9g (%s)", what, bad, n, first,
              bad ? (double)g[first] : 0.0, bad ? (double)ref[first] : 0.0, d);
    free(g);
}

static void mpc_run(const mpcase *c, mp_fwd_fn fwd, mp_bwd_fn bwd, void *ctx, uint64_t *rng) {
    const size_t n = c->n, N = (size_t)c->T * n;
    const snn_dtype S = c->S;
    const size_t es = snn_dtype_size(S);
    char d[256];
    mpc_desc(c, d, sizeof d);
    float *xf = (float *)mpc_alloc(N * 4), *v0f = (float *)mpc_alloc(n * 4);
    float *gsf = (float *)mpc_alloc(N * 4), *gvl = (float *)mpc_alloc(n * 4);
    snn_test_fill_uniform(xf, N, -0.8f, 2.2f, rng);
    snn_test_fill_uniform(v0f, n, -0.5f, 0.9f, rng);
    snn_test_fill_uniform(gsf, N, -1.0f, 1.0f, rng);
    snn_test_fill_uniform(gvl, n, -0.5f, 0.5f, rng);
    if (c->big_x) /* every 7th input large: FP16 fine, FP8 E4M3 storage saturates at 448 */
        for (size_t i = 0; i < N; i += 7) xf[i] *= 300.0f;

    /* reference */
    float *s_ref = (float *)mpc_alloc(N * 4), *h_ref = (float *)mpc_alloc(N * 4), *vl_ref = (float *)mpc_alloc(n * 4);
    snn_status st = snn_neuron_forward_mp(&c->o, c->k, c->T, n, S, c->F, xf, c->use_v0 ? v0f : NULL, s_ref, h_ref,
                                          vl_ref);
    CHECK_MSG(st == SNN_OK, "CPU forward_mp: %s (%s)", snn_last_error(), d);

    /* implementation forward, poisoned outputs */
    void *xs = mpc_to(S, xf, N), *v0s = mpc_to(S, v0f, n);
    void *s = mpc_alloc(N * snn_dtype_size(c->sp)), *h = mpc_alloc(N * es), *vl = mpc_alloc(n * es);
    mp_fwd_io fio = {xs, c->use_v0 ? v0s : NULL, s, c->want_h ? h : NULL, c->want_vlast ? vl : NULL};
    st = fwd(c, &fio, ctx);
    CHECK_MSG(st == SNN_OK, "forward_mp: %s (%s)", snn_last_error(), d);
    if (st == SNN_OK) {
        mpc_cmp("spikes", c, c->sp, s, s_ref, N);
        if (c->want_h) mpc_cmp("h_seq", c, S, h, h_ref, N);
        if (c->want_vlast) mpc_cmp("v_last", c, S, vl, vl_ref, n);
    }

    /* backward from the reference's stored h */
    float *gx_ref = (float *)mpc_alloc(N * 4), *gv0_ref = (float *)mpc_alloc(n * 4);
    double gk_ref = NAN;
    st = snn_neuron_backward_mp(&c->o, c->k, c->T, n, S, c->F, c->B, h_ref, c->use_v0 ? v0f : NULL,
                                c->use_gs ? gsf : NULL, c->use_gvlast ? gvl : NULL, c->want_gx ? gx_ref : NULL,
                                c->want_gv0 ? gv0_ref : NULL, c->want_gk ? &gk_ref : NULL);
    CHECK_MSG(st == SNN_OK, "CPU backward_mp: %s (%s)", snn_last_error(), d);
    void *hs = mpc_to(S, h_ref, N);
    float *gx = (float *)mpc_alloc(N * 4), *gv0 = (float *)mpc_alloc(n * 4);
    double gk;
    memset(&gk, 0xFF, sizeof gk);
    mp_bwd_io bio = {hs,
                     c->use_v0 ? v0s : NULL,
                     c->use_gs ? gsf : NULL,
                     c->use_gvlast ? gvl : NULL,
                     c->want_gx ? gx : NULL,
                     c->want_gv0 ? gv0 : NULL,
                     c->want_gk ? &gk : NULL};
    st = bwd(c, &bio, ctx);
    CHECK_MSG(st == SNN_OK, "backward_mp: %s (%s)", snn_last_error(), d);
    if (st == SNN_OK) {
        if (c->want_gx) mpc_cmp("gx", c, SNN_F32, gx, gx_ref, N);
        if (c->want_gv0) mpc_cmp("gv0", c, SNN_F32, gv0, gv0_ref, n);
        if (c->want_gk) {
            uint64_t a, b;
            memcpy(&a, &gk, 8);
            memcpy(&b, &gk_ref, 8);
            CHECK_MSG(!isnan(gk_ref) && a == b, "dL/dk: got %.17g ref %.17g (%s)", gk, gk_ref, d);
        }
    }
    free(xf), free(v0f), free(gsf), free(gvl), free(s_ref), free(h_ref), free(vl_ref);
    free(xs), free(v0s), free(s), free(h), free(vl), free(gx_ref), free(gv0_ref), free(hs), free(gx), free(gv0);
}

static int mpc_valid(snn_dtype S, snn_dtype A) {
    return !((A == SNN_F8E4M3 || A == SNN_F8E5M2) && A != S);
}

/* Every S, F, B: the CPU's status and the implementation's agree (OK or SNN_E_INVALID). */
static void mpc_refusals(mp_fwd_status_fn fs, mp_bwd_status_fn bs, void *ctx) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    for (int S = 0; S <= SNN_F8E5M2 + 1; S++)
        for (int F = 0; F <= SNN_F8E5M2 + 1; F++) {
            snn_status cf = snn_neuron_forward_mp(&o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F, NULL, NULL, NULL, NULL,
                                                  NULL);
            snn_status gf = fs((snn_dtype)S, (snn_dtype)F, ctx);
            int ok = S <= SNN_F8E5M2 && F <= SNN_F8E5M2 && mpc_valid((snn_dtype)S, (snn_dtype)F);
            CHECK_MSG(cf == (ok ? SNN_OK : SNN_E_INVALID) && gf == cf, "forward S=%d F=%d: CPU %d, impl %d", S, F,
                      (int)cf, (int)gf);
            for (int B = 0; B <= SNN_F8E5M2 + 1; B++) {
                double gk;
                snn_status cb = snn_neuron_backward_mp(&o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F, (snn_dtype)B, NULL,
                                                       NULL, NULL, NULL, NULL, NULL, &gk);
                snn_status gb = bs((snn_dtype)S, (snn_dtype)F, (snn_dtype)B, ctx);
                int okb = ok && B <= SNN_F8E5M2 && mpc_valid((snn_dtype)S, (snn_dtype)B);
                CHECK_MSG(cb == (okb ? SNN_OK : SNN_E_INVALID) && gb == cb, "backward S=%d F=%d B=%d: CPU %d, impl %d",
                          S, F, B, (int)cb, (int)gb);
            }
        }
}

/* Every accepted (S, F, B) with several shapes and options; options rotate over the cases so
 * that every neuron kind, surrogate, reset, detach_reset and decay_input appears with
 * many dtype combinations. big: also n = 70001 (274 blocks of 256 neurons: 64 chunks of
 * the dL/dk sum of unequal sizes). Returns the number of cases. */
static int mpc_all(mp_fwd_fn fwd, mp_bwd_fn bwd, void *ctx, uint64_t *rng, int big) {
    static const struct { int T; size_t n; } shapes[] = {{1, 1}, {5, 777}, {16, 257}, {16, 33}, {5, 70001}};
    static const snn_dtype sps[3] = {SNN_F32, SNN_BF16, SNN_F16};
    const int nshape = big ? 5 : 4;
    int ci = 0;
    for (int S = 0; S <= SNN_F8E5M2; S++)
        for (int F = 0; F <= SNN_F8E5M2; F++)
            for (int B = 0; B <= SNN_F8E5M2; B++) {
                if (!mpc_valid((snn_dtype)S, (snn_dtype)F) || !mpc_valid((snn_dtype)S, (snn_dtype)B)) continue;
                for (int si = 0; si < nshape; si++, ci++) {
                    if (si == 4 && (B + F) % 3 != 0) continue; /* the big shape for a third of the combinations */
                    mpcase c;
                    memset(&c, 0, sizeof c);
                    snn_neuron_kind kind = (snn_neuron_kind)(si == 4 ? 1 + ci % 2 : ci % 3);
                    c.o = snn_neuron_defaults(kind);
                    c.o.surrogate = (snn_surrogate_kind)(ci % SNN_SG_COUNT);
                    c.o.soft_reset = (ci / 3) % 2;
                    c.o.detach_reset = (ci / 2) % 2;
                    c.o.decay_input = (ci / 5) % 2 == 0;
                    c.o.alpha = ci % 4 == 1 ? 3.0f : 0.0f;
                    c.o.v_threshold = ci % 3 == 2 ? 0.75f : 1.0f;
                    c.o.v_reset = ci % 4 == 3 ? -0.25f : 0.0f;
                    c.k = kind == SNN_NEURON_IF ? 1.0f : kind == SNN_NEURON_LIF ? snn_neuron_lif_k(ci % 2 ? 3.0f : 2.0f)
                                                                                : snn_plif_k(0.3f);
                    c.T = shapes[si].T;
                    c.n = shapes[si].n;
                    c.S = (snn_dtype)S;
                    c.F = (snn_dtype)F;
                    c.B = (snn_dtype)B;
                    c.sp = sps[ci % 3];
                    c.use_v0 = ci % 5 != 0;
                    c.use_gs = ci % 11 != 3;
                    c.use_gvlast = ci % 3 != 0;
                    c.want_h = ci % 9 != 4;
                    c.want_vlast = ci % 7 != 2;
                    c.want_gx = ci % 13 != 6;
                    c.want_gv0 = ci % 6 != 1;
                    c.want_gk = ci % 8 != 5;
                    c.big_x = ci % 10 == 7;
                    mpc_run(&c, fwd, bwd, ctx, rng);
                }
            }
    return ci;
}

#endif
