/* Positions under context parallel: a rank's tokens are two chunks far apart in the
 * sequence, so the dense modules' single offset cannot describe them. These forms keep
 * the global position of every local token:
 *   CPPositionEmbedding  y[l] = x[l] + weight[pos(l)]  (the same [context, dim] parameter;
 *                        its gradient lands in the rows of this rank's positions)
 *   CPRoPE               the dense RoPE's rotate-half rotation (rope.c) with the angle of
 *                        pos(l); the table holds only the local positions' rows, computed
 *                        with the same double-precision formula, so the values are the
 *                        dense table's rows bit for bit.
 * They replace a dense module in place (snn_lm_cp_install_*): the module keeps its name
 * and parameters, only its ops and private state change. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/lm_cp.h"
#include "dist/lm_cp_internal.h"

/* ---- learned absolute positions ---- */

typedef struct {
    int offset; /* first member, as the dense modules' (never used here) */
    int max_len, dim, sl;
    int *pos;
} cppos_impl;

static snn_status cppos_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    cppos_impl *p = m->impl;
    const size_t R = snn_rows(r), S = (size_t)p->sl, D = (size_t)p->dim;
    const float *W = m->params[0].data;
    for (size_t b = 0; b < R; b++)
        for (size_t l = 0; l < S; l++) {
            const float *w = W + (size_t)p->pos[l] * D, *xr = x + (b * S + l) * D;
            float *yr = y + (b * S + l) * D;
            for (size_t i = 0; i < D; i++) yr[i] = xr[i] + w[i];
        }
    return SNN_OK;
}

static snn_status cppos_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                 const float *dy, float *dx) {
    (void)x;
    (void)y;
    cppos_impl *p = m->impl;
    const size_t R = snn_rows(r), S = (size_t)p->sl, D = (size_t)p->dim;
    for (size_t b = 0; b < R; b++)
        for (size_t l = 0; l < S; l++) {
            float *g = m->params[0].grad + (size_t)p->pos[l] * D;
            const float *d = dy + (b * S + l) * D;
            for (size_t i = 0; i < D; i++) g[i] += d[i];
        }
    if (dx && dx != dy) memcpy(dx, dy, R * S * D * sizeof(float));
    return SNN_OK;
}

static void cppos_destroy(snn_module *m) {
    cppos_impl *p = m->impl;
    free(p->pos);
    p->pos = NULL;
}

static const snn_module_ops cppos_ops = {
    .id = SNN_KIND_CP_POSITION_EMBEDDING, .kind = "CPPositionEmbedding",
    .forward = cppos_forward,
    .backward = cppos_backward,
    .destroy = cppos_destroy,
};

/* ---- rotary positions ---- */

typedef struct {
    int offset;
    int heads, groups, hd, sl;
    float *cs, *sn; /* [sl][hd/2] */
} cprope_impl;

static void cprope_apply(const cprope_impl *p, size_t R, const float *x, float *y, float sign) {
    const size_t S = (size_t)p->sl, hd = (size_t)p->hd, h2 = hd / 2;
    const size_t W = (size_t)(p->heads + 2 * p->groups) * hd, rot = (size_t)(p->heads + p->groups);
    for (size_t b = 0; b < R; b++)
        for (size_t s = 0; s < S; s++) {
            const float *xr = x + (b * S + s) * W;
            float *yr = y + (b * S + s) * W;
            const float *c = p->cs + s * h2, *sn = p->sn + s * h2;
            for (size_t h = 0; h < rot; h++) {
                const float *u = xr + h * hd;
                float *o = yr + h * hd;
                for (size_t i = 0; i < h2; i++) {
                    float a = u[i], w = u[i + h2], si = sign * sn[i];
                    o[i] = a * c[i] - w * si;
                    o[i + h2] = a * si + w * c[i];
                }
            }
            if (yr != xr) memcpy(yr + rot * hd, xr + rot * hd, (W - rot * hd) * sizeof(float));
        }
}

