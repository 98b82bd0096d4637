/* The communicator's generic layer (argument checks, failure agreement), the
 * one-process backend and the (dp, pp, tp) mesh. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "dist/comm_impl.h"

size_t snn_comm_dtype_size(snn_comm_dtype t) {
    switch (t) {
    case SNN_COMM_F32: return 4;
    case SNN_COMM_F64: return 8;
    case SNN_COMM_I64: return 8;
    case SNN_COMM_I32: return 4;
    case SNN_COMM_U8: return 1;
    default: return 0;
    }
}

snn_comm *snn_comm_alloc(const snn_comm_ops *ops, int rank, int size, int local_rank, void *impl) {
    snn_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->local_rank = local_rank;
    c->impl = impl;
    return c;
}

int snn_comm_launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", NULL};
    for (int i = 0; vars[i]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int snn_comm_have_mpi(void) {
#ifdef SNN_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* ---------------- one process ---------------- */

static snn_status self_allreduce(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, snn_comm_op op) { return SNN_OK; }
static snn_status self_iallreduce(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, snn_comm_op op, int slot) {
    return SNN_OK;
}
static snn_status self_wait(snn_comm *c, int slot) { return SNN_OK; }
static snn_status self_broadcast(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, int root) { return SNN_OK; }
static snn_status self_allgather(snn_comm *c, const void *send, size_t n, snn_comm_dtype t, void *recv) {
    if (n && send != recv) memmove(recv, send, n * snn_comm_dtype_size(t));
    return SNN_OK;
}
static snn_status self_send(snn_comm *c, const void *buf, size_t n, snn_comm_dtype t, int dst, int tag) {
    return snn_error(SNN_E_UNSUPPORTED, "a one-process communicator cannot send to itself");
}
static snn_status self_recv(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, int src, int tag) {
    return snn_error(SNN_E_UNSUPPORTED, "a one-process communicator cannot receive from itself");
}
static snn_status self_barrier(snn_comm *c) { return SNN_OK; }
static snn_status self_split(snn_comm *c, int color, int key, snn_comm **out) {
    if (color < 0) {
        *out = NULL;
        return SNN_OK;
    }
    return snn_comm_self(out);
}
static void self_abort(snn_comm *c, int code) {} /* one process: the caller's exit is the end */
static void self_destroy(snn_comm *c) {}

static const snn_comm_ops self_ops = {
    .name = "self", .backend = SNN_COMM_BACKEND_SELF, .allreduce = self_allreduce,
    .iallreduce = self_iallreduce, .wait = self_wait, .broadcast = self_broadcast,
    .allgather = self_allgather, .send = self_send, .recv = self_recv, .barrier = self_barrier,
    .split = self_split, .abort = self_abort, .destroy = self_destroy,
};

snn_status snn_comm_self(snn_comm **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_comm_self needs an output pointer");
    *out = snn_comm_alloc(&self_ops, 0, 1, 0, NULL);
    return *out ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory for a communicator");
}

snn_status snn_comm_init_world(snn_comm **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_comm_init_world needs an output pointer");
    *out = NULL;
    if (snn_comm_launched_by_mpi()) {
#ifdef SNN_HAVE_MPI
        return snn_comm_mpi_init_world(out);
#else
        /* Started by mpirun without MPI in the build: N copies would each train alone. */
        const char *n = getenv("OMPI_COMM_WORLD_SIZE");
        if (!n) n = getenv("PMI_SIZE");
        if (n && strcmp(n, "1") != 0)
            return snn_error(SNN_E_UNSUPPORTED, "this snn was built without MPI, but an MPI launcher started it "
                             "with %s processes; rebuild with libopenmpi-dev installed", n);
#endif
    }
    SNN_TRY(snn_comm_self(out));
    (*out)->is_world = 1;
    return SNN_OK;
}

#ifndef SNN_HAVE_NCCL
snn_status snn_comm_nccl_create(snn_comm *world, int device, snn_comm **out) {
    if (out) *out = NULL;
    return snn_error(SNN_E_UNSUPPORTED, "this build of snn has no NCCL communicator; GPU collectives need a "
                     "build with -DSNN_CUDA=ON where nccl.h is installed");
}
#endif

