/* snn — language-model configuration: the Megatron Core style records of SpikingJelly's
 * distributed.llm (TransformerConfig, OptimizerConfig, ModelConfig, TrainingConfig,
 * EvaluationConfig, generation config), their defaults, their validation rules and a JSON
 * form with type tags from a closed registry.
 *
 * Field names are the reference's (Megatron Core's for the transformer and optimizer
 * records). Each record has a *_default() constructor with the reference's defaults;
 * every validation failure is SNN_E_INVALID with a message that names the field(s).
 * The rules are listed in docs/lm.md ("Configs and their rules"), in the order they are
 * checked.
 *
 * Unset optional values: an int64 of -1 ("None"), a double of NAN ("None"), an empty
 * string, SNN_LM_DTYPE_UNSET, SNN_LM_FP8_RECIPE_UNSET. Strings are fixed-size arrays so a
 * record can be copied with '='. */
#ifndef SNN_LM_CONFIG_H
#define SNN_LM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SNN_LM_PATH_MAX 1024
#define SNN_LM_NAME_MAX 128

typedef enum snn_lm_dtype {
    SNN_LM_DTYPE_UNSET = 0,    /* None (pipeline_dtype only) */
    SNN_LM_DTYPE_FLOAT32 = 1,  /* "float32" (torch.float32) */
    SNN_LM_DTYPE_FLOAT16 = 2,  /* "float16" */
    SNN_LM_DTYPE_BFLOAT16 = 3, /* "bfloat16" */
    SNN_LM_DTYPE_COUNT
} snn_lm_dtype;

typedef enum snn_lm_normalization {
    SNN_LM_NORM_LAYERNORM = 0, /* "LayerNorm" */
    SNN_LM_NORM_RMSNORM = 1,   /* "RMSNorm" */
    SNN_LM_NORM_COUNT
} snn_lm_normalization;

typedef enum snn_lm_activation {
    SNN_LM_ACT_GELU = 0,   /* "gelu": fc1 -> GELU (tanh approximation, as GPT-2) -> fc2 */
    SNN_LM_ACT_SWIGLU = 1, /* "swiglu": gated linear unit, fc1 = [gate; up], silu(gate)*up */
    SNN_LM_ACT_COUNT
} snn_lm_activation;

typedef enum snn_lm_fp8 {
    SNN_LM_FP8_NONE = 0,   /* fp8=None */
    SNN_LM_FP8_HYBRID = 1, /* "hybrid": E4M3 forward, E5M2 gradients */
    SNN_LM_FP8_E4M3 = 2,   /* "e4m3": E4M3 everywhere */
    SNN_LM_FP8_COUNT
} snn_lm_fp8;

/* Megatron Core's fp8_recipe names; they map onto snn's FP8 recipes (precision.h):
 * delayed -> delayed, tensorwise -> current, blockwise -> block, mxfp8 -> mxfp8. */
typedef enum snn_lm_fp8_recipe {
    SNN_LM_FP8_RECIPE_UNSET = 0,      /* OptimizerConfig only: no recipe given */
    SNN_LM_FP8_RECIPE_DELAYED = 1,    /* "delayed" (TransformerConfig's default) */
    SNN_LM_FP8_RECIPE_TENSORWISE = 2, /* "tensorwise" */
    SNN_LM_FP8_RECIPE_BLOCKWISE = 3,  /* "blockwise" */
    SNN_LM_FP8_RECIPE_MXFP8 = 4,      /* "mxfp8" */
    SNN_LM_FP8_RECIPE_COUNT
} snn_lm_fp8_recipe;

typedef enum snn_lm_recompute_granularity {
    SNN_LM_RECOMPUTE_NONE = 0,      /* None */
    SNN_LM_RECOMPUTE_SELECTIVE = 1, /* "selective" */
    SNN_LM_RECOMPUTE_FULL = 2,      /* "full" */
    SNN_LM_RECOMPUTE_COUNT
} snn_lm_recompute_granularity;

typedef enum snn_lm_recompute_method {
    SNN_LM_RECOMPUTE_METHOD_NONE = 0,    /* None */
    SNN_LM_RECOMPUTE_METHOD_UNIFORM = 1, /* "uniform" */
    SNN_LM_RECOMPUTE_METHOD_BLOCK = 2,   /* "block" */
    SNN_LM_RECOMPUTE_METHOD_COUNT
} snn_lm_recompute_method;

