/* DDP: the precision step's hook that averages gradients over the DP group, agrees on
 * FP16 overflow and MAX-reduces FP8 amax (contract in ddp.h). */
#include <stdlib.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "dist/ddp.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"

struct snn_ddp {
    snn_comm *dp;
    snn_comm *dev_dp;       /* a device model's device collectives (NCCL), or NULL */
    const snn_backend *be;  /* a device model's table, NULL for a host model */
    float *stage;           /* a device model without dev_dp: the host copy of the gradients */
    snn_model *m;
    snn_precision *p;
    size_t bucket_floats;
    float inv_dp;
    int last_buckets;
};

/* The stream a device model's table enqueues on (the collectives join it). */
static void *be_stream(const snn_backend *be) {
#ifdef SNN_HAVE_CUDA
    if (be && be->device == SNN_DEVICE_CUDA) return snn_cuda_stream((snn_cuda *)be->ctx);
#endif
    (void)be;
    return NULL;
}

/* Host buckets: sum-all-reduce g[0, n) from its end, SNN_COMM_MAX_PENDING in flight. */
static snn_status host_buckets(snn_ddp *d, float *g, size_t n) {
    int req[SNN_COMM_MAX_PENDING];
    int head = 0, count = 0, buckets = 0;
    size_t end = n;
    while (end > 0) {
        size_t len = end < d->bucket_floats ? end : d->bucket_floats;
        size_t start = end - len;
        if (count == SNN_COMM_MAX_PENDING) {
            SNN_TRY(snn_comm_wait(d->dp, req[head]));
            head = (head + 1) % SNN_COMM_MAX_PENDING;
            count--;
        }
        int r;
        SNN_TRY(snn_comm_iallreduce(d->dp, g + start, len, SNN_COMM_F32, SNN_COMM_SUM, &r));
        req[(head + count) % SNN_COMM_MAX_PENDING] = r;
        count++;
        buckets++;
        end = start;
    }
    while (count > 0) {
        SNN_TRY(snn_comm_wait(d->dp, req[head]));
        head = (head + 1) % SNN_COMM_MAX_PENDING;
        count--;
    }
    d->last_buckets = buckets;
    return SNN_OK;
}

/* A device model's gradients: the same buckets through the device communicator, enqueued
 * on the model's stream (no host wait), or through the host (download, host buckets,
 * upload) when the ranks have no device collectives between them (an MPI communicator,
 * several ranks on one GPU); then the same 1/DP multiply on the device. */
static snn_status device_grads(snn_ddp *d, float *g, size_t n) {
    const snn_backend *be = d->be;
    if (d->dev_dp) {
        void *stream = be_stream(be);
        int buckets = 0;
        for (size_t end = n; end > 0; buckets++) {
            size_t len = end < d->bucket_floats ? end : d->bucket_floats;
            end -= len;
            SNN_TRY(snn_comm_device_allreduce(d->dev_dp, g + end, len, SNN_COMM_F32, SNN_COMM_SUM, stream));
        }
        d->last_buckets = buckets;
    } else {
        SNN_TRY(be->download(be, d->stage, g, n * sizeof(float)));
        SNN_TRY(host_buckets(d, d->stage, n));
        SNN_TRY(be->upload(be, g, d->stage, n * sizeof(float)));
    }
    return be->scale(be, g, g, d->inv_dp, n);
}

static snn_status ddp_grads(void *ctx, float *g, size_t n) {
    snn_ddp *d = ctx;
    if (d->be) return device_grads(d, g, n);
    SNN_TRY(host_buckets(d, g, n));
    const float s = d->inv_dp;
#pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) g[i] *= s;
    return SNN_OK;
}

static snn_status ddp_overflow(void *ctx, int *found_inf) {
    snn_ddp *d = ctx;
    int32_t f = *found_inf ? 1 : 0;
    SNN_TRY(snn_comm_allreduce(d->dp, &f, 1, SNN_COMM_I32, SNN_COMM_MAX));
    *found_inf = f != 0;
    return SNN_OK;
}

static snn_status ddp_amax(void *ctx, float *amax, size_t n) {
    snn_ddp *d = ctx;
    return snn_comm_allreduce(d->dp, amax, n, SNN_COMM_F32, SNN_COMM_MAX);
}

/* Broadcast DP rank 0's parameters (with_params) and buffers to every replica. */
static snn_status broadcast_state(snn_ddp *d, int with_params) {
    snn_model *m = d->m;
    size_t np = with_params ? snn_model_num_params(m) : 0, nb = snn_model_num_buffers(m);
    if (d->be && d->dev_dp) {
        void *stream = be_stream(d->be);
        if (np) {
            m->param_version++;
            SNN_TRY(snn_comm_device_broadcast(d->dev_dp, m->param_store, np, SNN_COMM_F32, 0, stream));
        }
        if (nb) SNN_TRY(snn_comm_device_broadcast(d->dev_dp, m->buffer_store, nb, SNN_COMM_F32, 0, stream));
        return SNN_OK;
    }
    /* the host copy (refreshed from a device first), then back to the device */
    float *p = np ? snn_model_params(m) : NULL, *b = nb ? snn_model_buffers(m) : NULL;
    if ((np && !p) || (nb && !b)) return snn_error(SNN_E_STATE, "DDP: reading the model failed: %s", snn_last_error());
    if (np) SNN_TRY(snn_comm_broadcast(d->dp, p, np, SNN_COMM_F32, 0));
    if (nb) SNN_TRY(snn_comm_broadcast(d->dp, b, nb, SNN_COMM_F32, 0));
    if (!d->be) return SNN_OK;
    if (np) return snn_model_push_host(m);
    /* buffers only: the host copy of the parameters may be stale and must not reach the device */
    SNN_TRY(d->be->upload(d->be, m->buffer_store, m->buffers, nb * sizeof(float)));
    return d->be->synchronize(d->be);
}

