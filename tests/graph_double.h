/* A test double of a device table with graphs, for CPU tests of src/nn/model_graph.c's
 * decisions (tests/test_model_graph.c, tests/test_train_step.c): the CPU table with graph
 * entries of its own that record nothing. Its "graph" is a token, a recording runs the region's
 * host code (which here computes, on the CPU), a launch does nothing, and dry mode leaves the
 * table as it is, so a replay's host pass computes: each region runs exactly once per path, and
 * the results must equal a model without graphs bit for bit. The counters and the failure
 * switches (the next graph_end or dry(0) fails) are the tests' to read and set. Header-only. */
#ifndef SNN_TESTS_GRAPH_DOUBLE_H
#define SNN_TESTS_GRAPH_DOUBLE_H

#include <stdlib.h>

#include "backend/backend.h"
#include "harness.h"

static struct {
    long begins, ends, launches, frees, dry_on;
    int fail_end, fail_dry; /* the next graph_end / dry(0) fails */
    uint64_t gen;
    int token;
} fk;

static snn_status fk_begin(const snn_backend *be) {
    (void)be;
    fk.begins++;
    return SNN_OK;
}
static snn_status fk_end(const snn_backend *be, int keep, void **g) {
    (void)be;
    fk.ends++;
    if (g) *g = NULL;
    if (fk.fail_end) {
        fk.fail_end = 0;
        return snn_error(SNN_E_UNSUPPORTED, "test double: the region could not be recorded");
    }
    if (keep && g) *g = &fk.token;
    return SNN_OK;
}
static snn_status fk_launch(const snn_backend *be, void *g) {
    (void)be;
    CHECK(g == &fk.token);
    fk.launches++;
    return SNN_OK;
}
static void fk_free(const snn_backend *be, void *g) {
    (void)be;
    CHECK(g == &fk.token);
    fk.frees++;
}
static snn_status fk_dry(const snn_backend *be, int on) {
    (void)be;
    if (on) {
        fk.dry_on++;
        return SNN_OK;
    }
    if (fk.fail_dry) {
        fk.fail_dry = 0;
        return snn_error(SNN_E_STATE, "test double: the dry pass left the recorded path");
    }
    return SNN_OK;
}
static uint64_t fk_gen(const snn_backend *be) {
    (void)be;
    return fk.gen;
}
static snn_status fk_alloc_host(const snn_backend *be, size_t bytes, void **out) {
    (void)be;
    *out = calloc(1, bytes ? bytes : 1);
    return *out ? SNN_OK : SNN_E_NOMEM;
}
static void fk_free_host(const snn_backend *be, void *p) {
    (void)be;
    free(p);
}
/* the release function for snn_model_to_table */
static void fk_release(snn_backend *be) { free(be); }

static snn_backend *fake_table(void) {
    snn_backend *be = malloc(sizeof *be);
    if (!be) return NULL;
    *be = *snn_backend_cpu();
    be->alloc_host = fk_alloc_host;
    be->free_host = fk_free_host;
    be->graph_begin = fk_begin;
    be->graph_end = fk_end;
    be->graph_launch = fk_launch;
    be->graph_free = fk_free;
    be->dry = fk_dry;
    be->generation = fk_gen;
    return be;
}

#endif