/* recompute_modules is a set: a bit mask of these. Megatron Core's default is {core_attn}. */
enum {
    SNN_LM_RECOMPUTE_CORE_ATTN = 1 << 0, /* "core_attn" */
    SNN_LM_RECOMPUTE_MLP = 1 << 1,       /* "mlp" */
    SNN_LM_RECOMPUTE_LAYERNORM = 1 << 2, /* "layernorm" */
    SNN_LM_RECOMPUTE_MOE_ACT = 1 << 3,   /* "moe_act" */
    SNN_LM_RECOMPUTE_MOE = 1 << 4,       /* "moe" */
    SNN_LM_RECOMPUTE_SHARED_EXPERTS = 1 << 5, /* "shared_experts" */
    SNN_LM_RECOMPUTE_MLA_UP_PROJ = 1 << 6,    /* "mla_up_proj" */
    SNN_LM_RECOMPUTE_MODULE_COUNT = 7
};

typedef struct snn_lm_transformer_config {
    /* architecture */
    int num_layers;            /* > 0 (default 0: must be given) */
    int hidden_size;           /* > 0 (must be given) */
    int num_attention_heads;   /* > 0 (must be given) */
    int num_query_groups;      /* 0 = num_attention_heads (multi-head); else GQA groups */
    int ffn_hidden_size;       /* 0 = 4 * hidden_size */
    int kv_channels;           /* 0 = hidden_size / num_attention_heads */
    snn_lm_normalization normalization; /* default LayerNorm */
    double layernorm_epsilon;  /* default 1e-5 */
    snn_lm_activation activation;       /* default gelu */
    int add_bias_linear;       /* default 1 */
    int add_qkv_bias;          /* default 0; with add_bias_linear the QKV has a bias anyway */
    double init_method_std;    /* default 0.02 */
    int calculate_per_token_loss; /* default 0 (Megatron Core); training requires 1 */
    /* precision */
    int fp16, bf16;            /* default 0, 0 */
    snn_lm_dtype params_dtype; /* default float32 */
    snn_lm_dtype pipeline_dtype; /* default unset; required when pipeline parallel > 1 */
    snn_lm_fp8 fp8;            /* default none */
    snn_lm_fp8_recipe fp8_recipe; /* default delayed */
    /* topology: the single source of TP / PP / CP / sequence parallel */
    int tensor_model_parallel_size;   /* default 1 */
    int pipeline_model_parallel_size; /* default 1 */
    int context_parallel_size;        /* default 1 */
    int expert_model_parallel_size;   /* default 1 (expert parallel is refused) */
    int sequence_parallel;            /* default 0 */
    /* activation recomputation */
    snn_lm_recompute_granularity recompute_granularity; /* default none */
    snn_lm_recompute_method recompute_method;           /* default none */
    int recompute_num_layers;  /* 0 = None */
    unsigned recompute_modules; /* default SNN_LM_RECOMPUTE_CORE_ATTN */
} snn_lm_transformer_config;

typedef struct snn_lm_optimizer_config {
    char optimizer[16];        /* "adam" (AdamW-style decoupled weight decay, as MCore) */
    double lr;                 /* NAN = None; training requires it */
    double min_lr;             /* NAN = None; training requires it */
    double weight_decay;       /* default 0.01 */
    double adam_beta1;         /* default 0.9 */
    double adam_beta2;         /* default 0.999 */
    double adam_eps;           /* default 1e-8 */
    double clip_grad;          /* default 1.0; 0 = no clipping */
    int fp16, bf16;            /* must equal the transformer's */
    snn_lm_dtype params_dtype; /* default float32; must equal the transformer's */
    int use_distributed_optimizer; /* default 0; training requires 1 */
    snn_lm_fp8_recipe fp8_recipe;  /* default unset; if set, must equal the transformer's */
    /* FP16 loss scaling (Megatron Core's names) */
    double loss_scale;         /* NAN = dynamic; else a static scale > 0 */
    double initial_loss_scale; /* default 2^32 */
    double min_loss_scale;     /* default 1.0 */
    int loss_scale_window;     /* default 1000 */
    int hysteresis;            /* default 2 */
} snn_lm_optimizer_config;

typedef enum snn_lm_model_type {
    SNN_LM_MODEL_SPIKELM = 0, /* "spikelm": SpikeLMConfig, _target_ "snn.lm.SpikeLMConfig" */
    SNN_LM_MODEL_GPT = 1,     /* "gpt": GPTConfig, _target_ "snn.lm.GPTConfig" (no spiking) */
    SNN_LM_MODEL_COUNT
} snn_lm_model_type;

