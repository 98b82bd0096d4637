/* The training step with device values (src/train/step.c) on the CPU: it must compute what the
 * host-valued step computes (the loss on the host, snn_precision_backward), bit for bit, in
 * FP32, BF16, FP16 (with its overflow skip) and FP8 with every recipe, cross-entropy and MSE,
 * SGD and AdamW, with and without clipping; and on a test double of a device table with graphs (the CPU table with
 * graph entries that record nothing, as tests/test_model_graph.c) the whole step must be one
 * region that records on its second run and replays after, with the same bits.
 *
 * Also its parts: the portable exp and log (core/mathd.h) against long double, the class_loss
 * entry against snn_loss_* and an independent long double reference, optim_step's clip and
 * skip, and the refusals. The CUDA table's entries are held to these in tests/cuda. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/mathd.h"
#include "graph_double.h"
#include "harness.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"
#include "snn/snn.h"
#include "train/step.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

static uint64_t rng;

static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

/* error of got against ref in units of ref's last place */
static double ulps(double got, long double ref) {
    const double r = (double)ref;
    const double ulp = nextafter(fabs(r), INFINITY) - fabs(r);
    return (double)(fabsl((long double)got - ref) / (long double)ulp);
}

static void test_mathd(void) {
    double worst_e = 0, worst_l = 0;
    for (int i = 0; i < 200000; i++) {
        const double x = -740.0 + 745.0 * urand();
        const long double re = expl((long double)x);
        if (re > 1e-300L) {
            const double e = ulps(snn_exp_det(x), re);
            if (e > worst_e) worst_e = e;
        }
        const double y = exp(-30.0 + 60.0 * urand()) * (1.0 + urand());
        const double l = ulps(snn_log_det(y), logl((long double)y));
        if (l > worst_l) worst_l = l;
    }
    CHECK_MSG(worst_e <= 2.0, "snn_exp_det: %.2f ulp from expl", worst_e);
    CHECK_MSG(worst_l <= 2.0, "snn_log_det: %.2f ulp from logl", worst_l);
    CHECK(snn_exp_det(0.0) == 1.0 && snn_log_det(1.0) == 0.0);
    CHECK(snn_exp_det(-800.0) == 0.0 && isinf(snn_exp_det(800.0)));
    CHECK(isnan(snn_exp_det(NAN)) && isnan(snn_log_det(-1.0)) && isinf(snn_log_det(0.0)));
    CHECK(ulps(snn_log_det(4.9406564584124654e-324), logl(4.9406564584124654e-324L)) <= 2.0); /* subnormal */
}

/* class_loss against snn_loss_* (the same body: the entry's plumbing) and against a long
 * double computation written here (the body's arithmetic) */
