/* The (dp, pp, tp) mesh over a communicator (include/snn/comm.h, the public communicator
 * API: backends self / mpi / nccl, collectives, agreement, abort). */
#ifndef SNN_DIST_COMM_H
#define SNN_DIST_COMM_H

#include "snn/comm.h"

/* ---- the (dp, pp, tp) mesh ----
 * Shape (DP, PP, TP) with world = DP * PP * TP, and SpikingJelly's rank coordinates
 *   tp = rank mod TP,  pp = (rank div TP) mod PP,  dp = rank div (PP * TP).
 * Each axis has a sub-communicator holding the ranks that differ only in that coordinate,
 * ordered by it (so the axis rank equals the coordinate). A degree-1 axis is a
 * communicator of size 1. */
typedef struct snn_mesh {
    snn_comm *world;             /* not owned */
    int dp_size, pp_size, tp_size;
    int dp, pp, tp;              /* this rank's coordinates */
    snn_comm *dp_comm, *pp_comm, *tp_comm;
} snn_mesh;

/* Pure arithmetic of the formulas (no communicator): fails when world is not divisible by
 * pp * tp or a size is not positive. */
snn_status snn_mesh_coords(int world, int pp_size, int tp_size, int rank, int *dp, int *pp, int *tp,
                           int *dp_size);
/* Global rank of the coordinates. */
int snn_mesh_rank_of(const snn_mesh *m, int dp, int pp, int tp);
/* Collective over world. */
snn_status snn_mesh_create(snn_comm *world, int pp_size, int tp_size, snn_mesh *out);
void snn_mesh_free(snn_mesh *m);

#endif
