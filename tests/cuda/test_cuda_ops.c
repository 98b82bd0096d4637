/* GPU elementwise/reduction kernels vs CPU references: conversions (bitwise against
 * src/core/dtype.c), amax (NaN ignored), FP8 quantisation with transpose (bitwise), byte
 * transpose, bias add, column sums, cross-entropy on the mean over T (double reference),
 * SGD momentum with FP32 masters (double reference of PyTorch's rule), random fill.
 * Outputs are poisoned first. Exit 77 without a GPU. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/cuda.h"
#include "snn/dtype.h"

#include "cuda_test_util.h"


static void test_convert(void) {
    const size_t n = 5003;
    float *x = (float *)xmalloc(n * 4), *xs = (float *)xmalloc(n * 4);
    snn_test_fill_uniform(x, n, -300.0f, 300.0f, &rng);
    x[0] = 1e6f; /* saturates everywhere */
    x[1] = -7e4f;
    x[2] = 3e-6f; /* subnormal in f16 and the FP8 types */
    float scale = 3.0f;
    for (size_t i = 0; i < n; i++) xs[i] = x[i] * scale;
    void *dx = dcopy(x, n * 4), *ds = dcopy(&scale, 4);
    static const snn_dtype ts[] = {SNN_BF16, SNN_F16, SNN_F8E4M3, SNN_F8E5M2};
    for (int k = 0; k < 4; k++) {
        size_t es = snn_dtype_size(ts[k]);
        void *dy = dalloc(n * es), *y = xmalloc(n * es), *want = xmalloc(n * es);
        OK(snn_cuda_convert(g, ts[k], dy, SNN_F32, dx, n, ds, SNN_CONVERT_SATURATE));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, y, dy, n * es);
        snn_convert(ts[k], want, SNN_F32, xs, n, SNN_CONVERT_SATURATE);
        CHECK_MSG(!memcmp(y, want, n * es), "convert f32 -> %s (saturating) differs",
                  snn_dtype_name(ts[k]));
        /* and back to f32: exact widening */
        float *back = (float *)xmalloc(n * 4), *bw = (float *)xmalloc(n * 4);
        void *db = dalloc(n * 4);
        OK(snn_cuda_convert(g, SNN_F32, db, ts[k], dy, n, NULL, 0));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, back, db, n * 4);
        snn_convert(SNN_F32, bw, ts[k], want, n, 0);
        CHECK_MSG(!memcmp(back, bw, n * 4), "convert %s -> f32 differs", snn_dtype_name(ts[k]));
        snn_cuda_free(dy);
        snn_cuda_free(db);
        free(y); free(want); free(back); free(bw);
    }
    /* non-saturating 16-bit narrowing overflows to inf */
    void *dy = dalloc(n * 2);
    uint16_t *y = (uint16_t *)xmalloc(n * 2), *want = (uint16_t *)xmalloc(n * 2);
    OK(snn_cuda_convert(g, SNN_F16, dy, SNN_F32, dx, n, NULL, 0));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, y, dy, n * 2);
    snn_convert(SNN_F16, want, SNN_F32, x, n, 0);
    CHECK_MSG(!memcmp(y, want, n * 2), "convert f32 -> f16 (overflow to inf) differs");
    snn_cuda_free(dy);
    snn_cuda_free(dx);
    snn_cuda_free(ds);
    free(x); free(xs); free(y); free(want);
}

