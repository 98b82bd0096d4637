/* Tensor parallelism by channel sharding (reference spikingjelly-distributed.md §2.8).
 *
 * A TP wrapper is a module that holds one child, the layer at its local size, under the
 * transparent local name "@" so that the child's tensors keep their canonical dotted names
 * ("conv_fc.4.weight"). Three modes:
 *   column  the child keeps the output channels of this rank (weight and bias rows). Forward:
 *           the child on the (replicated) input, output is the local channel shard. Backward:
 *           the input gradient is all-reduced (sum) over the TP group.
 *   row     the child keeps the input channels of this rank (weight columns) and has no bias.
 *           Forward: child on the local input shard, all-reduce (sum) of the output, then the
 *           wrapper's own full bias ("<name>.bias", replicated). Backward: the bias gradient
 *           from the full dy, the child's backward gives the local input gradient; no
 *           communication.
 *   shard   no communication: marks a per-channel layer (BatchNorm) whose child holds the
 *           channels of this rank (weight, bias, running statistics).
 * Neurons after a column layer simply see the local channel shard, so they hold state for
 * their shard only.
 *
 * groups: the sharded dimension of the canonical tensor is `groups` equal blocks, each
 * split over the ranks: with groups 3 and dimension 3*D, rank r keeps, for each of q, k, v,
 * the channels [r*D/TP, (r+1)*D/TP) of that block: Spikformer's QKV sharded by head
 * (the heads of q, k and v are contiguous channel ranges of D/heads each). */
#ifndef SNN_DIST_TP_H
#define SNN_DIST_TP_H

#include "dist/comm.h"
#include "nn/module.h"

typedef enum snn_tp_mode { SNN_TP_COLUMN = 0, SNN_TP_ROW = 1, SNN_TP_SHARD = 2 } snn_tp_mode;

/* Takes ownership of inner (freed on failure). tp may be NULL when tp_size is 1 or when the
 * module is only built to learn its tensors (export); a forward/backward that needs the
 * all-reduce then fails. bias: ROW only, the number of bias features (0: none). */
snn_module *snn_tp_wrap_new(snn_module *inner, snn_tp_mode mode, int groups, int bias, snn_comm *tp,
                            int tp_rank, int tp_size);
/* 1 when m is a TP wrapper; its mode and groups. */
int snn_tp_is_wrapper(const snn_module *m, snn_tp_mode *mode, int *groups);
/* Bytes and calls of the all-reduces so far (all wrappers of this process), for the docs
 * and the tests: a world of size 1 performs none. */
void snn_tp_comm_stats(uint64_t *calls, uint64_t *bytes);
void snn_tp_comm_stats_reset(void);

/* ---- shard rules ---------------------------------------------------------------------
 * dim < 0: replicated (every rank holds the canonical tensor). Otherwise the canonical
 * tensor's dimension `dim` is split as above. */
typedef struct snn_shard_rule {
    int dim;
    int groups;
} snn_shard_rule;

/* Local shape of a canonical shape; SNN_E_SHAPE naming `name` when not divisible. */
snn_status snn_shard_local_shape(const char *name, snn_shard_rule r, int rank, const int *canon, int tp_size,
                                 int *local);
/* Copy rank's part of the canonical tensor into local (shapes as above). */
void snn_shard_extract(snn_shard_rule r, int rank_n, const int *canon, int tp_rank, int tp_size, const float *src,
                       float *local);
/* The inverse: scatter rank's local tensor into its place in the canonical tensor. */
void snn_shard_insert(snn_shard_rule r, int rank_n, const int *canon, int tp_rank, int tp_size, const float *local,
                      float *dst);

#endif
