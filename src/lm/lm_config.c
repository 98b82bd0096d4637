/* Language-model config records: defaults, names and validation.
 *
 * The checks follow the reference in order: Megatron Core's own TransformerConfig checks,
 * the model record's, then the TrainingConfig rules 1-6 (batch and schedule, context
 * parallel, memopt vs recompute, per-token loss and distributed optimizer, precision
 * consistency). Messages name the fields as record.field so a user can find them in the
 * JSON recipe. */
#include <math.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/lm_config.h"

#define E(...) snn_error(SNN_E_INVALID, __VA_ARGS__)

/* ---- names ------------------------------------------------------------------------------ */

static const char *pick(const char *const *names, int n, int v) {
    return v >= 0 && v < n ? names[v] : NULL;
}
static int find(const char *const *names, int n, const char *s) {
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], s) == 0) return i;
    return -1;
}

static const char *const dtype_names[] = {NULL, "float32", "float16", "bfloat16"};
static const char *const norm_names[] = {"LayerNorm", "RMSNorm"};
static const char *const act_names[] = {"gelu", "swiglu"};
static const char *const fp8_names[] = {NULL, "hybrid", "e4m3"};
static const char *const recipe_names[] = {NULL, "delayed", "tensorwise", "blockwise", "mxfp8"};
static const char *const gran_names[] = {NULL, "selective", "full"};
static const char *const method_names[] = {NULL, "uniform", "block"};
static const char *const model_names[] = {"spikelm", "gpt"};
static const char *const pos_names[] = {"rope", "learned_absolute"};
static const char *const red_names[] = {"mean", "sum"};
static const char *const decay_names[] = {"cosine", "linear", "constant", "inverse-square-root"};

const char *snn_lm_dtype_name(snn_lm_dtype d) { return pick(dtype_names, SNN_LM_DTYPE_COUNT, d); }
const char *snn_lm_normalization_name(snn_lm_normalization n) { return pick(norm_names, SNN_LM_NORM_COUNT, n); }
const char *snn_lm_activation_name(snn_lm_activation a) { return pick(act_names, SNN_LM_ACT_COUNT, a); }
const char *snn_lm_fp8_name(snn_lm_fp8 f) { return pick(fp8_names, SNN_LM_FP8_COUNT, f); }
const char *snn_lm_fp8_recipe_name(snn_lm_fp8_recipe r) { return pick(recipe_names, SNN_LM_FP8_RECIPE_COUNT, r); }
const char *snn_lm_recompute_granularity_name(snn_lm_recompute_granularity g) {
    return pick(gran_names, SNN_LM_RECOMPUTE_COUNT, g);
}
const char *snn_lm_recompute_method_name(snn_lm_recompute_method m) {
    return pick(method_names, SNN_LM_RECOMPUTE_METHOD_COUNT, m);
}
const char *snn_lm_model_type_name(snn_lm_model_type t) { return pick(model_names, SNN_LM_MODEL_COUNT, t); }
const char *snn_lm_position_embedding_name(snn_lm_position_embedding p) { return pick(pos_names, SNN_LM_POS_COUNT, p); }
const char *snn_lm_temporal_reduction_name(snn_lm_temporal_reduction r) { return pick(red_names, SNN_LM_REDUCE_COUNT, r); }
const char *snn_lm_lr_decay_style_name(snn_lm_lr_decay_style s) { return pick(decay_names, SNN_LM_DECAY_COUNT, s); }

int snn_lm_dtype_parse(const char *s) {
    if (s && strncmp(s, "torch.", 6) == 0) s += 6;
    return find(dtype_names, SNN_LM_DTYPE_COUNT, s);
}
int snn_lm_model_type_parse(const char *s) { return find(model_names, SNN_LM_MODEL_COUNT, s); }
int snn_lm_lr_decay_style_parse(const char *s) { return find(decay_names, SNN_LM_DECAY_COUNT, s); }
int snn_lm_temporal_reduction_parse(const char *s) { return find(red_names, SNN_LM_REDUCE_COUNT, s); }
int snn_lm_position_embedding_parse(const char *s) { return find(pos_names, SNN_LM_POS_COUNT, s); }

/* ---- defaults ---------------------------------------------------------------------------- */

