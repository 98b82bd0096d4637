/* The inference artifact without MPI: TP 2 x PP 2 shards written in one process (stages built
 * without communicators, loaded from a dense model) export to exactly the dense tensors, and
 * every refusal of export and of artifact loading fires: missing shard, a replicated tensor
 * that differs between TP ranks, an existing output, another schema, a wrong tensor set, a
 * bad model config (reference spikingjelly-distributed.md §2.13, §8.9 item 62). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/vision_ckpt.h"
#include "harness.h"
#include "snn/checkpoint.h"

static snn_status dense_get(const char *name, void *ctx, int *rank, int64_t *shape, const float **data) {
    snn_model *d = ctx;
    for (size_t i = 0; i < snn_model_num_tensors(d); i++) {
        snn_tensor_info ti;
        snn_model_tensor(d, i, &ti);
        if (strcmp(ti.name, name)) continue;
        *rank = ti.rank;
        for (int k = 0; k < ti.rank; k++) shape[k] = ti.shape[k];
        *data = ti.data;
        return SNN_OK;
    }
    return SNN_E_FORMAT;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fputs(text, f);
    return fclose(f) == 0;
}

static int refused(snn_status st, const char *sub) {
    if (st == SNN_OK || !strstr(snn_last_error(), sub)) {
        fprintf(stderr, "  wanted a refusal with \"%s\", got %d: %s\n", sub, (int)st, snn_last_error());
        return 0;
    }
    return 1;
}

int main(void) {
    uint64_t seed = snn_test_seed();
    char dir[] = "/tmp/snn-artifact-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char step[256], path[512], art[512];
    snprintf(step, sizeof step, "%s/step_00000007", dir);
    mkdir(step, 0777);
    /* a Spikformer: QKV sharded by head, column/row/shard tensors and replicated ones */
    snn_vision_training_config cfg = snn_vision_training_config_default();
    cfg.model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER);
    cfg.model.spikformer.image_size = 32;
    cfg.model.spikformer.embed_dim = 32;
    cfg.model.spikformer.heads = 4;
    cfg.model.spikformer.depth = 2;
    cfg.model.num_classes = 10;
    snprintf(cfg.dataset_builder, sizeof cfg.dataset_builder, "snn.data.synthetic");
    cfg.tensor_parallel_size = 2;
    cfg.pipeline_parallel_size = 2;
    cfg.precision.mode = SNN_PRECISION_FP32;
    char *recipe = NULL;
    CHECK(snn_vision_training_recipe_json(&cfg, &recipe) == SNN_OK);
    snprintf(path, sizeof path, "%s/config.json", step);
    CHECK(recipe && write_file(path, recipe));
    free(recipe);
    snn_model *dense = NULL;
    CHECK(snn_vision_model_build(&cfg.model, seed, &dense) == SNN_OK);
    if (!dense) return 1;
    /* random buffers too (running statistics), so every tensor is distinguishable */
    snn_test_fill_uniform(snn_model_buffers(dense), snn_model_num_buffers(dense), 0.5f, 1.5f, &seed);
    for (int pp = 0; pp < 2; pp++)
        for (int tp = 0; tp < 2; tp++) {
            snn_vision_stage *s = NULL;
            CHECK(snn_vision_stage_build(&cfg.model, pp, 2, tp, 2, NULL, NULL, &s) == SNN_OK);
            if (!s) continue;
            CHECK(snn_vision_stage_load_canonical(s, dense_get, dense) == SNN_OK);
            snprintf(path, sizeof path, "%s/pp_%04d_tp_%04d.safetensors", step, pp, tp);
            CHECK(snn_training_checkpoint_save_cfg(s->model, NULL, NULL, NULL, path, NULL) == SNN_OK);
            snn_vision_stage_free(s);
        }
    snprintf(art, sizeof art, "%s/model.artifact", dir);
    CHECK_MSG(snn_vision_export_artifact(step, art) == SNN_OK, "%s", snn_last_error());
    /* exactly the dense tensors */
    snn_ckpt *c = NULL;
    snn_vision_model_config mc;
    int spp = 0, stp = 0;
    CHECK_MSG(snn_vision_artifact_open(art, &mc, &spp, &stp, &c) == SNN_OK, "%s", snn_last_error());
    CHECK(spp == 2 && stp == 2 && snn_vision_model_config_equal(&mc, &cfg.model));
    int same = c != NULL;
    for (size_t i = 0; c && i < snn_model_num_tensors(dense); i++) {
        snn_tensor_info ti;
        snn_model_tensor(dense, i, &ti);
        float *buf = malloc(ti.numel * sizeof(float));
        same &= snn_ckpt_read(c, ti.name, SNN_CKPT_F32, buf, ti.numel * sizeof(float)) == SNN_OK &&
                !memcmp(buf, ti.data, ti.numel * sizeof(float));
        free(buf);
    }
    CHECK(same);
    snn_ckpt_close(c);
    /* the output exists */
    CHECK(refused(snn_vision_export_artifact(step, art), "already exists"));
    /* another schema, another tensor set, a bad model config */
    snn_model *other = NULL;
    snn_vision_model_config m2 = cfg.model;
    m2.spikformer.depth = 1;
    CHECK(snn_vision_model_build(&m2, 1, &other) == SNN_OK);
    char *mcj = NULL;
    CHECK(snn_vision_model_config_to_json(&cfg.model, &mcj) == SNN_OK);
    const char *src = "{\"checkpoint\":\"x\",\"pipeline_parallel_size\":1,\"tensor_parallel_size\":1}";
    const char *bad_schema[] = {"schema_version", "2", "model_config", mcj, "source", src, NULL};
    const char *bad_set[] = {"schema_version", "1", "model_config", mcj, "source", src, NULL};
    const char *bad_mc[] = {"schema_version", "1", "model_config", "{\"_target_\": \"os.system\"}", "source", src, NULL};
    const char *bad_src[] = {"schema_version", "1", "model_config", mcj, "source", "[]", NULL};
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    CHECK(snn_model_save(dense, path, bad_schema) == SNN_OK);
    CHECK(refused(snn_vision_artifact_open(path, NULL, NULL, NULL, &c), "schema 1"));
    CHECK(snn_model_save(other, path, bad_set) == SNN_OK);
    CHECK(refused(snn_vision_artifact_open(path, NULL, NULL, NULL, &c), "tensors"));
    CHECK(snn_model_save(dense, path, bad_mc) == SNN_OK);
    CHECK(refused(snn_vision_artifact_open(path, NULL, NULL, NULL, &c), "unsupported config target"));
    CHECK(snn_model_save(dense, path, bad_src) == SNN_OK);
    CHECK(refused(snn_vision_artifact_open(path, NULL, NULL, NULL, &c), "source"));
    CHECK(snn_model_save(dense, path, bad_set) == SNN_OK); /* the right set: accepted */
    CHECK(snn_vision_artifact_open(path, NULL, NULL, NULL, &c) == SNN_OK);
    snn_ckpt_close(c);
    free(mcj);
    /* a replicated tensor that differs between the TP ranks of a stage */
    snn_vision_stage *s = NULL;
    CHECK(snn_vision_stage_build(&cfg.model, 1, 2, 1, 2, NULL, NULL, &s) == SNN_OK);
    if (s) {
        CHECK(snn_vision_stage_load_canonical(s, dense_get, dense) == SNN_OK);
        snn_tensor_info ti;
        for (size_t i = 0; i < snn_model_num_tensors(s->model); i++) {
            snn_model_tensor(s->model, i, &ti);
            if (!strcmp(ti.name, "head.weight")) ti.data[3] += 1e-3f;
        }
        snprintf(path, sizeof path, "%s/pp_0001_tp_0001.safetensors", step);
        CHECK(snn_training_checkpoint_save_cfg(s->model, NULL, NULL, NULL, path, NULL) == SNN_OK);
        snprintf(path, sizeof path, "%s/a2", dir);
        CHECK(refused(snn_vision_export_artifact(step, path), "head.weight differs between tensor-parallel ranks"));
        CHECK(access(path, F_OK) != 0);
        snn_vision_stage_free(s);
    }
    /* a missing shard */
    snprintf(path, sizeof path, "%s/pp_0001_tp_0000.safetensors", step);
    unlink(path);
    snprintf(path, sizeof path, "%s/a3", dir);
    CHECK(refused(snn_vision_export_artifact(step, path), "pp_0001_tp_0000"));
    CHECK(refused(snn_vision_export_artifact("/nonexistent/step", path), "does not exist"));
    snn_model_free(dense);
    snn_model_free(other);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return snn_test_finish("test_vision_artifact");
}
