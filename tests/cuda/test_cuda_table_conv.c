/* The CUDA table's convolution and pooling entries against the CPU table (backend.h's
 * "convolution and pooling"), entry by entry, on fresh random inputs (seed printed;
 * SNN_TEST_SEED replays it), with every output poisoned first (0xFF bytes: NaN), on odd
 * sizes, strides, paddings and rectangular kernels; then whole models holding Conv2d,
 * MaxPool2d, AvgPool2d and Conv1d, built through the public API, one left on the CPU and one
 * placed with snn_model_to(m, "cuda"), compared after forward, backward and AdamW steps.
 * Exit 77 (skip) without a GPU.
 *
 * Bit for bit (the same FP32 operations per element in the same order, see backend.h):
 *   im2col, conv_gather, transpose   copies (the columns of a row beyond nb*P, which the
 *                                    entries leave alone, still hold the poison);
 *   col2im                           one thread per pixel adds its taps in row order from
 *                                    +0, what the CPU's scatter does;
 *   conv_scatter                     one add per element (+0.0f without a bias: -0 inputs
 *                                    are in the data so that -0 -> +0 is checked), or the
 *                                    bias copy (src NULL);
 *   sum_groups_add                   the same FP32 chain per element;
 *   maxpool forward / backward       comparisons (ties from a coarse value grid, NaN and
 *                                    -inf inputs) and the gather of dy in output order;
 *   avgpool forward / backward       the same adds and multiplies in the same order.
 * Bounded:
 *   conv_bias_grad  both sum the channel's n = B*P values in double, in different orders: each
 *                   double sum is within (n - 1) 2^-53 sum|dy| of the exact sum, so the two
 *                   differ by at most 2 (n - 1) 2^-53 sum|dy| before the rounding to FP32, which
 *                   adds at most one FP32 ulp of the sum (2^-24 relative each), and the add
 *                   into db one more rounding of the result:
 *                   |got - ref| <= 2^-23 (|ref| + |acc|) + 2 n 2^-53 sum|dy|.
 *   models          as tests/cuda/test_cuda_engine.c: FP32 GEMMs without TF32 on both sides
 *                   (only the summation order differs): outputs and gradients within 2e-5 of
 *                   max|ref|; in BF16 1.5 ulps (outputs) and 4 ulps (gradients) of max|ref|;
 *                   after an AdamW step (lr 1e-3) parameters within 1e-6 + lr 1e-3 (FP32) or
 *                   1e-6 + lr 16 ulps (BF16), up to 0.1 % (FP32) / 0.5 % (BF16) of them off
 *                   (gradients near zero whose sign differs). A max-pool window whose two
 *                   largest inputs are within the GEMM's rounding difference could route its
 *                   gradient elsewhere; with continuous random weights that has a negligible
 *                   chance at these sizes.
 * The CPU side of the first model runs the per-sample strategy (forced) and the GPU side
 * small chunks (3 samples, the last one partial), so the two strategies of the engine are
 * compared as well.
 *
 * SNN_TEST_TABLE=cpu runs everything with the CPU table in the GPU's place and both models on
 * the CPU: a check of the test itself (and of the CPU engine's strategies against each other)
 * on machines without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "nn/layers_conv.h"
#include "snn/snn.h"

static const snn_backend *cpu;
static snn_backend *gpu;
static uint64_t rng;
static snn_backend cpu_as_gpu;       /* SNN_TEST_TABLE=cpu */
static const char *gpu_dev = "cuda"; /* where the second model goes */

/* ------------------------------------------------------------------ helpers */

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    return p;
}

static float *hnew(size_t n, float lo, float hi) {
    float *p = (float *)xmalloc(n * sizeof(float));
    snn_test_fill_uniform(p, n, lo, hi, &rng);
    return p;
}

static float *hpoisoned(size_t n) {
    float *p = (float *)xmalloc(n * sizeof(float));
    memset(p, 0xFF, n * sizeof(float));
    return p;
}

/* Device buffer holding a copy of src, or poisoned with 0xFF bytes when src is NULL. */
static void *dnew(const void *src, size_t bytes) {
    void *p = NULL;
    if (gpu->alloc(gpu, bytes ? bytes : 4, &p) != SNN_OK) {
        fprintf(stderr, "device allocation of %zu bytes failed: %s\n", bytes, snn_last_error());
        exit(2);
    }
    if (bytes) {
        void *tmp = NULL;
        if (!src) {
            tmp = xmalloc(bytes);
            memset(tmp, 0xFF, bytes);
            src = tmp;
        }
        if (gpu->upload(gpu, p, src, bytes) != SNN_OK) {
            fprintf(stderr, "upload failed: %s\n", snn_last_error());
            exit(2);
        }
        free(tmp);
    }
    return p;
}
static float *dnewf(const float *src, size_t n) { return (float *)dnew(src, n * sizeof(float)); }

static void *downb(const void *src, size_t bytes) {
    void *h = xmalloc(bytes);
    memset(h, 0xFF, bytes);
    if (bytes && gpu->download(gpu, h, src, bytes) != SNN_OK) {
        fprintf(stderr, "download failed: %s\n", snn_last_error());
        exit(2);
    }
    return h;
}
static float *downf(const float *src, size_t n) { return (float *)downb(src, n * sizeof(float)); }
static void dfree(void *p) { gpu->free(gpu, p); }

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

