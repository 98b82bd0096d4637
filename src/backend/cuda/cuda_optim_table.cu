/* The optimizer update of the op table (backend.h's snn_optim_update) on the GPU.
 *
 * Every element does exactly the rounded FP32 operations that backend.h writes down (the
 * rules of src/optim/optimizer.c): explicitly rounded intrinsics for every product, sum and
 * quotient (nvcc would otherwise contract a*b+c into an FMA where the CPU rounds twice),
 * __fmaf_rn exactly where the rule says fma, IEEE square root and division. The scalars
 * were computed on the host in double and rounded once, so the result is the CPU's, bit
 * for bit. The non-finite flag is one device int that any thread may set to 1 (the caller
 * zeroes it first). A range with a copy (snn_optim_copy) also writes its weights rounded to
 * the copy's type in the same pass (rn_narrow: what the cast kernel writes). */
#include <math.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_rn.h"
#include "backend/optim_step_body.h"
extern "C" {
#include "backend/backend.h"
}

namespace {

__device__ __forceinline__ bool opt_bad(float q) { return __fsub_rn(q, q) != 0.0f; } /* NaN or inf */

/* H: the type of the copy of the updated weights the kernel writes (void: none); d16 [n] of
 * type H and d32 [n] floats (either may be NULL) get round_H(w) (backend.h's snn_optim_copy). */
/* DEV: the step's scalars in device memory (backend.h's snn_optim_step): d->u, the clip factor
 * from d->sumsq (optim_step_body.h: the CPU's rule), the norm to d->norm, and no update when
 * *d->skip. */
struct DevScalars {
    const snn_optim_update *u;
    const double *sumsq;
    float max_norm;
    const int *skip;
    float *norm;
};

template <typename H, bool DEV>
__global__ void __launch_bounds__(256)
    optim_table_kernel(snn_optim_update u, DevScalars d, size_t n, float *__restrict__ w, const float *__restrict__ g,
                       float *__restrict__ s0, float *__restrict__ s1, const uint8_t *__restrict__ mask,
                       int *__restrict__ flag, H *__restrict__ d16, float *__restrict__ d32) {
    if constexpr (DEV) {
        float nv = 0.0f;
        const float gs = d.sumsq ? snn_clip_factor(*d.sumsq, d.max_norm, &nv) : 1.0f;
        if (d.norm && blockIdx.x == 0 && threadIdx.x == 0) *d.norm = nv;
        if (d.skip && *d.skip) return;
        u = *d.u;
        u.gscale = gs;
    }
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    bool bad = false;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const bool decay = !mask || mask[i] != 0;
        float p = w[i], gi = u.gscale != 1.0f ? __fmul_rn(u.gscale, g[i]) : g[i], q;
        if (!u.adam) {
            float d = (u.l2 && decay) ? __fmaf_rn(p, u.wd, gi) : gi;
            if (u.mom != 0.0f && s0) { /* no buffer: plain SGD, as the CPU */
                const float b = u.first ? d : __fmaf_rn(d, u.keep, __fmul_rn(s0[i], u.mom));
                s0[i] = b;
                d = u.nesterov ? __fmaf_rn(b, u.mom, d) : b;
            }
            q = __fmaf_rn(d, u.nlr, p);
        } else {
            if (u.l2 && decay) gi = __fmaf_rn(p, u.wd, gi);
            if (u.decoupled && decay) p = __fmul_rn(p, u.shrink);
            const float m = __fmaf_rn(gi, u.fc1, __fmul_rn(s0[i], u.fb1));
            const float v = __fmaf_rn(__fmul_rn(u.fc2, gi), gi, __fmul_rn(s1[i], u.fb2));
            s0[i] = m;
            s1[i] = v;
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), u.bc2_sqrt), u.eps);
            q = __fadd_rn(p, __fdiv_rn(__fmul_rn(u.neg_step, m), denom));
        }
        w[i] = q;
        if constexpr (!std::is_void<H>::value) {
            const H h = rn_narrow<H>(q);
            if (d16) d16[i] = h;
            if (d32) d32[i] = rn_widen(h);
        }
        bad |= opt_bad(q);
    }
    if (bad) *flag = 1;
}

template <typename H, bool DEV>
void launch(snn_cuda *c, const snn_optim_update *u, const DevScalars &d, size_t off, size_t n, float *w,
            const float *g, float *s0, float *s1, const uint8_t *mask, int *flag, void *d16, float *d32) {
    unsigned grid = snn_grid(n, 256), cap = (unsigned)snn_cuda_sm_count(c) * 8u;
    if (grid > cap) grid = cap;
    if (grid == 0) grid = 1; /* n = 0 with device scalars: the norm is still written */
    optim_table_kernel<H, DEV><<<grid, 256, 0, snn_cuda_stream_of(c)>>>(
        *u, d, n, w + off, g + off, s0 ? s0 + off : NULL, s1 ? s1 + off : NULL, mask ? mask + off : NULL, flag,
        (H *)d16, d32);
}

/* The update over [0, n) in ranges: those with a copy (sorted, disjoint, checked by the
 * caller) as launches of their own that write it, the gaps between them as plain ones. n = 0
 * still launches once when the norm is asked for. */
template <bool DEV>
void update_ranges(snn_cuda *c, const snn_optim_update *u, const snn_optim_copy *copies, int n_copies,
                   const DevScalars &d, size_t n, float *w, const float *g, float *s0, float *s1,
                   const uint8_t *mask, int *flag) {
    size_t at = 0;
    for (int k = 0; k <= n_copies; k++) {
        const snn_optim_copy *cp = k < n_copies ? &copies[k] : NULL;
        const size_t end = cp ? cp->off : n;
        if (end > at || (DEV && !cp && at == 0))
            launch<void, DEV>(c, u, d, at, end - at, w, g, s0, s1, mask, flag, NULL, NULL);
        if (!cp) break;
        if (cp->n) {
            if (cp->t == SNN_BF16)
                launch<__nv_bfloat16, DEV>(c, u, d, cp->off, cp->n, w, g, s0, s1, mask, flag, cp->dst16, cp->dst32);
            else
                launch<__half, DEV>(c, u, d, cp->off, cp->n, w, g, s0, s1, mask, flag, cp->dst16, cp->dst32);
        }
        at = cp->off + cp->n;
    }
}

} // namespace

/* Enqueue the update of n values (arguments checked by the caller, cuda_backend.cu); flag:
 * a device int, zeroed by the caller, set to 1 if an updated weight is NaN or infinite. */
snn_status snn_cuda_table_optim_update(snn_cuda *c, const snn_optim_update *u, size_t n, float *w,
                                       const float *g, float *s0, float *s1, const uint8_t *mask,
                                       int *flag) {
    update_ranges<false>(c, u, u->copies, u->n_copies, DevScalars{}, n, w, g, s0, s1, mask, flag);
    SNN_CU_LAUNCHED("optim_update");
    return SNN_OK;
}

/* optim_step (backend.h's snn_optim_step, checked by the caller): the same update with its
 * scalars read on the device; s->nonfinite zeroed by the caller. */
snn_status snn_cuda_table_optim_step(snn_cuda *c, const snn_optim_step *s) {
    const DevScalars d{s->u, s->sumsq, s->max_norm, s->skip, s->norm};
    snn_optim_update dummy;
    memset(&dummy, 0, sizeof dummy);
    update_ranges<true>(c, &dummy, s->copies, s->copies ? s->n_copies : 0, d, s->n, s->w, s->g, s->s0, s->s1,
                        s->decay_mask, s->nonfinite);
    SNN_CU_LAUNCHED("optim_step");
    return SNN_OK;
}
