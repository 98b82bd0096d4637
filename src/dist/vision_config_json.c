/* JSON form of the distributed vision configs: "_target_" tags from a closed registry,
 * {"_path_": ...} for file-system paths, sorted keys; strict decoding (unknown tag, unknown
 * field, wrong type, non-integral integer: each an error naming the field), then the same
 * validation as the C structs get. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "snn/vision.h"

#define T_TRAIN "snn.vision.TrainingConfig"
#define T_EVAL "snn.vision.EvaluationConfig"
#define T_PRED "snn.vision.PredictionConfig"
#define T_PREC "snn.precision.PrecisionConfig"

static const char *const layout_names[] = {"NCHW", "NTCHW"};
static const char *const dp_names[] = {"ddp", "fsdp2", "replicate"};
static const char *const exec_names[] = {"eager", "compile", "cuda_graph"};
static const char *const budget_names[] = {"speed", "balanced", "memory"};

/* ---- encoding ----------------------------------------------------------------------- */

static int by_key(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

/* Sort every object's keys (recursively) so the text is canonical. */
static int sort_keys(cJSON *o) {
    if (!o) return 1;
    if (cJSON_IsArray(o)) {
        for (cJSON *c = o->child; c; c = c->next)
            if (!sort_keys(c)) return 0;
        return 1;
    }
    if (!cJSON_IsObject(o)) return 1;
    int n = 0;
    for (cJSON *c = o->child; c; c = c->next) n++;
    if (n == 0) return 1;
    cJSON **v = malloc(sizeof *v * (size_t)n);
    if (!v) return 0;
    int i = 0;
    for (cJSON *c = o->child; c; c = c->next) v[i++] = c;
    qsort(v, (size_t)n, sizeof *v, by_key);
    for (i = 0; i < n; i++) {
        v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: child->prev is the last item */
        v[i]->next = i + 1 < n ? v[i + 1] : NULL;
    }
    o->child = v[0];
    free(v);
    for (cJSON *c = o->child; c; c = c->next)
        if (!sort_keys(c)) return 0;
    return 1;
}

/* cJSON prints doubles with 15 significant digits whenever they compare equal within an
 * epsilon, which loses the last bits: numbers are written here as the shortest of %.15g,
 * %.16g and %.17g that reads back exactly. */
static cJSON *num(double v) {
    char b[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    return cJSON_CreateRaw(b);
}

static void add_num(cJSON *o, const char *key, double v) { cJSON_AddItemToObject(o, key, num(v)); }

static void add_path(cJSON *o, const char *key, const char *path) {
    if (!path[0]) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    cJSON *p = cJSON_AddObjectToObject(o, key);
    if (p) cJSON_AddStringToObject(p, "_path_", path);
}

static void add_name(cJSON *o, const char *key, const char *s) {
    if (s[0]) cJSON_AddStringToObject(o, key, s);
    else cJSON_AddNullToObject(o, key);
}

static cJSON *kwargs_json(const snn_kwargs *k) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < k->n; i++) {
        const snn_kwarg *e = &k->items[i];
        switch (e->type) {
        case SNN_KWARG_NUMBER: add_num(o, e->key, e->num[0]); break;
        case SNN_KWARG_BOOL: cJSON_AddBoolToObject(o, e->key, e->num[0] != 0); break;
        case SNN_KWARG_STRING: cJSON_AddStringToObject(o, e->key, e->str); break;
        case SNN_KWARG_PAIR: {
            cJSON *a = cJSON_AddArrayToObject(o, e->key);
            if (a) {
                cJSON_AddItemToArray(a, num(e->num[0]));
                cJSON_AddItemToArray(a, num(e->num[1]));
            }
            break;
        }
        }
    }
    return o;
}

static cJSON *precision_json(const snn_precision_config *p) {
    char buf[1024];
    if (snn_precision_config_to_json(p, buf, sizeof buf) != SNN_OK) return NULL;
    cJSON *o = cJSON_Parse(buf);
    if (o) cJSON_AddStringToObject(o, "_target_", T_PREC);
    return o;
}

