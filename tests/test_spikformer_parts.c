/* Finite-difference gradient checks for the Spikformer-only modules: the spiking
 * self-attention core (y = scale * (V K^T) Q per head), the token mean and the reshape. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "models/spikformer_parts.h"

/* L = sum(w * y) for random w; compare dL/dx from backward with central differences in x. */
static void fd_check(snn_module *m, snn_shape in, int T, int N, uint64_t *rs, const char *what) {
    m->in = in;
    CHECK(m->ops->setup(m, in) == SNN_OK);
    snn_arena a;
    snn_arena_begin_measure(&a);
    if (m->ops->reserve) m->ops->reserve(m, &a, T, N);
    CHECK(snn_arena_allocate(&a, a.used) == SNN_OK);
    if (m->ops->reserve) m->ops->reserve(m, &a, T, N);
    size_t B = (size_t)T * N, nx = B * snn_shape_numel(in), ny = B * snn_shape_numel(m->out);
    float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float)), *w = malloc(ny * sizeof(float));
    float *dx = malloc(nx * sizeof(float));
    snn_test_fill_uniform(x, nx, -1.0f, 1.0f, rs);
    snn_test_fill_uniform(w, ny, -1.0f, 1.0f, rs);
    snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    snn_test_poison(y, ny);
    snn_test_poison(dx, nx);
    CHECK(m->ops->forward(m, &r, x, y) == SNN_OK);
    for (size_t i = 0; i < ny; i++) CHECK(isfinite(y[i]));
    CHECK(m->ops->backward(m, &r, x, y, w, dx) == SNN_OK);
    double worst = 0;
    for (int probe = 0; probe < 40; probe++) {
        size_t i = (size_t)(((*rs = *rs * 6364136223846793005ull + 1442695040888963407ull) >> 33) % nx);
        float keep = x[i], eps = 1e-2f;
        double lp = 0, lm = 0;
        x[i] = keep + eps;
        m->ops->forward(m, &r, x, y);
        for (size_t k = 0; k < ny; k++) lp += (double)w[k] * y[k];
        x[i] = keep - eps;
        m->ops->forward(m, &r, x, y);
        for (size_t k = 0; k < ny; k++) lm += (double)w[k] * y[k];
        x[i] = keep;
        double fd = (lp - lm) / (2.0 * eps), err = fabs(fd - dx[i]) / fmax(fabs(fd), 1e-2);
        if (err > worst) worst = err;
    }
    CHECK_MSG(worst < 2e-2, "%s: worst relative FD error %g", what, worst);
    fprintf(stderr, "%s: worst relative FD error %.2e\n", what, worst);
    free(x); free(y); free(w); free(dx);
    snn_arena_free(&a);
}

int main(void) {
    uint64_t rs = snn_test_seed();
    snn_module *ssa = snn_ssa_core_new(4, 0.125f);
    fd_check(ssa, snn_shape2(3 * 16, 7), 2, 3, &rs, "ssa core");
    snn_module_free(ssa);
    snn_module *tm = snn_token_mean_new();
    fd_check(tm, snn_shape2(5, 9), 2, 3, &rs, "token mean");
    snn_module_free(tm);
    snn_module *rs2 = snn_reshape_new(snn_shape2(6, 10));
    fd_check(rs2, snn_shape3(6, 2, 5), 2, 2, &rs, "reshape");
    snn_module_free(rs2);
    /* shape errors */
    snn_module *bad = snn_ssa_core_new(5, 0.125f);
    bad->in = snn_shape2(48, 7);
    CHECK(bad->ops->setup(bad, bad->in) == SNN_E_SHAPE);
    snn_module_free(bad);
    snn_module *badr = snn_reshape_new(snn_shape2(6, 11));
    CHECK(badr->ops->setup(badr, snn_shape2(6, 10)) == SNN_E_SHAPE);
    snn_module_free(badr);
    return snn_test_finish("test_spikformer_parts");
}
