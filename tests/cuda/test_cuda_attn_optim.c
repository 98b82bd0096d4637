/* GPU spiking self-attention core, GELU, MSE on the firing rate and the optimizer updates
 * against the CPU implementations through their own APIs: the SSA core and GELU modules
 * (src/models/spikformer_parts.c, src/nn/gelu.c) driven stand-alone on the CPU backend,
 * snn_loss_mse_rate, and snn_optimizer_* run step for step with a changing lr and fresh
 * gradients. Outputs are poisoned (NaN) first, inputs are fresh random values. Errors are
 * printed per case. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_layers.h"
#include "harness.h"
#include "models/spikformer_parts.h"
#include "nn/layers.h"
#include "snn/cuda.h"
#include "snn/loss.h"
#include "snn/optim.h"

#include "cuda_test_util.h"


static double maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}
/* max |a - b| / max |b| (NaN anywhere: inf): the error relative to the largest reference
 * value, the right measure for sums with cancellation (an element near 0 carries the
 * rounding of its large terms). */
static double err_to_max(const float *a, const float *b, size_t n) {
    double m = maxabs(b, n);
    return snn_test_max_rel(a, b, n, m > 0 ? m : 1e-30);
}

/* ---- spiking self-attention core ---- */

typedef struct {
    int T, N, D, L, heads;
    float scale;
    int spikes; /* 1: q, k, v in {0, 1} (exact forward) */
} ssa_case;

static void test_ssa(const ssa_case *k) {
    const int C3 = 3 * k->D, d = k->D / k->heads;
    const size_t B = (size_t)k->T * k->N;
    const size_t nx = B * (size_t)C3 * k->L, ny = B * (size_t)k->D * k->L;
    snn_module *m = snn_ssa_core_new(k->heads, k->scale);
    snn_shape in = snn_shape2(C3, k->L);
    m->in = in;
    snn_status st = m->ops->setup(m, in);
    CHECK_MSG(st == SNN_OK, "ssa setup: %s", snn_last_error());
    if (st != SNN_OK) {
        snn_module_free(m);
        return;
    }
    snn_arena a;
    snn_arena_begin_measure(&a);
    m->ops->reserve(m, &a, k->T, k->N);
    CHECK(snn_arena_allocate(&a, a.used + 64) == SNN_OK);
    m->ops->reserve(m, &a, k->T, k->N);

    float *x = xmalloc(nx * 4), *dy = xmalloc(ny * 4);
    float *y_ref = xmalloc(ny * 4), *dx_ref = xmalloc(nx * 4);
    float *y = xmalloc(ny * 4), *dx = xmalloc(nx * 4);
    snn_test_fill_uniform(x, nx, k->spikes ? 0.0f : -1.0f, 1.0f, &rng);
    if (k->spikes)
        for (size_t i = 0; i < nx; i++) x[i] = x[i] < 0.45f ? 1.0f : 0.0f;
    snn_test_fill_uniform(dy, ny, -1.0f, 1.0f, &rng);

    snn_run r = {.T = k->T, .N = k->N, .training = 1, .be = snn_backend_cpu()};
    snn_test_poison(y_ref, ny);
    snn_test_poison(dx_ref, nx);
    CHECK(m->ops->forward(m, &r, x, y_ref) == SNN_OK);
    CHECK(m->ops->backward(m, &r, x, y_ref, dy, dx_ref) == SNN_OK);

    size_t wb = snn_cuda_ssa_work_bytes((int)B, k->D, k->L, k->heads);
    float *dxin = dcopy(x, nx * 4), *ddy = dcopy(dy, ny * 4);
    float *dyout = dalloc(ny * 4), *ddx = dalloc(nx * 4);
    void *work = wb ? dalloc(wb) : NULL;
    if (wb) {
        CHECK(snn_cuda_ssa_backward(g, dxin, ddy, ddx, (int)B, k->D, k->L, k->heads, k->scale,
                                    NULL) == SNN_E_INVALID);
    }
    OK(snn_cuda_ssa_forward(g, dxin, dyout, (int)B, k->D, k->L, k->heads, k->scale, work));
    OK(snn_cuda_ssa_backward(g, dxin, ddy, ddx, (int)B, k->D, k->L, k->heads, k->scale, work));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, y, dyout, ny * 4);
    snn_cuda_download(g, dx, ddx, nx * 4);

    double ef = err_to_max(y, y_ref, ny), eb = err_to_max(dx, dx_ref, nx);
    double ebe = snn_test_max_rel(dx, dx_ref, nx, 1e-2 * maxabs(dx_ref, nx));
    /* spikes: integer sums below 2^24 and a power-of-two scale make the forward exact */
    int exact = k->spikes && k->scale == 0.125f;
    size_t nbad = 0;
    if (exact)
        for (size_t i = 0; i < ny; i++) nbad += y[i] != y_ref[i];
    fprintf(stderr,
            "ssa B=%zu D=%d L=%d heads=%d (d=%d) scale=%g %s work=%zu B: forward err %.2e%s, "
            "backward err %.2e (elementwise, floor 1%% of max: %.2e)\n",
            B, k->D, k->L, k->heads, d, (double)k->scale, k->spikes ? "spikes" : "floats", wb, ef,
            exact ? (nbad ? " NOT EXACT" : " (bit-exact)") : "", eb, ebe);
    CHECK_MSG(ef < 1e-5, "ssa d=%d L=%d forward error %.3g", d, k->L, ef);
    CHECK_MSG(nbad == 0, "ssa d=%d L=%d: %zu forward values differ from the exact result", d,
              k->L, nbad);
    CHECK_MSG(eb < 1e-5, "ssa d=%d L=%d backward error %.3g", d, k->L, eb);
    CHECK_MSG(ebe < 1e-3, "ssa d=%d L=%d backward elementwise error %.3g", d, k->L, ebe);
    CHECK_MSG(maxabs(dx_ref, nx) > 0 && maxabs(y_ref, ny) > 0, "ssa reference is all zero");

    snn_cuda_free(dxin); snn_cuda_free(ddy); snn_cuda_free(dyout); snn_cuda_free(ddx);
    if (work) snn_cuda_free(work);
    free(x); free(dy); free(y_ref); free(dx_ref); free(y); free(dx);
    snn_arena_free(&a);
    snn_module_free(m);
}

