/* The topology-independent inference artifact: merging the (pp, tp) shards of a step
 * directory into the canonical tensors, and re-sharding them for any topology (see
 * vision_ckpt.h). Export runs in one process: it builds each source stage only to learn its
 * tensors and shard rules (no communicator), reads that shard and scatters every tensor into
 * the dense model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/file_internal.h"
#include "dist/vision_ckpt.h"

static snn_status read_file(const char *path, char **out) {
    *out = NULL;
    FILE *f;
    SNN_TRY(snn_fopen_regular(path, "artifact file", &f));
    char *b = malloc((size_t)1 << 20);
    size_t n = b ? fread(b, 1, ((size_t)1 << 20) - 1, f) : 0;
    int big = b && n == ((size_t)1 << 20) - 1;
    fclose(f);
    if (!b) return snn_error(SNN_E_NOMEM, "out of memory");
    if (big) {
        free(b);
        return snn_error(SNN_E_FORMAT, "%s is larger than 1 MiB: not a recipe", path);
    }
    b[n] = 0;
    *out = b;
    return SNN_OK;
}

typedef struct {
    int *count;      /* per dense tensor: parts inserted */
    int *replicated; /* per dense tensor: 1 replicated, 0 sharded, -1 unseen */
} coverage;

static snn_status find_dense(snn_model *d, const char *name, size_t *idx, snn_tensor_info *ti) {
    for (size_t i = 0; i < snn_model_num_tensors(d); i++) {
        SNN_TRY(snn_model_tensor(d, i, ti));
        if (!strcmp(ti->name, name)) {
            *idx = i;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_FORMAT, "shard tensor %s is not a tensor of the dense model", name);
}

static snn_status merge_shard(snn_vision_stage *s, const snn_ckpt *c, snn_model *dense, coverage *cov) {
    for (size_t i = 0; i < snn_model_num_tensors(s->model); i++) {
        snn_tensor_info li, di;
        SNN_TRY(snn_model_tensor(s->model, i, &li));
        SNN_TRY(snn_ckpt_read(c, li.name, SNN_CKPT_F32, li.data, li.numel * sizeof(float)));
        size_t d = 0;
        SNN_TRY(find_dense(dense, li.name, &d, &di));
        int local[SNN_CKPT_MAX_RANK];
        SNN_TRY(snn_shard_local_shape(li.name, s->rules[i], di.rank, di.shape, s->tp_size, local));
        for (int k = 0; k < di.rank; k++)
            if (local[k] != li.shape[k]) return snn_error(SNN_E_FORMAT, "%s: shard shape does not match", li.name);
        int rep = s->rules[i].dim < 0;
        if (cov->replicated[d] >= 0 && cov->replicated[d] != rep)
            return snn_error(SNN_E_FORMAT, "%s is replicated in one shard and split in another", li.name);
        cov->replicated[d] = rep;
        if (rep && cov->count[d] > 0) {
            /* a replicated tensor must be the same on every TP rank */
            if (memcmp(di.data, li.data, di.numel * sizeof(float)))
                return snn_error(SNN_E_FORMAT, "replicated tensor %s differs between tensor-parallel ranks (pp %d, "
                                 "tp %d): the checkpoint is inconsistent", li.name, s->pp_rank, s->tp_rank);
        } else {
            snn_shard_insert(s->rules[i], di.rank, di.shape, s->tp_rank, s->tp_size, li.data, di.data);
        }
        cov->count[d]++;
    }
    return SNN_OK;
}

static snn_status export_impl(const char *step_dir, const char *out_path, snn_vision_training_config *cfg,
                              snn_model **dense_out) {
    char path[SNN_VISION_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/config.json", step_dir);
    char *text = NULL;
    SNN_TRY(read_file(path, &text));
    snn_status st = snn_vision_training_config_from_json(text, cfg);
    free(text);
    if (st != SNN_OK) return snn_error_prefix(st, "%s", path);
    SNN_TRY(snn_vision_model_build(&cfg->model, 0, dense_out));
    snn_model *dense = *dense_out;
    size_t nt = snn_model_num_tensors(dense);
    coverage cov = {calloc(nt + 1, sizeof(int)), malloc((nt + 1) * sizeof(int))};
    if (!cov.count || !cov.replicated) st = snn_error(SNN_E_NOMEM, "out of memory");
    for (size_t i = 0; st == SNN_OK && i < nt; i++) cov.replicated[i] = -1;
    int PP = cfg->pipeline_parallel_size, TP = cfg->tensor_parallel_size;
    for (int pp = 0; pp < PP && st == SNN_OK; pp++)
        for (int tp = 0; tp < TP && st == SNN_OK; tp++) {
            snn_vision_stage *s = NULL;
            snn_ckpt *c = NULL;
            snprintf(path, sizeof path, "%s/pp_%04d_tp_%04d.safetensors", step_dir, pp, tp);
            st = snn_vision_stage_build(&cfg->model, pp, PP, tp, TP, NULL, NULL, &s);
            if (st == SNN_OK) st = snn_ckpt_open(path, &c);
            if (st == SNN_OK) st = merge_shard(s, c, dense, &cov);
            if (st != SNN_OK && c) st = snn_error_prefix(st, "%s", path);
            snn_ckpt_close(c);
            snn_vision_stage_free(s);
        }
    for (size_t i = 0; st == SNN_OK && i < nt; i++) {
        snn_tensor_info ti;
        snn_model_tensor(dense, i, &ti);
        int want = cov.replicated[i] == 1 ? TP : 1;
        if (cov.replicated[i] == 0) want = TP;
        if (cov.replicated[i] < 0 || cov.count[i] != want)
            st = snn_error(SNN_E_FORMAT, "%s: tensor %s is covered by %d shard(s), expected %d", step_dir, ti.name,
                           cov.count[i], want);
    }
    free(cov.count);
    free(cov.replicated);
    if (st != SNN_OK) return st;
    char *mc = NULL;
    SNN_TRY(snn_vision_model_config_to_json(&cfg->model, &mc));
    cJSON *src = cJSON_CreateObject();
    cJSON_AddStringToObject(src, "checkpoint", step_dir);
    cJSON_AddNumberToObject(src, "pipeline_parallel_size", PP);
    cJSON_AddNumberToObject(src, "tensor_parallel_size", TP);
    char *srcs = cJSON_PrintUnformatted(src);
    cJSON_Delete(src);
    char steps[32];
    snprintf(steps, sizeof steps, "%d", cfg->model.time_steps);
    const char *meta[] = {"artifact", "snn-inference-artifact", "schema_version", "1", "model_config", mc,
                          "source", srcs ? srcs : "{}", "time_steps", steps, NULL};
    st = srcs ? snn_model_save(dense, out_path, meta) : snn_error(SNN_E_NOMEM, "out of memory");
    free(mc);
    free(srcs);
    return st;
}

snn_status snn_vision_export_artifact(const char *step_dir, const char *out_path) {
    struct stat sb;
    if (!step_dir || !out_path) return snn_error(SNN_E_INVALID, "export: a checkpoint directory and an output path are required");
    if (stat(step_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return snn_error(SNN_E_IO, "checkpoint directory %s does not exist", step_dir);
    if (stat(out_path, &sb) == 0) return snn_error(SNN_E_IO, "output %s already exists", out_path);
    snn_vision_training_config cfg;
    snn_model *dense = NULL;
    snn_status st = export_impl(step_dir, out_path, &cfg, &dense);
    snn_model_free(dense);
    return st;
}

snn_status snn_vision_artifact_open(const char *path, snn_vision_model_config *mc_out, int *src_pp, int *src_tp,
                                    snn_ckpt **out) {
    *out = NULL;
    snn_ckpt *c = NULL;
    SNN_TRY(snn_ckpt_open(path, &c));
    snn_status st = SNN_OK;
    const char *schema = snn_ckpt_metadata(c, "schema_version");
    const char *mcj = snn_ckpt_metadata(c, "model_config");
    const char *srcj = snn_ckpt_metadata(c, "source");
    snn_vision_model_config mc;
    if (!schema || strcmp(schema, "1"))
        st = snn_error(SNN_E_FORMAT, "%s: not an inference artifact of schema 1 (schema_version %s)", path,
                       schema ? schema : "missing");
    else if (!mcj || snn_vision_model_config_from_json(mcj, &mc) != SNN_OK)
        st = snn_error(SNN_E_FORMAT, "%s: invalid model_config metadata: %s", path, mcj ? snn_last_error() : "missing");
    cJSON *src = st == SNN_OK ? cJSON_Parse(srcj ? srcj : "") : NULL;
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(src, "pipeline_parallel_size");
    const cJSON *tp = cJSON_GetObjectItemCaseSensitive(src, "tensor_parallel_size");
    if (st == SNN_OK && (!cJSON_IsObject(src) || !cJSON_IsNumber(pp) || !cJSON_IsNumber(tp)))
        st = snn_error(SNN_E_FORMAT, "%s: the source metadata is not an object with the source topology", path);
    if (st == SNN_OK) {
        if (src_pp) *src_pp = pp->valueint;
        if (src_tp) *src_tp = tp->valueint;
    }
    cJSON_Delete(src);
    /* exactly the canonical key set, at dense shapes */
    snn_model *dense = NULL;
    if (st == SNN_OK) st = snn_vision_model_build(&mc, 0, &dense);
    if (st == SNN_OK && snn_ckpt_num_tensors(c) != snn_model_num_tensors(dense))
        st = snn_error(SNN_E_FORMAT, "%s holds %zu tensors, the %s model has %zu", path, snn_ckpt_num_tensors(c),
                       snn_vision_model_name(mc.kind), snn_model_num_tensors(dense));
    for (size_t i = 0; dense && st == SNN_OK && i < snn_model_num_tensors(dense); i++) {
        snn_tensor_info ti;
        snn_ckpt_tensor t;
        snn_model_tensor(dense, i, &ti);
        st = snn_ckpt_find(c, ti.name, &t);
        if (st == SNN_OK && (t.dtype != SNN_CKPT_F32 || t.rank != ti.rank))
            st = snn_error(SNN_E_FORMAT, "%s: tensor %s is not F32 of rank %d", path, ti.name, ti.rank);
        for (int k = 0; st == SNN_OK && k < ti.rank; k++)
            if (t.shape[k] != ti.shape[k])
                st = snn_error(SNN_E_FORMAT, "%s: tensor %s has dimension %d = %lld, the model %d", path, ti.name, k,
                               (long long)t.shape[k], ti.shape[k]);
    }
    snn_model_free(dense);
    if (st != SNN_OK) {
        snn_ckpt_close(c);
        return st;
    }
    if (mc_out) *mc_out = mc;
    *out = c;
    return SNN_OK;
}

typedef struct {
    const snn_ckpt *c;
    float *buf;
    size_t cap;
} art_ctx;

/* The file's data may be unaligned: each tensor is copied into an aligned buffer. */
static snn_status art_get(const char *name, void *ctx, int *rank, int64_t *shape, const float **data) {
    art_ctx *a = ctx;
    snn_ckpt_tensor t;
    SNN_TRY(snn_ckpt_find(a->c, name, &t));
    if (t.dtype != SNN_CKPT_F32) return snn_error(SNN_E_FORMAT, "%s: tensor %s is not F32", snn_ckpt_path(a->c), name);
    if (t.numel > a->cap) {
        float *nb = realloc(a->buf, (t.numel + 1) * sizeof(float));
        if (!nb) return snn_error(SNN_E_NOMEM, "out of memory");
        a->buf = nb;
        a->cap = t.numel;
    }
    if (t.numel) memcpy(a->buf, t.data, t.nbytes);
    *rank = t.rank;
    for (int k = 0; k < t.rank; k++) shape[k] = t.shape[k];
    *data = a->buf;
    return SNN_OK;
}

snn_status snn_vision_stage_from_artifact(const char *path, const snn_mesh *mesh, snn_vision_stage **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_vision_stage_from_artifact: out is NULL");
    *out = NULL;
    if (!path || !mesh) return snn_error(SNN_E_INVALID, "snn_vision_stage_from_artifact needs a path and a mesh");
    snn_vision_model_config mc;
    snn_ckpt *c = NULL;
    SNN_TRY(snn_vision_artifact_open(path, &mc, NULL, NULL, &c));
    snn_vision_stage *s = NULL;
    snn_status st = snn_vision_stage_build(&mc, mesh->pp, mesh->pp_size, mesh->tp, mesh->tp_size,
                                           mesh->tp_size > 1 ? mesh->tp_comm : NULL,
                                           mesh->pp_size > 1 ? mesh->pp_comm : NULL, &s);
    art_ctx a = {c, NULL, 0};
    if (st == SNN_OK) st = snn_vision_stage_load_canonical(s, art_get, &a);
    free(a.buf);
    snn_ckpt_close(c);
    if (st != SNN_OK) {
        snn_vision_stage_free(s);
        return st;
    }
    *out = s;
    return SNN_OK;
}
