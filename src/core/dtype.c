/* Numeric formats and conversions (reference fp8.md §1; docs/formats.md).
 *
 * Every narrowing works on the FP32 bit pattern with integer operations only, so the
 * result does not depend on the floating-point environment (rounding mode, FTZ/DAZ) and
 * needs no search over candidates. Narrowing is round-to-nearest, ties-to-even on the
 * value grid of the target format; since codes of one sign are monotone in magnitude,
 * "even" is simply "code bit 0 is 0". */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype_internal.h"
#include "core/error_internal.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* m >> sh rounded to nearest, ties to even; 1 <= sh <= 31, m < 2^31. Adding half an
 * ulp minus one, plus the kept LSB, carries exactly when the dropped part is above half,
 * or equal to half with an odd LSB. A carry out of the kept mantissa bits moves into the
 * exponent field, which is exactly the right result. (Written without comparisons so
 * that the conversion loops vectorise.) */
static inline uint32_t rne_shift(uint32_t m, unsigned sh) {
    return (m + ((1u << (sh - 1u)) - 1u) + ((m >> sh) & 1u)) >> sh;
}

/* ---------------------------------------------------------------------------------- */
/* Traits                                                                             */

static const snn_dtype_traits traits[SNN_DTYPE_COUNT] = {
    [SNN_F32] = {"f32", 4, 23, 8, 127, 1, 1, 3.4028234663852886e38, 0x1p-126, 0x1p-149},
    [SNN_F16] = {"f16", 2, 10, 5, 15, 1, 1, 65504.0, 0x1p-14, 0x1p-24},
    [SNN_BF16] = {"bf16", 2, 7, 8, 127, 1, 1, 3.3895313892515355e38, 0x1p-126, 0x1p-133},
    [SNN_F8E4M3] = {"f8e4m3", 1, 3, 4, 7, 1, 0, 448.0, 0x1p-6, 0x1p-9},
    [SNN_F8E5M2] = {"f8e5m2", 1, 2, 5, 15, 1, 1, 57344.0, 0x1p-14, 0x1p-16},
    [SNN_E8M0] = {"e8m0", 1, 0, 8, 127, 0, 0, 0x1p127, 0x1p-127, 0x1p-127},
};

const snn_dtype_traits *snn_dtype_traits_of(snn_dtype t) {
    if ((unsigned)t >= SNN_DTYPE_COUNT) return NULL;
    return &traits[t];
}

size_t snn_dtype_size(snn_dtype t) {
    const snn_dtype_traits *tr = snn_dtype_traits_of(t);
    return tr ? tr->size : 0;
}

const char *snn_dtype_name(snn_dtype t) {
    const snn_dtype_traits *tr = snn_dtype_traits_of(t);
    return tr ? tr->name : "unknown";
}

double snn_dtype_max(snn_dtype t) {
    const snn_dtype_traits *tr = snn_dtype_traits_of(t);
    return tr ? tr->max : 0.0;
}

static const struct {
    const char *name;
    snn_dtype type;
} dtype_aliases[] = {
    {"f32", SNN_F32},          {"fp32", SNN_F32},
    {"float32", SNN_F32},      {"float", SNN_F32},
    {"f16", SNN_F16},          {"fp16", SNN_F16},
    {"float16", SNN_F16},      {"half", SNN_F16},
    {"bf16", SNN_BF16},        {"bfloat16", SNN_BF16},
    {"f8e4m3", SNN_F8E4M3},    {"float8_e4m3fn", SNN_F8E4M3},
    {"e4m3", SNN_F8E4M3},      {"e4m3fn", SNN_F8E4M3},
    {"fp8_e4m3", SNN_F8E4M3},  {"f8e5m2", SNN_F8E5M2},
    {"float8_e5m2", SNN_F8E5M2}, {"e5m2", SNN_F8E5M2},
    {"fp8_e5m2", SNN_F8E5M2},  {"e8m0", SNN_E8M0},
    {"float8_e8m0fnu", SNN_E8M0}, {"e8m0fnu", SNN_E8M0},
    {"ue8m0", SNN_E8M0},
};

