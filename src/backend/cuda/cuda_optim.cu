/* SGD (momentum, nesterov, L2 decay), Adam and AdamW on the flat FP32 parameter buffer,
 * following src/optim/optimizer.c operation for operation: the same FP32 roundings, an FMA
 * exactly where the CPU code uses one (explicit intrinsics: nvcc would otherwise contract
 * other products and sums too), step coefficients computed in double and rounded once.
 *
 * The per-step scalars (lr, bias corrections, gradient scale, skip) are read from device
 * memory inside the kernel, so a captured CUDA graph replays whatever the host wrote there
 * before the launch. Differences from the CPU optimizer:
 *  - The SGD momentum buffer starts at zero instead of being set to the first gradient: with
 *    dampening 0 (the only SGD form here) momentum*0 + d = d exactly, so it is the same.
 *  - Through snn_cuda_opt_update, Adam's bc1 and bc2 arrive as FP32 (the CPU keeps them in
 *    double), which can move lr/bc1 and sqrt(bc2) by one FP32 ulp. The model runner instead
 *    passes its completed-step count in device memory (snn_gm_opt_update): the kernel
 *    computes the corrections in double from it, and the count advances only when the step
 *    is not skipped, so a skipped FP16 step does not advance Adam's t (GradScaler's rule). */
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"
#include "backend/cuda/cuda_model_internal.h"

namespace {

struct opt_k {
    int kind, nesterov, l2, decoupled, has_mom;
    float mom, wd, fb1, fc1, fb2, fc2, eps;
};

__global__ void __launch_bounds__(256)
    opt_kernel(opt_k k, const snn_cuda_step_scalars *__restrict__ s, size_t n, float *w,
               const float *__restrict__ grad, float *st0, float *st1,
               const uint8_t *__restrict__ mask, const long long *__restrict__ steps) {
    if (s->skip) return; /* e.g. an FP16 overflow: nothing changes */
    const float lr = s->lr, gs = s->grad_scale;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if (k.kind == 0) {
        const float nlr = -lr;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
            const float p = w[i];
            float d = __fmul_rn(grad[i], gs);
            if (k.l2 && (!mask || mask[i])) d = __fmaf_rn(p, k.wd, d);
            if (k.has_mom) {
                /* torch: buf = momentum*buf + (1 - dampening)*d with dampening 0 */
                const float b = __fadd_rn(__fmul_rn(st0[i], k.mom), d);
                st0[i] = b;
                d = k.nesterov ? __fmaf_rn(b, k.mom, d) : b;
            }
            w[i] = __fmaf_rn(d, nlr, p);
        }
        return;
    }
    /* Adam / AdamW coefficients, in double like the CPU code (and Python); t = completed
     * steps + 1 when the count lives on the device */
    double bc1 = s->bc1, bc2 = s->bc2;
    if (steps) {
        const double t = (double)(*steps + 1);
        bc1 = 1.0 - pow((double)k.fb1, t);
        bc2 = 1.0 - pow((double)k.fb2, t);
    }
    const float neg_step = (float)(-((double)lr / bc1));
    const float bc2_sqrt = (float)sqrt(bc2);
    const float shrink = (float)(1.0 - (double)lr * (double)k.wd);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = w[i];
        float g = __fmul_rn(grad[i], gs);
        const bool decay = !mask || mask[i];
        if (k.l2 && decay) g = __fmaf_rn(p, k.wd, g);
        if (k.decoupled && decay) p = __fmul_rn(p, shrink);
        const float m = __fmaf_rn(g, k.fc1, __fmul_rn(st0[i], k.fb1));
        const float v = __fmaf_rn(__fmul_rn(k.fc2, g), g, __fmul_rn(st1[i], k.fb2));
        st0[i] = m;
        st1[i] = v;
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), k.eps);
        w[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(neg_step, m), denom));
    }
}

/* One thread, after the update: a step that was not skipped is complete. */
__global__ void opt_count_kernel(const snn_cuda_step_scalars *s, long long *steps) {
    if (!s->skip) *steps += 1;
}

} // namespace