/* Bytes compared as bits: NaN payloads included (the entries copy values, never make NaN). */
static size_t mismatches(const void *got, const void *ref, size_t n_words, size_t *first) {
    const uint32_t *a = (const uint32_t *)got, *b = (const uint32_t *)ref;
    size_t bad = 0;
    for (size_t i = 0; i < n_words; i++)
        if (a[i] != b[i]) {
            if (!bad) *first = i;
            bad++;
        }
    return bad;
}

#define CHECK_BITS(what, got, ref, n)                                                                      \
    do {                                                                                                   \
        size_t first_ = 0, bad_ = mismatches((got), (ref), (n), &first_);                                  \
        CHECK_MSG(bad_ == 0, "%s: %zu of %zu differ, first [%zu] got %.9g ref %.9g", (what), bad_,         \
                  (size_t)(n), first_, bad_ ? (double)((const float *)(got))[first_] : 0.0,                \
                  bad_ ? (double)((const float *)(ref))[first_] : 0.0);                                    \
    } while (0)

/* Some exact zeros of both signs among random values (the +0.0f rules). */
static void sprinkle_zeros(float *x, size_t n) {
    for (size_t i = 0; i < n; i += 7) x[i] = (i / 7) % 2 ? -0.0f : 0.0f;
}

static snn_conv_geom geom(int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw) {
    snn_conv_geom g = {C, H, W, kh, kw, sh, sw, ph, pw, 0, 0};
    if (!snn_conv_geom_finish(&g)) {
        fprintf(stderr, "bad test geometry\n");
        exit(2);
    }
    return g;
}

/* ------------------------------------------------------------------ im2col / col2im */

typedef struct {
    int C, H, W, kh, kw, sh, sw, ph, pw, nb, extra_ld;
} conv_case;

static const conv_case conv_cases[] = {
    {3, 7, 9, 3, 3, 1, 1, 1, 1, 5, 3},   /* a 3x3 "same" convolution */
    {2, 11, 6, 3, 2, 2, 3, 0, 1, 3, 0},  /* rectangular kernel, unequal strides */
    {1, 1, 17, 1, 5, 1, 2, 0, 2, 4, 1},  /* Conv1d: H = 1, kernel 1 x 5, stride 2, padding 2 */
    {5, 1, 13, 1, 1, 1, 1, 0, 0, 7, 0},  /* pointwise Conv1d */
    {4, 9, 9, 5, 5, 2, 2, 2, 2, 2, 5},   /* 5x5, stride 2 */
    {3, 10, 7, 2, 2, 3, 3, 0, 0, 3, 2},  /* stride > kernel: pixels nothing reads */
    {2, 4, 4, 4, 4, 1, 1, 3, 3, 1, 0},   /* padding as large as the kernel - 1 */
    {6, 15, 14, 3, 3, 2, 2, 1, 1, 9, 7}, /* a larger batch */
    /* rows, runs and ld that take the vectorised walks (runs of 8, 4 and 2 outputs) */
    {4, 16, 16, 3, 3, 1, 1, 1, 1, 3, 0},  /* Wo 16, ld 768: 8 (16-bit) and 4 (FP32) a store */
    {3, 16, 16, 3, 3, 2, 2, 1, 1, 2, 0},  /* stride 2, Wo 8 */
    {3, 12, 12, 3, 3, 1, 1, 1, 1, 2, 8},  /* Wo 12: 4 a store */
    {2, 10, 10, 3, 3, 1, 1, 1, 1, 3, 2},  /* Wo 10: 2 a store */
    {8, 8, 8, 1, 1, 1, 1, 0, 0, 4, 0},    /* pointwise, Wo 8 */
    {4, 14, 14, 3, 3, 1, 1, 1, 1, 2, 0},  /* Wo 14: runs of 4 that cross output rows */
};