snn_status snn_dtype_from_name(const char *name, snn_dtype *out) {
    if (!name || !out) return snn_error(SNN_E_INVALID, "snn_dtype_from_name: NULL argument");
    char low[32];
    size_t len = strlen(name);
    if (len >= sizeof low)
        return snn_error(SNN_E_INVALID, "unknown numeric format '%.40s...' (name too long)", name);
    for (size_t i = 0; i <= len; i++) low[i] = (char)tolower((unsigned char)name[i]);
    const char *key = low;
    if (strncmp(key, "torch.", 6) == 0) key += 6;
    if (strcmp(key, "fp8") == 0 || strcmp(key, "f8") == 0 || strcmp(key, "float8") == 0)
        return snn_error(SNN_E_INVALID,
                         "numeric format '%s' is ambiguous: pick float8_e4m3fn (f8e4m3, more "
                         "precision, max 448) or float8_e5m2 (f8e5m2, more range, max 57344)",
                         name);
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++) {
        if (strcmp(key, dtype_aliases[i].name) == 0) {
            *out = dtype_aliases[i].type;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_INVALID,
                     "unknown numeric format '%s': use one of f32 (fp32, float32), f16 (fp16, "
                     "float16, half), bf16 (bfloat16), f8e4m3 (float8_e4m3fn, e4m3), f8e5m2 "
                     "(float8_e5m2, e5m2), e8m0 (float8_e8m0fnu); a 'torch.' prefix is allowed",
                     name);
}

/* ---------------------------------------------------------------------------------- */
/* F16                                                                                */

float snn_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1F) return bits_f32(s | 0x7F800000u | (m << 13)); /* inf / NaN (payload kept) */
    if (e != 0) return bits_f32(s | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return bits_f32(s);
    /* Subnormal m * 2^-24: normalise so the leading 1 becomes the implicit bit. */
    int lz = __builtin_clz(m) - 21; /* shifts that bring the leading 1 up to bit 10 */
    m = (m << lz) & 0x3FFu;
    return bits_f32(s | ((uint32_t)(113 - lz) << 23) | (m << 13));
}

uint16_t snn_f32_to_f16_sat(float f, int saturate) {
    uint32_t u = f32_bits(f);
    uint32_t s = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    /* Both candidate results are computed and one is selected, so that mixed data do
     * not cost a branch misprediction per element. */
    /* Normal result (|x| >= 2^-14): drop 13 mantissa bits and rebias. */
    uint32_t normal = rne_shift(a, 13) - ((127u - 15u) << 10);
    /* Subnormal result q * 2^-24 with q = RNE(|x| / 2^-24), |x| = m * 2^(e-150). The
     * shift is capped at 31: anything at or below 2^-25 (half the smallest subnormal,
     * the tie included) then rounds to 0. q may become 0x400, the smallest normal code,
     * which is correct. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t ec = e < 95u ? 95u : e > 125u ? 125u : e; /* keep the shift in [1, 31] */
    uint32_t sub = rne_shift(m, 126u - ec);
    uint32_t mag = a < 0x38800000u ? sub : normal;
    /* >= 65520 (= 65504 + half an ulp; the tie goes to the even code 0x7C00) overflows;
     * infinity included. */
    mag = a >= 0x477FF000u ? (saturate ? 0x7BFFu : 0x7C00u) : mag;
    /* NaN: keep the sign and the top payload bits, force quiet. */
    mag = a > 0x7F800000u ? 0x7E00u | ((a >> 13) & 0x3FFu) : mag;
    return (uint16_t)(s | mag);
}

uint16_t snn_f32_to_f16(float f) { return snn_f32_to_f16_sat(f, 0); }

/* ---------------------------------------------------------------------------------- */
/* BF16 (the upper half of an FP32)                                                   */

float snn_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t snn_f32_to_bf16_sat(float f, int saturate) {
    uint32_t u = f32_bits(f);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
    /* Adding 0x7FFF + lsb rounds to nearest-even; a carry into the exponent of the
     * largest binade gives exactly the infinity code. */
    uint16_t r = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    if (saturate && (r & 0x7FFFu) == 0x7F80u) r = (uint16_t)((r & 0x8000u) | 0x7F7Fu);
    return r;
}

uint16_t snn_f32_to_bf16(float f) { return snn_f32_to_bf16_sat(f, 0); }

/* ---------------------------------------------------------------------------------- */
/* FP8 E4M3 (fn) and E5M2                                                             */

float snn_e4m3_to_f32(uint8_t b) {
    uint32_t s = (uint32_t)(b & 0x80u) << 24;
    uint32_t mag = b & 0x7Fu, e = mag >> 3, m = mag & 7u;
    uint32_t normal = ((e + 127u - 7u) << 23) | (m << 20);
    /* Subnormal m * 2^-9, exact through the integer -> float conversion (no FP32
     * subnormal arithmetic involved). */
    uint32_t sub = f32_bits((float)m * 0x1p-9f);
    uint32_t r = e ? normal : sub;
    return bits_f32(s | (mag == 0x7Fu ? 0x7FC00000u : r));
}

