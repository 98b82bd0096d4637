/* Host emulation of the CUDA table's convolution and pooling walks and of BatchNorm's short-row
 * sums (x as float, BF16 and F16): runs the kernel bodies of src/backend/cuda/cuda_conv_body.h
 * and cuda_norm_body.h on the CPU, work item after work item, against the CPU
 * table's entries (the reference the GPU tests use), bit for bit. Needs nvcc, no GPU: the
 * indexing, the vector runs and the edges of a walk are checked before device time is spent.
 * Fresh random inputs each run (SNN_TEST_SEED replays one); outputs are poisoned first. */
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_conv_body.h"
#include "backend/cuda/cuda_norm_body.h"

extern "C" {
#include "backend/backend.h"
#include "harness.h"
}

static uint64_t g_rng;

static float *hnew(size_t n, float lo, float hi) {
    float *p = (float *)aligned_alloc(64, (n ? n : 1) * sizeof(float) + 64);
    snn_test_fill_uniform(p, n, lo, hi, &g_rng);
    return p;
}

static float *hpoison(size_t n) {
    float *p = (float *)aligned_alloc(64, (n ? n : 1) * sizeof(float) + 64);
    snn_test_poison(p, n);
    return p;
}

static snn_conv_geom geom(int C, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw) {
    snn_conv_geom g = {C, H, W, kh, kw, sh, sw, ph, pw, 0, 0};
    if (!snn_conv_geom_finish(&g)) {
        fprintf(stderr, "bad test geometry\n");
        exit(1);
    }
    return g;
}

static Geo geo(const snn_conv_geom &g) { return Geo{g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.Ho, g.Wo}; }

