/* snn — training gpt / spikelm language models: the lifecycle of a Megatron Core style SNN
 * language model (SpikingJelly's distributed.llm train), on one process or data parallel
 * over the processes of a communicator.
 *
 * A trainer is created from a validated snn_lm_training_config and a communicator (the
 * world). With tensor and pipeline parallel sizes 1 the world is the data-parallel group
 * and the steps below apply; with TP * PP > 1 the ranks form the (dp, pp, tp) mesh, each
 * holds its stage of the model and a step is the stage's 1F1B pipeline over the same
 * microbatches, its gradient reductions and global-norm clip and AdamW on the local shard
 * (its state sharded further over DP when DP > 1; fp32 / bf16 only; docs/lm.md "Tensor and
 * pipeline parallel from the CLI").
 * Context parallel (TP = PP = 1 only) shares each sequence over CP ranks. Per optimizer
 * step (data parallel):
 *   - num_microbatches = global / (micro * DP) microbatches of `micro` semantic samples on
 *     every rank, the token ids tiled T times along the batch;
 *   - sampler: the train_steps * global sample indices are shuffled once with the seed
 *     (sample i = row i mod N); step s consumes positions [s*global, (s+1)*global) of that
 *     order and DP rank r reads the CONTIGUOUS part [s*global + r*global/DP, +global/DP),
 *     microbatch k of it at offset k*micro. Every DP size therefore consumes the same samples
 *     per step, and a resume at step k (at any DP size) continues with the same batches;
 *   - per-token loss over the GLOBAL batch: every rank scales its gradient by 1 / (global *
 *     S) (training samples carry no padding, so the global token count is known before the
 *     forward), the gradient buffers are summed over DP, so DP = N computes the gradient of
 *     one process accumulating all microbatches;
 *   - global gradient-norm clip, AdamW on the FP32 master weights with the learning rate of
 *     the sample-based schedule (snn_lm_lr_at) at the scheduler's samples; with DP > 1 the
 *     optimizer state is sharded over DP (the distributed optimizer: each rank updates its
 *     contiguous slice of the flat parameter buffer, then the slices are all-gathered);
 *   - metrics: loss sums and token counts summed over DP in float64, step time MAX over the
 *     ranks, peak memory MAX (peak_memory_bytes) and SUM (total_peak_memory_bytes).
 * Precision through snn_prepare_model_for_precision: fp32, bf16 (any DP), fp16 and fp8
 * (one process, one microbatch per step on the CPU).
 *
 * Checkpoints: checkpoint_dir/step_XXXXXXX/checkpoint.safetensors (the directory appears
 * atomically), written by rank 0 only: the weights, the precision state, the optimizer state
 * in canonical (unsharded) order, the recipe, the training config and the progress (TP / PP
 * stages are gathered to that same canonical layout). A resume (cfg.resume) refuses another
 * recipe and works at any DP size and TP / PP topology: every rank takes its part.
 *
 * Failures are agreed: every function below that takes part in a collective returns the
 * same status and message on every rank (a failure on one rank, a missing file say, is
 * reported by all), so no rank is left waiting; the library prints nothing. */
#ifndef SNN_LM_TRAIN_H
#define SNN_LM_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "lm.h"
#include "lm_config.h"
#include "comm.h"
#include "model.h"
#include "tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- evaluation (one process) ---- */
typedef struct snn_lm_eval_scratch snn_lm_eval_scratch;
/* Buffers for forward-only batches of `micro` samples of S tokens with T time steps. */
snn_status snn_lm_eval_scratch_create(int T, int micro, int S, snn_lm_eval_scratch **out);
void snn_lm_eval_scratch_free(snn_lm_eval_scratch *s);
/* Forward-only loss over samples first..first+count-1 of ds (row i mod N) in batches of
 * micro (a short last batch is padded with zero loss mask). m must be planned for
 * (T, micro). Returns the totals (loss sum, token count) in double. */
snn_status snn_lm_evaluate(snn_model *m, const snn_gpt_opts *o, const snn_token_dataset *ds, int micro, int64_t first,
                           int64_t count, snn_lm_eval_scratch *s, double *loss_sum, double *tokens);

/* ---- training ---- */
typedef struct snn_lm_trainer snn_lm_trainer;

/* Facts of a created trainer (identical on every rank except rank and the slice). */
typedef struct snn_lm_train_info {
    int rank, data_parallel_size;
    int64_t num_microbatches;          /* per rank and step */
    int spiking, time_steps, seq_len, vocab;
    size_t parameters;
    const char *precision;             /* "fp32", "bf16", "fp16", "fp8" */
    long start_step;                   /* > 0 after a resume */
    size_t optimizer_state_bytes;      /* this rank's optimizer state */
    size_t optimizer_state_bytes_full; /* the unsharded optimizer's */
    size_t optimizer_slice_begin, optimizer_slice_len; /* this rank's slice of the flat buffer */
} snn_lm_train_info;

