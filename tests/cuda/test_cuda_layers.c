/* GPU layer kernels (src/backend/cuda/cuda_layers.h: convolution lowering, max pooling, batch
 * norm, token mean) against the CPU code, which is the reference:
 *   - im2col against snn_im2col_f32 (bitwise, every column, padding columns 0), BF16/F16
 *     columns bitwise against snn_convert of the FP32 columns; col2im against
 *     snn_col2im_f32 (bitwise: same order of additions);
 *   - the rounding variants (col2im_round, nhwc_to_nchw_round, BF16/F16) bitwise against
 *     snn_convert's round trip of the FP32 results, -0 becoming +0 as the runner's separate
 *     rounding pass did; im2col into a misaligned col (the scalar-store path);
 *   - conv: im2col + a host GEMM + nhwc_to_nchw (bias) equals the CPU Conv2d forward, and
 *     col2im of (dY in pixel-major order . W) equals the CPU Conv2d dx; nchw_to_nhwc bitwise;
 *   - MaxPool2d with many ties (integer inputs) and a NaN: y and dx bitwise against the CPU
 *     module, arg against the documented rule (first maximum in scan order);
 *   - BatchNorm training forward (y, running statistics, saved mean/invstd), backward (dx,
 *     dgamma, dbeta accumulated) and eval forward against the CPU module, S = 1, L and H*W,
 *     including shapes that split a channel into several chunks;
 *   - TokenMean forward/backward against the CPU module;
 *   - bad arguments return SNN_E_INVALID and leave the output alone.
 * Outputs are poisoned (0xFF bytes = NaN) before each call. Exit 77 without a GPU.
 * With SNN_CUDA_LAYERS_BENCH=1 it also times the kernels on Spikformer-S sized tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_im2col.h"
#include "backend/cuda/cuda_layers.h"
#include "harness.h"
#include "models/spikformer_parts.h"
#include "nn/layers.h"
#include "snn/dtype.h"

#include "cuda_test_util.h"

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
/* max |a - b| / max(|b|, 1% of max |b|): relative error that does not blow up on values
 * that cancel to near 0. */
static double rel(const float *a, const float *b, size_t n) {
    double f = 1e-2 * maxabs(b, n);
    return snn_test_max_rel(a, b, n, f > 1e-30 ? f : 1e-30);
}

/* want[i] = round_to(t, v[i] + 0.0f) as FP32: the documented result of the _round calls */
static void round_trip(snn_dtype t, float *want, const float *v, size_t n) {
    uint16_t *h = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) want[i] = v[i] + 0.0f;
    snn_convert(t, h, SNN_F32, want, n, 0);
    snn_convert(SNN_F32, want, t, h, n, 0);
    free(h);
}

/* ---- a CPU module hosted alone (flat params/grads/buffers, an arena), as snn_model does ---- */
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

/* ---- im2col / col2im against the CPU building blocks ---- */
typedef struct {
    int B, C, H, W, k, s, p, extra; /* extra: ldcol - C*k*k */
} conv_case;

static void test_im2col(const conv_case *cc) {
    const int B = cc->B, C = cc->C, H = cc->H, W = cc->W, k = cc->k;
    snn_conv_geom geo = {C, H, W, k, k, cc->s, cc->s, cc->p, cc->p, 0, 0};
    if (!snn_conv_geom_finish(&geo)) {
        CHECK_MSG(0, "bad test case");
        return;
    }
    const int P = geo.Ho * geo.Wo, K = C * k * k, ld = K + cc->extra;
    const size_t nx = (size_t)B * C * H * W, ncol = (size_t)B * P * ld;
    float *x = fvec(nx, -2.0f, 2.0f);
    float *cpu = xmalloc((size_t)K * P * sizeof(float)), *col = xmalloc(ncol * sizeof(float));
    float *dx_x = dcopy(x, nx * 4), *dcol = dalloc(ncol * 4);
    OK(snn_cuda_im2col(g, SNN_F32, dcol, ld, dx_x, B, C, H, W, k, cc->s, cc->p));
    down(col, dcol, ncol * 4);
    size_t bad = 0, badpad = 0;
    for (int b = 0; b < B; b++) {
        snn_im2col_f32(&geo, x + (size_t)b * C * H * W, cpu, (size_t)P);
        for (int p = 0; p < P; p++) {
            const float *row = col + ((size_t)b * P + p) * ld;
            for (int j = 0; j < K; j++)
                if (memcmp(&row[j], &cpu[(size_t)j * P + p], 4)) bad++;
            for (int j = K; j < ld; j++)
                if (row[j] != 0.0f || signbit(row[j])) badpad++;
        }
    }
    CHECK_MSG(bad == 0 && badpad == 0,
              "im2col B=%d C=%d %dx%d k=%d s=%d p=%d ld=%d: %zu entries differ, %zu padding "
              "columns not 0",
              B, C, H, W, k, cc->s, cc->p, ld, bad, badpad);
    /* 16-bit columns: bitwise the rounding of the FP32 columns */
    static const snn_dtype ts[2] = {SNN_BF16, SNN_F16};
    uint16_t *h16 = xmalloc(ncol * 2), *want = xmalloc(ncol * 2);
    for (int t = 0; t < 2; t++) {
        void *d16 = dalloc(ncol * 2);
        OK(snn_cuda_im2col(g, ts[t], d16, ld, dx_x, B, C, H, W, k, cc->s, cc->p));
        down(h16, d16, ncol * 2);
        snn_convert(ts[t], want, SNN_F32, col, ncol, 0);
        CHECK_MSG(!memcmp(h16, want, ncol * 2), "im2col %s columns differ from the rounded FP32 ones",
                  snn_dtype_name(ts[t]));
        snn_cuda_free(d16);
        /* col 2 bytes past a 16-byte boundary: no vector stores */
        uint16_t *d16m = dalloc(ncol * 2 + 16);
        OK(snn_cuda_im2col(g, ts[t], d16m + 1, ld, dx_x, B, C, H, W, k, cc->s, cc->p));
        down(h16, d16m + 1, ncol * 2);
        CHECK_MSG(!memcmp(h16, want, ncol * 2), "im2col %s into a misaligned col differs",
                  snn_dtype_name(ts[t]));
        snn_cuda_free(d16m);
    }
    /* col2im of random columns (junk in the padding columns must be ignored) */
    float *g_col = fvec(ncol, -1.0f, 1.0f), *dxg = xmalloc(nx * 4), *dxc = xmalloc(nx * 4);
    for (size_t r = 0; r < (size_t)B * P; r++)
        for (int j = K; j < ld; j++) g_col[r * ld + j] = 1e6f;
    snn_cuda_upload(g, dcol, g_col, ncol * 4);
    float *ddx = dalloc(nx * 4);
    OK(snn_cuda_col2im(g, ddx, dcol, ld, B, C, H, W, k, cc->s, cc->p));
    down(dxg, ddx, nx * 4);
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < P; p++)
            for (int j = 0; j < K; j++) cpu[(size_t)j * P + p] = g_col[((size_t)b * P + p) * ld + j];
        snn_col2im_f32(&geo, cpu, (size_t)P, dxc + (size_t)b * C * H * W);
    }
    double e = rel(dxg, dxc, nx);
    fprintf(stderr, "  im2col/col2im B=%d C=%d %dx%d k=%d s=%d p=%d ld=%d: col2im max rel %.3g%s\n",
            B, C, H, W, k, cc->s, cc->p, ld, e, memcmp(dxg, dxc, nx * 4) ? "" : " (bitwise)");
    CHECK_MSG(!memcmp(dxg, dxc, nx * 4), "col2im differs from snn_col2im_f32 (max rel %g)", e);
    {
        /* dcol one float past a 16-byte boundary: the scalar staging paths */
        float *dcm = dalloc(ncol * 4 + 16);
        snn_cuda_upload(g, dcm + 1, g_col, ncol * 4);
        poison(ddx, nx * 4);
        OK(snn_cuda_col2im(g, ddx, dcm + 1, ld, B, C, H, W, k, cc->s, cc->p));
        down(dxg, ddx, nx * 4);
        CHECK_MSG(!memcmp(dxg, dxc, nx * 4), "col2im from a misaligned dcol differs");
        snn_cuda_free(dcm);
    }
    float *wr = xmalloc(nx * 4);
    for (int t = 0; t < 2; t++) {
        poison(ddx, nx * 4);
        OK(snn_cuda_col2im_round(g, ddx, dcol, ld, B, C, H, W, k, cc->s, cc->p, ts[t]));
        down(dxg, ddx, nx * 4);
        round_trip(ts[t], wr, dxc, nx);
        CHECK_MSG(!memcmp(dxg, wr, nx * 4), "col2im_round (%s) differs from the rounded sums",
                  snn_dtype_name(ts[t]));
    }
    free(wr);
    snn_cuda_free(dx_x);
    snn_cuda_free(dcol);
    snn_cuda_free(ddx);
    free(x); free(cpu); free(col); free(h16); free(want); free(g_col); free(dxg); free(dxc);
}

