/* Graphs of a device model's forward and backward (backend.h's graph entries).
 *
 * A region is the root module's forward in inference, its forward in training, its
 * backward, or a whole training step (src/train/step.c: the forward, the loss, the backward
 * and the optimizer's update; the forward and backward regions inside it run as part of it).
 * When a region runs with the same key as its previous run, this run records its device
 * work into a graph and launches it; from then on every run with that key replays the
 * graph: the modules' host code runs against the dry table (so their bookkeeping — weight-copy
 * versions, FP8 amax flags, "a forward ran" flags — is exactly what it is eagerly) and one
 * launch does the device work. The key holds what may change a region's device work between
 * runs whose host code takes the same branches:
 *   - the region's pointers: the input and the output (forward), dy and the forward's input
 *     (backward);
 *   - fresh: whether the parameters moved since the previous forward (precision wrappers then
 *     make their 16-bit or FP8 weight copies again);
 *   - the model's graph epoch, bumped through snn_model_graph_invalidate by whoever changes
 *     host state that modules hand to the device by value (FP8 delayed scales after a recipe
 *     update, prepare's storage assignment, a position offset during generation);
 *   - the table's memory generation (its workspace moved);
 *   - the step, when a module's training forward draws random numbers from it
 *     (SNN_MODULE_STEP_RANDOM: Dropout): then no two training keys are equal;
 *   - a variant: the 16-bit output or output gradient of the LM head.
 * A region that cannot be recorded (it waits for the device: PLIF's parameter read on the
 * host, the FP8 emulation's amax, SyncBatchNorm's host reduction, the embedding's id check)
 * fails to record once and runs eagerly until the epoch or the generation changes. A graph
 * runs the kernels the eager run would, with the same arguments: no value changes.
 * SNN_CUDA_GRAPH=0 in the environment turns graphs off (read when a model first runs). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "nn/model_internal.h"

typedef struct graph_key {
    const void *a, *b;
    uint64_t epoch, shared, gen, step;
    int fresh, variant;
} graph_key;

typedef struct graph_slot {
    void *graph;     /* the instantiated graph, recorded under key */
    graph_key key;
    graph_key last;  /* the key of the previous run */
    int have_last;
    int failed;      /* recording failed at (fail_epoch, fail_shared, fail_gen) */
    uint64_t fail_epoch, fail_shared, fail_gen;
} graph_slot;

struct snn_model_graphs {
    int off;          /* SNN_CUDA_GRAPH=0, or a table without graphs */
    int in_step;      /* inside a step region: the regions within run as part of its graph */
    int step_random;  /* a module's training forward draws from the step */
    graph_slot slot[SNN_GRAPH_REGIONS];
    graph_key last_fwd; /* the key of the latest forward (part of the backward's) */
    snn_graph_stats stats;
};

static int key_eq(const graph_key *x, const graph_key *y) {
    return x->a == y->a && x->b == y->b && x->epoch == y->epoch && x->shared == y->shared && x->gen == y->gen &&
           x->step == y->step &&
           x->fresh == y->fresh && x->variant == y->variant;
}

static void find_step_random(snn_module *m, void *ctx) {
    if (snn_module_own_ops(m)->flags & SNN_MODULE_STEP_RANDOM) *(int *)ctx = 1;
}

static struct snn_model_graphs *graphs_of(snn_model *m) {
    if (m->graphs) return m->graphs;
    struct snn_model_graphs *g = calloc(1, sizeof *g);
    if (!g) return NULL; /* no graphs: the regions run eagerly */
    const snn_backend *be = m->run.be;
    const char *env = getenv("SNN_CUDA_GRAPH");
    g->off = !be->graph_begin || !be->dry || (env && !strcmp(env, "0"));
    snn_module_walk(m->root, find_step_random, &g->step_random);
    m->graphs = g;
    return g;
}

void snn_model_graph_free(snn_model *m) {
    if (!m || !m->graphs) return;
    const snn_backend *be = m->run.be;
    for (int i = 0; i < SNN_GRAPH_REGIONS; i++)
        if (m->graphs->slot[i].graph && be && be->graph_free) be->graph_free(be, m->graphs->slot[i].graph);
    free(m->graphs);
    m->graphs = NULL;
}

void snn_model_graph_invalidate(snn_model *m) {
    if (m) m->graph_epoch++;
}

/* Modules that do not know their model (a position offset, a KV cache) invalidate every
 * model's graphs. */
static _Atomic uint64_t shared_epoch;
void snn_graph_invalidate_all(void) { atomic_fetch_add(&shared_epoch, 1); }

snn_graph_stats snn_model_graph_stats(const snn_model *m) {
    snn_graph_stats s;
    memset(&s, 0, sizeof s);
    if (m && m->graphs) s = m->graphs->stats;
    return s;
}