static cJSON *model_json(const snn_vision_model_config *m) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char sm[2] = {m->step_mode, 0};
    cJSON_AddStringToObject(o, "_target_", snn_vision_model_target(m->kind));
    cJSON_AddNumberToObject(o, "time_steps", m->time_steps);
    cJSON_AddNumberToObject(o, "num_classes", m->num_classes);
    cJSON_AddStringToObject(o, "step_mode", sm);
    switch (m->kind) {
    case SNN_VISION_MODEL_FCSNN:
        cJSON_AddNumberToObject(o, "in_features", m->fcsnn.in_features);
        cJSON_AddNumberToObject(o, "hidden", m->fcsnn.hidden);
        cJSON_AddNumberToObject(o, "depth", m->fcsnn.depth);
        add_num(o, "tau", (double)m->fcsnn.tau);
        break;
    case SNN_VISION_MODEL_CONVSNN:
        cJSON_AddNumberToObject(o, "in_channels", m->convsnn.in_channels);
        cJSON_AddNumberToObject(o, "height", m->convsnn.height);
        cJSON_AddNumberToObject(o, "width", m->convsnn.width);
        cJSON_AddNumberToObject(o, "channels", m->convsnn.channels);
        break;
    default:
        cJSON_AddNumberToObject(o, "in_channels", m->spikformer.in_channels);
        cJSON_AddNumberToObject(o, "image_size", m->spikformer.image_size);
        cJSON_AddNumberToObject(o, "embed_dim", m->spikformer.embed_dim);
        cJSON_AddNumberToObject(o, "heads", m->spikformer.heads);
        cJSON_AddNumberToObject(o, "depth", m->spikformer.depth);
        add_num(o, "mlp_ratio", (double)m->spikformer.mlp_ratio);
        break;
    }
    return o;
}

static void pred_fields(cJSON *o, const snn_vision_prediction_config *c) {
    add_path(o, "artifact", c->artifact);
    add_name(o, "dataset_builder", c->dataset_builder);
    cJSON_AddItemToObject(o, "dataset_kwargs", kwargs_json(&c->dataset_kwargs));
    cJSON_AddStringToObject(o, "input_layout", layout_names[c->input_layout]);
    cJSON_AddNumberToObject(o, "batch_size", c->batch_size);
    cJSON_AddNumberToObject(o, "workers", c->workers);
    cJSON_AddNumberToObject(o, "tensor_parallel_size", c->tensor_parallel_size);
    cJSON_AddNumberToObject(o, "pipeline_parallel_size", c->pipeline_parallel_size);
    cJSON_AddNumberToObject(o, "pipeline_microbatches", c->pipeline_microbatches);
    cJSON_AddStringToObject(o, "data_parallel", dp_names[c->data_parallel]);
    cJSON_AddItemToObject(o, "precision", precision_json(&c->precision));
    cJSON_AddStringToObject(o, "execution_mode", exec_names[c->execution_mode]);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
}

/* recipe: leave out the fields that may change between a run and its resume. */
static cJSON *training_json(const snn_vision_training_config *c, int recipe) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "_target_", T_TRAIN);
    cJSON_AddItemToObject(o, "model", model_json(&c->model));
    add_name(o, "dataset_builder", c->dataset_builder);
    cJSON_AddItemToObject(o, "dataset_kwargs", kwargs_json(&c->dataset_kwargs));
    cJSON_AddStringToObject(o, "input_layout", layout_names[c->input_layout]);
    if (!recipe) cJSON_AddNumberToObject(o, "epochs", c->epochs);
    cJSON_AddNumberToObject(o, "batch_size", c->batch_size);
    cJSON_AddNumberToObject(o, "workers", c->workers);
    add_name(o, "optimizer", c->optimizer);
    cJSON_AddItemToObject(o, "optimizer_kwargs", kwargs_json(&c->optimizer_kwargs));
    add_name(o, "loss_function", c->loss_function);
    cJSON_AddItemToObject(o, "loss_kwargs", kwargs_json(&c->loss_kwargs));
    add_num(o, "mixup_alpha", c->mixup_alpha);
    add_name(o, "scheduler", c->scheduler);
    cJSON_AddItemToObject(o, "scheduler_kwargs", kwargs_json(&c->scheduler_kwargs));
    cJSON_AddNumberToObject(o, "tensor_parallel_size", c->tensor_parallel_size);
    cJSON_AddNumberToObject(o, "pipeline_parallel_size", c->pipeline_parallel_size);
    cJSON_AddNumberToObject(o, "pipeline_microbatches", c->pipeline_microbatches);
    cJSON_AddStringToObject(o, "data_parallel", dp_names[c->data_parallel]);
    cJSON_AddItemToObject(o, "precision", precision_json(&c->precision));
    cJSON_AddNumberToObject(o, "memopt_level", c->memopt_level);
    cJSON_AddBoolToObject(o, "memopt_compress_inputs", c->memopt_compress_inputs != 0);
    cJSON_AddStringToObject(o, "memopt_checkpoint_budget", budget_names[c->memopt_checkpoint_budget]);
    cJSON_AddStringToObject(o, "execution_mode", exec_names[c->execution_mode]);
    cJSON_AddNumberToObject(o, "cuda_graph_warmup_steps", c->cuda_graph_warmup_steps);
    if (!recipe) {
        if (c->max_steps == SNN_VISION_UNSET) cJSON_AddNullToObject(o, "max_steps");
        else cJSON_AddNumberToObject(o, "max_steps", (double)c->max_steps);
    }
    cJSON_AddNumberToObject(o, "timing_warmup_steps", (double)c->timing_warmup_steps);
    if (!recipe) {
        add_path(o, "checkpoint_dir", c->checkpoint_dir);
        cJSON_AddNumberToObject(o, "checkpoint_interval", (double)c->checkpoint_interval);
        add_path(o, "resume", c->resume);
    }
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    return o;
}

