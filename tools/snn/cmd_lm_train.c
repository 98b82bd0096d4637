/* snn lm train: gpt / spikelm on a token dataset (the training lifecycle of a Megatron
 * Core SNN language model, on one process: data parallel size 1).
 *
 * Per optimizer step: global/micro microbatches of `micro` semantic samples, the inputs
 * tiled T times along the batch; per-token loss over the whole global batch (sum of the
 * masked token losses / token count), gradients accumulated over the microbatches; global
 * gradient-norm clip; AdamW on the FP32 master weights with the learning rate of the
 * sample-based schedule at the consumed samples. The sampler shuffles the
 * train_steps*global sample indices once with the seed (sample i = row i mod N) and the
 * step reads its slice, so a resume at step k continues with exactly the same batches.
 * Checkpoints step_XXXXXXX/checkpoint.safetensors hold the weights, the optimizer state,
 * the recipe, the training config and the progress; the directory appears atomically. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "lm_tool.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/tokenizer.h"

typedef struct {
    const char *config, *model, *data, *output, *resume;
    const char *norm, *act, *pos, *reduce, *decay_style, *precision, *fp8_recipe;
    int layers, hidden, heads, groups, ffn, no_bias, untied, T, fp8;
    long vocab, max_len, train_steps, micro, global, log_interval, eval_interval, eval_steps, warmup, decay_steps,
        ckpt_interval, timing_warmup;
    float lr, min_lr, wd, beta1, beta2, eps, clip, spike_decay, spike_amp;
    uint64_t seed;
} train_flags;

enum { F_MAX = 48 };

static int find(opt *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].seen;
    return 0;
}

/* Apply the flags the user gave onto cfg (defaults of the CLI where no --config). */
static void apply_flags(const train_flags *f, opt *t, int n, snn_lm_training_config *c, int have_config) {
#define GIVEN(x) (!have_config || find(t, n, x))
    snn_lm_transformer_config *tr = &c->model.transformer;
    snn_lm_optimizer_config *op = &c->optimizer;
    if (GIVEN("--layers")) tr->num_layers = f->layers;
    if (GIVEN("--hidden")) tr->hidden_size = f->hidden;
    if (GIVEN("--heads")) tr->num_attention_heads = f->heads;
    if (GIVEN("--query-groups")) tr->num_query_groups = f->groups;
    if (GIVEN("--ffn")) tr->ffn_hidden_size = f->ffn;
    if (GIVEN("--normalization")) {
        if (!strcmp(f->norm, "LayerNorm")) tr->normalization = SNN_LM_NORM_LAYERNORM;
        else if (!strcmp(f->norm, "RMSNorm")) tr->normalization = SNN_LM_NORM_RMSNORM;
        else die_usage("lm train: --normalization must be LayerNorm or RMSNorm (got '%s')", f->norm);
    }
    if (GIVEN("--activation")) {
        if (!strcmp(f->act, "gelu")) tr->activation = SNN_LM_ACT_GELU;
        else if (!strcmp(f->act, "swiglu")) tr->activation = SNN_LM_ACT_SWIGLU;
        else die_usage("lm train: --activation must be gelu or swiglu (got '%s')", f->act);
    }
    if (GIVEN("--no-bias")) tr->add_bias_linear = !f->no_bias;
    if (GIVEN("--precision") || GIVEN("--fp8")) {
        int fp16 = !strcmp(f->precision, "fp16"), bf16 = !strcmp(f->precision, "bf16");
        if (!fp16 && !bf16 && strcmp(f->precision, "fp32"))
            die_usage("lm train: --precision must be fp32, bf16 or fp16 (got '%s')", f->precision);
        snn_lm_dtype d = fp16 ? SNN_LM_DTYPE_FLOAT16 : bf16 ? SNN_LM_DTYPE_BFLOAT16 : SNN_LM_DTYPE_FLOAT32;
        tr->fp16 = op->fp16 = fp16;
        tr->bf16 = op->bf16 = bf16;
        tr->params_dtype = op->params_dtype = d;
        tr->fp8 = f->fp8 ? SNN_LM_FP8_HYBRID : SNN_LM_FP8_NONE;
        if (f->fp8) {
            const char *names[] = {"delayed", "tensorwise", "blockwise", "mxfp8"};
            snn_lm_fp8_recipe r = SNN_LM_FP8_RECIPE_UNSET;
            for (int i = 0; i < 4; i++)
                if (!strcmp(f->fp8_recipe, names[i])) r = (snn_lm_fp8_recipe)(SNN_LM_FP8_RECIPE_DELAYED + i);
            if (r == SNN_LM_FP8_RECIPE_UNSET)
                die_usage("lm train: --fp8-recipe must be delayed, tensorwise, blockwise or mxfp8 (got '%s')", f->fp8_recipe);
            tr->fp8_recipe = op->fp8_recipe = r;
        }
    }
    tr->calculate_per_token_loss = 1;
    op->use_distributed_optimizer = 1;
    if (GIVEN("--vocab-size") && f->vocab) c->model.vocab_size = f->vocab;
    if (GIVEN("--max-sequence-length") && f->max_len) c->model.max_sequence_length = f->max_len;
    if (GIVEN("--time-steps") && f->T) c->model.time_steps = f->T;
    if (GIVEN("--untied")) c->model.share_embeddings_and_output_weights = !f->untied;
    if (GIVEN("--position-embedding") && f->pos) {
        int p = snn_lm_position_embedding_parse(f->pos);
        if (p < 0) die_usage("lm train: --position-embedding must be rope or learned_absolute (got '%s')", f->pos);
        c->model.position_embedding_type = (snn_lm_position_embedding)p;
    }
    if (GIVEN("--temporal-reduction")) {
        int r = snn_lm_temporal_reduction_parse(f->reduce);
        if (r < 0) die_usage("lm train: --temporal-reduction must be mean or sum (got '%s')", f->reduce);
        c->model.temporal_output_reduction = (snn_lm_temporal_reduction)r;
    }
    if (GIVEN("--spike-decay")) c->model.spike_decay = f->spike_decay;
    if (GIVEN("--spike-amplitude")) c->model.spike_amplitude = f->spike_amp;
    if (GIVEN("--lr")) op->lr = f->lr;
    if (GIVEN("--min-lr")) op->min_lr = f->min_lr;
    if (GIVEN("--weight-decay")) op->weight_decay = f->wd;
    if (GIVEN("--adam-beta1")) op->adam_beta1 = f->beta1;
    if (GIVEN("--adam-beta2")) op->adam_beta2 = f->beta2;
    if (GIVEN("--adam-eps")) op->adam_eps = f->eps;
    if (GIVEN("--clip-grad")) op->clip_grad = f->clip;
    if (find(t, n, "--data")) snprintf(c->dataset_kwargs.path, sizeof c->dataset_kwargs.path, "%s", f->data);
    if (find(t, n, "--output")) snprintf(c->checkpoint_dir, sizeof c->checkpoint_dir, "%s", f->output);
    if (find(t, n, "--resume")) snprintf(c->resume, sizeof c->resume, "%s", f->resume);
    if (GIVEN("--train-steps")) c->train_steps = f->train_steps;
    if (GIVEN("--micro-batch-size")) c->micro_batch_size = f->micro;
    if (GIVEN("--global-batch-size")) c->global_batch_size = f->global;
    if (GIVEN("--log-interval")) c->log_interval = f->log_interval;
    if (GIVEN("--eval-interval")) c->eval_interval = f->eval_interval;
    if (GIVEN("--eval-steps")) c->eval_steps = f->eval_steps;
    if (GIVEN("--lr-warmup-steps")) c->lr_warmup_steps = f->warmup;
    if (GIVEN("--lr-decay-steps")) c->lr_decay_steps = f->decay_steps;
    if (GIVEN("--lr-decay-style")) {
        int s = snn_lm_lr_decay_style_parse(f->decay_style);
        if (s < 0) die_usage("lm train: --lr-decay-style must be cosine, linear, constant or inverse-square-root (got '%s')",
                             f->decay_style);
        c->lr_decay_style = (snn_lm_lr_decay_style)s;
    }
    if (GIVEN("--checkpoint-interval")) c->checkpoint_interval = f->ckpt_interval;
    if (GIVEN("--timing-warmup-steps")) c->timing_warmup_steps = f->timing_warmup;
    if (GIVEN("--seed")) c->seed = f->seed;
#undef GIVEN
}

