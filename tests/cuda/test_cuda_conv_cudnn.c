/* The cuDNN convolution path (src/backend/cuda/cuda_conv_cudnn.h) against the CPU Conv2d
 * module (src/nn/conv2d.c), which is the reference, on fresh random inputs:
 *   - odd shapes: kernels 1/3/5/7, strides 1/2, padding 0..3, C and O not multiples of 8,
 *     tiny images (1x1 outputs) and Spikformer-stem / convsnn sized ones;
 *   - FP32 (FMA math): y, dx, dW, db within 1e-5 (max |a-b| / max(|b|, 1% of max |b|)) of
 *     the CPU, on top of the CPU's own error against an FP64 direct convolution;
 *   - BF16 / F16, both storages (16-bit tensors; FP32 tensors holding 16-bit values with
 *     TF32 math), against the CPU module run on rounded operands as the CPU precision
 *     reference does (src/precision/prec_exec.c), with the documented rounding of each output
 *     (bounds at the comparisons);
 *   - dW and db are accumulated (a graph replay adds a second, equal, contribution);
 *     a CUDA graph captured after the eager calls repeats y and dx bitwise (deterministic
 *     algorithms, no allocation inside the calls);
 *   - snn_cudnn_round bitwise against snn_convert's round trip; bad arguments rejected.
 * Then it prints (asserts nothing) event-timed medians of the cuDNN path against the im2col
 * path (cuda_layers.h + cuBLASLt, the runner's conv_fwd / conv_bwd sequence) on the convsnn
 * and Spikformer-stem convolutions at N = 32 and 128, T = 4 folded into the batch
 * (SNN_CUDNN_BENCH=0 skips it). Outputs are poisoned (0xFF bytes = NaN) before each call.
 * Exit 77 without a GPU or without cuDNN in the build. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_conv_cudnn.h"
#include "backend/cuda/cuda_layers.h"
#include "harness.h"
#include "nn/layers.h"
#include "snn/dtype.h"

#include "cuda_test_util.h"

static snn_cudnn *dnn;

static void poison(void *d, size_t bytes) { snn_cuda_memset(g, d, 0xFF, bytes); }
static void down(void *h, const void *d, size_t bytes) {
    snn_cuda_synchronize(g);
    snn_cuda_download(g, h, d, bytes);
}
static float *fvec(size_t n, float lo, float hi) {
    float *p = xmalloc(n * sizeof(float));
    snn_test_fill_uniform(p, n, lo, hi, &rng);
    return p;
}
static double maxabs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}
/* max |a - b| / max(|b|, 1% of max |b|) */
static double rel(const float *a, const float *b, size_t n) {
    double f = 1e-2 * maxabs(b, n);
    return snn_test_max_rel(a, b, n, f > 1e-30 ? f : 1e-30);
}
static double rel64(const float *a, const double *b, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(b[i]));
    double f = fmax(1e-2 * m, 1e-30);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs(b[i]), f);
        e = d > e || d != d ? d : e;
    }
    return e;
}
/* max over i of |a - r| / (u (max(|a|, |r|) + |s|) + floor), s may be NULL; its index in
 * *worst (worst may be NULL). floor = 5e-5 max |r|: where r is near 0 the 16-bit grid is
 * finer than the FP32 sums' own disagreement (tensor-core accumulation over up to ~3e4 terms
 * whose magnitudes add to ~30x max |r|); it only matters for values below ~1% of the
 * largest. */
static double ulp_err(const float *a, const float *r, const float *s, size_t n, double u,
                      size_t *worst) {
    const double fl = 5e-5 * maxabs(r, n) + 1e-30;
    double e = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double m = fmax(fabs((double)a[i]), fabs((double)r[i])) + (s ? fabs((double)s[i]) : 0.0);
        double d = fabs((double)a[i] - r[i]) / (u * m + fl);
        if (d > e || d != d) e = d, wi = i;
    }
    if (worst) *worst = wi;
    return e;
}
/* out[i] = round_to(t, v[i]) as FP32 (t = F32: a copy) */
static void round_host(snn_dtype t, float *out, const float *v, size_t n) {
    if (t == SNN_F32) {
        memmove(out, v, n * 4);
        return;
    }
    uint16_t *h = xmalloc(n * 2);
    snn_convert(t, h, SNN_F32, v, n, 0);
    snn_convert(SNN_F32, out, t, h, n, 0);
    free(h);
}
static int bits_equal(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * 4); }

/* |a - r| in steps of the 16-bit grid of t (a, r representable in t): how many ulps apart */
static long steps16(snn_dtype t, float a, float r) {
    uint16_t h[2];
    float v[2] = {a, r};
    snn_convert(t, h, SNN_F32, v, 2, 0);
    long o[2];
    for (int i = 0; i < 2; i++) o[i] = h[i] & 0x8000 ? -(long)(h[i] & 0x7fff) : (long)h[i];
    return labs(o[0] - o[1]);
}

/* The 16-bit comparison of one output (a: GPU, r: the CPU's FP32 result rounded as the
 * contract says, cpu: that FP32 result, s: see ulp_err): returns the error in ulps and, over
 * the bound, fails naming the worst element, so that a log tells a rounding disagreement
 * (one grid step) from an intermediate 16-bit rounding inside a kernel (several steps, or
 * one where |r| is small against max |r|: cancellation of rounded partial sums). */