/* ---- GELU ---- */

static void test_gelu(void) {
    const int T = 2, N = 53, F = 1001;
    const size_t n = (size_t)T * N * F;
    snn_module *m = snn_gelu_new();
    m->in = snn_shape1(F);
    CHECK(m->ops->setup(m, m->in) == SNN_OK);
    float *x = xmalloc(n * 4), *dy = xmalloc(n * 4), *y_ref = xmalloc(n * 4);
    float *dx_ref = xmalloc(n * 4), *y = xmalloc(n * 4), *dx = xmalloc(n * 4);
    snn_test_fill_uniform(x, n, -5.0f, 5.0f, &rng);
    snn_test_fill_uniform(dy, n, -1.0f, 1.0f, &rng);
    snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    snn_test_poison(y_ref, n);
    snn_test_poison(dx_ref, n);
    CHECK(m->ops->forward(m, &r, x, y_ref) == SNN_OK);
    CHECK(m->ops->backward(m, &r, x, y_ref, dy, dx_ref) == SNN_OK);
    float *d_x = dcopy(x, n * 4), *d_dy = dcopy(dy, n * 4), *d_y = dalloc(n * 4),
          *d_dx = dalloc(n * 4);
    OK(snn_cuda_gelu_forward(g, d_x, d_y, n));
    OK(snn_cuda_gelu_backward(g, d_x, d_dy, d_dx, n));
    OK(snn_cuda_gelu_forward(g, d_x, d_y, 0)); /* nothing to do */
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, y, d_y, n * 4);
    snn_cuda_download(g, dx, d_dx, n * 4);
    /* relative above |ref| = 0.1, absolute below: for x << 0, 1 + erf(x/sqrt2) cancels and
     * the CPU and CUDA erff may differ in their last bit */
    double ef = snn_test_max_rel(y, y_ref, n, 0.1), eb = snn_test_max_rel(dx, dx_ref, n, 0.1);
    fprintf(stderr, "gelu n=%zu: forward err %.2e, backward err %.2e\n", n, ef, eb);
    CHECK_MSG(ef < 1e-5, "gelu forward error %.3g", ef);
    CHECK_MSG(eb < 1e-5, "gelu backward error %.3g", eb);
    snn_cuda_free(d_x); snn_cuda_free(d_dy); snn_cuda_free(d_y); snn_cuda_free(d_dx);
    free(x); free(dy); free(y_ref); free(dx_ref); free(y); free(dx);
    snn_module_free(m);
}

