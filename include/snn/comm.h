/* snn — communicators for distributed training: a handle on a group of ranks with the
 * collectives that data, tensor and pipeline parallelism need (the (dp, pp, tp) mesh over
 * them: dist.h).
 *
 * Backends (one vtable each, src/dist/comm_impl.h):
 *   self  one process, no MPI needed: every collective is the identity (size 1);
 *   mpi   Open MPI (comm_mpi.c, built when CMake finds MPI: SNN_HAVE_MPI), CPU buffers;
 *   nccl  GPU collectives (comm_nccl.c, built with -DSNN_CUDA=ON where CMake finds nccl.h:
 *         SNN_HAVE_NCCL): one GPU per rank, the unique id broadcast over the world
 *         communicator, libnccl.so.2 opened when the first communicator is created (a
 *         machine without NCCL runs everything else). Its buffers are device memory: only
 *         the snn_comm_device_* collectives below, on a CUDA stream, graph-capturable.
 *
 * Errors are values. A collective that fails returns a status with a message; it cannot
 * undo what other ranks have already started, so after a failure the caller prints its
 * message and calls snn_comm_abort, which ends every rank of the job (MPI_Abort) so that
 * none waits forever in the next collective.
 *
 * Buffers are host memory except for the snn_comm_device_* calls. Collectives are blocking except snn_comm_iallreduce, whose
 * request is completed by snn_comm_wait (used to overlap gradient buckets with backward). */
#ifndef SNN_COMM_H
#define SNN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_comm snn_comm;

typedef enum snn_comm_dtype {
    SNN_COMM_F32 = 0,
    SNN_COMM_F64 = 1,
    SNN_COMM_I64 = 2,
    SNN_COMM_I32 = 3,
    SNN_COMM_U8 = 4, /* bytes: broadcast, all-gather, send/recv (and max/min) */
    SNN_COMM_DTYPE_COUNT
} snn_comm_dtype;

/* AVG (sum divided by the size) exists for device collectives only. */
typedef enum snn_comm_op { SNN_COMM_SUM = 0, SNN_COMM_MAX = 1, SNN_COMM_MIN = 2, SNN_COMM_AVG = 3 } snn_comm_op;

typedef enum snn_comm_backend {
    SNN_COMM_BACKEND_SELF = 0,
    SNN_COMM_BACKEND_MPI = 1,
    SNN_COMM_BACKEND_NCCL = 2
} snn_comm_backend;

size_t snn_comm_dtype_size(snn_comm_dtype t);

/* The world communicator of this process. Launched by mpirun/srun (an MPI launcher's
 * environment is present) and built with MPI: initialises MPI (thread level FUNNELED) and
 * returns MPI_COMM_WORLD; otherwise the one-process communicator. Freeing the world
 * finalises MPI. Call once per process. */
snn_status snn_comm_init_world(snn_comm **out);
/* The one-process communicator (rank 0 of 1), whatever the build. */
snn_status snn_comm_self(snn_comm **out);
/* GPU collectives over `world`'s ranks, this rank on CUDA device `device` (made current).
 * Collective over world. SNN_E_UNSUPPORTED in a build without NCCL or where libnccl.so.2
 * cannot be opened (the message says which). */
snn_status snn_comm_nccl_create(snn_comm *world, int device, snn_comm **out);
/* Collectives on device buffers, enqueued on `stream` (a cudaStream_t; NULL: the default
 * stream), asynchronous and capturable into a CUDA graph. The one-process communicator
 * makes them the identity (AVG of one replica is its value); MPI communicators refuse them. */
snn_status snn_comm_device_allreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op,
                                     void *stream);
snn_status snn_comm_device_broadcast(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root, void *stream);
/* 1 when this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMIX_RANK ...), whether or not the build has MPI. */
int snn_comm_launched_by_mpi(void);
/* 1 when the build has the MPI backend. */
int snn_comm_have_mpi(void);

void snn_comm_free(snn_comm *c);

int snn_comm_rank(const snn_comm *c);
int snn_comm_size(const snn_comm *c);
/* Rank among the processes of this host (OMPI_COMM_WORLD_LOCAL_RANK, or the shared-memory
 * split of the group): selects the GPU. */
int snn_comm_local_rank(const snn_comm *c);
snn_comm_backend snn_comm_backend_of(const snn_comm *c);
const char *snn_comm_backend_name(const snn_comm *c);

/* In place: buf[i] = op over all ranks of buf[i]. Every rank receives bit-identical
 * results (floating-point sums are added in one order, on one rank, for all). */
snn_status snn_comm_allreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op);
/* Non-blocking all-reduce; *req receives a handle for snn_comm_wait. buf must stay
 * untouched until the wait. At most SNN_COMM_MAX_PENDING requests in flight. */
#define SNN_COMM_MAX_PENDING 64
snn_status snn_comm_iallreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op,
                               int *req);
snn_status snn_comm_wait(snn_comm *c, int req);
snn_status snn_comm_broadcast(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root);
/* recv holds size * count elements, rank r's contribution at r * count. */
snn_status snn_comm_allgather(snn_comm *c, const void *send, size_t count, snn_comm_dtype t, void *recv);
snn_status snn_comm_send(snn_comm *c, const void *buf, size_t count, snn_comm_dtype t, int dst, int tag);
snn_status snn_comm_recv(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int src, int tag);
/* A send to dst and a receive from src posted together (MPI_Sendrecv): two neighbours that
 * exchange messages in both directions at once (the 1F1B pipeline's send-forward /
 * receive-backward pairs) cannot deadlock however large the messages are. */
snn_status snn_comm_sendrecv(snn_comm *c, const void *sbuf, size_t scount, int dst, int stag, void *rbuf,
                             size_t rcount, int src, int rtag, snn_comm_dtype t);
snn_status snn_comm_barrier(snn_comm *c);
/* Collective over c: ranks with the same color form one new communicator, ordered by
 * (key, rank). color < 0: this rank joins none (*out = NULL). */
snn_status snn_comm_split(snn_comm *c, int color, int key, snn_comm **out);
/* Agree on failure: every rank passes its own status; returns the first failing rank's
 * status on every rank (SNN_OK if none failed) and, on the ranks that did not fail, sets
 * the message to that rank's message. A collective: call it where every rank arrives. */
snn_status snn_comm_agree(snn_comm *c, snn_status mine);
/* The same with an exit code and a message of the caller's own (a command line tool's
 * failure that is not a library status): mine 0 = fine. Returns the first failing rank's
 * code on every rank (0 if none) and, when it is not 0, that rank in *rank_out and its
 * message in msg_out (cap bytes). */
int snn_comm_agree_code(snn_comm *c, int mine, const char *msg, int *rank_out, char *msg_out, size_t cap);

/* Ask the launcher to end every other process of the job with exit code `code` (MPI_Abort on
 * the world, which also ends this process). The library never exits by itself: on the self
 * backend, or where the launcher has not ended this process, it returns and the caller exits
 * (`snn_comm_abort(c, code); exit(code);`). Print the message before calling this. */
void snn_comm_abort(snn_comm *c, int code);

#ifdef __cplusplus
}
#endif
#endif
