/* One neuron parity case, shared by the GPU test (test_cuda_neuron.c) and the host-emulation
 * test (test_cuda_emul.cu, which runs the kernel bodies on the CPU). The oracle is the CPU
 * reference in src/neuron (snn_neuron_forward/backward) fed with the same stored (rounded)
 * inputs; conversions come from src/core/dtype.c. Written in the common subset of C and C++.
 *
 * What must hold: spikes, h, v_seq and v_last bit-exact (the forward rounds like the
 * reference and stores the rounded FP32 value); gx within about one unit of the storage
 * type's last place; gv0, gx_tsum close in FP32; gk close to the double reference; amax equal
 * to max|gx| as stored. Every output buffer is poisoned with NaN bytes first. */
#ifndef SNN_TEST_NEURON_CASE_H
#define SNN_TEST_NEURON_CASE_H

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
    snn_dtype io, sp;
    int use_v0, use_bias, use_gvseq, use_gvlast, want_h_vseq, want_gk, want_tsum, want_amax;
    size_t bias_period;
} ncase;

/* Buffers as the implementation sees them (host memory, storage formats). */
typedef struct {
    const void *x;
    const float *bias;
    size_t bias_period;
    const float *v0;
    void *s, *h, *vseq;
    float *vlast;
} nfwd_io;

typedef struct {
    const void *h, *gs, *gvseq;
    const float *v0, *gvlast;
    void *gx;
    float *gv0, *tsum;
    int want_gk, want_amax;
    float gk, amax; /* outputs */
} nbwd_io;

typedef int (*nfwd_impl)(const ncase *c, nfwd_io *io, void *ctx);
typedef int (*nbwd_impl)(const ncase *c, nbwd_io *io, void *ctx);

static size_t nc_size(snn_dtype t) { return snn_dtype_size(t); }

static void *nc_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* Round a float array to storage type t (raw bytes out) and back to float. */
static void nc_store(snn_dtype t, void *dst, const float *src, size_t n) {
    if (snn_convert(t, dst, SNN_F32, src, n, 0) != SNN_OK) {
        fprintf(stderr, "snn_convert failed: %s\n", snn_last_error());
        exit(2);
    }
}
static void nc_load(snn_dtype t, float *dst, const void *src, size_t n) {
    if (snn_convert(SNN_F32, dst, t, src, n, 0) != SNN_OK) {
        fprintf(stderr, "snn_convert failed: %s\n", snn_last_error());
        exit(2);
    }
}

/* Normwise relative error max|a-b| / max|b| (NaN anywhere gives +inf). */
static double nc_err(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > d) d = e;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return m > 0 ? d / m : d;
}

static size_t nc_mismatch(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i])) bad++; /* NaN counts as a mismatch */
    return bad;
}

static double nc_tol(snn_dtype io) {
    return io == SNN_F32 ? 2e-5 : io == SNN_F16 ? 2e-3 : 1.2e-2;
}

static void nc_describe(const ncase *c, char *buf, size_t len) {
    snprintf(buf, len,
             "kind=%d decay=%d soft=%d detach=%d sg=%d alpha=%g k=%g T=%d n=%zu io=%s spike=%s "
             "v0=%d bias=%d gvseq=%d gvlast=%d",
             (int)c->o.kind, c->o.decay_input, c->o.soft_reset, c->o.detach_reset,
             (int)c->o.surrogate, (double)c->o.alpha, (double)c->k, c->T, c->n,
             snn_dtype_name(c->io), snn_dtype_name(c->sp), c->use_v0, c->use_bias, c->use_gvseq,
             c->use_gvlast);
}

