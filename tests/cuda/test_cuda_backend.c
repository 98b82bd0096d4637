/* The CUDA op table against the CPU table (src/backend/backend.h), entry by entry, on fresh
 * random inputs (seed printed; SNN_TEST_SEED replays it) with every output poisoned first
 * (NaN bytes), on sizes that are multiples of nothing (odd M/N/K, n = 1, odd leading
 * dimensions). Exit 77 (skip) without a GPU.
 *
 * Bit for bit where both tables do the same rounded operations per element: fill, copy,
 * upload/download, round, scale, nonfinite, optim_update (SGD plain / momentum / dampening /
 * Nesterov / L2, Adam with L2, AdamW with decoupled decay, with and without a decay mask),
 * the plain neuron forward (spikes, h_seq, v_last: as tests/cuda/neuron_case.h) and the
 * mixed-precision neurons (everything, dL/dk included: as tests/cuda/neuron_mp_case.h),
 * fp8_qdq (every recipe, E4M3 and E5M2, pow2 on and off, shapes that are not multiples of the
 * blocks, a wide dynamic range, zero blocks, NaN and inf inputs; out and amax, a NaN matching
 * any NaN).
 * Bounded elsewhere, by the error analysis of the summation or the bound an existing parity
 * test uses:
 *   gemm        |got - ref| <= 4 (K + 2) u (|alpha| sum_k |a b| + |beta c| + |bias|) per
 *               element (u = 2^-24: both are FP32 accumulations of exact products, the
 *               factor 2 over the textbook bound leaves room for tensor cores' truncating
 *               accumulation; TF32 would be ~1000x over), plus one ulp of the 16-bit type
 *               with c_round. The GEMM also runs on unrounded FP32 operands and on a 16-bit
 *               B (the CUDA table rounds them itself: gemm_rounds, b_store) against the CPU
 *               on the rounded ones, and with a bias that is and is not 16-byte aligned
 *               (cuBLASLt's epilogue or not);
 *   colsum_add  |got - ref| <= 2 (rows + 1) u (|out| + sum_i |x|) per column;
 *   cast        bit for bit (the 16-bit storage);
 *   sumsq       relative 2 n 2^-53 (double sums of positive terms);
 *   gelu        1e-5 relative above |ref| = 0.1, absolute below (erff differs in its last
 *               bits; the bound of test_cuda_attn_optim.c);
 *   neuron bwd  dx normwise 2e-5, PLIF/LIF dL/dk the bound of neuron_case.h (the GPU sums
 *               dL/dk in FP32 atomics, the CPU in double);
 *   rmsnorm     y and dx: 2.5e-7 normwise (one FP32 ulp of the largest value: both compute
 *               in double and differ only in the order of the per-vector sums), rstd
 *               relative 2 (F + 4) 2^-53, dw 5e-7 normwise (one ulp of the double-sum's
 *               rounding plus one of the FP32 accumulation into dw). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "snn/dtype.h"
#include "snn/neuron.h"

static const snn_backend *cpu;
static snn_backend *gpu;
static uint64_t rng;

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

/* Device buffer of `bytes`, holding a copy of src or poisoned with 0xFF bytes (NaN). */
static void *dnew(const void *src, size_t bytes) {
    void *p = NULL;
    if (gpu->alloc(gpu, bytes, &p) != SNN_OK) {
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

static void down(void *dst, const void *src, size_t bytes) {
    if (gpu->download(gpu, dst, src, bytes) != SNN_OK) {
        fprintf(stderr, "download failed: %s\n", snn_last_error());
        exit(2);
    }
}
static float *downf(const float *src, size_t n) {
    float *h = hpoisoned(n);
    down(h, src, n * sizeof(float));
    return h;
}
static void dfree(void *p) { gpu->free(gpu, p); }

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Elements whose bits differ (a NaN reference counts too: it would hide an unwritten value,
 * unless nan_ok, where a NaN matches any NaN: payloads differ between the CPU and the GPU). */
static int nan_ok;
static size_t mismatches(const float *got, const float *ref, size_t n, size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (nan_ok && isnan(ref[i]) && isnan(got[i])) continue;
        if (isnan(ref[i]) || fbits(got[i]) != fbits(ref[i])) {
            if (!bad && first) *first = i;
            bad++;
        }
    }
    return bad;
}

#define CHECK_BITS(what, got, ref, n)                                                                      \
    do {                                                                                                   \
        size_t first_ = 0, bad_ = mismatches((got), (ref), (n), &first_);                                  \
        CHECK_MSG(bad_ == 0, "%s: %zu of %zu differ, first [%zu] got %.9g ref %.9g", (what), bad_,         \
                  (size_t)(n), first_, bad_ ? (double)(got)[first_] : 0.0, bad_ ? (double)(ref)[first_] : 0.0); \
    } while (0)

/* max |a - b| / max |b| (NaN anywhere: +inf). */
static float *down_typed(snn_dtype t, const void *d, size_t n) {
    void *raw = xmalloc(n * 2 + 2);
    down(raw, d, n * 2);
    float *f = (float *)xmalloc(n * 4 + 4);
    OK(snn_convert(SNN_F32, f, t, raw, n, 0));
    free(raw);
    return f;
}

static void *dnew_typed(snn_dtype t, const float *x, size_t n) {
    float *d32 = dnewf(x, n);
    void *d = NULL;
    OK(gpu->alloc(gpu, n * 2 + 2, &d));
    OK(gpu->cast(gpu, t, d, d32, n));
    dfree(d32);
    return d;
}

static double normwise(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > d) d = e;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return m > 0 ? d / m : d;
}

static const double U32 = 5.9604644775390625e-08; /* 2^-24: FP32 unit roundoff */

/* ------------------------------------------------------------------ memory */

static void test_memory(void) {
    static const size_t sizes[] = {1, 3, 1001, 65537};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        /* alloc is zeroed and aligned */
        float *d = NULL;
        OK(gpu->alloc(gpu, n * sizeof(float), (void **)&d));
        CHECK(((uintptr_t)d % 256) == 0);
        float *h = downf(d, n), *zero = (float *)calloc(n, sizeof(float));
        CHECK_BITS("alloc zeroed", h, zero, n);
        free(h);
        /* upload / download round trip */
        float *x = hnew(n, -3.0f, 3.0f);
        OK(gpu->upload(gpu, d, x, n * sizeof(float)));
        h = downf(d, n);
        CHECK_BITS("upload/download", h, x, n);
        free(h);
        /* copy device to device, at an odd offset */
        const size_t off = n > 2 ? 1 : 0, cn = n - off;
        float *d2 = dnewf(NULL, n);
        OK(gpu->copy(gpu, d2 + off, d + off, cn * sizeof(float)));
        h = downf(d2 + off, cn);
        CHECK_BITS("copy", h, x + off, cn);
        free(h);
        /* fill */
        float v;
        snn_test_fill_uniform(&v, 1, -5.0f, 5.0f, &rng);
        float *ref = hpoisoned(n);
        OK(cpu->fill(cpu, ref, v, n));
        OK(gpu->fill(gpu, d2, v, n));
        OK(gpu->synchronize(gpu));
        h = downf(d2, n);
        CHECK_BITS("fill", h, ref, n);
        free(h);
        free(ref);
        free(x);
        free(zero);
        dfree(d);
        dfree(d2);
    }
    /* refusals */
    float *d = dnewf(NULL, 4);
    CHECK(gpu->upload(gpu, NULL, d, 16) == SNN_E_INVALID);
    CHECK(gpu->download(gpu, NULL, d, 16) == SNN_E_INVALID);
    CHECK(gpu->copy(gpu, d, NULL, 16) == SNN_E_INVALID);
    CHECK(gpu->fill(gpu, NULL, 1.0f, 4) == SNN_E_INVALID);
    CHECK(gpu->alloc(gpu, 16, NULL) == SNN_E_INVALID);
    OK(gpu->fill(gpu, NULL, 1.0f, 0)); /* nothing to do */
    dfree(d);
}

/* ------------------------------------------------------------------ elementwise */

static void test_round_scale(void) {
    static const size_t sizes[] = {1, 7, 1001, 100003};
    static const snn_dtype types[] = {SNN_F32, SNN_F16, SNN_BF16};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        /* a wide range: F16 overflow to inf (> 65504), subnormals, ties */
        float *x = hnew(n, -4.0f, 4.0f);
        for (size_t i = 0; i < n; i++) {
            if (i % 5 == 1) x[i] *= 30000.0f;
            if (i % 7 == 3) x[i] *= 1e-6f;
        }
        float *dx = dnewf(x, n);
        for (int ti = 0; ti < 3; ti++) {
            const snn_dtype t = types[ti];
            float *ref = hpoisoned(n);
            OK(cpu->round(cpu, t, ref, x, n));
            float *dy = dnewf(NULL, n);
            OK(gpu->round(gpu, t, dy, dx, n));
            float *got = downf(dy, n);
            char what[64];
            snprintf(what, sizeof what, "round %s n=%zu", snn_dtype_name(t), n);
            CHECK_BITS(what, got, ref, n);
            /* in place */
            float *din = dnewf(x, n);
            OK(gpu->round(gpu, t, din, din, n));
            free(got);
            got = downf(din, n);
            CHECK_BITS("round in place", got, ref, n);
            free(got);
            free(ref);
            dfree(dy);
            dfree(din);
        }
        for (int ti = 0; ti < 3; ti++) { /* add_rounded: a + round(b), aligned, in place, off by one */
            const snn_dtype t = types[ti];
            float *a = hnew(n, -2.0f, 2.0f), *ref = hpoisoned(n);
            OK(cpu->add_rounded(cpu, t, ref, a, x, n));
            float *da = dnewf(a, n), *dd = dnewf(NULL, n);
            OK(gpu->add_rounded(gpu, t, dd, da, dx, n));
            float *got = downf(dd, n);
            char what[64];
            snprintf(what, sizeof what, "add_rounded %s n=%zu", snn_dtype_name(t), n);
            CHECK_BITS(what, got, ref, n);
            free(got);
            OK(gpu->add_rounded(gpu, t, da, da, dx, n)); /* dst == a */
            got = downf(da, n);
            CHECK_BITS("add_rounded in place", got, ref, n);
            free(got);
            if (n > 1) {
                OK(cpu->add_rounded(cpu, t, ref, a + 1, x + 1, n - 1));
                float *db = dnewf(a, n);
                OK(gpu->add_rounded(gpu, t, dd, db + 1, dx + 1, n - 1));
                got = downf(dd, n - 1);
                CHECK_BITS("add_rounded off by one", got, ref, n - 1);
                free(got);
                dfree(db);
            }
            free(a), free(ref);
            dfree(da), dfree(dd);
        }
        for (int ti = 0; ti < 3; ti++) { /* cast: the 16-bit storage, bit for bit */
            const snn_dtype t = types[ti];
            const size_t bytes = n * snn_dtype_size(t);
            unsigned char *ref = (unsigned char *)xmalloc(bytes), *got = (unsigned char *)xmalloc(bytes);
            memset(ref, 0xA5, bytes);
            OK(cpu->cast(cpu, t, ref, x, n));
            void *dc = NULL;
            OK(gpu->alloc(gpu, bytes, &dc));
            OK(gpu->fill(gpu, (float *)dc, NAN, bytes / 4));
            OK(gpu->cast(gpu, t, dc, dx, n));
            down(got, dc, bytes);
            CHECK_MSG(!memcmp(got, ref, bytes), "cast %s n=%zu: storage differs from the CPU table's",
                      snn_dtype_name(t), n);
            if (n > 1) { /* source and destination one element off their alignment (the scalar path) */
                const size_t es = snn_dtype_size(t);
                memset(ref, 0xA5, bytes);
                OK(cpu->cast(cpu, t, ref, x + 1, n - 1));
                OK(gpu->fill(gpu, (float *)dc, NAN, bytes / 4));
                OK(gpu->cast(gpu, t, (char *)dc + es, dx + 1, n - 1));
                down(got, dc, bytes);
                CHECK_MSG(!memcmp(got + es, ref, (n - 1) * es), "cast %s n=%zu off by one: storage differs",
                          snn_dtype_name(t), n - 1);
            }
            free(ref), free(got);
            dfree(dc);
        }
        float s;
        snn_test_fill_uniform(&s, 1, -3.0f, 3.0f, &rng);
        float *ref = hpoisoned(n);
        OK(cpu->scale(cpu, ref, x, s, n));
        float *dy = dnewf(NULL, n);
        OK(gpu->scale(gpu, dy, dx, s, n));
        float *got = downf(dy, n);
        CHECK_BITS("scale", got, ref, n);
        free(got);
        OK(gpu->scale(gpu, dx, dx, s, n)); /* in place */
        got = downf(dx, n);
        CHECK_BITS("scale in place", got, ref, n);
        free(got);
        free(ref);
        dfree(dy);
        dfree(dx);
        free(x);
    }
    float *d = dnewf(NULL, 4);
    CHECK(gpu->round(gpu, SNN_F8E4M3, d, d, 4) != SNN_OK);
    CHECK(gpu->round(gpu, SNN_F16, NULL, d, 4) == SNN_E_INVALID);
    CHECK(gpu->scale(gpu, d, NULL, 2.0f, 4) == SNN_E_INVALID);
    CHECK(gpu->add_rounded(gpu, SNN_F8E4M3, d, d, d, 4) == SNN_E_INVALID);
    CHECK(gpu->add_rounded(gpu, SNN_BF16, d, NULL, d, 4) == SNN_E_INVALID);
    CHECK(cpu->add_rounded(cpu, SNN_F8E4M3, d, d, d, 4) == SNN_E_INVALID);
    dfree(d);
}

