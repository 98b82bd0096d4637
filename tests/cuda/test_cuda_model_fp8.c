/* FP8 model training in the GPU runner (compute SNN_F8E4M3) against the CPU's exact FP8
 * emulation (snn_prepare_model_for_precision with mode fp8: quantise -> dequantise -> FP32
 * GEMM, src/precision/prec_exec.c).
 *
 * Both sides start from identical parameters and see the same batches for several steps
 * (eager, captured, replayed; an evaluation forward in between, which records amaxes under
 * delayed scaling on both sides). Compared: the summed loss, each parameter tensor's last-step
 * gradient and total change (relative L2 per tensor), an evaluation forward, and under
 * delayed scaling every scale and amax history of the converted modules.
 *
 * Bounds. The GPU's FP8 GEMMs multiply the same operands (the dequantised values are equal on
 * both sides) but sum in another order, with Hopper's FP8 tensor-core accumulator (about 14
 * mantissa bits between the FP32 promotions cuBLASLt makes without fast accumulation, i.e.
 * ~1e-4 relative, against ~1e-7 for the CPU's FP32 GEMM), and apply the two dequantisation
 * factors once at the end. Then a layer output within ~1e-4 of a BF16 rounding boundary takes
 * the neighbouring value (one BF16 step, 0.4-0.8 %), an output gradient near an FP8 boundary the
 * neighbouring code (12.5 % in E4M3, 25 % in E5M2), and a membrane that close to the threshold
 * flips a spike. These hit single elements; a few such elements leave a per-tensor relative L2
 * of the gradients and updates of a few 1e-3 up to ~2e-2 (a spike flip adds one row to a weight
 * gradient), so the bound is 5e-2. What the test is for moves whole tensors: a wrong scale or
 * dequantisation factor (an error of the order of the factor), a wrong transpose or padding
 * (unrelated values), quantising with another step's delayed scale (every element re-rounded:
 * 3-6 % per element) — and the scales and amax histories, compared on their own, see the last
 * one directly. Scales and amaxes are maxima of nearly equal tensors: 2e-2 relative (above one
 * BF16 step, below the step-to-step change of the gradient amaxes the histories record). The
 * summed loss: 2e-3.
 *
 * mxfp8 is emulated on every GPU exactly as the CPU does it (dequantised operands, FP32
 * GEMMs): the GEMM differs only in summation order (FP32 against FP32, so tighter than the
 * FP8 recipes), and the same bounds apply. fcsnn's 40 rows and 24 outputs leave partial
 * 32-element blocks in both directions.
 *
 * Refusals: the block recipe with rows that are not multiples of 128 (the CPU converts that module with
 * partial blocks, which the block-scaled GEMMs cannot run: refused rather than silently kept
 * BF16), and a model with nothing to convert (refused on both sides).
 * Exit 77 without a GPU (after the CPU-side checks of the models' conversion). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "neuron/neuron_module.h"
#include "precision/runtime.h"
#include "snn/cuda.h"
#include "snn/loss.h"
#include "snn/optim.h"
#include "snn/precision.h"
#include "snn/prepare.h"
#include "snn/snn.h"
#include "model_compare.h"

static snn_cuda *g;
static uint64_t rng;
static char dev_name[256];
static int cc_major, cc_minor;

typedef snn_status (*make_fn)(uint64_t seed, snn_model **m);


static double rel1(float a, float b) {
    if (a == b) return 0;
    if (isnan(a) || isnan(b)) return INFINITY;
    return fabs((double)a - (double)b) / fmax(fabs((double)a), fabs((double)b));
}



static snn_module *lif(void) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 2.0f;
    return snn_neuron_module_new(&o);
}

/* fcsnn 64 -> 128 -> 128 -> 24: every Linear converts; 24 outputs pad dgrad's reduction
 * to 32; the first input is real-valued, the others spikes. */
static snn_status make_fcsnn(uint64_t seed, snn_model **m) {
    snn_fcsnn_opts o = {.in_features = 64, .hidden = 128, .depth = 2, .classes = 24, .tau = 2.0f};
    return snn_fcsnn_create(&o, seed, m);
}

/* block recipe: 128 -> 256 -> 256 -> 10 (the last Linear has out % 8 != 0: BF16 on both sides) */
static snn_status make_fcsnn_block(uint64_t seed, snn_model **m) {
    snn_fcsnn_opts o = {.in_features = 128, .hidden = 256, .depth = 2, .classes = 10, .tau = 2.0f};
    return snn_fcsnn_create(&o, seed, m);
}