static void test_im2col(void) {
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++) {
        const conv_case *t = &conv_cases[ci];
        snn_conv_geom g = geom(t->C, t->H, t->W, t->kh, t->kw, t->sh, t->sw, t->ph, t->pw);
        const size_t K = (size_t)g.C * g.kh * g.kw, P = (size_t)g.Ho * g.Wo, in_n = (size_t)g.C * g.H * g.W;
        const size_t ld = (size_t)t->nb * P + (size_t)t->extra_ld, ncol = K * ld, nx = in_n * (size_t)t->nb;
        char what[96];
        snprintf(what, sizeof what, "case %zu (C%d %dx%d k%dx%d s%dx%d p%dx%d nb%d)", ci, g.C, g.H, g.W, g.kh, g.kw,
                 g.sh, g.sw, g.ph, g.pw, t->nb);
        /* im2col */
        float *x = hnew(nx, -2.0f, 2.0f);
        float *ref = hpoisoned(ncol), *dx_ = dnewf(x, nx), *dcol = dnewf(NULL, ncol);
        OK(cpu->im2col(cpu, &g, t->nb, x, ref, ld));
        OK(gpu->im2col(gpu, &g, t->nb, dx_, dcol, ld));
        float *got = downf(dcol, ncol);
        CHECK_BITS(what, got, ref, ncol);
        free(got);
        /* im2col16 / conv_gather16: the RNE cast of what the FP32 entries write (the CPU has
         * neither entry; its im2col plus snn_f32_to_bf16 / _f16 is the reference) */
        for (int ti = 0; gpu->im2col16 && ti < 2; ti++) {
            const snn_dtype t16 = ti ? SNN_F16 : SNN_BF16;
            uint16_t *want = xmalloc(ncol * 2), *d16 = dnew(NULL, ncol * 2);
            for (size_t i = 0; i < ncol; i++) want[i] = ti ? snn_f32_to_f16(ref[i]) : snn_f32_to_bf16(ref[i]);
            OK(gpu->upload(gpu, d16, want, ncol * 2)); /* the columns beyond nb*P keep these */
            OK(gpu->im2col16(gpu, t16, &g, t->nb, dx_, d16, ld));
            uint16_t *got16 = downb(d16, ncol * 2);
            size_t bad = 0;
            for (size_t i = 0; i < ncol; i++) bad += got16[i] != want[i];
            CHECK_MSG(bad == 0, "im2col16 %s %s: %zu of %zu differ from the cast of im2col", what,
                      ti ? "f16" : "bf16", bad, ncol);
            CHECK(gpu->im2col16(gpu, SNN_F32, &g, t->nb, dx_, d16, ld) == SNN_E_INVALID);
            free(want);
            free(got16);
            dfree(d16);
        }
        /* col2im of random columns */
        float *col = hnew(ncol, -1.0f, 1.0f);
        sprinkle_zeros(col, ncol);
        float *dref = hpoisoned(nx), *dd = dnewf(NULL, nx);
        OK(gpu->upload(gpu, dcol, col, ncol * sizeof(float)));
        OK(cpu->col2im(cpu, &g, t->nb, col, ld, SNN_F32, dref));
        OK(gpu->col2im(gpu, &g, t->nb, dcol, ld, SNN_F32, dd));
        got = downf(dd, nx);
        CHECK_BITS(what, got, dref, nx);
        free(got);
        /* with the output rounding of a 16-bit module */
        for (int ti = 0; ti < 2; ti++) {
            const snn_dtype t16 = ti ? SNN_F16 : SNN_BF16;
            OK(cpu->col2im(cpu, &g, t->nb, col, ld, t16, dref));
            OK(gpu->col2im(gpu, &g, t->nb, dcol, ld, t16, dd));
            got = downf(dd, nx);
            CHECK_BITS(what, got, dref, nx);
            free(got);
        }
        CHECK(gpu->col2im(gpu, &g, t->nb, dcol, ld, SNN_F8E4M3, dd) == SNN_E_INVALID);
        /* refusals: ld too small, a geometry whose output size is stale */
        CHECK(gpu->im2col(gpu, &g, t->nb, dx_, dcol, (size_t)t->nb * P - 1) == SNN_E_SHAPE);
        snn_conv_geom bad = g;
        bad.Wo++;
        CHECK(gpu->col2im(gpu, &bad, t->nb, dcol, ld + P, SNN_F32, dd) == SNN_E_INVALID);
        free(x);
        free(ref);
        free(col);
        free(dref);
        dfree(dx_);
        dfree(dcol);
        dfree(dd);
    }
}

/* ------------------------------------------------------------------ layout changes, reductions */

