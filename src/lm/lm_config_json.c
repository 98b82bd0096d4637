/* JSON form of the language-model config records, driven by one field table per record
 * (so writing and reading cannot drift apart), and the checkpoint recipe.
 *
 * Every record object carries "_target_" from a closed registry; nothing in a config
 * names code to load. Values are type-checked strictly (a boolean is true/false, an
 * integer has no fraction and fits its field, an enum is one of its spellings). */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "core/file_internal.h"
#include "core/json_canon.h"
#include "core/sha256.h"
#include "snn/lm_config.h"

static_assert(sizeof(snn_lm_dtype) == sizeof(int), "enum fields are read as int");

typedef enum { K_INT, K_I64, K_U64, K_BOOL, K_DOUBLE, K_ENUM, K_STR, K_MODULES, K_SUB, K_MODEL } kind;

struct schema;
typedef struct field {
    const char *key;
    kind k;
    size_t off, size;                /* size: char array length for K_STR */
    const char *(*name)(int);        /* K_ENUM */
    int count;                       /* K_ENUM: number of values */
    int nullable;                    /* the sentinel (0 / -1 / NAN / "" / enum 0) is null */
    const struct schema *sub;        /* K_SUB */
    int spikelm_only;
} field;

typedef struct schema {
    const char *tag;                 /* NULL: a plain object (dataset_kwargs) */
    const field *fields;
    int n;
} schema;

#define NM(fn, T) static const char *nm_##fn(int v) { return snn_lm_##fn##_name((T)v); }
NM(dtype, snn_lm_dtype)
NM(normalization, snn_lm_normalization)
NM(activation, snn_lm_activation)
NM(fp8, snn_lm_fp8)
NM(fp8_recipe, snn_lm_fp8_recipe)
NM(recompute_granularity, snn_lm_recompute_granularity)
NM(recompute_method, snn_lm_recompute_method)
NM(position_embedding, snn_lm_position_embedding)
NM(temporal_reduction, snn_lm_temporal_reduction)
NM(lr_decay_style, snn_lm_lr_decay_style)

#define FI(S, f, K) {#f, K, offsetof(S, f), sizeof(((S *)0)->f), NULL, 0, 0, NULL, 0}
#define FN(S, f, K) {#f, K, offsetof(S, f), sizeof(((S *)0)->f), NULL, 0, 1, NULL, 0}
#define FE(S, f, fn, cnt, nul) {#f, K_ENUM, offsetof(S, f), sizeof(int), nm_##fn, cnt, nul, NULL, 0}
#define FS(S, f, sch) {#f, K_SUB, offsetof(S, f), 0, NULL, 0, 0, sch, 0}

#define T snn_lm_transformer_config
static const field transformer_fields[] = {
    FI(T, num_layers, K_INT), FI(T, hidden_size, K_INT), FI(T, num_attention_heads, K_INT),
    FN(T, num_query_groups, K_INT), FN(T, ffn_hidden_size, K_INT), FN(T, kv_channels, K_INT),
    FE(T, normalization, normalization, SNN_LM_NORM_COUNT, 0), FI(T, layernorm_epsilon, K_DOUBLE),
    FE(T, activation, activation, SNN_LM_ACT_COUNT, 0), FI(T, add_bias_linear, K_BOOL),
    FI(T, add_qkv_bias, K_BOOL), FI(T, init_method_std, K_DOUBLE), FI(T, calculate_per_token_loss, K_BOOL),
    FI(T, fp16, K_BOOL), FI(T, bf16, K_BOOL), FE(T, params_dtype, dtype, SNN_LM_DTYPE_COUNT, 0),
    FE(T, pipeline_dtype, dtype, SNN_LM_DTYPE_COUNT, 1), FE(T, fp8, fp8, SNN_LM_FP8_COUNT, 1),
    FE(T, fp8_recipe, fp8_recipe, SNN_LM_FP8_RECIPE_COUNT, 0),
    FI(T, tensor_model_parallel_size, K_INT), FI(T, pipeline_model_parallel_size, K_INT),
    FI(T, context_parallel_size, K_INT), FI(T, expert_model_parallel_size, K_INT),
    FI(T, sequence_parallel, K_BOOL),
    FE(T, recompute_granularity, recompute_granularity, SNN_LM_RECOMPUTE_COUNT, 1),
    FE(T, recompute_method, recompute_method, SNN_LM_RECOMPUTE_METHOD_COUNT, 1),
    FN(T, recompute_num_layers, K_INT), FI(T, recompute_modules, K_MODULES),
};
#undef T
static const schema transformer_schema = {"snn.lm.TransformerConfig", transformer_fields,
                                          (int)(sizeof transformer_fields / sizeof *transformer_fields)};

