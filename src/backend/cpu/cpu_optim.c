/* Optimizer updates of the CPU table: the per-element rules of backend.h's snn_optim_update
 * (torch.optim 1.13, operation for operation; the scalars come from src/optim/optimizer.c).
 * torch's add(a, b, alpha) is fmadd(b, alpha, a) in its AVX2 kernel (addcmul likewise).
 * Without hardware FMA, fmaf is a slow libm call; the product of two floats is exact in
 * double, so one double add and a rounding to float give the fused result except in
 * vanishingly rare double-rounding ties, and it still vectorises. */
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"

#if defined(__FMA__)
#define OPT_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define OPT_FMA(a, b, c) ((float)((double)(a) * (double)(b) + (double)(c)))
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define OPT_PAR_MIN 32768

/* x - x is 0 for a finite x and NaN for an infinity or a NaN: one subtraction and an
 * unordered compare per element, folded into an OR, flags a diverged update. */
#define OPT_BAD(x) (((x) - (x)) != 0.0f)

static int decays(const uint8_t *dm, size_t i) { return dm ? dm[i] != 0 : 1; }

static int sgd_update(const snn_optim_update *u, size_t n, float *restrict p, const float *restrict g,
                      float *restrict buf, const uint8_t *restrict dm) {
    const float wd = u->wd, mom = u->mom, keep = u->keep, nlr = u->nlr, gs = u->gscale;
    const int l2 = u->l2, nest = u->nesterov, first = u->first, scaled = gs != 1.0f;
    int bad = 0;
    if (mom == 0 || !buf) {
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (n >= OPT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            const float gi = scaled ? gs * g[i] : g[i];
            float d = (l2 && decays(dm, i)) ? OPT_FMA(p[i], wd, gi) : gi;
            float q = OPT_FMA(d, nlr, p[i]);
            p[i] = q;
            bad |= OPT_BAD(q);
        }
        return bad;
    }
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (n >= OPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float gi = scaled ? gs * g[i] : g[i];
        float d = (l2 && decays(dm, i)) ? OPT_FMA(p[i], wd, gi) : gi;
        float b = first ? d : OPT_FMA(d, keep, buf[i] * mom);
        buf[i] = b;
        d = nest ? OPT_FMA(b, mom, d) : b;
        float q = OPT_FMA(d, nlr, p[i]);
        p[i] = q;
        bad |= OPT_BAD(q);
    }
    return bad;
}

static inline float adam_one(const snn_optim_update *a, float pi, float gi, float *mi_io, float *vi_io, int decay) {
    if (a->gscale != 1.0f) gi = a->gscale * gi;
    if (a->l2 && decay) gi = OPT_FMA(pi, a->wd, gi);
    if (a->decoupled && decay) pi = pi * a->shrink;
    float mi = OPT_FMA(gi, a->fc1, *mi_io * a->fb1);
    /* torch's addcmul kernel: fma(value * t1, t2, self) */
    float vi = OPT_FMA(a->fc2 * gi, gi, *vi_io * a->fb2);
    *mi_io = mi;
    *vi_io = vi;
    float denom = sqrtf(vi) / a->bc2_sqrt + a->eps;
    /* torch addcdiv: self + value * t1 / t2 */
    return pi + a->neg_step * mi / denom;
}

/* One thread's slice. GCC will not vectorise sqrtf unless the whole build uses
 * -fno-math-errno, so with AVX2+FMA the body is written with intrinsics; every lane does
 * exactly the rounded operations of adam_one (vsqrtps and vdivps are IEEE-exact), so the
 * two paths give identical bits. */
static int adam_range(const snn_optim_update *a, float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, const uint8_t *restrict dm, size_t lo, size_t hi) {
    size_t i = lo;
    int bad = 0;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 fb1 = _mm256_set1_ps(a->fb1), fc1 = _mm256_set1_ps(a->fc1);
    const __m256 fb2 = _mm256_set1_ps(a->fb2), fc2 = _mm256_set1_ps(a->fc2);
    const __m256 nstep = _mm256_set1_ps(a->neg_step), bc2s = _mm256_set1_ps(a->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(a->eps), wd = _mm256_set1_ps(a->wd);
    const __m256 shrink = _mm256_set1_ps(a->shrink), gs = _mm256_set1_ps(a->gscale);
    const int scaled = a->gscale != 1.0f;
    const __m256i zero = _mm256_setzero_si256();
    __m256 badv = _mm256_setzero_ps();
    for (; i + 8 <= hi; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i), gi = _mm256_loadu_ps(g + i);
        if (scaled) gi = _mm256_mul_ps(gs, gi);
        if (a->l2 || a->decoupled) {
            __m256 sel;
            if (dm) {
                __m128i b8 = _mm_loadl_epi64((const __m128i *)(dm + i));
                sel = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(b8), zero));
            } else {
                sel = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
            }
            if (a->l2) gi = _mm256_blendv_ps(gi, _mm256_fmadd_ps(pi, wd, gi), sel);
            else pi = _mm256_blendv_ps(pi, _mm256_mul_ps(pi, shrink), sel);
        }
        __m256 mi = _mm256_fmadd_ps(gi, fc1, _mm256_mul_ps(_mm256_loadu_ps(m + i), fb1));
        __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(fc2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), fb2));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
        __m256 q = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(nstep, mi), denom));
        _mm256_storeu_ps(p + i, q);
        __m256 z = _mm256_sub_ps(q, q);
        badv = _mm256_or_ps(badv, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
    }
    bad = _mm256_movemask_ps(badv) != 0;
#endif
    for (; i < hi; i++) {
        float q = adam_one(a, p[i], g[i], &m[i], &v[i], decays(dm, i));
        p[i] = q;
        bad |= OPT_BAD(q);
    }
    return bad;
}

static int adam_update(const snn_optim_update *a, size_t n, float *p, const float *g, float *m, float *v,
                       const uint8_t *dm) {
    int bad = 0;
#pragma omp parallel reduction(|:bad) if (n >= OPT_PAR_MIN)
    {
        size_t lo = 0, hi = n;
#ifdef _OPENMP
        /* static split in 16-float blocks so every slice starts vector-aligned */
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t blocks = (n + 15) / 16, per = (blocks + nt - 1) / nt;
        lo = id * per * 16;
        hi = lo + per * 16;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
#endif
        bad |= adam_range(a, p, g, m, v, dm, lo, hi);
    }
    return bad;
}

snn_status snn_cpu_optim_update(const snn_backend *be, const snn_optim_update *u, size_t n, float *w,
                                const float *g, float *s0, float *s1, const uint8_t *decay_mask,
                                int *nonfinite) {
    if (!u || (n && (!w || !g))) return snn_error(SNN_E_INVALID, "optimizer update: NULL arguments");
    if (u->adam && n && (!s0 || !s1)) return snn_error(SNN_E_INVALID, "Adam update: state buffers are NULL");
    SNN_TRY(snn_optim_copies_check("optimizer update", u->copies, u->n_copies, n));
    int bad = u->adam ? adam_update(u, n, w, g, s0, s1, decay_mask) : sgd_update(u, n, w, g, s0, decay_mask);
    if (nonfinite) *nonfinite = bad;
    /* the copies of the updated weights: what cast and round give (a device writes them in the
     * update's pass) */
    for (int i = 0; i < u->n_copies; i++) {
        const snn_optim_copy *c = &u->copies[i];
        if (c->dst16) SNN_TRY(be->cast(be, c->t, c->dst16, w + c->off, c->n));
        if (c->dst32) SNN_TRY(be->round(be, c->t, c->dst32, w + c->off, c->n));
    }
    return SNN_OK;
}
