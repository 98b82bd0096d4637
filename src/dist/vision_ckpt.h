/* Distributed vision checkpoints and the topology-independent inference artifact
 * (reference spikingjelly-distributed.md §2.11, §2.13; docs/checkpoint-format.md).
 *
 * Checkpoint: checkpoint_dir/step_XXXXXXXX/ holds
 *   config.json                        the recipe (snn_vision_training_recipe_json)
 *   pp_PPPP_tp_TTTT.safetensors        one training checkpoint per (pp, tp) shard: the
 *                                      stage's tensors under their canonical names at their
 *                                      local shapes, optimizer, loss-scaler and FP8 state
 *                                      (snn_training_checkpoint_save), the RNG state tensor
 *                                      "__rng__.state" (U64), metadata "vision_topology"
 *                                      and "vision_progress".
 * Saving is a collective over the world: rank 0 checks that the step directory does not
 * exist, creates a hidden ".step_XXXXXXXX.partial" directory and writes config.json; its
 * verdict is agreed by every rank before anything else (a failure there ends the save on
 * every rank, no rank waits in a barrier); then every dp-rank-0 rank writes its shard; the
 * outcome is agreed again, and only when every shard is written does rank 0 rename the
 * directory into place. A failed save leaves no step directory (the partial one is removed).
 * The directory must be visible to every writing rank (one host, or a shared file system).
 *
 * Artifact: one safetensors file with every canonical (dense) tensor at its dense shape,
 * loadable as a plain model checkpoint (snn_model_load, snn eval --checkpoint), plus the
 * metadata schema_version "1", model_config (the tagged vision model config), source
 * {"checkpoint", "pipeline_parallel_size", "tensor_parallel_size"}. */
#ifndef SNN_DIST_VISION_CKPT_H
#define SNN_DIST_VISION_CKPT_H

#include "dist/vision_stage.h"
#include "snn/prepare.h"
#include "snn/vision_dist.h" /* snn_vision_progress, SNN_VISION_RNG_WORDS (public types) */

/* Collective over mesh->world. model: this rank's stage model (prec, opt may be NULL).
 * rng: SNN_VISION_RNG_WORDS words of the caller's RNG state (NULL: zeros). path_out
 * (may be NULL) receives the step directory. */
snn_status snn_vision_checkpoint_save(const snn_mesh *mesh, const snn_vision_training_config *cfg, snn_model *model,
                                      snn_precision *prec, snn_optimizer *opt, const snn_vision_progress *progress,
                                      const uint64_t *rng, char *path_out, size_t cap);
/* Collective over mesh->world: resume from a step directory written with the same recipe
 * and the same TP x PP layout ("Checkpoint configuration does not match this training run"
 * otherwise; a different topology goes through the artifact). Restores the model, optimizer,
 * loss scaler, FP8 state, the model's step count, progress and rng. */
snn_status snn_vision_checkpoint_load(const snn_mesh *mesh, const snn_vision_training_config *cfg,
                                      const char *step_dir, snn_model *model, snn_precision *prec,
                                      snn_optimizer *opt, snn_vision_progress *progress, uint64_t *rng);

/* snn_vision_export_artifact and snn_vision_artifact_open: include/snn/vision.h */
/* Build this rank's stage for any topology from an artifact (re-sharding each tensor). */
snn_status snn_vision_stage_from_artifact(const char *path, const snn_mesh *mesh, snn_vision_stage **out);

#endif
