/* The distributed optimizer: state sharded over DP (contract in dist_optim.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "backend/backend.h"
#include "dist/dist_optim.h"
#include "nn/model_internal.h"
#include "optim/optim_internal.h"

struct snn_dist_optim {
    snn_comm *dp;
    int rank, size;
    size_t n, shard, begin, len;
    float *params, *grads;
    snn_optimizer *local;
    /* a model placed on a device: params / grads above are its device arrays, the optimizer
     * (over this rank's slice) and at DP 1 the clip run there; over several ranks the
     * reductions go through `host`, a host copy of the flat array (gradients, then the
     * gathered parameters), allocated once */
    const snn_backend *dev;
    float *host;
    uint64_t *version; /* the model's param_version (bumped by the gather's upload) */
};

/* One MPI call carries at most INT_MAX elements; stay well below. */
#define COMM_CHUNK ((size_t)1 << 28)

static size_t begin_of(const snn_dist_optim *d, int r) {
    size_t b = (size_t)r * d->shard;
    return b < d->n ? b : d->n;
}

static size_t len_of(const snn_dist_optim *d, int r) {
    size_t b = begin_of(d, r), e = b + d->shard;
    return (e < d->n ? e : d->n) - b;
}

snn_status snn_dist_optim_create(snn_comm *dp, const snn_optim_opts *o, snn_model *m, snn_dist_optim **out) {
    if (!out) return snn_error(SNN_E_INVALID, "distributed optimizer: out is NULL");
    *out = NULL;
    if (!dp || !o || !m) return snn_error(SNN_E_INVALID, "distributed optimizer: NULL communicator, options or model");
    size_t n = snn_model_num_params(m);
    if (n == 0) return snn_error(SNN_E_INVALID, "the model has no trainable parameters to optimize");
    if (m->owned_be && snn_comm_size(dp) == 1) {
        snn_dist_optim *d = calloc(1, sizeof *d);
        if (!d) return snn_error(SNN_E_NOMEM, "out of memory for the distributed optimizer");
        d->dp = dp;
        d->size = 1;
        d->n = d->shard = d->len = n;
        d->params = m->param_store;
        d->grads = m->grad_store;
        d->dev = m->run.be;
        snn_status st = snn_optimizer_create_for_model(o, m, &d->local); /* marks the model */
        if (st != SNN_OK) {
            free(d);
            return st;
        }
        *out = d;
        return SNN_OK;
    }
    snn_dist_optim *d = calloc(1, sizeof *d);
    if (!d) return snn_error(SNN_E_NOMEM, "out of memory for the distributed optimizer");
    d->dp = dp;
    d->rank = snn_comm_rank(dp);
    d->size = snn_comm_size(dp);
    d->n = n;
    d->shard = (n + (size_t)d->size - 1) / (size_t)d->size;
    d->begin = begin_of(d, d->rank);
    d->len = len_of(d, d->rank);
    /* where each tensor lies: offsets into the host view (the storage itself on the CPU) */
    float *hview = snn_model_params(m);
    snn_status st = hview ? SNN_OK : snn_error(SNN_E_STATE, "distributed optimizer: reading the model failed: %s",
                                               snn_last_error());
    if (m->owned_be) {
        d->dev = m->run.be;
        d->params = m->param_store;
        d->grads = m->grad_store;
        if (st == SNN_OK && !(d->host = malloc(n * sizeof(float))))
            st = snn_error(SNN_E_NOMEM, "out of memory for the host copy of %zu gradients", n);
    } else {
        d->params = hview;
        d->grads = snn_model_grads(m);
    }
    uint8_t *mask = st == SNN_OK ? malloc(n) : NULL;
    if (st == SNN_OK && !mask) st = snn_error(SNN_E_NOMEM, "out of memory building the weight-decay mask");
    else if (mask) memset(mask, 1, n);
    for (size_t t = 0; st == SNN_OK && t < snn_model_num_tensors(m); t++) {
        snn_tensor_info ti;
        st = snn_model_tensor(m, t, &ti);
        if (st != SNN_OK || ti.is_buffer) continue;
        if (ti.data < hview || (size_t)(ti.data - hview) + ti.numel > n)
            st = snn_error(SNN_E_STATE, "tensor %s lies outside the model's parameter array", ti.name);
        else memset(mask + (ti.data - hview), ti.decay ? 1 : 0, ti.numel);
    }
    /* every rank owns a non-empty slice (refused: more ranks than parameters) */
    if (st == SNN_OK && d->len == 0) st = snn_error(SNN_E_INVALID, "distributed optimizer: %d ranks for %zu parameters", d->size, n);
    if (st == SNN_OK)
        st = snn_optimizer_create_on(d->dev ? d->dev : snn_backend_cpu(), o, d->len, d->params + d->begin,
                                     d->grads + d->begin, mask + d->begin, &d->local);
    d->version = &m->param_version;
    if (st == SNN_OK) snn_optimizer_track_version(d->local, d->version);
    free(mask);
    if (st != SNN_OK) {
        free(d->host);
        free(d);
        return st;
    }
    /* the precision system refuses to prepare a model that already has an optimizer */
    m->optimizer_bound = 1;
    *out = d;
    return SNN_OK;
}

