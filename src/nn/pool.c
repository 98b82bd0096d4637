/* MaxPool2d and AvgPool2d over [C, H, W] per sample, floor mode, like PyTorch's defaults:
 * padding counts as -inf for max and as 0 (included in the divisor k*k) for average.
 * Padding must be at most kernel/2 (PyTorch's rule), which guarantees every window
 * overlaps the image. Stride 0 means "same as the kernel" (PyTorch's default).
 * MaxPool keeps the argmax of each output (an int32 index into its input plane) in the
 * arena; backward scatters dy there. The loops are the op table's pooling entries
 * (backend.h; the CPU's run over the B*C planes in parallel). */
#include <limits.h>

#include "nn/layers_conv.h"

typedef struct {
    int k, s, p, is_max;
    int C, H, W, Ho, Wo;
    int32_t *argmax; /* [B*C*Ho*Wo], MaxPool only */
} pool_impl;

static snn_status pool_setup(snn_module *m, snn_shape in) {
    pool_impl *q = m->impl;
    const char *kind = m->ops->kind;
    char b[64];
    if (q->s == 0) q->s = q->k;
    if (q->k <= 0 || q->s <= 0 || q->p < 0 || q->p > q->k / 2)
        return snn_error(SNN_E_INVALID,
                         "%s needs kernel > 0, stride > 0 and 0 <= padding <= kernel/2 "
                         "(got kernel=%d stride=%d padding=%d)",
                         kind, q->k, q->s, q->p);
    if (in.rank != 3)
        return snn_error(SNN_E_SHAPE, "%s expects per-sample inputs [C, H, W], got %s", kind,
                         snn_shape_str(in, b, sizeof b));
    snn_conv_geom g = {in.d[0], in.d[1], in.d[2], q->k, q->k, q->s, q->s, q->p, q->p, 0, 0};
    if (!snn_conv_geom_finish(&g))
        return snn_error(SNN_E_SHAPE, "%s kernel %d with padding %d does not fit the input %s", kind,
                         q->k, q->p, snn_shape_str(in, b, sizeof b));
    q->C = g.C;
    q->H = g.H;
    q->W = g.W;
    q->Ho = g.Ho;
    q->Wo = g.Wo;
    m->out = snn_shape3(g.C, g.Ho, g.Wo);
    m->n_params = 0;
    return SNN_OK;
}

static void pool_reserve(snn_module *m, snn_arena *a, int T, int N) {
    pool_impl *q = m->impl;
    if (q->is_max)
        q->argmax = snn_arena_take(a, sizeof(int32_t) * (size_t)T * N * q->C * q->Ho * q->Wo);
}

/* The batch's planes as one image of rows*C planes (the entries' pooling geometry). */
static snn_status plane_geom(const snn_module *m, const snn_run *r, snn_conv_geom *g) {
    const pool_impl *q = m->impl;
    size_t planes = snn_rows(r) * (size_t)q->C;
    if (planes > (size_t)INT_MAX)
        return snn_error(SNN_E_SHAPE, "%s: %zu planes in one batch are more than %d",
                         snn_module_own_ops(m)->kind, planes, INT_MAX);
    snn_conv_geom v = {(int)planes, q->H, q->W, q->k, q->k, q->s, q->s, q->p, q->p, q->Ho, q->Wo};
    *g = v;
    return SNN_OK;
}

static snn_status pool_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    pool_impl *q = m->impl;
    snn_conv_geom g;
    SNN_TRY(plane_geom(m, r, &g));
    if (q->is_max) return m->be->maxpool_forward(m->be, &g, x, y, q->argmax);
    return m->be->avgpool_forward(m->be, &g, x, y);
}

static snn_status pool_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)x;
    (void)y;
    pool_impl *q = m->impl;
    if (!dx) return SNN_OK;
    snn_conv_geom g;
    SNN_TRY(plane_geom(m, r, &g));
    if (q->is_max) return m->be->maxpool_backward(m->be, &g, dy, q->argmax, dx);
    return m->be->avgpool_backward(m->be, &g, dy, dx);
}

static void pool_describe(const snn_module *m, snn_module_desc *d) {
    const pool_impl *q = m->impl;
    d->kernel = q->k;
    d->stride = q->s;
    d->padding = q->p;
}

static const snn_module_ops maxpool_ops = {
    .describe = pool_describe,
    .id = SNN_KIND_MAXPOOL2D,
    .kind = "MaxPool2d",
    .devices = SNN_DEVMASK_ALL,
    .setup = pool_setup,
    .reserve = pool_reserve,
    .forward = pool_forward,
    .backward = pool_backward,
};

static const snn_module_ops avgpool_ops = {
    .describe = pool_describe,
    .id = SNN_KIND_AVGPOOL2D,
    .kind = "AvgPool2d",
    .devices = SNN_DEVMASK_ALL,
    .setup = pool_setup,
    .reserve = pool_reserve,
    .forward = pool_forward,
    .backward = pool_backward,
};

static snn_module *pool_new(const snn_module_ops *ops, int is_max, int kernel, int stride, int padding) {
    snn_module *m = snn_module_new(ops, sizeof(pool_impl));
    if (!m) return NULL;
    pool_impl *q = m->impl;
    q->k = kernel;
    q->s = stride;
    q->p = padding;
    q->is_max = is_max;
    return m;
}

snn_module *snn_maxpool2d_new(int kernel, int stride, int padding) {
    return pool_new(&maxpool_ops, 1, kernel, stride, padding);
}

snn_module *snn_avgpool2d_new(int kernel, int stride, int padding) {
    return pool_new(&avgpool_ops, 0, kernel, stride, padding);
}