/* Sort, print, free. NULL-safe; checks that every allocation inside succeeded. */
static snn_status finish(cJSON *o, char **out) {
    *out = NULL;
    char *s = NULL;
    if (o && sort_keys(o)) s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return snn_error(SNN_E_NOMEM, "out of memory while writing a config as JSON");
    *out = s;
    return SNN_OK;
}

snn_status snn_vision_model_config_to_json(const snn_vision_model_config *m, char **out) {
    SNN_TRY(snn_vision_model_config_validate(m));
    return finish(model_json(m), out);
}

snn_status snn_vision_training_config_to_json(const snn_vision_training_config *c, char **out) {
    SNN_TRY(snn_vision_training_config_validate(c));
    return finish(training_json(c, 0), out);
}

snn_status snn_vision_training_recipe_json(const snn_vision_training_config *c, char **out) {
    SNN_TRY(snn_vision_training_config_validate(c));
    return finish(training_json(c, 1), out);
}

snn_status snn_vision_prediction_config_to_json(const snn_vision_prediction_config *c, char **out) {
    SNN_TRY(snn_vision_prediction_config_validate(c));
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "_target_", T_PRED);
        pred_fields(o, c);
    }
    return finish(o, out);
}

snn_status snn_vision_evaluation_config_to_json(const snn_vision_evaluation_config *c, char **out) {
    SNN_TRY(snn_vision_evaluation_config_validate(c));
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "_target_", T_EVAL);
        pred_fields(o, &c->base);
        add_name(o, "loss_function", c->loss_function);
        cJSON_AddItemToObject(o, "loss_kwargs", kwargs_json(&c->loss_kwargs));
        cJSON_AddNumberToObject(o, "timing_warmup_batches", c->timing_warmup_batches);
    }
    return finish(o, out);
}

/* ---- decoding ----------------------------------------------------------------------- */

static snn_status get_long(const cJSON *it, const char *field, long lo, long hi, long *out) {
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < (double)lo ||
        it->valuedouble > (double)hi)
        return snn_error(SNN_E_INVALID, "%s must be an integer in [%ld, %ld]", field, lo, hi);
    *out = (long)it->valuedouble;
    return SNN_OK;
}

static snn_status get_int(const cJSON *it, const char *field, int *out) {
    long v = 0;
    SNN_TRY(get_long(it, field, -2147483647L - 1, 2147483647L, &v));
    *out = (int)v;
    return SNN_OK;
}

static snn_status get_double(const cJSON *it, const char *field, double *out) {
    if (!cJSON_IsNumber(it)) return snn_error(SNN_E_INVALID, "%s must be a number", field);
    *out = it->valuedouble;
    return SNN_OK;
}

static snn_status get_float(const cJSON *it, const char *field, float *out) {
    double d = 0;
    SNN_TRY(get_double(it, field, &d));
    *out = (float)d;
    return SNN_OK;
}

static snn_status get_bool(const cJSON *it, const char *field, int *out) {
    if (!cJSON_IsBool(it)) return snn_error(SNN_E_INVALID, "%s must be true or false", field);
    *out = cJSON_IsTrue(it);
    return SNN_OK;
}

/* A string into buf; null gives "" when nullable. */
static snn_status get_str(const cJSON *it, const char *field, int nullable, char *buf, size_t cap) {
    if (nullable && cJSON_IsNull(it)) {
        buf[0] = 0;
        return SNN_OK;
    }
    if (!cJSON_IsString(it)) return snn_error(SNN_E_INVALID, "%s must be a string%s", field, nullable ? " or null" : "");
    if (strlen(it->valuestring) >= cap)
        return snn_error(SNN_E_INVALID, "%s is longer than %zu characters", field, cap - 1);
    snprintf(buf, cap, "%s", it->valuestring);
    return SNN_OK;
}

/* {"_path_": "..."} (or a plain string), null for none. */
static snn_status get_path(const cJSON *it, const char *field, char *buf, size_t cap) {
    if (cJSON_IsObject(it)) {
        const cJSON *p = it->child;
        if (!p || p->next || strcmp(p->string, "_path_"))
            return snn_error(SNN_E_INVALID, "%s must be {\"_path_\": \"...\"}, a string or null", field);
        return get_str(p, field, 0, buf, cap);
    }
    return get_str(it, field, 1, buf, cap);
}