static snn_status cprope_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    cprope_apply(m->impl, snn_rows(r), x, y, 1.0f);
    return SNN_OK;
}

static snn_status cprope_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)x;
    (void)y;
    if (dx) cprope_apply(m->impl, snn_rows(r), dy, dx, -1.0f);
    return SNN_OK;
}

static void cprope_destroy(snn_module *m) {
    cprope_impl *p = m->impl;
    free(p->cs);
    free(p->sn);
    p->cs = p->sn = NULL;
}

static const snn_module_ops cprope_ops = {
    .id = SNN_KIND_CP_ROPE, .kind = "CPRoPE",
    .forward = cprope_forward,
    .backward = cprope_backward,
    .destroy = cprope_destroy,
};

/* ---- installation ---- */

/* Replace m's ops and private state, keeping its name, shapes and parameters. The old
 * state's own destroy runs first (RoPE frees its table). */
snn_status snn_lm_cp_swap(snn_module *m, const snn_module_ops *ops, void *impl) {
    if (m->own_ops || m->prec) {
        free(impl);
        return snn_error(SNN_E_STATE, "%s: context parallel must be set up before precision preparation", m->name);
    }
    if (m->ops->destroy) m->ops->destroy(m);
    free(m->impl);
    m->impl = impl;
    m->ops = ops;
    return SNN_OK;
}

snn_status snn_lm_cp_install_posemb(snn_module *m, int max_len, int dim, int seq, int cp, int rank) {
    const int sl = seq / cp;
    if (m->in.rank != 2 || m->in.d[0] != sl || m->in.d[1] != dim || m->n_params != 1 ||
        m->params[0].shape.d[0] != max_len || m->params[0].shape.d[1] != dim || seq > max_len)
        return snn_error(SNN_E_SHAPE, "%s: not a PositionEmbedding(%d, %d) over %d local tokens of %d", m->name,
                         max_len, dim, sl, seq);
    cppos_impl *p = calloc(1, sizeof *p);
    int *pos = malloc((size_t)sl * sizeof(int));
    if (!p || !pos) {
        free(p);
        free(pos);
        return snn_error(SNN_E_NOMEM, "CP positions: out of memory");
    }
    for (int l = 0; l < sl; l++) pos[l] = snn_lm_cp_position(seq, cp, rank, l);
    p->max_len = max_len;
    p->dim = dim;
    p->sl = sl;
    p->pos = pos;
    return snn_lm_cp_swap(m, &cppos_ops, p);
}

snn_status snn_lm_cp_install_rope(snn_module *m, int heads, int groups, int hd, float theta, int max_len, int seq,
                                  int cp, int rank) {
    const int sl = seq / cp, W = (heads + 2 * groups) * hd;
    if (m->in.rank != 2 || m->in.d[0] != sl || m->in.d[1] != W || hd % 2 || seq > max_len)
        return snn_error(SNN_E_SHAPE, "%s: not a RoPE over [%d, %d] local tokens of %d", m->name, sl, W, seq);
    const size_t h2 = (size_t)hd / 2;
    cprope_impl *p = calloc(1, sizeof *p);
    float *cs = malloc((size_t)sl * h2 * sizeof(float)), *sn = malloc((size_t)sl * h2 * sizeof(float));
    if (!p || !cs || !sn) {
        free(p);
        free(cs);
        free(sn);
        return snn_error(SNN_E_NOMEM, "CP RoPE: out of memory");
    }
    for (int l = 0; l < sl; l++) {
        const int s = snn_lm_cp_position(seq, cp, rank, l);
        for (size_t i = 0; i < h2; i++) {
            double f = pow((double)theta, -2.0 * (double)i / (double)hd);
            cs[(size_t)l * h2 + i] = (float)cos(s * f);
            sn[(size_t)l * h2 + i] = (float)sin(s * f);
        }
    }
    p->heads = heads;
    p->groups = groups;
    p->hd = hd;
    p->sl = sl;
    p->cs = cs;
    p->sn = sn;
    return snn_lm_cp_swap(m, &cprope_ops, p);
}
