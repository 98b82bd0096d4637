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
 * Parallel: each OpenMP thread owns a contiguous block of channels and walks the rows in
 * order, so the sums have a fixed order (bit-reproducible for any thread count) and a [C]
 * input (S = 1) is still read contiguously. */
#include <math.h>
#include <omp.h>

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
    int have_forward;
} bn_impl;

enum { P_WEIGHT, P_BIAS, P_RMEAN, P_RVAR };

/* Work below this many elements runs on one thread (a parallel region costs microseconds). */
#define BN_PAR_MIN 32768

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

/* This thread's contiguous block [*c0, *c1) of the C channels. */
static void channel_block(int C, int *c0, int *c1) {
    int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    int q = C / nth, r = C % nth;
    *c0 = tid * q + (tid < r ? tid : r);
    *c1 = *c0 + q + (tid < r ? 1 : 0);
}

/* Synchronised statistics (SyncBatchNorm): the per-channel sums are summed over the group
 * before they are used, so every replica normalises with the statistics of the whole
 * distributed batch and its backward subtracts the whole batch's projections. */
static snn_status bn_sync(bn_impl *b, double *buf, size_t n) {
    return b->sync ? b->sync(b->sync_ctx, buf, n) : SNN_OK;
}

static snn_status bn_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    bn_impl *b = m->impl;
    const size_t B = snn_rows(r), C = (size_t)b->C, S = (size_t)b->S;
    const int training = r->training;
    if (training && B * S < 2 && !b->sync)
        return snn_error(SNN_E_INVALID,
                         "BatchNorm %s needs more than one value per channel in training "
                         "(T*N = %zu, spatial size %zu); use a larger batch or eval mode",
                         m->name, B, S);
    if (!b->mean)
        return snn_error(SNN_E_STATE, "BatchNorm %s: reserve must run before forward", m->name);
    const float *w = m->params[P_WEIGHT].data, *bias = m->params[P_BIAS].data;
    float *rmean = m->params[P_RMEAN].data, *rvar = m->params[P_RVAR].data;
    const double mom = b->momentum, eps = b->eps;
    double *mean = b->mean, *invstd = b->invstd;
    double *acc0 = b->acc0, *acc1 = b->acc1;
    const int par = B * C * S >= BN_PAR_MIN;
    double cnt = (double)(B * S); /* values per channel (of the whole group when synchronised) */

    if (training) {
#pragma omp parallel if (par)
        {
            int c0, c1;
            channel_block((int)C, &c0, &c1);
            for (int c = c0; c < c1; c++) acc0[c] = 0.0;
            for (size_t i = 0; i < B; i++)
                for (int c = c0; c < c1; c++) {
                    const float *p = x + (i * C + (size_t)c) * S;
                    double s = 0.0;
                    for (size_t k = 0; k < S; k++) s += p[k];
                    acc0[c] += s;
                }
        }
        if (b->sync) {
            acc0[C] = cnt;
            SNN_TRY(bn_sync(b, acc0, C + 1));
            cnt = acc0[C];
            if (cnt < 2)
                return snn_error(SNN_E_INVALID, "BatchNorm %s needs more than one value per channel in "
                                 "training (%g over the synchronised group)", m->name, cnt);
        }
#pragma omp parallel if (par)
        {
            int c0, c1;
            channel_block((int)C, &c0, &c1);
            for (int c = c0; c < c1; c++) {
                acc0[c] /= cnt;
                acc1[c] = 0.0;
            }
            /* second pass around the mean: no cancellation as in E[x^2] - E[x]^2 */
            for (size_t i = 0; i < B; i++)
                for (int c = c0; c < c1; c++) {
                    const float *p = x + (i * C + (size_t)c) * S;
                    const double mu = acc0[c];
                    double s = 0.0;
                    for (size_t k = 0; k < S; k++) {
                        double d = (double)p[k] - mu;
                        s += d * d;
                    }
                    acc1[c] += s;
                }
        }
        SNN_TRY(bn_sync(b, acc1, C));
    }
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block((int)C, &c0, &c1);
        if (training) {
            for (int c = c0; c < c1; c++) {
                double var = acc1[c] / cnt;
                double unbiased = acc1[c] / (cnt - 1.0);
                mean[c] = acc0[c];
                invstd[c] = 1.0 / sqrt(var + eps);
                rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * acc0[c]);
                rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * unbiased);
            }
        } else {
            for (int c = c0; c < c1; c++) {
                mean[c] = rmean[c];
                invstd[c] = 1.0 / sqrt((double)rvar[c] + eps);
            }
        }
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * C + (size_t)c) * S;
                const double mu = mean[c], sc = invstd[c] * w[c], be = bias[c];
                for (size_t k = 0; k < S; k++) y[o + k] = (float)((x[o + k] - mu) * sc + be);
            }
    }
    b->fwd_training = training;
    b->fwd_count = cnt;
    b->have_forward = 1;
    return SNN_OK;
}