static snn_status get_enum(const cJSON *it, const char *field, const char *const *names, int n, int *out) {
    if (cJSON_IsString(it))
        for (int i = 0; i < n; i++)
            if (!strcmp(it->valuestring, names[i])) {
                *out = i;
                return SNN_OK;
            }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strcat(list, i ? ", " : "");
        strcat(list, names[i]);
    }
    return snn_error(SNN_E_INVALID, "%s must be one of %s", field, list);
}

static snn_status get_kwargs(const cJSON *it, const char *field, snn_kwargs *k) {
    memset(k, 0, sizeof *k);
    if (!cJSON_IsObject(it)) return snn_error(SNN_E_INVALID, "%s must be a JSON object", field);
    for (const cJSON *e = it->child; e; e = e->next) {
        snn_status st;
        if (snn_kwargs_get(k, e->string))
            return snn_error(SNN_E_INVALID, "%s sets \"%s\" twice", field, e->string);
        if (cJSON_IsNumber(e)) st = snn_kwargs_set_number(k, e->string, e->valuedouble);
        else if (cJSON_IsBool(e)) st = snn_kwargs_set_bool(k, e->string, cJSON_IsTrue(e));
        else if (cJSON_IsString(e)) st = snn_kwargs_set_string(k, e->string, e->valuestring);
        else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsNumber(e->child) &&
                 cJSON_IsNumber(e->child->next))
            st = snn_kwargs_set_pair(k, e->string, e->child->valuedouble, e->child->next->valuedouble);
        else
            st = snn_error(SNN_E_INVALID, "%s.%s must be a number, a boolean, a string or two numbers", field,
                           e->string);
        if (st != SNN_OK) return snn_error_prefix(st, "%s", field);
    }
    return SNN_OK;
}

/* The "_target_" tag of an object, or an error. */
static snn_status get_target(const cJSON *o, const char *what, const char **tag) {
    if (!cJSON_IsObject(o)) return snn_error(SNN_E_FORMAT, "%s must be a JSON object", what);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "_target_");
    if (!cJSON_IsString(t)) return snn_error(SNN_E_FORMAT, "%s has no \"_target_\" type tag", what);
    *tag = t->valuestring;
    return SNN_OK;
}

static snn_status unknown_field(const char *type, const char *key) {
    return snn_error(SNN_E_INVALID, "%s got an unexpected field \"%s\"", type, key);
}

static snn_status decode_precision(const cJSON *it, snn_precision_config *out) {
    if (cJSON_IsString(it)) { /* legacy string recipe: upgrade with every other field default */
        const char *s = it->valuestring;
        if (strcmp(s, "fp32") && strcmp(s, "fp16") && strcmp(s, "bf16"))
            return snn_error(SNN_E_INVALID, "precision: legacy precision string \"%s\" is not fp32, fp16 or bf16", s);
        return snn_precision_config_parse(s, NULL, NULL, NULL, NULL, out);
    }
    const char *tag = NULL;
    SNN_TRY(get_target(it, "precision", &tag));
    if (strcmp(tag, T_PREC))
        return snn_error(SNN_E_INVALID, "precision: unsupported config target \"%s\" (expected %s)", tag, T_PREC);
    cJSON *copy = cJSON_Duplicate(it, 1);
    if (!copy) return snn_error(SNN_E_NOMEM, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "_target_");
    char *txt = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    if (!txt) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_status st = snn_precision_config_from_json(txt, out);
    free(txt);
    if (st != SNN_OK) return snn_error_prefix(st, "precision");
    return SNN_OK;
}

