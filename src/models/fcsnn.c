/* fcsnn: flatten -> [Linear -> LIF] x depth -> Linear. The output [T, N, classes] is read
 * as a rate code: the loss uses its mean over T. */
#include <math.h>
#include <stdio.h>

#include "models/zoo.h"

snn_status snn_fcsnn_create(const snn_fcsnn_opts *o, uint64_t seed, snn_model **out) {
    snn_fcsnn_opts f = o ? *o : (snn_fcsnn_opts){0};
    if (!f.in_features) f.in_features = 784;
    if (!f.hidden) f.hidden = 512;
    if (!f.depth) f.depth = 2;
    if (!f.classes) f.classes = 10;
    if (f.tau == 0) f.tau = 2.0f;
    *out = NULL;
    SNN_TRY(snn_zoo_range("fcsnn", "in_features", f.in_features, 1, SNN_ZOO_MAX_FEATURES));
    SNN_TRY(snn_zoo_range("fcsnn", "hidden", f.hidden, 1, SNN_ZOO_MAX_WIDTH));
    SNN_TRY(snn_zoo_range("fcsnn", "depth", f.depth, 1, SNN_ZOO_MAX_DEPTH));
    SNN_TRY(snn_zoo_range("fcsnn", "classes", f.classes, 1, SNN_ZOO_MAX_WIDTH));
    if (!isfinite(f.tau)) return snn_error(SNN_E_INVALID, "fcsnn: tau must be finite");
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.tau = f.tau;
    SNN_TRY(snn_neuron_opts_validate(&lif));

    snn_module *root = snn_sequential_new();
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_module *layers = snn_sequential_new();
    snn_status st = snn_zoo_add(root, layers, "layers");
    int width = f.in_features;
    for (int i = 0; i < f.depth && st == SNN_OK; i++) {
        st = snn_zoo_add(layers, snn_linear_new(width, f.hidden, 1), NULL);
        if (st == SNN_OK) st = snn_zoo_add(layers, snn_neuron_module_new(&lif), NULL);
        width = f.hidden;
    }
    if (st == SNN_OK) st = snn_zoo_add(layers, snn_linear_new(width, f.classes, 1), NULL);
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"model\":\"fcsnn\",\"in_features\":%d,\"hidden\":%d,\"depth\":%d,\"classes\":%d,\"tau\":%.9g}",
             f.in_features, f.hidden, f.depth, f.classes, (double)f.tau);
    return snn_model_build(root, "fcsnn", cfg, snn_shape1(f.in_features), seed, out);
}
