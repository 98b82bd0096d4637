/* The precision configuration: names, string parsing with SpikingJelly's normalisation,
 * validation in the reference's order (reference spikingjelly-core.md §6.1, §5.3), and a
 * JSON form with a stable key order for checkpoints and reports. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "snn/precision.h"

#define NAME_CAP 64

/* ---- names -------------------------------------------------------------------------- */

static const char *const mode_names[SNN_PRECISION_MODE_COUNT] = {"fp32", "fp16", "bf16", "fp8"};
static const char *const recipe_names[SNN_FP8_RECIPE_COUNT] = {"auto", "delayed", "current",
                                                               "block", "mxfp8"};
static const char *const storage_names[SNN_NEURON_STORAGE_COUNT] = {
    NULL, "fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2"};
static const char *const compute_names[SNN_NEURON_COMPUTE_COUNT] = {"fp32", "fp16", "bf16", "fp8"};
static const char *const format_names[SNN_FP8_FORMAT_COUNT] = {"default", "hybrid", "e4m3"};
static const char *const algo_names[SNN_AMAX_COMPUTE_COUNT] = {"max", "most_recent"};

const char *snn_precision_mode_name(snn_precision_mode m) {
    return (unsigned)m < SNN_PRECISION_MODE_COUNT ? mode_names[m] : NULL;
}
const char *snn_fp8_recipe_name(snn_fp8_recipe r) {
    return (unsigned)r < SNN_FP8_RECIPE_COUNT ? recipe_names[r] : NULL;
}
const char *snn_neuron_storage_name(snn_neuron_storage s) {
    return (unsigned)s < SNN_NEURON_STORAGE_COUNT ? storage_names[s] : NULL;
}
const char *snn_neuron_compute_name(snn_neuron_compute c) {
    return (unsigned)c < SNN_NEURON_COMPUTE_COUNT ? compute_names[c] : NULL;
}
const char *snn_fp8_format_name(snn_fp8_format f) {
    return (unsigned)f < SNN_FP8_FORMAT_COUNT ? format_names[f] : NULL;
}
const char *snn_amax_compute_name(snn_amax_compute a) {
    return (unsigned)a < SNN_AMAX_COMPUTE_COUNT ? algo_names[a] : NULL;
}

snn_dtype snn_neuron_storage_dtype(snn_neuron_storage s) {
    switch (s) {
    case SNN_NEURON_STORAGE_FP16: return SNN_F16;
    case SNN_NEURON_STORAGE_BF16: return SNN_BF16;
    case SNN_NEURON_STORAGE_E4M3: return SNN_F8E4M3;
    case SNN_NEURON_STORAGE_E5M2: return SNN_F8E5M2;
    default: return SNN_F32;
    }
}

snn_dtype snn_neuron_compute_dtype(snn_neuron_compute c, snn_neuron_storage s) {
    switch (c) {
    case SNN_NEURON_COMPUTE_FP16: return SNN_F16;
    case SNN_NEURON_COMPUTE_BF16: return SNN_BF16;
    case SNN_NEURON_COMPUTE_FP8: return snn_neuron_storage_dtype(s);
    default: return SNN_F32;
    }
}

int snn_precision_config_uses_loss_scaler(const snn_precision_config *cfg) {
    return cfg && cfg->mode == SNN_PRECISION_FP16;
}

snn_fp8_recipe snn_fp8_recipe_resolve_auto(snn_fp8_recipe r, int cc_major, int cc_minor) {
    (void)cc_minor;
    if (r != SNN_FP8_RECIPE_AUTO) return r;
    if (cc_major >= 12) return SNN_FP8_RECIPE_CURRENT;
    if (cc_major >= 10) return SNN_FP8_RECIPE_MXFP8;
    return SNN_FP8_RECIPE_DELAYED; /* sm_89, sm_90 and the CPU reference (Hopper rules) */
}

snn_precision_config snn_precision_config_default(void) {
    snn_precision_config c;
    memset(&c, 0, sizeof c);
    c.amax_history_len = SNN_FP8_DEFAULT_HISTORY_LEN;
    return c;
}

