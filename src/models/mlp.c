/* mlp: (depth - 1) x [Linear -> GELU] -> Linear, the dense workload of `snn bench linear`
 * and `snn bench crossover`. Its GEMMs are what FP8 can speed up, so the benchmark
 * measures the precision modes on it without neuron or time-step work in the way. */
#include <stdio.h>

#include "models/mlp.h"
#include "snn/mlp.h" /* the public declaration, checked against the definition */
#include "models/zoo.h"

snn_status snn_mlp_create(int in, int width, int depth, int classes, uint64_t seed,
                          snn_model **out) {
    if (!out) return snn_error(SNN_E_INVALID, "mlp: out must not be NULL");
    *out = NULL;
    /* 1 << 20 keeps every product of two sizes inside size_t arithmetic on 64-bit hosts
     * and catches negative or garbage sizes with a message. */
    if (in <= 0 || width <= 0 || depth <= 0 || classes <= 0 || in > (1 << 20) ||
        width > (1 << 20) || classes > (1 << 20) || depth > 1000)
        return snn_error(SNN_E_INVALID,
                         "mlp: sizes must be positive (in %d, width %d, depth %d, classes %d; "
                         "at most 1048576 features and 1000 layers)",
                         in, width, depth, classes);
    snn_module *root = snn_sequential_new();
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_module *layers = snn_sequential_new();
    snn_status st = snn_zoo_add(root, layers, "layers");
    int fan_in = in;
    for (int i = 0; i + 1 < depth && st == SNN_OK; i++) {
        st = snn_zoo_add(layers, snn_linear_new(fan_in, width, 1), NULL);
        if (st == SNN_OK) st = snn_zoo_add(layers, snn_gelu_new(), NULL);
        fan_in = width;
    }
    if (st == SNN_OK) st = snn_zoo_add(layers, snn_linear_new(fan_in, classes, 1), NULL);
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"model\":\"mlp\",\"in_features\":%d,\"width\":%d,\"depth\":%d,\"classes\":%d}", in,
             width, depth, classes);
    return snn_model_build(root, "mlp", cfg, snn_shape1(in), seed, out);
}
