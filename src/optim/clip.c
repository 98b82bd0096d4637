/* Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_ with the L2 norm), on the
 * device of the gradients: the sum of squares and the scaling are op-table entries. */
#include <math.h>

#include "backend/backend.h"
#include "backend/optim_step_body.h"
#include "core/error_internal.h"
#include "optim/optim_internal.h"
#include "snn/optim.h"

snn_status snn_clip_coef_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out,
                            float *coef_out) {
    *norm_out = 0.0f;
    *coef_out = 1.0f;
    if (!grads || n == 0) return SNN_OK;
    double total = 0.0;
    SNN_TRY(be->sumsq(be, grads, n, &total));
    /* the rule the device step runs too (optim_step_body.h); a negative or NaN limit measures */
    const float coef = snn_clip_factor(total, max_norm, norm_out);
    if (coef > 0.0f) *coef_out = coef;
    /* a coefficient that underflowed to zero is outside the update's (0, 1]: scaled here */
    else SNN_TRY(be->scale(be, grads, grads, coef, n));
    return SNN_OK;
}

snn_status snn_clip_grad_norm_on(const snn_backend *be, float *grads, size_t n, float max_norm, float *norm_out) {
    float coef = 1.0f;
    SNN_TRY(snn_clip_coef_on(be, grads, n, max_norm, norm_out, &coef));
    if (coef < 1.0f) SNN_TRY(be->scale(be, grads, grads, coef, n));
    return SNN_OK;
}

float snn_clip_grad_norm(float *grads, size_t n, float max_norm) {
    float norm = 0.0f;
    (void)snn_clip_grad_norm_on(snn_backend_cpu(), grads, n, max_norm, &norm);
    return norm;
}
