/* Conv1d: [C, L] -> [O, L'] per sample: the 2-D engine with H = 1 and a 1 x k kernel.
 * The pointwise case (kernel 1, stride 1, padding 0) is Spikformer's hot path and a
 * precision-conversion candidate: it is a plain GEMM with no unfolding, y_b = W x_b,
 * dW += dy_b x_b^T, dx_b = W^T dy_b, run on a chunk of samples laid side by side
 * ([C][chunk*L], row copies) so that one large GEMM covers many short token rows; see the
 * engine in conv2d.c and nn/layers_conv.h. */
#include <math.h>

#include "nn/layers_conv.h"

typedef struct {
    int in_ch, out_ch, k, s, p, bias;
    snn_conv_engine e;
} conv1d_impl;

static int is_pointwise(const conv1d_impl *c) { return c->k == 1 && c->s == 1 && c->p == 0; }

static snn_status conv1d_setup(snn_module *m, snn_shape in) {
    conv1d_impl *c = m->impl;
    char b[64];
    if (c->in_ch <= 0 || c->out_ch <= 0 || c->k <= 0 || c->s <= 0 || c->p < 0)
        return snn_error(SNN_E_INVALID,
                         "Conv1d needs positive channels, kernel and stride and padding >= 0 "
                         "(got in=%d out=%d kernel=%d stride=%d padding=%d)",
                         c->in_ch, c->out_ch, c->k, c->s, c->p);
    if (in.rank != 2 || in.d[0] != c->in_ch)
        return snn_error(SNN_E_SHAPE, "Conv1d expects per-sample inputs [%d, L], got %s", c->in_ch,
                         snn_shape_str(in, b, sizeof b));
    snn_conv_geom g = {in.d[0], 1, in.d[1], 1, c->k, 1, c->s, 0, c->p, 0, 0};
    if (!snn_conv_geom_finish(&g))
        return snn_error(SNN_E_SHAPE, "Conv1d kernel %d with padding %d does not fit the input %s",
                         c->k, c->p, snn_shape_str(in, b, sizeof b));
    c->e.g = g;
    c->e.out_ch = c->out_ch;
    m->out = snn_shape2(c->out_ch, g.Wo);
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape3(c->out_ch, c->in_ch, c->k), SNN_PARAM_WEIGHT, 1);
    if (c->bias) snn_module_add_param(m, "bias", snn_shape1(c->out_ch), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void conv1d_init(snn_module *m, snn_rng *rng) {
    conv1d_impl *c = m->impl;
    float bound = 1.0f / sqrtf((float)c->in_ch * (float)c->k); /* PyTorch default */
    snn_init_uniform(m->params[0].data, m->params[0].numel, bound, rng);
    if (c->bias) snn_init_uniform(m->params[1].data, m->params[1].numel, bound, rng);
}

static void conv1d_reserve(snn_module *m, snn_arena *a, int T, int N) {
    conv1d_impl *c = m->impl;
    snn_conv_engine_reserve(&c->e, m->be, a, (size_t)T * (size_t)N);
}

static snn_status conv1d_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    conv1d_impl *c = m->impl;
    c->e.y_store = m->out_store;
    return snn_conv_engine_forward(&c->e, r, m->be, snn_rows(r), m->params[0].data,
                                   c->bias ? m->params[1].data : NULL, x, y);
}

static snn_status conv1d_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    conv1d_impl *c = m->impl;
    c->e.y_store = m->out_store;
    return snn_conv_engine_backward(&c->e, r, m->be, snn_rows(r), m->params[0].data, m->params[0].grad,
                                    c->bias ? m->params[1].grad : NULL, x, dy, dx);
}

static void conv1d_describe(const snn_module *m, snn_module_desc *d) {
    const conv1d_impl *c = m->impl;
    d->in_features = c->in_ch;
    d->out_features = c->out_ch;
    d->bias = c->bias;
    d->kernel = c->k;
    d->stride = c->s;
    d->padding = c->p;
}

static const snn_module_ops conv1d_ops = {
    .describe = conv1d_describe,
    .id = SNN_KIND_CONV1D,
    .kind = "Conv1d",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_W16 | SNN_MODULE_ROUNDS_OUT | SNN_MODULE_ROUNDS_DY,
    .setup = conv1d_setup,
    .init = conv1d_init,
    .reserve = conv1d_reserve,
    .forward = conv1d_forward,
    .backward = conv1d_backward,
};

snn_module *snn_conv1d_new(int in_ch, int out_ch, int kernel, int stride, int padding, int bias) {
    snn_module *m = snn_module_new(&conv1d_ops, sizeof(conv1d_impl));
    if (!m) return NULL;
    conv1d_impl *c = m->impl;
    c->in_ch = in_ch;
    c->out_ch = out_ch;
    c->k = kernel;
    c->s = stride;
    c->p = padding;
    c->bias = bias;
    return m;
}

int snn_conv1d_is_pointwise(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_CONV1D) && is_pointwise((const conv1d_impl *)m->impl);
}
int snn_conv1d_in_channels(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_CONV1D) ? ((const conv1d_impl *)m->impl)->in_ch : -1;
}
int snn_conv1d_out_channels(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_CONV1D) ? ((const conv1d_impl *)m->impl)->out_ch : -1;
}
