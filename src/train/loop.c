/* The training step and loop (include/snn/train.h): shuffle, encode, step, evaluate each
 * epoch, metrics.jsonl, checkpoints; exact resume from the position a checkpoint records. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "nn/model_internal.h"
#include "snn/loss.h"
#include "snn/train.h"
#include "train/step.h"
#include "train/train_internal.h"

#define OUT_DIR_MAX 4096
/* "/model.safetensors.tmp.<pid>" after the directory: the writer's temporary must fit too */
#define CKPT_SUFFIX_MAX 40

struct snn_trainer {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
    snn_train_opts o;
    snn_lr_sched sched;
    snn_train_position pos;
    size_t F, C;
    int N;
    float *xb, *xt, *dy;
    int32_t *yb;
    uint32_t *order;
    int order_epoch;      /* epoch whose permutation `order` holds (0: none) */
    int resumed;
    snn_train_step *step; /* the step with device values (step.c); NULL: the host-valued one */
    char out_dir[OUT_DIR_MAX];
    char dataset[256];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void plan_schedule(snn_trainer *t) {
    long total = t->pos.total_steps;
    t->sched = (snn_lr_sched){.kind = t->o.schedule, .base_lr = t->o.optim.lr, .warmup_steps = t->o.warmup,
                              .warmup_start_factor = 0.1f,
                              .total_steps = total > t->o.warmup ? total : t->o.warmup + 1, .min_lr = 0,
                              .step_size = t->pos.steps_per_epoch, .gamma = 0.5f};
}

void snn_trainer_free(snn_trainer *t) {
    if (!t) return;
    snn_train_step_free(t->step);
    snn_optimizer_free(t->opt);
    free(t->xb);
    free(t->xt);
    free(t->dy);
    free(t->yb);
    free(t->order);
    free(t);
}

snn_status snn_trainer_create(snn_model *m, snn_precision *p, const snn_train_opts *o, int train_samples,
                              snn_trainer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_trainer_create: out is NULL");
    *out = NULL;
    if (!m) return snn_error(SNN_E_INVALID, "snn_trainer_create: model is NULL");
    if (!p) return snn_error(SNN_E_STATE, "snn_trainer_create: prepare the model for a precision first "
                                          "(snn_prepare_model_for_precision, fp32 included)");
    if (snn_model_precision(m) != p)
        return snn_error(SNN_E_INVALID, "snn_trainer_create: the precision was prepared for another model");
    SNN_TRY(snn_train_opts_check(o));
    if (train_samples < 1) return snn_error(SNN_E_INVALID, "the training set has no samples");
    if (o->out_dir) {
        size_t l = strlen(o->out_dir);
        if (l == 0) return snn_error(SNN_E_INVALID, "the output directory is an empty string");
        if (l + CKPT_SUFFIX_MAX >= OUT_DIR_MAX)
            return snn_error(SNN_E_INVALID, "the output directory path is %zu bytes; at most %d fit with the "
                                            "checkpoint's file name", l, OUT_DIR_MAX - CKPT_SUFFIX_MAX - 1);
    }
    if (o->dataset && strlen(o->dataset) >= 256)
        return snn_error(SNN_E_INVALID, "the dataset name is longer than 255 bytes");
    snn_trainer *t = calloc(1, sizeof *t);
    if (!t) return snn_error(SNN_E_NOMEM, "out of memory for the trainer");
    t->m = m;
    t->p = p;
    t->o = *o;
    t->N = o->batch_size < train_samples ? o->batch_size : train_samples;
    t->o.batch_size = t->N;
    if (o->out_dir) {
        memcpy(t->out_dir, o->out_dir, strlen(o->out_dir) + 1);
        t->o.out_dir = t->out_dir;
    }
    if (o->dataset) {
        memcpy(t->dataset, o->dataset, strlen(o->dataset) + 1);
        t->o.dataset = t->dataset;
    }
    t->pos = (snn_train_position){.epoch = 1, .batch = 0, .step = 0, .epochs_done = 0,
                                  .steps_per_epoch = train_samples / t->N, .train_samples = train_samples};
    t->pos.total_steps = (long)o->epochs * t->pos.steps_per_epoch;
    if (t->pos.total_steps > SNN_TRAIN_MAX_STEPS) {
        int spe = t->pos.steps_per_epoch;
        snn_trainer_free(t);
        return snn_error(SNN_E_INVALID, "%d epochs of %d steps are more than %ld steps", o->epochs, spe,
                         SNN_TRAIN_MAX_STEPS);
    }
    plan_schedule(t);
    snn_status st = snn_lr_sched_check(&t->sched);
    t->F = snn_model_input_numel(m);
    t->C = snn_model_output_numel(m);
    size_t bx = 0, bt = 0, by = 0;
    if (st == SNN_OK && (!snn_train_size_mul(&bx, t->F, (size_t)t->N, sizeof(float)) ||
                         !snn_train_size_mul(&bt, bx, (size_t)o->T, 1) ||
                         !snn_train_size_mul(&by, t->C, (size_t)t->N * (size_t)o->T, sizeof(float))))
        st = snn_error(SNN_E_NOMEM, "a batch of %d samples x %d steps of %zu values is too large to allocate", t->N,
                       o->T, t->F);
    /* the optimizer comes after prepare (prepare.h's order) and belongs to the trainer */
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&o->optim, m, &t->opt);
    if (st == SNN_OK) st = snn_model_plan(m, o->T, t->N);
    if (st == SNN_OK) {
        t->xb = malloc(bx);
        t->xt = malloc(bt);
        t->dy = malloc(by);
        t->yb = malloc(sizeof(int32_t) * (size_t)t->N);
        t->order = malloc(sizeof(uint32_t) * (size_t)train_samples);
        if (!t->xb || !t->xt || !t->dy || !t->yb || !t->order)
            st = snn_error(SNN_E_NOMEM, "out of memory for training batches (%zu bytes of input, %zu of output "
                                        "gradient)", bt, by);
    }
    /* the whole step on the model's device (one graph on a GPU) where it runs this model */
    if (st == SNN_OK && snn_train_step_supported(m, p, t->opt))
        st = snn_train_step_create(m, p, t->opt, o->loss == SNN_TRAIN_LOSS_MSE_RATE ? 1 : 0, o->clip, 1, t->dy, &t->step);
    if (st != SNN_OK) {
        snn_trainer_free(t);
        return st;
    }
    *out = t;
    return SNN_OK;
}

