/* Optimizer properties that PyTorch cannot check for us (tests/oracle_optim.py compares the
 * updates themselves with torch): checkpoint resume is bit-identical, a skipped step
 * changes nothing, the decay mask selects exactly which elements decay, the model's decay
 * flags reach the mask, results do not depend on the thread count, and bad input is
 * refused with a message. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "optim/optim_internal.h"
#include "snn/optim.h"

static uint64_t rng_state;

static float *fresh(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof(float));
    snn_test_fill_uniform(x, n, lo, hi, &rng_state);
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static snn_optim_opts make_opts(snn_optim_kind kind) {
    snn_optim_opts o = snn_optim_defaults(kind);
    if (kind == SNN_OPTIM_SGD) {
        o.lr = 0.05f;
        o.momentum = 0.9f;
        o.nesterov = 1;
        o.weight_decay = 0.01f;
    } else {
        o.lr = 2e-3f;
        o.weight_decay = kind == SNN_OPTIM_ADAM ? 0.02f : 0.1f;
    }
    return o;
}

/* k steps with gradients grads[s*n..] (one array the optimizer reads, refilled each step) */
static void run_steps(snn_optimizer *opt, float *g, const float *grads, size_t n, int from, int k) {
    for (int s = from; s < from + k; s++) {
        memcpy(g, grads + (size_t)s * n, n * sizeof(float));
        CHECK(snn_optimizer_step(opt, -1.0f, 0) == SNN_OK);
    }
}

/* Save after 6 steps, restore into a fresh optimizer (fresh arrays), run 6 more on both. */
static void test_resume(snn_optim_kind kind) {
    const size_t n = 4099;
    const int k1 = 6, k2 = 6;
    snn_optim_opts o = make_opts(kind);
    float *p = fresh(n, -1, 1), *g = fresh(n, -1, 1);
    float *grads = fresh(n * (k1 + k2), -1, 1);
    snn_optimizer *a = NULL, *b = NULL;
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &a) == SNN_OK);
    run_steps(a, g, grads, n, 0, k1);
    CHECK(snn_optimizer_steps(a) == k1);

    /* checkpoint: params, each state tensor, step count */
    float *p2 = dup(p, n), *g2 = malloc(n * sizeof(float));
    snn_test_poison(g2, n);
    CHECK(snn_optimizer_create(&o, n, p2, g2, NULL, &b) == SNN_OK);
    size_t ns = snn_optimizer_num_states(a);
    CHECK(ns == (kind == SNN_OPTIM_SGD ? 1u : 2u));
    CHECK(snn_optimizer_num_states(b) == ns);
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state sa, sb;
        CHECK(snn_optimizer_state(a, i, &sa) == SNN_OK);
        CHECK(snn_optimizer_state(b, i, &sb) == SNN_OK);
        CHECK(strcmp(sa.name, sb.name) == 0 && sa.numel == n && sb.numel == n);
        memcpy(sb.data, sa.data, n * sizeof(float));
    }
    CHECK(snn_optimizer_set_steps(b, snn_optimizer_steps(a)) == SNN_OK);

    run_steps(a, g, grads, n, k1, k2);
    run_steps(b, g2, grads, n, k1, k2);
    CHECK_MSG(same_bits(p, p2, n), "%s: resumed parameters differ", snn_optim_kind_name(kind));
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state sa, sb;
        snn_optimizer_state(a, i, &sa);
        snn_optimizer_state(b, i, &sb);
        CHECK_MSG(same_bits(sa.data, sb.data, n), "%s: resumed %s differs", snn_optim_kind_name(kind), sa.name);
    }

    /* the step count is part of the state: restoring everything but it must not match
     * (Adam's bias correction, SGD's first-step buffer initialisation) */
    float *p3 = dup(p2, n);
    snn_optimizer *c = NULL;
    CHECK(snn_optimizer_create(&o, n, p3, g2, NULL, &c) == SNN_OK);
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state sb, sc;
        snn_optimizer_state(b, i, &sb);
        snn_optimizer_state(c, i, &sc);
        memcpy(sc.data, sb.data, n * sizeof(float));
    }
    memcpy(g2, grads, n * sizeof(float));
    CHECK(snn_optimizer_step(b, -1.0f, 0) == SNN_OK);
    CHECK(snn_optimizer_step(c, -1.0f, 0) == SNN_OK);
    CHECK_MSG(!same_bits(p2, p3, n), "%s: step count had no effect", snn_optim_kind_name(kind));

    snn_optimizer_free(a);
    snn_optimizer_free(b);
    snn_optimizer_free(c);
    free(p), free(g), free(grads), free(p2), free(g2), free(p3);
}