static double ulp_check(const char *mname, const char *what, snn_dtype t, const float *a,
                        const float *r, const float *cpu, const float *s, size_t n, double u) {
    size_t i = 0;
    const double e = ulp_err(a, r, s, n, u, &i);
    CHECK_MSG(e <= 1.01, "%s %s off by %g ulp: [%zu] gpu %.9g want %.9g (cpu fp32 %.9g, %ld grid "
              "steps apart, max |want| %.4g)", mname, what, e, i, (double)a[i], (double)r[i],
              (double)cpu[i], steps16(t, a[i], r[i]), maxabs(r, n));
    return e;
}

/* A host scratch vector that knows its length: a use longer than the buffer (a test bug:
 * run 1 rounded the nw weight-gradient values into a buffer of max(nx, ny) and corrupted the
 * heap, crashing later) fails with a message instead of writing past the end. */
typedef struct {
    float *v;
    size_t cap;
} scratch;
static int scratch_fits(const scratch *s, size_t n, const char *what) {
    CHECK_MSG(n <= s->cap, "test bug: %s needs %zu floats of scratch, it has %zu", what, n, s->cap);
    return n <= s->cap;
}

/* ---- the CPU module hosted alone (flat params/grads, an arena), as snn_model does ---- */
typedef struct {
    snn_module *m;
    float *params, *grads, *bufs;
    snn_arena arena;
    snn_run run;
} host;

static int host_make(host *h, snn_module *m, snn_shape in, int T, int N) {
    memset(h, 0, sizeof *h);
    h->m = m;
    if (!m) return 0;
    m->in = in;
    if (m->ops->setup(m, in) != SNN_OK) return 0;
    size_t np = 0, nb = 0;
    for (int i = 0; i < m->n_params; i++)
        *(m->params[i].kind == SNN_PARAM_WEIGHT ? &np : &nb) += m->params[i].numel;
    h->params = calloc(np + 1, sizeof(float));
    h->grads = calloc(np + 1, sizeof(float));
    h->bufs = calloc(nb + 1, sizeof(float));
    np = nb = 0;
    for (int i = 0; i < m->n_params; i++) {
        snn_param *p = &m->params[i];
        if (p->kind == SNN_PARAM_WEIGHT) {
            p->data = h->params + np;
            p->grad = h->grads + np;
            np += p->numel;
        } else {
            p->data = h->bufs + nb;
            p->grad = NULL;
            nb += p->numel;
        }
    }
    snn_rng r = snn_rng_make(1, 2);
    if (m->ops->init) m->ops->init(m, &r);
    snn_arena_begin_measure(&h->arena);
    if (m->ops->reserve) m->ops->reserve(m, &h->arena, T, N);
    if (snn_arena_allocate(&h->arena, h->arena.used + 64) != SNN_OK) return 0;
    if (m->ops->reserve) m->ops->reserve(m, &h->arena, T, N);
    h->run.T = T;
    h->run.N = N;
    h->run.training = 1;
    h->run.be = snn_backend_cpu();
    return 1;
}
static void host_free(host *h) {
    snn_arena_free(&h->arena);
    free(h->params);
    free(h->grads);
    free(h->bufs);
    snn_module_free(h->m);
}

typedef struct {
    int B, C, H, W, O, k, s, p, bias;
} conv_case;

/* FP64 direct convolution: y (with bias), dx, dW, db from the same FP32 inputs */
static void ref64(const conv_case *cc, int Ho, int Wo, const float *x, const float *w,
                  const float *b, const float *dy, double *y, double *dx, double *dw, double *db) {
    const int C = cc->C, H = cc->H, W = cc->W, O = cc->O, k = cc->k;
    memset(dx, 0, (size_t)cc->B * C * H * W * sizeof(double));
    memset(dw, 0, (size_t)O * C * k * k * sizeof(double));
    memset(db, 0, (size_t)O * sizeof(double));
    for (int n = 0; n < cc->B; n++)
        for (int o = 0; o < O; o++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    size_t yi = (((size_t)n * O + o) * Ho + oy) * Wo + ox;
                    double acc = b ? b[o] : 0.0, g1 = dy[yi];
                    db[o] += g1;
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < k; ky++) {
                            int iy = oy * cc->s - cc->p + ky;
                            if (iy < 0 || iy >= H) continue;
                            for (int kx = 0; kx < k; kx++) {
                                int ix = ox * cc->s - cc->p + kx;
                                if (ix < 0 || ix >= W) continue;
                                size_t xi = (((size_t)n * C + c) * H + iy) * W + ix;
                                size_t wi = (((size_t)o * C + c) * k + ky) * k + kx;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += g1 * w[wi];
                                dw[wi] += g1 * x[xi];
                            }
                        }
                    y[yi] = acc;
                }
}

/* One mode: compute type and storage (store ignored for F32). */
typedef struct {
    snn_dtype t;
    snn_cudnn_store store;
} mode;

static const char *mode_name(mode md) {
    if (md.t == SNN_F32) return "f32";
    if (md.t == SNN_BF16) return md.store == SNN_CUDNN_STORE_16 ? "bf16/16-bit" : "bf16/f32-tf32";
    return md.store == SNN_CUDNN_STORE_16 ? "f16/16-bit" : "f16/f32-tf32";
}

