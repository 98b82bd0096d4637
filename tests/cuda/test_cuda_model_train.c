/* GPU runner against the CPU over several training steps: Adam after a skipped FP16 step
 * (the device's step count must not advance, GradScaler's rule), ParametricLIF's learnable
 * decay, Dropout in training (the device draws the CPU's Philox mask), AvgPool2d, and
 * continuing from saved optimizer / loss-scaler state (snn_cuda_model_save_state and
 * load_state).
 *
 * Both sides start from identical parameters and see the same batches; the comparison is
 * the relative L2 norm per tensor of the last step's gradients and of the total parameter
 * change (the parameters themselves are mostly their initial values), with the bounds of
 * test_cuda_model.c (spikes can flip near the threshold under a different summation order).
 * Exit 77 without a GPU (after checking the CPU side of the skipped-step scenario). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "neuron/neuron_module.h"
#include "snn/checkpoint.h"
#include "snn/cuda.h"
#include "snn/loss.h"
#include "snn/optim.h"
#include "snn/precision.h"
#include "snn/prepare.h"
#include "snn/snn.h"
#include "model_compare.h"

static snn_cuda *g;
static uint64_t rng;

typedef snn_status (*make_fn)(uint64_t seed, snn_model **m);




static snn_module *neuron(snn_neuron_kind kind, float tau) {
    snn_neuron_opts o = snn_neuron_defaults(kind);
    o.tau = tau;
    return snn_neuron_module_new(&o);
}

static snn_status make_fcsnn(uint64_t seed, snn_model **m) {
    snn_fcsnn_opts o = {.in_features = 48, .hidden = 96, .depth = 2, .classes = 10, .tau = 2.0f};
    return snn_fcsnn_create(&o, seed, m);
}

/* Linear -> PLIF -> Linear -> PLIF (two learnable decays) */
static snn_status make_plif(uint64_t seed, snn_model **m) {
    snn_module *k[4] = {snn_linear_new(40, 64, 1), neuron(SNN_NEURON_PLIF, 2.0f), snn_linear_new(64, 10, 1),
                        neuron(SNN_NEURON_PLIF, 3.0f)};
    return build_seq(k, 4, "plif-mlp", snn_shape1(40), seed, m);
}
/* Linear -> LIF -> Dropout(0.3) -> Linear -> LIF */
static snn_status make_dropout(uint64_t seed, snn_model **m) {
    snn_module *k[5] = {snn_linear_new(40, 64, 1), neuron(SNN_NEURON_LIF, 2.0f), snn_dropout_new(0.3f),
                        snn_linear_new(64, 10, 1), neuron(SNN_NEURON_LIF, 2.0f)};
    return build_seq(k, 5, "dropout-mlp", snn_shape1(40), seed, m);
}
/* [2, 11, 9] -> Conv 3x3 pad 1 -> LIF -> AvgPool(3, 2, 1) [6, 6, 5] -> AvgPool(2) [6, 3, 2]
 * -> Flatten -> Linear -> LIF: odd sizes, padded and clipped windows, overlapping windows */
static snn_status make_avgpool(uint64_t seed, snn_model **m) {
    snn_module *k[7] = {snn_conv2d_new(2, 6, 3, 1, 1, 1), neuron(SNN_NEURON_LIF, 2.0f), snn_avgpool2d_new(3, 2, 1),
                        snn_avgpool2d_new(2, 0, 0), snn_flatten_new(), snn_linear_new(36, 10, 1),
                        neuron(SNN_NEURON_LIF, 2.0f)};
    return build_seq(k, 7, "avgpool-cnn", snn_shape3(2, 11, 9), seed, m);
}
/* everything at once: Conv -> PLIF -> AvgPool -> Flatten -> Dropout -> Linear -> PLIF */
static snn_status make_all(uint64_t seed, snn_model **m) {
    snn_module *k[7] = {snn_conv2d_new(2, 8, 3, 1, 1, 1), neuron(SNN_NEURON_PLIF, 2.0f), snn_avgpool2d_new(2, 0, 0),
                        snn_flatten_new(), snn_dropout_new(0.25f), snn_linear_new(8 * 5 * 4, 10, 1),
                        neuron(SNN_NEURON_PLIF, 2.0f)};
    return build_seq(k, 7, "plif-avgpool-dropout", snn_shape3(2, 11, 9), seed, m);
}