/* ---- Conv2d: im2col + GEMM + layout change against the CPU module ---- */
static void test_conv(const conv_case *cc, int O) {
    /* the CPU module runs T*N rows: an odd B is one time step of B samples */
    const int B = cc->B, C = cc->C, H = cc->H, W = cc->W, k = cc->k, T = B % 2 ? 1 : 2, N = B / T;
    host h;
    if (!host_make(&h, snn_conv2d_new(C, O, k, cc->s, cc->p, 1), snn_shape3(C, H, W), T, N)) {
        CHECK_MSG(0, "conv host setup failed: %s", snn_last_error());
        host_free(&h);
        return;
    }
    snn_module *m = h.m;
    const int Ho = m->out.d[1], Wo = m->out.d[2], P = Ho * Wo, K = C * k * k, ld = K + cc->extra;
    const size_t nx = (size_t)B * C * H * W, ny = (size_t)B * O * P, ncol = (size_t)B * P * ld;
    float *wt = m->params[0].data, *bias = m->params[1].data;
    snn_test_fill_uniform(wt, (size_t)O * K, -0.5f, 0.5f, &rng);
    snn_test_fill_uniform(bias, (size_t)O, -1.0f, 1.0f, &rng);
    float *x = fvec(nx, -1.0f, 1.0f), *y = xmalloc(ny * 4), *dy = fvec(ny, -1.0f, 1.0f);
    float *dx = xmalloc(nx * 4);
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h.run, x, y, dy, dx) == SNN_OK);

    float *d_x = dcopy(x, nx * 4), *d_col = dalloc(ncol * 4), *d_bias = dcopy(bias, O * 4);
    float *d_yn = dalloc(ny * 4), *d_y = dalloc(ny * 4);
    float *col = xmalloc(ncol * 4), *yn = xmalloc(ny * 4), *yg = xmalloc(ny * 4);
    OK(snn_cuda_im2col(g, SNN_F32, d_col, ld, d_x, B, C, H, W, k, cc->s, cc->p));
    down(col, d_col, ncol * 4);
    for (size_t r = 0; r < (size_t)B * P; r++) /* Yn[r][o] = col[r] . W[o] */
        for (int o = 0; o < O; o++) {
            double acc = 0;
            for (int j = 0; j < K; j++) acc += (double)col[r * ld + j] * wt[(size_t)o * K + j];
            yn[r * O + o] = (float)acc;
        }
    snn_cuda_upload(g, d_yn, yn, ny * 4);
    OK(snn_cuda_nhwc_to_nchw(g, d_y, d_yn, d_bias, B, O, P));
    down(yg, d_y, ny * 4);
    double ey = rel(yg, y, ny);
    {
        /* the rounding variants; some -0 entries (with no bias they must come out +0) */
        static const snn_dtype rt[2] = {SNN_BF16, SNN_F16};
        float *got = xmalloc(ny * 4), *wr = xmalloc(ny * 4), *nb = xmalloc(ny * 4);
        for (int t = 0; t < 2; t++) {
            poison(d_y, ny * 4);
            OK(snn_cuda_nhwc_to_nchw_round(g, d_y, d_yn, d_bias, B, O, P, rt[t]));
            down(got, d_y, ny * 4);
            round_trip(rt[t], wr, yg, ny);
            CHECK_MSG(!memcmp(got, wr, ny * 4), "nhwc_to_nchw_round (%s, bias) differs",
                      snn_dtype_name(rt[t]));
        }
        for (size_t i = 0; i < ny; i += 7) yn[i] = -0.0f;
        snn_cuda_upload(g, d_yn, yn, ny * 4);
        for (int b = 0; b < B; b++) /* the exact transpose, no bias */
            for (int o = 0; o < O; o++)
                for (int p = 0; p < P; p++)
                    nb[((size_t)b * O + o) * P + p] = yn[((size_t)b * P + p) * O + o];
        OK(snn_cuda_nhwc_to_nchw_round(g, d_y, d_yn, NULL, B, O, P, SNN_F32));
        down(got, d_y, ny * 4);
        CHECK_MSG(!memcmp(got, nb, ny * 4), "nhwc_to_nchw (no bias) is not the exact transpose");
        for (int t = 0; t < 2; t++) {
            poison(d_y, ny * 4);
            OK(snn_cuda_nhwc_to_nchw_round(g, d_y, d_yn, NULL, B, O, P, rt[t]));
            down(got, d_y, ny * 4);
            round_trip(rt[t], wr, nb, ny);
            CHECK_MSG(!memcmp(got, wr, ny * 4), "nhwc_to_nchw_round (%s, no bias) differs",
                      snn_dtype_name(rt[t]));
        }
        free(got); free(wr); free(nb);
    }

    /* backward: dY to pixel-major (checked bitwise), dcol = dYn . W, col2im */
    float *d_dy = dcopy(dy, ny * 4), *d_dyn = dalloc(ny * 4);
    float *dyn = xmalloc(ny * 4), *want = xmalloc(ny * 4);
    OK(snn_cuda_nchw_to_nhwc(g, SNN_F32, d_dyn, d_dy, B, O, P));
    down(dyn, d_dyn, ny * 4);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < O; o++)
            for (int p = 0; p < P; p++)
                want[((size_t)b * P + p) * O + o] = dy[((size_t)b * O + o) * P + p];
    CHECK_MSG(!memcmp(dyn, want, ny * 4), "nchw_to_nhwc (F32) is not the exact transpose");
    static const snn_dtype ts[2] = {SNN_BF16, SNN_F16};
    uint16_t *h16 = xmalloc(ny * 2), *w16 = xmalloc(ny * 2);
    for (int t = 0; t < 2; t++) {
        void *d16 = dalloc(ny * 2);
        OK(snn_cuda_nchw_to_nhwc(g, ts[t], d16, d_dy, B, O, P));
        down(h16, d16, ny * 2);
        snn_convert(ts[t], w16, SNN_F32, want, ny, 0);
        CHECK_MSG(!memcmp(h16, w16, ny * 2), "nchw_to_nhwc (%s) differs from the rounded transpose",
                  snn_dtype_name(ts[t]));
        snn_cuda_free(d16);
    }
    for (size_t r = 0; r < (size_t)B * P; r++) {
        for (int j = 0; j < K; j++) {
            double acc = 0;
            for (int o = 0; o < O; o++) acc += (double)dyn[r * O + o] * wt[(size_t)o * K + j];
            col[r * ld + j] = (float)acc;
        }
        for (int j = K; j < ld; j++) col[r * ld + j] = -3e5f; /* must be ignored */
    }
    snn_cuda_upload(g, d_col, col, ncol * 4);
    float *d_dx = dalloc(nx * 4), *dxg = xmalloc(nx * 4);
    OK(snn_cuda_col2im(g, d_dx, d_col, ld, B, C, H, W, k, cc->s, cc->p));
    down(dxg, d_dx, nx * 4);
    double edx = rel(dxg, dx, nx);
    fprintf(stderr, "  conv B=%d C=%d->%d %dx%d k=%d s=%d p=%d: y max rel %.3g, dx max rel %.3g\n",
            B, C, O, H, W, k, cc->s, cc->p, ey, edx);
    /* the GPU side is exact up to one rounding (host GEMM in double); the CPU module's FP32
     * GEMM over K = C*k*k <= 144 terms is what differs */
    CHECK_MSG(ey < 5e-5, "conv forward max rel %g", ey);
    CHECK_MSG(edx < 5e-5, "conv dx max rel %g", edx);
    snn_cuda_free(d_x); snn_cuda_free(d_col); snn_cuda_free(d_bias); snn_cuda_free(d_yn);
    snn_cuda_free(d_y); snn_cuda_free(d_dy); snn_cuda_free(d_dyn); snn_cuda_free(d_dx);
    free(x); free(y); free(dy); free(dx); free(col); free(yn); free(yg); free(dyn); free(want);
    free(h16); free(w16); free(dxg);
    host_free(&h);
}

