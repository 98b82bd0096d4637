/* Execution of converted modules on the CPU (the exact reference).
 *
 * A converted module keeps its parameters; its ops table is swapped for one of the tables
 * here, which call the module's own code on rounded operands (16-bit GEMMs) or replace the
 * GEMM with an FP8 one (quantise -> dequantise -> FP32 GEMM, which equals an FP8 GEMM
 * with FP32 accumulation). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "neuron/neuron_module.h"
#include "precision/runtime.h"

static snn_prec_module *pm_of(snn_module *m) { return (snn_prec_module *)m->prec; }

/* dst = round_to(t, src) (RNE, non-saturating: overflow becomes inf as in hardware), on the
 * module's device. */
static snn_status round_buf(const snn_module *m, snn_dtype t, float *dst, const float *src, size_t n) {
    return m->be->round(m->be, t, dst, src, n);
}

/* The weight the module's GEMMs read (params[0] unless its kind names another). */
snn_param *snn_prec_gemm_weight(const snn_prec_module *pm) {
    return pm->orig->gemm_weight ? pm->orig->gemm_weight(pm->m) : pm->m->n_params ? &pm->m->params[0] : NULL;
}

snn_param *snn_prec_gemm_bias(const snn_prec_module *pm) {
    const snn_module *m = pm->m;
    return (pm->orig->flags & SNN_MODULE_W16) && !pm->orig->gemm_weight && m->n_params > 1 &&
                   m->params[1].kind == SNN_PARAM_WEIGHT
               ? &pm->m->params[1]
               : NULL;
}

static size_t in_floats(const snn_module *m, const snn_run *r) { return snn_rows(r) * snn_shape_numel(m->in); }
static size_t out_floats(const snn_module *m, const snn_run *r) { return snn_rows(r) * snn_shape_numel(m->out); }

/* ---------------- 16-bit GEMM modules ---------------- */

static snn_status g16_setup(snn_module *m, snn_shape in) { return pm_of(m)->orig->setup(m, in); }
static void g16_init(snn_module *m, snn_rng *rng) {
    if (pm_of(m)->orig->init) pm_of(m)->orig->init(m, rng);
}
static void g16_reserve(snn_module *m, snn_arena *a, int T, int N) {
    if (pm_of(m)->orig->reserve) pm_of(m)->orig->reserve(m, a, T, N);
}
static void g16_reset(snn_module *m) {
    if (pm_of(m)->orig->reset) pm_of(m)->orig->reset(m);
}
/* The model may be freed while still wrapped: run the module's own destructor. */
static void g16_destroy(snn_module *m) {
    if (pm_of(m)->orig->destroy) pm_of(m)->orig->destroy(m);
}

/* On a backend whose GEMM rounds its operands (gemm_rounds), a kind that reads its weight only
 * as a GEMM operand (SNN_MODULE_W16) runs on the unrounded x and dy, and on pm->w16: the
 * weight converted to the 16-bit type once by the forward and reused by the backward. The
 * products are the same as the rounded path's; only the passes over memory go. */