static snn_status opt_update(snn_cuda *c, const snn_cuda_opt *o, const snn_cuda_step_scalars *s_dev,
                             size_t n, float *w, const float *grad, float *state,
                             const uint8_t *decay_mask, long long *steps) {
    if (!c || !o || !s_dev || !w || !grad)
        return snn_error(SNN_E_INVALID, "opt_update: NULL context, options, scalars, weights or "
                                        "gradients");
    if (o->kind < 0 || o->kind > 2)
        return snn_error(SNN_E_INVALID, "opt_update: unknown optimizer kind %d (0 SGD, 1 Adam, "
                                        "2 AdamW)",
                         o->kind);
    if (!isfinite(o->weight_decay) || o->weight_decay < 0)
        return snn_error(SNN_E_INVALID, "opt_update: weight decay must be finite and >= 0 (got %g)",
                         (double)o->weight_decay);
    opt_k k = {};
    k.kind = o->kind;
    k.wd = o->weight_decay;
    if (o->kind == 0) {
        if (!isfinite(o->momentum) || o->momentum < 0)
            return snn_error(SNN_E_INVALID, "opt_update: momentum must be finite and >= 0 (got %g)",
                             (double)o->momentum);
        if (o->nesterov && !(o->momentum > 0))
            return snn_error(SNN_E_INVALID, "opt_update: nesterov needs momentum > 0");
        if (o->momentum != 0 && !state)
            return snn_error(SNN_E_INVALID, "opt_update: SGD with momentum needs a state buffer of "
                                            "n floats");
        k.has_mom = o->momentum != 0;
        k.mom = o->momentum;
        k.nesterov = o->nesterov != 0;
        k.l2 = o->weight_decay != 0;
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            return snn_error(SNN_E_INVALID, "opt_update: betas must be in [0, 1) (got %g, %g)",
                             (double)o->beta1, (double)o->beta2);
        if (!isfinite(o->eps) || !(o->eps > 0))
            return snn_error(SNN_E_INVALID, "opt_update: eps must be finite and > 0 (got %g)",
                             (double)o->eps);
        if (!state)
            return snn_error(SNN_E_INVALID, "opt_update: Adam needs a state buffer of 2n floats");
        const double b1 = o->beta1, b2 = o->beta2;
        k.fb1 = (float)b1;
        k.fc1 = (float)(1.0 - b1);
        k.fb2 = (float)b2;
        k.fc2 = (float)(1.0 - b2);
        k.eps = o->eps;
        k.l2 = o->kind == 1 && o->weight_decay != 0;
        k.decoupled = o->kind == 2 && o->weight_decay != 0;
    }
    if (n == 0) return SNN_OK; /* the runner always has n > 0 (padded layout) */
    unsigned g = snn_grid(n, 256), cap = (unsigned)snn_cuda_sm_count(c) * 8u;
    if (g > cap) g = cap;
    float *st1 = o->kind == 0 ? nullptr : state + n;
    opt_kernel<<<g, 256, 0, snn_cuda_stream_of(c)>>>(k, s_dev, n, w, grad, state, st1, decay_mask,
                                                     steps);
    SNN_CU_LAUNCHED("opt_update");
    if (steps) {
        opt_count_kernel<<<1, 1, 0, snn_cuda_stream_of(c)>>>(s_dev, steps);
        SNN_CU_LAUNCHED("optimizer step count");
    }
    return SNN_OK;
}

extern "C" snn_status snn_cuda_opt_update(snn_cuda *c, const snn_cuda_opt *o,
                                          const snn_cuda_step_scalars *s_dev, size_t n, float *w,
                                          const float *grad, float *state,
                                          const uint8_t *decay_mask) {
    return opt_update(c, o, s_dev, n, w, grad, state, decay_mask, NULL);
}

snn_status snn_gm_opt_update(snn_cuda *c, const snn_cuda_opt *o, const snn_cuda_step_scalars *s_dev,
                             size_t n, float *w, const float *grad, float *state,
                             const uint8_t *decay_mask, long long *steps) {
    if (!steps) return snn_error(SNN_E_INVALID, "opt_update: the model's step counter is NULL");
    return opt_update(c, o, s_dev, n, w, grad, state, decay_mask, steps);
}
