/* FP8 recipes on the CPU: scaling arithmetic, recipe state and GEMM-operand quantisation.
 * (Internal to the library; reference fp8.md §1-4.)
 *
 * Vocabulary (fp8.md §0): the quantisation scale s multiplies before the cast,
 * q = sat_rne_fp8(x * s); the dequantisation factor d = 1/s (TE's scale_inv, what a
 * GEMM is given) multiplies after widening, x_hat = float(q) * d.
 *
 * Roles (which FP8 format a GEMM operand uses; "hybrid" = TE's default for delayed and
 * current scaling, block and mxfp8 default to E4M3 everywhere):
 *   SNN_FP8_ROLE_INPUT   forward input X of a Linear (E4M3)
 *   SNN_FP8_ROLE_WEIGHT  weight W (E4M3; 128x128 tiles under the block recipe)
 *   SNN_FP8_ROLE_GRAD    output gradient dY in the backward pass (E5M2 under hybrid,
 *                        E4M3 under the e4m3 format)
 * Usage says along which dimension the consuming GEMM reduces, so that block scales
 * run along the reduction dimension (fp8.md §4.1):
 *   SNN_FP8_ROWWISE  operand [rows, cols] reduced along cols: X and W in fprop
 *                    (Y = X W^T), dY in dgrad (dX = dY W)
 *   SNN_FP8_COLWISE  reduced along rows: W in dgrad, X and dY in wgrad (dW = dY^T X)
 * Per-tensor recipes (delayed, current) give the same result for both usages.
 *
 * How a converted Linear uses this (CPU emulation: quantise-dequantise, then the FP32
 * GEMM; the integrator's notes in the precision report say the same):
 *   forward:  Xq = prepare(st_x, INPUT, ROWWISE, x); Wq = prepare(st_w, WEIGHT, ROWWISE, W);
 *             y = Xq Wq^T (+ bias in FP32)
 *   backward: dYr = prepare(st_dy, GRAD, ROWWISE, dy); Wc = prepare(st_w, WEIGHT, COLWISE, W);
 *             dx = dYr Wc
 *             dYc = prepare(st_dy, GRAD, COLWISE, dy); Xc = prepare(st_x, INPUT, COLWISE, x);
 *             dW += dYc^T Xc            (db from the unquantised dy, in FP32)
 *   after the optimizer step (delayed only; a no-op otherwise): snn_fp8_state_update on
 *   st_x, st_w and st_dy.
 */
#ifndef SNN_PRECISION_FP8_H
#define SNN_PRECISION_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "snn/dtype.h"
#include "snn/error.h"
#include "snn/precision.h"

typedef enum snn_fp8_role {
    SNN_FP8_ROLE_INPUT = 0,
    SNN_FP8_ROLE_WEIGHT = 1,
    SNN_FP8_ROLE_GRAD = 2,
    SNN_FP8_ROLE_COUNT
} snn_fp8_role;

typedef enum snn_fp8_usage { SNN_FP8_ROWWISE = 0, SNN_FP8_COLWISE = 1 } snn_fp8_usage;

/* A resolved recipe (never "auto"), built once from the config. */
typedef struct snn_fp8_recipe_params {
    snn_fp8_recipe recipe;  /* DELAYED, CURRENT, BLOCK or MXFP8 */
    snn_dtype fwd_dtype;    /* SNN_F8E4M3 */
    snn_dtype bwd_dtype;    /* SNN_F8E5M2 (hybrid) or SNN_F8E4M3 */
    int history_len;        /* delayed: amax history rows (TE amax_history_len); else 0 */
    snn_amax_compute algo;  /* delayed */
    int margin;             /* delayed */
    int pow2_scales;        /* current: cfg knob; block: !block_fp32_scales; mxfp8: 1 */
    int block_len;          /* 128 (block), 32 (mxfp8), 0 (per tensor) */
    snn_dtype hp_dtype;     /* dtype of the high-precision source (block: a scale that
                               overflows becomes this type's max); SNN_F32 by default */
} snn_fp8_recipe_params;

/* mode must be fp8. cc_major/cc_minor resolve "auto" (0 = the CPU, resolved as Hopper). */
snn_status snn_fp8_recipe_params_init(snn_fp8_recipe_params *p, const snn_precision_config *cfg,
                                      int cc_major, int cc_minor);
snn_dtype snn_fp8_role_dtype(const snn_fp8_recipe_params *p, snn_fp8_role role);
float snn_fp8_max(snn_dtype fp8); /* 448 or 57344; 0 for a non-FP8 type */

/* Per-tensor recipe state (one per GEMM operand of a module: its input, weight and output
 * gradient). Delayed scaling keeps TE's layout: amax_history[0] is the running max of
 * this step's quantisations, amax_history[1..len-1] are the previous steps, oldest first.
 * For data parallel training, all-reduce (MAX) amax_history[0] across ranks before
 * snn_fp8_state_update. */
typedef struct snn_fp8_tensor_state {
    snn_fp8_role role;
    snn_dtype dtype;       /* this tensor's FP8 format */
    float scale;           /* delayed: scale for every quantisation until the next update
                              (1 before the first update, as in TE) */
    float scale_inv;       /* 1/scale, IEEE round to nearest */
    int history_len;       /* 0 for stateless recipes */
    float *amax_history;   /* [history_len] (malloc'd by init) */
    float last_amax;       /* amax of the latest quantisation (every recipe; per-tensor
                              amax, or the largest block amax) */
    long long updates;     /* delayed: updates that rolled the history */
} snn_fp8_tensor_state;