#define T snn_lm_optimizer_config
static const field optimizer_fields[] = {
    FI(T, optimizer, K_STR), FN(T, lr, K_DOUBLE), FN(T, min_lr, K_DOUBLE), FI(T, weight_decay, K_DOUBLE),
    FI(T, adam_beta1, K_DOUBLE), FI(T, adam_beta2, K_DOUBLE), FI(T, adam_eps, K_DOUBLE),
    FI(T, clip_grad, K_DOUBLE), FI(T, fp16, K_BOOL), FI(T, bf16, K_BOOL),
    FE(T, params_dtype, dtype, SNN_LM_DTYPE_COUNT, 0), FI(T, use_distributed_optimizer, K_BOOL),
    FE(T, fp8_recipe, fp8_recipe, SNN_LM_FP8_RECIPE_COUNT, 1), FN(T, loss_scale, K_DOUBLE),
    FI(T, initial_loss_scale, K_DOUBLE), FI(T, min_loss_scale, K_DOUBLE), FI(T, loss_scale_window, K_INT),
    FI(T, hysteresis, K_INT),
};
#undef T
static const schema optimizer_schema = {"snn.lm.OptimizerConfig", optimizer_fields,
                                        (int)(sizeof optimizer_fields / sizeof *optimizer_fields)};

#define T snn_lm_model_config
static const field model_fields[] = {
    FS(T, transformer, &transformer_schema), FI(T, vocab_size, K_I64), FI(T, max_sequence_length, K_I64),
    FI(T, time_steps, K_INT), FI(T, share_embeddings_and_output_weights, K_BOOL),
    FE(T, position_embedding_type, position_embedding, SNN_LM_POS_COUNT, 0),
    FE(T, temporal_output_reduction, temporal_reduction, SNN_LM_REDUCE_COUNT, 0),
    {"spike_decay", K_DOUBLE, offsetof(T, spike_decay), sizeof(double), NULL, 0, 0, NULL, 1},
    {"spike_amplitude", K_DOUBLE, offsetof(T, spike_amplitude), sizeof(double), NULL, 0, 0, NULL, 1},
};
#undef T
static const char *const model_tags[SNN_LM_MODEL_COUNT] = {"snn.lm.SpikeLMConfig", "snn.lm.GPTConfig"};
static const schema model_schema = {NULL /* per type */, model_fields,
                                    (int)(sizeof model_fields / sizeof *model_fields)};

#define T snn_lm_dataset_kwargs
static const field kwargs_fields[] = {FI(T, path, K_STR), FN(T, split, K_STR)};
#undef T
static const schema kwargs_schema = {NULL, kwargs_fields, 2};

#define T snn_lm_training_config
static const field training_fields[] = {
    {"model", K_MODEL, offsetof(T, model), 0, NULL, 0, 0, NULL, 0}, FS(T, optimizer, &optimizer_schema),
    FI(T, dataset_builder, K_STR), FS(T, dataset_kwargs, &kwargs_schema), FI(T, sequence_length, K_I64),
    FI(T, micro_batch_size, K_I64), FI(T, global_batch_size, K_I64), FI(T, train_steps, K_I64),
    FI(T, timing_warmup_steps, K_I64), FI(T, eval_interval, K_I64), FI(T, eval_steps, K_I64),
    FI(T, log_interval, K_I64), FI(T, lr_warmup_steps, K_I64), FN(T, lr_decay_steps, K_I64),
    FE(T, lr_decay_style, lr_decay_style, SNN_LM_DECAY_COUNT, 0), FN(T, checkpoint_dir, K_STR),
    FI(T, checkpoint_interval, K_I64), FN(T, resume, K_STR), FI(T, seed, K_U64), FI(T, use_snn_memopt, K_BOOL),
};
#undef T
static const schema training_schema = {"snn.lm.TrainingConfig", training_fields,
                                       (int)(sizeof training_fields / sizeof *training_fields)};

