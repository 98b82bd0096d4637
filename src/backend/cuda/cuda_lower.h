/* Helpers shared by the convolution-lowering and pooling kernels (cuda_conv.cu,
 * cuda_pool.cu): fast division by run-time constants, output sizes, launch grids and the
 * shared argument checks. Private to the CUDA backend. */
#ifndef SNN_CUDA_LOWER_H
#define SNN_CUDA_LOWER_H

#include <limits.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"

#include "backend/cuda/cuda_fastdiv.h" /* Div, div_make, dv */

static inline int out_size(int n, int k, int stride, int pad) { return (n + 2 * pad - k) / stride + 1; }

static inline int fits_int(long long v) { return v >= 0 && v <= (long long)INT_MAX; }

static inline unsigned capped_grid(snn_cuda *c, size_t work, unsigned per_block, unsigned per_sm) {
    unsigned g = snn_grid(work, per_block), cap = (unsigned)snn_cuda_sm_count(c) * per_sm;
    if (cap < 1) cap = 1;
    return g < cap ? g : cap;
}

/* Shared checks of the image geometry (im2col, col2im, pooling). */
static inline snn_status check_geom(const char *what, int B, int C, int H, int W, int k, int stride,
                             int pad) {
    if (B <= 0 || C <= 0 || H <= 0 || W <= 0 || k <= 0 || stride <= 0 || pad < 0)
        return snn_error(SNN_E_INVALID,
                         "%s needs positive B, C, H, W, kernel and stride and padding >= 0 "
                         "(got B=%d C=%d H=%d W=%d kernel=%d stride=%d padding=%d)",
                         what, B, C, H, W, k, stride, pad);
    if (H + 2 * pad < k || W + 2 * pad < k)
        return snn_error(SNN_E_INVALID, "%s: kernel %d with padding %d does not fit a %dx%d image",
                         what, k, pad, H, W);
    const long long Ho = out_size(H, k, stride, pad), Wo = out_size(W, k, stride, pad);
    if (!fits_int((long long)B * C * H * W) || !fits_int((long long)B * C * Ho * Wo) ||
        !fits_int((long long)C * k * k))
        return snn_error(SNN_E_INVALID, "%s: tensor of B=%d C=%d H=%d W=%d is too large (2^31 "
                         "elements at most)", what, B, C, H, W);
    return SNN_OK;
}

static inline snn_status check_type16(const char *what, snn_dtype t) {
    if (t != SNN_F32 && t != SNN_BF16 && t != SNN_F16)
        return snn_error(SNN_E_INVALID, "%s: output type %s is not supported (F32, BF16 or F16)",
                         what, snn_cuda_dtype_name(t));
    return SNN_OK;
}

#endif
