/* The training step with device values (src/train/step.c) on the GPU.
 *
 * Entries: class_loss against the CPU table bit for bit (the same body, the portable exp and
 * log of core/mathd.h), including Spikformer's 1024 classes (a block per sample) and 4000 (a
 * thread per sample); optim_step against the CPU's with
 * the same sum of squares (the clip, the skip flag, the norm, the weight copies); sumsq_to
 * against sumsq.
 *
 * The whole step: two models from one seed on the GPU, one trained by snn_train_step (one
 * graph a step), one by the host-valued step (the loss on the host, snn_precision_backward,
 * with the forward and backward graphs of model_graph.c): every loss, count, norm and, at the
 * end, every parameter must be the same bits (the same kernels on the same GPU; the host path
 * is held to the CPU by the parity suites). The step's region must be recorded once and
 * replayed after, except where a module waits for the device (PLIF), where it runs eagerly.
 * Exit 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "test_nets.h"
#include "nn/model_internal.h"
#include "snn/snn.h"
#include "train/step.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

static uint64_t rng;
static const snn_backend *cpu, *gpu;

static void *dput(const void *src, size_t bytes) {
    void *p = NULL;
    if (gpu->alloc(gpu, bytes ? bytes : 4, &p) != SNN_OK) return NULL;
    if (src && bytes) (void)gpu->upload(gpu, p, src, bytes);
    else if (bytes) {
        void *poison = malloc(bytes);
        if (poison) memset(poison, 0xff, bytes), (void)gpu->upload(gpu, p, poison, bytes), free(poison);
    }
    return p;
}

static void test_class_loss(int kind, int T, int N, int C) {
    const size_t nx = (size_t)T * N * C;
    float *x = malloc(nx * 4), *dx = malloc(nx * 4), *dg = malloc(nx * 4);
    int32_t *lab = malloc((size_t)N * 4);
    double *work = malloc((size_t)N * 16), res[2], resg[2];
    if (!x || !dx || !dg || !lab || !work) return;
    snn_test_fill_uniform(x, nx, -4.0f, 4.0f, &rng);
    for (int n = 0; n < N; n++) lab[n] = (int32_t)((rng = rng * 6364136223846793005ull + 1) >> 33) % C;
    snn_class_loss q = {.kind = kind, .x = x, .labels = lab, .T = T, .N = N, .C = C, .dx = dx, .work = work, .res = res};
    OK(cpu->class_loss(cpu, &q));
    float *xd = dput(x, nx * 4), *dxd = dput(NULL, nx * 4);
    int32_t *ld = dput(lab, (size_t)N * 4);
    double *wd = dput(NULL, (size_t)N * 16), *rd = dput(NULL, 16);
    snn_class_loss qg = {.kind = kind, .x = xd, .labels = ld, .T = T, .N = N, .C = C, .dx = dxd, .work = wd, .res = rd};
    OK(gpu->class_loss(gpu, &qg));
    OK(gpu->download(gpu, resg, rd, 16));
    OK(gpu->download(gpu, dg, dxd, nx * 4));
    CHECK_MSG(!memcmp(res, resg, 16) && !memcmp(dx, dg, nx * 4), "class_loss kind %d T %d N %d C %d: GPU %.17g / %g, "
              "CPU %.17g / %g, gradients %s", kind, T, N, C, resg[0], resg[1], res[0], res[1],
              memcmp(dx, dg, nx * 4) ? "differ" : "equal");
    gpu->free(gpu, xd), gpu->free(gpu, dxd), gpu->free(gpu, ld), gpu->free(gpu, wd), gpu->free(gpu, rd);
    free(x), free(dx), free(dg), free(lab), free(work);
}

static void test_optim_step(int adam, float max_norm, int skip) {
    enum { n = 70001, off = 1000, cn = 40000 };
    float *w = malloc(n * 4), *g = malloc(n * 4), *s0 = malloc(n * 4), *s1 = malloc(n * 4), *h = malloc(n * 4);
    uint16_t *c16 = malloc(cn * 2), *c16g = malloc(cn * 2);
    if (!w || !g || !s0 || !s1 || !h || !c16 || !c16g) return;
    snn_test_fill_uniform(w, n, -1, 1, &rng);
    snn_test_fill_uniform(g, n, -0.5f, 0.5f, &rng);
    snn_test_fill_uniform(s0, n, -0.1f, 0.1f, &rng);
    snn_test_fill_uniform(s1, n, 0, 0.01f, &rng);
    snn_optim_update u;
    memset(&u, 0, sizeof u);
    u.adam = adam, u.wd = 0.01f, u.gscale = 1;
    if (adam) u.fb1 = 0.9f, u.fc1 = 0.1f, u.fb2 = 0.999f, u.fc2 = 0.001f, u.neg_step = -0.003f, u.bc2_sqrt = 0.05f,
              u.eps = 1e-8f, u.shrink = 0.9999f, u.decoupled = 1;
    else u.nlr = -0.05f, u.mom = 0.9f, u.keep = 1, u.l2 = 1;
    double sumsq = 0;
    for (int i = 0; i < n; i++) sumsq += (double)g[i] * g[i];
    int flag = -1, fg = -1, sk = skip;
    float norm = -1, normg = -1;
    float *wd = dput(w, n * 4), *gd = dput(g, n * 4), *s0d = dput(s0, n * 4), *s1d = dput(s1, n * 4);
    void *c16d = dput(NULL, cn * 2), *ud = dput(&u, sizeof u);
    double *sd = dput(&sumsq, 8);
    int *fd = dput(NULL, 4), *skd = dput(&sk, 4);
    float *nd = dput(NULL, 4);
    snn_optim_copy hc = {.off = off, .n = cn, .t = SNN_BF16, .dst16 = c16}, dc = {.off = off, .n = cn, .t = SNN_BF16,
                                                                                   .dst16 = c16d};
    snn_optim_step s = {.u = &u, .adam = adam, .sumsq = &sumsq, .max_norm = max_norm, .skip = &sk, .n = n, .w = w, .g = g,
                        .s0 = s0, .s1 = s1, .copies = &hc, .n_copies = 1, .nonfinite = &flag, .norm = &norm};
    OK(cpu->optim_step(cpu, &s));
    snn_optim_step sg = {.u = ud, .adam = adam, .sumsq = sd, .max_norm = max_norm, .skip = skd, .n = n, .w = wd, .g = gd, .s0 = s0d,
                         .s1 = s1d, .copies = &dc, .n_copies = 1, .nonfinite = fd, .norm = nd};
    OK(gpu->optim_step(gpu, &sg));
    OK(gpu->download(gpu, h, wd, n * 4));
    OK(gpu->download(gpu, &fg, fd, 4));
    OK(gpu->download(gpu, &normg, nd, 4));
    CHECK_MSG(!memcmp(h, w, n * 4) && fg == flag && normg == norm, "optim_step adam %d clip %g skip %d: weights %s, "
              "flag %d / %d, norm %g / %g", adam, (double)max_norm, skip, memcmp(h, w, n * 4) ? "differ" : "equal", fg,
              flag, (double)normg, (double)norm);
    if (!skip) {
        OK(gpu->download(gpu, c16g, c16d, cn * 2));
        CHECK_MSG(!memcmp(c16g, c16, cn * 2), "optim_step adam %d: the weight copy differs", adam);
        OK(gpu->download(gpu, h, s0d, n * 4));
        CHECK(!memcmp(h, s0, n * 4));
    }
    double st = -1, sq = -2;
    OK(gpu->sumsq_to(gpu, gd, n, sd));
    OK(gpu->download(gpu, &st, sd, 8));
    OK(gpu->sumsq(gpu, gd, n, &sq));
    CHECK_MSG(st == sq, "sumsq_to %.17g, sumsq %.17g", st, sq);
    void *ps[] = {wd, gd, s0d, s1d, c16d, ud, sd, fd, skd, nd};
    for (int i = 0; i < 10; i++) gpu->free(gpu, ps[i]);
    free(w), free(g), free(s0), free(s1), free(h), free(c16), free(c16g);
}

/* ---- the whole step ---- */