static void test_gelu(void) {
    static const size_t sizes[] = {1, 999, 106053};
    for (size_t si = 0; si < 3; si++) {
        const size_t n = sizes[si];
        float *x = hnew(n, -5.0f, 5.0f), *dy = hnew(n, -1.0f, 1.0f);
        float *y_ref = hpoisoned(n), *dx_ref = hpoisoned(n);
        OK(cpu->gelu_forward(cpu, x, y_ref, n));
        OK(cpu->gelu_backward(cpu, x, dy, dx_ref, n));
        float *d_x = dnewf(x, n), *d_dy = dnewf(dy, n), *d_y = dnewf(NULL, n), *d_dx = dnewf(NULL, n);
        OK(gpu->gelu_forward(gpu, d_x, d_y, n));
        OK(gpu->gelu_backward(gpu, d_x, d_dy, d_dx, n));
        float *y = downf(d_y, n), *dx = downf(d_dx, n);
        double ef = snn_test_max_rel(y, y_ref, n, 0.1), eb = snn_test_max_rel(dx, dx_ref, n, 0.1);
        CHECK_MSG(ef < 1e-5, "gelu forward n=%zu error %.3g", n, ef);
        CHECK_MSG(eb < 1e-5, "gelu backward n=%zu error %.3g", n, eb);
        free(x), free(dy), free(y_ref), free(dx_ref), free(y), free(dx);
        dfree(d_x), dfree(d_dy), dfree(d_y), dfree(d_dx);
    }
}

/* GELU with typed storage (gelu_forward_io / _backward_io: the 16-bit boundaries next to a
 * 16-bit Linear): x and dx stored as xt, y and dy as yt, against the CPU on the widened
 * values with each result rounded to its storage. */
static void *dnew_store(snn_dtype t, const float *x, size_t n) { return t == SNN_F32 ? dnewf(x, n) : dnew_typed(t, x, n); }
static float *down_store(snn_dtype t, const void *d, size_t n) {
    return t == SNN_F32 ? downf(d, n) : down_typed(t, d, n);
}

static float store_round(snn_dtype t, float v) { return t == SNN_F32 ? v : snn_round_to(t, v, 0); }

static size_t store_size(snn_dtype t) { return t == SNN_F32 ? 4 : 2; }

/* One storage pair on n values starting `off` elements into each buffer (off 1: pointers
 * that are not 16-byte aligned, the scalar kernels; n % 8 != 0: the vector kernels' tail). */
static void gelu_io_case(snn_dtype xt, snn_dtype yt, size_t n, size_t off) {
    const size_t m = n + off;
    float *x = hnew(m, -6.0f, 6.0f), *dy = hnew(m, -1.0f, 1.0f);
    for (size_t i = 0; i < m; i++) {
        x[i] = store_round(xt, x[i]);
        dy[i] = store_round(yt, dy[i]);
    }
    float *y_ref = hpoisoned(n), *dx_ref = hpoisoned(n);
    OK(cpu->gelu_forward(cpu, x + off, y_ref, n));
    OK(cpu->gelu_backward(cpu, x + off, dy + off, dx_ref, n));
    for (size_t i = 0; i < n; i++) {
        y_ref[i] = store_round(yt, y_ref[i]);
        dx_ref[i] = store_round(xt, dx_ref[i]);
    }
    void *d_x = dnew_store(xt, x, m), *d_dy = dnew_store(yt, dy, m);
    void *d_y = dnew(NULL, m * 4), *d_dx = dnew(NULL, m * 4); /* poisoned */
    const size_t ox = off * store_size(xt), oy = off * store_size(yt);
    OK(gpu->gelu_forward_io(gpu, xt, yt, (char *)d_x + ox, (char *)d_y + oy, n));
    OK(gpu->gelu_backward_io(gpu, xt, yt, (char *)d_x + ox, (char *)d_dy + oy, (char *)d_dx + ox, n));
    float *y = down_store(yt, d_y, m), *dx = down_store(xt, d_dx, m);
    /* one unit of the storage (erff's last FP32 bit may move a rounding across a
     * boundary), relative above 0.1, absolute below */
    const double uy = yt == SNN_F32 ? 1e-5 : yt == SNN_BF16 ? 0x1p-7 : 0x1p-10;
    const double ux = xt == SNN_F32 ? 1e-5 : xt == SNN_BF16 ? 0x1p-7 : 0x1p-10;
    double ef = snn_test_max_rel(y + off, y_ref, n, 0.1), eb = snn_test_max_rel(dx + off, dx_ref, n, 0.1);
    CHECK_MSG(ef <= uy && eb <= ux, "gelu io x %s y %s n %zu off %zu: forward %.3g, backward %.3g (bounds %.3g, %.3g)",
              snn_dtype_name(xt), snn_dtype_name(yt), n, off, ef, eb, uy, ux);
    free(x), free(dy), free(y_ref), free(dx_ref), free(y), free(dx);
    dfree(d_x), dfree(d_dy), dfree(d_y), dfree(d_dx);
}

static void test_gelu_io(void) {
    static const snn_dtype ts[3] = {SNN_F32, SNN_BF16, SNN_F16};
    static const size_t cases[][2] = {{70001, 0}, {7, 0}, {4099, 1}};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 3; k++) gelu_io_case(ts[a], ts[b], cases[k][0], cases[k][1]);
    CHECK_MSG(gpu->gelu_forward_io(gpu, SNN_F8E4M3, SNN_F32, (void *)gpu, (void *)gpu, 4) == SNN_E_INVALID,
              "gelu_forward_io took an FP8 storage");
    CHECK(cpu->gelu_forward_io == NULL && cpu->gelu_backward_io == NULL);
}

/* LayerNorm with its output side stored 16-bit (layernorm_forward_io / _backward_io, before a
 * 16-bit Linear): y is the FP32 entry's y rounded, bit for bit; fed the widened 16-bit dy, the
 * FP32 entry gives the same dx, dw and db bit for bit. With dx_add (a residual's skip
 * gradient) dx is that plus the plain dx, one FP32 add, on both entries. */
static void test_layernorm_io(void) {
    static const snn_dtype ts[2] = {SNN_BF16, SNN_F16};
    const size_t V = 301;
    const int F = 768;
    const size_t n = V * (size_t)F;
    for (int k = 0; k < 2; k++) {
        const snn_dtype yt = ts[k];
        float *x = hnew(n, -3.0f, 3.0f), *w = hnew((size_t)F, 0.5f, 1.5f), *b = hnew((size_t)F, -0.5f, 0.5f);
        float *dy = hnew(n, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) dy[i] = store_round(yt, dy[i]);
        float *d_x = dnewf(x, n), *d_w = dnewf(w, (size_t)F), *d_b = dnewf(b, (size_t)F), *d_y = dnewf(NULL, n);
        double *d_mu = dnew(NULL, V * 8), *d_rs = dnew(NULL, V * 8);
        void *d_y16 = dnew(NULL, n * 2);
        OK(gpu->layernorm_forward(gpu, V, F, 1e-5f, d_x, d_w, d_b, d_y, d_mu, d_rs));
        OK(gpu->layernorm_forward_io(gpu, yt, V, F, 1e-5f, d_x, d_w, d_b, d_y16, d_mu, d_rs));
        float *y = downf(d_y, n), *y16 = down_typed(yt, d_y16, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += fbits(y16[i]) != fbits(store_round(yt, y[i]));
        CHECK_MSG(bad == 0, "layernorm_forward_io %s: %zu of %zu outputs are not the FP32 entry's rounded",
                  snn_dtype_name(yt), bad, n);
        void *d_dy16 = dnew_typed(yt, dy, n), *work = NULL;
        float *d_dy = dnewf(dy, n);
        OK(gpu->alloc(gpu, gpu->layernorm_work_bytes(gpu, V, F), &work));
        float *skip = hnew(n, -2.0f, 2.0f), *d_skip = dnewf(skip, n);
        float *g[4][3];
        for (int v = 0; v < 4; v++) { /* 0 FP32, 1 typed, 2 typed + dx_add, 3 FP32 + dx_add */
            float *d_dx = dnewf(NULL, n), *d_dw = dnewf(NULL, (size_t)F), *d_db = dnewf(NULL, (size_t)F);
            OK(gpu->fill(gpu, d_dw, 0.25f, (size_t)F));
            OK(gpu->fill(gpu, d_db, -0.25f, (size_t)F));
            if (v == 1 || v == 2)
                OK(gpu->layernorm_backward_io(gpu, yt, V, F, d_x, d_w, d_mu, d_rs, d_dy16, d_dx, v == 2 ? d_skip : NULL,
                                              d_dw, d_db, work));
            else
                OK(gpu->layernorm_backward(gpu, V, F, d_x, d_w, d_mu, d_rs, d_dy, d_dx, v == 3 ? d_skip : NULL, d_dw,
                                           d_db, work));
            g[v][0] = downf(d_dx, n), g[v][1] = downf(d_dw, (size_t)F), g[v][2] = downf(d_db, (size_t)F);
            dfree(d_dx), dfree(d_dw), dfree(d_db);
        }
        size_t first = 0;
        CHECK_MSG(mismatches(g[1][0], g[0][0], n, &first) == 0 && mismatches(g[1][1], g[0][1], (size_t)F, &first) == 0 &&
                      mismatches(g[1][2], g[0][2], (size_t)F, &first) == 0,
                  "layernorm_backward_io %s differs from the FP32 entry on the widened dy", snn_dtype_name(yt));
        float *sum = hpoisoned(n);
        for (size_t i = 0; i < n; i++) sum[i] = skip[i] + g[0][0][i];
        for (int v = 2; v < 4; v++)
            CHECK_MSG(mismatches(g[v][0], sum, n, &first) == 0 && mismatches(g[v][1], g[0][1], (size_t)F, &first) == 0 &&
                          mismatches(g[v][2], g[0][2], (size_t)F, &first) == 0,
                      "layernorm backward %s with dx_add (%s entry): not the skip gradient plus dx (first at %zu)",
                      snn_dtype_name(yt), v == 3 ? "FP32" : "typed", first);
        free(sum), free(skip), dfree(d_skip);
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < 3; j++) free(g[t][j]);
        free(x), free(w), free(b), free(dy), free(y), free(y16);
        dfree(d_x), dfree(d_w), dfree(d_b), dfree(d_y), dfree(d_mu), dfree(d_rs), dfree(d_y16), dfree(d_dy16),
            dfree(d_dy), dfree(work);
    }
    CHECK(cpu->layernorm_forward_io == NULL && cpu->layernorm_backward_io == NULL);
}

