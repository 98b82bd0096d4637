/* The FP8 codes path of the precision layer (src/precision/prec_fp8_codes.c) without a GPU.
 *
 * The CPU table has no fp8_codes: it multiplies fp8_qdq's values in FP32 (the reference). A
 * copy of it gets the two codes entries written here on the host from backend.h's contract
 * (the codes and transposes with zero padding, 1/s, the amax slot; a GEMM that decodes the
 * codes, applies the factors and calls the CPU GEMM), so the orchestration the GPU runs —
 * layouts, transposes, padding to 16, the factor and amax slots, the weight-codes cache,
 * the flush of the amaxes into the recipe state — runs here against the reference path:
 *
 *   two fcsnn (in 112, hidden 208, 24 classes, 18 rows: the output and row extents padded to
 *   16; FP8 needs in % 16 == 0), the same
 *   seed, fp8 with the delayed and the current recipe; one on the CPU table, one on the
 *   codes table; training steps of the same inputs. Each step: outputs within 2^-7 of max|y|
 *   (BF16 outputs; the GEMMs sum padded rows in another order), weights after AdamW within
 *   1e-5 normwise, and — the flush — every non-spike state's amax history bit for bit equal
 *   at step 0 (the same x and W; dY within the bound: compared relatively). The spike
 *   operands record nothing on either path. The codes path is really taken: its scratch and
 *   device slots exist, and a tampered weight cache changes the output.
 *   A pointwise Conv1d network (token-major GEMMs through the op table's transpose) the same way.
 *   With neuron_forward_io_bias (written here too) the table takes the FP8 fusions of
 *   prec_store.c: checked where they are assigned, and an inference forward on E4M3 spike
 *   codes equal to a training forward bit for bit.
 *   Also: SNN_FP8_GEMM=emulate turns the codes path off, another value is refused, unset is
 *   the codes path. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "harness.h"
#include "nn/model_internal.h"
#include "precision/fp8.h"
#include "precision/runtime.h"
#include "snn/dtype.h"
#include "snn/loss.h"
#include "snn/prepare.h"
#include "snn/snn.h"

enum { T = 3, N = 6, IN = 112, HID = 208, DEPTH = 2, CLASSES = 24, STEPS = 4 };

static uint64_t rs;
static snn_backend codes_be;

static uint8_t encode(snn_dtype t, float v) { return t == SNN_F8E4M3 ? snn_f32_to_e4m3(v, 1) : snn_f32_to_e5m2(v, 1); }
static float decode(snn_dtype t, uint8_t c) { return t == SNN_F8E4M3 ? snn_e4m3_to_f32(c) : snn_e5m2_to_f32(c); }

static snn_status host_codes(const snn_backend *be, const snn_fp8_codes *q) {
    (void)be;
    const size_t n = (size_t)q->rows * (size_t)q->cols;
    const float a = snn_fp8_amax(q->x, n);
    float s = q->scale, d = q->scale_inv;
    if (q->current) {
        s = snn_fp8_scale_from_amax(a, snn_fp8_max(q->fp8), q->pow2, FLT_MAX);
        d = 1.0f / s;
    }
    uint8_t *Q = q->q, *QT = q->qt;
    for (int r = 0; r < (Q ? q->rows : 0); r++)
        for (int k = 0; k < q->ldq; k++) Q[(size_t)r * q->ldq + k] = k < q->cols ? encode(q->fp8, q->x[(size_t)r * q->cols + k] * s) : 0;
    for (int k = 0; k < (QT ? q->cols : 0); k++)
        for (int r = 0; r < q->ldqt; r++)
            QT[(size_t)k * q->ldqt + r] = r < q->rows ? encode(q->fp8, q->x[(size_t)r * q->cols + k] * s) : 0;
    q->sinv[0] = d;
    if (q->amax) q->amax[0] = fmaxf(q->amax[0], a);
    return SNN_OK;
}

/* The GEMM on codes: the dequantised operands (decode · factor, what fp8_qdq returns) through
 * the CPU's GEMM; any other descriptor as the CPU's. */
