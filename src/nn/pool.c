/* MaxPool2d and AvgPool2d over [C, H, W] per sample, floor mode, like PyTorch's defaults:
 * padding counts as -inf for max and as 0 (included in the divisor k*k) for average.
 * Padding must be at most kernel/2 (PyTorch's rule), which guarantees every window
 * overlaps the image. Stride 0 means "same as the kernel" (PyTorch's default).
 * MaxPool keeps the argmax of each output (an int32 index into its input plane) in the
 * arena; backward scatters dy there. All loops run over the B*C planes in parallel. */
#include <math.h>
#include <string.h>

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

/* Window rows [*h0, *h1) of output row oh, clipped to the image. */
static inline void window(int o, int s, int p, int k, int n, int *a, int *b) {
    int lo = o * s - p, hi = lo + k;
    *a = lo < 0 ? 0 : lo;
    *b = hi > n ? n : hi;
}

static snn_status pool_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    pool_impl *q = m->impl;
    const long planes = (long)snn_rows(r) * q->C;
    const size_t in_n = (size_t)q->H * q->W, out_n = (size_t)q->Ho * q->Wo;
    const float inv = 1.0f / (float)(q->k * q->k);
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > SNN_PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        const float *xp = x + (size_t)pl * in_n;
        float *yp = y + (size_t)pl * out_n;
        int32_t *ap = q->is_max ? q->argmax + (size_t)pl * out_n : NULL;
        for (int oh = 0; oh < q->Ho; oh++) {
            int h0, h1;
            window(oh, q->s, q->p, q->k, q->H, &h0, &h1);
            for (int ow = 0; ow < q->Wo; ow++) {
                int w0, w1;
                window(ow, q->s, q->p, q->k, q->W, &w0, &w1);
                size_t o = (size_t)oh * q->Wo + ow;
                if (q->is_max) {
                    float best = -INFINITY;
                    int32_t arg = h0 * q->W + w0;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            float v = xp[(size_t)ih * q->W + iw];
                            /* first maximum wins; a NaN propagates (PyTorch does the same) */
                            if (v > best || isnan(v)) {
                                best = v;
                                arg = ih * q->W + iw;
                                if (isnan(v)) goto done;
                            }
                        }
                done:
                    yp[o] = best;
                    ap[o] = arg;
                } else {
                    float acc = 0.0f;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) acc += xp[(size_t)ih * q->W + iw];
                    yp[o] = acc * inv;
                }
            }
        }
    }
    return SNN_OK;
}

static snn_status pool_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)x;
    (void)y;
    pool_impl *q = m->impl;
    if (!dx) return SNN_OK;
    const long planes = (long)snn_rows(r) * q->C;
    const size_t in_n = (size_t)q->H * q->W, out_n = (size_t)q->Ho * q->Wo;
    const float inv = 1.0f / (float)(q->k * q->k);
#pragma omp parallel for schedule(static) if((size_t)planes * in_n > SNN_PAR_MIN_WORK)
    for (long pl = 0; pl < planes; pl++) {
        float *dp = dx + (size_t)pl * in_n;
        const float *gp = dy + (size_t)pl * out_n;
        memset(dp, 0, sizeof(float) * in_n);
        if (q->is_max) {
            const int32_t *ap = q->argmax + (size_t)pl * out_n;
            for (size_t o = 0; o < out_n; o++) dp[ap[o]] += gp[o];
            continue;
        }
        for (int oh = 0; oh < q->Ho; oh++) {
            int h0, h1;
            window(oh, q->s, q->p, q->k, q->H, &h0, &h1);
            for (int ow = 0; ow < q->Wo; ow++) {
                int w0, w1;
                window(ow, q->s, q->p, q->k, q->W, &w0, &w1);
                float g = gp[(size_t)oh * q->Wo + ow] * inv;
                for (int ih = h0; ih < h1; ih++)
                    for (int iw = w0; iw < w1; iw++) dp[(size_t)ih * q->W + iw] += g;
            }
        }
    }
    return SNN_OK;
}

static void pool_describe(const snn_module *m, snn_module_desc *d) {
    const pool_impl *q = m->impl;
    d->kernel = q->k;
    d->stride = q->s;
    d->padding = q->p;
}

static const snn_module_ops maxpool_ops = {
    .describe = pool_describe,
    .kind = "MaxPool2d",
    .setup = pool_setup,
    .reserve = pool_reserve,
    .forward = pool_forward,
    .backward = pool_backward,
};

static const snn_module_ops avgpool_ops = {
    .describe = pool_describe,
    .kind = "AvgPool2d",
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