static void test_case(const conv_case *cc) {
    const int B = cc->B, C = cc->C, H = cc->H, W = cc->W, O = cc->O, k = cc->k;
    const int T = B % 2 ? 1 : 2, N = B / T;
    host h;
    if (!host_make(&h, snn_conv2d_new(C, O, k, cc->s, cc->p, cc->bias), snn_shape3(C, H, W), T, N)) {
        CHECK_MSG(0, "conv host setup failed: %s", snn_last_error());
        host_free(&h);
        return;
    }
    snn_module *m = h.m;
    const int Ho = m->out.d[1], Wo = m->out.d[2];
    const size_t nx = (size_t)B * C * H * W, ny = (size_t)B * O * Ho * Wo, nw = (size_t)O * C * k * k;
    /* the host buffers below are sized from the case; the module must agree with it */
    const int params_ok = m->n_params == (cc->bias ? 2 : 1) && m->params[0].numel == nw &&
                          (!cc->bias || m->params[1].numel == (size_t)O) &&
                          Ho == (H + 2 * cc->p - k) / cc->s + 1 && Wo == (W + 2 * cc->p - k) / cc->s + 1;
    CHECK_MSG(params_ok, "conv host module: %d params / output %dx%d disagree with the case", m->n_params,
              Ho, Wo);
    if (!params_ok) {
        host_free(&h);
        return;
    }
    float *wt = m->params[0].data, *bias = cc->bias ? m->params[1].data : NULL;
    float *gw = m->params[0].grad, *gb = cc->bias ? m->params[1].grad : NULL;
    /* weights ~ 1/sqrt(fan-in) keep outputs O(1) at every size */
    const float ws = 1.0f / sqrtf((float)(C * k * k));
    float *w = fvec(nw, -ws, ws), *b = fvec((size_t)O, -0.5f, 0.5f);
    float *x = fvec(nx, -1.0f, 1.0f), *dy = fvec(ny, -1.0f, 1.0f);
    double *y64 = xmalloc(ny * 8), *dx64 = xmalloc(nx * 8), *dw64 = xmalloc(nw * 8), *db64 = xmalloc(O * 8);
    float *yc = xmalloc(ny * 4), *yc0 = xmalloc(ny * 4), *dxc = xmalloc(nx * 4), *dwc = xmalloc(nw * 4);
    /* want holds a rounded copy of y, dx or dW, or a download of x: the largest of them */
    const size_t nmax = nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw);
    scratch want_s = {xmalloc(nmax * 4), nmax};
    float *dbc = xmalloc(O * 4), *want = want_s.v;
    float *xr = xmalloc(nx * 4), *wr = xmalloc(nw * 4), *dyr = xmalloc(ny * 4);
    float *yg = xmalloc(ny * 4), *dxg = xmalloc(nx * 4), *dwg = xmalloc(nw * 4), *dbg = xmalloc(O * 4);
    float *y2 = xmalloc(ny * 4), *dx2 = xmalloc(nx * 4), *dw2 = xmalloc(nw * 4), *db2 = xmalloc(O * 4);

    float *d_x = dcopy(x, nx * 4), *d_w = dcopy(w, nw * 4), *d_dy = dcopy(dy, ny * 4);
    float *d_b = dcopy(b, O * 4), *d_y = dalloc(ny * 4), *d_dx = dalloc(nx * 4);
    float *d_dw = dalloc(nw * 4), *d_db = dalloc(O * 4);
    void *d_xo = dalloc(nx * 4), *d_wo = dalloc(nw * 4), *d_dyo = dalloc(ny * 4);

    const mode modes[] = {{SNN_F32, SNN_CUDNN_STORE_16},  {SNN_BF16, SNN_CUDNN_STORE_16},
                          {SNN_BF16, SNN_CUDNN_STORE_F32}, {SNN_F16, SNN_CUDNN_STORE_16},
                          {SNN_F16, SNN_CUDNN_STORE_F32}};
    for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
        const mode md = modes[mi];
        const snn_dtype t = md.t;
        snn_cudnn_conv_desc desc = {B, C, H, W, O, k, cc->s, cc->p, t, md.store, 0, 0, 0};
        snn_cudnn_conv *pl = NULL;
        snn_status st = snn_cudnn_conv_create(dnn, &desc, &pl);
        if (st != SNN_OK && cc->p >= k && st == SNN_E_UNSUPPORTED) {
            /* padding >= kernel: cuDNN may refuse it; the documented answer is the fallback */
            fprintf(stderr, "  note: %s padding %d >= kernel %d refused: %s\n", mode_name(md),
                    cc->p, k, snn_last_error());
            continue;
        }
        CHECK_MSG(st == SNN_OK, "plan B=%d C=%d %dx%d O=%d k=%d s=%d p=%d %s: %s", B, C, H, W, O,
                  k, cc->s, cc->p, mode_name(md), snn_last_error());
        if (st != SNN_OK) continue;
        void *work = dalloc(snn_cudnn_conv_work_bytes(pl));
        const snn_dtype op = snn_cudnn_conv_operand_type(pl);
        CHECK(op == (t != SNN_F32 && md.store == SNN_CUDNN_STORE_16 ? t : SNN_F32));

        /* CPU reference on the operands this mode sees (rounded for 16-bit compute) */
        round_host(t, xr, x, nx);
        round_host(t, wr, w, nw);
        round_host(t, dyr, dy, ny);
        memcpy(wt, wr, nw * 4);
        if (bias) memcpy(bias, b, O * 4);
        memset(gw, 0, nw * 4);
        if (gb) memset(gb, 0, O * 4);
        CHECK(m->ops->forward(m, &h.run, xr, yc) == SNN_OK);
        CHECK(m->ops->backward(m, &h.run, xr, yc, dyr, dxc) == SNN_OK);
        memcpy(dwc, gw, nw * 4);
        if (gb) memcpy(dbc, gb, O * 4);
        if (bias) { /* the conv without bias, for STORE_16's rounding order */
            memset(bias, 0, O * 4);
            CHECK(m->ops->forward(m, &h.run, xr, yc0) == SNN_OK);
        }

        /* device operands in the operand type */
        if (op == SNN_F32) {
            OK(snn_cudnn_round(g, t, d_xo, d_x, nx));
            OK(snn_cudnn_round(g, t, d_wo, d_w, nw));
            OK(snn_cudnn_round(g, t, d_dyo, d_dy, ny));
            if (scratch_fits(&want_s, nx, "x download")) {
                down(want, d_xo, nx * 4);
                CHECK_MSG(bits_equal(want, xr, nx), "snn_cudnn_round %s differs from snn_convert",
                          snn_dtype_name(t));
            }
        } else {
            OK(snn_cuda_convert(g, op, d_xo, SNN_F32, d_x, nx, NULL, 0));
            OK(snn_cuda_convert(g, op, d_wo, SNN_F32, d_w, nw, NULL, 0));
            OK(snn_cuda_convert(g, op, d_dyo, SNN_F32, d_dy, ny, NULL, 0));
        }
        poison(d_y, ny * 4);
        poison(d_dx, nx * 4);
        snn_cuda_memset(g, d_dw, 0, nw * 4);
        snn_cuda_memset(g, d_db, 0, O * 4);
        OK(snn_cudnn_conv_forward(pl, d_xo, d_wo, bias ? d_b : NULL, d_y, work));
        OK(snn_cudnn_conv_backward_data(pl, d_wo, d_dyo, d_dx, work));
        OK(snn_cudnn_conv_backward_filter(pl, d_xo, d_dyo, d_dw, bias ? d_db : NULL, work));
        down(yg, d_y, ny * 4);
        down(dxg, d_dx, nx * 4);
        down(dwg, d_dw, nw * 4);
        down(dbg, d_db, O * 4);

        double ey = NAN, edx = NAN, edw = NAN, edb = 0;
        if (t == SNN_F32) {
            /* FP32: within 1e-5 of the CPU on top of the CPU's own error against FP64 (the
             * two sum in different orders; long dW / db sums give the CPU ~1e-6 itself) */
            ref64(cc, Ho, Wo, x, w, bias ? b : NULL, dy, y64, dx64, dw64, db64);
            double cy = rel64(yc, y64, ny), cdx = rel64(dxc, dx64, nx), cdw = rel64(dwc, dw64, nw);
            double cdb = gb ? rel64(dbc, db64, O) : 0;
            ey = rel(yg, yc, ny);
            edx = rel(dxg, dxc, nx);
            edw = rel(dwg, dwc, nw);
            if (gb) edb = rel(dbg, dbc, O);
            fprintf(stderr, "    (FP64: gpu y %.2g dx %.2g dw %.2g db %.2g; cpu y %.2g dx %.2g dw "
                    "%.2g db %.2g)\n", rel64(yg, y64, ny), rel64(dxg, dx64, nx),
                    rel64(dwg, dw64, nw), gb ? rel64(dbg, db64, O) : 0.0, cy, cdx, cdw, cdb);
            CHECK_MSG(ey <= 1e-5 + cy, "f32 y rel %g (cpu vs fp64 %g)", ey, cy);
            CHECK_MSG(edx <= 1e-5 + cdx, "f32 dx rel %g (cpu vs fp64 %g)", edx, cdx);
            CHECK_MSG(edw <= 1e-5 + cdw, "f32 dw rel %g (cpu vs fp64 %g)", edw, cdw);
            CHECK_MSG(edb <= 1e-5 + cdb, "f32 db rel %g (cpu vs fp64 %g)", edb, cdb);
        } else {
            /* u = one unit in the last place relative to the value (2^-7 BF16, 2^-10 F16).
             * The contract: FP32 accumulation of exact products (16-bit x 16-bit fits FP32),
             * ONE rounding to 16 bits at the end. GPU and CPU form the FP32 sums in different
             * orders (~1e-7 relative to the sum of |terms| apart), so the two roundings agree
             * or sit one grid step apart: |a - r| <= u max(|a|, |r|), plus the floor of
             * ulp_err where r is small against the largest value (there the FP32 orders'
             * disagreement can exceed the 16-bit grid). STORE_16 with a bias rounds twice (the
             * conv, then conv + bias): the first rounding may flip too, by u |conv| more.
             * Reported in ulps, bound 1 (+1% for the division). This bound is what a kernel
             * that rounds partial sums or products to 16 bits breaks (run 1: cuDNN's default-
             * math FP16 ALGO_1 backward-data kernel, 1.44); it is the contract, not slack. */
            const double u = t == SNN_BF16 ? 1.0 / 128 : 1.0 / 1024;
            const char *mn = mode_name(md);
            if (md.store == SNN_CUDNN_STORE_16 && bias) {
                float *r0 = xmalloc(ny * 4);
                round_host(t, r0, yc0, ny);
                const int P = Ho * Wo;
                for (size_t i = 0; i < ny; i++) r0[i] += b[(i / P) % O];
                if (scratch_fits(&want_s, ny, "rounded y")) {
                    round_host(t, want, r0, ny);
                    ey = ulp_check(mn, "y", t, yg, want, yc, yc0, ny, u);
                }
                free(r0);
            } else if (scratch_fits(&want_s, ny, "rounded y")) {
                round_host(t, want, yc, ny);
                ey = ulp_check(mn, "y", t, yg, want, yc, NULL, ny, u);
            }
            if (scratch_fits(&want_s, nx, "rounded dx")) {
                round_host(t, want, dxc, nx);
                edx = ulp_check(mn, "dx", t, dxg, want, dxc, NULL, nx, u);
            }
            if (md.store == SNN_CUDNN_STORE_16) {
                /* dW of the call rounded once to 16 bits: the same one-ulp argument */
                if (scratch_fits(&want_s, nw, "rounded dw")) {
                    round_host(t, want, dwc, nw);
                    edw = ulp_check(mn, "dw", t, dwg, want, dwc, NULL, nw, u);
                }
            } else {
                /* FP32 dW from exact products (TF32 holds 16-bit values exactly); tensor-core
                 * accumulation is FP32 but not IEEE round-to-nearest at every step, so allow
                 * 1e-4 (relative, as for FP32) for sums of up to ~3e4 products */
                edw = rel(dwg, dwc, nw);
                CHECK_MSG(edw <= 1e-4, "%s dw rel %g > 1e-4", mode_name(md), edw);
            }
            if (gb) {
                /* FP32 sums of the 16-bit dy values, against FP64 */
                for (int o = 0; o < O; o++) db64[o] = 0;
                const int P = Ho * Wo;
                for (size_t i = 0; i < ny; i++) db64[(i / P) % O] += dyr[i];
                edb = rel64(dbg, db64, O);
                CHECK_MSG(edb <= 1e-5, "%s db rel %g", mode_name(md), edb);
            }
        }
        fprintf(stderr, "  B=%d C=%d %dx%d -> O=%d k=%d s=%d p=%d%s %-13s y %.2g dx %.2g dw %.2g%s db "
                "%.2g  [%s]\n", B, C, H, W, O, k, cc->s, cc->p, bias ? " +b" : "", mode_name(md),
                ey, edx, edw, t == SNN_F32 ? " (rel)" : md.store ? " (y, dx ulp; dw rel)" : " (ulp)",
                edb, snn_cudnn_conv_describe(pl));

        /* The three calls captured in a CUDA graph after the eager ones: y and dx repeat
         * bitwise, dW and db gain a second, equal, contribution. */
        cudaStream_t sm = (cudaStream_t)snn_cuda_stream(g);
        cudaGraph_t gr = NULL;
        cudaGraphExec_t ge = NULL;
        snn_status s1 = SNN_E_STATE, s2 = SNN_E_STATE, s3 = SNN_E_STATE;
        snn_cuda_synchronize(g);
        int cap = cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
        if (cap) {
            s1 = snn_cudnn_conv_forward(pl, d_xo, d_wo, bias ? d_b : NULL, d_y, work);
            s2 = snn_cudnn_conv_backward_data(pl, d_wo, d_dyo, d_dx, work);
            s3 = snn_cudnn_conv_backward_filter(pl, d_xo, d_dyo, d_dw, bias ? d_db : NULL, work);
            cap = cudaStreamEndCapture(sm, &gr) == cudaSuccess && gr;
        }
        CHECK_MSG(cap && s1 == SNN_OK && s2 == SNN_OK && s3 == SNN_OK,
                  "%s: capture failed (calls %d %d %d): %s", mode_name(md), s1, s2, s3,
                  snn_last_error());
        if (cap && cudaGraphInstantiate(&ge, gr, 0) == cudaSuccess) {
            poison(d_y, ny * 4);
            poison(d_dx, nx * 4);
            CHECK(cudaGraphLaunch(ge, sm) == cudaSuccess);
            down(y2, d_y, ny * 4);
            down(dx2, d_dx, nx * 4);
            down(dw2, d_dw, nw * 4);
            down(db2, d_db, O * 4);
            for (size_t i = 0; i < nw; i++) dwg[i] *= 2.0f;
            for (int i = 0; i < O; i++) dbg[i] *= 2.0f;
            CHECK_MSG(bits_equal(y2, yg, ny), "%s: replayed y differs", mode_name(md));
            CHECK_MSG(bits_equal(dx2, dxg, nx), "%s: replayed dx differs", mode_name(md));
            /* 16-bit dW is widened and added by this file's kernel: exactly 2x. FP32 dW is
             * accumulated by cuDNN (beta = 1), which may fold the old value in before its
             * last partial sums: 2x up to FP32 rounding. */
            if (op != SNN_F32)
                CHECK_MSG(bits_equal(dw2, dwg, nw), "%s: dw after a replay is not twice one call",
                          mode_name(md));
            else
                CHECK_MSG(rel(dw2, dwg, nw) <= 1e-6, "%s: dw after a replay is %g from twice one "
                          "call", mode_name(md), rel(dw2, dwg, nw));
            if (bias) CHECK_MSG(bits_equal(db2, dbg, O), "%s: db after a replay is not twice one "
                                "call", mode_name(md));
        } else if (cap) {
            CHECK_MSG(0, "%s: cudaGraphInstantiate failed", mode_name(md));
        }
        if (ge) cudaGraphExecDestroy(ge);
        if (gr) cudaGraphDestroy(gr);
        cudaGetLastError();
        snn_cuda_free(work);
        snn_cudnn_conv_destroy(pl);
    }
    void *dfree[] = {d_x, d_w, d_dy, d_b, d_y, d_dx, d_dw, d_db, d_xo, d_wo, d_dyo};
    for (size_t i = 0; i < sizeof dfree / sizeof dfree[0]; i++) snn_cuda_free(dfree[i]);
    void *hfree[] = {w, b, x, dy, y64, dx64, dw64, db64, yc, yc0, dxc, dwc, dbc, want, xr, wr,
                     dyr, yg, dxg, dwg, dbg, y2, dx2, dw2, db2};
    for (size_t i = 0; i < sizeof hfree / sizeof hfree[0]; i++) free(hfree[i]);
    host_free(&h);
}