snn_optimizer *snn_trainer_optimizer(snn_trainer *t) { return t ? t->opt : NULL; }
const snn_train_position *snn_trainer_position(const snn_trainer *t) { return t ? &t->pos : NULL; }
const snn_train_opts *snn_trainer_opts(const snn_trainer *t) { return t ? &t->o : NULL; }
float snn_trainer_lr(const snn_trainer *t, long step) { return snn_lr_schedule(&t->sched, step); }

/* ---- resume ---- */

#define SAME(field, fmt, a, b)                                                                        \
    do {                                                                                              \
        if ((a) != (b))                                                                               \
            return snn_error(SNN_E_INVALID, "%s: the checkpoint's run has " field " " fmt ", this one " fmt, \
                             snn_ckpt_path(c), a, b);                                                 \
    } while (0)

static snn_status check_same_run(const snn_trainer *t, const snn_ckpt *c, const snn_train_opts *r,
                                 const snn_train_position *rp) {
    const snn_train_opts *o = &t->o;
    SAME("a training set of", "%d samples", rp->train_samples, t->pos.train_samples);
    SAME("time steps", "%d", r->T, o->T);
    SAME("batch size", "%d", r->batch_size, o->batch_size);
    if (r->optim.kind != o->optim.kind)
        return snn_error(SNN_E_INVALID, "%s: the checkpoint's run uses %s, this one %s", snn_ckpt_path(c),
                         snn_optim_kind_name(r->optim.kind), snn_optim_kind_name(o->optim.kind));
    SAME("learning rate", "%g", (double)r->optim.lr, (double)o->optim.lr);
    SAME("weight decay", "%g", (double)r->optim.weight_decay, (double)o->optim.weight_decay);
    SAME("momentum", "%g", (double)r->optim.momentum, (double)o->optim.momentum);
    SAME("dampening", "%g", (double)r->optim.dampening, (double)o->optim.dampening);
    SAME("nesterov", "%d", r->optim.nesterov, o->optim.nesterov);
    SAME("beta1", "%g", (double)r->optim.beta1, (double)o->optim.beta1);
    SAME("beta2", "%g", (double)r->optim.beta2, (double)o->optim.beta2);
    SAME("eps", "%g", (double)r->optim.eps, (double)o->optim.eps);
    if (r->schedule != o->schedule)
        return snn_error(SNN_E_INVALID, "%s: the checkpoint's run uses the %s schedule, this one %s", snn_ckpt_path(c),
                         snn_lr_kind_name(r->schedule), snn_lr_kind_name(o->schedule));
    SAME("warm-up steps", "%ld", r->warmup, o->warmup);
    SAME("clip norm", "%g", (double)r->clip, (double)o->clip);
    if (r->loss != o->loss)
        return snn_error(SNN_E_INVALID, "%s: the checkpoint's run uses the %s loss, this one %s", snn_ckpt_path(c),
                         snn_train_loss_name(r->loss), snn_train_loss_name(o->loss));
    if (r->encoding != o->encoding)
        return snn_error(SNN_E_INVALID, "%s: the checkpoint's run uses %s encoding, this one %s", snn_ckpt_path(c),
                         snn_encoding_name(r->encoding), snn_encoding_name(o->encoding));
    if (r->seed != o->seed)
        return snn_error(SNN_E_INVALID, "%s: the checkpoint's run has seed %llu, this one %llu", snn_ckpt_path(c),
                         (unsigned long long)r->seed, (unsigned long long)o->seed);
    if (o->epochs < rp->epochs_done)
        return snn_error(SNN_E_INVALID, "%s already holds %d epochs, more than the %d asked for", snn_ckpt_path(c),
                         rp->epochs_done, o->epochs);
    return SNN_OK;
}

