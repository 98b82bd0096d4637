/* The MPI backend of the communicator (Open MPI; compiled when CMake finds MPI). Every
 * call returns the MPI error as a status with MPI's own text: the communicators use
 * MPI_ERRORS_RETURN instead of the default abort-on-error, so the caller decides (and,
 * after a failure, aborts the job with snn_comm_abort). */
#ifdef SNN_HAVE_MPI
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "dist/comm_impl.h"

typedef struct {
    MPI_Comm comm;
    MPI_Request reqs[SNN_COMM_MAX_PENDING];
    /* a floating-point sum in flight: the broadcast that follows its reduce */
    void *bcast_buf[SNN_COMM_MAX_PENDING];
    int bcast_count[SNN_COMM_MAX_PENDING];
    MPI_Datatype bcast_type[SNN_COMM_MAX_PENDING];
} mpi_impl;

static MPI_Comm comm_of(snn_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static MPI_Datatype mpi_type(snn_comm_dtype t) {
    switch (t) {
    case SNN_COMM_F32: return MPI_FLOAT;
    case SNN_COMM_F64: return MPI_DOUBLE;
    case SNN_COMM_I64: return MPI_INT64_T;
    case SNN_COMM_I32: return MPI_INT32_T;
    default: return MPI_UINT8_T;
    }
}

static MPI_Op mpi_op(snn_comm_op op) { return op == SNN_COMM_SUM ? MPI_SUM : op == SNN_COMM_MAX ? MPI_MAX : MPI_MIN; }

static snn_status mpi_fail(int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return snn_error(SNN_E_IO, "MPI %s failed: %s", what, s);
}
#define MPI_TRY(call, what)                                                                      \
    do {                                                                                         \
        int rc_ = (call);                                                                        \
        if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, what);                                      \
    } while (0)

/* Floating-point sums are not associative, and MPI lets an all-reduce round differently
 * on different ranks (recursive doubling adds in rank-dependent orders). Replicas must
 * stay bit-identical, so a float sum is reduced to rank 0 once and broadcast; max, min
 * and integer sums are exact in any order and use the all-reduce. */
static int float_sum(snn_comm_dtype t, snn_comm_op op) {
    return op == SNN_COMM_SUM && (t == SNN_COMM_F32 || t == SNN_COMM_F64);
}

static snn_status m_allreduce(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, snn_comm_op op) {
    MPI_Comm cm = comm_of(c);
    if (float_sum(t, op)) {
        MPI_TRY(MPI_Reduce(c->rank == 0 ? MPI_IN_PLACE : buf, c->rank == 0 ? buf : NULL, (int)n, mpi_type(t),
                           MPI_SUM, 0, cm), "reduce");
        MPI_TRY(MPI_Bcast(buf, (int)n, mpi_type(t), 0, cm), "broadcast");
        return SNN_OK;
    }
    MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), mpi_op(op), cm), "all-reduce");
    return SNN_OK;
}

static snn_status m_iallreduce(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, snn_comm_op op, int slot) {
    mpi_impl *im = c->impl;
    im->bcast_buf[slot] = NULL;
    if (float_sum(t, op)) {
        MPI_TRY(MPI_Ireduce(c->rank == 0 ? MPI_IN_PLACE : buf, c->rank == 0 ? buf : NULL, (int)n, mpi_type(t),
                            MPI_SUM, 0, im->comm, &im->reqs[slot]), "non-blocking reduce");
        im->bcast_buf[slot] = buf;
        im->bcast_count[slot] = (int)n;
        im->bcast_type[slot] = mpi_type(t);
        return SNN_OK;
    }
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), mpi_op(op), im->comm, &im->reqs[slot]),
            "non-blocking all-reduce");
    return SNN_OK;
}

static snn_status m_wait(snn_comm *c, int slot) {
    mpi_impl *im = c->impl;
    MPI_TRY(MPI_Wait(&im->reqs[slot], MPI_STATUS_IGNORE), "wait");
    if (im->bcast_buf[slot]) {
        void *b = im->bcast_buf[slot];
        im->bcast_buf[slot] = NULL;
        MPI_TRY(MPI_Bcast(b, im->bcast_count[slot], im->bcast_type[slot], 0, im->comm), "broadcast");
    }
    return SNN_OK;
}

static snn_status m_broadcast(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, int root) {
    MPI_TRY(MPI_Bcast(buf, (int)n, mpi_type(t), root, comm_of(c)), "broadcast");
    return SNN_OK;
}

static snn_status m_allgather(snn_comm *c, const void *send, size_t n, snn_comm_dtype t, void *recv) {
    MPI_TRY(MPI_Allgather(send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), comm_of(c)), "all-gather");
    return SNN_OK;
}

