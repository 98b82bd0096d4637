/* snn — distributed image classification: SpikingJelly's distributed.vision training loop
 * (train_classification), the stage of a vision model that one rank of a (dp, pp, tp) mesh
 * holds, the forward-only streaming pipeline of evaluation and prediction, and the step
 * checkpoints of a run. The configurations, the artifact and the registries are vision.h;
 * the mesh and the data-parallel helpers are dist.h.
 *
 * Order of a training program (every rank, the same seed):
 *   world (snn_comm_init_world) -> mesh (snn_mesh_open) -> snn_dist_check_rules -> the dense
 *   model, or with TP or PP > 1 this rank's stage (snn_vision_stage_create; train its
 *   snn_vision_stage_model) -> prepare the precision -> the optimizer -> optionally
 *   snn_vision_checkpoint_load -> snn_dist_train_classification -> snn_vision_checkpoint_save
 *   -> with TP or PP > 1 snn_vision_export_artifact (one process) for the dense model.
 * Collectives are marked; a rank that fails one returns while the others may be waiting:
 * the caller ends the job then (snn_comm_abort). */
#ifndef SNN_VISION_DIST_H
#define SNN_VISION_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "dist.h"
#include "error.h"
#include "model.h"
#include "optim.h"
#include "prepare.h"
#include "vision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the stage of one rank ----
 * The modules of this rank's pipeline stage, with tensor-parallel layers at their local
 * sizes, as an ordinary snn_model whose tensors carry their canonical (dense) names
 * (docs/distributed.md lists the tensor-parallel recipes and the pipeline cuts). */
typedef struct snn_vision_stage snn_vision_stage;

/* Collective over the mesh's TP and PP groups: build this rank's stage of the dense model
 * built with `seed`, so that every topology starts from the same weights as one process. */
snn_status snn_vision_stage_create(const snn_vision_model_config *m, const snn_mesh *mesh, uint64_t seed,
                                   snn_vision_stage **out);
/* The same from an artifact (snn_vision_export_artifact), for any topology: each tensor is
 * re-sharded for this rank. */
snn_status snn_vision_stage_from_artifact(const char *path, const snn_mesh *mesh, snn_vision_stage **out);
/* Frees the stage's model too. */
void snn_vision_stage_free(snn_vision_stage *s);
/* The stage's model (owned by the stage; NULL for NULL). */
snn_model *snn_vision_stage_model(const snn_vision_stage *s);
/* The model configuration the stage was built from (NULL for NULL). */
const snn_vision_model_config *snn_vision_stage_model_config(const snn_vision_stage *s);
/* 1 on the first / last pipeline stage (0 for NULL): the first takes the input batch, the
 * last writes the output. */
int snn_vision_stage_is_first(const snn_vision_stage *s);
int snn_vision_stage_is_last(const snn_vision_stage *s);
/* This rank's place in its tensor-parallel group (-1 for NULL). */
int snn_vision_stage_tp_rank(const snn_vision_stage *s);
/* Values per sample of the stage's input (on the first stage: the image's features; 0 for
 * NULL). */
size_t snn_vision_stage_input_numel(const snn_vision_stage *s);

/* ---- the streaming pipeline (evaluation / prediction) ----
 * Plan buffers for T time steps, a local batch of N samples (per DP rank) and K
 * microbatches (N % K == 0); every stage of a pipeline must use the same values. Buffers
 * are fixed-shape, allocated here, never in a step. */
snn_status snn_vision_pipeline_plan(snn_vision_stage *s, int T, int N, int K);
/* Collective over the PP group: the K microbatches of x ([T, N, input] on the first stage,
 * NULL elsewhere) flow through the stages; the last stage writes the [T, N, classes] output
 * into out (other stages: out may be NULL). */
snn_status snn_vision_pipeline_forward(snn_vision_stage *s, const float *x, float *out);

/* ---- step checkpoints (docs/checkpoint-format.md) ----
 * checkpoint_dir/step_XXXXXXXX/: the recipe (config.json) and one training checkpoint per
 * (pp, tp) shard, written atomically (a failed save leaves no step directory). The
 * directory must be visible to every writing rank (one host or a shared file system). */
