/* Linear: y = x W^T + b over the B rows (and any leading per-sample dims: a [L, in]
 * sample is L rows). W is [out, in] like PyTorch. */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"

typedef struct {
    int in, out, bias;
} linear_impl;

static snn_status linear_setup(snn_module *m, snn_shape in) {
    linear_impl *l = m->impl;
    char b[64];
    if (in.rank < 1 || in.d[in.rank - 1] != l->in)
        return snn_error(SNN_E_SHAPE, "Linear expects inputs whose last dimension is %d, got %s",
                         l->in, snn_shape_str(in, b, sizeof b));
    m->out = in;
    m->out.d[in.rank - 1] = l->out;
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape2(l->out, l->in), SNN_PARAM_WEIGHT, 1);
    if (l->bias) snn_module_add_param(m, "bias", snn_shape1(l->out), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void linear_init(snn_module *m, snn_rng *rng) {
    linear_impl *l = m->impl;
    float bound = 1.0f / sqrtf((float)l->in);
    snn_init_uniform(m->params[0].data, m->params[0].numel, bound, rng);
    if (l->bias) snn_init_uniform(m->params[1].data, m->params[1].numel, bound, rng);
}

static snn_status linear_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    linear_impl *l = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)l->in));
    const float *W = m->params[0].data;
    if (l->bias) {
        const float *b = m->params[1].data;
        for (int i = 0; i < rows; i++) memcpy(y + (size_t)i * l->out, b, sizeof(float) * (size_t)l->out);
    }
    r->be->gemm_f32(0, 1, rows, l->out, l->in, 1.0f, x, l->in, W, l->in, l->bias ? 1.0f : 0.0f, y,
                    l->out);
    return SNN_OK;
}

static snn_status linear_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    linear_impl *l = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)l->in));
    const float *W = m->params[0].data;
    /* dW += dy^T x ; db += sum_rows dy ; dx = dy W */
    r->be->gemm_f32(1, 0, l->out, l->in, rows, 1.0f, dy, l->out, x, l->in, 1.0f, m->params[0].grad,
                    l->in);
    if (l->bias) {
        float *db = m->params[1].grad;
        for (int i = 0; i < rows; i++) {
            const float *g = dy + (size_t)i * l->out;
            for (int j = 0; j < l->out; j++) db[j] += g[j];
        }
    }
    if (dx) r->be->gemm_f32(0, 0, rows, l->in, l->out, 1.0f, dy, l->out, W, l->in, 0.0f, dx, l->in);
    return SNN_OK;
}

static void linear_describe(const snn_module *m, snn_module_desc *d) {
    const linear_impl *l = m->impl;
    d->in_features = l->in;
    d->out_features = l->out;
    d->bias = l->bias;
}

static const snn_module_ops linear_ops = {
    .describe = linear_describe,
    .kind = "Linear",
    .setup = linear_setup,
    .init = linear_init,
    .forward = linear_forward,
    .backward = linear_backward,
};

snn_module *snn_linear_new(int in_features, int out_features, int bias) {
    snn_module *m = snn_module_new(&linear_ops, sizeof(linear_impl));
    if (!m) return NULL;
    linear_impl *l = m->impl;
    l->in = in_features;
    l->out = out_features;
    l->bias = bias;
    return m;
}