/* One CPU model and its GPU twin, trained side by side. */
typedef struct {
    const char *label;
    int T, N, mse;
    snn_dtype ct;
    size_t F, C, np, nbuf;
    snn_model *mc, *mg;
    snn_precision *prec;
    snn_optimizer *opt;
    snn_cuda_model *gm;
    float *p0, *dy;
    int cpu_skips;
} pair;

static int pair_open(pair *p, const char *label, make_fn make, int T, int N, snn_dtype ct,
                     const snn_optim_opts *oo, int with_gpu) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->T = T;
    p->N = N;
    p->ct = ct;
    uint64_t seed = snn_test_seed() ^ 0x7a11;
    if (make(seed, &p->mc) != SNN_OK || make(seed, &p->mg) != SNN_OK) {
        CHECK_MSG(0, "%s: building the model: %s", label, snn_last_error());
        return 0;
    }
    p->F = snn_model_input_numel(p->mc);
    p->C = snn_model_output_numel(p->mc);
    p->np = snn_model_num_params(p->mc);
    p->nbuf = snn_model_num_buffers(p->mc);
    p->p0 = malloc(sizeof(float) * p->np);
    p->dy = malloc(sizeof(float) * p->C * (size_t)(T * N));
    memcpy(p->p0, snn_model_params(p->mc), sizeof(float) * p->np);
    snn_precision_config pc;
    const char *pname = ct == SNN_BF16 ? "bf16" : ct == SNN_F16 ? "fp16" : "fp32";
    CHECK(snn_precision_config_parse(pname, NULL, NULL, NULL, NULL, &pc) == SNN_OK);
    CHECK(snn_prepare_model_for_precision(p->mc, "cpu", &pc, &p->prec) == SNN_OK);
    CHECK(snn_model_plan(p->mc, T, N) == SNN_OK);
    CHECK(snn_optimizer_create_for_model(oo, p->mc, &p->opt) == SNN_OK);
    if (!with_gpu) return 1;
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = ct};
    snn_status st = snn_cuda_model_create(g, p->mg, &go, oo, &p->gm);
    CHECK_MSG(st == SNN_OK, "%s: create: %s", label, snn_last_error());
    return st == SNN_OK;
}

static void pair_close(pair *p) {
    snn_cuda_model_destroy(p->gm);
    snn_optimizer_free(p->opt);
    snn_precision_free(p->prec);
    snn_model_free(p->mc);
    snn_model_free(p->mg);
    free(p->p0);
    free(p->dy);
}

/* One CPU step (returns whether it was skipped) and, with a GPU model, the same GPU step. */
static int pair_step(pair *p, const float *x, const int32_t *lab, float lr) {
    const float *y = NULL;
    float loss = 0;
    int corr = 0, skipped = 0;
    CHECK(snn_model_forward(p->mc, x, 1, &y) == SNN_OK);
    CHECK(snn_loss_cross_entropy_mean_t(y, lab, p->T, p->N, (int)p->C, &loss, p->dy, &corr) == SNN_OK);
    CHECK(snn_precision_backward(p->prec, p->dy, p->opt, lr, 0.0f, NULL, &skipped) == SNN_OK);
    p->cpu_skips += skipped;
    if (p->gm) CHECK_MSG(snn_cuda_model_train_step(p->gm, x, 1, lab, lr) == SNN_OK, "%s: step: %s", p->label,
                         snn_last_error());
    return skipped;
}

/* Gradients of the last step (grad_scale: the GPU's loss scale during that step), total
 * parameter change, BN buffers, and an evaluation forward. */
