/* Which boundaries snn_prepare_model_for_precision stores 16-bit (src/precision/prec_store.c),
 * decided on the CPU, so the rules run in CI and under the sanitizers.
 *
 * The CPU table stores every activation in FP32, so nothing is assigned on it. A device table
 * is stood in for by a test double: the CPU table declaring the entries a 16-bit boundary
 * needs (gemm_rounds, the typed neuron entries, im2col16, conv_gather16, conv_scatter16,
 * batchnorm_x16). Nothing runs
 * on the double; only the assignment is read back from the modules. What the assignment does
 * to values (nothing) is tests/cuda/test_cuda_table_*.c's and test_cuda_engine's, bit for bit
 * against the CPU. The rule checked here: a bias-free direct 16-bit convolution followed by a
 * BatchNorm stores y (and dy) in the mode's 16-bit type and the BatchNorm reads x (writes dx)
 * in it; a convolution with a bias, a table without one of the entries, an FP32 model and the
 * plain CPU table keep FP32; freeing the precision clears every boundary; and a 16-bit store a
 * module cannot honour is refused when it runs. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "nn/model_internal.h"
#include "nn/module.h"
#include "snn/snn.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

/* Entries the double declares but never runs: reaching one is a failure of the test. */
static snn_status no_im2col16(const snn_backend *be, snn_dtype t, const snn_conv_geom *g, int nb, const float *x,
                              void *col, size_t ld) {
    (void)be, (void)t, (void)g, (void)nb, (void)x, (void)col, (void)ld;
    return snn_error(SNN_E_STATE, "test double: im2col16 ran");
}
static snn_status no_gather16(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, snn_dtype src_t,
                              const void *src, void *dst, size_t ld) {
    (void)be, (void)t, (void)nb, (void)O, (void)P, (void)src_t, (void)src, (void)dst, (void)ld;
    return snn_error(SNN_E_STATE, "test double: conv_gather16 ran");
}
static snn_status no_scatter16(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, const float *src,
                               size_t ld, const float *bias, void *y) {
    (void)be, (void)t, (void)nb, (void)O, (void)P, (void)src, (void)ld, (void)bias, (void)y;
    return snn_error(SNN_E_STATE, "test double: conv_scatter16 ran");
}

static snn_status no_nfwd(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                          const void *x, void *y, float *h_seq, float *v_last) {
    (void)be, (void)o, (void)k, (void)T, (void)n, (void)io, (void)x, (void)y, (void)h_seq, (void)v_last;
    return snn_error(SNN_E_STATE, "test double: neuron_forward_io ran");
}
static snn_status no_nbwd(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                          const float *h_seq, const void *dy, void *dx, double *gk) {
    (void)be, (void)o, (void)k, (void)T, (void)n, (void)io, (void)h_seq, (void)dy, (void)dx, (void)gk;
    return snn_error(SNN_E_STATE, "test double: neuron_backward_io ran");
}

static void release(snn_backend *be) { free(be); }

/* what: bit 0 conv_scatter16, bit 1 batchnorm_x16 (gemm_rounds, im2col16, conv_gather16 always) */
static snn_backend *double_table(unsigned what) {
    snn_backend *be = malloc(sizeof *be);
    if (!be) return NULL;
    *be = *snn_backend_cpu();
    be->gemm_rounds = 1; /* with the typed neuron entries: what 16-bit boundaries need at all */
    be->neuron_forward_io = no_nfwd;
    be->neuron_backward_io = no_nbwd;
    be->im2col16 = no_im2col16;
    be->conv_gather16 = no_gather16;
    be->conv_scatter16 = what & 1 ? no_scatter16 : NULL;
    be->batchnorm_x16 = what & 2 ? 1 : 0;
    return be;
}

/* st is the constructor's status, *c what it built (read after the call) */
static void add(snn_module *seq, snn_status st, snn_module *const *c) {
    CHECK_MSG(st == SNN_OK, "building: %s", snn_last_error());
    if (st == SNN_OK) OK(snn_sequential_add(seq, *c));
}

/* [2, 8, 8] -> Conv2d(no bias) BN LIF -> Conv2d(bias) BN LIF -> Flatten -> [4, 64] ... as a
 * convsnn / Spikformer stem: children 0..5, then a pointwise Conv1d(no bias) BN pair (8, 9)
 * after a Reshape (7) and a Linear head. */
enum { C0 = 0, BN0 = 1, LIF0 = 2, C1 = 3, BN1 = 4, LIF1 = 5, RS = 6, C2 = 7, BN2 = 8, HEAD = 10 };
static snn_model *build(void) {
    snn_module *seq = NULL, *c = NULL;
    OK(snn_sequential_create(&seq));
    if (!seq) return NULL;
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    add(seq, snn_conv2d_create(2, 4, 3, 1, 1, 0, &c), &c);
    add(seq, snn_batchnorm_create(4, 1e-5f, 0.1f, &c), &c);
    add(seq, snn_neuron_create(&lif, &c), &c);
    add(seq, snn_conv2d_create(4, 4, 3, 1, 1, 1, &c), &c);
    add(seq, snn_batchnorm_create(4, 1e-5f, 0.1f, &c), &c);
    add(seq, snn_neuron_create(&lif, &c), &c);
    const int rs[2] = {4, 64};
    add(seq, snn_reshape_create(2, rs, &c), &c);
    add(seq, snn_conv1d_create(4, 6, 1, 1, 0, 0, &c), &c);
    add(seq, snn_batchnorm_create(6, 1e-5f, 0.1f, &c), &c);
    add(seq, snn_flatten_create(&c), &c);
    add(seq, snn_linear_create(6 * 64, 5, 1, &c), &c);
    const int shape[3] = {2, 8, 8};
    snn_model *m = NULL;
    snn_status st = snn_model_create_from_module(seq, 3, shape, 5, &m);
    CHECK_MSG(st == SNN_OK, "model: %s", snn_last_error());
    return st == SNN_OK ? m : NULL;
}

