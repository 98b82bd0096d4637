/* BatchNorm and LayerNorm: finite-difference gradient checks (training and eval modes,
 * [C], [C, L] and [C, H, W] inputs), gradient accumulation, normalisation properties and
 * argument errors. Values against PyTorch are checked by tests/oracle_norms.py. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "nn/layers.h"

static uint64_t rs;

/* A module hosted alone, the way snn_model does it: flat params/grads/buffers, an arena. */
typedef struct {
    snn_module *m;
    float *params, *grads, *bufs;
    snn_arena arena;
    snn_run run;
    size_t n_in, n_out;
} host;

static int host_make(host *h, snn_module *m, snn_shape in, int T, int N) {
    memset(h, 0, sizeof *h);
    h->m = m;
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
    snn_rng rng = snn_rng_make(1, 2);
    m->ops->init(m, &rng);
    snn_arena_begin_measure(&h->arena);
    m->ops->reserve(m, &h->arena, T, N);
    if (snn_arena_allocate(&h->arena, h->arena.used) != SNN_OK) return 0;
    m->ops->reserve(m, &h->arena, T, N);
    h->run.T = T;
    h->run.N = N;
    h->run.training = 1;
    h->run.be = snn_backend_cpu();
    h->n_in = (size_t)T * N * snn_shape_numel(in);
    h->n_out = (size_t)T * N * snn_shape_numel(m->out);
    return 1;
}

static void host_free(host *h) {
    snn_arena_free(&h->arena);
    free(h->params);
    free(h->grads);
    free(h->bufs);
    snn_module_free(h->m);
}

/* L = sum r * y in double. */
static double objective(host *h, const float *x, float *y, const float *r) {
    snn_status st = h->m->ops->forward(h->m, &h->run, x, y);
    if (st != SNN_OK) return NAN;
    double L = 0;
    for (size_t i = 0; i < h->n_out; i++) L += (double)r[i] * y[i];
    return L;
}

/* Compare analytic gradients with central differences of L for x and every weight. */
static void fd_check(const char *what, host *h, float *x, const float *r, float hstep) {
    float *y = malloc(h->n_out * sizeof(float)), *dx = malloc(h->n_in * sizeof(float));
    snn_module *m = h->m;
    size_t np = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].kind == SNN_PARAM_WEIGHT) np += m->params[i].numel;
    memset(h->grads, 0, np * sizeof(float));
    snn_test_poison(y, h->n_out);
    snn_test_poison(dx, h->n_in);
    CHECK(m->ops->forward(m, &h->run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h->run, x, y, r, dx) == SNN_OK);
    float *an_p = malloc((np + 1) * sizeof(float));
    memcpy(an_p, h->grads, np * sizeof(float));

    double worst = 0;
    for (size_t i = 0; i < h->n_in; i++) {
        float keep = x[i];
        x[i] = keep + hstep;
        double lp = objective(h, x, y, r);
        x[i] = keep - hstep;
        double lm = objective(h, x, y, r);
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * hstep);
        double err = fabs(fd - dx[i]) / (2e-3 + 1e-2 * fabs(fd));
        if (err > worst) worst = err;
        CHECK_MSG(err <= 1.0, "%s dx[%zu]: analytic %.6g, finite difference %.6g", what, i,
                  (double)dx[i], fd);
    }
    for (size_t i = 0; i < np; i++) {
        float keep = h->params[i];
        h->params[i] = keep + hstep;
        double lp = objective(h, x, y, r);
        h->params[i] = keep - hstep;
        double lm = objective(h, x, y, r);
        h->params[i] = keep;
        double fd = (lp - lm) / (2.0 * hstep);
        double err = fabs(fd - an_p[i]) / (2e-3 + 1e-2 * fabs(fd));
        if (err > worst) worst = err;
        CHECK_MSG(err <= 1.0, "%s dparam[%zu]: analytic %.6g, finite difference %.6g", what, i,
                  (double)an_p[i], fd);
    }
    fprintf(stderr, "%s: worst error / tolerance %.3f\n", what, worst);

    /* backward ADDS parameter gradients, and dx may be NULL */
    CHECK(m->ops->forward(m, &h->run, x, y) == SNN_OK);
    CHECK(m->ops->backward(m, &h->run, x, y, r, NULL) == SNN_OK);
    CHECK(m->ops->backward(m, &h->run, x, y, r, NULL) == SNN_OK);
    for (size_t i = 0; i < np; i++)
        CHECK_MSG(fabsf(h->grads[i] - 3.0f * an_p[i]) <= 1e-5f * (1.0f + fabsf(an_p[i])),
                  "%s: gradient %zu not accumulated (%g vs 3 * %g)", what, i,
                  (double)h->grads[i], (double)an_p[i]);
    free(an_p);
    free(y);
    free(dx);
}

