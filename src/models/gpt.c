/* gpt and spikelm: GPT-2's pre-norm decoder as a module tree.
 *
 *   root: wte -> [wpe] -> h (blocks) -> ln_f -> lm_head
 *   block: x += attn(x) branch, then x += mlp(x) branch, each branch a Sequential:
 *     ln_1 -> [bispike] -> attn(c_attn -> [rope] -> core -> c_proj)
 *     ln_2 -> [bispike] -> mlp(c_fc -> gelu | swiglu -> c_proj)
 * The Residual wrappers and the branch Sequentials are transparent in the names ("@"), so
 * parameters are named exactly as GPT-2's (h.0.ln_1.weight, h.0.attn.c_attn.weight, ...).
 * Initialisation follows GPT-2: weights N(0, 0.02), residual projections (c_proj)
 * N(0, 0.02 / sqrt(2 * layers)), biases 0, norms 1. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "models/gpt_gen.h"
#include "models/zoo.h"
#include "nn/lm_layers.h"
#include "snn/lm.h"

snn_gpt_opts snn_gpt_defaults(int spiking) {
    snn_gpt_opts o = {
        .spiking = spiking ? 1 : 0,
        .vocab = 256,
        .context = 128,
        .seq = 128,
        .layers = 4,
        .hidden = 128,
        .heads = 4,
        .groups = 4,
        .ffn = 512,
        .norm = SNN_LM_NORM_LAYERNORM,
        .act = SNN_LM_ACT_GELU,
        .pos = SNN_LM_POS_LEARNED_ABSOLUTE,
        .bias = 1,
        .tied = 1,
        .eps = 1e-5f,
        .rope_theta = 10000.0f,
        .time_steps = spiking ? 4 : 1,
        .reduce_sum = 0,
        .spike_decay = 0.25f,
        .spike_amplitude = 1.0f,
    };
    return o;
}

snn_status snn_gpt_opts_check(const snn_gpt_opts *o) {
    const char *k = o->spiking ? "spikelm" : "gpt";
    if (o->vocab <= 0 || o->vocab > (1 << 24))
        return snn_error(SNN_E_INVALID, "%s: vocab_size must be in 1..%d (got %d)", k, 1 << 24, o->vocab);
    if (o->context <= 0 || o->context > (1 << 20))
        return snn_error(SNN_E_INVALID, "%s: max_sequence_length must be in 1..%d (got %d)", k, 1 << 20,
                         o->context);
    if (o->seq <= 0 || o->seq > o->context)
        return snn_error(SNN_E_INVALID, "%s: sequence length %d must be in 1..max_sequence_length %d", k,
                         o->seq, o->context);
    if (o->layers <= 0 || o->layers > 1000 || o->hidden <= 0 || o->heads <= 0 || o->ffn <= 0)
        return snn_error(SNN_E_INVALID, "%s: num_layers (1..1000), hidden_size, num_attention_heads and "
                         "ffn_hidden_size must be positive (got %d, %d, %d, %d)",
                         k, o->layers, o->hidden, o->heads, o->ffn);
    if (o->hidden % o->heads)
        return snn_error(SNN_E_INVALID, "%s: hidden_size %d is not divisible by num_attention_heads %d", k,
                         o->hidden, o->heads);
    if (o->groups <= 0 || o->heads % o->groups)
        return snn_error(SNN_E_INVALID, "%s: num_query_groups %d must divide num_attention_heads %d", k,
                         o->groups, o->heads);
    if (o->pos == SNN_LM_POS_ROPE && (o->hidden / o->heads) % 2)
        return snn_error(SNN_E_INVALID, "%s: rope needs an even head size (got %d)", k, o->hidden / o->heads);
    if ((unsigned)o->norm > 1 || (unsigned)o->act > 1 || (unsigned)o->pos > 1)
        return snn_error(SNN_E_INVALID, "%s: unknown norm, activation or position embedding type", k);
    if (!(o->eps >= 0.0f) || !isfinite(o->eps) || !(o->rope_theta > 0.0f))
        return snn_error(SNN_E_INVALID, "%s: eps must be finite >= 0 and rope theta > 0", k);
    if (o->time_steps <= 0 || o->time_steps > 4096)
        return snn_error(SNN_E_INVALID, "%s: time_steps must be in 1..4096 (got %d)", k, o->time_steps);
    if (!o->spiking && o->time_steps != 1)
        return snn_error(SNN_E_INVALID, "gpt: time_steps must be 1 (got %d); spikelm runs over T", o->time_steps);
    if (o->spiking && o->norm != SNN_LM_NORM_LAYERNORM)
        return snn_error(SNN_E_INVALID, "spikelm: normalization must be LayerNorm");
    if (o->spiking && !(o->spike_decay >= 0.0f && o->spike_decay <= 1.0f))
        return snn_error(SNN_E_INVALID, "spikelm: spike_decay must lie in [0, 1] (got %g)", (double)o->spike_decay);
    if (o->spiking && (!(o->spike_amplitude > 0.0f) || !isfinite(o->spike_amplitude)))
        return snn_error(SNN_E_INVALID, "spikelm: spike_amplitude must be > 0 (got %g)",
                         (double)o->spike_amplitude);
    return SNN_OK;
}

static snn_module *norm_new(const snn_gpt_opts *o) {
    return o->norm == SNN_LM_NORM_RMSNORM ? snn_rmsnorm_new(o->hidden, o->eps)
                                          : snn_layernorm_new(o->hidden, o->eps);
}

/* One residual branch: Residual("@") around Sequential("@"). *seq receives the Sequential. */
static snn_status branch(snn_module *block, snn_module **seq) {
    snn_module *res_inner = snn_sequential_new();
    *seq = res_inner;
    if (!res_inner) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(res_inner->name, sizeof res_inner->name, "@");
    snn_module *res = snn_residual_new(res_inner);
    return snn_zoo_add(block, res, "@");
}

