/* Conv2d and the convolution engine shared with Conv1d (see nn/layers_conv.h for the two
 * strategies). Measured on a 16-core Xeon VM with OpenMP OpenBLAS (convsnn's 128->128 3x3
 * layer on 14x14, B = 256): the per-sample forward took 82 ms against 99-110 ms batched,
 * the backward was equal within run-to-run noise, and on 2 cores both were within noise;
 * for a pointwise Conv1d the batched GEMM was as fast forward and faster backward
 * (a per-sample GEMM repacks W for little work). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers_conv.h"

/* Column scratch per module for the batched strategy: enough samples for a long GEMM
 * without a huge buffer. */
#define SNN_CONV_COL_FLOATS ((size_t)1 << 21)
/* On a device table (batched only, no cache to fit, plenty of memory) a larger budget:
 * GEMMs long enough to fill the GPU (64 MiB of columns; not tuned yet). */
#define SNN_CONV_COL_FLOATS_DEVICE ((size_t)1 << 24)
/* Per-sample GEMMs narrower than this (P = H'*W') go batched. */
#define SNN_CONV_MIN_WIDE 128
/* Grouped dW: samples per group, and the largest total of partial sums (floats). */
#define SNN_CONV_GROUP 8
#define SNN_CONV_PARTIAL_FLOATS ((size_t)1 << 20)

static int g_chunk = 0, g_strategy = 0, g_dw_grouped = 0;
void snn_conv_set_dw_grouped(int mode) { g_dw_grouped = mode >= 0 && mode <= 2 ? mode : 0; }
void snn_conv_set_max_chunk(int samples) { g_chunk = samples > 0 ? samples : 0; }
void snn_conv_set_strategy(int strategy) { g_strategy = strategy >= 0 && strategy <= 2 ? strategy : 0; }

void snn_conv_engine_reserve(snn_conv_engine *e, const snn_backend *be, snn_arena *a, size_t B) {
    const int cpu = !be || be->device == SNN_DEVICE_CPU;
    size_t K = (size_t)e->g.C * e->g.kh * e->g.kw, P = (size_t)e->g.Ho * e->g.Wo;
    size_t per = (K > (size_t)e->out_ch ? K : (size_t)e->out_ch) * P;
    size_t budget = cpu ? SNN_CONV_COL_FLOATS : SNN_CONV_COL_FLOATS_DEVICE;
    size_t chunk = g_chunk ? (size_t)g_chunk : budget / (per ? per : 1);
    if (chunk < 1) chunk = 1;
    if (chunk > B) chunk = B;
    e->chunk = (int)chunk;
    e->direct = e->g.kh == 1 && e->g.kw == 1 && e->g.sh == 1 && e->g.sw == 1 && e->g.ph == 0 && e->g.pw == 0;
    /* Pointwise layers stay batched even for wide rows: equal forward, faster backward.
     * The per-sample strategy runs the table's entries on OpenMP threads: the CPU's only
     * (a device table has one stream, and its batched GEMMs are the efficient form). */
    e->per_sample = cpu && (g_strategy ? g_strategy == 2 : !e->direct && P >= SNN_CONV_MIN_WIDE);
    /* The per-sample loop runs on at most this many threads (num_threads clause), so the
     * column blocks stay valid if the OpenMP thread count grows later. */
    e->threads = e->per_sample && !e->direct ? omp_get_max_threads() : 1;
    /* Grouped dW when the weight is small enough for one partial per group. */
    e->n_groups = (B + SNN_CONV_GROUP - 1) / SNN_CONV_GROUP;
    e->partial = NULL;
    int grouped = g_dw_grouped ? g_dw_grouped == 2 : (size_t)e->out_ch * K * e->n_groups <= SNN_CONV_PARTIAL_FLOATS;
    if (e->per_sample && !e->direct && grouped)
        e->partial = snn_arena_floats(a, (size_t)e->out_ch * K * e->n_groups);
    size_t blocks = chunk > (size_t)e->threads ? chunk : (size_t)e->threads;
    e->col = snn_arena_floats(a, K * P * blocks);
    e->buf = snn_arena_floats(a, (size_t)e->out_ch * P * chunk);
}