/* ------------------------------------------------------------------ reductions */

static void test_colsum(void) {
    /* from 1024 rows the lanes of a column group split over several blocks (the last one to
     * finish adds the tree): a GPT-2 bias (8192 x 768), a wide one with a row remainder, and
     * narrow ones; one after another, so each also checks that the counters were reset */
    static const struct { int rows, cols; } shapes[] = {{1, 1},     {1, 513},     {300, 77},   {1025, 3},
                                                        {37, 1},    {4096, 130},  {8192, 768}, {5000, 3072},
                                                        {2047, 2304}, {1024, 1}, {8192, 768}, {1500, 4500}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si].rows, cols = shapes[si].cols;
        const size_t n = (size_t)rows * cols;
        float *x = hnew(n, -2.0f, 2.0f), *out0 = hnew((size_t)cols, -1.0f, 1.0f);
        float *ref = (float *)xmalloc((size_t)cols * 4);
        memcpy(ref, out0, (size_t)cols * 4);
        OK(cpu->colsum_add(cpu, x, rows, cols, ref));
        float *d_x = dnewf(x, n), *d_o = dnewf(out0, (size_t)cols);
        OK(gpu->colsum_add(gpu, d_x, rows, cols, d_o));
        float *got = downf(d_o, (size_t)cols);
        /* one order on both tables (backend.h): the same bits; and that order is a sum (the
         * CPU's result within the rounding bound of a double sum) */
        char what[96];
        snprintf(what, sizeof what, "colsum_add %dx%d", rows, cols);
        CHECK_BITS(what, got, ref, (size_t)cols);
        int bad = 0;
        for (int j = 0; j < cols; j++) {
            double exact = (double)out0[j], mag = fabs((double)out0[j]);
            for (int i = 0; i < rows; i++) exact += (double)x[(size_t)i * cols + j], mag += fabs((double)x[(size_t)i * cols + j]);
            if (!(fabs((double)ref[j] - exact) <= 2.0 * (rows + 1) * U32 * mag)) bad++;
        }
        CHECK_MSG(bad == 0, "colsum_add %dx%d: %d columns outside the bound of the exact sum", rows, cols, bad);
        free(x), free(out0), free(ref), free(got);
        dfree(d_x), dfree(d_o);
    }
    float *d = dnewf(NULL, 4);
    CHECK(gpu->colsum_add(gpu, d, -1, 4, d) == SNN_E_INVALID);
    CHECK(gpu->colsum_add(gpu, NULL, 1, 4, d) == SNN_E_INVALID);
    dfree(d);
}

static void test_sumsq_nonfinite(void) {
    static const size_t sizes[] = {1, 5, 4097, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const size_t n = sizes[si];
        float *x = hnew(n, -3.0f, 3.0f);
        float *d_x = dnewf(x, n);
        double ref = NAN, got = NAN;
        OK(cpu->sumsq(cpu, x, n, &ref));
        OK(gpu->sumsq(gpu, d_x, n, &got));
        const double tol = 2.0 * (double)n * 0x1p-53 + 1e-15;
        CHECK_MSG(fabs(got - ref) <= tol * ref, "sumsq n=%zu: %.17g vs %.17g", n, got, ref);
        int fc = -1, fg = -1;
        OK(cpu->nonfinite(cpu, x, n, &fc));
        OK(gpu->nonfinite(gpu, d_x, n, &fg));
        CHECK_MSG(fc == 0 && fg == 0, "nonfinite on finite data: cpu %d gpu %d", fc, fg);
        /* one inf, then one NaN, at a random place */
        uint64_t r = rng;
        const size_t at = (size_t)((r >> 11) % n);
        for (int kind = 0; kind < 2; kind++) {
            float save = x[at];
            x[at] = kind ? NAN : -INFINITY;
            OK(gpu->upload(gpu, d_x + at, x + at, 4));
            OK(cpu->nonfinite(cpu, x, n, &fc));
            OK(gpu->nonfinite(gpu, d_x, n, &fg));
            CHECK_MSG(fc == 1 && fg == 1, "nonfinite (%s at %zu of %zu): cpu %d gpu %d", kind ? "NaN" : "inf", at, n,
                      fc, fg);
            x[at] = save;
            OK(gpu->upload(gpu, d_x + at, x + at, 4));
        }
        free(x);
        dfree(d_x);
    }
    double s;
    int f;
    CHECK(gpu->sumsq(gpu, NULL, 4, &s) == SNN_E_INVALID);
    CHECK(gpu->nonfinite(gpu, NULL, 4, &f) == SNN_E_INVALID);
    OK(gpu->sumsq(gpu, NULL, 0, &s));
    CHECK(s == 0.0);
}

/* ------------------------------------------------------------------ GEMM */

static float round_one(snn_dtype t, float v) { return t == SNN_F32 ? v : snn_round_to(t, v, 0); }

/* feed: what the GPU table gets. 0: operands the caller rounded (as the CPU table);
 * 1: unrounded FP32 operands (the table rounds them: gemm_rounds); 2: unrounded A and B as
 * 16-bit storage (b_store); 3: A and C 16-bit storage; 4: as 3 with the bias rounded and
 * stored 16-bit (bias_store, a 16-bit module's bias). The CPU reference always multiplies the
 * rounded operands. use_bias 2: the bias one element past a 16-byte boundary (no epilogue). */
static void gemm_case_fed(snn_dtype ab, snn_dtype cr, int ta, int tb, int M, int N, int K, int pad, int use_bias,
                          int use_beta, int feed) {
    const int ra = ta ? K : M, ca = ta ? M : K, rb = tb ? N : K, cb = tb ? K : N;
    const int lda = ca + pad, ldb = cb + (pad ? pad + 1 : 0), ldc = N + (pad ? 2 : 0);
    const size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)M * ldc;
    float *A = hnew(na, -1.0f, 1.0f), *B = hnew(nb, -1.0f, 1.0f), *C0 = hnew(nc, -1.0f, 1.0f);
    float *bias = hnew((size_t)N, -0.5f, 0.5f);
    if (feed == 4)
        for (int j = 0; j < N; j++) bias[j] = round_one(ab, bias[j]);
    float alpha, beta = 0.0f;
    snn_test_fill_uniform(&alpha, 1, 0.5f, 2.0f, &rng);
    if (use_beta) snn_test_fill_uniform(&beta, 1, -1.5f, 1.5f, &rng);
    float *A_raw = (float *)xmalloc(na * 4), *B_raw = (float *)xmalloc(nb * 4);
    memcpy(A_raw, A, na * 4);
    memcpy(B_raw, B, nb * 4);
    for (size_t i = 0; i < na; i++) A[i] = round_one(ab, A[i]); /* the caller's rounding */
    for (size_t i = 0; i < nb; i++) B[i] = round_one(ab, B[i]);
    if (!use_beta) memset(C0, 0xFF, nc * 4); /* beta 0: C must not be read */
    float *ref = (float *)xmalloc(nc * 4);
    memcpy(ref, C0, nc * 4);
    snn_gemm g;
    memset(&g, 0, sizeof g);
    g.trans_a = ta, g.trans_b = tb, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
    g.A = A, g.B = B, g.lda = lda, g.ldb = ldb, g.C = ref, g.ldc = ldc, g.ab_type = ab;
    g.bias = use_bias ? bias : NULL, g.c_round = cr;
    OK(cpu->gemm(cpu, &g));
    float *dA = dnewf(feed ? A_raw : A, na), *dB = dnewf(feed == 1 ? B_raw : B, nb), *dC = dnewf(C0, nc);
    float *dbias = dnewf(NULL, (size_t)N + 1);
    OK(gpu->upload(gpu, dbias + (use_bias == 2), bias, (size_t)N * 4));
    g.A = dA, g.B = dB, g.C = dC, g.bias = use_bias ? dbias + (use_bias == 2) : NULL;
    void *dB16 = NULL, *dA16 = NULL, *dC16 = NULL, *dbias16 = NULL;
    if (feed == 4 && use_bias) {
        OK(gpu->alloc(gpu, (size_t)N * 2 + 2, &dbias16));
        OK(gpu->cast(gpu, ab, (char *)dbias16 + 2 * (use_bias == 2), dbias + (use_bias == 2), (size_t)N));
        g.bias = (const float *)(const void *)((char *)dbias16 + 2 * (use_bias == 2));
        g.bias_store = ab;
    }
    if (feed >= 3) { /* A (unrounded on the way in) and C stored 16-bit; beta 0 */
        OK(gpu->alloc(gpu, na * 2 + 2, &dA16));
        OK(gpu->cast(gpu, ab, dA16, dA, na));
        g.A = (const float *)dA16;
        g.a_store = ab;
        OK(gpu->alloc(gpu, nc * 2 + 2, &dC16));
        OK(gpu->cast(gpu, ab, dC16, dC, nc)); /* C0 as 16-bit: its padding must stay */
        g.C = (float *)dC16;
        g.c_store = ab;
    }
    if (feed == 2) {
        OK(gpu->alloc(gpu, nb * 2, &dB16));
        OK(gpu->cast(gpu, ab, dB16, dB, nb)); /* B_raw rounded on the way in */
        g.B = (const float *)dB16;
        g.b_store = ab;
    }
    snn_status st = gpu->gemm(gpu, &g);
    CHECK_MSG(st == SNN_OK, "gemm: %s", snn_last_error());
    float *got = feed >= 3 ? down_typed(ab, dC16, nc) : downf(dC, nc);
    if (feed >= 3) /* the untouched padding compares with C0 as it was stored */
        for (size_t i = 0; i < nc; i++) C0[i] = snn_round_to(ab, C0[i], 0);
    const double ulp16 = cr == SNN_F16 ? 0x1p-10 : cr == SNN_BF16 ? 0x1p-7 : 0.0;
    const double sub16 = cr == SNN_F16 ? 0x1p-24 : 0.0; /* F16's subnormal spacing */
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double mag = 0;
            for (int k = 0; k < K; k++) {
                const double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                mag += fabs(a * b);
            }
            mag = fabs((double)alpha) * mag + (use_beta ? fabs((double)beta * C0[(size_t)i * ldc + j]) : 0.0) +
                  (use_bias ? fabs((double)bias[j]) : 0.0);
            const size_t p = (size_t)i * ldc + j;
            const double bound =
                4.0 * (K + 2) * U32 * mag * (1.0 + ulp16) + ulp16 * fabs((double)ref[p]) + sub16 + 1e-30;
            const double e = fabs((double)got[p] - (double)ref[p]);
            if (!(e <= bound)) bad++;
            if (e / bound > worst) worst = e / bound;
        }
    /* the padding of C is left alone (a 16-bit C: compared after the round trip through its
     * type, where any NaN stands for the poison) */
    size_t pad_bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) {
            const float a = got[(size_t)i * ldc + j], b = C0[(size_t)i * ldc + j];
            if (fbits(a) != fbits(b) && !(feed >= 3 && isnan(a) && isnan(b))) pad_bad++;
        }
    CHECK_MSG(bad == 0 && pad_bad == 0,
              "gemm ab=%s c_round=%s ta=%d tb=%d M=%d N=%d K=%d pad=%d bias=%d beta=%g feed=%d: %d outside the "
              "bound (worst %.3g of it), %zu padding values touched",
              snn_dtype_name(ab), snn_dtype_name(cr), ta, tb, M, N, K, pad, use_bias, (double)beta, feed, bad,
              worst, pad_bad);
    free(A), free(B), free(A_raw), free(B_raw), free(C0), free(bias), free(ref), free(got);
    dfree(dA), dfree(dB), dfree(dC), dfree(dbias);
    if (dB16) dfree(dB16);
    if (dA16) dfree(dA16);
    if (dC16) dfree(dC16);
    if (dbias16) dfree(dbias16);
}

