/* FP8 Linear and pointwise Conv1d modules on FP8 codes: the GPU's form of prec_exec.c's FP8
 * GEMMs (prec_exec.c makes a Conv1d's token-major copies for either path and calls these with
 * the token-major operands and the rest of the scratch).
 *
 * The CPU (the reference) multiplies fp8_qdq's values, decode(sat_rne(x·s))·(1/s), in FP32.
 * A table with fp8_codes (CUDA) runs the same products as FP8 GEMMs: each operand becomes its
 * codes sat_rne(x·s) and the factor 1/s, and the GEMM computes (1/s_a)(1/s_b) Σ decode·decode
 * with FP32 accumulation — the same values up to the order of the sum (the GEMM bound the
 * parity suite holds every GEMM to). Only the per-tensor recipes (delayed, current) take this
 * path; block and mxfp8 keep the emulation of prec_exec.c on every device.
 *
 * Layout (Hopper's FP8 GEMMs read both operands K-contiguous, K a multiple of 16):
 *   forward   Y  = X W^T:    X codes [rows][K16], W codes [No][K16]
 *   dgrad     dX = dY W:     dY codes [rows][O16], W^T codes [K][O16]
 *   wgrad     dW += dY^T X:  dY^T codes [No][R16], X^T codes [K][R16]
 * where K16, O16, R16 are K, No and rows rounded up to 16; the codes kernel writes the padding
 * as zero codes, so every extent works. The activations' codes live in the precision's
 * scratch (bytes), the weight's in buffers of the module (weight_codes).
 *
 * Recipe state stays on the host (snn_fp8_tensor_state), without a host round trip per GEMM:
 * delayed scaling quantises with the state's scale (known on the host) and current scaling
 * computes its scale on the device. Each quantisation max-es its tensor's amax into a device
 * slot; snn_precision_fp8_flush brings the slots back once (the step's end, a checkpoint, an
 * export of the state) and merges them as prec_exec.c's qdq does: amax_history[0] (delayed)
 * and last_amax (the largest amax since the last flush; the CPU keeps the latest, which in a
 * training step is the same value: x, W and dY are each quantised twice, unchanged). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "precision/runtime.h"

static size_t r16(size_t v) { return (v + 15) / 16 * 16; }
static size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

int snn_prec_fp8_codes_on(const snn_precision *p, const snn_prec_module *pm) {
    if (p->fp8_emulate || !p->be->fp8_codes || (pm->kind != SNN_PM_FP8_LINEAR && pm->kind != SNN_PM_FP8_CONV1D))
        return 0;
    if (p->fp8.recipe != SNN_FP8_RECIPE_DELAYED && p->fp8.recipe != SNN_FP8_RECIPE_CURRENT) return 0;
    /* cuBLASLt has no E5M2 x E5M2 GEMM: the forward's operands must not both be E5M2 */
    return snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_INPUT) == SNN_F8E4M3 ||
           snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_WEIGHT) == SNN_F8E4M3;
}

/* Bytes of scratch the codes of one module take (the larger of forward and backward). */
static size_t codes_bytes(size_t rows, size_t K, size_t No) {
    const size_t fwd = up256(rows * r16(K));
    const size_t bwd = up256(rows * r16(No)) + up256(No * r16(rows)) + up256(K * r16(rows));
    return (fwd > bwd ? fwd : bwd) + 256;
}

size_t snn_prec_fp8_codes_scratch(const snn_precision *p, const snn_prec_module *pm, size_t rows) {
    if (!snn_prec_fp8_codes_on(p, pm)) return 0;
    return snn_prec_fp8_token_floats(pm, rows) + (codes_bytes(rows, (size_t)pm->in, (size_t)pm->out) + sizeof(float) - 1) / sizeof(float);
}

snn_status snn_prec_fp8_codes_plan(snn_precision *p) {
    if (p->fp8_dev) return SNN_OK;
    int any = 0;
    for (int i = 0; i < p->n_mods; i++) any |= snn_prec_fp8_codes_on(p, &p->mods[i]);
    if (!any) return SNN_OK;
    const size_t n = 3 * (size_t)p->n_mods;
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (!snn_prec_fp8_codes_on(p, pm)) continue;
        const size_t K = (size_t)pm->in, No = (size_t)pm->out;
        if (!pm->w8) SNN_TRY(p->be->alloc(p->be, No * r16(K), &pm->w8));
        if (!pm->w8t) SNN_TRY(p->be->alloc(p->be, K * r16(No), &pm->w8t));
        pm->w8_valid = 0;
    }
    if (!p->fp8_host) p->fp8_host = calloc(n, sizeof(float));
    if (!p->fp8_used) p->fp8_used = calloc(n, 1);
    if (!p->fp8_host || !p->fp8_used) return snn_error(SNN_E_NOMEM, "no memory for %zu FP8 amax values", n);
    /* [n][4]: each state's 1/s, the GEMMs' factors, 16 bytes apart (cuBLASLt takes aligned
     * scale pointers only); then [n]: each state's amax (zeroed). Allocated last: its
     * presence says the plan is complete (a failed one is retried by the next plan). */
    return p->be->alloc(p->be, 5 * n * sizeof(float), (void **)&p->fp8_dev);
}