static void test_bad_args(void) {
    snn_cudnn_conv *pl = NULL;
    snn_cudnn_conv_desc d = {2, 3, 4, 4, 5, 5, 1, 0, SNN_F32, SNN_CUDNN_STORE_16, 0, 0, 0};
    CHECK(snn_cudnn_conv_create(dnn, &d, &pl) == SNN_E_INVALID && !pl); /* 5x5 on 4x4, pad 0 */
    d.k = 3;
    d.compute = SNN_F8E4M3;
    CHECK(snn_cudnn_conv_create(dnn, &d, &pl) == SNN_E_INVALID && !pl);
    d.compute = SNN_F32;
    d.stride = 0;
    CHECK(snn_cudnn_conv_create(dnn, &d, &pl) == SNN_E_INVALID && !pl);
    d.stride = 1;
    OK(snn_cudnn_conv_create(dnn, &d, &pl));
    if (!pl) return;
    float *a = dalloc(4096 * 4);
    void *work = dalloc(snn_cudnn_conv_work_bytes(pl));
    CHECK(snn_cudnn_conv_work_bytes(pl) > 0);
    CHECK(snn_cudnn_conv_forward(pl, a, a, NULL, a, NULL) == SNN_E_INVALID);
    CHECK(snn_cudnn_conv_forward(pl, NULL, a, NULL, a, work) == SNN_E_INVALID);
    CHECK(snn_cudnn_conv_backward_data(pl, a, a, NULL, work) == SNN_E_INVALID);
    CHECK(snn_cudnn_conv_backward_filter(pl, a, NULL, a, NULL, work) == SNN_E_INVALID);
    CHECK(snn_cudnn_round(g, SNN_F8E5M2, a, a, 4) == SNN_E_INVALID);
    snn_cuda_free(a);
    snn_cuda_free(work);
    snn_cudnn_conv_destroy(pl);
}

