/* Language-model configs: every validation rule refused with its fields named (each case
 * breaks exactly one rule of an otherwise valid config, so it fails if that check is
 * removed), the valid recipes of the reference, topology, the LR schedule's properties,
 * JSON round trips of random configs and the JSON errors (closed type registry). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/error.h"
#include "snn/lm_config.h"

static snn_lm_training_config base(void) {
    snn_lm_training_config c = snn_lm_training_config_default(SNN_LM_MODEL_SPIKELM);
    snn_lm_transformer_config *t = &c.model.transformer;
    t->num_layers = 2; t->hidden_size = 64; t->num_attention_heads = 4;
    t->calculate_per_token_loss = 1; t->bf16 = 1; t->params_dtype = SNN_LM_DTYPE_BFLOAT16;
    c.optimizer.lr = 3e-4; c.optimizer.min_lr = 3e-5; c.optimizer.bf16 = 1;
    c.optimizer.params_dtype = SNN_LM_DTYPE_BFLOAT16; c.optimizer.use_distributed_optimizer = 1;
    c.model.vocab_size = 257; c.model.max_sequence_length = 64; c.model.time_steps = 4;
    strcpy(c.dataset_kwargs.path, "data");
    c.sequence_length = 32; c.micro_batch_size = 2; c.global_batch_size = 8; c.train_steps = 100;
    return c;
}

static int expect(snn_status st, const char *a, const char *b, const char *label) {
    const char *m = snn_last_error();
    if (st != SNN_E_INVALID) {
        fprintf(stderr, "  %s: status %d (want invalid), message: %s\n", label, (int)st, st ? m : "");
        return 0;
    }
    if ((a && !strstr(m, a)) || (b && !strstr(m, b))) {
        fprintf(stderr, "  %s: message lacks \"%s\"/\"%s\": %s\n", label, a, b ? b : "", m);
        return 0;
    }
    return 1;
}

typedef struct { const char *label; void (*mut)(snn_lm_training_config *); const char *a, *b; } tcase;
#define M(name, code) static void name(snn_lm_training_config *c) { snn_lm_transformer_config *t = &c->model.transformer; snn_lm_optimizer_config *o = &c->optimizer; (void)t; (void)o; code; }

/* transformer (Megatron Core's own checks) */
M(t_layers, t->num_layers = 0)
M(t_hidden, t->hidden_size = 0)
M(t_heads, t->num_attention_heads = 0)
M(t_ffn_neg, t->ffn_hidden_size = -1)
M(t_too_large, t->hidden_size = INT32_MAX; t->num_attention_heads = 1)
M(t_ffn_large, t->ffn_hidden_size = INT32_MAX / 2 + 2)
M(t_kv_neg, t->kv_channels = -1)
M(t_groups_neg, t->num_query_groups = -1)
M(t_norm, t->normalization = (snn_lm_normalization)5)
M(t_act, t->activation = (snn_lm_activation)7)
M(t_eps, t->layernorm_epsilon = 0)
M(t_std, t->init_method_std = -1)
M(t_bool, t->add_bias_linear = 2)
M(t_fp16_bf16, t->fp16 = 1)
M(t_params_unset, t->params_dtype = SNN_LM_DTYPE_UNSET)
M(t_pipe_bad, t->pipeline_dtype = (snn_lm_dtype)9)
M(t_fp8_bad, t->fp8 = (snn_lm_fp8)9)
M(t_recipe_unset, t->fp8_recipe = SNN_LM_FP8_RECIPE_UNSET)
M(t_fp8_bf16, t->fp8 = SNN_LM_FP8_HYBRID; t->bf16 = 0; t->params_dtype = SNN_LM_DTYPE_FLOAT32; o->bf16 = 0; o->params_dtype = SNN_LM_DTYPE_FLOAT32)
M(t_tp0, t->tensor_model_parallel_size = 0)
M(t_heads_tp, t->tensor_model_parallel_size = 3)
M(t_heads_groups, t->num_query_groups = 3)
M(t_groups_tp, t->num_query_groups = 1; t->tensor_model_parallel_size = 2)
M(t_hidden_heads, t->hidden_size = 66)
M(t_ffn_tp, t->ffn_hidden_size = 130; t->tensor_model_parallel_size = 4)
M(t_layers_pp, t->num_layers = 3; t->pipeline_model_parallel_size = 2; t->pipeline_dtype = SNN_LM_DTYPE_BFLOAT16)
M(t_sp, t->sequence_parallel = 1)
M(t_pp_dtype, t->pipeline_model_parallel_size = 2)
M(t_gran, t->recompute_granularity = (snn_lm_recompute_granularity)5)
M(t_method, t->recompute_method = (snn_lm_recompute_method)5)
M(t_modules, t->recompute_modules = 1u << 10)
M(t_rnl_neg, t->recompute_num_layers = -1)
M(t_full_method, t->recompute_granularity = SNN_LM_RECOMPUTE_FULL; t->recompute_num_layers = 1)
M(t_full_rnl0, t->recompute_granularity = SNN_LM_RECOMPUTE_FULL; t->recompute_method = SNN_LM_RECOMPUTE_METHOD_UNIFORM)
M(t_full_rnl_big, t->recompute_granularity = SNN_LM_RECOMPUTE_FULL; t->recompute_method = SNN_LM_RECOMPUTE_METHOD_BLOCK; t->recompute_num_layers = 3)
M(t_method_nofull, t->recompute_method = SNN_LM_RECOMPUTE_METHOD_UNIFORM)
M(t_sel_rnl, t->recompute_granularity = SNN_LM_RECOMPUTE_SELECTIVE; t->recompute_num_layers = 1)
M(t_sel_empty, t->recompute_granularity = SNN_LM_RECOMPUTE_SELECTIVE; t->recompute_modules = 0)
M(t_rnl_nofull, t->recompute_num_layers = 1)
/* optimizer */
M(o_opt, strcpy(o->optimizer, "sgd"))
M(o_lr, o->lr = -1)
M(o_minlr, o->min_lr = INFINITY)
M(o_wd, o->weight_decay = -0.1)
M(o_b1, o->adam_beta1 = 1.0)
M(o_b2, o->adam_beta2 = -0.1)
M(o_eps, o->adam_eps = 0)
M(o_clip, o->clip_grad = -1)
M(o_bool, o->use_distributed_optimizer = 2)
M(o_fp16_bf16, o->fp16 = 1)
M(o_params, o->params_dtype = SNN_LM_DTYPE_UNSET)
M(o_recipe, o->fp8_recipe = (snn_lm_fp8_recipe)9)
M(o_ls, o->loss_scale = 0)
M(o_ils, o->initial_loss_scale = 0)
M(o_mls, o->min_loss_scale = 1e10; o->initial_loss_scale = 2.0)
M(o_window, o->loss_scale_window = 0)
M(o_hyst, o->hysteresis = 0)
/* model */
M(m_type, c->model.type = (snn_lm_model_type)5)
M(m_vocab, c->model.vocab_size = 0)
M(m_maxlen, c->model.max_sequence_length = 0)
M(m_T, c->model.time_steps = 0)
M(m_tie, c->model.share_embeddings_and_output_weights = 2)
M(m_pos, c->model.position_embedding_type = (snn_lm_position_embedding)5)
M(m_red, c->model.temporal_output_reduction = (snn_lm_temporal_reduction)5)
M(m_rope_odd, t->kv_channels = 15)
M(m_spike_norm, t->normalization = SNN_LM_NORM_RMSNORM)
M(m_decay, c->model.spike_decay = 1.5)
M(m_amp, c->model.spike_amplitude = 0)
M(m_gpt_T, c->model.type = SNN_LM_MODEL_GPT)
/* training rule 1 */
M(r_builder, strcpy(c->dataset_builder, "my.module.build"))
M(r_path, c->dataset_kwargs.path[0] = 0)
M(r_split, strcpy(c->dataset_kwargs.split, "dev"))
M(r_seq, c->sequence_length = 0)
M(r_micro, c->micro_batch_size = 0)
M(r_global, c->global_batch_size = 0)
M(r_steps, c->train_steps = 0)
M(r_log, c->log_interval = 0)
M(r_div, c->global_batch_size = 15)
M(r_timing, c->timing_warmup_steps = 100)
M(r_timing_neg, c->timing_warmup_steps = -1)
M(r_seq_max, c->sequence_length = 65)
M(r_eval, c->eval_interval = 10)
M(r_eval_neg, c->eval_interval = -1; c->eval_steps = -1)
M(r_ckpt_neg, c->checkpoint_interval = -1)
M(r_ckpt_dir, c->checkpoint_interval = 10)
M(r_warm_neg, c->lr_warmup_steps = -1)
M(r_decay_neg, c->lr_decay_steps = -5)
M(r_decay_gt, c->lr_warmup_steps = 100)
M(r_style, c->lr_decay_style = (snn_lm_lr_decay_style)9)
M(r_memopt_bool, c->use_snn_memopt = 2)
M(r_overflow, c->train_steps = (int64_t)1 << 61)
/* rule 2 */
M(r_cp, t->context_parallel_size = 2; c->sequence_length = 30)
M(r_expert, t->expert_model_parallel_size = 2)
/* rule 3 */
M(r_memopt_full, c->use_snn_memopt = 1; t->recompute_granularity = SNN_LM_RECOMPUTE_FULL; t->recompute_method = SNN_LM_RECOMPUTE_METHOD_UNIFORM; t->recompute_num_layers = 1)
M(r_memopt_sel, c->use_snn_memopt = 1; t->recompute_granularity = SNN_LM_RECOMPUTE_SELECTIVE; t->recompute_modules |= SNN_LM_RECOMPUTE_MLP)
/* rule 4 */
M(r_pertoken, t->calculate_per_token_loss = 0)
M(r_distopt, o->use_distributed_optimizer = 0)
/* rule 5 */
M(r_fp16_eq, t->bf16 = 0; t->fp16 = 1; t->params_dtype = SNN_LM_DTYPE_FLOAT16)
M(r_bf16_eq, t->bf16 = 0; t->params_dtype = SNN_LM_DTYPE_FLOAT32)
M(r_params_eq, o->params_dtype = SNN_LM_DTYPE_FLOAT32)
M(r_params_bf16, t->params_dtype = o->params_dtype = SNN_LM_DTYPE_FLOAT32)
M(r_params_fp16, t->bf16 = o->bf16 = 0; t->fp16 = o->fp16 = 1)
M(r_params_fp32, t->bf16 = o->bf16 = 0)
M(r_pp_dtype, t->pipeline_model_parallel_size = 2; t->pipeline_dtype = SNN_LM_DTYPE_FLOAT32)
M(r_recipe_nofp8, o->fp8_recipe = SNN_LM_FP8_RECIPE_DELAYED)
M(r_recipe_eq, t->fp8 = SNN_LM_FP8_HYBRID; o->fp8_recipe = SNN_LM_FP8_RECIPE_MXFP8)
M(r_lr_req, o->lr = NAN)
M(r_minlr_req, o->min_lr = NAN)
M(r_minlr_gt, o->min_lr = 1e-3)

