/* The local part of a vision model on one rank of a (dp, pp, tp) mesh: the modules of its
 * pipeline stage, with tensor-parallel layers at their local sizes, as an ordinary snn_model
 * whose tensors carry their canonical (dense) names; and the GPipe / streaming pipeline
 * schedules over the stages (vision_pipeline.c).
 *
 * Tensor-parallel recipes (docs/distributed.md):
 *   fcsnn      hidden Linear i: column when i is even (bias sharded), row when odd (full bias
 *              after the all-reduce); the head is row-parallel when depth is odd, else
 *              replicated.
 *   convsnn    conv0 column + BN0 sharded, conv1 row (BN1 replicated), fc1 column, fc2 row.
 *   spikformer stem convs alternate column (with sharded BN) / row (BN replicated), RPE
 *              replicated; per block: QKV column sharded by head (groups 3), its BN with the
 *              same indices, attention core with heads/TP heads, proj row; MLP fc1 column +
 *              sharded BN, fc2 row; head replicated.
 * Pipeline cuts (PP 1, 2 or 4; stage s takes chunks [s*4/PP, (s+1)*4/PP)):
 *   spikformer chunks: patch stem | tokens + blocks [0, c) | blocks [c, 2c) |
 *              blocks [2c, depth) + token mean + head, c = ceil(depth / 3)
 *              (depth 6: [0, 2, 2, 2] blocks); PP 4 needs a block in the last chunk.
 *   convsnn    chunks: conv0-BN-IF-pool | conv1-BN-IF-pool | flatten-fc1-IF | fc2-IF.
 *   fcsnn      pieces: each [Linear, LIF] block and the head; stage s takes pieces
 *              [s*(depth+1)/PP, (s+1)*(depth+1)/PP) (needs depth + 1 >= PP).
 * Boundary tensors are the local activations at the cut ([T, mb, per-sample shape], the
 * channel shard where the cut follows a column layer): stage (pp, tp) talks to (pp +- 1, tp). */
#ifndef SNN_DIST_VISION_STAGE_H
#define SNN_DIST_VISION_STAGE_H

#include "dist/comm.h"
#include "dist/tp.h"
#include "snn/checkpoint.h"
#include "snn/loss.h"
#include "snn/vision.h"
#include "snn/vision_dist.h" /* the public declarations (the stage an opaque handle there) */

typedef struct snn_pipeline snn_pipeline;

typedef struct snn_vision_stage {
    snn_vision_model_config cfg;
    int pp_rank, pp_size, tp_rank, tp_size;
    snn_comm *tp, *pp;         /* not owned; NULL when the degree is 1 (or build-only) */
    snn_model *model;          /* the local stage (owned) */
    snn_shard_rule *rules;     /* per tensor of model, in snn_model_tensor order */
    size_t in_numel, out_numel; /* per sample, local */
    int first, last;           /* 1 on the first / last pipeline stage */
    snn_pipeline *pipe;        /* schedules' buffers, NULL until snn_vision_pipeline_plan */
} snn_vision_stage;

/* Validate (model config, PP, TP) and build the stage's modules (parameters drawn from a
 * generic init, to be replaced by one of the two loaders below). */
snn_status snn_vision_stage_build(const snn_vision_model_config *m, int pp_rank, int pp_size, int tp_rank,
                                  int tp_size, snn_comm *tp, snn_comm *pp, snn_vision_stage **out);
/* Build, then take this rank's part of the dense model built with `seed`, so that every
 * topology starts from the same weights as one process. */
snn_status snn_vision_stage_create(const snn_vision_model_config *m, const snn_mesh *mesh, uint64_t seed,
                                   snn_vision_stage **out);
/* Copy this rank's part of each canonical tensor. get(name, ctx, &shape, &rank, &data)
 * returns the canonical tensor of that name (SNN_E_FORMAT when missing). */
typedef snn_status (*snn_canonical_get_fn)(const char *name, void *ctx, int *rank, int64_t *shape,
                                           const float **data);
snn_status snn_vision_stage_load_canonical(snn_vision_stage *s, snn_canonical_get_fn get, void *ctx);
void snn_vision_stage_free(snn_vision_stage *s);

/* Which chunk range / unit range a stage holds (for tests and docs). */
snn_status snn_vision_stage_units(const snn_vision_model_config *m, int pp_rank, int pp_size, int *lo, int *hi,
                                  int *n_units);
/* Number of Spikformer blocks (or fcsnn blocks, convsnn conv blocks) in a stage. */
int snn_vision_stage_blocks(const snn_vision_stage *s);

/* ---- pipeline schedules (vision_pipeline.c) ----
 * Plan buffers for T time steps, a local batch of N samples (per DP rank) and K
 * microbatches (N % K == 0); every stage of a pipeline must use the same values. Buffers
 * are fixed-shape [T, N/K, boundary] arrays, allocated here, never in a step. */
snn_status snn_vision_pipeline_plan(snn_vision_stage *s, int T, int N, int K);
/* Messages between stages travel in BF16 (bf16 != 0) or FP32. plan picks BF16 when the stage
 * model is prepared with bf16 precision, FP32 otherwise; this overrides it. Every stage of a
 * pipeline must agree. */
snn_status snn_vision_pipeline_set_wire_bf16(snn_vision_stage *s, int bf16);
typedef enum snn_vision_loss { SNN_VISION_LOSS_CE = 0, SNN_VISION_LOSS_MSE = 1 } snn_vision_loss;
/* One training step's forward and backward (gradients ACCUMULATED into the model's gradient
 * array: zero them first). x: [T, N, input] on the first stage (NULL elsewhere); labels [N]
 * on the last stage (NULL elsewhere). With PP 1: one forward/backward of the whole batch.
 * With PP > 1: GPipe over the K microbatches: every microbatch forward (the stage's neuron
 * state is reset at the start of each microbatch forward), then the backwards in reverse
 * order; a microbatch other than the last is recomputed from its saved stage input before
 * its backward (GPipe's re-materialisation), with BatchNorm's running statistics restored
 * so that each microbatch updates them once. The loss is the mean of the microbatch losses
 * (each the mean over its samples), computed on the last stage and broadcast over the PP
 * group: *loss and *correct are valid on every stage. */
snn_status snn_vision_pipeline_train_step(snn_vision_stage *s, const float *x, const int32_t *labels,
                                          snn_vision_loss loss_kind, float *loss, int *correct);
/* With PP > 1 no DDP hook runs (the reference wraps no DDP around a pipeline stage): after
 * snn_vision_pipeline_train_step, average the stage's gradients over the DP group (sum, then
 * 1/DP) before the optimizer step. dp NULL or of size 1: nothing. */
snn_status snn_vision_stage_dp_average(snn_vision_stage *s, snn_comm *dp);
/* Forward-only streaming pipeline (evaluation / prediction): the K microbatches flow through
 * the stages; the last stage writes the [T, N, classes] output into out (other stages:
 * out may be NULL). One PP barrier per batch. */
snn_status snn_vision_pipeline_forward(snn_vision_stage *s, const float *x, float *out);

#endif
