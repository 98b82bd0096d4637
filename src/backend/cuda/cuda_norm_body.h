/* The lane bodies of the CUDA table's BatchNorm row sums for short rows
 * (cuda_table_norm.cu: bn_row_short_kernel, bn_grad_row_short_kernel) as __host__ __device__
 * functions, so tests/cuda/test_cuda_emul_conv.cu runs them on the CPU lane by lane, builds
 * backend.h's halving tree over the 32 lanes and checks the channel sums against the CPU
 * table's, bit for bit, with no GPU. Private to the CUDA backend and its tests. */
#ifndef SNN_CUDA_NORM_BODY_H
#define SNN_CUDA_NORM_BODY_H

#include <stddef.h>

#define SNN_NB_HD __host__ __device__ __forceinline__

/* IEEE double operations rounded to nearest, never contracted into an FMA (the CPU reference
 * is compiled without contraction; on the host these are plain operations of x86-64's SSE2). */
SNN_NB_HD double nb_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
SNN_NB_HD double nb_sub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
SNN_NB_HD double nb_div(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
SNN_NB_HD double nb_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Lane `lane`'s partials of rows e0..e0+RR-1 of x[n][S] (rows past n give 0): Σ x[k] over
 * k = lane, lane + 32, ... in increasing k, or Σ (x - mu)² with mu = sum[c]/count when sum is
 * given (c = row % C). */
template <int RR>
SNN_NB_HD void bn_row_short_lane(const float *x, size_t n, size_t C, size_t S, const double *sum, double count,
                                 size_t e0, unsigned lane, double (&s)[RR]) {
    double mu[RR];
#pragma unroll
    for (int r = 0; r < RR; r++) {
        s[r] = 0.0;
        mu[r] = sum && e0 + r < n ? nb_div(sum[(e0 + r) % C], count) : 0.0;
    }
    for (size_t k = lane; k < S; k += 32) {
        float v[RR];
#pragma unroll
        for (int r = 0; r < RR; r++) v[r] = e0 + r < n ? x[(e0 + r) * S + k] : 0.0f;
#pragma unroll
        for (int r = 0; r < RR; r++) {
            if (!sum) {
                s[r] = nb_add(s[r], (double)v[r]);
            } else {
                const double d = nb_sub((double)v[r], mu[r]);
                s[r] = nb_add(s[r], nb_mul(d, d));
            }
        }
    }
}

/* Lane `lane`'s partials of the backward sums of rows e0..e0+RR-1: s0 = Σ dy, s1 = Σ dy·((x -
 * mean[c])·invstd[c]), k as above. */
template <int RR>
SNN_NB_HD void bn_grad_row_short_lane(const float *x, const float *dy, size_t n, size_t C, size_t S, const double *mean,
                                      const double *invstd, size_t e0, unsigned lane, double (&s0)[RR],
                                      double (&s1)[RR]) {
    double mu[RR], is[RR];
#pragma unroll
    for (int r = 0; r < RR; r++) {
        s0[r] = s1[r] = 0.0;
        const size_t c = (e0 + r) % C;
        mu[r] = mean[c];
        is[r] = invstd[c];
    }
    for (size_t k = lane; k < S; k += 32) {
        float gv[RR], xv[RR];
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const bool in = e0 + r < n;
            gv[r] = in ? dy[(e0 + r) * S + k] : 0.0f;
            xv[r] = in ? x[(e0 + r) * S + k] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const double g = (double)gv[r];
            s0[r] = nb_add(s0[r], g);
            s1[r] = nb_add(s1[r], nb_mul(g, nb_mul(nb_sub((double)xv[r], mu[r]), is[r])));
        }
    }
}

#endif