static void pair_compare(pair *p, const float *x, float grad_scale, double tol) {
    size_t np = p->np, nout = p->C * (size_t)(p->T * p->N);
    float *dc = malloc(sizeof(float) * np), *dg = malloc(sizeof(float) * np);
    float *outg = malloc(sizeof(float) * nout), *outc = malloc(sizeof(float) * nout);
    snn_test_poison(snn_model_grads(p->mg), np);
    CHECK(snn_cuda_model_download_grads(p->gm) == SNN_OK);
    for (size_t i = 0; i < np; i++) snn_model_grads(p->mg)[i] /= grad_scale;
    snn_test_poison(snn_model_params(p->mg), np);
    snn_test_poison(snn_model_buffers(p->mg), p->nbuf);
    CHECK(snn_cuda_model_download(p->gm) == SNN_OK);
    for (size_t i = 0; i < np; i++) {
        dc[i] = snn_model_params(p->mc)[i] - p->p0[i];
        dg[i] = snn_model_params(p->mg)[i] - p->p0[i];
    }
    const char *wg = "-", *wp = "-";
    double eg = worst_param(p->mc, snn_model_grads(p->mg), snn_model_grads(p->mc), &wg);
    double ep = worst_param(p->mc, dg, dc, &wp);
    double eb = p->nbuf ? rel_l2(snn_model_buffers(p->mg), snn_model_buffers(p->mc), p->nbuf) : 0;
    const float *y = NULL;
    CHECK(snn_model_forward(p->mc, x, 0, &y) == SNN_OK);
    memcpy(outc, y, sizeof(float) * nout);
    snn_test_poison(outg, nout);
    CHECK(snn_cuda_model_forward(p->gm, x, 1, p->N, outg) == SNN_OK);
    double eo = rel_l2(outg, outc, nout);
    printf("%-34s %-4s grad %.2e (%s) | update %.2e (%s) | buffers %.2e | eval out %.2e\n", p->label,
           snn_dtype_name(p->ct), eg, wg, ep, wp, eb, eo);
    CHECK_MSG(eg <= tol, "%s: gradient of %s differs (rel L2 %.3g)", p->label, wg, eg);
    CHECK_MSG(ep <= tol, "%s: update of %s differs (rel L2 %.3g)", p->label, wp, ep);
    CHECK_MSG(eb <= tol, "%s: buffers differ (rel L2 %.3g)", p->label, eb);
    CHECK_MSG(eo <= tol, "%s: evaluation output differs (rel L2 %.3g)", p->label, eo);
    free(dc); free(dg); free(outg); free(outc);
}

static void fill_batch(const pair *p, float *x, int32_t *lab) {
    snn_test_fill_uniform(x, p->F * (size_t)(p->T * p->N), 0.0f, 1.0f, &rng);
    for (int i = 0; i < p->N; i++) {
        float u;
        snn_test_fill_uniform(&u, 1, 0.0f, (float)p->C, &rng);
        lab[i] = (int32_t)u % (int32_t)p->C;
    }
}

/* ---- 1. Adam after a skipped FP16 step ----
 * Steps: clean (eager), clean (captured into the graph), one with an Inf input (every side
 * gets non-finite gradients: the step is skipped and the scale halves), clean. Adam's eps is
 * 1 so that the update is proportional to the bias-corrected first moment (no sign-like
 * amplification of near-zero gradients): counting the skipped step would use t = 4 instead
 * of 3 in the last step, scaling that step's update by (1 - 0.9^3) / (1 - 0.9^4) = 0.79. */
static void test_adam_skip(int with_gpu) {
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAM);
    oo.lr = 0.01f;
    oo.eps = 1.0f;
    pair p;
    if (!pair_open(&p, "fcsnn adam, skipped fp16 step", make_fcsnn, 4, 16, SNN_F16, &oo, with_gpu)) {
        pair_close(&p);
        return;
    }
    float *x = malloc(sizeof(float) * p.F * (size_t)(p.T * p.N));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)p.N);
    float scale_before_last = 0;
    for (int s = 0; s < 4; s++) {
        fill_batch(&p, x, lab);
        if (s == 2) x[p.F * 3 + 5] = INFINITY; /* sample 3 of step 0 */
        if (s == 3 && p.gm) CHECK(snn_cuda_model_loss_scale(p.gm, &scale_before_last) == SNN_OK);
        int sk = pair_step(&p, x, lab, -1.0f);
        CHECK_MSG(sk == (s == 2), "%s: CPU step %d skipped = %d", p.label, s, sk);
    }
    CHECK(snn_optimizer_steps(p.opt) == 3);
    CHECK(snn_precision_loss_scale(p.prec) == 32768.0f);
    if (p.gm) {
        float ls = 0;
        CHECK(snn_cuda_model_loss_scale(p.gm, &ls) == SNN_OK);
        CHECK_MSG(ls == 32768.0f && scale_before_last == 32768.0f, "%s: loss scale %g (%g before the last step)",
                  p.label, (double)ls, (double)scale_before_last);
        pair_compare(&p, x, scale_before_last, 2e-2);
    }
    free(x);
    free(lab);
    pair_close(&p);
}

