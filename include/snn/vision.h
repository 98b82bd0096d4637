/* snn — distributed image classification: the run configurations (SpikingJelly's
 * distributed.vision TrainingConfig / EvaluationConfig / PredictionConfig and ModelConfig)
 * as plain C structs, their validation, and their JSON form.
 *
 * Every struct is plain data (no pointers): copy it, compare it with the _equal functions,
 * start from the _default function and override fields. Strings are fixed-size arrays;
 * an empty string means "none" where the reference has None.
 *
 * JSON form (docs/distributed.md): an object with a "_target_" type tag and every field;
 * nested configs are objects with their own tag; file-system paths are {"_path_": "..."}.
 * Tags come from a closed registry (snn.vision.TrainingConfig, snn.vision.EvaluationConfig,
 * snn.vision.PredictionConfig, snn.vision.FCSNNConfig, snn.vision.ConvSNNConfig,
 * snn.vision.SpikformerConfig, snn.precision.PrecisionConfig): an unknown tag is an error
 * ("unsupported config target"), an unknown field is an error, decoding an object of
 * another type is an error. Nothing is loaded by name: the dotted names of the dataset
 * builder, optimizer, loss and scheduler are looked up in fixed tables of what snn
 * implements (snn_vision_registry_*). */
#ifndef SNN_VISION_H
#define SNN_VISION_H

#include <stddef.h>
#include <stdint.h>
#include "checkpoint.h"
#include "error.h"
#include "model.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SNN_VISION_NAME_MAX 96
#define SNN_VISION_PATH_MAX 1024
#define SNN_VISION_KWARGS_MAX 8
#define SNN_VISION_UNSET (-1L) /* max_steps = None */

/* ---- keyword arguments (optimizer_kwargs, loss_kwargs, ...) --------------------------
 * A small dictionary of numbers, booleans, strings and pairs of numbers (betas). Each
 * registry entry lists the keys it accepts; anything else is refused by validation. */
typedef enum snn_kwarg_type {
    SNN_KWARG_NUMBER = 0,
    SNN_KWARG_BOOL = 1,
    SNN_KWARG_STRING = 2,
    SNN_KWARG_PAIR = 3 /* two numbers: [a, b] */
} snn_kwarg_type;

typedef struct snn_kwarg {
    char key[32];
    snn_kwarg_type type;
    double num[2];                      /* NUMBER: num[0]; BOOL: 0/1; PAIR: both */
    char str[SNN_VISION_PATH_MAX];      /* STRING */
} snn_kwarg;

typedef struct snn_kwargs {
    int n;
    snn_kwarg items[SNN_VISION_KWARGS_MAX];
} snn_kwargs;

/* Set (replace or append) a value. SNN_E_INVALID when full or the key is too long. */
snn_status snn_kwargs_set_number(snn_kwargs *k, const char *key, double v);
snn_status snn_kwargs_set_bool(snn_kwargs *k, const char *key, int v);
snn_status snn_kwargs_set_string(snn_kwargs *k, const char *key, const char *v);
snn_status snn_kwargs_set_pair(snn_kwargs *k, const char *key, double a, double b);
/* The entry of key, or NULL. */
const snn_kwarg *snn_kwargs_get(const snn_kwargs *k, const char *key);
/* Order-independent equality. */
int snn_kwargs_equal(const snn_kwargs *a, const snn_kwargs *b);

/* ---- ModelConfig -------------------------------------------------------------------- */
typedef enum snn_vision_model_kind {
    SNN_VISION_MODEL_NONE = 0,
    SNN_VISION_MODEL_FCSNN = 1,      /* "snn.vision.FCSNNConfig" */
    SNN_VISION_MODEL_CONVSNN = 2,    /* "snn.vision.ConvSNNConfig" */
    SNN_VISION_MODEL_SPIKFORMER = 3  /* "snn.vision.SpikformerConfig" */
} snn_vision_model_kind;

typedef struct snn_vision_model_config {
    snn_vision_model_kind kind;
    int time_steps;   /* default 4, > 0 */
    int num_classes;  /* default 10 (fcsnn, convsnn) / 1000 (spikformer), > 0 */
    char step_mode;   /* 'm' (default) or 's'; spikformer requires 'm' */
    /* Architecture (the zoo's options; their `classes` field is ignored: num_classes rules). */
    snn_fcsnn_opts fcsnn;           /* in_features 784, hidden 512, depth 2, tau 2 (> 1) */
    snn_convsnn_opts convsnn;       /* 1x28x28 (sides multiples of 4), channels 128 */
    snn_spikformer_opts spikformer; /* 3x224 (multiple of 16), embed 384, 12 heads, depth 6, mlp 4 */
} snn_vision_model_config;

