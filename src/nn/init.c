#include <math.h>

#include "nn/layers.h"

void snn_init_trunc_normal(float *w, size_t n, float std, snn_rng *rng) {
    for (size_t i = 0; i < n; i++) {
        float z;
        do z = snn_rng_next_normal(rng);
        while (fabsf(z) > 2.0f);
        w[i] = z * std;
    }
}

void snn_init_uniform(float *w, size_t n, float bound, snn_rng *rng) {
    for (size_t i = 0; i < n; i++) w[i] = (2.0f * snn_rng_next_uniform(rng) - 1.0f) * bound;
}
