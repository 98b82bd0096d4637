/* FP8 block scaling on the GPU against the CPU recipe (src/precision/fp8_quant.c, itself
 * tested bit-exactly against the format tables and PyTorch):
 *  - snn_cuda_quantize_fp8_block: codes and scale factors bit for bit equal to
 *    snn_fp8_prepare_operand's, for 1x128 vectors (both usages: the row-wise copy and the
 *    transposed column-wise copy) and 128x128 tiles, E4M3 and E5M2, power-of-two and FP32
 *    scales, F32/BF16/F16 sources; blocks of very different magnitude, an all-zero block and
 *    a block of subnormals (its scale overflows to the source type's largest value);
 *  - block-scaled cuBLASLt GEMMs (the fprop, dgrad and wgrad pairings of a Linear layer)
 *    against a double-precision product of the CPU's dequantised operands;
 *  - the refusals (two 128x128 operands, shapes not multiples of 128, fast accumulation).
 * Outputs are poisoned first; inputs are fresh random values. Exit 77 without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "precision/fp8.h"
#include "snn/cuda.h"

#include "cuda_test_util.h"

static const char *tname(snn_dtype t) {
    switch (t) {
    case SNN_F32: return "f32";
    case SNN_BF16: return "bf16";
    case SNN_F16: return "f16";
    case SNN_F8E4M3: return "e4m3";
    case SNN_F8E5M2: return "e5m2";
    default: return "?";
    }
}

/* Random source with per-row and per-column-band magnitudes from 2^-12 to 2^12, one all-zero
 * 128-block (row 1, first 128 columns) and, for F32, one block of subnormals. */
static void fill_source(float *x, int rows, int cols, snn_dtype t) {
    snn_test_fill_uniform(x, (size_t)rows * cols, -1.0f, 1.0f, &rng);
    for (int i = 0; i < rows; i++) {
        float rs = ldexpf(1.0f, (i * 7) % 25 - 12);
        for (int j = 0; j < cols; j++) x[(size_t)i * cols + j] *= rs * ldexpf(1.0f, ((j / 128) * 5) % 9 - 4);
    }
    if (rows > 1)
        for (int j = 0; j < 128; j++) x[(size_t)cols + j] = 0.0f;
    if (t == SNN_F32 && rows > 2)
        for (int j = 128; j < 256 && j < cols; j++) x[(size_t)2 * cols + j] = 1e-39f * (float)(j % 7 + 1);
}

/* Upload x as type t; on return x holds exactly the values the device sees. */
static void *upload_as(float *x, size_t n, snn_dtype t) {
    void *d32 = dcopy(x, n * 4);
    if (t == SNN_F32) return d32;
    void *dt = dalloc(n * 2);
    OK(snn_cuda_convert(g, t, dt, SNN_F32, d32, n, NULL, 0));
    OK(snn_cuda_convert(g, SNN_F32, d32, t, dt, n, NULL, 0));
    OK(snn_cuda_download(g, x, d32, n * 4));
    snn_cuda_free(d32);
    return dt;
}

static snn_fp8_recipe_params block_params(snn_dtype q, int pow2, snn_dtype src) {
    snn_fp8_recipe_params p;
    memset(&p, 0, sizeof p);
    p.recipe = SNN_FP8_RECIPE_BLOCK;
    p.fwd_dtype = q;
    p.bwd_dtype = q;
    p.pow2_scales = pow2;
    p.block_len = 128;
    p.hp_dtype = src;
    return p;
}

typedef struct {
    int rows, cols, tiles, pow2;
    snn_dtype q, src;
} qcase;

static size_t count_diff_u8(const uint8_t *a, const uint8_t *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += a[i] != b[i];
    return d;
}

