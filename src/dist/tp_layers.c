/* The TP wrapper module (column / row / shard) and the shard index arithmetic; see tp.h. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "dist/tp.h"

typedef struct {
    snn_tp_mode mode;
    int groups;
    int bias;          /* ROW: bias features (0: none) */
    int bias_last;     /* bias along the last dimension (Linear) instead of dim 0 (Conv) */
    snn_comm *tp;
    int tp_rank, tp_size;
} tp_impl;

static _Atomic uint64_t stat_calls, stat_bytes;

void snn_tp_comm_stats(uint64_t *calls, uint64_t *bytes) {
    *calls = atomic_load(&stat_calls);
    *bytes = atomic_load(&stat_bytes);
}

void snn_tp_comm_stats_reset(void) {
    atomic_store(&stat_calls, 0);
    atomic_store(&stat_bytes, 0);
}

static snn_status allreduce(snn_module *m, float *buf, size_t n) {
    tp_impl *t = m->impl;
    if (t->tp_size == 1) return SNN_OK;
    if (!t->tp) return snn_error(SNN_E_STATE, "%s: tensor-parallel layer built without a TP communicator", m->name);
    atomic_fetch_add(&stat_calls, 1);
    atomic_fetch_add(&stat_bytes, (uint64_t)n * sizeof(float));
    return snn_comm_allreduce(t->tp, buf, n, SNN_COMM_F32, SNN_COMM_SUM);
}

static snn_status tp_setup(snn_module *m, snn_shape in) {
    tp_impl *t = m->impl;
    snn_module *c = m->children[0];
    c->in = in;
    snn_status st = c->ops->setup(c, in);
    if (st != SNN_OK) return st;
    m->out = c->out;
    m->n_params = 0;
    if (t->mode == SNN_TP_ROW && t->bias > 0) {
        t->bias_last = snn_module_kind_is(c, SNN_KIND_LINEAR);
        int feats = t->bias_last ? m->out.d[m->out.rank - 1] : m->out.d[0];
        if (feats != t->bias)
            return snn_error(SNN_E_SHAPE, "%s: row-parallel bias of %d features for an output of %d", m->name, t->bias,
                             feats);
        snn_module_add_param(m, "bias", snn_shape1(t->bias), SNN_PARAM_WEIGHT, 0);
    }
    return SNN_OK;
}

static void tp_init(snn_module *m, snn_rng *rng) {
    snn_module *c = m->children[0];
    if (c->ops->init) c->ops->init(c, rng);
    if (m->n_params) memset(m->params[0].data, 0, m->params[0].numel * sizeof(float));
}

static void tp_reserve(snn_module *m, snn_arena *a, int T, int N) {
    snn_module *c = m->children[0];
    if (c->ops->reserve) c->ops->reserve(c, a, T, N);
}

/* positions sharing one bias value, and the stride between consecutive features */
static void bias_geometry(const snn_module *m, size_t *outer, size_t *inner) {
    const tp_impl *t = m->impl;
    size_t per = snn_shape_numel(m->out);
    if (t->bias_last) {
        *outer = per / (size_t)t->bias;
        *inner = 1;
    } else {
        *outer = 1;
        *inner = per / (size_t)t->bias;
    }
}

static snn_status tp_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    tp_impl *t = m->impl;
    snn_module *c = m->children[0];
    SNN_TRY(c->ops->forward(c, r, x, y));
    if (t->mode != SNN_TP_ROW) return SNN_OK;
    size_t rows = snn_rows(r), per = snn_shape_numel(m->out);
    SNN_TRY(allreduce(m, y, rows * per));
    if (!m->n_params) return SNN_OK;
    /* bias after the sum, so it is added once */
    const float *b = m->params[0].data;
    size_t outer, inner;
    bias_geometry(m, &outer, &inner);
    for (size_t i = 0; i < rows; i++) {
        float *yi = y + i * per;
        if (t->bias_last) {
            for (size_t o = 0; o < outer; o++)
                for (int f = 0; f < t->bias; f++) yi[o * (size_t)t->bias + (size_t)f] += b[f];
        } else {
            for (int f = 0; f < t->bias; f++)
                for (size_t k = 0; k < inner; k++) yi[(size_t)f * inner + k] += b[f];
        }
    }
    return SNN_OK;
}

static snn_status tp_backward(snn_module *m, const snn_run *r, const float *x, const float *y, const float *dy,
                              float *dx) {
    tp_impl *t = m->impl;
    snn_module *c = m->children[0];
    if (t->mode == SNN_TP_ROW && m->n_params) {
        float *db = m->params[0].grad;
        size_t rows = snn_rows(r), per = snn_shape_numel(m->out), outer, inner;
        bias_geometry(m, &outer, &inner);
        for (size_t i = 0; i < rows; i++) {
            const float *g = dy + i * per;
            if (t->bias_last) {
                for (size_t o = 0; o < outer; o++)
                    for (int f = 0; f < t->bias; f++) db[f] += g[o * (size_t)t->bias + (size_t)f];
            } else {
                for (int f = 0; f < t->bias; f++) {
                    float acc = 0;
                    for (size_t k = 0; k < inner; k++) acc += g[(size_t)f * inner + k];
                    db[f] += acc;
                }
            }
        }
    }
    SNN_TRY(c->ops->backward(c, r, x, y, dy, dx));
    if (t->mode == SNN_TP_COLUMN && dx) SNN_TRY(allreduce(m, dx, snn_rows(r) * snn_shape_numel(m->in)));
    return SNN_OK;
}