/* ---- the layout changes alone: 16-byte and 4-byte kernels (O, P multiples of 4 or not, P
 * under / over a tile, pointers one element off), every rounding type, bias or none ---- */
static void test_layout(int B, int O, int P) {
    const size_t n = (size_t)B * O * P;
    float *yn = fvec(n, -2.0f, 2.0f), *bias = fvec((size_t)O, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i += 11) yn[i] = -0.0f;
    float *tr = xmalloc(n * 4), *want = xmalloc(n * 4), *got = xmalloc(n * 4);
    for (int b = 0; b < B; b++) /* tr = [B][O][P] */
        for (int o = 0; o < O; o++)
            for (int p = 0; p < P; p++)
                tr[((size_t)b * O + o) * P + p] = yn[((size_t)b * P + p) * O + o];
    float *d_src = dalloc(n * 4 + 16), *d_dst = dalloc(n * 4 + 16), *d_b = dcopy(bias, O * 4);
    static const snn_dtype ts[3] = {SNN_F32, SNN_BF16, SNN_F16};
    size_t fails = 0;
    for (int off = 0; off < 2; off++) {
        snn_cuda_upload(g, d_src + off, yn, n * 4);
        for (int t = 0; t < 3; t++)
            for (int wb = 0; wb < 2; wb++) {
                for (int b = 0; b < B; b++)
                    for (int o = 0; o < O; o++)
                        for (int p = 0; p < P; p++) {
                            const size_t i = ((size_t)b * O + o) * P + p;
                            want[i] = wb ? tr[i] + bias[o] : tr[i];
                        }
                if (ts[t] != SNN_F32) round_trip(ts[t], want, want, n);
                poison(d_dst, n * 4 + 16);
                OK(snn_cuda_nhwc_to_nchw_round(g, d_dst + off, d_src + off, wb ? d_b : NULL, B, O,
                                               P, ts[t]));
                down(got, d_dst + off, n * 4);
                if (memcmp(got, want, n * 4)) {
                    fails++;
                    CHECK_MSG(0, "nhwc_to_nchw_round B=%d O=%d P=%d %s bias=%d offset=%d differs", B,
                              O, P, snn_dtype_name(ts[t]), wb, off);
                }
            }
        /* the reverse: [B][O][P] FP32 -> [B][P][O] as each type */
        snn_cuda_upload(g, d_src + off, tr, n * 4);
        for (int t = 0; t < 3; t++) {
            const size_t es = ts[t] == SNN_F32 ? 4 : 2;
            uint8_t *w = xmalloc(n * es), *h = xmalloc(n * es);
            if (ts[t] == SNN_F32) memcpy(w, yn, n * 4);
            else snn_convert(ts[t], w, SNN_F32, yn, n, 0);
            poison(d_dst, n * 4 + 16);
            char *dd = (char *)d_dst + off * es;
            OK(snn_cuda_nchw_to_nhwc(g, ts[t], dd, d_src + off, B, O, P));
            down(h, dd, n * es);
            if (memcmp(h, w, n * es)) {
                fails++;
                CHECK_MSG(0, "nchw_to_nhwc B=%d O=%d P=%d %s offset=%d differs", B, O, P,
                          snn_dtype_name(ts[t]), off);
            }
            free(w);
            free(h);
        }
    }
    fprintf(stderr, "  layout B=%d O=%d P=%d: %s\n", B, O, P, fails ? "DIFFERS" : "bitwise");
    snn_cuda_free(d_src); snn_cuda_free(d_dst); snn_cuda_free(d_b);
    free(yn); free(bias); free(tr); free(want); free(got);
}