static void test_amax_quantize(void) {
    const int rows = 37, cols = 70;
    const size_t n = (size_t)rows * cols;
    float *x = (float *)xmalloc(n * 4);
    snn_test_fill_uniform(x, n, -5.0f, 5.0f, &rng);
    x[17] = NAN;
    x[18] = -11.5f;
    float m = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) m = fmaxf(m, fabsf(x[i]));
    void *dx = dcopy(x, n * 4);
    float *dam = (float *)dalloc(8);
    snn_cuda_memset(g, dam, 0, 8);
    OK(snn_cuda_amax(g, SNN_F32, dx, n, dam));
    float am = -1;
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, &am, dam, 4);
    CHECK_MSG(am == m, "amax %g, want %g (NaN ignored)", (double)am, (double)m);
    x[17] = 0.25f; /* the quantised tensors below need no NaN */
    snn_cuda_upload(g, dx, x, n * 4);
    for (int k = 0; k < 2; k++) {
        snn_dtype qt = k ? SNN_F8E5M2 : SNN_F8E4M3;
        float fmax8 = k ? 57344.0f : 448.0f;
        void *dq = dalloc(n), *dqt = dalloc(n);
        uint8_t *q = (uint8_t *)xmalloc(n), *qtr = (uint8_t *)xmalloc(n), *want = (uint8_t *)xmalloc(n);
        OK(snn_cuda_quantize_fp8(g, qt, dq, dqt, SNN_F32, dx, rows, cols, dam, dam + 1));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, q, dq, n);
        snn_cuda_download(g, qtr, dqt, n);
        float sinv;
        snn_cuda_download(g, &sinv, dam + 1, 4);
        float s = fmax8 / m;
        float *xs = (float *)xmalloc(n * 4);
        for (size_t i = 0; i < n; i++) xs[i] = x[i] * s;
        snn_convert(qt, want, SNN_F32, xs, n, SNN_CONVERT_SATURATE);
        CHECK_MSG(!memcmp(q, want, n), "quantize %s differs", snn_dtype_name(qt));
        size_t bad = 0;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                if (qtr[(size_t)c * rows + r] != want[(size_t)r * cols + c]) bad++;
        CHECK_MSG(bad == 0, "transposed quantize %s: %zu differ", snn_dtype_name(qt), bad);
        CHECK_MSG(sinv == 1.0f / s, "scale_inv %g, want %g", (double)sinv, (double)(1.0f / s));
        snn_cuda_free(dq);
        snn_cuda_free(dqt);
        free(q); free(qtr); free(want); free(xs);
    }
    /* amax 0 (an all-zero tensor): scale 1 */
    float zero = 0;
    snn_cuda_upload(g, dam, &zero, 4);
    void *dq = dalloc(n);
    OK(snn_cuda_quantize_fp8(g, SNN_F8E4M3, dq, NULL, SNN_F32, dx, rows, cols, dam, dam + 1));
    float sinv = 0;
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, &sinv, dam + 1, 4);
    CHECK_MSG(sinv == 1.0f, "amax 0 should give scale 1, scale_inv %g", (double)sinv);
    snn_cuda_free(dq);
    snn_cuda_free(dx);
    snn_cuda_free(dam);
    free(x);
}

static void test_transpose(void) {
    static const int sz[][2] = {{37, 70}, {64, 128}, {128, 4}, {200, 333}, {4096, 64}};
    for (int k = 0; k < 5; k++) {
        int r = sz[k][0], c = sz[k][1];
        size_t n = (size_t)r * c;
        uint8_t *x = (uint8_t *)xmalloc(n), *y = (uint8_t *)xmalloc(n);
        for (size_t i = 0; i < n; i++) x[i] = (uint8_t)((i * 2654435761u) >> 13);
        void *dx = dcopy(x, n), *dy = dalloc(n);
        OK(snn_cuda_transpose_u8(g, dy, dx, r, c));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, y, dy, n);
        size_t bad = 0;
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++)
                if (y[(size_t)j * r + i] != x[(size_t)i * c + j]) bad++;
        CHECK_MSG(bad == 0, "transpose %dx%d: %zu bytes differ", r, c, bad);
        snn_cuda_free(dx);
        snn_cuda_free(dy);
        free(x); free(y);
    }
}

