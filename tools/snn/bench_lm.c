/* snn bench lm: language-model training and cached decoding throughput, on the code path
 * `snn lm train` and `snn lm generate` run (snn_lm_trainer_create_on, snn_lm_trainer_step,
 * snn_gpt_generate), on random tokens written to a temporary token dataset.
 *
 * Training: warm-up steps untimed, then --trials blocks of --steps optimizer steps, each
 * timed as a whole (every step ends with the loss on the host, so the device is idle at
 * the block's end). tokens/s = steps * global_batch * S / seconds (semantic tokens; the
 * T-folded work is T times that). Model FLOPs per semantic token, training, as in PaLM's
 * appendix B (forward GEMMs 2 * weights, attention 4 * S * hidden per layer counted as full
 * (not causal) attention, backward twice the forward), times T for spikelm:
 *   6 * (L * (h * qkv + h * h + h * f_in + f * h) + h * V) + 12 * L * S * h,
 * qkv = (heads + 2 groups) * head_dim, f_in = ffn (2 ffn for swiglu). MFU = FLOP/s over
 * --peak-tflops (default on cuda: 989, the H200's dense BF16 tensor-core figure from
 * NVIDIA's data sheet; on cpu none).
 *
 * Decoding (after the training blocks, the trained weights): snn_gpt_generate_timed greedy
 * from random prompts of --prompt-len tokens, --decode-tokens new tokens, at each
 * --decode-batch size; the median over the trials of its prefill time and of its decode
 * time per step (a forward of one position per row and the picks). The floor of a step is reading every weight once (FP32:
 * generation decodes with an FP32 copy of the parameters) and the KV cache at the average
 * context, at --memory-bandwidth-gbs (default on cuda: 4800, the H200's HBM3e figure from
 * NVIDIA's data sheet). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cmds.h"
#include "snn/comm.h"
#include "snn/lm.h"
#include "snn/lm_train.h"
#include "snn/rng.h"
#include "snn/tokens.h"

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void write_tokens(const char *dir, const char *split, int rows, int S, int V, uint64_t seed, int stream) {
    int32_t *d = malloc(sizeof(int32_t) * (size_t)rows * (size_t)(S + 1));
    if (!d) die_usage("bench lm: out of memory for %d x %d tokens", rows, S + 1);
    for (size_t i = 0; i < (size_t)rows * (size_t)(S + 1); i++) {
        int v = (int)(snn_rng_uniform(seed, (uint64_t)stream, i) * (float)V);
        d[i] = v < V ? v : V - 1;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/%s.npy", dir, split);
    snn_status st = snn_npy_write(p, SNN_NPY_INT32, rows, S + 1, d);
    free(d);
    if (st != SNN_OK) die_status(st, "writing the benchmark's token data");
}

static void rm_rf(const char *dir) {
    char p[4200];
    const char *names[] = {"train.npy", "valid.npy", "test.npy"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/data/%s", dir, names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/data", dir);
    rmdir(p);
    rmdir(dir);
}

int bench_lm(int argc, char **argv) {
    const char *model = "gpt", *precision = "bf16", *device = NULL, *output = NULL;
    int layers = 12, hidden = 768, heads = 12, groups = 0, ffn = 0, vocab = 50257, seq = 1024, T = 0, micro = 8,
        global = 0, warmup = 2, steps = 5, trials = 3, prompt_len = 16, decode_tokens = 64;
    str_list dbatch = {0};
    float peak_tflops = -1.0f, bw_gbs = -1.0f;
    uint64_t seed = 20261202;
    opt t[] = {
        {"--model", OPT_STRING, &model, "gpt (default) | spikelm", NULL, 0},
        opt_num("--layers", OPT_INT, &layers, "transformer layers (default 12)", NULL, 1, 1024),
        opt_num("--hidden", OPT_INT, &hidden, "hidden size (default 768)", NULL, 1, 65536),
        opt_num("--heads", OPT_INT, &heads, "attention heads (default 12)", NULL, 1, 1024),
        opt_num("--query-groups", OPT_INT, &groups, "query groups (default: heads)", NULL, 0, 1024),
        opt_num("--ffn", OPT_INT, &ffn, "MLP width (default 4 x hidden)", NULL, 0, 1 << 20),
        opt_num("--vocab", OPT_INT, &vocab, "vocabulary (default 50257)", NULL, 2, 1 << 24),
        opt_num("--seq-len", OPT_INT, &seq, "sequence length (default 1024)", NULL, 2, 1 << 20),
        opt_num("--time-steps", OPT_INT, &T, "T (gpt 1; spikelm default 4)", "--T", 0, 1024),
        opt_num("--micro-batch-size", OPT_INT, &micro, "samples per microbatch (default 8)", NULL, 1, 1 << 16),
        opt_num("--global-batch-size", OPT_INT, &global, "samples per step (default: the microbatch)", NULL, 0, 1 << 20),
        {"--precision", OPT_STRING, &precision, "fp32 | bf16 (default) | fp16", NULL, 0},
        {"--device", OPT_STRING, &device, "cpu (default) | cuda | cuda:N", NULL, 0},
        opt_num("--warmup", OPT_INT, &warmup, "untimed training steps first (default 2)", NULL, 0, 100000),
        opt_num("--steps", OPT_INT, &steps, "timed training steps per trial (default 5)", NULL, 1, 100000),
        opt_num("--trials", OPT_INT, &trials, "timed blocks, median reported (default 3)", NULL, 1, 1000),
        opt_num("--prompt-len", OPT_INT, &prompt_len, "decode: prompt tokens (default 16)", NULL, 1, 1 << 20),
        opt_num("--decode-tokens", OPT_INT, &decode_tokens, "decode: new tokens (default 64; 0 = no decode bench)",
                NULL, 0, 1 << 20),
        {"--decode-batch", OPT_STRINGS, &dbatch, "decode batch sizes (default 1,32)", NULL, 0},
        opt_num("--peak-tflops", OPT_FLOAT, &peak_tflops, "peak for MFU (default cuda 989, cpu none)", NULL, 0, 1e9),
        opt_num("--memory-bandwidth-gbs", OPT_FLOAT, &bw_gbs, "decode floor bandwidth (default cuda 4800, cpu none)",
                NULL, 0, 1e9),
        {"--seed", OPT_U64, &seed, "data and model seed", NULL, 0},
        {"--output", OPT_STRING, &output, "JSON report path ('-' = stdout)", NULL, 0},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn bench lm [options]",
                  "Language-model training tokens/s and MFU, and cached decoding tokens/s against the\n"
                  "memory-bandwidth floor, through snn lm train's trainer and snn lm generate's decoder.",
                  t, n);
        return 0;
    }
    args_parse("bench lm", t, n, argc, argv, 3);
    cJSON *md = bench_metadata(argc, argv);
    const int spiking = !strcmp(model, "spikelm");
    if (!spiking && strcmp(model, "gpt")) die_usage("bench lm: --model must be gpt or spikelm (got '%s')", model);
    if (!T) T = spiking ? 4 : 1;
    if (!spiking && T != 1) die_usage("bench lm: gpt has T = 1 (got --time-steps %d)", T);
    if (!groups) groups = heads;
    if (!global) global = micro;
    if (global % micro) die_usage("bench lm: --global-batch-size (%d) must be a multiple of --micro-batch-size (%d)",
                                  global, micro);
    if (hidden % heads || heads % groups)
        die_usage("bench lm: --hidden (%d) must divide by --heads (%d) and --heads by --query-groups (%d)", hidden,
                  heads, groups);
    int db[8], ndb = 2;
    db[0] = 1, db[1] = 32;
    if (dbatch.n) ndb = bench_int_list("--decode-batch", &dbatch, db, 8);
    if (decode_tokens == 1) die_usage("bench lm: --decode-tokens must be 0 (off) or at least 2");
    if (decode_tokens && (long)prompt_len + decode_tokens > seq)
        die_usage("bench lm: --prompt-len (%d) + --decode-tokens (%d) exceed --seq-len %d", prompt_len, decode_tokens,
                  seq);
    const int dev = bench_check_device("lm", device);
    char devname[32];
    bench_device_name(dev, devname, sizeof devname);
    if (dev >= 0) {
        bench_cuda_open(dev);
        bench_cuda_metadata(md, dev);
    }
    if (peak_tflops < 0) peak_tflops = dev >= 0 ? 989.0f : 0.0f;
    if (bw_gbs < 0) bw_gbs = dev >= 0 ? 4800.0f : 0.0f;

    snn_lm_training_config c = snn_lm_training_config_default(spiking ? SNN_LM_MODEL_SPIKELM : SNN_LM_MODEL_GPT);
    snn_lm_transformer_config *tc = &c.model.transformer;
    if (!strcmp(precision, "bf16") || !strcmp(precision, "fp16")) {
        const int bf = precision[0] == 'b';
        tc->bf16 = c.optimizer.bf16 = bf;
        tc->fp16 = c.optimizer.fp16 = !bf;
        tc->params_dtype = c.optimizer.params_dtype = bf ? SNN_LM_DTYPE_BFLOAT16 : SNN_LM_DTYPE_FLOAT16;
    } else if (strcmp(precision, "fp32")) {
        die_usage("bench lm: --precision must be fp32, bf16 or fp16 (got '%s')", precision);
    }
    c.model.vocab_size = vocab;
    c.model.max_sequence_length = seq;
    c.model.time_steps = T;
    c.model.share_embeddings_and_output_weights = 1;
    c.model.position_embedding_type = SNN_LM_POS_LEARNED_ABSOLUTE;
    tc->num_layers = layers;
    tc->hidden_size = hidden;
    tc->num_attention_heads = heads;
    tc->num_query_groups = groups;
    tc->ffn_hidden_size = ffn;
    tc->calculate_per_token_loss = 1;
    c.optimizer.use_distributed_optimizer = 1;
    c.optimizer.lr = 3e-4;
    c.optimizer.min_lr = 3e-5;
    c.sequence_length = seq;
    c.micro_batch_size = micro;
    c.global_batch_size = global;
    c.train_steps = warmup + (long)steps * trials + 1;
    c.log_interval = 1;
    c.seed = seed;
    char root[] = "/tmp/snn-bench-lm-XXXXXX";
    if (!mkdtemp(root)) die_usage("bench lm: cannot create a temporary directory for the token data: %s", strerror(errno));
    char data[4200];
    snprintf(data, sizeof data, "%s/data", root);
    if (mkdir(data, 0700)) die_usage("bench lm: cannot create %s: %s", data, strerror(errno));
    const int rows = global * 4 > 64 ? global * 4 : 64;
    write_tokens(data, "train", rows, seq, vocab, seed, 1);
    write_tokens(data, "valid", global, seq, vocab, seed, 2);
    snprintf(c.dataset_kwargs.path, sizeof c.dataset_kwargs.path, "%s", data);
    snn_status st = snn_lm_training_config_validate(&c);
    if (st != SNN_OK) {
        rm_rf(root);
        die_usage("bench lm: %s", snn_last_error());
    }
    snn_comm *self = NULL;
    if ((st = snn_comm_self(&self)) != SNN_OK) die_status(st, "bench lm: a one-process communicator");
    snn_lm_trainer *tr = NULL;
    if ((st = snn_lm_trainer_create_on(&c, self, dev >= 0 ? devname : "cpu", &tr)) != SNN_OK) {
        rm_rf(root);
        die_setup(st, "bench lm: creating the trainer");
    }
    rm_rf(root); /* the dataset is open (read into memory) */
    snn_model *m = snn_lm_trainer_model(tr);
    const snn_lm_train_info *info = snn_lm_trainer_info(tr);
    snn_gpt_opts o;
    if ((st = snn_gpt_opts_of(m, &o)) != SNN_OK) die_status(st, "bench lm");
    const double hd = (double)o.hidden / o.heads, h = o.hidden, f_in = o.act == SNN_LM_ACT_SWIGLU ? 2.0 * o.ffn : o.ffn;
    const double gemm_w = (double)o.layers * (h * (o.heads + 2.0 * o.groups) * hd + h * h + h * f_in + o.ffn * h) +
                          h * o.vocab;
    const double flops_tok = T * (6.0 * gemm_w + 12.0 * o.layers * (double)seq * h);

    snn_lm_step_metrics sm;
    double last_loss = NAN;
    for (int i = 0; i < warmup; i++) {
        if ((st = snn_lm_trainer_step(tr, &sm)) != SNN_OK) die_status(st, "bench lm: a warm-up step");
        last_loss = sm.lm_loss;
    }
    double *tps = malloc(sizeof(double) * (size_t)trials);
    if (!tps) die_usage("bench lm: out of memory");
    cJSON *jt = cJSON_CreateArray();
    for (int k = 0; k < trials; k++) {
        double t0 = wall();
        for (int i = 0; i < steps; i++) {
            if ((st = snn_lm_trainer_step(tr, &sm)) != SNN_OK) die_status(st, "bench lm: a training step");
            last_loss = sm.lm_loss;
        }
        double secs = wall() - t0;
        tps[k] = (double)steps * global * seq / secs;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "seconds", secs);
        cJSON_AddNumberToObject(e, "tokens_per_second", tps[k]);
        cJSON_AddNumberToObject(e, "lm_loss", last_loss);
        cJSON_AddItemToArray(jt, e);
        if (!isfinite(last_loss)) die_usage("bench lm: the training loss is not finite (%g)", last_loss);
    }
    const double tok_s = median(tps, trials), step_ms = 1e3 * global * (double)seq / tok_s;
    const double tflops = tok_s * flops_tok / 1e12;
    fprintf(stderr, "bench lm: %s %s %s L%d h%d S%d T%d b%d: %.0f tokens/s (%.1f ms/step), %.1f TFLOP/s model", model,
            precision, devname, layers, hidden, seq, T, global, tok_s, step_ms, tflops);
    if (peak_tflops > 0) fprintf(stderr, ", MFU %.1f %%", 100.0 * tflops / peak_tflops);
    fprintf(stderr, "\n");

    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "metadata", md);
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "workload", "lm");
    cJSON_AddStringToObject(cfg, "model", model);
    cJSON_AddStringToObject(cfg, "precision", info->precision);
    cJSON_AddStringToObject(cfg, "device", devname);
    cJSON_AddNumberToObject(cfg, "layers", layers);
    cJSON_AddNumberToObject(cfg, "hidden", hidden);
    cJSON_AddNumberToObject(cfg, "heads", heads);
    cJSON_AddNumberToObject(cfg, "query_groups", groups);
    cJSON_AddNumberToObject(cfg, "ffn", o.ffn);
    cJSON_AddNumberToObject(cfg, "vocab", vocab);
    cJSON_AddNumberToObject(cfg, "seq_len", seq);
    cJSON_AddNumberToObject(cfg, "time_steps", T);
    cJSON_AddNumberToObject(cfg, "micro_batch_size", micro);
    cJSON_AddNumberToObject(cfg, "global_batch_size", global);
    cJSON_AddNumberToObject(cfg, "parameters", (double)info->parameters);
    cJSON_AddNumberToObject(cfg, "warmup", warmup);
    cJSON_AddNumberToObject(cfg, "steps", steps);
    cJSON_AddNumberToObject(cfg, "trials", trials);
    cJSON_AddStringToObject(cfg, "optimizer", "AdamW (distributed optimizer at DP 1), clip 1.0");
    cJSON_AddItemToObject(doc, "config", cfg);
    cJSON *tj = cJSON_CreateObject();
    cJSON_AddItemToObject(tj, "trials", jt);
    cJSON_AddNumberToObject(tj, "tokens_per_second", tok_s);
    cJSON_AddNumberToObject(tj, "neural_tokens_per_second", tok_s * T);
    cJSON_AddNumberToObject(tj, "step_ms", step_ms);
    cJSON_AddNumberToObject(tj, "model_flops_per_token", flops_tok);
    cJSON_AddNumberToObject(tj, "model_tflops_per_second", tflops);
    if (peak_tflops > 0) {
        cJSON_AddNumberToObject(tj, "peak_tflops", bench_f2d(peak_tflops));
        cJSON_AddNumberToObject(tj, "mfu", tflops / peak_tflops);
    }
    cJSON_AddItemToObject(doc, "training", tj);
    free(tps);

    cJSON *dj = cJSON_CreateArray();
    for (int q = 0; decode_tokens && q < ndb; q++) {
        const int B = db[q];
        int32_t *pr = malloc(sizeof(int32_t) * (size_t)B * prompt_len);
        int32_t *out = malloc(sizeof(int32_t) * (size_t)B * (prompt_len + decode_tokens));
        double *d1 = malloc(sizeof(double) * trials), *dn = malloc(sizeof(double) * trials);
        if (!pr || !out || !d1 || !dn) die_usage("bench lm: out of memory for the prompts");
        for (long i = 0; i < (long)B * prompt_len; i++) {
            int v = (int)(snn_rng_uniform(seed, 3, (uint64_t)i) * (float)vocab);
            pr[i] = v < vocab ? v : vocab - 1;
        }
        snn_lm_sampling s = {.temperature = 0.0f, .top_k = -1, .top_p = 1.0f, .seed = seed, .eos = -1};
        double setup = 0.0, prefill = 0.0;
        for (int k = 0; k < trials; k++) {
            snn_lm_generate_stats gs;
            if ((st = snn_gpt_generate_timed(m, pr, B, prompt_len, decode_tokens, &s, out, &gs)) != SNN_OK)
                die_status(st, "bench lm: generating");
            d1[k] = gs.prefill_seconds;
            dn[k] = gs.decode_steps ? gs.decode_seconds / gs.decode_steps : 0.0;
            setup = gs.setup_seconds;
        }
        prefill = median(d1, trials);
        const double dstep = median(dn, trials);
        const double R = (double)T * B, ctx = prompt_len + decode_tokens / 2.0;
        const double bytes = 4.0 * (double)info->parameters + 2.0 * o.layers * R * o.groups * hd * ctx * 4.0;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "batch", B);
        cJSON_AddNumberToObject(e, "prompt_len", prompt_len);
        cJSON_AddNumberToObject(e, "new_tokens", decode_tokens);
        cJSON_AddNumberToObject(e, "setup_seconds_last", setup);
        cJSON_AddNumberToObject(e, "prefill_ms", 1e3 * prefill);
        cJSON_AddNumberToObject(e, "prefill_tokens_per_second", prefill > 0 ? B * (double)prompt_len / prefill : 0.0);
        cJSON_AddNumberToObject(e, "decode_step_ms", 1e3 * dstep);
        cJSON_AddNumberToObject(e, "decode_tokens_per_second", dstep > 0 ? B / dstep : 0.0);
        cJSON_AddNumberToObject(e, "bytes_per_step_floor", bytes);
        fprintf(stderr, "bench lm: decode batch %d: %.3f ms/step, %.0f tokens/s", B, 1e3 * dstep,
                dstep > 0 ? B / dstep : 0.0);
        if (bw_gbs > 0) {
            const double floor_s = bytes / (bw_gbs * 1e9);
            cJSON_AddNumberToObject(e, "memory_bandwidth_gbs", bench_f2d(bw_gbs));
            cJSON_AddNumberToObject(e, "decode_step_floor_ms", 1e3 * floor_s);
            cJSON_AddNumberToObject(e, "fraction_of_floor", dstep > 0 ? floor_s / dstep : 0.0);
            fprintf(stderr, " (floor %.3f ms: %.1f %%)", 1e3 * floor_s, dstep > 0 ? 100.0 * floor_s / dstep : 0.0);
        }
        fprintf(stderr, "\n");
        cJSON_AddItemToArray(dj, e);
        free(pr), free(out), free(d1), free(dn);
    }
    cJSON_AddItemToObject(doc, "decode", dj);
    bench_metadata_end(md);
    bench_write_json(output, doc);
    cJSON_Delete(doc);
    snn_lm_trainer_free(tr);
    snn_comm_free(self);
    return 0;
}
