/* cuBLASLt GEMM wrapper vs a double-precision CPU GEMM of the same stored operands:
 * FP32 (TF32 off and on), BF16/FP16 with FP32 accumulation, FP8 E4M3/E5M2 with scale
 * pointers, FP8 outputs with D scale and amax; all transpose combinations where allowed, odd
 * sizes, beta accumulation, the plan cache, autotuning and the refusals. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/cuda.h"
#include "snn/dtype.h"

#include "cuda_test_util.h"

typedef struct {
    snn_cuda_gemm_desc d;
    float alpha, beta;
    float as, bs, ds; /* 0 = no pointer */
    int want_amax;
    double tol;
    const char *name;
} gcase;


/* Random values rounded to type t: raw bytes in *bytes, values in *vals. */
static void make_operand(snn_dtype t, size_t n, float lo, float hi, void **bytes, float **vals) {
    *vals = (float *)xmalloc(n * 4);
    *bytes = xmalloc(n * snn_dtype_size(t));
    snn_test_fill_uniform(*vals, n, lo, hi, &rng);
    snn_convert(t, *bytes, SNN_F32, *vals, n, SNN_CONVERT_SATURATE);
    snn_convert(SNN_F32, *vals, t, *bytes, n, 0);
}

static int run_case(const gcase *c, int repeat) {
    const snn_cuda_gemm_desc *d = &c->d;
    int fails0 = snn_test_failures;
    int ra = d->trans_a ? d->K : d->M, rb = d->trans_b ? d->N : d->K;
    size_t na = (size_t)ra * d->lda, nb = (size_t)rb * d->ldb, nc = (size_t)d->M * d->ldc;
    float range = snn_dtype_size(d->a_type) == 1 ? 6.0f : 1.0f;
    void *A, *B, *C0;
    float *a, *b, *c0;
    make_operand(d->a_type, na, -range, range, &A, &a);
    make_operand(d->b_type, nb, -range, range, &B, &b);
    snn_dtype ct = d->c_type;
    make_operand(snn_dtype_size(ct) == 1 ? SNN_F32 : ct, nc, -1.0f, 1.0f, &C0, &c0);
    double *ref = (double *)xmalloc(nc * sizeof(double));
    double amax_ref = 0;
    double sc = (c->as ? c->as : 1.0) * (c->bs ? c->bs : 1.0);
    for (int i = 0; i < d->M; i++)
        for (int j = 0; j < d->N; j++) {
            double s = 0;
            for (int k = 0; k < d->K; k++) {
                double x = d->trans_a ? a[(size_t)k * d->lda + i] : a[(size_t)i * d->lda + k];
                double y = d->trans_b ? b[(size_t)j * d->ldb + k] : b[(size_t)k * d->ldb + j];
                s += x * y;
            }
            double r = c->alpha * sc * s + (c->beta != 0 ? c->beta * c0[(size_t)i * d->ldc + j] : 0);
            if (fabs(r) > amax_ref) amax_ref = fabs(r);
            r = c->ds ? r * c->ds : r;
            if (ct == SNN_F8E4M3) r = fmin(fmax(r, -448.0), 448.0); /* SATFINITE output */
            ref[(size_t)i * d->ldc + j] = r;
        }
    size_t es_c = snn_dtype_size(ct);
    void *dA, *dB, *dC, *dS;
    snn_cuda_alloc(g, na * snn_dtype_size(d->a_type), &dA);
    snn_cuda_alloc(g, nb * snn_dtype_size(d->b_type), &dB);
    snn_cuda_alloc(g, nc * es_c, &dC);
    snn_cuda_alloc(g, 16, &dS);
    snn_cuda_upload(g, dA, A, na * snn_dtype_size(d->a_type));
    snn_cuda_upload(g, dB, B, nb * snn_dtype_size(d->b_type));
    float scal[4] = {c->as, c->bs, c->ds, 0.0f};
    snn_cuda_upload(g, dS, scal, 16);
    float *fS = (float *)dS;
    void *out = xmalloc(nc * es_c);
    float *outf = (float *)xmalloc(nc * 4);
    for (int rep = 0; rep < repeat; rep++) {
        if (c->beta != 0)
            snn_cuda_upload(g, dC, C0, nc * es_c);
        else {
            snn_cuda_memset(g, dC, 0xFF, nc * es_c); /* poison: NaN in every float type */
        }
        float zero = 0;
        snn_cuda_upload(g, fS + 3, &zero, 4);
        snn_status st = snn_cuda_gemm(g, d, c->alpha, dA, dB, c->beta, dC, c->as ? fS : NULL,
                                      c->bs ? fS + 1 : NULL, c->ds ? fS + 2 : NULL,
                                      c->want_amax ? fS + 3 : NULL);
        if (st == SNN_OK) st = snn_cuda_synchronize(g);
        CHECK_MSG(st == SNN_OK, "%s: %s", c->name, snn_last_error());
        if (st != SNN_OK) break;
        snn_cuda_download(g, out, dC, nc * es_c);
        snn_convert(SNN_F32, outf, ct, out, nc, 0);
        double dmax = 0, rmax = 0;
        int nan = 0;
        for (int i = 0; i < d->M; i++)
            for (int j = 0; j < d->N; j++) {
                size_t p = (size_t)i * d->ldc + j;
                if (isnan(outf[p])) nan++;
                double e = fabs((double)outf[p] - ref[p]);
                if (snn_dtype_size(ct) == 1) e = fmax(0.0, e - 0.0625 * fabs(ref[p])); /* FP8 rounding */
                if (e > dmax) dmax = e;
                if (fabs(ref[p]) > rmax) rmax = fabs(ref[p]);
            }
        double err = rmax > 0 ? dmax / rmax : dmax;
        CHECK_MSG(nan == 0 && err <= c->tol, "%s (M=%d N=%d K=%d ta=%d tb=%d rep %d): error %.3g "
                                             "> %.3g, %d NaN",
                  c->name, d->M, d->N, d->K, d->trans_a, d->trans_b, rep, err, c->tol, nan);
        if (c->want_amax) {
            float am;
            snn_cuda_download(g, &am, fS + 3, 4);
            CHECK_MSG(fabs(am - amax_ref) <= 1e-3 * amax_ref, "%s: amax %g vs %g", c->name,
                      (double)am, amax_ref);
        }
    }
    snn_cuda_free(dA);
    snn_cuda_free(dB);
    snn_cuda_free(dC);
    snn_cuda_free(dS);
    free(A); free(B); free(C0); free(a); free(b); free(c0); free(ref); free(out); free(outf);
    return snn_test_failures - fails0;
}