snn_lm_transformer_config snn_lm_transformer_config_default(void) {
    snn_lm_transformer_config c;
    memset(&c, 0, sizeof c);
    c.normalization = SNN_LM_NORM_LAYERNORM;
    c.layernorm_epsilon = 1e-5;
    c.activation = SNN_LM_ACT_GELU;
    c.add_bias_linear = 1;
    c.init_method_std = 0.02;
    c.params_dtype = SNN_LM_DTYPE_FLOAT32;
    c.pipeline_dtype = SNN_LM_DTYPE_UNSET;
    c.fp8 = SNN_LM_FP8_NONE;
    c.fp8_recipe = SNN_LM_FP8_RECIPE_DELAYED;
    c.tensor_model_parallel_size = 1;
    c.pipeline_model_parallel_size = 1;
    c.context_parallel_size = 1;
    c.expert_model_parallel_size = 1;
    c.recompute_modules = SNN_LM_RECOMPUTE_CORE_ATTN;
    return c;
}

snn_lm_optimizer_config snn_lm_optimizer_config_default(void) {
    snn_lm_optimizer_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.optimizer, "adam");
    c.lr = NAN;
    c.min_lr = NAN;
    c.weight_decay = 0.01;
    c.adam_beta1 = 0.9;
    c.adam_beta2 = 0.999;
    c.adam_eps = 1e-8;
    c.clip_grad = 1.0;
    c.params_dtype = SNN_LM_DTYPE_FLOAT32;
    c.fp8_recipe = SNN_LM_FP8_RECIPE_UNSET;
    c.loss_scale = NAN;
    c.initial_loss_scale = 4294967296.0;
    c.min_loss_scale = 1.0;
    c.loss_scale_window = 1000;
    c.hysteresis = 2;
    return c;
}

snn_lm_model_config snn_lm_model_config_default(snn_lm_model_type type) {
    snn_lm_model_config c;
    memset(&c, 0, sizeof c);
    c.type = type;
    c.transformer = snn_lm_transformer_config_default();
    c.time_steps = type == SNN_LM_MODEL_GPT ? 1 : 0;
    c.position_embedding_type = SNN_LM_POS_ROPE;
    c.temporal_output_reduction = SNN_LM_REDUCE_MEAN;
    c.spike_decay = 0.25;
    c.spike_amplitude = 1.0;
    return c;
}

snn_lm_training_config snn_lm_training_config_default(snn_lm_model_type type) {
    snn_lm_training_config c;
    memset(&c, 0, sizeof c);
    c.model = snn_lm_model_config_default(type);
    c.optimizer = snn_lm_optimizer_config_default();
    strcpy(c.dataset_builder, SNN_LM_DATASET_TOKENS);
    c.log_interval = 10;
    c.lr_decay_steps = -1;
    c.lr_decay_style = SNN_LM_DECAY_COSINE;
    c.seed = 1234;
    return c;
}

snn_lm_evaluation_config snn_lm_evaluation_config_default(snn_lm_model_type type) {
    snn_lm_evaluation_config c;
    memset(&c, 0, sizeof c);
    c.model = snn_lm_model_config_default(type);
    strcpy(c.dataset_builder, SNN_LM_DATASET_TOKENS);
    c.seed = 1234;
    c.pipeline_microbatches = 1;
    return c;
}

snn_lm_generation_config snn_lm_generation_config_default(snn_lm_model_type type) {
    snn_lm_generation_config c;
    memset(&c, 0, sizeof c);
    c.model = snn_lm_model_config_default(type);
    c.eos_token_id = -1;
    c.seed = 1234;
    c.temperature = 0.0;
    c.top_p = 1.0;
    c.top_k = -1;
    return c;
}

/* ---- derived ------------------------------------------------------------------------------ */

int snn_lm_transformer_query_groups(const snn_lm_transformer_config *c) {
    return c->num_query_groups > 0 ? c->num_query_groups : c->num_attention_heads;
}
int snn_lm_transformer_ffn(const snn_lm_transformer_config *c) {
    return c->ffn_hidden_size > 0 ? c->ffn_hidden_size : 4 * c->hidden_size;
}
int snn_lm_transformer_kv_channels(const snn_lm_transformer_config *c) {
    if (c->kv_channels > 0) return c->kv_channels;
    return c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
}
int64_t snn_lm_training_decay_steps(const snn_lm_training_config *c) {
    return c->lr_decay_steps < 0 ? c->train_steps : c->lr_decay_steps;
}

/* ---- validation -------------------------------------------------------------------------- */

static int is_bool(int v) { return v == 0 || v == 1; }
static int finite_pos(double v) { return isfinite(v) && v > 0; }

