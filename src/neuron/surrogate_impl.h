/* Float surrogate derivatives g'(x), one inline function per surrogate, so the neuron
 * kernels can run a whole row of one surrogate in a loop without a per-element switch.
 * Formulas: docs/neurons.md (SpikingJelly's surrogate table). Math stays in FP32. */
#ifndef SNN_NEURON_SURROGATE_IMPL_H
#define SNN_NEURON_SURROGATE_IMPL_H

#include <math.h>

#define SNN_PI_F 3.14159265358979323846f

/* exp(x) for x <= 88, branch-free so that loops calling it vectorise (libm's expf is a
 * scalar call). x = n ln2 + r with |r| <= ln2/2 (ln2 split in a short high part, exact
 * when multiplied by n, and a low part), exp(r) by its Taylor series to r^7 (truncation
 * < 6e-9 relative), times 2^n built in the exponent bits. About 1-2 ulp. Below -87 the
 * result flushes to 0 (the true value is under 2e-38); NaN propagates. */
static inline float snn_expf_fast(float x) {
    const float log2e = 1.44269504088896341f, ln2_hi = 0.693145751953125f, ln2_lo = 1.42860682030941723e-06f;
    /* Clamp with selects (fminf does not vectorise); NaN goes to -87 so the int conversion
     * below stays defined, and is put back at the end. */
    float xc = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f;
    float n = __builtin_rintf(xc * log2e);
    float r = (xc - n * ln2_hi) - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { unsigned u; float f; } two_n = {.u = (unsigned)((int)n + 127) << 23};
    float y = x < -87.0f ? 0.0f : p * two_n.f;
    return x == x ? y : x; /* NaN stays NaN (the clamp would hide it) */
}

/* sig(z)(1 - sig(z)) = e / (1 + e)^2 with e = exp(-|z|): no 1 - sig cancellation for
 * large |z|, where the product form loses most of its float digits. */
static inline float snn_sg_sigmoid(float a, float x) {
    float e = snn_expf_fast(-fabsf(a * x));
    float d = 1.0f + e;
    return a * e / (d * d);
}
static inline float snn_sg_atan(float a, float x) {
    float z = 0.5f * SNN_PI_F * a * x;
    return 0.5f * a / (1.0f + z * z);
}
static inline float snn_sg_pw_quadratic(float a, float x) {
    return fmaxf(0.0f, a - a * a * fabsf(x));
}
static inline float snn_sg_pw_exp(float a, float x) { return 0.5f * a * snn_expf_fast(-a * fabsf(x)); }
static inline float snn_sg_softsign(float a, float x) {
    float d = 1.0f / a + fabsf(x);
    return 1.0f / (2.0f * a * d * d);
}
static inline float snn_sg_superspike(float a, float x) {
    float d = fabsf(x) + 1.0f;
    return a / (d * d);
}
static inline float snn_sg_erf(float a, float x) {
    float z = a * x;
    /* 1/sqrt(pi) */
    return a * 0.56418958354775628695f * snn_expf_fast(-z * z);
}

#endif