/* ---- timing (printed, not asserted): cuDNN against the im2col path ---- */
static snn_status gemm(int ta, int tb, int M, int N, int K, snn_dtype ab, const void *A, int lda,
                       const void *Bm, int ldb, float beta, float *C, int ldc) {
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta;
    d.trans_b = tb;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_type = d.b_type = ab;
    d.c_type = SNN_F32;
    d.lda = lda;
    d.ldb = ldb;
    d.ldc = ldc;
    return snn_cuda_gemm(g, &d, 1.0f, A, Bm, beta, C, NULL, NULL, NULL, NULL);
}

typedef struct {
    int B, C, H, W, O, k, P, Kc, ldcol;
    snn_dtype t;
    float *x, *w, *y, *dy, *dx, *dw, *yn, *dcol, *xo, *dyo, *wr;
    void *col, *dyn, *wc, *work;
    snn_cudnn_conv *pl;
} bctx;

#define WC(b) ((b)->t == SNN_F32 ? (const void *)(b)->w : (const void *)(b)->wc)
/* the runner's conv_fwd / conv_bwd (src/backend/cuda/cuda_model_exec.cu), bias-free */
static snn_status i2c_fwd(bctx *b) {
    SNN_TRY(snn_cuda_im2col(g, b->t, b->col, b->ldcol, b->x, b->B, b->C, b->H, b->W, b->k, 1, 1));
    SNN_TRY(gemm(0, 1, b->B * b->P, b->O, b->Kc, b->t, b->col, b->ldcol, WC(b), b->Kc, 0.0f, b->yn, b->O));
    return snn_cuda_nhwc_to_nchw_round(g, b->y, b->yn, NULL, b->B, b->O, b->P, b->t);
}
static snn_status i2c_bwd(bctx *b) {
    const int BP = b->B * b->P;
    SNN_TRY(snn_cuda_nchw_to_nhwc(g, b->t, b->dyn, b->dy, b->B, b->O, b->P));
    SNN_TRY(gemm(1, 0, b->O, b->Kc, BP, b->t, b->dyn, b->O, b->col, b->ldcol, 1.0f, b->dw, b->Kc));
    SNN_TRY(gemm(0, 0, BP, b->Kc, b->O, b->t, b->dyn, b->O, WC(b), b->Kc, 0.0f, b->dcol, b->Kc));
    return snn_cuda_col2im_round(g, b->dx, b->dcol, b->Kc, b->B, b->C, b->H, b->W, b->k, 1, 1, b->t);
}
/* cuDNN: the operand preparation the runner would do (conversion or rounding of x and dy;
 * the weight copy is refreshed once per step, outside these) + the calls */