static void test_scatter_gather(void) {
    /* the last three take the vectorised walks: runs of 4 (FP32) and 8 or 4 (16-bit), and an ld
     * that only allows pairs (the one-element walk) */
    static const int cases[][4] = {{1, 1, 1, 0},  {5, 3, 7, 2},   {3, 17, 49, 1}, {8, 64, 9, 0},
                                   {2, 6, 196, 5}, {4, 6, 64, 0}, {3, 5, 12, 4},  {2, 3, 8, 2}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int nb = cases[ci][0], O = cases[ci][1];
        const size_t P = (size_t)cases[ci][2], ld = (size_t)nb * P + (size_t)cases[ci][3];
        const size_t nbuf = (size_t)O * ld, ny = (size_t)nb * O * P;
        float *buf = hnew(nbuf, -3.0f, 3.0f), *bias = hnew((size_t)O, -1.0f, 1.0f);
        sprinkle_zeros(buf, nbuf);
        bias[0] = -0.0f; /* -0 bias: a copy keeps it, an add of +0 products does not */
        float *dbuf = dnewf(buf, nbuf), *dbias = dnewf(bias, (size_t)O), *dy = dnewf(NULL, ny);
        /* with bias, without, bias only (src NULL); then with each output rounding */
        for (int mode = 0; mode < 9; mode++) {
            const float *hs = mode % 3 == 2 ? NULL : buf, *ds = mode % 3 == 2 ? NULL : dbuf;
            const float *hb = mode % 3 == 1 ? NULL : bias, *db = mode % 3 == 1 ? NULL : dbias;
            const snn_dtype rt = mode < 3 ? SNN_F32 : mode < 6 ? SNN_BF16 : SNN_F16;
            float *ref = hpoisoned(ny);
            OK(gpu->fill(gpu, dy, NAN, ny));
            OK(cpu->conv_scatter(cpu, nb, O, P, hs, ld, hb, rt, ref));
            OK(gpu->conv_scatter(gpu, nb, O, P, ds, ld, db, rt, dy));
            float *got = downf(dy, ny);
            char what[64];
            snprintf(what, sizeof what, "conv_scatter case %zu mode %d", ci, mode);
            CHECK_BITS(what, got, ref, ny);
            /* conv_scatter16: y stored in the rounding's type, the cast of ref (exact); at
             * the base and one element past it (the one-element walk) */
            for (int off = 0; gpu->conv_scatter16 && rt != SNN_F32 && off < 2; off++) {
                uint16_t *h = xmalloc((ny + 1) * 2);
                memset(h, 0xff, (ny + 1) * 2); /* NaN bits in both 16-bit types */
                uint16_t *y16 = dnew(h, (ny + 1) * 2);
                free(h);
                OK(gpu->conv_scatter16(gpu, rt, nb, O, P, ds, ld, db, y16 + off));
                uint16_t *g16 = downb(y16, (ny + 1) * 2);
                size_t bad = 0;
                for (size_t i = 0; i < ny; i++)
                    bad += g16[off + i] != (rt == SNN_F16 ? snn_f32_to_f16(ref[i]) : snn_f32_to_bf16(ref[i]));
                CHECK_MSG(bad == 0, "conv_scatter16 case %zu mode %d offset %d: %zu of %zu differ from the cast of "
                          "conv_scatter", ci, mode, off, bad, ny);
                free(g16);
                dfree(y16);
            }
            free(got);
            free(ref);
        }
        CHECK(gpu->conv_scatter(gpu, nb, O, P, NULL, ld, NULL, SNN_F32, dy) == SNN_E_INVALID);
        if (gpu->conv_scatter16) {
            CHECK(gpu->conv_scatter16(gpu, SNN_BF16, nb, O, P, NULL, ld, NULL, dy) == SNN_E_INVALID);
            CHECK(gpu->conv_scatter16(gpu, SNN_F32, nb, O, P, dbuf, ld, NULL, dy) == SNN_E_INVALID);
        }
        /* gather: the columns beyond nb*P keep the poison on both sides */
        float *y = hnew(ny, -3.0f, 3.0f), *ref = hpoisoned(nbuf);
        float *dsrc = dnewf(y, ny), *ddst = dnewf(NULL, nbuf);
        OK(cpu->conv_gather(cpu, nb, O, P, y, ref, ld));
        OK(gpu->conv_gather(gpu, nb, O, P, dsrc, ddst, ld));
        float *got = downf(ddst, nbuf);
        CHECK_BITS("conv_gather", got, ref, nbuf);
        /* conv_gather16 from FP32 (ti 0, 1) and from a source stored 16-bit (ti 2, 3: y cast to
         * the type, so ref's cast is its gather). The columns beyond nb*P keep their value; the
         * others start as NaN bits. */
        for (int ti = 0; gpu->conv_gather16 && ti < 4; ti++) {
            const snn_dtype t16 = ti % 2 ? SNN_F16 : SNN_BF16;
            uint16_t *want = xmalloc(nbuf * 2), *pois = xmalloc(nbuf * 2), *d16 = dnew(NULL, nbuf * 2);
            for (size_t i = 0; i < nbuf; i++) {
                want[i] = t16 == SNN_F16 ? snn_f32_to_f16(ref[i]) : snn_f32_to_bf16(ref[i]);
                pois[i] = i % ld < (size_t)nb * P ? 0xffffu : want[i];
            }
            OK(gpu->upload(gpu, d16, pois, nbuf * 2));
            uint16_t *y16 = NULL;
            if (ti >= 2) {
                uint16_t *h = xmalloc(ny * 2);
                for (size_t i = 0; i < ny; i++) h[i] = t16 == SNN_F16 ? snn_f32_to_f16(y[i]) : snn_f32_to_bf16(y[i]);
                y16 = dnew(h, ny * 2);
                free(h);
                /* ref holds the FP32 gather of y: the 16-bit source's gather is its cast */
                OK(gpu->conv_gather16(gpu, t16, nb, O, P, t16, y16, d16, ld));
            } else {
                OK(gpu->conv_gather16(gpu, t16, nb, O, P, SNN_F32, dsrc, d16, ld));
            }
            uint16_t *got16 = downb(d16, nbuf * 2);
            size_t bad = 0;
            for (size_t i = 0; i < nbuf; i++) bad += got16[i] != want[i];
            CHECK_MSG(bad == 0, "conv_gather16 case %zu %s from %s: %zu of %zu differ from the cast of conv_gather", ci,
                      ti % 2 ? "f16" : "bf16", ti >= 2 ? "16-bit" : "f32", bad, nbuf);
            if (ti == 2)
                CHECK(gpu->conv_gather16(gpu, SNN_BF16, nb, O, P, SNN_F16, y16, d16, ld) == SNN_E_INVALID);
            free(want);
            free(pois);
            free(got16);
            dfree(d16);
            if (y16) dfree(y16);
        }
        free(got);
        free(ref);
        free(y);
        free(buf);
        free(bias);
        dfree(dbuf);
        dfree(dbias);
        dfree(dy);
        dfree(dsrc);
        dfree(ddst);
    }
}

