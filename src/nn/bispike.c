/* SpikeLM's elastic bi-spiking transition over T (see lm_layers.h for the recurrence).
 *
 * Every complete T window starts from the reset state v = 0 (the neuron state is never
 * carried between forwards: training microbatches, evaluation and each generation step
 * run the recurrence functionally). The forward saves v [T][N][numel] for the backward:
 *   dv_t = ds_t * [|v_t / a| <= 1] + dv_{t+1} * decay * (a - s_t)     (s_t detached)
 *   dx_t = dv_t.
 * Elements are independent: the op table's bispike_forward / bispike_backward run them in
 * parallel, T sequential inside. */
#include <math.h>

#include "backend/backend.h"
#include "nn/lm_layers.h"

typedef struct {
    float decay, amp;
    float *v; /* [T][N][numel] (arena) */
    int have_forward;
} bis_impl;

static snn_status bis_setup(snn_module *m, snn_shape in) {
    bis_impl *s = m->impl;
    if (!(s->decay >= 0.0f && s->decay <= 1.0f))
        return snn_error(SNN_E_INVALID, "spike_decay must lie in [0, 1] (got %g)", (double)s->decay);
    if (!(s->amp > 0.0f) || !isfinite(s->amp))
        return snn_error(SNN_E_INVALID, "spike_amplitude must be a finite value > 0 (got %g)", (double)s->amp);
    m->out = in;
    m->n_params = 0;
    return SNN_OK;
}

static void bis_reserve(snn_module *m, snn_arena *a, int T, int N) {
    bis_impl *s = m->impl;
    s->v = snn_arena_floats(a, (size_t)T * (size_t)N * snn_shape_numel(m->in));
    s->have_forward = 0;
}

static snn_status bis_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    bis_impl *s = m->impl;
    if (!s->v) return snn_error(SNN_E_STATE, "%s: reserve must run before forward", m->name);
    const size_t E = (size_t)r->N * snn_shape_numel(m->in);
    /* y stored 16-bit before a 16-bit GEMM that rounds it (prec_store.c): the typed entry */
    if (m->out_store)
        SNN_TRY(m->be->bispike_forward_io(m->be, r->T, E, s->decay, s->amp, (snn_dtype)m->out_store, x, y, s->v));
    else
        SNN_TRY(m->be->bispike_forward(m->be, r->T, E, s->decay, s->amp, x, y, s->v));
    s->have_forward = 1;
    return SNN_OK;
}

static snn_status bis_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)x;
    bis_impl *s = m->impl;
    if (!s->have_forward) return snn_error(SNN_E_STATE, "%s: backward called before forward", m->name);
    if (!dx) return SNN_OK;
    const size_t E = (size_t)r->N * snn_shape_numel(m->in);
    if (m->out_store)
        return m->be->bispike_backward_io(m->be, r->T, E, s->decay, s->amp, (snn_dtype)m->out_store, s->v, dy, dx);
    return m->be->bispike_backward(m->be, r->T, E, s->decay, s->amp, s->v, y, dy, dx);
}

static const snn_module_ops bis_ops = {
    .id = SNN_KIND_ELASTIC_BISPIKE, .kind = "ElasticBiSpike",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_TYPED_IO, /* y and dy: 16-bit before a 16-bit GEMM (prec_store.c) */
    .setup = bis_setup,
    .reserve = bis_reserve,
    .forward = bis_forward,
    .backward = bis_backward,
};

snn_module *snn_bispike_new(float decay, float amplitude) {
    snn_module *m = snn_module_new(&bis_ops, sizeof(bis_impl));
    if (!m) return NULL;
    bis_impl *s = m->impl;
    s->decay = decay;
    s->amp = amplitude;
    return m;
}
