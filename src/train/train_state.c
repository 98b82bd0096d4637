/* Trainer metadata of a checkpoint: the run's options, its schedule and the position in the
 * data order, as one JSON object under the key "snn_trainer", written with cJSON and read
 * back strictly (every field present, of its type, integral where it must be, in range):
 * a checkpoint is input like any other file, and a resume trusts nothing in it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "snn/train.h"

#define TRAINER_FORMAT 1

const char *snn_train_loss_name(snn_train_loss l) {
    switch (l) {
    case SNN_TRAIN_LOSS_CE: return "ce";
    case SNN_TRAIN_LOSS_MSE_RATE: return "mse";
    }
    return NULL;
}

int snn_train_loss_parse(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "ce")) return SNN_TRAIN_LOSS_CE;
    if (!strcmp(name, "mse")) return SNN_TRAIN_LOSS_MSE_RATE;
    return -1;
}

snn_train_opts snn_train_opts_default(void) {
    snn_train_opts o;
    memset(&o, 0, sizeof o);
    o.T = 4;
    o.batch_size = 128;
    o.epochs = 10;
    o.optim = snn_optim_defaults(SNN_OPTIM_ADAM);
    o.schedule = SNN_LR_COSINE;
    o.encoding = SNN_ENCODING_DIRECT;
    o.loss = SNN_TRAIN_LOSS_CE;
    o.seed = 42;
    return o;
}

snn_status snn_train_opts_check(const snn_train_opts *o) {
    if (!o) return snn_error(SNN_E_INVALID, "training options are NULL (use snn_train_opts_default)");
    if (o->T < 1 || o->T > SNN_TRAIN_MAX_T)
        return snn_error(SNN_E_INVALID, "time steps must be between 1 and %d (got %d)", SNN_TRAIN_MAX_T, o->T);
    if (o->batch_size < 1 || o->batch_size > SNN_TRAIN_MAX_BATCH)
        return snn_error(SNN_E_INVALID, "batch size must be between 1 and %d (got %d)", SNN_TRAIN_MAX_BATCH,
                         o->batch_size);
    if (o->epochs < 1 || o->epochs > SNN_TRAIN_MAX_EPOCHS)
        return snn_error(SNN_E_INVALID, "epochs must be between 1 and %d (got %d)", SNN_TRAIN_MAX_EPOCHS, o->epochs);
    if (o->max_steps < 0 || o->max_steps > SNN_TRAIN_MAX_STEPS)
        return snn_error(SNN_E_INVALID, "max steps must be between 0 (none) and %ld (got %ld)", SNN_TRAIN_MAX_STEPS,
                         o->max_steps);
    if (o->warmup < 0 || o->warmup > SNN_TRAIN_MAX_STEPS)
        return snn_error(SNN_E_INVALID, "warm-up steps must be between 0 and %ld (got %ld)", SNN_TRAIN_MAX_STEPS,
                         o->warmup);
    if (o->checkpoint_every < 0 || o->checkpoint_every > SNN_TRAIN_MAX_STEPS)
        return snn_error(SNN_E_INVALID, "checkpoint interval must be between 0 (end only) and %ld steps (got %ld)",
                         SNN_TRAIN_MAX_STEPS, o->checkpoint_every);
    if (!isfinite(o->clip) || o->clip < 0)
        return snn_error(SNN_E_INVALID, "clip norm must be finite and >= 0 (0: off; got %g)", (double)o->clip);
    if (!(o->optim.lr > 0) || !isfinite(o->optim.lr))
        return snn_error(SNN_E_INVALID, "learning rate must be finite and > 0 (got %g)", (double)o->optim.lr);
    if (!snn_optim_kind_name(o->optim.kind))
        return snn_error(SNN_E_INVALID, "unknown optimizer kind %d", (int)o->optim.kind);
    if (!snn_lr_kind_name(o->schedule)) return snn_error(SNN_E_INVALID, "unknown schedule kind %d", (int)o->schedule);
    if (!snn_train_loss_name(o->loss)) return snn_error(SNN_E_INVALID, "unknown loss kind %d", (int)o->loss);
    if (o->encoding != SNN_ENCODING_DIRECT && o->encoding != SNN_ENCODING_POISSON)
        return snn_error(SNN_E_INVALID, "unknown encoding %d", (int)o->encoding);
    return SNN_OK;
}

/* ---- writing ---- */