static snn_status decode_model(const cJSON *o, snn_vision_model_config *m) {
    const char *tag = NULL;
    SNN_TRY(get_target(o, "model", &tag));
    snn_vision_model_kind kind = SNN_VISION_MODEL_NONE;
    for (int k = SNN_VISION_MODEL_FCSNN; k <= SNN_VISION_MODEL_SPIKFORMER; k++)
        if (!strcmp(tag, snn_vision_model_target((snn_vision_model_kind)k))) kind = (snn_vision_model_kind)k;
    if (kind == SNN_VISION_MODEL_NONE)
        return snn_error(SNN_E_INVALID, "model: unsupported config target \"%s\" (known: snn.vision.FCSNNConfig, "
                         "snn.vision.ConvSNNConfig, snn.vision.SpikformerConfig)", tag);
    *m = snn_vision_model_config_default(kind);
    const char *type = tag;
    for (const cJSON *it = o->child; it; it = it->next) {
        const char *k = it->string;
        snn_status st = SNN_OK;
        if (!strcmp(k, "_target_")) continue;
        if (!strcmp(k, "time_steps")) st = get_int(it, "model.time_steps", &m->time_steps);
        else if (!strcmp(k, "num_classes")) st = get_int(it, "model.num_classes", &m->num_classes);
        else if (!strcmp(k, "step_mode")) {
            char sm[4];
            st = get_str(it, "model.step_mode", 0, sm, sizeof sm);
            if (st == SNN_OK && strlen(sm) != 1) st = snn_error(SNN_E_INVALID, "model.step_mode must be 's' or 'm'");
            if (st == SNN_OK) m->step_mode = sm[0];
        } else if (kind == SNN_VISION_MODEL_FCSNN && !strcmp(k, "in_features")) st = get_int(it, "model.in_features", &m->fcsnn.in_features);
        else if (kind == SNN_VISION_MODEL_FCSNN && !strcmp(k, "hidden")) st = get_int(it, "model.hidden", &m->fcsnn.hidden);
        else if (kind == SNN_VISION_MODEL_FCSNN && !strcmp(k, "depth")) st = get_int(it, "model.depth", &m->fcsnn.depth);
        else if (kind == SNN_VISION_MODEL_FCSNN && !strcmp(k, "tau")) st = get_float(it, "model.tau", &m->fcsnn.tau);
        else if (kind == SNN_VISION_MODEL_CONVSNN && !strcmp(k, "in_channels")) st = get_int(it, "model.in_channels", &m->convsnn.in_channels);
        else if (kind == SNN_VISION_MODEL_CONVSNN && !strcmp(k, "height")) st = get_int(it, "model.height", &m->convsnn.height);
        else if (kind == SNN_VISION_MODEL_CONVSNN && !strcmp(k, "width")) st = get_int(it, "model.width", &m->convsnn.width);
        else if (kind == SNN_VISION_MODEL_CONVSNN && !strcmp(k, "channels")) st = get_int(it, "model.channels", &m->convsnn.channels);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "in_channels")) st = get_int(it, "model.in_channels", &m->spikformer.in_channels);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "image_size")) st = get_int(it, "model.image_size", &m->spikformer.image_size);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "embed_dim")) st = get_int(it, "model.embed_dim", &m->spikformer.embed_dim);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "heads")) st = get_int(it, "model.heads", &m->spikformer.heads);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "depth")) st = get_int(it, "model.depth", &m->spikformer.depth);
        else if (kind == SNN_VISION_MODEL_SPIKFORMER && !strcmp(k, "mlp_ratio")) st = get_float(it, "model.mlp_ratio", &m->spikformer.mlp_ratio);
        else st = unknown_field(type, k);
        SNN_TRY(st);
    }
    return snn_vision_model_config_validate(m);
}

/* One field shared by prediction and evaluation; *handled = 0 when the key is not one. */
static snn_status pred_field(const cJSON *it, snn_vision_prediction_config *c, int *handled) {
    const char *k = it->string;
    int e = 0;
    *handled = 1;
    if (!strcmp(k, "artifact")) return get_path(it, "artifact", c->artifact, sizeof c->artifact);
    if (!strcmp(k, "dataset_builder")) return get_str(it, "dataset_builder", 0, c->dataset_builder, sizeof c->dataset_builder);
    if (!strcmp(k, "dataset_kwargs")) return get_kwargs(it, "dataset_kwargs", &c->dataset_kwargs);
    if (!strcmp(k, "input_layout")) {
        SNN_TRY(get_enum(it, "input_layout", layout_names, 2, &e));
        c->input_layout = (snn_input_layout)e;
        return SNN_OK;
    }
    if (!strcmp(k, "batch_size")) return get_int(it, "batch_size", &c->batch_size);
    if (!strcmp(k, "workers")) return get_int(it, "workers", &c->workers);
    if (!strcmp(k, "tensor_parallel_size")) return get_int(it, "tensor_parallel_size", &c->tensor_parallel_size);
    if (!strcmp(k, "pipeline_parallel_size")) return get_int(it, "pipeline_parallel_size", &c->pipeline_parallel_size);
    if (!strcmp(k, "pipeline_microbatches")) return get_int(it, "pipeline_microbatches", &c->pipeline_microbatches);
    if (!strcmp(k, "data_parallel")) {
        SNN_TRY(get_enum(it, "data_parallel", dp_names, 3, &e));
        c->data_parallel = (snn_data_parallel)e;
        return SNN_OK;
    }
    if (!strcmp(k, "precision")) return decode_precision(it, &c->precision);
    if (!strcmp(k, "execution_mode")) {
        SNN_TRY(get_enum(it, "execution_mode", exec_names, 3, &e));
        c->execution_mode = (snn_exec_mode)e;
        return SNN_OK;
    }
    if (!strcmp(k, "seed")) {
        long s = 0;
        SNN_TRY(get_long(it, "seed", -(1L << 53), 1L << 53, &s));
        c->seed = s;
        return SNN_OK;
    }
    *handled = 0;
    return SNN_OK;
}

