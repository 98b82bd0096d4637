/* snn lm train: gpt / spikelm on a token dataset, on one process or data parallel over MPI
 * (`mpirun -np N snn lm train ...`: DP = N). The training lifecycle lives in the library
 * (include/snn/lm_train.h: sampler, per-token loss over the global batch, microbatches,
 * clip, the distributed AdamW, schedule, checkpoints, resume); this file turns flags into a
 * snn_lm_training_config, resolves the sequence length and vocabulary from the data, and
 * prints: JSON lines on stdout and progress on stderr, from rank 0 only.
 *
 * Failures: a bad flag or file on any rank during set-up meets the others at an agreement
 * point, rank 0 prints the first failing rank's message once and every rank exits with its
 * code (2 for bad input); the library agrees on its own failures the same way. A failure no
 * rank could agree on (a lost peer) ends the job through the launcher. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "lm_tool.h"
#include "snn/lm_plan.h"
#include "snn/lm_train.h"
#include "snn/tokenizer.h"

typedef struct {
    const char *config, *model, *data, *output, *resume;
    const char *norm, *act, *pos, *reduce, *decay_style, *precision, *fp8_recipe;
    int layers, hidden, heads, groups, ffn, no_bias, untied, T, fp8, tp, pp, cp, sp;
    const char *device_mem, *objective, *mem_fraction, *device;
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
    if (GIVEN("--context-parallel-size")) tr->context_parallel_size = f->cp;
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
    if (find(t, n, "--tensor-parallel-size")) tr->tensor_model_parallel_size = f->tp;
    if (find(t, n, "--pipeline-parallel-size")) tr->pipeline_model_parallel_size = f->pp;
    if (find(t, n, "--sequence-parallel")) tr->sequence_parallel = f->sp;
#undef GIVEN
}

static snn_comm *g_world;

static int parse_double(const char *s, double *v) {
    char *end;
    if (!s || !*s || !(s[0] == '.' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9'))) return 0;
    errno = 0;
    *v = strtod(s, &end);
    return !*end && errno == 0 && isfinite(*v);
}

/* No topology given (flags or config): snn_lm_plan_training picks TP and PP for this world
 * size (when data parallel over all processes satisfies the batch rules; else the trainer
 * refuses with the rule, as before the planner). Only the topology is taken from its answer (tensor / pipeline / context parallel
 * sizes, sequence_parallel, pipeline_dtype); its memory policy (recompute, use_snn_memopt)
 * is reported but not applied, as this trainer runs neither. */
static char g_plan_note[1024]; /* printed with the run's banner: an error stays one line */

static void plan_topology(const train_flags *f, snn_lm_training_config *c, int world) {
    double gib = 0, fraction;
    double bytes = machine_bytes();
    if (f->device_mem) {
        if (!parse_double(f->device_mem, &gib) || !(gib > 0))
            die_usage("lm train: --device-memory-gib must be a positive number, got '%s'", f->device_mem);
        bytes = floor(gib * 1073741824.0);
    }
    if (!(bytes >= 1) || bytes > 9223372036854775808.0)
        die_usage("lm train: --device-memory-gib %s is out of range (1 byte to 2^63 bytes)",
                  f->device_mem ? f->device_mem : "(the machine's memory)");
    int obj = snn_lm_plan_objective_parse(f->objective);
    if (obj < 0) die_usage("lm train: --objective must be throughput or memory, got '%s'", f->objective);
    if (!parse_double(f->mem_fraction, &fraction) || !(fraction > 0 && fraction <= 1))
        die_usage("lm train: --memory-fraction must be in (0, 1], got '%s'", f->mem_fraction);
    /* A batch that data parallel over every process cannot split is refused with that rule
     * (as without the planner) rather than silently trained model parallel. */
    if (snn_lm_training_config_validate(c) != SNN_OK || snn_lm_training_topology(c, world, NULL, NULL) != SNN_OK)
        return; /* the trainer refuses with the rule */
    snn_lm_training_config out;
    snn_lm_plan_report r;
    snn_status st = snn_lm_plan_training(c, world, (uint64_t)bytes, (snn_lm_plan_objective)obj, fraction, &out, &r);
    if (st == SNN_E_NOMEM) die_status(st, "lm train: planning the topology");
    if (st != SNN_OK) {
        /* the planner's rules are stricter than data parallel's (or the budget is too small):
         * train data parallel, where the trainer's own rules decide */
        snprintf(g_plan_note, sizeof g_plan_note, "snn lm train: planner: %s; training data parallel (TP 1, PP 1)\n",
                 snn_last_error());
        return;
    }
    snprintf(g_plan_note, sizeof g_plan_note,
                "snn lm train: planner (%s, %.4g GiB per process, fraction %.3g): tensor %d x pipeline %d x context %d x "
                "data %d%s, estimate %.2f MiB of %.2f MiB (recompute %s and use_snn_memopt %s not applied)\n",
                snn_lm_plan_objective_name((snn_lm_plan_objective)obj), bytes / 1073741824.0, fraction,
                r.tensor_parallel_size, r.pipeline_parallel_size, r.context_parallel_size, r.data_parallel_size,
                out.model.transformer.sequence_parallel ? " sequence parallel" : "", r.estimate_bytes / 1048576.0,
                r.budget_bytes / 1048576.0, r.selective_recompute ? "selective" : "none",
                r.use_snn_memopt ? "true" : "false");
    if (r.context_parallel_size > 1 && r.tensor_parallel_size * r.pipeline_parallel_size > 1)
        die_usage("lm train: the planner chose context_parallel_size %d with tensor %d x pipeline %d, which this trainer "
                  "does not run (context parallel runs with TP = PP = 1); give --tensor-parallel-size, "
                  "--pipeline-parallel-size and --context-parallel-size",
                  r.context_parallel_size, r.tensor_parallel_size, r.pipeline_parallel_size);
    snn_lm_transformer_config *d = &c->model.transformer;
    const snn_lm_transformer_config *p = &out.model.transformer;
    d->tensor_model_parallel_size = p->tensor_model_parallel_size;
    d->pipeline_model_parallel_size = p->pipeline_model_parallel_size;
    d->context_parallel_size = p->context_parallel_size;
    d->sequence_parallel = p->sequence_parallel;
    d->pipeline_dtype = p->pipeline_dtype;
}