/* The GEMM operand type a precision wrapper asked for (snn_run.gemm_type; F32 otherwise):
 * a 16-bit mode holds x, dy and W rounded to it, and im2col / gather only copy them. */
static snn_dtype ab_type(const snn_run *r) { return r->gemm_type ? (snn_dtype)r->gemm_type : SNN_F32; }

/* C[M][N] (ldc) = op(A) op(B) + beta C through the table's GEMM. */
static snn_status mm(const snn_backend *be, const snn_run *r, int ta, int tb, int M, int N, int K, const float *A,
                     int lda, const float *Bm, int ldb, float beta, float *C, int ldc) {
    snn_gemm g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 1.0f, .beta = beta, .A = A,
                  .lda = lda, .B = Bm, .ldb = ldb, .C = C, .ldc = ldc, .ab_type = ab_type(r), .bias = NULL,
                  .c_round = SNN_F32};
    return be->gemm(be, &g);
}

/* A 16-bit GEMM type on a backend that stores 16-bit operands (the CUDA table): the columns
 * (and the gathered dy) are written in that type by im2col16 / conv_gather16 and read by the
 * GEMM as they are, one pass instead of an FP32 copy plus the GEMM's conversion. The values
 * are the same (the cast of the FP32 copy), so are the results. SNN_F32 otherwise. */
static snn_dtype store16(const snn_backend *be, const snn_run *r) {
    const snn_dtype t = ab_type(r);
    return t != SNN_F32 && be->gemm_rounds && be->im2col16 && be->conv_gather16 ? t : SNN_F32;
}

/* How W (params[0].data) is stored: a precision wrapper's 16-bit copy (SNN_MODULE_W16), which
 * only the 16-bit-operand path reads (store16; the CPU never gets one), or FP32. */
static snn_dtype w_store(const snn_run *r) { return r->w_store ? (snn_dtype)r->w_store : SNN_F32; }
/* The rounding a wrapper asked of y and dx (SNN_MODULE_ROUNDS_OUT), SNN_F32 for none. */
static snn_dtype out_round(const snn_run *r) { return r->out_round ? (snn_dtype)r->out_round : SNN_F32; }

static snn_status check_w_store(const snn_conv_engine *e, const snn_backend *be, const snn_run *r) {
    if (w_store(r) != SNN_F32 && store16(be, r) == SNN_F32)
        return snn_error(SNN_E_STATE, "convolution: a 16-bit weight copy needs a backend with 16-bit GEMM operands "
                                      "and im2col16");
    /* a 16-bit output (y, dy) is written by conv_scatter16 and read by conv_gather16 of the
     * batched 16-bit path, in the GEMM's type */
    if (e->y_store && (e->per_sample || store16(be, r) != (snn_dtype)e->y_store || !be->conv_scatter16))
        return snn_error(SNN_E_STATE, "convolution: a %s output needs the batched %s GEMM path and conv_scatter16",
                         snn_dtype_name((snn_dtype)e->y_store), snn_dtype_name((snn_dtype)e->y_store));
    return SNN_OK;
}

/* Element offset o into an activation stored as t (SNN_F32 = 0, or a 16-bit type). */
static void *at(const void *p, size_t o, int t) { return (char *)p + o * snn_dtype_size((snn_dtype)t); }

/* mm with B (sb) and A (sa) stored as given (SNN_F32 or the GEMM type). */
static snn_status mm_stored(const snn_backend *be, const snn_run *r, int ta, int tb, int M, int N, int K,
                            const void *A, snn_dtype sa, int lda, const void *Bm, snn_dtype sb, int ldb, float beta,
                            float *C, int ldc) {
    snn_gemm g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 1.0f, .beta = beta, .A = A,
                  .lda = lda, .B = Bm, .ldb = ldb, .C = C, .ldc = ldc, .ab_type = ab_type(r), .bias = NULL,
                  .c_round = SNN_F32, .a_store = sa, .b_store = sb, .c_store = SNN_F32};
    return be->gemm(be, &g);
}

