/* Dropout with SpikingJelly's multi-step semantics: one mask per (sample, element), drawn
 * once per forward and applied at every time step t (so a unit is silenced for the whole
 * sequence, not independently at each step). Kept units are scaled by 1/(1-p); eval mode
 * is the identity.
 *
 * The mask is a pure function of (model seed, module stream, step, n, i) through Philox
 * (see snn_dropout_stream in layers_conv.h), so a CUDA backend or a resumed run draws the
 * same mask. It lives in the arena ([N * numel]) for backward. */
#include <string.h>

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
    const size_t per_t = (size_t)r->N * d->numel;
    if (!dropout_active(d, r)) {
        memcpy(y, x, sizeof(float) * (size_t)r->T * per_t);
        return SNN_OK;
    }
    const float p = d->p, scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    const uint64_t stream = snn_dropout_stream(m), base = r->step * per_t;
    float *mask = d->mask;
#pragma omp parallel for schedule(static) if(per_t * 8 > SNN_PAR_MIN_WORK)
    for (long i = 0; i < (long)per_t; i++)
        mask[i] = snn_rng_uniform(r->seed, stream, base + (uint64_t)i) >= p ? scale : 0.0f;
    for (int t = 0; t < r->T; t++) {
        const float *xt = x + (size_t)t * per_t;
        float *yt = y + (size_t)t * per_t;
#pragma omp parallel for schedule(static) if(per_t > SNN_PAR_MIN_WORK)
        for (long i = 0; i < (long)per_t; i++) yt[i] = xt[i] * mask[i];
    }
    return SNN_OK;
}

static snn_status dropout_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                   const float *dy, float *dx) {
    (void)x;
    (void)y;
    dropout_impl *d = m->impl;
    const size_t per_t = (size_t)r->N * d->numel;
    if (!dx) return SNN_OK;
    if (!dropout_active(d, r)) {
        memcpy(dx, dy, sizeof(float) * (size_t)r->T * per_t);
        return SNN_OK;
    }
    const float *mask = d->mask;
    for (int t = 0; t < r->T; t++) {
        const float *gt = dy + (size_t)t * per_t;
        float *dt = dx + (size_t)t * per_t;
#pragma omp parallel for schedule(static) if(per_t > SNN_PAR_MIN_WORK)
        for (long i = 0; i < (long)per_t; i++) dt[i] = gt[i] * mask[i];
    }
    return SNN_OK;
}

static void dropout_describe(const snn_module *m, snn_module_desc *d) {
    const dropout_impl *q = m->impl;
    d->p = q->p;
}

static const snn_module_ops dropout_ops = {
    .describe = dropout_describe,
    .kind = "Dropout",
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
