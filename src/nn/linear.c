/* Linear: y = x W^T + b over the B rows (and any leading per-sample dims: a [L, in]
 * sample is L rows). W is [out, in] like PyTorch. */
#include <math.h>

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

/* The GEMM operand type a precision wrapper asked for (snn_run.gemm_type; F32 otherwise). */
static snn_dtype ab_type(const snn_run *r) { return r->gemm_type ? (snn_dtype)r->gemm_type : SNN_F32; }
/* How params[0].data is stored (a wrapper's 16-bit copy of the weight, SNN_MODULE_W16). */
static snn_dtype w_store(const snn_run *r) { return r->w_store ? (snn_dtype)r->w_store : SNN_F32; }
/* How x / dx and y / dy are stored (SNN_MODULE_TYPED_IO). A wrapper's 16-bit copy of x or dy
 * (snn_run.x16 / dy16) replaces the operand in the GEMMs: op_x / op_dy below. */
static snn_dtype x_store(const snn_module *m) { return (snn_dtype)m->in_store; }
static snn_dtype y_store(const snn_module *m) { return (snn_dtype)m->out_store; }

static const float *op_x(const snn_run *r, const float *x, snn_dtype *st, const snn_module *m) {
    *st = r->x16 ? ab_type(r) : x_store(m);
    return r->x16 ? (const float *)r->x16 : x;
}
static const float *op_dy(const snn_run *r, const float *dy, snn_dtype *st, const snn_module *m) {
    *st = r->dy16 ? ab_type(r) : y_store(m);
    return r->dy16 ? (const float *)r->dy16 : dy;
}

static snn_status linear_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    linear_impl *l = m->impl;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)l->in));
    /* defer_bias: the neuron after it adds the bias and rounds (module.h): the FP32 product */
    const int defer = l->bias && m->defer_bias;
    snn_dtype xs;
    const float *X = op_x(r, x, &xs, m);
    const snn_dtype cs = defer ? SNN_F32 : y_store(m);
    /* a 16-bit C adds the wrapper's 16-bit copy of the (rounded) bias (snn_run.bias16) */
    const int b16 = l->bias && !defer && r->bias16 && cs != SNN_F32;
    snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = rows, .N = l->out, .K = l->in, .alpha = 1.0f, .beta = 0.0f,
                  .A = X, .lda = l->in, .B = m->params[0].data, .ldb = l->in, .C = y, .ldc = l->out,
                  .ab_type = ab_type(r), .bias = b16 ? (const float *)r->bias16 : l->bias && !defer ? m->params[1].data : NULL,
                  .c_round = SNN_F32, .a_store = xs, .b_store = w_store(r), .c_store = cs,
                  .bias_store = b16 ? cs : SNN_F32};
    return m->be->gemm(m->be, &g);
}

static snn_status linear_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    linear_impl *l = m->impl;
    const snn_backend *be = m->be;
    int rows = (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)l->in));
    /* dW += dy^T x ; db += sum_rows dy ; dx = dy W */
    snn_dtype xs, ds;
    const float *X = op_x(r, x, &xs, m), *DY = op_dy(r, dy, &ds, m);
    snn_gemm gw = {.trans_a = 1, .trans_b = 0, .M = l->out, .N = l->in, .K = rows, .alpha = 1.0f, .beta = 1.0f,
                   .A = DY, .lda = l->out, .B = X, .ldb = l->in, .C = m->params[0].grad, .ldc = l->in,
                   .ab_type = ab_type(r), .c_round = SNN_F32, .a_store = ds, .b_store = xs};
    SNN_TRY(be->gemm(be, &gw));
    if (l->bias)
        SNN_TRY(ds != SNN_F32 ? be->colsum16_add(be, ds, DY, rows, l->out, m->params[1].grad)
                              : be->colsum_add(be, DY, rows, l->out, m->params[1].grad));
    if (!dx) return SNN_OK;
    snn_gemm gd = {.trans_a = 0, .trans_b = 0, .M = rows, .N = l->in, .K = l->out, .alpha = 1.0f, .beta = 0.0f,
                   .A = DY, .lda = l->out, .B = m->params[0].data, .ldb = l->in, .C = dx, .ldc = l->in,
                   .ab_type = ab_type(r), .c_round = SNN_F32, .a_store = ds, .b_store = w_store(r),
                   .c_store = x_store(m)};
    return be->gemm(be, &gd);
}

static void linear_describe(const snn_module *m, snn_module_desc *d) {
    const linear_impl *l = m->impl;
    d->in_features = l->in;
    d->out_features = l->out;
    d->bias = l->bias;
}

static const snn_module_ops linear_ops = {
    .describe = linear_describe,
    .id = SNN_KIND_LINEAR,
    .kind = "Linear",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_W16 | SNN_MODULE_TYPED_IO,
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