static void test_bias_colsum(void) {
    const int rows = 300, cols = 77;
    const size_t n = (size_t)rows * cols;
    float *x = (float *)xmalloc(n * 4), *b = (float *)xmalloc(cols * 4), *y = (float *)xmalloc(n * 4);
    snn_test_fill_uniform(x, n, -2.0f, 2.0f, &rng);
    snn_test_fill_uniform(b, cols, -1.0f, 1.0f, &rng);
    /* bf16 bias add: bf16(float(x) + b), exact */
    uint16_t *xb = (uint16_t *)xmalloc(n * 2), *yb = (uint16_t *)xmalloc(n * 2);
    snn_convert(SNN_BF16, xb, SNN_F32, x, n, 0);
    void *dxb = dcopy(xb, n * 2), *dbias = dcopy(b, cols * 4);
    OK(snn_cuda_bias_add(g, SNN_BF16, dxb, (const float *)dbias, rows, cols));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, yb, dxb, n * 2);
    float *xf = (float *)xmalloc(n * 4);
    snn_convert(SNN_F32, xf, SNN_BF16, xb, n, 0);
    for (size_t i = 0; i < n; i++) xf[i] += b[i % cols];
    snn_convert(SNN_BF16, xb, SNN_F32, xf, n, 0);
    CHECK_MSG(!memcmp(xb, yb, n * 2), "bf16 bias_add differs");
    /* f32 column sums with accumulation into out */
    void *dx = dcopy(x, n * 4);
    float *out0 = (float *)xmalloc(cols * 4), *out = (float *)xmalloc(cols * 4);
    float *ref = (float *)xmalloc(cols * 4);
    snn_test_fill_uniform(out0, cols, -1.0f, 1.0f, &rng);
    for (int beta = 0; beta < 2; beta++) {
        float *dout = (float *)dcopy(out0, cols * 4);
        OK(snn_cuda_colsum(g, SNN_F32, dx, rows, cols, (float)beta, dout));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, out, dout, cols * 4);
        for (int j = 0; j < cols; j++) {
            double s = beta ? out0[j] : 0.0;
            for (int i = 0; i < rows; i++) s += x[(size_t)i * cols + j];
            ref[j] = (float)s;
        }
        double e = snn_test_max_rel(out, ref, cols, 1.0);
        CHECK_MSG(e < 1e-5, "colsum (beta %d) error %.3g", beta, e);
        snn_cuda_free(dout);
    }
    snn_cuda_free(dxb); snn_cuda_free(dbias); snn_cuda_free(dx);
    free(x); free(b); free(y); free(xb); free(yb); free(xf); free(out0); free(out); free(ref);
}