static snn_status add_block(snn_module *h, const snn_gpt_opts *o) {
    snn_module *blk = snn_sequential_new(), *a, *mlp;
    SNN_TRY(snn_zoo_add(h, blk, NULL));
    const int hd = o->hidden / o->heads, qkv = (o->heads + 2 * o->groups) * hd;
    SNN_TRY(branch(blk, &a));
    SNN_TRY(snn_zoo_add(a, norm_new(o), "ln_1"));
    if (o->spiking) SNN_TRY(snn_zoo_add(a, snn_bispike_new(o->spike_decay, o->spike_amplitude), "spike_1"));
    snn_module *attn = snn_sequential_new();
    SNN_TRY(snn_zoo_add(a, attn, "attn"));
    SNN_TRY(snn_zoo_add(attn, snn_linear_new(o->hidden, qkv, o->bias), "c_attn"));
    if (o->pos == SNN_LM_POS_ROPE)
        SNN_TRY(snn_zoo_add(attn, snn_rope_new(o->heads, o->groups, hd, o->rope_theta, o->context), "rope"));
    SNN_TRY(snn_zoo_add(attn, snn_attention_new(o->heads, o->groups, hd), "core"));
    SNN_TRY(snn_zoo_add(attn, snn_linear_new(o->heads * hd, o->hidden, o->bias), "c_proj"));
    SNN_TRY(branch(blk, &mlp));
    SNN_TRY(snn_zoo_add(mlp, norm_new(o), "ln_2"));
    if (o->spiking) SNN_TRY(snn_zoo_add(mlp, snn_bispike_new(o->spike_decay, o->spike_amplitude), "spike_2"));
    snn_module *m = snn_sequential_new();
    SNN_TRY(snn_zoo_add(mlp, m, "mlp"));
    int gated = o->act == SNN_LM_ACT_SWIGLU;
    SNN_TRY(snn_zoo_add(m, snn_linear_new(o->hidden, gated ? 2 * o->ffn : o->ffn, o->bias), "c_fc"));
    SNN_TRY(snn_zoo_add(m, gated ? snn_swiglu_new(o->ffn) : snn_gelu_new(), "act"));
    SNN_TRY(snn_zoo_add(m, snn_linear_new(o->ffn, o->hidden, o->bias), "c_proj"));
    return SNN_OK;
}

static char *opts_json(const snn_gpt_opts *o) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "model", o->spiking ? "spikelm" : "gpt");
    cJSON_AddNumberToObject(j, "vocab_size", o->vocab);
    cJSON_AddNumberToObject(j, "max_sequence_length", o->context);
    cJSON_AddNumberToObject(j, "seq", o->seq);
    cJSON_AddNumberToObject(j, "num_layers", o->layers);
    cJSON_AddNumberToObject(j, "hidden_size", o->hidden);
    cJSON_AddNumberToObject(j, "num_attention_heads", o->heads);
    cJSON_AddNumberToObject(j, "num_query_groups", o->groups);
    cJSON_AddNumberToObject(j, "ffn_hidden_size", o->ffn);
    cJSON_AddStringToObject(j, "normalization", o->norm == SNN_LM_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
    cJSON_AddStringToObject(j, "activation", o->act == SNN_LM_ACT_SWIGLU ? "swiglu" : "gelu");
    cJSON_AddStringToObject(j, "position_embedding_type", o->pos == SNN_LM_POS_ROPE ? "rope" : "learned_absolute");
    cJSON_AddBoolToObject(j, "add_bias_linear", o->bias);
    cJSON_AddBoolToObject(j, "share_embeddings_and_output_weights", o->tied);
    cJSON_AddNumberToObject(j, "layernorm_epsilon", o->eps);
    cJSON_AddNumberToObject(j, "rotary_base", o->rope_theta);
    cJSON_AddNumberToObject(j, "time_steps", o->time_steps);
    cJSON_AddStringToObject(j, "temporal_output_reduction", o->reduce_sum ? "sum" : "mean");
    cJSON_AddNumberToObject(j, "spike_decay", o->spike_decay);
    cJSON_AddNumberToObject(j, "spike_amplitude", o->spike_amplitude);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static int jint(const cJSON *o, const char *k, int *dst) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsBool(v)) {
        *dst = cJSON_IsTrue(v);
        return 1;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 2e9) return 0;
    *dst = (int)v->valuedouble;
    return 1;
}

