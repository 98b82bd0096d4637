/* SpikeLM's elastic bi-spiking transition over T (see lm_layers.h for the recurrence).
 *
 * Every complete T window starts from the reset state v = 0 (the neuron state is never
 * carried between forwards: training microbatches, evaluation and each generation step
 * run the recurrence functionally). The forward saves v [T][N][numel] for the backward:
 *   dv_t = ds_t * [|v_t / a| <= 1] + dv_{t+1} * decay * (a - s_t)     (s_t detached)
 *   dx_t = dv_t.
 * Elements are independent: OpenMP over elements, T sequential inside. */
#include <math.h>

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

static inline float bis_fire(float v, float a) {
    float z = v / a;
    z = z > 1.0f ? 1.0f : (z < -1.0f ? -1.0f : z);
    return a * rintf(z);
}

static snn_status bis_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    bis_impl *s = m->impl;
    if (!s->v) return snn_error(SNN_E_STATE, "%s: reserve must run before forward", m->name);
    const long long E = (long long)((size_t)r->N * snn_shape_numel(m->in));
    const int T = r->T;
    const float a = s->amp, d = s->decay;
#pragma omp parallel for schedule(static) if ((size_t)E * (size_t)T >= 32768)
    for (long long e = 0; e < E; e++) {
        float v = 0.0f, sp = 0.0f;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)t * (size_t)E + (size_t)e;
            v = (t == 0) ? x[i] : v * d * (a - sp) + x[i];
            sp = bis_fire(v, a);
            s->v[i] = v;
            y[i] = sp;
        }
    }
    s->have_forward = 1;
    return SNN_OK;
}

static snn_status bis_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)x;
    bis_impl *s = m->impl;
    if (!s->have_forward) return snn_error(SNN_E_STATE, "%s: backward called before forward", m->name);
    if (!dx) return SNN_OK;
    const long long E = (long long)((size_t)r->N * snn_shape_numel(m->in));
    const int T = r->T;
    const float a = s->amp, d = s->decay;
#pragma omp parallel for schedule(static) if ((size_t)E * (size_t)T >= 32768)
    for (long long e = 0; e < E; e++) {
        float carry = 0.0f; /* dL/dv_{t+1} * dv_{t+1}/dv_t */
        for (int t = T - 1; t >= 0; t--) {
            size_t i = (size_t)t * (size_t)E + (size_t)e;
            float dv = (fabsf(s->v[i] / a) <= 1.0f ? dy[i] : 0.0f) + carry;
            dx[i] = dv;
            if (t > 0) carry = dv * d * (a - y[i - (size_t)E]); /* dv_t/dv_{t-1} = d (a - s_{t-1}) */
        }
    }
    return SNN_OK;
}

static const snn_module_ops bis_ops = {
    .kind = "ElasticBiSpike",
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
