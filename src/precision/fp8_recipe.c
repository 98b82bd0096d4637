/* FP8 recipes: resolving a config into recipe parameters, the per-tensor state of delayed
 * scaling (amax history and scale, updated after the step like Transformer Engine), and
 * the scale layouts of the block recipes. Reference fp8.md §3 and §4. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "precision/fp8.h"

float snn_fp8_max(snn_dtype t) {
    if (t == SNN_F8E4M3) return 448.0f;
    if (t == SNN_F8E5M2) return 57344.0f;
    return 0.0f;
}

snn_status snn_fp8_recipe_params_init(snn_fp8_recipe_params *p, const snn_precision_config *cfg,
                                      int cc_major, int cc_minor) {
    if (!p || !cfg) return snn_error(SNN_E_INVALID, "FP8 recipe parameters need a config");
    SNN_TRY(snn_precision_config_validate(cfg));
    if (cfg->mode != SNN_PRECISION_FP8)
        return snn_error(SNN_E_INVALID, "FP8 recipe parameters need mode='fp8' (got mode='%s')",
                         snn_precision_mode_name(cfg->mode));
    memset(p, 0, sizeof *p);
    p->recipe = snn_fp8_recipe_resolve_auto(cfg->fp8_recipe, cc_major, cc_minor);
    /* TE defaults: HYBRID for delayed and current scaling, E4M3 for the block recipes. */
    snn_fp8_format f = cfg->fp8_format;
    if (f == SNN_FP8_FORMAT_DEFAULT)
        f = (p->recipe == SNN_FP8_RECIPE_DELAYED || p->recipe == SNN_FP8_RECIPE_CURRENT)
                ? SNN_FP8_FORMAT_HYBRID
                : SNN_FP8_FORMAT_E4M3;
    p->fwd_dtype = SNN_F8E4M3;
    p->bwd_dtype = f == SNN_FP8_FORMAT_HYBRID ? SNN_F8E5M2 : SNN_F8E4M3;
    p->hp_dtype = SNN_F32;
    switch (p->recipe) {
    case SNN_FP8_RECIPE_DELAYED:
        p->history_len = cfg->amax_history_len ? cfg->amax_history_len : SNN_FP8_DEFAULT_HISTORY_LEN;
        p->algo = cfg->amax_compute_algo;
        p->margin = cfg->margin;
        break;
    case SNN_FP8_RECIPE_CURRENT: p->pow2_scales = cfg->current_pow2_scales; break;
    case SNN_FP8_RECIPE_BLOCK:
        p->pow2_scales = !cfg->block_fp32_scales;
        p->block_len = 128;
        break;
    case SNN_FP8_RECIPE_MXFP8:
        p->pow2_scales = 1;
        p->block_len = 32;
        break;
    default: return snn_error(SNN_E_INVALID, "internal: unresolved FP8 recipe");
    }
    return SNN_OK;
}

snn_dtype snn_fp8_role_dtype(const snn_fp8_recipe_params *p, snn_fp8_role role) {
    return role == SNN_FP8_ROLE_GRAD ? p->bwd_dtype : p->fwd_dtype;
}

static const char *role_name(snn_fp8_role r) {
    switch (r) {
    case SNN_FP8_ROLE_INPUT: return "input";
    case SNN_FP8_ROLE_WEIGHT: return "weight";
    case SNN_FP8_ROLE_GRAD: return "grad";
    default: return "?";
    }
}

snn_status snn_fp8_state_init(snn_fp8_tensor_state *st, const snn_fp8_recipe_params *p,
                              snn_fp8_role role) {
    if (!st || !p) return snn_error(SNN_E_INVALID, "FP8 state init needs a state and parameters");
    if ((unsigned)role >= SNN_FP8_ROLE_COUNT)
        return snn_error(SNN_E_INVALID, "unknown FP8 operand role %d", (int)role);
    memset(st, 0, sizeof *st);
    st->role = role;
    st->dtype = snn_fp8_role_dtype(p, role);
    st->scale = 1.0f;
    st->scale_inv = 1.0f;
    if (p->recipe == SNN_FP8_RECIPE_DELAYED) {
        if (p->history_len < 1)
            return snn_error(SNN_E_INVALID, "amax_history_len must be >= 1, got %d", p->history_len);
        st->amax_history = calloc((size_t)p->history_len, sizeof(float));
        if (!st->amax_history)
            return snn_error(SNN_E_NOMEM, "no memory for an FP8 amax history of %d values",
                             p->history_len);
        st->history_len = p->history_len;
    }
    return SNN_OK;
}

void snn_fp8_state_free(snn_fp8_tensor_state *st) {
    if (!st) return;
    free(st->amax_history);
    st->amax_history = NULL;
    st->history_len = 0;
}