/* The precision of the network for the transformer record's flags. */
static snn_precision_config precision_of(const snn_lm_training_config *c) {
    const snn_lm_transformer_config *t = &c->model.transformer;
    const char *mode = t->fp8 != SNN_LM_FP8_NONE ? "fp8" : t->fp16 ? "fp16" : t->bf16 ? "bf16" : "fp32";
    const char *recipe = NULL;
    if (t->fp8 != SNN_LM_FP8_NONE) {
        const char *map[] = {NULL, "delayed", "current", "block", "mxfp8"};
        recipe = map[t->fp8_recipe];
    }
    snn_precision_config p;
    snn_status st = snn_precision_config_parse(mode, recipe, NULL, NULL, NULL, &p);
    if (st != SNN_OK) die_status(SNN_E_INVALID, "the precision of the transformer config");
    return p;
}

static int mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* Write step_XXXXXXX atomically: a hidden sibling directory, then rename. */
static snn_status save_checkpoint(const snn_lm_training_config *c, const char *recipe, const char *cfg_json,
                                  snn_model *m, snn_precision *prec, snn_optimizer *opt, long step, long consumed,
                                  long sched_samples, char *dir_out, size_t cap) {
    char dir[4200], tmp[4300], file[4400], s1[32], s2[32], s3[32];
    snprintf(dir, sizeof dir, "%s/step_%07ld", c->checkpoint_dir, step);
    snprintf(tmp, sizeof tmp, "%s/.step_%07ld.tmp.%ld", c->checkpoint_dir, step, (long)getpid());
    struct stat sb;
    if (!stat(dir, &sb)) return snn_error(SNN_E_INVALID, "checkpoint %s exists already", dir);
    if (mkdir_p(c->checkpoint_dir) || mkdir(tmp, 0777))
        return snn_error(SNN_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    snprintf(file, sizeof file, "%s/%s", tmp, LM_CKPT_FILE);
    snprintf(s1, sizeof s1, "%ld", step);
    snprintf(s2, sizeof s2, "%ld", consumed);
    snprintf(s3, sizeof s3, "%ld", sched_samples);
    const char *kv[] = {"lm_recipe", recipe, "lm_training_config", cfg_json, "optimizer_step", s1,
                        "consumed_samples", s2, "scheduler_samples", s3, NULL};
    snn_status st = snn_training_checkpoint_save(m, prec, opt, file, kv);
    if (st == SNN_OK && rename(tmp, dir)) st = snn_error(SNN_E_IO, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (st != SNN_OK) {
        unlink(file);
        rmdir(tmp);
    }
    snprintf(dir_out, cap, "%s", dir);
    return st;
}

int cmd_lm_train(int argc, char **argv) {
    train_flags f = {.model = "gpt", .norm = "LayerNorm", .act = "gelu", .reduce = "mean", .decay_style = "cosine",
                     .precision = "fp32", .fp8_recipe = "delayed", .layers = 4, .hidden = 128, .heads = 4, .train_steps = 200,
                     .micro = 8, .global = 8, .log_interval = 10, .lr = 1e-3f, .min_lr = 1e-4f, .wd = 0.01f, .beta1 = 0.9f,
                     .beta2 = 0.999f, .eps = 1e-8f, .clip = 1.0f, .spike_decay = 0.25f, .spike_amp = 1.0f, .seed = 1234,
                     .decay_steps = -1};
    opt t[] = {
        {"--config", OPT_STRING, &f.config, "TrainingConfig JSON (snn.lm.TrainingConfig); flags given override it", NULL, 0},
        {"--model", OPT_STRING, &f.model, "gpt | spikelm (default gpt)", NULL, 0},
        {"--data", OPT_STRING, &f.data, "token dataset directory (train.npy, valid.npy, test.npy)", NULL, 0},
        {"--output", OPT_STRING, &f.output, "checkpoint directory (step_XXXXXXX inside; metrics.json)", NULL, 0},
        {"--resume", OPT_STRING, &f.resume, "continue from a step_XXXXXXX checkpoint (same recipe)", NULL, 0},
        {"--layers", OPT_INT, &f.layers, "num_layers (default 4)", NULL, 0},
        {"--hidden", OPT_INT, &f.hidden, "hidden_size (default 128)", NULL, 0},
        {"--heads", OPT_INT, &f.heads, "num_attention_heads (default 4)", NULL, 0},
        {"--query-groups", OPT_INT, &f.groups, "num_query_groups (default 0 = heads)", NULL, 0},
        {"--ffn", OPT_INT, &f.ffn, "ffn_hidden_size (default 0 = 4*hidden)", NULL, 0},
        {"--normalization", OPT_STRING, &f.norm, "LayerNorm | RMSNorm (default LayerNorm)", NULL, 0},
        {"--activation", OPT_STRING, &f.act, "gelu | swiglu (default gelu)", NULL, 0},
        {"--no-bias", OPT_FLAG, &f.no_bias, "no linear biases", NULL, 0},
        {"--untied", OPT_FLAG, &f.untied, "separate output weights (default: tied to the embedding)", NULL, 0},
        {"--position-embedding", OPT_STRING, &f.pos, "learned_absolute | rope (default: gpt learned_absolute, spikelm rope)", NULL, 0},
        {"--vocab-size", OPT_LONG, &f.vocab, "vocabulary (default: the data's tokenizer.json, else max id + 1)", NULL, 0},
        {"--max-sequence-length", OPT_LONG, &f.max_len, "context (default: the data's sequence length)", NULL, 0},
        {"--time-steps", OPT_INT, &f.T, "T (gpt 1; spikelm default 4)", NULL, 0},
        {"--temporal-reduction", OPT_STRING, &f.reduce, "mean | sum (default mean)", NULL, 0},
        {"--spike-decay", OPT_FLOAT, &f.spike_decay, "spikelm decay in [0, 1] (default 0.25)", NULL, 0},
        {"--spike-amplitude", OPT_FLOAT, &f.spike_amp, "spikelm amplitude > 0 (default 1)", NULL, 0},
        {"--precision", OPT_STRING, &f.precision, "fp32 | bf16 | fp16 (both configs, params_dtype too; default fp32)", NULL, 0},
        {"--fp8", OPT_FLAG, &f.fp8, "fp8 = hybrid on top of --precision", NULL, 0},
        {"--fp8-recipe", OPT_STRING, &f.fp8_recipe, "delayed | tensorwise | blockwise | mxfp8 (default delayed)", NULL, 0},
        {"--lr", OPT_FLOAT, &f.lr, "peak learning rate (default 1e-3)", NULL, 0},
        {"--min-lr", OPT_FLOAT, &f.min_lr, "final learning rate (default 1e-4)", NULL, 0},
        {"--weight-decay", OPT_FLOAT, &f.wd, "AdamW decoupled decay (default 0.01)", NULL, 0},
        {"--adam-beta1", OPT_FLOAT, &f.beta1, "default 0.9", NULL, 0},
        {"--adam-beta2", OPT_FLOAT, &f.beta2, "default 0.999", NULL, 0},
        {"--adam-eps", OPT_FLOAT, &f.eps, "default 1e-8", NULL, 0},
        {"--clip-grad", OPT_FLOAT, &f.clip, "global gradient-norm clip, 0 = off (default 1)", NULL, 0},
        {"--train-steps", OPT_LONG, &f.train_steps, "optimizer steps (default 200)", NULL, 0},
        {"--micro-batch-size", OPT_LONG, &f.micro, "samples per forward (default 8)", NULL, 0},
        {"--global-batch-size", OPT_LONG, &f.global, "samples per optimizer step, excluding T (default 8)", NULL, 0},
        {"--lr-warmup-steps", OPT_LONG, &f.warmup, "linear warm-up from 0 (default 0)", NULL, 0},
        {"--lr-decay-steps", OPT_LONG, &f.decay_steps, "end of the decay (default: train steps)", NULL, 0},
        {"--lr-decay-style", OPT_STRING, &f.decay_style, "cosine | linear | constant | inverse-square-root", NULL, 0},
        {"--log-interval", OPT_LONG, &f.log_interval, "steps between JSON lines (default 10)", NULL, 0},
        {"--eval-interval", OPT_LONG, &f.eval_interval, "steps between validations (default 0 = none)", NULL, 0},
        {"--eval-steps", OPT_LONG, &f.eval_steps, "global batches per validation (default 0)", NULL, 0},
        {"--checkpoint-interval", OPT_LONG, &f.ckpt_interval, "steps between checkpoints (default 0: the last only)", NULL, 0},
        {"--timing-warmup-steps", OPT_LONG, &f.timing_warmup, "untimed first steps (default 0)", NULL, 0},
        {"--seed", OPT_U64, &f.seed, "initialisation and sampler seed (default 1234)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn lm train --data DIR --output DIR [options]", "Train gpt or spikelm on a token dataset.", t, n);
        return 0;
    }
    args_parse("lm train", t, n, argc, argv, 3);
    snn_lm_training_config c;
    snn_status st;
    if (f.config) {
        if ((st = snn_lm_training_config_load(f.config, &c)) != SNN_OK)
            die_status(st == SNN_E_IO ? SNN_E_INVALID : st, "loading --config");
        if (find(t, n, "--model")) die_usage("lm train: --model comes from --config");
    } else {
        int type = snn_lm_model_type_parse(f.model);
        if (type < 0) die_usage("lm train: --model must be gpt or spikelm (got '%s')", f.model);
        c = snn_lm_training_config_default((snn_lm_model_type)type);
        if (!f.pos) c.model.position_embedding_type = type == SNN_LM_MODEL_GPT ? SNN_LM_POS_LEARNED_ABSOLUTE : SNN_LM_POS_ROPE;
        c.model.share_embeddings_and_output_weights = 1;
        if (!f.T) c.model.time_steps = type == SNN_LM_MODEL_GPT ? 1 : 4;
        c.model.transformer.num_layers = f.layers;
    }
    apply_flags(&f, t, n, &c, f.config != NULL);
    if (!c.dataset_kwargs.path[0]) die_usage("lm train: --data is required");
    if (!c.checkpoint_dir[0]) die_usage("lm train: --output is required");

    /* data: sequence length and vocabulary from the dataset when not given */
    snn_token_dataset *train = NULL, *valid = NULL;
    if ((st = snn_token_dataset_open(c.dataset_kwargs.path, "train", 0, &train)) != SNN_OK)
        die_status(SNN_E_INVALID, "opening the training data");
    const int64_t S = snn_token_dataset_seq_len(train), N = snn_token_dataset_rows(train);
    if (!find(t, n, "--max-sequence-length") && !f.config) c.model.max_sequence_length = S;
    c.sequence_length = S;
    if (!find(t, n, "--vocab-size") && !f.config) {
        char tp[4200];
        snprintf(tp, sizeof tp, "%s/tokenizer.json", c.dataset_kwargs.path);
        snn_tokenizer *tok;
        struct stat sb;
        if (!stat(tp, &sb) && snn_tokenizer_load(tp, &tok) == SNN_OK) {
            c.model.vocab_size = snn_tokenizer_vocab_size(tok);
            snn_tokenizer_free(tok);
        } else {
            int32_t mx = 0;
            for (int64_t r = 0; r < N; r++) {
                const int32_t *row = snn_token_dataset_row(train, r);
                for (int64_t k = 0; k <= S; k++) mx = row[k] > mx ? row[k] : mx;
            }
            c.model.vocab_size = (int64_t)mx + 1;
        }
    }
    if ((st = snn_lm_training_config_validate(&c)) != SNN_OK) die_status(SNN_E_INVALID, "checking the training config");
    const snn_lm_transformer_config *tr = &c.model.transformer;
    if (tr->tensor_model_parallel_size != 1 || tr->pipeline_model_parallel_size != 1 || tr->context_parallel_size != 1)
        die_usage("lm train: tensor, pipeline and context parallel sizes must be 1 on this runner (got TP %d, PP %d, CP %d)",
                  tr->tensor_model_parallel_size, tr->pipeline_model_parallel_size, tr->context_parallel_size);
    if (c.use_snn_memopt) die_usage("lm train: use_snn_memopt is not implemented on this runner");
    if (c.sequence_length != S)
        die_usage("lm train: sequence_length %lld does not match the data's %lld", (long long)c.sequence_length, (long long)S);
    snn_token_dataset_free(train);
    if ((st = snn_token_dataset_open(c.dataset_kwargs.path, "train", c.model.vocab_size, &train)) != SNN_OK)
        die_status(SNN_E_INVALID, "checking the training data against the vocabulary");
    if (c.eval_interval > 0) {
        if ((st = snn_token_dataset_open(c.dataset_kwargs.path, "valid", c.model.vocab_size, &valid)) != SNN_OK)
            die_status(SNN_E_INVALID, "opening the validation data");
        if (snn_token_dataset_seq_len(valid) != S) die_usage("lm train: valid.npy and train.npy differ in sequence length");
    }
    snn_gpt_opts o;
    if ((st = snn_gpt_opts_from_model_config(&c.model, (int)S, &o)) != SNN_OK)
        die_status(st == SNN_E_UNSUPPORTED || st == SNN_E_INVALID ? SNN_E_INVALID : st, "building the model");
    char *recipe = NULL, *cfg_json = NULL;
    if ((st = snn_lm_recipe_to_json(&c, &recipe)) != SNN_OK) die_status(st, "building the recipe");
    if ((st = snn_lm_training_config_to_json(&c, &cfg_json)) != SNN_OK) die_status(st, "writing the config");

    const int T = o.time_steps, V = o.vocab;
    const long G = (long)c.global_batch_size, M = (long)c.micro_batch_size, K = G / M;
    snn_model *m;
    if ((st = snn_gpt_create(&o, c.seed, &m)) != SNN_OK) die_status(st, "building the model");
    snn_precision_config pcfg = precision_of(&c);
    snn_precision *prec = NULL;
    int fused_step = pcfg.mode == SNN_PRECISION_FP16 || pcfg.mode == SNN_PRECISION_FP8;
    if (fused_step && K != 1)
        die_usage("lm train: with fp16 or fp8 the CPU runs one microbatch per step (micro_batch_size == global_batch_size)");
    if (pcfg.mode != SNN_PRECISION_FP32 && (st = snn_prepare_model_for_precision(m, "cpu", &pcfg, &prec)) != SNN_OK)
        die_status(st, "preparing the precision");
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = (float)c.optimizer.lr;
    oo.weight_decay = (float)c.optimizer.weight_decay;
    oo.beta1 = (float)c.optimizer.adam_beta1;
    oo.beta2 = (float)c.optimizer.adam_beta2;
    oo.eps = (float)c.optimizer.adam_eps;
    snn_optimizer *opt;
    if ((st = snn_optimizer_create_for_model(&oo, m, &opt)) != SNN_OK) die_status(st, "creating the optimizer");
    if ((st = snn_model_plan(m, T, (int)M)) != SNN_OK) die_status(st, "planning the model");

    long step = 0, consumed = 0, sched = 0;
    if (c.resume[0]) {
        char rp[4200];
        struct stat sb;
        snprintf(rp, sizeof rp, "%s/%s", c.resume, LM_CKPT_FILE);
        if (stat(rp, &sb)) snprintf(rp, sizeof rp, "%s", c.resume);
        snn_ckpt *ck;
        if ((st = snn_ckpt_open(rp, &ck)) != SNN_OK) die_status(SNN_E_INVALID, "opening --resume");
        const char *r = snn_ckpt_metadata(ck, "lm_recipe"), *s = snn_ckpt_metadata(ck, "optimizer_step"),
                   *cs = snn_ckpt_metadata(ck, "consumed_samples"), *ss = snn_ckpt_metadata(ck, "scheduler_samples");
        if (!r || !s || !cs || !ss) die_usage("lm train: %s is not a checkpoint of snn lm train", rp);
        if (strcmp(r, recipe))
            die_usage("lm train: the checkpoint's recipe does not match this run (checkpoint %s, this run %s)", r, recipe);
        step = atol(s);
        consumed = atol(cs);
        sched = atol(ss);
        if (step < 0 || step > c.train_steps || consumed != step * G)
            die_usage("lm train: checkpoint step %ld / consumed samples %ld do not fit train_steps %lld and global batch %ld",
                      step, consumed, (long long)c.train_steps, G);
        if ((st = snn_training_checkpoint_restore(m, prec, opt, ck)) != SNN_OK) die_status(st, "restoring the checkpoint");
        snn_ckpt_close(ck);
    }

    /* buffers: all allocated before the first step */
    const long total = (long)c.train_steps * G;
    const size_t ns = (size_t)M * (size_t)S;
    int64_t *perm = malloc((size_t)total * sizeof *perm), *idx = malloc((size_t)M * sizeof *idx);
    int32_t *ids = malloc(ns * 4), *labels = malloc(ns * 4);
    float *x = malloc((size_t)T * ns * sizeof(float)), *dlogits = malloc((size_t)T * ns * (size_t)V * sizeof(float));
    double *tl = malloc(ns * sizeof(double));
    lm_eval_buf eb;
    if (!perm || !idx || !ids || !labels || !x || !dlogits || !tl || !lm_eval_buffers(&eb, T, (int)M, (int)S))
        die_status(SNN_E_NOMEM, "allocating the training buffers");
    snn_rng rng = snn_rng_make(c.seed, 0x5a3d);
    for (long i = 0; i < total; i++) perm[i] = i;
    for (long i = total - 1; i > 0; i--) {
        long j = (long)(snn_rng_next_uniform(&rng) * (float)(i + 1));
        if (j > i) j = i;
        int64_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    fprintf(stderr, "snn lm train: %s, %zu parameters, T %d, S %lld, vocab %d, global %ld (micro %ld), %lld steps, %s\n",
            o.spiking ? "spikelm" : "gpt", snn_model_num_params(m), T, (long long)S, V, G, M, (long long)c.train_steps,
            snn_precision_mode_name(pcfg.mode));
    double train_secs = 0, ckpt_secs = 0, last_loss = NAN, last_gn = NAN, last_vloss = NAN;
    long timed = 0;
    int last_ok = 1;
    char last_dir[4200] = "";
    const double tokens_per_step = (double)G * (double)S;
    while (step < c.train_steps) {
        double t0 = now_seconds();
        snn_model_zero_grad(m);
        double ls = 0, cn = 0;
        const float scale = (float)(1.0 / tokens_per_step); /* the loss mask is all ones: count known */
        for (long k = 0; k < K; k++) {
            for (long j = 0; j < M; j++) idx[j] = perm[consumed + k * M + j];
            if ((st = snn_token_dataset_batch(train, idx, (int)M, ids, labels)) != SNN_OK) die_status(st, "reading a batch");
            lm_tile(ids, T, (int)M, (int)S, x);
            const float *y;
            if ((st = snn_model_forward(m, x, 1, &y)) != SNN_OK) die_status(st, "forward");
            double l, cc;
            if ((st = snn_lm_cross_entropy(y, labels, NULL, T, (int)M, (int)S, V, o.reduce_sum, tl, &l, &cc, dlogits,
                                           scale)) != SNN_OK)
                die_status(st, "loss");
            ls += l;
            cn += cc;
            if (!fused_step && (st = snn_model_backward(m, dlogits)) != SNN_OK) die_status(st, "backward");
        }
        float lr = (float)snn_lm_lr_at(&c, sched);
        float gn;
        int skipped = 0;
        if (fused_step) {
            st = snn_precision_backward(prec, dlogits, opt, lr, (float)c.optimizer.clip_grad, &gn, &skipped);
        } else {
            gn = snn_clip_grad_norm(snn_model_grads(m), snn_model_num_params(m),
                                    c.optimizer.clip_grad > 0 ? (float)c.optimizer.clip_grad : -1.0f);
            skipped = !isfinite(gn);
            st = snn_optimizer_step(opt, lr, skipped);
        }
        if (st != SNN_OK) die_status(st, "optimizer step");
        step++;
        consumed += G;
        if (!skipped) sched += G;
        double dt = now_seconds() - t0;
        if (step > c.timing_warmup_steps) {
            train_secs += dt;
            timed++;
        }
        last_loss = ls / cn;
        last_gn = gn;
        last_ok = !skipped;
        int log_now = step % c.log_interval == 0 || step == c.train_steps;
        if (c.eval_interval > 0 && step % c.eval_interval == 0) {
            double vl, vc;
            if ((st = lm_evaluate(m, &o, valid, (int)M, 0, c.eval_steps * G, &eb, &vl, &vc)) != SNN_OK)
                die_status(st, "validation");
            last_vloss = vl / vc;
            printf("{\"optimizer_step\":%ld,\"validation_lm_loss\":%.9g,\"validation_perplexity\":%.9g,\"validation_tokens\":%.0f}\n",
                   step, last_vloss, exp(last_vloss), vc);
        }
        if (log_now) {
            double tps = timed ? timed * tokens_per_step / train_secs : 0;
            printf("{\"optimizer_step\":%ld,\"consumed_samples\":%ld,\"lm_loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,"
                   "\"update_successful\":%d,\"timed_steps\":%ld,\"training_seconds\":%.6g,"
                   "\"semantic_tokens_per_second\":%.6g,\"neural_steps_per_second\":%.6g,\"peak_memory_bytes\":%lld}\n",
                   step, consumed, last_loss, (double)gn, (double)lr, last_ok, timed, train_secs, tps, tps * T, lm_peak_rss());
            fflush(stdout);
            fprintf(stderr, "step %ld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f tokens/s\n", step,
                    (long long)c.train_steps, last_loss, (double)gn, (double)lr, tps);
        }
        if ((c.checkpoint_interval > 0 && step % c.checkpoint_interval == 0) || step == c.train_steps) {
            double c0 = now_seconds();
            if ((st = save_checkpoint(&c, recipe, cfg_json, m, prec, opt, step, consumed, sched, last_dir,
                                      sizeof last_dir)) != SNN_OK)
                die_status(st == SNN_E_INVALID ? SNN_E_INVALID : st, "writing the checkpoint");
            ckpt_secs = now_seconds() - c0;
            printf("{\"optimizer_step\":%ld,\"checkpoint\":\"%s\",\"checkpoint_seconds\":%.6g}\n", step, last_dir, ckpt_secs);
        }
    }
    double tps = timed ? timed * tokens_per_step / train_secs : 0;
    char metrics[8192];
    snprintf(metrics, sizeof metrics,
             "{\"optimizer_step\":%ld,\"consumed_samples\":%ld,\"lm_loss\":%.9g,\"grad_norm\":%.9g,\"update_successful\":%d,"
             "\"validation_lm_loss\":%.9g,\"timed_steps\":%ld,\"training_seconds\":%.6g,\"semantic_tokens_per_second\":%.6g,"
             "\"neural_steps_per_second\":%.6g,\"peak_memory_bytes\":%lld,\"total_peak_memory_bytes\":%lld,"
             "\"tensor_parallel_size\":1,\"pipeline_parallel_size\":1,\"context_parallel_size\":1,\"data_parallel_size\":1,"
             "\"use_snn_memopt\":0,\"selective_recompute\":0,\"parameters\":%zu,\"time_steps\":%d,\"checkpoint\":\"%s\"}",
             step, consumed, last_loss, last_gn, last_ok, isfinite(last_vloss) ? last_vloss : -1.0, timed, train_secs, tps,
             tps * T, lm_peak_rss(), lm_peak_rss(), snn_model_num_params(m), T, last_dir);
    printf("%s\n", metrics);
    char mp[4200];
    snprintf(mp, sizeof mp, "%s/metrics.json", c.checkpoint_dir);
    FILE *mf = fopen(mp, "w");
    if (mf) {
        fprintf(mf, "%s\n", metrics);
        fclose(mf);
    }
    free(perm), free(idx), free(ids), free(labels), free(x), free(dlogits), free(tl);
    lm_eval_buffers_free(&eb);
    snn_token_dataset_free(train);
    snn_token_dataset_free(valid);
    snn_optimizer_free(opt);
    snn_precision_free(prec);
    snn_model_free(m);
    free(recipe);
    free(cfg_json);
    return 0;
}