static snn_status dnn_fwd(bctx *b) {
    const snn_dtype op = snn_cudnn_conv_operand_type(b->pl);
    const size_t nx = (size_t)b->B * b->C * b->H * b->W;
    const void *x = b->x, *w = b->w;
    if (op != SNN_F32) {
        SNN_TRY(snn_cuda_convert(g, op, b->xo, SNN_F32, b->x, nx, NULL, 0));
        x = b->xo;
        w = b->wc;
    } else if (b->t != SNN_F32) {
        SNN_TRY(snn_cudnn_round(g, b->t, b->xo, b->x, nx));
        x = b->xo;
        w = b->wr;
    }
    return snn_cudnn_conv_forward(b->pl, x, w, NULL, b->y, b->work);
}
static snn_status dnn_bwd(bctx *b) {
    const snn_dtype op = snn_cudnn_conv_operand_type(b->pl);
    const size_t ny = (size_t)b->B * b->O * b->P;
    const void *dy = b->dy, *x = b->x, *w = b->w;
    if (op != SNN_F32) {
        SNN_TRY(snn_cuda_convert(g, op, b->dyo, SNN_F32, b->dy, ny, NULL, 0));
        dy = b->dyo;
        x = b->xo;
        w = b->wc;
    } else if (b->t != SNN_F32) {
        SNN_TRY(snn_cudnn_round(g, b->t, b->dyo, b->dy, ny));
        dy = b->dyo;
        x = b->xo;
        w = b->wr;
    }
    SNN_TRY(snn_cudnn_conv_backward_filter(b->pl, x, dy, b->dw, NULL, b->work));
    return snn_cudnn_conv_backward_data(b->pl, w, dy, b->dx, b->work);
}