static const tcase cases[] = {
    {"t_layers", t_layers, "transformer.num_layers", NULL},
    {"t_hidden", t_hidden, "transformer.hidden_size", NULL},
    {"t_heads", t_heads, "transformer.num_attention_heads", NULL},
    {"t_ffn_neg", t_ffn_neg, "transformer.ffn_hidden_size", NULL},
    {"t_too_large", t_too_large, "too large", "hidden_size"},
    {"t_ffn_large", t_ffn_large, "too large", "ffn_hidden_size"},
    {"t_kv_neg", t_kv_neg, "transformer.kv_channels", NULL},
    {"t_groups_neg", t_groups_neg, "transformer.num_query_groups", NULL},
    {"t_norm", t_norm, "transformer.normalization", "LayerNorm or RMSNorm"},
    {"t_act", t_act, "transformer.activation", NULL},
    {"t_eps", t_eps, "transformer.layernorm_epsilon", NULL},
    {"t_std", t_std, "transformer.init_method_std", NULL},
    {"t_bool", t_bool, "add_bias_linear", NULL},
    {"t_fp16_bf16", t_fp16_bf16, "transformer.fp16 and transformer.bf16", "cannot both"},
    {"t_params_unset", t_params_unset, "transformer.params_dtype must be", NULL},
    {"t_pipe_bad", t_pipe_bad, "transformer.pipeline_dtype", NULL},
    {"t_fp8_bad", t_fp8_bad, "transformer.fp8", NULL},
    {"t_recipe_unset", t_recipe_unset, "transformer.fp8_recipe", NULL},
    {"t_fp8_bf16", t_fp8_bf16, "transformer.fp8='hybrid'", "transformer.bf16"},
    {"t_tp0", t_tp0, "tensor_model_parallel_size", ">= 1"},
    {"t_heads_tp", t_heads_tp, "num_attention_heads (4)", "tensor_model_parallel_size (3)"},
    {"t_heads_groups", t_heads_groups, "num_attention_heads (4)", "num_query_groups (3)"},
    {"t_groups_tp", t_groups_tp, "num_query_groups (1)", "tensor_model_parallel_size (2)"},
    {"t_hidden_heads", t_hidden_heads, "hidden_size (66)", "num_attention_heads (4)"},
    {"t_ffn_tp", t_ffn_tp, "ffn_hidden_size (130)", "tensor_model_parallel_size (4)"},
    {"t_layers_pp", t_layers_pp, "num_layers (3)", "pipeline_model_parallel_size (2)"},
    {"t_sp", t_sp, "sequence_parallel", "tensor_model_parallel_size > 1"},
    {"t_pp_dtype", t_pp_dtype, "pipeline_dtype must be given", "pipeline_model_parallel_size"},
    {"t_gran", t_gran, "recompute_granularity", NULL},
    {"t_method", t_method, "recompute_method must be None", NULL},
    {"t_modules", t_modules, "recompute_modules", "unknown"},
    {"t_rnl_neg", t_rnl_neg, "recompute_num_layers must be None or > 0", NULL},
    {"t_full_method", t_full_method, "recompute_granularity='full'", "recompute_method"},
    {"t_full_rnl0", t_full_rnl0, "recompute_num_layers (0)", "between 1"},
    {"t_full_rnl_big", t_full_rnl_big, "recompute_num_layers (3)", "between 1"},
    {"t_method_nofull", t_method_nofull, "recompute_method='uniform'", "needs recompute_granularity='full'"},
    {"t_sel_rnl", t_sel_rnl, "recompute_num_layers must be None", "selective"},
    {"t_sel_empty", t_sel_empty, "recompute_modules must not be empty", NULL},
    {"t_rnl_nofull", t_rnl_nofull, "recompute_num_layers needs", "full"},
    {"o_opt", o_opt, "optimizer.optimizer", "'sgd'"},
    {"o_lr", o_lr, "optimizer.lr must be None or finite", NULL},
    {"o_minlr", o_minlr, "optimizer.min_lr must be None or finite", NULL},
    {"o_wd", o_wd, "optimizer.weight_decay", NULL},
    {"o_b1", o_b1, "optimizer.adam_beta1", NULL},
    {"o_b2", o_b2, "optimizer.adam_beta2", NULL},
    {"o_eps", o_eps, "optimizer.adam_eps", NULL},
    {"o_clip", o_clip, "optimizer.clip_grad", NULL},
    {"o_bool", o_bool, "use_distributed_optimizer", "0 or 1"},
    {"o_fp16_bf16", o_fp16_bf16, "optimizer.fp16 and optimizer.bf16", NULL},
    {"o_params", o_params, "optimizer.params_dtype must be", NULL},
    {"o_recipe", o_recipe, "optimizer.fp8_recipe must be", NULL},
    {"o_ls", o_ls, "optimizer.loss_scale", NULL},
    {"o_ils", o_ils, "optimizer.initial_loss_scale", NULL},
    {"o_mls", o_mls, "optimizer.min_loss_scale", NULL},
    {"o_window", o_window, "optimizer.loss_scale_window", NULL},
    {"o_hyst", o_hyst, "optimizer.hysteresis", NULL},
    {"m_type", m_type, "model type", NULL},
    {"m_vocab", m_vocab, "model.vocab_size", NULL},
    {"m_maxlen", m_maxlen, "model.max_sequence_length must be in", NULL},
    {"m_T", m_T, "model.time_steps must be > 0", NULL},
    {"m_tie", m_tie, "share_embeddings_and_output_weights", NULL},
    {"m_pos", m_pos, "model.position_embedding_type", NULL},
    {"m_red", m_red, "model.temporal_output_reduction", NULL},
    {"m_rope_odd", m_rope_odd, "rope", "even kv_channels"},
    {"m_spike_norm", m_spike_norm, "SpikeLM requires", "LayerNorm"},
    {"m_decay", m_decay, "model.spike_decay", NULL},
    {"m_amp", m_amp, "model.spike_amplitude", NULL},
    {"m_gpt_T", m_gpt_T, "model.time_steps must be 1", "gpt"},
    {"r_builder", r_builder, "dataset_builder", "not a registered"},
    {"r_path", r_path, "dataset_kwargs.path", NULL},
    {"r_split", r_split, "dataset_kwargs.split", NULL},
    {"r_seq", r_seq, "sequence_length must be > 0", NULL},
    {"r_micro", r_micro, "micro_batch_size must be > 0", NULL},
    {"r_global", r_global, "global_batch_size must be > 0", NULL},
    {"r_steps", r_steps, "train_steps must be > 0", NULL},
    {"r_log", r_log, "log_interval", NULL},
    {"r_div", r_div, "global_batch_size (15)", "divisible by micro_batch_size (2)"},
    {"r_timing", r_timing, "timing_warmup_steps (100)", "train_steps"},
    {"r_timing_neg", r_timing_neg, "timing_warmup_steps (-1)", NULL},
    {"r_seq_max", r_seq_max, "sequence_length (65)", "max_sequence_length (64)"},
    {"r_eval", r_eval, "eval_interval", "both be zero or positive"},
    {"r_eval_neg", r_eval_neg, "eval_steps", "both be zero or positive"},
    {"r_ckpt_neg", r_ckpt_neg, "checkpoint_interval must be >= 0", NULL},
    {"r_ckpt_dir", r_ckpt_dir, "checkpoint_interval", "checkpoint_dir"},
    {"r_warm_neg", r_warm_neg, "lr_warmup_steps", NULL},
    {"r_decay_neg", r_decay_neg, "lr_decay_steps must be None", NULL},
    {"r_decay_gt", r_decay_gt, "lr_decay_steps (100)", "greater than lr_warmup_steps (100)"},
    {"r_style", r_style, "lr_decay_style", NULL},
    {"r_memopt_bool", r_memopt_bool, "use_snn_memopt", NULL},
    {"r_overflow", r_overflow, "too large", "train_steps"},
    {"r_cp", r_cp, "sequence_length (30)", "context_parallel_size"},
    {"r_expert", r_expert, "expert_model_parallel_size", NULL},
    {"r_memopt_full", r_memopt_full, "cannot overlap", "full"},
    {"r_memopt_sel", r_memopt_sel, "cannot overlap", "core_attn"},
    {"r_pertoken", r_pertoken, "calculate_per_token_loss", NULL},
    {"r_distopt", r_distopt, "use_distributed_optimizer", NULL},
    {"r_fp16_eq", r_fp16_eq, "transformer.fp16 (1)", "optimizer.fp16 (0)"},
    {"r_bf16_eq", r_bf16_eq, "transformer.bf16 (0)", "optimizer.bf16 (1)"},
    {"r_params_eq", r_params_eq, "transformer.params_dtype (bfloat16)", "optimizer.params_dtype (float32)"},
    {"r_params_bf16", r_params_bf16, "params_dtype (float32)", "must be bfloat16"},
    {"r_params_fp16", r_params_fp16, "params_dtype (bfloat16)", "must be float16"},
    {"r_params_fp32", r_params_fp32, "params_dtype (bfloat16)", "must be float32"},
    {"r_pp_dtype", r_pp_dtype, "pipeline_dtype (float32)", "params_dtype (bfloat16)"},
    {"r_recipe_nofp8", r_recipe_nofp8, "optimizer.fp8_recipe='delayed'", "transformer.fp8"},
    {"r_recipe_eq", r_recipe_eq, "optimizer.fp8_recipe (mxfp8)", "transformer.fp8_recipe (delayed)"},
    {"r_lr_req", r_lr_req, "optimizer.lr is required", NULL},
    {"r_minlr_req", r_minlr_req, "optimizer.min_lr is required", NULL},
    {"r_minlr_gt", r_minlr_gt, "optimizer.min_lr", "optimizer.lr"},
};