/* ---- 2-4. PLIF, Dropout, AvgPool2d: three steps (eager, captured, replayed: the PLIF
 * decay and the dropout mask must follow each step inside the graph), SGD with momentum
 * (an update proportional to the gradient), an evaluation forward in between (it advances
 * the forward counter the dropout mask is drawn from, on both sides) ---- */
static void test_layers(const char *label, make_fn make, int T, int N, snn_dtype ct, int with_gpu) {
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = 0.05f;
    oo.momentum = 0.9f;
    oo.weight_decay = 1e-3f;
    pair p;
    if (!pair_open(&p, label, make, T, N, ct, &oo, with_gpu)) {
        pair_close(&p);
        return;
    }
    float *x = malloc(sizeof(float) * p.F * (size_t)(p.T * p.N));
    float *out = malloc(sizeof(float) * p.C * (size_t)(p.T * p.N));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)p.N);
    for (int s = 0; s < 3; s++) {
        fill_batch(&p, x, lab);
        CHECK_MSG(!pair_step(&p, x, lab, -1.0f), "%s: CPU step %d skipped", label, s);
        if (s == 1) {
            const float *y = NULL;
            CHECK(snn_model_forward(p.mc, x, 0, &y) == SNN_OK);
            if (p.gm) CHECK(snn_cuda_model_forward(p.gm, x, 1, p.N, out) == SNN_OK);
        }
    }
    if (p.gm) pair_compare(&p, x, 1.0f, 2e-2);
    /* PLIF: the decay parameters moved, and by the CPU's amount (their own tensors are in the
     * comparison above; this says the update was not zero) */
    for (size_t i = 0; i < p.mc->n_tensors; i++) {
        const snn_param *q = p.mc->tensors[i].param;
        if (strcmp(q->name, "w")) continue;
        size_t off = (size_t)(q->data - snn_model_params(p.mc));
        printf("  %s: w %.6f -> cpu %.6f gpu %.6f\n", p.mc->tensors[i].name, (double)p.p0[off],
               (double)snn_model_params(p.mc)[off], p.gm ? (double)snn_model_params(p.mg)[off] : NAN);
        CHECK_MSG(snn_model_params(p.mc)[off] != p.p0[off], "%s: PLIF w did not move on the CPU", label);
    }
    free(x);
    free(out);
    free(lab);
    pair_close(&p);
}

/* ---- 5. Resuming ----
 * (a) GPU -> GPU: 3 steps straight against 2 steps, save_state + download, a new runner over
 * the downloaded host model with load_state, 1 step. Same kernels on the same data: the
 * results agree to rounding (1e-6; the bound a fresh optimizer would break is checked too).
 * Dropout in the model checks that the forward counter goes round as well. */
static void run_steps(snn_cuda_model *gm, float *const *xs, int32_t *const *labs, int from, int to) {
    for (int s = from; s < to; s++) CHECK(snn_cuda_model_train_step(gm, xs[s], 1, labs[s], -1.0f) == SNN_OK);
}

