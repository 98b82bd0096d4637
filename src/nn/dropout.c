/* Dropout with SpikingJelly's multi-step semantics: one mask per (sample, element), drawn
 * once per forward and applied at every time step t (so a unit is silenced for the whole
 * sequence, not independently at each step). Kept units are scaled by 1/(1-p); eval mode
 * is the identity.
 *
 * The mask is a pure function of (model seed, module stream, step, n, i) through Philox
 * (see snn_dropout_stream in layers_conv.h), so a CUDA backend or a resumed run draws the
 * same mask. It lives in the arena ([N * numel]) for backward. Drawing and applying it are
 * the op table's (dropout_mask, dropout_apply), so the module runs on any device. */
#include "backend/backend.h"
#include "nn/layers_conv.h"

typedef struct {
    float p;
    size_t numel;
    float *mask; /* [N][numel]: 0 or 1/(1-p) */
} dropout_impl;

uint64_t snn_dropout_stream(const snn_module *m) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (const char *s = m->name; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static snn_status dropout_setup(snn_module *m, snn_shape in) {
    dropout_impl *d = m->impl;
    if (!(d->p >= 0.0f && d->p <= 1.0f))
        return snn_error(SNN_E_INVALID, "Dropout probability must be in [0, 1], got %g", (double)d->p);
    m->out = in;
    m->n_params = 0;
    d->numel = snn_shape_numel(in);
    return SNN_OK;
}

static void dropout_reserve(snn_module *m, snn_arena *a, int T, int N) {
    dropout_impl *d = m->impl;
    (void)T;
    d->mask = snn_arena_floats(a, (size_t)N * d->numel);
}

static int dropout_active(const dropout_impl *d, const snn_run *r) { return r->training && d->p > 0.0f; }

static snn_status dropout_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    dropout_impl *d = m->impl;
    const snn_backend *be = m->be;
    const size_t per_t = (size_t)r->N * d->numel;
    if (!dropout_active(d, r)) return be->copy(be, y, x, sizeof(float) * (size_t)r->T * per_t);
    SNN_TRY(be->dropout_mask(be, r->seed, snn_dropout_stream(m), r->step * per_t, d->p, per_t, d->mask));
    return be->dropout_apply(be, r->T, per_t, x, d->mask, y);
}

static snn_status dropout_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                   const float *dy, float *dx) {
    (void)x;
    (void)y;
    dropout_impl *d = m->impl;
    const snn_backend *be = m->be;
    const size_t per_t = (size_t)r->N * d->numel;
    if (!dx) return SNN_OK;
    if (!dropout_active(d, r)) return be->copy(be, dx, dy, sizeof(float) * (size_t)r->T * per_t);
    return be->dropout_apply(be, r->T, per_t, dy, d->mask, dx);
}

static void dropout_describe(const snn_module *m, snn_module_desc *d) {
    const dropout_impl *q = m->impl;
    d->p = q->p;
}

static const snn_module_ops dropout_ops = {
    .describe = dropout_describe,
    .id = SNN_KIND_DROPOUT,
    .kind = "Dropout",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_STEP_RANDOM,
    .setup = dropout_setup,
    .reserve = dropout_reserve,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

snn_module *snn_dropout_new(float p) {
    snn_module *m = snn_module_new(&dropout_ops, sizeof(dropout_impl));
    if (!m) return NULL;
    ((dropout_impl *)m->impl)->p = p;
    return m;
}