snn_status snn_comm_device_allreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op,
                                     void *stream) {
    if (!c) return snn_error(SNN_E_INVALID, "device all-reduce: no communicator");
    if ((unsigned)op > SNN_COMM_AVG) return snn_error(SNN_E_INVALID, "device all-reduce: unknown operation %d", (int)op);
    if ((unsigned)t >= SNN_COMM_DTYPE_COUNT) return snn_error(SNN_E_INVALID, "device all-reduce: unknown dtype %d", (int)t);
    if (count && !buf) return snn_error(SNN_E_INVALID, "device all-reduce: NULL buffer for %zu elements", count);
    if (c->ops->dev_allreduce) return c->ops->dev_allreduce(c, buf, count, t, op, stream);
    if (c->size == 1) return SNN_OK;
    return snn_error(SNN_E_UNSUPPORTED, "the %s communicator has no device collectives (use an NCCL one)",
                     c->ops->name);
}

snn_status snn_comm_device_broadcast(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root, void *stream) {
    if (!c) return snn_error(SNN_E_INVALID, "device broadcast: no communicator");
    if ((unsigned)t >= SNN_COMM_DTYPE_COUNT) return snn_error(SNN_E_INVALID, "device broadcast: unknown dtype %d", (int)t);
    if (root < 0 || root >= c->size) return snn_error(SNN_E_INVALID, "device broadcast: root %d of %d ranks", root, c->size);
    if (count && !buf) return snn_error(SNN_E_INVALID, "device broadcast: NULL buffer for %zu elements", count);
    if (c->ops->dev_broadcast) return c->ops->dev_broadcast(c, buf, count, t, root, stream);
    if (c->size == 1) return SNN_OK;
    return snn_error(SNN_E_UNSUPPORTED, "the %s communicator has no device collectives (use an NCCL one)",
                     c->ops->name);
}

void snn_comm_free(snn_comm *c) {
    if (!c) return;
    if (c->ops->destroy) c->ops->destroy(c);
    free(c);
}

int snn_comm_rank(const snn_comm *c) { return c ? c->rank : 0; }
int snn_comm_size(const snn_comm *c) { return c ? c->size : 1; }
int snn_comm_local_rank(const snn_comm *c) { return c ? c->local_rank : 0; }
snn_comm_backend snn_comm_backend_of(const snn_comm *c) { return c ? c->ops->backend : SNN_COMM_BACKEND_SELF; }
const char *snn_comm_backend_name(const snn_comm *c) { return c ? c->ops->name : "self"; }

/* ---------------- checked entry points ---------------- */

static snn_status check_buf(const snn_comm *c, const void *buf, size_t count, snn_comm_dtype t, const char *what) {
    if (!c) return snn_error(SNN_E_INVALID, "%s: no communicator", what);
    if ((unsigned)t >= SNN_COMM_DTYPE_COUNT) return snn_error(SNN_E_INVALID, "%s: unknown dtype %d", what, (int)t);
    if (count && !buf) return snn_error(SNN_E_INVALID, "%s: NULL buffer for %zu elements", what, count);
    /* MPI counts are ints; the backends take the count as one message. */
    if (count > (size_t)INT_MAX) return snn_error(SNN_E_INVALID, "%s: %zu elements exceed one message", what, count);
    return SNN_OK;
}

snn_status snn_comm_allreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op) {
    SNN_TRY(check_buf(c, buf, count, t, "all-reduce"));
    if ((unsigned)op > SNN_COMM_MIN) return snn_error(SNN_E_INVALID, "all-reduce: unknown operation %d", (int)op);
    if (t == SNN_COMM_U8 && op == SNN_COMM_SUM) return snn_error(SNN_E_INVALID, "all-reduce: no sum of bytes");
    if (!count) return SNN_OK;
    return c->ops->allreduce(c, buf, count, t, op);
}

snn_status snn_comm_iallreduce(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, snn_comm_op op, int *req) {
    SNN_TRY(check_buf(c, buf, count, t, "all-reduce"));
    if (!req) return snn_error(SNN_E_INVALID, "non-blocking all-reduce needs a request pointer");
    if ((unsigned)op > SNN_COMM_MIN || (t == SNN_COMM_U8 && op == SNN_COMM_SUM))
        return snn_error(SNN_E_INVALID, "all-reduce: invalid operation %d for dtype %d", (int)op, (int)t);
    int slot = -1;
    for (int i = 0; i < SNN_COMM_MAX_PENDING && slot < 0; i++)
        if (!c->pending[i]) slot = i;
    if (slot < 0) return snn_error(SNN_E_STATE, "more than %d non-blocking all-reduces in flight", SNN_COMM_MAX_PENDING);
    SNN_TRY(c->ops->iallreduce(c, buf, count, t, op, slot));
    c->pending[slot] = 1;
    *req = slot;
    return SNN_OK;
}