/* ---- MaxPool2d ---- */
typedef struct {
    int B, C, H, W, k, s, p, nan;
} pool_case;

static void test_maxpool(const pool_case *pc) {
    const int B = pc->B, C = pc->C, H = pc->H, W = pc->W, k = pc->k, s = pc->s, p = pc->p;
    host h;
    if (!host_make(&h, snn_maxpool2d_new(k, s, p), snn_shape3(C, H, W), 1, B)) {
        CHECK_MSG(0, "maxpool host setup failed: %s", snn_last_error());
        host_free(&h);
        return;
    }
    snn_module *m = h.m;
    const int Ho = m->out.d[1], Wo = m->out.d[2];
    const size_t nx = (size_t)B * C * H * W, ny = (size_t)B * C * Ho * Wo;
    float *x = fvec(nx, 0.0f, 3.0f); /* integers 0..2: many ties */
    for (size_t i = 0; i < nx; i++) x[i] = floorf(x[i]) - 1.0f;
    if (pc->nan) x[nx / 3] = NAN;
    float *dy = fvec(ny, -1.0f, 1.0f), *y = xmalloc(ny * 4), *dx = xmalloc(nx * 4);
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h.run, x, y, dy, dx) == SNN_OK);

    float *d_x = dcopy(x, nx * 4), *d_y = dalloc(ny * 4), *d_dy = dcopy(dy, ny * 4);
    float *d_dx = dalloc(nx * 4);
    uint8_t *d_arg = dalloc(ny), *arg = xmalloc(ny);
    float *yg = xmalloc(ny * 4), *dxg = xmalloc(nx * 4);
    OK(snn_cuda_maxpool2d_forward(g, d_x, d_y, d_arg, B, C, H, W, k, s, p));
    OK(snn_cuda_maxpool2d_backward(g, d_dy, d_arg, d_dx, B, C, H, W, k, s, p));
    down(yg, d_y, ny * 4);
    down(arg, d_arg, ny);
    down(dxg, d_dx, nx * 4);
    /* the documented arg: window index of the first maximum (a NaN wins) in scan order */
    size_t badarg = 0;
    for (size_t pl = 0; pl < (size_t)B * C; pl++)
        for (int oy = 0; oy < Ho; oy++)
            for (int ox = 0; ox < Wo; ox++) {
                const float *xp = x + pl * H * W;
                float best = -INFINITY;
                int a = -1; /* stays the first in-image tap when all are -inf */
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int iy = oy * s - p + ky, ix = ox * s - p + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        float v = xp[iy * W + ix];
                        if (a < 0) a = ky * k + kx;
                        if (v > best || isnan(v)) {
                            best = v;
                            a = ky * k + kx;
                            if (isnan(v)) goto found;
                        }
                    }
            found:
                if (arg[(pl * Ho + oy) * Wo + ox] != a) badarg++;
            }
    CHECK_MSG(!memcmp(yg, y, ny * 4), "maxpool y differs from the CPU module");
    CHECK_MSG(badarg == 0, "maxpool: %zu argmax entries differ from the first maximum", badarg);
    CHECK_MSG(!memcmp(dxg, dx, nx * 4), "maxpool dx differs from the CPU module (max rel %g)",
              rel(dxg, dx, nx));
    {
        /* x one float off 16-byte alignment, y and arg one element off: the general forward */
        float *d_xm = dalloc(nx * 4 + 16), *d_ym = dalloc(ny * 4 + 16);
        uint8_t *d_am = dalloc(ny + 16), *argm = xmalloc(ny);
        snn_cuda_upload(g, d_xm + 1, x, nx * 4);
        OK(snn_cuda_maxpool2d_forward(g, d_xm + 1, d_ym + 1, d_am + 1, B, C, H, W, k, s, p));
        float *ym = xmalloc(ny * 4);
        down(ym, d_ym + 1, ny * 4);
        down(argm, d_am + 1, ny);
        CHECK_MSG(!memcmp(ym, y, ny * 4) && !memcmp(argm, arg, ny),
                  "maxpool forward on misaligned tensors differs");
        snn_cuda_free(d_xm); snn_cuda_free(d_ym); snn_cuda_free(d_am);
        free(argm); free(ym);
    }
    fprintf(stderr, "  maxpool B=%d C=%d %dx%d k=%d s=%d p=%d%s: y %s, dx %s, %zu bad args\n", B, C,
            H, W, k, s, p, pc->nan ? " (NaN)" : "", memcmp(yg, y, ny * 4) ? "differs" : "bitwise",
            memcmp(dxg, dx, nx * 4) ? "differs" : "bitwise", badarg);
    snn_cuda_free(d_x); snn_cuda_free(d_y); snn_cuda_free(d_dy); snn_cuda_free(d_dx);
    snn_cuda_free(d_arg);
    free(x); free(dy); free(y); free(dx); free(arg); free(yg); free(dxg);
    host_free(&h);
}

/* ---- BatchNorm ---- */
typedef struct {
    int B;
    snn_shape in;
    float offset; /* added to x: the statistics must not cancel */
} bn_case;

