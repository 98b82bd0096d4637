/* The CUDA table's FP8 codes (backend.h: fp8_codes, and gemm with FP8 a_store / b_store)
 * against the CPU table, which has neither: the CPU multiplies fp8_qdq's values in FP32.
 * Fresh random inputs (seed printed; SNN_TEST_SEED replays it), outputs poisoned first.
 * Exit 77 (skip) without a GPU.
 *
 *   fp8_codes  bit for bit: decode(code) · sinv equals the CPU's fp8_qdq output (a NaN
 *              matching a NaN), for delayed scales (1, 3.3, 2^20: most values saturate) and
 *              current scaling (pow2 on and off), E4M3 and E5M2, shapes that are multiples of
 *              nothing, zeros, NaN and inf in the input; the transpose equals the codes; the
 *              padding columns of both are zero codes; the amax slot is max-ed with the
 *              CPU's amax (bit for bit), and left alone without one.
 *   gemm       on codes against the CPU's FP32 GEMM of the dequantised operands, per element
 *              |got - ref| <= (2^-13 + 4 (K + 2) u) (|alpha| Σ|ab|) + 4 (K + 2) u (|beta c| +
 *              |bias|), plus one ulp of BF16 with c_round: Hopper's FP8 tensor cores keep
 *              about 14 bits inside one MMA before cuBLASLt promotes the sum to FP32 (the
 *              2^-13 term), the rest is the FP32 GEMM bound of test_cuda_backend.c. Both
 *              format pairs (E4M3 x E4M3, E5M2 x E4M3), alpha 1 and 0.5, beta 0 and 1, with
 *              and without a bias, c_round F32 and BF16.
 *   refusals   layouts Hopper has no FP8 GEMM for, missing factors, both E5M2. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "snn/dtype.h"

static const snn_backend *cpu;
static snn_backend *gpu;
static uint64_t rng;

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    return p;
}

/* Device buffer holding src, or 0xFF bytes (NaN in every floating type; code 0xFF too). */
static void *dnew(const void *src, size_t bytes) {
    void *p = NULL, *tmp = NULL;
    if (gpu->alloc(gpu, bytes ? bytes : 4, &p) != SNN_OK) {
        fprintf(stderr, "device allocation failed: %s\n", snn_last_error());
        exit(2);
    }
    if (!src) {
        tmp = xmalloc(bytes);
        memset(tmp, 0xFF, bytes);
        src = tmp;
    }
    if (bytes && gpu->upload(gpu, p, src, bytes) != SNN_OK) exit(2);
    free(tmp);
    return p;
}

static void *down(const void *d, size_t bytes) {
    void *h = xmalloc(bytes);
    memset(h, 0xFF, bytes);
    if (gpu->download(gpu, h, d, bytes) != SNN_OK) {
        fprintf(stderr, "download failed: %s\n", snn_last_error());
        exit(2);
    }
    return h;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float decode(snn_dtype t, uint8_t c) {
    float f = NAN;
    if (snn_convert(SNN_F32, &f, t, &c, 1, 0) != SNN_OK) return NAN;
    return f;
}

/* Values over 2^-40 .. 2^21 with signs, a zero row and column, and NaN / inf (special). */
static float *fp8_input(int rows, int cols, int special) {
    const size_t n = (size_t)rows * (size_t)cols;
    float *x = (float *)xmalloc(n * sizeof(float)), *e = (float *)xmalloc(n * sizeof(float));
    snn_test_fill_uniform(x, n, -1.0f, 1.0f, &rng);
    snn_test_fill_uniform(e, n, -40.0f, 21.0f, &rng);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)floorf(e[i]));
    free(e);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            if ((rows > 1 && r == 1) || (cols > 2 && c == 2)) x[(size_t)r * cols + c] = 0.0f;
    if (special >= 1) x[n / 3] = NAN;
    if (special >= 2) x[n / 2 + (n > 1)] = (n & 1) ? INFINITY : -INFINITY;
    return x;
}

