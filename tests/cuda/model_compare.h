/* Shared by the GPU whole-model tests (test_cuda_model*.c): relative L2 error, the worst
 * parameter tensor of a flat model-order comparison, and a Sequential model from modules. */
#ifndef SNN_TEST_MODEL_COMPARE_H
#define SNN_TEST_MODEL_COMPARE_H

#include <math.h>

#include "nn/layers.h"
#include "nn/model_internal.h"
#include "snn/model.h"

/* ||a - b|| / ||b|| (||a - b|| when b is 0); NaN anywhere: inf. */
static inline double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Worst parameter tensor (buffers skipped) of a comparison in flat model order. */
static inline double worst_param(snn_model *m, const float *a, const float *b, const char **name) {
    double worst = 0;
    size_t off = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const snn_param *p = m->tensors[i].param;
        if (p->kind == SNN_PARAM_BUFFER) continue;
        double e = rel_l2(a + off, b + off, p->numel);
        off += p->numel;
        if (e > worst || isnan(e)) {
            worst = e;
            *name = m->tensors[i].name;
        }
    }
    return worst;
}

/* Worst parameter tensor of a total change over a few optimizer steps: ||a - b|| against
 * the larger of ||b|| and one step's size, lr · ||g|| (g: the reference's last gradient). A
 * scalar such as PLIF's w whose gradients change sign between steps moves by far less than
 * one step, so a difference that is small against a step can be large against the net move
 * (H100: 0.13 of PLIF w's net change, with its gradient 2e-3 apart). */
static inline double worst_update(snn_model *m, const float *a, const float *b, const float *g, double lr,
                                  const char **name) {
    double worst = 0;
    size_t off = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const snn_param *p = m->tensors[i].param;
        if (p->kind == SNN_PARAM_BUFFER) continue;
        double num = 0, den = 0, gs = 0;
        for (size_t j = off; j < off + p->numel; j++) {
            if (isnan(a[j]) || isnan(b[j])) num = INFINITY;
            const double d = (double)a[j] - (double)b[j];
            num += d * d;
            den += (double)b[j] * (double)b[j];
            gs += (double)g[j] * (double)g[j];
        }
        off += p->numel;
        const double scale = fmax(sqrt(den), lr * sqrt(gs));
        const double e = scale > 0 ? sqrt(num) / scale : sqrt(num);
        if (e > worst || isnan(e)) {
            worst = e;
            *name = m->tensors[i].name;
        }
    }
    return worst;
}

/* Sequential(kids...) built as a model; takes ownership of the modules (NULL = out of memory). */
static inline snn_status build_seq(snn_module **kids, int n, const char *kind, snn_shape in, uint64_t seed,
                                   snn_model **m) {
    snn_module *root = snn_sequential_new();
    snn_status st = root ? SNN_OK : SNN_E_NOMEM;
    for (int i = 0; i < n; i++) {
        if (st == SNN_OK) st = kids[i] ? snn_module_add_child(root, kids[i]) : SNN_E_NOMEM;
        else if (kids[i]) snn_module_free(kids[i]);
    }
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    return snn_model_build(root, kind, "{}", in, seed, m);
}

#endif
