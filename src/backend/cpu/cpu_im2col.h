/* im2col / col2im for FP32 NCHW images (one sample at a time), the CPU building blocks
 * of Conv1d/Conv2d. A 1-D convolution is the 2-D case with H = 1, kh = 1, sh = 1, ph = 0.
 *
 * Column layout: row r = (c * kh + i) * kw + j holds, for every output position
 * p = oh * Wo + ow, the input value x[c][oh*sh - ph + i][ow*sw - pw + j] (0 outside the
 * image). Rows are Ho*Wo long and `ld` apart, so several samples can sit side by side in
 * one [C*kh*kw][n*Ho*Wo] matrix (sample s at column offset s*Ho*Wo) and share one GEMM. */
#ifndef SNN_CPU_IM2COL_H
#define SNN_CPU_IM2COL_H

#include <stddef.h>

#include "backend/conv_geom.h"

/* snn_conv_geom and snn_conv_geom_finish live in backend/conv_geom.h (the op table uses them). */

/* col[r * ld + p] for one sample x[C][H][W]; every entry of the C*kh*kw rows is written. */
void snn_im2col_f32(const snn_conv_geom *g, const float *x, float *col, size_t ld);
/* The adjoint: dx[C][H][W] = sum of the column entries that read each pixel.
 * Overwrites dx (pixels no window touches become 0). */
void snn_col2im_f32(const snn_conv_geom *g, const float *col, size_t ld, float *dx);

#endif
