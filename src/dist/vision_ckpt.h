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

/* snn_vision_checkpoint_save / snn_vision_checkpoint_load: include/snn/vision_dist.h */
/* snn_vision_export_artifact and snn_vision_artifact_open: include/snn/vision.h;
 * snn_vision_stage_from_artifact (a stage for any topology from an artifact):
 * include/snn/vision_dist.h */

#endif