static int jnum(const cJSON *o, const char *k, float *dst) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) return 0;
    *dst = (float)v->valuedouble;
    return 1;
}

static int jstr(const cJSON *o, const char *k, const char *a, const char *b, int *dst) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v)) return 0;
    if (!strcmp(v->valuestring, a)) *dst = 0;
    else if (!strcmp(v->valuestring, b)) *dst = 1;
    else return 0;
    return 1;
}

snn_status snn_gpt_opts_from_json(const char *json, snn_gpt_opts *out) {
    cJSON *j = cJSON_Parse(json ? json : "");
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return snn_error(SNN_E_FORMAT, "language-model configuration is not a JSON object");
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "model");
    int spiking = cJSON_IsString(kind) && !strcmp(kind->valuestring, "spikelm");
    if (!cJSON_IsString(kind) || (!spiking && strcmp(kind->valuestring, "gpt"))) {
        cJSON_Delete(j);
        return snn_error(SNN_E_FORMAT, "configuration is not a gpt or spikelm model");
    }
    snn_gpt_opts o = snn_gpt_defaults(spiking);
    int norm = 0, act = 0, pos = 0;
    int ok = jint(j, "vocab_size", &o.vocab) && jint(j, "max_sequence_length", &o.context) &&
             jint(j, "seq", &o.seq) && jint(j, "num_layers", &o.layers) && jint(j, "hidden_size", &o.hidden) &&
             jint(j, "num_attention_heads", &o.heads) && jint(j, "num_query_groups", &o.groups) &&
             jint(j, "ffn_hidden_size", &o.ffn) && jstr(j, "normalization", "LayerNorm", "RMSNorm", &norm) &&
             jstr(j, "activation", "gelu", "swiglu", &act) &&
             jstr(j, "position_embedding_type", "rope", "learned_absolute", &pos) &&
             jint(j, "add_bias_linear", &o.bias) && jint(j, "share_embeddings_and_output_weights", &o.tied) &&
             jnum(j, "layernorm_epsilon", &o.eps) && jnum(j, "rotary_base", &o.rope_theta) &&
             jint(j, "time_steps", &o.time_steps) &&
             jstr(j, "temporal_output_reduction", "mean", "sum", &o.reduce_sum) &&
             jnum(j, "spike_decay", &o.spike_decay) && jnum(j, "spike_amplitude", &o.spike_amplitude);
    cJSON_Delete(j);
    if (!ok) return snn_error(SNN_E_FORMAT, "language-model configuration: a field is missing or invalid");
    o.norm = (snn_lm_normalization)norm;
    o.act = (snn_lm_activation)act;
    o.pos = (snn_lm_position_embedding)pos;
    SNN_TRY(snn_gpt_opts_check(&o));
    *out = o;
    return SNN_OK;
}