static int eff_history(const snn_precision_config *c) {
    return c->amax_history_len ? c->amax_history_len : SNN_FP8_DEFAULT_HISTORY_LEN;
}

/* ---- string normalisation ----------------------------------------------------------- */

/* Lower-case src into dst; optionally drop a leading "torch." (after lower-casing, so
 * "Torch.BFloat16" works too). 0 if src does not fit (no valid name is that long). */
static int normalise(const char *src, char *dst, int drop_torch) {
    size_t n = strlen(src);
    if (n >= NAME_CAP) return 0;
    for (size_t i = 0; i <= n; i++) dst[i] = (char)tolower((unsigned char)src[i]);
    if (drop_torch && strncmp(dst, "torch.", 6) == 0) memmove(dst, dst + 6, strlen(dst + 6) + 1);
    return 1;
}

typedef struct {
    const char *name;
    int value;
} alias;

static const alias storage_aliases[] = {
    {"fp32", SNN_NEURON_STORAGE_FP32},          {"float32", SNN_NEURON_STORAGE_FP32},
    {"float", SNN_NEURON_STORAGE_FP32},         {"fp16", SNN_NEURON_STORAGE_FP16},
    {"float16", SNN_NEURON_STORAGE_FP16},       {"half", SNN_NEURON_STORAGE_FP16},
    {"bf16", SNN_NEURON_STORAGE_BF16},          {"bfloat16", SNN_NEURON_STORAGE_BF16},
    {"float8_e4m3fn", SNN_NEURON_STORAGE_E4M3}, {"fp8_e4m3fn", SNN_NEURON_STORAGE_E4M3},
    {"e4m3fn", SNN_NEURON_STORAGE_E4M3},        {"float8_e5m2", SNN_NEURON_STORAGE_E5M2},
    {"fp8_e5m2", SNN_NEURON_STORAGE_E5M2},      {"e5m2", SNN_NEURON_STORAGE_E5M2},
    {NULL, 0}};

static const alias compute_aliases[] = {
    {"fp32", SNN_NEURON_COMPUTE_FP32}, {"float32", SNN_NEURON_COMPUTE_FP32},
    {"float", SNN_NEURON_COMPUTE_FP32}, {"fp16", SNN_NEURON_COMPUTE_FP16},
    {"float16", SNN_NEURON_COMPUTE_FP16}, {"half", SNN_NEURON_COMPUTE_FP16},
    {"bf16", SNN_NEURON_COMPUTE_BF16}, {"bfloat16", SNN_NEURON_COMPUTE_BF16},
    {"fp8", SNN_NEURON_COMPUTE_FP8},   {"float8", SNN_NEURON_COMPUTE_FP8},
    {NULL, 0}};

static int lookup(const alias *t, const char *s, int *out) {
    for (; t->name; t++)
        if (strcmp(t->name, s) == 0) {
            *out = t->value;
            return 1;
        }
    return 0;
}

static int lookup_names(const char *const *names, int count, const char *s, int *out) {
    for (int i = 0; i < count; i++)
        if (names[i] && strcmp(names[i], s) == 0) {
            *out = i;
            return 1;
        }
    return 0;
}

/* Rule 1. */
static snn_status parse_mode(const char *value, snn_precision_mode *out) {
    char v[NAME_CAP];
    int m;
    if (!value)
        return snn_error(SNN_E_INVALID, "precision mode is missing (mode=none): mode must be one "
                                        "of fp32, fp16, bf16, fp8");
    if (!normalise(value, v, 0) || !lookup_names(mode_names, SNN_PRECISION_MODE_COUNT, v, &m)) {
        if (strcmp(v, "fp8-te") == 0 || strcmp(v, "fp8-torchao") == 0)
            return snn_error(SNN_E_INVALID,
                             "precision mode '%s' was removed: use mode='fp8' with "
                             "fp8_recipe=auto|delayed|current|block|mxfp8",
                             value);
        const char *hint = "";
        if (!strcmp(v, "bfloat16")) hint = " (did you mean 'bf16'?)";
        else if (!strcmp(v, "float16") || !strcmp(v, "half")) hint = " (did you mean 'fp16'?)";
        else if (!strcmp(v, "float32") || !strcmp(v, "float")) hint = " (did you mean 'fp32'?)";
        else if (!strcmp(v, "float8") || !strncmp(v, "fp8_", 4) || !strncmp(v, "float8_", 7))
            hint = " (did you mean 'fp8'? the FP8 formats follow from fp8_recipe/fp8_format)";
        return snn_error(SNN_E_INVALID,
                         "unsupported precision mode '%.64s': mode must be one of fp32, fp16, "
                         "bf16, fp8%s",
                         value, hint);
    }
    *out = (snn_precision_mode)m;
    return SNN_OK;
}

