/* snn — counter-based random numbers (Philox-4x32-10).
 *
 * A draw is a pure function of (seed, stream, index), so the same numbers come out
 * on any device, in any order, and after a resume. */
#ifndef SNN_RNG_H
#define SNN_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Four 32-bit words for counter `index` of stream `stream` under key `seed`. */
void snn_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);
/* Uniform in [0, 1) with 24 random bits. */
float snn_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on one Philox block). */
float snn_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* A sequential cursor over one stream, for code that draws many numbers in order. */
typedef struct snn_rng {
    uint64_t seed, stream, index;
} snn_rng;

static inline snn_rng snn_rng_make(uint64_t seed, uint64_t stream) {
    snn_rng r = {seed, stream, 0};
    return r;
}
uint32_t snn_rng_next_u32(snn_rng *r);
float snn_rng_next_uniform(snn_rng *r);
float snn_rng_next_normal(snn_rng *r);
/* Uniform integer in [0, n). */
uint32_t snn_rng_next_below(snn_rng *r, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