/* ---- MSE on the rate ---- */

static void test_mse(int spikes) {
    const int T = 4, B = 37, C = 10;
    const size_t n = (size_t)T * B * C;
    float *out = xmalloc(n * 4), *dref = xmalloc(n * 4), *dgot = xmalloc(n * 4);
    int32_t lab[37];
    snn_test_fill_uniform(out, n, 0.0f, 1.0f, &rng);
    /* spikes: rates in {0, 1/4, ..., 1}, so ties in the argmax are common (first wins) */
    if (spikes)
        for (size_t i = 0; i < n; i++) out[i] = out[i] < 0.3f ? 1.0f : 0.0f;
    for (int b = 0; b < B; b++) {
        float u;
        snn_test_fill_uniform(&u, 1, 0.0f, (float)C, &rng);
        lab[b] = (int32_t)u < C ? (int32_t)u : C - 1;
    }
    float lref;
    int cref;
    snn_test_poison(dref, n);
    OK(snn_loss_mse_rate(out, lab, T, B, C, &lref, dref, &cref));
    float *d_out = dcopy(out, n * 4), *d_d = dalloc(n * 4), *d_loss = dalloc(4);
    int32_t *d_lab = dcopy(lab, sizeof lab);
    int *d_cor = dalloc(4);
    for (int pass = 0; pass < 2; pass++) {
        const float gsc = pass ? 0.25f : 1.0f;
        snn_cuda_memset(g, d_d, 0xFF, n * 4);
        snn_cuda_memset(g, d_loss, 0xFF, 4);
        snn_cuda_memset(g, d_cor, 0xFF, 4);
        OK(snn_cuda_mse_rate(g, T, B, C, d_out, d_lab, d_loss, d_d, gsc, d_cor));
        OK(snn_cuda_synchronize(g));
        float l;
        int cor;
        snn_cuda_download(g, &l, d_loss, 4);
        snn_cuda_download(g, &cor, d_cor, 4);
        snn_cuda_download(g, dgot, d_d, n * 4);
        /* the gradient is (float)(d * 2/(B C T)) as on the CPU; a power-of-two grad_scale
         * commutes with that rounding, so both passes are bit-exact */
        size_t nbad = 0;
        for (size_t i = 0; i < n; i++) nbad += !(dgot[i] == dref[i] * gsc);
        double el = fabs((double)l - lref) / fabs((double)lref);
        fprintf(stderr, "mse_rate %s grad_scale %g: loss %.7g vs %.7g (rel %.1e), correct %d vs %d, "
                        "%zu gradient values differ\n",
                spikes ? "spikes" : "floats", (double)gsc, (double)l, (double)lref, el, cor, cref,
                nbad);
        CHECK_MSG(el < 1e-6, "mse loss %g vs %g", (double)l, (double)lref);
        CHECK_MSG(cor == cref, "mse correct %d vs %d", cor, cref);
        CHECK_MSG(nbad == 0, "mse gradient: %zu values differ", nbad);
    }
    /* optional outputs may be NULL */
    snn_cuda_memset(g, d_loss, 0xFF, 4);
    OK(snn_cuda_mse_rate(g, T, B, C, d_out, d_lab, d_loss, NULL, 1.0f, NULL));
    OK(snn_cuda_synchronize(g));
    float l2;
    snn_cuda_download(g, &l2, d_loss, 4);
    CHECK_MSG(fabs((double)l2 - lref) <= 1e-6 * fabs((double)lref), "mse loss without outputs %g",
              (double)l2);
    /* an out-of-range label (not refusable without a sync) makes the loss NaN */
    int32_t badlab = C;
    snn_cuda_upload(g, d_lab + 5, &badlab, 4);
    OK(snn_cuda_mse_rate(g, T, B, C, d_out, d_lab, d_loss, d_d, 1.0f, d_cor));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, &l2, d_loss, 4);
    CHECK_MSG(isnan(l2), "mse with label %d of %d classes gave loss %g", C, C, (double)l2);
    snn_cuda_free(d_out); snn_cuda_free(d_d); snn_cuda_free(d_loss); snn_cuda_free(d_lab);
    snn_cuda_free(d_cor);
    free(out); free(dref); free(dgot);
}