static void gemm_case(snn_dtype ab, snn_dtype cr, int ta, int tb, int M, int N, int K, int pad, int use_bias,
                      int use_beta) {
    gemm_case_fed(ab, cr, ta, tb, M, N, K, pad, use_bias, use_beta, 0);
}

static void test_gemm(void) {
    static const struct { int M, N, K, pad; } shapes[] = {{1, 1, 1, 0}, {37, 53, 71, 3}, {5, 129, 33, 1},
                                                          {64, 40, 96, 0}, {130, 7, 257, 2}};
    static const snn_dtype abs_[] = {SNN_F32, SNN_F16, SNN_BF16};
    int ci = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ai = 0; ai < 3; ai++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++, ci++) {
                    const snn_dtype ab = abs_[ai];
                    /* c_round: none, or the operands' type, or the other 16-bit type */
                    const snn_dtype cr = ci % 3 == 0 ? SNN_F32 : ci % 3 == 1 ? (ab == SNN_F32 ? SNN_BF16 : ab)
                                                                           : (ab == SNN_F16 ? SNN_BF16 : SNN_F16);
                    gemm_case(ab, cr, ta, tb, shapes[si].M, shapes[si].N, shapes[si].K, shapes[si].pad, ci % 2,
                              (ci / 2) % 2);
                }
    /* the bias epilogue with K = 0: C = beta C + bias */
    gemm_case(SNN_F32, SNN_F32, 0, 0, 3, 5, 0, 1, 1, 1);
    /* the CUDA table rounds unrounded operands itself, takes a 16-bit B, and a bias that
     * cannot go to cuBLASLt's epilogue (not 16-byte aligned) */
    CHECK(gpu->gemm_rounds == 1 && cpu->gemm_rounds == 0);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ai = 1; ai < 3; ai++)
            for (int feed = 1; feed <= 2; feed++, ci++)
                gemm_case_fed(abs_[ai], ci % 2 ? abs_[ai] : SNN_F32, ci % 2, (ci / 2) % 2, shapes[si].M,
                              shapes[si].N, shapes[si].K, shapes[si].pad, 1 + (ci / 3) % 2, ci % 3 == 0, feed);
    gemm_case_fed(SNN_F32, SNN_F32, 0, 1, 37, 53, 71, 3, 2, 1, 0);
    /* 16-bit A and C (written once, rounded: the CPU's c_round = ab_type), with the bias in
     * the epilogue and not (unaligned) */
    for (size_t si = 1; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ai = 1; ai < 3; ai++, ci++)
            gemm_case_fed(abs_[ai], abs_[ai], ci % 2, (ci / 2) % 2, shapes[si].M, shapes[si].N, shapes[si].K,
                          shapes[si].pad, 1 + ci % 2, 0, 3);
    /* the same with the bias rounded and stored 16-bit (epilogue, and the unaligned kernel) */
    for (size_t si = 1; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ai = 1; ai < 3; ai++, ci++)
            gemm_case_fed(abs_[ai], abs_[ai], ci % 2, (ci / 2) % 2, shapes[si].M, shapes[si].N, shapes[si].K,
                          shapes[si].pad, 1 + ci % 2, 0, 4);
    /* refusals */
    float *d = dnewf(NULL, 64);
    snn_gemm g;
    memset(&g, 0, sizeof g);
    g.M = g.N = g.K = 4, g.lda = g.ldb = g.ldc = 4, g.alpha = 1.0f, g.A = d, g.B = NULL, g.C = d;
    CHECK(gpu->gemm(gpu, &g) == SNN_E_INVALID); /* NULL B */
    g.B = d, g.M = -1;
    CHECK(gpu->gemm(gpu, &g) == SNN_E_INVALID); /* negative M */
    g.M = 4, g.lda = 3;
    CHECK(gpu->gemm(gpu, &g) == SNN_E_SHAPE); /* lda < K */
    CHECK(gpu->gemm(gpu, NULL) == SNN_E_INVALID);
    CHECK(gpu->gemm_f32 == NULL);
    g.lda = 4, g.b_store = SNN_BF16; /* a 16-bit B needs 16-bit operands */
    CHECK(gpu->gemm(gpu, &g) == SNN_E_INVALID);
    CHECK(cpu->gemm(cpu, &g) == SNN_E_UNSUPPORTED);
    g.b_store = SNN_F32, g.bias = d, g.bias_store = SNN_BF16; /* a 16-bit bias needs a C of its type */
    CHECK(gpu->gemm(gpu, &g) == SNN_E_INVALID);
    CHECK(cpu->gemm(cpu, &g) == SNN_E_UNSUPPORTED);
    dfree(d);
}

/* ------------------------------------------------------------------ neurons (plain) */

static void neuron_plain_case(const snn_neuron_opts *o, float k, int T, size_t n) {
    const size_t N = (size_t)T * n;
    char desc[200];
    snprintf(desc, sizeof desc, "kind=%d decay=%d soft=%d detach=%d sg=%d alpha=%g vth=%g vr=%g k=%g T=%d n=%zu",
             (int)o->kind, o->decay_input, o->soft_reset, o->detach_reset, (int)o->surrogate, (double)o->alpha,
             (double)o->v_threshold, (double)o->v_reset, (double)k, T, n);
    float *x = hnew(N, -0.8f, 2.2f), *dy = hnew(N, -1.0f, 1.0f);
    float *y_ref = hpoisoned(N), *h_ref = hpoisoned(N), *vl_ref = hpoisoned(n), *dx_ref = hpoisoned(N);
    OK(cpu->neuron_forward(cpu, o, k, T, n, x, y_ref, h_ref, vl_ref));
    float *d_x = dnewf(x, N), *d_y = dnewf(NULL, N), *d_h = dnewf(NULL, N), *d_vl = dnewf(NULL, n);
    snn_status st = gpu->neuron_forward(gpu, o, k, T, n, d_x, d_y, d_h, d_vl);
    CHECK_MSG(st == SNN_OK, "neuron_forward (%s): %s", desc, snn_last_error());
    float *y = downf(d_y, N), *h = downf(d_h, N), *vl = downf(d_vl, n);
    char what[260];
    snprintf(what, sizeof what, "neuron spikes (%s)", desc);
    CHECK_BITS(what, y, y_ref, N);
    snprintf(what, sizeof what, "neuron h_seq (%s)", desc);
    CHECK_BITS(what, h, h_ref, N);
    snprintf(what, sizeof what, "neuron v_last (%s)", desc);
    CHECK_BITS(what, vl, vl_ref, n);
    /* inference: no h_seq */
    OK(gpu->neuron_forward(gpu, o, k, T, n, d_x, d_y, NULL, d_vl));
    free(y);
    y = downf(d_y, N);
    CHECK_BITS("neuron spikes without h_seq", y, y_ref, N);
    /* backward from the same stored h */
    double gk_ref = NAN, gk = NAN;
    const int want_k = o->kind != SNN_NEURON_IF;
    OK(cpu->neuron_backward(cpu, o, k, T, n, h_ref, dy, dx_ref, want_k ? &gk_ref : NULL));
    float *d_hr = dnewf(h_ref, N), *d_dy = dnewf(dy, N), *d_dx = dnewf(NULL, N);
    st = gpu->neuron_backward(gpu, o, k, T, n, d_hr, d_dy, d_dx, want_k ? &gk : NULL);
    CHECK_MSG(st == SNN_OK, "neuron_backward (%s): %s", desc, snn_last_error());
    float *dx = downf(d_dx, N);
    double e = normwise(dx, dx_ref, N);
    CHECK_MSG(e <= 2e-5, "neuron dx error %.3g (%s)", e, desc);
    if (want_k) {
        /* neuron_case.h's bound: |term| <= |gH| (|h| + |v_prev| + |V_r|) / k, |v_prev| <= 2 + |h| */
        double scale = 0, ck = o->decay_input ? (double)k : 1.0;
        for (size_t i = 0; i < N; i++) scale += fabs((double)dx_ref[i]) / ck * (2.0 * fabs((double)h_ref[i]) + 3.0);
        const double tolk = 1e-5 * scale / (double)k + 1e-6;
        CHECK_MSG(fabs(gk - gk_ref) <= tolk, "neuron dL/dk %.9g vs %.9g, bound %.3g (%s)", gk, gk_ref, tolk, desc);
        /* gk alone (dx NULL) */
        double gk2 = NAN;
        OK(gpu->neuron_backward(gpu, o, k, T, n, d_hr, d_dy, NULL, &gk2));
        CHECK_MSG(fabs(gk2 - gk_ref) <= tolk, "neuron dL/dk without dx %.9g vs %.9g (%s)", gk2, gk_ref, desc);
        /* the same call again: the same bits (the blocks' partials are summed in one order) */
        double gk3 = NAN;
        OK(gpu->neuron_backward(gpu, o, k, T, n, d_hr, d_dy, d_dx, &gk3));
        CHECK_MSG(memcmp(&gk3, &gk, sizeof gk) == 0, "neuron dL/dk %.17g then %.17g on the same call (%s)", gk, gk3,
                  desc);
    }
    free(x), free(dy), free(y_ref), free(h_ref), free(vl_ref), free(dx_ref), free(y), free(h), free(vl), free(dx);
    dfree(d_x), dfree(d_y), dfree(d_h), dfree(d_vl), dfree(d_hr), dfree(d_dy), dfree(d_dx);
}

/* The typed entries: x, spikes, dy and dx stored as io, h_seq FP32, against the plain CPU
 * entries on the same (rounded) values: spikes, h_seq and v_last bit for bit (no exp in the
 * forward), dx normwise 2e-5 plus the half ulp of its rounding to io, dL/dk as above. */
