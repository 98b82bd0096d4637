/* Learning-rate schedules: linear warm-up, then constant, cosine or step decay.
 * The formulas are in include/snn/optim.h. Closed forms (not torch's recursive updates),
 * so the lr of any step can be computed directly after a resume. */
#include <math.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/optim.h"

const char *snn_lr_kind_name(snn_lr_kind kind) {
    switch (kind) {
    case SNN_LR_CONSTANT: return "constant";
    case SNN_LR_COSINE: return "cosine";
    case SNN_LR_STEP: return "step";
    }
    return NULL;
}

int snn_lr_kind_parse(const char *name) {
    if (!name) return -1;
    for (int k = SNN_LR_CONSTANT; k <= SNN_LR_STEP; k++)
        if (strcmp(name, snn_lr_kind_name((snn_lr_kind)k)) == 0) return k;
    return -1;
}

snn_status snn_lr_sched_check(const snn_lr_sched *s) {
    if (!s) return snn_error(SNN_E_INVALID, "learning-rate schedule is NULL");
    if (!snn_lr_kind_name(s->kind))
        return snn_error(SNN_E_INVALID, "unknown lr schedule kind %d (use constant, cosine or step)", (int)s->kind);
    if (!isfinite(s->base_lr) || s->base_lr < 0)
        return snn_error(SNN_E_INVALID, "lr schedule: base lr must be finite and >= 0 (got %g)", s->base_lr);
    if (s->warmup_steps < 0)
        return snn_error(SNN_E_INVALID, "lr schedule: warm-up steps must be >= 0 (got %ld)", s->warmup_steps);
    if (s->warmup_steps > 0 && !(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
        return snn_error(SNN_E_INVALID, "lr schedule: warm-up start factor must be in [0, 1] (got %g)",
                         s->warmup_start_factor);
    if (s->kind == SNN_LR_COSINE) {
        if (s->total_steps <= s->warmup_steps)
            return snn_error(SNN_E_INVALID,
                             "lr schedule: cosine needs total steps (%ld) greater than warm-up steps (%ld)",
                             s->total_steps, s->warmup_steps);
        if (!(s->min_lr >= 0 && s->min_lr <= s->base_lr))
            return snn_error(SNN_E_INVALID, "lr schedule: cosine min lr must be in [0, base lr %g] (got %g)",
                             s->base_lr, s->min_lr);
    }
    if (s->kind == SNN_LR_STEP) {
        if (s->step_size <= 0)
            return snn_error(SNN_E_INVALID, "lr schedule: step decay needs step_size > 0 (got %ld)", s->step_size);
        if (!isfinite(s->gamma) || s->gamma <= 0)
            return snn_error(SNN_E_INVALID, "lr schedule: step decay needs gamma > 0 (got %g)", s->gamma);
    }
    return SNN_OK;
}

float snn_lr_schedule(const snn_lr_sched *s, long step) {
    /* check quietly: this is called every step and must not overwrite a pending message */
    if (!s || !snn_lr_kind_name(s->kind) || !isfinite(s->base_lr) || s->base_lr < 0 ||
        s->warmup_steps < 0 ||
        (s->warmup_steps > 0 && !(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1)) ||
        (s->kind == SNN_LR_COSINE &&
         (s->total_steps <= s->warmup_steps || !(s->min_lr >= 0 && s->min_lr <= s->base_lr))) ||
        (s->kind == SNN_LR_STEP && (s->step_size <= 0 || !isfinite(s->gamma) || s->gamma <= 0)))
        return NAN;
    if (step < 0) step = 0;
    const double base = s->base_lr;
    const long W = s->warmup_steps;
    if (step < W) {
        const double f = s->warmup_start_factor;
        return (float)(base * (f + (1.0 - f) * (double)step / (double)W));
    }
    const long k = step - W;
    switch (s->kind) {
    case SNN_LR_CONSTANT:
        return (float)base;
    case SNN_LR_COSINE: {
        const long C = s->total_steps - W;
        const double lo = s->min_lr;
        if (k >= C) return (float)lo;
        return (float)(lo + (base - lo) * (1.0 + cos(M_PI * (double)k / (double)C)) * 0.5);
    }
    case SNN_LR_STEP:
        return (float)(base * pow((double)s->gamma, (double)(k / s->step_size)));
    }
    return NAN;
}