snn_status snn_lm_transformer_config_validate(const snn_lm_transformer_config *c) {
    if (!c) return E("TransformerConfig is NULL");
    if (c->num_layers <= 0) return E("transformer.num_layers must be > 0 (got %d)", c->num_layers);
    if (c->hidden_size <= 0) return E("transformer.hidden_size must be > 0 (got %d)", c->hidden_size);
    if (c->num_attention_heads <= 0)
        return E("transformer.num_attention_heads must be > 0 (got %d)", c->num_attention_heads);
    if (c->ffn_hidden_size < 0) return E("transformer.ffn_hidden_size must be >= 0 (0 = 4*hidden_size)");
    if (c->hidden_size > INT32_MAX / 8 || (int64_t)snn_lm_transformer_ffn(c) > INT32_MAX / 2)
        return E("transformer.hidden_size / ffn_hidden_size are too large");
    if (c->kv_channels < 0) return E("transformer.kv_channels must be >= 0 (0 = hidden_size/num_attention_heads)");
    if (c->num_query_groups < 0) return E("transformer.num_query_groups must be >= 0 (0 = num_attention_heads)");
    if (!snn_lm_normalization_name(c->normalization))
        return E("transformer.normalization must be LayerNorm or RMSNorm");
    if (!snn_lm_activation_name(c->activation)) return E("transformer.activation must be gelu or swiglu");
    if (!finite_pos(c->layernorm_epsilon)) return E("transformer.layernorm_epsilon must be finite and > 0");
    if (!finite_pos(c->init_method_std)) return E("transformer.init_method_std must be finite and > 0");
    if (!is_bool(c->add_bias_linear) || !is_bool(c->add_qkv_bias) || !is_bool(c->calculate_per_token_loss) ||
        !is_bool(c->fp16) || !is_bool(c->bf16) || !is_bool(c->sequence_parallel))
        return E("transformer boolean fields (add_bias_linear, add_qkv_bias, calculate_per_token_loss, "
                 "fp16, bf16, sequence_parallel) must be 0 or 1");
    /* precision */
    if (c->fp16 && c->bf16) return E("transformer.fp16 and transformer.bf16 cannot both be True");
    if (c->params_dtype == SNN_LM_DTYPE_UNSET || !snn_lm_dtype_name(c->params_dtype))
        return E("transformer.params_dtype must be float32, float16 or bfloat16");
    if (c->pipeline_dtype != SNN_LM_DTYPE_UNSET && !snn_lm_dtype_name(c->pipeline_dtype))
        return E("transformer.pipeline_dtype must be None, float32, float16 or bfloat16");
    if ((int)c->fp8 < 0 || c->fp8 >= SNN_LM_FP8_COUNT) return E("transformer.fp8 must be None, 'hybrid' or 'e4m3'");
    if (c->fp8_recipe == SNN_LM_FP8_RECIPE_UNSET || !snn_lm_fp8_recipe_name(c->fp8_recipe))
        return E("transformer.fp8_recipe must be delayed, tensorwise, blockwise or mxfp8");
    if (c->fp8 != SNN_LM_FP8_NONE && !c->bf16)
        return E("transformer.fp8='%s' needs transformer.bf16=True: FP8 GEMMs run on a BF16 base "
                 "(fp16=%d, bf16=%d)", snn_lm_fp8_name(c->fp8), c->fp16, c->bf16);
    /* topology */
    if (c->tensor_model_parallel_size < 1 || c->pipeline_model_parallel_size < 1 ||
        c->context_parallel_size < 1 || c->expert_model_parallel_size < 1)
        return E("transformer.tensor_model_parallel_size, pipeline_model_parallel_size, "
                 "context_parallel_size and expert_model_parallel_size must be >= 1");
    int tp = c->tensor_model_parallel_size, groups = snn_lm_transformer_query_groups(c);
    if (c->num_attention_heads % tp != 0)
        return E("transformer.num_attention_heads (%d) must be a multiple of tensor_model_parallel_size (%d)",
                 c->num_attention_heads, tp);
    if (c->num_attention_heads % groups != 0)
        return E("transformer.num_attention_heads (%d) must be a multiple of num_query_groups (%d)",
                 c->num_attention_heads, groups);
    if (groups % tp != 0)
        return E("transformer.num_query_groups (%d) must be a multiple of tensor_model_parallel_size (%d)",
                 groups, tp);
    if (c->kv_channels == 0 && c->hidden_size % c->num_attention_heads != 0)
        return E("transformer.hidden_size (%d) must be a multiple of num_attention_heads (%d) when kv_channels is None",
                 c->hidden_size, c->num_attention_heads);
    if (snn_lm_transformer_ffn(c) % tp != 0)
        return E("transformer.ffn_hidden_size (%d) must be a multiple of tensor_model_parallel_size (%d)",
                 snn_lm_transformer_ffn(c), tp);
    if (c->num_layers % c->pipeline_model_parallel_size != 0)
        return E("transformer.num_layers (%d) must be divisible by pipeline_model_parallel_size (%d)",
                 c->num_layers, c->pipeline_model_parallel_size);
    if (c->sequence_parallel && tp == 1)
        return E("transformer.sequence_parallel needs tensor_model_parallel_size > 1");
    if (c->pipeline_model_parallel_size > 1 && c->pipeline_dtype == SNN_LM_DTYPE_UNSET)
        return E("transformer.pipeline_dtype must be given when pipeline_model_parallel_size > 1");
    /* activation recomputation */
    if ((int)c->recompute_granularity < 0 || c->recompute_granularity >= SNN_LM_RECOMPUTE_COUNT)
        return E("transformer.recompute_granularity must be None, 'selective' or 'full'");
    if ((int)c->recompute_method < 0 || c->recompute_method >= SNN_LM_RECOMPUTE_METHOD_COUNT)
        return E("transformer.recompute_method must be None, 'uniform' or 'block'");
    if (c->recompute_modules >> SNN_LM_RECOMPUTE_MODULE_COUNT)
        return E("transformer.recompute_modules holds an unknown module");
    if (c->recompute_num_layers < 0) return E("transformer.recompute_num_layers must be None or > 0");
    if (c->recompute_granularity == SNN_LM_RECOMPUTE_FULL) {
        if (c->recompute_method == SNN_LM_RECOMPUTE_METHOD_NONE)
            return E("transformer.recompute_granularity='full' needs recompute_method 'uniform' or 'block'");
        int per_stage = c->num_layers / c->pipeline_model_parallel_size;
        if (c->recompute_num_layers < 1 || c->recompute_num_layers > per_stage)
            return E("transformer.recompute_num_layers (%d) must be between 1 and the layers per pipeline "
                     "stage (%d) with recompute_granularity='full'", c->recompute_num_layers, per_stage);
    } else {
        if (c->recompute_method != SNN_LM_RECOMPUTE_METHOD_NONE)
            return E("transformer.recompute_method='%s' needs recompute_granularity='full'",
                     snn_lm_recompute_method_name(c->recompute_method));
        if (c->recompute_granularity == SNN_LM_RECOMPUTE_SELECTIVE) {
            if (c->recompute_num_layers != 0)
                return E("transformer.recompute_num_layers must be None with recompute_granularity='selective'");
            if (c->recompute_modules == 0)
                return E("transformer.recompute_modules must not be empty with recompute_granularity='selective'");
        } else if (c->recompute_num_layers != 0) {
            return E("transformer.recompute_num_layers needs recompute_granularity='full'");
        }
    }
    return SNN_OK;
}