typedef enum snn_lm_position_embedding {
    SNN_LM_POS_ROPE = 0,             /* "rope" (default) */
    SNN_LM_POS_LEARNED_ABSOLUTE = 1, /* "learned_absolute" */
    SNN_LM_POS_COUNT
} snn_lm_position_embedding;

typedef enum snn_lm_temporal_reduction {
    SNN_LM_REDUCE_MEAN = 0, /* "mean" */
    SNN_LM_REDUCE_SUM = 1,  /* "sum" */
    SNN_LM_REDUCE_COUNT
} snn_lm_temporal_reduction;

typedef struct snn_lm_model_config {
    snn_lm_model_type type;
    snn_lm_transformer_config transformer;
    int64_t vocab_size;            /* > 0 */
    int64_t max_sequence_length;   /* > 0 */
    int time_steps;                /* > 0; gpt: must be 1 */
    int share_embeddings_and_output_weights; /* default 0 */
    snn_lm_position_embedding position_embedding_type; /* default rope */
    snn_lm_temporal_reduction temporal_output_reduction; /* default mean */
    /* SpikeLM only (spike_decay in [0, 1], spike_amplitude > 0) */
    double spike_decay;            /* default 0.25 */
    double spike_amplitude;        /* default 1.0 */
} snn_lm_model_config;

/* dataset_builder names of the closed registry: "snn.data.tokens" (a directory with
 * train.npy / valid.npy / test.npy, see data.h). dataset_kwargs holds "path" and, for
 * evaluation, "split" ("valid" or "test"). */
#define SNN_LM_DATASET_TOKENS "snn.data.tokens"

typedef struct snn_lm_dataset_kwargs {
    char path[SNN_LM_PATH_MAX]; /* required */
    char split[16];             /* "" = the command's default split */
} snn_lm_dataset_kwargs;

typedef enum snn_lm_lr_decay_style {
    SNN_LM_DECAY_COSINE = 0,              /* "cosine" (default) */
    SNN_LM_DECAY_LINEAR = 1,              /* "linear" */
    SNN_LM_DECAY_CONSTANT = 2,            /* "constant" */
    SNN_LM_DECAY_INVERSE_SQUARE_ROOT = 3, /* "inverse-square-root" */
    SNN_LM_DECAY_COUNT
} snn_lm_lr_decay_style;

typedef struct snn_lm_training_config {
    snn_lm_model_config model;
    snn_lm_optimizer_config optimizer;
    char dataset_builder[SNN_LM_NAME_MAX]; /* default "snn.data.tokens" */
    snn_lm_dataset_kwargs dataset_kwargs;
    int64_t sequence_length;     /* > 0, <= model.max_sequence_length */
    int64_t micro_batch_size;    /* semantic samples per DP rank per microbatch, > 0 */
    int64_t global_batch_size;   /* semantic samples per optimizer step (excludes T), > 0 */
    int64_t train_steps;         /* > 0 */
    int64_t timing_warmup_steps; /* default 0, in [0, train_steps) */
    int64_t eval_interval;       /* default 0 */
    int64_t eval_steps;          /* default 0 */
    int64_t log_interval;        /* default 10 */
    int64_t lr_warmup_steps;     /* default 0 */
    int64_t lr_decay_steps;      /* -1 = None (= train_steps) */
    snn_lm_lr_decay_style lr_decay_style; /* default cosine */
    char checkpoint_dir[SNN_LM_PATH_MAX]; /* "" = None */
    int64_t checkpoint_interval; /* default 0 */
    char resume[SNN_LM_PATH_MAX];         /* "" = None */
    uint64_t seed;               /* default 1234 */
    int use_snn_memopt;          /* default 0 */
} snn_lm_training_config;

typedef struct snn_lm_evaluation_config {
    snn_lm_model_config model;
    char checkpoint[SNN_LM_PATH_MAX];      /* required */
    char dataset_builder[SNN_LM_NAME_MAX]; /* default "snn.data.tokens" */
    snn_lm_dataset_kwargs dataset_kwargs;
    int64_t sequence_length;       /* > 0, <= model.max_sequence_length */
    int64_t micro_batch_size;      /* > 0 */
    uint64_t seed;                 /* default 1234 */
    int use_snn_memopt;            /* default 0 */
    int64_t timing_warmup_batches; /* default 0, >= 0 */
    int64_t pipeline_microbatches; /* default 1, >= 1 */
} snn_lm_evaluation_config;

/* MCoreGenerationConfig plus the sampling fields of SpikingJelly's SGLang generation
 * config (temperature 0 = greedy). */
