/* Fast division by run-time constants for index decompositions in CUDA kernels (the
 * runner's lowering kernels, cuda_lower.h, and the op table's, cuda_table_conv.cu). Private
 * to the CUDA backend. */
#ifndef SNN_CUDA_FASTDIV_H
#define SNN_CUDA_FASTDIV_H

#include <stdint.h>

/* Division by a run-time constant as a multiply-high, shift and add (the Granlund-Montgomery
 * round-up method): q = (umulhi(n, m) + n) >> s with s = ceil(log2 d),
 * m = floor(2^32 (2^s - d) / d) + 1, exact for 0 <= n < 2^31 (all indices here are). The
 * index decompositions of these memory-bound kernels otherwise cost more than the loads. */
struct Div {
    uint32_t d, m, s;
};
static inline Div div_make(int d) {
    Div r;
    r.d = (uint32_t)d;
    r.s = 0;
    while ((1ull << r.s) < (uint64_t)d) r.s++;
    r.m = (uint32_t)(((1ull << 32) * ((1ull << r.s) - (uint64_t)d)) / (uint64_t)d + 1);
    return r;
}
__host__ __device__ __forceinline__ int dv(int n, const Div &q) {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi((uint32_t)n, q.m);
#else /* host emulation of kernel bodies (cuda_conv_body.h) */
    const uint32_t hi = (uint32_t)(((uint64_t)(uint32_t)n * q.m) >> 32);
#endif
    return (int)((hi + (uint32_t)n) >> q.s);
}

#endif
