/* Distributed vision checkpoints: the step directory, its recipe and one training
 * checkpoint per (pp, tp) shard, saved and resumed collectively (see vision_ckpt.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/file_internal.h"
#include "dist/vision_ckpt.h"

static int path_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* mkdir -p for the checkpoint root */
static snn_status make_dirs(const char *dir) {
    char buf[SNN_VISION_PATH_MAX + 64];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return snn_error(SNN_E_INVALID, "checkpoint_dir is too long");
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return snn_error(SNN_E_IO, "cannot create checkpoint directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return snn_error(SNN_E_IO, "cannot create checkpoint directory %s: %s", buf, strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return snn_error(SNN_E_IO, "checkpoint_dir %s is not a directory", buf);
    return SNN_OK;
}

/* Remove a directory holding only plain files (a partial step directory). */
static void remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[SNN_VISION_PATH_MAX + 320];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

static snn_status fsync_path(const char *p) {
    int fd = open(p, O_RDONLY);
    if (fd < 0) return snn_error(SNN_E_IO, "cannot open %s: %s", p, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0) return snn_error(SNN_E_IO, "cannot sync %s: %s", p, strerror(errno));
    return SNN_OK;
}

static snn_status write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return snn_error(SNN_E_IO, "cannot create %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return snn_error(SNN_E_IO, "cannot write %s: %s", path, strerror(errno));
    return SNN_OK;
}

/* Whole file into a NUL-terminated buffer (at most 16 MiB: a recipe is a few KiB). */
static snn_status read_text(const char *path, char **out) {
    *out = NULL;
    FILE *f;
    SNN_TRY(snn_fopen_regular(path, "recipe file", &f));
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 >= cap) {
            if (cap >= ((size_t)16 << 20)) {
                free(b);
                fclose(f);
                return snn_error(SNN_E_FORMAT, "%s is larger than 16 MiB", path);
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) break;
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (!b) return snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
    if (err) {
        free(b);
        return snn_error(SNN_E_IO, "cannot read %s", path);
    }
    b[n] = 0;
    *out = b;
    return SNN_OK;
}

static void shard_name(char *buf, size_t cap, const char *dir, int pp, int tp) {
    snprintf(buf, cap, "%s/pp_%04d_tp_%04d.safetensors", dir, pp, tp);
}

/* rank 0's part before any shard: check, create the partial directory, write the recipe */
static snn_status prepare_dir(const snn_vision_training_config *cfg, const char *final, const char *tmp) {
    if (path_exists(final)) return snn_error(SNN_E_IO, "checkpoint %s already exists (FileExistsError)", final);
    SNN_TRY(make_dirs(cfg->checkpoint_dir));
    if (path_exists(tmp)) remove_flat_dir(tmp); /* left by a job that died while saving */
    if (mkdir(tmp, 0777) != 0) return snn_error(SNN_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    char *recipe = NULL;
    snn_status st = snn_vision_training_recipe_json(cfg, &recipe);
    char path[SNN_VISION_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (st == SNN_OK) st = write_text(path, recipe);
    free(recipe);
    if (st != SNN_OK) remove_flat_dir(tmp);
    return st;
}

static snn_status write_shard(const snn_mesh *mesh, snn_model *model, snn_precision *prec, snn_optimizer *opt,
                              const snn_vision_progress *pr, const uint64_t *rng, const char *tmp) {
    char path[SNN_VISION_PATH_MAX + 96], topo[160], prog[160], rngs[160];
    shard_name(path, sizeof path, tmp, mesh->pp, mesh->tp);
    snprintf(topo, sizeof topo, "{\"pp\":%d,\"tp\":%d,\"pipeline_parallel_size\":%d,\"tensor_parallel_size\":%d}",
             mesh->pp, mesh->tp, mesh->pp_size, mesh->tp_size);
    snprintf(prog, sizeof prog, "{\"step\":%ld,\"epoch\":%ld,\"batch_in_epoch\":%ld}", pr->step, pr->epoch,
             pr->batch_in_epoch);
    uint64_t z[SNN_VISION_RNG_WORDS] = {0};
    const uint64_t *r = rng ? rng : z;
    snprintf(rngs, sizeof rngs, "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, r[0], r[1], r[2], r[3]);
    const char *meta[] = {"vision_topology", topo, "vision_progress", prog, "vision_rng", rngs, NULL};
    if (prec) return snn_training_checkpoint_save(model, prec, opt, path, meta);
    return snn_training_checkpoint_save_cfg(model, NULL, NULL, opt, path, meta);
}

snn_status snn_vision_checkpoint_save(const snn_mesh *mesh, const snn_vision_training_config *cfg, snn_model *model,
                                      snn_precision *prec, snn_optimizer *opt, const snn_vision_progress *progress,
                                      const uint64_t *rng, char *path_out, size_t cap) {
    /* without a mesh there is no world to agree over: refused before any collective */
    if (!mesh || !cfg || !model || !progress)
        return snn_error(SNN_E_INVALID, "snn_vision_checkpoint_save needs a mesh, a config, a model and the progress");
    snn_comm *w = mesh->world;
    char final[SNN_VISION_PATH_MAX + 32], tmp[SNN_VISION_PATH_MAX + 48];
    snn_status st = SNN_OK;
    if (!cfg->checkpoint_dir[0]) st = snn_error(SNN_E_INVALID, "checkpoint_dir is not set");
    snprintf(final, sizeof final, "%s/step_%08ld", cfg->checkpoint_dir, progress->step);
    snprintf(tmp, sizeof tmp, "%s/.step_%08ld.partial", cfg->checkpoint_dir, progress->step);
    /* 1. rank 0 checks and creates; every rank learns the verdict before anything else */
    if (st == SNN_OK && snn_comm_rank(w) == 0) st = prepare_dir(cfg, final, tmp);
    SNN_TRY(snn_comm_agree(w, st));
    /* 2. the dp-rank-0 ranks write their shards */
    if (mesh->dp == 0) st = write_shard(mesh, model, prec, opt, progress, rng, tmp);
    st = snn_comm_agree(w, st);
    /* 3. rank 0 puts the complete directory in place */
    if (snn_comm_rank(w) == 0) {
        if (st == SNN_OK && rename(tmp, final) != 0)
            st = snn_error(SNN_E_IO, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        if (st == SNN_OK) st = fsync_path(cfg->checkpoint_dir);
        if (st != SNN_OK) remove_flat_dir(tmp);
    }
    SNN_TRY(snn_comm_agree(w, st));
    if (path_out && cap) snprintf(path_out, cap, "%s", final);
    return SNN_OK;
}

static int json_int_field(const char *json, const char *key, long *out) {
    cJSON *o = cJSON_Parse(json ? json : "");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    int ok = cJSON_IsNumber(v) && v->valuedouble == (double)(long)v->valuedouble;
    if (ok) *out = (long)v->valuedouble;
    cJSON_Delete(o);
    return ok;
}

static snn_status load_local(const snn_mesh *mesh, const snn_vision_training_config *cfg, const char *step_dir,
                             snn_model *model, snn_precision *prec, snn_optimizer *opt, snn_vision_progress *pr,
                             uint64_t *rng) {
    char path[SNN_VISION_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/config.json", step_dir);
    char *recipe = NULL;
    SNN_TRY(read_text(path, &recipe));
    int match = 0;
    snn_status st = snn_vision_recipe_matches(recipe, cfg, &match);
    free(recipe);
    if (st != SNN_OK) return snn_error_prefix(st, "%s", step_dir);
    if (!match)
        return snn_error(SNN_E_INVALID, "Checkpoint configuration does not match this training run (%s/config.json "
                         "differs from the current recipe; a different topology goes through snn export-artifact)",
                         step_dir);
    shard_name(path, sizeof path, step_dir, mesh->pp, mesh->tp);
    snn_ckpt *c = NULL;
    SNN_TRY(snn_ckpt_open(path, &c));
    long pps = -1, tps = -1, v;
    const char *topo = snn_ckpt_metadata(c, "vision_topology");
    if (!topo || !json_int_field(topo, "pipeline_parallel_size", &pps) ||
        !json_int_field(topo, "tensor_parallel_size", &tps))
        st = snn_error(SNN_E_FORMAT, "%s has no vision_topology metadata", path);
    else if (pps != mesh->pp_size || tps != mesh->tp_size)
        st = snn_error(SNN_E_INVALID, "%s was written with TP %ld x PP %ld; this run uses TP %d x PP %d (a different "
                       "topology goes through snn export-artifact)", path, tps, pps, mesh->tp_size, mesh->pp_size);
    if (st == SNN_OK) {
        if (prec) st = snn_training_checkpoint_restore(model, prec, opt, c);
        else st = snn_training_checkpoint_restore_cfg(model, NULL, NULL, opt, c);
    }
    const char *prog = snn_ckpt_metadata(c, "vision_progress");
    if (st == SNN_OK) {
        if (!prog || !json_int_field(prog, "step", &pr->step) || !json_int_field(prog, "epoch", &pr->epoch) ||
            !json_int_field(prog, "batch_in_epoch", &v))
            st = snn_error(SNN_E_FORMAT, "%s has no valid vision_progress metadata", path);
        else pr->batch_in_epoch = v;
    }
    const char *rs = snn_ckpt_metadata(c, "vision_rng");
    if (st == SNN_OK && rng) {
        if (!rs || strlen(rs) != 16 * SNN_VISION_RNG_WORDS) {
            st = snn_error(SNN_E_FORMAT, "%s has no valid vision_rng metadata", path);
        } else {
            for (int i = 0; i < SNN_VISION_RNG_WORDS && st == SNN_OK; i++) {
                char word[17];
                memcpy(word, rs + 16 * i, 16);
                word[16] = 0;
                char *end;
                rng[i] = strtoull(word, &end, 16);
                if (*end) st = snn_error(SNN_E_FORMAT, "%s: vision_rng is not hexadecimal", path);
            }
        }
    }
    snn_ckpt_close(c);
    return st;
}

snn_status snn_vision_checkpoint_load(const snn_mesh *mesh, const snn_vision_training_config *cfg,
                                      const char *step_dir, snn_model *model, snn_precision *prec,
                                      snn_optimizer *opt, snn_vision_progress *progress, uint64_t *rng) {
    if (!mesh || !cfg || !step_dir || !model || !progress)
        return snn_error(SNN_E_INVALID, "snn_vision_checkpoint_load needs a mesh, a config, a step directory, a model "
                         "and a progress output");
    snn_vision_progress pr = {0, 0, 0};
    snn_status st = load_local(mesh, cfg, step_dir, model, prec, opt, &pr, rng);
    SNN_TRY(snn_comm_agree(mesh->world, st));
    *progress = pr;
    return SNN_OK;
}