static void test_class_loss(void) {
    const snn_backend *cpu = snn_backend_cpu();
    enum { T = 3, N = 5, C = 7 };
    float x[T * N * C], dx[T * N * C], dref[T * N * C];
    int32_t lab[N];
    double work[2 * N], res[2];
    for (int kind = 0; kind < 2; kind++) {
        snn_test_fill_uniform(x, T * N * C, -3.0f, 3.0f, &rng);
        for (int n = 0; n < N; n++) lab[n] = (int32_t)(urand() * C) % C;
        memset(dx, 0xff, sizeof dx);
        snn_class_loss q = {.kind = kind, .x = x, .labels = lab, .T = T, .N = N, .C = C, .dx = dx, .work = work,
                            .res = res};
        OK(cpu->class_loss(cpu, &q));
        float loss = 0;
        int correct = -1;
        OK(kind ? snn_loss_mse_rate(x, lab, T, N, C, &loss, dref, &correct)
                : snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &loss, dref, &correct));
        CHECK_MSG((float)res[0] == loss && (int)res[1] == correct && !memcmp(dx, dref, sizeof dx),
                  "class_loss kind %d differs from snn_loss_*", kind);
        long double total = 0;
        int hits = 0;
        double worst = 0;
        for (int n = 0; n < N; n++) {
            long double r[C], mx = -INFINITY, s = 0;
            int arg = 0;
            for (int c = 0; c < C; c++) {
                r[c] = 0;
                for (int t = 0; t < T; t++) r[c] += x[(t * N + n) * C + c];
                r[c] /= T;
                if (r[c] > mx) mx = r[c], arg = c;
            }
            hits += arg == lab[n];
            for (int c = 0; c < C; c++) s += expl(r[c] - mx);
            for (int c = 0; c < C; c++) {
                long double g = kind ? 2.0L * (r[c] - (c == lab[n])) / ((long double)N * C * T)
                                     : (expl(r[c] - mx) / s - (c == lab[n])) / ((long double)N * T);
                const double e = fabs((double)(dx[n * C + c] - (float)g));
                if (e > worst) worst = e;
                if (kind) total += (r[c] - (c == lab[n])) * (r[c] - (c == lab[n]));
            }
            if (!kind) total += mx + logl(s) - r[lab[n]];
        }
        total /= kind ? (long double)N * C : N;
        CHECK_MSG(fabsl((long double)loss - total) <= 1e-6L * fabsl(total) + 1e-7L && hits == correct,
                  "class_loss kind %d: %g against %Lg (long double), %d correct against %d", kind, (double)loss, total,
                  correct, hits);
        CHECK_MSG(worst <= 1e-7, "class_loss kind %d: gradient %g from the long double one", kind, worst);
    }
    int32_t bad[N] = {0, 1, C, 2, 3};
    snn_class_loss q = {.kind = 0, .x = x, .labels = bad, .T = T, .N = N, .C = C, .work = work, .res = res};
    CHECK(cpu->class_loss(cpu, &q) == SNN_E_INVALID);
    q.labels = lab;
    q.kind = 2;
    CHECK(cpu->class_loss(cpu, &q) == SNN_E_INVALID);
}

/* ---- the step against the host-valued one ---- */

enum { IN = 32, HID = 48, OUT = 8, T = 3, N = 8 }; /* FP8's alignment */

typedef struct {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
    snn_train_step *s;
} side;