snn_status snn_lm_optimizer_config_validate(const snn_lm_optimizer_config *c) {
    if (!c) return E("OptimizerConfig is NULL");
    if (strcmp(c->optimizer, "adam") != 0)
        return E("optimizer.optimizer must be 'adam' (got '%.15s')", c->optimizer);
    if (!isnan(c->lr) && !(isfinite(c->lr) && c->lr >= 0)) return E("optimizer.lr must be None or finite >= 0");
    if (!isnan(c->min_lr) && !(isfinite(c->min_lr) && c->min_lr >= 0))
        return E("optimizer.min_lr must be None or finite >= 0");
    if (!(isfinite(c->weight_decay) && c->weight_decay >= 0)) return E("optimizer.weight_decay must be finite >= 0");
    if (!(c->adam_beta1 >= 0 && c->adam_beta1 < 1)) return E("optimizer.adam_beta1 must be in [0, 1)");
    if (!(c->adam_beta2 >= 0 && c->adam_beta2 < 1)) return E("optimizer.adam_beta2 must be in [0, 1)");
    if (!finite_pos(c->adam_eps)) return E("optimizer.adam_eps must be finite and > 0");
    if (!(isfinite(c->clip_grad) && c->clip_grad >= 0)) return E("optimizer.clip_grad must be finite >= 0 (0 = off)");
    if (!is_bool(c->fp16) || !is_bool(c->bf16) || !is_bool(c->use_distributed_optimizer))
        return E("optimizer boolean fields (fp16, bf16, use_distributed_optimizer) must be 0 or 1");
    if (c->fp16 && c->bf16) return E("optimizer.fp16 and optimizer.bf16 cannot both be True");
    if (c->params_dtype == SNN_LM_DTYPE_UNSET || !snn_lm_dtype_name(c->params_dtype))
        return E("optimizer.params_dtype must be float32, float16 or bfloat16");
    if (c->fp8_recipe != SNN_LM_FP8_RECIPE_UNSET && !snn_lm_fp8_recipe_name(c->fp8_recipe))
        return E("optimizer.fp8_recipe must be None, delayed, tensorwise, blockwise or mxfp8");
    if (!isnan(c->loss_scale) && !finite_pos(c->loss_scale))
        return E("optimizer.loss_scale must be None (dynamic) or finite > 0");
    if (!finite_pos(c->initial_loss_scale)) return E("optimizer.initial_loss_scale must be finite and > 0");
    if (!finite_pos(c->min_loss_scale) || c->min_loss_scale > c->initial_loss_scale)
        return E("optimizer.min_loss_scale must be > 0 and <= initial_loss_scale");
    if (c->loss_scale_window < 1) return E("optimizer.loss_scale_window must be >= 1");
    if (c->hysteresis < 1) return E("optimizer.hysteresis must be >= 1");
    return SNN_OK;
}