typedef struct snn_vision_progress {
    long step;            /* optimizer steps so far */
    long epoch;           /* 0-based epoch of the next batch */
    long batch_in_epoch;  /* batches of that epoch already consumed */
} snn_vision_progress;

#define SNN_VISION_RNG_WORDS 4

/* Collective over the mesh's world. model: this rank's model or stage model (prec, opt may
 * be NULL). rng: SNN_VISION_RNG_WORDS words of the caller's RNG state (NULL: zeros).
 * path_out (may be NULL) receives the step directory (cap bytes). */
snn_status snn_vision_checkpoint_save(const snn_mesh *mesh, const snn_vision_training_config *cfg, snn_model *model,
                                      snn_precision *prec, snn_optimizer *opt, const snn_vision_progress *progress,
                                      const uint64_t *rng, char *path_out, size_t cap);
/* Collective over the mesh's world: resume from a step directory written with the same
 * recipe and the same TP x PP layout (a different topology goes through the artifact).
 * Restores the model, optimizer, loss scaler, FP8 state, the model's step count, progress
 * and rng. */
snn_status snn_vision_checkpoint_load(const snn_mesh *mesh, const snn_vision_training_config *cfg,
                                      const char *step_dir, snn_model *model, snn_precision *prec,
                                      snn_optimizer *opt, snn_vision_progress *progress, uint64_t *rng);

/* ---- the training loop ---- */
typedef struct snn_dist_epoch_report {
    int epoch;                   /* 1-based */
    long optimizer_step;         /* steps so far */
    double train_loss;           /* sum(loss * batch) / sum(batch) over DP */
    double validation_loss, validation_accuracy;
} snn_dist_epoch_report;

/* SpikingJelly's returned metrics. Memory is the process's peak resident set (getrusage):
 * the CPU has no caching allocator, so "reserved" equals "allocated". */
typedef struct snn_dist_metrics {
    double train_loss, validation_loss, validation_accuracy;
    double optimizer_step, timed_steps, training_seconds, images_per_second;
    double peak_memory_bytes, total_peak_memory_bytes, peak_reserved_memory_bytes, total_peak_reserved_memory_bytes;
    double data_parallel_size, pipeline_parallel_size, tensor_parallel_size, global_batch_size;
    double skipped_steps;        /* FP16 steps skipped on overflow (the same on every rank) */
} snn_dist_metrics;

typedef struct snn_dist_train_opts {
    snn_model *model;
    snn_vision_stage *stage;     /* NULL with TP = PP = 1; else model == its stage model */
    /* A model placed on a GPU (snn_model_to before prepare; TP = PP = 1) trains through the
     * same loop: its gradients are averaged over the DP group by device_dp, an NCCL
     * communicator over the DP group's ranks (snn_comm_nccl_create, one GPU per rank), or,
     * when NULL, through the host over the DP group (any communicator, several ranks per GPU
     * allowed). NULL for a host model. */
    struct snn_comm *device_dp;
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
    /* every rank, after every optimizer step (may be NULL); a failure (set the message with
     * snn_error) ends the loop on this rank */
    snn_status (*on_step)(void *ctx, long step);
    void *ctx;
} snn_dist_train_opts;

/* Steps the loop will run (for the learning-rate schedule): batches per epoch of the DP
 * sampler times epochs, capped by max_steps (0 for a NULL mesh or options). */
long snn_dist_total_steps(const snn_mesh *mesh, const snn_dist_train_opts *o);
/* SpikingJelly's precision rules per topology: FP8 model precision and neuron mixed
 * precision require data_parallel "ddp" with TP = PP = 1; PP > 1 accepts fp32 and bf16 only.
 * data_parallel: "ddp" or "fsdp2". The message names the rule. */
snn_status snn_dist_check_rules(const char *data_parallel, int tp_size, int pp_size, int microbatches, int batch_size,
                                const snn_precision_config *cfg);
/* Collective over the mesh's world: the loop over epochs and batches with DDP gradient
 * averaging, the distributed sampler, validation sharded over DP and the metrics reduced
 * over DP (*out valid on every rank). */
snn_status snn_dist_train_classification(const snn_mesh *mesh, const snn_dist_train_opts *o, snn_dist_metrics *out);

#ifdef __cplusplus
}
#endif
#endif