static snn_module *child(snn_model *m, int i) { return m->root->children[i]; }

/* Prepare m in mode on a double with `what` (or the CPU table: what < 0) and compare the
 * stores of the two convolution -> BatchNorm pairs with the expected types. */
static void check_case(const char *mode, int what, snn_dtype want0, snn_dtype want2) {
    snn_model *m = build();
    if (!m) return;
    if (what >= 0) {
        snn_backend *be = double_table((unsigned)what);
        CHECK(be != NULL);
        if (be) OK(snn_model_to_table(m, be, release));
    }
    snn_precision_config cfg = snn_precision_config_default();
    OK(snn_precision_config_set(&cfg, "mode", mode));
    snn_precision *p = NULL;
    OK(snn_prepare_model_for_precision(m, "cpu", &cfg, &p));
    char what_s[96];
    snprintf(what_s, sizeof what_s, "%s, table %d", mode, what);
    CHECK_MSG(child(m, C0)->out_store == (int)want0 &&
                  child(m, BN0)->in_store == child(m, C0)->out_store,
              "%s: conv2d -> BatchNorm stored %d / %d, want %d", what_s, child(m, C0)->out_store,
              child(m, BN0)->in_store, (int)want0);
    CHECK_MSG(child(m, C2)->out_store == (int)want2 &&
                  child(m, BN2)->in_store == child(m, C2)->out_store,
              "%s: conv1d -> BatchNorm stored %d / %d, want %d", what_s, child(m, C2)->out_store,
              child(m, BN2)->in_store, (int)want2);
    /* never: a convolution with a bias, a BatchNorm's output, a neuron after a BatchNorm */
    CHECK_MSG(child(m, C1)->out_store == 0 && child(m, BN1)->in_store == 0, "%s: a biased conv2d stored 16-bit",
              what_s);
    for (int i = 0; i < m->root->n_children; i++)
        if (snn_module_kind_is(child(m, i), SNN_KIND_BATCHNORM))
            CHECK_MSG(child(m, i)->out_store == 0, "%s: BatchNorm %d's output stored 16-bit", what_s, i);
    CHECK_MSG(child(m, LIF0)->in_store == 0 && child(m, LIF1)->in_store == 0, "%s: a neuron after BatchNorm typed",
              what_s);
    snn_precision_free(p);
    for (int i = 0; i < m->root->n_children; i++)
        CHECK_MSG(child(m, i)->in_store == 0 && child(m, i)->out_store == 0, "%s: module %d keeps a 16-bit store "
                  "after the precision was freed", what_s, i);
    snn_model_free(m);
}

/* A 16-bit store where a module cannot honour it is an error, never a silent FP32 pass: the
 * CPU table's convolution (no conv_scatter16, the per-sample path) with a 16-bit output, and a
 * BatchNorm asked to store its output 16-bit. */
static void refusals(void) {
    enum { T = 2, N = 2 };
    static const int which[2] = {C0, BN0};
    for (int k = 0; k < 2; k++) {
        snn_model *m = build();
        if (!m) return;
        OK(snn_model_plan(m, T, N));
        const size_t n = (size_t)T * N * 2 * 8 * 8;
        float *x = malloc(n * sizeof *x);
        CHECK(x != NULL);
        if (!x) {
            snn_model_free(m);
            return;
        }
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919u) % 13u) / 13.0f - 0.4f;
        child(m, which[k])->out_store = (int)SNN_BF16;
        const float *y = NULL;
        const snn_status st = snn_model_forward(m, x, 1, &y);
        CHECK_MSG(st == SNN_E_STATE, "%s with a 16-bit output on the CPU table: status %d (%s)",
                  k ? "BatchNorm" : "Conv2d", (int)st, snn_last_error());
        CHECK_MSG(strstr(snn_last_error(), k ? "BatchNorm" : "convolution") != NULL, "message: %s", snn_last_error());
        free(x);
        snn_model_free(m);
    }
}

int main(void) {
    refusals();
    /* the double with every entry: both pairs 16-bit, in the mode's type */
    check_case("bf16", 3, SNN_BF16, SNN_BF16);
    check_case("fp16", 3, SNN_F16, SNN_F16);
    /* an FP32 model, the CPU table, a table without conv_scatter16 or without batchnorm_x16 */
    check_case("fp32", 3, SNN_F32, SNN_F32);
    check_case("bf16", -1, SNN_F32, SNN_F32);
    check_case("bf16", 2, SNN_F32, SNN_F32);
    check_case("bf16", 1, SNN_F32, SNN_F32);
    return snn_test_finish("test_prec_store");
}