snn_status snn_lm_model_config_validate(const snn_lm_model_config *c) {
    if (!c) return E("ModelConfig is NULL");
    if (!snn_lm_model_type_name(c->type)) return E("model type must be spikelm or gpt");
    SNN_TRY(snn_lm_transformer_config_validate(&c->transformer));
    if (c->vocab_size <= 0 || c->vocab_size > INT32_MAX)
        return E("model.vocab_size must be in [1, 2^31-1] (got %lld)", (long long)c->vocab_size);
    if (c->max_sequence_length <= 0 || c->max_sequence_length > INT32_MAX)
        return E("model.max_sequence_length must be in [1, 2^31-1] (got %lld)", (long long)c->max_sequence_length);
    if (c->time_steps <= 0) return E("model.time_steps must be > 0 (got %d)", c->time_steps);
    if (!is_bool(c->share_embeddings_and_output_weights))
        return E("model.share_embeddings_and_output_weights must be 0 or 1");
    if (!snn_lm_position_embedding_name(c->position_embedding_type))
        return E("model.position_embedding_type must be 'rope' or 'learned_absolute'");
    if (!snn_lm_temporal_reduction_name(c->temporal_output_reduction))
        return E("model.temporal_output_reduction must be 'mean' or 'sum'");
    if (c->position_embedding_type == SNN_LM_POS_ROPE && snn_lm_transformer_kv_channels(&c->transformer) % 2)
        return E("model.position_embedding_type='rope' needs an even kv_channels (head dimension %d)",
                 snn_lm_transformer_kv_channels(&c->transformer));
    if (c->type == SNN_LM_MODEL_SPIKELM) {
        if (c->transformer.normalization != SNN_LM_NORM_LAYERNORM)
            return E("SpikeLM requires transformer.normalization='LayerNorm'");
        if (!(c->spike_decay >= 0 && c->spike_decay <= 1)) return E("model.spike_decay must be in [0, 1]");
        if (!finite_pos(c->spike_amplitude)) return E("model.spike_amplitude must be finite and > 0");
    } else if (c->time_steps != 1) {
        return E("model.time_steps must be 1 for gpt (no spiking; got %d)", c->time_steps);
    }
    return SNN_OK;
}

static int dataset_builder_known(const char *b) { return strcmp(b, SNN_LM_DATASET_TOKENS) == 0; }

static snn_status check_dataset(const char *builder, const snn_lm_dataset_kwargs *k) {
    if (!dataset_builder_known(builder))
        return E("dataset_builder '%.100s' is not a registered dataset (known: %s)", builder,
                 SNN_LM_DATASET_TOKENS);
    if (k->path[0] == '\0') return E("dataset_kwargs.path must name the token dataset directory");
    if (k->split[0] && strcmp(k->split, "train") && strcmp(k->split, "valid") && strcmp(k->split, "test"))
        return E("dataset_kwargs.split must be train, valid or test");
    return SNN_OK;
}