snn_status snn_ddp_create(snn_comm *dp, snn_comm *device_dp, snn_model *m, snn_precision *p, size_t bucket_bytes,
                          snn_ddp **out) {
    if (!dp || !m || !p || !out) return snn_error(SNN_E_INVALID, "DDP needs a DP group, a model and its precision");
    *out = NULL;
    if (snn_model_precision(m) != p) return snn_error(SNN_E_STATE, "DDP: the precision was not prepared on this model");
    if (!bucket_bytes) bucket_bytes = SNN_DDP_DEFAULT_BUCKET_BYTES;
    if (bucket_bytes < sizeof(float)) return snn_error(SNN_E_INVALID, "DDP bucket size must hold one float");
    const int on_device = m->owned_be != NULL;
    if (device_dp && !on_device)
        return snn_error(SNN_E_INVALID, "DDP: a device communicator was given for a model on the CPU");
    if (device_dp && (snn_comm_size(device_dp) != snn_comm_size(dp) || snn_comm_rank(device_dp) != snn_comm_rank(dp)))
        return snn_error(SNN_E_INVALID, "DDP: the device communicator (rank %d of %d) is not the DP group's (rank %d "
                         "of %d)", snn_comm_rank(device_dp), snn_comm_size(device_dp), snn_comm_rank(dp),
                         snn_comm_size(dp));
    snn_ddp *d = calloc(1, sizeof *d);
    if (!d) return snn_error(SNN_E_NOMEM, "out of memory for DDP");
    d->dp = dp;
    d->m = m;
    d->p = p;
    d->be = on_device ? snn_model_backend(m) : NULL;
    d->dev_dp = device_dp && snn_comm_size(device_dp) > 1 ? device_dp : NULL;
    d->bucket_floats = bucket_bytes / sizeof(float);
    d->inv_dp = 1.0f / (float)snn_comm_size(dp);
    snn_status st = SNN_OK;
    if (snn_comm_size(dp) > 1) {
        /* sized before the first step: no allocation inside one */
        if (d->be && !d->dev_dp && !(d->stage = malloc((snn_model_num_params(m) + 1) * sizeof(float))))
            st = snn_error(SNN_E_NOMEM, "out of memory for DDP's host copy of %zu gradients", snn_model_num_params(m));
        /* the replicas start from DP rank 0's state (the seeds agree anyway) */
        if (st == SNN_OK) st = broadcast_state(d, 1);
        snn_precision_sync s = {.ctx = d, .grads = ddp_grads, .overflow = ddp_overflow, .amax = ddp_amax};
        if (st == SNN_OK) st = snn_precision_set_sync(p, &s);
    }
    if (st != SNN_OK) {
        free(d->stage);
        free(d);
        return st;
    }
    *out = d;
    return SNN_OK;
}

void snn_ddp_free(snn_ddp *d) {
    if (!d) return;
    if (snn_comm_size(d->dp) > 1 && d->p->sync.ctx == d) snn_precision_set_sync(d->p, NULL);
    free(d->stage);
    free(d);
}

snn_status snn_ddp_broadcast_buffers(snn_ddp *d) {
    if (!d) return snn_error(SNN_E_INVALID, "DDP is NULL");
    if (snn_comm_size(d->dp) == 1 || snn_model_num_buffers(d->m) == 0) return SNN_OK;
    return broadcast_state(d, 0);
}

int snn_ddp_buckets(const snn_ddp *d) { return d ? d->last_buckets : 0; }

/* ---- SyncBatchNorm ---- */

static snn_status bn_sum(void *ctx, double *buf, size_t n) {
    return snn_comm_allreduce((snn_comm *)ctx, buf, n, SNN_COMM_F64, SNN_COMM_SUM);
}

typedef struct {
    snn_comm *dp;
    int count;
} sync_walk;

static void set_sync(snn_module *mod, void *ctx) {
    sync_walk *w = ctx;
    w->count += snn_batchnorm_set_sync(mod, w->dp ? bn_sum : NULL, w->dp);
}

snn_status snn_ddp_sync_batchnorm(snn_comm *dp, snn_model *m, int *n_bn) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_ddp_sync_batchnorm: NULL model");
    sync_walk w = {.dp = dp && snn_comm_size(dp) > 1 ? dp : NULL, .count = 0};
    snn_module_walk(m->root, set_sync, &w);
    if (n_bn) *n_bn = w.count;
    return SNN_OK;
}
