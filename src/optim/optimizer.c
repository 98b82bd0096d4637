/* SGD, Adam and AdamW over one flat FP32 array, matching torch.optim (1.13) operation for
 * operation: scalar coefficients are computed in double (as Python does) and rounded to
 * FP32 once; each tensor op of torch is one rounded FP32 op here, with an FMA exactly where
 * torch's vectorised CPU kernel uses one (add with alpha), so results agree to the last bit
 * or so rather than to a loose tolerance. */
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "nn/model_internal.h"
#include "snn/optim.h"

/* torch's add(a, b, alpha) is fmadd(b, alpha, a) in its AVX2 kernel (addcmul likewise).
 * Without hardware FMA, fmaf is a slow libm call; the product of two floats is exact in
 * double, so one double add and a rounding to float give the fused result except in
 * vanishingly rare double-rounding ties, and it still vectorises. */
#if defined(__FMA__)
#define OPT_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define OPT_FMA(a, b, c) ((float)((double)(a) * (double)(b) + (double)(c)))
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define OPT_PAR_MIN 32768

struct snn_optimizer {
    snn_optim_opts o;
    size_t n;
    float *params;
    const float *grads;
    uint8_t *mask;       /* 1 = weight decay applies */
    float *state[2];     /* SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq */
    const char *state_name[2];
    int n_state;
    long steps;
    int nonfinite;       /* the last step wrote a NaN or an infinity */
};

snn_optim_opts snn_optim_defaults(snn_optim_kind kind) {
    snn_optim_opts o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = kind == SNN_OPTIM_SGD ? 0.01f : 1e-3f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.weight_decay = kind == SNN_OPTIM_ADAMW ? 0.01f : 0.0f;
    return o;
}

const char *snn_optim_kind_name(snn_optim_kind kind) {
    switch (kind) {
    case SNN_OPTIM_SGD: return "sgd";
    case SNN_OPTIM_ADAM: return "adam";
    case SNN_OPTIM_ADAMW: return "adamw";
    }
    return NULL;
}

int snn_optim_kind_parse(const char *name) {
    if (!name) return -1;
    for (int k = SNN_OPTIM_SGD; k <= SNN_OPTIM_ADAMW; k++)
        if (strcmp(name, snn_optim_kind_name((snn_optim_kind)k)) == 0) return k;
    return -1;
}