static snn_status training_field(const cJSON *it, snn_vision_training_config *c, int *seen_model) {
    const char *k = it->string;
    int e = 0;
    if (!strcmp(k, "model")) {
        *seen_model = 1;
        return decode_model(it, &c->model);
    }
    if (!strcmp(k, "dataset_builder")) return get_str(it, "dataset_builder", 0, c->dataset_builder, sizeof c->dataset_builder);
    if (!strcmp(k, "dataset_kwargs")) return get_kwargs(it, "dataset_kwargs", &c->dataset_kwargs);
    if (!strcmp(k, "input_layout")) {
        SNN_TRY(get_enum(it, "input_layout", layout_names, 2, &e));
        c->input_layout = (snn_input_layout)e;
        return SNN_OK;
    }
    if (!strcmp(k, "epochs")) return get_int(it, "epochs", &c->epochs);
    if (!strcmp(k, "batch_size")) return get_int(it, "batch_size", &c->batch_size);
    if (!strcmp(k, "workers")) return get_int(it, "workers", &c->workers);
    if (!strcmp(k, "optimizer")) return get_str(it, "optimizer", 0, c->optimizer, sizeof c->optimizer);
    if (!strcmp(k, "optimizer_kwargs")) return get_kwargs(it, "optimizer_kwargs", &c->optimizer_kwargs);
    if (!strcmp(k, "loss_function")) return get_str(it, "loss_function", 0, c->loss_function, sizeof c->loss_function);
    if (!strcmp(k, "loss_kwargs")) return get_kwargs(it, "loss_kwargs", &c->loss_kwargs);
    if (!strcmp(k, "mixup_alpha")) return get_double(it, "mixup_alpha", &c->mixup_alpha);
    if (!strcmp(k, "scheduler")) return get_str(it, "scheduler", 1, c->scheduler, sizeof c->scheduler);
    if (!strcmp(k, "scheduler_kwargs")) return get_kwargs(it, "scheduler_kwargs", &c->scheduler_kwargs);
    if (!strcmp(k, "tensor_parallel_size")) return get_int(it, "tensor_parallel_size", &c->tensor_parallel_size);
    if (!strcmp(k, "pipeline_parallel_size")) return get_int(it, "pipeline_parallel_size", &c->pipeline_parallel_size);
    if (!strcmp(k, "pipeline_microbatches")) return get_int(it, "pipeline_microbatches", &c->pipeline_microbatches);
    if (!strcmp(k, "data_parallel")) {
        SNN_TRY(get_enum(it, "data_parallel", dp_names, 3, &e));
        c->data_parallel = (snn_data_parallel)e;
        return SNN_OK;
    }
    if (!strcmp(k, "precision")) return decode_precision(it, &c->precision);
    if (!strcmp(k, "memopt_level")) return get_int(it, "memopt_level", &c->memopt_level);
    if (!strcmp(k, "memopt_compress_inputs")) return get_bool(it, "memopt_compress_inputs", &c->memopt_compress_inputs);
    if (!strcmp(k, "memopt_checkpoint_budget")) {
        SNN_TRY(get_enum(it, "memopt_checkpoint_budget", budget_names, 3, &e));
        c->memopt_checkpoint_budget = (snn_memopt_budget)e;
        return SNN_OK;
    }
    if (!strcmp(k, "execution_mode")) {
        SNN_TRY(get_enum(it, "execution_mode", exec_names, 3, &e));
        c->execution_mode = (snn_exec_mode)e;
        return SNN_OK;
    }
    if (!strcmp(k, "cuda_graph_warmup_steps")) return get_int(it, "cuda_graph_warmup_steps", &c->cuda_graph_warmup_steps);
    if (!strcmp(k, "max_steps")) {
        if (cJSON_IsNull(it)) {
            c->max_steps = SNN_VISION_UNSET;
            return SNN_OK;
        }
        return get_long(it, "max_steps", -(1L << 53), 1L << 53, &c->max_steps);
    }
    if (!strcmp(k, "timing_warmup_steps")) return get_long(it, "timing_warmup_steps", -(1L << 53), 1L << 53, &c->timing_warmup_steps);
    if (!strcmp(k, "checkpoint_dir")) return get_path(it, "checkpoint_dir", c->checkpoint_dir, sizeof c->checkpoint_dir);
    if (!strcmp(k, "checkpoint_interval")) return get_long(it, "checkpoint_interval", -(1L << 53), 1L << 53, &c->checkpoint_interval);
    if (!strcmp(k, "resume")) return get_path(it, "resume", c->resume, sizeof c->resume);
    if (!strcmp(k, "seed")) {
        long s = 0;
        SNN_TRY(get_long(it, "seed", -(1L << 53), 1L << 53, &s));
        c->seed = s;
        return SNN_OK;
    }
    return unknown_field(T_TRAIN, k);
}