static _Noreturn void exit_agreed(int code, int first, const char *msg) {
    if (snn_comm_rank(g_world) == 0) {
        if (first > 0) fprintf(stderr, "snn: error: rank %d: %s\n", first, msg);
        else fprintf(stderr, "snn: error: %s\n", msg);
    }
    fflush(stdout);
    fflush(stderr);
    snn_comm_free(g_world);
    exit(code);
}

/* die_usage / die_status on any rank: agree with the others (who arrive at the next
 * set-up point, or fail themselves) and leave together. */
static void fail_hook(int code, const char *msg) {
    args_die_hook = NULL;
    int first = -1;
    char got[1024];
    int c = snn_comm_agree_code(g_world, code, msg, &first, got, sizeof got);
    exit_agreed(c ? c : code, first, c ? got : msg);
}

static void setup_point(void) {
    int first = -1;
    char got[1024];
    int c = snn_comm_agree_code(g_world, 0, NULL, &first, got, sizeof got);
    if (c) exit_agreed(c, first, got);
}

/* A library failure: already agreed by every rank (lm_train.h), so every rank leaves with
 * the same code and rank 0 prints it once. */
static _Noreturn void die_agreed(snn_status st, const char *what) {
    char m[1280];
    const char *e = snn_last_error();
    snprintf(m, sizeof m, "%s%s%s", what, *e ? ": " : "", e);
    exit_agreed(st == SNN_E_NOMEM || st == SNN_E_NUMERIC ? 1 : 2, -1, m);
}

static void on_event(const snn_lm_train_event *e, void *user) {
    (void)user;
    if (snn_comm_rank(g_world) != 0) return;
    printf("%s\n", e->json);
    fflush(stdout);
    if (e->kind == SNN_LM_EVENT_LOG) {
        const snn_lm_step_metrics *m = e->metrics;
        fprintf(stderr, "step %ld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f tokens/s\n", m->optimizer_step, m->lm_loss,
                m->grad_norm, m->lr, m->semantic_tokens_per_second);
    }
}