/* ---- optimizers ---- */

typedef struct {
    snn_optim_kind kind;
    float lr, momentum, wd;
    int nesterov, use_mask;
    float grad_scale; /* the GPU gets grad / grad_scale (a power of two: exact) */
} opt_case;

static void test_opt(const opt_case *k) {
    const size_t n = 10007;
    snn_optim_opts o = snn_optim_defaults(k->kind);
    o.lr = k->lr;
    o.momentum = k->momentum;
    o.weight_decay = k->wd;
    o.nesterov = k->nesterov;
    float *w0 = xmalloc(n * 4), *p = xmalloc(n * 4), *gr = xmalloc(n * 4), *gs = xmalloc(n * 4);
    float *got = xmalloc(n * 4), *got2 = xmalloc(n * 4), *before = xmalloc(2 * n * 4);
    uint8_t *mask = xmalloc(n);
    snn_test_fill_uniform(w0, n, -1.0f, 1.0f, &rng);
    snn_test_fill_uniform(gr, n, 0.0f, 1.0f, &rng);
    for (size_t i = 0; i < n; i++) mask[i] = gr[i] < 0.7f;
    mask[0] = 0;
    mask[1] = 1;
    memcpy(p, w0, n * 4);
    snn_optimizer *opt = NULL;
    OK(snn_optimizer_create(&o, n, p, gr, k->use_mask ? mask : NULL, &opt));
    if (!opt) return;

    snn_cuda_opt co = {(int)k->kind, o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps,
                       o.nesterov};
    const int has_state = k->kind != SNN_OPTIM_SGD || k->momentum != 0;
    const size_t ns = k->kind == SNN_OPTIM_SGD ? n : 2 * n;
    float *d_w = dcopy(w0, n * 4), *d_g = dalloc(n * 4), *d_st = NULL;
    if (has_state) {
        d_st = dalloc(ns * 4);
        snn_cuda_memset(g, d_st, 0, ns * 4);
    }
    uint8_t *d_mask = k->use_mask ? dcopy(mask, n) : NULL;
    snn_cuda_step_scalars *d_s = dalloc(sizeof(snn_cuda_step_scalars));
    for (int step = 0; step < 5; step++) {
        const int skip = step == 2;
        const float lr = k->lr * (1.0f + 0.25f * (float)step);
        snn_test_fill_uniform(gr, n, -1.0f, 1.0f, &rng);
        for (size_t i = 0; i < n; i++) gs[i] = gr[i] / k->grad_scale;
        snn_cuda_upload(g, d_g, gs, n * 4);
        const double t = (double)(snn_optimizer_steps(opt) + 1);
        snn_cuda_step_scalars s = {lr, (float)(1.0 - pow((double)o.beta1, t)),
                                   (float)(1.0 - pow((double)o.beta2, t)), k->grad_scale, skip};
        snn_cuda_upload(g, d_s, &s, sizeof s);
        if (skip) {
            snn_cuda_download(g, got, d_w, n * 4);
            if (has_state) snn_cuda_download(g, before, d_st, ns * 4);
        }
        OK(snn_cuda_opt_update(g, &co, d_s, n, d_w, d_g, d_st, d_mask));
        OK(snn_optimizer_step(opt, lr, skip));
        if (skip) {
            OK(snn_cuda_synchronize(g));
            snn_cuda_download(g, got2, d_w, n * 4);
            CHECK_MSG(!memcmp(got, got2, n * 4), "opt kind %d: a skipped step changed weights",
                      (int)k->kind);
            if (has_state) {
                float *after = xmalloc(ns * 4);
                snn_cuda_download(g, after, d_st, ns * 4);
                CHECK_MSG(!memcmp(before, after, ns * 4), "opt kind %d: a skipped step changed state",
                          (int)k->kind);
                free(after);
            }
        }
    }
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, got, d_w, n * 4);
    /* Adam's bc1/bc2 reach the GPU as FP32 (double on the CPU): its step can differ by an
     * ulp of the weight it is added to, so small weights are compared at an absolute floor
     * of 1e-2 (the weights start in [-1, 1]); SGD agrees bit for bit here */
    double ew = snn_test_max_rel(got, p, n, 1e-2), moved = 0;
    for (size_t i = 0; i < n; i++) moved = fmax(moved, fabs((double)p[i] - w0[i]));
    double es[2] = {0, 0};
    for (size_t si = 0; si < snn_optimizer_num_states(opt); si++) {
        snn_optim_state info;
        OK(snn_optimizer_state(opt, si, &info));
        snn_cuda_download(g, got2, d_st + si * n, n * 4);
        es[si] = snn_test_max_rel(got2, info.data, n, 1e-3);
        CHECK_MSG(maxabs(info.data, n) > 0, "opt state %s is all zero", info.name);
    }
    fprintf(stderr,
            "opt %s lr %g mom %g nesterov %d wd %g mask %d grad_scale %g: weight err %.2e, state "
            "err %.2e %.2e (weights moved up to %.3g)\n",
            snn_optim_kind_name(k->kind), (double)k->lr, (double)k->momentum, k->nesterov,
            (double)k->wd, k->use_mask, (double)k->grad_scale, ew, es[0], es[1], moved);
    CHECK_MSG(ew < 1e-5, "opt %s weight error %.3g", snn_optim_kind_name(k->kind), ew);
    CHECK_MSG(es[0] < 1e-5 && es[1] < 1e-5, "opt %s state error %.3g %.3g",
              snn_optim_kind_name(k->kind), es[0], es[1]);
    CHECK_MSG(moved > 1e-3, "opt %s: weights did not move", snn_optim_kind_name(k->kind));
    snn_cuda_free(d_w); snn_cuda_free(d_g); snn_cuda_free(d_s);
    if (d_st) snn_cuda_free(d_st);
    if (d_mask) snn_cuda_free(d_mask);
    snn_optimizer_free(opt);
    free(w0); free(p); free(gr); free(gs); free(got); free(got2); free(before); free(mask);
}