/* skip != 0 leaves params, state and step count bit-for-bit alone, even with NaN grads. */
static void test_skip(snn_optim_kind kind) {
    const size_t n = 1031;
    snn_optim_opts o = make_opts(kind);
    float *p = fresh(n, -1, 1), *g = fresh(n, -1, 1);
    snn_optimizer *opt = NULL;
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_OK);
    CHECK(snn_optimizer_step(opt, -1.0f, 0) == SNN_OK);
    CHECK(snn_optimizer_step(opt, -1.0f, 0) == SNN_OK);
    float *p0 = dup(p, n);
    float *s0[2] = {NULL, NULL};
    size_t ns = snn_optimizer_num_states(opt);
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state st;
        snn_optimizer_state(opt, i, &st);
        s0[i] = dup(st.data, n);
    }
    snn_test_poison(g, n); /* what a loss scaler would have found */
    CHECK(snn_optimizer_step(opt, -1.0f, 1) == SNN_OK);
    CHECK(snn_optimizer_step(opt, 0.5f, 1) == SNN_OK);
    CHECK(snn_optimizer_steps(opt) == 2);
    CHECK(same_bits(p, p0, n));
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state st;
        snn_optimizer_state(opt, i, &st);
        CHECK(same_bits(st.data, s0[i], n));
    }
    /* and an unskipped step does move them */
    snn_test_fill_uniform(g, n, -1, 1, &rng_state);
    CHECK(snn_optimizer_step(opt, -1.0f, 0) == SNN_OK);
    CHECK(!same_bits(p, p0, n));
    CHECK(snn_optimizer_steps(opt) == 3);
    snn_optimizer_free(opt);
    free(p), free(g), free(p0), free(s0[0]), free(s0[1]);
}

/* With a mask, masked-out elements follow the wd = 0 trajectory and the others the
 * full-decay one, bit for bit. */
static void test_mask(snn_optim_kind kind) {
    const size_t n = 2053;
    const int steps = 5;
    snn_optim_opts o = make_opts(kind), o0 = o;
    o0.weight_decay = 0;
    uint8_t *mask = malloc(n);
    for (size_t i = 0; i < n; i++) mask[i] = (uint8_t)((rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull) >> 63);
    float *p = fresh(n, -1, 1), *g = malloc(n * sizeof(float));
    float *grads = fresh(n * steps, -1, 1);
    float *pm = dup(p, n), *pz = dup(p, n), *pf = dup(p, n);
    snn_optimizer *om = NULL, *oz = NULL, *of = NULL;
    CHECK(snn_optimizer_create(&o, n, pm, g, mask, &om) == SNN_OK);
    CHECK(snn_optimizer_create(&o0, n, pz, g, NULL, &oz) == SNN_OK);
    CHECK(snn_optimizer_create(&o, n, pf, g, NULL, &of) == SNN_OK);
    for (int s = 0; s < steps; s++) {
        memcpy(g, grads + (size_t)s * n, n * sizeof(float));
        CHECK(snn_optimizer_step(om, -1.0f, 0) == SNN_OK);
        CHECK(snn_optimizer_step(oz, -1.0f, 0) == SNN_OK);
        CHECK(snn_optimizer_step(of, -1.0f, 0) == SNN_OK);
    }
    size_t bad = 0, differ = 0;
    for (size_t i = 0; i < n; i++) {
        float want = mask[i] ? pf[i] : pz[i];
        if (memcmp(&pm[i], &want, sizeof want) != 0) bad++;
        if (pf[i] != pz[i]) differ++;
    }
    CHECK_MSG(bad == 0, "%s: %zu masked elements off their trajectory", snn_optim_kind_name(kind), bad);
    CHECK_MSG(differ > n / 2, "%s: weight decay had no visible effect", snn_optim_kind_name(kind));
    snn_optimizer_free(om), snn_optimizer_free(oz), snn_optimizer_free(of);
    free(mask), free(p), free(g), free(grads), free(pm), free(pz), free(pf);
}