/* valid variants from the reference's guide and recipes */
M(v_guide, t->num_layers = 24; t->hidden_size = 2048; t->num_attention_heads = 16; t->ffn_hidden_size = 8192; t->pipeline_dtype = SNN_LM_DTYPE_BFLOAT16)
M(v_fp16, t->bf16 = o->bf16 = 0; t->fp16 = o->fp16 = 1; t->params_dtype = o->params_dtype = SNN_LM_DTYPE_FLOAT16)
M(v_fp32, t->bf16 = o->bf16 = 0; t->params_dtype = o->params_dtype = SNN_LM_DTYPE_FLOAT32)
M(v_fp8, t->fp8 = SNN_LM_FP8_HYBRID; o->fp8_recipe = SNN_LM_FP8_RECIPE_DELAYED)
M(v_fp8_norecipe, t->fp8 = SNN_LM_FP8_HYBRID; t->fp8_recipe = SNN_LM_FP8_RECIPE_MXFP8)
M(v_pp, t->pipeline_model_parallel_size = 2; t->pipeline_dtype = SNN_LM_DTYPE_BFLOAT16)
M(v_tp_sp, t->tensor_model_parallel_size = 4; t->sequence_parallel = 1)
M(v_gqa, t->num_query_groups = 2; t->tensor_model_parallel_size = 2)
M(v_cp, t->context_parallel_size = 2; c->sequence_length = 32)
M(v_odd_seq, c->model.max_sequence_length = 128; c->sequence_length = 127)
M(v_memopt_sel, c->use_snn_memopt = 1; t->recompute_granularity = SNN_LM_RECOMPUTE_SELECTIVE)
M(v_full, t->recompute_granularity = SNN_LM_RECOMPUTE_FULL; t->recompute_method = SNN_LM_RECOMPUTE_METHOD_BLOCK; t->recompute_num_layers = 2)
M(v_eval, c->eval_interval = 10; c->eval_steps = 2)
M(v_ckpt, c->checkpoint_interval = 10; strcpy(c->checkpoint_dir, "ckpt"))
M(v_gpt, c->model.type = SNN_LM_MODEL_GPT; c->model.time_steps = 1; t->normalization = SNN_LM_NORM_RMSNORM; t->activation = SNN_LM_ACT_SWIGLU)
M(v_warm, c->lr_warmup_steps = 99; c->lr_decay_style = SNN_LM_DECAY_INVERSE_SQUARE_ROOT)
static void (*const valid[])(snn_lm_training_config *) = {v_guide, v_fp16, v_fp32, v_fp8, v_fp8_norecipe, v_pp, v_tp_sp,
    v_gqa, v_cp, v_odd_seq, v_memopt_sel, v_full, v_eval, v_ckpt, v_gpt, v_warm};