snn_status snn_precision_fp8_flush(snn_precision *p) {
    if (!p || !p->fp8_dev || !p->fp8_pending) return SNN_OK;
    const size_t n = 3 * (size_t)p->n_mods;
    SNN_TRY(p->be->download(p->be, p->fp8_host, p->fp8_dev + 4 * n, n * sizeof(float)));
    SNN_TRY(p->be->fill(p->be, p->fp8_dev + 4 * n, 0.0f, n));
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        snn_fp8_tensor_state *st[3] = {&pm->sx, &pm->sw, &pm->sdy};
        for (int k = 0; k < 3; k++) {
            const size_t j = 3 * (size_t)i + (size_t)k;
            if (!p->fp8_used[j]) continue;
            const float a = p->fp8_host[j];
            if (p->fp8.recipe == SNN_FP8_RECIPE_DELAYED && st[k]->amax_history && st[k]->history_len > 0)
                st[k]->amax_history[0] = fmaxf(st[k]->amax_history[0], a);
            st[k]->last_amax = a;
            p->fp8_used[j] = 0;
        }
    }
    p->fp8_pending = 0;
    return SNN_OK;
}

typedef struct codes_buf {
    unsigned char *base;
    size_t off;
} codes_buf;

static void *take(codes_buf *b, size_t bytes) {
    void *r = b->base + b->off;
    b->off += up256(bytes);
    return r;
}

/* The device factor 1/s of state j (module j / 3, operand j % 3: x, w, dy). */
static float *sinv_of(const snn_precision *p, size_t j) { return p->fp8_dev + 4 * j; }

/* Codes of one operand of module i with state k (0 x, 1 w, 2 dy); spikes: unit scale, no amax. */
static snn_status codes(snn_prec_module *pm, int k, int spike, const float *x, int rows, int cols, void *q, int ldq,
                        void *qt, int ldqt) {
    snn_precision *p = pm->p;
    const size_t j = 3 * (size_t)(pm - p->mods) + (size_t)k, n = 3 * (size_t)p->n_mods;
    snn_fp8_tensor_state *st = k == 0 ? &pm->sx : k == 1 ? &pm->sw : &pm->sdy;
    const snn_fp8_role role = k == 0 ? SNN_FP8_ROLE_INPUT : k == 1 ? SNN_FP8_ROLE_WEIGHT : SNN_FP8_ROLE_GRAD;
    snn_fp8_codes c = {.fp8 = spike ? SNN_F8E4M3 : snn_fp8_role_dtype(&p->fp8, role), .rows = rows, .cols = cols,
                       .x = x, .pow2 = p->fp8.pow2_scales, .scale = 1.0f, .scale_inv = 1.0f, .q = q, .ldq = ldq,
                       .qt = qt, .ldqt = ldqt, .sinv = sinv_of(p, j)};
    if (!spike) {
        if (p->fp8.recipe == SNN_FP8_RECIPE_CURRENT) {
            c.current = 1;
        } else {
            if (!st->amax_history || st->history_len < 1)
                return snn_error(SNN_E_STATE, "FP8 delayed scaling needs the operand's state");
            c.scale = st->scale;
            c.scale_inv = st->scale_inv;
        }
        c.amax = p->fp8_dev + 4 * n + j;
        p->fp8_used[j] = 1;
        p->fp8_pending = 1;
    }
    return p->be->fp8_codes(p->be, &c);
}

/* The weight's codes, both layouts in one pass, kept while the weights (param_version) and
 * the weight's scale (delayed; current scaling's depends on the weights alone) stay: a
 * training step quantises W once for its forward and backward, inference once per update.
 * The amax a skipped pass would record is the one recorded at this version already. */
static snn_status weight_codes(snn_prec_module *pm, snn_module *m) {
    snn_precision *p = pm->p;
    const uint64_t ver = p->model->param_version;
    const float sc = p->fp8.recipe == SNN_FP8_RECIPE_DELAYED ? pm->sw.scale : 0.0f;
    if (pm->w8_valid && pm->w8_version == ver && pm->w8_scale == sc) return SNN_OK;
    const int K = pm->in, No = pm->out;
    SNN_TRY(codes(pm, 1, 0, m->params[0].data, No, K, pm->w8, (int)r16((size_t)K), pm->w8t, (int)r16((size_t)No)));
    pm->w8_version = ver;
    pm->w8_scale = sc;
    pm->w8_valid = 1;
    return SNN_OK;
}

/* xcodes: x holds the E4M3 codes of spikes (unit scale, rows of K bytes, K a multiple of 16:
 * module.h's y_codes), which the GEMM reads as they are. defer: the neuron after it adds the
 * bias and rounds (module.h's defer_bias): the GEMM writes the FP32 product. */
