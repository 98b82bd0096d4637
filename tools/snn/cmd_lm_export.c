/* snn lm export CHECKPOINT OUT: a BF16 safetensors artifact of a bf16-trained checkpoint.
 *
 *   OUT/model-00001-of-0000K.safetensors ...  shards of at most --max-shard-size bytes of
 *                                             tensor data, BF16, metadata {"format": "pt"}
 *   OUT/model.safetensors.index.json          {"metadata": {"total_size", "parameter_count"},
 *                                              "weight_map": {name: shard}}
 *   OUT/config.json                           gpt: Hugging Face GPT-2 (GPT2LMHeadModel);
 *                                             spikelm: the model's own fields
 *   OUT/snn_lm_export.json                    manifest: schema_version 2, recipe_name,
 *                                             recipe_sha256, time_steps,
 *                                             temporal_output_reduction, dtype, tensors
 *   OUT/tokenizer.json                        the data's tokenizer, when there is one
 * gpt tensors carry GPT-2's names; linear weights are transposed to GPT-2's Conv1D
 * [in, out]. spikelm tensors keep snn's names ([out, in]); a tied spikelm writes the
 * embedding again as lm_head.weight and sets tie_word_embeddings. Everything is written
 * into a hidden sibling directory that is renamed to OUT at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "lm_tool.h"
#include "snn/dtype.h"

typedef struct {
    char name[160];
    int rank;
    int64_t shape[2];
    uint16_t *data; /* bf16, malloc'd */
    size_t numel;
} ex_tensor;

static int is_linear_weight(const char *name) {
    static const char *k[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
    size_t n = strlen(name);
    for (int i = 0; i < 4; i++) {
        size_t l = strlen(k[i]);
        if (n > l && !strcmp(name + n - l, k[i])) return 1;
    }
    return 0;
}

static void rm_tree_files(const char *dir, char names[][64], int n) {
    char p[4400];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static int write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
    if (!a || !b) {
        if (a) fclose(a);
        return -1;
    }
    char buf[65536];
    size_t k;
    int ok = 1;
    while ((k = fread(buf, 1, sizeof buf, a)) > 0) ok &= fwrite(buf, 1, k, b) == k;
    fclose(a);
    ok &= fflush(b) == 0 && fsync(fileno(b)) == 0;
    return fclose(b) == 0 && ok ? 0 : -1;
}

static char *gpt2_config(const snn_gpt_opts *o, int eos) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddNumberToObject(j, "vocab_size", o->vocab);
    cJSON_AddNumberToObject(j, "n_positions", o->context);
    cJSON_AddNumberToObject(j, "n_ctx", o->context);
    cJSON_AddNumberToObject(j, "n_embd", o->hidden);
    cJSON_AddNumberToObject(j, "n_layer", o->layers);
    cJSON_AddNumberToObject(j, "n_head", o->heads);
    cJSON_AddNumberToObject(j, "n_inner", o->ffn);
    /* snn's GELU is the exact erf form: Hugging Face's "gelu" (not GPT-2's "gelu_new") */
    cJSON_AddStringToObject(j, "activation_function", "gelu");
    char eps[32];
    snprintf(eps, sizeof eps, "%.7g", (double)o->eps); /* the float's shortest decimal, not its double */
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", strtod(eps, NULL));
    cJSON_AddNumberToObject(j, "resid_pdrop", 0);
    cJSON_AddNumberToObject(j, "embd_pdrop", 0);
    cJSON_AddNumberToObject(j, "attn_pdrop", 0);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", o->tied);
    if (eos >= 0) {
        cJSON_AddNumberToObject(j, "bos_token_id", eos);
        cJSON_AddNumberToObject(j, "eos_token_id", eos);
    } else {
        /* explicit nulls: left out, transformers' GPT2Config fills in GPT-2's 50256, which is
         * outside a smaller vocabulary */
        cJSON_AddNullToObject(j, "bos_token_id");
        cJSON_AddNullToObject(j, "eos_token_id");
    }
    cJSON_AddStringToObject(j, "torch_dtype", "bfloat16");
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

static char *spikelm_config(const snn_model *m, const snn_gpt_opts *o) {
    cJSON *j = cJSON_Parse(snn_model_config_json(m));
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("SpikeLMForCausalLM"));
    cJSON_AddBoolToObject(j, "tie_word_embeddings", o->tied);
    cJSON_AddStringToObject(j, "torch_dtype", "bfloat16");
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    return s;
}