snn_status snn_trainer_resume(snn_trainer *t, const snn_ckpt *c) {
    if (!t || !c) return snn_error(SNN_E_INVALID, "snn_trainer_resume: NULL argument");
    snn_train_opts r;
    snn_train_position rp;
    SNN_TRY(snn_train_opts_from_checkpoint(c, &r, &rp));
    SNN_TRY(check_same_run(t, c, &r, &rp));
    /* the optimizer's step count (Adam's bias correction) is checked here too: text, a sign
     * or more steps than the run took would restore a wrong state silently */
    const char *os = snn_ckpt_metadata(c, "optimizer_steps");
    if (os) {
        long v = 0;
        const char *q = os;
        for (; *q >= '0' && *q <= '9' && v <= SNN_TRAIN_MAX_STEPS; q++) v = v * 10 + (*q - '0');
        if (q == os || *q || v > rp.step)
            return snn_error(SNN_E_FORMAT, "%s: metadata \"optimizer_steps\" is \"%.40s\", expected an integer "
                                           "between 0 and the run's %ld steps", snn_ckpt_path(c), os, rp.step);
    }
    SNN_TRY(snn_training_checkpoint_restore(t->m, t->p, t->opt, c));
    /* the restored weights are input too: a NaN in them would train on silently */
    SNN_TRY(snn_train_model_finite(t->m, "resuming"));
    long total = t->pos.total_steps;
    t->pos = rp;
    t->pos.total_steps = total; /* this run's epochs (equal unless extended) */
    t->order_epoch = 0;
    t->resumed = 1;
    return SNN_OK;
}

/* ---- one step ---- */

/* The step with device values: the update runs before the host sees the loss, so a
 * non-finite loss is reported after it (the run stops either way). */
static snn_status trainer_step_device(snn_trainer *t, const snn_tensor_view *xv, const int32_t *y, snn_step_result *r) {
    float lr = snn_lr_schedule(&t->sched, t->pos.step);
    snn_train_step_result sr;
    SNN_TRY(snn_train_step_run(t->step, xv, y, lr, &sr));
    if (!isfinite(sr.loss))
        return snn_error(SNN_E_NUMERIC, "the loss became %g at step %ld (lower the learning rate or clip the "
                                        "gradients)", (double)sr.loss, t->pos.step);
    if (sr.nonfinite)
        return snn_error(SNN_E_NUMERIC, "a parameter became NaN or infinite at step %ld (loss %g, gradient norm %g, "
                                        "lr %g): lower the learning rate or clip the gradients", t->pos.step,
                         (double)sr.loss, (double)sr.grad_norm, (double)lr);
    t->pos.step++;
    t->pos.batch++;
    if (r) *r = (snn_step_result){.loss = sr.loss, .correct = sr.correct, .skipped = sr.skipped,
                                  .grad_norm = sr.grad_norm};
    return SNN_OK;
}