typedef struct {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
    snn_train_step *s;
} side;

static snn_status side_make(net_kind k, uint64_t seed, const char *prec, int T, int B, int step, float clip, side *s) {
    memset(s, 0, sizeof *s);
    snn_precision_config cfg;
    char mode[32];
    snprintf(mode, sizeof mode, "%s", prec);
    char *recipe = strchr(mode, ':');
    if (recipe) *recipe++ = 0;
    snn_status st = snn_precision_config_parse(mode, recipe, NULL, NULL, NULL, &cfg);
    if (st == SNN_OK) st = build(k, seed, &s->m);
    if (st == SNN_OK) st = snn_model_to(s->m, "cuda");
    if (st == SNN_OK) st = snn_prepare_model_for_precision(s->m, "cuda", &cfg, &s->p);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&oo, s->m, &s->opt);
    if (st == SNN_OK) st = snn_model_plan(s->m, T, B);
    if (st == SNN_OK && step) st = snn_train_step_create(s->m, s->p, s->opt, 0, clip, 1, NULL, &s->s);
    return st;
}

static void side_free(side *s) {
    snn_train_step_free(s->s);
    snn_optimizer_free(s->opt);
    snn_precision_free(s->p);
    snn_model_free(s->m);
}

static void run_case(net_kind k, const char *prec, int T, int B, float clip) {
    const uint64_t seed = rng++;
    side h, d;
    snn_status st = side_make(k, seed, prec, T, B, 0, clip, &h);
    if (st == SNN_OK) st = side_make(k, seed, prec, T, B, 1, clip, &d);
    CHECK_MSG(st == SNN_OK, "%s %s: %s", net_name[k], prec, snn_last_error());
    if (st != SNN_OK) return;
    const int C = (int)snn_model_output_numel(h.m);
    const size_t nx = (size_t)T * B * snn_model_input_numel(h.m), ny = (size_t)T * B * C;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4);
    int32_t *lab = malloc((size_t)B * 4);
    if (!x || !dy || !lab) return;
    int steps = 6, bad = 0;
    for (int i = 0; i < steps && !bad; i++) {
        snn_test_fill_uniform(x, nx, 0.0f, 1.0f, &rng);
        for (int n = 0; n < B; n++) lab[n] = (int32_t)((rng = rng * 6364136223846793005ull + 1) >> 33) % C;
        const float lr = 1e-3f * (float)(i + 1);
        const float *y;
        float loss = 0, norm = 0;
        int correct = 0, skipped = 0;
        OK(snn_model_forward(h.m, x, 1, &y));
        OK(snn_loss_cross_entropy_mean_t(y, lab, T, B, C, &loss, dy, &correct));
        OK(snn_precision_backward(h.p, dy, h.opt, lr, clip, &norm, &skipped));
        /* the batch as the library's loops hand it over: in the model's input buffer */
        memcpy(snn_model_input_buffer(d.m), x, nx * 4);
        snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = snn_model_input_buffer(d.m), .numel = nx};
        snn_train_step_result r;
        OK(snn_train_step_run(d.s, &xv, lab, lr, &r));
        bad = r.loss != loss || r.correct != correct || r.skipped != skipped || (!skipped && r.grad_norm != norm);
        CHECK_MSG(!bad, "%s %s clip %g step %d: loss %.9g / %.9g, correct %d / %d, norm %.9g / %.9g", net_name[k], prec,
                  (double)clip, i, (double)r.loss, (double)loss, r.correct, correct, (double)r.grad_norm, (double)norm);
    }
    const size_t np = snn_model_num_params(h.m);
    float *ph = malloc(np * 4);
    if (ph) {
        memcpy(ph, snn_model_params(h.m), np * 4);
        const float *pd = snn_model_params(d.m);
        size_t diff = 0;
        for (size_t i = 0; i < np; i++) diff += memcmp(&ph[i], &pd[i], 4) != 0;
        CHECK_MSG(diff == 0, "%s %s clip %g: %zu of %zu parameters differ from the host-valued step", net_name[k], prec,
                  (double)clip, diff, np);
    }
    const snn_graph_stats g = snn_model_graph_stats(d.m);
    if (k == NET_PLIF)
        CHECK_MSG(g.replays == 0 && g.record_failures > 0, "%s %s: replayed %ld", net_name[k], prec, g.replays);
    else if (!strcmp(prec, "fp8:delayed")) /* new scales every step: a new key every step, run eagerly */
        CHECK_MSG(g.records == 0 && g.replays == 0, "%s %s: recorded %ld", net_name[k], prec, g.records);
    else
        /* recorded at the second run with one key: the second step, or the third where the
         * first step's forward made the 16-bit weight copies that the updates write after */
        CHECK_MSG(g.records == 1 && g.replays >= steps - 3 && g.dry_failures == 0,
                  "%s %s clip %g: recorded %ld, replayed %ld, %ld dry failures (want 1, >= %d, 0)", net_name[k], prec,
                  (double)clip, g.records, g.replays, g.dry_failures, steps - 3);
    printf("  %-10s %-11s clip %-4g T %d B %2d: %ld recorded, %ld replayed, %ld not recordable\n", net_name[k], prec,
           (double)clip, T, B, g.records, g.replays, g.record_failures);
    free(ph), free(x), free(dy), free(lab);
    side_free(&h);
    side_free(&d);
}

