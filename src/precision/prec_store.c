/* 16-bit activations between modules (snn_module.in_store / out_store).
 *
 * In a 16-bit mode on a backend whose GEMM takes 16-bit operands (gemm_rounds), a boundary
 * inside a Sequential between two modules P -> Q is stored in the mode's 16-bit type d when
 * every value that crosses it is a d value anyway, in both directions:
 *   forward: P's outputs are rounded to d (a 16-bit GEMM module rounds its output) or exact
 *            in d (spikes), or Q rounds its input to d before using it (a 16-bit GEMM module);
 *   backward: P rounds the gradient it receives to d (a 16-bit GEMM module), or Q's dx is
 *            rounded to d (a 16-bit GEMM module writes its dx rounded).
 * A neuron takes part only with both sides 16-bit (one type for x, spikes and gradients).
 * Only kinds with SNN_MODULE_TYPED_IO take part, and only those that meet these rules:
 * a 16-bit GEMM module on the direct path (prec_exec.c: its Linear reads and writes 16-bit
 * storage in its GEMMs), a plain IF/LIF/PLIF neuron (x, spikes and gradients 16-bit,
 * h_seq FP32: neuron_forward_io), and GELU next to such a GEMM module: the Linear before it
 * rounds its output and the gradient it receives, the one after it rounds its input and
 * writes its dx rounded, so GELU may read and write 16-bit there (gelu_forward_io) while it
 * computes in FP32 as before; and the causal attention between two such GEMM modules (q, k, v
 * are the first one's rounded output, y is rounded by the second as its input, and the
 * gradients likewise), on a table whose attention takes 16-bit storage (attention_io16);
 * and a LayerNorm's output before such a GEMM module (it rounds its input and writes its dx
 * rounded; the norm's x and dx stay FP32: layernorm_forward_io), and SpikeLM's bi-spike
 * transition before such a GEMM module in the same way (bispike_forward_io: y rounded once,
 * the value the GEMM would round it to; its backward takes the spikes from the saved v and
 * reads dy 16-bit), and a convolution without a bias before a BatchNorm (the convolution
 * rounds y, and its GEMMs convert the dy they get to d; the BatchNorm reads x widened and
 * writes dx rounded to d: batchnorm_x16, conv_scatter16, conv_gather16's src_t, which halves
 * the bytes of the five passes BatchNorm makes over x in a training step). Storing such a
 * boundary in d changes no value; it removes the passes that rounded FP32 copies and
 * converted them for the GEMM. On a table with neuron_forward_io_bias a Linear with a bias
 * before such a neuron also leaves its bias and its output rounding to the neuron
 * (snn_module.defer_bias / bias_src). The CPU table has no 16-bit storage: nothing is
 * assigned there (tests/test_prec_store.c checks the rules on a test double of a device
 * table). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "neuron/neuron_module.h"
#include "nn/layers.h"
#include "precision/runtime.h"

int snn_prec_gemm16_direct(const snn_precision *p, const snn_prec_module *pm) {
    return pm->kind == SNN_PM_GEMM16 && p->be->gemm_rounds && (pm->orig->flags & SNN_MODULE_W16) &&
           pm->m->n_params > 0;
}

/* What kind of boundary end m is: 1 a direct 16-bit GEMM module, 2 a plain neuron, 3 an
 * elementwise kind that computes in FP32 from whatever its sides store (GELU, on a table with
 * its typed entries), 4 the causal attention (both sides or neither), 5 a LayerNorm (its
 * output side only), 6 SpikeLM's bi-spike transition (its output side only: before a 16-bit
 * GEMM that rounds its input and writes its dx rounded; its x and dx stay FP32), 7 a direct
 * 16-bit convolution without a bias (its output side only: it rounds y, and its GEMMs convert
 * dy to the type), 8 a BatchNorm (its input side only, after such a convolution: x is read
 * widened, dx written rounded to the type, the value the convolution would convert), 0 none of
 * these. */