static snn_status trainer_step_view(snn_trainer *t, const snn_tensor_view *xv, const int32_t *y, snn_step_result *r) {
    if (t->step) return trainer_step_device(t, xv, y, r);
    snn_step_result res = {0};
    int T = t->o.T, N = t->N, C = (int)t->C;
    snn_tensor_view yv = {.device = "cpu"};
    SNN_TRY(snn_model_forward_view(t->m, xv, 1, &yv));
    const float *out = yv.data;
    SNN_TRY(t->o.loss == SNN_TRAIN_LOSS_MSE_RATE ? snn_loss_mse_rate(out, y, T, N, C, &res.loss, t->dy, &res.correct)
                                                 : snn_loss_cross_entropy_mean_t(out, y, T, N, C, &res.loss, t->dy,
                                                                                 &res.correct));
    if (!isfinite(res.loss))
        return snn_error(SNN_E_NUMERIC, "the loss became %g at step %ld (lower the learning rate or clip the "
                                        "gradients)", (double)res.loss, t->pos.step);
    float lr = snn_lr_schedule(&t->sched, t->pos.step);
    SNN_TRY(snn_precision_backward(t->p, t->dy, t->opt, lr, t->o.clip, &res.grad_norm, &res.skipped));
    /* fused into the update: no extra pass over the parameters */
    if (snn_optimizer_nonfinite(t->opt))
        return snn_error(SNN_E_NUMERIC, "a parameter became NaN or infinite at step %ld (loss %g, gradient norm %g, "
                                        "lr %g): lower the learning rate or clip the gradients", t->pos.step,
                         (double)res.loss, (double)res.grad_norm, (double)lr);
    t->pos.step++;
    t->pos.batch++;
    if (r) *r = res;
    return SNN_OK;
}

snn_status snn_trainer_step(snn_trainer *t, const float *x, const int32_t *y, snn_step_result *r) {
    if (!t || !x || !y) return snn_error(SNN_E_INVALID, "snn_trainer_step: NULL argument");
    snn_tensor_view xv = {.dtype = SNN_F32, .device = "cpu", .data = (void *)x,
                          .numel = (size_t)t->o.T * (size_t)t->N * t->F};
    return trainer_step_view(t, &xv, y, r);
}

/* Direct encoding on a device model: the batch goes up once and is repeated T times on the
 * device (snn_encode_direct's x_t = x, the same bits), instead of T host copies and a T times
 * larger upload. */
static snn_status step_direct_on_device(snn_trainer *t, const float *xb, const int32_t *y, snn_step_result *r) {
    snn_model *m = t->m;
    const snn_backend *be = snn_model_backend(m);
    const size_t one = (size_t)t->N * t->F;
    SNN_TRY(be->upload(be, m->x_store, xb, one * sizeof(float)));
    for (int k = 1; k < t->o.T; k++) SNN_TRY(be->copy(be, m->x_store + (size_t)k * one, m->x_store, one * sizeof(float)));
    /* the backend's name ("cuda") names the model's own device */
    snn_tensor_view xv = {.dtype = SNN_F32, .device = be->name, .data = m->x_store, .numel = (size_t)t->o.T * one};
    return trainer_step_view(t, &xv, y, r);
}

/* ---- checkpoints ---- */

snn_status snn_trainer_save(snn_trainer *t, const char *path, const char *const *extra_kv) {
    if (!t || !path) return snn_error(SNN_E_INVALID, "snn_trainer_save: NULL argument");
    SNN_TRY(snn_train_model_finite(t->m, "refusing to write the checkpoint"));
    snn_train_position pos = t->pos;
    if (pos.batch >= pos.steps_per_epoch) { /* an epoch just ended: the next one is where to go on */
        pos.epoch++;
        pos.batch = 0;
        pos.epochs_done = pos.epoch - 1;
    }
    char buf[4096];
    const char *kv[48];
    SNN_TRY(snn_train_metadata(&t->o, &pos, buf, sizeof buf, kv, 12));
    size_t k = 0;
    while (kv[k]) k++;
    for (size_t i = 0; extra_kv && extra_kv[i] && extra_kv[i + 1]; i += 2) {
        if (k + 3 > sizeof kv / sizeof kv[0]) return snn_error(SNN_E_INVALID, "too many checkpoint metadata pairs");
        kv[k++] = extra_kv[i];
        kv[k++] = extra_kv[i + 1];
    }
    kv[k] = NULL;
    return snn_training_checkpoint_save(t->m, t->p, t->opt, path, kv);
}

/* ---- the loop ---- */

typedef struct run_ctx {
    snn_trainer *t;
    snn_train_callback cb;
    void *user;
    FILE *metrics;
    char metrics_path[OUT_DIR_MAX + 16];
    char ckpt_path[OUT_DIR_MAX + 32];
    long last_saved;      /* step of the last checkpoint written (-1: none) */
} run_ctx;