#define T snn_lm_evaluation_config
static const field evaluation_fields[] = {
    {"model", K_MODEL, offsetof(T, model), 0, NULL, 0, 0, NULL, 0}, FI(T, checkpoint, K_STR),
    FI(T, dataset_builder, K_STR), FS(T, dataset_kwargs, &kwargs_schema), FI(T, sequence_length, K_I64),
    FI(T, micro_batch_size, K_I64), FI(T, seed, K_U64), FI(T, use_snn_memopt, K_BOOL),
    FI(T, timing_warmup_batches, K_I64), FI(T, pipeline_microbatches, K_I64),
};
#undef T
static const schema evaluation_schema = {"snn.lm.EvaluationConfig", evaluation_fields,
                                         (int)(sizeof evaluation_fields / sizeof *evaluation_fields)};

#define T snn_lm_generation_config
static const field generation_fields[] = {
    {"model", K_MODEL, offsetof(T, model), 0, NULL, 0, 0, NULL, 0}, FI(T, checkpoint, K_STR),
    FI(T, max_new_tokens, K_I64), FN(T, eos_token_id, K_I64), FI(T, seed, K_U64), FI(T, use_snn_memopt, K_BOOL),
    FI(T, temperature, K_DOUBLE), FI(T, top_p, K_DOUBLE), FI(T, top_k, K_I64),
};
#undef T
static const schema generation_schema = {"snn.lm.GenerationConfig", generation_fields,
                                         (int)(sizeof generation_fields / sizeof *generation_fields)};

/* The registry: every tag a config may carry. */
static const char *const registry[] = {"snn.lm.TransformerConfig", "snn.lm.OptimizerConfig", "snn.lm.SpikeLMConfig",
                                       "snn.lm.GPTConfig", "snn.lm.TrainingConfig", "snn.lm.EvaluationConfig",
                                       "snn.lm.GenerationConfig"};

static const char *const module_names[SNN_LM_RECOMPUTE_MODULE_COUNT] = {
    "core_attn", "mlp", "layernorm", "moe_act", "moe", "shared_experts", "mla_up_proj"};

/* ---- writing ----------------------------------------------------------------------------- */

static cJSON *emit_model(const snn_lm_model_config *m);