static snn_status g16_direct_call(snn_module *m, const snn_run *r, int backward, const float *x, const float *y,
                                  const float *dy, float *out) {
    snn_prec_module *pm = pm_of(m);
    snn_precision *p = pm->p;
    /* the 16-bit weight is cast again only when the parameters moved (an optimizer step, a
     * restore: snn_model.param_version), so repeated inference forwards reuse it */
    /* A Linear's x and dy converted once each (pm->x16, the scratch): the weight gradient
     * multiplies the forward's copy of x again, and both backward GEMMs and the bias gradient
     * read the one copy of dy, where each GEMM converted its FP32 operands before. */
    const int copies = pm->x16 && !m->in_store && in_floats(m, r) <= pm->x16_cap; /* planned for this size */
    const void *dy16 = NULL;
    int dy16_ld = 0;
    if (backward && m->dy_store) {
        /* the loss wrote dy in the 16-bit type (snn_model_backward_dy16): read in place */
        dy16 = dy;
        dy16_ld = m->dy_ld;
    } else if (!backward) {
        if (pm->w16 && (!pm->w16_valid || pm->w16_version != p->model->param_version)) {
            SNN_TRY(m->be->cast(m->be, p->half, pm->w16, m->params[0].data, m->params[0].numel));
            if (pm->b16) { /* the bias rounded with it (SNN_MODULE_W16) */
                const snn_param *b = &m->params[1];
                SNN_TRY(m->be->cast(m->be, p->half, pm->b16, b->data, b->numel));
                SNN_TRY(round_buf(m, p->half, pm->b32, b->data, b->numel));
            }
            pm->w16_version = p->model->param_version;
            pm->w16_valid = 1;
        }
        pm->x16_valid = 0;
        if (copies) {
            SNN_TRY(m->be->cast(m->be, p->half, pm->x16, x, in_floats(m, r)));
            pm->x16_valid = 1;
        }
    } else if (!m->out_store && !pm->direct_shared) {
        /* the bias gradient sums the rounded dy, as on the rounded path (a 16-bit dy is). A
         * kind that takes its dy from snn_run.dy16 (SNN_MODULE_TYPED_IO: Linear) gets one
         * 16-bit copy, which both GEMMs and the bias gradient read; the FP32 rounding would be
         * converted again by each GEMM */
        if (pm->orig->flags & SNN_MODULE_TYPED_IO) {
            SNN_TRY(m->be->cast(m->be, p->half, p->scratch, dy, out_floats(m, r)));
            dy16 = p->scratch;
        } else if ((pm->orig->flags & SNN_MODULE_ROUNDS_DY) && m->be->gemm_rounds && !snn_prec_gemm_bias(pm)) {
            /* no bias gradient, and the GEMMs' conversion rounds dy: the pass would change nothing */
        } else {
            float *r_dy = p->scratch;
            SNN_TRY(round_buf(m, p->half, r_dy, dy, out_floats(m, r)));
            dy = r_dy;
        }
    }
    snn_run r16 = *r;
    if (copies && pm->x16_valid) r16.x16 = pm->x16;
    r16.dy16 = dy16;
    r16.dy16_ld = dy16_ld;
    r16.gemm_type = (int)p->half;
    r16.w_store = pm->w16 ? (int)p->half : 0;
    /* a kind that rounds what it writes last saves the pass below */
    const int rounds_out = (pm->orig->flags & SNN_MODULE_ROUNDS_OUT) != 0;
    if (rounds_out) r16.out_round = (int)p->half;
    float *w = pm->w16 ? m->params[0].data : NULL, *bias = pm->b16 ? m->params[1].data : NULL;
    if (pm->w16) m->params[0].data = (float *)pm->w16;
    if (pm->b16 && !backward) { /* the rounded bias (the backward reads only its gradient) */
        m->params[1].data = pm->b32;
        r16.bias16 = pm->b16;
    }
    snn_status st = backward ? pm->orig->backward(m, &r16, x, y, dy, out) : pm->orig->forward(m, &r16, x, out);
    if (pm->w16) m->params[0].data = w;
    if (bias) m->params[1].data = bias;
    SNN_TRY(st);
    /* FP32 outputs are rounded here; 16-bit ones were written rounded by the GEMM */
    size_t n = backward ? in_floats(m, r) : out_floats(m, r);
    int stored16 = backward ? m->in_store : m->out_store || m->y_store;
    /* a forward output whose rounding the Residual's sum does (round_deferred) stays as is */
    const int deferred = !backward && m->round_deferred;
    return out && !stored16 && !rounds_out && !deferred ? round_buf(m, p->half, out, out, n) : SNN_OK;
}

/* The module's own forward on rounded operands; its GEMMs are told the operands are 16-bit
 * values (a device may multiply them as such). */