/* Rule 2. */
static snn_status parse_recipe(const char *value, snn_fp8_recipe *out) {
    char v[NAME_CAP];
    int r;
    if (!value) {
        *out = SNN_FP8_RECIPE_AUTO;
        return SNN_OK;
    }
    if (!normalise(value, v, 0) || !lookup_names(recipe_names, SNN_FP8_RECIPE_COUNT, v, &r)) {
        const char *hint = "";
        if (!strcmp(v, "tensorwise")) hint = " ('tensorwise' is called 'current' here)";
        else if (!strcmp(v, "blockwise")) hint = " ('blockwise' is called 'block' here)";
        return snn_error(SNN_E_INVALID,
                         "Unsupported fp8_recipe '%.64s': fp8_recipe must be one of auto, "
                         "delayed, current, block, mxfp8%s",
                         value, hint);
    }
    *out = (snn_fp8_recipe)r;
    return SNN_OK;
}

/* Rule 5 (storage). "none" (or "") unsets it when allow_none. */
static snn_status parse_storage(const char *field, const char *value, int allow_none,
                                snn_neuron_storage *out) {
    char v[NAME_CAP];
    int s;
    if (!value) {
        *out = SNN_NEURON_STORAGE_UNSET;
        return SNN_OK;
    }
    int ok = normalise(value, v, 1);
    if (ok && allow_none && (!strcmp(v, "none") || v[0] == '\0')) {
        *out = SNN_NEURON_STORAGE_UNSET;
        return SNN_OK;
    }
    if (ok && (!strcmp(v, "fp8") || !strcmp(v, "float8")))
        return snn_error(SNN_E_INVALID,
                         "%s='%s' is ambiguous: name the FP8 format, float8_e4m3fn or "
                         "float8_e5m2",
                         field, value);
    if (!ok || !lookup(storage_aliases, v, &s))
        return snn_error(SNN_E_INVALID,
                         "unsupported %s '%.64s': it must be one of fp32, fp16, bf16, "
                         "float8_e4m3fn, float8_e5m2",
                         field, value);
    *out = (snn_neuron_storage)s;
    return SNN_OK;
}

/* Rule 5 (forward/backward arithmetic). */
static snn_status parse_compute(const char *field, const char *value, snn_neuron_compute *out) {
    char v[NAME_CAP];
    int c;
    if (!value) {
        *out = SNN_NEURON_COMPUTE_FP32;
        return SNN_OK;
    }
    if (!normalise(value, v, 1) || !lookup(compute_aliases, v, &c)) {
        const char *hint = "";
        if (!strncmp(v, "float8_", 7) || !strncmp(v, "fp8_", 4) || !strncmp(v, "e4m3", 4) ||
            !strncmp(v, "e5m2", 4))
            hint = " (use 'fp8': FP8 arithmetic runs in the FP8 format of neuron_storage)";
        return snn_error(SNN_E_INVALID,
                         "unsupported %s '%.64s': it must be one of fp8, fp16, bf16, fp32%s",
                         field, value, hint);
    }
    *out = (snn_neuron_compute)c;
    return SNN_OK;
}

static snn_status parse_format(const char *value, snn_fp8_format *out) {
    char v[NAME_CAP];
    int f;
    if (normalise(value, v, 0) && lookup_names(format_names, SNN_FP8_FORMAT_COUNT, v, &f)) {
        *out = (snn_fp8_format)f;
        return SNN_OK;
    }
    if (!strcmp(v, "e5m2"))
        return snn_error(SNN_E_INVALID, "fp8_format='e5m2' is not supported: pure E5M2 training "
                                        "is not supported (use hybrid: E4M3 forward, E5M2 "
                                        "gradients)");
    return snn_error(SNN_E_INVALID, "unsupported fp8_format '%.64s': it must be hybrid or e4m3",
                     value);
}