static void test_ce(void) {
    const int T = 5, B = 7, C = 13;
    const size_t n = (size_t)T * B * C;
    float *lg = (float *)xmalloc(n * 4), *bias = (float *)xmalloc(C * 4);
    int32_t lab[7];
    snn_test_fill_uniform(lg, n, -3.0f, 3.0f, &rng);
    snn_test_fill_uniform(bias, C, -1.0f, 1.0f, &rng);
    for (int b = 0; b < B; b++) lab[b] = (int32_t)((b * 5 + 3) % C);
    double loss_ref = 0;
    float *dref = (float *)xmalloc(n * 4);
    const float gscale = 128.0f;
    for (int b = 0; b < B; b++) {
        double m[13], mx = -1e300, se = 0;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += lg[((size_t)t * B + b) * C + c];
            m[c] = s / T + bias[c];
            if (m[c] > mx) mx = m[c];
        }
        for (int c = 0; c < C; c++) se += exp(m[c] - mx);
        double lse = mx + log(se);
        loss_ref += (lse - m[lab[b]]) / B;
        for (int c = 0; c < C; c++) {
            double d = (exp(m[c] - lse) - (c == lab[b])) * gscale / ((double)B * T);
            for (int t = 0; t < T; t++) dref[((size_t)t * B + b) * C + c] = (float)d;
        }
    }
    void *dl = dcopy(lg, n * 4), *db = dcopy(bias, C * 4), *dlab = dcopy(lab, sizeof lab);
    float *dloss = (float *)dalloc(4), *dwork = (float *)dalloc(B * 4);
    static const snn_dtype dts[] = {SNN_F32, SNN_BF16};
    for (int k = 0; k < 2; k++) {
        size_t es = snn_dtype_size(dts[k]);
        void *dd = dalloc(n * es), *hd = xmalloc(n * es);
        float *got = (float *)xmalloc(n * 4), loss = NAN;
        OK(snn_cuda_ce_mean_t(g, T, B, C, (const float *)dl, (const float *)db,
                              (const int32_t *)dlab, dloss, dwork, dts[k], dd, gscale));
        OK(snn_cuda_synchronize(g));
        snn_cuda_download(g, hd, dd, n * es);
        snn_cuda_download(g, &loss, dloss, 4);
        snn_convert(SNN_F32, got, dts[k], hd, n, 0);
        double e = 0, mref = 0;
        for (size_t i = 0; i < n; i++) {
            e = fmax(e, isnan(got[i]) ? INFINITY : fabs(got[i] - dref[i]));
            mref = fmax(mref, fabs(dref[i]));
        }
        double tol = k ? 8e-3 : 1e-5;
        CHECK_MSG(e / mref <= tol, "CE dlogits (%s) error %.3g", snn_dtype_name(dts[k]), e / mref);
        CHECK_MSG(fabs(loss - loss_ref) <= 1e-5 * fabs(loss_ref), "CE loss %.8g vs %.8g",
                  (double)loss, loss_ref);
        snn_cuda_free(dd);
        free(hd); free(got);
    }
    /* an out-of-range label gives a NaN loss rather than a read out of bounds */
    lab[3] = C;
    snn_cuda_upload(g, dlab, lab, sizeof lab);
    void *dd = dalloc(n * 4);
    float loss = 0;
    OK(snn_cuda_ce_mean_t(g, T, B, C, (const float *)dl, NULL, (const int32_t *)dlab, dloss, dwork,
                          SNN_F32, dd, 1.0f));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, &loss, dloss, 4);
    CHECK_MSG(isnan(loss), "invalid label should give NaN loss, got %g", (double)loss);
    snn_cuda_free(dd); snn_cuda_free(dl); snn_cuda_free(db); snn_cuda_free(dlab);
    snn_cuda_free(dloss); snn_cuda_free(dwork);
    free(lg); free(bias); free(dref);
}