static int r16(int v) { return (v + 15) / 16 * 16; }

/* One codes descriptor against the CPU's fp8_qdq of the same recipe (q.x filled in here). */
/* only_q: the row-major codes alone (qt NULL: the table's vectorised row kernel), else both
 * layouts (the tile kernel). */
static void codes_case(const char *what, snn_fp8_qdq ref_q, snn_fp8_codes c, const float *x, const float *d_x,
                       int with_amax, int only_q) {
    const int rows = c.rows, cols = c.cols, ldq = r16(cols), ldqt = r16(rows);
    const size_t n = (size_t)rows * (size_t)cols;
    float *ref = (float *)xmalloc(n * sizeof(float)), amax_ref = NAN;
    memset(ref, 0xFF, n * sizeof(float));
    ref_q.x = x;
    ref_q.out = ref;
    OK(cpu->fp8_qdq(cpu, &ref_q, &amax_ref));
    const float slots0[2] = {NAN, 0.5f}; /* sinv poisoned; an amax from before */
    float *d_slots = (float *)dnew(slots0, sizeof slots0);
    uint8_t *d_q = (uint8_t *)dnew(NULL, (size_t)rows * ldq), *d_qt = (uint8_t *)dnew(NULL, (size_t)cols * ldqt);
    c.x = d_x;
    c.q = d_q;
    c.ldq = ldq;
    c.qt = only_q ? NULL : d_qt;
    c.ldqt = only_q ? 0 : ldqt;
    c.sinv = d_slots;
    c.amax = with_amax ? d_slots + 1 : NULL;
    OK(gpu->fp8_codes(gpu, &c));
    uint8_t *q = (uint8_t *)down(d_q, (size_t)rows * ldq), *qt = (uint8_t *)down(d_qt, (size_t)cols * ldqt);
    float *slots = (float *)down(d_slots, sizeof slots0);
    size_t bad = 0, badt = 0, badpad = 0, first = 0;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < ldq; k++) {
            const uint8_t code = q[(size_t)r * ldq + k];
            if (k >= cols) {
                badpad += code != 0;
                continue;
            }
            const float got = decode(c.fp8, code) * slots[0], want = ref[(size_t)r * cols + k];
            if (!(isnan(want) && isnan(got)) && fbits(got) != fbits(want)) {
                if (!bad) first = (size_t)r * cols + k;
                bad++;
            }
            badt += !only_q && qt[(size_t)k * ldqt + r] != code;
        }
    for (int k = 0; k < cols && !only_q; k++)
        for (int r = rows; r < ldqt; r++) badpad += qt[(size_t)k * ldqt + r] != 0;
    CHECK_MSG(bad == 0, "%s: %zu of %zu values differ from fp8_qdq's, first [%zu] ref %.9g", what, bad, n, first,
              bad ? (double)ref[first] : 0.0);
    CHECK_MSG(badt == 0, "%s: %zu transposed codes differ", what, badt);
    CHECK_MSG(badpad == 0, "%s: %zu padding codes are not zero", what, badpad);
    if (!c.current) CHECK_MSG(fbits(slots[0]) == fbits(c.scale_inv), "%s: sinv %a, given %a", what, (double)slots[0],
                              (double)c.scale_inv);
    const float amax_want = with_amax ? fmaxf(0.5f, amax_ref) : 0.5f;
    CHECK_MSG(fbits(slots[1]) == fbits(amax_want), "%s: amax slot %a, want %a (CPU amax %a)", what, (double)slots[1],
              (double)amax_want, (double)amax_ref);
    free(ref);
    free(q);
    free(qt);
    free(slots);
    gpu->free(gpu, d_q);
    gpu->free(gpu, d_qt);
    gpu->free(gpu, d_slots);
}