static snn_status parse_algo(const char *value, snn_amax_compute *out) {
    char v[NAME_CAP];
    int a;
    if (normalise(value, v, 0)) {
        for (char *p = v; *p; p++)
            if (*p == '-') *p = '_';
        if (lookup_names(algo_names, SNN_AMAX_COMPUTE_COUNT, v, &a)) {
            *out = (snn_amax_compute)a;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_INVALID,
                     "unsupported amax_compute_algo '%.64s': it must be max or most_recent", value);
}

static snn_status parse_int(const char *field, const char *value, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (end == value || *end != '\0' || errno || v < lo || v > hi)
        return snn_error(SNN_E_INVALID, "%s must be an integer in [%ld, %ld], got '%.64s'", field,
                         lo, hi, value);
    *out = (int)v;
    return SNN_OK;
}

static snn_status parse_bool(const char *field, const char *value, int *out) {
    char v[NAME_CAP];
    if (normalise(value, v, 0)) {
        if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) {
            *out = 1;
            return SNN_OK;
        }
        if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) {
            *out = 0;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_INVALID, "%s must be true or false (1/0), got '%.64s'", field, value);
}

#define MAX_HISTORY (1 << 20)

/* ---- validation ----------------------------------------------------------------------- */

/* Rule 6 in isolation (used by validate and parse). */
static snn_status check_fp8_compute(const snn_precision_config *c) {
    if (c->neuron_storage == SNN_NEURON_STORAGE_E4M3 || c->neuron_storage == SNN_NEURON_STORAGE_E5M2)
        return SNN_OK;
    const char *field = c->neuron_fwd == SNN_NEURON_COMPUTE_FP8 ? "neuron_fwd" : "neuron_bwd";
    if (c->neuron_fwd != SNN_NEURON_COMPUTE_FP8 && c->neuron_bwd != SNN_NEURON_COMPUTE_FP8)
        return SNN_OK;
    return snn_error(SNN_E_INVALID,
                     "FP8 neuron compute (FP8 Triton compute) requires FP8 neuron storage: "
                     "%s='fp8' needs neuron_storage float8_e4m3fn or float8_e5m2, got '%s'",
                     field, snn_neuron_storage_name(c->neuron_storage));
}

/* Rule 4 with the offending field's name. */
static snn_status needs_storage(const char *field, const char *value) {
    return snn_error(SNN_E_INVALID,
                     "%s='%s' requires neuron_storage (triton_storage) to be set: neuron_fwd "
                     "and neuron_bwd only configure the mixed-precision neuron path",
                     field, value);
}