static uint32_t bits(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* ------------------------------------------------------------------ im2col in runs */

/* The stored form the entry promises: the FP32 column itself, or its RNE cast. */
template <typename O> static uint32_t want_of(float v);
template <> uint32_t want_of<float>(float v) { return bits(v); }
template <> uint32_t want_of<__nv_bfloat16>(float v) { return snn_f32_to_bf16(v); }
template <> uint32_t want_of<__half>(float v) { return snn_f32_to_f16(v); }

template <typename O> static uint32_t got_of(const O *p) {
    if constexpr (sizeof(O) == 4) {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    } else {
        uint16_t u;
        memcpy(&u, p, 2);
        return u;
    }
}

template <typename O, int V> static void im2col_case(const snn_conv_geom &g, int nb, size_t extra, const char *what) {
    const size_t K = (size_t)g.C * g.kh * g.kw, P = (size_t)g.Ho * g.Wo, in_n = (size_t)g.C * g.H * g.W;
    const size_t ld = (size_t)nb * P + extra, ncol = K * ld;
    if (P % V || ld % V) {
        fprintf(stderr, "%s: not a run-of-%d case\n", what, V);
        exit(1);
    }
    float *x = hnew(in_n * (size_t)nb, -2.0f, 2.0f);
    for (size_t i = 0; i < in_n * (size_t)nb; i += 7) x[i] = 0.0f; /* exact zeros among the values */
    float *ref = hpoison(ncol);
    CHECK(snn_backend_cpu()->im2col(snn_backend_cpu(), &g, nb, x, ref, ld) == SNN_OK);
    O *col = (O *)aligned_alloc(64, ncol * sizeof(O) + 64);
    memset((void *)col, 0xA5, ncol * sizeof(O)); /* the columns past nb*P must keep this */
    const Geo G = geo(g);
    const Im2colDiv d = {div_make((int)(P / V)), div_make(nb), div_make(g.kh * g.kw), div_make(g.kw), div_make(g.Wo)};
    const int items = (int)(K * (size_t)nb * P / V);
    for (int e = 0; e < items; e++) im2col_vec_item<O, V>(G, nb, d, x, col, ld, e);
    size_t bad = 0, touched = 0;
    for (size_t r = 0; r < K; r++)
        for (size_t c = 0; c < ld; c++) {
            const size_t k = r * ld + c;
            if (c < (size_t)nb * P) {
                bad += got_of(col + k) != want_of<O>(ref[k]);
            } else {
                unsigned char pat[sizeof(O)];
                memset(pat, 0xA5, sizeof pat);
                touched += memcmp(col + k, pat, sizeof(O)) != 0;
            }
        }
    CHECK_MSG(bad == 0 && touched == 0, "im2col runs of %d (%zu-byte values) %s: %zu of %zu differ, %zu padding "
              "columns written", V, sizeof(O), what, bad, K * (size_t)nb * P, touched);
    free(x);
    free(ref);
    free(col);
}

static void test_im2col(void) {
    struct {
        int C, H, W, k, s, p, nb;
        size_t extra;
    } cases[] = {
        {4, 16, 16, 3, 1, 1, 3, 0},  /* runs inside output rows */
        {3, 14, 14, 3, 1, 1, 2, 0},  /* W' = 14: runs of 4 cross rows */
        {2, 12, 12, 3, 1, 1, 2, 8},  /* runs of 8 cross rows, ld > nb*P */
        {3, 10, 10, 3, 1, 1, 3, 2},  /* runs of 2 */
        {3, 16, 16, 3, 2, 1, 2, 0},  /* stride 2 */
        {5, 9, 7, 3, 2, 0, 4, 0},    /* W' = 3, P = 12 */
        {8, 8, 8, 1, 1, 0, 4, 0},    /* pointwise */
        {1, 28, 28, 3, 1, 1, 4, 0},  /* convsnn's first layer */
        {3, 17, 15, 5, 2, 2, 4, 0},  /* 5 x 5, odd sides, P = 72 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const snn_conv_geom g =
            geom(cases[i].C, cases[i].H, cases[i].W, cases[i].k, cases[i].k, cases[i].s, cases[i].s, cases[i].p,
                 cases[i].p);
        const size_t P = (size_t)g.Ho * g.Wo, ld = (size_t)cases[i].nb * P + cases[i].extra;
        char what[96];
        snprintf(what, sizeof what, "case %zu (C%d %dx%d k%d s%d p%d nb%d ld%zu)", i, g.C, g.H, g.W, cases[i].k,
                 cases[i].s, cases[i].p, cases[i].nb, ld);
        for (int v = 8; v >= 2; v >>= 1) {
            if (P % (size_t)v || ld % (size_t)v) continue;
            if (v == 8) {
                im2col_case<__nv_bfloat16, 8>(g, cases[i].nb, cases[i].extra, what);
                im2col_case<__half, 8>(g, cases[i].nb, cases[i].extra, what);
            } else if (v == 4) {
                im2col_case<__nv_bfloat16, 4>(g, cases[i].nb, cases[i].extra, what);
                im2col_case<float, 4>(g, cases[i].nb, cases[i].extra, what);
            } else {
                im2col_case<__half, 2>(g, cases[i].nb, cases[i].extra, what);
                im2col_case<float, 2>(g, cases[i].nb, cases[i].extra, what);
            }
        }
    }
}

/* ------------------------------------------------------------------ max pooling */

/* Inputs on a coarse grid (ties), some -inf, NaNs every nan_step values (97: a few; 4: windows
 * with two, where the first must win), zeros of both signs. */
static float *pool_input(size_t n, size_t nan_step) {
    float *x = hnew(n, -3.0f, 3.0f);
    for (size_t i = 0; i < n; i++) x[i] = (float)(int)(x[i] * 2.0f) * 0.5f;
    for (size_t i = 3; i < n; i += 53) x[i] = -INFINITY;
    for (size_t i = 11 % nan_step; i < n; i += nan_step) x[i] = NAN;
    for (size_t i = 5; i < n; i += 29) x[i] = -0.0f;
    return x;
}

static void pool_case(int planes, int H, int W, int k, int s, int p, size_t nan_step) {
    const snn_backend *cpu = snn_backend_cpu();
    const snn_conv_geom g = geom(planes, H, W, k, k, s, s, p, p);
    const size_t nx = (size_t)planes * H * W, ny = (size_t)planes * g.Ho * g.Wo;
    const Geo G = geo(g);
    const Div dWo = div_make(g.Wo), dHo = div_make(g.Ho);
    char what[96];
    snprintf(what, sizeof what, "max pool %d planes %dx%d k%d s%d p%d, NaN every %zu", planes, H, W, k, s, p,
             nan_step);
    float *x = pool_input(nx, nan_step), *yr = hpoison(ny), *dy = hnew(ny, -1.0f, 1.0f);
    for (size_t i = 2; i < ny; i += 31) dy[i] = -0.0f; /* a -0 gradient: the sum from +0 makes it +0 */
    int32_t *ar = (int32_t *)malloc(ny * sizeof(int32_t));
    CHECK(cpu->maxpool_forward(cpu, &g, x, yr, ar) == SNN_OK);
    const bool k3s2 = k == 3 && s == 2 && p == 1;
    if (k3s2) {
        float *y = hpoison(ny);
        int32_t *a = (int32_t *)malloc(ny * sizeof(int32_t));
        memset(a, 0xA5, ny * sizeof(int32_t));
        for (int i = 0; i < (int)ny; i++) maxpool_fwd_k3s2_item(G, dWo, dHo, x, y, a, i);
        size_t bad = 0;
        for (size_t i = 0; i < ny; i++) bad += bits(y[i]) != bits(yr[i]) || a[i] != ar[i];
        CHECK_MSG(bad == 0, "%s forward: %zu of %zu outputs or argmaxes differ", what, bad, ny);
        free(y);
        free(a);
    }
    float *dxr = hpoison(nx), *dx = hpoison(nx);
    CHECK(cpu->maxpool_backward(cpu, &g, dy, ar, dxr) == SNN_OK);
    if (k3s2) {
        for (int i = 0; i < (int)ny; i++) maxpool_bwd_k3s2_item(G, dWo, dHo, dy, ar, dx, i);
    } else {
        for (int i = 0; i < (int)ny; i++) maxpool_bwd_tile_item(G, dWo, dHo, dy, ar, dx, i);
    }
    size_t bad = 0;
    for (size_t i = 0; i < nx; i++) bad += bits(dx[i]) != bits(dxr[i]);
    CHECK_MSG(bad == 0, "%s backward: %zu of %zu input gradients differ (unwritten ones stay NaN)", what, bad, nx);
    free(x), free(yr), free(dy), free(ar), free(dxr), free(dx);
}

static void test_pool(void) {
    /* 3 x 3 / 2 / 1: even and odd sides, one-pixel and one-row planes */
    static const int k3[][3] = {{3, 16, 16}, {2, 9, 7}, {4, 10, 9}, {2, 7, 12}, {3, 1, 1}, {2, 1, 6}, {5, 2, 2},
                                {1, 33, 34}};
    for (size_t i = 0; i < sizeof k3 / sizeof k3[0]; i++)
        for (size_t nan_step = 97; nan_step; nan_step = nan_step == 97 ? 4 : 0)
            pool_case(k3[i][0], k3[i][1], k3[i][2], 3, 2, 1, nan_step);
    /* windows that tile the input (stride = kernel, no padding) */
    static const int tile[][4] = {{5, 14, 14, 2}, {3, 8, 8, 2}, {2, 9, 9, 3}, {4, 4, 4, 4}, {3, 6, 6, 1}};
    for (size_t i = 0; i < sizeof tile / sizeof tile[0]; i++)
        for (size_t nan_step = 97; nan_step; nan_step = nan_step == 97 ? 4 : 0)
            pool_case(tile[i][0], tile[i][1], tile[i][2], tile[i][3], tile[i][3], 0, nan_step);
}

/* ------------------------------------------------------------------ BatchNorm, short rows */

/* backend.h's halving tree over a warp's 32 lane partials: lane l adds lane l + h (what
 * __shfl_down_sync gives lane l), h = 16, 8, 4, 2, 1; lane 0 holds the row's sum. */
static double lane_tree_host(double *v) {
    for (int h = 16; h; h >>= 1)
        for (int l = 0; l < h; l++) v[l] = v[l] + v[l + h];
    return v[0];
}

#define ERR 4 /* rows a warp, as cuda_table_norm.cu's RR */

/* x stored as X: v rounded RNE to X by the library's scalar conversions (not the kernel
 * body's), and *wide that value as a float, the FP32 reference's input. */
template <typename X> static X x_of(float v, float *wide);
template <> float x_of<float>(float v, float *wide) {
    *wide = v;
    return v;
}
template <> __nv_bfloat16 x_of<__nv_bfloat16>(float v, float *wide) {
    const uint16_t u = snn_f32_to_bf16(v);
    *wide = snn_bf16_to_f32(u);
    __nv_bfloat16_raw r;
    r.x = u;
    return __nv_bfloat16(r);
}
template <> __half x_of<__half>(float v, float *wide) {
    const uint16_t u = snn_f32_to_f16(v);
    *wide = snn_f16_to_f32(u);
    __half_raw r;
    r.x = u;
    return __half(r);
}

template <typename X> static const char *x_name(void) {
    return sizeof(X) == 4 ? "f32" : std::is_same<X, __half>::value ? "f16" : "bf16";
}

/* The channel sums of the emulated row partials (the column pass adds the rows in order from
 * 0.0) against the CPU table's batchnorm_stats / batchnorm_backward_sums. The lane bodies
 * read x stored as X; the CPU (FP32 only) gets the same values widened, and the sums must be
 * its bits. */
template <typename X> static void bn_short_case(size_t B, int C, size_t S, float lo, float hi) {
    const snn_backend *cpu = snn_backend_cpu();
    const size_t n = B * (size_t)C, nx = n * S;
    float *x = hnew(nx, lo, hi), *dy = hnew(nx, -1.0f, 1.0f);
    X *xs = (X *)malloc((nx ? nx : 1) * sizeof(X));
    for (size_t i = 0; i < nx; i++) xs[i] = x_of<X>(x[i], &x[i]); /* x becomes the widened values */
    double *s0 = (double *)calloc((size_t)C, sizeof(double)), *s1 = (double *)calloc((size_t)C, sizeof(double));
    double *mean = (double *)calloc((size_t)C, sizeof(double)), *istd = (double *)calloc((size_t)C, sizeof(double));
    double *g0 = (double *)calloc((size_t)C, sizeof(double)), *g1 = (double *)calloc((size_t)C, sizeof(double));
    float *dw = (float *)calloc((size_t)C, sizeof(float)), *db = (float *)calloc((size_t)C, sizeof(float));
    const double cnt = (double)(B * S);
    CHECK(cpu->batchnorm_stats(cpu, SNN_F32, B, C, S, x, NULL, 0.0, s0) == SNN_OK);
    CHECK(cpu->batchnorm_stats(cpu, SNN_F32, B, C, S, x, s0, cnt, s1) == SNN_OK);
    for (int c = 0; c < C; c++) {
        mean[c] = s0[c] / cnt;
        istd[c] = 1.0 / sqrt(s1[c] / cnt + 1e-5);
    }
    CHECK(cpu->batchnorm_backward_sums(cpu, SNN_F32, B, C, S, x, dy, mean, istd, g0, g1, dw, db) == SNN_OK);
    double *part[4];
    for (int k = 0; k < 4; k++) part[k] = (double *)malloc((n ? n : 1) * sizeof(double));
    for (size_t e0 = 0; e0 < n; e0 += ERR) {
        double lanes[4][ERR][32];
        for (unsigned l = 0; l < 32; l++) {
            double a[ERR], b[ERR], p0[ERR], p1[ERR];
            bn_row_short_lane<ERR>(xs, n, (size_t)C, S, NULL, 0.0, e0, l, a);
            bn_row_short_lane<ERR>(xs, n, (size_t)C, S, s0, cnt, e0, l, b);
            bn_grad_row_short_lane<ERR>(xs, dy, n, (size_t)C, S, mean, istd, e0, l, p0, p1);
            for (int r = 0; r < ERR; r++) {
                lanes[0][r][l] = a[r];
                lanes[1][r][l] = b[r];
                lanes[2][r][l] = p0[r];
                lanes[3][r][l] = p1[r];
            }
        }
        for (int k = 0; k < 4; k++)
            for (int r = 0; r < ERR && e0 + r < n; r++) part[k][e0 + r] = lane_tree_host(lanes[k][r]);
    }
    const double *want[4] = {s0, s1, g0, g1};
    size_t bad = 0;
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < C; c++) {
            double a = 0.0;
            for (size_t i = 0; i < B; i++) a = a + part[k][i * (size_t)C + (size_t)c];
            uint64_t u, w;
            memcpy(&u, &a, 8);
            memcpy(&w, &want[k][c], 8);
            bad += u != w;
        }
    CHECK_MSG(bad == 0, "BatchNorm short rows, x %s, B %zu C %d S %zu: %zu of %d channel sums differ from the CPU's",
              x_name<X>(), B, C, S, bad, 4 * C);
    for (int k = 0; k < 4; k++) free(part[k]);
    free(x), free(xs), free(dy), free(s0), free(s1), free(mean), free(istd), free(g0), free(g1), free(dw), free(db);
}

/* Every shape with x as float, BF16 and F16 (a 16-bit convolution's output). */
static void bn_short_cases(size_t B, int C, size_t S, float lo, float hi) {
    bn_short_case<float>(B, C, S, lo, hi);
    bn_short_case<__nv_bfloat16>(B, C, S, lo, hi);
    bn_short_case<__half>(B, C, S, lo, hi);
}

static void test_bn_short(void) {
    bn_short_cases(7, 3, 1, -1, 1);     /* one value a row */
    bn_short_cases(5, 13, 17, -1, 1);   /* rows not a multiple of the warp's four */
    bn_short_cases(3, 4, 49, 0, 1);
    bn_short_cases(67, 7, 2, 100, 101); /* |mean| >> std */
    bn_short_cases(6, 5, 64, -1, 1);    /* Spikformer's 64 tokens */
    bn_short_cases(2, 9, 256, 5, 6);    /* the longest short row */
}

/* The column tiles: a block's two phases run thread by thread on the host (every staging
 * thread, then the COL_C adding ones), against the sums from 0.0 in row order. */
template <int NS, int ROWS> static void col_case(size_t B, int C) {
    double *src[NS];
    for (int k = 0; k < NS; k++) {
        const size_t n = B * (size_t)C;
        src[k] = (double *)malloc((n > 0 ? n : 1) * sizeof(double));
        for (size_t i = 0; i < B * (size_t)C; i++) {
            uint64_t z = g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
            src[k][i] = (double)(int64_t)(z >> 11) * 0x1p-40; /* wide exponents: the order shows */
        }
    }
    const double *cs[NS];
    for (int k = 0; k < NS; k++) cs[k] = src[k];
    static double tile[NS][ROWS][COL_C + 1];
    size_t bad = 0;
    for (int blk = 0; blk < (C + COL_C - 1) / COL_C; blk++) {
        double acc[COL_C][NS];
        for (int t = 0; t < COL_C; t++)
            for (int k = 0; k < NS; k++) acc[t][k] = 0.0;
        for (size_t i0 = 0; i0 < B; i0 += ROWS) {
            const int rows = col_tile_rows(B, i0, ROWS);
            for (int k = 0; k < NS; k++)
                for (int r = 0; r < ROWS; r++)
                    for (int c = 0; c <= COL_C; c++) tile[k][r][c] = NAN; /* what no thread staged */
            for (int tid = 0; tid < COL_THREADS; tid++) col_tile_load<NS, ROWS>(cs, C, blk, i0, rows, tid, tile);
            for (int tid = 0; tid < COL_C; tid++) col_tile_add<NS, ROWS>(tile, rows, tid, acc[tid]);
        }
        for (int t = 0; t < COL_C && blk * COL_C + t < C; t++)
            for (int k = 0; k < NS; k++) {
                double want = 0.0;
                for (size_t i = 0; i < B; i++) want = want + src[k][i * (size_t)C + (size_t)(blk * COL_C + t)];
                bad += memcmp(&want, &acc[t][k], sizeof want) != 0;
            }
    }
    CHECK_MSG(bad == 0, "column tiles (%d arrays, %d rows a tile), B %zu C %d: %zu sums differ", NS, ROWS, B, C, bad);
    for (int k = 0; k < NS; k++) free(src[k]);
}

static void test_col_tiles(void) {
    static const struct { size_t B; int C; } cases[] = {{1, 1}, {128, 384}, {300, 70}, {65, 33}, {0, 5}, {257, 31}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        col_case<1, 128>(cases[i].B, cases[i].C); /* bn_col_kernel's */
        col_case<2, 64>(cases[i].B, cases[i].C);  /* bn_grad_col_kernel's */
    }
}

int main(void) {
    g_rng = snn_test_seed();
    test_im2col();
    test_pool();
    test_bn_short();
    test_col_tiles();
    return snn_test_finish("test_cuda_emul_conv");
}