/* Run one case through fwd/bwd implementations; returns the number of failed checks. */
static int nc_run(const ncase *c, nfwd_impl fwd, nbwd_impl bwd, void *ctx, uint64_t *rng) {
    const size_t T = (size_t)c->T, n = c->n, N = T * n, es = nc_size(c->io), ss = nc_size(c->sp);
    int fails0 = snn_test_failures;
    char desc[320];
    nc_describe(c, desc, sizeof desc);
    float *xf = (float *)nc_alloc(N * 4), *xr = (float *)nc_alloc(N * 4);
    float *bias = (float *)nc_alloc((c->bias_period ? c->bias_period : 1) * 4);
    float *v0 = (float *)nc_alloc(n * 4);
    void *xs = nc_alloc(N * es);
    /* inputs: mostly sub-threshold drive with frequent spikes */
    snn_test_fill_uniform(xf, N, -0.8f, 2.2f, rng);
    snn_test_fill_uniform(bias, c->bias_period ? c->bias_period : 1, -0.3f, 0.3f, rng);
    snn_test_fill_uniform(v0, n, -0.5f, 0.9f, rng);
    nc_store(c->io, xs, xf, N);
    nc_load(c->io, xr, xs, N);
    if (c->use_bias)
        for (size_t i = 0; i < N; i++) xr[i] = xr[i] + bias[(i % n) % c->bias_period];
    /* reference forward */
    float *s_ref = (float *)nc_alloc(N * 4), *h_ref = (float *)nc_alloc(N * 4);
    float *v_ref = (float *)nc_alloc(N * 4), *vl_ref = (float *)nc_alloc(n * 4);
    snn_neuron_forward(&c->o, c->k, c->T, n, xr, c->use_v0 ? v0 : NULL, s_ref, h_ref, v_ref, vl_ref);
    /* implementation forward into poisoned buffers */
    void *s = nc_alloc(N * ss), *h = nc_alloc(N * es), *vs = nc_alloc(N * es);
    float *vl = (float *)nc_alloc(n * 4);
    memset(s, 0xFF, N * ss);
    memset(h, 0xFF, N * es);
    memset(vs, 0xFF, N * es);
    memset(vl, 0xFF, n * 4);
    nfwd_io fio;
    memset(&fio, 0, sizeof fio);
    fio.x = xs;
    fio.bias = c->use_bias ? bias : NULL;
    fio.bias_period = c->bias_period;
    fio.v0 = c->use_v0 ? v0 : NULL;
    fio.s = s;
    fio.h = h;
    fio.vseq = c->want_h_vseq ? vs : NULL;
    fio.vlast = vl;
    int st = fwd(c, &fio, ctx);
    CHECK_MSG(st == 0, "forward failed (%s): %s", desc, snn_last_error());
    float *tmp = (float *)nc_alloc(N * 4), *want = (float *)nc_alloc(N * 4);
    void *wbytes = nc_alloc(N * (es > ss ? es : ss));
    if (st == 0) {
        /* spikes: exact, in the spike type (E4M3: 0x38 / 0x00) */
        if (c->sp == SNN_F8E4M3) {
            size_t bad = 0;
            for (size_t i = 0; i < N; i++)
                if (((uint8_t *)s)[i] != (s_ref[i] != 0.0f ? 0x38 : 0x00)) bad++;
            CHECK_MSG(bad == 0, "%zu of %zu E4M3 spikes differ (%s)", bad, N, desc);
        } else {
            nc_load(c->sp, tmp, s, N);
            size_t bad = nc_mismatch(tmp, s_ref, N);
            CHECK_MSG(bad == 0, "%zu of %zu spikes differ (%s)", bad, N, desc);
        }
        /* h and v_seq: the rounded reference value, bit for bit */
        nc_store(c->io, wbytes, h_ref, N);
        nc_load(c->io, want, wbytes, N);
        nc_load(c->io, tmp, h, N);
        size_t bad = nc_mismatch(tmp, want, N);
        CHECK_MSG(bad == 0, "%zu of %zu h values differ, err %.3g (%s)", bad, N,
                  nc_err(tmp, want, N), desc);
        if (c->want_h_vseq) {
            nc_store(c->io, wbytes, v_ref, N);
            nc_load(c->io, want, wbytes, N);
            nc_load(c->io, tmp, vs, N);
            bad = nc_mismatch(tmp, want, N);
            CHECK_MSG(bad == 0, "%zu of %zu v_seq values differ (%s)", bad, N, desc);
        }
        bad = nc_mismatch(vl, vl_ref, n);
        CHECK_MSG(bad == 0, "%zu of %zu v_last values differ (%s)", bad, n, desc);
    }
    /* backward: the reference reads the same stored h, gs, gv */
    float *gsf = (float *)nc_alloc(N * 4), *gvf = (float *)nc_alloc(N * 4);
    float *gvl = (float *)nc_alloc(n * 4);
    void *gss = nc_alloc(N * es), *gvs = nc_alloc(N * es);
    snn_test_fill_uniform(gsf, N, -1.0f, 1.0f, rng);
    snn_test_fill_uniform(gvf, N, -0.5f, 0.5f, rng);
    snn_test_fill_uniform(gvl, n, -0.5f, 0.5f, rng);
    nc_store(c->io, gss, gsf, N);
    nc_load(c->io, gsf, gss, N);
    nc_store(c->io, gvs, gvf, N);
    nc_load(c->io, gvf, gvs, N);
    void *hs = nc_alloc(N * es);
    float *hr = (float *)nc_alloc(N * 4);
    nc_store(c->io, hs, h_ref, N); /* stored h as the forward wrote it */
    nc_load(c->io, hr, hs, N);
    float *gx_ref = (float *)nc_alloc(N * 4), *gv0_ref = (float *)nc_alloc(n * 4);
    double gk_ref = 0;
    snn_neuron_backward(&c->o, c->k, c->T, n, hr, c->use_v0 ? v0 : NULL, gsf,
                        c->use_gvseq ? gvf : NULL, c->use_gvlast ? gvl : NULL, gx_ref, gv0_ref,
                        c->want_gk ? &gk_ref : NULL);
    void *gx = nc_alloc(N * es);
    float *gv0 = (float *)nc_alloc(n * 4), *tsum = (float *)nc_alloc(n * 4);
    memset(gx, 0xFF, N * es);
    memset(gv0, 0xFF, n * 4);
    memset(tsum, 0xFF, n * 4);
    nbwd_io bio;
    memset(&bio, 0, sizeof bio);
    bio.h = hs;
    bio.gs = gss;
    bio.gvseq = c->use_gvseq ? gvs : NULL;
    bio.v0 = c->use_v0 ? v0 : NULL;
    bio.gvlast = c->use_gvlast ? gvl : NULL;
    bio.gx = gx;
    bio.gv0 = gv0;
    bio.tsum = c->want_tsum ? tsum : NULL;
    bio.want_gk = c->want_gk;
    bio.want_amax = c->want_amax;
    st = bwd(c, &bio, ctx);
    CHECK_MSG(st == 0, "backward failed (%s): %s", desc, snn_last_error());
    if (st == 0) {
        nc_load(c->io, tmp, gx, N);
        double tol = nc_tol(c->io);
        double e = nc_err(tmp, gx_ref, N);
        CHECK_MSG(e <= tol, "gx error %.3g > %.3g (%s)", e, tol, desc);
        e = nc_err(gv0, gv0_ref, n);
        CHECK_MSG(e <= 2e-5, "gv0 error %.3g (%s)", e, desc);
        if (c->want_tsum) {
            for (size_t i = 0; i < n; i++) {
                double a = 0;
                for (size_t t = 0; t < T; t++) a += gx_ref[t * n + i];
                want[i] = (float)a;
            }
            e = nc_err(tsum, want, n);
            CHECK_MSG(e <= 1e-4, "gx_tsum error %.3g (%s)", e, desc);
        }
        if (c->want_amax) {
            float m = 0;
            for (size_t i = 0; i < N; i++) m = fmaxf(m, fabsf(tmp[i]));
            CHECK_MSG(bio.amax == m, "gx amax %.9g, stored max|gx| %.9g (%s)", (double)bio.amax,
                      (double)m, desc);
        }
        if (c->want_gk && c->o.kind == SNN_NEURON_PLIF) {
            /* |term| <= |gH| (|h| + |v_prev| + |V_r|) / k with |gH| = |gx| / k (decay_input)
             * or |gx|; bound |v_prev| by 2 + |h| (it is h or a reset value) */
            double scale = 0, ck = c->o.decay_input ? (double)c->k : 1.0;
            for (size_t i = 0; i < N; i++)
                scale += fabs((double)gx_ref[i]) / ck * (2.0 * fabs((double)hr[i]) + 3.0);
            double tolk = 1e-5 * scale / (double)c->k + 1e-6;
            CHECK_MSG(fabs((double)bio.gk - gk_ref) <= tolk, "gk %.9g vs reference %.9g (%s)",
                      (double)bio.gk, gk_ref, desc);
        }
    }
    free(xf); free(xr); free(bias); free(v0); free(xs); free(s_ref); free(h_ref); free(v_ref);
    free(vl_ref); free(s); free(h); free(vs); free(vl); free(tmp); free(want); free(wbytes);
    free(gsf); free(gvf); free(gvl); free(gss); free(gvs); free(hs); free(hr); free(gx_ref);
    free(gv0_ref); free(gx); free(gv0); free(tsum);
    return snn_test_failures - fails0;
}