static snn_status host_gemm(const snn_backend *be, const snn_gemm *g) {
    const snn_backend *cpu = snn_backend_cpu();
    if (g->a_store != SNN_F8E4M3 && g->a_store != SNN_F8E5M2) return cpu->gemm(cpu, g);
    CHECK(!g->trans_a && g->trans_b && g->K % 16 == 0 && g->a_scale && g->b_scale);
    float *A = malloc(sizeof(float) * (size_t)g->M * g->K), *B = malloc(sizeof(float) * (size_t)g->N * g->K);
    const uint8_t *a = (const uint8_t *)g->A, *b = (const uint8_t *)g->B;
    for (int i = 0; i < g->M; i++)
        for (int k = 0; k < g->K; k++) A[(size_t)i * g->K + k] = decode(g->a_store, a[(size_t)i * g->lda + k]) * g->a_scale[0];
    for (int j = 0; j < g->N; j++)
        for (int k = 0; k < g->K; k++) B[(size_t)j * g->K + k] = decode(g->b_store, b[(size_t)j * g->ldb + k]) * g->b_scale[0];
    snn_gemm h = *g;
    h.A = A, h.B = B, h.lda = h.ldb = g->K;
    h.a_store = h.b_store = SNN_F32;
    h.ab_type = SNN_F32;
    h.a_scale = h.b_scale = NULL;
    snn_status st = be == &codes_be ? cpu->gemm(cpu, &h) : SNN_E_STATE;
    free(A), free(B);
    return st;
}

/* neuron_forward_io_bias from backend.h's contract (the CUDA table's entry; the CPU's has
 * none): x = round_io(bias + p), the CPU's neuron on it, the spikes stored as sp (io, F32 or
 * E4M3 codes). With it the codes table takes prec_store.c's FP8 fusions: the Linear's bias
 * and rounding in the neuron, and E4M3 spike codes into the next FP8 Linear in inference. */
static snn_status host_neuron_bias(const snn_backend *be, const snn_neuron_opts *o, float k, int T_, size_t n,
                                   snn_dtype io, snn_dtype sp, const float *p, const float *bias, size_t period,
                                   void *y, float *h_seq, float *v_last) {
    const snn_backend *cpu = snn_backend_cpu();
    if (be != &codes_be || !period || n % period || (io != SNN_BF16 && io != SNN_F16) ||
        (sp != io && sp != SNN_F32 && sp != SNN_F8E4M3))
        return snn_error(SNN_E_INVALID, "host neuron_forward_io_bias: bad arguments");
    const size_t nn = (size_t)T_ * n;
    float *x = malloc(nn * sizeof(float)), *sf = malloc(nn * sizeof(float));
    for (size_t i = 0; i < nn; i++) x[i] = snn_round_to(io, bias[i % period] + p[i], 0);
    snn_status st = cpu->neuron_forward(cpu, o, k, T_, n, x, sf, h_seq, v_last);
    if (st == SNN_OK) st = snn_convert(sp, y, SNN_F32, sf, nn, 0);
    free(x), free(sf);
    return st;
}

/* codes: every module on the codes table, before prepare (as snn_model_to would); then fp8
 * with the recipe, AdamW after prepare, the plan for (T, N) */
static void set_up(snn_model *m, const char *recipe, int codes, snn_precision **p, snn_optimizer **opt) {
    if (codes) {
        m->run.be = &codes_be;
        snn_model_bind_storage(m);
    }
    snn_precision_config c;
    CHECK(snn_precision_config_parse("fp8", recipe, NULL, NULL, NULL, &c) == SNN_OK);
    CHECK_MSG(snn_prepare_model_for_precision(m, "cpu", &c, p) == SNN_OK, "prepare %s: %s", recipe, snn_last_error());
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 1e-3f;
    CHECK(snn_optimizer_create_for_model(&oo, m, opt) == SNN_OK);
    CHECK(snn_model_plan(m, T, N) == SNN_OK);
}

