/* snn — precision configuration and FP16 loss scaling.
 *
 * The configuration is SpikingJelly's PrecisionConfig (guide era) in C: a model-level
 * mode (fp32, fp16, bf16, fp8), an FP8 recipe (auto, delayed, current, block, mxfp8)
 * and, as a separate dimension, the precision of the fused neurons (storage dtype and
 * forward/backward arithmetic). SpikingJelly calls the neuron fields triton_storage,
 * triton_fwd and triton_bwd; we call them neuron_* and accept the old names as aliases.
 *
 * A zero-initialised snn_precision_config is the default configuration (fp32, recipe
 * auto, no neuron precision, TE's recipe defaults). Every field left 0 takes the
 * documented default.
 *
 * Validation rules (snn_precision_config_validate), in the reference's order; each
 * message names the field:
 *   1. mode must be fp32|fp16|bf16|fp8 (fp8-te and fp8-torchao were removed: use
 *      mode=fp8 with fp8_recipe=...).
 *   2. fp8_recipe must be auto|delayed|current|block|mxfp8.
 *   3. fp8_recipe other than auto needs mode=fp8.
 *   4. neuron_fwd/neuron_bwd other than fp32 need neuron_storage.
 *   5. neuron_storage must be fp32|fp16|bf16|float8_e4m3fn|float8_e5m2 (the bare name
 *      fp8 is ambiguous); neuron_fwd/neuron_bwd must be fp8|fp16|bf16|fp32.
 *   6. FP8 neuron arithmetic needs FP8 neuron storage (it runs in the storage's format).
 * and our additions for the FP8 recipe knobs, which SpikingJelly does not expose:
 *   7. fp8_format must be hybrid or e4m3 (Transformer Engine rejects pure E5M2).
 *   8. amax_history_len >= 1, margin in [0, 126], and the delayed-scaling knobs
 *      (history, compute algorithm, margin) only with fp8_recipe delayed or auto;
 *      current_pow2_scales only with current or auto; block_fp32_scales only with block
 *      or auto; any knob only with mode=fp8.
 */
#ifndef SNN_PRECISION_H
#define SNN_PRECISION_H

#include <stddef.h>
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_precision_mode {
    SNN_PRECISION_FP32 = 0,
    SNN_PRECISION_FP16 = 1, /* 16-bit GEMMs, FP32 masters, dynamic loss scaling */
    SNN_PRECISION_BF16 = 2,
    SNN_PRECISION_FP8 = 3,  /* BF16 base plus FP8 GEMMs in converted modules */
    SNN_PRECISION_MODE_COUNT
} snn_precision_mode;

typedef enum snn_fp8_recipe {
    SNN_FP8_RECIPE_AUTO = 0,    /* the device's default (snn_fp8_recipe_resolve_auto) */
    SNN_FP8_RECIPE_DELAYED = 1, /* per-tensor scale from an amax history */
    SNN_FP8_RECIPE_CURRENT = 2, /* per-tensor scale from this tensor's amax */
    SNN_FP8_RECIPE_BLOCK = 3,   /* 1x128 activations/gradients, 128x128 weights, FP32 scales */
    SNN_FP8_RECIPE_MXFP8 = 4,   /* 1x32 blocks along the reduction dim, E8M0 scales */
    SNN_FP8_RECIPE_COUNT
} snn_fp8_recipe;

typedef enum snn_neuron_storage {
    SNN_NEURON_STORAGE_UNSET = 0, /* mixed neuron path off (SpikingJelly: None) */
    SNN_NEURON_STORAGE_FP32 = 1,
    SNN_NEURON_STORAGE_FP16 = 2,
    SNN_NEURON_STORAGE_BF16 = 3,
    SNN_NEURON_STORAGE_E4M3 = 4,  /* "float8_e4m3fn" */
    SNN_NEURON_STORAGE_E5M2 = 5,  /* "float8_e5m2" */
    SNN_NEURON_STORAGE_COUNT
} snn_neuron_storage;

typedef enum snn_neuron_compute {
    SNN_NEURON_COMPUTE_FP32 = 0,
    SNN_NEURON_COMPUTE_FP16 = 1,
    SNN_NEURON_COMPUTE_BF16 = 2,
    SNN_NEURON_COMPUTE_FP8 = 3,   /* in the FP8 format of the storage */
    SNN_NEURON_COMPUTE_COUNT
} snn_neuron_compute;