static void randomise_affine(host *h) {
    snn_module *m = h->m;
    snn_test_fill_uniform(m->params[0].data, m->params[0].numel, 0.5f, 1.5f, &rs);
    snn_test_fill_uniform(m->params[1].data, m->params[1].numel, -1.0f, 1.0f, &rs);
}

static void test_bn_shape(snn_shape in, int T, int N) {
    char name[96], sh[48];
    snprintf(name, sizeof name, "BatchNorm %s T=%d N=%d", snn_shape_str(in, sh, sizeof sh), T, N);
    host h;
    CHECK(host_make(&h, snn_batchnorm_new(in.d[0], 1e-5f, 0.1f), in, T, N));
    snn_module *m = h.m;
    CHECK(m->n_params == 4 && strcmp(m->params[2].name, "running_mean") == 0 &&
          m->params[2].kind == SNN_PARAM_BUFFER && m->params[3].kind == SNN_PARAM_BUFFER &&
          m->params[0].decay == 0 && m->params[1].decay == 0);
    int C = in.d[0];
    CHECK(m->params[3].data[C - 1] == 1.0f && m->params[2].data[0] == 0.0f &&
          m->params[0].data[0] == 1.0f && m->params[1].data[0] == 0.0f);

    float *x = malloc(h.n_in * sizeof(float)), *r = malloc(h.n_out * sizeof(float));
    float *y = malloc(h.n_out * sizeof(float));
    snn_test_fill_uniform(x, h.n_in, -2.0f, 3.0f, &rs);
    snn_test_fill_uniform(r, h.n_out, -1.0f, 1.0f, &rs);

    /* with weight 1 / bias 0 every channel comes out with mean 0 and biased variance ~1 */
    snn_test_poison(y, h.n_out);
    CHECK(m->ops->forward(m, &h.run, x, y) == SNN_OK);
    size_t S = snn_shape_numel(in) / (size_t)C, B = (size_t)T * N;
    for (int c = 0; c < C; c++) {
        double s = 0, ss = 0, xs = 0, xss = 0;
        for (size_t b = 0; b < B; b++)
            for (size_t k = 0; k < S; k++) {
                double v = y[(b * C + c) * S + k], u = x[(b * C + c) * S + k];
                s += v;
                ss += v * v;
                xs += u;
                xss += u * u;
            }
        double n = (double)(B * S), mu = s / n, var = ss / n - mu * mu;
        double xv = xss / n - (xs / n) * (xs / n), want = xv / (xv + 1e-5);
        CHECK_MSG(fabs(mu) < 1e-5 && fabs(var - want) < 1e-4, "%s channel %d: mean %g var %g (want %g)",
                  name, c, mu, var, want);
    }

    randomise_affine(&h);
    fd_check(name, &h, x, r, 4e-3f);

    /* eval mode: running statistics, affine backward */
    char en[128];
    snprintf(en, sizeof en, "%s eval", name);
    snn_test_fill_uniform(m->params[2].data, (size_t)C, -1.0f, 1.0f, &rs);
    snn_test_fill_uniform(m->params[3].data, (size_t)C, 0.5f, 2.0f, &rs);
    h.run.training = 0;
    float rm0 = m->params[2].data[0], rv0 = m->params[3].data[0];
    fd_check(en, &h, x, r, 4e-3f);
    CHECK_MSG(m->params[2].data[0] == rm0 && m->params[3].data[0] == rv0,
              "%s: eval forward changed the running statistics", en);
    free(x);
    free(r);
    free(y);
    host_free(&h);
}

static void test_bn_errors(void) {
    host h;
    snn_module *m = snn_batchnorm_new(4, 1e-5f, 0.1f);
    m->in = snn_shape2(5, 3);
    CHECK(m->ops->setup(m, m->in) == SNN_E_SHAPE);
    snn_module_free(m);
    m = snn_batchnorm_new(4, 1e-5f, 1.5f);
    CHECK(m->ops->setup(m, snn_shape1(4)) == SNN_E_INVALID);
    snn_module_free(m);
    m = snn_batchnorm_new(4, -1.0f, 0.1f);
    CHECK(m->ops->setup(m, snn_shape1(4)) == SNN_E_INVALID);
    snn_module_free(m);
    /* one value per channel cannot be normalised in training (PyTorch refuses too) */
    CHECK(host_make(&h, snn_batchnorm_new(3, 1e-5f, 0.1f), snn_shape1(3), 1, 1));
    float x[3] = {1, 2, 3}, y[3];
    CHECK(h.m->ops->forward(h.m, &h.run, x, y) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "more than one value") != NULL);
    h.run.training = 0;
    CHECK(h.m->ops->forward(h.m, &h.run, x, y) == SNN_OK);
    host_free(&h);
}