static cJSON *emit(const void *rec, const schema *s, int model_type) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (s->tag && !cJSON_AddItemToObject(o, "_target_", cJSON_CreateString(s->tag))) goto oom;
    for (int i = 0; i < s->n; i++) {
        const field *f = &s->fields[i];
        const char *p = (const char *)rec + f->off;
        cJSON *v = NULL;
        if (f->spikelm_only && model_type != SNN_LM_MODEL_SPIKELM) continue;
        switch (f->k) {
        case K_INT: {
            int x = *(const int *)p;
            v = f->nullable && x == 0 ? cJSON_CreateNull() : snn_json_int(x);
            break;
        }
        case K_I64: {
            int64_t x = *(const int64_t *)p;
            v = f->nullable && x == -1 ? cJSON_CreateNull() : snn_json_int((long long)x);
            break;
        }
        case K_U64: {
            char b[32];
            snprintf(b, sizeof b, "%llu", (unsigned long long)*(const uint64_t *)p);
            v = cJSON_CreateRaw(b);
            break;
        }
        case K_BOOL: v = cJSON_CreateBool(*(const int *)p != 0); break;
        case K_DOUBLE: {
            double x = *(const double *)p;
            if (f->nullable && isnan(x)) v = cJSON_CreateNull();
            else if (!isfinite(x)) { cJSON_Delete(o); return NULL; }
            else v = snn_json_float(x);
            break;
        }
        case K_ENUM: {
            const char *nm = f->name(*(const int *)p);
            v = nm ? cJSON_CreateString(nm) : cJSON_CreateNull();
            break;
        }
        case K_STR: v = f->nullable && !p[0] ? cJSON_CreateNull() : cJSON_CreateString(p); break;
        case K_MODULES: {
            unsigned mask = *(const unsigned *)p;
            v = cJSON_CreateArray();
            for (int b = 0; v && b < SNN_LM_RECOMPUTE_MODULE_COUNT; b++)
                if (mask & (1u << b)) cJSON_AddItemToArray(v, cJSON_CreateString(module_names[b]));
            break;
        }
        case K_SUB: v = emit(p, f->sub, model_type); break;
        case K_MODEL: v = emit_model((const snn_lm_model_config *)p); break;
        }
        if (!v || !cJSON_AddItemToObject(o, f->key, v)) { cJSON_Delete(v); goto oom; }
    }
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *emit_model(const snn_lm_model_config *m) {
    if (!snn_lm_model_type_name(m->type)) return NULL;
    cJSON *o = emit(m, &model_schema, (int)m->type);
    if (o && !cJSON_AddItemToObject(o, "_target_", cJSON_CreateString(model_tags[m->type]))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static snn_status finish(cJSON *o, char **out) {
    if (!out) { cJSON_Delete(o); return snn_error(SNN_E_INVALID, "output pointer is NULL"); }
    if (!o) return snn_error(SNN_E_INVALID, "config cannot be written as JSON (a non-finite or out-of-range field)");
    snn_status st = snn_json_print_canonical(o, out);
    cJSON_Delete(o);
    return st;
}

/* ---- reading ------------------------------------------------------------------------------ */

static snn_status absorb_model(snn_lm_model_config *m, const cJSON *obj, const char *where);

static snn_status check_tag(const cJSON *obj, const char *want, const char *where) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "_target_");
    if (!cJSON_IsString(t)) return snn_error(SNN_E_INVALID, "%s: missing \"_target_\" type tag (want \"%s\")", where, want);
    int known = 0;
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++) known |= strcmp(registry[i], t->valuestring) == 0;
    if (!known) return snn_error(SNN_E_INVALID, "%s: unknown config type \"%.80s\"", where, t->valuestring);
    if (strcmp(t->valuestring, want) != 0)
        return snn_error(SNN_E_INVALID, "%s: type \"%s\" where \"%s\" is expected", where, t->valuestring, want);
    return SNN_OK;
}