static void test_training_rules(void) {
    snn_lm_training_config c = base();
    CHECK_MSG(snn_lm_training_config_validate(&c) == SNN_OK, "%s", snn_last_error());
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        c = base();
        cases[i].mut(&c);
        CHECK_MSG(expect(snn_lm_training_config_validate(&c), cases[i].a, cases[i].b, cases[i].label), "%s",
                  cases[i].label);
    }
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++) {
        c = base();
        valid[i](&c);
        CHECK_MSG(snn_lm_training_config_validate(&c) == SNN_OK, "valid #%zu: %s", i, snn_last_error());
    }
    /* the defaults: lr_decay_steps None -> train_steps; and a default config is incomplete */
    c = base();
    CHECK(c.lr_decay_steps == -1 && snn_lm_training_decay_steps(&c) == 100);
    snn_lm_training_config d = snn_lm_training_config_default(SNN_LM_MODEL_SPIKELM);
    CHECK(d.seed == 1234 && d.log_interval == 10 && d.lr_decay_style == SNN_LM_DECAY_COSINE && !d.use_snn_memopt);
    CHECK(snn_lm_training_config_validate(&d) == SNN_E_INVALID);
    CHECK(d.model.spike_decay == 0.25 && d.model.spike_amplitude == 1.0 &&
          d.model.position_embedding_type == SNN_LM_POS_ROPE && d.model.temporal_output_reduction == SNN_LM_REDUCE_MEAN);
    CHECK(d.optimizer.weight_decay == 0.01 && d.optimizer.adam_beta2 == 0.999 && isnan(d.optimizer.lr));
    CHECK(d.model.transformer.fp8_recipe == SNN_LM_FP8_RECIPE_DELAYED && d.model.transformer.add_bias_linear == 1);
}

