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
#include "snn/vision_dist.h"

/* snn_dist_epoch_report, snn_dist_metrics and snn_dist_train_opts (the loop's options,
 * documented there) are public types: include/snn/vision_dist.h. */

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