float snn_e5m2_to_f32(uint8_t b) {
    /* E5M2 is the upper byte of an FP16, specials included. */
    return snn_f16_to_f32((uint16_t)(b << 8));
}

/* FP32 -> FP8 (reference fp8.md §1.2). P mantissa bits, bias B; maxcode is the largest
 * finite magnitude code, ovfcode the code for an out-of-range magnitude without
 * saturation (E4M3: NaN 0x7F, E5M2: inf 0x7C). Both candidate results are computed and
 * one selected: no data-dependent branches on the common path. */
static inline uint8_t fp8_encode(float f, int saturate, unsigned P, unsigned B, uint32_t maxcode,
                                 uint32_t ovfcode) {
    uint32_t u = f32_bits(f);
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t s = (u >> 24) & 0x80u;
    /* Normal result: round the FP32 significand to P bits; the rounded exponent and
     * mantissa, rebiased, are the code magnitude (a carry moves into the exponent). */
    uint32_t normal = rne_shift(a, 23u - P) - ((127u - B) << P);
    /* Subnormal result (|x| < 2^(1-B)): q = RNE(|x| / 2^(1-B-P)), |x| = m * 2^(e-150).
     * Shifts of 31 or more give 0 (everything up to half the smallest subnormal, the tie
     * included); q == 2^P is the smallest normal code, which is correct. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t top = 151u - B - P; /* the shift is top - e */
    uint32_t ec = e < top - 31u ? top - 31u : e > top - 1u ? top - 1u : e; /* shift in [1, 31] */
    uint32_t sub = rne_shift(m, top - ec);
    uint32_t mag = a < ((127u + 1u - B) << 23) ? sub : normal;
    /* Codes are monotone in magnitude, so "beyond the largest finite code" is overflow:
     * for E4M3 that is exponent 15 with mantissa 7 (the NaN code) or more, for E5M2
     * exponent 31 (the inf code) or more. Infinite inputs land here too. */
    mag = mag > maxcode ? (saturate ? maxcode : ovfcode) : mag;
    /* any NaN -> 0x7F (as CUDA; the sign is dropped) */
    return (uint8_t)(a > 0x7F800000u ? 0x7Fu : s | mag);
}

uint8_t snn_f32_to_e4m3(float f, int saturate) {
    return fp8_encode(f, saturate, 3, 7, 0x7E, 0x7F);
}

uint8_t snn_f32_to_e5m2(float f, int saturate) {
    return fp8_encode(f, saturate, 2, 15, 0x7B, 0x7C);
}

/* ---------------------------------------------------------------------------------- */
/* E8M0: unsigned powers of two 2^(e-127), e = 0..254, 0xFF = NaN, no zero            */

float snn_e8m0_to_f32(uint8_t b) {
    if (b == 0xFF) return bits_f32(0x7FC00000u);
    if (b == 0) return bits_f32(0x00400000u); /* 2^-127 is an FP32 subnormal */
    return bits_f32((uint32_t)b << 23);
}

/* Plain value cast: round to the nearest power of two on the *linear* value grid, ties
 * to the even code, like every other narrowing here. Between 2^k and 2^(k+1) the midpoint
 * is 1.5 * 2^k, i.e. the FP32 mantissa field compared with 0x400000. The exact tie
 * 1.5 * 2^127 goes to the even code 0xFE, so only values above it overflow (the same
 * rule as E4M3's 464 -> 448). No zero exists: everything up to 1.5 * 2^-127 (tie to
 * the even code 0x00) becomes 2^-127. Negative values have no encoding: NaN. */
uint8_t snn_f32_to_e8m0(float f, int saturate) {
    uint32_t u = f32_bits(f);
    uint32_t a = u & 0x7FFFFFFFu;
    uint32_t e = a >> 23;
    uint32_t m = a & 0x7FFFFFu;
    /* Normal: round up when m > 0x400000, or m == 0x400000 with e odd (carry test as in
     * rne_shift). FP32 subnormal m * 2^-149 (or 0): round up when m > 0x600000. */
    uint32_t up_normal = (m + 0x3FFFFFu + (e & 1u)) >> 23;
    uint32_t up_sub = (m + 0x1FFFFFu) >> 23;
    uint32_t code = e == 0 ? up_sub : e + up_normal;
    uint32_t ovf = saturate ? 0xFEu : 0xFFu;
    code = code == 0xFFu ? ovf : code;                    /* overflow, inf included */
    uint32_t nan = (a > 0x7F800000u) | ((u != a) & (a != 0)); /* NaN, or negative (not -0) */
    return (uint8_t)(code | (0u - nan));
}