/* ---- bad arguments: refused before any launch ---- */

static void test_bad_args(void) {
    float *d = dalloc(4096);
    int32_t *dl = dalloc(64);
    snn_cuda_step_scalars *ds = dalloc(sizeof(snn_cuda_step_scalars));
    CHECK(snn_cuda_ssa_forward(g, d, d, 2, 10, 4, 3, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_forward(g, d, d, 2, 12, 0, 3, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_forward(g, d, d, 0, 12, 4, 3, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_forward(g, NULL, d, 2, 12, 4, 3, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_backward(g, d, d, NULL, 2, 12, 4, 3, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_backward(g, d, d, d, 2, 12, 4, -1, 0.125f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_ssa_work_bytes(2, 10, 4, 3) == 0);
    CHECK(snn_cuda_gelu_forward(g, NULL, d, 10) == SNN_E_INVALID);
    CHECK(snn_cuda_gelu_backward(g, d, NULL, d, 10) == SNN_E_INVALID);
    CHECK(snn_cuda_mse_rate(g, 0, 2, 3, d, dl, d, d, 1.0f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_mse_rate(g, 2, 2, -3, d, dl, d, d, 1.0f, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_mse_rate(g, 2, 2, 3, d, NULL, d, d, 1.0f, NULL) == SNN_E_INVALID);
    snn_cuda_opt sgd = {0, 0.9f, 0.0f, 0.9f, 0.999f, 1e-8f, 0};
    snn_cuda_opt adam = {1, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f, 0};
    CHECK(snn_cuda_opt_update(g, NULL, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_opt_update(g, &sgd, NULL, 10, d, d, d, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_opt_update(g, &sgd, ds, 10, d, d, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_opt_update(g, &adam, ds, 10, d, d, NULL, NULL) == SNN_E_INVALID);
    snn_cuda_opt bad = sgd;
    bad.kind = 3;
    CHECK(snn_cuda_opt_update(g, &bad, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    bad = sgd;
    bad.momentum = 0.0f;
    bad.nesterov = 1;
    CHECK(snn_cuda_opt_update(g, &bad, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    bad = adam;
    bad.beta2 = 1.0f;
    CHECK(snn_cuda_opt_update(g, &bad, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    bad = adam;
    bad.eps = 0.0f;
    CHECK(snn_cuda_opt_update(g, &bad, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    bad = sgd;
    bad.weight_decay = -1.0f;
    CHECK(snn_cuda_opt_update(g, &bad, ds, 10, d, d, d, NULL) == SNN_E_INVALID);
    OK(snn_cuda_synchronize(g));
    snn_cuda_free(d);
    snn_cuda_free(dl);
    snn_cuda_free(ds);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_attn_optim: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    static const ssa_case ssa[] = {
        {2, 3, 16, 4, 2, 0.125f, 1},    /* d = 8, tiny L */
        {2, 2, 384, 64, 12, 0.125f, 1}, /* Spikformer-S: d = 32, L = 64 */
        {1, 2, 128, 196, 2, 0.125f, 1}, /* d = 64, L = 196 */
        {1, 3, 72, 7, 3, 0.17f, 1},     /* d = 24, odd L, non-power-of-two scale */
        {1, 2, 96, 50, 1, 0.125f, 1},   /* d = 96: backward matrices in work */
        {1, 1, 320, 33, 2, 0.125f, 1},  /* d = 160: forward and backward in work */
        {2, 2, 384, 64, 12, 0.125f, 0}, /* real-valued inputs */
        {1, 2, 40, 37, 8, 0.3f, 0},     /* d = 5 */
        /* register-tiled kernels (d = 16, 32; 64-token tiles): several tiles, partial
         * last tiles not a multiple of 4, short sequences */
        {1, 2, 64, 101, 4, 0.125f, 1},  /* d = 16, 2 tiles */
        {1, 2, 64, 101, 4, 0.3f, 0},    /* d = 16, real-valued */
        {1, 2, 64, 64, 4, 0.125f, 1},   /* d = 16, one full tile */
        {1, 2, 96, 130, 3, 0.125f, 1},  /* d = 32, 3 tiles */
        {1, 3, 64, 130, 2, 0.2f, 0},    /* d = 32, 3 tiles, real-valued */
        {2, 2, 96, 5, 3, 0.125f, 1},    /* d = 32, L = 5 */
    };
    for (size_t i = 0; i < sizeof ssa / sizeof ssa[0]; i++) test_ssa(&ssa[i]);
    test_gelu();
    test_mse(1);
    test_mse(0);
    static const opt_case opts[] = {
        {SNN_OPTIM_SGD, 0.1f, 0.0f, 0.0f, 0, 0, 1.0f},
        {SNN_OPTIM_SGD, 0.1f, 0.0f, 0.05f, 0, 1, 0.5f},
        {SNN_OPTIM_SGD, 0.05f, 0.9f, 0.01f, 0, 1, 1.0f},
        {SNN_OPTIM_SGD, 0.05f, 0.9f, 0.01f, 1, 1, 0.5f},
        {SNN_OPTIM_SGD, 0.05f, 0.9f, 0.1f, 1, 0, 1.0f},
        {SNN_OPTIM_ADAM, 1e-2f, 0.0f, 0.0f, 0, 0, 1.0f},
        {SNN_OPTIM_ADAM, 1e-2f, 0.0f, 0.05f, 0, 1, 0.5f},
        {SNN_OPTIM_ADAMW, 1e-2f, 0.0f, 0.05f, 0, 1, 1.0f},
        {SNN_OPTIM_ADAMW, 1e-2f, 0.0f, 0.01f, 0, 0, 0.5f},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) test_opt(&opts[i]);
    test_bad_args();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_attn_optim");
}
