/* The model zoo's entry point from a configuration (checkpoint metadata). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/mlp.h"
#include "models/zoo.h"
#include "snn/lm.h"

snn_status snn_zoo_add(snn_module *parent, snn_module *child, const char *local_name) {
    if (child && local_name) snprintf(child->name, sizeof child->name, "%s", local_name);
    return snn_module_add_child(parent, child);
}

snn_status snn_zoo_range(const char *model, const char *field, long long v, long long lo, long long hi) {
    if (v >= lo && v <= hi) return SNN_OK;
    return snn_error(SNN_E_INVALID, "%s: %s must be in %lld..%lld, got %lld", model, field, lo, hi, v);
}

snn_status snn_zoo_product(const char *model, const char *what, int64_t a, int64_t b, int64_t c,
                           int64_t limit) {
    int64_t ab, abc;
    if (a < 0 || b < 0 || c < 0 || __builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc) ||
        abc > limit)
        return snn_error(SNN_E_INVALID, "%s: %s = %lld x %lld x %lld exceeds the limit of %lld", model, what,
                         (long long)a, (long long)b, (long long)c, (long long)limit);
    return SNN_OK;
}

/* The configuration comes from a file: every field is checked for its JSON type, integers
 * must be exact integers inside the field's range (no fractions, strings, negatives or
 * values that would wrap an int), and fields this build does not know are refused. A
 * field left out takes the constructor's default (0). */
typedef struct {
    const cJSON *o;
    const char *model;
    snn_status st;
} cfg_reader;

static int cfg_int(cfg_reader *r, const char *k, long long lo, long long hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->o, k);
    if (!v || r->st != SNN_OK) return 0;
    if (!cJSON_IsNumber(v)) {
        r->st = snn_error(SNN_E_FORMAT, "model configuration (%s): \"%s\" must be an integer in %lld..%lld, not a %s",
                          r->model, k, lo, hi, cJSON_IsString(v) ? "string" : "non-number");
        return 0;
    }
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(long long)d) {
        r->st = snn_error(SNN_E_FORMAT, "model configuration (%s): \"%s\" must be an integer in %lld..%lld, got %.17g",
                          r->model, k, lo, hi, d);
        return 0;
    }
    return (int)d;
}

static float cfg_float(cfg_reader *r, const char *k, double lo, double hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->o, k);
    if (!v || r->st != SNN_OK) return 0;
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi)) {
        char got[40];
        if (cJSON_IsNumber(v)) snprintf(got, sizeof got, "%.9g", d);
        else snprintf(got, sizeof got, "a %s", cJSON_IsString(v) ? "string" : "non-number");
        r->st = snn_error(SNN_E_FORMAT, "model configuration (%s): \"%s\" must be a number in %g..%g, got %s",
                          r->model, k, lo, hi, got);
        return 0;
    }
    return (float)d;
}

/* Refuse keys outside `known` (NULL-terminated) and keys given twice. */
static snn_status cfg_keys(const cJSON *o, const char *model, const char *const *known) {
    for (const cJSON *e = o->child; e; e = e->next) {
        int ok = 0;
        for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(e->string, *k);
        if (!ok)
            return snn_error(SNN_E_FORMAT, "model configuration (%s): unknown field \"%.64s\"", model, e->string);
        for (const cJSON *f = e->next; f; f = f->next)
            if (!strcmp(e->string, f->string))
                return snn_error(SNN_E_FORMAT, "model configuration (%s): field \"%s\" appears twice", model,
                                 e->string);
    }
    return SNN_OK;
}