/* Linear(48,128) LIF Linear(128,64) GELU Linear(64,24) LIF Linear(24,10): a real-valued hidden
 * input (after GELU) is quantised; Linear(24,10) (in % 16 != 0) stays BF16. */
static snn_status make_mlp(uint64_t seed, snn_model **m) {
    snn_module *k[7] = {snn_linear_new(48, 128, 1), lif(), snn_linear_new(128, 64, 1), snn_gelu_new(),
                        snn_linear_new(64, 24, 1), lif(), snn_linear_new(24, 10, 1)};
    return build_seq(k, 7, "fp8-mlp", snn_shape1(48), seed, m);
}

/* Spikformer-style pointwise Conv1d on [32][6]: Conv1d(32,64,bias) LIF Conv1d(64,32) BN LIF
 * Flatten Linear(192,16) LIF: FP8 Conv1d in token-major form (rows = T*N*6). */
static snn_status make_conv1d(uint64_t seed, snn_model **m) {
    snn_module *k[8] = {snn_conv1d_new(32, 64, 1, 1, 0, 1), lif(), snn_conv1d_new(64, 32, 1, 1, 0, 0),
                        snn_batchnorm_new(32, 1e-5f, 0.1f), lif(), snn_flatten_new(),
                        snn_linear_new(192, 16, 1), lif()};
    return build_seq(k, 8, "fp8-conv1d", snn_shape2(32, 6), seed, m);
}

/* nothing converts: Linear(40, 10) */
static snn_status make_unaligned(uint64_t seed, snn_model **m) {
    snn_module *k[2] = {snn_linear_new(40, 10, 1), lif()};
    return build_seq(k, 2, "fp8-none", snn_shape1(40), seed, m);
}

static snn_precision_config fp8_cfg(const char *recipe, int hlen) {
    snn_precision_config pc;
    CHECK(snn_precision_config_parse("fp8", recipe, NULL, NULL, NULL, &pc) == SNN_OK);
    if (hlen > 0) pc.amax_history_len = hlen;
    return pc;
}

typedef struct {
    const char *label;
    int T, N;
    size_t F, C, np, nbuf;
    snn_model *mc, *mg;
    snn_precision *prec;
    snn_optimizer *opt;
    snn_cuda_model *gm;
    float *p0, *dy;
    double cpu_loss;
} pair;

static int pair_open(pair *p, const char *label, make_fn make, int T, int N, const snn_precision_config *pc,
                     int with_gpu) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->T = T;
    p->N = N;
    uint64_t seed = snn_test_seed() ^ 0xf8f8;
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
    snn_status st = snn_prepare_model_for_precision(p->mc, "cpu", pc, &p->prec);
    CHECK_MSG(st == SNN_OK, "%s: CPU prepare: %s", label, snn_last_error());
    if (st != SNN_OK) return 0;
    CHECK(snn_model_plan(p->mc, T, N) == SNN_OK);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = 0.05f;
    oo.momentum = 0.9f;
    oo.weight_decay = 1e-3f;
    CHECK(snn_optimizer_create_for_model(&oo, p->mc, &p->opt) == SNN_OK);
    if (!with_gpu) return 1;
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = SNN_F8E4M3, .fp8 = pc};
    st = snn_cuda_model_create(g, p->mg, &go, &oo, &p->gm);
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

static void pair_step(pair *p, const float *x, const int32_t *lab) {
    const float *y = NULL;
    float loss = 0;
    int corr = 0, skipped = 0;
    CHECK(snn_model_forward(p->mc, x, 1, &y) == SNN_OK);
    CHECK(snn_loss_cross_entropy_mean_t(y, lab, p->T, p->N, (int)p->C, &loss, p->dy, &corr) == SNN_OK);
    CHECK(snn_precision_backward(p->prec, p->dy, p->opt, -1.0f, 0.0f, NULL, &skipped) == SNN_OK);
    p->cpu_loss += loss;
    if (p->gm)
        CHECK_MSG(snn_cuda_model_train_step(p->gm, x, 1, lab, -1.0f) == SNN_OK, "%s: step: %s", p->label,
                  snn_last_error());
}

static void fill_batch(const pair *p, float *x, int32_t *lab) {
    snn_test_fill_uniform(x, p->F * (size_t)(p->T * p->N), 0.0f, 1.0f, &rng);
    for (int i = 0; i < p->N; i++) {
        float u;
        snn_test_fill_uniform(&u, 1, 0.0f, (float)p->C, &rng);
        lab[i] = (int32_t)u % (int32_t)p->C;
    }
}