static cJSON *parse_tagged(const char *json, const char *want, snn_status *st) {
    cJSON *o = cJSON_Parse(json ? json : "");
    const char *tag = NULL;
    *st = get_target(o, "config", &tag);
    if (*st == SNN_OK && strcmp(tag, want)) {
        int known = !strcmp(tag, T_TRAIN) || !strcmp(tag, T_EVAL) || !strcmp(tag, T_PRED) || !strcmp(tag, T_PREC);
        for (int k = SNN_VISION_MODEL_FCSNN; k <= SNN_VISION_MODEL_SPIKFORMER; k++)
            if (!strcmp(tag, snn_vision_model_target((snn_vision_model_kind)k))) known = 1;
        *st = known ? snn_error(SNN_E_INVALID, "config is a %s, expected a %s", tag, want)
                    : snn_error(SNN_E_INVALID, "unsupported config target \"%s\"", tag);
    }
    if (*st != SNN_OK) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

snn_status snn_vision_training_config_from_json(const char *json, snn_vision_training_config *out) {
    snn_status st;
    cJSON *o = parse_tagged(json, T_TRAIN, &st);
    if (!o) return st;
    snn_vision_training_config c = snn_vision_training_config_default();
    int seen_model = 0;
    for (const cJSON *it = o->child; it && st == SNN_OK; it = it->next)
        if (strcmp(it->string, "_target_")) st = training_field(it, &c, &seen_model);
    if (st == SNN_OK && !seen_model) st = snn_error(SNN_E_INVALID, "%s is missing the required field \"model\"", T_TRAIN);
    cJSON_Delete(o);
    if (st == SNN_OK) st = snn_vision_training_config_validate(&c);
    if (st == SNN_OK) *out = c;
    return st;
}

snn_status snn_vision_prediction_config_from_json(const char *json, snn_vision_prediction_config *out) {
    snn_status st;
    cJSON *o = parse_tagged(json, T_PRED, &st);
    if (!o) return st;
    snn_vision_prediction_config c = snn_vision_prediction_config_default();
    for (const cJSON *it = o->child; it && st == SNN_OK; it = it->next) {
        if (!strcmp(it->string, "_target_")) continue;
        int handled;
        st = pred_field(it, &c, &handled);
        if (st == SNN_OK && !handled) st = unknown_field(T_PRED, it->string);
    }
    cJSON_Delete(o);
    if (st == SNN_OK) st = snn_vision_prediction_config_validate(&c);
    if (st == SNN_OK) *out = c;
    return st;
}

snn_status snn_vision_evaluation_config_from_json(const char *json, snn_vision_evaluation_config *out) {
    snn_status st;
    cJSON *o = parse_tagged(json, T_EVAL, &st);
    if (!o) return st;
    snn_vision_evaluation_config c = snn_vision_evaluation_config_default();
    for (const cJSON *it = o->child; it && st == SNN_OK; it = it->next) {
        const char *k = it->string;
        if (!strcmp(k, "_target_")) continue;
        int handled;
        st = pred_field(it, &c.base, &handled);
        if (st != SNN_OK || handled) continue;
        if (!strcmp(k, "loss_function")) st = get_str(it, "loss_function", 0, c.loss_function, sizeof c.loss_function);
        else if (!strcmp(k, "loss_kwargs")) st = get_kwargs(it, "loss_kwargs", &c.loss_kwargs);
        else if (!strcmp(k, "timing_warmup_batches")) st = get_int(it, "timing_warmup_batches", &c.timing_warmup_batches);
        else st = unknown_field(T_EVAL, k);
    }
    cJSON_Delete(o);
    if (st == SNN_OK) st = snn_vision_evaluation_config_validate(&c);
    if (st == SNN_OK) *out = c;
    return st;
}

snn_status snn_vision_model_config_from_json(const char *json, snn_vision_model_config *out) {
    cJSON *o = cJSON_Parse(json ? json : "");
    snn_vision_model_config m;
    snn_status st = decode_model(o, &m);
    cJSON_Delete(o);
    if (st == SNN_OK) *out = m;
    return st;
}

snn_status snn_vision_recipe_matches(const char *recipe_json, const snn_vision_training_config *c, int *match) {
    *match = 0;
    cJSON *o = cJSON_Parse(recipe_json ? recipe_json : "");
    const char *tag = NULL;
    snn_status st = get_target(o, "checkpoint recipe", &tag);
    if (st == SNN_OK && strcmp(tag, T_TRAIN))
        st = snn_error(SNN_E_FORMAT, "checkpoint recipe is a %s, expected a %s", tag, T_TRAIN);
    /* Decode the recipe on top of c's run-specific fields, so the comparison covers
     * exactly the recipe's fields (a legacy precision string is upgraded on the way). */
    snn_vision_training_config r = snn_vision_training_config_default();
    r.epochs = c->epochs;
    r.max_steps = c->max_steps;
    r.checkpoint_interval = c->checkpoint_interval;
    snprintf(r.checkpoint_dir, sizeof r.checkpoint_dir, "%s", c->checkpoint_dir);
    snprintf(r.resume, sizeof r.resume, "%s", c->resume);
    int seen_model = 0;
    for (const cJSON *it = o ? o->child : NULL; it && st == SNN_OK; it = it->next) {
        const char *k = it->string;
        if (!strcmp(k, "_target_")) continue;
        if (!strcmp(k, "epochs") || !strcmp(k, "max_steps") || !strcmp(k, "checkpoint_dir") ||
            !strcmp(k, "checkpoint_interval") || !strcmp(k, "resume"))
            st = snn_error(SNN_E_FORMAT, "checkpoint recipe holds the run-specific field \"%s\"", k);
        else st = training_field(it, &r, &seen_model);
    }
    if (st == SNN_OK && !seen_model) st = snn_error(SNN_E_FORMAT, "checkpoint recipe has no model");
    cJSON_Delete(o);
    if (st != SNN_OK) return snn_error_prefix(SNN_E_FORMAT, "config.json");
    *match = snn_vision_training_config_equal(&r, c);
    return SNN_OK;
}

snn_status snn_vision_model_config_from_zoo(const char *zoo_json, int time_steps, snn_vision_model_config *out) {
    cJSON *o = cJSON_Parse(zoo_json ? zoo_json : "");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "model");
    snn_status st = SNN_OK;
    snn_vision_model_config m;
    memset(&m, 0, sizeof m);
    if (!cJSON_IsString(k)) st = snn_error(SNN_E_FORMAT, "model configuration has no \"model\" name");
    else if (!strcmp(k->valuestring, "fcsnn")) m = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
    else if (!strcmp(k->valuestring, "convsnn")) m = snn_vision_model_config_default(SNN_VISION_MODEL_CONVSNN);
    else if (!strcmp(k->valuestring, "spikformer")) m = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER);
    else st = snn_error(SNN_E_UNSUPPORTED, "model \"%s\" has no distributed vision config (fcsnn, convsnn, spikformer)",
                        k->valuestring);
    for (const cJSON *it = st == SNN_OK ? o->child : NULL; it && st == SNN_OK; it = it->next) {
        const char *f = it->string;
        if (!strcmp(f, "model")) continue;
        int *dst = NULL;
        float *fdst = NULL;
        if (!strcmp(f, "classes")) dst = &m.num_classes;
        else if (m.kind == SNN_VISION_MODEL_FCSNN) {
            if (!strcmp(f, "in_features")) dst = &m.fcsnn.in_features;
            else if (!strcmp(f, "hidden")) dst = &m.fcsnn.hidden;
            else if (!strcmp(f, "depth")) dst = &m.fcsnn.depth;
            else if (!strcmp(f, "tau")) fdst = &m.fcsnn.tau;
        } else if (m.kind == SNN_VISION_MODEL_CONVSNN) {
            if (!strcmp(f, "in_channels")) dst = &m.convsnn.in_channels;
            else if (!strcmp(f, "height")) dst = &m.convsnn.height;
            else if (!strcmp(f, "width")) dst = &m.convsnn.width;
            else if (!strcmp(f, "channels")) dst = &m.convsnn.channels;
        } else {
            if (!strcmp(f, "in_channels")) dst = &m.spikformer.in_channels;
            else if (!strcmp(f, "image_size")) dst = &m.spikformer.image_size;
            else if (!strcmp(f, "embed_dim")) dst = &m.spikformer.embed_dim;
            else if (!strcmp(f, "heads")) dst = &m.spikformer.heads;
            else if (!strcmp(f, "depth")) dst = &m.spikformer.depth;
            else if (!strcmp(f, "mlp_ratio")) fdst = &m.spikformer.mlp_ratio;
        }
        if (dst) st = get_int(it, f, dst);
        else if (fdst) st = get_float(it, f, fdst);
        else st = unknown_field(k->valuestring, f);
    }
    cJSON_Delete(o);
    m.time_steps = time_steps;
    if (st == SNN_OK) st = snn_vision_model_config_validate(&m);
    if (st == SNN_OK) *out = m;
    return st;
}