static void side_make(side *s, const char *mode, snn_optim_kind ok, int on_double, int step, int kind, float clip,
                      float *host_dx) {
    memset(s, 0, sizeof *s);
    snn_module *seq = NULL, *c = NULL;
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.v_threshold = 0.3f;
    snn_status st = snn_sequential_create(&seq);
    if (st == SNN_OK && (st = snn_linear_create(IN, HID, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_neuron_create(&lif, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(HID, OUT, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    int shape[1] = {IN};
    if (st == SNN_OK) st = snn_model_create_from_module(seq, 1, shape, 5, &s->m);
    else snn_module_destroy(seq);
    OK(st);
    if (!s->m) return;
    if (on_double) {
        snn_backend *be = on_double == 3 ? fake_table_io16() : on_double == 2 ? fake_table_w16() : fake_table();
        CHECK(be != NULL);
        if (be) OK(snn_model_to_table(s->m, be, fk_release));
    }
    snn_precision_config cfg;
    char mbuf[32];
    snprintf(mbuf, sizeof mbuf, "%s", mode);
    char *recipe = strchr(mbuf, ':');
    if (recipe) *recipe++ = 0;
    OK(snn_precision_config_parse(mbuf, recipe, NULL, NULL, NULL, &cfg));
    OK(snn_prepare_model_for_precision(s->m, "cpu", &cfg, &s->p));
    snn_optim_opts o = snn_optim_defaults(ok);
    o.lr = ok == SNN_OPTIM_SGD ? 0.05f : 0.01f;
    o.momentum = ok == SNN_OPTIM_SGD ? 0.9f : 0.0f;
    OK(snn_optimizer_create_for_model(&o, s->m, &s->opt));
    OK(snn_model_plan(s->m, T, N));
    if (step) {
        CHECK(snn_train_step_supported(s->m, s->p, s->opt));
        OK(snn_train_step_create(s->m, s->p, s->opt, kind, clip, 1, host_dx, &s->s));
    }
}

static void side_free(side *s) {
    snn_train_step_free(s->s);
    snn_optimizer_free(s->opt);
    snn_precision_free(s->p);
    snn_model_free(s->m);
}

static float dxh[T * N * OUT], dyh[T * N * OUT];

static void compare(const char *mode, snn_optim_kind ok, int kind, float clip, int on_double, int overflow) {
    side h, d;
    side_make(&h, mode, ok, 0, 0, kind, clip, NULL);
    side_make(&d, mode, ok, on_double, 1, kind, clip, dxh);
    if (!h.m || !d.m || !d.s) {
        side_free(&h);
        side_free(&d);
        return;
    }
    char what[128];
    snprintf(what, sizeof what, "%s %s %s clip %g%s%s", mode, ok == SNN_OPTIM_SGD ? "sgd" : "adamw",
             kind ? "mse" : "ce", (double)clip,
             on_double == 3 ? " graphs io16" : on_double == 2 ? " graphs w16" : on_double ? " graphs" : "",
             overflow ? " overflow" : "");
    float x[T * N * IN];
    int32_t lab[N];
    const size_t np = snn_model_num_params(h.m);
    for (int step = 0; step < 5; step++) {
        snn_test_fill_uniform(x, T * N * IN, 0.0f, 1.5f, &rng);
        for (int n = 0; n < N; n++) lab[n] = (int32_t)(urand() * OUT) % OUT;
        if (overflow && step == 2) h.p->scaler.scale = d.p->scaler.scale = 3e38f; /* the scaled dy overflows */
        const float lr = 0.02f * (float)(step + 1); /* a schedule: the scalars change every step */
        /* host-valued: loss on the host, snn_precision_backward */
        const float *y;
        OK(snn_model_forward(h.m, x, 1, &y));
        float loss = 0, norm = 0;
        int correct = 0, skipped = 0;
        OK(kind ? snn_loss_mse_rate(y, lab, T, N, OUT, &loss, dyh, &correct)
                : snn_loss_cross_entropy_mean_t(y, lab, T, N, OUT, &loss, dyh, &correct));
        OK(snn_precision_backward(h.p, dyh, h.opt, lr, clip, &norm, &skipped));
        /* the step */
        snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = x, .numel = T * N * IN};
        snn_train_step_result r;
        memset(&r, 0, sizeof r);
        if (on_double >= 2) setenv("SNN_WEIGHT_COPY_UPDATE", "1", 1); /* the update writes the 16-bit copies */
        OK(snn_train_step_run(d.s, &xv, lab, lr, &r));
        unsetenv("SNN_WEIGHT_COPY_UPDATE");
        CHECK_MSG(r.loss == loss && r.correct == correct && r.skipped == skipped,
                  "%s step %d: loss %g / %g, correct %d / %d, skipped %d / %d", what, step, (double)r.loss,
                  (double)loss, r.correct, correct, r.skipped, skipped);
        CHECK_MSG(skipped ? isnan(r.grad_norm) && isnan(norm) : r.grad_norm == norm,
                  "%s step %d: norm %g / %g", what, step, (double)r.grad_norm, (double)norm);
        CHECK_MSG(!memcmp(snn_model_params(h.m), snn_model_params(d.m), np * sizeof(float)),
                  "%s step %d: the parameters differ", what, step);
        CHECK(snn_optimizer_steps(h.opt) == snn_optimizer_steps(d.opt));
        CHECK(snn_precision_loss_scale(h.p) == snn_precision_loss_scale(d.p));
    }
    if (overflow) CHECK_MSG(snn_optimizer_steps(d.opt) < 5, "%s: %ld updates of 5 steps, none skipped", what,
                            snn_optimizer_steps(d.opt));
    if (on_double) { /* one region a step: eager, recorded, then replayed (overflow: a new scale re-records) */
        snn_graph_stats g = snn_model_graph_stats(d.m);
        /* with the update's weight copies the first step's forward casts (fresh), the later ones
         * do not: the key repeats from the third step */
        const long want = on_double >= 2 ? 2 : 3;
        CHECK_MSG(overflow ? g.records >= 1 : g.records == 1 && g.replays == want,
                  "%s: recorded %ld, replayed %ld (want 1, %ld)", what, g.records, g.replays, want);
    }
    if (on_double >= 2) { /* the copies are the update's: current, and the next forward casts nothing */
        int w16 = 0;
        for (int i = 0; i < d.p->n_mods; i++) {
            if (!d.p->mods[i].w16) continue;
            w16++;
            CHECK(d.p->mods[i].w16_valid && d.p->mods[i].w16_version == d.m->param_version);
        }
        CHECK_MSG(w16 == 2 && d.m->fwd_version == d.m->param_version, "%s: %d 16-bit copies", what, w16);
    }
    side_free(&h);
    side_free(&d);
}

static void test_step(void) {
    static const char *modes[] = {"fp32", "bf16", "fp16"};
    for (int mi = 0; mi < 3; mi++)
        for (int on_double = 0; on_double < 2; on_double++) {
            compare(modes[mi], SNN_OPTIM_SGD, 0, 0.0f, on_double, 0);
            compare(modes[mi], SNN_OPTIM_ADAMW, 1, 0.0f, on_double, 0);
            compare(modes[mi], SNN_OPTIM_ADAMW, 0, 0.05f, on_double, 0); /* clipping every step */
        }
    /* 16-bit GEMM operands with the update's weight copies, inside the step's graph */
    compare("bf16", SNN_OPTIM_ADAMW, 0, 0.0f, 2, 0);
    compare("bf16", SNN_OPTIM_SGD, 1, 0.05f, 2, 0);
    compare("fp16", SNN_OPTIM_ADAMW, 0, 1.0f, 2, 0);
    /* and with 16-bit boundaries between the Linears and the LIF (the neuron's typed io) */
    compare("bf16", SNN_OPTIM_ADAMW, 0, 0.05f, 3, 0);
    compare("fp16", SNN_OPTIM_SGD, 1, 0.0f, 3, 0);
    static const char *fp8[] = {"fp8:delayed", "fp8:current", "fp8:block", "fp8:mxfp8"};
    for (int i = 0; i < 4; i++) compare(fp8[i], SNN_OPTIM_ADAMW, 0, 1.0f, i == 1, 0);
    compare("fp16", SNN_OPTIM_ADAMW, 0, 0.0f, 0, 1);
    compare("fp16", SNN_OPTIM_SGD, 0, 1.0f, 1, 1);
}

/* Without clipping and without measure_norm the step makes no pass for the norm: the same
 * weights as the host-valued step, the norm reported as NaN. */
static void test_unmeasured(void) {
    side h, d;
    side_make(&h, "fp32", SNN_OPTIM_ADAMW, 0, 0, 0, 0.0f, NULL);
    side_make(&d, "fp32", SNN_OPTIM_ADAMW, 0, 0, 0, 0.0f, NULL);
    snn_train_step *st = NULL;
    if (d.m) OK(snn_train_step_create(d.m, d.p, d.opt, 0, 0.0f, 0, dxh, &st));
    if (h.m && st) {
        float x[T * N * IN];
        int32_t lab[N];
        for (int k = 0; k < 3; k++) {
            snn_test_fill_uniform(x, T * N * IN, 0.0f, 1.5f, &rng);
            for (int n = 0; n < N; n++) lab[n] = (int32_t)(urand() * OUT) % OUT;
            const float *y;
            float loss = 0;
            OK(snn_model_forward(h.m, x, 1, &y));
            OK(snn_loss_cross_entropy_mean_t(y, lab, T, N, OUT, &loss, dyh, NULL));
            OK(snn_precision_backward(h.p, dyh, h.opt, 0.01f, 0.0f, NULL, NULL));
            snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = x, .numel = T * N * IN};
            snn_train_step_result r;
            OK(snn_train_step_run(st, &xv, lab, 0.01f, &r));
            CHECK(r.loss == loss && isnan(r.grad_norm));
        }
        const size_t np = snn_model_num_params(h.m);
        CHECK_MSG(!memcmp(snn_model_params(h.m), snn_model_params(d.m), np * sizeof(float)),
                  "unmeasured norm: the parameters differ");
    }
    snn_train_step_free(st);
    side_free(&h);
    side_free(&d);
}

static void test_refusals(void) {
    side s;
    side_make(&s, "bf16", SNN_OPTIM_SGD, 0, 1, 0, 0.0f, dxh);
    if (s.s) {
        float x[T * N * IN];
        snn_test_fill_uniform(x, T * N * IN, 0.0f, 1.0f, &rng);
        int32_t lab[N] = {0};
        lab[3] = OUT; /* outside the classes */
        snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = x, .numel = T * N * IN};
        snn_train_step_result r;
        CHECK(snn_train_step_run(s.s, &xv, lab, 0.1f, &r) == SNN_E_INVALID);
        lab[3] = 0;
        xv.numel--;
        CHECK(snn_train_step_run(s.s, &xv, lab, 0.1f, &r) == SNN_E_SHAPE);
        xv.numel++;
        CHECK(snn_train_step_run(s.s, &xv, lab, NAN, &r) == SNN_E_INVALID);
        CHECK(snn_train_step_run(NULL, &xv, lab, 0.1f, &r) == SNN_E_INVALID);
        OK(snn_model_plan(s.m, T, N + 1)); /* planned again: the step is for the old batch */
        CHECK(snn_train_step_run(s.s, &xv, lab, 0.1f, &r) == SNN_E_STATE);
        CHECK(snn_optimizer_steps(s.opt) == 0);
        /* planned back (an evaluation with another batch does this): the step follows the new buffers */
        OK(snn_model_plan(s.m, T, N));
        OK(snn_train_step_run(s.s, &xv, lab, 0.1f, &r));
        CHECK(snn_optimizer_steps(s.opt) == 1 && isfinite(r.loss));
        /* a smaller batch (an epoch's ragged last one) runs in the step's blocks */
        OK(snn_model_plan(s.m, T, N - 3));
        xv.numel = T * (N - 3) * IN;
        OK(snn_train_step_run(s.s, &xv, lab, 0.1f, &r));
        CHECK(snn_optimizer_steps(s.opt) == 2 && isfinite(r.loss) && r.correct <= N - 3);
    }
    side_free(&s);
    setenv("SNN_TRAIN_STEP", "host", 1);
    side_make(&s, "fp32", SNN_OPTIM_SGD, 0, 0, 0, 0.0f, NULL);
    if (s.m) CHECK(!snn_train_step_supported(s.m, s.p, s.opt));
    side_free(&s);
    /* unset: the CPU runs the step, a device table only when asked (until it ran on a GPU) */
    unsetenv("SNN_TRAIN_STEP");
    side_make(&s, "fp32", SNN_OPTIM_SGD, 0, 0, 0, 0.0f, NULL);
    if (s.m) CHECK(snn_train_step_supported(s.m, s.p, s.opt));
    side_free(&s);
    side_make(&s, "fp32", SNN_OPTIM_SGD, 1, 0, 0, 0.0f, NULL);
    if (s.m) CHECK(!snn_train_step_supported(s.m, s.p, s.opt));
    side_free(&s);
    setenv("SNN_TRAIN_STEP", "device", 1);
}

int main(void) {
    rng = snn_test_seed() | 1;
    setenv("SNN_TRAIN_STEP", "device", 1); /* the step on the graph double, a device table */
    test_mathd();
    test_class_loss();
    test_step();
    test_unmeasured();
    test_refusals();
    return snn_test_finish("test_train_step");
}