/* Iterate over every configuration: kinds × decay_input × reset × detach × surrogates, with
 * the storage and spike types and optional inputs rotating through the cases. */
typedef int (*nc_visit)(const ncase *c, void *ctx);

static int nc_all_configs(int T, size_t n, snn_dtype io, nc_visit visit, void *ctx) {
    static const snn_dtype spikes[] = {SNN_F32, SNN_BF16, SNN_F16, SNN_F8E4M3};
    int count = 0, r = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int decay = 0; decay < (kind == 0 ? 1 : 2); decay++)
            for (int soft = 0; soft < 2; soft++)
                for (int detach = 0; detach < 2; detach++)
                    for (int sg = 0; sg < SNN_SG_COUNT; sg++) {
                        ncase c;
                        memset(&c, 0, sizeof c);
                        c.o = snn_neuron_defaults((snn_neuron_kind)kind);
                        c.o.decay_input = kind == 0 ? 1 : decay;
                        c.o.soft_reset = soft;
                        c.o.detach_reset = detach;
                        c.o.surrogate = (snn_surrogate_kind)sg;
                        c.o.alpha = (count % 3 == 0) ? 0.0f : 0.5f + 0.25f * (float)(count % 7);
                        c.o.v_reset = soft ? 0.0f : (count % 2 ? -0.25f : 0.0f);
                        c.o.v_threshold = count % 4 == 1 ? 0.75f : 1.0f;
                        c.k = kind == 0 ? 1.0f : (kind == 1 ? 1.0f / (1.5f + (float)(count % 5))
                                                            : 0.35f + 0.05f * (float)(count % 4));
                        c.T = T;
                        c.n = n;
                        c.io = io;
                        c.sp = spikes[count % 4];
                        c.use_v0 = count % 2;
                        c.use_bias = count % 3 == 0;
                        c.bias_period = n % 8 == 0 ? 8 * (size_t)(1 + count % 3) : 1;
                        if (n % c.bias_period) c.bias_period = 1;
                        c.use_gvseq = count % 2 == 0;
                        c.use_gvlast = count % 3 != 2;
                        c.want_h_vseq = 1;
                        c.want_gk = kind == 2;
                        c.want_tsum = count % 2 == 1;
                        c.want_amax = count % 3 == 1;
                        count++;
                        r += visit(&c, ctx);
                    }
    return r;
}

#endif