/* The first failure of the per-sample loops' worker threads: its status and message (the
 * message is thread-local, so it is copied out for the calling thread). */
typedef struct {
    snn_status st;
    char msg[256];
} worker_err;

static void worker_fail(worker_err *w, snn_status st) {
    if (st == SNN_OK) return;
#pragma omp critical(snn_conv_worker_err)
    if (w->st == SNN_OK) {
        w->st = st;
        snprintf(w->msg, sizeof w->msg, "%s", snn_last_error());
    }
}

static snn_status worker_status(const worker_err *w) {
    return w->st == SNN_OK ? SNN_OK : snn_error(w->st, "%s", w->msg);
}

static snn_status forward_per_sample(snn_conv_engine *e, const snn_run *r, const snn_backend *be, size_t B,
                                     const float *W, const float *bias, const float *x, float *y) {
    const snn_conv_geom *g = &e->g;
    const int O = e->out_ch;
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo;
    const size_t in_n = (size_t)g->C * g->H * g->W, out_n = (size_t)O * P;
    worker_err err = {SNN_OK, ""};
#pragma omp parallel num_threads(e->direct ? omp_get_max_threads() : e->threads) \
    if(B * O * K * P > SNN_PAR_MIN_WORK)
    {
        float *col = e->col + (size_t)omp_get_thread_num() * K * P;
#pragma omp for schedule(static)
        for (long b = 0; b < (long)B; b++) {
            float *yb = y + (size_t)b * out_n;
            const float *cb = x + (size_t)b * in_n; /* a pointwise layer's columns are x itself */
            snn_status st = SNN_OK;
            if (!e->direct) {
                st = be->im2col(be, g, 1, cb, col, P);
                cb = col;
            }
            /* y = bias, then the product accumulates onto it */
            if (st == SNN_OK && bias) st = be->conv_scatter(be, 1, O, P, NULL, P, bias, SNN_F32, yb);
            if (st == SNN_OK)
                st = mm(be, r, 0, 0, O, (int)P, (int)K, W, (int)K, cb, (int)P, bias ? 1.0f : 0.0f, yb, (int)P);
            if (st == SNN_OK && out_round(r) != SNN_F32) st = be->round(be, out_round(r), yb, yb, out_n);
            worker_fail(&err, st);
        }
    }
    return worker_status(&err);
}

static snn_status forward_batched(snn_conv_engine *e, const snn_run *r, const snn_backend *be, size_t B,
                                  const float *W, const float *bias, const float *x, float *y) {
    const snn_conv_geom *g = &e->g;
    const int O = e->out_ch;
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo;
    const size_t in_n = (size_t)g->C * g->H * g->W, out_n = (size_t)O * P;
    for (size_t b0 = 0; b0 < B; b0 += (size_t)e->chunk) {
        const int nb = (int)(B - b0 < (size_t)e->chunk ? B - b0 : (size_t)e->chunk);
        const size_t ld = (size_t)nb * P;
        const snn_dtype s16 = store16(be, r);
        if (s16 != SNN_F32) {
            SNN_TRY(be->im2col16(be, s16, g, nb, x + b0 * in_n, e->col, ld));
            SNN_TRY(mm_stored(be, r, 0, 0, O, (int)ld, (int)K, W, w_store(r), (int)K, e->col, s16, (int)ld, 0.0f,
                              e->buf, (int)ld));
        } else {
            SNN_TRY(be->im2col(be, g, nb, x + b0 * in_n, e->col, ld));
            SNN_TRY(mm(be, r, 0, 0, O, (int)ld, (int)K, W, (int)K, e->col, (int)ld, 0.0f, e->buf, (int)ld));
        }
        if (e->y_store)
            SNN_TRY(be->conv_scatter16(be, (snn_dtype)e->y_store, nb, O, P, e->buf, ld, bias,
                                       at(y, b0 * out_n, e->y_store)));
        else
            SNN_TRY(be->conv_scatter(be, nb, O, P, e->buf, ld, bias, out_round(r), y + b0 * out_n));
    }
    return SNN_OK;
}