static int cmpf(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
/* median of 11 event-timed runs after 2 warm-ups, ms; -1 on failure */
static float time_ms(snn_status (*fn)(bctx *), bctx *b) {
    cudaStream_t sm = (cudaStream_t)snn_cuda_stream(g);
    cudaEvent_t e0, e1;
    float t[11];
    if (cudaEventCreate(&e0) != cudaSuccess) return -1;
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return -1;
    }
    int ok = fn(b) == SNN_OK && fn(b) == SNN_OK;
    for (int r = 0; r < 11 && ok; r++) {
        cudaEventRecord(e0, sm);
        ok = fn(b) == SNN_OK;
        cudaEventRecord(e1, sm);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t[r], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (!ok) {
        fprintf(stderr, "    (timing failed: %s)\n", snn_last_error());
        return -1;
    }
    qsort(t, 11, sizeof t[0], cmpf);
    return t[5];
}

static void bench_one(const char *name, int N, int C, int H, int W, int O) {
    bctx b;
    memset(&b, 0, sizeof b);
    b.B = 4 * N; /* T = 4 folded into the batch */
    b.C = C, b.H = H, b.W = W, b.O = O, b.k = 3, b.P = H * W, b.Kc = C * 9;
    b.ldcol = (b.Kc + 7) / 8 * 8;
    const size_t nx = (size_t)b.B * C * H * W, ny = (size_t)b.B * O * b.P, nw = (size_t)O * b.Kc;
    const size_t BP = (size_t)b.B * b.P;
    b.x = dalloc(nx * 4), b.w = dalloc(nw * 4), b.y = dalloc(ny * 4), b.dy = dalloc(ny * 4);
    b.dx = dalloc(nx * 4), b.dw = dalloc(nw * 4), b.yn = dalloc(ny * 4), b.dcol = dalloc(BP * b.Kc * 4);
    b.xo = dalloc(nx * 4), b.dyo = dalloc(ny * 4), b.wr = dalloc(nw * 4), b.col = dalloc(BP * b.ldcol * 4);
    b.dyn = dalloc(ny * 4), b.wc = dalloc(nw * 4);
    snn_cuda_fill_random(g, b.x, nx, 11, 0, 0.0f, 1.0f); /* timings do not depend on values */
    snn_cuda_fill_random(g, b.dy, ny, 12, 0, -1.0f, 1.0f);
    snn_cuda_fill_random(g, b.w, nw, 13, 0, -0.05f, 0.05f);
    snn_cuda_memset(g, b.dw, 0, nw * 4);
    const snn_dtype ts[2] = {SNN_F32, SNN_BF16};
    for (int ti = 0; ti < 2; ti++) {
        b.t = ts[ti];
        if (b.t != SNN_F32) {
            OK(snn_cuda_convert(g, b.t, b.wc, SNN_F32, b.w, nw, NULL, 0));
            OK(snn_cudnn_round(g, b.t, b.wr, b.w, nw));
        }
        float fi = time_ms(i2c_fwd, &b), bi = time_ms(i2c_bwd, &b);
        fprintf(stderr, "  %-14s %3d->%-3d %3dx%-3d B=%-4d %-4s im2col      fwd %7.3f bwd %7.3f ms\n",
                name, C, O, H, W, b.B, snn_dtype_name(b.t), fi, bi);
        /* cuDNN: heuristic and timed choice; for BF16 both storages */
        for (int store = 0; store < (b.t == SNN_F32 ? 1 : 2); store++)
            for (int tune = 0; tune < 2; tune++) {
                if (store == 1 && tune == 1) continue;
                snn_cudnn_conv_desc d = {b.B, C, H, W, O, 3, 1, 1, b.t, (snn_cudnn_store)store,
                                         0, tune, 0};
                b.pl = NULL;
                if (snn_cudnn_conv_create(dnn, &d, &b.pl) != SNN_OK) {
                    fprintf(stderr, "    cuDNN plan failed: %s\n", snn_last_error());
                    continue;
                }
                b.work = dalloc(snn_cudnn_conv_work_bytes(b.pl));
                float fd = time_ms(dnn_fwd, &b), bd = time_ms(dnn_bwd, &b);
                fprintf(stderr, "  %-14s %3d->%-3d %3dx%-3d B=%-4d %-4s cudnn %-5s fwd %7.3f bwd %7.3f ms"
                        "  (%s)\n", name, C, O, H, W, b.B, snn_dtype_name(b.t),
                        b.t == SNN_F32 ? (tune ? "tuned" : "heur") : store ? "tf32" : (tune ? "16/tu" : "16"),
                        fd, bd, snn_cudnn_conv_describe(b.pl));
                snn_cuda_free(b.work);
                snn_cudnn_conv_destroy(b.pl);
            }
    }
    void *f[] = {b.x, b.w, b.y, b.dy, b.dx, b.dw, b.yn, b.dcol, b.xo, b.dyo, b.wr, b.col, b.dyn, b.wc};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) snn_cuda_free(f[i]);
}