static const char *precision_dtype_name(int fp16, int bf16) {
    return fp16 ? "float16" : bf16 ? "bfloat16" : "float32";
}

snn_status snn_lm_training_config_validate(const snn_lm_training_config *c) {
    if (!c) return E("TrainingConfig is NULL");
    SNN_TRY(snn_lm_model_config_validate(&c->model));
    SNN_TRY(snn_lm_optimizer_config_validate(&c->optimizer));
    const snn_lm_transformer_config *t = &c->model.transformer;
    const snn_lm_optimizer_config *o = &c->optimizer;
    /* rule 1: the run's own fields */
    SNN_TRY(check_dataset(c->dataset_builder, &c->dataset_kwargs));
    if (c->sequence_length <= 0) return E("sequence_length must be > 0");
    if (c->micro_batch_size <= 0) return E("micro_batch_size must be > 0");
    if (c->global_batch_size <= 0) return E("global_batch_size must be > 0");
    if (c->train_steps <= 0) return E("train_steps must be > 0");
    if (c->log_interval <= 0) return E("log_interval must be > 0");
    if (c->global_batch_size % c->micro_batch_size != 0)
        return E("global_batch_size (%lld) must be divisible by micro_batch_size (%lld)",
                 (long long)c->global_batch_size, (long long)c->micro_batch_size);
    if (c->timing_warmup_steps < 0 || c->timing_warmup_steps >= c->train_steps)
        return E("timing_warmup_steps (%lld) must be in [0, train_steps=%lld)", (long long)c->timing_warmup_steps,
                 (long long)c->train_steps);
    if (c->sequence_length > c->model.max_sequence_length)
        return E("sequence_length (%lld) must be <= model.max_sequence_length (%lld)", (long long)c->sequence_length,
                 (long long)c->model.max_sequence_length);
    if (c->eval_interval < 0 || c->eval_steps < 0 || (c->eval_interval == 0) != (c->eval_steps == 0))
        return E("eval_interval (%lld) and eval_steps (%lld) must both be zero or positive",
                 (long long)c->eval_interval, (long long)c->eval_steps);
    if (c->checkpoint_interval < 0) return E("checkpoint_interval must be >= 0");
    if (c->checkpoint_interval > 0 && c->checkpoint_dir[0] == '\0')
        return E("checkpoint_interval > 0 needs checkpoint_dir");
    if (c->lr_warmup_steps < 0) return E("lr_warmup_steps must be >= 0");
    if (c->lr_decay_steps < -1) return E("lr_decay_steps must be None or > lr_warmup_steps");
    if (snn_lm_training_decay_steps(c) <= c->lr_warmup_steps)
        return E("lr_decay_steps (%lld) must be greater than lr_warmup_steps (%lld)",
                 (long long)snn_lm_training_decay_steps(c), (long long)c->lr_warmup_steps);
    if (!snn_lm_lr_decay_style_name(c->lr_decay_style))
        return E("lr_decay_style must be constant, cosine, inverse-square-root or linear");
    if (!is_bool(c->use_snn_memopt)) return E("use_snn_memopt must be 0 or 1");
    /* products that the trainer forms; refusing them here keeps its arithmetic in range */
    if (c->train_steps > INT64_MAX / c->global_batch_size ||
        c->micro_batch_size > INT32_MAX / c->model.time_steps ||
        c->sequence_length * c->micro_batch_size * c->model.time_steps > ((int64_t)1 << 40))
        return E("train_steps*global_batch_size or micro_batch_size*time_steps*sequence_length is too large");
    /* rule 2: context and expert parallel */
    int cp = t->context_parallel_size;
    if (cp > 1 && c->sequence_length % (2 * cp) != 0)
        return E("sequence_length (%lld) must be divisible by 2*context_parallel_size (%d)",
                 (long long)c->sequence_length, 2 * cp);
    if (t->expert_model_parallel_size != 1)
        return E("transformer.expert_model_parallel_size must be 1 (expert parallel is not supported)");
    /* rule 3: SNN memopt and Megatron recomputation */
    if (c->use_snn_memopt) {
        if (t->recompute_granularity == SNN_LM_RECOMPUTE_FULL)
            return E("use_snn_memopt cannot overlap transformer.recompute_granularity='full'");
        if (t->recompute_granularity == SNN_LM_RECOMPUTE_SELECTIVE &&
            (t->recompute_modules != SNN_LM_RECOMPUTE_CORE_ATTN ||
             t->recompute_method != SNN_LM_RECOMPUTE_METHOD_NONE || t->recompute_num_layers != 0))
            return E("use_snn_memopt cannot overlap selective recompute except transformer.recompute_modules "
                     "exactly ['core_attn'] with no recompute_method or recompute_num_layers");
    }
    /* rule 4 */
    if (!t->calculate_per_token_loss) return E("transformer.calculate_per_token_loss must be True");
    if (!o->use_distributed_optimizer) return E("optimizer.use_distributed_optimizer must be True");
    /* rule 5: precision consistency */
    if (t->fp16 != o->fp16)
        return E("transformer.fp16 (%d) must equal optimizer.fp16 (%d)", t->fp16, o->fp16);
    if (t->bf16 != o->bf16)
        return E("transformer.bf16 (%d) must equal optimizer.bf16 (%d)", t->bf16, o->bf16);
    if (t->params_dtype != o->params_dtype)
        return E("transformer.params_dtype (%s) must equal optimizer.params_dtype (%s)",
                 snn_lm_dtype_name(t->params_dtype), snn_lm_dtype_name(o->params_dtype));
    const char *want = precision_dtype_name(t->fp16, t->bf16);
    if (strcmp(snn_lm_dtype_name(t->params_dtype), want) != 0)
        return E("params_dtype (%s) must be %s when fp16=%d and bf16=%d", snn_lm_dtype_name(t->params_dtype),
                 want, t->fp16, t->bf16);
    if (t->pipeline_model_parallel_size > 1 && t->pipeline_dtype != t->params_dtype)
        return E("transformer.pipeline_dtype (%s) must equal params_dtype (%s) when pipeline_model_parallel_size > 1",
                 t->pipeline_dtype ? snn_lm_dtype_name(t->pipeline_dtype) : "None",
                 snn_lm_dtype_name(t->params_dtype));
    if (o->fp8_recipe != SNN_LM_FP8_RECIPE_UNSET) {
        if (t->fp8 == SNN_LM_FP8_NONE)
            return E("optimizer.fp8_recipe='%s' needs transformer.fp8 ('hybrid')", snn_lm_fp8_recipe_name(o->fp8_recipe));
        if (o->fp8_recipe != t->fp8_recipe)
            return E("optimizer.fp8_recipe (%s) must equal transformer.fp8_recipe (%s)",
                     snn_lm_fp8_recipe_name(o->fp8_recipe), snn_lm_fp8_recipe_name(t->fp8_recipe));
    }
    if (isnan(o->lr)) return E("optimizer.lr is required");
    if (isnan(o->min_lr)) return E("optimizer.min_lr is required");
    if (o->min_lr > o->lr) return E("optimizer.min_lr (%g) must be <= optimizer.lr (%g)", o->min_lr, o->lr);
    return SNN_OK;
}