static void test_ln_shape(snn_shape in, int T, int N) {
    char name[96], sh[48];
    snprintf(name, sizeof name, "LayerNorm %s T=%d N=%d", snn_shape_str(in, sh, sizeof sh), T, N);
    host h;
    int F = in.d[in.rank - 1];
    CHECK(host_make(&h, snn_layernorm_new(F, 1e-5f), in, T, N));
    CHECK(h.m->n_params == 2 && h.m->params[0].decay == 0 && h.m->params[1].decay == 0);
    float *x = malloc(h.n_in * sizeof(float)), *r = malloc(h.n_out * sizeof(float));
    float *y = malloc(h.n_out * sizeof(float));
    snn_test_fill_uniform(x, h.n_in, -2.0f, 3.0f, &rs);
    snn_test_fill_uniform(r, h.n_out, -1.0f, 1.0f, &rs);
    snn_test_poison(y, h.n_out);
    CHECK(h.m->ops->forward(h.m, &h.run, x, y) == SNN_OK);
    for (size_t v = 0; v < h.n_out / (size_t)F; v++) {
        double s = 0, ss = 0;
        for (int j = 0; j < F; j++) {
            s += y[v * F + j];
            ss += (double)y[v * F + j] * y[v * F + j];
        }
        double mu = s / F, var = ss / F - mu * mu;
        CHECK_MSG(fabs(mu) < 1e-5 && fabs(var - 1.0) < 1e-3, "%s vector %zu: mean %g var %g", name,
                  v, mu, var);
    }
    randomise_affine(&h);
    fd_check(name, &h, x, r, 4e-3f);
    free(x);
    free(r);
    free(y);
    host_free(&h);

    snn_module *m = snn_layernorm_new(F + 1, 1e-5f);
    CHECK(m->ops->setup(m, in) == SNN_E_SHAPE);
    snn_module_free(m);
}

/* Large enough for the OpenMP path: results must not depend on the thread count (each
 * channel / feature is summed in a fixed order), and must agree with a small-size rerun of
 * the same data through the single-threaded path. */
static void test_thread_invariance(snn_module *(*make)(int), int features, snn_shape in, int T,
                                   int N) {
    float *out[2][3] = {{0}};
    size_t n = 0, np = 0;
    float *x = NULL, *r = NULL;
    for (int pass = 0; pass < 2; pass++) {
        omp_set_num_threads(pass ? 3 : 1);
        host h;
        if (!host_make(&h, make(features), in, T, N)) {
            CHECK_MSG(0, "cannot host the module for %d features", features);
            return;
        }
        n = h.n_in;
        np = 2 * h.m->params[0].numel;
        if (!x) {
            x = malloc(n * sizeof(float));
            r = malloc(n * sizeof(float));
            snn_test_fill_uniform(x, n, -2.0f, 3.0f, &rs);
            snn_test_fill_uniform(r, n, -1.0f, 1.0f, &rs);
        }
        for (int k = 0; k < 3; k++) out[pass][k] = malloc((k == 2 ? np : n) * sizeof(float));
        snn_test_poison(out[pass][0], n);
        snn_test_poison(out[pass][1], n);
        CHECK(h.m->ops->forward(h.m, &h.run, x, out[pass][0]) == SNN_OK);
        CHECK(h.m->ops->backward(h.m, &h.run, x, out[pass][0], r, out[pass][1]) == SNN_OK);
        memcpy(out[pass][2], h.grads, np * sizeof(float));
        host_free(&h);
    }
    CHECK_MSG(memcmp(out[0][0], out[1][0], n * sizeof(float)) == 0, "%s: y depends on threads",
              "thread invariance");
    CHECK_MSG(memcmp(out[0][1], out[1][1], n * sizeof(float)) == 0, "%s: dx depends on threads",
              "thread invariance");
    CHECK_MSG(memcmp(out[0][2], out[1][2], np * sizeof(float)) == 0,
              "%s: parameter gradients depend on threads", "thread invariance");
    for (int k = 0; k < 3; k++) CHECK(!isnan(out[1][k][0]));
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 3; k++) free(out[p][k]);
    free(x);
    free(r);
}

static snn_module *make_bn(int c) { return snn_batchnorm_new(c, 1e-5f, 0.1f); }
static snn_module *make_ln(int f) { return snn_layernorm_new(f, 1e-5f); }

int main(void) {
    rs = snn_test_seed();
    test_bn_shape(snn_shape1(7), 2, 3);
    test_bn_shape(snn_shape2(5, 7), 3, 2);
    test_bn_shape(snn_shape3(3, 5, 3), 2, 2);
    test_bn_shape(snn_shape2(4, 3), 1, 1); /* one sample: statistics over positions only */
    test_bn_errors();
    test_ln_shape(snn_shape1(9), 2, 3);
    test_ln_shape(snn_shape2(3, 7), 3, 1);
    test_ln_shape(snn_shape3(2, 3, 5), 1, 2);
    test_thread_invariance(make_bn, 37, snn_shape1(37), 16, 64);
    test_thread_invariance(make_bn, 9, snn_shape2(9, 61), 4, 16);
    test_thread_invariance(make_ln, 67, snn_shape2(17, 67), 4, 8);
    return snn_test_finish("test_norms");
}
