/* The gradient-clip rule of the optimizer step, for src/optim/clip.c's host path and both
 * tables' optim_step entry: the same float operations, rounded to nearest, never contracted,
 * so the CPU and a CUDA device compute the same factor (torch.nn.utils.clip_grad_norm_: the
 * norm in FP32 from the double sum of squares, coef = max_norm / (norm + 1e-6), used below
 * 1). Header-only, C and CUDA. */
#ifndef SNN_BACKEND_OPTIM_STEP_BODY_H
#define SNN_BACKEND_OPTIM_STEP_BODY_H

#include <math.h>

#include "core/mathd.h"

/* The norm (float)√sumsq into *norm; returns the gradient's factor: max_norm / (norm + 1e-6f)
 * when max_norm >= 0 (a negative or NaN limit only measures), the norm is finite and the
 * factor is below 1, else 1. A factor of 0 (a zero limit, or an underflow) is returned as 0:
 * every gradient times 0, as torch does. */
SNN_MATHD_HD float snn_clip_factor(double sumsq, float max_norm, float *norm) {
#ifdef __CUDA_ARCH__
    const float nv = __double2float_rn(__dsqrt_rn(sumsq));
    const int finite = isfinite(nv);
    const float coef = __fdiv_rn(max_norm, __fadd_rn(nv, 1e-6f));
#else
    const float nv = (float)sqrt(sumsq);
    const int finite = isfinite(nv);
    const float coef = max_norm / (nv + 1e-6f);
#endif
    *norm = nv;
    if (!(max_norm >= 0.0f) || !finite) return 1.0f;
    return coef < 1.0f ? (coef > 0.0f ? coef : 0.0f) : 1.0f;
}

#endif