uint8_t snn_f32_to_e8m0_ceil(float x) {
    uint32_t u = f32_bits(x);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0xFF;
    if (a == 0) return 0x00;
    if (u & 0x80000000u) return 0xFF;
    if (a >= 0x7F000000u) return 0xFE; /* >= 2^127 (inf included): saturate */
    uint32_t e = a >> 23, m = a & 0x7FFFFFu;
    if (e == 0) return m > 0x400000u ? 0x01 : 0x00;
    return (uint8_t)(e + (m != 0));
}

uint8_t snn_f32_to_e8m0_floor(float x) {
    uint32_t u = f32_bits(x);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0xFF;
    if (a == 0) return 0x00;
    if (u & 0x80000000u) return 0xFF;
    if (a == 0x7F800000u) return 0xFE;
    return (uint8_t)(a >> 23); /* subnormals: 0 = 2^-127 */
}

uint8_t snn_e8m0_from_amax(float amax, float fmt_max) {
    /* TE multiplies by the rounded reciprocal; fp8.md §1.4 reports this equals the
     * exact quotient's ceil for every normal amax. */
    return snn_f32_to_e8m0_ceil(amax * (1.0f / fmt_max));
}

uint8_t snn_e8m0_from_amax_ocp(float amax, int emax_elem) {
    uint32_t u = f32_bits(amax);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u || ((u & 0x80000000u) && a != 0)) return 0xFF;
    if (a == 0) return 0x00;
    if (a == 0x7F800000u) return 0xFE;
    int ex = (int)(a >> 23) - 127; /* floor(log2(amax)) for normals */
    if ((a >> 23) == 0) ex = -127 + (31 - __builtin_clz(a)) - 22; /* subnormal */
    int e = ex - emax_elem + 127;
    if (e < 0) e = 0;
    if (e > 254) e = 254;
    return (uint8_t)e;
}

float snn_e8m0_inv_scale(uint8_t e) {
    if (e == 0xFF) return bits_f32(0x7FC00000u);
    if (e == 0xFE) return bits_f32(0x00400000u); /* 2^-127 */
    return bits_f32((uint32_t)(254u - e) << 23);
}

/* ---------------------------------------------------------------------------------- */
/* Round trip and array conversion                                                    */

float snn_round_to(snn_dtype t, float f, int saturate) {
    switch (t) {
    case SNN_F32: return f;
    case SNN_F16: return snn_f16_to_f32(snn_f32_to_f16_sat(f, saturate));
    case SNN_BF16: return snn_bf16_to_f32(snn_f32_to_bf16_sat(f, saturate));
    case SNN_F8E4M3: return snn_e4m3_to_f32(snn_f32_to_e4m3(f, saturate));
    case SNN_F8E5M2: return snn_e5m2_to_f32(snn_f32_to_e5m2(f, saturate));
    case SNN_E8M0: return snn_e8m0_to_f32(snn_f32_to_e8m0(f, saturate));
    default: return NAN;
    }
}

/* Conversions go through FP32, which holds every value of every other format exactly,
 * so src -> f32 -> dst rounds once. Work is split into blocks: a block of a non-FP32
 * source is widened into a stack buffer, then narrowed. Reading a whole block before
 * writing it also makes same-size in-place conversion safe. */
enum { CONVERT_BLOCK = 1024, CONVERT_PAR_MIN = 1 << 16 };

static void widen_block(snn_dtype t, const void *src, size_t off, float *out, size_t m) {
    switch (t) {
    case SNN_F32: memmove(out, (const float *)src + off, m * sizeof(float)); break;
    case SNN_F16: {
        const uint16_t *p = (const uint16_t *)src + off;
        for (size_t i = 0; i < m; i++) out[i] = snn_f16_to_f32(p[i]);
    } break;
    case SNN_BF16: {
        const uint16_t *p = (const uint16_t *)src + off;
        for (size_t i = 0; i < m; i++) out[i] = snn_bf16_to_f32(p[i]);
    } break;
    case SNN_F8E4M3: {
        const uint8_t *p = (const uint8_t *)src + off;
        for (size_t i = 0; i < m; i++) out[i] = snn_e4m3_to_f32(p[i]);
    } break;
    case SNN_F8E5M2: {
        const uint8_t *p = (const uint8_t *)src + off;
        for (size_t i = 0; i < m; i++) out[i] = snn_e5m2_to_f32(p[i]);
    } break;
    case SNN_E8M0: {
        const uint8_t *p = (const uint8_t *)src + off;
        for (size_t i = 0; i < m; i++) out[i] = snn_e8m0_to_f32(p[i]);
    } break;
    default: break;
    }
}

