/* snn lm: language models. Subcommands train (cmd_lm_train.c), eval, generate, export
 * (cmd_lm_export.c) and prepare-data (cmd_lm_data.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cmds.h"
#include "common.h"
#include "dist_cli.h"
#include "lm_tool.h"
#include "snn/lm_dist.h"
#include "snn/dtype.h"
#include "snn/tokenizer.h"

int snn_cmd_lm_prepare_data(int argc, char **argv);
int snn_cmd_lm_plan(int argc, char **argv);

static void lm_usage(FILE *f) {
    fprintf(f, "usage: snn lm <command> [options]\n\n"
               "commands:\n"
               "  prepare-data TEXT OUT --seq-len S   tokenise text into train/valid/test.npy\n"
               "  train      train gpt or spikelm on a token dataset\n"
               "  eval       lm_loss and perplexity of a checkpoint on a split\n"
               "  generate   cached greedy or sampled generation from a checkpoint\n"
               "  export     BF16 safetensors artifact (Hugging Face GPT-2 layout for gpt)\n"
               "  plan       choose TP / PP / CP and the memory policy for W devices of M GiB\n"
               "\nsnn lm <command> --help shows its options.\n");
}

long long lm_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru)) return 0;
    return (long long)ru.ru_maxrss * 1024;
}

long long lm_parse_size(const char *s) {
    char *end;
    if (!s || !*s) return -1;
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v)) return -1;
    double mul = 1;
    if (!strcmp(end, "") || !strcmp(end, "B")) mul = 1;
    else if (!strcmp(end, "KB")) mul = 1e3;
    else if (!strcmp(end, "MB")) mul = 1e6;
    else if (!strcmp(end, "GB")) mul = 1e9;
    else if (!strcmp(end, "KiB")) mul = 1024.0;
    else if (!strcmp(end, "MiB")) mul = 1024.0 * 1024;
    else if (!strcmp(end, "GiB")) mul = 1024.0 * 1024 * 1024;
    else return -1;
    v *= mul;
    if (v < 1 || v > 9e18 || v != floor(v)) return -1;
    return (long long)v;
}

void lm_tile(const int32_t *ids, int T, int N, int S, float *x) {
    size_t ns = (size_t)N * S;
    for (int t = 0; t < T; t++)
        for (size_t i = 0; i < ns; i++) x[(size_t)t * ns + i] = (float)ids[i];
}

void lm_round_params_bf16(snn_model *m) {
    float *p = snn_model_params(m);
    for (size_t i = 0; i < snn_model_num_params(m); i++) p[i] = snn_bf16_to_f32(snn_f32_to_bf16(p[i]));
}

int lm_eval_buffers(lm_eval_buf *b, int T, int micro, int S) {
    return snn_lm_eval_scratch_create(T, micro, S, &b->s) == SNN_OK;
}

void lm_eval_buffers_free(lm_eval_buf *b) { snn_lm_eval_scratch_free(b->s); }

snn_status lm_evaluate(snn_model *m, const snn_gpt_opts *o, const snn_token_dataset *ds, int micro,
                       int64_t first, int64_t count, lm_eval_buf *b, double *loss_sum, double *tokens) {
    return snn_lm_evaluate(m, o, ds, micro, first, count, b->s, loss_sum, tokens);
}

void lm_load(const char *path, lm_loaded *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (stat(path, &sb)) die_usage("checkpoint %s does not exist", path);
    if (S_ISDIR(sb.st_mode)) snprintf(out->path, sizeof out->path, "%s/%s", path, LM_CKPT_FILE);
    else snprintf(out->path, sizeof out->path, "%s", path);
    snn_status st = snn_model_load(out->path, 0, &out->m, &out->ck);
    if (st != SNN_OK) die_status(st == SNN_E_IO ? SNN_E_INVALID : st, "opening the checkpoint");
    const char *cfg = snn_ckpt_metadata(out->ck, "lm_training_config");
    const char *step = snn_ckpt_metadata(out->ck, "optimizer_step");
    if (!cfg || !step) die_usage("%s is not a checkpoint of snn lm train (no lm_training_config)", out->path);
    if ((st = snn_lm_training_config_from_json(cfg, &out->cfg)) != SNN_OK) die_status(st, "reading the checkpoint's training config");
    if ((st = snn_gpt_opts_of(out->m, &out->o)) != SNN_OK) die_status(st, "reading the checkpoint's model");
    out->step = atol(step);
}

void lm_loaded_free(lm_loaded *l) {
    snn_model_free(l->m);
    snn_ckpt_close(l->ck);
}

static const char *positional(int argc, char **argv, int *first) {
    if (*first < argc && strncmp(argv[*first], "--", 2)) return argv[(*first)++];
    return NULL;
}

/* ---- eval ---- */
static int lm_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL, *split = "valid", *dump = NULL, *device = NULL;
    int micro = 0, round_bf16 = 0, dump_rows = 4, warmup = 0, tp = 1, pp = 1, sp = 0, K = 1;
    long max_samples = 0;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "step_XXXXXXX directory of snn lm train (or give it first)", NULL, 0},
        {"--data", OPT_STRING, &data, "token dataset directory (default: the training data)", NULL, 0},
        {"--split", OPT_STRING, &split, "valid | test | train (default valid)", NULL, 0},
        {"--micro-batch-size", OPT_INT, &micro, "samples per forward (default: the training micro batch)", NULL, 0},
        {"--max-samples", OPT_LONG, &max_samples, "evaluate only the first N samples (default: the whole split)", NULL, 0},
        {"--timing-warmup-batches", OPT_INT, &warmup, "untimed batches first (default 0)", NULL, 0},
        {"--round-bf16", OPT_FLAG, &round_bf16, "round the parameters to BF16 first (the values of an export)", NULL, 0},
        {"--dump", OPT_STRING, &dump, "write input_ids and T-reduced logits of the first rows to this safetensors file", NULL, 0},
        {"--dump-rows", OPT_INT, &dump_rows, "rows in --dump (default 4)", NULL, 0},
        opt_num("--tensor-parallel-size", OPT_INT, &tp, "ranks per tensor-parallel group (1)", NULL, 1, 1 << 16),
        opt_num("--pipeline-parallel-size", OPT_INT, &pp, "pipeline stages (1)", NULL, 1, 1 << 16),
        opt_num("--pipeline-microbatches", OPT_INT, &K, "microbatches per pipeline pass (1)", NULL, 1, 1 << 20),
        {"--sequence-parallel", OPT_FLAG, &sp, "norms and the spiking transition on sequence shards (TP > 1)", NULL, 0},
        {"--device", OPT_STRING, &device, "cpu (default) | cuda | cuda:N: where the forward runs (TP = PP = 1)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]), first = 3;
    if (args_wants_help(argc, argv, 3)) {
        args_help("[mpirun -np N] snn lm eval CHECKPOINT [options]",
                  "Per-token loss and perplexity of a checkpoint (data parallel under mpirun: each rank\n"
                  "evaluates a contiguous slice of the samples, the sums are reduced).", t, n);
        return 0;
    }
    snn_comm *world = dist_cli_start();
    const int DP = snn_comm_size(world), rank = snn_comm_rank(world);
    const char *pos = positional(argc, argv, &first);
    args_parse("lm eval", t, n, argc, argv, first);
    const int on_gpu = device_parse("lm eval", device) >= 0;
    if (on_gpu && tp * pp > 1)
        die_usage("lm eval: --device %s evaluates the whole model on each rank (tensor and pipeline parallel sizes 1; got "
                  "%d, %d)",
                  device, tp, pp);
    if (pos && ckpt) die_usage("lm eval: give the checkpoint once");
    if (pos) ckpt = pos;
    if (!ckpt) die_usage("lm eval: a checkpoint is required");
    if (strcmp(split, "valid") && strcmp(split, "test") && strcmp(split, "train"))
        die_usage("lm eval: --split must be valid, test or train (got '%s')", split);
    if (micro < 0 || max_samples < 0 || warmup < 0 || dump_rows <= 0)
        die_usage("lm eval: --micro-batch-size, --max-samples, --timing-warmup-batches must be >= 0 and --dump-rows > 0");
    lm_loaded L;
    lm_load(ckpt, &L);
    if (!data) data = L.cfg.dataset_kwargs.path;
    if (!micro) micro = (int)L.cfg.micro_batch_size;
    snn_token_dataset *ds;
    snn_status st = snn_token_dataset_open(data, split, L.o.vocab, &ds);
    if (st != SNN_OK) die_status(SNN_E_INVALID, "opening the evaluation data");
    if (snn_token_dataset_seq_len(ds) != L.o.seq)
        die_usage("lm eval: %s/%s.npy has sequences of %lld tokens, the model was trained on %d", data, split,
                  (long long)snn_token_dataset_seq_len(ds), L.o.seq);
    if (round_bf16) lm_round_params_bf16(L.m);
    /* the weights are loaded (and rounded) on the host, then placed; the forward hands back
     * its host copy of the logits, and the loss is computed on the host as on the CPU */
    if (on_gpu && (st = snn_model_to(L.m, device)) != SNN_OK) die_status(st, "placing the model");
    const int T = L.o.time_steps, S = L.o.seq;
    if ((st = snn_model_plan(L.m, T, micro)) != SNN_OK) die_status(st, "planning the model");
    lm_eval_buf b;
    if (!lm_eval_buffers(&b, T, micro, S)) die_status(SNN_E_NOMEM, "allocating the evaluation buffers");
    int64_t count = snn_token_dataset_rows(ds);
    if (max_samples && max_samples < count) count = max_samples;
    /* data parallel: rank r takes the contiguous slice [r*per, (r+1)*per) */
    const int64_t per = (count + DP - 1) / DP;
    const int64_t lo = (int64_t)rank * per < count ? (int64_t)rank * per : count;
    const int64_t mine = lo + per < count ? per : count - lo;
    if (tp * pp > 1) {
        if (DP % (tp * pp))
            die_usage("lm eval: %d ranks are not divisible by tensor_parallel_size %d x pipeline_parallel_size %d", DP,
                      tp, pp);
        long long unit = (long long)(DP / (tp * pp)) * micro * K;
        if (count % unit)
            die_usage("lm eval: %lld samples are not a multiple of data_parallel_size %d x micro_batch_size %d x "
                      "pipeline_microbatches %d (tensor/pipeline-parallel evaluation pads nothing: use --max-samples)",
                      (long long)count, DP / (tp * pp), micro, K);
    }
    dist_cli_setup_point();
    dist_cli_running();
    double ls = 0, cn = 0;
    if (warmup > 0 && (st = lm_evaluate(L.m, &L.o, ds, micro, lo, (int64_t)warmup * micro, &b, &ls, &cn)) != SNN_OK)
        die_status(st, "evaluating");
    double t0 = now_seconds();
    ls = cn = 0;
    const int parallel = tp * pp > 1;
    if (parallel) { /* the stage layout: the totals are already the world's (counted once below) */
        if ((st = snn_lm_evaluate_parallel(world, L.m, &L.o, tp, pp, sp, K, ds, micro, 0, count, &ls, &cn)) != SNN_OK)
            die_status(st, "evaluating");
        if (rank != 0) ls = cn = 0;
    } else if (mine > 0 && (st = lm_evaluate(L.m, &L.o, ds, micro, lo, mine, &b, &ls, &cn)) != SNN_OK) {
        die_status(st, "evaluating");
    }
    double secs = now_seconds() - t0;
    double sums[2] = {ls, cn}, mx[2] = {secs, (double)lm_peak_rss()}, tot_rss = mx[1];
    if ((st = snn_comm_allreduce(world, sums, 2, SNN_COMM_F64, SNN_COMM_SUM)) != SNN_OK ||
        (st = snn_comm_allreduce(world, mx, 2, SNN_COMM_F64, SNN_COMM_MAX)) != SNN_OK ||
        (st = snn_comm_allreduce(world, &tot_rss, 1, SNN_COMM_F64, SNN_COMM_SUM)) != SNN_OK)
        die_status(st, "reducing the evaluation");
    ls = sums[0], cn = sums[1], secs = mx[0];
    if (!(cn > 0)) die_usage("lm eval: no tokens to evaluate");
    double loss = ls / cn, ppl = exp(loss);
    if (dump && rank == 0) {
        int rows = dump_rows < count ? dump_rows : (int)count;
        if ((st = snn_model_plan(L.m, T, rows)) != SNN_OK) die_status(st, "planning the model");
        int64_t *idx = malloc((size_t)rows * sizeof *idx);
        int32_t *ids = malloc((size_t)rows * S * 4), *lab = malloc((size_t)rows * S * 4);
        float *x = malloc((size_t)T * rows * S * sizeof(float)), *z = malloc((size_t)rows * S * L.o.vocab * sizeof(float));
        if (!idx || !ids || !lab || !x || !z) die_status(SNN_E_NOMEM, "allocating the dump");
        for (int i = 0; i < rows; i++) idx[i] = i;
        if ((st = snn_token_dataset_batch(ds, idx, rows, ids, lab)) != SNN_OK) die_status(st, "reading the data");
        lm_tile(ids, T, rows, S, x);
        const float *y;
        if ((st = snn_model_forward(L.m, x, 0, &y)) != SNN_OK) die_status(st, "running the model");
        size_t nz = (size_t)rows * S * L.o.vocab;
        for (size_t i = 0; i < nz; i++) {
            float a = 0;
            for (int tt = 0; tt < T; tt++) a += y[(size_t)tt * nz + i];
            z[i] = L.o.reduce_sum ? a : a / (float)T;
        }
        snn_ckpt_writer *w;
        int64_t s1[2] = {rows, S}, s2[3] = {rows, S, L.o.vocab};
        st = snn_ckpt_writer_begin(&w);
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "input_ids", SNN_CKPT_I32, 2, s1, ids);
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "logits", SNN_CKPT_F32, 3, s2, z);
        if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "round_bf16", round_bf16 ? "1" : "0");
        if (st == SNN_OK) st = snn_ckpt_writer_commit(w, dump);
        if (st != SNN_OK) die_status(st, "writing the dump");
        snn_ckpt_writer_free(w);
        free(idx), free(ids), free(lab), free(x), free(z);
    }
    if (rank == 0)
        printf("{\"lm_loss\":%.9g,\"perplexity\":%.9g,\"valid_tokens\":%.0f,\"evaluation_seconds\":%.6g,"
               "\"semantic_tokens_per_second\":%.6g,\"neural_steps_per_second\":%.6g,\"peak_memory_bytes\":%.0f,"
               "\"total_peak_memory_bytes\":%.0f,\"micro_batch_size\":%d,\"pipeline_microbatches\":%d,"
               "\"local_batch_size\":%d,\"data_parallel_size\":%d,\"tensor_parallel_size\":%d,"
               "\"pipeline_parallel_size\":%d,\"context_parallel_size\":1,\"split\":\"%s\",\"checkpoint_step\":%ld}\n",
               loss, isfinite(ppl) ? ppl : INFINITY, cn, secs, cn / secs, cn * T / secs, mx[1], tot_rss, micro,
               K, micro * K, DP / (tp * pp), tp, pp, split, L.step);
    lm_eval_buffers_free(&b);
    snn_token_dataset_free(ds);
    lm_loaded_free(&L);
    fflush(stdout);
    if (snn_comm_agree(world, SNN_OK) != SNN_OK) dist_cli_exit(1, -1, NULL);
    snn_comm_free(world);
    return 0;
}