static int end_kind(const snn_precision *p, const snn_module *m) {
    if (!m->prec && snn_module_kind_is(m, SNN_KIND_BATCHNORM))
        return p->be->batchnorm_x16 ? 8 : 0;
    if ((snn_module_kind_is(m, SNN_KIND_CONV2D) || snn_module_kind_is(m, SNN_KIND_CONV1D)) &&
        m->ops == &snn_prec_gemm16_ops && m->prec) {
        const snn_prec_module *pm = (const snn_prec_module *)m->prec;
        return snn_prec_gemm16_direct(p, pm) && m->n_params == 1 && p->be->conv_scatter16 && p->be->im2col16 &&
                       p->be->conv_gather16
                   ? 7
                   : 0;
    }
    if (!m->prec && snn_module_kind_is(m, SNN_KIND_ELASTIC_BISPIKE) && (m->ops->flags & SNN_MODULE_TYPED_IO))
        return p->be->bispike_forward_io && p->be->bispike_backward_io ? 6 : 0;
    if (!m->prec && snn_module_kind_is(m, SNN_KIND_GELU) && (m->ops->flags & SNN_MODULE_TYPED_IO))
        return p->be->gelu_forward_io && p->be->gelu_backward_io ? 3 : 0;
    if (!m->prec && snn_module_kind_is(m, SNN_KIND_LAYERNORM) && (m->ops->flags & SNN_MODULE_TYPED_IO))
        return p->be->layernorm_forward_io && p->be->layernorm_backward_io ? 5 : 0;
    if (snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION)) {
        /* inside its 16-bit wrapper (the products' type), on a table whose attention takes that
         * storage for this shape */
        const snn_prec_module *pm = (const snn_prec_module *)m->prec;
        const snn_module_desc d = snn_module_describe(m);
        if (!pm || m->ops != &snn_prec_gemm16_ops || !(snn_module_own_ops(m)->flags & SNN_MODULE_TYPED_IO) ||
            !p->be->attention_io16 || !p->be->attention_forward_io || !p->be->attention_backward_io ||
            !p->be->attention_cached_io || d.heads <= 0 || m->in.rank != 2)
            return 0;
        return p->be->attention_io16(p->be, p->half, m->in.d[0], d.heads, d.out_features / d.heads) ? 4 : 0;
    }
    if (m->ops == &snn_prec_gemm16_ops && m->prec) {
        /* direct, and its own kind reads and writes 16-bit boundaries (the convolutions are
         * direct but keep FP32 boundaries) */
        const snn_prec_module *pm = (const snn_prec_module *)m->prec;
        return snn_prec_gemm16_direct(p, pm) && (pm->orig->flags & SNN_MODULE_TYPED_IO) ? 1 : 0;
    }
    if (!m->prec && snn_module_is_neuron(m) && (m->ops->flags & SNN_MODULE_TYPED_IO)) return 2;
    return 0;
}

static snn_module *first_leaf(snn_module *m) {
    while (snn_module_is_sequential(m) && m->n_children > 0) m = m->children[0];
    return m;
}
static snn_module *last_leaf(snn_module *m) {
    while (snn_module_is_sequential(m) && m->n_children > 0) m = m->children[m->n_children - 1];
    return m;
}

typedef struct {
    const snn_precision *p;
    int set; /* 1: assign, 0: reset every module to FP32 */
} store_ctx;

/* A Linear with a bias (the module itself or the one a precision wrapper wraps). */
static int linear_with_bias(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_LINEAR) && m->n_params > 1;
}

/* A 16-bit Linear with a bias before a neuron leaves its bias to the neuron unless
 * SNN_NEURON_BIAS16=0 (read when a precision assigns its boundaries): then the GEMM adds the
 * 16-bit bias in its epilogue and writes the 16-bit output the neuron reads. That form has not
 * run on a GPU yet (2026-12-08), so it is the switch's, not the default. */
static int neuron_bias16(void) {
    const char *e = getenv("SNN_NEURON_BIAS16");
    return !(e && !strcmp(e, "0"));
}

