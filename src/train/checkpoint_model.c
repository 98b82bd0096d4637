/* Whole models in checkpoints: snn_model_save writes every parameter and buffer (F32) with
 * the model's configuration in the header metadata, snn_model_load rebuilds the model from
 * that configuration and loads the weights. Only the public reader/writer API of
 * checkpoint.c is used here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/checkpoint.h"
#include "snn/snn.h"
#include "nn/model_internal.h"
#include "train/checkpoint_internal.h"

#define SNN_CKPT_FORMAT "snn-checkpoint-v1"

static const char *reserved_keys[] = {"format", "snn_model_config", "snn_model_kind", "snn_version"};

snn_status snn_model_save(const snn_model *m, const char *path, const char *const *meta_kv) {
    if (!m || !path) return snn_error(SNN_E_INVALID, "snn_model_save: NULL model or path");
    SNN_TRY(snn_model_pull_host(m)); /* a device model: save what the device holds */
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

/* Index of the first non-finite F32 value in `n` little-endian floats at p (possibly
 * unaligned: the header length decides the data's alignment), or n if all are finite. */
size_t snn_ckpt_first_nonfinite_f32(const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        if ((u & 0x7f800000u) == 0x7f800000u) return i;
    }
    return n;
}

/* Compare one model tensor (name, shape; data not needed) with the checkpoint's. */
static snn_status check_tensor(const snn_tensor_info *ti, const snn_ckpt *ckpt, snn_ckpt_tensor *ct, int values) {
    if (!snn_ckpt_has(ckpt, ti->name))
        return snn_error(SNN_E_FORMAT, "%s has no tensor \"%s\", which the model needs (checkpoint of another model?)",
                         snn_ckpt_path(ckpt), ti->name);
    SNN_TRY(snn_ckpt_find(ckpt, ti->name, ct));
    int64_t want[SNN_CKPT_MAX_RANK];
    int same = ct->rank == ti->rank;
    for (int d = 0; d < ti->rank; d++) {
        want[d] = ti->shape[d];
        if (same && ct->shape[d] != want[d]) same = 0;
    }
    if (ct->dtype != SNN_CKPT_F32)
        return snn_error(SNN_E_FORMAT, "%s: tensor \"%s\" is %s; model weights are loaded from F32",
                         snn_ckpt_path(ckpt), ti->name, snn_ckpt_dtype_name(ct->dtype));
    if (!same || ct->numel != ti->numel) {
        char a[128], b[128];
        shape_str(a, sizeof a, ct->rank, ct->shape);
        shape_str(b, sizeof b, ti->rank, want);
        return snn_error(SNN_E_FORMAT, "%s: tensor \"%s\" has shape %s, the model expects %s",
                         snn_ckpt_path(ckpt), ti->name, a, b);
    }
    if (values) {
        size_t bad = snn_ckpt_first_nonfinite_f32(ct->data, ct->numel);
        if (bad < ct->numel) {
            float v;
            memcpy(&v, (const uint8_t *)ct->data + 4 * bad, 4);
            return snn_error(SNN_E_NUMERIC, "%s: tensor \"%s\" holds %s at index %zu; a model with NaN or "
                             "infinite weights is refused", snn_ckpt_path(ckpt), ti->name,
                             isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", bad);
        }
    }
    return SNN_OK;
}

snn_status snn_model_check_weights(const snn_model *m, const snn_ckpt *ckpt) {
    if (!m || !ckpt) return snn_error(SNN_E_INVALID, "snn_model_check_weights: NULL argument");
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        snn_ckpt_tensor ct;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        SNN_TRY(check_tensor(&ti, ckpt, &ct, 1));
    }
    return SNN_OK;
}

snn_status snn_model_load_weights(snn_model *m, const snn_ckpt *ckpt) {
    if (!m || !ckpt) return snn_error(SNN_E_INVALID, "snn_model_load_weights: NULL argument");
    /* Check everything first so a mismatch leaves the model untouched. */
    SNN_TRY(snn_model_check_weights(m, ckpt));
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        snn_ckpt_tensor ct;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        SNN_TRY(snn_ckpt_find(ckpt, ti.name, &ct));
        memcpy(ti.data, ct.data, ct.nbytes);
    }
    /* a device model: the host copy was written, the device copy is what runs */
    return snn_model_push_host(m);
}

