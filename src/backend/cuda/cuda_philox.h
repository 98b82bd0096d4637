/* Philox-4x32-10's first output word, the same function as src/core/rng.c (snn_philox's
 * o[0]), on the host and the device, so that a device draws exactly what snn_rng_uniform
 * draws: u = (philox_first(seed, stream, index) >> 8) · 2^-24. Shared by the whole-model
 * runner's dropout (cuda_model_layers.cu) and the op table's (cuda_table_norm.cu). */
#ifndef SNN_CUDA_PHILOX_H
#define SNN_CUDA_PHILOX_H

#include <stdint.h>

#include "backend/cuda/cuda_internal.h"

SNN_HD uint32_t umulhi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

SNN_HD uint32_t philox_first(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        const uint32_t hi0 = umulhi32(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint32_t hi1 = umulhi32(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c0;
}

/* snn_rng_uniform's [0, 1) value of that word (exact: 24 bits times a power of two). */
SNN_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (float)(philox_first(seed, stream, index) >> 8) * (1.0f / 16777216.0f);
}

#endif