int main(void) {
    rng = snn_test_seed();
    setenv("SNN_TRAIN_STEP", "device", 1); /* the step on a device is opt-in until this test has passed on a GPU */
    snn_model *probe = NULL;
    snn_fcsnn_opts o = {.in_features = 16, .hidden = 16, .depth = 1, .classes = 4, .tau = 2.0f};
    if (snn_fcsnn_create(&o, 1, &probe) != SNN_OK) return 1;
    if (snn_model_to(probe, "cuda") != SNN_OK) {
        printf("test_cuda_step: skipped (%s)\n", snn_last_error());
        snn_model_free(probe);
        return 77;
    }
    gpu = snn_model_backend(probe);
    cpu = snn_backend_cpu();
    for (int kind = 0; kind < 2; kind++) {
        test_class_loss(kind, 4, 32, 1024);
        test_class_loss(kind, 16, 256, 10);
        test_class_loss(kind, 1, 3, 7);
        test_class_loss(kind, 2, 3, 4000); /* wider than a block's shared memory: a thread per sample */
    }
    for (int adam = 0; adam < 2; adam++) {
        test_optim_step(adam, -1.0f, 0);
        test_optim_step(adam, 1.0f, 0);
        test_optim_step(adam, 1.0f, 1);
    }
    const char *precs[] = {"fp32", "bf16", "fp16"};
    for (int i = 0; i < 3; i++) {
        run_case(NET_FCSNN, precs[i], 4, 32, 0.0f);
        run_case(NET_FCSNN, precs[i], 4, 32, 0.5f);
        run_case(NET_PLIF, precs[i], 2, 16, 0.0f);
        run_case(NET_CONVSNN, precs[i], 2, 8, 1.0f);
        run_case(NET_SPIKFORMER, precs[i], 2, 4, 0.0f);
    }
    run_case(NET_FCSNN, "fp8:delayed", 4, 32, 1.0f);
    run_case(NET_FCSNN, "fp8:current", 4, 32, 0.0f);
    snn_model_free(probe);
    return snn_test_finish("test_cuda_step");
}
