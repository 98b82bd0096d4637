/* MXFP8 (OCP MX: E4M3/E5M2 elements, one E8M0 power-of-two scale per 32 consecutive elements
 * along a GEMM's reduction dimension) quantise-dequantise on the device, bit-identical to the
 * CPU's snn_fp8_prepare_operand with the mxfp8 recipe (out_qdq). The GPU runner emulates
 * mxfp8 training with it on any GPU: each operand is quantised per the CPU's rule and
 * dequantised into FP32 in the same kernel, then an ordinary FP32 GEMM (TF32 off) multiplies
 * the dequantised values. Why FP32 and not BF16: q·X has at most 4 significant bits, but an
 * all-tiny block gets X down to 2^-127, where q·X can fall below BF16's smallest subnormal
 * (2^-133) — not exact in BF16, exact in FP32 (down to 2^-143 >= 2^-149). C-callable. */
#ifndef SNN_CUDA_MXFP8_H
#define SNN_CUDA_MXFP8_H

#include "snn/cuda.h"
#include "snn/dtype.h"
#include "snn/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst [rows][cols] (row-major FP32) = qdq of the token-major [rows][cols] view of src with
 * element format t (SNN_F8E4M3 or SNN_F8E5M2). colwise 0: one scale per 1x32 block along a
 * row; 1: per 32x1 block along a column. Partial blocks at the edges are blocks of their own
 * (as the CPU's). L == 1: src is [rows][cols]; L > 1: src is a Conv1d activation
 * [rows/L][cols][L] (token r = (b, l)). raw != 0 copies the view without quantising (spike
 * inputs, which the CPU multiplies as they are). Asynchronous on the context's stream,
 * graph-capturable, no allocation. */
snn_status snn_cuda_mxfp8_qdq(snn_cuda *c, snn_dtype t, int colwise, const float *src, int rows,
                              int cols, int L, int raw, float *dst);

#ifdef __cplusplus
}
#endif
#endif