static void test_resume_gpu(snn_dtype ct, snn_optim_kind kind) {
    const int T = 4, N = 16;
    const char *label = kind == SNN_OPTIM_SGD ? "resume gpu->gpu sgd" : "resume gpu->gpu adamw";
    snn_optim_opts oo = snn_optim_defaults(kind);
    if (kind == SNN_OPTIM_SGD) {
        oo.lr = 0.05f;
        oo.momentum = 0.9f;
    } else {
        oo.lr = 0.01f;
    }
    uint64_t seed = snn_test_seed() ^ 0x4e5u;
    snn_model *ma = NULL, *mb = NULL, *mc = NULL;
    CHECK(make_dropout(seed, &ma) == SNN_OK && make_dropout(seed, &mb) == SNN_OK && make_dropout(seed, &mc) == SNN_OK);
    if (!ma || !mb || !mc) return;
    size_t F = snn_model_input_numel(ma), C = snn_model_output_numel(ma), np = snn_model_num_params(ma);
    float *xs[3];
    int32_t *labs[3];
    for (int s = 0; s < 3; s++) {
        xs[s] = malloc(sizeof(float) * F * (size_t)(T * N));
        labs[s] = malloc(sizeof(int32_t) * (size_t)N);
        snn_test_fill_uniform(xs[s], F * (size_t)(T * N), 0.0f, 1.0f, &rng);
        for (int i = 0; i < N; i++) labs[s][i] = (int32_t)((rng >> 17) % C) ^ (i % 3 == 0);
        for (int i = 0; i < N; i++) labs[s][i] %= (int32_t)C;
    }
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = ct};
    snn_cuda_model *ga = NULL, *gb = NULL, *gc = NULL;
    snn_optimizer *ob = NULL;
    float *pa = malloc(sizeof(float) * np), *p2 = malloc(sizeof(float) * np);
    CHECK(snn_cuda_model_create(g, ma, &go, &oo, &ga) == SNN_OK);
    CHECK(snn_cuda_model_create(g, mb, &go, &oo, &gb) == SNN_OK);
    CHECK(snn_optimizer_create_for_model(&oo, mb, &ob) == SNN_OK);
    if (!ga || !gb || !ob) goto done;
    run_steps(ga, xs, labs, 0, 3);
    CHECK(snn_cuda_model_download(ga) == SNN_OK);
    memcpy(pa, snn_model_params(ma), sizeof(float) * np);
    run_steps(gb, xs, labs, 0, 2);
    float scale = 0;
    int tracker = -1;
    snn_test_poison(snn_model_params(mb), np);
    CHECK(snn_cuda_model_download(gb) == SNN_OK);
    CHECK(snn_cuda_model_save_state(gb, ob, &scale, &tracker) == SNN_OK);
    CHECK_MSG(snn_optimizer_steps(ob) == 2, "%s: %ld optimizer steps saved", label, snn_optimizer_steps(ob));
    CHECK_MSG(snn_model_step_count(mb) == 2, "%s: forward counter %llu", label,
              (unsigned long long)snn_model_step_count(mb));
    CHECK(scale == 65536.0f && tracker == (ct == SNN_F16 ? 2 : 0));
    memcpy(p2, snn_model_params(mb), sizeof(float) * np);
    snn_cuda_model_destroy(gb);
    gb = NULL;
    /* the continuation, and a control run over the same parameters without the state */
    snn_model_set_step_count(mc, snn_model_step_count(mb));
    memcpy(snn_model_params(mc), p2, sizeof(float) * np);
    CHECK(snn_cuda_model_create(g, mb, &go, &oo, &gb) == SNN_OK);
    CHECK(snn_cuda_model_create(g, mc, &go, &oo, &gc) == SNN_OK);
    if (!gb || !gc) goto done;
    CHECK(snn_cuda_model_load_state(gb, ob, scale, tracker) == SNN_OK);
    run_steps(gb, xs, labs, 2, 3);
    run_steps(gc, xs, labs, 2, 3);
    snn_test_poison(snn_model_params(mb), np);
    CHECK(snn_cuda_model_download(gb) == SNN_OK && snn_cuda_model_download(gc) == SNN_OK);
    CHECK(snn_cuda_model_save_state(gb, ob, &scale, &tracker) == SNN_OK);
    CHECK_MSG(snn_optimizer_steps(ob) == 3 && tracker == (ct == SNN_F16 ? 3 : 0), "%s: %ld steps, tracker %d",
              label, snn_optimizer_steps(ob), tracker);
    {
        float *da = malloc(sizeof(float) * np), *db = malloc(sizeof(float) * np), *dc = malloc(sizeof(float) * np);
        for (size_t i = 0; i < np; i++) {
            da[i] = pa[i] - p2[i];
            db[i] = snn_model_params(mb)[i] - p2[i];
            dc[i] = snn_model_params(mc)[i] - p2[i];
        }
        const char *w1 = "-", *w2 = "-";
        double e = worst_param(ma, db, da, &w1), ectl = worst_param(ma, dc, da, &w2);
        printf("%-34s %-4s last update vs straight run %.2e (%s) | without the state %.2e (%s)\n", label,
               snn_dtype_name(ct), e, w1, ectl, w2);
        CHECK_MSG(e <= 1e-6, "%s: resumed update of %s differs (rel L2 %.3g)", label, w1, e);
        CHECK_MSG(ectl > 1e-3, "%s: the control run without state matches too (rel L2 %.3g)", label, ectl);
        free(da); free(db); free(dc);
    }