typedef enum snn_fp8_format {
    SNN_FP8_FORMAT_DEFAULT = 0, /* the recipe's TE default: hybrid for delayed/current,
                                   e4m3 for block/mxfp8 */
    SNN_FP8_FORMAT_HYBRID = 1,  /* E4M3 forward (inputs, weights), E5M2 gradients */
    SNN_FP8_FORMAT_E4M3 = 2,    /* E4M3 everywhere */
    SNN_FP8_FORMAT_COUNT
} snn_fp8_format;

typedef enum snn_amax_compute {
    SNN_AMAX_COMPUTE_MAX = 0,         /* max over the history window (TE default) */
    SNN_AMAX_COMPUTE_MOST_RECENT = 1, /* this step's amax only */
    SNN_AMAX_COMPUTE_COUNT
} snn_amax_compute;

#define SNN_FP8_DEFAULT_HISTORY_LEN 1024

typedef struct snn_precision_config {
    snn_precision_mode mode;
    snn_fp8_recipe fp8_recipe;
    snn_neuron_storage neuron_storage;
    snn_neuron_compute neuron_fwd;
    snn_neuron_compute neuron_bwd;
    /* FP8 recipe knobs (Transformer Engine recipe fields; 0 = TE default). */
    snn_fp8_format fp8_format;
    int amax_history_len;               /* delayed; 0 means 1024 */
    snn_amax_compute amax_compute_algo; /* delayed; default "max" */
    int margin;                         /* delayed; scale target fp8_max * 2^-margin */
    int current_pow2_scales;            /* current: round scales down to powers of two */
    int block_fp32_scales;              /* block: any FP32 scale instead of powers of two */
} snn_precision_config;

/* The defaults (same as a zero-initialised struct, with amax_history_len spelled out). */
snn_precision_config snn_precision_config_default(void);

/* Check the rules listed at the top of this header. SNN_E_INVALID with a message naming
 * the field on failure. */
snn_status snn_precision_config_validate(const snn_precision_config *cfg);

/* Build a config from strings, like PrecisionConfig(mode, fp8_recipe, triton_storage,
 * triton_fwd, triton_bwd): values are normalised (case-insensitive, "torch." prefix
 * dropped, dtype aliases such as bfloat16/half/float8_e4m3fn accepted for the neuron
 * fields), then validated in the reference's order. NULL takes the default for
 * fp8_recipe (auto), neuron_storage (unset), neuron_fwd/neuron_bwd (fp32); a NULL mode is
 * an error, as mode=None is in the reference. *out is written only on success. */
snn_status snn_precision_config_parse(const char *mode, const char *fp8_recipe,
                                      const char *neuron_storage, const char *neuron_fwd,
                                      const char *neuron_bwd, snn_precision_config *out);

/* Set one field from a string (what the CLI flags do). Fields, with '-' and '_'
 * interchangeable: "mode" (alias "precision"), "fp8_recipe", "neuron_storage" (alias
 * "triton_storage"), "neuron_fwd" ("triton_fwd"), "neuron_bwd" ("triton_bwd"),
 * "fp8_format" (hybrid|e4m3), "amax_history_len", "amax_compute_algo"
 * (max|most_recent), "margin", "current_pow2_scales", "block_fp32_scales" (0/1,
 * true/false). A neuron_storage value "none" (or "") unsets it. Checks only the value;
 * cross-field rules are checked by snn_precision_config_validate. cfg is unchanged on
 * failure. */
snn_status snn_precision_config_set(snn_precision_config *cfg, const char *field,
                                    const char *value);

/* JSON object with a stable key order:
 * {"mode":"fp8","fp8_recipe":"delayed","neuron_storage":null,"neuron_fwd":"fp32",
 *  "neuron_bwd":"fp32","fp8_format":"default","amax_history_len":1024,
 *  "amax_compute_algo":"max","margin":0,"current_pow2_scales":false,
 *  "block_fp32_scales":false}
 * SNN_E_INVALID if buf is too small (cap 512 is always enough). */
