/* Rotary position embedding on a fused q|k|v row [S, (heads + 2*groups) * hd].
 *
 * Rotate-half pairing (as GPT-NeoX / LLaMA / Megatron's default): for i < hd/2,
 * (u, w) = (x[i], x[i + hd/2]) becomes (u cos - w sin, u sin + w cos) with angle
 * (offset + s) * theta^(-2i/hd). q and k heads rotate, v passes through. The backward is
 * the inverse rotation (the transpose of an orthogonal map). cos/sin come from a table
 * built at setup in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/lm_layers.h"

typedef struct {
    int offset; /* first member: snn_lm_set_offset writes it */
    int heads, groups, hd, max_len, seq;
    float theta;
    float *cs, *sn; /* [max_len][hd/2], malloc'd at setup */
} rope_impl;

static snn_status rope_setup(snn_module *m, snn_shape in) {
    rope_impl *p = m->impl;
    char b[64];
    if (p->heads <= 0 || p->groups <= 0 || p->heads % p->groups || p->hd <= 0 || p->hd % 2 ||
        p->max_len <= 0 || !(p->theta > 0.0f))
        return snn_error(SNN_E_INVALID,
                         "RoPE needs heads divisible by groups, an even head size, a positive "
                         "context and theta (got heads %d, groups %d, head size %d, context %d)",
                         p->heads, p->groups, p->hd, p->max_len);
    int W = (p->heads + 2 * p->groups) * p->hd;
    if (in.rank != 2 || in.d[1] != W || in.d[0] > p->max_len)
        return snn_error(SNN_E_SHAPE, "RoPE expects [S <= %d, %d], got %s", p->max_len, W,
                         snn_shape_str(in, b, sizeof b));
    p->seq = in.d[0];
    m->out = in;
    m->n_params = 0;
    free(p->cs);
    free(p->sn);
    size_t h2 = (size_t)p->hd / 2;
    p->cs = malloc((size_t)p->max_len * h2 * sizeof(float));
    p->sn = malloc((size_t)p->max_len * h2 * sizeof(float));
    if (!p->cs || !p->sn) return snn_error(SNN_E_NOMEM, "RoPE: cannot allocate the angle table");
    for (int s = 0; s < p->max_len; s++)
        for (size_t i = 0; i < h2; i++) {
            double f = pow((double)p->theta, -2.0 * (double)i / (double)p->hd);
            p->cs[s * h2 + i] = (float)cos(s * f);
            p->sn[s * h2 + i] = (float)sin(s * f);
        }
    return SNN_OK;
}

static void rope_apply(rope_impl *p, size_t R, const float *x, float *y, float sign) {
    const size_t S = (size_t)p->seq, hd = (size_t)p->hd, h2 = hd / 2;
    const size_t W = (size_t)(p->heads + 2 * p->groups) * hd, rot = (size_t)(p->heads + p->groups);
    for (size_t b = 0; b < R; b++)
        for (size_t s = 0; s < S; s++) {
            const float *xr = x + (b * S + s) * W;
            float *yr = y + (b * S + s) * W;
            const float *c = p->cs + ((size_t)p->offset + s) * h2, *sn = p->sn + ((size_t)p->offset + s) * h2;
            for (size_t h = 0; h < rot; h++) {
                const float *u = xr + h * hd;
                float *o = yr + h * hd;
                for (size_t i = 0; i < h2; i++) {
                    float a = u[i], w = u[i + h2], si = sign * sn[i];
                    o[i] = a * c[i] - w * si;
                    o[i + h2] = a * si + w * c[i];
                }
            }
            if (yr != xr) memcpy(yr + rot * hd, xr + rot * hd, (W - rot * hd) * sizeof(float));
        }
}

static snn_status rope_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    rope_impl *p = m->impl;
    if (p->offset < 0 || p->offset + p->seq > p->max_len)
        return snn_error(SNN_E_INVALID, "RoPE %s: positions %d..%d exceed the context %d", m->name,
                         p->offset, p->offset + p->seq - 1, p->max_len);
    rope_apply(p, snn_rows(r), x, y, 1.0f);
    return SNN_OK;
}

static snn_status rope_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)x;
    (void)y;
    if (dx) rope_apply(m->impl, snn_rows(r), dy, dx, -1.0f);
    return SNN_OK;
}

static void rope_destroy(snn_module *m) {
    rope_impl *p = m->impl;
    free(p->cs);
    free(p->sn);
    p->cs = p->sn = NULL;
}

static const snn_module_ops rope_ops = {
    .kind = "RoPE",
    .setup = rope_setup,
    .forward = rope_forward,
    .backward = rope_backward,
    .destroy = rope_destroy,
};

snn_module *snn_rope_new(int heads, int groups, int head_dim, float theta, int max_len) {
    snn_module *m = snn_module_new(&rope_ops, sizeof(rope_impl));
    if (!m) return NULL;
    rope_impl *p = m->impl;
    p->heads = heads;
    p->groups = groups;
    p->hd = head_dim;
    p->theta = theta;
    p->max_len = max_len;
    return m;
}
