/* The NCCL communicator (comm.h): GPU collectives, one device per rank.
 *
 * NCCL is a build-time option (nccl.h gives the types) and a run-time library: libnccl.so.2
 * is opened with dlopen when the first communicator is created, so the same snn runs on a
 * machine without NCCL for everything that does not need it, and the error says what is
 * missing instead of the loader refusing the whole program.
 *
 * Creation is collective over the world communicator: rank 0 draws the unique id, the world
 * broadcasts it (MPI, or nothing for one process), every rank selects its device and joins.
 * Only device-buffer collectives exist here; they are enqueued on the caller's stream and
 * may be captured into a CUDA graph (NCCL supports capture), which is how the GPU training
 * step keeps its all-reduce inside the one graph of a step. */
#ifdef SNN_HAVE_NCCL

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error_internal.h"
#include "dist/comm_impl.h"

/* the entry points used, with the header's own prototypes */
static struct {
    void *lib;
    int version;
    char err[512];
    __typeof__(ncclGetUniqueId) *get_unique_id;
    __typeof__(ncclCommInitRank) *init_rank;
    __typeof__(ncclCommDestroy) *destroy;
    __typeof__(ncclCommAbort) *abort;
    __typeof__(ncclAllReduce) *allreduce;
    __typeof__(ncclBroadcast) *broadcast;
    __typeof__(ncclGetErrorString) *error_string;
    __typeof__(ncclGetVersion) *get_version;
} nc;
static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void nc_load(void) {
    const char *names[] = {getenv("SNN_NCCL_LIBRARY"), "libnccl.so.2", "libnccl.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !nc.lib; i++)
        if (names[i] && *names[i]) nc.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!nc.lib) {
        const char *e = dlerror();
        snprintf(nc.err, sizeof nc.err, "cannot open libnccl.so.2 (%s); install NCCL, add its directory to "
                 "LD_LIBRARY_PATH, or name the library in SNN_NCCL_LIBRARY", e ? e : "not found");
        return;
    }
#define SYM(field, name)                                                                      \
    do {                                                                                      \
        *(void **)&nc.field = dlsym(nc.lib, name);                                            \
        if (!nc.field) {                                                                      \
            snprintf(nc.err, sizeof nc.err, "libnccl.so.2 has no %s (NCCL 2.10 or newer needed)", name); \
            return;                                                                           \
        }                                                                                     \
    } while (0)
    SYM(get_unique_id, "ncclGetUniqueId");
    SYM(init_rank, "ncclCommInitRank");
    SYM(destroy, "ncclCommDestroy");
    SYM(abort, "ncclCommAbort");
    SYM(allreduce, "ncclAllReduce");
    SYM(broadcast, "ncclBroadcast");
    SYM(error_string, "ncclGetErrorString");
    SYM(get_version, "ncclGetVersion");
#undef SYM
    if (nc.get_version(&nc.version) != ncclSuccess || nc.version < 21000) {
        snprintf(nc.err, sizeof nc.err, "libnccl.so.2 is version %d; snn needs NCCL 2.10 or newer (average "
                 "reduction)", nc.version);
        return;
    }
    nc.err[0] = 0;
}

static snn_status nc_fail(ncclResult_t r, const char *what) {
    return snn_error(SNN_E_IO, "NCCL %s failed: %s", what, nc.error_string ? nc.error_string(r) : "?");
}

typedef struct {
    ncclComm_t comm;
    int device;
} nccl_impl;

static ncclDataType_t nc_type(snn_comm_dtype t) {
    switch (t) {
    case SNN_COMM_F32: return ncclFloat32;
    case SNN_COMM_F64: return ncclFloat64;
    case SNN_COMM_I64: return ncclInt64;
    case SNN_COMM_I32: return ncclInt32;
    default: return ncclUint8;
    }
}

static snn_status host_refused(void) {
    return snn_error(SNN_E_UNSUPPORTED, "an NCCL communicator works on device buffers: use "
                     "snn_comm_device_allreduce / snn_comm_device_broadcast (host collectives go over MPI)");
}
static snn_status nh_allreduce(snn_comm *c, void *b, size_t n, snn_comm_dtype t, snn_comm_op op) { return host_refused(); }
static snn_status nh_iallreduce(snn_comm *c, void *b, size_t n, snn_comm_dtype t, snn_comm_op op, int s) {
    return host_refused();
}
static snn_status nh_wait(snn_comm *c, int s) { return host_refused(); }
static snn_status nh_broadcast(snn_comm *c, void *b, size_t n, snn_comm_dtype t, int root) { return host_refused(); }
static snn_status nh_allgather(snn_comm *c, const void *s, size_t n, snn_comm_dtype t, void *r) { return host_refused(); }
static snn_status nh_send(snn_comm *c, const void *b, size_t n, snn_comm_dtype t, int d, int tag) { return host_refused(); }
static snn_status nh_recv(snn_comm *c, void *b, size_t n, snn_comm_dtype t, int s, int tag) { return host_refused(); }
static snn_status nh_barrier(snn_comm *c) { return host_refused(); }
static snn_status nh_split(snn_comm *c, int color, int key, snn_comm **out) { return host_refused(); }