snn_status snn_precision_config_to_json(const snn_precision_config *cfg, char *buf, size_t cap);
/* Parse such an object (keys may be omitted; triton_* keys are accepted as aliases; an
 * unknown key, including the removed "strictness", "device", "fp8_autocast_dtype" and
 * "precision", is an "unexpected keyword" error) and validate it. */
snn_status snn_precision_config_from_json(const char *json, snn_precision_config *out);

/* Canonical names: "fp32" ...; "auto" ...; NULL (unset) / "fp32" / ... / "float8_e4m3fn" /
 * "float8_e5m2"; "fp8" ...; "default"/"hybrid"/"e4m3"; "max"/"most_recent". NULL for an
 * out-of-range value. */
const char *snn_precision_mode_name(snn_precision_mode m);
const char *snn_fp8_recipe_name(snn_fp8_recipe r);
const char *snn_neuron_storage_name(snn_neuron_storage s);
const char *snn_neuron_compute_name(snn_neuron_compute c);
const char *snn_fp8_format_name(snn_fp8_format f);
const char *snn_amax_compute_name(snn_amax_compute a);

/* The dtype a neuron stores x, v_seq and h_seq in (SNN_F32 when unset). */
snn_dtype snn_neuron_storage_dtype(snn_neuron_storage s);
/* The dtype of the neuron arithmetic: fp8 means the storage's FP8 format. */
snn_dtype snn_neuron_compute_dtype(snn_neuron_compute c, snn_neuron_storage s);
/* 1 when the mode trains with the dynamic loss scaler (fp16). */
int snn_precision_config_uses_loss_scaler(const snn_precision_config *cfg);
/* The recipe "auto" stands for on a CUDA device of compute capability major.minor, as
 * Transformer Engine's default: delayed on sm_89/sm_90, mxfp8 on 10.x-11.x, current on
 * 12.x and later. major = 0 (the CPU reference) resolves as Hopper (delayed). Any other
 * recipe is returned unchanged. */
snn_fp8_recipe snn_fp8_recipe_resolve_auto(snn_fp8_recipe r, int cc_major, int cc_minor);

/* ---- FP16 dynamic loss scaling (torch.amp.GradScaler semantics) ----------------------
 * Per step: multiply dL/dy by snn_loss_scaler_scale(); after backward, unscale every
 * gradient buffer (found_inf is OR-ed across calls); if found_inf, skip the optimizer
 * step; then snn_loss_scaler_update(found_inf):
 *   found_inf: scale *= backoff_factor, growth tracker = 0
 *   else:      tracker += 1; when it reaches growth_interval, scale *= growth_factor
 *              unless that overflows to inf (then scale stays), and tracker = 0.
 * No minimum scale (torch has none). */
typedef struct snn_loss_scaler_opts {
    float init_scale;      /* default 65536 (2^16) */
    double growth_factor;  /* default 2.0, must be > 1 */
    double backoff_factor; /* default 0.5, must be in (0, 1) */
    int growth_interval;   /* default 2000, must be >= 1 */
} snn_loss_scaler_opts;

typedef struct snn_loss_scaler {
    float scale;
    int growth_tracker;    /* consecutive finite steps since the last change */
    double growth_factor, backoff_factor;
    int growth_interval;
} snn_loss_scaler;

/* opts may be NULL; zero fields take the defaults above. */
snn_status snn_loss_scaler_init(snn_loss_scaler *s, const snn_loss_scaler_opts *opts);
float snn_loss_scaler_scale(const snn_loss_scaler *s);
/* g[i] *= float(1 / double(scale)) for all n values; sets *found_inf = 1 if any g[i] was
 * inf or NaN (leaves it unchanged otherwise, so one flag can cover several buffers).
 * Gradients are unscaled even when found_inf (the step is skipped anyway). */
snn_status snn_loss_scaler_unscale(const snn_loss_scaler *s, float *grads, size_t n,
                                   int *found_inf);
snn_status snn_loss_scaler_update(snn_loss_scaler *s, int found_inf);
/* Checkpoint state: the scale and the growth tracker. set checks scale finite > 0 and
 * 0 <= growth_tracker < growth_interval. */
void snn_loss_scaler_get_state(const snn_loss_scaler *s, float *scale, int *growth_tracker);
snn_status snn_loss_scaler_set_state(snn_loss_scaler *s, float scale, int growth_tracker);

#ifdef __cplusplus
}
#endif
#endif