snn_status snn_lm_evaluation_config_validate(const snn_lm_evaluation_config *c) {
    if (!c) return E("EvaluationConfig is NULL");
    SNN_TRY(snn_lm_model_config_validate(&c->model));
    if (c->checkpoint[0] == '\0') return E("checkpoint must name a checkpoint directory");
    SNN_TRY(check_dataset(c->dataset_builder, &c->dataset_kwargs));
    if (c->sequence_length <= 0) return E("sequence_length must be > 0");
    if (c->sequence_length > c->model.max_sequence_length)
        return E("sequence_length (%lld) must be <= model.max_sequence_length (%lld)", (long long)c->sequence_length,
                 (long long)c->model.max_sequence_length);
    if (c->micro_batch_size <= 0) return E("micro_batch_size must be > 0");
    if (!is_bool(c->use_snn_memopt)) return E("use_snn_memopt must be 0 or 1");
    if (c->timing_warmup_batches < 0) return E("timing_warmup_batches must be >= 0");
    if (c->pipeline_microbatches < 1) return E("pipeline_microbatches must be >= 1");
    if (c->micro_batch_size > INT32_MAX / c->pipeline_microbatches / c->model.time_steps)
        return E("micro_batch_size*pipeline_microbatches*time_steps is too large");
    return SNN_OK;
}