snn_status snn_gpt_opts_from_model_config(const snn_lm_model_config *mc, int seq, snn_gpt_opts *out) {
    const snn_lm_transformer_config *t = &mc->transformer;
    snn_gpt_opts o = snn_gpt_defaults(mc->type == SNN_LM_MODEL_SPIKELM);
    o.vocab = mc->vocab_size > (1 << 24) ? -1 : (int)mc->vocab_size;
    o.context = mc->max_sequence_length > (1 << 20) ? -1 : (int)mc->max_sequence_length;
    o.seq = seq;
    o.layers = t->num_layers;
    o.hidden = t->hidden_size;
    o.heads = t->num_attention_heads;
    /* the record's "0 = derived" conventions (lm_config.h) */
    o.groups = t->num_query_groups ? t->num_query_groups : t->num_attention_heads;
    o.ffn = t->ffn_hidden_size ? t->ffn_hidden_size : 4 * t->hidden_size;
    const int kv = t->kv_channels ? t->kv_channels : (t->num_attention_heads ? t->hidden_size / t->num_attention_heads : 0);
    o.norm = t->normalization;
    o.act = t->activation;
    o.pos = mc->position_embedding_type;
    o.bias = t->add_bias_linear;
    o.tied = mc->share_embeddings_and_output_weights;
    o.eps = (float)t->layernorm_epsilon;
    o.time_steps = mc->time_steps;
    o.reduce_sum = mc->temporal_output_reduction == SNN_LM_REDUCE_SUM;
    o.spike_decay = (float)mc->spike_decay;
    o.spike_amplitude = (float)mc->spike_amplitude;
    if (t->hidden_size > 0 && t->num_attention_heads > 0 &&
        kv * t->num_attention_heads != t->hidden_size)
        return snn_error(SNN_E_UNSUPPORTED, "kv_channels %d: this network needs kv_channels * "
                         "num_attention_heads == hidden_size", kv);
    if (t->add_qkv_bias && !t->add_bias_linear)
        return snn_error(SNN_E_UNSUPPORTED, "add_qkv_bias without add_bias_linear is not supported");
    SNN_TRY(snn_gpt_opts_check(&o));
    *out = o;
    return SNN_OK;
}

snn_status snn_gpt_opts_of(const snn_model *m, snn_gpt_opts *o) {
    return snn_gpt_opts_from_json(snn_model_config_json(m), o);
}

static void gpt_init(snn_model *m, const snn_gpt_opts *o, uint64_t seed) {
    snn_rng rng = snn_rng_make(seed, 0x6770);
    const float proj = 0.02f / sqrtf(2.0f * (float)o->layers);
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info t;
        snn_model_tensor(m, i, &t);
        size_t n = strlen(t.name);
        int is_bias = n > 5 && !strcmp(t.name + n - 5, ".bias");
        int is_norm = strstr(t.name, ".ln_") || !strncmp(t.name, "ln_f", 4);
        if (is_norm || t.is_buffer) continue; /* the modules' own init: ones / zeros */
        if (is_bias) {
            memset(t.data, 0, t.numel * sizeof(float));
            continue;
        }
        float std = strstr(t.name, "c_proj.weight") ? proj : !strcmp(t.name, "wpe.weight") ? 0.01f : 0.02f;
        snn_init_trunc_normal(t.data, t.numel, std, &rng);
    }
}

static snn_status gpt_create(const snn_gpt_opts *o, uint64_t seed, int init, snn_model **out);

snn_status snn_gpt_create(const snn_gpt_opts *o, uint64_t seed, snn_model **out) {
    return gpt_create(o, seed, 1, out);
}

snn_status snn_gpt_create_empty(const snn_gpt_opts *o, snn_model **out) { return gpt_create(o, 0, 0, out); }

static snn_status gpt_create(const snn_gpt_opts *o, uint64_t seed, int init, snn_model **out) {
    *out = NULL;
    SNN_TRY(snn_gpt_opts_check(o));
    snn_module *root = snn_sequential_new();
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_module *wte = snn_embedding_new(o->vocab, o->hidden);
    snn_status st = snn_zoo_add(root, wte, "wte");
    if (st == SNN_OK && o->pos == SNN_LM_POS_LEARNED_ABSOLUTE) st = snn_zoo_add(root, snn_posemb_new(o->context, o->hidden), "wpe");
    snn_module *h = NULL;
    if (st == SNN_OK) {
        h = snn_sequential_new();
        st = snn_zoo_add(root, h, "h");
    }
    for (int i = 0; i < o->layers && st == SNN_OK; i++) st = add_block(h, o);
    if (st == SNN_OK) st = snn_zoo_add(root, o->norm == SNN_LM_NORM_RMSNORM ? snn_rmsnorm_new(o->hidden, o->eps)
                                                                           : snn_layernorm_new(o->hidden, o->eps),
                                       "ln_f");
    if (st == SNN_OK) st = snn_zoo_add(root, snn_lm_head_new(o->hidden, o->vocab, o->tied ? wte : NULL), "lm_head");
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    char *cfg = opts_json(o);
    if (!cfg) {
        snn_module_free(root);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    st = init ? snn_model_build(root, o->spiking ? "spikelm" : "gpt", cfg, snn_shape1(o->seq), seed, out)
              : snn_model_build_uninit(root, o->spiking ? "spikelm" : "gpt", cfg, snn_shape1(o->seq), out);
    cJSON_free(cfg);
    if (st == SNN_OK && init) gpt_init(*out, o, seed);
    return st;
}