static void visit(snn_module *m, void *ctx) {
    store_ctx *c = ctx;
    if (!c->set) {
        m->in_store = m->out_store = SNN_F32;
        m->defer_bias = 0;
        m->bias_src = NULL;
        m->x_round = m->y_codes = m->x_codes = m->codes_fwd = 0;
        m->round_deferred = m->branch_round = 0;
        return;
    }
    if (!snn_module_is_sequential(m)) return;
    for (int i = 0; i + 1 < m->n_children; i++) {
        snn_module *P = m->children[i], *Q = m->children[i + 1];
        /* a Sequential's boundary is its last (first) child's: a pre-norm branch
         * (LayerNorm, Sequential(Linear, ...)) meets the Linear. Across such levels only the
         * kinds without a both-sides rule take part (the loop below sees one level) */
        const int nested = snn_module_is_sequential(P) || snn_module_is_sequential(Q);
        P = last_leaf(P);
        Q = first_leaf(Q);
        int kp = end_kind(c->p, P), kq = end_kind(c->p, Q);
        if (nested && (kp == 2 || kp == 4 || kq == 2 || kq == 4)) continue;
        /* GEMM -> neuron, neuron -> GEMM, GEMM -> GEMM, GEMM -> elementwise, elementwise ->
         * GEMM (both directions hold: see above, the GEMM side rounds); neuron -> neuron has
         * no rounding on either side, and an elementwise kind only meets a GEMM */
        if (kp && kq && (kp == 1 || kq == 1) && (kp < 3 || kq == 1) && (kq < 3 || kp == 1) && kq != 5 && kq != 6 &&
            kp < 7 && kq < 7)
            P->out_store = Q->in_store = (int)c->p->half;
        /* convolution -> BatchNorm: y and dy in the GEMM's type between them */
        if (kp == 7 && kq == 8) P->out_store = Q->in_store = (int)c->p->half;
    }
    /* a neuron's typed io has one type for x, spikes and both gradients, and the attention's
     * one type for x, y and theirs: one with a single 16-bit side (its other neighbour is not
     * a typed kind) goes back to FP32 on both */
    for (int i = 0; i < m->n_children; i++) {
        snn_module *n = m->children[i];
        const int k = end_kind(c->p, n);
        if ((k != 2 && k != 4) || n->in_store == n->out_store) continue;
        if (n->in_store) n->in_store = m->children[i - 1]->out_store = SNN_F32;
        if (n->out_store) n->out_store = m->children[i + 1]->in_store = SNN_F32;
    }
    /* a 16-bit Linear -> neuron boundary: the neuron adds the bias and rounds in its forward
     * (neuron_forward_io_bias), which saves the pass that did both after the GEMM. With
     * SNN_NEURON_BIAS16=0 the GEMM adds the 16-bit bias in its epilogue and writes the 16-bit
     * output instead, and the neuron reads half the bytes (see neuron_bias16) */
    for (int i = 0; c->p->be->neuron_forward_io_bias && neuron_bias16() && i + 1 < m->n_children; i++) {
        snn_module *P = m->children[i], *Q = m->children[i + 1];
        if (P->out_store && end_kind(c->p, P) == 1 && end_kind(c->p, Q) == 2 && linear_with_bias(P)) {
            P->defer_bias = 1;
            Q->bias_src = P;
        }
    }
}

/* A Residual whose branch ends in a 16-bit GEMM Linear writing FP32 (a GPT block's c_proj):
 * the Linear's output rounding moves into the residual's sum (module.h: round_deferred,
 * branch_round), on every table (the same bits: round, then one FP32 add). The Linear's
 * backward does not read its output, which is then left unrounded. */
static void defer_visit(snn_module *m, void *ctx) {
    const snn_precision *p = ctx;
    if (!snn_module_kind_is(m, SNN_KIND_RESIDUAL) || m->n_children < 1) return;
    snn_module *leaf = last_leaf(m->children[0]);
    if (leaf->ops != &snn_prec_gemm16_ops || !leaf->prec || !snn_module_kind_is(leaf, SNN_KIND_LINEAR) ||
        leaf->out_store || leaf->defer_bias)
        return;
    leaf->round_deferred = m->branch_round = (int)p->half;
}

