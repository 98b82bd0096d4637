/* Backend interface of the communicator (src/dist/comm.h): one table of functions per
 * transport. The generic layer (comm.c) checks arguments, so a backend sees valid counts,
 * ranks and dtypes. */
#ifndef SNN_DIST_COMM_IMPL_H
#define SNN_DIST_COMM_IMPL_H

#include "dist/comm.h"

typedef struct snn_comm_ops {
    const char *name;
    snn_comm_backend backend;
    snn_status (*allreduce)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op);
    snn_status (*iallreduce)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op, int slot);
    snn_status (*wait)(snn_comm *c, int slot);
    snn_status (*broadcast)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root);
    snn_status (*allgather)(snn_comm *c, const void *send, size_t count, snn_comm_dtype t, void *recv);
    snn_status (*send)(snn_comm *c, const void *buf, size_t count, snn_comm_dtype t, int dst, int tag);
    snn_status (*recv)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int src, int tag);
    snn_status (*barrier)(snn_comm *c);
    /* optional (NULL: unsupported): one send and one receive posted together */
    snn_status (*sendrecv)(snn_comm *c, const void *sbuf, size_t scount, int dst, int stag, void *rbuf,
                           size_t rcount, int src, int rtag, snn_comm_dtype t);
    snn_status (*split)(snn_comm *c, int color, int key, snn_comm **out);
    void (*abort)(snn_comm *c, int code);
    /* device buffers on a stream (NULL where the transport has none) */
    snn_status (*dev_allreduce)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op, void *stream);
    snn_status (*dev_broadcast)(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root, void *stream);
    void (*destroy)(snn_comm *c);
} snn_comm_ops;

struct snn_comm {
    const snn_comm_ops *ops;
    int rank, size, local_rank;
    int is_world;                          /* freeing it finalises the transport */
    unsigned char pending[SNN_COMM_MAX_PENDING]; /* iallreduce slots in use */
    void *impl;                            /* the backend's state */
};

/* Allocate a communicator with the generic fields set. */
snn_comm *snn_comm_alloc(const snn_comm_ops *ops, int rank, int size, int local_rank, void *impl);

#ifdef SNN_HAVE_MPI
/* comm_mpi.c */
snn_status snn_comm_mpi_init_world(snn_comm **out);
#endif

#endif