/* The defaults of a kind (SNN_VISION_MODEL_NONE gives an all-zero config). */
snn_vision_model_config snn_vision_model_config_default(snn_vision_model_kind kind);
snn_status snn_vision_model_config_validate(const snn_vision_model_config *m);
int snn_vision_model_config_equal(const snn_vision_model_config *a, const snn_vision_model_config *b);
/* The registry tag ("snn.vision.ConvSNNConfig") and the zoo's model name ("convsnn"). */
const char *snn_vision_model_target(snn_vision_model_kind kind);
const char *snn_vision_model_name(snn_vision_model_kind kind);
/* The vision config of a zoo model from its snn_model_config_json() text (the CLI builds
 * models from flags; this turns one into the config a TP/PP stage is built from); T is the
 * time_steps to record. step_mode is 'm'. */
snn_status snn_vision_model_config_from_zoo(const char *zoo_json, int time_steps, snn_vision_model_config *out);
/* Build the dense (canonical, unsharded) model. */
snn_status snn_vision_model_build(const snn_vision_model_config *m, uint64_t seed, snn_model **out);

typedef enum snn_input_layout { SNN_LAYOUT_NCHW = 0, SNN_LAYOUT_NTCHW = 1 } snn_input_layout;
typedef enum snn_data_parallel {
    SNN_DP_DDP = 0,        /* training only */
    SNN_DP_FSDP2 = 1,
    SNN_DP_REPLICATE = 2   /* evaluation/prediction only */
} snn_data_parallel;
typedef enum snn_exec_mode { SNN_EXEC_EAGER = 0, SNN_EXEC_COMPILE = 1, SNN_EXEC_CUDA_GRAPH = 2 } snn_exec_mode;
typedef enum snn_memopt_budget {
    SNN_MEMOPT_SPEED = 0, SNN_MEMOPT_BALANCED = 1, SNN_MEMOPT_MEMORY = 2
} snn_memopt_budget;

/* ---- TrainingConfig ----------------------------------------------------------------- */
typedef struct snn_vision_training_config {
    snn_vision_model_config model;                  /* required */
    char dataset_builder[SNN_VISION_NAME_MAX];      /* required, dotted registry name */
    snn_kwargs dataset_kwargs;                      /* {} */
    snn_input_layout input_layout;                  /* NCHW */
    int epochs;                                     /* 1, > 0 */
    int batch_size;                                 /* 32, > 0, per DP rank, % microbatches */
    int workers;                                    /* 4, >= 0 */
    char optimizer[SNN_VISION_NAME_MAX];            /* "torch.optim.AdamW" */
    snn_kwargs optimizer_kwargs;                    /* {"lr": 1e-3, "weight_decay": 0.0} */
    char loss_function[SNN_VISION_NAME_MAX];        /* "torch.nn.functional.cross_entropy" */
    snn_kwargs loss_kwargs;                         /* {} */
    double mixup_alpha;                             /* 0, >= 0 */
    char scheduler[SNN_VISION_NAME_MAX];            /* "" = none */
    snn_kwargs scheduler_kwargs;                    /* {} */
    int tensor_parallel_size;                       /* 1, > 0 */
    int pipeline_parallel_size;                     /* 1, > 0 */
    int pipeline_microbatches;                      /* 1, > 0 */
    snn_data_parallel data_parallel;                /* ddp (ddp | fsdp2) */
    snn_precision_config precision;                 /* bf16 */
    int memopt_level;                               /* 0, 0..4, non-zero needs step mode m */
    int memopt_compress_inputs;                     /* 1 */
    snn_memopt_budget memopt_checkpoint_budget;     /* memory */
    snn_exec_mode execution_mode;                   /* eager */
    int cuda_graph_warmup_steps;                    /* 3, > 0 */
    long max_steps;                                 /* SNN_VISION_UNSET; > 0 when set */
    long timing_warmup_steps;                       /* 0, >= 0, < max_steps when set */
    char checkpoint_dir[SNN_VISION_PATH_MAX];       /* "" = none */
    long checkpoint_interval;                       /* 0, >= 0; > 0 needs checkpoint_dir */
    char resume[SNN_VISION_PATH_MAX];               /* "" = none */
    int64_t seed;                                   /* 1234 */
} snn_vision_training_config;

/* ---- PredictionConfig / EvaluationConfig -------------------------------------------- */
typedef struct snn_vision_prediction_config {
    char artifact[SNN_VISION_PATH_MAX];             /* required */
    char dataset_builder[SNN_VISION_NAME_MAX];      /* required, dotted registry name */
    snn_kwargs dataset_kwargs;
    snn_input_layout input_layout;                  /* NCHW */
    int batch_size;                                 /* 32, > 0, % microbatches */
    int workers;                                    /* 4, >= 0 */
    int tensor_parallel_size, pipeline_parallel_size, pipeline_microbatches; /* 1, 1, 1 */
    snn_data_parallel data_parallel;                /* replicate (replicate | fsdp2) */
    snn_precision_config precision;                 /* bf16 */
    snn_exec_mode execution_mode;                   /* eager (eager | compile) */
    int64_t seed;                                   /* 1234 */
} snn_vision_prediction_config;

typedef struct snn_vision_evaluation_config {
    snn_vision_prediction_config base;
    char loss_function[SNN_VISION_NAME_MAX];        /* "torch.nn.functional.cross_entropy" */
    snn_kwargs loss_kwargs;                         /* {} */
    int timing_warmup_batches;                      /* 0, >= 0 */
} snn_vision_evaluation_config;