static gcase mk(const char *name, snn_dtype at, snn_dtype bt, snn_dtype ct, int ta, int tb, int M,
                int N, int K, int pad, double tol) {
    gcase c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.d.a_type = at;
    c.d.b_type = bt;
    c.d.c_type = ct;
    c.d.trans_a = ta;
    c.d.trans_b = tb;
    c.d.M = M;
    c.d.N = N;
    c.d.K = K;
    c.d.lda = (ta ? M : K) + pad;
    c.d.ldb = (tb ? K : N) + pad;
    c.d.ldc = N + (snn_dtype_size(ct) == 1 ? 0 : pad);
    c.alpha = 1.0f;
    c.tol = tol;
    return c;
}

static void refusals(void) {
    void *p;
    if (snn_cuda_alloc(g, 1 << 16, &p) != SNN_OK) return;
    gcase c = mk("e5m2 x e5m2", SNN_F8E5M2, SNN_F8E5M2, SNN_BF16, 0, 1, 32, 32, 32, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, NULL, NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    c = mk("fp8 NN", SNN_F8E4M3, SNN_F8E4M3, SNN_BF16, 0, 0, 32, 32, 32, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, NULL, NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    c = mk("fp8 K=24", SNN_F8E4M3, SNN_F8E4M3, SNN_BF16, 0, 1, 32, 32, 24, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, NULL, NULL, NULL, NULL) == SNN_E_SHAPE);
    c = mk("mixed", SNN_F32, SNN_BF16, SNN_F32, 0, 0, 8, 8, 8, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, NULL, NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    c = mk("bf16 scale", SNN_BF16, SNN_BF16, SNN_F32, 0, 0, 8, 8, 8, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, (const float *)p, NULL, NULL, NULL) == SNN_E_INVALID);
    c = mk("ld", SNN_F32, SNN_F32, SNN_F32, 0, 0, 8, 8, 8, 0, 0);
    c.d.lda = 4;
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 0, p, NULL, NULL, NULL, NULL) == SNN_E_SHAPE);
    c = mk("fp8 out beta", SNN_F8E4M3, SNN_F8E4M3, SNN_F8E4M3, 0, 1, 32, 32, 32, 0, 0);
    CHECK(snn_cuda_gemm(g, &c.d, 1, p, p, 1.0f, p, NULL, NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    snn_cuda_free(p);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_gemm: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gcase c = mk("f32", SNN_F32, SNN_F32, SNN_F32, ta, tb, 37, 53, 71, 3, 1e-5);
            c.alpha = 1.5f;
            c.beta = (ta ^ tb) ? 0.5f : 0.0f;
            run_case(&c, 1);
            c = mk("bf16->f32", SNN_BF16, SNN_BF16, SNN_F32, ta, tb, 45, 29, 83, 5, 1e-5);
            c.beta = ta ? 1.0f : 0.0f;
            run_case(&c, 1);
            c = mk("bf16->bf16", SNN_BF16, SNN_BF16, SNN_BF16, ta, tb, 64, 40, 96, 8, 6e-3);
            run_case(&c, 1);
            c = mk("f16->f16", SNN_F16, SNN_F16, SNN_F16, ta, tb, 33, 17, 65, 1, 1e-3);
            run_case(&c, 1);
            c = mk("f16->f32", SNN_F16, SNN_F16, SNN_F32, ta, tb, 40, 24, 48, 0, 1e-5);
            run_case(&c, 1);
        }
    gcase c = mk("f32 tf32", SNN_F32, SNN_F32, SNN_F32, 0, 1, 128, 96, 256, 0, 3e-3);
    c.d.allow_tf32 = 1;
    run_case(&c, 1);
    /* larger tensor-core shapes, run twice: the second call uses the cached plan */
    c = mk("bf16 large", SNN_BF16, SNN_BF16, SNN_F32, 0, 1, 256, 384, 512, 0, 1e-5);
    run_case(&c, 2);
    snn_cuda_set_gemm_autotune(g, 1);
    c = mk("f16 large autotuned", SNN_F16, SNN_F16, SNN_F16, 1, 0, 192, 256, 320, 0, 1e-3);
    run_case(&c, 2);
    snn_cuda_set_gemm_autotune(g, 0);
    /* FP8 (TN only), with dequantisation scales; split and fast accumulation */
    c = mk("e4m3 x e4m3 -> bf16", SNN_F8E4M3, SNN_F8E4M3, SNN_BF16, 0, 1, 40, 48, 64, 16, 6e-3);
    c.as = 0.5f;
    c.bs = 2.0f;
    run_case(&c, 1);
    c = mk("e4m3 x e4m3 -> f32", SNN_F8E4M3, SNN_F8E4M3, SNN_F32, 0, 1, 128, 256, 512, 0, 5e-4);
    c.as = 0.25f;
    c.bs = 3.0f;
    c.alpha = 0.5f;
    c.beta = 0.5f;
    run_case(&c, 2);
    c = mk("e4m3 x e4m3 -> f32 fast", SNN_F8E4M3, SNN_F8E4M3, SNN_F32, 0, 1, 128, 256, 2048, 0, 1e-2);
    c.d.fast_accum = 1;
    run_case(&c, 1);
    c = mk("e5m2 x e4m3 -> bf16", SNN_F8E5M2, SNN_F8E4M3, SNN_BF16, 0, 1, 64, 32, 96, 0, 6e-3);
    c.as = 2.0f;
    run_case(&c, 1);
    c = mk("e4m3 x e5m2 -> f32", SNN_F8E4M3, SNN_F8E5M2, SNN_F32, 0, 1, 80, 48, 128, 16, 5e-4);
    c.bs = 0.125f;
    run_case(&c, 1);
    c = mk("e4m3 -> e4m3 with d_scale, amax", SNN_F8E4M3, SNN_F8E4M3, SNN_F8E4M3, 0, 1, 64, 64, 64,
           0, 1e-3);
    c.as = 0.5f;
    c.bs = 0.5f;
    c.ds = 4.0f;
    c.want_amax = 1;
    run_case(&c, 1);
    refusals();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_gemm");
}