static snn_status bn_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                              const float *dy, float *dx) {
    (void)y;
    bn_impl *b = m->impl;
    if (!b->have_forward)
        return snn_error(SNN_E_STATE, "BatchNorm %s: backward called before forward", m->name);
    const size_t B = snn_rows(r), C = (size_t)b->C, S = (size_t)b->S;
    const double cnt = b->fwd_count;
    const int training = b->fwd_training;
    const float *w = m->params[P_WEIGHT].data;
    float *dw = m->params[P_WEIGHT].grad, *db = m->params[P_BIAS].grad;
    const double *mean = b->mean, *invstd = b->invstd;
    double *acc0 = b->acc0, *acc1 = b->acc1;
    const int par = B * C * S >= BN_PAR_MIN;

#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block((int)C, &c0, &c1);
        /* sum dy and sum dy * x_hat: the bias and weight gradients, and (in training)
         * the two projections the batch statistics subtract from dx */
        for (int c = c0; c < c1; c++) acc0[c] = acc1[c] = 0.0;
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * C + (size_t)c) * S;
                const double mu = mean[c], is = invstd[c];
                double s0 = 0.0, s1 = 0.0;
                for (size_t k = 0; k < S; k++) {
                    s0 += dy[o + k];
                    s1 += dy[o + k] * ((x[o + k] - mu) * is);
                }
                acc0[c] += s0;
                acc1[c] += s1;
            }
        /* this replica's share: the data-parallel gradient average adds the others' */
        for (int c = c0; c < c1; c++) {
            db[c] += (float)acc0[c];
            dw[c] += (float)acc1[c];
        }
    }
    if (!dx) return SNN_OK;
    if (training && b->sync) {
        for (size_t c = 0; c < C; c++) acc0[C + c] = acc1[c]; /* one message: [sum dy | sum dy x_hat] */
        SNN_TRY(bn_sync(b, acc0, 2 * C));
        for (size_t c = 0; c < C; c++) acc1[c] = acc0[C + c];
    }
#pragma omp parallel if (par)
    {
        int c0, c1;
        channel_block((int)C, &c0, &c1);
        for (size_t i = 0; i < B; i++)
            for (int c = c0; c < c1; c++) {
                const size_t o = (i * C + (size_t)c) * S;
                const double mu = mean[c], is = invstd[c], k_ = w[c] * is;
                if (training) {
                    /* dx = w/std * (dy - mean(dy) - x_hat * mean(dy * x_hat)) */
                    const double a = acc0[c] / cnt, bb = acc1[c] / cnt;
                    for (size_t k = 0; k < S; k++) {
                        double xh = (x[o + k] - mu) * is;
                        dx[o + k] = (float)(k_ * (dy[o + k] - a - xh * bb));
                    }
                } else {
                    for (size_t k = 0; k < S; k++) dx[o + k] = (float)(k_ * dy[o + k]);
                }
            }
    }
    return SNN_OK;
}

static void bn_describe(const snn_module *m, snn_module_desc *d) {
    const bn_impl *b = m->impl;
    d->in_features = d->out_features = b->features;
    d->eps = b->eps;
    d->momentum = b->momentum;
}

static const snn_module_ops bn_ops = {
    .describe = bn_describe,
    .kind = "BatchNorm",
    .setup = bn_setup,
    .init = bn_init,
    .reserve = bn_reserve,
    .forward = bn_forward,
    .backward = bn_backward,
};

int snn_batchnorm_set_sync(snn_module *m, snn_status (*sum)(void *ctx, double *buf, size_t n), void *ctx) {
    if (!m || snn_module_own_ops(m) != &bn_ops) return 0;
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
