/* Output head: logits [S, vocab] = x [S, dim] W^T with W [vocab, dim], no bias (GPT-2).
 * Tied: W is the token embedding's weight; the head declares no parameter and adds its
 * gradient into the embedding's (the embedding module must outlive it, as in one model). */
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"

typedef struct {
    int dim, vocab;
    snn_module *tied;
} head_impl;

static snn_param *head_weight(snn_module *m) {
    head_impl *h = m->impl;
    return h->tied ? &h->tied->params[0] : &m->params[0];
}

static snn_status head_setup(snn_module *m, snn_shape in) {
    head_impl *h = m->impl;
    char b[64];
    if (h->dim <= 0 || h->vocab <= 0)
        return snn_error(SNN_E_INVALID, "LMHead needs positive sizes (got %d, %d)", h->dim, h->vocab);
    if (in.rank < 1 || in.d[in.rank - 1] != h->dim)
        return snn_error(SNN_E_SHAPE, "LMHead expects a last dimension of %d, got %s", h->dim,
                         snn_shape_str(in, b, sizeof b));
    if (h->tied) {
        const snn_param *w = &h->tied->params[0];
        if (!snn_module_kind_is(h->tied, SNN_KIND_EMBEDDING) || h->tied->n_params < 1 ||
            w->shape.rank != 2 || w->shape.d[0] != h->vocab || w->shape.d[1] != h->dim)
            return snn_error(SNN_E_SHAPE, "LMHead: the tied module must be an Embedding(%d, %d) set up first",
                             h->vocab, h->dim);
    }
    m->out = in;
    m->out.d[in.rank - 1] = h->vocab;
    m->n_params = 0;
    if (!h->tied) snn_module_add_param(m, "weight", snn_shape2(h->vocab, h->dim), SNN_PARAM_WEIGHT, 1);
    return SNN_OK;
}

static void head_init(snn_module *m, snn_rng *rng) {
    head_impl *h = m->impl;
    if (!h->tied) snn_init_trunc_normal(m->params[0].data, m->params[0].numel, 0.02f, rng);
}

/* Products through the op table's GEMM: FP32, or, inside a 16-bit precision wrapper
 * (prec_exec.c, snn_run.gemm_type / out_round), 16-bit operands with FP32 accumulation and
 * the logits and dx rounded to that type in the GEMM's epilogue (SNN_MODULE_ROUNDS_OUT). */
static snn_dtype ab_of(const snn_run *r) { return r->gemm_type ? (snn_dtype)r->gemm_type : SNN_F32; }
static snn_dtype round_of(const snn_run *r) { return r->out_round ? (snn_dtype)r->out_round : SNN_F32; }

/* y: FP32 rows of vocab values, or (m->y_store, snn_model_forward_y16) 16-bit rows of y_ld,
 * the padding zero, written once by the GEMM. */
static snn_status head_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    head_impl *h = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)h->dim));
    const int y16 = m->y_store && m->y_store == (int)ab_of(r);
    snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = rows, .N = h->vocab, .K = h->dim, .alpha = 1.0f, .beta = 0.0f,
                  .A = x, .lda = h->dim, .B = head_weight(m)->data, .ldb = h->dim, .C = y,
                  .ldc = y16 ? m->y_ld : h->vocab, .ab_type = ab_of(r), .bias = NULL,
                  .c_round = y16 ? SNN_F32 : round_of(r), .c_store = y16 ? ab_of(r) : SNN_F32, .c_zero_pad = y16};
    if (m->y_store && !y16)
        return snn_error(SNN_E_STATE, "LMHead: a 16-bit output needs the module's 16-bit precision wrapper");
    return m->be->gemm(m->be, &g);
}

/* dy: FP32 rows of vocab values, or the loss's 16-bit rows of dy16_ld, zero-padded
 * (SNN_MODULE_DY16), which both GEMMs read in place. */
static snn_status head_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    head_impl *h = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)h->dim));
    snn_param *w = head_weight(m);
    const float *DY = r->dy16 ? (const float *)r->dy16 : dy;
    const snn_dtype ds = r->dy16 ? ab_of(r) : SNN_F32;
    const int ldy = r->dy16 && r->dy16_ld ? r->dy16_ld : h->vocab;
    snn_gemm gw = {.trans_a = 1, .trans_b = 0, .M = h->vocab, .N = h->dim, .K = rows, .alpha = 1.0f, .beta = 1.0f,
                   .A = DY, .lda = ldy, .B = x, .ldb = h->dim, .C = w->grad, .ldc = h->dim,
                   .ab_type = ab_of(r), .bias = NULL, .c_round = SNN_F32, .a_store = ds,
                   .a_zero_pad = ldy != h->vocab};
    SNN_TRY(m->be->gemm(m->be, &gw));
    if (!dx) return SNN_OK;
    snn_gemm gd = {.trans_a = 0, .trans_b = 0, .M = rows, .N = h->dim, .K = h->vocab, .alpha = 1.0f, .beta = 0.0f,
                   .A = DY, .lda = ldy, .B = w->data, .ldb = h->dim, .C = dx, .ldc = h->dim,
                   .ab_type = ab_of(r), .bias = NULL, .c_round = round_of(r), .a_store = ds,
                   .a_zero_pad = ldy != h->vocab};
    return m->be->gemm(m->be, &gd);
}

static const snn_module_ops head_ops = {
    .id = SNN_KIND_LM_HEAD, .kind = "LMHead",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_ROUNDS_OUT | SNN_MODULE_DY16,
    .setup = head_setup,
    .init = head_init,
    .forward = head_forward,
    .backward = head_backward,
    .gemm_weight = head_weight,
};

snn_module *snn_lm_head_new(int dim, int vocab, snn_module *tied) {
    snn_module *m = snn_module_new(&head_ops, sizeof(head_impl));
    if (!m) return NULL;
    head_impl *h = m->impl;
    h->dim = dim;
    h->vocab = vocab;
    h->tied = tied;
    return m;
}