static snn_status check_opts(const snn_optim_opts *o) {
    if (!snn_optim_kind_name(o->kind))
        return snn_error(SNN_E_INVALID, "unknown optimizer kind %d (use sgd, adam or adamw)", (int)o->kind);
    const char *k = snn_optim_kind_name(o->kind);
    if (!isfinite(o->lr) || o->lr < 0)
        return snn_error(SNN_E_INVALID, "%s: learning rate must be finite and >= 0 (got %g)", k, o->lr);
    if (!isfinite(o->weight_decay) || o->weight_decay < 0)
        return snn_error(SNN_E_INVALID, "%s: weight decay must be finite and >= 0 (got %g)", k, o->weight_decay);
    if (o->kind == SNN_OPTIM_SGD) {
        if (!isfinite(o->momentum) || o->momentum < 0)
            return snn_error(SNN_E_INVALID, "sgd: momentum must be finite and >= 0 (got %g)", o->momentum);
        if (!isfinite(o->dampening))
            return snn_error(SNN_E_INVALID, "sgd: dampening must be finite (got %g)", o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return snn_error(SNN_E_INVALID,
                             "sgd: nesterov needs momentum > 0 and dampening 0 (got momentum %g, dampening %g)",
                             o->momentum, o->dampening);
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            return snn_error(SNN_E_INVALID, "%s: betas must be in [0, 1) (got %g, %g)", k, o->beta1, o->beta2);
        if (!isfinite(o->eps) || o->eps <= 0)
            return snn_error(SNN_E_INVALID, "%s: eps must be finite and > 0 (got %g)", k, o->eps);
    }
    return SNN_OK;
}

static float *alloc_state(size_t n) {
    /* 64-byte aligned (a cache line, an AVX-512 vector), zeroed */
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

snn_status snn_optimizer_create(const snn_optim_opts *o, size_t n, float *params,
                                const float *grads, const uint8_t *decay_mask,
                                snn_optimizer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_optimizer_create: out is NULL");
    *out = NULL;
    if (!o) return snn_error(SNN_E_INVALID, "snn_optimizer_create: options are NULL (use snn_optim_defaults)");
    SNN_TRY(check_opts(o));
    if (n == 0) return snn_error(SNN_E_INVALID, "the optimizer was given no parameters (n = 0)");
    if (!params || !grads)
        return snn_error(SNN_E_INVALID, "snn_optimizer_create: params and grads must not be NULL");
    if (n > (SIZE_MAX / sizeof(float)) / 4)
        return snn_error(SNN_E_NOMEM, "the optimizer cannot hold %zu parameters", n);
    snn_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return snn_error(SNN_E_NOMEM, "out of memory creating the optimizer");
    opt->o = *o;
    opt->n = n;
    opt->params = params;
    opt->grads = grads;
    opt->mask = malloc(n);
    if (!opt->mask) goto nomem;
    if (decay_mask) {
        for (size_t i = 0; i < n; i++) opt->mask[i] = decay_mask[i] != 0;
    } else {
        memset(opt->mask, 1, n);
    }
    if (o->kind == SNN_OPTIM_SGD) {
        if (o->momentum != 0) opt->state_name[opt->n_state++] = "momentum_buffer";
    } else {
        opt->state_name[opt->n_state++] = "exp_avg";
        opt->state_name[opt->n_state++] = "exp_avg_sq";
    }
    for (int s = 0; s < opt->n_state; s++)
        if (!(opt->state[s] = alloc_state(n))) goto nomem;
    *out = opt;
    return SNN_OK;
nomem:
    snn_optimizer_free(opt);
    return snn_error(SNN_E_NOMEM, "out of memory for the optimizer state of %zu parameters", n);
}

snn_status snn_optimizer_create_for_model(const snn_optim_opts *o, snn_model *m,
                                          snn_optimizer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_optimizer_create_for_model: out is NULL");
    *out = NULL;
    if (!m) return snn_error(SNN_E_INVALID, "snn_optimizer_create_for_model: model is NULL");
    size_t n = snn_model_num_params(m);
    float *params = snn_model_params(m);
    if (n == 0) return snn_error(SNN_E_INVALID, "the model has no trainable parameters to optimize");
    uint8_t *mask = malloc(n);
    if (!mask) return snn_error(SNN_E_NOMEM, "out of memory building the weight-decay mask");
    memset(mask, 1, n);
    size_t nt = snn_model_num_tensors(m);
    for (size_t t = 0; t < nt; t++) {
        snn_tensor_info info;
        snn_status st = snn_model_tensor(m, t, &info);
        if (st != SNN_OK) {
            free(mask);
            return st;
        }
        if (info.is_buffer) continue;
        /* every parameter tensor is a slice of the flat array */
        if (info.data < params || (size_t)(info.data - params) + info.numel > n) {
            free(mask);
            return snn_error(SNN_E_STATE, "tensor %s lies outside the model's parameter array", info.name);
        }
        memset(mask + (info.data - params), info.decay ? 1 : 0, info.numel);
    }
    snn_status st = snn_optimizer_create(o, n, params, snn_model_grads(m), mask, out);
    free(mask);
    /* the precision system refuses to prepare a model that already has an optimizer: its
     * master weights and state would be built for the wrong parameters */
    if (st == SNN_OK) m->optimizer_bound = 1;
    return st;
}

void snn_optimizer_free(snn_optimizer *opt) {
    if (!opt) return;
    free(opt->mask);
    for (int s = 0; s < 2; s++) free(opt->state[s]);
    free(opt);
}

const snn_optim_opts *snn_optimizer_opts(const snn_optimizer *opt) { return &opt->o; }
size_t snn_optimizer_numel(const snn_optimizer *opt) { return opt->n; }
const float *snn_optimizer_params(const snn_optimizer *opt) { return opt ? opt->params : NULL; }
size_t snn_optimizer_num_states(const snn_optimizer *opt) { return (size_t)opt->n_state; }
long snn_optimizer_steps(const snn_optimizer *opt) { return opt->steps; }
int snn_optimizer_nonfinite(const snn_optimizer *opt) { return opt ? opt->nonfinite : 0; }

snn_status snn_optimizer_set_steps(snn_optimizer *opt, long steps) {
    if (steps < 0) return snn_error(SNN_E_INVALID, "optimizer step count must be >= 0 (got %ld)", steps);
    opt->steps = steps;
    return SNN_OK;
}

snn_status snn_optimizer_state(snn_optimizer *opt, size_t i, snn_optim_state *info) {
    if (i >= (size_t)opt->n_state)
        return snn_error(SNN_E_INVALID, "optimizer state index %zu out of range (%s has %d)", i,
                         snn_optim_kind_name(opt->o.kind), opt->n_state);
    info->name = opt->state_name[i];
    info->numel = opt->n;
    info->data = opt->state[i];
    return SNN_OK;
}

snn_status snn_optimizer_find_state(snn_optimizer *opt, const char *name, snn_optim_state *info) {
    for (int s = 0; s < opt->n_state; s++)
        if (name && strcmp(name, opt->state_name[s]) == 0) return snn_optimizer_state(opt, (size_t)s, info);
    return snn_error(SNN_E_INVALID, "%s optimizer has no state named \"%s\"",
                     snn_optim_kind_name(opt->o.kind), name ? name : "(null)");
}

/* ---- updates ---------------------------------------------------------------------------- */

/* x - x is 0 for a finite x and NaN for an infinity or a NaN: one subtraction and an
 * unordered compare per element, folded into an OR, flags a diverged update. */
#define OPT_BAD(x) (((x) - (x)) != 0.0f)

static int sgd_step(snn_optimizer *opt, double lr) {
    const size_t n = opt->n;
    float *restrict p = opt->params;
    const float *restrict g = opt->grads;
    const uint8_t *restrict dm = opt->mask;
    const float wd = opt->o.weight_decay, mom = opt->o.momentum;
    const float keep = (float)(1.0 - (double)opt->o.dampening); /* torch: alpha = 1 - dampening */
    const float nlr = (float)(-lr);
    const int l2 = wd != 0, nest = opt->o.nesterov;
    int bad = 0;
    if (mom == 0) {
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (n >= OPT_PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float d = (l2 && dm[i]) ? OPT_FMA(p[i], wd, g[i]) : g[i];
            float q = OPT_FMA(d, nlr, p[i]);
            p[i] = q;
            bad |= OPT_BAD(q);
        }
        return bad;
    }
    float *restrict buf = opt->state[0];
    const int first = opt->steps == 0; /* torch: buffer = clone(d_p) on the first step */
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (n >= OPT_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float d = (l2 && dm[i]) ? OPT_FMA(p[i], wd, g[i]) : g[i];
        float b = first ? d : OPT_FMA(d, keep, buf[i] * mom);
        buf[i] = b;
        d = nest ? OPT_FMA(b, mom, d) : b;
        float q = OPT_FMA(d, nlr, p[i]);
        p[i] = q;
        bad |= OPT_BAD(q);
    }
    return bad;
}

typedef struct adam_args {
    float *p, *m, *v;
    const float *g;
    const uint8_t *dm;
    float fb1, fc1, fb2, fc2, neg_step, bc2_sqrt, eps, wd, shrink;
    int l2, decoupled;
} adam_args;

static inline float adam_one(const adam_args *a, float pi, float gi, float *mi_io, float *vi_io, int decay) {
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
static int adam_range(const adam_args *a, size_t lo, size_t hi) {
    float *restrict p = a->p, *restrict m = a->m, *restrict v = a->v;
    const float *restrict g = a->g;
    const uint8_t *restrict dm = a->dm;
    size_t i = lo;
    int bad = 0;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 fb1 = _mm256_set1_ps(a->fb1), fc1 = _mm256_set1_ps(a->fc1);
    const __m256 fb2 = _mm256_set1_ps(a->fb2), fc2 = _mm256_set1_ps(a->fc2);
    const __m256 nstep = _mm256_set1_ps(a->neg_step), bc2s = _mm256_set1_ps(a->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(a->eps), wd = _mm256_set1_ps(a->wd);
    const __m256 shrink = _mm256_set1_ps(a->shrink);
    const __m256i zero = _mm256_setzero_si256();
    __m256 badv = _mm256_setzero_ps();
    for (; i + 8 <= hi; i += 8) {
        __m256 pi = _mm256_loadu_ps(p + i), gi = _mm256_loadu_ps(g + i);
        if (a->l2 || a->decoupled) {
            __m128i b8 = _mm_loadl_epi64((const __m128i *)(dm + i));
            __m256 sel = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(b8), zero));
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
        float q = adam_one(a, p[i], g[i], &m[i], &v[i], dm[i]);
        p[i] = q;
        bad |= OPT_BAD(q);
    }
    return bad;
}

static int adam_step(snn_optimizer *opt, double lr) {
    const size_t n = opt->n;
    const double b1 = opt->o.beta1, b2 = opt->o.beta2, t = (double)(opt->steps + 1);
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const int adamw = opt->o.kind == SNN_OPTIM_ADAMW;
    adam_args a = {
        .p = opt->params, .m = opt->state[0], .v = opt->state[1], .g = opt->grads, .dm = opt->mask,
        .fb1 = (float)b1, .fc1 = (float)(1.0 - b1), .fb2 = (float)b2, .fc2 = (float)(1.0 - b2),
        .neg_step = (float)(-(lr / bc1)), .bc2_sqrt = (float)sqrt(bc2), .eps = opt->o.eps,
        .wd = opt->o.weight_decay,
        /* AdamW: p *= 1 - lr*wd before the update (torch computes the factor in double) */
        .shrink = (float)(1.0 - lr * (double)opt->o.weight_decay),
        .l2 = !adamw && opt->o.weight_decay != 0,
        .decoupled = adamw && opt->o.weight_decay != 0,
    };
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
        bad |= adam_range(&a, lo, hi);
    }
    return bad;
}

snn_status snn_optimizer_step(snn_optimizer *opt, float lr, int skip) {
    if (!opt) return snn_error(SNN_E_INVALID, "snn_optimizer_step: optimizer is NULL");
    if (skip) {
        opt->nonfinite = 0;
        return SNN_OK;
    }
    if (!isfinite(lr))
        return snn_error(SNN_E_INVALID, "learning rate is not finite (%g); check the schedule with snn_lr_sched_check", lr);
    if (lr < 0) lr = opt->o.lr;
    opt->nonfinite = opt->o.kind == SNN_OPTIM_SGD ? sgd_step(opt, (double)lr) : adam_step(opt, (double)lr);
    opt->steps++;
    return SNN_OK;
}