/* Delayed scaling: every scale and history of the converted modules, CPU vs GPU. */
static void compare_fp8_state(pair *p) {
    int nm = 0, hl = 0, cpu_n = 0;
    snn_precision *pr = p->prec;
    for (int i = 0; i < pr->n_mods; i++) cpu_n += pr->mods[i].has_fp8_state;
    CHECK(snn_cuda_model_fp8_state(p->gm, &nm, &hl, NULL, NULL) == SNN_OK);
    CHECK_MSG(nm == cpu_n, "%s: the GPU converted %d modules, the CPU %d", p->label, nm, cpu_n);
    if (nm != cpu_n || nm == 0) return;
    float *sc = malloc(sizeof(float) * 3 * (size_t)nm);
    float *hs = malloc(sizeof(float) * 3 * (size_t)nm * (size_t)(hl > 0 ? hl : 1));
    snn_test_poison(sc, 3 * (size_t)nm);
    CHECK(snn_cuda_model_fp8_state(p->gm, NULL, NULL, sc, hl > 0 ? hs : NULL) == SNN_OK);
    const char *role[3] = {"input", "weight", "grad"};
    double worst = 0;
    int k = 0, updated = 0;
    for (int i = 0; i < pr->n_mods; i++) {
        snn_prec_module *pm = &pr->mods[i];
        if (!pm->has_fp8_state) continue;
        snn_fp8_tensor_state *st[3] = {&pm->sx, &pm->sw, &pm->sdy};
        for (int r = 0; r < 3; r++) {
            double e = rel1(sc[3 * k + r], st[r]->scale);
            updated += st[r]->updates > 0;
            CHECK_MSG(e <= 2e-2, "%s: %s %s scale: GPU %.8g CPU %.8g (rel %.3g)", p->label, pm->m->name, role[r],
                      (double)sc[3 * k + r], (double)st[r]->scale, e);
            if (e > worst) worst = e;
            CHECK_MSG(st[r]->history_len == hl, "%s: history length GPU %d CPU %d", p->label, hl, st[r]->history_len);
            for (int j = 0; j < hl && st[r]->history_len == hl; j++) {
                float a = hs[((size_t)3 * k + r) * hl + j], b = st[r]->amax_history[j];
                double eh = rel1(a, b);
                CHECK_MSG(eh <= 2e-2, "%s: %s %s amax_history[%d]: GPU %.8g CPU %.8g", p->label, pm->m->name, role[r],
                          j, (double)a, (double)b);
                if (eh > worst) worst = eh;
            }
        }
        k++;
    }
    printf("  %d converted modules, %d scales updated on the CPU, worst scale/amax rel %.2e\n", nm, updated, worst);
    CHECK_MSG(updated > 0, "%s: no delayed scale was ever updated (the test would not see the history)", p->label);
    /* load the CPU's state into the runner and read it back: exactly the CPU's values */
    k = 0;
    for (int i = 0; i < pr->n_mods; i++) {
        snn_prec_module *pm = &pr->mods[i];
        if (!pm->has_fp8_state) continue;
        snn_fp8_tensor_state *st[3] = {&pm->sx, &pm->sw, &pm->sdy};
        for (int r = 0; r < 3; r++) {
            sc[3 * k + r] = st[r]->scale;
            memcpy(hs + ((size_t)3 * k + r) * hl, st[r]->amax_history, sizeof(float) * (size_t)hl);
        }
        k++;
    }
    size_t nv = 3 * (size_t)nm * (size_t)hl;
    float *sc2 = malloc(sizeof(float) * 3 * (size_t)nm), *hs2 = malloc(sizeof(float) * nv);
    CHECK_MSG(snn_cuda_model_fp8_load_state(p->gm, nm, hl, sc, hs) == SNN_OK, "%s: load state: %s", p->label,
              snn_last_error());
    snn_test_poison(sc2, 3 * (size_t)nm);
    snn_test_poison(hs2, nv);
    CHECK(snn_cuda_model_fp8_state(p->gm, NULL, NULL, sc2, hs2) == SNN_OK);
    CHECK_MSG(!memcmp(sc, sc2, sizeof(float) * 3 * (size_t)nm) && !memcmp(hs, hs2, sizeof(float) * nv),
              "%s: FP8 state loaded into the runner does not read back unchanged", p->label);
    free(sc2);
    free(hs2);
    free(sc);
    free(hs);
}