/* Rules 7 and 8: our FP8 recipe knobs. */
static snn_status check_knobs(const snn_precision_config *c) {
    if ((unsigned)c->fp8_format >= SNN_FP8_FORMAT_COUNT)
        return snn_error(SNN_E_INVALID, "fp8_format %d is not one of default, hybrid, e4m3",
                         (int)c->fp8_format);
    if ((unsigned)c->amax_compute_algo >= SNN_AMAX_COMPUTE_COUNT)
        return snn_error(SNN_E_INVALID, "amax_compute_algo %d is not one of max, most_recent",
                         (int)c->amax_compute_algo);
    if (c->amax_history_len < 0 || c->amax_history_len > MAX_HISTORY)
        return snn_error(SNN_E_INVALID, "amax_history_len must be in [1, %d], got %d",
                         MAX_HISTORY, c->amax_history_len);
    if (c->margin < 0 || c->margin > 126)
        return snn_error(SNN_E_INVALID, "margin must be in [0, 126], got %d", c->margin);
    if ((c->current_pow2_scales != 0 && c->current_pow2_scales != 1) ||
        (c->block_fp32_scales != 0 && c->block_fp32_scales != 1))
        return snn_error(SNN_E_INVALID, "%s must be 0 or 1",
                         c->current_pow2_scales != 0 && c->current_pow2_scales != 1
                             ? "current_pow2_scales"
                             : "block_fp32_scales");

    /* Knobs left at their defaults are always fine; a changed one must apply. */
    snn_fp8_recipe r = c->fp8_recipe;
    const char *dset = eff_history(c) != SNN_FP8_DEFAULT_HISTORY_LEN ? "amax_history_len"
                       : c->amax_compute_algo != SNN_AMAX_COMPUTE_MAX ? "amax_compute_algo"
                       : c->margin != 0                               ? "margin"
                                                                      : NULL;
    const char *any = dset                                       ? dset
                      : c->fp8_format != SNN_FP8_FORMAT_DEFAULT ? "fp8_format"
                      : c->current_pow2_scales                  ? "current_pow2_scales"
                      : c->block_fp32_scales                    ? "block_fp32_scales"
                                                                : NULL;
    if (any && c->mode != SNN_PRECISION_FP8)
        return snn_error(SNN_E_INVALID, "%s is an FP8 recipe setting and is only valid when "
                         "mode='fp8' (got mode='%s')", any, snn_precision_mode_name(c->mode));
    if (dset && r != SNN_FP8_RECIPE_DELAYED && r != SNN_FP8_RECIPE_AUTO)
        return snn_error(SNN_E_INVALID, "%s only applies to fp8_recipe='delayed' (or 'auto'), "
                         "got fp8_recipe='%s'", dset, snn_fp8_recipe_name(r));
    if (c->current_pow2_scales && r != SNN_FP8_RECIPE_CURRENT && r != SNN_FP8_RECIPE_AUTO)
        return snn_error(SNN_E_INVALID, "current_pow2_scales only applies to "
                         "fp8_recipe='current' (or 'auto'), got fp8_recipe='%s'",
                         snn_fp8_recipe_name(r));
    if (c->block_fp32_scales && r != SNN_FP8_RECIPE_BLOCK && r != SNN_FP8_RECIPE_AUTO)
        return snn_error(SNN_E_INVALID, "block_fp32_scales only applies to "
                         "fp8_recipe='block' (or 'auto'), got fp8_recipe='%s'",
                         snn_fp8_recipe_name(r));
    return SNN_OK;
}

snn_status snn_precision_config_validate(const snn_precision_config *c) {
    if (!c) return snn_error(SNN_E_INVALID, "precision config is NULL");
    /* 1, 2: only integer values out of range can get here (strings are parsed). */
    if ((unsigned)c->mode >= SNN_PRECISION_MODE_COUNT)
        return snn_error(SNN_E_INVALID, "precision mode %d is not one of fp32, fp16, bf16, fp8",
                         (int)c->mode);
    if ((unsigned)c->fp8_recipe >= SNN_FP8_RECIPE_COUNT)
        return snn_error(SNN_E_INVALID, "Unsupported fp8_recipe %d: fp8_recipe must be one of "
                         "auto, delayed, current, block, mxfp8", (int)c->fp8_recipe);
    /* 3 */
    if (c->mode != SNN_PRECISION_FP8 && c->fp8_recipe != SNN_FP8_RECIPE_AUTO)
        return snn_error(SNN_E_INVALID, "fp8_recipe is only valid when mode='fp8' (got mode='%s', "
                         "fp8_recipe='%s')", snn_precision_mode_name(c->mode),
                         snn_fp8_recipe_name(c->fp8_recipe));
    /* 4 */
    if (c->neuron_storage == SNN_NEURON_STORAGE_UNSET) {
        if (c->neuron_fwd != SNN_NEURON_COMPUTE_FP32) {
            const char *n = snn_neuron_compute_name(c->neuron_fwd);
            return needs_storage("neuron_fwd", n ? n : "?");
        }
        if (c->neuron_bwd != SNN_NEURON_COMPUTE_FP32) {
            const char *n = snn_neuron_compute_name(c->neuron_bwd);
            return needs_storage("neuron_bwd", n ? n : "?");
        }
    }
    /* 5 */
    if ((unsigned)c->neuron_storage >= SNN_NEURON_STORAGE_COUNT)
        return snn_error(SNN_E_INVALID, "neuron_storage %d is not one of fp32, fp16, bf16, "
                         "float8_e4m3fn, float8_e5m2", (int)c->neuron_storage);
    if ((unsigned)c->neuron_fwd >= SNN_NEURON_COMPUTE_COUNT)
        return snn_error(SNN_E_INVALID, "neuron_fwd %d is not one of fp8, fp16, bf16, fp32",
                         (int)c->neuron_fwd);
    if ((unsigned)c->neuron_bwd >= SNN_NEURON_COMPUTE_COUNT)
        return snn_error(SNN_E_INVALID, "neuron_bwd %d is not one of fp8, fp16, bf16, fp32",
                         (int)c->neuron_bwd);
    /* 6 */
    SNN_TRY(check_fp8_compute(c));
    /* 7, 8 */
    return check_knobs(c);
}