snn_status snn_lm_generation_config_validate(const snn_lm_generation_config *c) {
    if (!c) return E("GenerationConfig is NULL");
    SNN_TRY(snn_lm_model_config_validate(&c->model));
    if (c->checkpoint[0] == '\0') return E("checkpoint must name a checkpoint directory");
    if (c->max_new_tokens <= 0) return E("max_new_tokens must be > 0");
    if (c->max_new_tokens >= c->model.max_sequence_length)
        return E("max_new_tokens (%lld) must be < model.max_sequence_length (%lld): the prompt needs a position",
                 (long long)c->max_new_tokens, (long long)c->model.max_sequence_length);
    if (c->eos_token_id < -1 || c->eos_token_id >= c->model.vocab_size)
        return E("eos_token_id (%lld) must be None or in [0, vocab_size=%lld)", (long long)c->eos_token_id,
                 (long long)c->model.vocab_size);
    if (c->model.transformer.context_parallel_size != 1)
        return E("generation requires transformer.context_parallel_size 1");
    if (c->model.transformer.sequence_parallel) return E("generation requires transformer.sequence_parallel off");
    if (!is_bool(c->use_snn_memopt)) return E("use_snn_memopt must be 0 or 1");
    if (!(isfinite(c->temperature) && c->temperature >= 0)) return E("temperature must be finite >= 0 (0 = greedy)");
    if (!(c->top_p > 0 && c->top_p <= 1)) return E("top_p must be in (0, 1]");
    if (c->top_k != -1 && c->top_k <= 0) return E("top_k must be -1 (off) or > 0");
    return SNN_OK;
}

snn_status snn_lm_training_topology(const snn_lm_training_config *c, int world_size, int *data_parallel_size,
                                    int64_t *num_microbatches) {
    if (!c) return E("TrainingConfig is NULL");
    if (world_size < 1) return E("world size must be >= 1 (got %d)", world_size);
    const snn_lm_transformer_config *t = &c->model.transformer;
    int64_t mp = (int64_t)t->tensor_model_parallel_size * t->pipeline_model_parallel_size * t->context_parallel_size;
    if (mp < 1 || world_size % mp != 0)
        return E("world size (%d) must be divisible by tensor_model_parallel_size*pipeline_model_parallel_size*"
                 "context_parallel_size (%lld)", world_size, (long long)mp);
    int dp = (int)(world_size / mp);
    if (c->micro_batch_size <= 0 || c->global_batch_size % (c->micro_batch_size * dp) != 0)
        return E("global_batch_size (%lld) must be divisible by micro_batch_size*data_parallel_size (%lld*%d)",
                 (long long)c->global_batch_size, (long long)c->micro_batch_size, dp);
    if (data_parallel_size) *data_parallel_size = dp;
    if (num_microbatches) *num_microbatches = c->global_batch_size / (c->micro_batch_size * dp);
    return SNN_OK;
}

double snn_lm_lr_at(const snn_lm_training_config *c, int64_t consumed) {
    if (!c || isnan(c->optimizer.lr) || isnan(c->optimizer.min_lr) || c->global_batch_size <= 0) return NAN;
    double max_lr = c->optimizer.lr, min_lr = c->optimizer.min_lr;
    double warmup = (double)c->lr_warmup_steps * (double)c->global_batch_size;
    double decay = (double)snn_lm_training_decay_steps(c) * (double)c->global_batch_size;
    double n = (double)(consumed < 0 ? 0 : consumed);
    if (!(decay > warmup) || warmup < 0) return NAN;
    if (warmup > 0 && n <= warmup) return max_lr * n / warmup;
    switch (c->lr_decay_style) {
    case SNN_LM_DECAY_CONSTANT: return max_lr;
    case SNN_LM_DECAY_INVERSE_SQUARE_ROOT: {
        if (n > decay) return min_lr;
        double lr = max_lr * sqrt(warmup > 1 ? warmup : 1) / sqrt(n > 1 ? n : 1);
        return lr > min_lr ? lr : min_lr;
    }
    case SNN_LM_DECAY_LINEAR:
    case SNN_LM_DECAY_COSINE: {
        if (n > decay) return min_lr;
        double r = (n - warmup) / (decay - warmup);
        double coeff = c->lr_decay_style == SNN_LM_DECAY_LINEAR ? 1.0 - r : 0.5 * (cos(M_PI * r) + 1.0);
        return min_lr + coeff * (max_lr - min_lr);
    }
    default: return NAN;
    }
}