static void test_sgd(void) {
    static const size_t sizes[] = {1003, 4096};
    for (int si = 0; si < 2; si++)
        for (int variant = 0; variant < 4; variant++) {
            const size_t n = sizes[si];
            snn_cuda_sgd h = {0.05f, 0.9f, variant == 1 ? 1e-2f : 0.0f, variant == 2 ? 0.5f : 1.0f,
                              variant == 1};
            if (variant == 3) h.momentum = 0.0f;
            float *w = (float *)xmalloc(n * 4), *gr = (float *)xmalloc(n * 4);
            double *wr = (double *)xmalloc(n * 8), *br = (double *)xmalloc(n * 8);
            snn_test_fill_uniform(w, n, -1.0f, 1.0f, &rng);
            for (size_t i = 0; i < n; i++) {
                wr[i] = w[i];
                br[i] = 0;
            }
            float *dw = (float *)dcopy(w, n * 4), *dg = (float *)dalloc(n * 4);
            float *dbuf = (float *)dalloc(n * 4), *dam = (float *)dalloc(4);
            int *dskip = (int *)dalloc(4);
            uint16_t *dwork = (uint16_t *)dalloc(n * 2);
            snn_cuda_memset(g, dbuf, 0, n * 4);
            for (int step = 0; step < 4; step++) {
                int skip = step == 2;
                snn_test_fill_uniform(gr, n, -1.0f, 1.0f, &rng);
                snn_cuda_upload(g, dg, gr, n * 4);
                snn_cuda_upload(g, dskip, &skip, 4);
                snn_cuda_memset(g, dam, 0, 4);
                snn_cuda_memset(g, dwork, 0xFF, n * 2);
                OK(snn_cuda_sgd_update(g, &h, n, dw, dg, h.momentum != 0 ? dbuf : NULL, SNN_BF16,
                                       dwork, dam, dskip));
                if (!skip)
                    for (size_t i = 0; i < n; i++) {
                        double gg = (double)gr[i] * h.grad_scale + h.weight_decay * wr[i];
                        double d = gg;
                        if (h.momentum != 0) {
                            br[i] = h.momentum * br[i] + gg;
                            d = h.nesterov ? gg + h.momentum * br[i] : br[i];
                        }
                        wr[i] -= h.lr * d;
                    }
            }
            OK(snn_cuda_synchronize(g));
            float *got = (float *)xmalloc(n * 4), *want = (float *)xmalloc(n * 4), am;
            uint16_t *wk = (uint16_t *)xmalloc(n * 2), *wk_want = (uint16_t *)xmalloc(n * 2);
            snn_cuda_download(g, got, dw, n * 4);
            snn_cuda_download(g, wk, dwork, n * 2);
            snn_cuda_download(g, &am, dam, 4);
            float m = 0;
            for (size_t i = 0; i < n; i++) {
                want[i] = (float)wr[i];
                m = fmaxf(m, fabsf(got[i]));
            }
            double e = snn_test_max_rel(got, want, n, 1e-2);
            CHECK_MSG(e < 1e-5, "SGD (n %zu, variant %d) weight error %.3g", n, variant, e);
            snn_convert(SNN_BF16, wk_want, SNN_F32, got, n, 0);
            CHECK_MSG(!memcmp(wk, wk_want, n * 2), "SGD bf16 working copy is not bf16(w)");
            CHECK_MSG(am == m, "SGD amax %g vs max|w| %g", (double)am, (double)m);
            if (h.momentum != 0) {
                snn_cuda_download(g, got, dbuf, n * 4);
                for (size_t i = 0; i < n; i++) want[i] = (float)br[i];
                e = snn_test_max_rel(got, want, n, 1e-2);
                CHECK_MSG(e < 1e-5, "SGD momentum buffer error %.3g", e);
            }
            snn_cuda_free(dw); snn_cuda_free(dg); snn_cuda_free(dbuf); snn_cuda_free(dam);
            snn_cuda_free(dskip); snn_cuda_free(dwork);
            free(w); free(gr); free(wr); free(br); free(got); free(want); free(wk); free(wk_want);
        }
}

static void test_fill(void) {
    const size_t n = 1u << 20;
    float *d = (float *)dalloc(n * 4), *x = (float *)xmalloc(n * 4);
    OK(snn_cuda_fill_random(g, d, n, 1234, 1, 0.0f, 1.0f));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, x, d, n * 4);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    double mean = s / n, var = s2 / n - mean * mean;
    CHECK_MSG(fabs(mean) < 0.01 && fabs(var - 1) < 0.02, "normal fill: mean %g var %g", mean, var);
    OK(snn_cuda_fill_random(g, d, n, 99, 0, 2.0f, 5.0f));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, x, d, n * 4);
    float lo = 1e9f, hi = -1e9f;
    s = 0;
    for (size_t i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        s += x[i];
    }
    CHECK_MSG(lo >= 2.0f && hi < 5.0f && fabs(s / n - 3.5) < 0.01, "uniform fill: [%g, %g] mean %g",
              (double)lo, (double)hi, s / n);
    snn_cuda_free(d);
    free(x);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_ops: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    test_convert();
    test_amax_quantize();
    test_transpose();
    test_bias_colsum();
    test_ce();
    test_sgd();
    test_fill();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_ops");
}
