/* Internal numeric-format helpers: saturating 16-bit narrowing and the E8M0 scale rules
 * used by MX (32-element block) quantisation. The plain value cast snn_f32_to_e8m0
 * (include/snn/dtype.h) rounds to the nearest power of two; a *scale* must instead be
 * chosen so that no element overflows, which is a different rounding (see
 * docs/formats.md and reference fp8.md §1.4). */
#ifndef SNN_DTYPE_INTERNAL_H
#define SNN_DTYPE_INTERNAL_H

#include <stdint.h>
#include "snn/dtype.h"

/* Per-format constants ("traits"), one row per snn_dtype. */
typedef struct snn_dtype_traits {
    const char *name;     /* canonical short name, as snn_dtype_name */
    unsigned size;        /* bytes per element */
    unsigned mant_bits;   /* stored mantissa bits (0 for E8M0) */
    unsigned exp_bits;
    int bias;
    int has_sign;         /* 0 only for E8M0 */
    int has_inf;          /* F32, F16, BF16, E5M2 */
    double max;           /* largest finite value */
    double min_normal;    /* smallest positive normal (E8M0: smallest value 2^-127) */
    double min_subnormal; /* smallest positive subnormal (E8M0: 2^-127, it has none) */
} snn_dtype_traits;

/* NULL for an unknown type. */
const snn_dtype_traits *snn_dtype_traits_of(snn_dtype t);

/* F16/BF16 narrowing with the SNN_CONVERT_SATURATE rule: like snn_f32_to_f16/bf16 (RNE),
 * but with saturate != 0 a result that would be +-inf (an overflow or an infinite input)
 * becomes +-max finite instead. NaN stays NaN. */
uint16_t snn_f32_to_f16_sat(float f, int saturate);
uint16_t snn_f32_to_bf16_sat(float f, int saturate);

/* Round a non-negative value *up* to a power of two, as E8M0 (NVIDIA/TE "RCEIL",
 * = CUDA __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)): NaN -> 0xFF,
 * +inf and anything above 2^127 -> 0xFE, values <= 2^-127 (including 0) -> 0x00.
 * Negative inputs (not -0) are a caller bug and give 0xFF (NaN) so it shows. */
uint8_t snn_f32_to_e8m0_ceil(float x);
/* Round a non-negative value *down* to a power of two (cudaRoundZero, SATFINITE):
 * NaN -> 0xFF, +inf -> 0xFE, values below 2^-126 (including 0) -> 0x00; negatives 0xFF. */
uint8_t snn_f32_to_e8m0_floor(float x);

/* MX block scale, NVIDIA/TE rule (reference fp8.md §1.4, the rule of the mxfp8 recipe):
 * X = 2^ceil(log2(amax / fmt_max)), computed as TE does, ceil_e8m0(amax * fl(1/fmt_max)).
 * fmt_max is the element format's largest value (448 for E4M3, 57344 for E5M2).
 * Guarantees |v| / X <= fmt_max for every |v| <= amax with amax a normal float, so no
 * element is clipped. amax = 0 gives 0x00 (2^-127); NaN amax gives 0xFF. */
uint8_t snn_e8m0_from_amax(float amax, float fmt_max);
/* MX block scale, OCP MX v1.0 rule ("FLOOR"): X = 2^(floor(log2(amax)) - emax_elem), where
 * emax_elem is the exponent of the element format's largest normal (8 for E4M3, 15 for
 * E5M2). The top of the block may exceed the element max and is then clipped by the
 * saturating element cast. Clamped to [2^-127, 2^127]; amax = 0 gives 0x00; NaN 0xFF. */
uint8_t snn_e8m0_from_amax_ocp(float amax, int emax_elem);

/* 1/X exactly, as an FP32 (2^(127-e)); 0xFF gives NaN, 0xFE gives 2^-127 (a subnormal).
 * Element quantisation multiplies by this instead of dividing by X. */
float snn_e8m0_inv_scale(uint8_t e);

#endif