void snn_dist_optim_free(snn_dist_optim *d) {
    if (!d) return;
    snn_optimizer_free(d->local);
    free(d->host);
    free(d);
}

size_t snn_dist_optim_begin(const snn_dist_optim *d) { return d ? d->begin : 0; }
size_t snn_dist_optim_len(const snn_dist_optim *d) { return d ? d->len : 0; }
size_t snn_dist_optim_total(const snn_dist_optim *d) { return d ? d->n : 0; }
snn_optimizer *snn_dist_optim_local(snn_dist_optim *d) { return d ? d->local : NULL; }

size_t snn_dist_optim_state_bytes(const snn_dist_optim *d) {
    return d ? snn_optimizer_num_states(d->local) * d->len * sizeof(float) : 0;
}

size_t snn_dist_optim_full_state_bytes(const snn_dist_optim *d) {
    return d ? snn_optimizer_num_states(d->local) * d->n * sizeof(float) : 0;
}

static snn_status allreduce_chunked(snn_comm *c, float *buf, size_t n) {
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        size_t k = n - off < COMM_CHUNK ? n - off : COMM_CHUNK;
        SNN_TRY(snn_comm_allreduce(c, buf + off, k, SNN_COMM_F32, SNN_COMM_SUM));
    }
    return SNN_OK;
}

static snn_status bcast_chunked(snn_comm *c, float *buf, size_t n, int root) {
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        size_t k = n - off < COMM_CHUNK ? n - off : COMM_CHUNK;
        SNN_TRY(snn_comm_broadcast(c, buf + off, k, SNN_COMM_F32, root));
    }
    return SNN_OK;
}

/* Steps 1-2 on the host array g (this rank's copy of the gradients): the sum over DP, the
 * global norm from each rank's slice, the clip applied to this rank's slice. */
static snn_status reduce_and_clip(snn_dist_optim *d, float *g, float clip, float *norm_out) {
    SNN_TRY(allreduce_chunked(d->dp, g, d->n));
    const float *gs = g + d->begin;
    double ss = 0.0;
    for (size_t i = 0; i < d->len; i++) ss += (double)gs[i] * (double)gs[i];
    SNN_TRY(snn_comm_allreduce(d->dp, &ss, 1, SNN_COMM_F64, SNN_COMM_SUM));
    float norm = (float)sqrt(ss);
    if (isfinite(norm) && clip > 0) {
        const float coef = clip / (norm + 1e-6f);
        if (coef < 1.0f) {
            float *gw = g + d->begin;
            for (size_t i = 0; i < d->len; i++) gw[i] *= coef;
        }
    }
    *norm_out = norm;
    return SNN_OK;
}

/* Step 4: every owner's slice into every rank's parameters. A device model gathers into the
 * host array (its own slice downloaded first) and uploads the whole of it. */
static snn_status gather_params(snn_dist_optim *d) {
    float *p = d->dev ? d->host : d->params;
    if (d->dev) SNN_TRY(d->dev->download(d->dev, p + d->begin, d->params + d->begin, d->len * sizeof(float)));
    for (int r = 0; r < d->size; r++) SNN_TRY(bcast_chunked(d->dp, p + begin_of(d, r), len_of(d, r), r));
    if (d->dev) {
        ++*d->version;
        SNN_TRY(d->dev->upload(d->dev, d->params, p, d->n * sizeof(float)));
    }
    return SNN_OK;
}

snn_status snn_dist_optim_step(snn_dist_optim *d, float lr, float clip, int skip_in, float *grad_norm, int *skipped) {
    if (!d) return snn_error(SNN_E_INVALID, "distributed optimizer is NULL");
    float norm, coef = 1.0f;
    if (d->size == 1) { /* the clip's coefficient is applied inside the update */
        SNN_TRY(snn_clip_coef_on(d->dev ? d->dev : snn_backend_cpu(), d->grads, d->n, clip > 0 ? clip : -1.0f, &norm,
                                 &coef));
    } else if (d->dev) {
        /* through the host: the same arithmetic as a host model, then this rank's slice of
         * the reduced, clipped gradients back to the device for its optimizer */
        SNN_TRY(d->dev->download(d->dev, d->host, d->grads, d->n * sizeof(float)));
        SNN_TRY(reduce_and_clip(d, d->host, clip, &norm));
        SNN_TRY(d->dev->upload(d->dev, d->grads + d->begin, d->host + d->begin, d->len * sizeof(float)));
    } else {
        SNN_TRY(reduce_and_clip(d, d->grads, clip, &norm));
    }
    int skip = skip_in || !isfinite(norm);
    SNN_TRY(snn_optimizer_step_scaled(d->local, lr, skip, coef));
    if (!skip && d->size > 1) SNN_TRY(gather_params(d));
    if (grad_norm) *grad_norm = norm;
    if (skipped) *skipped = skip;
    return SNN_OK;
}