typedef struct snn_lm_generation_config {
    snn_lm_model_config model;
    char checkpoint[SNN_LM_PATH_MAX]; /* required */
    int64_t max_new_tokens;   /* > 0 */
    int64_t eos_token_id;     /* -1 = None; else in [0, vocab_size) */
    uint64_t seed;            /* default 1234 */
    int use_snn_memopt;       /* default 0 */
    double temperature;       /* default 0.0, >= 0 */
    double top_p;             /* default 1.0, in (0, 1] */
    int64_t top_k;            /* default -1 (off), -1 or > 0 */
} snn_lm_generation_config;

/* ---- defaults ----------------------------------------------------------------------- */
snn_lm_transformer_config snn_lm_transformer_config_default(void);
snn_lm_optimizer_config snn_lm_optimizer_config_default(void);
/* type picks the subclass defaults (spikelm: temporal reduction mean, decay 0.25, ...). */
snn_lm_model_config snn_lm_model_config_default(snn_lm_model_type type);
snn_lm_training_config snn_lm_training_config_default(snn_lm_model_type type);
snn_lm_evaluation_config snn_lm_evaluation_config_default(snn_lm_model_type type);
snn_lm_generation_config snn_lm_generation_config_default(snn_lm_model_type type);

/* ---- validation (each: SNN_OK or SNN_E_INVALID naming the fields) -------------------- */
/* Megatron Core's own TransformerConfig checks (fp16/bf16 exclusive, heads/groups/TP
 * divisibility, sequence parallel needs TP, pipeline_dtype with PP, recompute rules, fp8). */
snn_status snn_lm_transformer_config_validate(const snn_lm_transformer_config *c);
snn_status snn_lm_optimizer_config_validate(const snn_lm_optimizer_config *c);
/* Includes the transformer's checks and the model's (vocab, lengths, T, embeddings,
 * reduction, SpikeLM's LayerNorm and spike parameters, gpt's T = 1). */
snn_status snn_lm_model_config_validate(const snn_lm_model_config *c);
/* Includes the model and optimizer checks, then the TrainingConfig rules 1-6 of the
 * reference (batch, schedule, CP, memopt vs recompute, per-token loss, distributed
 * optimizer, precision consistency between the transformer and optimizer configs). */
snn_status snn_lm_training_config_validate(const snn_lm_training_config *c);
snn_status snn_lm_evaluation_config_validate(const snn_lm_evaluation_config *c);
snn_status snn_lm_generation_config_validate(const snn_lm_generation_config *c);

/* The run's layout on `world_size` processes: world % (TP*PP*CP) == 0,
 * DP = world / (TP*PP*CP), global % (micro*DP) == 0, num_microbatches = global/(micro*DP).
 * Either output may be NULL. */
snn_status snn_lm_training_topology(const snn_lm_training_config *c, int world_size,
                                    int *data_parallel_size, int64_t *num_microbatches);

/* Derived values. */
int snn_lm_transformer_query_groups(const snn_lm_transformer_config *c); /* groups or heads */
int snn_lm_transformer_ffn(const snn_lm_transformer_config *c);          /* ffn or 4*hidden */
int snn_lm_transformer_kv_channels(const snn_lm_transformer_config *c);  /* kv or h/heads */
int64_t snn_lm_training_decay_steps(const snn_lm_training_config *c);    /* or train_steps */

/* Learning rate after `consumed_samples` samples, Megatron Core's scheduler in samples:
 * warmup = lr_warmup_steps*global, decay = decay_steps*global samples. While
 * consumed <= warmup (warmup > 0): lr * consumed / warmup (from 0). Then: constant: lr;
 * past decay: min_lr; inverse-square-root: max(min_lr, lr*sqrt(max(warmup,1))/sqrt(max(consumed,1)));
 * else with r = (consumed - warmup) / (decay - warmup): linear min + (lr-min)(1-r), cosine
 * min + (lr-min)(cos(pi r)+1)/2. NAN when lr/min_lr are None or the schedule is invalid. */
double snn_lm_lr_at(const snn_lm_training_config *c, int64_t consumed_samples);