typedef struct { const char *label; void (*mut)(snn_lm_evaluation_config *); const char *a, *b; } ecase;
#define ME(name, code) static void name(snn_lm_evaluation_config *e) { code; }
static snn_lm_evaluation_config ebase(void) {
    snn_lm_training_config t = base();
    snn_lm_evaluation_config e = snn_lm_evaluation_config_default(SNN_LM_MODEL_SPIKELM);
    e.model = t.model;
    strcpy(e.checkpoint, "ckpt/step_0000100");
    strcpy(e.dataset_kwargs.path, "data");
    strcpy(e.dataset_kwargs.split, "valid");
    e.sequence_length = 32; e.micro_batch_size = 4;
    return e;
}
ME(e_model, e->model.vocab_size = -3)
ME(e_ckpt, e->checkpoint[0] = 0)
ME(e_builder, strcpy(e->dataset_builder, "x"))
ME(e_seq, e->sequence_length = 0)
ME(e_seq_max, e->sequence_length = 100)
ME(e_micro, e->micro_batch_size = 0)
ME(e_memopt, e->use_snn_memopt = 5)
ME(e_warm, e->timing_warmup_batches = -1)
ME(e_pmb, e->pipeline_microbatches = 0)
ME(e_overflow, e->micro_batch_size = INT32_MAX / 2; e->pipeline_microbatches = 4)
static const ecase ecases[] = {
    {"e_model", e_model, "model.vocab_size", NULL}, {"e_ckpt", e_ckpt, "checkpoint", NULL},
    {"e_builder", e_builder, "dataset_builder", NULL}, {"e_seq", e_seq, "sequence_length must be > 0", NULL},
    {"e_seq_max", e_seq_max, "sequence_length (100)", "max_sequence_length"},
    {"e_micro", e_micro, "micro_batch_size", NULL}, {"e_memopt", e_memopt, "use_snn_memopt", NULL},
    {"e_warm", e_warm, "timing_warmup_batches", NULL}, {"e_pmb", e_pmb, "pipeline_microbatches", NULL},
    {"e_overflow", e_overflow, "too large", "pipeline_microbatches"},
};

typedef struct { const char *label; void (*mut)(snn_lm_generation_config *); const char *a, *b; } gcase;
#define MG(name, code) static void name(snn_lm_generation_config *g) { code; }
static snn_lm_generation_config gbase(void) {
    snn_lm_generation_config g = snn_lm_generation_config_default(SNN_LM_MODEL_SPIKELM);
    g.model = base().model;
    strcpy(g.checkpoint, "ckpt/step_0000100");
    g.max_new_tokens = 16;
    return g;
}
MG(g_model, g->model.time_steps = -1)
MG(g_ckpt, g->checkpoint[0] = 0)
MG(g_new, g->max_new_tokens = 0)
MG(g_new_ctx, g->max_new_tokens = 64)
MG(g_eos_neg, g->eos_token_id = -2)
MG(g_eos_big, g->eos_token_id = 257)
MG(g_cp, g->model.transformer.context_parallel_size = 2)
MG(g_sp, g->model.transformer.tensor_model_parallel_size = 2; g->model.transformer.sequence_parallel = 1)
MG(g_memopt, g->use_snn_memopt = -1)
MG(g_temp, g->temperature = -0.5)
MG(g_temp_inf, g->temperature = INFINITY)
MG(g_top_p0, g->top_p = 0)
MG(g_top_p_big, g->top_p = 1.5)
MG(g_top_k0, g->top_k = 0)
MG(g_top_k_neg, g->top_k = -2)
static const gcase gcases[] = {
    {"g_model", g_model, "model.time_steps", NULL}, {"g_ckpt", g_ckpt, "checkpoint", NULL},
    {"g_new", g_new, "max_new_tokens must be > 0", NULL}, {"g_new_ctx", g_new_ctx, "max_new_tokens (64)", "max_sequence_length"},
    {"g_eos_neg", g_eos_neg, "eos_token_id (-2)", NULL}, {"g_eos_big", g_eos_big, "eos_token_id (257)", "vocab_size=257"},
    {"g_cp", g_cp, "context_parallel_size 1", NULL}, {"g_sp", g_sp, "sequence_parallel off", NULL},
    {"g_memopt", g_memopt, "use_snn_memopt", NULL}, {"g_temp", g_temp, "temperature", NULL},
    {"g_temp_inf", g_temp_inf, "temperature", NULL}, {"g_top_p0", g_top_p0, "top_p", NULL},
    {"g_top_p_big", g_top_p_big, "top_p", NULL}, {"g_top_k0", g_top_k0, "top_k", NULL},
    {"g_top_k_neg", g_top_k_neg, "top_k", NULL},
};

static void test_eval_gen_rules(void) {
    snn_lm_evaluation_config e = ebase();
    CHECK_MSG(snn_lm_evaluation_config_validate(&e) == SNN_OK, "%s", snn_last_error());
    for (size_t i = 0; i < sizeof ecases / sizeof *ecases; i++) {
        e = ebase();
        ecases[i].mut(&e);
        CHECK_MSG(expect(snn_lm_evaluation_config_validate(&e), ecases[i].a, ecases[i].b, ecases[i].label), "%s", ecases[i].label);
    }
    snn_lm_generation_config g = gbase();
    CHECK_MSG(snn_lm_generation_config_validate(&g) == SNN_OK, "%s", snn_last_error());
    g.eos_token_id = 256; g.temperature = 0.8; g.top_p = 0.9; g.top_k = 40;
    CHECK_MSG(snn_lm_generation_config_validate(&g) == SNN_OK, "%s", snn_last_error());
    for (size_t i = 0; i < sizeof gcases / sizeof *gcases; i++) {
        g = gbase();
        gcases[i].mut(&g);
        CHECK_MSG(expect(snn_lm_generation_config_validate(&g), gcases[i].a, gcases[i].b, gcases[i].label), "%s", gcases[i].label);
    }
}

static void test_topology(void) {
    /* NULL records are refused by every validator */
    CHECK(expect(snn_lm_transformer_config_validate(NULL), "TransformerConfig is NULL", NULL, "null t"));
    CHECK(expect(snn_lm_optimizer_config_validate(NULL), "OptimizerConfig is NULL", NULL, "null o"));
    CHECK(expect(snn_lm_model_config_validate(NULL), "ModelConfig is NULL", NULL, "null m"));
    CHECK(expect(snn_lm_training_config_validate(NULL), "TrainingConfig is NULL", NULL, "null r"));
    CHECK(expect(snn_lm_evaluation_config_validate(NULL), "EvaluationConfig is NULL", NULL, "null e"));
    CHECK(expect(snn_lm_generation_config_validate(NULL), "GenerationConfig is NULL", NULL, "null g"));
    CHECK(expect(snn_lm_training_topology(NULL, 1, NULL, NULL), "TrainingConfig is NULL", NULL, "null topo"));
    snn_lm_training_config c = base();
    int dp = -7;
    int64_t nmb = -7;
    CHECK(snn_lm_training_topology(&c, 4, &dp, &nmb) == SNN_OK && dp == 4 && nmb == 1);
    CHECK(snn_lm_training_topology(&c, 2, &dp, &nmb) == SNN_OK && dp == 2 && nmb == 2);
    CHECK(expect(snn_lm_training_topology(&c, 3, &dp, &nmb), "micro_batch_size*data_parallel_size", NULL, "dp3"));
    c.model.transformer.tensor_model_parallel_size = 2;
    CHECK(expect(snn_lm_training_topology(&c, 3, &dp, &nmb), "world size (3)", "tensor_model_parallel_size", "tp2w3"));
    CHECK(snn_lm_training_topology(&c, 8, &dp, &nmb) == SNN_OK && dp == 4 && nmb == 1);
    CHECK(expect(snn_lm_training_topology(&c, 0, &dp, &nmb), "world size", NULL, "w0"));
}

