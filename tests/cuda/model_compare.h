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
