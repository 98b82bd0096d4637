/* Finite-difference gradient checks for Conv1d/Conv2d/MaxPool2d/AvgPool2d/Flatten/Dropout/
 * Residual/GELU (and Linear/Sequential compositions), shape errors, and Dropout's mask rules.
 *
 * Scheme: the loss is a random linear functional L = sum_j c_j y_j (accumulated in double),
 * so dL/dy = c is what backward receives. Each checked coordinate v_i is moved to v_i +- eps
 * and the central difference uses the ACTUAL float perturbation (v_i + eps) - v_i, so for
 * modules that are linear in v (convolutions, pooling between argmax switches, dropout with a
 * fixed mask) the difference is exact up to rounding of y. A coordinate fails when
 * |fd - analytic| > 1e-2 |analytic| + 1e-3 max|analytic|. Every check also verifies that the
 * same comparison flags a copy of the analytic gradient with one entry shifted by 5% of the
 * largest entry, so the checker itself is shown to catch a wrong gradient. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "nn/layers_conv.h"

static uint64_t g_state;

/* ---- a tiny stand-alone driver around one module (no snn_model) ---- */

typedef struct {
    snn_module *m;
    int T, N;
    size_t in_n, out_n, B;
    float *params, *grads;
    size_t n_params;
    snn_arena arena;
    snn_run run;
    float *x, *y, *c, *dx;
    snn_param *list[32]; /* every parameter, in flat-array order */
    snn_module *list_owner[32];
    int n_list;
} fixture;

static void count_params(snn_module *m, void *ctx) {
    fixture *f = ctx;
    for (int i = 0; i < m->n_params; i++) f->n_params += m->params[i].numel;
}

static void assign_params(snn_module *m, void *ctx) {
    fixture *f = ctx;
    for (int i = 0; i < m->n_params; i++) {
        m->params[i].data = f->params + f->n_params;
        m->params[i].grad = f->grads + f->n_params;
        if (f->n_list < 32) {
            f->list_owner[f->n_list] = m;
            f->list[f->n_list++] = &m->params[i];
        }
        f->n_params += m->params[i].numel;
    }
}

/* Set up m for per-sample input `in`; returns the setup status (fixture unusable if != OK). */
static snn_status fix_make(fixture *f, snn_module *m, snn_shape in, int T, int N) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->T = T;
    f->N = N;
    snn_module_name_tree(m, "layer");
    m->in = in;
    snn_status st = m->ops->setup(m, in);
    if (st != SNN_OK) return st;
    f->B = (size_t)T * N;
    f->in_n = snn_shape_numel(in);
    f->out_n = snn_shape_numel(m->out);
    snn_module_walk(m, count_params, f);
    size_t np = f->n_params ? f->n_params : 1;
    f->params = calloc(np, sizeof(float));
    f->grads = calloc(np, sizeof(float));
    f->n_params = 0;
    snn_module_walk(m, assign_params, f);
    snn_rng rng = snn_rng_make(g_state ^ 0x55, 7);
    if (m->ops->init) m->ops->init(m, &rng);
    snn_arena_begin_measure(&f->arena);
    if (m->ops->reserve) m->ops->reserve(m, &f->arena, T, N);
    snn_arena_allocate(&f->arena, f->arena.used + 64);
    if (m->ops->reserve) m->ops->reserve(m, &f->arena, T, N);
    snn_test_poison((float *)f->arena.base, f->arena.size / sizeof(float));
    f->run.T = T;
    f->run.N = N;
    f->run.training = 1;
    f->run.seed = 1234567;
    f->run.step = 3;
    f->run.be = snn_backend_cpu();
    f->x = malloc(sizeof(float) * f->B * f->in_n);
    f->dx = malloc(sizeof(float) * f->B * f->in_n);
    f->y = malloc(sizeof(float) * f->B * f->out_n);
    f->c = malloc(sizeof(float) * f->B * f->out_n);
    snn_test_fill_uniform(f->x, f->B * f->in_n, -1.0f, 1.0f, &g_state);
    snn_test_fill_uniform(f->c, f->B * f->out_n, -1.0f, 1.0f, &g_state);
    return SNN_OK;
}

static void fix_free(fixture *f) {
    snn_module_free(f->m);
    snn_arena_free(&f->arena);
    free(f->params);
    free(f->grads);
    free(f->x);
    free(f->dx);
    free(f->y);
    free(f->c);
}