static void neuron_io_case(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io) {
    const size_t N = (size_t)T * n;
    char desc[200];
    snprintf(desc, sizeof desc, "io=%s kind=%d soft=%d detach=%d sg=%d T=%d n=%zu", snn_dtype_name(io), (int)o->kind,
             o->soft_reset, o->detach_reset, (int)o->surrogate, T, n);
    float *x = hnew(N, -0.8f, 2.2f), *dy = hnew(N, -1.0f, 1.0f);
    for (size_t i = 0; i < N; i++) x[i] = snn_round_to(io, x[i], 0), dy[i] = snn_round_to(io, dy[i], 0);
    float *y_ref = hpoisoned(N), *h_ref = hpoisoned(N), *vl_ref = hpoisoned(n), *dx_ref = hpoisoned(N);
    OK(cpu->neuron_forward(cpu, o, k, T, n, x, y_ref, h_ref, vl_ref));
    void *d_x = dnew_typed(io, x, N), *d_y = NULL;
    OK(gpu->alloc(gpu, N * 2 + 2, &d_y));
    OK(gpu->fill(gpu, (float *)d_y, NAN, N / 2));
    float *d_h = dnewf(NULL, N), *d_vl = dnewf(NULL, n);
    OK(gpu->fill(gpu, d_h, NAN, N));
    snn_status st = gpu->neuron_forward_io(gpu, o, k, T, n, io, d_x, d_y, d_h, d_vl);
    CHECK_MSG(st == SNN_OK, "neuron_forward_io (%s): %s", desc, snn_last_error());
    float *y = down_typed(io, d_y, N), *h = downf(d_h, N), *vl = downf(d_vl, n);
    char what[260];
    snprintf(what, sizeof what, "typed neuron spikes (%s)", desc);
    CHECK_BITS(what, y, y_ref, N);
    snprintf(what, sizeof what, "typed neuron h_seq (%s)", desc);
    CHECK_BITS(what, h, h_ref, N);
    snprintf(what, sizeof what, "typed neuron v_last (%s)", desc);
    CHECK_BITS(what, vl, vl_ref, n);
    double gk_ref = NAN, gk = NAN;
    const int want_k = o->kind == SNN_NEURON_PLIF;
    OK(cpu->neuron_backward(cpu, o, k, T, n, h_ref, dy, dx_ref, want_k ? &gk_ref : NULL));
    void *d_dy = dnew_typed(io, dy, N), *d_dx = NULL;
    OK(gpu->alloc(gpu, N * 2 + 2, &d_dx));
    OK(gpu->fill(gpu, (float *)d_dx, NAN, N / 2));
    st = gpu->neuron_backward_io(gpu, o, k, T, n, io, d_h, d_dy, d_dx, want_k ? &gk : NULL);
    CHECK_MSG(st == SNN_OK, "neuron_backward_io (%s): %s", desc, snn_last_error());
    float *dx = down_typed(io, d_dx, N);
    const double half_ulp = io == SNN_BF16 ? 0x1p-8 : 0x1p-11; /* unit roundoff: 8 / 11 significant bits */
    double e = normwise(dx, dx_ref, N);
    CHECK_MSG(e <= 2e-5 + 1.01 * half_ulp, "typed neuron dx error %.3g (%s)", e, desc);
    if (want_k) {
        double scale = 0, ck = o->decay_input ? (double)k : 1.0;
        for (size_t i = 0; i < N; i++) scale += fabs((double)dx_ref[i]) / ck * (2.0 * fabs((double)h_ref[i]) + 3.0);
        const double tolk = 1e-5 * scale / (double)k + 1e-6;
        CHECK_MSG(fabs(gk - gk_ref) <= tolk, "typed neuron dL/dk %.9g vs %.9g, bound %.3g (%s)", gk, gk_ref, tolk,
                  desc);
        double gk3 = NAN;
        OK(gpu->neuron_backward_io(gpu, o, k, T, n, io, d_h, d_dy, d_dx, &gk3));
        CHECK_MSG(memcmp(&gk3, &gk, sizeof gk) == 0, "typed neuron dL/dk %.17g then %.17g on the same call (%s)", gk,
                  gk3, desc);
    }
    free(x), free(dy), free(y_ref), free(h_ref), free(vl_ref), free(dx_ref), free(y), free(h), free(vl), free(dx);
    dfree(d_x), dfree(d_y), dfree(d_h), dfree(d_vl), dfree(d_dy), dfree(d_dx);
}

/* neuron_forward_io_bias: an FP32 product p and a bias, against the CPU on the Linear's
 * rounded output round_io(bias + p) (the CPU's converted Linear writes that value): spikes,
 * h_seq and v_last bit for bit. Shapes with n % 4 != 0 or a period of 1 take the narrow
 * kernel, the others the packed one. */
static void neuron_io_bias_case(const snn_neuron_opts *o, float k, int T, size_t n, size_t period, snn_dtype io,
                                snn_dtype sp) {
    const size_t N = (size_t)T * n;
    char desc[200];
    snprintf(desc, sizeof desc, "io=%s spikes=%s kind=%d soft=%d T=%d n=%zu period=%zu", snn_dtype_name(io),
             snn_dtype_name(sp), (int)o->kind, o->soft_reset, T, n, period);
    float *pp = hnew(N, -1.2f, 1.9f), *bias = hnew(period, -0.6f, 0.6f), *x = (float *)xmalloc(N * 4);
    for (size_t i = 0; i < N; i++) x[i] = snn_round_to(io, bias[i % period] + pp[i], 0);
    float *y_ref = hpoisoned(N), *h_ref = hpoisoned(N), *vl_ref = hpoisoned(n);
    OK(cpu->neuron_forward(cpu, o, k, T, n, x, y_ref, h_ref, vl_ref));
    float *d_p = dnewf(pp, N), *d_b = dnewf(bias, period), *d_h = dnewf(NULL, N), *d_vl = dnewf(NULL, n);
    void *d_y = NULL;
    OK(gpu->alloc(gpu, N * 4 + 4, &d_y));
    /* poison: every byte 0x7f (an E4M3 NaN; 3.4e38 as BF16 and FP32, never a spike) */
    const uint32_t pb = 0x7f7f7f7fu;
    float poison;
    memcpy(&poison, &pb, sizeof poison);
    OK(gpu->fill(gpu, (float *)d_y, poison, N));
    OK(gpu->fill(gpu, d_h, NAN, N));
    snn_status st = gpu->neuron_forward_io_bias(gpu, o, k, T, n, io, sp, d_p, d_b, period, d_y, d_h, d_vl);
    CHECK_MSG(st == SNN_OK, "neuron_forward_io_bias (%s): %s", desc, snn_last_error());
    float *y = down_store(sp, d_y, N), *h = downf(d_h, N), *vl = downf(d_vl, n);
    char what[260];
    snprintf(what, sizeof what, "biased typed neuron spikes (%s)", desc);
    CHECK_BITS(what, y, y_ref, N);
    snprintf(what, sizeof what, "biased typed neuron h_seq (%s)", desc);
    CHECK_BITS(what, h, h_ref, N);
    snprintf(what, sizeof what, "biased typed neuron v_last (%s)", desc);
    CHECK_BITS(what, vl, vl_ref, n);
    /* a period that does not divide n is refused */
    if (n > 1) CHECK(gpu->neuron_forward_io_bias(gpu, o, k, T, n, io, sp, d_p, d_b, n + 1, d_y, d_h, d_vl) != SNN_OK);
    /* spikes in E5M2 or F16 beside BF16 rounding are refused */
    CHECK(gpu->neuron_forward_io_bias(gpu, o, k, T, n, io, SNN_F8E5M2, d_p, d_b, period, d_y, d_h, d_vl) != SNN_OK);
    free(pp), free(bias), free(x), free(y_ref), free(h_ref), free(vl_ref), free(y), free(h), free(vl);
    dfree(d_p), dfree(d_b), dfree(d_h), dfree(d_vl), dfree(d_y);
}

static void test_neuron_io(void) {
    static const struct { int T; size_t n, period; } bshapes[] = {{1, 1, 1}, {7, 1003, 17}, {16, 4160, 520}, {4, 64, 64}};
    for (int kind = 0; kind < 3; kind++)
        for (int soft = 0; soft < 2; soft++)
            for (int s = 0; s < 4; s++) {
                snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
                o.soft_reset = soft;
                const float k = kind == 0 ? 1.0f : 0.35f + 0.1f * (float)s;
                const snn_dtype io = s % 2 ? SNN_F16 : SNN_BF16;
                /* spikes in io, FP32, or E4M3 codes (an FP8 Linear after the neuron) */
                const snn_dtype sp = (kind + soft + s) % 3 == 0 ? io : (kind + soft + s) % 3 == 1 ? SNN_F32 : SNN_F8E4M3;
                neuron_io_bias_case(&o, k, bshapes[s].T, bshapes[s].n, bshapes[s].period, io, sp);
            }
    CHECK(cpu->neuron_forward_io_bias == NULL);
    static const struct { int T; size_t n; } shapes[] = {{1, 1}, {7, 1003}, {16, 4160}, {4, 64}};
    int count = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int soft = 0; soft < 2; soft++)
            for (int sg = 0; sg < SNN_SG_COUNT; sg += 3, count++) {
                snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
                o.soft_reset = soft;
                o.detach_reset = count % 2;
                o.surrogate = (snn_surrogate_kind)sg;
                const float k = kind == 0 ? 1.0f : 0.3f + 0.05f * (float)(count % 7);
                const size_t s = (size_t)count % 4;
                neuron_io_case(&o, k, shapes[s].T, shapes[s].n, count % 2 ? SNN_F16 : SNN_BF16);
            }
    /* the CPU table has no typed storage */
    CHECK(cpu->neuron_forward_io == NULL && cpu->neuron_backward_io == NULL);
}

/* colsum16_add: the same sums of the stored 16-bit values, bit for bit against the CPU */
static void test_colsum16(void) {
    static const int shapes[][2] = {{1, 1}, {37, 129}, {4096, 17}, {8192, 768}, {3000, 3072}, {1031, 33}};
    for (int si = 0; si < 6; si++)
        for (int ti = 0; ti < 3; ti++) {
            /* E4M3: the spike codes an inference forward writes before an FP8 Linear (any code) */
            const snn_dtype t = ti == 2 ? SNN_F8E4M3 : ti ? SNN_F16 : SNN_BF16;
            const size_t es = snn_dtype_size(t);
            const int R = shapes[si][0], C = shapes[si][1];
            const size_t n = (size_t)R * C;
            float *x = hnew(n, -2.0f, 2.0f), *o0 = hnew((size_t)C, -1.0f, 1.0f);
            uint16_t *x16 = (uint16_t *)xmalloc(n * 2 + 2);
            OK(snn_convert(t, x16, SNN_F32, x, n, 1));
            OK(snn_convert(SNN_F32, x, t, x16, n, 0)); /* the stored values */
            float *ref = (float *)xmalloc((size_t)C * 4);
            memcpy(ref, o0, (size_t)C * 4);
            OK(cpu->colsum16_add(cpu, t, x16, R, C, ref));
            void *dx = NULL;
            OK(gpu->alloc(gpu, n * 2 + 2, &dx));
            OK(gpu->upload(gpu, dx, x16, n * es));
            float *dout = dnewf(o0, (size_t)C);
            OK(gpu->colsum16_add(gpu, t, dx, R, C, dout));
            float *got = downf(dout, (size_t)C);
            char what[96];
            snprintf(what, sizeof what, "colsum16_add %s %dx%d", snn_dtype_name(t), R, C);
            CHECK_BITS(what, got, ref, (size_t)C);
            int bad = 0;
            for (int j = 0; j < C; j++) {
                double exact = (double)o0[j], mag = fabs((double)o0[j]);
                for (int i = 0; i < R; i++) exact += (double)x[(size_t)i * C + j], mag += fabs((double)x[(size_t)i * C + j]);
                if (!(fabs((double)ref[j] - exact) <= 2.0 * (R + 1) * U32 * mag + 1e-30)) bad++;
            }
            CHECK_MSG(bad == 0, "colsum16_add %s %dx%d: %d columns outside the bound", snn_dtype_name(t), R, C, bad);
            free(x), free(o0), free(x16), free(ref), free(got);
            dfree(dx), dfree(dout);
        }
}