/* FP8 modes. The FP8 Linear's output is rounded to the base precision (p->half) but the
 * gradient coming back must reach its E5M2 quantisation unrounded, so the one-type boundaries
 * above do not apply; two fusions do, each leaving every value as it was:
 *   FP8 Linear (with a bias) -> plain neuron: the Linear writes its FP32 product and the
 *     neuron adds the bias and rounds to p->half (neuron_forward_io_bias with x_round), the
 *     value the Linear's epilogue wrote; its x and dx stay FP32.
 *   such a neuron -> FP8 Linear on codes whose input is spikes at unit scale (spike-aware FP8)
 *     and whose width is a multiple of 16: in an inference forward the neuron writes E4M3 codes
 *     of its spikes, exactly what the Linear's quantisation would write from FP32 spikes, and
 *     the Linear multiplies them in place (module.h's y_codes / x_codes). */
static int fp8_linear(const snn_module *m) {
    const snn_prec_module *pm = (const snn_prec_module *)m->prec;
    return m->ops == &snn_prec_fp8_ops && pm && pm->kind == SNN_PM_FP8_LINEAR;
}

static void fp8_visit(snn_module *m, void *ctx) {
    const snn_precision *p = ctx;
    if (!snn_module_is_sequential(m)) return;
    for (int i = 0; i + 1 < m->n_children; i++) {
        snn_module *P = m->children[i], *Q = m->children[i + 1];
        if (!fp8_linear(P) || !linear_with_bias(P) || end_kind(p, Q) != 2) continue; /* 2: a plain neuron */
        P->defer_bias = 1;
        Q->bias_src = P;
        Q->x_round = (int)p->half;
        if (i + 2 >= m->n_children) continue;
        snn_module *R = m->children[i + 2];
        const snn_prec_module *pr = (const snn_prec_module *)R->prec;
        if (fp8_linear(R) && snn_prec_fp8_codes_on(p, pr) && pr->spike_input && p->spike_fp8 && pr->in % 16 == 0 &&
            snn_shape_numel(Q->out) % (size_t)pr->in == 0)
            Q->y_codes = R->x_codes = 1;
    }
}

void snn_precision_assign_stores(snn_precision *p) {
    store_ctx c = {p, 0};
    snn_model_graph_invalidate(p->model); /* the modules' device work changes with their boundaries */
    snn_module_walk(p->model->root, visit, &c); /* every boundary FP32 first */
    if (p->be->gemm_rounds && p->be->neuron_forward_io && p->be->neuron_backward_io &&
        (p->half == SNN_F16 || p->half == SNN_BF16) && p->cfg.mode != SNN_PRECISION_FP8) {
        c.set = 1;
        snn_module_walk(p->model->root, visit, &c);
    }
    if (p->cfg.mode == SNN_PRECISION_FP8 && p->be->neuron_forward_io_bias && (p->half == SNN_F16 || p->half == SNN_BF16))
        snn_module_walk(p->model->root, fp8_visit, p);
    if (p->half == SNN_F16 || p->half == SNN_BF16) snn_module_walk(p->model->root, defer_visit, p);
}

void snn_precision_clear_stores(snn_precision *p) {
    if (!p->model) return;
    store_ctx c = {p, 0};
    snn_module_walk(p->model->root, visit, &c);
}

snn_dtype snn_precision_dy16_type(const snn_precision *p, const snn_module *m) {
    if (!p || !m || m->ops != &snn_prec_gemm16_ops || !m->prec) return SNN_F32;
    const snn_prec_module *pm = (const snn_prec_module *)m->prec;
    if (!(pm->orig->flags & SNN_MODULE_DY16) || !p->be->gemm_rounds || !snn_prec_gemm16_on_direct_path(pm)) return SNN_F32;
    return p->half == SNN_F16 || p->half == SNN_BF16 ? p->half : SNN_F32;
}