static void nh_abort(snn_comm *c, int code) {
    nccl_impl *im = c->impl;
    if (im && im->comm) nc.abort(im->comm);
    if (im) im->comm = NULL;
}

static void nh_destroy(snn_comm *c) {
    nccl_impl *im = c->impl;
    if (!im) return;
    if (im->comm) nc.destroy(im->comm);
    free(im);
    c->impl = NULL;
}

static snn_status nd_allreduce(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, snn_comm_op op, void *stream) {
    nccl_impl *im = c->impl;
    if (t == SNN_COMM_U8 && (op == SNN_COMM_SUM || op == SNN_COMM_AVG))
        return snn_error(SNN_E_INVALID, "device all-reduce: no sum of bytes");
    ncclRedOp_t o = op == SNN_COMM_SUM ? ncclSum : op == SNN_COMM_MAX ? ncclMax : op == SNN_COMM_MIN ? ncclMin : ncclAvg;
    ncclResult_t r = nc.allreduce(buf, buf, n, nc_type(t), o, im->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? SNN_OK : nc_fail(r, "all-reduce");
}

static snn_status nd_broadcast(snn_comm *c, void *buf, size_t n, snn_comm_dtype t, int root, void *stream) {
    nccl_impl *im = c->impl;
    ncclResult_t r = nc.broadcast(buf, buf, n, nc_type(t), root, im->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? SNN_OK : nc_fail(r, "broadcast");
}

static const snn_comm_ops nccl_ops = {
    .name = "nccl", .backend = SNN_COMM_BACKEND_NCCL, .allreduce = nh_allreduce, .iallreduce = nh_iallreduce,
    .wait = nh_wait, .broadcast = nh_broadcast, .allgather = nh_allgather, .send = nh_send, .recv = nh_recv,
    .barrier = nh_barrier, .split = nh_split, .abort = nh_abort, .destroy = nh_destroy,
    .dev_allreduce = nd_allreduce, .dev_broadcast = nd_broadcast,
};

snn_status snn_comm_nccl_create(snn_comm *world, int device, snn_comm **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_comm_nccl_create needs an output pointer");
    *out = NULL;
    if (!world) return snn_error(SNN_E_INVALID, "snn_comm_nccl_create needs the world communicator");
    if (snn_comm_backend_of(world) == SNN_COMM_BACKEND_NCCL)
        return snn_error(SNN_E_INVALID, "snn_comm_nccl_create: the id travels over a host communicator, not NCCL");
    pthread_once(&nc_once, nc_load);
    /* every rank learns whether every rank could load NCCL before anyone waits in it */
    snn_status mine = nc.err[0] ? snn_error(SNN_E_UNSUPPORTED, "%s", nc.err) : SNN_OK;
    if (mine == SNN_OK) {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess) mine = snn_error(SNN_E_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
        else if (device < 0 || device >= count)
            mine = snn_error(SNN_E_INVALID, "rank %d: CUDA device %d does not exist (%d visible)",
                             snn_comm_rank(world), device, count);
        else if ((e = cudaSetDevice(device)) != cudaSuccess)
            mine = snn_error(SNN_E_UNSUPPORTED, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    }
    SNN_TRY(snn_comm_agree(world, mine));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    snn_status st = SNN_OK;
    if (snn_comm_rank(world) == 0) {
        ncclResult_t r = nc.get_unique_id(&id);
        if (r != ncclSuccess) st = nc_fail(r, "unique id");
    }
    SNN_TRY(snn_comm_agree(world, st));
    SNN_TRY(snn_comm_broadcast(world, &id, sizeof id, SNN_COMM_U8, 0));
    nccl_impl *im = calloc(1, sizeof *im);
    if (!im) return snn_error(SNN_E_NOMEM, "out of memory for an NCCL communicator");
    im->device = device;
    ncclResult_t r = nc.init_rank(&im->comm, snn_comm_size(world), id, snn_comm_rank(world));
    if (r != ncclSuccess) {
        free(im);
        return nc_fail(r, "communicator initialisation");
    }
    *out = snn_comm_alloc(&nccl_ops, snn_comm_rank(world), snn_comm_size(world), snn_comm_local_rank(world), im);
    if (!*out) {
        nc.destroy(im->comm);
        free(im);
        return snn_error(SNN_E_NOMEM, "out of memory for a communicator");
    }
    return SNN_OK;
}

#endif