static void test_quantize(const qcase *k) {
    const int R = k->rows, C = k->cols;
    const size_t n = (size_t)R * C;
    float *x = xmalloc(n * 4);
    fill_source(x, R, C, k->src);
    void *dx = upload_as(x, n, k->src);
    const size_t ns = snn_cuda_fp8_block_scale_count(k->tiles, R, C);
    const size_t nst = snn_cuda_fp8_block_scale_count(k->tiles, C, R);
    uint8_t *dq = dalloc(n), *dqt = dalloc(n);
    float *ds = dalloc(ns * 4), *dst = dalloc(nst * 4);
    OK(snn_cuda_quantize_fp8_block(g, k->q, k->tiles, k->pow2, k->src, dx, R, C, dq, ds, dqt, dst));
    uint8_t *q = xmalloc(n), *qt = xmalloc(n);
    float *s = xmalloc(ns * 4), *st = xmalloc(nst * 4);
    OK(snn_cuda_download(g, q, dq, n));
    OK(snn_cuda_download(g, qt, dqt, n));
    OK(snn_cuda_download(g, s, ds, ns * 4));
    OK(snn_cuda_download(g, st, dst, nst * 4));

    snn_fp8_recipe_params p = block_params(k->q, k->pow2, k->src);
    snn_fp8_role role = k->tiles ? SNN_FP8_ROLE_WEIGHT : SNN_FP8_ROLE_INPUT;
    uint8_t *cq = xmalloc(n), *cqc = xmalloc(n), *cqt = xmalloc(n);
    const int gr = R / 128, gc = C / 128;
    float *cs = xmalloc(n / 128 * 4), *csc = xmalloc(n / 128 * 4);
    OK(snn_fp8_prepare_operand(NULL, role, &p, SNN_FP8_ROWWISE, x, R, C, NULL, cq, cs));
    OK(snn_fp8_prepare_operand(NULL, role, &p, SNN_FP8_COLWISE, x, R, C, NULL, cqc, csc));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) cqt[(size_t)j * R + i] = cqc[(size_t)i * C + j];
    size_t dq_n = count_diff_u8(q, cq, n), dqt_n = count_diff_u8(qt, cqt, n), ds_n = 0, dst_n = 0;
    if (k->tiles) {
        const int ldq = (gc + 3) / 4 * 4, ldt = (gr + 3) / 4 * 4;
        for (int bi = 0; bi < gr; bi++)
            for (int bj = 0; bj < gc; bj++) {
                uint32_t ref, a, b;
                memcpy(&ref, &cs[(size_t)bi * gc + bj], 4);
                memcpy(&a, &s[(size_t)bi * ldq + bj], 4);
                memcpy(&b, &st[(size_t)bj * ldt + bi], 4);
                ds_n += a != ref;
                dst_n += b != ref;
            }
    } else {
        for (int i = 0; i < R; i++)
            for (int bj = 0; bj < gc; bj++) ds_n += memcmp(&s[(size_t)bj * R + i], &cs[(size_t)i * gc + bj], 4) != 0;
        for (int bi = 0; bi < gr; bi++)
            for (int j = 0; j < C; j++) dst_n += memcmp(&st[(size_t)bi * C + j], &csc[(size_t)bi * C + j], 4) != 0;
    }
    CHECK_MSG(dq_n == 0 && dqt_n == 0 && ds_n == 0 && dst_n == 0,
              "quantize %dx%d tiles=%d pow2=%d %s<-%s: %zu q codes, %zu qt codes, %zu q scales, %zu qt scales differ",
              R, C, k->tiles, k->pow2, tname(k->q), tname(k->src), dq_n, dqt_n, ds_n,
              dst_n);
    snn_cuda_free(dx);
    snn_cuda_free(dq);
    snn_cuda_free(dqt);
    snn_cuda_free(ds);
    snn_cuda_free(dst);
    free(x);
    free(q);
    free(qt);
    free(s);
    free(st);
    free(cq);
    free(cqc);
    free(cqt);
    free(cs);
    free(csc);
}

/* ---- GEMMs ---- */

/* One operand, stored [R][K] as the GEMM reads it (K contiguous): the device codes and
 * scales, and the CPU's dequantised values in the same [R][K] layout. `transposed`: the
 * source is [K][R] and the operand is its column-wise copy (qt). */
typedef struct {
    uint8_t *q;
    float *s;
    float *deq; /* host [R][K] */
    snn_cuda_scale_mode mode;
} operand;

