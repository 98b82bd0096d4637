/* DDP: the precision step's hook that averages gradients over the DP group, agrees on
 * FP16 overflow and MAX-reduces FP8 amax (contract in ddp.h). */
#include <stdlib.h>

#include "core/error_internal.h"
#include "dist/ddp.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"

struct snn_ddp {
    snn_comm *dp;
    snn_model *m;
    snn_precision *p;
    size_t bucket_floats;
    float inv_dp;
    int last_buckets;
};

static snn_status ddp_grads(void *ctx, float *g, size_t n) {
    snn_ddp *d = ctx;
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
    const float s = d->inv_dp;
#pragma omp parallel for schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) g[i] *= s;
    d->last_buckets = buckets;
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

snn_status snn_ddp_create(snn_comm *dp, snn_model *m, snn_precision *p, size_t bucket_bytes, snn_ddp **out) {
    if (!dp || !m || !p || !out) return snn_error(SNN_E_INVALID, "DDP needs a DP group, a model and its precision");
    *out = NULL;
    if (snn_model_precision(m) != p) return snn_error(SNN_E_STATE, "DDP: the precision was not prepared on this model");
    if (!bucket_bytes) bucket_bytes = SNN_DDP_DEFAULT_BUCKET_BYTES;
    if (bucket_bytes < sizeof(float)) return snn_error(SNN_E_INVALID, "DDP bucket size must hold one float");
    snn_ddp *d = calloc(1, sizeof *d);
    if (!d) return snn_error(SNN_E_NOMEM, "out of memory for DDP");
    d->dp = dp;
    d->m = m;
    d->p = p;
    d->bucket_floats = bucket_bytes / sizeof(float);
    d->inv_dp = 1.0f / (float)snn_comm_size(dp);
    snn_status st = SNN_OK;
    if (snn_comm_size(dp) > 1) {
        /* the replicas start from DP rank 0's state (the seeds agree anyway) */
        st = snn_comm_broadcast(dp, snn_model_params(m), snn_model_num_params(m), SNN_COMM_F32, 0);
        if (st == SNN_OK) st = snn_ddp_broadcast_buffers(d);
        snn_precision_sync s = {.ctx = d, .grads = ddp_grads, .overflow = ddp_overflow, .amax = ddp_amax};
        if (st == SNN_OK) st = snn_precision_set_sync(p, &s);
    }
    if (st != SNN_OK) {
        free(d);
        return st;
    }
    *out = d;
    return SNN_OK;
}

void snn_ddp_free(snn_ddp *d) {
    if (!d) return;
    if (snn_comm_size(d->dp) > 1 && d->p->sync.ctx == d) snn_precision_set_sync(d->p, NULL);
    free(d);
}

snn_status snn_ddp_broadcast_buffers(snn_ddp *d) {
    if (!d) return snn_error(SNN_E_INVALID, "DDP is NULL");
    if (snn_comm_size(d->dp) == 1) return SNN_OK;
    return snn_comm_broadcast(d->dp, snn_model_buffers(d->m), snn_model_num_buffers(d->m), SNN_COMM_F32, 0);
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