/* The schedule's defining properties (Megatron Core's formulas), not its code. */
static void test_lr(void) {
    snn_lm_training_config c = base();
    c.lr_warmup_steps = 10; c.train_steps = 110; /* warm-up 80 samples, decay 880 */
    double lr = c.optimizer.lr, mn = c.optimizer.min_lr;
    CHECK(snn_lm_lr_at(&c, 0) == 0.0);
    CHECK(fabs(snn_lm_lr_at(&c, 40) - lr / 2) < 1e-15);
    CHECK(fabs(snn_lm_lr_at(&c, 80) - lr) < 1e-15);
    CHECK(fabs(snn_lm_lr_at(&c, 80 + 400) - (lr + mn) / 2) < 1e-12);
    CHECK(fabs(snn_lm_lr_at(&c, 880) - mn) < 1e-15);
    CHECK(snn_lm_lr_at(&c, 100000) == mn);
    double prev = 1;
    int mono = 1;
    for (int64_t s = 80; s <= 880; s += 8) { double v = snn_lm_lr_at(&c, s); mono &= v <= prev + 1e-18; prev = v; }
    CHECK(mono);
    c.lr_decay_style = SNN_LM_DECAY_LINEAR;
    CHECK(fabs(snn_lm_lr_at(&c, 80 + 200) - (mn + 0.75 * (lr - mn))) < 1e-12);
    c.lr_decay_style = SNN_LM_DECAY_CONSTANT;
    CHECK(snn_lm_lr_at(&c, 500) == lr && snn_lm_lr_at(&c, 100000) == lr);
    c.lr_decay_style = SNN_LM_DECAY_INVERSE_SQUARE_ROOT;
    CHECK(fabs(snn_lm_lr_at(&c, 320) - lr / 2) < 1e-15); /* 4x the warm-up samples */
    c.lr_warmup_steps = 0;
    c.lr_decay_style = SNN_LM_DECAY_COSINE;
    CHECK(snn_lm_lr_at(&c, 0) == lr);
    c.optimizer.lr = NAN;
    CHECK(isnan(snn_lm_lr_at(&c, 5)));
}