static int add_num(cJSON *o, const char *k, double v) { return cJSON_AddNumberToObject(o, k, v) != NULL; }

snn_status snn_train_metadata(const snn_train_opts *o, const snn_train_position *pos, char *buf,
                              size_t buf_len, const char **kv, size_t kv_len) {
    if (!o || !pos || !buf || !kv || kv_len < 11)
        return snn_error(SNN_E_INVALID, "snn_train_metadata: NULL argument or kv shorter than 11");
    cJSON *j = cJSON_CreateObject(), *op = NULL;
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    int ok = j != NULL;
    /* floats go through double exactly, and cJSON prints a double with enough digits to
     * read it back bit for bit */
    ok = ok && add_num(j, "format", TRAINER_FORMAT) && add_num(j, "epochs", o->epochs) &&
         add_num(j, "epochs_done", pos->epochs_done) && add_num(j, "epoch", pos->epoch) &&
         add_num(j, "batch", pos->batch) && add_num(j, "step", (double)pos->step) &&
         add_num(j, "steps_per_epoch", pos->steps_per_epoch) && add_num(j, "total_steps", (double)pos->total_steps) &&
         add_num(j, "train_samples", pos->train_samples) &&
         add_num(j, "time_steps", o->T) && add_num(j, "batch_size", o->batch_size) &&
         cJSON_AddStringToObject(j, "encoding", snn_encoding_name(o->encoding)) &&
         cJSON_AddStringToObject(j, "loss", snn_train_loss_name(o->loss)) && add_num(j, "clip", o->clip) &&
         cJSON_AddStringToObject(j, "seed", seed) &&
         cJSON_AddStringToObject(j, "schedule", snn_lr_kind_name(o->schedule)) &&
         add_num(j, "warmup", (double)o->warmup) && add_num(j, "checkpoint_every", (double)o->checkpoint_every) &&
         (op = cJSON_AddObjectToObject(j, "optimizer")) != NULL &&
         cJSON_AddStringToObject(op, "kind", snn_optim_kind_name(o->optim.kind)) && add_num(op, "lr", o->optim.lr) &&
         add_num(op, "weight_decay", o->optim.weight_decay) && add_num(op, "momentum", o->optim.momentum) &&
         add_num(op, "dampening", o->optim.dampening) && add_num(op, "nesterov", o->optim.nesterov ? 1 : 0) &&
         add_num(op, "beta1", o->optim.beta1) && add_num(op, "beta2", o->optim.beta2) && add_num(op, "eps", o->optim.eps);
    if (ok && o->dataset) ok = cJSON_AddStringToObject(j, "dataset", o->dataset) != NULL;
    char *txt = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!txt) return snn_error(SNN_E_NOMEM, "out of memory writing the trainer metadata");
    /* buf: the JSON, then the flat values older readers (and eval / predict) use */
    size_t need = strlen(txt) + 1;
    char *p = buf, *end = buf + buf_len;
    if (need + 64 > buf_len) {
        free(txt);
        return snn_error(SNN_E_INVALID, "trainer metadata needs %zu bytes, the buffer has %zu", need + 64, buf_len);
    }
    memcpy(p, txt, need);
    free(txt);
    size_t k = 0;
    kv[k++] = "snn_trainer";
    kv[k++] = p;
    p += need;
    int w = snprintf(p, (size_t)(end - p), "%d", o->T);
    kv[k++] = "time_steps";
    kv[k++] = p;
    p += w + 1;
    w = snprintf(p, (size_t)(end - p), "%d", pos->epochs_done);
    kv[k++] = "epochs";
    kv[k++] = p;
    p += w + 1;
    kv[k++] = "encoding";
    kv[k++] = snn_encoding_name(o->encoding);
    kv[k] = NULL;
    if (o->dataset) {
        kv[k++] = "dataset";
        kv[k++] = o->dataset;
        kv[k] = NULL;
    }
    return SNN_OK;
}

