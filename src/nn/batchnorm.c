/* BatchNorm over channels: per-sample input [C] (BatchNorm1d on features), [C, L]
 * (BatchNorm1d on channels x length) or [C, H, W] (BatchNorm2d).
 *
 * Statistics pool all B = T*N rows and all spatial positions of a channel, as SpikingJelly's
 * multi-step BatchNorm does (it flattens [T, N] before calling the torch layer). PyTorch's
 * semantics: training normalises with the biased batch variance and updates
 *   running = (1 - momentum) * running + momentum * batch_stat
 * with the unbiased variance; eval normalises with the running statistics.
 *
 * The forward saves only mean and 1/std per channel (the input is still intact at backward,
 * so x_hat is recomputed: C values instead of a whole activation). Statistics and the
 * per-element arithmetic run in double: the input gradient is a difference of terms that
 * nearly cancel when few values share a channel (two values: dx ~ eps / var), and these
 * streaming loops should be limited by memory traffic rather than arithmetic (not yet
 * measured). Backward differentiates the mode the forward ran in: the full batch-statistics
 * gradient after a training forward, the affine map after an eval forward.
 *
 * The arithmetic is the op table's (batchnorm_* in backend.h; the CPU reference is
 * src/backend/cpu/cpu_layers.c): every sum has one fixed order, so the CPU and the CUDA table
 * give the same bits. The statistics, saved mean/invstd and sums live in the arena (device
 * memory on a GPU); SyncBatchNorm's group sums go through a small host buffer (taken in
 * setup) when the model is not on the CPU. */
#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "nn/layers.h"

typedef struct {
    int features;
    float eps, momentum;
    int C, S;              /* channels, positions per channel (1, L or H*W) */
    double *mean, *invstd; /* [C] statistics the last forward normalised with (arena) */
    double *acc0, *acc1;   /* per-channel sums (arena scratch): acc0 [2C + 1], acc1 [C] */
    int fwd_training;      /* mode of the last forward */
    double fwd_count;      /* values per channel the last training forward normalised over */
    snn_status (*sync)(void *ctx, double *buf, size_t n); /* SyncBatchNorm: sum over the group */
    void *sync_ctx;
    double *host;          /* [2C + 1] host copy of the sums for the group sum off the CPU */
    int have_forward;
} bn_impl;

enum { P_WEIGHT, P_BIAS, P_RMEAN, P_RVAR };

static snn_status bn_setup(snn_module *m, snn_shape in) {
    bn_impl *b = m->impl;
    char s[64];
    if (b->features <= 0)
        return snn_error(SNN_E_INVALID, "BatchNorm needs a positive number of features (got %d)",
                         b->features);
    if (!(b->eps >= 0.0f) || !isfinite(b->eps))
        return snn_error(SNN_E_INVALID, "BatchNorm eps must be a finite value >= 0 (got %g)",
                         (double)b->eps);
    if (!(b->momentum >= 0.0f && b->momentum <= 1.0f))
        return snn_error(SNN_E_INVALID, "BatchNorm momentum must be in [0, 1] (got %g)",
                         (double)b->momentum);
    if (in.rank < 1 || in.rank > 3 || in.d[0] != b->features)
        return snn_error(SNN_E_SHAPE,
                         "BatchNorm(%d) expects per-sample inputs [%d], [%d, L] or [%d, H, W], "
                         "got %s",
                         b->features, b->features, b->features, b->features,
                         snn_shape_str(in, s, sizeof s));
    b->C = in.d[0];
    b->S = (int)(snn_shape_numel(in) / (size_t)b->C);
    free(b->host);
    b->host = malloc((2 * (size_t)b->C + 1) * sizeof(double));
    if (!b->host) return snn_error(SNN_E_NOMEM, "BatchNorm(%d): out of memory", b->features);
    m->out = in;
    m->n_params = 0;
    snn_module_add_param(m, "weight", snn_shape1(b->C), SNN_PARAM_WEIGHT, 0);
    snn_module_add_param(m, "bias", snn_shape1(b->C), SNN_PARAM_WEIGHT, 0);
    snn_module_add_param(m, "running_mean", snn_shape1(b->C), SNN_PARAM_BUFFER, 0);
    snn_module_add_param(m, "running_var", snn_shape1(b->C), SNN_PARAM_BUFFER, 0);
    return SNN_OK;
}

static void bn_init(snn_module *m, snn_rng *rng) {
    (void)rng;
    bn_impl *b = m->impl;
    for (int c = 0; c < b->C; c++) {
        m->params[P_WEIGHT].data[c] = 1.0f;
        m->params[P_BIAS].data[c] = 0.0f;
        m->params[P_RMEAN].data[c] = 0.0f;
        m->params[P_RVAR].data[c] = 1.0f;
    }
}

static void bn_reserve(snn_module *m, snn_arena *a, int T, int N) {
    (void)T;
    (void)N;
    bn_impl *b = m->impl;
    b->mean = snn_arena_take(a, (size_t)b->C * sizeof(double));
    b->invstd = snn_arena_take(a, (size_t)b->C * sizeof(double));
    b->acc0 = snn_arena_take(a, (2 * (size_t)b->C + 1) * sizeof(double));
    b->acc1 = snn_arena_take(a, (size_t)b->C * sizeof(double));
    b->have_forward = 0;
}

/* Synchronised statistics (SyncBatchNorm): the per-channel sums are summed over the group
 * before they are used, so every replica normalises with the statistics of the whole
 * distributed batch and its backward subtracts the whole batch's projections. buf [n] is
 * memory of the model's device; with count != NULL the count rides along as element n (the
 * arena leaves room for it) and comes back summed. */