done:
    snn_cuda_model_destroy(ga);
    snn_cuda_model_destroy(gb);
    snn_cuda_model_destroy(gc);
    snn_optimizer_free(ob);
    snn_model_free(ma); snn_model_free(mb); snn_model_free(mc);
    for (int s = 0; s < 3; s++) {
        free(xs[s]);
        free(labs[s]);
    }
    free(pa);
    free(p2);
}

/* (b) CPU <-> GPU: 2 steps on both sides; the GPU's saved Adam state must match the CPU's
 * (layout and values, to the parity bound); then a runner over the CPU's parameters with the
 * CPU's optimizer state takes the third step, compared with the CPU's third step. */
static void test_resume_cross(void) {
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAM);
    oo.lr = 0.01f;
    oo.eps = 1.0f; /* an update proportional to the moment: see test_adam_skip */
    pair p;
    if (!pair_open(&p, "resume cpu<->gpu adam", make_fcsnn, 4, 16, SNN_F32, &oo, 1)) {
        pair_close(&p);
        return;
    }
    float *x = malloc(sizeof(float) * p.F * (size_t)(p.T * p.N));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)p.N);
    float *before = malloc(sizeof(float) * p.np), *dc = malloc(sizeof(float) * p.np), *dx = malloc(sizeof(float) * p.np);
    snn_optimizer *og = NULL;
    snn_model *mx = NULL;
    snn_cuda_model *gx = NULL;
    CHECK(snn_optimizer_create_for_model(&oo, p.mg, &og) == SNN_OK);
    for (int s = 0; s < 2; s++) {
        fill_batch(&p, x, lab);
        pair_step(&p, x, lab, -1.0f);
    }
    float scale = 0;
    int tracker = 0;
    if (!og) goto done;
    CHECK(snn_cuda_model_save_state(p.gm, og, &scale, &tracker) == SNN_OK);
    CHECK(snn_optimizer_steps(og) == 2 && snn_optimizer_steps(p.opt) == 2);
    for (size_t j = 0; j < 2; j++) {
        snn_optim_state sg, sc;
        CHECK(snn_optimizer_state(og, j, &sg) == SNN_OK && snn_optimizer_state(p.opt, j, &sc) == SNN_OK);
        const char *w = "-";
        double e = worst_param(p.mc, sg.data, sc.data, &w);
        printf("%-34s saved %s vs the CPU's %.2e (%s)\n", p.label, sc.name, e, w);
        CHECK_MSG(e <= 2e-2, "%s: GPU %s of %s differs from the CPU's (rel L2 %.3g)", p.label, sc.name, w, e);
    }
    /* CPU -> GPU: a runner over the CPU's parameters and optimizer state */
    CHECK(make_fcsnn(snn_test_seed() ^ 0x7a11, &mx) == SNN_OK);
    if (!mx) goto done;
    memcpy(snn_model_params(mx), snn_model_params(p.mc), sizeof(float) * p.np);
    if (p.nbuf) memcpy(snn_model_buffers(mx), snn_model_buffers(p.mc), sizeof(float) * p.nbuf);
    memcpy(before, snn_model_params(p.mc), sizeof(float) * p.np);
    snn_model_set_step_count(mx, snn_model_step_count(p.mc));
    {
        snn_cuda_model_opts go = {.T = p.T, .N = p.N, .compute = SNN_F32};
        CHECK(snn_cuda_model_create(g, mx, &go, &oo, &gx) == SNN_OK);
    }
    if (!gx) goto done;
    CHECK(snn_cuda_model_load_state(gx, p.opt, 65536.0f, 0) == SNN_OK);
    fill_batch(&p, x, lab);
    CHECK(snn_cuda_model_train_step(gx, x, 1, lab, -1.0f) == SNN_OK);
    {
        /* the CPU's third step (without its GPU twin) */
        snn_cuda_model *keep = p.gm;
        p.gm = NULL;
        pair_step(&p, x, lab, -1.0f);
        p.gm = keep;
    }
    snn_test_poison(snn_model_params(mx), p.np);
    CHECK(snn_cuda_model_download(gx) == SNN_OK);
    for (size_t i = 0; i < p.np; i++) {
        dc[i] = snn_model_params(p.mc)[i] - before[i];
        dx[i] = snn_model_params(mx)[i] - before[i];
    }
    {
        const char *w = "-";
        double e = worst_param(p.mc, dx, dc, &w);
        printf("%-34s third step from the CPU's state %.2e (%s)\n", p.label, e, w);
        CHECK_MSG(e <= 2e-2, "%s: the GPU step from the CPU's state differs at %s (rel L2 %.3g)", p.label, w, e);
    }