static snn_status g16_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    snn_prec_module *pm = pm_of(m);
    if (snn_prec_gemm16_on_direct_path(pm)) return g16_direct_call(m, r, 0, x, NULL, NULL, y);
    snn_precision *p = pm->p;
    snn_param *wp = snn_prec_gemm_weight(pm); /* NULL: a kind without a weight (attention) */
    snn_param *bp = snn_prec_gemm_bias(pm);
    size_t nx = in_floats(m, r), nw = wp ? wp->numel : 0;
    /* the bias after the weight, in the room the plan keeps for the backward's dy */
    float *x16 = p->scratch, *w16 = x16 + nx, *b16 = w16 + nw;
    SNN_TRY(round_buf(m, p->half, x16, x, nx));
    if (wp) SNN_TRY(round_buf(m, p->half, w16, wp->data, nw));
    if (bp) SNN_TRY(round_buf(m, p->half, b16, bp->data, bp->numel));
    snn_run r16 = *r;
    r16.gemm_type = (int)p->half;
    float *w = wp ? wp->data : NULL, *b = bp ? bp->data : NULL;
    if (wp) wp->data = w16;
    if (bp) bp->data = b16;
    snn_status st = pm->orig->forward(m, &r16, x16, y);
    if (wp) wp->data = w;
    if (bp) bp->data = b;
    SNN_TRY(st);
    return m->round_deferred ? SNN_OK : round_buf(m, p->half, y, y, out_floats(m, r));
}

static snn_status g16_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    snn_prec_module *pm = pm_of(m);
    if (snn_prec_gemm16_on_direct_path(pm)) return g16_direct_call(m, r, 1, x, y, dy, dx);
    snn_precision *p = pm->p;
    snn_param *wp = snn_prec_gemm_weight(pm);
    size_t nx = in_floats(m, r), nw = wp ? wp->numel : 0, ny = out_floats(m, r);
    float *x16 = p->scratch, *w16 = x16 + nx, *dy16 = w16 + nw;
    SNN_TRY(round_buf(m, p->half, x16, x, nx));
    if (wp) SNN_TRY(round_buf(m, p->half, w16, wp->data, nw));
    SNN_TRY(round_buf(m, p->half, dy16, dy, ny));
    snn_run r16 = *r;
    r16.gemm_type = (int)p->half;
    float *w = wp ? wp->data : NULL;
    if (wp) wp->data = w16;
    snn_status st = pm->orig->backward(m, &r16, x16, y, dy16, dx);
    if (wp) wp->data = w;
    SNN_TRY(st);
    return dx ? round_buf(m, p->half, dx, dx, nx) : SNN_OK;
}

const snn_module_ops snn_prec_gemm16_ops = {
    .id = SNN_KIND_PREC_GEMM16, .kind = "Gemm16", .devices = SNN_DEVMASK_ALL,
    .setup = g16_setup, .init = g16_init, .reserve = g16_reserve,
    .forward = g16_forward, .backward = g16_backward, .reset = g16_reset, .destroy = g16_destroy,
};

/* ---------------- FP8 GEMM modules ----------------
 * Token-major operands: X [rows, K], W [Nout, K], Y [rows, Nout]. A pointwise Conv1d
 * sample [C, L] is transposed to [L, C] (L rows of K = C) and back. */

/* [B][C][L] <-> [B][L][C] through the op table (exact copies, on the model's device) */
static snn_status to_token_major(const snn_backend *be, const float *src, float *dst, size_t B, int C, int L) {
    return be->transpose(be, B, C, L, src, dst);
}

static snn_status from_token_major(const snn_backend *be, const float *src, float *dst, size_t B, int C, int L) {
    return be->transpose(be, B, L, C, src, dst);
}

/* rows of the token-major GEMM, and L for Conv1d (1 for Linear). */
static int fp8_rows(const snn_module *m, const snn_run *r, int *L) {
    snn_prec_module *pm = (snn_prec_module *)m->prec;
    if (pm->kind == SNN_PM_FP8_CONV1D) {
        *L = m->in.d[1];
        return (int)(snn_rows(r) * (size_t)*L);
    }
    *L = 1;
    return (int)(snn_rows(r) * (snn_shape_numel(m->in) / (size_t)pm->in));
}

/* One FP8 operand through the op table (fp8_qdq) with the operand's recipe state kept here
 * on the host: delayed scaling quantises with the state's scale and records the amax into
 * amax_history[0], as snn_fp8_prepare_operand does. */