snn_status snn_precision_config_parse(const char *mode, const char *fp8_recipe,
                                      const char *neuron_storage, const char *neuron_fwd,
                                      const char *neuron_bwd, snn_precision_config *out) {
    snn_precision_config c = snn_precision_config_default();
    SNN_TRY(parse_mode(mode, &c.mode));
    SNN_TRY(parse_recipe(fp8_recipe, &c.fp8_recipe));
    if (c.mode != SNN_PRECISION_FP8 && c.fp8_recipe != SNN_FP8_RECIPE_AUTO)
        return snn_precision_config_validate(&c); /* rule 3's message */
    /* Rule 4 comes before the value checks of rule 5, as in the reference: any neuron_fwd
     * or neuron_bwd that is not (an alias of) fp32 needs a storage dtype. */
    if (!neuron_storage) {
        snn_neuron_compute k;
        if (neuron_fwd && (parse_compute("neuron_fwd", neuron_fwd, &k) != SNN_OK ||
                           k != SNN_NEURON_COMPUTE_FP32))
            return needs_storage("neuron_fwd", neuron_fwd);
        if (neuron_bwd && (parse_compute("neuron_bwd", neuron_bwd, &k) != SNN_OK ||
                           k != SNN_NEURON_COMPUTE_FP32))
            return needs_storage("neuron_bwd", neuron_bwd);
    }
    SNN_TRY(parse_storage("neuron_storage", neuron_storage, 0, &c.neuron_storage));
    SNN_TRY(parse_compute("neuron_fwd", neuron_fwd, &c.neuron_fwd));
    SNN_TRY(parse_compute("neuron_bwd", neuron_bwd, &c.neuron_bwd));
    SNN_TRY(snn_precision_config_validate(&c));
    *out = c;
    return SNN_OK;
}

/* ---- one field from a string ---------------------------------------------------------- */

typedef enum {
    F_MODE, F_RECIPE, F_STORAGE, F_FWD, F_BWD, F_FORMAT, F_HISTORY, F_ALGO, F_MARGIN,
    F_CUR_POW2, F_BLOCK_F32, F_UNKNOWN
} field_id;

/* Canonical field names in JSON order. */
static const char *const field_names[F_UNKNOWN] = {
    "mode", "fp8_recipe", "neuron_storage", "neuron_fwd", "neuron_bwd", "fp8_format",
    "amax_history_len", "amax_compute_algo", "margin", "current_pow2_scales",
    "block_fp32_scales"};

/* '-' and '_' are the same; triton_* are the reference's names. "precision" (the CLI flag
 * name) is accepted only when cli is set: in a dict/JSON it is an unexpected keyword, as
 * in the reference. */
static field_id field_lookup(const char *name, int cli) {
    char v[NAME_CAP];
    if (!normalise(name, v, 0)) return F_UNKNOWN;
    for (char *p = v; *p; p++)
        if (*p == '-') *p = '_';
    int i;
    if (lookup_names(field_names, F_UNKNOWN, v, &i)) return (field_id)i;
    if (!strcmp(v, "triton_storage")) return F_STORAGE;
    if (!strcmp(v, "triton_fwd")) return F_FWD;
    if (!strcmp(v, "triton_bwd")) return F_BWD;
    if (cli && !strcmp(v, "precision")) return F_MODE;
    return F_UNKNOWN;
}