/* create_for_model: weights decay, biases do not (from each tensor's decay flag). */
static void test_model(void) {
    snn_module *seq = snn_sequential_new();
    CHECK(snn_module_add_child(seq, snn_linear_new(7, 5, 1)) == SNN_OK);
    CHECK(snn_module_add_child(seq, snn_linear_new(5, 3, 1)) == SNN_OK);
    snn_model *m = NULL;
    CHECK(snn_model_build(seq, "test", "{}", snn_shape1(7), 1234, &m) == SNN_OK);
    if (!m) return;
    size_t n = snn_model_num_params(m);
    CHECK(n == 7 * 5 + 5 + 5 * 3 + 3);
    /* the reference mask, from the names (independent of the decay flag) */
    uint8_t *mask = malloc(n);
    memset(mask, 0xEE, n);
    float *base = snn_model_params(m);
    for (size_t t = 0; t < snn_model_num_tensors(m); t++) {
        snn_tensor_info info;
        CHECK(snn_model_tensor(m, t, &info) == SNN_OK);
        if (info.is_buffer) continue;
        int is_weight = strstr(info.name, "weight") != NULL;
        memset(mask + (info.data - base), is_weight, info.numel);
    }
    for (size_t i = 0; i < n; i++) CHECK(mask[i] <= 1);
    float *p = dup(base, n), *g = snn_model_grads(m);
    snn_test_fill_uniform(g, n, -1, 1, &rng_state);
    snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_ADAMW);
    o.weight_decay = 0.3f;
    snn_optimizer *om = NULL, *of = NULL;
    CHECK(m->optimizer_bound == 0);
    CHECK(snn_optimizer_create_for_model(&o, m, &om) == SNN_OK);
    CHECK(m->optimizer_bound == 1);
    CHECK(snn_optimizer_create(&o, n, p, g, mask, &of) == SNN_OK);
    for (int s = 0; s < 3; s++) {
        CHECK(snn_optimizer_step(om, 0.01f, 0) == SNN_OK);
        CHECK(snn_optimizer_step(of, 0.01f, 0) == SNN_OK);
    }
    CHECK(same_bits(base, p, n));
    snn_optimizer_free(om), snn_optimizer_free(of);
    free(mask), free(p);
    snn_model_free(m);
}

/* Same bits with 1 and 2 threads, on an array large enough for the parallel paths. */
static void test_threads(void) {
    const size_t n = 300007;
    float *p = fresh(n, -1, 1), *g = fresh(n, -1, 1);
    for (int k = 0; k < 3; k++) {
        snn_optim_opts o = make_opts((snn_optim_kind)k);
        float *p1 = dup(p, n), *p2 = dup(p, n), *g1 = dup(g, n), *g2 = dup(g, n);
        snn_optimizer *a = NULL, *b = NULL;
        CHECK(snn_optimizer_create(&o, n, p1, g1, NULL, &a) == SNN_OK);
        CHECK(snn_optimizer_create(&o, n, p2, g2, NULL, &b) == SNN_OK);
        omp_set_num_threads(1);
        CHECK(snn_optimizer_step(a, -1.0f, 0) == SNN_OK);
        CHECK(snn_optimizer_step(a, -1.0f, 0) == SNN_OK);
        float n1 = snn_clip_grad_norm(g1, n, 10.0f);
        omp_set_num_threads(2);
        CHECK(snn_optimizer_step(b, -1.0f, 0) == SNN_OK);
        CHECK(snn_optimizer_step(b, -1.0f, 0) == SNN_OK);
        float n2 = snn_clip_grad_norm(g2, n, 10.0f);
        CHECK(same_bits(p1, p2, n));
        CHECK(memcmp(&n1, &n2, sizeof n1) == 0 && same_bits(g1, g2, n));
        snn_optimizer_free(a), snn_optimizer_free(b);
        free(p1), free(p2), free(g1), free(g2);
    }
    free(p), free(g);
}