snn_status snn_model_check_finite(const snn_model *m) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_model_check_finite: model is NULL");
    /* a device model's host copy is refreshed on request: check what the device holds */
    SNN_TRY(snn_model_pull_host(m));
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        if (!ti.data) return snn_error(SNN_E_STATE, "snn_model_check_finite: tensor \"%s\" has no storage", ti.name);
        for (size_t k = 0; k < ti.numel; k++)
            if (!isfinite(ti.data[k]))
                return snn_error(SNN_E_NUMERIC, "the model's %s \"%s\" holds %s at index %zu (non-finite model)",
                                 ti.is_buffer ? "buffer" : "parameter", ti.name,
                                 isnan(ti.data[k]) ? "NaN" : ti.data[k] > 0 ? "+inf" : "-inf", k);
    }
    return SNN_OK;
}

/* Run by snn_model_build before it allocates the parameters (see model_internal.h): the
 * model the configuration describes must fit in the file, and every tensor it needs
 * must be there with its shape. A 3 KB file that claims a 4 GB model stops here. */
typedef struct {
    const snn_ckpt *c;
    int refused;  /* the message already names the file */
} precheck_ctx;

static snn_status precheck_tensors(const snn_model *m, const snn_ckpt *c) {
    uint64_t need = 0, have = 0;
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        need += (uint64_t)ti.numel * sizeof(float);
    }
    for (size_t i = 0; i < snn_ckpt_num_tensors(c); i++) {
        snn_ckpt_tensor t;
        SNN_TRY(snn_ckpt_tensor_at(c, i, &t));
        have += t.nbytes;
    }
    if (need > have)
        return snn_error(SNN_E_FORMAT, "%s: its configuration describes a model of %zu parameters and %zu buffer "
                         "values (%llu bytes of F32) but the file holds only %llu bytes of tensor data; refused "
                         "before allocating", snn_ckpt_path(c), snn_model_num_params(m), snn_model_num_buffers(m),
                         (unsigned long long)need, (unsigned long long)have);
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        snn_ckpt_tensor ct;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        SNN_TRY(check_tensor(&ti, c, &ct, 1));
    }
    return SNN_OK;
}

static snn_status precheck(const snn_model *m, void *ctx) {
    precheck_ctx *pc = ctx;
    snn_status st = precheck_tensors(m, pc->c);
    pc->refused = st != SNN_OK;
    return st;
}

snn_status snn_model_load(const char *path, uint64_t seed, snn_model **out, snn_ckpt **ckpt_out) {
    if (!out || !path) return snn_error(SNN_E_INVALID, "snn_model_load: NULL argument");
    *out = NULL;
    if (ckpt_out) *ckpt_out = NULL;
    snn_ckpt *c;
    SNN_TRY(snn_ckpt_open(path, &c));
    snn_model *m = NULL;
    snn_status st = snn_model_from_checkpoint(c, seed, &m);
    if (st != SNN_OK) {
        snn_ckpt_close(c);
        return st;
    }
    *out = m;
    if (ckpt_out) *ckpt_out = c;
    else snn_ckpt_close(c);
    return SNN_OK;
}

snn_status snn_model_from_checkpoint(const snn_ckpt *c, uint64_t seed, snn_model **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_model_from_checkpoint: out is NULL");
    *out = NULL;
    if (!c) return snn_error(SNN_E_INVALID, "snn_model_from_checkpoint: checkpoint is NULL");
    const char *path = snn_ckpt_path(c);
    const char *fmt = snn_ckpt_metadata(c, "format");
    const char *cfg = snn_ckpt_metadata(c, "snn_model_config");
    snn_status st = SNN_OK;
    if (!cfg)
        st = snn_error(SNN_E_FORMAT, "%s has no \"snn_model_config\" metadata: not written by snn_model_save "
                       "(a plain safetensors file can be loaded into a model built by hand with snn_model_load_weights)",
                       path);
    else if (fmt && strcmp(fmt, SNN_CKPT_FORMAT))
        st = snn_error(SNN_E_FORMAT, "%s: checkpoint format \"%.64s\" is not supported (this build reads %s)", path,
                       fmt, SNN_CKPT_FORMAT);
    snn_model *m = NULL;
    if (st == SNN_OK) {
        precheck_ctx pc = {c, 0};
        snn_model_set_build_check(precheck, &pc);
        st = snn_model_create_from_config(cfg, seed, &m);
        snn_model_set_build_check(NULL, NULL);
        if (st != SNN_OK && !pc.refused)
            st = snn_error_prefix(st, "%s: cannot rebuild the model from its configuration", path);
    }
    if (st == SNN_OK) st = snn_model_load_weights(m, c);
    if (st != SNN_OK) {
        snn_model_free(m);
        return st;
    }
    *out = m;
    return SNN_OK;
}