static int integral(const cJSON *v, double lo, double hi, double *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

#define TWO53 9007199254740992.0

static const char *topology_keys[] = {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                      "context_parallel_size", "sequence_parallel", "expert_model_parallel_size",
                                      "data_parallel_size", "model_builder", "builder"};

static snn_status absorb(void *rec, const schema *s, const cJSON *obj, const char *where, int model_type) {
    if (!cJSON_IsObject(obj)) return snn_error(SNN_E_INVALID, "%s must be a JSON object", where);
    for (const cJSON *c = obj->child; c; c = c->next)
        for (const cJSON *d = c->next; d; d = d->next)
            if (strcmp(c->string, d->string) == 0)
                return snn_error(SNN_E_INVALID, "%s: key \"%.60s\" given twice", where, c->string);
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (strcmp(c->string, "_target_") == 0) continue;
        const field *f = NULL;
        for (int i = 0; i < s->n; i++)
            if (strcmp(s->fields[i].key, c->string) == 0) f = &s->fields[i];
        if (f && f->spikelm_only && model_type != SNN_LM_MODEL_SPIKELM) f = NULL;
        if (!f) {
            if (s == &training_schema)
                for (size_t i = 0; i < sizeof topology_keys / sizeof *topology_keys; i++)
                    if (strcmp(c->string, topology_keys[i]) == 0)
                        return snn_error(SNN_E_INVALID,
                                         "%s: unexpected key \"%s\": the topology and precision live in "
                                         "model.transformer only (no duplicated fields)", where, c->string);
            return snn_error(SNN_E_INVALID, "%s: unknown key \"%.60s\"", where, c->string);
        }
        char *p = (char *)rec + f->off;
        double x;
        int is_null = cJSON_IsNull(c);
        if (is_null && !f->nullable && f->k != K_SUB)
            return snn_error(SNN_E_INVALID, "%s.%s must not be null", where, f->key);
        switch (f->k) {
        case K_INT:
            if (is_null) { *(int *)p = 0; break; }
            if (!integral(c, -2147483648.0, 2147483647.0, &x))
                return snn_error(SNN_E_INVALID, "%s.%s must be an integer in the int32 range", where, f->key);
            *(int *)p = (int)x;
            break;
        case K_I64:
            if (is_null) { *(int64_t *)p = -1; break; }
            if (!integral(c, -TWO53, TWO53, &x))
                return snn_error(SNN_E_INVALID, "%s.%s must be an integer of magnitude <= 2^53", where, f->key);
            *(int64_t *)p = (int64_t)x;
            break;
        case K_U64:
            if (!integral(c, 0, TWO53, &x))
                return snn_error(SNN_E_INVALID, "%s.%s must be an integer in [0, 2^53]", where, f->key);
            *(uint64_t *)p = (uint64_t)x;
            break;
        case K_BOOL:
            if (!cJSON_IsBool(c)) return snn_error(SNN_E_INVALID, "%s.%s must be true or false", where, f->key);
            *(int *)p = cJSON_IsTrue(c);
            break;
        case K_DOUBLE:
            if (is_null) { *(double *)p = NAN; break; }
            if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble))
                return snn_error(SNN_E_INVALID, "%s.%s must be a finite number", where, f->key);
            *(double *)p = c->valuedouble;
            break;
        case K_ENUM: {
            if (is_null) { *(int *)p = 0; break; }
            int v = -1;
            if (cJSON_IsString(c))
                for (int i = 0; i < f->count; i++) {
                    const char *nm = f->name(i);
                    const char *s2 = c->valuestring;
                    if (f->name == nm_dtype && strncmp(s2, "torch.", 6) == 0) s2 += 6;
                    if (nm && strcmp(nm, s2) == 0) v = i;
                }
            if (v < 0) {
                char opts[256] = "";
                for (int i = 0; i < f->count; i++) {
                    const char *nm = f->name(i);
                    if (!nm) continue;
                    if (opts[0]) strncat(opts, ", ", sizeof opts - strlen(opts) - 1);
                    strncat(opts, nm, sizeof opts - strlen(opts) - 1);
                }
                return snn_error(SNN_E_INVALID, "%s.%s: unsupported value %.40s%s%s (use %s%s)", where, f->key,
                                 cJSON_IsString(c) ? "'" : "", cJSON_IsString(c) ? c->valuestring : "(not a string)",
                                 cJSON_IsString(c) ? "'" : "", opts, f->nullable ? " or null" : "");
            }
            *(int *)p = v;
            break;
        }
        case K_STR:
            if (is_null) { p[0] = '\0'; break; }
            if (!cJSON_IsString(c)) return snn_error(SNN_E_INVALID, "%s.%s must be a string", where, f->key);
            if (strlen(c->valuestring) >= f->size)
                return snn_error(SNN_E_INVALID, "%s.%s is longer than %zu bytes", where, f->key, f->size - 1);
            strcpy(p, c->valuestring);
            break;
        case K_MODULES: {
            if (!cJSON_IsArray(c)) return snn_error(SNN_E_INVALID, "%s.%s must be a list of module names", where, f->key);
            unsigned mask = 0;
            for (const cJSON *e = c->child; e; e = e->next) {
                int b = -1;
                for (int i = 0; cJSON_IsString(e) && i < SNN_LM_RECOMPUTE_MODULE_COUNT; i++)
                    if (strcmp(module_names[i], e->valuestring) == 0) b = i;
                if (b < 0)
                    return snn_error(SNN_E_INVALID, "%s.%s: unknown module %.40s (use core_attn, mlp, layernorm, "
                                     "moe_act, moe, shared_experts, mla_up_proj)", where, f->key,
                                     cJSON_IsString(e) ? e->valuestring : "(not a string)");
                if (mask & (1u << b))
                    return snn_error(SNN_E_INVALID, "%s.%s lists %s twice", where, f->key, module_names[b]);
                mask |= 1u << b;
            }
            *(unsigned *)p = mask;
            break;
        }
        case K_SUB: {
            char w[160];
            snprintf(w, sizeof w, "%s.%s", where, f->key);
            if (f->sub->tag) SNN_TRY(check_tag(c, f->sub->tag, w));
            SNN_TRY(absorb(p, f->sub, c, w, model_type));
            break;
        }
        case K_MODEL: {
            char w[160];
            snprintf(w, sizeof w, "%s.model", where);
            SNN_TRY(absorb_model((snn_lm_model_config *)p, c, w));
            break;
        }
        }
    }
    return SNN_OK;
}

