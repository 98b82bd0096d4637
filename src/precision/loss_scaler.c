/* FP16 dynamic loss scaling with torch.amp.GradScaler's rules (reference fp8.md §6.1):
 * unscale multiplies by float(1/double(scale)) and flags inf/NaN; update backs off on an
 * overflow (resetting the growth counter) and grows after growth_interval clean steps,
 * unless growing would overflow FP32. */
#include <math.h>

#include "core/error_internal.h"
#include "snn/precision.h"

snn_status snn_loss_scaler_init(snn_loss_scaler *s, const snn_loss_scaler_opts *o) {
    if (!s) return snn_error(SNN_E_INVALID, "loss scaler is NULL");
    snn_loss_scaler_opts d = {65536.0f, 2.0, 0.5, 2000};
    if (o) {
        if (o->init_scale != 0.0f) d.init_scale = o->init_scale;
        if (o->growth_factor != 0.0) d.growth_factor = o->growth_factor;
        if (o->backoff_factor != 0.0) d.backoff_factor = o->backoff_factor;
        if (o->growth_interval != 0) d.growth_interval = o->growth_interval;
    }
    if (!isfinite(d.init_scale) || d.init_scale <= 0.0f)
        return snn_error(SNN_E_INVALID, "loss scaler init_scale must be finite and > 0, got %g",
                         (double)d.init_scale);
    if (!(d.growth_factor > 1.0) || !isfinite(d.growth_factor))
        return snn_error(SNN_E_INVALID, "loss scaler growth_factor must be > 1, got %g",
                         d.growth_factor);
    if (!(d.backoff_factor > 0.0 && d.backoff_factor < 1.0))
        return snn_error(SNN_E_INVALID, "loss scaler backoff_factor must be in (0, 1), got %g",
                         d.backoff_factor);
    if (d.growth_interval < 1)
        return snn_error(SNN_E_INVALID, "loss scaler growth_interval must be >= 1, got %d",
                         d.growth_interval);
    s->scale = d.init_scale;
    s->growth_tracker = 0;
    s->growth_factor = d.growth_factor;
    s->backoff_factor = d.backoff_factor;
    s->growth_interval = d.growth_interval;
    return SNN_OK;
}

float snn_loss_scaler_scale(const snn_loss_scaler *s) { return s ? s->scale : 1.0f; }

snn_status snn_loss_scaler_unscale(const snn_loss_scaler *s, float *g, size_t n, int *found_inf) {
    if (!s || (!g && n) || !found_inf)
        return snn_error(SNN_E_INVALID, "loss scaler unscale needs the scaler, gradients and a "
                         "found_inf flag");
    /* torch computes the reciprocal in double and rounds it to FP32 once. */
    const float inv = (float)(1.0 / (double)s->scale);
    int bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) {
        float v = g[i];
        bad |= !isfinite(v);
        g[i] = v * inv;
    }
    if (bad) *found_inf = 1;
    return SNN_OK;
}

snn_status snn_loss_scaler_update(snn_loss_scaler *s, int found_inf) {
    if (!s) return snn_error(SNN_E_INVALID, "loss scaler is NULL");
    if (found_inf) {
        s->scale = (float)((double)s->scale * s->backoff_factor);
        s->growth_tracker = 0;
        return SNN_OK;
    }
    if (s->growth_tracker + 1 == s->growth_interval) {
        float grown = (float)((double)s->scale * s->growth_factor);
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker++;
    }
    return SNN_OK;
}

void snn_loss_scaler_get_state(const snn_loss_scaler *s, float *scale, int *growth_tracker) {
    if (scale) *scale = s->scale;
    if (growth_tracker) *growth_tracker = s->growth_tracker;
}

snn_status snn_loss_scaler_set_state(snn_loss_scaler *s, float scale, int growth_tracker) {
    if (!s) return snn_error(SNN_E_INVALID, "loss scaler is NULL");
    if (!isfinite(scale) || scale <= 0.0f)
        return snn_error(SNN_E_FORMAT, "loss scale must be finite and > 0, got %g", (double)scale);
    if (growth_tracker < 0 || growth_tracker >= s->growth_interval)
        return snn_error(SNN_E_FORMAT, "loss scaler growth tracker must be in [0, %d), got %d",
                         s->growth_interval, growth_tracker);
    s->scale = scale;
    s->growth_tracker = growth_tracker;
    return SNN_OK;
}
