/* snn_model_spike_rates (include/snn/model.h): the fraction of ones in each neuron module's
 * output of the last forward. The outputs stay where the model runs: the sum of the spikes
 * is the backend's sum of squares (spikes are 0 or 1, so Σ y² = Σ y), one reduction per
 * neuron and no copy of the activations to the host. */
#include <math.h>

#include "backend/backend.h"
#include "neuron/neuron_module.h"
#include "nn/layers.h"
#include "nn/model_internal.h"

/* The buffer holding m's forward output: a Sequential keeps every child's output apart but
 * the last one's, which is the Sequential's own output; the root's output is the model's.
 * NULL when a container on the way is not a Sequential (its children's outputs are private). */
static const float *output_of(snn_model *model, snn_module *m) {
    for (;;) {
        if (m == model->root) return model->out;
        snn_module *p = m->parent;
        if (!p || !snn_module_is_sequential(p)) return NULL;
        int i = 0;
        while (i < p->n_children && p->children[i] != m) i++;
        if (i == p->n_children) return NULL;
        if (i + 1 < p->n_children) return snn_sequential_output(p, i);
        m = p; /* the last child writes the parent's output */
    }
}

/* Σ of n 16-bit spikes (a neuron between typed kinds stores them 16-bit: snn_module.out_store)
 * or E4M3 codes (an inference forward before an FP8 Linear: snn_module.codes_fwd) as column
 * sums of an [n][1] array into one FP32 on the device; exact while the count of ones stays
 * below 2^24 per chunk. */
static snn_status sum16(const snn_backend *be, snn_dtype t, const void *y, size_t n, double *out) {
    float *acc = NULL, h = 0.0f;
    *out = 0.0;
    SNN_TRY(be->alloc(be, sizeof(float), (void **)&acc));
    snn_status st = SNN_OK;
    const size_t chunk = (size_t)1 << 24;
    for (size_t off = 0; st == SNN_OK && off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        st = be->fill(be, acc, 0.0f, 1);
        const unsigned char *yb = (const unsigned char *)y + off * (t == SNN_F8E4M3 ? 1 : 2);
        if (st == SNN_OK) st = be->colsum16_add(be, t, yb, (int)k, 1, acc);
        if (st == SNN_OK) st = be->download(be, &h, acc, sizeof h);
        if (st == SNN_OK) *out += (double)h;
    }
    be->free(be, acc);
    return st;
}

typedef struct {
    snn_model *model;
    snn_spike_rate *out;
    int cap, n;
    snn_status st;
} rate_walk;

static void visit(snn_module *m, void *ctx) {
    rate_walk *w = ctx;
    if (w->st != SNN_OK || !snn_module_is_neuron(m)) return;
    if (w->n < w->cap) {
        snn_spike_rate *r = &w->out[w->n];
        r->name = m->name;
        r->kind = snn_module_own_ops(m)->kind;
        r->numel = (size_t)w->model->T * (size_t)w->model->N * snn_shape_numel(m->out);
        r->rate = NAN;
        const float *y = output_of(w->model, m);
        if (y && r->numel) {
            const snn_backend *be = snn_model_backend(w->model);
            double s = 0;
            if (m->codes_fwd) w->st = sum16(be, SNN_F8E4M3, y, r->numel, &s);
            else if (m->out_store) w->st = sum16(be, (snn_dtype)m->out_store, y, r->numel, &s);
            else w->st = be->sumsq(be, y, r->numel, &s);
            if (w->st == SNN_OK) r->rate = s / (double)r->numel;
        }
    }
    w->n++;
}

snn_status snn_model_spike_rates(snn_model *m, snn_spike_rate *out, int cap, int *count) {
    if (!m || !count || cap < 0 || (cap > 0 && !out))
        return snn_error(SNN_E_INVALID, "snn_model_spike_rates: NULL model or count, or out NULL with cap > 0");
    *count = 0;
    if (!m->last_x || !m->out)
        return snn_error(SNN_E_STATE, "snn_model_spike_rates: no forward since the model was planned or placed");
    rate_walk w = {m, out, cap, 0, SNN_OK};
    snn_module_walk(m->root, visit, &w);
    if (w.st != SNN_OK) return snn_error_prefix(w.st, "snn_model_spike_rates");
    *count = w.n;
    return SNN_OK;
}