static snn_status absorb_model(snn_lm_model_config *m, const cJSON *obj, const char *where) {
    if (!cJSON_IsObject(obj)) return snn_error(SNN_E_INVALID, "%s must be a JSON object", where);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "_target_");
    int type = -1;
    for (int i = 0; cJSON_IsString(t) && i < SNN_LM_MODEL_COUNT; i++)
        if (strcmp(model_tags[i], t->valuestring) == 0) type = i;
    if (type < 0) {
        if (!cJSON_IsString(t))
            return snn_error(SNN_E_INVALID, "%s: missing \"_target_\" type tag (snn.lm.SpikeLMConfig or snn.lm.GPTConfig)", where);
        SNN_TRY(check_tag(obj, "snn.lm.SpikeLMConfig or snn.lm.GPTConfig", where));
    }
    *m = snn_lm_model_config_default((snn_lm_model_type)type);
    return absorb(m, &model_schema, obj, where, type);
}

static snn_status parse_root(const char *json, cJSON **root) {
    if (!json) return snn_error(SNN_E_INVALID, "JSON text is NULL");
    *root = cJSON_Parse(json);
    if (!*root) return snn_error(SNN_E_FORMAT, "malformed JSON config");
    return SNN_OK;
}

#define READER(rec, T, sch, init, validate)                                                     \
    snn_status snn_lm_##rec##_config_from_json(const char *json, T *out) {                     \
        cJSON *root;                                                                           \
        SNN_TRY(parse_root(json, &root));                                                      \
        T tmp = init;                                                                          \
        snn_status st = check_tag(root, (sch)->tag, #rec);                                     \
        if (st == SNN_OK) st = absorb(&tmp, sch, root, #rec, SNN_LM_MODEL_SPIKELM);        \
        cJSON_Delete(root);                                                                    \
        if (st == SNN_OK) st = validate(&tmp);                                                 \
        if (st == SNN_OK) *out = tmp;                                                          \
        return st;                                                                             \
    }

/* K_MODEL re-initialises the model from its tag (absorb_model), so a record's defaults do
 * not depend on the model type and the SpikeLM-only keys are checked there. */

READER(transformer, snn_lm_transformer_config, &transformer_schema, snn_lm_transformer_config_default(),
       snn_lm_transformer_config_validate)
READER(optimizer, snn_lm_optimizer_config, &optimizer_schema, snn_lm_optimizer_config_default(),
       snn_lm_optimizer_config_validate)
READER(training, snn_lm_training_config, &training_schema, snn_lm_training_config_default(SNN_LM_MODEL_SPIKELM),
       snn_lm_training_config_validate)
READER(evaluation, snn_lm_evaluation_config, &evaluation_schema,
       snn_lm_evaluation_config_default(SNN_LM_MODEL_SPIKELM), snn_lm_evaluation_config_validate)
READER(generation, snn_lm_generation_config, &generation_schema,
       snn_lm_generation_config_default(SNN_LM_MODEL_SPIKELM), snn_lm_generation_config_validate)

snn_status snn_lm_model_config_from_json(const char *json, snn_lm_model_config *out) {
    cJSON *root;
    SNN_TRY(parse_root(json, &root));
    snn_lm_model_config tmp;
    snn_status st = absorb_model(&tmp, root, "model");
    cJSON_Delete(root);
    if (st == SNN_OK) st = snn_lm_model_config_validate(&tmp);
    if (st == SNN_OK) *out = tmp;
    return st;
}

snn_status snn_lm_transformer_config_to_json(const snn_lm_transformer_config *c, char **out) {
    return finish(c ? emit(c, &transformer_schema, 0) : NULL, out);
}
snn_status snn_lm_optimizer_config_to_json(const snn_lm_optimizer_config *c, char **out) {
    return finish(c ? emit(c, &optimizer_schema, 0) : NULL, out);
}
snn_status snn_lm_model_config_to_json(const snn_lm_model_config *c, char **out) {
    return finish(c ? emit_model(c) : NULL, out);
}
snn_status snn_lm_training_config_to_json(const snn_lm_training_config *c, char **out) {
    return finish(c ? emit(c, &training_schema, 0) : NULL, out);
}
snn_status snn_lm_evaluation_config_to_json(const snn_lm_evaluation_config *c, char **out) {
    return finish(c ? emit(c, &evaluation_schema, 0) : NULL, out);
}
snn_status snn_lm_generation_config_to_json(const snn_lm_generation_config *c, char **out) {
    return finish(c ? emit(c, &generation_schema, 0) : NULL, out);
}

snn_status snn_lm_training_config_load(const char *path, snn_lm_training_config *out) {
    if (!path || !out) return snn_error(SNN_E_INVALID, "snn_lm_training_config_load: NULL argument");
    FILE *f;
    SNN_TRY(snn_fopen_regular(path, "training configuration", &f));
    const long cap = 16L << 20;
    char *buf = malloc((size_t)cap + 1);
    if (!buf) { fclose(f); return snn_error(SNN_E_NOMEM, "out of memory reading %s", path); }
    size_t n = fread(buf, 1, (size_t)cap + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return snn_error(SNN_E_IO, "cannot read %s", path); }
    if (n > (size_t)cap) { free(buf); return snn_error(SNN_E_FORMAT, "%s is larger than 16 MiB", path); }
    buf[n] = '\0';
    if (strlen(buf) != n) { free(buf); return snn_error(SNN_E_FORMAT, "%s holds a NUL byte", path); }
    snn_status st = snn_lm_training_config_from_json(buf, out);
    free(buf);
    if (st != SNN_OK) return snn_error_prefix(st, "%s", path);
    return SNN_OK;
}

/* ---- the checkpoint recipe ------------------------------------------------------------------ */

static int add(cJSON *o, const char *k, cJSON *v) {
    if (!v) return 0;
    if (!cJSON_AddItemToObject(o, k, v)) { cJSON_Delete(v); return 0; }
    return 1;
}
static cJSON *str_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

snn_status snn_lm_recipe_to_json(const snn_lm_training_config *c, char **out) {
    if (!c || !out) return snn_error(SNN_E_INVALID, "snn_lm_recipe_to_json: NULL argument");
    SNN_TRY(snn_lm_training_config_validate(c));
    const snn_lm_model_config *m = &c->model;
    const snn_lm_transformer_config *t = &m->transformer;
    int spike = m->type == SNN_LM_MODEL_SPIKELM;
    cJSON *r = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *kw = NULL, *mods = NULL;
    int ok = r && meta;
    /* the model's checkpoint metadata */
    ok = ok && add(r, "recipe_name", cJSON_CreateString(snn_lm_model_type_name(m->type)));
    if (spike) {
        ok = ok && add(r, "spike_decay", snn_json_float(m->spike_decay));
        ok = ok && add(r, "spike_amplitude", snn_json_float(m->spike_amplitude));
    }
    ok = ok && add(r, "num_layers", snn_json_int(t->num_layers));
    ok = ok && add(r, "hidden_size", snn_json_int(t->hidden_size));
    ok = ok && add(r, "num_attention_heads", snn_json_int(t->num_attention_heads));
    ok = ok && add(r, "num_query_groups", snn_json_int(snn_lm_transformer_query_groups(t)));
    ok = ok && add(r, "ffn_hidden_size", snn_json_int(snn_lm_transformer_ffn(t)));
    ok = ok && add(r, "kv_channels", snn_json_int(snn_lm_transformer_kv_channels(t)));
    ok = ok && add(r, "normalization", cJSON_CreateString(snn_lm_normalization_name(t->normalization)));
    ok = ok && add(r, "layernorm_epsilon", snn_json_float(t->layernorm_epsilon));
    ok = ok && add(r, "activation", cJSON_CreateString(snn_lm_activation_name(t->activation)));
    ok = ok && add(r, "add_bias_linear", cJSON_CreateBool(t->add_bias_linear));
    ok = ok && add(r, "add_qkv_bias", cJSON_CreateBool(t->add_qkv_bias));
    ok = ok && add(r, "temporal_output_reduction",
                   cJSON_CreateString(snn_lm_temporal_reduction_name(m->temporal_output_reduction)));
    /* the model metadata */
    ok = ok && add(meta, "type", cJSON_CreateString(model_tags[m->type]));
    ok = ok && add(meta, "builder", cJSON_CreateString(spike ? "snn.lm.spikelm" : "snn.lm.gpt"));
    ok = ok && add(meta, "vocab_size", snn_json_int(m->vocab_size));
    ok = ok && add(meta, "max_sequence_length", snn_json_int(m->max_sequence_length));
    ok = ok && add(meta, "time_steps", snn_json_int(m->time_steps));
    ok = ok && add(meta, "share_embeddings_and_output_weights", cJSON_CreateBool(m->share_embeddings_and_output_weights));
    ok = ok && add(meta, "position_embedding_type",
                   cJSON_CreateString(snn_lm_position_embedding_name(m->position_embedding_type)));
    if (ok) { ok = add(r, "model", meta); meta = NULL; }
    /* the run */
    ok = ok && add(r, "dataset_builder", cJSON_CreateString(c->dataset_builder));
    if (ok) ok = (kw = emit(&c->dataset_kwargs, &kwargs_schema, 0)) != NULL && add(r, "dataset_kwargs", kw);
    ok = ok && add(r, "use_snn_memopt", cJSON_CreateBool(c->use_snn_memopt));
    ok = ok && add(r, "recompute_granularity", str_or_null(snn_lm_recompute_granularity_name(t->recompute_granularity)));
    if (ok) {
        mods = cJSON_CreateArray();
        for (int b = 0; mods && b < SNN_LM_RECOMPUTE_MODULE_COUNT; b++)
            if (t->recompute_modules & (1u << b)) cJSON_AddItemToArray(mods, cJSON_CreateString(module_names[b]));
        ok = add(r, "recompute_modules", mods);
    }
    ok = ok && add(r, "sequence_length", snn_json_int(c->sequence_length));
    ok = ok && add(r, "temporal_semantics_version", snn_json_int(1));
    /* precision: a run may only be resumed under the precision it was trained with */
    ok = ok && add(r, "fp16", cJSON_CreateBool(t->fp16));
    ok = ok && add(r, "bf16", cJSON_CreateBool(t->bf16));
    ok = ok && add(r, "params_dtype", cJSON_CreateString(snn_lm_dtype_name(t->params_dtype)));
    ok = ok && add(r, "fp8", str_or_null(snn_lm_fp8_name(t->fp8)));
    ok = ok && add(r, "fp8_recipe", t->fp8 ? cJSON_CreateString(snn_lm_fp8_recipe_name(t->fp8_recipe)) : cJSON_CreateNull());
    cJSON_Delete(meta);
    if (!ok) { cJSON_Delete(r); return snn_error(SNN_E_NOMEM, "out of memory building the recipe"); }
    return finish(r, out);
}

snn_status snn_lm_recipe_sha256(const snn_lm_training_config *c, char hex[65]) {
    char *j = NULL;
    SNN_TRY(snn_lm_recipe_to_json(c, &j));
    snn_sha256_hex(j, strlen(j), hex);
    free(j);
    return SNN_OK;
}