/* One optimizer step's reduced metrics (identical on every rank). */
typedef struct snn_lm_step_metrics {
    long optimizer_step, consumed_samples;
    double lm_loss, loss_sum, tokens;  /* lm_loss = loss_sum / tokens over the global batch */
    double grad_norm, lr;
    int update_successful;
    double step_seconds;               /* MAX over the ranks */
    long timed_steps;
    double training_seconds, semantic_tokens_per_second, neural_steps_per_second;
    long long peak_memory_bytes, total_peak_memory_bytes;
} snn_lm_step_metrics;

/* Collective over comm. cfg must be complete (sequence_length and vocab_size resolved;
 * snn_lm_training_config_validate passes) (CP > 1 only with TP = PP = 1); the topology rules of
 * snn_lm_training_topology are refused with their message (SNN_E_INVALID). Opens the data,
 * builds the model (seed), prepares the precision, creates the (distributed) optimizer and
 * every buffer, draws the sample order and, with cfg->resume, restores the checkpoint.
 * comm must outlive the trainer. */
snn_status snn_lm_trainer_create(const snn_lm_training_config *cfg, snn_comm *comm, snn_lm_trainer **out);
/* The same with the model placed on `device` ("cpu" = snn_lm_trainer_create, "cuda",
 * "cuda:N"; NULL = "cpu") before the precision and the optimizer (snn_model_to). A device
 * run is one process with TP = PP = CP = DP = 1 (anything else is refused with
 * SNN_E_UNSUPPORTED: the reductions move host memory); a build without CUDA refuses "cuda"
 * with SNN_E_UNSUPPORTED. The loss of fp32 / bf16 steps runs on the device (the labels go
 * up, d(loss)/d(logits) stays there); fp16 / fp8 and validation compute it on the host copy
 * of the logits. Checkpoints are the CPU's format (a cuda run resumes on the cpu and back). */
snn_status snn_lm_trainer_create_on(const snn_lm_training_config *cfg, snn_comm *comm, const char *device,
                                    snn_lm_trainer **out);
void snn_lm_trainer_free(snn_lm_trainer *t);
const snn_lm_train_info *snn_lm_trainer_info(const snn_lm_trainer *t);
snn_model *snn_lm_trainer_model(snn_lm_trainer *t);
long snn_lm_trainer_step_count(const snn_lm_trainer *t);

/* Collective: one optimizer step (allocates nothing). */
snn_status snn_lm_trainer_step(snn_lm_trainer *t, snn_lm_step_metrics *out);
/* Collective: the validation loss over eval_steps * global samples of valid.npy (each rank
 * a contiguous 1/DP of them; totals summed over DP in float64). */
snn_status snn_lm_trainer_validate(snn_lm_trainer *t, double *loss_sum, double *tokens);
/* Collective: write checkpoint_dir/step_XXXXXXX (rank 0 writes; the optimizer state is
 * gathered to it). dir_out (may be NULL) receives the directory; *seconds (may be NULL)
 * the time taken, MAX over the ranks. */
snn_status snn_lm_trainer_save(snn_lm_trainer *t, char *dir_out, size_t cap, double *seconds);
/* Collective: restore a step_XXXXXXX directory (or its checkpoint.safetensors) written by
 * any DP size: the recipe must equal this run's, its step fit train_steps. */
snn_status snn_lm_trainer_load(snn_lm_trainer *t, const char *path);

/* The loop. Events carry a JSON line (the same on every rank: a program prints it on rank 0). */
typedef enum snn_lm_train_event_kind {
    SNN_LM_EVENT_START = 0,      /* before the first step: json describes the run */
    SNN_LM_EVENT_LOG = 1,        /* every log_interval steps and at the last */
    SNN_LM_EVENT_VALIDATION = 2, /* every eval_interval steps */
    SNN_LM_EVENT_CHECKPOINT = 3, /* a checkpoint was written */
    SNN_LM_EVENT_END = 4         /* json: the final metrics (also written to metrics.json) */
} snn_lm_train_event_kind;
typedef struct snn_lm_train_event {
    snn_lm_train_event_kind kind;
    const snn_lm_step_metrics *metrics; /* the last step (NULL for START) */
    const char *json;
    double validation_lm_loss;          /* VALIDATION */
    const char *checkpoint;             /* CHECKPOINT: the directory */
} snn_lm_train_event;
typedef void (*snn_lm_train_callback)(const snn_lm_train_event *e, void *user);

/* Collective: steps until train_steps, with validation, logs and checkpoints (every
 * checkpoint_interval steps and at the end); rank 0 writes checkpoint_dir/metrics.json. */
snn_status snn_lm_trainer_run(snn_lm_trainer *t, snn_lm_train_callback cb, void *user);

#ifdef __cplusplus
}
#endif
#endif