snn_status snn_conv_engine_forward(snn_conv_engine *e, const snn_run *r, const snn_backend *be, size_t B,
                                   const float *W, const float *bias, const float *x, float *y) {
    SNN_TRY(check_w_store(e, be, r));
    if (e->per_sample) return forward_per_sample(e, r, be, B, W, bias, x, y);
    return forward_batched(e, r, be, B, W, bias, x, y);
}

/* dW for a small weight (O*K): a single GEMM with a tiny output threads poorly, so fixed
 * groups of samples run in parallel, each into its own partial sum (serial GEMMs straight
 * on dy, no gather), and the partials are added in group order: the result does not
 * depend on the thread count. CPU only (the per-sample strategy). */
static snn_status dw_grouped(snn_conv_engine *e, const snn_run *r, const snn_backend *be, size_t B, float *dW,
                             const float *x, const float *dy) {
    const snn_conv_geom *g = &e->g;
    const int O = e->out_ch;
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo, OK = (size_t)O * K;
    const size_t in_n = (size_t)g->C * g->H * g->W, out_n = (size_t)O * P;
    const long groups = (long)e->n_groups;
    worker_err err = {SNN_OK, ""};
#pragma omp parallel num_threads(e->threads) if(B * OK * P > SNN_PAR_MIN_WORK)
    {
        float *col = e->col + (size_t)omp_get_thread_num() * K * P;
#pragma omp for schedule(static)
        for (long gi = 0; gi < groups; gi++) {
            float *pg = e->partial + (size_t)gi * OK;
            size_t b1 = ((size_t)gi + 1) * SNN_CONV_GROUP < B ? ((size_t)gi + 1) * SNN_CONV_GROUP : B;
            snn_status st = SNN_OK;
            for (size_t b = (size_t)gi * SNN_CONV_GROUP; b < b1 && st == SNN_OK; b++) {
                st = be->im2col(be, g, 1, x + b * in_n, col, P);
                if (st == SNN_OK)
                    st = mm(be, r, 0, 1, O, (int)K, (int)P, dy + b * out_n, (int)P, col, (int)P,
                            b == (size_t)gi * SNN_CONV_GROUP ? 0.0f : 1.0f, pg, (int)K);
            }
            worker_fail(&err, st);
        }
    }
    SNN_TRY(worker_status(&err));
    return be->sum_groups_add(be, (int)groups, OK, e->partial, dW);
}