static snn_status qdq(const snn_module *m, snn_fp8_tensor_state *st, snn_fp8_role role, snn_fp8_usage usage,
                      const float *x, int rows, int cols, float *out) {
    snn_prec_module *pm = (snn_prec_module *)m->prec;
    const snn_fp8_recipe_params *rp = &pm->p->fp8;
    snn_fp8_qdq q = {.recipe = rp->recipe, .fp8 = snn_fp8_role_dtype(rp, role), .rows = rows, .cols = cols,
                     .pow2 = rp->pow2_scales, .hp_dtype = rp->hp_dtype, .scale = st->scale,
                     .scale_inv = st->scale_inv, .x = x, .out = out};
    if (rp->recipe == SNN_FP8_RECIPE_BLOCK || rp->recipe == SNN_FP8_RECIPE_MXFP8) {
        snn_fp8_scale_layout L;
        SNN_TRY(snn_fp8_scale_layout_of(rp, role, usage, rows, cols, &L));
        q.block_rows = L.block_rows;
        q.block_cols = L.block_cols;
    } else if (rp->recipe == SNN_FP8_RECIPE_DELAYED && (!st->amax_history || st->history_len < 1)) {
        return snn_error(SNN_E_STATE, "FP8 delayed scaling needs the operand's state");
    }
    float amax = 0.0f;
    SNN_TRY(m->be->fp8_qdq(m->be, &q, &amax));
    if (rp->recipe == SNN_FP8_RECIPE_DELAYED) st->amax_history[0] = fmaxf(st->amax_history[0], amax);
    st->last_amax = amax;
    return SNN_OK;
}

/* The scratch starts with the token-major copies of a pointwise Conv1d — [x | y] in the
 * forward, [x | dy | dx] in the backward — rounded up to 256 bytes (0 for a Linear); the
 * GEMM path's own buffers (the emulation's or the codes') follow. */
size_t snn_prec_fp8_token_floats(const snn_prec_module *pm, size_t rows) {
    if (pm->kind != SNN_PM_FP8_CONV1D) return 0;
    return (rows * (2 * (size_t)pm->in + (size_t)pm->out) + 63) / 64 * 64;
}

static snn_status fp8_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    snn_prec_module *pm = pm_of(m);
    snn_precision *p = pm->p;
    int L, rows = fp8_rows(m, r, &L), K = pm->in, No = pm->out;
    size_t sx = (size_t)rows * K;
    float *xt = p->scratch, *yt = xt + sx, *rest = p->scratch + snn_prec_fp8_token_floats(pm, (size_t)rows);
    const int conv = pm->kind == SNN_PM_FP8_CONV1D;
    const float *X = x;
    float *Y = conv ? yt : y;
    if (conv) {
        SNN_TRY(to_token_major(m->be, x, xt, snn_rows(r), K, L));
        X = xt;
    }
    /* defer_bias: the neuron after it adds the bias and rounds (module.h): the FP32 product */
    const int defer = m->defer_bias && m->n_params > 1;
    const int xcodes = !conv && snn_module_codes_now(m->x_codes, r, x);
    m->codes_fwd = xcodes;
    if (snn_prec_fp8_codes_on(p, pm)) { /* FP8 GEMMs on codes (GPU) */
        SNN_TRY(snn_prec_fp8_codes_forward(m, X, xcodes, defer, rows, Y, rest));
    } else if (xcodes) {
        return snn_error(SNN_E_STATE, "FP8 Linear %s: spike codes as input, but its GEMMs do not take codes", m->name);
    } else {
        float *xq = rest, *wq = xq + sx;
        /* Spikes are E4M3 with unit scale as they are: no amax pass, no quantisation. */
        if (pm->spike_input && p->spike_fp8) xq = (float *)X;
        else SNN_TRY(qdq(m, &pm->sx, SNN_FP8_ROLE_INPUT, SNN_FP8_ROWWISE, X, rows, K, xq));
        SNN_TRY(qdq(m, &pm->sw, SNN_FP8_ROLE_WEIGHT, SNN_FP8_ROWWISE, m->params[0].data, No, K, wq));
        /* The FP8 GEMM writes its output in the BF16 base precision (the epilogue's rounding). */
        snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = rows, .N = No, .K = K, .alpha = 1.0f, .beta = 0.0f, .A = xq,
                      .lda = K, .B = wq, .ldb = K, .C = Y, .ldc = No, .ab_type = SNN_F32,
                      .bias = m->n_params > 1 && !defer ? m->params[1].data : NULL,
                      .c_round = defer ? SNN_F32 : p->half};
        SNN_TRY(m->be->gemm(m->be, &g));
    }
    if (conv) SNN_TRY(from_token_major(m->be, yt, y, snn_rows(r), No, L));
    return SNN_OK;
}