static snn_status bn_sync(snn_module *m, double *buf, size_t n, double *count) {
    bn_impl *b = m->impl;
    if (!b->sync) return SNN_OK;
    const snn_backend *be = m->be;
    double *h = be->device == SNN_DEVICE_CPU ? buf : b->host;
    if (h != buf) SNN_TRY(be->download(be, h, buf, n * sizeof(double)));
    if (count) h[n] = *count;
    SNN_TRY(b->sync(b->sync_ctx, h, n + (count ? 1 : 0)));
    if (count) *count = h[n];
    if (h != buf) SNN_TRY(be->upload(be, buf, h, n * sizeof(double)));
    return SNN_OK;
}

static snn_status bn_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    bn_impl *b = m->impl;
    const snn_backend *be = m->be;
    const size_t B = snn_rows(r), C = (size_t)b->C, S = (size_t)b->S;
    const int training = r->training;
    if (training && B * S < 2 && !b->sync)
        return snn_error(SNN_E_INVALID,
                         "BatchNorm %s needs more than one value per channel in training "
                         "(T*N = %zu, spatial size %zu); use a larger batch or eval mode",
                         m->name, B, S);
    if (!b->mean)
        return snn_error(SNN_E_STATE, "BatchNorm %s: reserve must run before forward", m->name);
    double cnt = (double)(B * S); /* values per channel (of the whole group when synchronised) */
    /* x is a 16-bit convolution's output kept in its type (precision/prec_store.c) */
    const snn_dtype xt = (snn_dtype)m->in_store;
    if (m->out_store) return snn_error(SNN_E_STATE, "BatchNorm %s: its output cannot be stored 16-bit", m->name);

    if (training) {
        SNN_TRY(be->batchnorm_stats(be, xt, B, b->C, S, x, NULL, 0.0, b->acc0));
        if (b->sync) {
            SNN_TRY(bn_sync(m, b->acc0, C, &cnt));
            if (cnt < 2)
                return snn_error(SNN_E_INVALID, "BatchNorm %s needs more than one value per channel in "
                                 "training (%g over the synchronised group)", m->name, cnt);
        }
        SNN_TRY(be->batchnorm_stats(be, xt, B, b->C, S, x, b->acc0, cnt, b->acc1));
        SNN_TRY(bn_sync(m, b->acc1, C, NULL));
    }
    SNN_TRY(be->batchnorm_forward(be, xt, B, b->C, S, training, b->eps, b->momentum, cnt, b->acc0, b->acc1, x,
                                  m->params[P_WEIGHT].data, m->params[P_BIAS].data, m->params[P_RMEAN].data,
                                  m->params[P_RVAR].data, b->mean, b->invstd, y));
    b->fwd_training = training;
    b->fwd_count = cnt;
    b->have_forward = 1;
    return SNN_OK;
}

static snn_status bn_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                              const float *dy, float *dx) {
    (void)y;
    bn_impl *b = m->impl;
    const snn_backend *be = m->be;
    if (!b->have_forward)
        return snn_error(SNN_E_STATE, "BatchNorm %s: backward called before forward", m->name);
    const size_t B = snn_rows(r), C = (size_t)b->C, S = (size_t)b->S;
    const int training = b->fwd_training;
    const snn_dtype xt = (snn_dtype)m->in_store; /* x and dx (see bn_forward) */
    double *acc0 = b->acc0, *acc1 = b->acc1;
    /* this replica's share of dw, db: the data-parallel gradient average adds the others' */
    SNN_TRY(be->batchnorm_backward_sums(be, xt, B, b->C, S, x, dy, b->mean, b->invstd, acc0, acc1,
                                        m->params[P_WEIGHT].grad, m->params[P_BIAS].grad));
    if (!dx) return SNN_OK;
    if (training && b->sync) {
        /* one message: [sum dy | sum dy x_hat] */
        SNN_TRY(be->copy(be, acc0 + C, acc1, C * sizeof(double)));
        SNN_TRY(bn_sync(m, acc0, 2 * C, NULL));
        SNN_TRY(be->copy(be, acc1, acc0 + C, C * sizeof(double)));
    }
    return be->batchnorm_backward_input(be, xt, B, b->C, S, training, b->fwd_count, x, dy, m->params[P_WEIGHT].data,
                                        b->mean, b->invstd, acc0, acc1, dx);
}

static void bn_destroy(snn_module *m) {
    bn_impl *b = m->impl;
    free(b->host);
    b->host = NULL;
}

static void bn_describe(const snn_module *m, snn_module_desc *d) {
    const bn_impl *b = m->impl;
    d->in_features = d->out_features = b->features;
    d->eps = b->eps;
    d->momentum = b->momentum;
}

static const snn_module_ops bn_ops = {
    .describe = bn_describe,
    .id = SNN_KIND_BATCHNORM,
    .kind = "BatchNorm",
    .devices = SNN_DEVMASK_ALL,
    .setup = bn_setup,
    .init = bn_init,
    .reserve = bn_reserve,
    .forward = bn_forward,
    .backward = bn_backward,
    .destroy = bn_destroy,
};

int snn_batchnorm_set_sync(snn_module *m, snn_status (*sum)(void *ctx, double *buf, size_t n), void *ctx) {
    if (!snn_module_kind_is(m, SNN_KIND_BATCHNORM)) return 0;
    bn_impl *b = m->impl;
    b->sync = sum;
    b->sync_ctx = ctx;
    return 1;
}

snn_module *snn_batchnorm_new(int features, float eps, float momentum) {
    snn_module *m = snn_module_new(&bn_ops, sizeof(bn_impl));
    if (!m) return NULL;
    bn_impl *b = m->impl;
    b->features = features;
    b->eps = eps;
    b->momentum = momentum;
    return m;
}