static operand make_operand(int R, int K, int tiles, int transposed, snn_dtype qt_type) {
    const int sr = transposed ? K : R, sc = transposed ? R : K; /* source shape */
    const size_t n = (size_t)R * K;
    float *x = xmalloc(n * 4);
    snn_test_fill_uniform(x, n, -1.0f, 1.0f, &rng);
    for (size_t i = 0; i < n; i++) x[i] *= ldexpf(1.0f, (int)(i / 128 % 7) - 3); /* varied block magnitudes */
    void *dx = dcopy(x, n * 4);
    operand o;
    o.q = dalloc(n);
    o.mode = tiles ? SNN_CUDA_SCALE_BLK128 : SNN_CUDA_SCALE_VEC128;
    size_t ns = snn_cuda_fp8_block_scale_count(tiles, R, K);
    o.s = dalloc(ns * 4);
    if (transposed)
        OK(snn_cuda_quantize_fp8_block(g, qt_type, tiles, 1, SNN_F32, dx, sr, sc, NULL, NULL, o.q, o.s));
    else
        OK(snn_cuda_quantize_fp8_block(g, qt_type, tiles, 1, SNN_F32, dx, sr, sc, o.q, o.s, NULL, NULL));
    snn_fp8_recipe_params p = block_params(qt_type, 1, SNN_F32);
    float *qdq = xmalloc(n * 4);
    OK(snn_fp8_prepare_operand(NULL, tiles ? SNN_FP8_ROLE_WEIGHT : SNN_FP8_ROLE_INPUT, &p,
                               transposed ? SNN_FP8_COLWISE : SNN_FP8_ROWWISE, x, sr, sc, qdq, NULL, NULL));
    o.deq = xmalloc(n * 4);
    if (transposed)
        for (int i = 0; i < sr; i++)
            for (int j = 0; j < sc; j++) o.deq[(size_t)j * sr + i] = qdq[(size_t)i * sc + j];
    else
        memcpy(o.deq, qdq, n * 4);
    free(qdq);
    free(x);
    snn_cuda_free(dx);
    return o;
}

static void operand_free(operand *o) {
    snn_cuda_free(o->q);
    snn_cuda_free(o->s);
    free(o->deq);
}

typedef struct {
    int M, N, K;
    int a_tiles, a_t, b_tiles, b_t; /* 128x128 tiles / column-wise (transposed) copy per operand */
    snn_dtype a_q, b_q, c;
    const char *what;
} gcase;

static void test_gemm(const gcase *k) {
    operand A = make_operand(k->M, k->K, k->a_tiles, k->a_t, k->a_q);
    operand B = make_operand(k->N, k->K, k->b_tiles, k->b_t, k->b_q);
    const size_t nc = (size_t)k->M * k->N;
    const size_t es = k->c == SNN_F32 ? 4 : 2;
    void *dc = dalloc(nc * es);
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = 0;
    d.trans_b = 1;
    d.M = k->M;
    d.N = k->N;
    d.K = k->K;
    d.a_type = k->a_q;
    d.b_type = k->b_q;
    d.c_type = k->c;
    d.lda = d.ldb = k->K;
    d.ldc = k->N;
    d.a_scale_mode = A.mode;
    d.b_scale_mode = B.mode;
    snn_status st = snn_cuda_gemm(g, &d, 1.0f, A.q, B.q, 0.0f, dc, A.s, B.s, NULL, NULL);
    CHECK_MSG(st == SNN_OK, "%s: gemm: %s", k->what, snn_last_error());
    float *c = xmalloc(nc * 4), *ref = xmalloc(nc * 4);
    if (st == SNN_OK) {
        if (k->c == SNN_F32) {
            OK(snn_cuda_download(g, c, dc, nc * 4));
        } else {
            float *d32 = dalloc(nc * 4);
            OK(snn_cuda_convert(g, SNN_F32, d32, k->c, dc, nc, NULL, 0));
            OK(snn_cuda_download(g, c, d32, nc * 4));
            snn_cuda_free(d32);
        }
        for (int i = 0; i < k->M; i++)
            for (int j = 0; j < k->N; j++) {
                double acc = 0;
                for (int q = 0; q < k->K; q++)
                    acc += (double)A.deq[(size_t)i * k->K + q] * (double)B.deq[(size_t)j * k->K + q];
                ref[(size_t)i * k->N + j] = (float)acc;
            }
        double m = 0;
        for (size_t i = 0; i < nc; i++) m = fmax(m, fabs((double)ref[i]));
        double e = snn_test_max_rel(c, ref, nc, m > 0 ? m : 1e-30);
        /* Hopper FP8 tensor cores sum a 128-deep block with ~14 bits before the promotion to FP32
         * (fp8.md §5.2 measured 1.1e-4..1.3e-4 of max|ref| with promotion); a 16-bit output
         * adds its rounding (2^-9 BF16, 2^-12 F16 of each value) */
        double tol = k->c == SNN_F32 ? 6e-4 : k->c == SNN_BF16 ? 5e-3 : 2e-3;
        CHECK_MSG(e <= tol, "%s: M=%d N=%d K=%d -> %s: error %.3g of max|ref| (bound %.1g)", k->what, k->M, k->N,
                  k->K, tname(k->c), e, tol);
    }
    free(c);
    free(ref);
    snn_cuda_free(dc);
    operand_free(&A);
    operand_free(&B);
}

