/* The distributed optimizer: AdamW (any snn optimizer) whose state is sharded over the
 * data-parallel group, Megatron Core's use_distributed_optimizer on one flat buffer.
 *
 * Every DP rank holds the whole model (parameters = the FP32 master weights, and the
 * gradient buffer), but owns only the contiguous slice
 *     [begin_r, begin_r + len_r),  shard = ceil(n / DP),  begin_r = min(r * shard, n)
 * of the flat parameter array. Its optimizer state (exp_avg, exp_avg_sq: 2 * len_r floats)
 * exists for that slice only, so the optimizer state per rank is 1/DP of the unsharded one
 * (rounded up to the shard). A step:
 *   1. sums the gradient buffer over DP (all-reduce; the caller scaled every rank's
 *      contribution by 1 / the GLOBAL token count, so the sum is the global per-token
 *      gradient, the same as one process accumulating every microbatch);
 *   2. the global gradient norm: each rank's sum of squares of its slice (in double),
 *      all-reduced; clip coefficient as torch's clip_grad_norm_ (FP32, max / (norm + 1e-6));
 *      a non-finite norm skips the step on every rank alike;
 *   3. the optimizer updates the rank's slice (AdamW is elementwise, so this is exactly the
 *      unsharded update restricted to the slice);
 *   4. the updated slices are all-gathered into every rank's parameter array (a broadcast
 *      from each owner, in place: no buffer of the model's size).
 * With DP = 1 it is the plain optimizer over the whole buffer (clipping through
 * snn_clip_grad_norm), bit-identical to the one-process loop.
 *
 * Checkpoints hold the state in canonical (unsharded) order: snn_dist_optim_gather brings
 * every slice to one rank, snn_dist_optim_load_slice takes a rank's slice out of canonical
 * arrays, so a checkpoint written at one DP size resumes at any other. */
#ifndef SNN_DIST_OPTIM_H
#define SNN_DIST_OPTIM_H
#include <stddef.h>
#include "dist/comm.h"
#include "snn/model.h"
#include "snn/optim.h"

typedef struct snn_dist_optim snn_dist_optim;

/* An optimizer with options o over the model's flat parameter / gradient arrays, sharded
 * over dp (not owned; must outlive it). The weight-decay mask comes from each tensor's
 * `decay` field, as snn_optimizer_create_for_model. Marks the model as having an
 * optimizer. Not collective. A model placed on a device (snn_model_to): its optimizer runs
 * there over the rank's slice, and snn_dist_optim_local hands out host copies of the state
 * as any device optimizer does; at DP 1 the clip runs there too; over several ranks steps
 * 1, 2 and 4 go through the host (the gradients downloaded, reduced and clipped as a host
 * model's, the slice uploaded; the gathered parameters uploaded), so any communicator
 * works, several ranks may share one GPU, and the arithmetic is the host model's. */
snn_status snn_dist_optim_create(snn_comm *dp, const snn_optim_opts *o, snn_model *m, snn_dist_optim **out);
void snn_dist_optim_free(snn_dist_optim *d);

/* This rank's slice of the flat buffer, and the optimizer over it (its state tensors hold
 * len floats each). */
size_t snn_dist_optim_begin(const snn_dist_optim *d);
size_t snn_dist_optim_len(const snn_dist_optim *d);
size_t snn_dist_optim_total(const snn_dist_optim *d);
snn_optimizer *snn_dist_optim_local(snn_dist_optim *d);
/* Bytes of optimizer state this rank holds (state tensors of its slice) and the bytes the
 * unsharded optimizer would hold. */
size_t snn_dist_optim_state_bytes(const snn_dist_optim *d);
size_t snn_dist_optim_full_state_bytes(const snn_dist_optim *d);

/* Collective over dp: steps 1-4 above. clip <= 0: measure only. *grad_norm: the global
 * pre-clip norm (NaN / inf when not finite); *skipped: 1 when the step was skipped (a
 * non-finite norm) or skip_in was set. */
snn_status snn_dist_optim_step(snn_dist_optim *d, float lr, float clip, int skip_in, float *grad_norm, int *skipped);

/* Collective over dp: steps 3-4 only, for a caller that has summed the gradients over dp
 * and clipped them itself (a tensor / pipeline parallel stage, whose norm spans TP and PP).
 * skip: leave the parameters and the state unchanged (a non-finite norm). */
snn_status snn_dist_optim_apply(snn_dist_optim *d, float lr, int skip);

/* Collective over dp: the canonical state. On `root`, full (the caller's optimizer over the
 * whole model, e.g. a temporary one for writing a checkpoint, with the same kind) receives
 * every rank's slice of every state tensor and the step count; full is ignored elsewhere. */
snn_status snn_dist_optim_gather(snn_dist_optim *d, int root, snn_optimizer *full);

/* Not collective: set this rank's state from canonical arrays. state[i] points at the
 * canonical values (total floats, possibly unaligned) of local state tensor i (the order
 * of snn_optimizer_state); steps: the completed step count. Values are checked (finite;
 * exp_avg_sq >= 0) before anything is written. */
snn_status snn_dist_optim_load_slice(snn_dist_optim *d, const void *const *state, size_t nstates, long steps,
                                     const char *source);
#endif