static void narrow_block(snn_dtype t, void *dst, size_t off, const float *in, size_t m, int sat) {
    switch (t) {
    case SNN_F32: memmove((float *)dst + off, in, m * sizeof(float)); break;
    case SNN_F16: {
        uint16_t *p = (uint16_t *)dst + off;
        for (size_t i = 0; i < m; i++) p[i] = snn_f32_to_f16_sat(in[i], sat);
    } break;
    case SNN_BF16: {
        uint16_t *p = (uint16_t *)dst + off;
        for (size_t i = 0; i < m; i++) p[i] = snn_f32_to_bf16_sat(in[i], sat);
    } break;
    case SNN_F8E4M3: {
        uint8_t *p = (uint8_t *)dst + off;
        for (size_t i = 0; i < m; i++) p[i] = snn_f32_to_e4m3(in[i], sat);
    } break;
    case SNN_F8E5M2: {
        uint8_t *p = (uint8_t *)dst + off;
        for (size_t i = 0; i < m; i++) p[i] = snn_f32_to_e5m2(in[i], sat);
    } break;
    case SNN_E8M0: {
        uint8_t *p = (uint8_t *)dst + off;
        for (size_t i = 0; i < m; i++) p[i] = snn_f32_to_e8m0(in[i], sat);
    } break;
    default: break;
    }
}

static void convert_block(snn_dtype dt, void *dst, snn_dtype st, const void *src, size_t off,
                          size_t m, int sat) {
    if (st == SNN_F32) {
        narrow_block(dt, dst, off, (const float *)src + off, m, sat);
    } else if (dt == SNN_F32) {
        widen_block(st, src, off, (float *)dst + off, m);
    } else {
        float buf[CONVERT_BLOCK];
        widen_block(st, src, off, buf, m);
        narrow_block(dt, dst, off, buf, m, sat);
    }
}

snn_status snn_convert(snn_dtype dst_type, void *dst, snn_dtype src_type, const void *src,
                       size_t n, unsigned flags) {
    if ((unsigned)dst_type >= SNN_DTYPE_COUNT || (unsigned)src_type >= SNN_DTYPE_COUNT)
        return snn_error(SNN_E_INVALID, "snn_convert: unknown numeric format (dst %d, src %d)",
                         (int)dst_type, (int)src_type);
    if (flags & ~(unsigned)SNN_CONVERT_SATURATE)
        return snn_error(SNN_E_INVALID,
                         "snn_convert: unknown flag bits 0x%x (only SNN_CONVERT_SATURATE exists)",
                         flags & ~(unsigned)SNN_CONVERT_SATURATE);
    if (n == 0) return SNN_OK;
    if (!dst || !src)
        return snn_error(SNN_E_INVALID, "snn_convert: NULL %s buffer for %zu values",
                         !dst ? "destination" : "source", n);
    size_t ds = traits[dst_type].size, ss = traits[src_type].size;
    if (n > SIZE_MAX / 4)
        return snn_error(SNN_E_INVALID, "snn_convert: %zu values is too many", n);
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    int overlap = d0 < s0 + n * ss && s0 < d0 + n * ds;
    if (overlap && !(d0 == s0 && ds == ss))
        return snn_error(SNN_E_INVALID,
                         "snn_convert: source and destination overlap; in-place conversion needs "
                         "dst == src and formats of one size (%s is %zu bytes, %s is %zu)",
                         traits[src_type].name, ss, traits[dst_type].name, ds);
    int sat = (flags & SNN_CONVERT_SATURATE) != 0;
    if (src_type == SNN_F32 && dst_type == SNN_F32) {
        if (dst != src) memcpy(dst, src, n * sizeof(float));
        return SNN_OK;
    }
    size_t nblocks = (n + CONVERT_BLOCK - 1) / CONVERT_BLOCK;
#pragma omp parallel for schedule(static) if (n > CONVERT_PAR_MIN)
    for (size_t b = 0; b < nblocks; b++) {
        size_t off = b * CONVERT_BLOCK;
        size_t m = n - off < CONVERT_BLOCK ? n - off : CONVERT_BLOCK;
        convert_block(dst_type, dst, src_type, src, off, m, sat);
    }
    return SNN_OK;
}