snn_status snn_model_create_from_config(const char *json, uint64_t seed, snn_model **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_model_create_from_config: out is NULL");
    *out = NULL;
    if (!json) return snn_error(SNN_E_INVALID, "snn_model_create_from_config: json is NULL");
    /* cJSON turns \u0000 into a NUL that cuts a key short; no configuration needs one. */
    if (strstr(json, "\\u0000"))
        return snn_error(SNN_E_FORMAT, "model configuration contains an escaped NUL (\\u0000)");
    if (strlen(json) > 4096)
        return snn_error(SNN_E_FORMAT, "model configuration is %zu bytes, more than the 4096 a configuration needs",
                         strlen(json));
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return snn_error(SNN_E_FORMAT, "model configuration is not a JSON object");
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "model");
    cfg_reader r = {o, cJSON_IsString(kind) ? kind->valuestring : "?", SNN_OK};
    snn_status st;
    if (!cJSON_IsString(kind)) {
        st = snn_error(SNN_E_FORMAT, "model configuration has no \"model\" name");
    } else if (!strcmp(kind->valuestring, "fcsnn")) {
        static const char *const keys[] = {"model", "in_features", "hidden", "depth", "classes", "tau", NULL};
        r.st = cfg_keys(o, "fcsnn", keys);
        snn_fcsnn_opts f = {
            .in_features = cfg_int(&r, "in_features", 1, SNN_ZOO_MAX_FEATURES),
            .hidden = cfg_int(&r, "hidden", 1, SNN_ZOO_MAX_WIDTH),
            .depth = cfg_int(&r, "depth", 1, SNN_ZOO_MAX_DEPTH),
            .classes = cfg_int(&r, "classes", 1, SNN_ZOO_MAX_WIDTH),
            .tau = cfg_float(&r, "tau", 1.0, 1e6),
        };
        st = r.st != SNN_OK ? r.st : snn_fcsnn_create(&f, seed, out);
    } else if (!strcmp(kind->valuestring, "convsnn")) {
        static const char *const keys[] = {"model", "in_channels", "height", "width", "channels", "classes", NULL};
        r.st = cfg_keys(o, "convsnn", keys);
        snn_convsnn_opts c = {
            .in_channels = cfg_int(&r, "in_channels", 1, SNN_ZOO_MAX_CHANNELS),
            .height = cfg_int(&r, "height", 4, SNN_ZOO_MAX_SIDE),
            .width = cfg_int(&r, "width", 4, SNN_ZOO_MAX_SIDE),
            .channels = cfg_int(&r, "channels", 1, SNN_ZOO_MAX_CHANNELS),
            .classes = cfg_int(&r, "classes", 1, SNN_ZOO_MAX_WIDTH),
        };
        st = r.st != SNN_OK ? r.st : snn_convsnn_create(&c, seed, out);
    } else if (!strcmp(kind->valuestring, "spikformer")) {
        static const char *const keys[] = {"model", "in_channels", "image_size", "classes", "embed_dim",
                                           "heads", "depth", "mlp_ratio", NULL};
        r.st = cfg_keys(o, "spikformer", keys);
        snn_spikformer_opts s = {
            .in_channels = cfg_int(&r, "in_channels", 1, SNN_ZOO_MAX_CHANNELS),
            .image_size = cfg_int(&r, "image_size", 16, SNN_ZOO_MAX_SIDE),
            .classes = cfg_int(&r, "classes", 1, SNN_ZOO_MAX_WIDTH),
            .embed_dim = cfg_int(&r, "embed_dim", 8, SNN_ZOO_MAX_CHANNELS),
            .heads = cfg_int(&r, "heads", 1, SNN_ZOO_MAX_CHANNELS),
            .depth = cfg_int(&r, "depth", 1, SNN_ZOO_MAX_DEPTH),
            .mlp_ratio = cfg_float(&r, "mlp_ratio", 1.0 / 64, 64),
        };
        st = r.st != SNN_OK ? r.st : snn_spikformer_create(&s, seed, out);
    } else if (!strcmp(kind->valuestring, "mlp")) {
        static const char *const keys[] = {"model", "in_features", "width", "depth", "classes", NULL};
        r.st = cfg_keys(o, "mlp", keys);
        int in = cfg_int(&r, "in_features", 1, SNN_ZOO_MAX_WIDTH), w = cfg_int(&r, "width", 1, SNN_ZOO_MAX_WIDTH);
        int d = cfg_int(&r, "depth", 1, SNN_ZOO_MAX_DEPTH), k = cfg_int(&r, "classes", 1, SNN_ZOO_MAX_WIDTH);
        st = r.st != SNN_OK ? r.st : snn_mlp_create(in, w, d, k, seed, out);
    } else if (!strcmp(kind->valuestring, "gpt") || !strcmp(kind->valuestring, "spikelm")) {
        /* every field is required and range-checked there */
        snn_gpt_opts g;
        st = snn_gpt_opts_from_json(json, &g);
        if (st == SNN_OK) st = snn_gpt_create(&g, seed, out);
    } else {
        st = snn_error(SNN_E_INVALID, "unknown model \"%.64s\" (known: fcsnn, convsnn, spikformer, mlp, gpt, spikelm)",
                       kind->valuestring);
    }
    cJSON_Delete(o);
    return st;
}