static snn_status set_field(snn_precision_config *c, field_id f, const char *value) {
    const char *name = field_names[f];
    switch (f) {
    case F_MODE: return parse_mode(value, &c->mode);
    case F_RECIPE: return parse_recipe(value, &c->fp8_recipe);
    case F_STORAGE: return parse_storage(name, value, 1, &c->neuron_storage);
    case F_FWD: return parse_compute(name, value, &c->neuron_fwd);
    case F_BWD: return parse_compute(name, value, &c->neuron_bwd);
    case F_FORMAT: return parse_format(value, &c->fp8_format);
    case F_HISTORY: return parse_int(name, value, 1, MAX_HISTORY, &c->amax_history_len);
    case F_ALGO: return parse_algo(value, &c->amax_compute_algo);
    case F_MARGIN: return parse_int(name, value, 0, 126, &c->margin);
    case F_CUR_POW2: return parse_bool(name, value, &c->current_pow2_scales);
    case F_BLOCK_F32: return parse_bool(name, value, &c->block_fp32_scales);
    default: break;
    }
    return snn_error(SNN_E_INVALID, "internal: bad precision field");
}

static snn_status unexpected(const char *name) {
    static const char *const removed[] = {"strictness", "device", "fp8_autocast_dtype",
                                          "precision", NULL};
    for (int i = 0; removed[i]; i++)
        if (!strcmp(name, removed[i]))
            return snn_error(SNN_E_INVALID,
                             "precision config got an unexpected keyword '%s' (it is not a "
                             "precision config field; fields: mode, fp8_recipe, "
                             "neuron_storage, neuron_fwd, neuron_bwd and the FP8 recipe knobs)",
                             name);
    return snn_error(SNN_E_INVALID,
                     "precision config got an unexpected keyword '%.64s' (fields: mode, "
                     "fp8_recipe, neuron_storage, neuron_fwd, neuron_bwd, fp8_format, "
                     "amax_history_len, amax_compute_algo, margin, current_pow2_scales, "
                     "block_fp32_scales)",
                     name);
}

snn_status snn_precision_config_set(snn_precision_config *cfg, const char *field,
                                    const char *value) {
    if (!cfg || !field) return snn_error(SNN_E_INVALID, "precision config and field are required");
    field_id f = field_lookup(field, 1);
    if (f == F_UNKNOWN) return unexpected(field);
    if (!value) return snn_error(SNN_E_INVALID, "%s needs a value", field_names[f]);
    snn_precision_config c = *cfg;
    SNN_TRY(set_field(&c, f, value));
    *cfg = c;
    return SNN_OK;
}

/* ---- JSON ------------------------------------------------------------------------------- */

snn_status snn_precision_config_to_json(const snn_precision_config *c, char *buf, size_t cap) {
    SNN_TRY(snn_precision_config_validate(c));
    char storage[32];
    if (c->neuron_storage == SNN_NEURON_STORAGE_UNSET) snprintf(storage, sizeof storage, "null");
    else snprintf(storage, sizeof storage, "\"%s\"", snn_neuron_storage_name(c->neuron_storage));
    int n = snprintf(buf, cap,
                     "{\"mode\":\"%s\",\"fp8_recipe\":\"%s\",\"neuron_storage\":%s,"
                     "\"neuron_fwd\":\"%s\",\"neuron_bwd\":\"%s\",\"fp8_format\":\"%s\","
                     "\"amax_history_len\":%d,\"amax_compute_algo\":\"%s\",\"margin\":%d,"
                     "\"current_pow2_scales\":%s,\"block_fp32_scales\":%s}",
                     snn_precision_mode_name(c->mode), snn_fp8_recipe_name(c->fp8_recipe), storage,
                     snn_neuron_compute_name(c->neuron_fwd), snn_neuron_compute_name(c->neuron_bwd),
                     snn_fp8_format_name(c->fp8_format), eff_history(c),
                     snn_amax_compute_name(c->amax_compute_algo), c->margin,
                     c->current_pow2_scales ? "true" : "false",
                     c->block_fp32_scales ? "true" : "false");
    if (n < 0 || (size_t)n >= cap)
        return snn_error(SNN_E_INVALID, "buffer of %zu bytes is too small for the precision "
                         "config JSON (%d needed)", cap, n + 1);
    return SNN_OK;
}