static snn_status m_send(snn_comm *c, const void *buf, size_t n, snn_comm_dtype t, int dst, int tag) {
    MPI_TRY(MPI_Send(buf, (int)n, mpi_type(t), dst, tag, comm_of(c)), "send");
    return SNN_OK;
}

static snn_status m_recv(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, int src, int tag) {
    MPI_Status s;
    MPI_TRY(MPI_Recv(buf, (int)n, mpi_type(t), src, tag, comm_of(c), &s), "receive");
    int got = 0;
    MPI_Get_count(&s, mpi_type(t), &got);
    if ((size_t)got != n)
        return snn_error(SNN_E_FORMAT, "receive from rank %d: expected %zu elements, got %d", src, n, got);
    return SNN_OK;
}

static snn_status m_sendrecv(snn_comm *c, const void *sbuf, size_t sn, int dst, int stag, void *rbuf, size_t rn,
                             int src, int rtag, snn_comm_dtype t) {
    MPI_Status s;
    MPI_TRY(MPI_Sendrecv(sbuf, (int)sn, mpi_type(t), dst, stag, rbuf, (int)rn, mpi_type(t), src, rtag, comm_of(c), &s),
            "send-receive");
    int got = 0;
    MPI_Get_count(&s, mpi_type(t), &got);
    if ((size_t)got != rn)
        return snn_error(SNN_E_FORMAT, "send-receive from rank %d: expected %zu elements, got %d", src, rn, got);
    return SNN_OK;
}

static snn_status m_barrier(snn_comm *c) {
    MPI_TRY(MPI_Barrier(comm_of(c)), "barrier");
    return SNN_OK;
}

static void m_abort(snn_comm *c, int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void m_destroy(snn_comm *c) {
    mpi_impl *im = c->impl;
    if (!im) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        if (c->is_world) MPI_Finalize();
        else MPI_Comm_free(&im->comm);
    }
    free(im);
    c->impl = NULL;
}

static snn_status m_split(snn_comm *c, int color, int key, snn_comm **out);

static const snn_comm_ops mpi_ops = {
    .name = "mpi", .backend = SNN_COMM_BACKEND_MPI, .allreduce = m_allreduce, .iallreduce = m_iallreduce,
    .wait = m_wait, .broadcast = m_broadcast, .allgather = m_allgather, .send = m_send, .recv = m_recv,
    .sendrecv = m_sendrecv, .barrier = m_barrier, .split = m_split, .abort = m_abort, .destroy = m_destroy,
};

static snn_status wrap(MPI_Comm comm, int local_rank, snn_comm **out) {
    mpi_impl *im = calloc(1, sizeof *im);
    if (!im) return snn_error(SNN_E_NOMEM, "out of memory for a communicator");
    im->comm = comm;
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    *out = snn_comm_alloc(&mpi_ops, rank, size, local_rank, im);
    if (!*out) {
        free(im);
        return snn_error(SNN_E_NOMEM, "out of memory for a communicator");
    }
    return SNN_OK;
}

static snn_status m_split(snn_comm *c, int color, int key, snn_comm **out) {
    MPI_Comm nc = MPI_COMM_NULL;
    MPI_TRY(MPI_Comm_split(comm_of(c), color < 0 ? MPI_UNDEFINED : color, key, &nc), "split");
    if (nc == MPI_COMM_NULL) return SNN_OK;
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    snn_status st = wrap(nc, c->local_rank, out);
    if (st != SNN_OK) MPI_Comm_free(&nc);
    return st;
}

snn_status snn_comm_mpi_init_world(snn_comm **out) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return snn_error(SNN_E_STATE, "MPI is already initialised in this process");
    int provided = 0;
    /* FUNNELED: OpenMP threads compute, only the main thread communicates. */
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "initialisation");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int local = -1;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (lr && *lr) {
        char *end = NULL;
        long v = strtol(lr, &end, 10);
        if (end && !*end && v >= 0 && v < 1 << 20) local = (int)v;
    }
    if (local < 0) {
        MPI_Comm node;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
            MPI_Comm_rank(node, &local);
            MPI_Comm_free(&node);
        } else {
            local = 0;
        }
    }
    snn_status st = wrap(MPI_COMM_WORLD, local, out);
    if (st != SNN_OK) {
        MPI_Finalize();
        return st;
    }
    (*out)->is_world = 1;
    return SNN_OK;
}
#else
/* Without MPI the translation unit is empty (ISO C wants at least one declaration). */
typedef int snn_comm_mpi_unused;
#endif
