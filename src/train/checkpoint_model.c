/* Whole models in checkpoints: snn_model_save writes every parameter and buffer (F32) with
 * the model's configuration in the header metadata, snn_model_load rebuilds the model from
 * that configuration and loads the weights. Only the public reader/writer API of
 * checkpoint.c is used here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/checkpoint.h"
#include "snn/snn.h"

#define SNN_CKPT_FORMAT "snn-checkpoint-v1"

static const char *reserved_keys[] = {"format", "snn_model_config", "snn_model_kind", "snn_version"};

snn_status snn_model_save(const snn_model *m, const char *path, const char *const *meta_kv) {
    if (!m || !path) return snn_error(SNN_E_INVALID, "snn_model_save: NULL model or path");
    snn_ckpt_writer *w;
    SNN_TRY(snn_ckpt_writer_begin(&w));
    snn_status st = SNN_OK;
    for (size_t i = 0; st == SNN_OK && i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        st = snn_model_tensor(m, i, &ti);
        int64_t shape[SNN_CKPT_MAX_RANK];
        for (int d = 0; d < ti.rank; d++) shape[d] = ti.shape[d];
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, ti.name, SNN_CKPT_F32, ti.rank, shape, ti.data);
    }
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "format", SNN_CKPT_FORMAT);
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_model_config", snn_model_config_json(m));
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_model_kind", snn_model_kind(m));
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_version", snn_version());
    for (size_t i = 0; st == SNN_OK && meta_kv && meta_kv[i]; i += 2) {
        for (size_t r = 0; r < sizeof reserved_keys / sizeof *reserved_keys; r++)
            if (!strcmp(meta_kv[i], reserved_keys[r]))
                st = snn_error(SNN_E_INVALID, "metadata key \"%s\" is reserved by snn_model_save", meta_kv[i]);
        if (st == SNN_OK && !meta_kv[i + 1])
            st = snn_error(SNN_E_INVALID, "metadata key \"%s\" has no value (meta_kv holds key, value pairs)", meta_kv[i]);
        if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, meta_kv[i], meta_kv[i + 1]);
    }
    if (st == SNN_OK) st = snn_ckpt_writer_commit(w, path);
    snn_ckpt_writer_free(w);
    return st;
}

static void shape_str(char *buf, size_t cap, int rank, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

snn_status snn_model_load_weights(snn_model *m, const snn_ckpt *ckpt) {
    if (!m || !ckpt) return snn_error(SNN_E_INVALID, "snn_model_load_weights: NULL argument");
    size_t n = snn_model_num_tensors(m);
    /* Check everything first so a mismatch leaves the model untouched. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            snn_tensor_info ti;
            SNN_TRY(snn_model_tensor(m, i, &ti));
            snn_ckpt_tensor ct;
            if (!snn_ckpt_has(ckpt, ti.name))
                return snn_error(SNN_E_FORMAT, "%s has no tensor \"%s\", which the model needs (checkpoint of another model?)",
                                 snn_ckpt_path(ckpt), ti.name);
            SNN_TRY(snn_ckpt_find(ckpt, ti.name, &ct));
            const snn_ckpt_tensor *r = &ct;
            if (pass == 1) {
                memcpy(ti.data, r->data, r->nbytes);
                continue;
            }
            int64_t want[SNN_CKPT_MAX_RANK];
            int same = r->rank == ti.rank;
            for (int d = 0; d < ti.rank; d++) {
                want[d] = ti.shape[d];
                if (same && r->shape[d] != want[d]) same = 0;
            }
            char a[128], b[128];
            shape_str(a, sizeof a, r->rank, r->shape);
            shape_str(b, sizeof b, ti.rank, want);
            if (r->dtype != SNN_CKPT_F32)
                return snn_error(SNN_E_FORMAT, "%s: tensor \"%s\" is %s; model weights are loaded from F32",
                                 snn_ckpt_path(ckpt), ti.name, snn_ckpt_dtype_name(r->dtype));
            if (!same || r->numel != ti.numel)
                return snn_error(SNN_E_FORMAT, "%s: tensor \"%s\" has shape %s, the model expects %s",
                                 snn_ckpt_path(ckpt), ti.name, a, b);
        }
    return SNN_OK;
}

snn_status snn_model_load(const char *path, uint64_t seed, snn_model **out, snn_ckpt **ckpt_out) {
    if (!out || !path) return snn_error(SNN_E_INVALID, "snn_model_load: NULL argument");
    *out = NULL;
    if (ckpt_out) *ckpt_out = NULL;
    snn_ckpt *c;
    SNN_TRY(snn_ckpt_open(path, &c));
    const char *fmt = snn_ckpt_metadata(c, "format");
    const char *cfg = snn_ckpt_metadata(c, "snn_model_config");
    snn_status st = SNN_OK;
    if (!cfg)
        st = snn_error(SNN_E_FORMAT, "%s has no \"snn_model_config\" metadata: not written by snn_model_save "
                       "(a plain safetensors file can be loaded into a model built by hand with snn_model_load_weights)",
                       path);
    else if (fmt && strcmp(fmt, SNN_CKPT_FORMAT))
        st = snn_error(SNN_E_FORMAT, "%s: checkpoint format \"%s\" is not supported (this build reads %s)", path,
                       fmt, SNN_CKPT_FORMAT);
    snn_model *m = NULL;
    if (st == SNN_OK) {
        st = snn_model_create_from_config(cfg, seed, &m);
        if (st != SNN_OK) st = snn_error_prefix(st, "%s: cannot rebuild the model from its configuration", path);
    }
    if (st == SNN_OK) st = snn_model_load_weights(m, c);
    if (st != SNN_OK) {
        snn_model_free(m);
        snn_ckpt_close(c);
        return st;
    }
    *out = m;
    if (ckpt_out) *ckpt_out = c;
    else snn_ckpt_close(c);
    return SNN_OK;
}