/* After a host pass whose device work did not run (a failed recording, a dry pass that left
 * the recorded path), before the region runs again eagerly. A forward whose parameters had
 * moved (fresh) made its weight copies (16-bit, FP8 codes) in that pass: their caches now
 * claim copies that were never made, so the parameters' version moves and the eager run makes
 * them, as it would have anyway. Otherwise the pass changed no cache (a backward makes no
 * copies; a forward with current copies kept them): nothing to undo, and moving the version
 * would make the eager run quantise the weights again where the graph-free run does not (an
 * FP8 amax recorded twice). */
static void host_pass_lost(snn_model *m, int fwd_fresh) {
    if (fwd_fresh) m->param_version++;
}

static snn_status region_run(snn_model *m, snn_graph_region region, const void *a, const void *b, int variant,
                             snn_graph_body body, void *ctx) {
    const snn_backend *be = m->run.be;
    struct snn_model_graphs *g = m->owned_be ? graphs_of(m) : NULL;
    const int fwd = region != SNN_GRAPH_BWD;
    graph_key k;
    memset(&k, 0, sizeof k);
    k.a = a;
    k.b = b;
    k.variant = variant;
    k.epoch = m->graph_epoch;
    k.shared = atomic_load(&shared_epoch);
    if (fwd) {
        k.fresh = !m->fwd_seen || m->param_version != m->fwd_version; /* recorded after: graph_run */
    } else if (g) {
        /* the backward's host code reads what the forward left: the forward's key is its own */
        k.fresh = g->last_fwd.fresh;
        k.variant = variant * 64 + g->last_fwd.variant;
        k.step = g->last_fwd.step;
    }
    if (!g || g->off || (g->in_step && region != SNN_GRAPH_STEP)) return body(m, ctx);
    k.gen = be->generation(be);
    if (fwd) {
        /* a step's forward takes the step count it is about to use (snn_model_forward_view) */
        if (region == SNN_GRAPH_FWD_TRAIN && g->step_random) k.step = m->run.step;
        if (region == SNN_GRAPH_STEP && g->step_random) k.step = m->step;
        g->last_fwd = k;
    }
    graph_slot *s = &g->slot[region];
    if (s->graph && !key_eq(&s->key, &k)) {
        be->graph_free(be, s->graph);
        s->graph = NULL;
    }
    if (s->graph) {
        /* replay: the host pass against the dry table, then the recorded device work */
        if (be->dry(be, 1) != SNN_OK) {
            be->graph_free(be, s->graph);
            s->graph = NULL;
            return body(m, ctx);
        }
        snn_status st = body(m, ctx);
        snn_status sd = be->dry(be, 0);
        if (st == SNN_OK && sd == SNN_OK) {
            g->stats.replays++;
            return be->graph_launch(be, s->graph);
        }
        g->stats.dry_failures++;
        be->graph_free(be, s->graph);
        s->graph = NULL;
        s->have_last = 0;
        host_pass_lost(m, fwd && k.fresh);
        return body(m, ctx);
    }
    const int again = s->have_last && key_eq(&s->last, &k);
    s->last = k;
    s->have_last = 1;
    if (!again || (s->failed && s->fail_epoch == k.epoch && s->fail_shared == k.shared && s->fail_gen == k.gen))
        return body(m, ctx);
    /* the same key twice: record this run */
    if (be->graph_begin(be) != SNN_OK) return body(m, ctx);
    snn_status st = body(m, ctx);
    void *graph = NULL;
    snn_status se = be->graph_end(be, st == SNN_OK, &graph);
    if (st == SNN_OK && se == SNN_OK && graph) {
        s->graph = graph;
        s->key = k;
        s->failed = 0;
        g->stats.records++;
        return be->graph_launch(be, graph);
    }
    if (graph) be->graph_free(be, graph);
    /* not recordable: nothing of the region ran; run it eagerly, and do not try again
     * until the epoch or the memory moves */
    g->stats.record_failures++;
    s->failed = 1;
    s->fail_epoch = k.epoch;
    s->fail_shared = k.shared;
    s->fail_gen = be->generation(be);
    host_pass_lost(m, fwd && k.fresh);
    return body(m, ctx);
}

snn_status snn_model_graph_run(snn_model *m, snn_graph_region region, const void *a, const void *b, int variant,
                               snn_graph_body body, void *ctx) {
    if (region == SNN_GRAPH_STEP) { /* the forward and backward inside are part of its graph */
        struct snn_model_graphs *g = m->owned_be ? graphs_of(m) : NULL;
        if (g) g->in_step = 1;
        snn_status st = region_run(m, region, a, b, variant, body, ctx);
        if (g) g->in_step = 0;
        return st;
    }
    snn_status st = region_run(m, region, a, b, variant, body, ctx);
    if (region != SNN_GRAPH_BWD) { /* the weight copies now follow this version */
        m->fwd_seen = 1;
        m->fwd_version = m->param_version;
    }
    return st;
}
