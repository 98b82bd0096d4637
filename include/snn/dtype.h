/* snn — numeric formats and exact conversions between them.
 *
 * F8E4M3 is the "fn" variant (no infinities, max 448, NaN = S.1111.111).
 * F8E5M2 follows IEEE conventions (inf and NaN exist, max finite 57344).
 * E8M0 is the unsigned OCP MX scale format: value 2^(e-127), e = 0..254, 0xFF is NaN.
 * Narrowing rounds to nearest, ties to even. Without SNN_CONVERT_SATURATE an
 * out-of-range value becomes inf (E5M2, F16) or NaN (E4M3, which has no inf);
 * with it, it clamps to the largest finite value of that sign (NaN stays NaN). */
#ifndef SNN_DTYPE_H
#define SNN_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_dtype {
    SNN_F32 = 0,
    SNN_F16 = 1,
    SNN_BF16 = 2,
    SNN_F8E4M3 = 3,
    SNN_F8E5M2 = 4,
    SNN_E8M0 = 5,
    SNN_DTYPE_COUNT
} snn_dtype;

enum { SNN_CONVERT_SATURATE = 1u };

/* Convert n values from src (src_type) to dst (dst_type). Buffers must not overlap
 * unless dst == src and both types have the same size. */
snn_status snn_convert(snn_dtype dst_type, void *dst, snn_dtype src_type, const void *src,
                       size_t n, unsigned flags);

size_t snn_dtype_size(snn_dtype t);        /* bytes per element, 0 for an unknown type */
const char *snn_dtype_name(snn_dtype t);   /* "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "e8m0" */
/* Parse a name ("bf16", "float8_e4m3fn", "torch.bfloat16", ...), case-insensitive. */
snn_status snn_dtype_from_name(const char *name, snn_dtype *out);
double snn_dtype_max(snn_dtype t);         /* largest finite value */

/* Scalar conversions (the building blocks of snn_convert). */
float snn_f16_to_f32(uint16_t h);
uint16_t snn_f32_to_f16(float f);          /* RNE, overflow to inf */
float snn_bf16_to_f32(uint16_t h);
uint16_t snn_f32_to_bf16(float f);         /* RNE, overflow to inf */
float snn_e4m3_to_f32(uint8_t b);
uint8_t snn_f32_to_e4m3(float f, int saturate);
float snn_e5m2_to_f32(uint8_t b);
uint8_t snn_f32_to_e5m2(float f, int saturate);
float snn_e8m0_to_f32(uint8_t b);
uint8_t snn_f32_to_e8m0(float f, int saturate);
/* Round an FP32 value to the nearest value of type t and back (emulation helper). */
float snn_round_to(snn_dtype t, float f, int saturate);

#ifdef __cplusplus
}
#endif
#endif