static snn_model *make(uint64_t seed, const char *recipe, int codes, snn_precision **p, snn_optimizer **opt) {
    snn_fcsnn_opts fo = {.in_features = IN, .hidden = HID, .depth = DEPTH, .classes = CLASSES};
    snn_model *m = NULL;
    CHECK_MSG(snn_fcsnn_create(&fo, seed, &m) == SNN_OK, "%s", snn_last_error());
    set_up(m, recipe, codes, p, opt);
    float *w = snn_model_params(m); /* every layer fires (the default init leaves them silent) */
    for (size_t i = 0; i < snn_model_num_params(m); i++) w[i] *= 6.0f;
    return m;
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

static void run_recipe(const char *recipe, uint64_t seed) {
    snn_precision *pa = NULL, *pb = NULL;
    snn_optimizer *oa = NULL, *ob = NULL;
    snn_model *a = make(seed, recipe, 0, &pa, &oa), *b = make(seed, recipe, 1, &pb, &ob);
    int on = 0;
    for (int i = 0; i < pb->n_mods; i++) on += snn_prec_fp8_codes_on(pb, &pb->mods[i]);
    CHECK_MSG(on == DEPTH + 1, "%s: %d modules on codes, expected %d", recipe, on, DEPTH + 1);
    CHECK(pb->fp8_dev && !pa->fp8_dev);
    const size_t nx = (size_t)T * N * IN, ny = (size_t)T * N * CLASSES, np = snn_model_num_params(a);
    float *x = malloc(nx * sizeof(float)), *ya = malloc(ny * sizeof(float)), *dy = malloc(ny * sizeof(float));
    int32_t lab[N];
    for (int s = 0; s < STEPS; s++) {
        snn_test_fill_uniform(x, nx, -1.0f, 4.0f, &rs);
        for (int i = 0; i < N; i++) lab[i] = (int32_t)((rs >> (i % 32)) % CLASSES);
        const float *y;
        float loss;
        CHECK(snn_model_forward(a, x, 1, &y) == SNN_OK);
        memcpy(ya, y, ny * sizeof(float));
        CHECK(snn_loss_cross_entropy_mean_t(y, lab, T, N, CLASSES, &loss, dy, NULL) == SNN_OK);
        CHECK_MSG(snn_precision_backward(pa, dy, oa, -1, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
        CHECK(snn_model_forward(b, x, 1, &y) == SNN_OK);
        double d = 0, m = max_abs(ya, ny);
        for (size_t i = 0; i < ny; i++) d = fmax(d, fabs((double)y[i] - ya[i]));
        CHECK_MSG(d <= m * 0x1p-7, "%s step %d: outputs differ by %.3g (max|y| %.3g)", recipe, s, d, m);
        CHECK(snn_loss_cross_entropy_mean_t(y, lab, T, N, CLASSES, &loss, dy, NULL) == SNN_OK);
        CHECK_MSG(snn_precision_backward(pb, dy, ob, -1, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
        CHECK(!pb->fp8_pending); /* the step flushed */
        const float *wa = snn_model_params(a), *wb = snn_model_params(b);
        double e = 0, n2 = 0;
        for (size_t i = 0; i < np; i++) e += ((double)wa[i] - wb[i]) * ((double)wa[i] - wb[i]), n2 += (double)wa[i] * wa[i];
        CHECK_MSG(sqrt(e / n2) <= 1e-5, "%s step %d: weights differ by %.3g normwise", recipe, s, sqrt(e / n2));
        for (int i = 0; i < pa->n_mods; i++) {
            snn_prec_module *ma = &pa->mods[i], *mb = &pb->mods[i];
            if (!ma->has_fp8_state) continue;
            const snn_fp8_tensor_state *sa[3] = {&ma->sx, &ma->sw, &ma->sdy}, *sb[3] = {&mb->sx, &mb->sw, &mb->sdy};
            for (int k = 0; k < 3; k++) {
                const double u = sa[k]->last_amax, v = sb[k]->last_amax;
                if (k == 0 && ma->spike_input) {
                    CHECK_MSG(u == 0 && v == 0, "%s %s: a spike operand recorded an amax", recipe, ma->m->name);
                    continue;
                }
                /* step 0: x and W are the same values, dY within the output bound */
                const double tol = s == 0 && k < 2 ? 0 : 0.05 * fabs(u);
                CHECK_MSG(fabs(u - v) <= tol && v > 0, "%s step %d %s state %d: amax %.9g vs %.9g", recipe, s,
                          ma->m->name, k, u, v);
                if (sa[k]->history_len && s == 0 && k < 2)
                    CHECK_MSG(!memcmp(sa[k]->amax_history, sb[k]->amax_history, sizeof(float) * (size_t)sa[k]->history_len) &&
                                  sa[k]->scale == sb[k]->scale,
                              "%s %s state %d: delayed history or scale differs after the flush", recipe, ma->m->name, k);
            }
        }
    }
    /* the FP8 fusions (prec_store.c): each Linear -> LIF leaves its bias to the LIF, each
     * LIF -> FP8 Linear carries E4M3 spike codes in an inference forward, which equals a
     * training forward bit for bit, spike rates included; a backward after it is refused */
    snn_module *const *L = b->root->children[0]->children;
    CHECK(L[0]->defer_bias && L[1]->bias_src == L[0] && L[1]->x_round == SNN_BF16 && L[2]->defer_bias);
    CHECK(L[1]->y_codes && L[2]->x_codes && L[3]->y_codes && L[4]->x_codes && !L[4]->defer_bias);
    CHECK(!a->root->children[0]->children[0]->defer_bias); /* the CPU table: no fusion */
    const float *y;
    snn_spike_rate ra[2], rb[2];
    int na = 0, nb = 0;
    CHECK(snn_model_forward(b, x, 1, &y) == SNN_OK);
    memcpy(ya, y, ny * sizeof(float));
    CHECK(!L[1]->codes_fwd && !L[2]->codes_fwd && snn_model_spike_rates(b, ra, 2, &na) == SNN_OK);
    CHECK(snn_model_forward(b, x, 0, &y) == SNN_OK);
    CHECK_MSG(L[1]->codes_fwd && L[2]->codes_fwd && L[3]->codes_fwd && L[4]->codes_fwd,
              "%s: the inference forward did not pass spike codes", recipe);
    CHECK_MSG(!memcmp(ya, y, ny * sizeof(float)), "%s: the inference forward on codes differs from a training one",
              recipe);
    CHECK(snn_model_spike_rates(b, rb, 2, &nb) == SNN_OK && na == 2 && nb == 2);
    for (int i = 0; i < 2 && na == 2 && nb == 2; i++)
        CHECK_MSG(ra[i].rate == rb[i].rate && ra[i].rate > 0.0, "%s: spike rate %d %.6f vs %.6f", recipe, i,
                  ra[i].rate, rb[i].rate);
    CHECK(snn_precision_backward(pb, dy, ob, -1, 0, NULL, NULL) != SNN_OK);
    /* the FP8 Linear refuses by itself too (the model's check comes first) */
    CHECK(L[2]->ops->backward(L[2], &b->run, x, y, dy, NULL) == SNN_E_STATE && strstr(snn_last_error(), "spike codes"));
    /* the weight codes are cached: tampering with them shows in the next inference forward */
    snn_prec_module *m0 = &pb->mods[0];
    CHECK(m0->w8_valid);
    CHECK(snn_model_forward(b, x, 0, &y) == SNN_OK);
    memcpy(ya, y, ny * sizeof(float));
    memset(m0->w8, 0, (size_t)m0->out * (size_t)((m0->in + 15) / 16 * 16));
    CHECK(snn_model_forward(b, x, 0, &y) == SNN_OK);
    CHECK_MSG(memcmp(ya, y, ny * sizeof(float)) != 0, "%s: the cached weight codes were not used", recipe);
    m0->w8_valid = 0; /* and are written again once invalid */
    CHECK(snn_model_forward(b, x, 0, &y) == SNN_OK);
    CHECK_MSG(!memcmp(ya, y, ny * sizeof(float)), "%s: the weight codes were not rewritten", recipe);
    free(x), free(ya), free(dy);
    snn_optimizer_free(oa), snn_optimizer_free(ob);
    snn_precision_free(pa), snn_precision_free(pb);
    snn_model_free(a), snn_model_free(b);
}

/* A pointwise Conv1d network over [16][5] (its FP8 GEMMs token-major: 90 rows, padded) on
 * both tables, loss mean(y²), three AdamW steps: outputs and weights within the bounds above. */
static snn_model *make_conv(uint64_t seed, const char *recipe, int codes, snn_precision **p, snn_optimizer **opt) {
    snn_module *seq = NULL, *c = NULL;
    CHECK(snn_sequential_create(&seq) == SNN_OK);
    CHECK(snn_conv1d_create(16, 32, 1, 1, 0, 1, &c) == SNN_OK && snn_sequential_add(seq, c) == SNN_OK);
    CHECK(snn_gelu_create(&c) == SNN_OK && snn_sequential_add(seq, c) == SNN_OK);
    CHECK(snn_conv1d_create(32, 16, 1, 1, 0, 1, &c) == SNN_OK && snn_sequential_add(seq, c) == SNN_OK);
    CHECK(snn_flatten_create(&c) == SNN_OK && snn_sequential_add(seq, c) == SNN_OK);
    CHECK(snn_linear_create(80, 24, 1, &c) == SNN_OK && snn_sequential_add(seq, c) == SNN_OK);
    int shape[2] = {16, 5};
    snn_model *m = NULL;
    CHECK_MSG(snn_model_create_from_module(seq, 2, shape, seed, &m) == SNN_OK, "%s", snn_last_error());
    set_up(m, recipe, codes, p, opt);
    return m;
}

static void run_conv(const char *recipe, uint64_t seed) {
    snn_precision *pa = NULL, *pb = NULL;
    snn_optimizer *oa = NULL, *ob = NULL;
    snn_model *a = make_conv(seed, recipe, 0, &pa, &oa), *b = make_conv(seed, recipe, 1, &pb, &ob);
    int on = 0;
    for (int i = 0; i < pb->n_mods; i++) on += snn_prec_fp8_codes_on(pb, &pb->mods[i]);
    CHECK_MSG(on == 3, "conv %s: %d modules on codes, expected 3 (two Conv1d, the Linear)", recipe, on);
    const size_t nx = (size_t)T * N * 80, ny = (size_t)T * N * 24, np = snn_model_num_params(a);
    float *x = malloc(nx * sizeof(float)), *ya = malloc(ny * sizeof(float)), *dy = malloc(ny * sizeof(float));
    for (int s = 0; s < 3; s++) {
        snn_test_fill_uniform(x, nx, -2.0f, 2.0f, &rs);
        const float *y;
        CHECK(snn_model_forward(a, x, 1, &y) == SNN_OK);
        memcpy(ya, y, ny * sizeof(float));
        for (size_t i = 0; i < ny; i++) dy[i] = 2.0f * y[i] / (float)ny;
        CHECK_MSG(snn_precision_backward(pa, dy, oa, -1, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
        CHECK(snn_model_forward(b, x, 1, &y) == SNN_OK);
        double d = 0, m = max_abs(ya, ny);
        for (size_t i = 0; i < ny; i++) d = fmax(d, fabs((double)y[i] - ya[i]));
        CHECK_MSG(d <= m * 0x1p-7, "conv %s step %d: outputs differ by %.3g (max|y| %.3g)", recipe, s, d, m);
        for (size_t i = 0; i < ny; i++) dy[i] = 2.0f * y[i] / (float)ny;
        CHECK_MSG(snn_precision_backward(pb, dy, ob, -1, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
        const float *wa = snn_model_params(a), *wb = snn_model_params(b);
        double e = 0, n2 = 0;
        for (size_t i = 0; i < np; i++) e += ((double)wa[i] - wb[i]) * ((double)wa[i] - wb[i]), n2 += (double)wa[i] * wa[i];
        CHECK_MSG(sqrt(e / n2) <= 1e-5, "conv %s step %d: weights differ by %.3g normwise", recipe, s, sqrt(e / n2));
        CHECK_MSG(pa->mods[0].sw.last_amax == pb->mods[0].sw.last_amax || s > 0, "conv %s: weight amax %g vs %g", recipe,
                  pa->mods[0].sw.last_amax, pb->mods[0].sw.last_amax);
    }
    free(x), free(ya), free(dy);
    snn_optimizer_free(oa), snn_optimizer_free(ob);
    snn_precision_free(pa), snn_precision_free(pb);
    snn_model_free(a), snn_model_free(b);
}

int main(void) {
    rs = snn_test_seed();
    setenv("SNN_FP8_GEMM", "codes", 1); /* whatever the default */
    codes_be = *snn_backend_cpu();
    codes_be.fp8_codes = host_codes;
    codes_be.gemm = host_gemm;
    codes_be.neuron_forward_io_bias = host_neuron_bias;
    run_recipe("delayed", rs);
    run_recipe("current", rs + 1);
    run_conv("delayed", rs + 2);
    run_conv("current", rs + 3);
    /* SNN_FP8_GEMM: emulate turns the path off, anything but codes / emulate is refused */
    snn_precision *p = NULL;
    snn_optimizer *o = NULL;
    setenv("SNN_FP8_GEMM", "emulate", 1);
    snn_model *m = make(rs, "delayed", 1, &p, &o);
    CHECK(!snn_prec_fp8_codes_on(p, &p->mods[0]) && !p->fp8_dev);
    snn_optimizer_free(o), snn_precision_free(p), snn_model_free(m);
    setenv("SNN_FP8_GEMM", "fast", 1);
    snn_fcsnn_opts fo = {.in_features = IN, .hidden = HID, .depth = DEPTH, .classes = CLASSES};
    CHECK(snn_fcsnn_create(&fo, 1, &m) == SNN_OK);
    snn_precision_config c;
    CHECK(snn_precision_config_parse("fp8", "delayed", NULL, NULL, NULL, &c) == SNN_OK);
    CHECK(snn_prepare_model_for_precision(m, "cpu", &c, &p) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "SNN_FP8_GEMM") != NULL);
    snn_model_free(m);
    /* unset: the codes path is the default where the table has it */
    unsetenv("SNN_FP8_GEMM");
    m = make(rs, "delayed", 1, &p, &o);
    CHECK(snn_prec_fp8_codes_on(p, &p->mods[0]) && p->fp8_dev);
    snn_optimizer_free(o), snn_precision_free(p), snn_model_free(m);
    return snn_test_finish("test_fp8_codes_host");
}