static double fix_loss(fixture *f) {
    snn_test_poison(f->y, f->B * f->out_n);
    snn_status st = f->m->ops->forward(f->m, &f->run, f->x, f->y);
    CHECK(st == SNN_OK);
    double L = 0.0;
    for (size_t i = 0; i < f->B * f->out_n; i++) L += (double)f->c[i] * f->y[i];
    return L;
}

/* Forward then backward with dy = c: fills f->dx and f->grads (zeroed first). */
static void fix_grads(fixture *f) {
    fix_loss(f);
    memset(f->grads, 0, sizeof(float) * (f->n_params ? f->n_params : 1));
    snn_test_poison(f->dx, f->B * f->in_n);
    CHECK(f->m->ops->backward(f->m, &f->run, f->x, f->y, f->c, f->dx) == SNN_OK);
}

/* Worst ratio |fd - an| / (1e-2 |an| + 1e-3 scale) over the checked coordinates of v
 * (all of them, or `limit` random ones); > 1 is a failure. fd[] must hold the differences. */
static double compare(const float *an, const double *fd, const size_t *idx, size_t k, size_t n) {
    double scale = 1e-3;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(an[i]));
    double worst = 0.0;
    for (size_t j = 0; j < k; j++) {
        double a = an[idx[j]];
        double r = fabs(fd[j] - a) / (1e-2 * fabs(a) + 1e-3 * scale);
        if (isnan(r) || isnan(a)) r = INFINITY;
        if (r > worst) worst = r;
    }
    return worst;
}

static void fd_check(fixture *f, const char *what, float *v, size_t n, const float *an, double eps,
                     size_t limit) {
    size_t k = n < limit ? n : limit;
    size_t *idx = malloc(sizeof(size_t) * (k ? k : 1));
    double *fd = malloc(sizeof(double) * (k ? k : 1));
    for (size_t j = 0; j < k; j++) {
        if (k == n) {
            idx[j] = j;
        } else {
            float u;
            snn_test_fill_uniform(&u, 1, 0.0f, 1.0f, &g_state);
            idx[j] = (size_t)(u * (float)n) % n;
        }
    }
    /* Central differences at eps; a coordinate that misses is measured again at eps / 4 and
     * keeps the better of the two (a kink of GELU or a float32 rounding of the loss within
     * eps can spoil one step size, a wrong gradient fails both). */
    double worst = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        const double h = pass ? eps / 4 : eps;
        for (size_t j = 0; j < k; j++) {
            if (pass && compare(an, fd + j, idx + j, 1, n) <= 1.0) continue;
            size_t i = idx[j];
            float save = v[i];
            v[i] = save + (float)h;
            float hp = v[i] - save;
            double Lp = fix_loss(f);
            v[i] = save - (float)h;
            float hm = v[i] - save;
            double Lm = fix_loss(f);
            v[i] = save;
            double d = (Lp - Lm) / ((double)hp - (double)hm);
            if (!pass || compare(an, &d, idx + j, 1, n) < compare(an, fd + j, idx + j, 1, n)) fd[j] = d;
        }
        worst = compare(an, fd, idx, k, n);
        if (worst <= 1.0) break;
    }
    CHECK_MSG(worst <= 1.0, "%s: %s gradient off (worst ratio %.3g over %zu coordinates)", f->m->ops->kind,
              what, worst, k);
    /* The checker must reject a wrong gradient: shift one checked entry by 5% of the scale. */
    if (k > 0) {
        float *bad = malloc(sizeof(float) * n);
        memcpy(bad, an, sizeof(float) * n);
        double scale = 1e-3;
        for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(an[i]));
        bad[idx[k / 2]] += (float)(0.05 * scale);
        CHECK_MSG(compare(bad, fd, idx, k, n) > 1.0, "%s: checker missed a corrupted %s gradient",
                  f->m->ops->kind, what);
        free(bad);
    }
    free(idx);
    free(fd);
}