static void test_codes(void) {
    static const int shapes[][2] = {{130, 259}, {1, 1}, {257, 33}, {16, 48}, {300, 1}, {40, 4100}};
    static const snn_dtype fmts[] = {SNN_F8E4M3, SNN_F8E5M2};
    static const float dscales[] = {1.0f, 3.3f, 0x1p20f};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0], cols = shapes[si][1];
        for (int special = 0; special < 3; special++) {
            float *x = fp8_input(rows, cols, special);
            float *d_x = (float *)dnew(x, (size_t)rows * cols * sizeof(float));
            for (int fi = 0; fi < 2; fi++) {
                char what[160];
                snn_fp8_qdq q;
                memset(&q, 0, sizeof q);
                q.fp8 = fmts[fi];
                q.rows = rows;
                q.cols = cols;
                q.hp_dtype = SNN_F32;
                snn_fp8_codes c;
                memset(&c, 0, sizeof c);
                c.fp8 = fmts[fi];
                c.rows = rows;
                c.cols = cols;
                for (int k = 0; k < 3; k++) {
                    q.recipe = SNN_FP8_RECIPE_DELAYED;
                    q.scale = c.scale = dscales[k];
                    q.scale_inv = c.scale_inv = 1.0f / dscales[k];
                    for (int oq = 0; oq < 2; oq++) {
                        snprintf(what, sizeof what, "codes delayed %s s=%g %dx%d special=%d%s", snn_dtype_name(c.fp8),
                                 (double)c.scale, rows, cols, special, oq ? " (q only)" : "");
                        codes_case(what, q, c, x, d_x, k != 1, oq);
                    }
                }
                for (int pow2 = 0; pow2 < 2; pow2++) {
                    q.recipe = SNN_FP8_RECIPE_CURRENT;
                    q.pow2 = c.pow2 = pow2;
                    c.current = 1;
                    for (int oq = 0; oq < 2; oq++) {
                        snprintf(what, sizeof what, "codes current %s pow2=%d %dx%d special=%d%s",
                                 snn_dtype_name(c.fp8), pow2, rows, cols, special, oq ? " (q only)" : "");
                        codes_case(what, q, c, x, d_x, 1, oq);
                    }
                    c.current = 0;
                }
            }
            free(x);
            gpu->free(gpu, d_x);
        }
    }
}

/* Codes of a [rows][K] FP32 matrix with current scaling: device codes [rows][K16], its factor,
 * and the host's dequantised values (what the CPU multiplies). */
static void make_operand(snn_dtype t, int rows, int K, uint8_t **d_codes, float **d_sinv, float **deq) {
    const int K16 = r16(K);
    float *x = (float *)xmalloc((size_t)rows * K * sizeof(float));
    snn_test_fill_uniform(x, (size_t)rows * K, -3.0f, 3.0f, &rng);
    float *d_x = (float *)dnew(x, (size_t)rows * K * sizeof(float));
    *d_codes = (uint8_t *)dnew(NULL, (size_t)rows * K16);
    *d_sinv = (float *)dnew(NULL, sizeof(float));
    snn_fp8_codes c = {.fp8 = t, .rows = rows, .cols = K, .x = d_x, .current = 1, .q = *d_codes, .ldq = K16,
                       .sinv = *d_sinv};
    OK(gpu->fp8_codes(gpu, &c));
    uint8_t *q = (uint8_t *)down(*d_codes, (size_t)rows * K16);
    float *s = (float *)down(*d_sinv, sizeof(float));
    *deq = (float *)xmalloc((size_t)rows * K16 * sizeof(float));
    for (size_t i = 0; i < (size_t)rows * K16; i++) (*deq)[i] = decode(t, q[i]) * s[0];
    free(q);
    free(s);
    free(x);
    gpu->free(gpu, d_x);
}

