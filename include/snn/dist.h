/* snn — the pieces of data, tensor and pipeline parallelism that a training program sets up
 * itself around the library's loops (vision_dist.h): the (dp, pp, tp) mesh of ranks over a
 * world communicator (comm.h), the data-parallel helpers (SyncBatchNorm, the GPU step's
 * collectives) and the distributed sampler's arithmetic.
 *
 * The mesh is an opaque handle here; its axes are read through the getters below. */
#ifndef SNN_DIST_H
#define SNN_DIST_H

#include <stddef.h>

#include "comm.h"
#include "cuda.h"
#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the (dp, pp, tp) mesh ----
 * Shape (DP, PP, TP) with world = DP * PP * TP and SpikingJelly's rank coordinates
 *   tp = rank mod TP,  pp = (rank div TP) mod PP,  dp = rank div (PP * TP).
 * Each axis has a sub-communicator holding the ranks that differ only in that coordinate,
 * ordered by it (so the axis rank equals the coordinate); a degree-1 axis has a
 * communicator of size 1. */
typedef struct snn_mesh snn_mesh;
typedef enum snn_mesh_axis { SNN_MESH_DP = 0, SNN_MESH_PP = 1, SNN_MESH_TP = 2 } snn_mesh_axis;

/* Collective over world (every rank calls it with the same sizes): DP = world / (PP * TP),
 * an error naming the sizes when world is not divisible or a size is not positive. world is
 * not owned and must outlive the mesh. */
snn_status snn_mesh_open(snn_comm *world, int pp_size, int tp_size, snn_mesh **out);
void snn_mesh_close(snn_mesh *m);
/* The degree of an axis (0 for a NULL mesh or an unknown axis). */
int snn_mesh_size(const snn_mesh *m, snn_mesh_axis axis);
/* This rank's coordinate on an axis (-1 for a NULL mesh or an unknown axis). */
int snn_mesh_coord(const snn_mesh *m, snn_mesh_axis axis);
/* The axis' sub-communicator, owned by the mesh (NULL for a NULL mesh or an unknown axis). */
snn_comm *snn_mesh_comm(const snn_mesh *m, snn_mesh_axis axis);
/* Global rank of the coordinates (-1 for a NULL mesh). */
int snn_mesh_rank_of(const snn_mesh *m, int dp, int pp, int tp);

/* ---- data parallelism ----
 * SyncBatchNorm (torch's convert_sync_batchnorm): every BatchNorm of m normalises with the
 * statistics of the whole DP batch and sums its backward projections over dp, so DDP with
 * batch b per rank equals one process with batch DP * b for BatchNorm models too. dp NULL or
 * of size 1: turned off. *n_bn: BatchNorms converted. Every rank must run the same forwards
 * (the reductions are collective). */
snn_status snn_ddp_sync_batchnorm(snn_comm *dp, snn_model *m, int *n_bn);
/* The collectives of the GPU training step (snn_cuda_model_opts.dp) over dp: an NCCL
 * communicator (snn_comm_nccl_create), or the one-process one for a single replica. dp must
 * outlive the device model. */
snn_cuda_collectives snn_ddp_cuda_collectives(snn_comm *dp);

/* ---- the distributed sampler's arithmetic (SpikingJelly's DistributedSampler) ----
 * Every rank takes ceil(n / replicas) samples of the epoch's permutation (0 for replicas
 * <= 0); a loader makes batches of them, dropping the ragged last batch when drop_ragged
 * (under pipeline parallelism) and 0 for batch_size <= 0. */
size_t snn_dist_sampler_num_samples(size_t n, int replicas);
size_t snn_dist_loader_batches(size_t num_samples, int batch_size, int drop_ragged);

#ifdef __cplusplus
}
#endif
#endif