/* ---- reading ---- */

static snn_status get_num(const cJSON *o, const char *k, double lo, double hi, int integral, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return snn_error(SNN_E_FORMAT, "trainer metadata: \"%s\" is missing", k);
    if (!cJSON_IsNumber(v)) return snn_error(SNN_E_FORMAT, "trainer metadata: \"%s\" is not a number", k);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi || (integral && x != floor(x)))
        return snn_error(SNN_E_FORMAT, "trainer metadata: \"%s\" is %.17g, expected %s between %.17g and %.17g", k, x,
                         integral ? "an integer" : "a number", lo, hi);
    *out = x;
    return SNN_OK;
}

static snn_status get_str(const cJSON *o, const char *k, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(v) || !v->valuestring)
        return snn_error(SNN_E_FORMAT, "trainer metadata: \"%s\" is %s", k, v ? "not a string" : "missing");
    *out = v->valuestring;
    return SNN_OK;
}

/* Strict decimal: digits only, no sign, no spaces, no overflow. */
static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    uint64_t x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *out = x;
    return 1;
}

/* Strings handed back point into the checkpoint's metadata, which outlives the parse;
 * cJSON's copies do not, so each is matched against a fixed name table or the metadata. */
static snn_status parse_trainer(const cJSON *j, const snn_ckpt *c, snn_train_opts *o, snn_train_position *pos) {
    double v;
    const char *s;
    SNN_TRY(get_num(j, "format", TRAINER_FORMAT, TRAINER_FORMAT, 1, &v));
    SNN_TRY(get_num(j, "epochs", 1, SNN_TRAIN_MAX_EPOCHS, 1, &v));
    o->epochs = (int)v;
    SNN_TRY(get_num(j, "epochs_done", 0, o->epochs, 1, &v));
    pos->epochs_done = (int)v;
    SNN_TRY(get_num(j, "time_steps", 1, SNN_TRAIN_MAX_T, 1, &v));
    o->T = (int)v;
    SNN_TRY(get_num(j, "batch_size", 1, SNN_TRAIN_MAX_BATCH, 1, &v));
    o->batch_size = (int)v;
    SNN_TRY(get_num(j, "train_samples", 1, 2147483647.0, 1, &v));
    pos->train_samples = (int)v;
    SNN_TRY(get_num(j, "steps_per_epoch", 1, pos->train_samples, 1, &v));
    pos->steps_per_epoch = (int)v;
    SNN_TRY(get_num(j, "total_steps", 1, (double)SNN_TRAIN_MAX_STEPS, 1, &v));
    pos->total_steps = (long)v;
    if (pos->total_steps != (long)o->epochs * pos->steps_per_epoch)
        return snn_error(SNN_E_FORMAT, "trainer metadata: total_steps %ld is not epochs %d x steps_per_epoch %d",
                         pos->total_steps, o->epochs, pos->steps_per_epoch);
    SNN_TRY(get_num(j, "step", 0, (double)pos->total_steps, 1, &v));
    pos->step = (long)v;
    SNN_TRY(get_num(j, "epoch", 1, (double)o->epochs + 1, 1, &v));
    pos->epoch = (int)v;
    SNN_TRY(get_num(j, "batch", 0, pos->steps_per_epoch - 1, 1, &v));
    pos->batch = (int)v;
    if (pos->step != (long)(pos->epoch - 1) * pos->steps_per_epoch + pos->batch)
        return snn_error(SNN_E_FORMAT, "trainer metadata: step %ld does not match epoch %d, batch %d of %d", pos->step,
                         pos->epoch, pos->batch, pos->steps_per_epoch);
    if (pos->epochs_done != pos->epoch - 1)
        return snn_error(SNN_E_FORMAT, "trainer metadata: epochs_done %d does not match epoch %d", pos->epochs_done,
                         pos->epoch);
    o->max_steps = 0; /* a stop point belongs to one invocation and is not recorded */
    SNN_TRY(get_num(j, "warmup", 0, (double)SNN_TRAIN_MAX_STEPS, 1, &v));
    o->warmup = (long)v;
    SNN_TRY(get_num(j, "checkpoint_every", 0, (double)SNN_TRAIN_MAX_STEPS, 1, &v));
    o->checkpoint_every = (long)v;
    SNN_TRY(get_num(j, "clip", 0, 3.4e38, 0, &v));
    o->clip = (float)v;
    SNN_TRY(get_str(j, "encoding", &s));
    if (snn_encoding_from_name(s, &o->encoding) != SNN_OK)
        return snn_error(SNN_E_FORMAT, "trainer metadata: unknown encoding \"%s\"", s);
    SNN_TRY(get_str(j, "loss", &s));
    int l = snn_train_loss_parse(s);
    if (l < 0) return snn_error(SNN_E_FORMAT, "trainer metadata: unknown loss \"%s\"", s);
    o->loss = (snn_train_loss)l;
    SNN_TRY(get_str(j, "schedule", &s));
    int k = snn_lr_kind_parse(s);
    if (k < 0) return snn_error(SNN_E_FORMAT, "trainer metadata: unknown schedule \"%s\"", s);
    o->schedule = (snn_lr_kind)k;
    SNN_TRY(get_str(j, "seed", &s));
    if (!parse_u64(s, &o->seed)) return snn_error(SNN_E_FORMAT, "trainer metadata: seed \"%s\" is not a decimal integer", s);
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "optimizer");
    if (!cJSON_IsObject(op)) return snn_error(SNN_E_FORMAT, "trainer metadata: \"optimizer\" is missing");
    SNN_TRY(get_str(op, "kind", &s));
    k = snn_optim_kind_parse(s);
    if (k < 0) return snn_error(SNN_E_FORMAT, "trainer metadata: unknown optimizer \"%s\"", s);
    o->optim = snn_optim_defaults((snn_optim_kind)k);
    SNN_TRY(get_num(op, "lr", 1e-45, 3.4e38, 0, &v));
    o->optim.lr = (float)v;
    SNN_TRY(get_num(op, "weight_decay", 0, 3.4e38, 0, &v));
    o->optim.weight_decay = (float)v;
    SNN_TRY(get_num(op, "momentum", 0, 3.4e38, 0, &v));
    o->optim.momentum = (float)v;
    SNN_TRY(get_num(op, "dampening", -3.4e38, 3.4e38, 0, &v));
    o->optim.dampening = (float)v;
    SNN_TRY(get_num(op, "nesterov", 0, 1, 1, &v));
    o->optim.nesterov = (int)v;
    SNN_TRY(get_num(op, "beta1", 0, 1, 0, &v));
    o->optim.beta1 = (float)v;
    SNN_TRY(get_num(op, "beta2", 0, 1, 0, &v));
    o->optim.beta2 = (float)v;
    SNN_TRY(get_num(op, "eps", 1e-45, 3.4e38, 0, &v));
    o->optim.eps = (float)v;
    /* the dataset name: the flat key holds the same text and lives in the checkpoint */
    o->dataset = snn_ckpt_metadata(c, "dataset");
    return snn_train_opts_check(o);
}

snn_status snn_train_opts_from_checkpoint(const snn_ckpt *c, snn_train_opts *o, snn_train_position *pos) {
    if (!c || !o || !pos) return snn_error(SNN_E_INVALID, "snn_train_opts_from_checkpoint: NULL argument");
    const char *txt = snn_ckpt_metadata(c, "snn_trainer");
    if (!txt)
        return snn_error(SNN_E_FORMAT, "%s has no trainer metadata (\"snn_trainer\"): it was not written by snn train "
                         "or predates resumable checkpoints", snn_ckpt_path(c));
    *o = snn_train_opts_default();
    memset(pos, 0, sizeof *pos);
    cJSON *j = cJSON_Parse(txt);
    snn_status st;
    if (!cJSON_IsObject(j)) st = snn_error(SNN_E_FORMAT, "trainer metadata is not a JSON object");
    else st = parse_trainer(j, c, o, pos);
    cJSON_Delete(j);
    if (st != SNN_OK) return snn_error_prefix(st, "%s", snn_ckpt_path(c));
    return SNN_OK;
}