done:
    snn_cuda_model_destroy(gx);
    snn_model_free(mx);
    snn_optimizer_free(og);
    free(x); free(lab); free(before); free(dc); free(dx);
    pair_close(&p);
}

/* CPU side of the checkpoint format the GPU path writes: snn_training_checkpoint_save_cfg
 * (fp16, explicit loss scaler) read back by the CPU's restore into a prepared fp16 precision,
 * and the reverse with restore_cfg. */
static void test_checkpoint_cfg(void) {
    snn_model *m = NULL, *m2 = NULL;
    uint64_t seed = snn_test_seed() ^ 0xc4;
    CHECK(make_fcsnn(seed, &m) == SNN_OK && make_fcsnn(seed + 1, &m2) == SNN_OK);
    if (!m || !m2) return;
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    snn_optimizer *o1 = NULL, *o2 = NULL;
    snn_precision *prec = NULL;
    snn_precision_config pc;
    CHECK(snn_precision_config_parse("fp16", NULL, NULL, NULL, NULL, &pc) == SNN_OK);
    CHECK(snn_optimizer_create_for_model(&oo, m, &o1) == SNN_OK);
    CHECK(snn_prepare_model_for_precision(m2, "cpu", &pc, &prec) == SNN_OK);
    CHECK(snn_optimizer_create_for_model(&oo, m2, &o2) == SNN_OK);
    if (!o1 || !o2 || !prec) goto done;
    for (size_t j = 0; j < 2; j++) {
        snn_optim_state s;
        CHECK(snn_optimizer_state(o1, j, &s) == SNN_OK);
        /* exp_avg in [-1, 1), exp_avg_sq in [0, 1): a restore refuses a negative second moment */
        snn_test_fill_uniform(s.data, s.numel, j ? 0.0f : -1.0f, 1.0f, &rng);
    }
    CHECK(snn_optimizer_set_steps(o1, 17) == SNN_OK);
    snn_model_set_step_count(m, 41);
    snn_loss_scaler sc;
    CHECK(snn_loss_scaler_init(&sc, NULL) == SNN_OK && snn_loss_scaler_set_state(&sc, 1024.0f, 7) == SNN_OK);
    char path[128];
    snprintf(path, sizeof path, "/tmp/snn_test_ckcfg_%ld.safetensors", (long)getpid());
    CHECK(snn_training_checkpoint_save_cfg(m, &pc, &sc, o1, path, NULL) == SNN_OK);
    CHECK(snn_training_checkpoint_save_cfg(m, &pc, NULL, o1, path, NULL) == SNN_E_INVALID);
    snn_ckpt *c = NULL;
    CHECK(snn_ckpt_open(path, &c) == SNN_OK);
    if (c) {
        CHECK(snn_training_checkpoint_restore(m2, prec, o2, c) == SNN_OK);
        CHECK(snn_precision_loss_scale(prec) == 1024.0f);
        CHECK(snn_optimizer_steps(o2) == 17 && snn_model_step_count(m2) == 41);
        CHECK(!memcmp(snn_model_params(m2), snn_model_params(m), sizeof(float) * snn_model_num_params(m)));
        for (size_t j = 0; j < 2; j++) {
            snn_optim_state a, b;
            CHECK(snn_optimizer_state(o1, j, &a) == SNN_OK && snn_optimizer_state(o2, j, &b) == SNN_OK);
            CHECK(!memcmp(a.data, b.data, sizeof(float) * a.numel));
        }
        /* the fp32 configuration does not match an fp16 checkpoint */
        snn_precision_config p32 = snn_precision_config_default();
        CHECK(snn_training_checkpoint_restore_cfg(m, &p32, NULL, o1, c) == SNN_E_INVALID);
        snn_ckpt_close(c);
    }
    /* CPU-written (prepared fp16) -> restore_cfg */
    CHECK(snn_training_checkpoint_save(m2, prec, o2, path, NULL) == SNN_OK);
    c = NULL;
    CHECK(snn_ckpt_open(path, &c) == SNN_OK);
    if (c) {
        snn_loss_scaler s2;
        CHECK(snn_loss_scaler_init(&s2, NULL) == SNN_OK);
        snn_optimizer_set_steps(o1, 0);
        CHECK(snn_training_checkpoint_restore_cfg(m, &pc, &s2, o1, c) == SNN_OK);
        float scale;
        int tr;
        snn_loss_scaler_get_state(&s2, &scale, &tr);
        CHECK(scale == 1024.0f && tr == 7 && snn_optimizer_steps(o1) == 17);
        snn_ckpt_close(c);
    }
    remove(path);
done:
    snn_optimizer_free(o1);
    snn_optimizer_free(o2);
    snn_precision_free(prec);
    snn_model_free(m);
    snn_model_free(m2);
}

