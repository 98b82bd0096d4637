/* Distributed image-classification training (SpikingJelly's distributed.vision
 * train_classification, §2.6, for data parallelism): the loop over epochs and batches on
 * every rank of a (dp, pp, tp) mesh, DDP gradient averaging (ddp.h), the distributed
 * sampler (sampler.h), validation sharded over DP, and the metrics reduced over DP.
 *
 * The caller builds the model with the same seed on every rank, prepares its precision,
 * creates the optimizer (that order), checks the topology rules (snn_dist_check_rules)
 * and passes them in. With TP or PP sizes other than 1 the model is a vision stage's
 * (vision_stage.h, built with snn_vision_stage_create on the same mesh) and `stage` is set:
 * with PP = 1 the step is the DDP step above (TP communication happens inside the stage's
 * forward and backward); with PP > 1 it is the GPipe step (snn_vision_pipeline_train_step),
 * gradients averaged over DP by snn_vision_stage_dp_average, no DDP hook, and the ragged
 * last batch dropped. Gradient clipping is refused there (the norm would be a shard's). */
#ifndef SNN_DIST_VISION_TRAIN_H
#define SNN_DIST_VISION_TRAIN_H

#include "dist/comm.h"
#include "dist/vision_stage.h"
#include "snn/data.h"
#include "snn/model.h"
#include "snn/optim.h"
#include "snn/prepare.h"

typedef struct snn_dist_epoch_report {
    int epoch;                   /* 1-based */
    long optimizer_step;         /* steps so far */
    double train_loss;           /* sum(loss * batch) / sum(batch) over DP */
    double validation_loss, validation_accuracy;
} snn_dist_epoch_report;

/* SpikingJelly's returned metrics (§2.6 step 13). Memory is the process's peak resident
 * set (getrusage): the CPU has no caching allocator, so "reserved" equals "allocated". */
typedef struct snn_dist_metrics {
    double train_loss, validation_loss, validation_accuracy;
    double optimizer_step, timed_steps, training_seconds, images_per_second;
    double peak_memory_bytes, total_peak_memory_bytes, peak_reserved_memory_bytes, total_peak_reserved_memory_bytes;
    double data_parallel_size, pipeline_parallel_size, tensor_parallel_size, global_batch_size;
    double skipped_steps;        /* FP16 steps skipped on overflow (the same on every rank) */
} snn_dist_metrics;

typedef struct snn_dist_train_opts {
    snn_model *model;
    snn_vision_stage *stage;     /* NULL with TP = PP = 1; else model == stage->model */
    /* GPU data parallelism (TP = PP = 1): the steps and the validation run on this device
     * model of `model`, created with opts.dp = snn_ddp_cuda_collectives over the DP group's
     * NCCL communicator, so gradient averaging, BatchNorm broadcast and the FP8 amax
     * reduction happen inside the captured step; prec may be NULL (the device model holds
     * the precision). Every batch is full (the ragged last one is dropped: the step's shapes
     * are fixed), the loss is read back once an epoch, and the timed window is wall time
     * between device synchronisations. The host model receives the parameters at the end. */
    struct snn_cuda_model *gpu;
    int microbatches;            /* PP > 1: GPipe microbatches per batch (batch % K == 0) */
    snn_precision *prec;
    snn_optimizer *opt;
    const snn_dataset *train, *val;
    int time_steps;
    int batch_size;              /* per DP rank */
    int epochs;
    long max_steps;              /* <= 0: no limit */
    int timing_warmup_steps;     /* >= 0 */
    int use_mse;                 /* loss: MSE on firing rates (else cross-entropy on mean logits) */
    snn_encoding enc;
    uint64_t seed;
    snn_lr_sched sched;          /* checked by the caller; total_steps from snn_dist_total_steps */
    float clip;                  /* > 0: clip the global gradient norm */
    size_t bucket_bytes;         /* DDP bucket; 0: 25 MiB */
    /* resume: optimizer steps already taken (a checkpoint's progress). The loop continues at
     * epoch start_step / batches-per-epoch, batch start_step % batches-per-epoch, with the
     * same samples, encodings and learning rates as the uninterrupted run; the first epoch's
     * train_loss then averages only the batches run after the resume. */
    long start_step;
    /* rank 0 only, after each epoch's validation (may be NULL) */
    void (*on_epoch)(void *ctx, const snn_dist_epoch_report *r);
    /* every rank, after every optimizer step (may be NULL; tests check replicas here) */
    snn_status (*on_step)(void *ctx, long step);
    void *ctx;
} snn_dist_train_opts;

/* Steps the loop will run (for the learning-rate schedule): batches per epoch of the DP
 * sampler times epochs, capped by max_steps. */
long snn_dist_total_steps(const snn_mesh *mesh, const snn_dist_train_opts *o);

/* SpikingJelly's precision rules per topology (§2.4, §2.9): FP8 model precision and
 * neuron mixed precision require data_parallel "ddp" with TP = PP = 1; PP > 1 accepts
 * fp32 and bf16 only. data_parallel: "ddp" or "fsdp2". The message names the rule. */
snn_status snn_dist_check_rules(const char *data_parallel, int tp_size, int pp_size, int microbatches, int batch_size,
                                const snn_precision_config *cfg);

/* Collective over the mesh's world. Errors are values; a rank that fails returns while
 * the others may be waiting in a collective: the caller aborts the job then. */
snn_status snn_dist_train_classification(const snn_mesh *mesh, const snn_dist_train_opts *o, snn_dist_metrics *out);

/* Peak resident set of this process in bytes (0 if unknown). */
double snn_dist_peak_rss_bytes(void);

#endif