static snn_status emit(run_ctx *c, snn_train_event *e) {
    if (c->cb && c->cb(e, c->user) != 0) return snn_error(SNN_E_INVALID, "training stopped by the caller");
    return SNN_OK;
}

static snn_status save_ckpt(run_ctx *c, snn_train_event *ev) {
    if (!c->t->o.out_dir || c->last_saved == c->t->pos.step) return SNN_OK;
    SNN_TRY(snn_trainer_save(c->t, c->ckpt_path, NULL));
    c->last_saved = c->t->pos.step;
    snn_train_event e = *ev;
    e.kind = SNN_TRAIN_EVENT_CHECKPOINT;
    e.pos = c->t->pos;
    e.path = c->ckpt_path;
    return emit(c, &e);
}

static snn_status write_metrics(run_ctx *c, const snn_train_event *e) {
    if (!c->metrics) return SNN_OK;
    char line[512];
    snprintf(line, sizeof line,
             "{\"epoch\":%d,\"step\":%ld,\"train_loss\":%.6f,\"train_accuracy\":%.6f,\"test_loss\":%.6f,"
             "\"test_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_s\":%.3f,\"wall_s\":%.3f%s}\n",
             e->pos.epoch, e->pos.step, e->loss, e->accuracy, e->test_loss, e->test_accuracy, e->samples_per_s,
             e->epoch_s, e->wall_s, e->partial ? ",\"partial\":true" : "");
    /* a full disk shows at the flush: check both, or the file silently stays empty */
    if (fputs(line, c->metrics) == EOF || fflush(c->metrics) != 0 || ferror(c->metrics))
        return snn_error(SNN_E_IO, "cannot write '%s': %s", c->metrics_path, strerror(errno));
    return SNN_OK;
}

static snn_status open_outputs(run_ctx *c) {
    snn_trainer *t = c->t;
    if (!t->o.out_dir) return SNN_OK;
    snprintf(c->metrics_path, sizeof c->metrics_path, "%s/metrics.jsonl", t->out_dir);
    snprintf(c->ckpt_path, sizeof c->ckpt_path, "%s/model.safetensors", t->out_dir);
    SNN_TRY(snn_run_dir_clean(t->out_dir, "model.safetensors", NULL));
    SNN_TRY(snn_run_dir_clean(t->out_dir, "metrics.jsonl", NULL));
    /* a resume appends to the history of the run, cut back to what the checkpoint holds */
    if (t->resumed) SNN_TRY(snn_metrics_trim(c->metrics_path, t->pos.step));
    c->metrics = fopen(c->metrics_path, t->resumed ? "a" : "w");
    if (!c->metrics) return snn_error(SNN_E_IO, "cannot write '%s': %s", c->metrics_path, strerror(errno));
    return SNN_OK;
}

static int stop_now(const snn_trainer *t) { return t->o.max_steps > 0 && t->pos.step >= t->o.max_steps; }

