/* Modules that only Spikformer uses: a reshape, the token mean of the head, and the
 * spiking self-attention core (no softmax). Their data moves only through the op table
 * (copy, token_mean_*, ssa_*), so they run on every device. */
#include "backend/backend.h"
#include "models/spikformer_parts.h"

/* ---- Reshape: same data, new per-sample shape ---- */

typedef struct {
    snn_shape to;
} reshape_impl;

static snn_status reshape_setup(snn_module *m, snn_shape in) {
    reshape_impl *r = m->impl;
    char a[64], b[64];
    if (snn_shape_numel(in) != snn_shape_numel(r->to))
        return snn_error(SNN_E_SHAPE, "cannot reshape %s to %s", snn_shape_str(in, a, sizeof a),
                         snn_shape_str(r->to, b, sizeof b));
    m->out = r->to;
    return SNN_OK;
}

static snn_status reshape_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    return m->be->copy(m->be, y, x, snn_rows(r) * snn_shape_numel(m->in) * sizeof(float));
}

static snn_status reshape_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                   const float *dy, float *dx) {
    if (!dx) return SNN_OK;
    return m->be->copy(m->be, dx, dy, snn_rows(r) * snn_shape_numel(m->in) * sizeof(float));
}

static const snn_module_ops reshape_ops = {.id = SNN_KIND_RESHAPE, .kind = "Reshape",
                                           .devices = SNN_DEVMASK_ALL,
                                           .setup = reshape_setup,
                                           .forward = reshape_forward,
                                           .backward = reshape_backward};

snn_module *snn_reshape_new(snn_shape to) {
    snn_module *m = snn_module_new(&reshape_ops, sizeof(reshape_impl));
    if (m) ((reshape_impl *)m->impl)->to = to;
    return m;
}

/* ---- TokenMean: [C, L] -> [C] ---- */

static snn_status tmean_setup(snn_module *m, snn_shape in) {
    char a[64];
    if (in.rank != 2)
        return snn_error(SNN_E_SHAPE, "token mean expects [C, L] inputs, got %s", snn_shape_str(in, a, sizeof a));
    m->out = snn_shape1(in.d[0]);
    return SNN_OK;
}

static snn_status tmean_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    return m->be->token_mean_forward(m->be, snn_rows(r) * (size_t)m->in.d[0], m->in.d[1], x, y);
}

static snn_status tmean_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                 const float *dy, float *dx) {
    if (!dx) return SNN_OK;
    return m->be->token_mean_backward(m->be, snn_rows(r) * (size_t)m->in.d[0], m->in.d[1], dy, dx);
}

static const snn_module_ops tmean_ops = {.id = SNN_KIND_TOKEN_MEAN, .kind = "TokenMean",
                                         .devices = SNN_DEVMASK_ALL,
                                         .setup = tmean_setup,
                                         .forward = tmean_forward,
                                         .backward = tmean_backward};

snn_module *snn_token_mean_new(void) { return snn_module_new(&tmean_ops, 0); }

/* ---- Spiking self-attention core ----
 * Input [3C, L]: q, k, v stacked along channels (each [C, L], heads of d = C/heads rows).
 * Per head: A = V K^T (d x d), Y = scale * A Q (d x L). This is (Q K^T V)^T of the
 * token-major form; there is no softmax, spikes keep the products non-negative. */

typedef struct {
    int heads;
    float scale;
    void *work; /* the backend's ssa work area (arena): what the forward saves for backward */
} ssa_impl;

static snn_status ssa_setup(snn_module *m, snn_shape in) {
    ssa_impl *s = m->impl;
    char a[64];
    if (in.rank != 2 || in.d[0] % 3 || (in.d[0] / 3) % s->heads)
        return snn_error(SNN_E_SHAPE,
                         "attention core expects [3C, L] with C divisible by %d heads, got %s", s->heads,
                         snn_shape_str(in, a, sizeof a));
    m->out = snn_shape2(in.d[0] / 3, in.d[1]);
    return SNN_OK;
}

static void ssa_reserve(snn_module *m, snn_arena *a, int T, int N) {
    ssa_impl *s = m->impl;
    size_t B = (size_t)T * (size_t)N;
    s->work = snn_arena_take(a, m->be->ssa_work_bytes(m->be, B, m->out.d[0], m->out.d[1], s->heads));
}

static snn_status ssa_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    ssa_impl *s = m->impl;
    return m->be->ssa_forward(m->be, snn_rows(r), m->out.d[0], m->out.d[1], s->heads, s->scale, x, y, s->work);
}

static snn_status ssa_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    if (!dx) return SNN_OK;
    ssa_impl *s = m->impl;
    return m->be->ssa_backward(m->be, snn_rows(r), m->out.d[0], m->out.d[1], s->heads, s->scale, x, dy, dx,
                               s->work);
}

static void ssa_describe(const snn_module *m, snn_module_desc *d) {
    const ssa_impl *s = m->impl;
    d->heads = s->heads;
    d->scale = s->scale;
}

static const snn_module_ops ssa_ops = {
    .describe = ssa_describe,
    .id = SNN_KIND_SPIKING_SELF_ATTENTION_CORE,
    .kind = "SpikingSelfAttentionCore",
    .devices = SNN_DEVMASK_ALL,
    .setup = ssa_setup,
    .reserve = ssa_reserve,
    .forward = ssa_forward,
    .backward = ssa_backward,
};

snn_module *snn_ssa_core_new(int heads, float scale) {
    snn_module *m = snn_module_new(&ssa_ops, sizeof(ssa_impl));
    if (!m) return NULL;
    ssa_impl *s = m->impl;
    s->heads = heads;
    s->scale = scale;
    return m;
}