/* dx and every parameter gradient of f's module; also the accumulate and dx == NULL rules. */
static void check_module(fixture *f, double eps, size_t limit) {
    fix_grads(f);
    float *dx = malloc(sizeof(float) * f->B * f->in_n);
    float *g = malloc(sizeof(float) * (f->n_params ? f->n_params : 1));
    memcpy(dx, f->dx, sizeof(float) * f->B * f->in_n);
    memcpy(g, f->grads, sizeof(float) * f->n_params);
    fd_check(f, "input", f->x, f->B * f->in_n, dx, eps, limit);
    for (int i = 0; i < f->n_list; i++) {
        snn_param *p = f->list[i];
        size_t off = (size_t)(p->data - f->params);
        char what[160];
        snprintf(what, sizeof what, "%s.%s", f->list_owner[i]->name, p->name);
        fd_check(f, what, p->data, p->numel, g + off, eps, limit);
    }
    /* Backward adds parameter gradients (a second call doubles them); dx may be NULL. */
    if (f->n_params) {
        fix_loss(f);
        CHECK(f->m->ops->backward(f->m, &f->run, f->x, f->y, f->c, NULL) == SNN_OK);
        /* relative to the largest entry: an entry that cancels to ~0 may round differently
         * when the GEMM accumulates onto the first pass */
        double worst = 0, scale = 1e-30;
        for (size_t i = 0; i < f->n_params; i++) scale = fmax(scale, fabs(2.0 * g[i]));
        for (size_t i = 0; i < f->n_params; i++) worst = fmax(worst, fabs(f->grads[i] - 2.0 * g[i]) / scale);
        CHECK_MSG(worst < 1e-5, "%s: second backward does not accumulate (rel %.3g)", f->m->ops->kind, worst);
    }
    free(dx);
    free(g);
}

/* Distinct inputs on a grid (spacing 0.03 > 2 eps), in random order: no ties, and a
 * perturbation of eps never changes which element of a window is the maximum. */
static void fill_distinct(float *x, size_t n) {
    size_t *perm = malloc(sizeof(size_t) * n);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        float u;
        snn_test_fill_uniform(&u, 1, 0.0f, 1.0f, &g_state);
        size_t j = (size_t)(u * (float)i) % i, t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) x[i] = 0.03f * ((float)perm[i] - (float)n / 2.0f);
    free(perm);
}

/* Direct-loop Conv2d in double, independent of im2col and BLAS. */
static double conv2d_ref_err(fixture *f, int C, int H, int W, int O, int k, int s, int p, int bias) {
    int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    const float *Wt = f->list[0]->data, *bv = bias ? f->list[1]->data : NULL;
    fix_loss(f);
    double worst = 0.0, scale = 1e-6;
    for (size_t b = 0; b < f->B; b++)
        for (int o = 0; o < O; o++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    double acc = bv ? bv[o] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int ih = oh * s - p + i, iw = ow * s - p + j;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += (double)Wt[((o * C + c) * k + i) * k + j] *
                                       f->x[((b * C + c) * H + ih) * W + iw];
                            }
                    double got = f->y[((b * O + o) * Ho + oh) * Wo + ow];
                    worst = fmax(worst, fabs(got - acc));
                    scale = fmax(scale, fabs(acc));
                }
    return worst / scale;
}

static void test_conv2d(void) {
    static const int cfg[][8] = {
        /* C, H, W, O, k, s, p, bias */
        {2, 5, 7, 3, 3, 2, 1, 1}, {2, 5, 7, 3, 3, 1, 1, 0}, {1, 6, 5, 2, 2, 1, 0, 1},
        {3, 7, 5, 2, 5, 3, 2, 1}, {2, 5, 7, 4, 1, 1, 0, 1}, {2, 4, 4, 2, 3, 2, 3, 1},
        {4, 9, 9, 8, 3, 1, 1, 1}, /* large enough for the OpenMP paths */
    };
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
        const int *c = cfg[t];
        fixture f;
        /* B = 21 once: several dW groups of 8 and a remainder */
        int big = t == 0;
        snn_status st = fix_make(&f, snn_conv2d_new(c[0], c[3], c[4], c[5], c[6], c[7]),
                                 snn_shape3(c[0], c[1], c[2]), big ? 3 : 2, big ? 7 : 3);
        CHECK_MSG(st == SNN_OK, "conv2d setup: %s", snn_last_error());
        if (st != SNN_OK) continue;
        CHECK(f.m->n_params == (c[7] ? 2 : 1));
        CHECK(f.m->params[0].shape.rank == 4 && f.m->params[0].shape.d[0] == c[3] &&
              f.m->params[0].shape.d[1] == c[0] && f.m->params[0].shape.d[3] == c[4]);
        /* PyTorch's default init bound 1/sqrt(C k k), and not all zero */
        double bound = 1.0 / sqrt((double)c[0] * c[4] * c[4]), mx = 0;
        for (size_t i = 0; i < f.m->params[0].numel; i++) mx = fmax(mx, fabs(f.m->params[0].data[i]));
        /* the lower bound only where enough weights make it all but certain (0.3^32) */
        CHECK(mx <= bound && mx > (f.m->params[0].numel >= 32 ? 0.3 * bound : 0.0));
        CHECK_MSG(conv2d_ref_err(&f, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]) < 1e-5,
                  "conv2d forward differs from the direct loop (config %zu)", t);
        /* the OpenMP-sized config checks a random subset: it runs for every engine path */
        check_module(&f, 1e-2, t == 6 ? 40 : 300);
        fix_free(&f);
    }
    CHECK(snn_conv2d_in_channels(NULL) == -1);
}

