/* The optimizer's update writing the precision wrappers' 16-bit weight copies
 * (src/precision/prec_wcopy.c, backend.h's snn_optim_copy), on the CPU.
 *
 * Only a table whose GEMM takes 16-bit operands (gemm_rounds) keeps those copies; the CPU table
 * does not. The test double (tests/graph_double.h's fake_table_w16) is the CPU table with
 * gemm_rounds and a GEMM that widens 16-bit operands into FP32 and narrows a 16-bit C (the
 * products are the CPU's on the same values), with graph entries that record nothing, so a
 * BF16 model on it runs the direct 16-bit path: a 16-bit copy of each Linear's weight and
 * bias, cast by the forward after the parameters moved, or, with SNN_WEIGHT_COPY_UPDATE=1,
 * written by the update. Three models from one seed train side by side with the loss on the
 * host and snn_precision_backward: on the CPU table (the rounded path, the reference), on the
 * double with the casts, on the double with the update's copies. Outputs and parameters must be
 * the same bits at every step, and with the update's copies the wrappers' copies must be current
 * after each step (no cast left for the next forward). The same again with the neuron's typed io
 * on the double (fake_table_io16): 16-bit boundaries between the Linears and the LIF, and each
 * Linear's bias added by its GEMM's epilogue into the 16-bit output (the form
 * SNN_NEURON_BIAS16=0 selects on a GPU, where the neuron would otherwise add it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "graph_double.h"
#include "harness.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"
#include "snn/snn.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

static uint64_t rng;

enum { IN = 24, HID = 40, OUT = 6, T = 3, N = 5, STEPS = 6 };

typedef struct {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
} side;

/* dbl: 0 the CPU table, 1 the 16-bit GEMM double, 2 that double with 16-bit boundaries */
static void side_make(side *s, int dbl, snn_optim_kind kind) {
    memset(s, 0, sizeof *s);
    snn_module *seq = NULL, *c = NULL;
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.v_threshold = 0.3f;
    snn_status st = snn_sequential_create(&seq);
    if (st == SNN_OK && (st = snn_linear_create(IN, HID, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_neuron_create(&lif, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(HID, HID, 0, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_gelu_create(&c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(HID, OUT, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    int shape[1] = {IN};
    if (st == SNN_OK) st = snn_model_create_from_module(seq, 1, shape, 9, &s->m);
    else snn_module_destroy(seq);
    OK(st);
    if (!s->m) return;
    if (dbl) {
        snn_backend *be = dbl == 2 ? fake_table_io16() : fake_table_w16();
        CHECK(be != NULL);
        if (be) OK(snn_model_to_table(s->m, be, fk_release));
    }
    snn_precision_config cfg;
    OK(snn_precision_config_parse("bf16", NULL, NULL, NULL, NULL, &cfg));
    OK(snn_prepare_model_for_precision(s->m, "cpu", &cfg, &s->p));
    snn_optim_opts o = snn_optim_defaults(kind);
    o.lr = kind == SNN_OPTIM_SGD ? 0.1f : 0.02f;
    o.momentum = kind == SNN_OPTIM_SGD ? 0.9f : 0.0f;
    OK(snn_optimizer_create_for_model(&o, s->m, &s->opt));
    OK(snn_model_plan(s->m, T, N));
}

static void side_free(side *s) {
    snn_optimizer_free(s->opt);
    snn_precision_free(s->p);
    snn_model_free(s->m);
}

/* forward, host loss, snn_precision_backward; the output into y */
static void step(side *s, const float *x, const int32_t *lab, float clip, float *y, int fused) {
    if (fused) setenv("SNN_WEIGHT_COPY_UPDATE", "1", 1);
    else unsetenv("SNN_WEIGHT_COPY_UPDATE");
    const float *out;
    float dy[T * N * OUT], loss;
    OK(snn_model_forward(s->m, x, 1, &out));
    memcpy(y, out, sizeof(float) * T * N * OUT);
    OK(snn_loss_cross_entropy_mean_t(out, lab, T, N, OUT, &loss, dy, NULL));
    OK(snn_precision_backward(s->p, dy, s->opt, -1.0f, clip, NULL, NULL));
    unsetenv("SNN_WEIGHT_COPY_UPDATE");
}

static void run(snn_optim_kind kind, float clip, int boundaries) {
    side r, d0, d1;
    side_make(&r, 0, kind);
    side_make(&d0, 1 + boundaries, kind);
    side_make(&d1, 1 + boundaries, kind);
    if (boundaries && d1.m) { /* Linear -> LIF stored BF16 both ways, the bias in the GEMM's epilogue */
        snn_module *l0 = d1.m->root->children[0], *n0 = d1.m->root->children[1];
        CHECK_MSG(l0->out_store == SNN_BF16 && n0->in_store == SNN_BF16 && !l0->defer_bias,
                  "boundaries: Linear out %d, LIF in %d, defer_bias %d", l0->out_store, n0->in_store, l0->defer_bias);
    }
    if (!r.m || !d0.m || !d1.m) return;
    snn_precision *p = d1.p;
    int w16 = 0;
    for (int i = 0; i < p->n_mods; i++) w16 += p->mods[i].w16 != NULL;
    CHECK_MSG(w16 == 3, "the double's BF16 model has %d wrappers with a 16-bit weight copy (want 3)", w16);
    float x[T * N * IN], y0[T * N * OUT], y1[T * N * OUT], y2[T * N * OUT];
    int32_t lab[N];
    const size_t np = snn_model_num_params(r.m);
    for (int k = 0; k < STEPS; k++) {
        snn_test_fill_uniform(x, T * N * IN, 0.0f, 1.5f, &rng);
        for (int n = 0; n < N; n++) lab[n] = (int32_t)(((rng = rng * 6364136223846793005ull + 1442695040888963407ull) >> 33) % OUT);
        step(&r, x, lab, clip, y0, 0);
        step(&d0, x, lab, clip, y1, 0);
        step(&d1, x, lab, clip, y2, 1);
        CHECK_MSG(!memcmp(y0, y1, sizeof y0) && !memcmp(y0, y2, sizeof y0),
                  "%s clip %g step %d: the outputs differ (casts %s, update's copies %s)",
                  kind == SNN_OPTIM_SGD ? "sgd" : "adamw", (double)clip, k, memcmp(y0, y1, sizeof y0) ? "differ" : "equal",
                  memcmp(y0, y2, sizeof y0) ? "differ" : "equal");
        float *pr = malloc(np * sizeof *pr);
        if (!pr) return;
        memcpy(pr, snn_model_params(r.m), np * sizeof *pr);
        CHECK_MSG(!memcmp(pr, snn_model_params(d0.m), np * sizeof *pr) && !memcmp(pr, snn_model_params(d1.m), np * sizeof *pr),
                  "step %d: the parameters differ", k);
        free(pr);
        /* the update wrote every copy: current for the new version, the next forward makes none */
        for (int i = 0; i < p->n_mods; i++)
            if (p->mods[i].w16)
                CHECK_MSG(p->mods[i].w16_valid && p->mods[i].w16_version == d1.m->param_version,
                          "step %d: module %d's copy is not the update's", k, i);
        CHECK(d1.m->fwd_version == d1.m->param_version);
        CHECK(d0.m->fwd_version != d0.m->param_version); /* the casts' model: the next forward casts */
    }
    side_free(&r);
    side_free(&d0);
    side_free(&d1);
}

int main(void) {
    rng = snn_test_seed();
    run(SNN_OPTIM_SGD, 0.0f, 0);
    run(SNN_OPTIM_ADAMW, 0.0f, 0);
    run(SNN_OPTIM_ADAMW, 0.05f, 0);
    /* 16-bit boundaries between the Linears and the LIF, each Linear's bias in its GEMM's
     * epilogue writing the 16-bit output (the form SNN_NEURON_BIAS16=0 selects on a GPU) */
    run(SNN_OPTIM_SGD, 0.0f, 1);
    run(SNN_OPTIM_ADAMW, 0.05f, 1);
    return snn_test_finish("test_prec_wcopy");
}