/* Clip: returned norm against a plain double sum here; no scaling at or under the limit. */
static void test_clip(void) {
    const size_t n = 5001;
    float *g = fresh(n, -2, 2);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    float *g0 = dup(g, n);
    float norm = snn_clip_grad_norm(g, n, (float)(2 * sqrt(ss)));
    CHECK(fabs(norm - sqrt(ss)) <= 1e-6 * sqrt(ss));
    CHECK(same_bits(g, g0, n));
    norm = snn_clip_grad_norm(g, n, 1.0f);
    double after = 0;
    for (size_t i = 0; i < n; i++) after += (double)g[i] * g[i];
    CHECK(fabs(sqrt(after) - 1.0) < 1e-5);
    CHECK(fabs(norm - sqrt(ss)) <= 1e-6 * sqrt(ss));
    /* negative limit: measure only */
    memcpy(g, g0, n * sizeof(float));
    norm = snn_clip_grad_norm(g, n, -1.0f);
    CHECK(same_bits(g, g0, n) && fabs(norm - sqrt(ss)) <= 1e-6 * sqrt(ss));
    CHECK(snn_clip_grad_norm(g, 0, 1.0f) == 0.0f);
    free(g), free(g0);
}

/* The clip folded into the update (the distributed optimizer's path): the coefficient
 * applied by the update gives the weights and state of a scaling pass and an ordinary step,
 * bit for bit, for every optimizer kind, and leaves the gradient array unclipped. */
static void test_clip_fold(void) {
    const size_t n = 40009; /* the parallel paths and a vector tail */
    float *p = fresh(n, -1, 1), *g = fresh(n, -2, 2);
    for (int k = 0; k < 3; k++) {
        snn_optim_opts o = make_opts((snn_optim_kind)k);
        float *p1 = dup(p, n), *p2 = dup(p, n), *g1 = dup(g, n), *g2 = dup(g, n);
        snn_optimizer *a = NULL, *b = NULL;
        CHECK(snn_optimizer_create(&o, n, p1, g1, NULL, &a) == SNN_OK);
        CHECK(snn_optimizer_create(&o, n, p2, g2, NULL, &b) == SNN_OK);
        for (int step = 0; step < 3; step++) {
            memcpy(g1, g, n * sizeof(float));
            memcpy(g2, g, n * sizeof(float));
            float n1 = snn_clip_grad_norm(g1, n, 3.0f), n2 = NAN, coef = NAN;
            CHECK(snn_optimizer_step(a, -1.0f, 0) == SNN_OK);
            CHECK(snn_clip_coef_on(snn_backend_cpu(), g2, n, 3.0f, &n2, &coef) == SNN_OK);
            CHECK_MSG(coef > 0.0f && coef < 1.0f, "kind %d: clip coefficient %g", k, (double)coef);
            CHECK(snn_optimizer_step_scaled(b, -1.0f, 0, coef) == SNN_OK);
            CHECK(memcmp(&n1, &n2, sizeof n1) == 0);
            CHECK_MSG(same_bits(p1, p2, n), "kind %d step %d: folded clip changed the weights", k, step);
            CHECK(same_bits(g2, g, n)); /* not written */
        }
        for (size_t s = 0; s < snn_optimizer_num_states(a); s++) {
            snn_optim_state ia, ib;
            CHECK(snn_optimizer_state(a, s, &ia) == SNN_OK && snn_optimizer_state(b, s, &ib) == SNN_OK);
            CHECK(same_bits(ia.data, ib.data, n));
        }
        /* the factor must be in (0, 1] */
        CHECK(snn_optimizer_step_scaled(b, -1.0f, 0, 0.0f) == SNN_E_INVALID);
        CHECK(snn_optimizer_step_scaled(b, -1.0f, 0, 1.5f) == SNN_E_INVALID);
        CHECK(snn_optimizer_step_scaled(b, -1.0f, 0, NAN) == SNN_E_INVALID);
        snn_optimizer_free(a), snn_optimizer_free(b);
        free(p1), free(p2), free(g1), free(g2);
    }
    free(p), free(g);
}