snn_status snn_conv_engine_backward(snn_conv_engine *e, const snn_run *r, const snn_backend *be, size_t B,
                                    const float *W, float *dW, float *db, const float *x, const float *dy,
                                    float *dx) {
    SNN_TRY(check_w_store(e, be, r));
    const snn_conv_geom *g = &e->g;
    const int O = e->out_ch;
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo;
    const size_t in_n = (size_t)g->C * g->H * g->W, out_n = (size_t)O * P;
    if (db && e->y_store)
        return snn_error(SNN_E_STATE, "convolution: a 16-bit output boundary is for a convolution without a bias");
    if (db) SNN_TRY(be->conv_bias_grad(be, B, O, P, dy, db));
    if (e->partial) SNN_TRY(dw_grouped(e, r, be, B, dW, x, dy));
    for (size_t b0 = 0; b0 < B && !e->partial; b0 += (size_t)e->chunk) {
        const int nb = (int)(B - b0 < (size_t)e->chunk ? B - b0 : (size_t)e->chunk);
        const size_t ld = (size_t)nb * P;
        const snn_dtype s16 = store16(be, r);
        if (s16 != SNN_F32) {
            /* dy gathered once in 16 bits serves both GEMMs (dW, and dcol = W^T dy) */
            SNN_TRY(be->conv_gather16(be, s16, nb, O, P, e->y_store ? s16 : SNN_F32, at(dy, b0 * out_n, e->y_store),
                                      e->buf, ld));
            SNN_TRY(be->im2col16(be, s16, g, nb, x + b0 * in_n, e->col, ld));
            SNN_TRY(mm_stored(be, r, 0, 1, O, (int)K, (int)ld, e->buf, s16, (int)ld, e->col, s16, (int)ld, 1.0f, dW,
                              (int)K));
            if (!dx || e->per_sample) continue;
            SNN_TRY(mm_stored(be, r, 1, 0, (int)K, (int)ld, O, W, w_store(r), (int)K, e->buf, s16, (int)ld, 0.0f,
                              e->col, (int)ld));
            SNN_TRY(be->col2im(be, g, nb, e->col, ld, out_round(r), dx + b0 * in_n));
            continue;
        }
        SNN_TRY(be->conv_gather(be, nb, O, P, dy + b0 * out_n, e->buf, ld));
        SNN_TRY(be->im2col(be, g, nb, x + b0 * in_n, e->col, ld));
        /* dW[O][K] += dy[O][ld] col[K][ld]^T */
        SNN_TRY(mm(be, r, 0, 1, O, (int)K, (int)ld, e->buf, (int)ld, e->col, (int)ld, 1.0f, dW, (int)K));
        if (!dx || e->per_sample) continue;
        /* dcol[K][ld] = W^T dy, into the column buffer (no longer needed) */
        SNN_TRY(mm(be, r, 1, 0, (int)K, (int)ld, O, W, (int)K, e->buf, (int)ld, 0.0f, e->col, (int)ld));
        SNN_TRY(be->col2im(be, g, nb, e->col, ld, out_round(r), dx + b0 * in_n));
    }
    if (!dx || !e->per_sample) return SNN_OK;
    worker_err err = {SNN_OK, ""};
#pragma omp parallel num_threads(e->direct ? omp_get_max_threads() : e->threads) \
    if(B * O * K * P > SNN_PAR_MIN_WORK)
    {
        float *col = e->col + (e->direct ? 0 : (size_t)omp_get_thread_num() * K * P);
#pragma omp for schedule(static)
        for (long b = 0; b < (long)B; b++) {
            float *db_ = e->direct ? dx + (size_t)b * in_n : col; /* pointwise: dcol is dx */
            snn_status st =
                mm(be, r, 1, 0, (int)K, (int)P, O, W, (int)K, dy + (size_t)b * out_n, (int)P, 0.0f, db_, (int)P);
            float *dxb = dx + (size_t)b * in_n;
            if (st == SNN_OK && !e->direct) st = be->col2im(be, g, 1, col, P, out_round(r), dxb);
            else if (st == SNN_OK && out_round(r) != SNN_F32) st = be->round(be, out_round(r), dxb, dxb, in_n);
            worker_fail(&err, st);
        }
    }
    return worker_status(&err);
}

/* ---- Conv2d module ---- */

typedef struct {
    int in_ch, out_ch, k, s, p, bias;
    snn_conv_engine e;
} conv2d_impl;

