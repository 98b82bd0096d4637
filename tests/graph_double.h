/* A test double of a device table with graphs, for CPU tests of src/nn/model_graph.c's
 * decisions (tests/test_model_graph.c, tests/test_train_step.c): the CPU table with graph
 * entries of its own that record nothing. Its "graph" is a token, a recording runs the region's
 * host code (which here computes, on the CPU), a launch does nothing, and dry mode leaves the
 * table as it is, so a replay's host pass computes: each region runs exactly once per path, and
 * the results must equal a model without graphs bit for bit. The counters and the failure
 * switches (the next graph_end or dry(0) fails) are the tests' to read and set. fake_table_w16
 * adds 16-bit GEMM operands (tests/test_prec_wcopy.c). Header-only. */
#ifndef SNN_TESTS_GRAPH_DOUBLE_H
#define SNN_TESTS_GRAPH_DOUBLE_H

#include <stdlib.h>
#include <string.h>

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

/* ---- 16-bit operands (gemm_rounds) on the CPU: the GEMM widens 16-bit A, B and bias to FP32
 * and narrows a 16-bit C (rounded once), so the products are the CPU's on the same values ---- */
static inline float fk_widen16(snn_dtype t, uint16_t h) {
    if (t == SNN_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return snn_f16_to_f32(h);
}

static inline float *fk_widen(snn_dtype t, const void *src, size_t n) {
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return NULL;
    if (t == SNN_F32) {
        memcpy(f, src, n * sizeof *f);
        return f;
    }
    const uint16_t *h = src;
    for (size_t i = 0; i < n; i++) f[i] = fk_widen16(t, h[i]);
    return f;
}

static inline snn_status fk_gemm16(const snn_backend *be, const snn_gemm *g) {
    const snn_backend *cpu = snn_backend_cpu();
    if (g->a_store == SNN_F32 && g->b_store == SNN_F32 && g->c_store == SNN_F32 && g->bias_store == SNN_F32)
        return cpu->gemm(cpu, g);
    snn_gemm h = *g;
    const size_t ra = (size_t)(g->trans_a ? g->K : g->M), rb = (size_t)(g->trans_b ? g->N : g->K);
    float *a = fk_widen(g->a_store, g->A, ra * (size_t)g->lda), *b = fk_widen(g->b_store, g->B, rb * (size_t)g->ldb);
    float *bias = g->bias && g->bias_store != SNN_F32 ? fk_widen(g->bias_store, g->bias, (size_t)g->N) : NULL;
    float *c = g->c_store != SNN_F32 ? calloc((size_t)g->M * (size_t)g->ldc, sizeof *c) : NULL;
    snn_status st = (!a || !b || (g->bias && g->bias_store != SNN_F32 && !bias) || (g->c_store != SNN_F32 && !c))
                        ? SNN_E_NOMEM : SNN_OK;
    if (st == SNN_OK) {
        h.A = a, h.B = b, h.a_store = h.b_store = SNN_F32;
        if (bias) h.bias = bias, h.bias_store = SNN_F32;
        if (c) h.C = c, h.c_store = SNN_F32, h.c_round = g->c_store; /* written once, rounded */
        st = cpu->gemm(cpu, &h);
    }
    for (int i = 0; st == SNN_OK && c && i < g->M; i++)
        st = be->cast(be, g->c_store, (uint16_t *)g->C + (size_t)i * g->ldc, c + (size_t)i * g->ldc, (size_t)g->N);
    free(a), free(b), free(bias), free(c);
    return st;
}

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

/* The neuron's typed io (backend.h's neuron_forward_io / neuron_backward_io): x, spikes and
 * the gradients stored 16-bit, the CPU's neuron on their FP32 values, dx rounded (RNE). */
static inline snn_status fk_neuron_fwd_io(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                          snn_dtype io, const void *x, void *y, float *h_seq, float *v_last) {
    const snn_backend *cpu = snn_backend_cpu();
    const size_t tn = (size_t)T * n;
    float *xf = fk_widen(io, x, tn), *yf = malloc((tn ? tn : 1) * sizeof *yf);
    snn_status st = xf && yf ? cpu->neuron_forward(cpu, o, k, T, n, xf, yf, h_seq, v_last) : SNN_E_NOMEM;
    if (st == SNN_OK) st = be->cast(be, io, y, yf, tn); /* spikes: exact */
    free(xf), free(yf);
    return st;
}
static inline snn_status fk_neuron_bwd_io(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                          snn_dtype io, const float *h_seq, const void *dy, void *dx, double *gk) {
    const snn_backend *cpu = snn_backend_cpu();
    const size_t tn = (size_t)T * n;
    float *dyf = fk_widen(io, dy, tn), *dxf = malloc((tn ? tn : 1) * sizeof *dxf);
    snn_status st = dyf && dxf ? cpu->neuron_backward(cpu, o, k, T, n, h_seq, dyf, dxf, gk) : SNN_E_NOMEM;
    if (st == SNN_OK) st = be->cast(be, io, dx, dxf, tn);
    free(dyf), free(dxf);
    return st;
}

/* The graph double whose GEMM takes 16-bit operands (gemm_rounds, no typed neuron entries): a
 * 16-bit mode runs the direct path with the wrappers' weight copies, without 16-bit boundaries. */
static inline snn_backend *fake_table_w16(void) {
    snn_backend *be = fake_table();
    if (!be) return NULL;
    be->gemm_rounds = 1;
    be->gemm = fk_gemm16;
    return be;
}

/* fake_table_w16 with the neuron's typed io as well: 16-bit boundaries between a 16-bit Linear
 * and a plain neuron (prec_store.c); without neuron_forward_io_bias, a Linear's bias stays in its
 * GEMM's epilogue (the 16-bit bias copy, the 16-bit output). */
static inline snn_backend *fake_table_io16(void) {
    snn_backend *be = fake_table_w16();
    if (!be) return NULL;
    be->neuron_forward_io = fk_neuron_fwd_io;
    be->neuron_backward_io = fk_neuron_bwd_io;
    return be;
}

#endif