snn_status snn_dist_optim_apply(snn_dist_optim *d, float lr, int skip) {
    if (!d) return snn_error(SNN_E_INVALID, "distributed optimizer is NULL");
    SNN_TRY(snn_optimizer_step(d->local, lr, skip));
    if (!skip && d->size > 1) SNN_TRY(gather_params(d));
    return SNN_OK;
}

snn_status snn_dist_optim_gather(snn_dist_optim *d, int root, snn_optimizer *full) {
    if (!d) return snn_error(SNN_E_INVALID, "distributed optimizer is NULL");
    size_t ns = snn_optimizer_num_states(d->local);
    snn_status st = SNN_OK;
    if (d->rank == root) {
        if (!full || snn_optimizer_numel(full) != d->n || snn_optimizer_num_states(full) != ns ||
            snn_optimizer_opts(full)->kind != snn_optimizer_opts(d->local)->kind)
            st = snn_error(SNN_E_INVALID, "distributed optimizer gather: the full optimizer does not match");
    }
    /* the root's verdict first, so that no rank sends to a root that will not receive */
    int32_t ok = st == SNN_OK;
    SNN_TRY(snn_comm_broadcast(d->dp, &ok, 1, SNN_COMM_I32, root));
    if (!ok) return st != SNN_OK ? st : snn_error(SNN_E_INVALID, "distributed optimizer gather refused on rank %d", root);
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state mine;
        SNN_TRY(snn_optimizer_state(d->local, i, &mine));
        if (d->rank == root) {
            snn_optim_state fs;
            SNN_TRY(snn_optimizer_state(full, i, &fs));
            for (int r = 0; r < d->size; r++) {
                float *dst = fs.data + begin_of(d, r);
                size_t len = len_of(d, r);
                if (r == root) {
                    memcpy(dst, mine.data, len * sizeof(float));
                    continue;
                }
                for (size_t off = 0; off < len; off += COMM_CHUNK) {
                    size_t k = len - off < COMM_CHUNK ? len - off : COMM_CHUNK;
                    SNN_TRY(snn_comm_recv(d->dp, dst + off, k, SNN_COMM_F32, r, 700 + (int)i));
                }
            }
        } else {
            for (size_t off = 0; off < d->len; off += COMM_CHUNK) {
                size_t k = d->len - off < COMM_CHUNK ? d->len - off : COMM_CHUNK;
                SNN_TRY(snn_comm_send(d->dp, mine.data + off, k, SNN_COMM_F32, root, 700 + (int)i));
            }
        }
    }
    if (d->rank == root) SNN_TRY(snn_optimizer_set_steps(full, snn_optimizer_steps(d->local)));
    return SNN_OK;
}

snn_status snn_dist_optim_load_slice(snn_dist_optim *d, const void *const *state, size_t nstates, long steps,
                                     const char *source) {
    if (!d || !state) return snn_error(SNN_E_INVALID, "distributed optimizer load: NULL argument");
    size_t ns = snn_optimizer_num_states(d->local);
    if (nstates != ns)
        return snn_error(SNN_E_INVALID, "%s: %zu optimizer state tensors given, the optimizer has %zu", source, nstates, ns);
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state os;
        SNN_TRY(snn_optimizer_state(d->local, i, &os));
        const uint8_t *src = (const uint8_t *)state[i] + d->begin * sizeof(float);
        int nonneg = strstr(os.name, "exp_avg_sq") != NULL;
        for (size_t k = 0; k < d->len; k++) {
            float v;
            memcpy(&v, src + k * sizeof(float), sizeof v);
            if (!isfinite(v) || (nonneg && v < 0))
                return snn_error(SNN_E_NUMERIC, "%s: optimizer state \"%s\" holds %g at index %zu", source, os.name,
                                 (double)v, d->begin + k);
        }
    }
    for (size_t i = 0; i < ns; i++) {
        snn_optim_state os;
        SNN_TRY(snn_optimizer_state(d->local, i, &os));
        memcpy(os.data, (const uint8_t *)state[i] + d->begin * sizeof(float), d->len * sizeof(float));
    }
    return snn_optimizer_set_steps(d->local, steps);
}