static void test_neuron_plain(void) {
    static const struct { int T; size_t n; } shapes[] = {{1, 1}, {7, 1003}, {16, 4160}, {3, 33}};
    int count = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int decay = 0; decay < (kind == 0 ? 1 : 2); decay++)
            for (int soft = 0; soft < 2; soft++)
                for (int detach = 0; detach < 2; detach++)
                    for (int sg = 0; sg < SNN_SG_COUNT; sg++, count++) {
                        snn_neuron_opts o = snn_neuron_defaults((snn_neuron_kind)kind);
                        o.decay_input = kind == 0 ? 1 : decay;
                        o.soft_reset = soft;
                        o.detach_reset = detach;
                        o.surrogate = (snn_surrogate_kind)sg;
                        o.alpha = (count % 3 == 0) ? 0.0f : 0.5f + 0.25f * (float)(count % 7);
                        o.v_reset = soft ? 0.0f : (count % 2 ? -0.25f : 0.0f);
                        o.v_threshold = count % 4 == 1 ? 0.75f : 1.0f;
                        const float k = kind == 0 ? 1.0f
                                        : kind == 1 ? 1.0f / (1.5f + (float)(count % 5))
                                                    : 0.35f + 0.05f * (float)(count % 4);
                        const int s = count % 4;
                        neuron_plain_case(&o, k, shapes[s].T, shapes[s].n);
                    }
    /* T = 0: v_last is the reset value; the backward has nothing to do, gk 0 */
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_PLIF);
    o.v_reset = -0.25f;
    float vref[5], *d_vl = dnewf(NULL, 5);
    memset(vref, 0xFF, sizeof vref);
    OK(cpu->neuron_forward(cpu, &o, 0.5f, 0, 5, NULL, NULL, NULL, vref));
    OK(gpu->neuron_forward(gpu, &o, 0.5f, 0, 5, NULL, NULL, NULL, d_vl));
    float *vl = downf(d_vl, 5);
    CHECK_BITS("neuron T=0 v_last", vl, vref, 5);
    double gk = NAN;
    OK(gpu->neuron_backward(gpu, &o, 0.5f, 0, 5, NULL, NULL, NULL, &gk));
    CHECK(gk == 0.0);
    free(vl);
    dfree(d_vl);
    /* refusals */
    float *d = dnewf(NULL, 16);
    CHECK(gpu->neuron_forward(gpu, &o, 0.5f, 2, 4, NULL, d, NULL, NULL) == SNN_E_INVALID);
    CHECK(gpu->neuron_forward(gpu, NULL, 0.5f, 2, 4, d, d, NULL, NULL) == SNN_E_INVALID);
    CHECK(gpu->neuron_backward(gpu, &o, 0.5f, 2, 4, NULL, d, d, NULL) == SNN_E_INVALID);
    CHECK(gpu->neuron_forward(gpu, &o, 0.5f, -1, 4, d, d, NULL, NULL) == SNN_E_INVALID);
    dfree(d);
}

/* ------------------------------------------------------------------ neurons (mixed) */

static int mp_valid(int S, int A) { return !((A == SNN_F8E4M3 || A == SNN_F8E5M2) && A != S); }

static void neuron_mp_case(const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype S, snn_dtype F,
                           snn_dtype B, int big_x, int use_dy, int want_h, int want_vl, int want_dx, int want_gk) {
    const size_t N = (size_t)T * n;
    char desc[260];
    snprintf(desc, sizeof desc, "%s T=%d n=%zu S=%s F=%s B=%s sg=%d soft=%d detach=%d decay=%d vth=%g vr=%g k=%g",
             snn_neuron_kind_name(o->kind), T, n, snn_dtype_name(S), snn_dtype_name(F), snn_dtype_name(B),
             (int)o->surrogate, o->soft_reset, o->detach_reset, o->decay_input, (double)o->v_threshold,
             (double)o->v_reset, (double)k);
    float *x = hnew(N, -0.8f, 2.2f), *dy = hnew(N, -1.0f, 1.0f);
    if (big_x) /* every 7th input large: FP16 fine, E4M3 storage saturates */
        for (size_t i = 0; i < N; i += 7) x[i] *= 300.0f;
    float *y_ref = hpoisoned(N), *h_ref = hpoisoned(N), *vl_ref = hpoisoned(n);
    snn_status st = cpu->neuron_forward_mp(cpu, o, k, T, n, S, F, x, y_ref, h_ref, vl_ref);
    CHECK_MSG(st == SNN_OK, "CPU forward_mp: %s (%s)", snn_last_error(), desc);
    float *d_x = dnewf(x, N), *d_y = dnewf(NULL, N), *d_h = dnewf(NULL, N), *d_vl = dnewf(NULL, n);
    st = gpu->neuron_forward_mp(gpu, o, k, T, n, S, F, d_x, d_y, want_h ? d_h : NULL, want_vl ? d_vl : NULL);
    CHECK_MSG(st == SNN_OK, "forward_mp: %s (%s)", snn_last_error(), desc);
    char what[320];
    float *y = downf(d_y, N), *h = downf(d_h, N), *vl = downf(d_vl, n);
    snprintf(what, sizeof what, "mp spikes (%s)", desc);
    CHECK_BITS(what, y, y_ref, N);
    if (want_h) {
        snprintf(what, sizeof what, "mp h_seq (%s)", desc);
        CHECK_BITS(what, h, h_ref, N);
    }
    if (want_vl) {
        snprintf(what, sizeof what, "mp v_last (%s)", desc);
        CHECK_BITS(what, vl, vl_ref, n);
    }
    float *dx_ref = hpoisoned(N);
    double gk_ref = NAN, gk;
    memset(&gk, 0xFF, sizeof gk);
    st = cpu->neuron_backward_mp(cpu, o, k, T, n, S, F, B, h_ref, use_dy ? dy : NULL, want_dx ? dx_ref : NULL,
                                 want_gk ? &gk_ref : NULL);
    CHECK_MSG(st == SNN_OK, "CPU backward_mp: %s (%s)", snn_last_error(), desc);
    float *d_hr = dnewf(h_ref, N), *d_dy = dnewf(dy, N), *d_dx = dnewf(NULL, N);
    st = gpu->neuron_backward_mp(gpu, o, k, T, n, S, F, B, d_hr, use_dy ? d_dy : NULL, want_dx ? d_dx : NULL,
                                 want_gk ? &gk : NULL);
    CHECK_MSG(st == SNN_OK, "backward_mp: %s (%s)", snn_last_error(), desc);
    if (want_dx) {
        float *dx = downf(d_dx, N);
        snprintf(what, sizeof what, "mp dx (%s)", desc);
        CHECK_BITS(what, dx, dx_ref, N);
        free(dx);
    }
    if (want_gk) {
        uint64_t a, b;
        memcpy(&a, &gk, 8);
        memcpy(&b, &gk_ref, 8);
        CHECK_MSG(!isnan(gk_ref) && a == b, "mp dL/dk: got %.17g ref %.17g (%s)", gk, gk_ref, desc);
    }
    free(x), free(dy), free(y_ref), free(h_ref), free(vl_ref), free(y), free(h), free(vl), free(dx_ref);
    dfree(d_x), dfree(d_y), dfree(d_h), dfree(d_vl), dfree(d_hr), dfree(d_dy), dfree(d_dx);
}

static void test_neuron_mp(void) {
    static const struct { int T; size_t n; } shapes[] = {{1, 1}, {5, 777}, {16, 257}, {3, 70001}};
    int ci = 0;
    for (int S = 0; S <= SNN_F8E5M2; S++)
        for (int F = 0; F <= SNN_F8E5M2; F++)
            for (int B = 0; B <= SNN_F8E5M2; B++) {
                if (!mp_valid(S, F) || !mp_valid(S, B)) continue;
                for (int si = 0; si < 4; si++, ci++) {
                    if (si == 3 && (B + F) % 3 != 0) continue; /* the large shape for a third of them */
                    const snn_neuron_kind kind = (snn_neuron_kind)(ci % 3);
                    snn_neuron_opts o = snn_neuron_defaults(kind);
                    o.surrogate = (snn_surrogate_kind)(ci % SNN_SG_COUNT);
                    o.soft_reset = (ci / 3) % 2;
                    o.detach_reset = (ci / 2) % 2;
                    o.decay_input = (ci / 5) % 2 == 0;
                    o.alpha = ci % 4 == 1 ? 3.0f : 0.0f;
                    o.v_threshold = ci % 3 == 2 ? 0.75f : 1.0f;
                    o.v_reset = ci % 4 == 3 ? -0.25f : 0.0f;
                    const float k = kind == SNN_NEURON_IF    ? 1.0f
                                    : kind == SNN_NEURON_LIF ? snn_neuron_lif_k(ci % 2 ? 3.0f : 2.0f)
                                                             : snn_plif_k(0.3f);
                    neuron_mp_case(&o, k, shapes[si].T, shapes[si].n, (snn_dtype)S, (snn_dtype)F, (snn_dtype)B,
                                   ci % 10 == 7, ci % 11 != 3, ci % 9 != 4, ci % 7 != 2, ci % 13 != 6, ci % 8 != 5);
                }
            }
    /* the dtype rules: the same status as the CPU table for every S, F, B (sizes 0) */
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    for (int S = 0; S <= SNN_F8E5M2 + 1; S++)
        for (int F = 0; F <= SNN_F8E5M2 + 1; F++) {
            snn_status cf = cpu->neuron_forward_mp(cpu, &o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F, NULL, NULL, NULL,
                                                   NULL);
            snn_status gf = gpu->neuron_forward_mp(gpu, &o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F, NULL, NULL, NULL,
                                                   NULL);
            CHECK_MSG(cf == gf, "forward_mp S=%d F=%d: CPU %d, CUDA %d", S, F, (int)cf, (int)gf);
            for (int B = 0; B <= SNN_F8E5M2 + 1; B++) {
                double g1, g2;
                snn_status cb = cpu->neuron_backward_mp(cpu, &o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F,
                                                        (snn_dtype)B, NULL, NULL, NULL, &g1);
                snn_status gb = gpu->neuron_backward_mp(gpu, &o, 0.5f, 1, 0, (snn_dtype)S, (snn_dtype)F,
                                                        (snn_dtype)B, NULL, NULL, NULL, &g2);
                CHECK_MSG(cb == gb, "backward_mp S=%d F=%d B=%d: CPU %d, CUDA %d", S, F, B, (int)cb, (int)gb);
            }
        }
    float *d = dnewf(NULL, 16);
    CHECK(gpu->neuron_forward_mp(gpu, &o, 0.5f, 2, 4, SNN_F16, SNN_F32, NULL, d, NULL, NULL) == SNN_E_INVALID);
    CHECK(gpu->neuron_backward_mp(gpu, &o, 0.5f, 2, 4, SNN_BF16, SNN_F32, SNN_F32, NULL, d, d, NULL) ==
          SNN_E_INVALID);
    dfree(d);
}

/* ------------------------------------------------------------------ RMSNorm */