static void test_gemm_codes(void) {
    /* N a multiple of 8 (the table refuses others: cuBLASLt has no FP8 kernel for them); odd
     * variants write C one float past an aligned address (the workspace route) */
    static const int shapes[][3] = {{37, 24, 48}, {130, 72, 256}, {1, 16, 16}, {64, 56, 1024}, {300, 136, 32}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        for (int pair = 0; pair < 2; pair++) {
            const snn_dtype at = pair ? SNN_F8E5M2 : SNN_F8E4M3, bt = SNN_F8E4M3;
            uint8_t *dA, *dB;
            float *sa, *sb, *A, *B;
            make_operand(at, M, K, &dA, &sa, &A);
            make_operand(bt, N, K, &dB, &sb, &B);
            float *bias = (float *)xmalloc((size_t)N * sizeof(float)), *C0 = (float *)xmalloc((size_t)M * N * 4);
            snn_test_fill_uniform(bias, (size_t)N, -1.0f, 1.0f, &rng);
            snn_test_fill_uniform(C0, (size_t)M * N, -2.0f, 2.0f, &rng);
            float *d_bias = (float *)dnew(bias, (size_t)N * sizeof(float));
            for (int v = 0; v < 8; v++) {
                const float alpha = v & 1 ? 0.5f : 1.0f, beta = v & 2 ? 1.0f : 0.0f;
                const int with_bias = (v & 4) != 0;
                const snn_dtype cr = v == 5 || v == 6 ? SNN_BF16 : SNN_F32;
                const int K16 = r16(K);
                float *ref = (float *)xmalloc((size_t)M * N * 4);
                memcpy(ref, C0, (size_t)M * N * 4);
                snn_gemm rg = {.trans_a = 0, .trans_b = 1, .M = M, .N = N, .K = K16, .alpha = alpha, .beta = beta,
                               .A = A, .lda = K16, .B = B, .ldb = K16, .C = ref, .ldc = N, .ab_type = SNN_F32,
                               .bias = with_bias ? bias : NULL, .c_round = cr};
                OK(cpu->gemm(cpu, &rg));
                const size_t coff = v & 1; /* C at 4 bytes past an aligned address */
                float *cinit = (float *)xmalloc(((size_t)M * N + 1) * 4);
                cinit[0] = 7.0f;
                memcpy(cinit + 1, C0, (size_t)M * N * 4);
                float *d_Cb = (float *)dnew(beta != 0.0f || coff ? cinit + 1 - coff : NULL, ((size_t)M * N + coff) * 4);
                free(cinit);
                float *d_C = d_Cb + coff;
                snn_gemm gg = rg;
                gg.A = (const float *)dA;
                gg.B = (const float *)dB;
                gg.C = d_C;
                gg.bias = with_bias ? d_bias : NULL;
                gg.ab_type = at;
                gg.a_store = at;
                gg.b_store = bt;
                gg.a_scale = sa;
                gg.b_scale = sb;
                OK(gpu->gemm(gpu, &gg));
                float *got = (float *)down(d_C, (size_t)M * N * 4);
                if (coff) { /* the float before C is untouched */
                    float *g0 = (float *)down(d_Cb, 4);
                    CHECK_MSG(g0[0] == 7.0f, "gemm codes %dx%dx%d v%d: wrote before C", M, N, K, v);
                    free(g0);
                }
                size_t bad = 0, first = 0;
                const double u = 0x1p-24, kf = 4.0 * (K16 + 2) * u;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double sab = 0;
                        for (int k = 0; k < K16; k++) sab += fabs((double)A[(size_t)i * K16 + k] * B[(size_t)j * K16 + k]);
                        const size_t e = (size_t)i * N + j;
                        double bound = (0x1p-13 + kf) * fabs(alpha) * sab +
                                       kf * (fabs(beta * C0[e]) + (with_bias ? fabs(bias[j]) : 0.0));
                        /* a sum in another order can land on the other side of a BF16 rounding
                         * boundary: one BF16 ulp (<= 2^-7 |v|; H100: 1 ulp in 0.3 % of the
                         * rounded outputs, never more) */
                        if (cr == SNN_BF16) bound += fabs(ref[e]) * 0x1p-7;
                        if (!(fabs((double)got[e] - ref[e]) <= bound)) {
                            if (!bad) first = e;
                            bad++;
                        }
                    }
                CHECK_MSG(bad == 0, "gemm codes %s x %s %dx%dx%d v%d: %zu of %d outside the bound, first [%zu] got "
                          "%.9g ref %.9g", snn_dtype_name(at), snn_dtype_name(bt), M, N, K, v, bad, M * N, first,
                          bad ? (double)got[first] : 0.0, bad ? (double)ref[first] : 0.0);
                free(ref);
                free(got);
                gpu->free(gpu, d_Cb);
            }
            free(A);
            free(B);
            free(bias);
            free(C0);
            gpu->free(gpu, d_bias);
            gpu->free(gpu, dA);
            gpu->free(gpu, dB);
            gpu->free(gpu, sa);
            gpu->free(gpu, sb);
        }
    }
}