static snn_status conv2d_setup(snn_module *m, snn_shape in) {
    conv2d_impl *c = m->impl;
    char b[64];
    if (c->in_ch <= 0 || c->out_ch <= 0 || c->k <= 0 || c->s <= 0 || c->p < 0)
        return snn_error(SNN_E_INVALID,
                         "Conv2d needs positive channels, kernel and stride and padding >= 0 "
                         "(got in=%d out=%d kernel=%d stride=%d padding=%d)",
                         c->in_ch, c->out_ch, c->k, c->s, c->p);
    if (in.rank != 3 || in.d[0] != c->in_ch)
        return snn_error(SNN_E_SHAPE, "Conv2d expects per-sample inputs [%d, H, W], got %s", c->in_ch,
                         snn_shape_str(in, b, sizeof b));
    snn_conv_geom g = {in.d[0], in.d[1], in.d[2], c->k, c->k, c->s, c->s, c->p, c->p, 0, 0};
    if (!snn_conv_geom_finish(&g))
        return snn_error(SNN_E_SHAPE, "Conv2d kernel %d with padding %d does not fit the input %s",
                         c->k, c->p, snn_shape_str(in, b, sizeof b));
    c->e.g = g;
    c->e.out_ch = c->out_ch;
    m->out = snn_shape3(c->out_ch, g.Ho, g.Wo);
    m->n_params = 0;
    snn_shape ws = {4, {c->out_ch, c->in_ch, c->k, c->k}};
    snn_module_add_param(m, "weight", ws, SNN_PARAM_WEIGHT, 1);
    if (c->bias) snn_module_add_param(m, "bias", snn_shape1(c->out_ch), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void conv2d_init(snn_module *m, snn_rng *rng) {
    conv2d_impl *c = m->impl;
    /* PyTorch's default: kaiming_uniform(a = sqrt(5)) reduces to U(+-1/sqrt(fan_in)). */
    float bound = 1.0f / sqrtf((float)c->in_ch * (float)c->k * (float)c->k);
    snn_init_uniform(m->params[0].data, m->params[0].numel, bound, rng);
    if (c->bias) snn_init_uniform(m->params[1].data, m->params[1].numel, bound, rng);
}

static void conv2d_reserve(snn_module *m, snn_arena *a, int T, int N) {
    conv2d_impl *c = m->impl;
    snn_conv_engine_reserve(&c->e, m->be, a, (size_t)T * (size_t)N);
}

static snn_status conv2d_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    conv2d_impl *c = m->impl;
    c->e.y_store = m->out_store;
    return snn_conv_engine_forward(&c->e, r, m->be, snn_rows(r), m->params[0].data,
                                   c->bias ? m->params[1].data : NULL, x, y);
}

static snn_status conv2d_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)y;
    conv2d_impl *c = m->impl;
    c->e.y_store = m->out_store;
    return snn_conv_engine_backward(&c->e, r, m->be, snn_rows(r), m->params[0].data, m->params[0].grad,
                                    c->bias ? m->params[1].grad : NULL, x, dy, dx);
}

static void conv2d_describe(const snn_module *m, snn_module_desc *d) {
    const conv2d_impl *c = m->impl;
    d->in_features = c->in_ch;
    d->out_features = c->out_ch;
    d->bias = c->bias;
    d->kernel = c->k;
    d->stride = c->s;
    d->padding = c->p;
}

static const snn_module_ops conv2d_ops = {
    .describe = conv2d_describe,
    .id = SNN_KIND_CONV2D,
    .kind = "Conv2d",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_W16 | SNN_MODULE_ROUNDS_OUT | SNN_MODULE_ROUNDS_DY,
    .setup = conv2d_setup,
    .init = conv2d_init,
    .reserve = conv2d_reserve,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
};

snn_module *snn_conv2d_new(int in_ch, int out_ch, int kernel, int stride, int padding, int bias) {
    snn_module *m = snn_module_new(&conv2d_ops, sizeof(conv2d_impl));
    if (!m) return NULL;
    conv2d_impl *c = m->impl;
    c->in_ch = in_ch;
    c->out_ch = out_ch;
    c->k = kernel;
    c->s = stride;
    c->p = padding;
    c->bias = bias;
    return m;
}

int snn_conv2d_in_channels(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_CONV2D) ? ((const conv2d_impl *)m->impl)->in_ch : -1;
}
int snn_conv2d_out_channels(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_CONV2D) ? ((const conv2d_impl *)m->impl)->out_ch : -1;
}