static void bench(void) {
    fprintf(stderr, "timing, median of 11 (fwd: operand prep + conv; bwd: prep + dW + dx; "
            "16 = BF16 tensors, tf32 = FP32-stored BF16 values; T = 4 in B):\n");
    static const struct {
        const char *name;
        int C, H, W, O;
    } s[] = {{"convsnn conv1", 1, 28, 28, 128},   {"convsnn conv2", 128, 14, 14, 128},
             {"sps proj_conv0", 3, 128, 128, 48}, {"sps proj_conv1", 48, 64, 64, 96},
             {"sps proj_conv2", 96, 32, 32, 192}, {"sps proj_conv3", 192, 16, 16, 384},
             {"sps rpe conv", 384, 8, 8, 384}};
    const int Ns[2] = {32, 128};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        for (int n = 0; n < 2; n++) bench_one(s[i].name, Ns[n], s[i].C, s[i].H, s[i].W, s[i].O);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_conv_cudnn: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    if (!snn_cudnn_built() || snn_cudnn_create(g, &dnn) != SNN_OK) {
        fprintf(stderr, "test_cuda_conv_cudnn: skipped, cuDNN unusable: %s\n", snn_last_error());
        snn_cuda_destroy(g);
        return 77;
    }
    rng = snn_test_seed();
    static const conv_case cc[] = {
        {2, 3, 13, 11, 5, 3, 1, 1, 1},   {3, 5, 9, 9, 7, 1, 1, 0, 1},    {2, 4, 10, 7, 6, 5, 2, 2, 1},
        {2, 6, 15, 13, 3, 7, 1, 3, 0},   {4, 7, 8, 8, 9, 3, 2, 0, 1},    {1, 1, 5, 5, 1, 5, 1, 0, 1},
        {2, 1, 3, 4, 2, 3, 1, 1, 1},     {2, 13, 21, 17, 10, 3, 2, 1, 1}, {3, 2, 11, 11, 5, 1, 2, 0, 1},
        {2, 9, 6, 6, 11, 3, 1, 2, 0},    {2, 5, 7, 9, 6, 7, 2, 3, 1},    {2, 10, 12, 12, 12, 5, 1, 0, 0},
        /* a pointwise Conv1d as the runner lowers it (1 x L image, k 1) */
        {2, 24, 1, 37, 20, 1, 1, 0, 1},
        /* padding >= kernel (Conv2d allows it; cuDNN may refuse: then reported, not failed) */
        {2, 3, 5, 6, 4, 1, 1, 1, 1},
        /* convsnn (28x28 C=128) and Spikformer stem (128x128, D = 384) shapes at small B */
        {2, 1, 28, 28, 128, 3, 1, 1, 0}, {2, 128, 14, 14, 128, 3, 1, 1, 0},
        {2, 3, 128, 128, 48, 3, 1, 1, 0}, {2, 48, 64, 64, 96, 3, 1, 1, 0},
        {2, 384, 8, 8, 384, 3, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) test_case(&cc[i]);
    test_bad_args();
    const char *bn = getenv("SNN_CUDNN_BENCH");
    if (!bn || strcmp(bn, "0")) bench();
    snn_cudnn_destroy(dnn);
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_conv_cudnn");
}