static snn_status fp8_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)y;
    snn_prec_module *pm = pm_of(m);
    snn_precision *p = pm->p;
    const snn_backend *be = m->be;
    int L, rows = fp8_rows(m, r, &L), K = pm->in, No = pm->out;
    size_t sx = (size_t)rows * K, sy = (size_t)rows * No;
    float *xt = p->scratch, *dyt = xt + sx, *dxt = dyt + sy;
    float *rest = p->scratch + snn_prec_fp8_token_floats(pm, (size_t)rows);
    const int conv = pm->kind == SNN_PM_FP8_CONV1D;
    const float *X = x, *DY = dy;
    float *DX = conv && dx ? dxt : dx;
    if (m->codes_fwd)
        return snn_error(SNN_E_STATE, "FP8 Linear %s: backward needs a training-mode forward (the last one "
                         "multiplied spike codes and kept no FP32 input)", m->name);
    if (conv) {
        SNN_TRY(to_token_major(be, x, xt, snn_rows(r), K, L));
        SNN_TRY(to_token_major(be, dy, dyt, snn_rows(r), No, L));
        X = xt;
        DY = dyt;
    }
    /* bias gradient from the unquantised dY, in FP32 */
    if (m->n_params > 1) SNN_TRY(be->colsum_add(be, DY, rows, No, m->params[1].grad));
    if (snn_prec_fp8_codes_on(p, pm)) { /* FP8 GEMMs on codes (GPU) */
        SNN_TRY(snn_prec_fp8_codes_backward(m, X, DY, rows, DX, rest));
    } else {
        const float *W = m->params[0].data;
        float *xc = rest, *dyq = xc + sx, *wc = dyq + sy;
        if (DX) {
            /* dgrad: dX = dY W, dY reduced along Nout (row-wise), W along its rows (column-wise) */
            SNN_TRY(qdq(m, &pm->sdy, SNN_FP8_ROLE_GRAD, SNN_FP8_ROWWISE, DY, rows, No, dyq));
            SNN_TRY(qdq(m, &pm->sw, SNN_FP8_ROLE_WEIGHT, SNN_FP8_COLWISE, W, No, K, wc));
            snn_gemm g = {.trans_a = 0, .trans_b = 0, .M = rows, .N = K, .K = No, .alpha = 1.0f, .beta = 0.0f,
                          .A = dyq, .lda = No, .B = wc, .ldb = K, .C = DX, .ldc = K, .ab_type = SNN_F32,
                          .c_round = p->half};
            SNN_TRY(be->gemm(be, &g));
        }
        /* wgrad: dW += dY^T X, both reduced along the rows (column-wise) */
        SNN_TRY(qdq(m, &pm->sdy, SNN_FP8_ROLE_GRAD, SNN_FP8_COLWISE, DY, rows, No, dyq));
        if (pm->spike_input && p->spike_fp8) xc = (float *)X;
        else SNN_TRY(qdq(m, &pm->sx, SNN_FP8_ROLE_INPUT, SNN_FP8_COLWISE, X, rows, K, xc));
        snn_gemm g = {.trans_a = 1, .trans_b = 0, .M = No, .N = K, .K = rows, .alpha = 1.0f, .beta = 1.0f, .A = dyq,
                      .lda = No, .B = xc, .ldb = K, .C = m->params[0].grad, .ldc = K, .ab_type = SNN_F32,
                      .c_round = SNN_F32};
        SNN_TRY(be->gemm(be, &g));
    }
    if (conv && dx) SNN_TRY(from_token_major(be, dxt, dx, snn_rows(r), K, L));
    return SNN_OK;
}

const snn_module_ops snn_prec_fp8_ops = {
    .id = SNN_KIND_PREC_FP8_GEMM, .kind = "Fp8Gemm", .devices = SNN_DEVMASK_ALL,
    .setup = g16_setup, .init = g16_init, .reserve = g16_reserve,
    .forward = fp8_forward, .backward = fp8_backward, .reset = g16_reset, .destroy = g16_destroy,
};