int cmd_lm_train(int argc, char **argv) {
    train_flags f = {.model = "gpt", .norm = "LayerNorm", .act = "gelu", .reduce = "mean", .decay_style = "cosine",
                     .precision = "fp32", .fp8_recipe = "delayed", .layers = 4, .hidden = 128, .heads = 4, .train_steps = 200,
                     .micro = 8, .global = 8, .log_interval = 10, .lr = 1e-3f, .min_lr = 1e-4f, .wd = 0.01f, .beta1 = 0.9f,
                     .beta2 = 0.999f, .eps = 1e-8f, .clip = 1.0f, .spike_decay = 0.25f, .spike_amp = 1.0f, .seed = 1234,
                     .decay_steps = -1, .tp = 1, .pp = 1, .cp = 1, .objective = "throughput", .mem_fraction = "0.9"};
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
        {"--tensor-parallel-size", OPT_INT, &f.tp, "TP (default: the planner's choice, see --objective)", NULL, 0},
        {"--pipeline-parallel-size", OPT_INT, &f.pp, "PP (default: the planner's choice); DP = processes / (TP PP)", NULL, 0},
        {"--context-parallel-size", OPT_INT, &f.cp, "CP: ranks sharing each sequence (2*CP chunks; TP = PP = 1; default 1)", NULL, 0},
        {"--sequence-parallel", OPT_FLAG, &f.sp, "sequence parallel (TP > 1)", NULL, 0},
        {"--device-memory-gib", OPT_STRING, &f.device_mem, "planner: memory per process (default: this machine's)", NULL, 0},
        {"--objective", OPT_STRING, &f.objective, "planner: throughput (default) | memory", NULL, 0},
        {"--memory-fraction", OPT_STRING, &f.mem_fraction, "planner: usable fraction in (0, 1] (default 0.9)", NULL, 0},
        {"--device", OPT_STRING, &f.device, "cpu (default) | cuda | cuda:N: where the model trains (data parallel; TP = PP = CP = 1)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn lm train --data DIR --output DIR [options]", "Train gpt or spikelm on a token dataset.", t, n);
        return 0;
    }
    snn_status st;
    if ((st = snn_comm_init_world(&g_world)) != SNN_OK) die_status(st, "starting the communicator");
    args_die_hook = fail_hook;
    {
        /* N copies of a one-process run would each train alone and overwrite one output */
        const char *np = getenv("OMPI_COMM_WORLD_SIZE");
        if (!np) np = getenv("PMI_SIZE");
        if (np && strcmp(np, "1") && snn_comm_size(g_world) == 1)
            die_usage("lm train: started by an MPI launcher with %s processes, but this snn was built without MPI", np);
    }
    args_parse("lm train", t, n, argc, argv, 3);
    /* a build without CUDA, a bad name: exit 2 before any file is read */
    const int on_gpu = device_parse("lm train", f.device) >= 0;
    char devname[32] = "cpu";
    if (on_gpu) device_for_rank(f.device, g_world, devname, sizeof devname);
    snn_lm_training_config c;
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
    snn_token_dataset *train = NULL;
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
    snn_token_dataset_free(train);
    {
        snn_lm_transformer_config *tc = &c.model.transformer;
        int given = find(t, n, "--tensor-parallel-size") || find(t, n, "--pipeline-parallel-size") ||
                    find(t, n, "--context-parallel-size") || tc->tensor_model_parallel_size != 1 ||
                    tc->pipeline_model_parallel_size != 1 || tc->context_parallel_size != 1;
        if (on_gpu && (tc->tensor_model_parallel_size != 1 || tc->pipeline_model_parallel_size != 1 ||
                       tc->context_parallel_size != 1))
            die_usage("lm train: --device %s trains with tensor, pipeline and context parallel sizes 1 in this version "
                      "(got %d, %d, %d)",
                      f.device, tc->tensor_model_parallel_size, tc->pipeline_model_parallel_size,
                      tc->context_parallel_size);
        if (!given && !on_gpu) plan_topology(&f, &c, snn_comm_size(g_world));
        else if ((find(t, n, "--device-memory-gib") || find(t, n, "--objective") || find(t, n, "--memory-fraction")) &&
                 snn_comm_rank(g_world) == 0)
            fprintf(stderr, "snn lm train: the topology is given; --device-memory-gib, --objective and "
                            "--memory-fraction are not used\n");
        /* the stage's messages are in the parameters' dtype (the only pipeline_dtype allowed) */
        if (tc->pipeline_model_parallel_size > 1 && tc->pipeline_dtype == SNN_LM_DTYPE_UNSET)
            tc->pipeline_dtype = tc->params_dtype;
        snn_status vs = snn_lm_training_config_validate(&c);
        if (vs != SNN_OK) die_status(SNN_E_INVALID, "lm train");
    }
    setup_point();

    snn_lm_trainer *tr;
    if ((st = snn_lm_trainer_create_on(&c, g_world, devname, &tr)) != SNN_OK) die_agreed(st, "lm train");
    args_die_hook = NULL;
    const snn_lm_train_info *in = snn_lm_trainer_info(tr);
    if (in->rank == 0 && g_plan_note[0]) fputs(g_plan_note, stderr);
    if (in->rank == 0)
        fprintf(stderr,
                "snn lm train: %s, %zu parameters, T %d, S %d, vocab %d, global %lld (micro %lld x %lld microbatches x DP %d, CP %d), "
                "%lld steps, %s, TP %d, PP %d%s, optimizer state %zu of %zu bytes per rank, on %s\n",
                in->spiking ? "spikelm" : "gpt", in->parameters, in->time_steps, in->seq_len, in->vocab,
                (long long)c.global_batch_size, (long long)c.micro_batch_size, (long long)in->num_microbatches,
                in->data_parallel_size, c.model.transformer.context_parallel_size, (long long)c.train_steps, in->precision,
                c.model.transformer.tensor_model_parallel_size, c.model.transformer.pipeline_model_parallel_size,
                c.model.transformer.sequence_parallel ? " SP" : "", in->optimizer_state_bytes,
                in->optimizer_state_bytes_full, on_gpu ? f.device : "cpu");
    if ((st = snn_lm_trainer_run(tr, on_event, NULL)) != SNN_OK) die_agreed(st, "lm train");
    snn_lm_trainer_free(tr);
    fflush(stdout);
    snn_comm_free(g_world);
    return 0;
}