snn_status snn_comm_wait(snn_comm *c, int req) {
    if (!c || req < 0 || req >= SNN_COMM_MAX_PENDING || !c->pending[req])
        return snn_error(SNN_E_STATE, "wait on request %d that is not in flight", req);
    c->pending[req] = 0;
    return c->ops->wait(c, req);
}

snn_status snn_comm_broadcast(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int root) {
    SNN_TRY(check_buf(c, buf, count, t, "broadcast"));
    if (root < 0 || root >= c->size)
        return snn_error(SNN_E_INVALID, "broadcast: root %d outside a group of %d", root, c->size);
    if (!count) return SNN_OK;
    return c->ops->broadcast(c, buf, count, t, root);
}

snn_status snn_comm_allgather(snn_comm *c, const void *send, size_t count, snn_comm_dtype t, void *recv) {
    SNN_TRY(check_buf(c, send, count, t, "all-gather"));
    if (count && !recv) return snn_error(SNN_E_INVALID, "all-gather: NULL receive buffer");
    if (count > (size_t)INT_MAX / (size_t)c->size)
        return snn_error(SNN_E_INVALID, "all-gather: %zu elements times %d ranks is too large", count, c->size);
    if (!count) return SNN_OK;
    return c->ops->allgather(c, send, count, t, recv);
}

snn_status snn_comm_send(snn_comm *c, const void *buf, size_t count, snn_comm_dtype t, int dst, int tag) {
    SNN_TRY(check_buf(c, buf, count, t, "send"));
    if (dst < 0 || dst >= c->size) return snn_error(SNN_E_INVALID, "send: rank %d outside a group of %d", dst, c->size);
    if (tag < 0 || tag > 32767) return snn_error(SNN_E_INVALID, "send: tag %d outside [0, 32767]", tag);
    return c->ops->send(c, buf, count, t, dst, tag);
}

snn_status snn_comm_sendrecv(snn_comm *c, const void *sbuf, size_t scount, int dst, int stag, void *rbuf,
                             size_t rcount, int src, int rtag, snn_comm_dtype t) {
    SNN_TRY(check_buf(c, sbuf, scount, t, "send-receive"));
    SNN_TRY(check_buf(c, rbuf, rcount, t, "send-receive"));
    if (dst < 0 || dst >= c->size || src < 0 || src >= c->size)
        return snn_error(SNN_E_INVALID, "send-receive: rank %d or %d outside a group of %d", dst, src, c->size);
    if (stag < 0 || stag > 32767 || rtag < 0 || rtag > 32767)
        return snn_error(SNN_E_INVALID, "send-receive: tag %d or %d outside [0, 32767]", stag, rtag);
    if (!c->ops->sendrecv)
        return snn_error(SNN_E_UNSUPPORTED, "the %s communicator has no point-to-point exchange", c->ops->name);
    return c->ops->sendrecv(c, sbuf, scount, dst, stag, rbuf, rcount, src, rtag, t);
}

snn_status snn_comm_recv(snn_comm *c, void *buf, size_t count, snn_comm_dtype t, int src, int tag) {
    SNN_TRY(check_buf(c, buf, count, t, "receive"));
    if (src < 0 || src >= c->size) return snn_error(SNN_E_INVALID, "receive: rank %d outside a group of %d", src, c->size);
    if (tag < 0 || tag > 32767) return snn_error(SNN_E_INVALID, "receive: tag %d outside [0, 32767]", tag);
    return c->ops->recv(c, buf, count, t, src, tag);
}

snn_status snn_comm_barrier(snn_comm *c) {
    if (!c) return snn_error(SNN_E_INVALID, "barrier: no communicator");
    return c->ops->barrier(c);
}