/* A JSON value of a knob field as the string the setter takes. */
static snn_status json_scalar(const cJSON *it, field_id f, char *tmp, size_t cap,
                              const char **out) {
    const char *name = field_names[f];
    if (cJSON_IsString(it)) {
        *out = it->valuestring;
        if (f == F_HISTORY || f == F_MARGIN || f == F_CUR_POW2 || f == F_BLOCK_F32)
            return snn_error(SNN_E_INVALID, "%s must be a JSON %s, got a string", name,
                             f == F_HISTORY || f == F_MARGIN ? "integer" : "boolean");
        return SNN_OK;
    }
    if (f == F_HISTORY || f == F_MARGIN) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
        if (!cJSON_IsNumber(it) || d != (double)(long)d)
            return snn_error(SNN_E_INVALID, "%s must be a JSON integer", name);
        snprintf(tmp, cap, "%ld", (long)d);
        *out = tmp;
        return SNN_OK;
    }
    if (f == F_CUR_POW2 || f == F_BLOCK_F32) {
        if (!cJSON_IsBool(it)) return snn_error(SNN_E_INVALID, "%s must be true or false", name);
        *out = cJSON_IsTrue(it) ? "1" : "0";
        return SNN_OK;
    }
    return snn_error(SNN_E_INVALID, "%s must be a JSON string", name);
}

snn_status snn_precision_config_from_json(const char *json, snn_precision_config *out) {
    if (!json || !out) return snn_error(SNN_E_INVALID, "precision config JSON and output are required");
    /* cJSON would cut a key at an escaped NUL ("mode\u0000x" read as "mode"). */
    if (strstr(json, "\\u0000")) return snn_error(SNN_E_FORMAT, "precision config contains an escaped NUL (\\u0000)");
    cJSON *root = cJSON_Parse(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return snn_error(SNN_E_FORMAT, "precision config is not a JSON object");
    }
    /* Gather the constructor's five strings first so the checks run in the reference's
     * order whatever the key order; then the knobs. */
    const cJSON *seen[F_UNKNOWN] = {0};
    snn_status st = SNN_OK;
    for (const cJSON *it = root->child; it && st == SNN_OK; it = it->next) {
        field_id f = field_lookup(it->string, 0);
        if (f == F_UNKNOWN) st = unexpected(it->string);
        else if (seen[f])
            st = snn_error(SNN_E_INVALID, "precision config sets %s twice (a field and its "
                           "triton_* alias?)", field_names[f]);
        else seen[f] = it;
    }
    const char *s5[5] = {"fp32", NULL, NULL, NULL, NULL};
    for (int f = F_MODE; f <= F_BWD && st == SNN_OK; f++) {
        const cJSON *it = seen[f];
        if (!it) continue;
        if (cJSON_IsNull(it)) s5[f] = NULL; /* mode=None is an error, storage=None unsets */
        else if (cJSON_IsString(it)) s5[f] = it->valuestring;
        else st = snn_error(SNN_E_INVALID, "%s must be a JSON string%s", field_names[f],
                            f == F_STORAGE ? " or null" : "");
    }
    snn_precision_config c;
    if (st == SNN_OK) st = snn_precision_config_parse(s5[0], s5[1], s5[2], s5[3], s5[4], &c);
    for (int f = F_FORMAT; f < F_UNKNOWN && st == SNN_OK; f++) {
        char tmp[32];
        const char *v = NULL;
        if (!seen[f]) continue;
        st = json_scalar(seen[f], (field_id)f, tmp, sizeof tmp, &v);
        if (st == SNN_OK) st = set_field(&c, (field_id)f, v);
    }
    if (st == SNN_OK) st = snn_precision_config_validate(&c);
    cJSON_Delete(root);
    if (st == SNN_OK) *out = c;
    return st;
}