static uint64_t rs;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static double rnd01(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static snn_lm_training_config random_valid(void) {
    for (;;) {
        snn_lm_training_config c = base();
        snn_lm_transformer_config *t = &c.model.transformer;
        c.model.type = (snn_lm_model_type)(rnd() % 2);
        c.model.time_steps = c.model.type == SNN_LM_MODEL_GPT ? 1 : 1 + (int)(rnd() % 8);
        t->num_layers = 1 + (int)(rnd() % 12);
        t->num_attention_heads = 1 << (rnd() % 4);
        t->hidden_size = t->num_attention_heads * 2 * (1 + (int)(rnd() % 16));
        t->ffn_hidden_size = rnd() % 2 ? 0 : 8 * (1 + (int)(rnd() % 64));
        t->layernorm_epsilon = rnd01() * 1e-3 + 1e-9;
        t->init_method_std = rnd01() * 0.1 + 1e-6;
        t->add_bias_linear = (int)(rnd() % 2);
        t->add_qkv_bias = (int)(rnd() % 2);
        t->activation = (snn_lm_activation)(rnd() % 2);
        if (c.model.type == SNN_LM_MODEL_GPT) t->normalization = (snn_lm_normalization)(rnd() % 2);
        int prec = (int)(rnd() % 4);
        t->fp16 = c.optimizer.fp16 = prec == 1;
        t->bf16 = c.optimizer.bf16 = prec >= 2;
        t->params_dtype = c.optimizer.params_dtype =
            prec == 0 ? SNN_LM_DTYPE_FLOAT32 : prec == 1 ? SNN_LM_DTYPE_FLOAT16 : SNN_LM_DTYPE_BFLOAT16;
        if (prec == 3) {
            t->fp8 = (snn_lm_fp8)(1 + rnd() % 2);
            t->fp8_recipe = (snn_lm_fp8_recipe)(1 + rnd() % 4);
            if (rnd() % 2) c.optimizer.fp8_recipe = t->fp8_recipe;
        }
        if (rnd() % 2) t->pipeline_dtype = t->params_dtype;
        if (rnd() % 3 == 0) { t->recompute_granularity = SNN_LM_RECOMPUTE_SELECTIVE; t->recompute_modules = 1 + (unsigned)(rnd() % 127); }
        c.model.vocab_size = 2 + (int64_t)(rnd() % 100000);
        c.model.max_sequence_length = 32 + (int64_t)(rnd() % 4096);
        c.model.share_embeddings_and_output_weights = (int)(rnd() % 2);
        c.model.position_embedding_type = (snn_lm_position_embedding)(rnd() % 2);
        c.model.temporal_output_reduction = (snn_lm_temporal_reduction)(rnd() % 2);
        if (c.model.type == SNN_LM_MODEL_SPIKELM) { /* a GPTConfig has no spike fields */
            c.model.spike_decay = rnd01();
            c.model.spike_amplitude = 0.01 + 4 * rnd01();
        }
        c.optimizer.lr = rnd01() * 1e-2 + 1e-6;
        c.optimizer.min_lr = c.optimizer.lr * rnd01();
        c.optimizer.weight_decay = rnd01();
        c.optimizer.adam_beta2 = 0.9 + 0.0999 * rnd01();
        c.optimizer.clip_grad = rnd() % 2 ? 0.0 : rnd01() * 5;
        if (rnd() % 2) c.optimizer.loss_scale = 1024.0;
        c.sequence_length = 1 + (int64_t)(rnd() % (uint64_t)c.model.max_sequence_length);
        c.micro_batch_size = 1 + (int64_t)(rnd() % 8);
        c.global_batch_size = c.micro_batch_size * (1 + (int64_t)(rnd() % 16));
        c.train_steps = 1 + (int64_t)(rnd() % 100000);
        c.lr_warmup_steps = (int64_t)(rnd() % (uint64_t)c.train_steps);
        if (rnd() % 2) c.lr_decay_steps = c.lr_warmup_steps + 1 + (int64_t)(rnd() % 1000);
        c.lr_decay_style = (snn_lm_lr_decay_style)(rnd() % 4);
        if (rnd() % 2) { strcpy(c.checkpoint_dir, "runs/ck\"pt \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"); c.checkpoint_interval = 1 + (int64_t)(rnd() % 50); }
        if (rnd() % 2) strcpy(c.resume, "runs/ckpt/step_0000010");
        if (rnd() % 2) { c.eval_interval = 1 + (int64_t)(rnd() % 9); c.eval_steps = 1 + (int64_t)(rnd() % 9); }
        c.seed = rnd() >> 12;
        c.use_snn_memopt = t->recompute_granularity == SNN_LM_RECOMPUTE_SELECTIVE ? t->recompute_modules == 1 : (int)(rnd() % 2);
        if (snn_lm_training_config_validate(&c) == SNN_OK) return c;
    }
}

static void test_json_round_trip(void) {
    int ok = 1, same = 1;
    for (int i = 0; i < 300; i++) {
        snn_lm_training_config c = random_valid(), back;
        memset(&back, 0xA5, sizeof back); /* poisoned */
        char *j = NULL, *j2 = NULL;
        ok &= snn_lm_training_config_to_json(&c, &j) == SNN_OK;
        if (!j) break;
        snn_status st = snn_lm_training_config_from_json(j, &back);
        if (st != SNN_OK) { fprintf(stderr, "  round trip: %s\n  %s\n", snn_last_error(), j); ok = 0; free(j); break; }
        ok &= snn_lm_training_config_to_json(&back, &j2) == SNN_OK;
        same &= j2 && strcmp(j, j2) == 0;
        if (memcmp(&c, &back, sizeof c) != 0) {
            same = 0;
            const unsigned char *x = (const void *)&c, *y = (const void *)&back;
            for (size_t k = 0; k < sizeof c; k++)
                if (x[k] != y[k]) { fprintf(stderr, "  round trip differs at byte %zu\n", k); break; }
        }
        free(j); free(j2);
    }
    CHECK(ok);
    CHECK(same);
    /* the other records */
    snn_lm_evaluation_config e = ebase(), e2;
    char *j = NULL;
    CHECK(snn_lm_evaluation_config_to_json(&e, &j) == SNN_OK);
    memset(&e2, 0x5A, sizeof e2);
    CHECK(j && snn_lm_evaluation_config_from_json(j, &e2) == SNN_OK && memcmp(&e, &e2, sizeof e) == 0);
    free(j);
    snn_lm_generation_config g = gbase(), g2;
    g.eos_token_id = 256; g.top_k = 40; g.top_p = 0.95; g.temperature = 0.7;
    CHECK(snn_lm_generation_config_to_json(&g, &j) == SNN_OK);
    memset(&g2, 0x5A, sizeof g2);
    CHECK(j && snn_lm_generation_config_from_json(j, &g2) == SNN_OK && memcmp(&g, &g2, sizeof g) == 0);
    free(j);
    snn_lm_model_config m = base().model, m2;
    CHECK(snn_lm_model_config_to_json(&m, &j) == SNN_OK);
    CHECK(j && strstr(j, "\"_target_\":\"snn.lm.SpikeLMConfig\"") && strstr(j, "\"spike_decay\":0.25"));
    CHECK(j && snn_lm_model_config_from_json(j, &m2) == SNN_OK && memcmp(&m, &m2, sizeof m) == 0);
    free(j);
    snn_lm_transformer_config t = m.transformer, t2;
    CHECK(snn_lm_transformer_config_to_json(&t, &j) == SNN_OK);
    CHECK(j && strstr(j, "\"normalization\":\"LayerNorm\"") && strstr(j, "\"pipeline_dtype\":null") &&
          strstr(j, "\"recompute_modules\":[\"core_attn\"]") && strstr(j, "\"layernorm_epsilon\":1e-05"));
    CHECK(j && snn_lm_transformer_config_from_json(j, &t2) == SNN_OK && memcmp(&t, &t2, sizeof t) == 0);
    free(j);
    snn_lm_optimizer_config o = base().optimizer, o2;
    CHECK(snn_lm_optimizer_config_to_json(&o, &j) == SNN_OK);
    CHECK(j && strstr(j, "\"lr\":0.0003") && strstr(j, "\"min_lr\":3e-05") && strstr(j, "\"loss_scale\":null"));
    CHECK(j && snn_lm_optimizer_config_from_json(j, &o2) == SNN_OK && memcmp(&o, &o2, sizeof o) == 0);
    free(j);
}

/* JSON whose training config is base() with one edit (a key replaced or added). */
static char *edited(const char *from, const char *to) {
    snn_lm_training_config c = base();
    char *j = NULL;
    if (snn_lm_training_config_to_json(&c, &j) != SNN_OK) return NULL;
    char *p = strstr(j, from);
    if (!p) { fprintf(stderr, "  edit: \"%s\" not in %s\n", from, j); free(j); return NULL; }
    char *r = malloc(strlen(j) + strlen(to) + 1);
    memcpy(r, j, (size_t)(p - j));
    strcpy(r + (p - j), to);
    strcat(r, p + strlen(from));
    free(j);
    return r;
}

static void json_bad(const char *from, const char *to, snn_status want, const char *a, const char *b) {
    char *j = edited(from, to);
    snn_lm_training_config out, keep;
    memset(&out, 0x33, sizeof out);
    keep = out;
    snn_status st = j ? snn_lm_training_config_from_json(j, &out) : SNN_E_NOMEM;
    const char *m = snn_last_error();
    CHECK_MSG(st == want && (!a || strstr(m, a)) && (!b || strstr(m, b)), "edit %s -> %s: status %d, %s", from, to,
              (int)st, m);
    CHECK(memcmp(&out, &keep, sizeof out) == 0); /* untouched on failure */
    free(j);
}

static void test_json_errors(void) {
    const snn_status I = SNN_E_INVALID;
    json_bad("\"_target_\":\"snn.lm.TrainingConfig\"", "\"_target_\":\"os.system\"", I, "unknown config type", "os.system");
    json_bad("\"_target_\":\"snn.lm.TrainingConfig\"", "\"_target_\":\"snn.lm.EvaluationConfig\"", I, "snn.lm.EvaluationConfig", "expected");
    json_bad("\"_target_\":\"snn.lm.TrainingConfig\",", "", I, "missing \"_target_\"", NULL);
    json_bad("\"_target_\":\"snn.lm.TransformerConfig\"", "\"_target_\":\"snn.lm.OptimizerConfig\"", I, "training.model.transformer", "snn.lm.TransformerConfig");
    json_bad("\"_target_\":\"snn.lm.SpikeLMConfig\"", "\"_target_\":\"snn.lm.LlamaConfig\"", I, "unknown config type", "LlamaConfig");
    json_bad("\"seed\":1234", "\"seed\":1234,\"sed\":1", I, "unknown key", "\"sed\"");
    json_bad("\"seed\":1234", "\"seed\":1234,\"tensor_model_parallel_size\":2", I, "tensor_model_parallel_size", "model.transformer only");
    json_bad("\"seed\":1234", "\"seed\":1234,\"sequence_parallel\":true", I, "sequence_parallel", "no duplicated");
    json_bad("\"seed\":1234", "\"seed\":1234,\"model_builder\":\"x\"", I, "model_builder", NULL);
    json_bad("\"use_snn_memopt\":false", "\"use_snn_memopt\":0", I, "use_snn_memopt", "true or false");
    json_bad("\"train_steps\":100", "\"train_steps\":100.5", I, "train_steps", "integer");
    json_bad("\"train_steps\":100", "\"train_steps\":\"100\"", I, "train_steps", "integer");
    json_bad("\"train_steps\":100", "\"train_steps\":null", I, "train_steps", "null");
    json_bad("\"position_embedding_type\":\"rope\"", "\"position_embedding_type\":\"alibi\"", I, "position_embedding_type", "'alibi'");
    json_bad("\"temporal_output_reduction\":\"mean\"", "\"temporal_output_reduction\":\"max\"", I, "temporal_output_reduction", "'max'");
    json_bad("\"lr_decay_style\":\"cosine\"", "\"lr_decay_style\":\"exponential\"", I, "lr_decay_style", NULL);
    json_bad("\"params_dtype\":\"bfloat16\",\"pipeline_dtype\"", "\"params_dtype\":\"float64\",\"pipeline_dtype\"", I, "params_dtype", "float64");
    json_bad("\"recompute_modules\":[\"core_attn\"]", "\"recompute_modules\":[\"attention\"]", I, "recompute_modules", "attention");
    json_bad("\"recompute_modules\":[\"core_attn\"]", "\"recompute_modules\":[\"core_attn\",\"core_attn\"]", I, "twice", NULL);
    json_bad("\"seed\":1234", "\"seed\":1234,\"seed\":5", I, "twice", "seed");
    json_bad("\"seed\":1234", "\"seed\":-1", I, "seed", NULL);
    json_bad("\"lr\":0.0003", "\"lr\":1e999", I, "optimizer.lr", "finite");
    json_bad("{", "[", SNN_E_FORMAT, "malformed", NULL);
    json_bad("\"seed\":1234", "\"seed\":1234,", SNN_E_FORMAT, "malformed", NULL);
    /* a GPT model has no spike parameters */
    json_bad("\"_target_\":\"snn.lm.SpikeLMConfig\"", "\"_target_\":\"snn.lm.GPTConfig\"", I, "spike_", "unknown key");
    /* the validation rules apply to parsed configs: the reference's rejections through JSON */
    json_bad("\"global_batch_size\":8", "\"global_batch_size\":15", I, "divisible", NULL);
    json_bad("\"eval_interval\":0", "\"eval_interval\":5", I, "both be zero or positive", NULL);
    json_bad("\"checkpoint_interval\":0", "\"checkpoint_interval\":5", I, "checkpoint_dir", NULL);
    json_bad("\"params_dtype\":\"bfloat16\",\"use_distributed", "\"params_dtype\":\"float32\",\"use_distributed", I, "params_dtype", NULL);
    /* omitted keys take the defaults; null spelled options */
    char *j = edited("\"lr_decay_steps\":null,", "");
    snn_lm_training_config c;
    CHECK(j && snn_lm_training_config_from_json(j, &c) == SNN_OK && c.lr_decay_steps == -1);
    free(j);
    j = edited("\"params_dtype\":\"bfloat16\",\"pipeline_dtype\"", "\"params_dtype\":\"torch.bfloat16\",\"pipeline_dtype\"");
    CHECK(j && snn_lm_training_config_from_json(j, &c) == SNN_OK && c.model.transformer.params_dtype == SNN_LM_DTYPE_BFLOAT16);
    free(j);
    /* to_json refuses a non-finite value it cannot spell */
    c = base();
    c.model.spike_decay = NAN;
    char *o = NULL;
    CHECK(snn_lm_training_config_to_json(&c, &o) == SNN_E_INVALID && o == NULL);
}

static void test_recipe(void) {
    snn_lm_training_config a = base(), b = base();
    char ha[65], hb[65], *j = NULL;
    CHECK(snn_lm_recipe_sha256(&a, ha) == SNN_OK && strlen(ha) == 64);
    b.train_steps = 500; b.optimizer.lr = 1e-3; b.seed = 9; /* not part of the recipe */
    CHECK(snn_lm_recipe_sha256(&b, hb) == SNN_OK && strcmp(ha, hb) == 0);
    b = base(); b.model.time_steps = 2;
    CHECK(snn_lm_recipe_sha256(&b, hb) == SNN_OK && strcmp(ha, hb) != 0);
    b = base(); b.model.transformer.fp8 = SNN_LM_FP8_HYBRID;
    CHECK(snn_lm_recipe_sha256(&b, hb) == SNN_OK && strcmp(ha, hb) != 0);
    b = base(); b.sequence_length = 31;
    CHECK(snn_lm_recipe_sha256(&b, hb) == SNN_OK && strcmp(ha, hb) != 0);
    CHECK(snn_lm_recipe_to_json(&a, &j) == SNN_OK);
    CHECK(j && strstr(j, "\"recipe_name\":\"spikelm\"") && strstr(j, "\"temporal_semantics_version\":1") &&
          strstr(j, "\"spike_decay\":0.25") && strstr(j, "\"time_steps\":4") && strstr(j, "\"ffn_hidden_size\":256"));
    free(j);
    b = base(); b.optimizer.lr = NAN;
    CHECK(snn_lm_recipe_sha256(&b, hb) == SNN_E_INVALID);
}

int main(void) {
    rs = snn_test_seed() | 1;
    test_training_rules();
    test_eval_gen_rules();
    test_topology();
    test_lr();
    test_json_round_trip();
    test_json_errors();
    test_recipe();
    return snn_test_finish("test_lm_config");
}