snn_status snn_comm_split(snn_comm *c, int color, int key, snn_comm **out) {
    if (!c || !out) return snn_error(SNN_E_INVALID, "split needs a communicator and an output pointer");
    *out = NULL;
    return c->ops->split(c, color, key, out);
}

void snn_comm_abort(snn_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    if (c && c->ops->abort) c->ops->abort(c, code);
}

int snn_comm_agree_code(snn_comm *c, int mine, const char *msg, int *rank_out, char *msg_out, size_t cap) {
    if (rank_out) *rank_out = -1;
    if (msg_out && cap) msg_out[0] = 0;
    int32_t *all = c && c->size > 1 ? malloc(sizeof(int32_t) * (size_t)c->size) : NULL;
    int first = -1, code = 0;
    if (!c || c->size == 1 || !all) {
        /* one process (or no memory to agree with: then only this rank's view) */
        free(all);
        if (mine && rank_out) *rank_out = c ? c->rank : 0;
        if (mine && msg_out && cap) snprintf(msg_out, cap, "%s", msg ? msg : "");
        return mine;
    }
    int32_t m32 = mine;
    if (snn_comm_allgather(c, &m32, 1, SNN_COMM_I32, all) != SNN_OK) {
        free(all);
        if (rank_out) *rank_out = c->rank;
        if (msg_out && cap) snprintf(msg_out, cap, "%s", snn_last_error());
        return mine ? mine : 1;
    }
    for (int r = 0; r < c->size && first < 0; r++)
        if (all[r] != 0) first = r, code = all[r];
    free(all);
    if (first < 0) return 0;
    char buf[1024];
    memset(buf, 0, sizeof buf);
    if (c->rank == first) snprintf(buf, sizeof buf, "%s", msg ? msg : "");
    if (snn_comm_broadcast(c, buf, sizeof buf, SNN_COMM_U8, first) != SNN_OK)
        snprintf(buf, sizeof buf, "rank %d failed (its message was lost: %s)", first, snn_last_error());
    buf[sizeof buf - 1] = 0;
    if (rank_out) *rank_out = first;
    if (msg_out && cap) snprintf(msg_out, cap, "%s", buf);
    return code;
}

snn_status snn_comm_agree(snn_comm *c, snn_status mine) {
    if (!c) return snn_error(SNN_E_INVALID, "agree: no communicator");
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mine != SNN_OK ? snn_last_error() : "");
    int first = -1;
    char got[1024];
    int code = snn_comm_agree_code(c, (int)mine, msg, &first, got, sizeof got);
    if (code == 0) return SNN_OK;
    if (first != c->rank) snn_error((snn_status)code, "%s", got);
    return (snn_status)code;
}

/* ---------------- the mesh ---------------- */

snn_status snn_mesh_coords(int world, int pp_size, int tp_size, int rank, int *dp, int *pp, int *tp, int *dp_size) {
    if (world <= 0 || pp_size <= 0 || tp_size <= 0)
        return snn_error(SNN_E_INVALID, "mesh sizes must be positive (world_size=%d, pipeline_parallel_size=%d, "
                         "tensor_parallel_size=%d)", world, pp_size, tp_size);
    if ((long long)pp_size * tp_size > world || world % (pp_size * tp_size) != 0)
        return snn_error(SNN_E_INVALID, "world_size=%d is not divisible by pipeline_parallel_size * "
                         "tensor_parallel_size = %d * %d", world, pp_size, tp_size);
    if (rank < 0 || rank >= world) return snn_error(SNN_E_INVALID, "rank %d outside a world of %d", rank, world);
    if (tp) *tp = rank % tp_size;
    if (pp) *pp = (rank / tp_size) % pp_size;
    if (dp) *dp = rank / (pp_size * tp_size);
    if (dp_size) *dp_size = world / (pp_size * tp_size);
    return SNN_OK;
}

int snn_mesh_rank_of(const snn_mesh *m, int dp, int pp, int tp) {
    if (!m) return -1;
    return (dp * m->pp_size + pp) * m->tp_size + tp;
}

