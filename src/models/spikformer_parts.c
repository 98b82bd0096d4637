/* Modules that only Spikformer uses: a reshape, the token mean of the head, and the
 * spiking self-attention core (no softmax). */
#include <string.h>

#include "backend/backend.h"
#include "models/spikformer_parts.h"

/* ---- Reshape: same data, new per-sample shape ---- */

typedef struct {
    snn_shape to;
} reshape_impl;

static snn_status reshape_setup(snn_module *m, snn_shape in) {
    reshape_impl *r = m->impl;
    char a[64], b[64];
    if (snn_shape_numel(in) != snn_shape_numel(r->to))
        return snn_error(SNN_E_SHAPE, "cannot reshape %s to %s", snn_shape_str(in, a, sizeof a),
                         snn_shape_str(r->to, b, sizeof b));
    m->out = r->to;
    return SNN_OK;
}

static snn_status reshape_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    memcpy(y, x, snn_rows(r) * snn_shape_numel(m->in) * sizeof(float));
    return SNN_OK;
}

static snn_status reshape_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                   const float *dy, float *dx) {
    if (dx) memcpy(dx, dy, snn_rows(r) * snn_shape_numel(m->in) * sizeof(float));
    return SNN_OK;
}

static const snn_module_ops reshape_ops = {
    .kind = "Reshape", .setup = reshape_setup, .forward = reshape_forward, .backward = reshape_backward};

snn_module *snn_reshape_new(snn_shape to) {
    snn_module *m = snn_module_new(&reshape_ops, sizeof(reshape_impl));
    if (m) ((reshape_impl *)m->impl)->to = to;
    return m;
}

/* ---- TokenMean: [C, L] -> [C] ---- */

static snn_status tmean_setup(snn_module *m, snn_shape in) {
    char a[64];
    if (in.rank != 2)
        return snn_error(SNN_E_SHAPE, "token mean expects [C, L] inputs, got %s", snn_shape_str(in, a, sizeof a));
    m->out = snn_shape1(in.d[0]);
    return SNN_OK;
}

static snn_status tmean_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    size_t rows = snn_rows(r) * (size_t)m->in.d[0];
    int L = m->in.d[1];
    float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {
        const float *p = x + i * (size_t)L;
        float s = 0;
        for (int l = 0; l < L; l++) s += p[l];
        y[i] = s * inv;
    }
    return SNN_OK;
}

static snn_status tmean_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                 const float *dy, float *dx) {
    if (!dx) return SNN_OK;
    size_t rows = snn_rows(r) * (size_t)m->in.d[0];
    int L = m->in.d[1];
    float inv = 1.0f / (float)L;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < rows; i++) {
        float g = dy[i] * inv;
        float *p = dx + i * (size_t)L;
        for (int l = 0; l < L; l++) p[l] = g;
    }
    return SNN_OK;
}

static const snn_module_ops tmean_ops = {
    .kind = "TokenMean", .setup = tmean_setup, .forward = tmean_forward, .backward = tmean_backward};

snn_module *snn_token_mean_new(void) { return snn_module_new(&tmean_ops, 0); }

/* ---- Spiking self-attention core ----
 * Input [3C, L]: q, k, v stacked along channels (each [C, L], heads of d = C/heads rows).
 * Per head: A = V K^T (d x d), Y = scale * A Q (d x L). This is (Q K^T V)^T of the
 * token-major form; there is no softmax, spikes keep the products non-negative. */

typedef struct {
    int heads;
    float scale;
    float *attn; /* [B, heads, d, d] saved for backward */
    float *dA;   /* [B, heads, d, d] scratch */
} ssa_impl;

static snn_status ssa_setup(snn_module *m, snn_shape in) {
    ssa_impl *s = m->impl;
    char a[64];
    if (in.rank != 2 || in.d[0] % 3 || (in.d[0] / 3) % s->heads)
        return snn_error(SNN_E_SHAPE,
                         "attention core expects [3C, L] with C divisible by %d heads, got %s", s->heads,
                         snn_shape_str(in, a, sizeof a));
    m->out = snn_shape2(in.d[0] / 3, in.d[1]);
    return SNN_OK;
}

static void ssa_reserve(snn_module *m, snn_arena *a, int T, int N) {
    ssa_impl *s = m->impl;
    int C = m->out.d[0], d = C / s->heads;
    size_t n = (size_t)T * N * (size_t)s->heads * d * d;
    s->attn = snn_arena_floats(a, n);
    s->dA = snn_arena_floats(a, n);
}

static snn_status ssa_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    ssa_impl *s = m->impl;
    int C = m->out.d[0], L = m->out.d[1], H = s->heads, d = C / H;
    size_t B = snn_rows(r);
    const snn_backend *be = r->be;
    for (size_t b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            const float *q = x + b * 3 * (size_t)C * L + (size_t)h * d * L;
            const float *k = q + (size_t)C * L;
            const float *v = k + (size_t)C * L;
            float *A = s->attn + (b * H + (size_t)h) * d * d;
            float *out = y + b * (size_t)C * L + (size_t)h * d * L;
            be->gemm_f32(0, 1, d, d, L, 1.0f, v, L, k, L, 0.0f, A, d);
            be->gemm_f32(0, 0, d, L, d, s->scale, A, d, q, L, 0.0f, out, L);
        }
    }
    return SNN_OK;
}

static snn_status ssa_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    if (!dx) return SNN_OK;
    ssa_impl *s = m->impl;
    int C = m->out.d[0], L = m->out.d[1], H = s->heads, d = C / H;
    size_t B = snn_rows(r);
    const snn_backend *be = r->be;
    for (size_t b = 0; b < B; b++) {
        for (int h = 0; h < H; h++) {
            size_t off = b * 3 * (size_t)C * L + (size_t)h * d * L;
            const float *q = x + off, *k = q + (size_t)C * L, *v = k + (size_t)C * L;
            float *dq = dx + off, *dk = dq + (size_t)C * L, *dv = dk + (size_t)C * L;
            const float *A = s->attn + (b * H + (size_t)h) * d * d;
            float *dA = s->dA + (b * H + (size_t)h) * d * d;
            const float *g = dy + b * (size_t)C * L + (size_t)h * d * L;
            /* Y = s A Q: dA = s dY Q^T, dQ = s A^T dY; A = V K^T: dV = dA K, dK = dA^T V */
            be->gemm_f32(0, 1, d, d, L, s->scale, g, L, q, L, 0.0f, dA, d);
            be->gemm_f32(1, 0, d, L, d, s->scale, A, d, g, L, 0.0f, dq, L);
            be->gemm_f32(0, 0, d, L, d, 1.0f, dA, d, k, L, 0.0f, dv, L);
            be->gemm_f32(1, 0, d, L, d, 1.0f, dA, d, v, L, 0.0f, dk, L);
        }
    }
    return SNN_OK;
}

static void ssa_describe(const snn_module *m, snn_module_desc *d) {
    const ssa_impl *s = m->impl;
    d->heads = s->heads;
    d->scale = s->scale;
}

static const snn_module_ops ssa_ops = {
    .describe = ssa_describe,
    .kind = "SpikingSelfAttentionCore",
    .setup = ssa_setup,
    .reserve = ssa_reserve,
    .forward = ssa_forward,
    .backward = ssa_backward,
};

snn_module *snn_ssa_core_new(int heads, float scale) {
    snn_module *m = snn_module_new(&ssa_ops, sizeof(ssa_impl));
    if (!m) return NULL;
    ssa_impl *s = m->impl;
    s->heads = heads;
    s->scale = scale;
    return m;
}