static void test_bias_grad(void) {
    static const size_t cases[][3] = {{1, 1, 1}, {7, 3, 5}, {33, 16, 49}, {256, 8, 196}, {3, 300, 1}, {64, 5, 1024}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const size_t B = cases[ci][0], P = cases[ci][2];
        const int O = (int)cases[ci][1];
        const size_t n = B * (size_t)O * P;
        float *dy = hnew(n, -1.0f, 1.0f), *db0 = hnew((size_t)O, -2.0f, 2.0f);
        float *ref = (float *)xmalloc((size_t)O * sizeof(float));
        memcpy(ref, db0, (size_t)O * sizeof(float));
        float *ddy = dnewf(dy, n), *ddb = dnewf(db0, (size_t)O);
        OK(cpu->conv_bias_grad(cpu, B, O, P, dy, ref));
        OK(gpu->conv_bias_grad(gpu, B, O, P, ddy, ddb));
        float *got = downf(ddb, (size_t)O);
        size_t bad = 0, first = 0;
        for (int o = 0; o < O; o++) {
            double sabs = 0, acc = 0;
            for (size_t b = 0; b < B; b++)
                for (size_t p = 0; p < P; p++) {
                    double v = dy[(b * (size_t)O + (size_t)o) * P + p];
                    sabs += fabs(v);
                    acc += v;
                }
            const double cnt = (double)(B * P);
            const double bound = ldexp(1.0, -23) * (fabs((double)ref[o]) + fabs(acc)) + 2.0 * cnt * ldexp(sabs, -53);
            if (!(fabs((double)got[o] - (double)ref[o]) <= bound)) {
                if (!bad) first = (size_t)o;
                bad++;
            }
        }
        CHECK_MSG(bad == 0, "conv_bias_grad case %zu: %zu of %d channels beyond the bound, first %zu: %.9g vs %.9g", ci,
                  bad, O, first, bad ? (double)got[first] : 0.0, bad ? (double)ref[first] : 0.0);
        free(got);
        free(dy);
        free(db0);
        free(ref);
        dfree(ddy);
        dfree(ddb);
    }
}

static void test_sum_groups(void) {
    static const size_t cases[][2] = {{1, 1}, {1, 37}, {5, 1001}, {33, 4096}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int groups = (int)cases[ci][0];
        const size_t n = cases[ci][1];
        float *part = hnew((size_t)groups * n, -1.0f, 1.0f), *dst = hnew(n, -4.0f, 4.0f);
        sprinkle_zeros(part, (size_t)groups * n);
        float *dpart = dnewf(part, (size_t)groups * n), *ddst = dnewf(dst, n);
        OK(cpu->sum_groups_add(cpu, groups, n, part, dst));
        OK(gpu->sum_groups_add(gpu, groups, n, dpart, ddst));
        float *got = downf(ddst, n);
        CHECK_BITS("sum_groups_add", got, dst, n);
        free(got);
        free(part);
        free(dst);
        dfree(dpart);
        dfree(ddst);
    }
}

static void test_transpose(void) {
    static const size_t cases[][3] = {{1, 1, 1}, {3, 33, 65}, {5, 7, 1}, {2, 1, 100}, {2, 100, 37}, {70001, 1, 2},
                                      {4, 384, 64}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const size_t B = cases[ci][0];
        const int R = (int)cases[ci][1], C = (int)cases[ci][2];
        const size_t n = B * (size_t)R * (size_t)C;
        float *x = hnew(n, -1.0f, 1.0f), *ref = hpoisoned(n);
        float *dx_ = dnewf(x, n), *dy = dnewf(NULL, n);
        OK(cpu->transpose(cpu, B, R, C, x, ref));
        OK(gpu->transpose(gpu, B, R, C, dx_, dy));
        float *got = downf(dy, n);
        char what[64];
        snprintf(what, sizeof what, "transpose %zu x %d x %d", B, R, C);
        CHECK_BITS(what, got, ref, n);
        /* the definition, on the CPU's result */
        size_t bad = 0;
        for (size_t b = 0; b < B; b++)
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    bad += memcmp(&ref[(b * C + c) * R + r], &x[(b * R + r) * C + c], sizeof(float)) != 0;
        CHECK_MSG(bad == 0, "%s: the CPU table's transpose is wrong in %zu places", what, bad);
        free(got);
        free(x);
        free(ref);
        dfree(dx_);
        dfree(dy);
    }
}

/* ------------------------------------------------------------------ pooling */

typedef struct {
    int planes, H, W, kh, kw, sh, sw, ph, pw;
} pool_case;