static void test_conv1d(void) {
    static const int cfg[][7] = {
        /* C, L, O, k, s, p, bias */
        {3, 9, 4, 3, 2, 1, 1}, {2, 8, 3, 5, 1, 2, 0}, {3, 6, 5, 1, 1, 0, 1}, {4, 5, 3, 1, 1, 0, 0},
        {2, 7, 3, 1, 2, 0, 1}, {24, 40, 16, 1, 1, 0, 1}, /* the last one runs the OpenMP paths */
    };
    for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
        const int *c = cfg[t];
        fixture f;
        snn_status st = fix_make(&f, snn_conv1d_new(c[0], c[2], c[3], c[4], c[5], c[6]),
                                 snn_shape2(c[0], c[1]), 2, 3);
        CHECK_MSG(st == SNN_OK, "conv1d setup: %s", snn_last_error());
        if (st != SNN_OK) continue;
        int pw = c[3] == 1 && c[4] == 1 && c[5] == 0;
        CHECK(snn_conv1d_is_pointwise(f.m) == pw);
        CHECK(snn_conv1d_in_channels(f.m) == c[0] && snn_conv1d_out_channels(f.m) == c[2]);
        CHECK(f.m->params[0].shape.rank == 3 && f.m->params[0].shape.d[2] == c[3]);
        /* Conv1d([C, L]) is Conv2d([C, 1, L]) with a 1 x k kernel: compare against the loop */
        {
            int Lo = (c[1] + 2 * c[5] - c[3]) / c[4] + 1;
            fix_loss(&f);
            double worst = 0, scale = 1e-6;
            const float *Wt = f.list[0]->data, *bv = c[6] ? f.list[1]->data : NULL;
            for (size_t b = 0; b < f.B; b++)
                for (int o = 0; o < c[2]; o++)
                    for (int l = 0; l < Lo; l++) {
                        double acc = bv ? bv[o] : 0.0;
                        for (int ci = 0; ci < c[0]; ci++)
                            for (int j = 0; j < c[3]; j++) {
                                int il = l * c[4] - c[5] + j;
                                if (il >= 0 && il < c[1])
                                    acc += (double)Wt[(o * c[0] + ci) * c[3] + j] * f.x[(b * c[0] + ci) * c[1] + il];
                            }
                        worst = fmax(worst, fabs(f.y[(b * c[2] + o) * Lo + l] - acc));
                        scale = fmax(scale, fabs(acc));
                    }
            CHECK_MSG(worst / scale < 1e-5, "conv1d forward differs from the direct loop (config %zu)", t);
        }
        check_module(&f, 1e-2, t == 5 ? 40 : 500);
        fix_free(&f);
    }
    snn_module *lin = snn_linear_new(3, 4, 1);
    CHECK(snn_conv1d_is_pointwise(lin) == 0 && snn_conv1d_in_channels(lin) == -1);
    snn_module_free(lin);
}

static void test_pools(void) {
    static const int cfg[][3] = {{3, 2, 1}, {2, 2, 0}, {3, 1, 1}, {2, 0, 0}, {1, 2, 0}};
    for (int is_max = 0; is_max < 2; is_max++)
        for (size_t t = 0; t < sizeof cfg / sizeof cfg[0]; t++) {
            const int *c = cfg[t];
            fixture f;
            snn_module *m = is_max ? snn_maxpool2d_new(c[0], c[1], c[2]) : snn_avgpool2d_new(c[0], c[1], c[2]);
            snn_status st = fix_make(&f, m, snn_shape3(2, 5, 7), 2, 3);
            CHECK_MSG(st == SNN_OK, "pool setup: %s", snn_last_error());
            if (st != SNN_OK) continue;
            int s = c[1] ? c[1] : c[0];
            CHECK(f.m->out.rank == 3 && f.m->out.d[0] == 2 && f.m->out.d[1] == (5 + 2 * c[2] - c[0]) / s + 1 &&
                  f.m->out.d[2] == (7 + 2 * c[2] - c[0]) / s + 1);
            if (is_max) fill_distinct(f.x, f.B * f.in_n);
            check_module(&f, 1e-2, 500);
            fix_free(&f);
        }
}