/* ---- names (NULL for out-of-range values) -------------------------------------------- */
const char *snn_lm_dtype_name(snn_lm_dtype d);          /* NULL for unset */
const char *snn_lm_normalization_name(snn_lm_normalization n);
const char *snn_lm_activation_name(snn_lm_activation a);
const char *snn_lm_fp8_name(snn_lm_fp8 f);              /* NULL for none */
const char *snn_lm_fp8_recipe_name(snn_lm_fp8_recipe r); /* NULL for unset */
const char *snn_lm_recompute_granularity_name(snn_lm_recompute_granularity g);
const char *snn_lm_recompute_method_name(snn_lm_recompute_method m);
const char *snn_lm_model_type_name(snn_lm_model_type t); /* "spikelm" / "gpt" */
const char *snn_lm_position_embedding_name(snn_lm_position_embedding p);
const char *snn_lm_temporal_reduction_name(snn_lm_temporal_reduction r);
const char *snn_lm_lr_decay_style_name(snn_lm_lr_decay_style s);
/* Parse a name (exact spelling as above); -1 if unknown. dtype accepts "torch." prefix. */
int snn_lm_dtype_parse(const char *s);
int snn_lm_model_type_parse(const char *s);
int snn_lm_lr_decay_style_parse(const char *s);
int snn_lm_temporal_reduction_parse(const char *s);
int snn_lm_position_embedding_parse(const char *s);

/* ---- JSON ------------------------------------------------------------------------------
 * Each record is an object with a "_target_" type tag from a closed registry:
 *   snn.lm.TransformerConfig, snn.lm.OptimizerConfig, snn.lm.SpikeLMConfig,
 *   snn.lm.GPTConfig, snn.lm.TrainingConfig, snn.lm.EvaluationConfig,
 *   snn.lm.GenerationConfig.
 * An unknown or missing tag, a tag of the wrong record type, an unknown key or a value of
 * the wrong JSON type is an error (SNN_E_FORMAT for malformed JSON, SNN_E_INVALID
 * otherwise). Omitted keys take the defaults; parsed records are validated.
 * Writers return a malloc'd NUL-terminated compact JSON string with sorted keys (the
 * canonical form, equal to Python's json.dumps(obj, sort_keys=True, separators=(",", ":"))
 * of the same object); free it with free(). */
snn_status snn_lm_transformer_config_to_json(const snn_lm_transformer_config *c, char **out);
snn_status snn_lm_transformer_config_from_json(const char *json, snn_lm_transformer_config *out);
snn_status snn_lm_optimizer_config_to_json(const snn_lm_optimizer_config *c, char **out);
snn_status snn_lm_optimizer_config_from_json(const char *json, snn_lm_optimizer_config *out);
snn_status snn_lm_model_config_to_json(const snn_lm_model_config *c, char **out);
snn_status snn_lm_model_config_from_json(const char *json, snn_lm_model_config *out);
snn_status snn_lm_training_config_to_json(const snn_lm_training_config *c, char **out);
snn_status snn_lm_training_config_from_json(const char *json, snn_lm_training_config *out);
snn_status snn_lm_evaluation_config_to_json(const snn_lm_evaluation_config *c, char **out);
snn_status snn_lm_evaluation_config_from_json(const char *json, snn_lm_evaluation_config *out);
snn_status snn_lm_generation_config_to_json(const snn_lm_generation_config *c, char **out);
snn_status snn_lm_generation_config_from_json(const char *json, snn_lm_generation_config *out);

/* The whole training recipe from a JSON file holding one snn.lm.TrainingConfig object
 * (with its model, transformer and optimizer records); validated. SNN_E_IO if the file
 * cannot be read (files over 16 MiB are refused). */
snn_status snn_lm_training_config_load(const char *path, snn_lm_training_config *out);

/* The checkpoint recipe of a training run (reference §7.3 step 4): the model's checkpoint
 * metadata (recipe_name "spikelm" or "gpt", core transformer dims, SpikeLM's decay and
 * amplitude), the model metadata (type, builder, vocab_size, max_sequence_length,
 * time_steps, tie flag, position embedding type, temporal reduction), dataset_builder,
 * dataset_kwargs, use_snn_memopt, recompute granularity and modules, sequence_length,
 * the precision (fp16, bf16, params_dtype, fp8, fp8_recipe) and temporal_semantics_version 1.
 * Canonical JSON (sorted keys, compact), malloc'd. Two runs may resume each other only
 * when their recipes are byte-equal. */
snn_status snn_lm_recipe_to_json(const snn_lm_training_config *c, char **out);
/* Lower-case hex SHA-256 of snn_lm_recipe_to_json (the export manifest's recipe_sha256). */
snn_status snn_lm_recipe_sha256(const snn_lm_training_config *c, char hex[65]);
/* Canonical form of any JSON text: parsed, keys sorted (by code point), compact, strings
 * ASCII-escaped as Python does; numbers with an integral value print as integers, others
 * as Python's repr. Duplicate keys are an error. malloc'd. */
snn_status snn_json_canonicalize(const char *json, char **out);

#ifdef __cplusplus
}
#endif
#endif
