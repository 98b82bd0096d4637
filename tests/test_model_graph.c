/* When src/nn/model_graph.c records, replays, drops and refuses graphs: its decisions, on the
 * CPU, through a test double of a device table.
 *
 * The double (tests/graph_double.h) is the CPU table with graph entries of its own that record
 * nothing, so each region runs exactly once per call as long as model_graph.c calls the region
 * once per path (record then launch, or dry pass then launch), and every output and parameter
 * must equal a model without graphs bit for bit: a region run twice (a backward
 * accumulating its gradients twice) or skipped would show. The statistics must follow the
 * rules: a region records on the second run with one key and replays from the third; a new
 * epoch (snn_model_graph_invalidate), a new memory generation, fresh parameters or another
 * input pointer change the key; a model with Dropout records no training region; a failed
 * recording is not tried again within its epoch; a dry pass that fails runs the region
 * eagerly. The CUDA side (capture, dry stubs) is tests/cuda/test_cuda_graph.c's. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "graph_double.h"
#include "harness.h"
#include "nn/model_internal.h"
#include "snn/snn.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

enum { IN = 24, HID = 32, OUT = 8, T = 2, N = 4 };

static snn_model *build(int dropout) {
    snn_module *seq = NULL, *c = NULL;
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.v_threshold = 0.2f;
    snn_status st = snn_sequential_create(&seq);
    if (st == SNN_OK && (st = snn_linear_create(IN, HID, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_neuron_create(&lif, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && dropout && (st = snn_dropout_create(0.25f, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(HID, OUT, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    int shape[1] = {IN};
    snn_model *m = NULL;
    if (st == SNN_OK) st = snn_model_create_from_module(seq, 1, shape, 11, &m);
    else snn_module_destroy(seq);
    CHECK_MSG(st == SNN_OK, "build: %s", snn_last_error());
    return m;
}

typedef struct {
    snn_model *m;
    snn_optimizer *opt;
} side;

static void side_make(side *s, int dropout, int on_double) {
    memset(s, 0, sizeof *s);
    s->m = build(dropout);
    if (!s->m) return;
    if (on_double) {
        snn_backend *be = fake_table();
        CHECK(be != NULL);
        if (be) OK(snn_model_to_table(s->m, be, fk_release));
    }
    snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_SGD);
    o.lr = 0.05f;
    o.momentum = 0.9f;
    OK(snn_optimizer_create_for_model(&o, s->m, &s->opt));
    OK(snn_model_plan(s->m, T, N));
}

static void side_free(side *s) {
    snn_optimizer_free(s->opt);
    snn_model_free(s->m);
}

static uint64_t rng;
static float x[T * N * IN], dy[T * N * OUT];

/* One run of both sides (training: a step with the loss mean(y^2)); their outputs and, after
 * a step, their parameters must be the same bits. */
static void run_both(side *ref, side *g, int training, const char *what) {
    snn_test_fill_uniform(x, T * N * IN, 0.0f, 1.0f, &rng);
    const float *y1, *y2;
    float yr[T * N * OUT];
    OK(snn_model_forward(ref->m, x, training, &y1));
    memcpy(yr, y1, sizeof yr);
    OK(snn_model_forward(g->m, x, training, &y2));
    CHECK_MSG(!memcmp(yr, y2, sizeof yr), "%s: the outputs differ from the model without graphs", what);
    if (!training) return;
    side *s[2] = {ref, g};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < T * N * OUT; i++) dy[i] = 2.0f * yr[i] / (T * N * OUT);
        snn_model_zero_grad(s[k]->m);
        OK(snn_model_backward(s[k]->m, dy));
        OK(snn_optimizer_step(s[k]->opt, -1.0f, 0));
    }
    const size_t np = snn_model_num_params(ref->m);
    float *pr = malloc(np * sizeof *pr);
    CHECK(pr != NULL);
    if (!pr) return;
    memcpy(pr, snn_model_params(ref->m), np * sizeof *pr);
    CHECK_MSG(!memcmp(pr, snn_model_params(g->m), np * sizeof *pr), "%s: the parameters differ", what);
    free(pr);
}