static void pair_compare(pair *p, const float *x, int delayed) {
    size_t np = p->np, nout = p->C * (size_t)(p->T * p->N);
    float *dc = malloc(sizeof(float) * np), *dg = malloc(sizeof(float) * np);
    float *outg = malloc(sizeof(float) * nout), *outc = malloc(sizeof(float) * nout);
    double gl = 0;
    long gcorr = 0, gsteps = 0;
    CHECK(snn_cuda_model_take_stats(p->gm, &gl, &gcorr, &gsteps) == SNN_OK);
    double el = rel1((float)gl, (float)p->cpu_loss);
    snn_test_poison(snn_model_grads(p->mg), np);
    CHECK(snn_cuda_model_download_grads(p->gm) == SNN_OK);
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
    printf("%-30s loss %.2e (gpu %.6f cpu %.6f) | grad %.2e (%s) | update %.2e (%s) | buffers %.2e | eval %.2e\n",
           p->label, el, gl, p->cpu_loss, eg, wg, ep, wp, eb, eo);
    CHECK_MSG(el <= 2e-3, "%s: summed loss differs: GPU %.8g CPU %.8g (rel %.3g)", p->label, gl, p->cpu_loss, el);
    CHECK_MSG(eg <= 5e-2, "%s: gradient of %s differs (rel L2 %.3g)", p->label, wg, eg);
    CHECK_MSG(ep <= 5e-2, "%s: update of %s differs (rel L2 %.3g)", p->label, wp, ep);
    CHECK_MSG(eb <= 5e-2, "%s: buffers differ (rel L2 %.3g)", p->label, eb);
    CHECK_MSG(eo <= 5e-2, "%s: evaluation output differs (rel L2 %.3g)", p->label, eo);
    /* the runner converted exactly the CPU's modules (else a BF16 run could hide in the bound) */
    int nm = -1, cpu_n = 0;
    for (int i = 0; i < p->prec->n_mods; i++) cpu_n += p->prec->mods[i].has_fp8_state;
    CHECK(snn_cuda_model_fp8_state(p->gm, &nm, NULL, NULL, NULL) == SNN_OK);
    CHECK_MSG(nm == cpu_n && nm > 0, "%s: the GPU runs %d modules in FP8, the CPU converted %d", p->label, nm, cpu_n);
    /* the step did train: the FP8 update is not zero on the CPU */
    double nc = 0;
    for (size_t i = 0; i < np; i++) nc += (double)dc[i] * dc[i];
    CHECK_MSG(nc > 0, "%s: the CPU parameters did not move", p->label);
    if (delayed) compare_fp8_state(p);
    free(dc); free(dg); free(outg); free(outc);
}

static void test_recipe(const char *label, make_fn make, int T, int N, const char *recipe, int hlen, int steps,
                        int with_gpu) {
    snn_precision_config pc = fp8_cfg(recipe, hlen);
    pair p;
    if (!pair_open(&p, label, make, T, N, &pc, with_gpu) || !with_gpu) {
        pair_close(&p);
        return;
    }
    float *x = malloc(sizeof(float) * p.F * (size_t)(p.T * p.N));
    float *out = malloc(sizeof(float) * p.C * (size_t)(p.T * p.N));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)p.N);
    for (int s = 0; s < steps; s++) {
        fill_batch(&p, x, lab);
        pair_step(&p, x, lab);
        if (s == 1) { /* an evaluation forward between steps (delayed: it records amaxes) */
            const float *y = NULL;
            CHECK(snn_model_forward(p.mc, x, 0, &y) == SNN_OK);
            CHECK(snn_cuda_model_forward(p.gm, x, 1, p.N, out) == SNN_OK);
        }
    }
    pair_compare(&p, x, !strcmp(recipe, "delayed"));
    free(x);
    free(out);
    free(lab);
    pair_close(&p);
}

/* The CPU's conversion of the test models (what the GPU must match). */
static void test_cpu_conversion(void) {
    struct {
        make_fn make;
        int expect;
    } cases[] = {{make_fcsnn, 3}, {make_mlp, 3}, {make_conv1d, 3}, {make_fcsnn_block, 2}};
    for (int i = 0; i < 4; i++) {
        snn_model *m = NULL;
        snn_precision *pr = NULL;
        snn_precision_config pc = fp8_cfg(i == 3 ? "block" : "current", 0);
        CHECK(cases[i].make(snn_test_seed(), &m) == SNN_OK);
        CHECK(snn_prepare_model_for_precision(m, "cpu", &pc, &pr) == SNN_OK);
        int n = 0;
        for (int k = 0; pr && k < pr->n_mods; k++) n += pr->mods[k].has_fp8_state;
        CHECK_MSG(n == cases[i].expect, "model %d: the CPU converted %d modules, expected %d", i, n, cases[i].expect);
        snn_precision_free(pr);
        snn_model_free(m);
    }
}