static void test_batchnorm(const bn_case *bc) {
    const int B = bc->B, C = bc->in.d[0];
    const int S = (int)(snn_shape_numel(bc->in) / (size_t)C);
    const float eps = 1e-5f, mom = 0.1f;
    host h;
    if (!host_make(&h, snn_batchnorm_new(C, eps, mom), bc->in, 1, B)) {
        CHECK_MSG(0, "batchnorm host setup failed: %s", snn_last_error());
        host_free(&h);
        return;
    }
    snn_module *m = h.m;
    const size_t n = (size_t)B * C * S;
    float *gm = m->params[0].data, *bt = m->params[1].data;
    float *rm = m->params[2].data, *rv = m->params[3].data;
    snn_test_fill_uniform(gm, C, 0.5f, 1.5f, &rng);
    snn_test_fill_uniform(bt, C, -1.0f, 1.0f, &rng);
    snn_test_fill_uniform(rm, C, -1.0f, 1.0f, &rng);
    snn_test_fill_uniform(rv, C, 0.5f, 2.0f, &rng);
    float *x = fvec(n, -1.5f, 1.5f);
    for (size_t i = 0; i < n; i++) x[i] += bc->offset + 0.3f * (float)((i / S) % C);
    float *dy = fvec(n, -1.0f, 1.0f), *y = xmalloc(n * 4), *dx = xmalloc(n * 4);
    float *g0 = fvec(2 * (size_t)C, -1.0f, 1.0f); /* grads start non-zero: they are added to */
    memcpy(m->params[0].grad, g0, C * 4);
    memcpy(m->params[1].grad, g0 + C, C * 4);

    float *d_x = dcopy(x, n * 4), *d_y = dalloc(n * 4), *d_dy = dcopy(dy, n * 4);
    float *d_dx = dalloc(n * 4), *d_g = dcopy(gm, C * 4), *d_b = dcopy(bt, C * 4);
    float *d_rm = dcopy(rm, C * 4), *d_rv = dcopy(rv, C * 4), *d_sm = dalloc(C * 4);
    float *d_si = dalloc(C * 4), *d_dg = dcopy(g0, C * 4), *d_db = dcopy(g0 + C, C * 4);
    const size_t wb = snn_cuda_batchnorm_work_bytes(B, C, S);
    void *work = dalloc(wb);

    h.run.training = 1;
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h.run, x, y, dy, dx) == SNN_OK);
    OK(snn_cuda_batchnorm_forward(g, 1, d_x, d_y, B, C, S, d_g, d_b, d_rm, d_rv, eps, mom, d_sm,
                                  d_si, work));
    OK(snn_cuda_batchnorm_backward(g, d_x, d_dy, d_dx, B, C, S, d_g, d_sm, d_si, d_dg, d_db, work));
    float *yg = xmalloc(n * 4), *dxg = xmalloc(n * 4), *cg = xmalloc(6 * (size_t)C * 4);
    down(yg, d_y, n * 4);
    down(dxg, d_dx, n * 4);
    down(cg, d_rm, C * 4);
    down(cg + C, d_rv, C * 4);
    down(cg + 2 * C, d_sm, C * 4);
    down(cg + 3 * C, d_si, C * 4);
    down(cg + 4 * C, d_dg, C * 4);
    down(cg + 5 * C, d_db, C * 4);
    /* saved statistics against a double two-pass computation */
    float *ms = xmalloc(2 * (size_t)C * 4);
    for (int c = 0; c < C; c++) {
        double s1 = 0, s2 = 0;
        for (int b = 0; b < B; b++)
            for (int q = 0; q < S; q++) s1 += x[((size_t)b * C + c) * S + q];
        double mu = s1 / ((double)B * S);
        for (int b = 0; b < B; b++)
            for (int q = 0; q < S; q++) {
                double d = x[((size_t)b * C + c) * S + q] - mu;
                s2 += d * d;
            }
        ms[c] = (float)mu;
        ms[C + c] = (float)(1.0 / sqrt(s2 / ((double)B * S) + eps));
    }
    const double e_y = rel(yg, y, n), e_rm = rel(cg, rm, C), e_rv = rel(cg + C, rv, C);
    const double e_sm = rel(cg + 2 * C, ms, C), e_si = rel(cg + 3 * C, ms + C, C);
    /* dx = g invstd (dy - mean(dy) - xhat mean(dy xhat)) cancels (a batch of 3 leaves
     * little): its error is measured against the size of those terms, not of the result */
    double term = 0;
    for (int c = 0; c < C; c++) term = fmax(term, fabs((double)gm[c]) * (double)ms[C + c]);
    term *= (double)maxabs(dy, n);
    const double f_dx = fmax(1e-2 * maxabs(dx, n), 1e-2 * term);
    const double e_dx = snn_test_max_rel(dxg, dx, n, f_dx > 1e-30 ? f_dx : 1e-30);
    const double e_dg = rel(cg + 4 * C, m->params[0].grad, C);
    const double e_db = rel(cg + 5 * C, m->params[1].grad, C);

    /* eval: the running statistics of the CPU module, left alone */
    snn_cuda_upload(g, d_rm, rm, C * 4);
    snn_cuda_upload(g, d_rv, rv, C * 4);
    poison(d_y, n * 4);
    h.run.training = 0;
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    OK(snn_cuda_batchnorm_forward(g, 0, d_x, d_y, B, C, S, d_g, d_b, d_rm, d_rv, eps, mom, NULL,
                                  NULL, work));
    down(yg, d_y, n * 4);
    down(cg, d_rm, C * 4);
    down(cg + C, d_rv, C * 4);
    const double e_ye = rel(yg, y, n);
    CHECK_MSG(!memcmp(cg, rm, C * 4) && !memcmp(cg + C, rv, C * 4),
              "batchnorm eval changed the running statistics");
    char sh[64];
    fprintf(stderr,
            "  batchnorm B=%d %s (S=%d, %zu work bytes): y %.2g rmean %.2g rvar %.2g mean %.2g "
            "invstd %.2g | dx %.2g dgamma %.2g dbeta %.2g | eval y %.2g\n",
            B, snn_shape_str(bc->in, sh, sizeof sh), S, wb, e_y, e_rm, e_rv, e_sm, e_si, e_dx,
            e_dg, e_db, e_ye);
    CHECK_MSG(e_y < 1e-5 && e_ye < 1e-5, "batchnorm y max rel %g (eval %g)", e_y, e_ye);
    CHECK_MSG(e_rm < 1e-6 && e_rv < 1e-6, "batchnorm running stats max rel %g %g", e_rm, e_rv);
    CHECK_MSG(e_sm < 1e-6 && e_si < 1e-6, "batchnorm saved mean/invstd max rel %g %g", e_sm, e_si);
    CHECK_MSG(e_dx < 1e-5, "batchnorm dx max rel %g", e_dx);
    CHECK_MSG(e_dg < 1e-5 && e_db < 1e-5, "batchnorm dgamma/dbeta max rel %g %g", e_dg, e_db);
    snn_cuda_free(d_x); snn_cuda_free(d_y); snn_cuda_free(d_dy); snn_cuda_free(d_dx);
    snn_cuda_free(d_g); snn_cuda_free(d_b); snn_cuda_free(d_rm); snn_cuda_free(d_rv);
    snn_cuda_free(d_sm); snn_cuda_free(d_si); snn_cuda_free(d_dg); snn_cuda_free(d_db);
    snn_cuda_free(work);
    free(x); free(dy); free(y); free(dx); free(g0); free(yg); free(dxg); free(cg); free(ms);
    host_free(&h);
}