static void test_rmsnorm(void) {
    static const struct { size_t V; int F; } shapes[] = {{1, 1}, {37, 7}, {300, 515}, {5, 2048}, {1000, 33}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const size_t V = shapes[si].V, F = (size_t)shapes[si].F, n = V * F;
        const float eps = si % 2 ? 1e-6f : 1e-5f;
        float *x = hnew(n, -2.0f, 2.0f), *w = hnew(F, 0.5f, 1.5f), *dy = hnew(n, -1.0f, 1.0f);
        float *dw0 = hnew(F, -0.5f, 0.5f);
        float *y_ref = hpoisoned(n), *dx_ref = hpoisoned(n), *dw_ref = (float *)xmalloc(F * 4);
        double *rstd_ref = (double *)xmalloc(V * 8), *rstd = (double *)xmalloc(V * 8);
        memcpy(dw_ref, dw0, F * 4);
        OK(cpu->rmsnorm_forward(cpu, V, (int)F, eps, x, w, y_ref, rstd_ref));
        OK(cpu->rmsnorm_backward(cpu, V, (int)F, x, w, rstd_ref, dy, dx_ref, dw_ref));
        float *d_x = dnewf(x, n), *d_w = dnewf(w, F), *d_y = dnewf(NULL, n), *d_dy = dnewf(dy, n);
        float *d_dx = dnewf(NULL, n), *d_dw = dnewf(dw0, F);
        double *d_rstd = (double *)dnew(NULL, V * 8);
        OK(gpu->rmsnorm_forward(gpu, V, (int)F, eps, d_x, d_w, d_y, d_rstd));
        float *y = downf(d_y, n);
        down(rstd, d_rstd, V * 8);
        double e = normwise(y, y_ref, n), er = 0;
        for (size_t v = 0; v < V; v++) {
            double r = fabs(rstd[v] - rstd_ref[v]) / rstd_ref[v];
            if (!(r <= er)) er = r; /* NaN sticks */
        }
        CHECK_MSG(e <= 2.5e-7, "rmsnorm y V=%zu F=%zu: error %.3g", V, F, e);
        CHECK_MSG(er <= 2.0 * (double)(F + 4) * 0x1p-53, "rmsnorm rstd V=%zu F=%zu: relative error %.3g", V, F, er);
        /* backward from the CPU's rstd, so only the summation orders differ */
        double *d_rr = (double *)dnew(rstd_ref, V * 8);
        OK(gpu->rmsnorm_backward(gpu, V, (int)F, d_x, d_w, d_rr, d_dy, d_dx, d_dw));
        float *dx = downf(d_dx, n), *dw = downf(d_dw, F);
        e = normwise(dx, dx_ref, n);
        CHECK_MSG(e <= 2.5e-7, "rmsnorm dx V=%zu F=%zu: error %.3g", V, F, e);
        e = normwise(dw, dw_ref, F);
        CHECK_MSG(e <= 5e-7, "rmsnorm dw V=%zu F=%zu: error %.3g", V, F, e);
        /* dx NULL: dw only (accumulates again) */
        float *dw_ref2 = (float *)xmalloc(F * 4);
        memcpy(dw_ref2, dw_ref, F * 4);
        OK(cpu->rmsnorm_backward(cpu, V, (int)F, x, w, rstd_ref, dy, NULL, dw_ref2));
        OK(gpu->upload(gpu, d_dw, dw_ref, F * 4));
        OK(gpu->rmsnorm_backward(gpu, V, (int)F, d_x, d_w, d_rr, d_dy, NULL, d_dw));
        free(dw);
        dw = downf(d_dw, F);
        e = normwise(dw, dw_ref2, F);
        CHECK_MSG(e <= 5e-7, "rmsnorm dw (no dx) V=%zu F=%zu: error %.3g", V, F, e);
        free(x), free(w), free(dy), free(dw0), free(y_ref), free(dx_ref), free(dw_ref), free(dw_ref2);
        free(rstd_ref), free(rstd), free(y), free(dx), free(dw);
        dfree(d_x), dfree(d_w), dfree(d_y), dfree(d_dy), dfree(d_dx), dfree(d_dw), dfree(d_rstd), dfree(d_rr);
    }
    float *d = dnewf(NULL, 16);
    CHECK(gpu->rmsnorm_forward(gpu, 2, 0, 1e-5f, d, d, d, (double *)d) == SNN_E_INVALID);
    CHECK(gpu->rmsnorm_forward(gpu, 2, 4, 1e-5f, d, NULL, d, (double *)d) == SNN_E_INVALID);
    CHECK(gpu->rmsnorm_backward(gpu, 2, 4, d, d, NULL, d, d, d) == SNN_E_INVALID);
    dfree(d);
}

/* ------------------------------------------------------------------ optimizers */

/* The step's scalars as src/optim/optimizer.c computes them (double, rounded once). */
static snn_optim_update make_update(int adam, int decoupled, double lr, double wd, double mom, double damp,
                                    int nesterov, int first, int t) {
    snn_optim_update u;
    memset(&u, 0, sizeof u);
    u.adam = adam;
    u.wd = (float)wd;
    u.gscale = 1.0f;
    if (!adam) {
        u.l2 = wd != 0;
        u.nlr = (float)(-lr);
        u.mom = (float)mom;
        u.keep = (float)(1.0 - damp);
        u.nesterov = nesterov;
        u.first = first;
        return u;
    }
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    u.l2 = !decoupled && wd != 0;
    u.decoupled = decoupled && wd != 0;
    u.fb1 = (float)b1;
    u.fc1 = (float)(1.0 - b1);
    u.fb2 = (float)b2;
    u.fc2 = (float)(1.0 - b2);
    u.neg_step = (float)(-lr / bc1);
    u.bc2_sqrt = (float)sqrt(bc2);
    u.eps = (float)eps;
    u.shrink = (float)(1.0 - lr * wd);
    return u;
}

static void optim_case(const char *name, const snn_optim_update *u, size_t n, int use_mask, int use_s0,
                       int inject_inf) {
    float *w = hnew(n, -1.0f, 1.0f), *g = hnew(n, -0.1f, 0.1f), *s0 = hnew(n, -0.05f, 0.05f);
    float *s1 = hnew(n, 0.0f, 0.01f);
    uint8_t *mask = (uint8_t *)xmalloc(n);
    for (size_t i = 0; i < n; i++) mask[i] = (uint8_t)((i * 7 + 3) % 5 < 3);
    if (inject_inf) g[n / 2] = INFINITY;
    float *dw = dnewf(w, n), *dg = dnewf(g, n), *ds0 = dnewf(s0, n), *ds1 = dnewf(s1, n);
    uint8_t *dm = (uint8_t *)dnew(mask, n);
    int bad_ref = -1, bad = -1;
    /* copies of the updated weights (snn_optim_copy), where n allows: a BF16 range with both
     * copies and an F16 range with the 16-bit one only, poisoned first */
    const int nc = n >= 1003 ? 2 : 0;
    const size_t c0 = n / 3, c1 = n - n / 2 - 5;
    uint16_t *h16[2] = {NULL, NULL};
    float *h32 = NULL;
    void *d16[2] = {NULL, NULL};
    float *d32 = NULL;
    snn_optim_copy hc[2], dc[2];
    if (nc) {
        h16[0] = (uint16_t *)xmalloc(c0 * 2), h16[1] = (uint16_t *)xmalloc(c1 * 2), h32 = (float *)xmalloc(c0 * 4);
        memset(h16[0], 0xff, c0 * 2), memset(h16[1], 0xff, c1 * 2), memset(h32, 0xff, c0 * 4);
        d16[0] = dnew(h16[0], c0 * 2), d16[1] = dnew(h16[1], c1 * 2), d32 = dnewf(h32, c0);
        hc[0] = (snn_optim_copy){.off = 1, .n = c0, .t = SNN_BF16, .dst16 = h16[0], .dst32 = h32};
        hc[1] = (snn_optim_copy){.off = n / 2, .n = c1, .t = SNN_F16, .dst16 = h16[1]};
        dc[0] = (snn_optim_copy){.off = 1, .n = c0, .t = SNN_BF16, .dst16 = d16[0], .dst32 = d32};
        dc[1] = (snn_optim_copy){.off = n / 2, .n = c1, .t = SNN_F16, .dst16 = d16[1]};
    }
    /* two steps: the second starts from the first's state (SGD: first = 0 on it) */
    for (int step = 0; step < 2; step++) {
        snn_optim_update us = *u;
        if (step == 1) us.first = 0;
        us.copies = nc ? hc : NULL;
        us.n_copies = nc;
        OK(cpu->optim_update(cpu, &us, n, w, g, use_s0 ? s0 : NULL, u->adam ? s1 : NULL, use_mask ? mask : NULL,
                             &bad_ref));
        us.copies = nc ? dc : NULL;
        snn_status st = gpu->optim_update(gpu, &us, n, dw, dg, use_s0 ? ds0 : NULL, u->adam ? ds1 : NULL,
                                          use_mask ? dm : NULL, &bad);
        CHECK_MSG(st == SNN_OK, "optim_update %s: %s", name, snn_last_error());
        CHECK_MSG(bad == bad_ref, "optim_update %s n=%zu step %d: nonfinite %d vs CPU %d", name, n, step, bad,
                  bad_ref);
    }
    char what[128];
    nan_ok = inject_inf; /* inf / inf: the GPU's NaN is not the CPU's bit pattern */
    float *got = downf(dw, n);
    snprintf(what, sizeof what, "optim %s n=%zu mask=%d w", name, n, use_mask);
    CHECK_BITS(what, got, w, n);
    free(got);
    if (use_s0) {
        got = downf(ds0, n);
        snprintf(what, sizeof what, "optim %s n=%zu mask=%d s0", name, n, use_mask);
        CHECK_BITS(what, got, s0, n);
        free(got);
    }
    if (u->adam) {
        got = downf(ds1, n);
        snprintf(what, sizeof what, "optim %s n=%zu mask=%d s1", name, n, use_mask);
        CHECK_BITS(what, got, s1, n);
        free(got);
    }
    if (nc) { /* the fused copies against the CPU's cast and round of the updated weights */
        uint16_t *g16 = (uint16_t *)xmalloc(c0 * 2);
        down(g16, d16[0], c0 * 2);
        CHECK_MSG(!memcmp(g16, h16[0], c0 * 2), "optim %s n=%zu: fused BF16 copy differs from the cast", name, n);
        free(g16);
        g16 = (uint16_t *)xmalloc(c1 * 2);
        down(g16, d16[1], c1 * 2);
        CHECK_MSG(!memcmp(g16, h16[1], c1 * 2), "optim %s n=%zu: fused F16 copy differs from the cast", name, n);
        free(g16);
        got = downf(d32, c0);
        snprintf(what, sizeof what, "optim %s n=%zu copy32", name, n);
        CHECK_BITS(what, got, h32, c0);
        free(got);
        free(h16[0]), free(h16[1]), free(h32);
        dfree(d16[0]), dfree(d16[1]), dfree(d32);
    }
    nan_ok = 0;
    free(w), free(g), free(s0), free(s1), free(mask);
    dfree(dw), dfree(dg), dfree(ds0), dfree(ds1), dfree(dm);
}