int main(void) {
    rng = snn_test_seed();
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        printf("no usable GPU (%s): CPU side only, then skipped\n", snn_last_error());
        test_adam_skip(0);
        test_checkpoint_cfg();
        test_layers("plif mlp", make_plif, 4, 16, SNN_F32, 0);
        test_layers("dropout mlp", make_dropout, 4, 16, SNN_F32, 0);
        test_layers("avgpool cnn", make_avgpool, 4, 8, SNN_F32, 0);
        test_layers("plif+avgpool+dropout cnn", make_all, 4, 8, SNN_F32, 0);
        test_layers("plif+avgpool+dropout cnn", make_all, 4, 8, SNN_BF16, 0);
        int rc = snn_test_finish("test_cuda_model_train (CPU side)");
        return rc ? rc : 77;
    }
    test_checkpoint_cfg();
    test_adam_skip(1);
    test_layers("plif mlp", make_plif, 4, 16, SNN_F32, 1);
    test_layers("dropout mlp", make_dropout, 4, 16, SNN_F32, 1);
    test_layers("avgpool cnn", make_avgpool, 4, 8, SNN_F32, 1);
    test_layers("plif+avgpool+dropout cnn", make_all, 4, 8, SNN_F32, 1);
    test_layers("plif+avgpool+dropout cnn", make_all, 4, 8, SNN_BF16, 1);
    test_resume_gpu(SNN_F32, SNN_OPTIM_ADAMW);
    test_resume_gpu(SNN_F16, SNN_OPTIM_ADAMW);
    test_resume_gpu(SNN_F32, SNN_OPTIM_SGD);
    test_resume_cross();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_model_train");
}