snn_status snn_fp8_state_init(snn_fp8_tensor_state *st, const snn_fp8_recipe_params *p,
                              snn_fp8_role role);
void snn_fp8_state_free(snn_fp8_tensor_state *st);
/* Delayed scaling, after the step (TE's update; fp8.md §3.1): with c = amax_history[0]:
 *   c == 0 (the tensor was not quantised this step): nothing changes;
 *   else window amax a = max(c, history[1..len-1]) ("max") or c ("most_recent"), the
 *   history rolls (oldest drops out, c becomes the newest, [0] = 0), and
 *   scale = (fp8_max * 2^-margin) / a if a is finite and > 0 (FLT_MAX if that is inf),
 *   else the scale is kept; scale_inv = 1/scale.
 * A no-op returning SNN_OK for the other recipes. */
snn_status snn_fp8_state_update(snn_fp8_tensor_state *st, const snn_fp8_recipe_params *p);
/* Restore from a checkpoint: history has history_len values; the scale must be finite > 0. */
snn_status snn_fp8_state_load(snn_fp8_tensor_state *st, float scale, const float *history,
                              int history_len);

/* ---- scaling arithmetic (fp8.md §2) ------------------------------------------------- */

/* max |x| ignoring NaN (as fmaxf does); 0 for n == 0. Inf propagates. */
float snn_fp8_amax(const float *x, size_t n);
/* TE's compute_scale_from_amax with amax_epsilon 0 (current and block scaling):
 * amax == 0, inf or NaN -> 1; s = fp8_max / amax (FP32 division); s == inf ->
 * value_for_inf; pow2 -> s rounded down to a power of two (mantissa bits dropped). */
float snn_fp8_scale_from_amax(float amax, float fp8_max, int pow2, float value_for_inf);
/* Quantise n values with one scale: codes[i] = sat_rne(x[i] * scale) in `fp8`,
 * qdq[i] = decode(codes[i]) * scale_inv. Either output may be NULL. */
void snn_fp8_quantize(snn_dtype fp8, const float *x, size_t n, float scale, float scale_inv,
                      uint8_t *codes, float *qdq);

/* Where the scales of an operand sit: element (i, j) of [rows, cols] uses
 * scale_inv[(i / block_rows) * grid_cols + j / block_cols]; grid_rows * grid_cols
 * scales. Per tensor: one block of rows x cols. Block recipe: 1x128 (ROWWISE) or 128x1
 * (COLWISE) for inputs and gradients, 128x128 for weights. mxfp8: 1x32 or 32x1.
 * Partial edge blocks (a dimension that is not a multiple of the block) take the amax of
 * the elements they have, which equals zero padding (DeepGEMM pads K with zeros; TE's
 * scale shapes use ceil(dim/block)). */
typedef struct snn_fp8_scale_layout {
    int block_rows, block_cols, grid_rows, grid_cols;
} snn_fp8_scale_layout;
snn_status snn_fp8_scale_layout_of(const snn_fp8_recipe_params *p, snn_fp8_role role,
                                   snn_fp8_usage usage, int rows, int cols,
                                   snn_fp8_scale_layout *out);
/* Transformer Engine's shape rule for the recipe (fp8.md §3.3, §3.4, §4.3): per tensor,
 * both dims multiples of 16 (TE asks rows % 8 and cols % 16, but wgrad reduces over the
 * rows, which then need % 16 too); block: multiples of 128; mxfp8: multiples of 32.
 * 1 if the operand meets it. The CPU path works for any shape; a GPU path may need it. */
int snn_fp8_shape_ok(const snn_fp8_recipe_params *p, int rows, int cols);

/* ---- the GEMM operand --------------------------------------------------------------- */

/* Quantise a row-major [rows, cols] operand for one GEMM usage (see the top of this file).
 * st: the operand's state (required for delayed scaling, where it supplies the scale and
 * records the amax; optional otherwise, then it records last_amax). Outputs, any may be
 * NULL but not all: out_qdq [rows, cols] dequantised values (what the FP8 GEMM
 * multiplies), out_codes [rows, cols] FP8 codes in snn_fp8_role_dtype(p, role),
 * out_scale_inv the dequantisation factors in snn_fp8_scale_layout_of order (mxfp8:
 * exact powers of two 2^(e-127) of the E8M0 scales). */
snn_status snn_fp8_prepare_operand(snn_fp8_tensor_state *st, snn_fp8_role role,
                                   const snn_fp8_recipe_params *p, snn_fp8_usage usage,
                                   const float *x, int rows, int cols, float *out_qdq,
                                   uint8_t *out_codes, float *out_scale_inv);
/* The block recipes' quantise-dequantise over an explicit layout L (the op table's fp8_qdq on
 * the CPU): returns the largest block amax. */
float snn_fp8_quantize_blocks(const snn_fp8_recipe_params *p, snn_dtype t, const snn_fp8_scale_layout *L,
                              const float *x, int rows, int cols, float *qdq);
/* The same, ROWWISE, dequantised values only: the operand of "qdq -> FP32 GEMM". */
snn_status snn_fp8_qdq_gemm_operand(snn_fp8_tensor_state *st, snn_fp8_role role,
                                    const snn_fp8_recipe_params *p, const float *x, int rows,
                                    int cols, float *out_qdq);

#endif