static void test_flatten_gelu(void) {
    fixture f;
    snn_status st = fix_make(&f, snn_flatten_new(), snn_shape3(2, 5, 7), 2, 3);
    CHECK(st == SNN_OK);
    if (st == SNN_OK) {
        CHECK(f.m->out.rank == 1 && f.m->out.d[0] == 70);
        fix_loss(&f);
        CHECK(memcmp(f.x, f.y, sizeof(float) * f.B * f.in_n) == 0);
        check_module(&f, 1e-2, 500);
        fix_free(&f);
    }
    st = fix_make(&f, snn_gelu_new(), snn_shape2(3, 7), 2, 3);
    CHECK(st == SNN_OK);
    if (st == SNN_OK) {
        snn_test_fill_uniform(f.x, f.B * f.in_n, -3.0f, 3.0f, &g_state);
        fix_loss(&f);
        double worst = 0;
        for (size_t i = 0; i < f.B * f.in_n; i++) {
            double v = f.x[i], ref = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
            worst = fmax(worst, fabs(f.y[i] - ref));
        }
        CHECK_MSG(worst < 1e-6, "GELU value off by %.3g", worst);
        check_module(&f, 1e-2, 500);
        fix_free(&f);
    }
}

static void test_dropout(void) {
    const float p = 0.3f;
    fixture f;
    snn_status st = fix_make(&f, snn_dropout_new(p), snn_shape2(4, 5), 2, 3);
    CHECK(st == SNN_OK);
    if (st == SNN_OK) {
        check_module(&f, 1e-2, 500); /* same step -> same mask -> linear */
        fix_free(&f);
    }
    const int T = 3, N = 4, numel = 1000;
    st = fix_make(&f, snn_dropout_new(p), snn_shape1(numel), T, N);
    CHECK(st == SNN_OK);
    if (st != SNN_OK) return;
    for (size_t i = 0; i < f.B * f.in_n; i++)
        if (f.x[i] == 0.0f) f.x[i] = 0.5f;
    const float scale = 1.0f / (1.0f - p);
    const size_t per_t = (size_t)N * numel;
    fix_loss(&f);
    uint64_t stream = snn_dropout_stream(f.m);
    size_t dropped = 0, bad_t = 0, bad_val = 0, bad_formula = 0;
    for (size_t j = 0; j < per_t; j++) {
        int keep = f.y[j] != 0.0f;
        dropped += !keep;
        int expect = snn_rng_uniform(f.run.seed, stream, f.run.step * per_t + j) >= p;
        bad_formula += keep != expect;
        for (int t = 0; t < T; t++) {
            float xv = f.x[t * per_t + j], yv = f.y[t * per_t + j];
            bad_t += (yv != 0.0f) != keep;
            bad_val += keep ? yv != xv * scale : yv != 0.0f;
        }
    }
    double rate = (double)dropped / (double)per_t;
    CHECK_MSG(fabs(rate - p) < 0.04, "dropout rate %.3f, expected %.2f", rate, (double)p);
    CHECK_MSG(bad_t == 0, "dropout mask differs across time steps at %zu places", bad_t);
    CHECK_MSG(bad_val == 0, "dropout kept values not scaled by 1/(1-p) at %zu places", bad_val);
    CHECK_MSG(bad_formula == 0, "dropout mask does not follow the documented Philox indexing (%zu)", bad_formula);
    /* backward: dx = dy * mask, again the same for every t */
    CHECK(f.m->ops->backward(f.m, &f.run, f.x, f.y, f.c, f.dx) == SNN_OK);
    size_t bad_dx = 0;
    for (size_t i = 0; i < f.B * f.in_n; i++)
        bad_dx += f.dx[i] != (f.y[i % per_t] != 0.0f ? f.c[i] * scale : 0.0f);
    CHECK(bad_dx == 0);
    /* samples differ; the same step redraws the same mask; the next step draws a new one */
    size_t diff_n = 0;
    for (int i = 0; i < numel; i++) diff_n += (f.y[i] != 0.0f) != (f.y[numel + i] != 0.0f);
    CHECK(diff_n > (size_t)(0.2 * numel));
    float *y0 = malloc(sizeof(float) * f.B * f.out_n);
    memcpy(y0, f.y, sizeof(float) * f.B * f.out_n);
    fix_loss(&f);
    CHECK(memcmp(y0, f.y, sizeof(float) * f.B * f.out_n) == 0);
    f.run.step++;
    fix_loss(&f);
    size_t diff_step = 0;
    for (size_t j = 0; j < per_t; j++) diff_step += (y0[j] != 0.0f) != (f.y[j] != 0.0f);
    CHECK(diff_step > (size_t)(0.2 * per_t));
    /* eval: identity forward and backward */
    f.run.training = 0;
    fix_loss(&f);
    CHECK(memcmp(f.x, f.y, sizeof(float) * f.B * f.in_n) == 0);
    CHECK(f.m->ops->backward(f.m, &f.run, f.x, f.y, f.c, f.dx) == SNN_OK);
    CHECK(memcmp(f.c, f.dx, sizeof(float) * f.B * f.in_n) == 0);
    free(y0);
    fix_free(&f);
    /* p = 1 drops everything; p outside [0, 1] is refused */
    st = fix_make(&f, snn_dropout_new(1.0f), snn_shape1(50), 2, 2);
    CHECK(st == SNN_OK);
    if (st == SNN_OK) {
        fix_loss(&f);
        size_t nz = 0;
        for (size_t i = 0; i < f.B * f.out_n; i++) nz += f.y[i] != 0.0f;
        CHECK(nz == 0);
        fix_free(&f);
    }
    snn_module *d = snn_dropout_new(1.5f);
    d->in = snn_shape1(4);
    CHECK(d->ops->setup(d, snn_shape1(4)) == SNN_E_INVALID && strstr(snn_last_error(), "Dropout"));
    snn_module_free(d);
}

