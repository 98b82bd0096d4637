/* Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Key = seed; counter = (index low, index high, stream low, stream high). */
#include <math.h>

#include "snn/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

void snn_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(PHILOX_M0, c0, &hi0);
        uint32_t lo1 = mulhilo(PHILOX_M1, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

static inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float snn_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    snn_philox(seed, stream, index, o);
    return u32_to_unit(o[0]);
}

float snn_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t o[4];
    snn_philox(seed, stream, index, o);
    /* u1 in (0, 1] so the log is finite. */
    double u1 = ((double)o[0] + 1.0) / 4294967296.0;
    double u2 = (double)o[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint32_t snn_rng_next_u32(snn_rng *r) {
    uint32_t o[4];
    snn_philox(r->seed, r->stream, r->index++, o);
    return o[0];
}

float snn_rng_next_uniform(snn_rng *r) { return snn_rng_uniform(r->seed, r->stream, r->index++); }

float snn_rng_next_normal(snn_rng *r) { return snn_rng_normal(r->seed, r->stream, r->index++); }

uint32_t snn_rng_next_below(snn_rng *r, uint32_t n) {
    /* Lemire's multiply-shift; the bias (< n / 2^32) is irrelevant for shuffles. */
    return (uint32_t)(((uint64_t)snn_rng_next_u32(r) * n) >> 32);
}