static void test_optim(void) {
    static const size_t sizes[] = {1, 1003, 65537};
    for (size_t si = 0; si < 3; si++) {
        const size_t n = sizes[si];
        for (int mask = 0; mask < 2; mask++) {
            snn_optim_update u = make_update(0, 0, 0.05, 0.0, 0.0, 0.0, 0, 1, 1);
            optim_case("sgd", &u, n, mask, 0, 0);
            u = make_update(0, 0, 0.05, 1e-3, 0.0, 0.0, 0, 1, 1);
            optim_case("sgd l2", &u, n, mask, 0, 0);
            u = make_update(0, 0, 0.1, 5e-4, 0.9, 0.0, 0, 1, 1);
            optim_case("sgd momentum", &u, n, mask, 1, 0);
            u = make_update(0, 0, 0.1, 5e-4, 0.9, 0.1, 0, 0, 1);
            optim_case("sgd momentum dampening", &u, n, mask, 1, 0);
            u = make_update(0, 0, 0.03, 1e-2, 0.8, 0.0, 1, 1, 1);
            optim_case("sgd nesterov", &u, n, mask, 1, 0);
            u = make_update(0, 0, 0.03, 1e-2, 0.8, 0.0, 1, 1, 1);
            optim_case("sgd momentum without buffer", &u, n, mask, 0, 0);
            u = make_update(1, 0, 1e-3, 0.0, 0, 0, 0, 0, 1);
            optim_case("adam", &u, n, mask, 1, 0);
            u = make_update(1, 0, 1e-3, 1e-2, 0, 0, 0, 0, 7);
            optim_case("adam l2", &u, n, mask, 1, 0);
            u = make_update(1, 1, 3e-4, 0.1, 0, 0, 0, 0, 3);
            optim_case("adamw", &u, n, mask, 1, 0);
            u = make_update(1, 1, 3e-4, 0.1, 0, 0, 0, 0, 3);
            optim_case("adamw inf gradient", &u, n, mask, 1, 1);
            u = make_update(0, 0, 0.1, 0.0, 0.9, 0.0, 0, 1, 1);
            optim_case("sgd inf gradient", &u, n, mask, 1, 1);
            /* the clip's coefficient inside the update */
            u = make_update(1, 1, 3e-4, 0.1, 0, 0, 0, 0, 3);
            u.gscale = 0.3712f;
            optim_case("adamw scaled gradient", &u, n, mask, 1, 0);
            u = make_update(0, 0, 0.1, 5e-4, 0.9, 0.1, 0, 0, 1);
            u.gscale = 0.0913f;
            optim_case("sgd momentum scaled gradient", &u, n, mask, 1, 0);
            u = make_update(0, 0, 0.05, 1e-3, 0.0, 0.0, 0, 1, 1);
            u.gscale = 0.61f;
            optim_case("sgd l2 scaled gradient", &u, n, mask, 0, 0);
        }
    }
    snn_optim_update u = make_update(1, 0, 1e-3, 0.0, 0, 0, 0, 0, 1);
    float *d = dnewf(NULL, 16);
    int bad;
    CHECK(gpu->optim_update(gpu, &u, 4, NULL, d, d, d, NULL, &bad) == SNN_E_INVALID);
    CHECK(gpu->optim_update(gpu, &u, 4, d, d, d, NULL, NULL, &bad) == SNN_E_INVALID); /* Adam without v */
    CHECK(gpu->optim_update(gpu, NULL, 4, d, d, d, d, NULL, &bad) == SNN_E_INVALID);
    /* copies outside the weights, overlapping, or of another type are refused */
    snn_optim_copy bc[2] = {{.off = 2, .n = 3, .t = SNN_BF16, .dst16 = d}, {.off = 0, .n = 1, .t = SNN_BF16, .dst16 = d}};
    u.copies = bc;
    u.n_copies = 1;
    CHECK(gpu->optim_update(gpu, &u, 4, d, d, d, d, NULL, &bad) == SNN_E_INVALID);
    CHECK(cpu->optim_update(cpu, &u, 4, d, d, d, d, NULL, &bad) == SNN_E_INVALID);
    bc[0].n = 2;
    u.n_copies = 2; /* not sorted */
    CHECK(gpu->optim_update(gpu, &u, 4, d, d, d, d, NULL, &bad) == SNN_E_INVALID);
    bc[0].t = SNN_F32;
    u.n_copies = 1;
    CHECK(gpu->optim_update(gpu, &u, 4, d, d, d, d, NULL, &bad) == SNN_E_INVALID);
    dfree(d);
}

/* ------------------------------------------------------------------ FP8 */

/* x [rows][cols] over a wide dynamic range (|x| from ~2^-40 to ~2^20: E4M3 and E5M2
 * subnormals, saturation), with zero blocks: row 1 (1x128, 1x32 blocks), column 2 (128x1,
 * 32x1) and the 128x128 tile at (128, 128) where the shape has one (partial too). special:
 * 1 a NaN, 2 a NaN and an inf (the amax becomes inf). */
static float *fp8_input(int rows, int cols, int special) {
    const size_t n = (size_t)rows * (size_t)cols;
    float *x = hnew(n, -1.0f, 1.0f), *e = hnew(n, -40.0f, 21.0f);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)floorf(e[i]));
    free(e);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            if ((rows > 1 && r == 1) || (cols > 2 && c == 2) || (r >= 128 && r < 256 && c >= 128 && c < 256))
                x[(size_t)r * cols + c] = 0.0f;
    if (special >= 1) x[n / 3] = NAN;
    if (special >= 2) x[n / 2 + (n > 1)] = (n & 1) ? INFINITY : -INFINITY;
    return x;
}

/* One fp8_qdq descriptor on both tables: out bit for bit (a NaN matches a NaN: payloads),
 * amax bit for bit. q->x / q->out are filled in here. */
static void fp8_case(const char *what, snn_fp8_qdq q, const float *x, const float *d_x) {
    const size_t n = (size_t)q.rows * (size_t)q.cols;
    float *ref = hpoisoned(n), *d_out = dnewf(NULL, n);
    float amax_ref = NAN, amax_got = NAN;
    q.x = x;
    q.out = ref;
    OK(cpu->fp8_qdq(cpu, &q, &amax_ref));
    q.x = d_x;
    q.out = d_out;
    OK(gpu->fp8_qdq(gpu, &q, &amax_got));
    float *got = downf(d_out, n);
    nan_ok = 1;
    CHECK_BITS(what, got, ref, n);
    nan_ok = 0;
    CHECK_MSG(fbits(amax_got) == fbits(amax_ref), "%s: amax %a vs %a", what, (double)amax_got, (double)amax_ref);
    free(ref);
    free(got);
    dfree(d_out);
}

static void test_fp8_qdq(void) {
    static const int shapes[][2] = {{130, 259}, {1, 1}, {257, 33}, {1, 300}, {300, 1}, {256, 256}};
    static const snn_dtype fmts[] = {SNN_F8E4M3, SNN_F8E5M2};
    /* block recipes: rows x cols of a block (block: 1x128, 128x1, 128x128; mxfp8: 1x32, 32x1) */
    static const int blocks[][3] = {{SNN_FP8_RECIPE_BLOCK, 1, 128},  {SNN_FP8_RECIPE_BLOCK, 128, 1},
                                    {SNN_FP8_RECIPE_BLOCK, 128, 128}, {SNN_FP8_RECIPE_MXFP8, 1, 32},
                                    {SNN_FP8_RECIPE_MXFP8, 32, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0], cols = shapes[si][1];
        const size_t n = (size_t)rows * (size_t)cols;
        for (int special = 0; special < 3; special++) {
            float *x = fp8_input(rows, cols, special);
            float *d_x = dnewf(x, n);
            for (int fi = 0; fi < 2; fi++) {
                char what[160];
                snn_fp8_qdq q;
                memset(&q, 0, sizeof q);
                q.fp8 = fmts[fi];
                q.rows = rows;
                q.cols = cols;
                q.hp_dtype = SNN_F32;
                /* delayed: scale 1; a non-power-of-two scale; 2^20, where most values saturate */
                static const float dscales[] = {1.0f, 3.3f, 0x1p20f};
                for (int k = 0; k < 3; k++) {
                    q.recipe = SNN_FP8_RECIPE_DELAYED;
                    q.scale = dscales[k];
                    q.scale_inv = 1.0f / dscales[k];
                    snprintf(what, sizeof what, "fp8_qdq delayed %s s=%g %dx%d special=%d", snn_dtype_name(q.fp8),
                             (double)q.scale, rows, cols, special);
                    fp8_case(what, q, x, d_x);
                }
                for (int pow2 = 0; pow2 < 2; pow2++) {
                    q.recipe = SNN_FP8_RECIPE_CURRENT;
                    q.pow2 = pow2;
                    snprintf(what, sizeof what, "fp8_qdq current %s pow2=%d %dx%d special=%d", snn_dtype_name(q.fp8),
                             pow2, rows, cols, special);
                    fp8_case(what, q, x, d_x);
                }
                for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                    for (int pow2 = 0; pow2 < 2; pow2++) {
                        for (int hp = 0; hp < 2; hp++) {
                            q.recipe = (snn_fp8_recipe)blocks[bi][0];
                            q.block_rows = blocks[bi][1];
                            q.block_cols = blocks[bi][2];
                            q.pow2 = pow2;
                            q.hp_dtype = hp ? SNN_BF16 : SNN_F32;
                            snprintf(what, sizeof what, "fp8_qdq %s %dx%d %s pow2=%d hp=%s %dx%d special=%d",
                                     q.recipe == SNN_FP8_RECIPE_MXFP8 ? "mxfp8" : "block", q.block_rows,
                                     q.block_cols, snn_dtype_name(q.fp8), pow2, snn_dtype_name(q.hp_dtype), rows,
                                     cols, special);
                            fp8_case(what, q, x, d_x);
                        }
                    }
                }
            }
            dfree(d_x);
            free(x);
        }
    }
    /* all-tiny input (block and mxfp8 scales at their extremes: a subnormal amax makes the
     * block scale infinite -> the hp_dtype's max, the E8M0 scale 2^-127) */
    {
        const int rows = 64, cols = 96;
        const size_t n = (size_t)rows * cols;
        float *x = hnew(n, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], -140 + (int)(i % 12));
        float *d_x = dnewf(x, n);
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            for (int fi = 0; fi < 2; fi++) {
                snn_fp8_qdq q;
                memset(&q, 0, sizeof q);
                q.recipe = (snn_fp8_recipe)blocks[bi][0];
                q.fp8 = fmts[fi];
                q.rows = rows;
                q.cols = cols;
                q.block_rows = blocks[bi][1];
                q.block_cols = blocks[bi][2];
                q.hp_dtype = SNN_F32;
                char what[128];
                snprintf(what, sizeof what, "fp8_qdq tiny %dx%d %s", q.block_rows, q.block_cols,
                         snn_dtype_name(q.fp8));
                fp8_case(what, q, x, d_x);
            }
        }
        dfree(d_x);
        free(x);
    }
    /* refusals (as the CPU's) and empty tensors */
    float *d = dnewf(NULL, 16);
    float a = 0.0f;
    snn_fp8_qdq q;
    memset(&q, 0, sizeof q);
    q.recipe = SNN_FP8_RECIPE_CURRENT;
    q.fp8 = SNN_F8E4M3;
    q.rows = 4;
    q.cols = 4;
    q.x = d;
    q.out = d;
    CHECK(gpu->fp8_qdq(gpu, NULL, &a) == SNN_E_INVALID);
    CHECK(gpu->fp8_qdq(gpu, &q, NULL) == SNN_E_INVALID);
    snn_fp8_qdq b = q;
    b.x = NULL;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b = q;
    b.rows = -1;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b = q;
    b.fp8 = SNN_F16;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b = q;
    b.recipe = SNN_FP8_RECIPE_AUTO;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b = q;
    b.recipe = SNN_FP8_RECIPE_BLOCK;
    b.block_rows = 0;
    b.block_cols = 128;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b.recipe = SNN_FP8_RECIPE_MXFP8;
    b.block_rows = 1;
    b.block_cols = -32;
    CHECK(gpu->fp8_qdq(gpu, &b, &a) == SNN_E_INVALID);
    b = q;
    b.rows = 0;
    b.x = NULL;
    b.out = NULL;
    a = NAN;
    OK(gpu->fp8_qdq(gpu, &b, &a));
    CHECK(a == 0.0f);
    b.recipe = SNN_FP8_RECIPE_MXFP8;
    b.block_rows = 1;
    b.block_cols = 32;
    a = NAN;
    OK(gpu->fp8_qdq(gpu, &b, &a));
    CHECK(a == 0.0f);
    dfree(d);
}

int main(void) {
    snn_status st = snn_backend_cuda_create(0, &gpu);
    if (st != SNN_OK) {
        fprintf(stderr, "test_cuda_backend: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    cpu = snn_backend_cpu();
    rng = snn_test_seed();
    CHECK(gpu->device == SNN_DEVICE_CUDA && gpu->ctx != NULL && strcmp(gpu->name, "cuda") == 0);
    test_memory();
    test_round_scale();
    test_gelu();
    test_gelu_io();
    test_layernorm_io();
    test_colsum();
    test_sumsq_nonfinite();
    test_gemm();
    test_colsum16();
    test_neuron_io();
    test_neuron_plain();
    test_neuron_mp();
    test_rmsnorm();
    test_optim();
    test_fp8_qdq();
    OK(gpu->synchronize(gpu));
    snn_backend_cuda_destroy(gpu);
    return snn_test_finish("test_cuda_backend");
}