static void test_refusals(void) {
    uint8_t *d = (uint8_t *)dnew(NULL, 64 * 64);
    float *s = (float *)dnew(NULL, 16), *C = (float *)dnew(NULL, 64 * 64 * 4);
    snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = 32, .N = 32, .K = 32, .alpha = 1.0f, .A = (const float *)d,
                  .lda = 32, .B = (const float *)d, .ldb = 32, .C = C, .ldc = 32, .ab_type = SNN_F8E4M3,
                  .c_round = SNN_F32, .a_store = SNN_F8E4M3, .b_store = SNN_F8E4M3, .a_scale = s, .b_scale = s};
    OK(gpu->gemm(gpu, &g));
    snn_gemm b = g;
    b.trans_b = 0;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_INVALID);
    b = g;
    b.K = 24;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_SHAPE);
    b = g;
    b.N = 29;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_SHAPE);
    b = g;
    b.b_scale = NULL;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_INVALID);
    b = g;
    b.a_store = b.b_store = SNN_F8E5M2;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_INVALID);
    b = g;
    b.b_store = SNN_F32;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_INVALID);
    b = g;
    b.c_store = SNN_BF16;
    CHECK(gpu->gemm(gpu, &b) == SNN_E_INVALID);
    /* the CPU table multiplies no codes */
    CHECK(cpu->fp8_codes == NULL);
    snn_fp8_codes c = {.fp8 = SNN_F32, .rows = 4, .cols = 4, .x = C, .scale = 1, .scale_inv = 1, .sinv = s};
    CHECK(gpu->fp8_codes(gpu, &c) == SNN_E_INVALID);
    c.fp8 = SNN_F8E4M3;
    c.q = d;
    c.ldq = 3;
    CHECK(gpu->fp8_codes(gpu, &c) == SNN_E_SHAPE);
    c.ldq = 16;
    c.sinv = NULL;
    CHECK(gpu->fp8_codes(gpu, &c) == SNN_E_INVALID);
    c.sinv = s;
    c.scale = 0.0f;
    CHECK(gpu->fp8_codes(gpu, &c) == SNN_E_INVALID);
    c.scale = 1.0f;
    OK(gpu->fp8_codes(gpu, &c));
    gpu->free(gpu, d);
    gpu->free(gpu, s);
    gpu->free(gpu, C);
}

int main(void) {
    snn_status st = snn_backend_cuda_create(0, &gpu);
    if (st != SNN_OK) {
        fprintf(stderr, "test_cuda_fp8_codes: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    cpu = snn_backend_cpu();
    rng = snn_test_seed();
    test_codes();
    test_gemm_codes();
    test_refusals();
    OK(gpu->synchronize(gpu));
    snn_backend_cuda_destroy(gpu);
    return snn_test_finish("test_cuda_fp8_codes");
}
