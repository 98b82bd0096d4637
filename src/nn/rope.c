/* Rotary position embedding on a fused q|k|v row [S, (heads + 2*groups) * hd].
 *
 * Rotate-half pairing (as GPT-NeoX / LLaMA / Megatron's default): for i < hd/2,
 * (u, w) = (x[i], x[i + hd/2]) becomes (u cos - w sin, u sin + w cos) with angle
 * (offset + s) * theta^(-2i/hd). q and k heads rotate, v passes through. The backward is
 * the inverse rotation (the transpose of an orthogonal map). cos/sin come from a table
 * built at setup in double on the host; reserve takes room for it in the activation arena
 * (device memory on a device) and the first forward or backward after reserve fills it
 * with one upload, so every device rotates with the same FP32 table. The rotation is the op
 * table's rope_apply. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/lm_layers.h"

typedef struct {
    int offset; /* first member: snn_lm_set_offset writes it */
    int heads, groups, hd, max_len, seq;
    float theta;
    float *cs, *sn; /* [max_len][hd/2], malloc'd at setup (host) */
    float *dcs, *dsn; /* the same in the arena (the model's device) */
    int table_ready;  /* dcs/dsn hold the table (after the first use since reserve) */
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
    p->table_ready = 0;
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

static void rope_reserve(snn_module *m, snn_arena *a, int T, int N) {
    (void)T;
    (void)N;
    rope_impl *p = m->impl;
    const size_t n = (size_t)p->max_len * ((size_t)p->hd / 2);
    p->dcs = snn_arena_floats(a, n);
    p->dsn = snn_arena_floats(a, n);
    p->table_ready = 0;
}

static snn_status rope_table(snn_module *m) {
    rope_impl *p = m->impl;
    if (p->table_ready) return SNN_OK;
    if (!p->dcs || !p->cs) return snn_error(SNN_E_STATE, "RoPE %s: reserve must run before forward", m->name);
    const size_t bytes = (size_t)p->max_len * ((size_t)p->hd / 2) * sizeof(float);
    SNN_TRY(m->be->upload(m->be, p->dcs, p->cs, bytes));
    SNN_TRY(m->be->upload(m->be, p->dsn, p->sn, bytes));
    p->table_ready = 1;
    return SNN_OK;
}

static snn_status rope_apply(snn_module *m, const snn_run *r, const float *x, float *y, float sign) {
    rope_impl *p = m->impl;
    SNN_TRY(rope_table(m));
    const size_t off = (size_t)p->offset * ((size_t)p->hd / 2);
    return m->be->rope_apply(m->be, snn_rows(r), p->seq, (p->heads + 2 * p->groups) * p->hd, p->heads + p->groups,
                             p->hd, p->dcs + off, p->dsn + off, sign, x, y);
}

static snn_status rope_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    rope_impl *p = m->impl;
    if (p->offset < 0 || p->offset + p->seq > p->max_len)
        return snn_error(SNN_E_INVALID, "RoPE %s: positions %d..%d exceed the context %d", m->name,
                         p->offset, p->offset + p->seq - 1, p->max_len);
    return rope_apply(m, r, x, y, 1.0f);
}

static snn_status rope_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)x;
    (void)y;
    return dx ? rope_apply(m, r, dy, dx, -1.0f) : SNN_OK;
}

static void rope_destroy(snn_module *m) {
    rope_impl *p = m->impl;
    free(p->cs);
    free(p->sn);
    p->cs = p->sn = NULL;
}

static const snn_module_ops rope_ops = {
    .id = SNN_KIND_ROPE, .kind = "RoPE",
    .devices = SNN_DEVMASK_ALL,
    .setup = rope_setup,
    .reserve = rope_reserve,
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