static void expect_refused(const char *label, make_fn make, int T, int N, const char *recipe, const char *needle) {
    snn_precision_config pc = fp8_cfg(recipe, 0);
    snn_model *m = NULL;
    CHECK(make(snn_test_seed(), &m) == SNN_OK);
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = SNN_F8E4M3, .fp8 = &pc};
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_cuda_model *gm = NULL;
    snn_status st = snn_cuda_model_create(g, m, &go, &oo, &gm);
    const char *msg = snn_last_error();
    printf("%-30s refused: %s\n", label, st != SNN_OK ? msg : "(not refused)");
    CHECK_MSG(st != SNN_OK && gm == NULL, "%s: create was not refused", label);
    if (st != SNN_OK && needle) CHECK_MSG(strstr(msg, needle) != NULL, "%s: message lacks \"%s\": %s", label, needle, msg);
    snn_cuda_model_destroy(gm);
    snn_model_free(m);
}

static void test_refusals(void) {
    /* block with rows = 4*10 = 40: the CPU converts (partial blocks), the GPU cannot */
    expect_refused("block, rows % 128 != 0", make_fcsnn_block, 4, 10, "block", cc_major == 9 ? "128" : dev_name);
    /* nothing to convert: the CPU refuses too */
    expect_refused("fp8, nothing converts", make_unaligned, 4, 16, "current", "did not convert");
    snn_model *m = NULL;
    snn_precision *pr = NULL;
    snn_precision_config pc = fp8_cfg("current", 0);
    CHECK(make_unaligned(snn_test_seed(), &m) == SNN_OK);
    CHECK_MSG(snn_prepare_model_for_precision(m, "cpu", &pc, &pr) != SNN_OK, "the CPU converted an unaligned Linear");
    snn_precision_free(pr);
    snn_model_free(m);
}

int main(void) {
    rng = snn_test_seed();
    test_cpu_conversion();
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        printf("no CUDA device: %s (GPU part skipped)\n", snn_last_error());
        int rc = snn_test_finish("test_cuda_model_fp8 (CPU side)");
        return rc ? rc : 77;
    }
    int sms = 0;
    CHECK(snn_cuda_device_info(g, dev_name, sizeof dev_name, &cc_major, &cc_minor, &sms) == SNN_OK);
    printf("device %s (sm_%d%d)\n", dev_name, cc_major, cc_minor);
    /* T*N = 40 rows: backward GEMMs reduce over rows padded to 48 */
    test_recipe("fcsnn current", make_fcsnn, 4, 10, "current", 0, 3, 1);
    test_recipe("fcsnn delayed (history 3)", make_fcsnn, 4, 10, "delayed", 3, 6, 1);
    test_recipe("mlp delayed (history 1024)", make_mlp, 4, 16, "delayed", 0, 4, 1);
    test_recipe("mlp current", make_mlp, 4, 16, "current", 0, 3, 1);
    test_recipe("conv1d current", make_conv1d, 2, 8, "current", 0, 3, 1);
    test_recipe("conv1d delayed", make_conv1d, 2, 8, "delayed", 4, 5, 1);
    /* mxfp8: the exact emulation, on every GPU */
    test_recipe("fcsnn mxfp8", make_fcsnn, 4, 10, "mxfp8", 0, 4, 1);
    test_recipe("mlp mxfp8", make_mlp, 4, 16, "mxfp8", 0, 3, 1);
    test_recipe("conv1d mxfp8", make_conv1d, 2, 8, "mxfp8", 0, 3, 1);
    if (cc_major == 9) {
        test_recipe("fcsnn block (rows 128)", make_fcsnn_block, 4, 32, "block", 0, 3, 1);
    } else {
        printf("block recipe: sm_%d%d has no block-scaled FP8 GEMMs (checked as a refusal)\n", cc_major, cc_minor);
        expect_refused("block off sm_90", make_fcsnn_block, 4, 32, "block", dev_name);
    }
    test_refusals();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_model_fp8");
}