static void test_refusals(void) {
    uint8_t *a = dalloc(256 * 256), *b = dalloc(256 * 256);
    float *s = dalloc(4096 * 4), *c = dalloc(256 * 256 * 4);
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_b = 1;
    d.M = d.N = d.K = 256;
    d.a_type = d.b_type = SNN_F8E4M3;
    d.c_type = SNN_F32;
    d.lda = d.ldb = d.ldc = 256;
    d.a_scale_mode = d.b_scale_mode = SNN_CUDA_SCALE_BLK128;
    CHECK(snn_cuda_gemm(g, &d, 1.0f, a, b, 0.0f, c, s, s, NULL, NULL) == SNN_E_UNSUPPORTED);
    d.b_scale_mode = SNN_CUDA_SCALE_TENSOR;
    CHECK(snn_cuda_gemm(g, &d, 1.0f, a, b, 0.0f, c, s, s, NULL, NULL) == SNN_E_INVALID);
    d.b_scale_mode = SNN_CUDA_SCALE_VEC128;
    d.fast_accum = 1;
    CHECK(snn_cuda_gemm(g, &d, 1.0f, a, b, 0.0f, c, s, s, NULL, NULL) == SNN_E_UNSUPPORTED);
    d.fast_accum = 0;
    d.M = 200;
    CHECK(snn_cuda_gemm(g, &d, 1.0f, a, b, 0.0f, c, s, s, NULL, NULL) == SNN_E_SHAPE);
    d.M = 256;
    CHECK(snn_cuda_gemm(g, &d, 1.0f, a, b, 0.0f, c, NULL, s, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_quantize_fp8_block(g, SNN_F8E4M3, 0, 1, SNN_F32, c, 200, 256, a, s, NULL, NULL) == SNN_E_SHAPE);
    CHECK(snn_cuda_quantize_fp8_block(g, SNN_BF16, 0, 1, SNN_F32, c, 256, 256, a, s, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_quantize_fp8_block(g, SNN_F8E4M3, 0, 1, SNN_F32, c, 256, 256, a, NULL, NULL, NULL) ==
          SNN_E_INVALID);
    snn_cuda_free(a);
    snn_cuda_free(b);
    snn_cuda_free(s);
    snn_cuda_free(c);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_fp8_block: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    static const qcase q[] = {
        {256, 384, 0, 1, SNN_F8E4M3, SNN_F32},  {384, 256, 0, 0, SNN_F8E4M3, SNN_F32},
        {128, 640, 0, 1, SNN_F8E5M2, SNN_BF16}, {256, 256, 0, 1, SNN_F8E4M3, SNN_F16},
        {384, 640, 1, 1, SNN_F8E4M3, SNN_F32},  {640, 384, 1, 0, SNN_F8E4M3, SNN_BF16},
        {128, 128, 1, 1, SNN_F8E5M2, SNN_F32},  {768, 512, 1, 1, SNN_F8E4M3, SNN_F16},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) test_quantize(&q[i]);
    static const gcase gc[] = {
        /* fprop: X [M][K] 1x128, W [N][K] 128x128 */
        {256, 384, 512, 0, 0, 1, 0, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, "fprop"},
        {512, 640, 384, 0, 0, 1, 0, SNN_F8E4M3, SNN_F8E4M3, SNN_BF16, "fprop bf16 out"},
        /* dgrad: dY [M][K=out] 1x128, W^T [N=in][K=out] = the tiles' transposed copy */
        {256, 384, 640, 0, 0, 1, 1, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, "dgrad"},
        /* wgrad: dY^T [out][K=batch] and X^T [in][K=batch], both column-wise copies */
        {384, 256, 768, 0, 1, 0, 1, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, "wgrad"},
        {256, 256, 1024, 0, 1, 0, 1, SNN_F8E5M2, SNN_F8E4M3, SNN_F16, "wgrad e5m2 f16 out"},
        /* 2D tiles on our A */
        {384, 128, 256, 1, 0, 0, 0, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, "tiles x vectors"},
        {128, 128, 128, 0, 0, 0, 0, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, "vectors x vectors, one block"},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) test_gemm(&gc[i]);
    test_refusals();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_fp8_block");
}
