/* snn — the training step and the train / evaluate / predict loops.
 *
 * A run is described by snn_train_opts. The trainer owns the optimizer (created after the
 * precision was prepared, the order prepare.h asks for), every batch buffer (allocated once:
 * a step allocates nothing) and the run's position (epoch, batch, step). The loop calls a
 * progress callback and never prints; with an output directory it writes the checkpoint
 * (out_dir/model.safetensors, atomically) and out_dir/metrics.jsonl itself.
 *
 * Resume is exact: a checkpoint written by the trainer records everything the run needs
 * (metadata "snn_trainer", a JSON object: the options below, the schedule and its length,
 * the position in the data order, the seed), so a run stopped after k epochs or in the
 * middle of an epoch (max_steps, or a periodic checkpoint and a crash) and resumed
 * produces the same bytes as the run that was never stopped.
 *
 * The rules that make that hold: data order, Poisson spikes and dropout masks are pure
 * functions of (seed, epoch, batch, forward count); a checkpoint at the end of an epoch
 * is written after that epoch's evaluation, one in the middle of an epoch before any
 * evaluation; the schedule always spans `epochs` (max_steps stops the run, it does not
 * shorten the schedule). */
#ifndef SNN_TRAIN_H
#define SNN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include "checkpoint.h"
#include "data.h"
#include "error.h"
#include "model.h"
#include "optim.h"
#include "prepare.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_train_loss {
    SNN_TRAIN_LOSS_CE = 0,       /* cross-entropy of the mean output over T */
    SNN_TRAIN_LOSS_MSE_RATE = 1  /* MSE between the firing rate and one-hot labels */
} snn_train_loss;
const char *snn_train_loss_name(snn_train_loss l); /* "ce", "mse" */
int snn_train_loss_parse(const char *name);       /* -1 if unknown */

/* The largest values a run may ask for (also the limits on what a checkpoint may record). */
#define SNN_TRAIN_MAX_T 100000
#define SNN_TRAIN_MAX_BATCH (1 << 20)
#define SNN_TRAIN_MAX_EPOCHS 1000000
#define SNN_TRAIN_MAX_STEPS ((long)1 << 40)

typedef struct snn_train_opts {
    int T;                  /* time steps, 1..SNN_TRAIN_MAX_T */
    int batch_size;         /* samples per step (a larger value is cut to the training set) */
    int epochs;             /* planned passes over the training data; the schedule spans them */
    long max_steps;         /* stop once the run has taken this many steps in all (0: none) */
    snn_optim_opts optim;   /* optim.lr is the schedule's base rate */
    snn_lr_kind schedule;   /* cosine decays to 0 over epochs * steps_per_epoch; step halves
                             * the rate every epoch */
    long warmup;            /* linear warm-up steps from 0.1 * lr (0: none) */
    float clip;             /* > 0: clip the global gradient norm; 0: off */
    snn_encoding encoding;
    snn_train_loss loss;
    uint64_t seed;          /* data order and Poisson spikes (the weights' seed is the model's) */
    long checkpoint_every;  /* write a checkpoint every this many steps (0: at the end only) */
    const char *out_dir;    /* NULL: write nothing (the caller saves with snn_trainer_save) */
    const char *dataset;    /* a name recorded in the checkpoint (may be NULL) */
} snn_train_opts;

/* Defaults: T 4, batch 128, 10 epochs, Adam 1e-3, cosine, direct encoding, CE, seed 42. */
snn_train_opts snn_train_opts_default(void);
/* The option checks the trainer makes (a message names the field and the value). */
snn_status snn_train_opts_check(const snn_train_opts *o);

/* Where a run stands. epoch is 1-based and is the epoch being trained (or, when batch == 0,
 * about to start); batch is the next batch of that epoch; step counts steps taken. */
typedef struct snn_train_position {
    int epoch;
    int batch;
    long step;
    int epochs_done;        /* epochs completed and evaluated */
    int steps_per_epoch;
    long total_steps;       /* the schedule's length: epochs * steps_per_epoch */
    int train_samples;      /* size of the training set the run was planned for */
} snn_train_position;

/* Read a trainer checkpoint's options and position (strictly: a missing, malformed,
 * negative or out-of-range field is SNN_E_FORMAT naming it). String fields of *o point
 * into the checkpoint, which must outlive them. A checkpoint without trainer metadata is
 * SNN_E_FORMAT. */
snn_status snn_train_opts_from_checkpoint(const snn_ckpt *c, snn_train_opts *o,
                                          snn_train_position *pos);

typedef struct snn_trainer snn_trainer;

/* A trainer for model m under its prepared precision p (required: prepare first, fp32
 * included) on a training set of `train_samples` samples of `features` values. Creates the
 * optimizer. m and p must outlive the trainer. */
snn_status snn_trainer_create(snn_model *m, snn_precision *p, const snn_train_opts *o,
                              int train_samples, snn_trainer **out);
void snn_trainer_free(snn_trainer *t);
snn_optimizer *snn_trainer_optimizer(snn_trainer *t);
const snn_train_position *snn_trainer_position(const snn_trainer *t);
const snn_train_opts *snn_trainer_opts(const snn_trainer *t);
/* The lr of step `step` under the run's schedule. */
float snn_trainer_lr(const snn_trainer *t, long step);

/* Continue from a trainer checkpoint: weights, precision state (FP8 scales, loss scale),
 * optimizer state, step counts and the position. The checkpoint's recorded run must agree
 * with the trainer's options (T, batch size, optimizer, schedule, lr, clip, loss, encoding,
 * seed, training-set size); epochs, max_steps, checkpoint_every and out_dir may differ:
 * a larger `epochs` extends the schedule (exact only for the steps still to come). */
