/* Spike encoders: a batch [N][features] becomes the model input [T][N][features]. */
#include <string.h>
#include <strings.h>

#include "data/data_internal.h"
#include "snn/rng.h"

snn_status snn_encoding_from_name(const char *name, snn_encoding *out) {
    if (name && out) {
        if (!strcasecmp(name, "direct")) {
            *out = SNN_ENCODING_DIRECT;
            return SNN_OK;
        }
        if (!strcasecmp(name, "poisson") || !strcasecmp(name, "rate")) {
            *out = SNN_ENCODING_POISSON;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_INVALID, "unknown encoding \"%s\" (known: direct, poisson)",
                     name ? name : "(null)");
}

const char *snn_encoding_name(snn_encoding e) {
    switch (e) {
    case SNN_ENCODING_DIRECT: return "direct";
    case SNN_ENCODING_POISSON: return "poisson";
    }
    return "unknown";
}

void snn_encode_direct(const float *x, int N, size_t features, int T, float *out) {
    size_t step = (size_t)N * features;
    for (int t = 0; t < T; t++) memcpy(out + (size_t)t * step, x, step * sizeof(float));
}

void snn_encode_poisson(const float *x, int N, size_t features, int T, uint64_t seed,
                        uint64_t stream, float *out) {
    size_t step = (size_t)N * features;
    uint64_t total = (uint64_t)T * step;
    /* Each Philox block gives four 32-bit words: element e uses word e % 4 of block e / 4,
     * so blocks are independent and the loop parallelises without changing the result. */
    int64_t blocks = (int64_t)((total + 3) / 4);
#pragma omp parallel for schedule(static) if (blocks > 4096)
    for (int64_t b = 0; b < blocks; b++) {
        uint32_t r[4];
        snn_philox(seed, stream, (uint64_t)b, r);
        for (int k = 0; k < 4; k++) {
            uint64_t e = (uint64_t)b * 4 + (uint64_t)k;
            if (e >= total) break;
            float p = x[e % step];
            float u = (float)(r[k] >> 8) * (1.0f / 16777216.0f);
            /* u in [0, 1): p <= 0 never fires, p >= 1 always fires, NaN never fires. */
            out[e] = u < p ? 1.0f : 0.0f;
        }
    }
}

snn_status snn_encode(snn_encoding e, const float *x, int N, size_t features, int T,
                      uint64_t seed, uint64_t stream, float *out) {
    if (N < 0 || T <= 0 || (N > 0 && (!x || !out)))
        return snn_error(SNN_E_INVALID, "snn_encode: need T > 0, N >= 0 and non-NULL buffers (T=%d, N=%d)",
                         T, N);
    switch (e) {
    case SNN_ENCODING_DIRECT: snn_encode_direct(x, N, features, T, out); return SNN_OK;
    case SNN_ENCODING_POISSON: snn_encode_poisson(x, N, features, T, seed, stream, out); return SNN_OK;
    }
    return snn_error(SNN_E_INVALID, "unknown encoding %d", (int)e);
}