static void tp_reset(snn_module *m) {
    snn_module *c = m->children[0];
    if (c->ops->reset) c->ops->reset(c);
}

static const snn_module_ops tp_ops = {
    .id = SNN_KIND_TENSOR_PARALLEL, .kind = "TensorParallel",
    .setup = tp_setup,
    .init = tp_init,
    .reserve = tp_reserve,
    .forward = tp_forward,
    .backward = tp_backward,
    .reset = tp_reset,
};

snn_module *snn_tp_wrap_new(snn_module *inner, snn_tp_mode mode, int groups, int bias, snn_comm *tp, int tp_rank,
                            int tp_size) {
    if (!inner) return NULL;
    snn_module *m = snn_module_new(&tp_ops, sizeof(tp_impl));
    if (!m) {
        snn_module_free(inner);
        return NULL;
    }
    tp_impl *t = m->impl;
    t->mode = mode;
    t->groups = groups > 0 ? groups : 1;
    t->bias = mode == SNN_TP_ROW ? bias : 0;
    t->tp = tp;
    t->tp_rank = tp_rank;
    t->tp_size = tp_size;
    snprintf(inner->name, sizeof inner->name, "@");
    if (snn_module_add_child(m, inner) != SNN_OK) {
        snn_module_free(m);
        return NULL;
    }
    return m;
}

int snn_tp_is_wrapper(const snn_module *m, snn_tp_mode *mode, int *groups) {
    if (!snn_module_kind_is(m, SNN_KIND_TENSOR_PARALLEL)) return 0;
    const tp_impl *t = m->impl;
    if (mode) *mode = t->mode;
    if (groups) *groups = t->groups;
    return 1;
}

/* ---- shard arithmetic ----------------------------------------------------------------- */

snn_status snn_shard_local_shape(const char *name, snn_shard_rule r, int rank, const int *canon, int tp_size,
                                 int *local) {
    for (int i = 0; i < rank; i++) local[i] = canon[i];
    if (r.dim < 0) return SNN_OK;
    if (r.dim >= rank)
        return snn_error(SNN_E_SHAPE, "%s: shard dimension %d of a rank-%d tensor", name, r.dim, rank);
    int g = r.groups > 0 ? r.groups : 1;
    if (canon[r.dim] % (g * tp_size))
        return snn_error(SNN_E_SHAPE, "%s: dimension %d of size %d is not divisible into %d group(s) x %d TP ranks",
                         name, r.dim, canon[r.dim], g, tp_size);
    local[r.dim] = canon[r.dim] / tp_size;
    return SNN_OK;
}

/* Walk (outer, local index along dim, inner) and call back with the canonical offset. */
static void shard_copy(snn_shard_rule r, int rank_n, const int *canon, int tp_rank, int tp_size, const float *a,
                       float *b, int to_local) {
    size_t total = 1;
    for (int i = 0; i < rank_n; i++) total *= (size_t)canon[i];
    if (r.dim < 0) {
        memcpy(b, a, total * sizeof(float));
        return;
    }
    size_t outer = 1, inner = 1;
    for (int i = 0; i < r.dim; i++) outer *= (size_t)canon[i];
    for (int i = r.dim + 1; i < rank_n; i++) inner *= (size_t)canon[i];
    int g = r.groups > 0 ? r.groups : 1;
    int D = canon[r.dim], blk = D / g, lblk = blk / tp_size, L = D / tp_size;
    for (size_t o = 0; o < outer; o++)
        for (int l = 0; l < L; l++) {
            int c = (l / lblk) * blk + tp_rank * lblk + l % lblk;
            size_t lo = (o * (size_t)L + (size_t)l) * inner, co = (o * (size_t)D + (size_t)c) * inner;
            if (to_local) memcpy(b + lo, a + co, inner * sizeof(float));
            else memcpy(b + co, a + lo, inner * sizeof(float));
        }
}

void snn_shard_extract(snn_shard_rule r, int rank_n, const int *canon, int tp_rank, int tp_size, const float *src,
                       float *local) {
    shard_copy(r, rank_n, canon, tp_rank, tp_size, src, local, 1);
}

void snn_shard_insert(snn_shard_rule r, int rank_n, const int *canon, int tp_rank, int tp_size, const float *local,
                      float *dst) {
    shard_copy(r, rank_n, canon, tp_rank, tp_size, local, dst, 0);
}