static void test_errors(void) {
    const size_t n = 16;
    float *p = fresh(n, -1, 1), *g = fresh(n, -1, 1);
    snn_optimizer *opt = (snn_optimizer *)&opt;
    snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_SGD);
    o.nesterov = 1; /* without momentum */
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_E_INVALID && opt == NULL);
    CHECK(strstr(snn_last_error(), "nesterov") != NULL);
    o = snn_optim_defaults(SNN_OPTIM_ADAM);
    o.beta2 = 1.0f;
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "betas") != NULL);
    o = snn_optim_defaults(SNN_OPTIM_ADAMW);
    o.lr = -1;
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_E_INVALID);
    o = snn_optim_defaults(SNN_OPTIM_ADAMW);
    o.eps = 0;
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_E_INVALID);
    o = snn_optim_defaults(SNN_OPTIM_ADAMW);
    CHECK(snn_optimizer_create(&o, 0, p, g, NULL, &opt) == SNN_E_INVALID);
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_OK);
    CHECK(o.weight_decay == 0.01f && snn_optimizer_opts(opt)->weight_decay == 0.01f);
    float *p0 = dup(p, n);
    CHECK(snn_optimizer_step(opt, NAN, 0) == SNN_E_INVALID);
    CHECK(snn_optimizer_step(opt, INFINITY, 0) == SNN_E_INVALID);
    CHECK(same_bits(p, p0, n) && snn_optimizer_steps(opt) == 0);
    snn_optim_state st;
    CHECK(snn_optimizer_state(opt, 2, &st) == SNN_E_INVALID);
    CHECK(snn_optimizer_find_state(opt, "momentum_buffer", &st) == SNN_E_INVALID);
    CHECK(snn_optimizer_find_state(opt, "exp_avg_sq", &st) == SNN_OK && st.numel == n);
    CHECK(snn_optimizer_set_steps(opt, -3) == SNN_E_INVALID);
    snn_optimizer_free(opt);
    /* plain SGD keeps no state */
    o = snn_optim_defaults(SNN_OPTIM_SGD);
    CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_OK);
    CHECK(snn_optimizer_num_states(opt) == 0);
    snn_optimizer_free(opt);
    CHECK(snn_optim_kind_parse("adamw") == SNN_OPTIM_ADAMW && snn_optim_kind_parse("rmsprop") == -1);
    free(p), free(g), free(p0);
}

/* Schedules: the oracle compares with torch; here the edges and the refusals. */
static void test_schedule(void) {
    snn_lr_sched s = {.kind = SNN_LR_COSINE, .base_lr = 0.1f, .warmup_steps = 4,
                      .warmup_start_factor = 0.0f, .total_steps = 20, .min_lr = 0.001f};
    CHECK(snn_lr_sched_check(&s) == SNN_OK);
    CHECK(snn_lr_schedule(&s, 0) == 0.0f);
    CHECK(snn_lr_schedule(&s, -5) == 0.0f);
    CHECK(fabsf(snn_lr_schedule(&s, 2) - 0.05f) < 1e-8f);
    CHECK(snn_lr_schedule(&s, 4) == 0.1f);
    CHECK(snn_lr_schedule(&s, 20) == 0.001f && snn_lr_schedule(&s, 1000) == 0.001f);
    /* midpoint of the cosine: (base + min) / 2 */
    CHECK(fabsf(snn_lr_schedule(&s, 12) - 0.0505f) < 1e-7f);
    s.total_steps = 4;
    CHECK(snn_lr_sched_check(&s) == SNN_E_INVALID);
    CHECK(isnan(snn_lr_schedule(&s, 3)));
    snn_lr_sched t = {.kind = SNN_LR_STEP, .base_lr = 1.0f, .step_size = 0, .gamma = 0.5f};
    CHECK(snn_lr_sched_check(&t) == SNN_E_INVALID && strstr(snn_last_error(), "step_size"));
    t.step_size = 3;
    CHECK(snn_lr_schedule(&t, 2) == 1.0f && snn_lr_schedule(&t, 3) == 0.5f && snn_lr_schedule(&t, 9) == 0.125f);
    /* a NaN lr from a bad schedule is refused by the optimizer */
    float p[4] = {1, 2, 3, 4}, g[4] = {0.5f, -0.5f, 0.25f, 1};
    snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_optimizer *opt = NULL;
    CHECK(snn_optimizer_create(&o, 4, p, g, NULL, &opt) == SNN_OK);
    CHECK(snn_optimizer_step(opt, snn_lr_schedule(&s, 1), 0) == SNN_E_INVALID);
    CHECK(p[0] == 1 && p[3] == 4);
    snn_optimizer_free(opt);
    CHECK(snn_lr_kind_parse("cosine") == SNN_LR_COSINE && snn_lr_kind_parse("linear") == -1);
}

int main(void) {
    rng_state = snn_test_seed();
    for (int k = 0; k < 3; k++) {
        test_resume((snn_optim_kind)k);
        test_skip((snn_optim_kind)k);
        test_mask((snn_optim_kind)k);
    }
    test_model();
    test_threads();
    test_clip();
    test_clip_fold();
    test_errors();
    test_schedule();
    return snn_test_finish("test_optim");
}