snn_status snn_prec_fp8_codes_forward(snn_module *m, const float *x, int xcodes, int defer, int rows, float *y,
                                      void *work) {
    snn_prec_module *pm = (snn_prec_module *)m->prec;
    snn_precision *p = pm->p;
    if (!p->fp8_dev) return snn_error(SNN_E_STATE, "FP8 GEMM: the precision was not planned");
    const int K = pm->in, No = pm->out, K16 = (int)r16((size_t)K);
    const size_t i3 = 3 * (size_t)(pm - p->mods);
    codes_buf b = {(unsigned char *)work, 0};
    const int spike = pm->spike_input && p->spike_fp8;
    if (xcodes && (!spike || K16 != K))
        return snn_error(SNN_E_STATE, "FP8 Linear %s: spike codes as input need spike-aware FP8 and a width that is a "
                         "multiple of 16 (%d)", m->name, K);
    void *xq = xcodes ? (void *)x : take(&b, (size_t)rows * (size_t)K16);
    if (!xcodes) SNN_TRY(codes(pm, 0, spike, x, rows, K, xq, K16, NULL, 0));
    SNN_TRY(weight_codes(pm, m));
    /* the FP8 GEMM writes its output in the BF16 base precision (bias first, then rounding),
     * or the FP32 product for a neuron that does both (defer) */
    snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = rows, .N = No, .K = K16, .alpha = 1.0f, .beta = 0.0f,
                  .A = (const float *)xq, .lda = K16, .B = (const float *)pm->w8, .ldb = K16, .C = y, .ldc = No,
                  .ab_type = snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_INPUT),
                  .bias = m->n_params > 1 && !defer ? m->params[1].data : NULL, .c_round = defer ? SNN_F32 : p->half,
                  .a_store = spike ? SNN_F8E4M3 : snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_INPUT),
                  .b_store = snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_WEIGHT), .a_scale = sinv_of(p, i3),
                  .b_scale = sinv_of(p, i3 + 1)};
    return p->be->gemm(p->be, &g);
}

snn_status snn_prec_fp8_codes_backward(snn_module *m, const float *x, const float *dy, int rows, float *dx,
                                       void *work) {
    snn_prec_module *pm = (snn_prec_module *)m->prec;
    snn_precision *p = pm->p;
    const snn_backend *be = p->be;
    if (!p->fp8_dev) return snn_error(SNN_E_STATE, "FP8 GEMM: the precision was not planned");
    const int K = pm->in, No = pm->out;
    const int O16 = (int)r16((size_t)No), R16 = (int)r16((size_t)rows);
    const size_t i3 = 3 * (size_t)(pm - p->mods);
    const snn_dtype xt = snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_INPUT);
    const snn_dtype wt = snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_WEIGHT);
    const snn_dtype gt = snn_fp8_role_dtype(&p->fp8, SNN_FP8_ROLE_GRAD);
    const int spike = pm->spike_input && p->spike_fp8;
    codes_buf b = {(unsigned char *)work, 0};
    void *dyq = dx ? take(&b, (size_t)rows * (size_t)O16) : NULL;
    void *dyqt = take(&b, (size_t)No * (size_t)R16), *xqt = take(&b, (size_t)K * (size_t)R16);
    /* dY row-wise and column-wise in one pass (one scale: per tensor) */
    SNN_TRY(codes(pm, 2, 0, dy, rows, No, dyq, O16, dyqt, R16));
    if (dx) {
        SNN_TRY(weight_codes(pm, m)); /* the forward's, unless the weights changed since */
        snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = rows, .N = K, .K = O16, .alpha = 1.0f, .beta = 0.0f,
                      .A = (const float *)dyq, .lda = O16, .B = (const float *)pm->w8t, .ldb = O16, .C = dx, .ldc = K,
                      .ab_type = gt, .c_round = p->half, .a_store = gt, .b_store = wt, .a_scale = sinv_of(p, i3 + 2),
                      .b_scale = sinv_of(p, i3 + 1)};
        SNN_TRY(be->gemm(be, &g));
    }
    SNN_TRY(codes(pm, 0, spike, x, rows, K, NULL, 0, xqt, R16));
    snn_gemm g = {.trans_a = 0, .trans_b = 1, .M = No, .N = K, .K = R16, .alpha = 1.0f, .beta = 1.0f,
                  .A = (const float *)dyqt, .lda = R16, .B = (const float *)xqt, .ldb = R16, .C = m->params[0].grad,
                  .ldc = K, .ab_type = gt, .c_round = SNN_F32, .a_store = gt, .b_store = spike ? SNN_F8E4M3 : xt,
                  .a_scale = sinv_of(p, i3 + 2), .b_scale = sinv_of(p, i3)};
    return be->gemm(be, &g);
}
