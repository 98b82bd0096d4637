/* The (dp, pp, tp) mesh over a communicator (include/snn/comm.h, the public communicator
 * API: backends self / mpi / nccl, collectives, agreement, abort). */
#ifndef SNN_DIST_COMM_H
#define SNN_DIST_COMM_H

#include "snn/comm.h"
#include "snn/dist.h" /* the public declarations of the mesh (an opaque handle there) */

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

/* ---- the (dp, pp, cp, tp) mesh of the language models ----
 * Shape (DP, PP, CP, TP), world = DP * PP * CP * TP, with context parallel (cp) between
 * tp and pp in the rank order (Megatron's): tp fastest, then cp, then pp, then dp:
 *   tp = r mod TP,  cp = (r div TP) mod CP,  pp = (r div (TP*CP)) mod PP,
 *   dp = r div (TP*CP*PP).
 * With CP = 1 these are snn_mesh's formulas. Each axis has its sub-communicator (ranks that
 * differ only in that coordinate, ordered by it); dpcp_comm holds the ranks that differ
 * only in dp and cp (ordered by dp * CP + cp): replicated gradients and the token counts of
 * the loss are summed over it. A separate type so that snn_mesh stays as it is. */
typedef struct snn_mesh4 {
    snn_comm *world;             /* not owned */
    int dp_size, pp_size, cp_size, tp_size;
    int dp, pp, cp, tp;
    snn_comm *dp_comm, *pp_comm, *cp_comm, *tp_comm, *dpcp_comm;
} snn_mesh4;

/* Pure arithmetic (no communicator): fails, naming the sizes, when a size is not positive
 * or world is not divisible by pp * cp * tp. Any output may be NULL. */
snn_status snn_mesh4_coords(int world, int pp_size, int cp_size, int tp_size, int rank, int *dp, int *pp,
                            int *cp, int *tp, int *dp_size);
int snn_mesh4_rank_of(const snn_mesh4 *m, int dp, int pp, int cp, int tp);
/* Collective over world. */
snn_status snn_mesh4_create(snn_comm *world, int pp_size, int cp_size, int tp_size, snn_mesh4 *out);
void snn_mesh4_free(snn_mesh4 *m);

#endif