int cmd_lm_export(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *size_s = "5GB", *tok = NULL;
    opt t[] = {
        {"--max-shard-size", OPT_STRING, &size_s, "largest shard: bytes or 100MB, 5GB, 2GiB (default 5GB)", NULL, 0},
        {"--tokenizer", OPT_STRING, &tok, "tokenizer.json to include (default: the training data's, if any)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]), first = 3;
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn lm export CHECKPOINT OUT [options]", "BF16 safetensors artifact of a bf16 checkpoint.", t, n);
        return 0;
    }
    if (first < argc && strncmp(argv[first], "--", 2)) ckpt = argv[first++];
    if (first < argc && strncmp(argv[first], "--", 2)) out = argv[first++];
    args_parse("lm export", t, n, argc, argv, first);
    if (!ckpt || !out) die_usage("lm export: usage: snn lm export CHECKPOINT OUT [--max-shard-size SIZE]");
    long long shard_max = lm_parse_size(size_s);
    if (shard_max <= 0) die_usage("lm export: --max-shard-size '%s' is not a positive size", size_s);
    struct stat sb;
    if (!stat(out, &sb)) die_usage("lm export: %s exists already", out);
    if (tok && (stat(tok, &sb) || !S_ISREG(sb.st_mode))) die_usage("lm export: --tokenizer %s is not a file", tok);
    lm_loaded L;
    lm_load(ckpt, &L);
    const snn_lm_transformer_config *tr = &L.cfg.model.transformer;
    if (!tr->bf16 || tr->params_dtype != SNN_LM_DTYPE_BFLOAT16)
        die_usage("lm export: the artifact needs a bf16 checkpoint (bf16 and params_dtype bfloat16); this one is %s",
                  tr->fp16 ? "fp16" : "fp32");
    const snn_gpt_opts *o = &L.o;
    int gpt = !o->spiking;
    if (gpt && (o->pos != SNN_LM_POS_LEARNED_ABSOLUTE || o->norm != SNN_LM_NORM_LAYERNORM || o->act != SNN_LM_ACT_GELU ||
                !o->bias || o->groups != o->heads))
        die_usage("lm export: a GPT-2 artifact needs learned_absolute positions, LayerNorm, gelu, linear biases and "
                  "groups == heads");
    char tok_default[4200];
    if (!tok) {
        snprintf(tok_default, sizeof tok_default, "%s/tokenizer.json", L.cfg.dataset_kwargs.path);
        if (!stat(tok_default, &sb) && S_ISREG(sb.st_mode)) tok = tok_default;
    }

    /* tensors in BF16 */
    size_t nt = snn_model_num_tensors(L.m);
    ex_tensor *ts = calloc(nt + 1, sizeof *ts);
    size_t k = 0;
    long long total = 0, params = 0;
    if (!ts) die_status(SNN_E_NOMEM, "allocating");
    for (size_t i = 0; i < nt; i++) {
        snn_tensor_info ti;
        snn_model_tensor(L.m, i, &ti);
        if (ti.is_buffer) continue;
        ex_tensor *e = &ts[k++];
        snprintf(e->name, sizeof e->name, "%s", ti.name);
        e->rank = ti.rank;
        e->numel = ti.numel;
        e->data = malloc(ti.numel * sizeof(uint16_t));
        if (!e->data) die_status(SNN_E_NOMEM, "allocating");
        int transpose = gpt && ti.rank == 2 && is_linear_weight(ti.name);
        if (transpose) {
            int R = ti.shape[0], C = ti.shape[1];
            e->shape[0] = C;
            e->shape[1] = R;
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++) e->data[(size_t)c * R + r] = snn_f32_to_bf16(ti.data[(size_t)r * C + c]);
        } else {
            for (int d = 0; d < ti.rank; d++) e->shape[d] = ti.shape[d];
            for (size_t q = 0; q < ti.numel; q++) e->data[q] = snn_f32_to_bf16(ti.data[q]);
        }
        total += (long long)e->numel * 2;
        params += (long long)e->numel;
    }
    if (!gpt && o->tied) { /* lm_head.weight = the embedding */
        ex_tensor *e = &ts[k++];
        *e = ts[0];
        snprintf(e->name, sizeof e->name, "lm_head.weight");
        e->data = malloc(e->numel * sizeof(uint16_t));
        if (!e->data) die_status(SNN_E_NOMEM, "allocating");
        memcpy(e->data, ts[0].data, e->numel * sizeof(uint16_t));
        total += (long long)e->numel * 2;
    }
    /* shard assignment in order; a tensor costs its bytes plus a bound on its header entry,
     * so that whole files stay within the limit */
    int *shard = malloc((k + 1) * sizeof *shard), nsh = 0;
    long long fill = 0;
    const long long file_overhead = 64; /* length prefix, braces, the {"format": "pt"} metadata */
    for (size_t i = 0; i < k; i++) {
        long long b = (long long)ts[i].numel * 2 + (long long)strlen(ts[i].name) + 128;
        if (b + file_overhead > shard_max)
            die_usage("lm export: tensor %s (%lld bytes with its header entry) does not fit --max-shard-size %lld",
                      ts[i].name, b + file_overhead, shard_max);
        if (nsh == 0 || fill + b > shard_max) {
            nsh++;
            fill = file_overhead;
        }
        shard[i] = nsh;
        fill += b;
    }
    /* temporary directory next to OUT */
    char tmp[4400], path[4600], base[4096];
    snprintf(base, sizeof base, "%s", out);
    char *slash = strrchr(base, '/');
    if (slash) {
        *slash = 0;
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", base, slash + 1, (long)getpid());
    } else {
        snprintf(tmp, sizeof tmp, ".%s.tmp.%ld", out, (long)getpid());
    }
    if (mkdir(tmp, 0777)) die_status(SNN_E_IO, "creating the export directory");
    char (*files)[64] = calloc((size_t)nsh + 8, 64);
    int nfiles = 0;
    snn_status st = SNN_OK;
    cJSON *index = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(index, "metadata"),
          *wm = cJSON_AddObjectToObject(index, "weight_map");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddNumberToObject(meta, "parameter_count", (double)params);
    cJSON *tensors = cJSON_CreateObject();
    for (int s = 1; s <= nsh && st == SNN_OK; s++) {
        snn_ckpt_writer *w;
        snprintf(files[nfiles], 64, "model-%05d-of-%05d.safetensors", s, nsh);
        st = snn_ckpt_writer_begin(&w);
        for (size_t i = 0; i < k && st == SNN_OK; i++) {
            if (shard[i] != s) continue;
            st = snn_ckpt_writer_add_tensor(w, ts[i].name, SNN_CKPT_BF16, ts[i].rank, ts[i].shape, ts[i].data);
            cJSON_AddStringToObject(wm, ts[i].name, files[nfiles]);
            cJSON *sh = cJSON_CreateArray();
            for (int d = 0; d < ts[i].rank; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[d]));
            cJSON_AddItemToObject(tensors, ts[i].name, sh);
        }
        if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "format", "pt");
        snprintf(path, sizeof path, "%s/%s", tmp, files[nfiles]);
        if (st == SNN_OK) st = snn_ckpt_writer_commit(w, path);
        snn_ckpt_writer_free(w);
        nfiles++;
    }
    char *index_s = cJSON_Print(index);
    const char *recipe = snn_ckpt_metadata(L.ck, "lm_recipe");
    char sha[65], *again = NULL;
    /* the manifest's hash is the recipe's; the training config must still produce it */
    if (!recipe || snn_lm_recipe_to_json(&L.cfg, &again) != SNN_OK || strcmp(again, recipe) ||
        snn_lm_recipe_sha256(&L.cfg, sha) != SNN_OK)
        die_usage("lm export: the checkpoint's recipe does not match its training config");
    free(again);
    cJSON *man = cJSON_CreateObject();
    cJSON_AddNumberToObject(man, "schema_version", 2);
    cJSON *rj = cJSON_Parse(recipe);
    cJSON *rn = rj ? cJSON_GetObjectItemCaseSensitive(rj, "recipe_name") : NULL;
    cJSON_AddStringToObject(man, "recipe_name", cJSON_IsString(rn) ? rn->valuestring : (gpt ? "gpt" : "spikelm"));
    cJSON_AddItemToObject(man, "recipe", rj ? rj : cJSON_CreateNull());
    cJSON_AddStringToObject(man, "recipe_sha256", sha);
    cJSON_AddNumberToObject(man, "time_steps", o->time_steps);
    cJSON_AddStringToObject(man, "temporal_output_reduction", o->reduce_sum ? "sum" : "mean");
    cJSON_AddStringToObject(man, "dtype", "bfloat16");
    cJSON_AddStringToObject(man, "snn_version", snn_version());
    cJSON_AddStringToObject(man, "layout", gpt ? "huggingface-gpt2" : "snn");
    cJSON_AddNumberToObject(man, "checkpoint_step", (double)L.step);
    cJSON_AddItemToObject(man, "tensors", tensors);
    char *man_s = cJSON_Print(man);
    char *cfg_s = gpt ? gpt2_config(o, -1) : spikelm_config(L.m, o);
    const char *names[] = {"model.safetensors.index.json", "config.json", "snn_lm_export.json"};
    const char *texts[] = {index_s, cfg_s, man_s};
    char why[8400];
    int failed = 0;
    for (int i = 0; i < 3 && st == SNN_OK && !failed; i++) {
        snprintf(files[nfiles++], 64, "%s", names[i]);
        snprintf(path, sizeof path, "%s/%s", tmp, names[i]);
        if (!texts[i] || write_text(path, texts[i])) failed = snprintf(why, sizeof why, "cannot write %s", path);
    }
    if (st == SNN_OK && !failed && tok) {
        snprintf(files[nfiles++], 64, "tokenizer.json");
        snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
        if (copy_file(tok, path)) failed = snprintf(why, sizeof why, "cannot copy the tokenizer %s", tok);
    }
    if (st == SNN_OK && !failed && rename(tmp, out))
        failed = snprintf(why, sizeof why, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    if (st != SNN_OK || failed) {
        rm_tree_files(tmp, files, nfiles);
        if (failed) die_usage("exporting: %s", why);
        die_status(st, "exporting");
    }
    printf("{\"output\":\"%s\",\"shards\":%d,\"total_size\":%lld,\"parameter_count\":%lld,\"recipe_sha256\":\"%s\","
           "\"layout\":\"%s\"}\n",
           out, nsh, total, params, sha, gpt ? "huggingface-gpt2" : "snn");
    cJSON_Delete(index);
    cJSON_Delete(man);
    cJSON_free(index_s);
    cJSON_free(man_s);
    cJSON_free(cfg_s);
    for (size_t i = 0; i < k; i++) free(ts[i].data);
    free(ts);
    free(shard);
    free(files);
    lm_loaded_free(&L);
    return 0;
}