/* ---- TokenMean ---- */
static void test_token_mean(int B, int D, int L) {
    host h;
    if (!host_make(&h, snn_token_mean_new(), snn_shape2(D, L), 1, B)) {
        CHECK_MSG(0, "token mean host setup failed: %s", snn_last_error());
        host_free(&h);
        return;
    }
    snn_module *m = h.m;
    const size_t nx = (size_t)B * D * L, ny = (size_t)B * D;
    float *x = fvec(nx, -1.0f, 2.0f), *dy = fvec(ny, -1.0f, 1.0f);
    float *y = xmalloc(ny * 4), *dx = xmalloc(nx * 4), *yg = xmalloc(ny * 4), *dxg = xmalloc(nx * 4);
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h.run, x, y, dy, dx) == SNN_OK);
    float *d_x = dcopy(x, nx * 4), *d_y = dalloc(ny * 4), *d_dy = dcopy(dy, ny * 4);
    float *d_dx = dalloc(nx * 4);
    OK(snn_cuda_token_mean_forward(g, d_x, d_y, B, D, L));
    OK(snn_cuda_token_mean_backward(g, d_dy, d_dx, B, D, L));
    down(yg, d_y, ny * 4);
    down(dxg, d_dx, nx * 4);
    const double ey = rel(yg, y, ny);
    fprintf(stderr, "  token mean B=%d D=%d L=%d: y max rel %.3g, dx %s\n", B, D, L, ey,
            memcmp(dxg, dx, nx * 4) ? "differs" : "bitwise");
    CHECK_MSG(ey < 1e-5, "token mean y max rel %g", ey); /* FP32 sums in another order */
    CHECK_MSG(!memcmp(dxg, dx, nx * 4), "token mean dx differs from the CPU module");
    snn_cuda_free(d_x); snn_cuda_free(d_y); snn_cuda_free(d_dy); snn_cuda_free(d_dx);
    free(x); free(dy); free(y); free(dx); free(yg); free(dxg);
    host_free(&h);
}

/* ---- bad arguments: SNN_E_INVALID, nothing written ---- */
static void test_bad_args(void) {
    float *a = dalloc(4096 * 4), *b = dalloc(4096 * 4), *w = dalloc(4096);
    uint8_t *arg = dalloc(4096);
    snn_cuda_memset(g, b, 0x5A, 4096 * 4);
#define BAD(call) CHECK_MSG((call) == SNN_E_INVALID, "%s should be rejected", #call)
    BAD(snn_cuda_im2col(g, SNN_F32, b, 26, a, 1, 3, 5, 5, 3, 1, 1));       /* ldcol < 27 */
    BAD(snn_cuda_im2col(g, SNN_F8E4M3, b, 27, a, 1, 3, 5, 5, 3, 1, 1));   /* type */
    BAD(snn_cuda_im2col(g, SNN_F32, b, 27, a, 1, 3, 5, 5, 3, 0, 1));      /* stride 0 */
    BAD(snn_cuda_im2col(g, SNN_F32, b, 27, a, 1, 3, 1, 5, 3, 1, 0));      /* kernel > H */
    BAD(snn_cuda_im2col(g, SNN_F32, b, 27, a, 0, 3, 5, 5, 3, 1, 1));      /* B = 0 */
    BAD(snn_cuda_col2im(g, b, a, 8, 1, 1, 5, 5, 3, 1, -1));               /* pad < 0 */
    BAD(snn_cuda_nhwc_to_nchw(g, b, a, NULL, 2, 0, 4));
    BAD(snn_cuda_nchw_to_nhwc(g, SNN_F8E5M2, b, a, 2, 3, 4));
    BAD(snn_cuda_nhwc_to_nchw_round(g, b, a, NULL, 2, 3, 4, SNN_F8E4M3));
    BAD(snn_cuda_nhwc_to_nchw_round(g, b, a, NULL, 2, 3, -4, SNN_BF16));
    BAD(snn_cuda_col2im_round(g, b, a, 27, 1, 3, 5, 5, 3, 1, 1, SNN_E8M0));
    BAD(snn_cuda_col2im_round(g, b, a, 26, 1, 3, 5, 5, 3, 1, 1, SNN_BF16)); /* ldcol < 27 */
    BAD(snn_cuda_maxpool2d_forward(g, a, b, arg, 1, 1, 8, 8, 16, 16, 0)); /* k*k > 255 */
    BAD(snn_cuda_maxpool2d_forward(g, a, b, arg, 1, 1, 8, 8, 3, 1, 2));   /* pad > k/2 */
    BAD(snn_cuda_maxpool2d_backward(g, a, arg, b, 1, 1, 8, 8, 0, 1, 0));
    BAD(snn_cuda_batchnorm_forward(g, 1, a, b, 1, 4, 1, a, a, a, a, 1e-5f, 0.1f, a, a, w));
    BAD(snn_cuda_batchnorm_forward(g, 1, a, b, 2, 4, 1, a, a, a, a, 1e-5f, 0.1f, NULL, a, w));
    BAD(snn_cuda_batchnorm_forward(g, 1, a, b, 2, 4, 1, a, a, a, a, -1.0f, 0.1f, a, a, w));
    BAD(snn_cuda_batchnorm_forward(g, 1, a, b, 2, 4, 1, a, a, a, a, 1e-5f, 0.1f, a, a, NULL));
    BAD(snn_cuda_batchnorm_backward(g, a, a, b, 2, 0, 3, a, a, a, a, a, w));
    BAD(snn_cuda_token_mean_forward(g, a, b, 2, 3, 0));
    BAD(snn_cuda_token_mean_backward(g, a, b, -1, 3, 4));
#undef BAD
    CHECK(snn_cuda_batchnorm_work_bytes(0, 3, 4) == 0);
    uint32_t *hb = xmalloc(4096 * 4);
    down(hb, b, 4096 * 4);
    size_t touched = 0;
    for (int i = 0; i < 4096; i++) touched += hb[i] != 0x5A5A5A5Au;
    CHECK_MSG(touched == 0, "a rejected call wrote %zu output values", touched);
    free(hb);
    snn_cuda_free(a); snn_cuda_free(b); snn_cuda_free(w); snn_cuda_free(arg);
}