snn_status snn_trainer_run(snn_trainer *t, const snn_dataset *train, const snn_dataset *test, snn_train_callback cb,
                           void *user, snn_train_summary *out) {
    if (!t || !train || !test) return snn_error(SNN_E_INVALID, "snn_trainer_run: NULL argument");
    if (snn_dataset_size(train) != t->pos.train_samples)
        return snn_error(SNN_E_INVALID, "the trainer was made for %d training samples, the dataset has %d",
                         t->pos.train_samples, snn_dataset_size(train));
    if (snn_dataset_features(train) != t->F || snn_dataset_features(test) != t->F)
        return snn_error(SNN_E_SHAPE, "the data has %zu (train) / %zu (test) values per sample, the model expects %zu",
                         snn_dataset_features(train), snn_dataset_features(test), t->F);
    if (snn_dataset_size(test) < 1) return snn_error(SNN_E_INVALID, "the test set has no samples to evaluate on");
    run_ctx c = {.t = t, .cb = cb, .user = user, .last_saved = t->resumed ? t->pos.step : -1};
    snn_train_summary sum = {0};
    snn_status st = open_outputs(&c);
    const int T = t->o.T, N = t->N, spe = t->pos.steps_per_epoch;
    double t_start = now_s();
    snn_train_event ev = {.kind = SNN_TRAIN_EVENT_START, .pos = t->pos, .epochs = t->o.epochs};
    if (st == SNN_OK) st = emit(&c, &ev);
    while (st == SNN_OK && t->pos.epoch <= t->o.epochs && !stop_now(t)) {
        const int epoch = t->pos.epoch;
        if (t->order_epoch != epoch) {
            st = snn_dataset_shuffle(train, t->o.seed, (uint64_t)epoch, t->order);
            t->order_epoch = epoch;
        }
        double loss_sum = 0, t0 = now_s();
        long correct = 0, seen = 0;
        int done = 0;
        while (st == SNN_OK && t->pos.batch < spe && !stop_now(t)) {
            const int b = t->pos.batch;
            snn_step_result r;
            if (t->o.encoding == SNN_ENCODING_DIRECT && t->m->owned_be && t->m->x_store) {
                /* the batch itself into the page-locked input buffer, repeated on the device */
                float *xb = snn_model_input_buffer(t->m);
                st = snn_dataset_batch(train, t->order + (size_t)b * N, N, xb, t->yb);
                if (st == SNN_OK) st = step_direct_on_device(t, xb, t->yb, &r);
            } else {
                st = snn_dataset_batch(train, t->order + (size_t)b * N, N, t->xb, t->yb);
                /* encoded straight into the model's input buffer (page-locked on a device:
                 * the upload is a DMA, not a staged copy) */
                float *xt = snn_model_input_buffer(t->m) ? snn_model_input_buffer(t->m) : t->xt;
                if (st == SNN_OK)
                    st = snn_encode(t->o.encoding, t->xb, N, t->F, T, t->o.seed, ((uint64_t)epoch << 32) | (uint64_t)b,
                                    xt);
                if (st == SNN_OK) st = snn_trainer_step(t, xt, t->yb, &r);
            }
            if (st != SNN_OK) break;
            done++;
            loss_sum += r.loss;
            correct += r.correct;
            seen += N;
            ev = (snn_train_event){.kind = SNN_TRAIN_EVENT_STEP, .pos = t->pos, .epochs = t->o.epochs,
                                   .loss = loss_sum / done, .accuracy = (double)correct / seen,
                                   .samples_per_s = seen / (now_s() - t0 + 1e-9)};
            st = emit(&c, &ev);
            /* a checkpoint inside an epoch, before any evaluation (one at an epoch's end waits for it) */
            if (st == SNN_OK && t->o.checkpoint_every && t->pos.step % t->o.checkpoint_every == 0 && t->pos.batch < spe)
                st = save_ckpt(&c, &ev);
        }
        if (st != SNN_OK) break;
        double dt = now_s() - t0;
        sum.train_s += dt;
        sum.samples += seen;
        int partial = t->pos.batch < spe;
        ev = (snn_train_event){.kind = SNN_TRAIN_EVENT_EPOCH, .pos = t->pos, .epochs = t->o.epochs,
                               .loss = done ? loss_sum / done : 0, .accuracy = seen ? (double)correct / seen : 0,
                               .samples_per_s = dt > 0 ? seen / dt : 0, .partial = partial, .epoch_s = dt};
        /* stopped inside an epoch: the checkpoint first, so that it holds exactly the state the
         * uninterrupted run has at this step (an evaluation may touch FP8 amax histories and
         * the forward counter) */
        if (partial) st = save_ckpt(&c, &ev);
        if (st == SNN_OK) st = snn_evaluate(t->m, test, T, N, t->o.encoding, t->o.seed, &ev.test_accuracy, &ev.test_loss);
        if (st == SNN_OK) st = snn_model_plan(t->m, T, N);
        if (st != SNN_OK) break;
        sum.evaluated = 1;
        sum.test_accuracy = ev.test_accuracy;
        sum.test_loss = ev.test_loss;
        ev.wall_s = now_s() - t_start;
        st = write_metrics(&c, &ev);
        if (st == SNN_OK && !partial) {
            t->pos.epochs_done = epoch;
            t->pos.epoch = epoch + 1;
            t->pos.batch = 0;
        }
        ev.pos = t->pos; /* a completed epoch: the position has moved on to the next one */
        if (st == SNN_OK) st = emit(&c, &ev);
        if (st == SNN_OK && !partial && t->o.checkpoint_every && t->pos.step % t->o.checkpoint_every == 0)
            st = save_ckpt(&c, &ev);
    }
    if (st == SNN_OK) st = save_ckpt(&c, &ev);
    if (c.metrics && fclose(c.metrics) != 0 && st == SNN_OK)
        st = snn_error(SNN_E_IO, "cannot write '%s': %s", c.metrics_path, strerror(errno));
    sum.steps = t->pos.step;
    sum.epochs_done = t->pos.epochs_done;
    sum.wall_s = now_s() - t_start;
    if (out) *out = sum;
    return st;
}