/* ---------------- neurons ----------------
 * The mixed-precision kernels (src/neuron/neuron_mp.c, rules in include/snn/neuron.h):
 * x and the saved pre-reset membrane in the storage dtype S, the charge and reset in the
 * forward arithmetic F, BPTT in the backward arithmetic B, surrogate math in FP32.
 * Spikes are 0/1 and exact in every format. dL/dx leaves in FP32 (the reference returns
 * it in x's dtype, which is FP32 here). */

/* The neuron module saves h_seq and the final membrane in its own buffers, which it only
 * exposes (snn_neuron_module_h_seq) after a training forward of its own. A run with no
 * time steps does that bookkeeping (and checks N against the reservation) without
 * computing anything; a run with no neurons checks T. The kernel below then fills the
 * buffers. */
static snn_status nrn_claim_buffers(snn_prec_module *pm, snn_module *m, const snn_run *r, float *y) {
    snn_run r0 = *r;
    r0.T = 0;
    SNN_TRY(pm->orig->forward(m, &r0, NULL, y));
    r0 = *r;
    r0.N = 0;
    return pm->orig->forward(m, &r0, NULL, y);
}

static snn_status nrn_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    snn_prec_module *pm = pm_of(m);
    snn_precision *p = pm->p;
    snn_dtype S = snn_neuron_storage_dtype(p->cfg.neuron_storage);
    snn_dtype F = snn_neuron_compute_dtype(p->cfg.neuron_fwd, p->cfg.neuron_storage);
    SNN_TRY(nrn_claim_buffers(pm, m, r, y));
    size_t n = (size_t)r->N * snn_shape_numel(m->in);
    float *h = r->training ? snn_neuron_module_h_seq(m) : NULL;
    if (r->training && !h)
        return snn_error(SNN_E_STATE, "%s: the neuron module did not expose its h_seq buffer", m->name);
    /* the module's own membrane buffer (its final state), written as the storage keeps it */
    float *v_last = (float *)snn_neuron_module_v(m);
    return m->be->neuron_forward_mp(m->be, snn_neuron_module_opts(m), snn_neuron_module_decay(m), r->T, n, S, F, x, y,
                                    h, v_last);
}

static snn_status nrn_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                               const float *dy, float *dx) {
    (void)x;
    (void)y;
    snn_prec_module *pm = pm_of(m);
    snn_precision *p = pm->p;
    snn_dtype S = snn_neuron_storage_dtype(p->cfg.neuron_storage);
    snn_dtype F = snn_neuron_compute_dtype(p->cfg.neuron_fwd, p->cfg.neuron_storage);
    snn_dtype B = snn_neuron_compute_dtype(p->cfg.neuron_bwd, p->cfg.neuron_storage);
    const float *h = snn_neuron_module_h_seq(m);
    if (!h) return snn_error(SNN_E_STATE, "%s: backward needs a training-mode forward first", m->name);
    snn_neuron_opts *o = snn_neuron_module_opts(m);
    int plif = o->kind == SNN_NEURON_PLIF;
    size_t n = (size_t)r->N * snn_shape_numel(m->in);
    double gk = 0.0;
    /* only spikes leave the layer: no gradient on the final membrane; v0 is the reset value */
    SNN_TRY(m->be->neuron_backward_mp(m->be, o, snn_neuron_module_decay(m), r->T, n, S, F, B, h, dy, dx,
                                      plif ? &gk : NULL));
    /* dL/dw = dL/dk k (1 - k), k = sigmoid(w) in double, as the module does */
    return plif ? snn_neuron_module_add_plif_grad(m, gk) : SNN_OK;
}

const snn_module_ops snn_prec_neuron_ops = {
    .id = SNN_KIND_PREC_NEURON, .kind = "NeuronPrecision", .devices = SNN_DEVMASK_ALL,
    .setup = g16_setup, .init = g16_init, .reserve = g16_reserve,
    .forward = nrn_forward, .backward = nrn_backward, .reset = g16_reset, .destroy = g16_destroy,
};
