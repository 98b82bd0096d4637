/* exp and log in double that give the same bits on the CPU and on a CUDA device.
 *
 * libm's exp / log and CUDA's are each accurate to about an ulp, but not the same function:
 * a loss computed with one and its gradient checked against the other would differ in the
 * last bits now and then. These are written with IEEE double additions, multiplications and
 * one division only, each rounded to nearest and never contracted into an FMA (on the device
 * the _rn intrinsics; on the host the plain operators, C17 without contraction on x86-64),
 * and exact bit manipulation, so the host and a kernel compute the same value. Accuracy:
 * within 2 ulp over the ranges the losses use (tests/test_mathd.c holds them to long double).
 * The host side needs a compiler that does not contract: the build passes -ffp-contract=off
 * (CMakeLists.txt; GCC's ISO mode does so anyway, GNU mode and clang would fuse). Header-only,
 * usable from C and CUDA (SNN_MATHD_HD). */
#ifndef SNN_CORE_MATHD_H
#define SNN_CORE_MATHD_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SNN_MATHD_HD __host__ __device__ __forceinline__
#else
#define SNN_MATHD_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define SNN_MATHD_ADD(a, b) __dadd_rn(a, b)
#define SNN_MATHD_SUB(a, b) __dsub_rn(a, b)
#define SNN_MATHD_MUL(a, b) __dmul_rn(a, b)
#define SNN_MATHD_DIV(a, b) __ddiv_rn(a, b)
#else
#define SNN_MATHD_ADD(a, b) ((a) + (b))
#define SNN_MATHD_SUB(a, b) ((a) - (b))
#define SNN_MATHD_MUL(a, b) ((a) * (b))
#define SNN_MATHD_DIV(a, b) ((a) / (b))
#endif

SNN_MATHD_HD uint64_t snn_mathd_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
SNN_MATHD_HD double snn_mathd_from_bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ln 2 split so that k·LN2_HI is exact for |k| < 2^20 (its low 32 bits are zero) */
#define SNN_MATHD_LN2_HI 6.93147180369123816490e-01 /* 0x3fe62e42fee00000 */
#define SNN_MATHD_LN2_LO 1.90821492927058770002e-10 /* 0x3dea39ef35793c76 */

/* e^x. x = k·ln2 + r with |r| <= ln2/2, e^r by its Taylor series to degree 13 (truncation below
 * 1e-17 relative), times 2^k built from its bits (two factors where 2^k is subnormal). */
SNN_MATHD_HD double snn_exp_det(double x) {
    if (x != x) return x;
    if (x > 709.782712893384) return snn_mathd_from_bits(0x7ff0000000000000ull); /* ln(DBL_MAX): +inf above */
    if (x < -745.2) return 0.0;
    /* k = nearest integer to x / ln 2, ties away from zero: exact integer arithmetic */
    const double t = SNN_MATHD_MUL(x, 1.44269504088896338700e+00);
    const int k = (int)(t < 0 ? SNN_MATHD_SUB(t, 0.5) : SNN_MATHD_ADD(t, 0.5));
    const double kd = (double)k;
    const double r = SNN_MATHD_SUB(SNN_MATHD_SUB(x, SNN_MATHD_MUL(kd, SNN_MATHD_LN2_HI)), SNN_MATHD_MUL(kd, SNN_MATHD_LN2_LO));
    /* Horner over 1/n!, n = 13 down to 0 (written out: no tables in device code) */
    double p = 1.0 / 6227020800.0;
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 479001600.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 39916800.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 3628800.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 362880.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 40320.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 5040.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 720.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 120.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 24.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0 / 6.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 0.5);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0);
    p = SNN_MATHD_ADD(SNN_MATHD_MUL(p, r), 1.0);
    int e = k;
    if (e > 1023) { /* 2^1024 is not a double: its half, twice */
        p = SNN_MATHD_MUL(p, 2.0);
        e -= 1;
    }
    if (e < -1000) { /* 2^e is subnormal or less: scale in two exact-then-rounded steps */
        p = SNN_MATHD_MUL(p, snn_mathd_from_bits((uint64_t)(1023 - 1000) << 52));
        e += 1000;
    }
    return SNN_MATHD_MUL(p, snn_mathd_from_bits((uint64_t)(e + 1023) << 52));
}

/* ln x for x > 0 (a NaN for x < 0 or NaN, -inf for 0, +inf for +inf). x = 2^e·m with m in
 * [sqrt(1/2), sqrt(2)), ln m = 2·atanh(f / (2 + f)) with f = m - 1 (exact), the series in
 * w = z² to degree 11 (truncation below 1e-17 relative). */
SNN_MATHD_HD double snn_log_det(double x) {
    if (x != x || x < 0) return snn_mathd_from_bits(0x7ff8000000000000ull);
    if (x == 0) return snn_mathd_from_bits(0xfff0000000000000ull);
    uint64_t u = snn_mathd_bits(x);
    if ((u >> 52) == 0x7ff) return x; /* +inf */
    int e = 0;
    if ((u >> 52) == 0) { /* subnormal: normalise exactly */
        x = SNN_MATHD_MUL(x, 18014398509481984.0); /* 2^54 */
        u = snn_mathd_bits(x);
        e = -54;
    }
    e += (int)(u >> 52) - 1023;
    double m = snn_mathd_from_bits((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    if (m > 1.41421356237309504880) {
        m = SNN_MATHD_MUL(m, 0.5);
        e += 1;
    }
    const double f = SNN_MATHD_SUB(m, 1.0);
    const double z = SNN_MATHD_DIV(f, SNN_MATHD_ADD(2.0, f));
    const double w = SNN_MATHD_MUL(z, z);
    /* Horner over 1/(2j+1), j = 11 down to 1 */
    double s = 1.0 / 23;
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 21);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 19);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 17);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 15);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 13);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 11);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 9);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 7);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 5);
    s = SNN_MATHD_ADD(SNN_MATHD_MUL(s, w), 1.0 / 3);
    /* ln m = 2z + 2z·w·s */
    const double z2 = SNN_MATHD_ADD(z, z);
    const double lnm = SNN_MATHD_ADD(z2, SNN_MATHD_MUL(SNN_MATHD_MUL(z2, w), s));
    const double ed = (double)e;
    return SNN_MATHD_ADD(SNN_MATHD_MUL(ed, SNN_MATHD_LN2_HI), SNN_MATHD_ADD(SNN_MATHD_MUL(ed, SNN_MATHD_LN2_LO), lnm));
}

#endif