snn_status snn_trainer_resume(snn_trainer *t, const snn_ckpt *c);

/* One step on a batch: x [T][N][features] encoded input, y [N] labels (N = the trainer's
 * batch). Forward, loss, backward, unscale / clip, optimizer update (with the fused
 * non-finite check), FP8 recipe update, with the loss and the flags kept on the model's
 * device and read once at the end (one CUDA graph a step where that is on: SNN_TRAIN_STEP
 * in docs/architecture.md). A non-finite loss or a parameter that became NaN/Inf is
 * SNN_E_NUMERIC (the run must stop; nothing is written; the update of that step has
 * already run, so the model holds its values). */
typedef struct snn_step_result {
    float loss;
    int correct;
    int skipped;      /* fp16: inf/nan gradients, the step was skipped and the scale backed off */
    float grad_norm;  /* before clipping (NaN when not finite) */
} snn_step_result;
snn_status snn_trainer_step(snn_trainer *t, const float *x, const int32_t *y, snn_step_result *r);

/* Progress of snn_trainer_run. */
typedef enum snn_train_event_kind {
    SNN_TRAIN_EVENT_START = 0,      /* before the first step */
    SNN_TRAIN_EVENT_STEP = 1,       /* after every step */
    SNN_TRAIN_EVENT_EPOCH = 2,      /* an epoch ended (or the run stopped) and was evaluated */
    SNN_TRAIN_EVENT_CHECKPOINT = 3  /* a checkpoint was written to `path` */
} snn_train_event_kind;

typedef struct snn_train_event {
    snn_train_event_kind kind;
    snn_train_position pos;   /* after the step; for EPOCH, the position after the epoch
                               * (the next epoch's start unless partial) */
    int epochs;
    double loss, accuracy;    /* running means over the epoch so far */
    double samples_per_s;     /* training throughput of the epoch so far */
    /* SNN_TRAIN_EVENT_EPOCH */
    int partial;              /* the run stopped inside the epoch */
    double test_loss, test_accuracy, epoch_s, wall_s;
    const char *path;         /* SNN_TRAIN_EVENT_CHECKPOINT */
} snn_train_event;

/* Return non-zero to stop the run (the result is SNN_E_INVALID "stopped"). */
typedef int (*snn_train_callback)(const snn_train_event *e, void *user);

typedef struct snn_train_summary {
    double test_accuracy, test_loss;
    double train_s, wall_s;
    long samples, steps;
    int epochs_done;
    int evaluated;            /* 0 when the run had nothing left to do */
} snn_train_summary;

/* Train from the current position until `epochs` are done or max_steps is reached:
 * evaluate on `test` after each epoch (and where the run stops), call cb (may be NULL),
 * and with out_dir write metrics.jsonl (appended; lines newer than the checkpoint a resume
 * started from are dropped first) and checkpoints (every checkpoint_every steps and at the
 * end). Before any write it removes model.safetensors.tmp.<pid> files of writers that are
 * no longer running. */
snn_status snn_trainer_run(snn_trainer *t, const snn_dataset *train, const snn_dataset *test,
                           snn_train_callback cb, void *user, snn_train_summary *out);

/* Write a trainer checkpoint (model, precision, optimizer, trainer metadata) to path.
 * Refuses a model holding a non-finite parameter or buffer. extra_kv: more metadata
 * pairs (NULL-terminated, may be NULL). */
snn_status snn_trainer_save(snn_trainer *t, const char *path, const char *const *extra_kv);

/* The trainer metadata of a run, as key/value pairs for a checkpoint writer: kv receives
 * up to 10 pointers and a NULL (kv_len >= 11), pointing into buf (2 KiB is enough). Used by trainers that keep their own loop
 * (the GPU runner) so that their checkpoints resume on either device. */
snn_status snn_train_metadata(const snn_train_opts *o, const snn_train_position *pos, char *buf,
                              size_t buf_len, const char **kv, size_t kv_len);

/* ---- run directories ---- */
/* Remove dir/<base>.tmp.<pid> files whose pid is not a running process (left by a writer
 * killed in the middle of an atomic write). *removed (may be NULL) receives the count. */
snn_status snn_run_dir_clean(const char *dir, const char *base, int *removed);
/* Keep dir/metrics.jsonl consistent with a checkpoint at `step`: drop every line of a later
 * step and partial lines of that step (rewritten atomically). A missing file is fine. */
snn_status snn_metrics_trim(const char *path, long step);

/* ---- evaluation and prediction ---- */
/* Accuracy and mean cross-entropy (of the mean output over T) of m on ds, in batches of N
 * (the last batch padded; only real samples count). Refuses a non-finite model. The
 * stream of Poisson spikes is fixed, so the result is reproducible. */
snn_status snn_evaluate(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc,
                        uint64_t seed, double *accuracy, double *loss);

/* The predicted class (argmax of the mean output over T; ties to the first class) and that
 * mean, per sample of ds, in order; cb returns non-zero to stop. Direct encoding. Refuses a
 * non-finite model. */
typedef int (*snn_predict_callback)(int index, int cls, double score, void *user);
snn_status snn_predict(snn_model *m, const snn_dataset *ds, int T, int N, snn_predict_callback cb,
                       void *user);

/* Accumulate predictions and the cross-entropy of the mean output over T for the first
 * `valid` samples of y [T][N][C]; mean is scratch of C doubles. */
void snn_score_batch(const float *y, int T, int N, int C, const int32_t *labels, int valid,
                     double *mean, long *correct, double *loss_sum);

#ifdef __cplusplus
}
#endif
#endif