static void test_residual(void) {
    fixture f;
    snn_status st = fix_make(&f, snn_residual_new(snn_conv2d_new(2, 2, 3, 1, 1, 1)), snn_shape3(2, 5, 7), 2, 3);
    CHECK_MSG(st == SNN_OK, "residual setup: %s", snn_last_error());
    if (st == SNN_OK) {
        CHECK(f.m->n_children == 1 && !strcmp(f.m->children[0]->name, "layer.0"));
        CHECK(f.n_list == 2);
        check_module(&f, 1e-2, 500);
        fix_free(&f);
    }
    /* Residual around a Sequential with a nonlinearity and a pointwise Conv1d */
    snn_module *seq = snn_sequential_new();
    snn_module_add_child(seq, snn_conv1d_new(3, 4, 1, 1, 0, 1));
    snn_module_add_child(seq, snn_gelu_new());
    snn_module_add_child(seq, snn_conv1d_new(4, 3, 3, 1, 1, 0));
    st = fix_make(&f, snn_residual_new(seq), snn_shape2(3, 6), 2, 3);
    CHECK_MSG(st == SNN_OK, "residual setup: %s", snn_last_error());
    if (st == SNN_OK) {
        CHECK(!strcmp(f.m->children[0]->children[2]->name, "layer.0.2"));
        check_module(&f, 1e-2, 500);
        fix_free(&f);
    }
    /* an inner module that changes the shape is refused */
    snn_module *r = snn_residual_new(snn_conv2d_new(2, 3, 3, 1, 1, 1));
    snn_module_name_tree(r, "res");
    r->in = snn_shape3(2, 5, 7);
    CHECK(r->ops->setup(r, r->in) == SNN_E_SHAPE && strstr(snn_last_error(), "Residual"));
    snn_module_free(r);
}