static void expect(const snn_model *m, long records, long replays, long rec_fail, long dry_fail, const char *what) {
    snn_graph_stats s = snn_model_graph_stats(m);
    CHECK_MSG(s.records == records && s.replays == replays && s.record_failures == rec_fail &&
                  s.dry_failures == dry_fail,
              "%s: recorded %ld (want %ld), replayed %ld (%ld), %ld / %ld failures (%ld / %ld)", what, s.records, records,
              s.replays, replays, s.record_failures, rec_fail, s.dry_failures, dry_fail);
}

static void rules(void) {
    side ref, g;
    side_make(&ref, 0, 0);
    side_make(&g, 0, 1);
    if (!ref.m || !g.m || !ref.opt || !g.opt) return;
    /* training: step 1 eager, step 2 records the forward and the backward, then replays */
    for (int i = 0; i < 5; i++) run_both(&ref, &g, 1, "training");
    expect(g.m, 2, 6, 0, 0, "5 training steps");
    CHECK(fk.dry_on == 6 && fk.launches == 8);
    /* inference: fresh weights, then current ones; the third run records */
    for (int i = 0; i < 4; i++) run_both(&ref, &g, 0, "inference");
    expect(g.m, 3, 7, 0, 0, "then 4 inference forwards");
    /* a new epoch drops the inference graph: two runs to record again */
    snn_model_graph_invalidate(g.m);
    long frees = fk.frees;
    for (int i = 0; i < 3; i++) run_both(&ref, &g, 0, "after an invalidation");
    CHECK_MSG(fk.frees == frees + 1, "the invalidated graph was freed %ld times", fk.frees - frees);
    expect(g.m, 4, 8, 0, 0, "after an invalidation");
    /* a new memory generation: the same */
    fk.gen++;
    for (int i = 0; i < 3; i++) run_both(&ref, &g, 0, "after the memory moved");
    expect(g.m, 5, 9, 0, 0, "after the memory moved");
    /* a dry pass that fails: the region runs eagerly once, the graph goes */
    fk.fail_dry = 1;
    run_both(&ref, &g, 0, "a failed dry pass");
    expect(g.m, 5, 9, 0, 1, "a failed dry pass");
    /* a recording that fails is not tried again in its epoch */
    fk.fail_end = 1;
    for (int i = 0; i < 4; i++) run_both(&ref, &g, 0, "a failed recording");
    expect(g.m, 5, 9, 1, 1, "a failed recording");
    snn_model_graph_invalidate(g.m);
    for (int i = 0; i < 3; i++) run_both(&ref, &g, 0, "a new epoch after a failed recording");
    expect(g.m, 6, 10, 1, 1, "a new epoch after a failed recording");
    /* training again: the parameters moved since the inference graph, so fresh keys */
    for (int i = 0; i < 3; i++) run_both(&ref, &g, 1, "training again");
    side_free(&ref);
    side_free(&g);
}

static void dropout(void) {
    side ref, g;
    side_make(&ref, 1, 0);
    side_make(&g, 1, 1);
    if (!ref.m || !g.m || !ref.opt || !g.opt) return;
    /* the mask moves with the step: no training region may record */
    for (int i = 0; i < 5; i++) run_both(&ref, &g, 1, "dropout training");
    expect(g.m, 0, 0, 0, 0, "dropout training");
    for (int i = 0; i < 4; i++) run_both(&ref, &g, 0, "dropout inference");
    expect(g.m, 1, 1, 0, 0, "dropout inference (identity)");
    side_free(&ref);
    side_free(&g);
}

static void misuse(void) {
    snn_model *m = build(0);
    if (!m) return;
    CHECK(snn_model_to_table(NULL, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_model_to_table(m, NULL, fk_release) == SNN_E_INVALID);
    snn_backend *be = fake_table();
    OK(snn_model_to_table(m, be, fk_release));
    snn_backend *be2 = fake_table();
    CHECK(snn_model_to_table(m, be2, fk_release) == SNN_E_STATE); /* placed already */
    free(be2);
    OK(snn_model_to(m, "cpu")); /* frees the table */
    snn_graph_stats s = snn_model_graph_stats(NULL);
    CHECK(s.records == 0 && s.replays == 0);
    snn_model_free(m);
}

int main(void) {
    rng = snn_test_seed();
    rules();
    dropout();
    misuse();
    return snn_test_finish("test_model_graph");
}