static const pool_case pool_cases[] = {
    {6, 8, 8, 2, 2, 2, 2, 0, 0},    /* the usual 2x2 */
    {5, 9, 7, 3, 3, 2, 2, 1, 1},    /* overlapping windows with padding, odd sizes */
    {3, 5, 6, 3, 3, 1, 1, 1, 1},    /* stride 1: every pixel in up to 9 windows */
    {4, 7, 10, 3, 2, 2, 1, 1, 1},   /* rectangular kernel and strides */
    {7, 11, 11, 2, 2, 3, 3, 1, 0},  /* stride > kernel: unread pixels get 0 */
    {2, 1, 1, 1, 1, 1, 1, 0, 0},    /* one pixel */
    {40, 14, 13, 4, 4, 3, 3, 2, 2}, /* many planes, padding kernel/2 */
    {6, 16, 16, 3, 3, 2, 2, 1, 1},  /* Spikformer's 3x3 / 2 / 1 on even sides (its own backward walk) */
    {3, 10, 9, 3, 3, 2, 2, 1, 1},   /* the same walk, an odd width */
    {5, 14, 14, 2, 2, 2, 2, 0, 0},  /* windows that tile the input (their own backward walk) */
    {4, 9, 6, 3, 2, 3, 2, 0, 0},    /* the same, a rectangular window */
};

static void test_pool(void) {
    for (size_t ci = 0; ci < sizeof pool_cases / sizeof pool_cases[0]; ci++) {
        const pool_case *t = &pool_cases[ci];
        snn_conv_geom g = geom(t->planes, t->H, t->W, t->kh, t->kw, t->sh, t->sw, t->ph, t->pw);
        const size_t nx = (size_t)g.C * g.H * g.W, ny = (size_t)g.C * g.Ho * g.Wo;
        char what[96];
        snprintf(what, sizeof what, "pool case %zu (%d planes %dx%d k%dx%d s%dx%d p%dx%d)", ci, g.C, g.H, g.W, g.kh,
                 g.kw, g.sh, g.sw, g.ph, g.pw);
        /* inputs on a coarse grid (ties), some -inf, a few NaN, zeros of both signs */
        float *x = hnew(nx, -4.0f, 4.0f);
        for (size_t i = 0; i < nx; i++) x[i] = roundf(x[i] * 2.0f) / 2.0f;
        for (size_t i = 3; i < nx; i += 29) x[i] = -INFINITY;
        for (size_t i = 11; i < nx; i += 97) x[i] = NAN;
        for (size_t i = 5; i < nx; i += 13) x[i] = -0.0f;
        float *dx_ = dnewf(x, nx), *dy_out = dnewf(NULL, ny);
        int32_t *darg = (int32_t *)dnew(NULL, ny * sizeof(int32_t));
        float *yref = hpoisoned(ny);
        int32_t *aref = (int32_t *)xmalloc(ny * sizeof(int32_t));
        memset(aref, 0xFF, ny * sizeof(int32_t));
        OK(cpu->maxpool_forward(cpu, &g, x, yref, aref));
        OK(gpu->maxpool_forward(gpu, &g, dx_, dy_out, darg));
        float *got = downf(dy_out, ny);
        int32_t *agot = (int32_t *)downb(darg, ny * sizeof(int32_t));
        CHECK_BITS(what, got, yref, ny);
        CHECK_BITS(what, agot, aref, ny);
        free(got);
        free(agot);
        /* backward from the CPU's argmax (identical anyway) and a fresh dy */
        float *dy = hnew(ny, -1.0f, 1.0f);
        sprinkle_zeros(dy, ny);
        float *ddy = dnewf(dy, ny), *ddx = dnewf(NULL, nx), *dxref = hpoisoned(nx);
        OK(gpu->upload(gpu, darg, aref, ny * sizeof(int32_t)));
        OK(cpu->maxpool_backward(cpu, &g, dy, aref, dxref));
        OK(gpu->maxpool_backward(gpu, &g, ddy, darg, ddx));
        got = downf(ddx, nx);
        CHECK_BITS(what, got, dxref, nx);
        free(got);
        /* average pooling on finite inputs */
        float *xa = hnew(nx, -3.0f, 3.0f);
        OK(gpu->upload(gpu, dx_, xa, nx * sizeof(float)));
        OK(gpu->fill(gpu, dy_out, NAN, ny));
        OK(cpu->avgpool_forward(cpu, &g, xa, yref));
        OK(gpu->avgpool_forward(gpu, &g, dx_, dy_out));
        got = downf(dy_out, ny);
        CHECK_BITS(what, got, yref, ny);
        free(got);
        OK(gpu->fill(gpu, ddx, NAN, nx));
        OK(cpu->avgpool_backward(cpu, &g, dy, dxref));
        OK(gpu->avgpool_backward(gpu, &g, ddy, ddx));
        got = downf(ddx, nx);
        CHECK_BITS(what, got, dxref, nx);
        free(got);
        /* refusal: padding beyond half the kernel */
        snn_conv_geom bad = geom(t->planes, t->H + 8, t->W + 8, 2, 2, 2, 2, 2, 2);
        CHECK(gpu->avgpool_forward(gpu, &bad, dx_, dy_out) == SNN_E_INVALID);
        free(x);
        free(xa);
        free(yref);
        free(aref);
        free(dy);
        free(dxref);
        dfree(dx_);
        dfree(dy_out);
        dfree(darg);
        dfree(ddy);
        dfree(ddx);
    }
}

/* ------------------------------------------------------------------ models */

/* made is the status of a constructor that wrote *child (read only after it ran). */
static snn_status add(snn_module *seq, snn_status made, snn_module **child) {
    if (made != SNN_OK) return made;
    snn_status st = snn_sequential_add(seq, *child);
    if (st != SNN_OK) snn_module_destroy(*child);
    return st;
}