static void test_linear_sequential(void) {
    fixture f;
    snn_status st = fix_make(&f, snn_linear_new(6, 4, 1), snn_shape2(3, 6), 2, 3);
    CHECK(st == SNN_OK);
    if (st == SNN_OK) {
        check_module(&f, 1e-2, 500);
        fix_free(&f);
    }
    /* MaxPool first (distinct inputs, so no argmax switch) -> Conv2d -> AvgPool -> GELU ->
     * Flatten -> Dropout -> Linear */
    snn_module *seq = snn_sequential_new();
    snn_module_add_child(seq, snn_maxpool2d_new(2, 1, 0));    /* [2,6,8] -> [2,5,7] */
    snn_module_add_child(seq, snn_conv2d_new(2, 3, 3, 2, 1, 1)); /* -> [3,3,4] */
    snn_module_add_child(seq, snn_avgpool2d_new(2, 1, 1));    /* -> [3,4,5] */
    snn_module_add_child(seq, snn_gelu_new());
    snn_module_add_child(seq, snn_flatten_new());             /* -> [60] */
    snn_module_add_child(seq, snn_dropout_new(0.25f));
    snn_module_add_child(seq, snn_linear_new(60, 5, 1));
    st = fix_make(&f, seq, snn_shape3(2, 6, 8), 2, 3);
    CHECK_MSG(st == SNN_OK, "sequential setup: %s", snn_last_error());
    if (st == SNN_OK) {
        CHECK(f.m->out.rank == 1 && f.m->out.d[0] == 5);
        CHECK(f.n_list == 4);
        fill_distinct(f.x, f.B * f.in_n);
        check_module(&f, 1e-2, 300);
        fix_free(&f);
    }
}

static void expect_setup_error(snn_module *m, snn_shape in, snn_status want, const char *word) {
    snn_module_name_tree(m, "bad");
    m->in = in;
    snn_clear_error();
    snn_status st = m->ops->setup(m, in);
    CHECK_MSG(st == want, "%s: got %s, want %s", m->ops->kind, snn_status_name(st), snn_status_name(want));
    CHECK_MSG(strstr(snn_last_error(), word) != NULL, "message \"%s\" lacks \"%s\"", snn_last_error(), word);
    snn_module_free(m);
}

static void test_errors(void) {
    expect_setup_error(snn_conv2d_new(3, 4, 3, 1, 1, 1), snn_shape3(2, 5, 7), SNN_E_SHAPE, "[2, 5, 7]");
    expect_setup_error(snn_conv2d_new(3, 4, 3, 1, 1, 1), snn_shape2(3, 5), SNN_E_SHAPE, "Conv2d");
    expect_setup_error(snn_conv2d_new(2, 4, 9, 1, 0, 1), snn_shape3(2, 5, 7), SNN_E_SHAPE, "kernel 9");
    expect_setup_error(snn_conv2d_new(2, 4, 3, 0, 1, 1), snn_shape3(2, 5, 7), SNN_E_INVALID, "stride");
    expect_setup_error(snn_conv1d_new(3, 4, 1, 1, 0, 1), snn_shape2(2, 5), SNN_E_SHAPE, "Conv1d");
    expect_setup_error(snn_conv1d_new(3, 4, 1, 1, 0, 1), snn_shape3(3, 5, 1), SNN_E_SHAPE, "[3, L]");
    expect_setup_error(snn_maxpool2d_new(3, 2, 2), snn_shape3(2, 5, 7), SNN_E_INVALID, "padding");
    expect_setup_error(snn_avgpool2d_new(2, 2, 0), snn_shape1(5), SNN_E_SHAPE, "AvgPool2d");
    expect_setup_error(snn_maxpool2d_new(9, 1, 0), snn_shape3(2, 5, 7), SNN_E_SHAPE, "MaxPool2d");
}

int main(void) {
    g_state = snn_test_seed();
    /* Every engine path: automatic, batched and per-sample strategies, each with automatic
     * chunking (one chunk here), one sample per GEMM, and 4 + 2 samples per GEMM. */
    for (int strategy = 0; strategy <= 2; strategy++)
        for (int chunk = 0; chunk <= 4; chunk += chunk ? 3 : 1) {
            snn_conv_set_strategy(strategy);
            snn_conv_set_max_chunk(chunk);
            snn_conv_set_dw_grouped(chunk == 1 ? 1 : 0); /* per-sample: grouped and batched dW */
            test_conv2d();
            test_conv1d();
        }
    snn_conv_set_strategy(0);
    snn_conv_set_dw_grouped(0);
    snn_conv_set_max_chunk(0);
    test_pools();
    test_flatten_gelu();
    test_dropout();
    test_residual();
    test_linear_sequential();
    test_errors();
    return snn_test_finish("test_layers_conv");
}