/* Defaults (required fields empty: validation refuses them until set). */
snn_vision_training_config snn_vision_training_config_default(void);
snn_vision_prediction_config snn_vision_prediction_config_default(void);
snn_vision_evaluation_config snn_vision_evaluation_config_default(void);

/* Every rule of the reference's field table and cross-field rules, in its order; the
 * message names the field (and the rule). The embedded precision is checked by
 * snn_precision_config_validate. */
snn_status snn_vision_training_config_validate(const snn_vision_training_config *c);
snn_status snn_vision_prediction_config_validate(const snn_vision_prediction_config *c);
snn_status snn_vision_evaluation_config_validate(const snn_vision_evaluation_config *c);

int snn_vision_training_config_equal(const snn_vision_training_config *a, const snn_vision_training_config *b);
int snn_vision_prediction_config_equal(const snn_vision_prediction_config *a,
                                       const snn_vision_prediction_config *b);
int snn_vision_evaluation_config_equal(const snn_vision_evaluation_config *a,
                                       const snn_vision_evaluation_config *b);

/* What this build can execute beyond what is valid: the C engine has no FSDP2, memory
 * optimisation, JIT compilation, CUDA-graph execution mode or mixup; a valid config that
 * asks for one is SNN_E_UNSUPPORTED, naming the field. */
snn_status snn_vision_training_config_check_runnable(const snn_vision_training_config *c);
snn_status snn_vision_prediction_config_check_runnable(const snn_vision_prediction_config *c);

/* ---- JSON --------------------------------------------------------------------------
 * to_json: validate, then a newly malloc'd pretty-printed JSON text with sorted keys
 * (free() it). from_json: parse, check the tag and fields, validate. A "precision" value
 * may be a legacy string "fp32" | "fp16" | "bf16" (upgraded to a PrecisionConfig with that
 * mode); any other string is an error. */
snn_status snn_vision_training_config_to_json(const snn_vision_training_config *c, char **out);
snn_status snn_vision_training_config_from_json(const char *json, snn_vision_training_config *out);
snn_status snn_vision_prediction_config_to_json(const snn_vision_prediction_config *c, char **out);
snn_status snn_vision_prediction_config_from_json(const char *json, snn_vision_prediction_config *out);
snn_status snn_vision_evaluation_config_to_json(const snn_vision_evaluation_config *c, char **out);
snn_status snn_vision_evaluation_config_from_json(const char *json, snn_vision_evaluation_config *out);
snn_status snn_vision_model_config_to_json(const snn_vision_model_config *m, char **out);
snn_status snn_vision_model_config_from_json(const char *json, snn_vision_model_config *out);
/* The checkpoint recipe: the training config without epochs, max_steps, checkpoint_dir,
 * checkpoint_interval and resume, pretty-printed with sorted keys (config.json). */
snn_status snn_vision_training_recipe_json(const snn_vision_training_config *c, char **out);
/* 1 when a checkpoint's recipe text (possibly with a legacy precision string) describes
 * the same run as c; 0 otherwise; SNN_E_FORMAT when the text is not a recipe. */
snn_status snn_vision_recipe_matches(const char *recipe_json, const snn_vision_training_config *c, int *match);

/* ---- the closed registries ---------------------------------------------------------- */
typedef enum snn_vision_registry {
    SNN_REG_DATASET = 0,   /* snn.data.fashion_mnist | snn.data.synthetic | snn.data.idx | snn.data.digits_csv */
    SNN_REG_OPTIMIZER = 1, /* torch.optim.SGD | torch.optim.Adam | torch.optim.AdamW */
    SNN_REG_LOSS = 2,      /* torch.nn.functional.cross_entropy | torch.nn.functional.mse_loss */
    SNN_REG_SCHEDULER = 3  /* torch.optim.lr_scheduler.CosineAnnealingLR | .StepLR | .ConstantLR */
} snn_vision_registry;
/* 1 when name is an entry of the registry. */
int snn_vision_registry_has(snn_vision_registry reg, const char *name);
/* Check that kwargs only uses keys (and value types) the entry accepts. */
snn_status snn_vision_registry_check_kwargs(snn_vision_registry reg, const char *name, const char *field,
                                            const snn_kwargs *k);

/* The topology-independent inference artifact (docs/checkpoint-format.md). */
/* One process: merge the shards of a step directory into the artifact out_path (which must
 * not exist; written atomically). Replicated tensors must be bit-identical on every TP rank;
 * every canonical tensor must be covered exactly (each TP part once). */
snn_status snn_vision_export_artifact(const char *step_dir, const char *out_path);
/* Open and check an artifact: schema 1, a valid model config, a source object, and exactly
 * the canonical tensor set at dense shapes. mc and src_tp/src_pp (may be NULL) receive its
 * model config and source topology. *out: the open file (close it). */
snn_status snn_vision_artifact_open(const char *path, snn_vision_model_config *mc, int *src_pp, int *src_tp,
                                    snn_ckpt **out);

#ifdef __cplusplus
}
#endif
#endif
