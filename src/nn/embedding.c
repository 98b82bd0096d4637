/* Token embedding: [S] ids -> [S, dim] rows of weight [vocab, dim].
 *
 * The ids arrive as FP32 through the module contract; forward refuses any value that is
 * not an integer in [0, vocab) (so a corrupt batch is an error, never an out-of-bounds
 * read). Backward scatters dy into the rows of the ids, every row adding its tokens in order
 * (the op table's embedding_forward / embedding_backward). The ids have no gradient (dx is
 * zeroed). */
#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"

typedef struct {
    int vocab, dim;
    int seq;
} emb_impl;

static snn_status emb_setup(snn_module *m, snn_shape in) {
    emb_impl *e = m->impl;
    char b[64];
    if (e->vocab <= 0 || e->dim <= 0)
        return snn_error(SNN_E_INVALID, "Embedding needs a positive vocabulary and width (got %d, %d)",
                         e->vocab, e->dim);
    if (in.rank != 1 || in.d[0] <= 0)
        return snn_error(SNN_E_SHAPE, "Embedding expects [S] token ids per sample, got %s",
                         snn_shape_str(in, b, sizeof b));
    e->seq = in.d[0];
    m->out = snn_shape2(e->seq, e->dim);
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape2(e->vocab, e->dim), SNN_PARAM_WEIGHT, 1);
    return SNN_OK;
}

static void emb_init(snn_module *m, snn_rng *rng) {
    /* GPT-2's initialisation: N(0, 0.02) */
    snn_init_trunc_normal(m->params[0].data, m->params[0].numel, 0.02f, rng);
}

static snn_status emb_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    emb_impl *e = m->impl;
    const size_t n = snn_rows(r) * (size_t)e->seq;
    long long bad = -1;
    float f = 0.0f;
    SNN_TRY(m->be->embedding_forward(m->be, n, e->dim, e->vocab, x, m->params[0].data, y, &bad, &f));
    if (bad >= 0)
        return snn_error(SNN_E_INVALID, "Embedding %s: token %zu is %g, not an id in [0, %d)", m->name, (size_t)bad,
                         (double)f, e->vocab);
    return SNN_OK;
}

static snn_status emb_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)y;
    emb_impl *e = m->impl;
    const size_t n = snn_rows(r) * (size_t)e->seq;
    SNN_TRY(m->be->embedding_backward(m->be, n, e->dim, x, dy, m->params[0].grad));
    return dx ? m->be->fill(m->be, dx, 0.0f, n) : SNN_OK;
}

static void emb_describe(const snn_module *m, snn_module_desc *d) {
    const emb_impl *e = m->impl;
    d->in_features = e->vocab;
    d->out_features = e->dim;
}

static const snn_module_ops emb_ops = {
    .id = SNN_KIND_EMBEDDING, .kind = "Embedding",
    .devices = SNN_DEVMASK_ALL,
    .setup = emb_setup,
    .init = emb_init,
    .forward = emb_forward,
    .backward = emb_backward,
    .describe = emb_describe,
};

snn_module *snn_embedding_new(int vocab, int dim) {
    snn_module *m = snn_module_new(&emb_ops, sizeof(emb_impl));
    if (!m) return NULL;
    emb_impl *e = m->impl;
    e->vocab = vocab;
    e->dim = dim;
    return m;
}