/* ---- optional timing on Spikformer-S sized tensors ---- */
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
#define TIME(label, bytes, call)                                                                 \
    do {                                                                                         \
        OK(call);                                                                                \
        snn_cuda_synchronize(g);                                                                 \
        double t0_ = now();                                                                      \
        for (int r_ = 0; r_ < 20; r_++) call;                                                    \
        snn_cuda_synchronize(g);                                                                 \
        double dt_ = (now() - t0_) / 20;                                                         \
        fprintf(stderr, "  %-44s %8.1f us  %7.0f GB/s\n", label, dt_ * 1e6,                      \
                (double)(bytes) / dt_ * 1e-9);                                                   \
    } while (0)

static void bench(void) {
    const int B = 128, C = 48, H = 128, W = 128;
    const size_t n = (size_t)B * C * H * W;
    float *x = dalloc(n * 4), *y = dalloc(n * 4), *dy = dalloc(n * 4), *dx = dalloc(n * 4);
    snn_cuda_fill_random(g, x, n, 1, 0, -1, 1);
    snn_cuda_fill_random(g, dy, n, 2, 0, -1, 1);
    float *par = dalloc(8 * C * 4);
    snn_cuda_fill_random(g, par, 8 * C, 3, 0, 0.5f, 1.5f);
    void *work = dalloc(snn_cuda_batchnorm_work_bytes(B, C, H * W));
    fprintf(stderr, "bench (B=%d C=%d %dx%d):\n", B, C, H, W);
    TIME("batchnorm forward (train)", 3 * n * 4,
         snn_cuda_batchnorm_forward(g, 1, x, y, B, C, H * W, par, par + C, par + 2 * C, par + 3 * C,
                                    1e-5f, 0.1f, par + 4 * C, par + 5 * C, work));
    TIME("batchnorm backward", 5 * n * 4,
         snn_cuda_batchnorm_backward(g, x, dy, dx, B, C, H * W, par, par + 4 * C, par + 5 * C,
                                     par + 6 * C, par + 7 * C, work));
    uint8_t *arg = dalloc(n / 4);
    TIME("maxpool forward k3 s2 p1", n * 4 + n / 4 * 5,
         snn_cuda_maxpool2d_forward(g, x, y, arg, B, C, H, W, 3, 2, 1));
    TIME("maxpool backward k3 s2 p1", n * 4 + n / 4 * 5,
         snn_cuda_maxpool2d_backward(g, dy, arg, dx, B, C, H, W, 3, 2, 1));
    /* im2col: B=128, 64x64, C=48 -> 432 columns, BF16 (the first conv of the SPS) */
    const int Hs = 64, K = C * 9;
    const size_t ncol = (size_t)B * Hs * Hs * K;
    void *col = dalloc(ncol * 4);
    TIME("im2col C=48 64x64 k3 bf16", (size_t)B * C * Hs * Hs * 4 + ncol * 2,
         snn_cuda_im2col(g, SNN_BF16, col, K, x, B, C, Hs, Hs, 3, 1, 1));
    TIME("col2im C=48 64x64 k3 (f32 dcol)", (size_t)B * C * Hs * Hs * 4 + ncol * 4,
         snn_cuda_col2im(g, dx, (const float *)col, K, B, C, Hs, Hs, 3, 1, 1));
    TIME("col2im_round C=48 64x64 k3 -> bf16", (size_t)B * C * Hs * Hs * 4 + ncol * 4,
         snn_cuda_col2im_round(g, dx, (const float *)col, K, B, C, Hs, Hs, 3, 1, 1, SNN_BF16));
    TIME("im2col C=96 32x32 k3 bf16", (size_t)B * 96 * 1024 * 4 + (size_t)B * 1024 * 864 * 2,
         snn_cuda_im2col(g, SNN_BF16, col, 864, x, B, 96, 32, 32, 3, 1, 1));
    TIME("col2im C=96 32x32 k3", (size_t)B * 96 * 1024 * 4 + (size_t)B * 1024 * 864 * 4,
         snn_cuda_col2im(g, dx, (const float *)col, 864, B, 96, 32, 32, 3, 1, 1));
    TIME("im2col C=3 128x128 k3 bf16 (ld 32)", (size_t)B * 3 * 16384 * 4 + (size_t)B * 16384 * 64,
         snn_cuda_im2col(g, SNN_BF16, col, 32, x, B, 3, 128, 128, 3, 1, 1));
    TIME("im2col pointwise C=384 L=64 bf16", (size_t)B * 384 * 64 * 6,
         snn_cuda_im2col(g, SNN_BF16, col, 384, x, B, 384, 1, 64, 1, 1, 0));
    TIME("col2im pointwise C=1536 L=64", (size_t)B * 1536 * 64 * 8,
         snn_cuda_col2im(g, dx, (const float *)col, 1536, B, 1536, 1, 64, 1, 1, 0));
    TIME("maxpool backward k3 s2 p1 C=96 64x64", (size_t)B * 96 * 4096 * 4 * 5 / 4,
         snn_cuda_maxpool2d_backward(g, dy, arg, dx, B, 96, 64, 64, 3, 2, 1));
    TIME("nhwc_to_nchw_round B=128 O=48 P=16384 bf16", (size_t)B * 48 * 16384 * 8,
         snn_cuda_nhwc_to_nchw_round(g, y, x, par, B, 48, 16384, SNN_BF16));
    TIME("im2col C=384 8x8 k3 bf16", (size_t)B * 384 * 64 * 4 + (size_t)B * 64 * 3456 * 2,
         snn_cuda_im2col(g, SNN_BF16, col, 3456, x, B, 384, 8, 8, 3, 1, 1));
    TIME("nhwc_to_nchw B=128 O=192 P=1024 +bias", (size_t)B * 192 * 1024 * 8,
         snn_cuda_nhwc_to_nchw(g, y, x, par, B, 192, 1024));
    TIME("nchw_to_nhwc B=128 O=192 P=1024 bf16", (size_t)B * 192 * 1024 * 6,
         snn_cuda_nchw_to_nhwc(g, SNN_BF16, y, x, B, 192, 1024));
    TIME("token mean fwd B=512 D=384 L=64", (size_t)512 * 384 * 65 * 4,
         snn_cuda_token_mean_forward(g, x, y, 512, 384, 64));
    TIME("token mean bwd B=512 D=384 L=64", (size_t)512 * 384 * 65 * 4,
         snn_cuda_token_mean_backward(g, dy, dx, 512, 384, 64));
    void *w2 = dalloc(snn_cuda_batchnorm_work_bytes(512, 384, 64));
    TIME("batchnorm forward B=512 C=384 S=64", (size_t)512 * 384 * 64 * 12,
         snn_cuda_batchnorm_forward(g, 1, x, y, 512, 384, 64, par, par, dx, dx + 384, 1e-5f, 0.1f,
                                    dx + 768, dx + 1152, w2));
    snn_cuda_free(x); snn_cuda_free(y); snn_cuda_free(dy); snn_cuda_free(dx); snn_cuda_free(par);
    snn_cuda_free(work); snn_cuda_free(arg); snn_cuda_free(col); snn_cuda_free(w2);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_layers: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    static const conv_case cc[] = {
        {2, 3, 13, 7, 3, 2, 1, 5},  {4, 5, 8, 8, 1, 1, 0, 0},  {2, 4, 9, 11, 3, 1, 1, 3},
        {2, 2, 6, 5, 5, 3, 2, 0},   {2, 3, 4, 5, 1, 1, 1, 1},  {4, 16, 8, 8, 3, 1, 1, 16},
        {2, 7, 12, 10, 2, 2, 0, 2}, {2, 3, 15, 15, 4, 3, 3, 0},
        /* input rows too wide for shared memory (the gather kernel), and two channel chunks */
        {2, 2, 3, 4100, 3, 2, 1, 1}, {2, 40, 6, 120, 3, 1, 1, 3},
        /* 16-byte stores with two channel chunks; a pointwise Conv1d (k = 1, H = 1: a
         * transpose) in three chunks, col2im in many; a 3-wide row (nothing to vectorise
         * along x) and a 5x5 stride-2 kernel */
        {2, 40, 6, 120, 3, 1, 1, 0}, {2, 384, 1, 64, 1, 1, 0, 0}, {2, 24, 1, 37, 1, 1, 0, 8},
        {4, 8, 5, 3, 3, 1, 1, 0},    {2, 6, 11, 9, 5, 2, 2, 2},
        /* k3 s1 (col2im's band kernel): padding 0 and 2, bands cut short, one and several
         * channel chunks, 4-float staging (ldcol, chunks multiples of 4) and scalar staging */
        {3, 13, 37, 33, 3, 1, 0, 0}, {2, 12, 21, 70, 3, 1, 2, 4}, {2, 36, 18, 40, 3, 1, 1, 0},
        {2, 64, 9, 64, 3, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) test_im2col(&cc[i]);
    for (size_t i = 0; i < sizeof cc / sizeof cc[0]; i++) test_conv(&cc[i], 3 + (int)i * 5);
    static const int lt[][3] = {{3, 20, 132}, {2, 48, 260}, {2, 36, 40}, {1, 8, 4},
                                {2, 7, 50},   {3, 52, 1028}, {2, 4, 32}};
    for (size_t i = 0; i < sizeof lt / sizeof lt[0]; i++) test_layout(lt[i][0], lt[i][1], lt[i][2]);
    static const pool_case pc[] = {
        {2, 3, 8, 8, 2, 2, 0, 0},  {2, 3, 13, 7, 3, 2, 1, 0}, {1, 2, 5, 6, 3, 1, 1, 1},
        {3, 2, 9, 11, 3, 3, 0, 0}, {2, 2, 7, 7, 2, 1, 1, 0},  {2, 4, 16, 16, 3, 2, 1, 1},
        /* k3 s2 p1 (its own backward kernel): even/odd heights and widths, tiny planes */
        {2, 3, 8, 9, 3, 2, 1, 0},  {1, 2, 7, 10, 3, 2, 1, 1}, {3, 5, 2, 1, 3, 2, 1, 0},
        {2, 2, 1, 6, 3, 2, 1, 0},
        /* k3 s2 p1 with W a multiple of 4 (the paired forward): odd/even H, H = 1, a NaN */
        {2, 3, 7, 12, 3, 2, 1, 1}, {1, 2, 1, 4, 3, 2, 1, 0}, {2, 3, 10, 20, 3, 2, 1, 0},
        {1, 2, 6, 64, 3, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++) test_maxpool(&pc[i]);
    const bn_case bc[] = {
        {16, snn_shape1(5), 0.0f},         {64, snn_shape1(7), 3.0f},
        {3, snn_shape1(4), 0.5f},          {6, snn_shape2(5, 17), 2.0f},
        {4, snn_shape2(8, 64), -4.0f},     {4, snn_shape3(3, 9, 7), 1.0f},
        {8, snn_shape3(2, 64, 64), 5.0f},  {2, snn_shape3(3, 96, 96), 0.0f},
        {1, snn_shape3(1, 128, 128), 8.0f}, {2, snn_shape3(300, 5, 3), 0.0f},
    };
    for (size_t i = 0; i < sizeof bc / sizeof bc[0]; i++) test_batchnorm(&bc[i]);
    static const int tm[][3] = {{6, 5, 1}, {6, 5, 3}, {4, 7, 17}, {3, 9, 64}, {2, 5, 100}, {1, 3, 33}};
    for (size_t i = 0; i < sizeof tm / sizeof tm[0]; i++) test_token_mean(tm[i][0], tm[i][1], tm[i][2]);
    test_bad_args();
    if (getenv("SNN_CUDA_LAYERS_BENCH")) bench();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_layers");
}