snn_status snn_fp8_state_update(snn_fp8_tensor_state *st, const snn_fp8_recipe_params *p) {
    if (!st || !p) return snn_error(SNN_E_INVALID, "FP8 state update needs a state and parameters");
    if (p->recipe != SNN_FP8_RECIPE_DELAYED) return SNN_OK;
    if (!st->amax_history || st->history_len != p->history_len)
        return snn_error(SNN_E_STATE, "FP8 %s state was not initialised for delayed scaling with "
                         "amax_history_len=%d", role_name(st->role), p->history_len);
    float *h = st->amax_history;
    int len = st->history_len;
    float c = h[0];
    /* A tensor that was not quantised this step (c == 0) keeps its history and scale. */
    if (c == 0.0f) return SNN_OK;
    /* Window over the current amax and the len-1 previous ones, taken before the roll. */
    float a = c;
    if (p->algo == SNN_AMAX_COMPUTE_MAX)
        for (int i = 1; i < len; i++) a = fmaxf(a, h[i]);
    if (len > 1) {
        memmove(h + 1, h + 2, sizeof(float) * (size_t)(len - 2));
        h[len - 1] = c;
    }
    h[0] = 0.0f;
    float scaled_max = snn_fp8_max(st->dtype) * ldexpf(1.0f, -p->margin);
    float s = st->scale;
    if (isfinite(a) && a > 0.0f) s = scaled_max / a;
    if (isinf(s)) s = FLT_MAX;
    st->scale = s;
    st->scale_inv = 1.0f / s;
    st->updates++;
    return SNN_OK;
}

snn_status snn_fp8_state_load(snn_fp8_tensor_state *st, float scale, const float *history,
                              int history_len) {
    if (!st) return snn_error(SNN_E_INVALID, "FP8 state load needs a state");
    /* A tiny positive scale is as fatal as NaN: its inverse overflows to inf and the
     * layer turns to NaN. A normal float has a finite inverse (updates clamp to FLT_MAX). */
    if (!(scale >= FLT_MIN && scale <= FLT_MAX))
        return snn_error(SNN_E_FORMAT, "FP8 %s scale in the checkpoint must be a finite normal float "
                         "in [%g, %g] (its inverse must be finite), got %g", role_name(st->role),
                         (double)FLT_MIN, (double)FLT_MAX, (double)scale);
    if (history_len != st->history_len)
        return snn_error(SNN_E_FORMAT, "FP8 %s amax history in the checkpoint has %d values, the "
                         "recipe uses amax_history_len=%d", role_name(st->role), history_len,
                         st->history_len);
    for (int i = 0; i < history_len; i++)
        if (!(history[i] >= 0.0f) || !isfinite(history[i]))
            return snn_error(SNN_E_FORMAT, "FP8 %s amax history value %d is %g: it must be finite and >= 0",
                             role_name(st->role), i, (double)history[i]);
    if (history_len) memcpy(st->amax_history, history, sizeof(float) * (size_t)history_len);
    st->scale = scale;
    st->scale_inv = 1.0f / scale;
    return SNN_OK;
}

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

snn_status snn_fp8_scale_layout_of(const snn_fp8_recipe_params *p, snn_fp8_role role,
                                   snn_fp8_usage usage, int rows, int cols,
                                   snn_fp8_scale_layout *out) {
    if (rows <= 0 || cols <= 0)
        return snn_error(SNN_E_SHAPE, "FP8 operand must be at least 1x1, got %dx%d", rows, cols);
    int br = rows, bc = cols;
    switch (p->recipe) {
    case SNN_FP8_RECIPE_DELAYED:
    case SNN_FP8_RECIPE_CURRENT: break;
    case SNN_FP8_RECIPE_BLOCK:
        if (role == SNN_FP8_ROLE_WEIGHT) br = bc = p->block_len; /* 2D tiles both usages */
        else if (usage == SNN_FP8_ROWWISE) br = 1, bc = p->block_len;
        else br = p->block_len, bc = 1;
        break;
    case SNN_FP8_RECIPE_MXFP8:
        if (usage == SNN_FP8_ROWWISE) br = 1, bc = p->block_len;
        else br = p->block_len, bc = 1;
        break;
    default: return snn_error(SNN_E_INVALID, "FP8 recipe '%s' is not resolved",
                              snn_fp8_recipe_name(p->recipe) ? snn_fp8_recipe_name(p->recipe) : "?");
    }
    out->block_rows = br;
    out->block_cols = bc;
    out->grid_rows = ceil_div(rows, br);
    out->grid_cols = ceil_div(cols, bc);
    return SNN_OK;
}

int snn_fp8_shape_ok(const snn_fp8_recipe_params *p, int rows, int cols) {
    switch (p->recipe) {
    case SNN_FP8_RECIPE_DELAYED:
    case SNN_FP8_RECIPE_CURRENT: return rows % 16 == 0 && cols % 16 == 0;
    case SNN_FP8_RECIPE_BLOCK: return rows % 128 == 0 && cols % 128 == 0;
    case SNN_FP8_RECIPE_MXFP8: return rows % 32 == 0 && cols % 32 == 0;
    default: return 0;
    }
}
