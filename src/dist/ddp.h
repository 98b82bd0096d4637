/* Data-parallel training (DDP) over a communicator's DP group, on the model's one flat
 * gradient buffer.
 *
 * What a step does with it, in snn_precision_backward's order (precision/runtime.h hook):
 *   1. backward fills the gradient buffer;
 *   2. the buffer is all-reduced (sum) in buckets of bucket_bytes, from its end (the last
 *      layers, whose gradients backward finishes first) to its start, up to
 *      SNN_COMM_MAX_PENDING buckets in flight, then multiplied by 1/DP (the average);
 *      FP16 reduces the scaled gradients, as torch's DDP does before GradScaler.unscale_;
 *   3. FP16: the inf/NaN flag of the unscale is MAX-reduced, so every rank skips the same
 *      steps and backs its loss scale off identically;
 *   4. clipping and the optimizer step run on identical averaged gradients;
 *   5. FP8 delayed scaling: this step's amax of every FP8 tensor state is MAX-reduced
 *      before the scale update, so amax histories and scales stay bit-identical.
 * Buffers (BatchNorm running statistics): broadcast from DP rank 0 before every forward,
 * SpikingJelly's broadcast_buffers = (step_mode == "m") rule for multi-step models (every
 * snn model runs multi-step). Parameters and buffers are broadcast once at creation. */
#ifndef SNN_DIST_DDP_H
#define SNN_DIST_DDP_H

#include "dist/comm.h"
#include "snn/cuda.h"
#include "snn/model.h"
#include "snn/prepare.h"

typedef struct snn_ddp snn_ddp;

#define SNN_DDP_DEFAULT_BUCKET_BYTES (25u << 20) /* torch's bucket_cap_mb = 25 */

/* dp: the DP group (not owned; size 1 installs nothing). p: the model's prepared precision
 * (required). bucket_bytes 0: the default. Collective over dp.
 * A model placed on a device (snn_model_to) averages its device gradients: through
 * device_dp when given (an NCCL communicator over the same ranks as dp, one GPU per rank:
 * the buckets are enqueued on the model's stream, the host does not wait), otherwise
 * through the host (each step downloads the gradients, all-reduces them over dp and
 * uploads them: correct anywhere, e.g. several ranks sharing one GPU, at the cost of two
 * copies of the gradients). The flag, amax and buffer rules are the same on every path.
 * device_dp must be NULL for a host model. */
snn_status snn_ddp_create(snn_comm *dp, snn_comm *device_dp, snn_model *m, snn_precision *p, size_t bucket_bytes,
                          snn_ddp **out);
void snn_ddp_free(snn_ddp *d);
/* Before every forward in training. */
snn_status snn_ddp_broadcast_buffers(snn_ddp *d);
/* Buckets of the last step (0 before the first). */
int snn_ddp_buckets(const snn_ddp *d);

/* SyncBatchNorm (torch's convert_sync_batchnorm; SpikingJelly's vision DDP does not use it):
 * every BatchNorm of m normalises with the statistics of the whole DP batch and sums its
 * backward projections over dp, so DDP with batch b per rank equals one process with batch
 * DP * b for BatchNorm models too. Per forward 2 all-reduces of C + 1 and C doubles, per
 * backward one of 2C. dp NULL or of size 1: turned off. *n_bn: BatchNorms converted. Every
 * rank must run the same forwards (the reductions are collective). */
snn_status snn_ddp_sync_batchnorm(snn_comm *dp, snn_model *m, int *n_bn);

/* On the GPU the same rules run inside the captured step (snn_cuda_model_opts.dp): this
 * table over dp (an NCCL communicator; the one-process one for a single replica) is what
 * the step calls. dp must outlive the device model. */
snn_cuda_collectives snn_ddp_cuda_collectives(snn_comm *dp);

#endif