snn_status snn_mesh_create(snn_comm *world, int pp_size, int tp_size, snn_mesh *out) {
    if (!world || !out) return snn_error(SNN_E_INVALID, "mesh needs a world communicator and an output");
    memset(out, 0, sizeof *out);
    SNN_TRY(snn_mesh_coords(world->size, pp_size, tp_size, world->rank, &out->dp, &out->pp, &out->tp,
                            &out->dp_size));
    out->world = world;
    out->pp_size = pp_size;
    out->tp_size = tp_size;
    int P = pp_size, T = tp_size;
    snn_status st = snn_comm_split(world, out->dp * P + out->pp, out->tp, &out->tp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, out->dp * T + out->tp, out->pp, &out->pp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, out->pp * T + out->tp, out->dp, &out->dp_comm);
    if (st != SNN_OK) {
        snn_mesh_free(out);
        return st;
    }
    return SNN_OK;
}

void snn_mesh_free(snn_mesh *m) {
    if (!m) return;
    snn_comm_free(m->dp_comm);
    snn_comm_free(m->pp_comm);
    snn_comm_free(m->tp_comm);
    m->dp_comm = m->pp_comm = m->tp_comm = NULL;
}

/* ---------------- the (dp, pp, cp, tp) mesh ---------------- */

snn_status snn_mesh4_coords(int world, int pp_size, int cp_size, int tp_size, int rank, int *dp, int *pp,
                            int *cp, int *tp, int *dp_size) {
    if (world <= 0 || pp_size <= 0 || cp_size <= 0 || tp_size <= 0)
        return snn_error(SNN_E_INVALID, "mesh sizes must be positive (world_size=%d, pipeline_parallel_size=%d, "
                         "context_parallel_size=%d, tensor_parallel_size=%d)", world, pp_size, cp_size, tp_size);
    long long mp = (long long)pp_size * cp_size * tp_size;
    if (mp > world || world % mp != 0)
        return snn_error(SNN_E_INVALID, "world_size=%d is not divisible by pipeline_parallel_size * "
                         "context_parallel_size * tensor_parallel_size = %d * %d * %d", world, pp_size, cp_size,
                         tp_size);
    if (rank < 0 || rank >= world) return snn_error(SNN_E_INVALID, "rank %d outside a world of %d", rank, world);
    if (tp) *tp = rank % tp_size;
    if (cp) *cp = (rank / tp_size) % cp_size;
    if (pp) *pp = (rank / (tp_size * cp_size)) % pp_size;
    if (dp) *dp = rank / (int)mp;
    if (dp_size) *dp_size = world / (int)mp;
    return SNN_OK;
}

int snn_mesh4_rank_of(const snn_mesh4 *m, int dp, int pp, int cp, int tp) {
    return ((dp * m->pp_size + pp) * m->cp_size + cp) * m->tp_size + tp;
}

snn_status snn_mesh4_create(snn_comm *world, int pp_size, int cp_size, int tp_size, snn_mesh4 *out) {
    if (!world || !out) return snn_error(SNN_E_INVALID, "mesh needs a world communicator and an output");
    memset(out, 0, sizeof *out);
    SNN_TRY(snn_mesh4_coords(world->size, pp_size, cp_size, tp_size, world->rank, &out->dp, &out->pp, &out->cp,
                             &out->tp, &out->dp_size));
    out->world = world;
    out->pp_size = pp_size;
    out->cp_size = cp_size;
    out->tp_size = tp_size;
    const int P = pp_size, C = cp_size, T = tp_size;
    const int dp = out->dp, pp = out->pp, cp = out->cp, tp = out->tp;
    /* color = the coordinates that stay fixed, key = the one that varies */
    snn_status st = snn_comm_split(world, (dp * P + pp) * C + cp, tp, &out->tp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, (dp * P + pp) * T + tp, cp, &out->cp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, (dp * C + cp) * T + tp, pp, &out->pp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, (pp * C + cp) * T + tp, dp, &out->dp_comm);
    if (st == SNN_OK) st = snn_comm_split(world, pp * T + tp, dp * C + cp, &out->dpcp_comm);
    if (st != SNN_OK) {
        snn_mesh4_free(out);
        return st;
    }
    return SNN_OK;
}

void snn_mesh4_free(snn_mesh4 *m) {
    if (!m) return;
    snn_comm_free(m->dp_comm);
    snn_comm_free(m->pp_comm);
    snn_comm_free(m->cp_comm);
    snn_comm_free(m->tp_comm);
    snn_comm_free(m->dpcp_comm);
    m->dp_comm = m->pp_comm = m->cp_comm = m->tp_comm = m->dpcp_comm = NULL;
}