#define TRY(x)                                                                                   \
    do {                                                                                         \
        snn_status st_ = (x);                                                                    \
        if (st_ != SNN_OK) return st_;                                                           \
    } while (0)

/* kind 0: [2, 9, 11] Conv2d(2->4, 3, 1, 1) MaxPool2d(2) Conv2d(4->6, 3, 2, 1) AvgPool2d(2, 1, 1)
 *         Flatten Linear(72 -> 5);
 * kind 1: [3, 17] Conv1d(3->8, 3, 2, 1) Conv1d(8->8, 1) (pointwise) Flatten Linear(72 -> 5);
 * kind 2: [2, 8, 8] Conv2d(2->4, 3, 1, 1) MaxPool2d(2) Reshape [4, 16] Conv1d(4->6, 3, 1, 1)
 *         Flatten Linear(96 -> 5). */
static snn_status build(int kind, uint64_t seed, snn_model **out) {
    snn_module *seq = NULL, *c = NULL;
    TRY(snn_sequential_create(&seq));
    snn_status st = SNN_OK;
    int shape[3] = {0, 0, 0}, rank = 3, flat = 0;
    if (kind == 0) {
        shape[0] = 2, shape[1] = 9, shape[2] = 11, flat = 72;
        st = add(seq, snn_conv2d_create(2, 4, 3, 1, 1, 1, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_maxpool2d_create(2, 0, 0, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_conv2d_create(4, 6, 3, 2, 1, 1, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_avgpool2d_create(2, 1, 1, &c), &c);
    } else if (kind == 1) {
        shape[0] = 3, shape[1] = 17, rank = 2, flat = 72;
        st = add(seq, snn_conv1d_create(3, 8, 3, 2, 1, 1, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_conv1d_create(8, 8, 1, 1, 0, 1, &c), &c);
    } else {
        shape[0] = 2, shape[1] = 8, shape[2] = 8, flat = 96;
        const int tokens[2] = {4, 16};
        st = add(seq, snn_conv2d_create(2, 4, 3, 1, 1, 1, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_maxpool2d_create(2, 0, 0, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_reshape_create(2, tokens, &c), &c);
        if (st == SNN_OK) st = add(seq, snn_conv1d_create(4, 6, 3, 1, 1, 1, &c), &c);
    }
    if (st == SNN_OK) st = add(seq, snn_flatten_create(&c), &c);
    if (st == SNN_OK) st = add(seq, snn_linear_create(flat, 5, 1, &c), &c);
    if (st != SNN_OK) {
        snn_module_destroy(seq);
        return st;
    }
    return snn_model_create_from_module(seq, rank, shape, seed, out);
}

typedef struct {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
} side;

static snn_status side_make(int kind, uint64_t seed, const char *dev, const char *prec, int T, int N, side *s) {
    memset(s, 0, sizeof *s);
    snn_precision_config cfg;
    TRY(snn_precision_config_parse(prec, NULL, NULL, NULL, NULL, &cfg));
    TRY(build(kind, seed, &s->m));
    TRY(snn_model_to(s->m, dev));
    TRY(snn_prepare_model_for_precision(s->m, dev, &cfg, &s->p));
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 1e-3f;
    TRY(snn_optimizer_create_for_model(&oo, s->m, &s->opt));
    return snn_model_plan(s->m, T, N);
}

static void side_free(side *s) {
    snn_optimizer_free(s->opt);
    snn_precision_free(s->p);
    snn_model_free(s->m);
    memset(s, 0, sizeof *s);
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* a NaN wins */
    }
    return m;
}

static void compare_model(int kind, const char *prec, int T, int N, int steps) {
    const char *names[] = {"conv2d+pools", "conv1d", "conv2d+pool+conv1d"};
    uint64_t seed = rng++;
    side c = {0}, g = {0};
    /* the CPU runs the per-sample strategy, the GPU batches of 3 (its only strategy) */
    if (kind == 0) snn_conv_set_strategy(2);
    snn_status st = side_make(kind, seed, "cpu", prec, T, N, &c);
    snn_conv_set_strategy(0);
    CHECK_MSG(st == SNN_OK, "%s %s: cpu side: %s", names[kind], prec, snn_last_error());
    if (st == SNN_OK) {
        if (kind == 0) snn_conv_set_max_chunk(3);
        st = side_make(kind, seed, gpu_dev, prec, T, N, &g);
        snn_conv_set_max_chunk(0);
        if (st == SNN_E_UNSUPPORTED && strstr(snn_last_error(), "Reshape")) {
            /* Reshape is not on the op table yet (src/models/spikformer_parts.c) */
            printf("  %-20s %-5s skipped: %s\n", names[kind], prec, snn_last_error());
            side_free(&c);
            side_free(&g);
            return;
        }
        CHECK_MSG(st == SNN_OK, "%s %s: cuda side: %s", names[kind], prec, snn_last_error());
    }
    if (st != SNN_OK) {
        side_free(&c);
        side_free(&g);
        return;
    }
    size_t nx = (size_t)T * N * snn_model_input_numel(c.m), ny = (size_t)T * N * 5, np = snn_model_num_params(c.m);
    float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy), *yc = malloc(ny * sizeof *yc);
    float *gc = malloc(np * sizeof *gc), *pc = malloc(np * sizeof *pc);
    CHECK(x && dy && yc && gc && pc);
    const double ulp = !strcmp(prec, "bf16") ? 1.0 / 256 : 0;
    const double ybound = ulp ? 1.5 * ulp : 2e-5, gbound = ulp ? 4 * ulp : 2e-5;
    const double lr = 1e-3, ptol = 1e-6 + lr * (ulp ? 16 * ulp : 1e-3);
    const size_t off_frac = ulp ? 200 : 1000;
    for (int s = 0; s < steps && x && dy && yc && gc && pc; s++) {
        snn_test_fill_uniform(x, nx, -1.0f, 1.0f, &rng);
        const float *y1, *y2;
        CHECK(snn_model_forward(c.m, x, 1, &y1) == SNN_OK);
        memcpy(yc, y1, ny * sizeof *yc);
        st = snn_model_forward(g.m, x, 1, &y2);
        CHECK_MSG(st == SNN_OK, "%s: forward on cuda: %s", names[kind], snn_last_error());
        if (st != SNN_OK) break;
        double ym = max_abs(yc, ny), yd = max_diff(y2, yc, ny), yb = s == 0 || !ulp ? ybound : 3 * ulp;
        CHECK_MSG(yd <= yb * ym, "%s %s step %d: outputs differ by %.3g (max|y| %.3g, bound %.3g)", names[kind], prec,
                  s + 1, yd, ym, yb * ym);
        for (size_t i = 0; i < ny; i++) dy[i] = 2.0f * yc[i] / (float)ny;
        CHECK(snn_precision_backward(c.p, dy, c.opt, -1.0f, 0.0f, NULL, NULL) == SNN_OK);
        st = snn_precision_backward(g.p, dy, g.opt, -1.0f, 0.0f, NULL, NULL);
        CHECK_MSG(st == SNN_OK, "%s: step on cuda: %s", names[kind], snn_last_error());
        if (st != SNN_OK) break;
        memcpy(gc, snn_model_grads(c.m), np * sizeof *gc);
        const float *gg = snn_model_grads(g.m);
        CHECK(gg != NULL);
        if (!gg) break;
        double gm = max_abs(gc, np), gd = max_diff(gg, gc, np);
        CHECK_MSG(gd <= gbound * gm, "%s %s step %d: gradients differ by %.3g (max|g| %.3g, bound %.3g)", names[kind],
                  prec, s + 1, gd, gm, gbound * gm);
        memcpy(pc, snn_model_params(c.m), np * sizeof *pc);
        const float *pg = snn_model_params(g.m);
        CHECK(pg != NULL);
        if (!pg) break;
        /* AdamW's first steps move a weight by about lr whatever its gradient's size: a
         * gradient within the comparison's own error of zero (|g| <= gbound max|g|) has no
         * determined sign, and its weight may move either way on the two devices */
        size_t off = 0, loose = 0;
        for (size_t i = 0; i < np; i++)
            if (!(fabs((double)pg[i] - pc[i]) <= ptol)) {
                if (fabs((double)gc[i]) <= gbound * gm) loose++;
                else off++;
            }
        CHECK_MSG(off <= np / off_frac, "%s %s step %d: %zu of %zu parameters differ after the AdamW step",
                  names[kind], prec, s + 1, off, np);
        if (s == 0)
            printf("  %-20s %-5s step 1: |dy| %.2e of %.2e, |dg| %.2e of %.2e, params off %zu/%zu\n", names[kind],
                   prec, yd, ym, gd, gm, off, np);
        if (loose) { /* the two models now differ by design: later steps would compare that */
            printf("  %-20s %-5s step %d: %zu weights with gradients within the bound of zero moved apart; "
                   "stopping here\n", names[kind], prec, s + 1, loose);
            break;
        }
    }
    free(x);
    free(dy);
    free(yc);
    free(gc);
    free(pc);
    side_free(&c);
    side_free(&g);
}

int main(void) {
    cpu = snn_backend_cpu();
    rng = snn_test_seed();
    const char *tab = getenv("SNN_TEST_TABLE");
    const int cpu_only = tab && !strcmp(tab, "cpu");
    snn_status st = SNN_OK;
    if (cpu_only) {
        cpu_as_gpu = *cpu;
        gpu = &cpu_as_gpu;
        gpu_dev = "cpu";
        printf("test_cuda_table_conv: SNN_TEST_TABLE=cpu: the CPU table on both sides\n");
    } else {
        st = snn_backend_cuda_create(0, &gpu);
    }
    if (st != SNN_OK) {
        fprintf(stderr, "test_cuda_table_conv: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    test_im2col();
    test_scatter_gather();
    test_bias_grad();
    test_sum_groups();
    test_transpose();
    test_pool();
    OK(gpu->synchronize(gpu));
    if (!cpu_only) snn_backend_cuda_destroy(gpu);
    gpu = NULL;
    const char *precs[] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++)
        for (int kind = 0; kind < 3; kind++) compare_model(kind, precs[p], 2, 5, 2);
    return snn_test_finish("test_cuda_table_conv");
}