/* ---- generate ---- */
static int32_t *parse_ids(const char *s, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    const char *p = s;
    while (v && *p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > 0x7fffffff) die_usage("--prompt-ids: '%s' is not a comma-separated list of ids", s);
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
        if (*p == ',') p++;
        else if (*p) die_usage("--prompt-ids: '%s' is not a comma-separated list of ids", s);
    }
    if (!v) die_status(SNN_E_NOMEM, "parsing the prompt");
    *n = k;
    return v;
}

static int lm_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *prompt_ids = NULL, *tok_path = NULL, *out_path = NULL, *device = NULL;
    int max_new = 32, top_k = -1, round_bf16 = 0, batch = 1, tp = 1, pp = 1;
    long eos = -2;
    float temperature = 0.0f, top_p = 1.0f;
    uint64_t seed = 1234;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "step_XXXXXXX directory of snn lm train (or give it first)", NULL, 0},
        {"--prompt", OPT_STRING, &prompt, "prompt text (encoded with the tokenizer)", NULL, 0},
        {"--prompt-ids", OPT_STRING, &prompt_ids, "prompt as comma-separated token ids; rows separated by ';'", NULL, 0},
        {"--tokenizer", OPT_STRING, &tok_path, "tokenizer.json (default: the training data's)", NULL, 0},
        {"--max-new-tokens", OPT_INT, &max_new, "tokens to generate (default 32)", NULL, 0},
        {"--eos", OPT_LONG, &eos, "EOS id (default: the tokenizer's, else none; -1 = none)", "--eos-token-id", 0},
        opt_num("--temperature", OPT_FLOAT, &temperature, "0 = greedy (default)", NULL, 0, 1e6),
        {"--top-k", OPT_INT, &top_k, "-1 = off (default)", NULL, 0},
        {"--top-p", OPT_FLOAT, &top_p, "nucleus mass in (0, 1] (default 1)", NULL, 0},
        {"--seed", OPT_U64, &seed, "sampling seed (default 1234)", NULL, 0},
        {"--batch", OPT_INT, &batch, "copies of a text prompt to decode together (default 1)", NULL, 0},
        {"--round-bf16", OPT_FLAG, &round_bf16, "round the parameters to BF16 first (the values of an export)", NULL, 0},
        {"--out", OPT_STRING, &out_path, "also write the tokens [B, P+new] (I32) to this safetensors file", NULL, 0},
        opt_num("--tensor-parallel-size", OPT_INT, &tp, "ranks per tensor-parallel group (1)", NULL, 1, 1 << 16),
        opt_num("--pipeline-parallel-size", OPT_INT, &pp, "pipeline stages (1)", NULL, 1, 1 << 16),
        {"--device", OPT_STRING, &device, "cpu (default) | cuda | cuda:N: where the decoding and its KV cache run (TP = PP = 1)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]), first = 3;
    if (args_wants_help(argc, argv, 3)) {
        args_help("[mpirun -np N] snn lm generate CHECKPOINT (--prompt TEXT | --prompt-ids IDS) [options]",
                  "Cached generation: prefill, then one decode step per token (data parallel under mpirun:\n"
                  "each rank decodes a contiguous slice of the prompt rows; rank 0 prints them in order).", t, n);
        return 0;
    }
    snn_comm *world = dist_cli_start();
    const int DP = snn_comm_size(world), rank = snn_comm_rank(world);
    const char *pos = positional(argc, argv, &first);
    args_parse("lm generate", t, n, argc, argv, first);
    if (pos) ckpt = pos;
    const int on_gpu = device_parse("lm generate", device) >= 0;
    if (on_gpu && tp * pp > 1)
        die_usage("lm generate: --device %s decodes the whole model on each rank (tensor and pipeline parallel sizes "
                  "1; got %d and %d)",
                  device, tp, pp);
    if (!ckpt) die_usage("lm generate: a checkpoint is required");
    if (!prompt == !prompt_ids) die_usage("lm generate: give exactly one of --prompt and --prompt-ids");
    if (max_new <= 0) die_usage("lm generate: --max-new-tokens must be positive (got %d)", max_new);
    if (batch <= 0 || batch > 4096) die_usage("lm generate: --batch must be in 1..4096");
    if (!(temperature >= 0) || !isfinite(temperature)) die_usage("lm generate: --temperature must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) die_usage("lm generate: --top-p must be in (0, 1]");
    if (top_k == 0 || top_k < -1) die_usage("lm generate: --top-k must be -1 or positive");
    lm_loaded L;
    lm_load(ckpt, &L);
    snn_tokenizer *tok = NULL;
    char tpath[4200];
    if (!tok_path) {
        snprintf(tpath, sizeof tpath, "%s/tokenizer.json", L.cfg.dataset_kwargs.path);
        struct stat sb;
        if (!stat(tpath, &sb)) tok_path = tpath;
    }
    if (tok_path && snn_tokenizer_load(tok_path, &tok) != SNN_OK) die_status(SNN_E_INVALID, "loading the tokenizer");
    if (tok && snn_tokenizer_vocab_size(tok) != L.o.vocab)
        die_usage("lm generate: the tokenizer has %d ids, the model %d", snn_tokenizer_vocab_size(tok), L.o.vocab);
    int32_t *pr;
    int B = 1, P = 0;
    if (prompt) {
        if (!tok) die_usage("lm generate: --prompt needs a tokenizer (--tokenizer or the data's tokenizer.json)");
        int32_t *ids;
        size_t cnt;
        if (snn_tokenizer_encode(tok, (const uint8_t *)prompt, strlen(prompt), &ids, &cnt) != SNN_OK)
            die_status(SNN_E_INVALID, "encoding the prompt");
        if (cnt == 0) die_usage("lm generate: the prompt is empty");
        B = batch;
        P = (int)cnt;
        pr = malloc((size_t)B * P * sizeof *pr);
        if (!pr) die_status(SNN_E_NOMEM, "allocating");
        for (int b = 0; b < B; b++) memcpy(pr + (size_t)b * P, ids, (size_t)P * sizeof *pr);
        free(ids);
    } else {
        /* rows separated by ';', all of one length */
        char *copy = strdup(prompt_ids), *save = NULL;
        pr = NULL;
        B = 0;
        for (char *row = strtok_r(copy, ";", &save); row; row = strtok_r(NULL, ";", &save)) {
            int k;
            int32_t *v = parse_ids(row, &k);
            if (B && k != P) die_usage("lm generate: --prompt-ids rows must have the same length");
            P = k;
            int32_t *np = realloc(pr, (size_t)(B + 1) * P * sizeof *pr);
            if (!np) die_status(SNN_E_NOMEM, "allocating");
            pr = np;
            memcpy(pr + (size_t)B * P, v, (size_t)P * sizeof *pr);
            B++;
            free(v);
        }
        free(copy);
        if (!B || !P) die_usage("lm generate: --prompt-ids is empty");
    }
    if (eos == -2) eos = tok ? snn_tokenizer_eos_id(tok) : -1;
    if (eos < -1 || eos >= L.o.vocab) die_usage("lm generate: --eos %ld is not in the vocabulary [0, %d)", eos, L.o.vocab);
    if ((long)P + max_new > L.o.context)
        die_usage("lm generate: prompt (%d tokens) + max_new_tokens (%d) exceed the context of %d", P, max_new, L.o.context);
    if (round_bf16) lm_round_params_bf16(L.m);
    snn_status st = on_gpu ? snn_model_to(L.m, device) : SNN_OK;
    if (st != SNN_OK) die_status(st, "placing the model");
    const size_t rowlen = (size_t)(P + max_new);
    int32_t *out = malloc((size_t)B * rowlen * sizeof *out);
    if (!out) die_status(SNN_E_NOMEM, "allocating");
    /* data parallel: rank r decodes the rows [r*per, (r+1)*per), each from its own sampling
     * stream (first_row), so the tokens do not depend on the number of ranks */
    const int per = (B + DP - 1) / DP, lo = rank * per < B ? rank * per : B, mine = lo + per < B ? per : B - lo;
    snn_lm_sampling s = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed, .eos = (int)eos,
                         .first_row = lo};
    if (tp * pp > 1 && DP % (tp * pp))
        die_usage("lm generate: %d ranks are not divisible by tensor_parallel_size %d x pipeline_parallel_size %d",
                  DP, tp, pp);
    dist_cli_setup_point();
    dist_cli_running();
    double t0 = now_seconds();
    if (tp * pp > 1) { /* model parallel: the library slices the rows over DP and gathers them */
        s.first_row = 0;
        st = snn_lm_generate_parallel(world, L.m, &L.o, tp, pp, pr, B, P, max_new, &s, out);
    } else {
        st = mine > 0 ? snn_gpt_generate(L.m, pr + (size_t)lo * P, mine, P, max_new, &s, out + (size_t)lo * rowlen)
                      : SNN_OK;
    }
    double secs = now_seconds() - t0;
    if (st != SNN_OK) die_status(st == SNN_E_INVALID ? SNN_E_INVALID : st, "generating");
    for (int d = 1; tp * pp == 1 && d < DP; d++) { /* rank 0 gathers the slices */
        int dlo = d * per < B ? d * per : B, dn = dlo + per < B ? per : B - dlo;
        if (dn <= 0) continue;
        size_t cnt = (size_t)dn * rowlen;
        if (rank == 0) st = snn_comm_recv(world, out + (size_t)dlo * rowlen, cnt, SNN_COMM_I32, d, 72);
        else if (rank == d) st = snn_comm_send(world, out + (size_t)lo * rowlen, cnt, SNN_COMM_I32, 0, 72);
        if (st != SNN_OK) die_status(st, "gathering the generated rows");
    }
    if ((st = snn_comm_allreduce(world, &secs, 1, SNN_COMM_F64, SNN_COMM_MAX)) != SNN_OK)
        die_status(st, "reducing the timing");
    for (int b = 0; rank == 0 && b < B; b++) {
        const int32_t *row = out + (size_t)b * (P + max_new);
        printf("{\"row\":%d,\"prompt_tokens\":%d,\"tokens\":[", b, P);
        for (int i = 0; i < P + max_new; i++) printf("%s%d", i ? "," : "", row[i]);
        printf("]");
        if (tok) {
            uint8_t *text;
            size_t len;
            if (snn_tokenizer_decode(tok, row, (size_t)(P + max_new), &text, &len) == SNN_OK) {
                printf(",\"text\":\"");
                for (size_t i = 0; i < len; i++) {
                    unsigned c = text[i];
                    if (c == '"' || c == '\\') printf("\\%c", c);
                    else if (c < 0x20) printf("\\u%04x", c);
                    else putchar((int)c);
                }
                printf("\"");
                free(text);
            }
        }
        printf("}\n");
    }
    if (rank == 0)
        fprintf(stderr, "snn lm generate: %d x %d new tokens in %.3f s (%.1f tokens/s, prefill included, %d rank%s)\n",
                B, max_new, secs, B * max_new / secs, DP, DP > 1 ? "s" : "");
    if (out_path && rank == 0) {
        snn_ckpt_writer *w;
        int64_t sh[2] = {B, P + max_new};
        st = snn_ckpt_writer_begin(&w);
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "tokens", SNN_CKPT_I32, 2, sh, out);
        if (st == SNN_OK) st = snn_ckpt_writer_commit(w, out_path);
        if (st != SNN_OK) die_status(st, "writing --out");
        snn_ckpt_writer_free(w);
    }
    free(out);
    free(pr);
    snn_tokenizer_free(tok);
    lm_loaded_free(&L);
    fflush(stdout);
    if (snn_comm_agree(world, SNN_OK) != SNN_OK) dist_cli_exit(1, -1, NULL);
    snn_comm_free(world);
    return 0;
}

int cmd_lm(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h") || !strcmp(argv[2], "help")) {
        lm_usage(argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    const char *c = argv[2];
    if (!strcmp(c, "train")) return cmd_lm_train(argc, argv);
    if (!strcmp(c, "eval")) return lm_eval(argc, argv);
    if (!strcmp(c, "generate")) return lm_generate(argc, argv);
    if (!strcmp(c, "export")) return cmd_lm_export(argc, argv);
    if (!strcmp(c, "prepare-data")) return snn_cmd_lm_prepare_data(argc, argv);
    if (!strcmp(c, "plan")) return snn_cmd_lm_plan(argc, argv);
    die_usage("unknown lm command '%s' (try snn lm --help)", c);
}
