/* Context parallel for gpt and spikelm against the single process.
 *
 *   driver_lm_cp unit
 *     on any number of ranks (the world is the CP group):
 *     - the load-balanced layout: chunks i and 2CP-1-i on rank i, recomputed here from the
 *       chunk definition; shard then unshard over all ranks gives the input back bit for bit,
 *       for several (S, CP); S not divisible by 2*CP refused with a message naming
 *       sequence_length and context_parallel_size;
 *     - the (dp, pp, cp, tp) mesh: snn_mesh4_coords against a nested-loop enumeration (tp
 *       fastest) for every factorisation of worlds 1..24, equal to snn_mesh_coords at CP 1;
 *       on the world, every axis communicator holds exactly the ranks that differ only in
 *       its coordinate, ordered by it;
 *     - CP attention against the dense attention core (attention.c) on random q|k|v and
 *       output gradients (MHA and GQA): outputs and input gradients, poisoned with NaN
 *       first, within 1e-5 relative of this rank's tokens of the dense results.
 *   driver_lm_cp train MODEL POS DP [STEPS]
 *     MODEL gpt | spikelm, POS learned | rope; world = DP * CP. Every rank also trains the
 *     dense model (same seed) on the whole global batch (AdamW, lr 1e-3, clip 1, 2
 *     microbatches). Checks: the CP model's initial parameters equal the dense model's bit
 *     for bit; the global per-token loss of every step within 1e-5 relative; the gradients
 *     of step 1 (same weights) within 1e-5 relative L2 per tensor; the gradients of every
 *     step and every tensor after the last step within the reference's rtol 1e-5 / atol
 *     1e-6 taken in the L2 norm, and all tensors together within 1e-5 relative L2; every
 *     rank holding the same weights bit for bit. The same single process run with twice the
 *     microbatches is compared too and printed: it shows how far a mere change of summation
 *     order moves AdamW's result (the floor any exact-in-arithmetic rewrite lives with).
 *   driver_lm_cp bench MODEL SEQ STEPS   timing and arena size (not a test).
 * Prints one line per check on rank 0; exit 0 when all pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/arena.h"
#include "dist/comm.h"
#include "dist/lm_cp.h"
#include "nn/lm_layers.h"
#include "snn/lm.h"
#include "snn/optim.h"
#include "snn/rng.h"

static snn_comm *W;
static int failures;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", W ? snn_comm_rank(W) : 0, what, snn_last_error());
    if (W) snn_comm_abort(W, 1);
    exit(1);
}

#define CHECK(st, what)                     \
    do {                                    \
        if ((st) != SNN_OK) die(what);      \
    } while (0)

/* every rank's verdict: the worst over the world */
static void verdict(int ok, const char *fmt, double v) {
    int bad = !ok;
    CHECK(snn_comm_allreduce(W, &bad, 1, SNN_COMM_I32, SNN_COMM_MAX), "allreduce");
    double worst = v;
    CHECK(snn_comm_allreduce(W, &worst, 1, SNN_COMM_F64, SNN_COMM_MAX), "allreduce");
    if (bad) failures++;
    if (snn_comm_rank(W) == 0) {
        printf("%s ", bad ? "FAIL" : "ok  ");
        printf(fmt, worst);
        printf("\n");
    }
}

static double max_rel(const float *a, const float *b, size_t n) {
    double top = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        top = fmax(top, fabs((double)b[i]));
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    }
    return d / (top > 0 ? top : 1.0);
}

static float urand(snn_rng *r) { return 2.0f * snn_rng_next_uniform(r) - 1.0f; }

/* ---------------- unit checks ---------------- */

static void check_layout(void) {
    static const int cases[][2] = {{16, 1}, {16, 2}, {16, 4}, {24, 3}, {8, 4}, {12, 2}, {40, 5}, {7, 1}};
    int ok = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int S = cases[c][0], cp = cases[c][1], sl = S / cp, rows = 3, elem = 5;
        if (snn_lm_cp_check(S, cp) != SNN_OK) ok = 0;
        int32_t *full = malloc((size_t)rows * S * elem * 4), *parts = malloc((size_t)rows * S * elem * 4),
                *back = malloc((size_t)rows * S * elem * 4);
        snn_rng rng = snn_rng_make(42 + c, 1);
        for (int i = 0; i < rows * S * elem; i++) full[i] = (int32_t)snn_rng_next_u32(&rng);
        for (int r = 0; r < cp; r++) {
            snn_lm_cp_shard(full, parts + (size_t)r * rows * sl * elem, rows, S, cp, r, elem * 4);
            /* the chunk definition, independently: local tokens = chunk r, then chunk 2cp-1-r */
            const int ch = cp == 1 ? S : S / (2 * cp);
            for (int b = 0; b < rows; b++)
                for (int l = 0; l < sl; l++) {
                    int g = cp == 1 ? l : (l < ch ? r * ch + l : (2 * cp - 1 - r) * ch + l - ch);
                    if (snn_lm_cp_position(S, cp, r, l) != g) ok = 0;
                    if (memcmp(parts + ((size_t)r * rows * sl + (size_t)b * sl + l) * elem,
                               full + ((size_t)b * S + g) * elem, elem * 4))
                        ok = 0;
                }
        }
        for (int i = 0; i < rows * S * elem; i++) back[i] = -1;
        snn_lm_cp_unshard(parts, back, rows, S, cp, elem * 4);
        if (memcmp(back, full, (size_t)rows * S * elem * 4)) ok = 0;
        free(full);
        free(parts);
        free(back);
    }
    verdict(ok, "layout: chunks i and 2CP-1-i, shard/unshard exact for 8 (S, CP) cases", 0);
    /* refusals, with the message naming both fields */
    static const int bad[][2] = {{130, 2}, {18, 2}, {16, 3}, {130, 4}, {10, 4}}; /* 130 at CP 2: the reference's own case */
    ok = 1;
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        snn_status st = snn_lm_cp_check(bad[c][0], bad[c][1]);
        const char *e = snn_last_error();
        if (st == SNN_OK || !strstr(e, "sequence_length") || !strstr(e, "context_parallel_size")) ok = 0;
    }
    if (snn_lm_cp_check(16, 0) == SNN_OK || snn_lm_cp_check(127, 1) != SNN_OK) ok = 0;
    verdict(ok, "layout: S %% (2 CP) != 0 refused naming sequence_length and context_parallel_size", 0);
}

static void check_mesh(void) {
    int ok = 1, n = 0;
    for (int world = 1; world <= 24; world++)
        for (int pp = 1; pp <= world; pp++)
            for (int cp = 1; cp <= world; cp++)
                for (int tp = 1; tp <= world; tp++) {
                    if ((long)pp * cp * tp > world || world % (pp * cp * tp)) {
                        if (snn_mesh4_coords(world, pp, cp, tp, 0, NULL, NULL, NULL, NULL, NULL) == SNN_OK) ok = 0;
                        continue;
                    }
                    int r = 0, D = world / (pp * cp * tp);
                    for (int d = 0; d < D; d++)
                        for (int p = 0; p < pp; p++)
                            for (int c = 0; c < cp; c++)
                                for (int t = 0; t < tp; t++, r++) {
                                    int a, b, e, f, g;
                                    if (snn_mesh4_coords(world, pp, cp, tp, r, &a, &b, &e, &f, &g) != SNN_OK ||
                                        a != d || b != p || e != c || f != t || g != D)
                                        ok = 0;
                                    if (cp == 1) {
                                        int a1, b1, f1, g1;
                                        if (snn_mesh_coords(world, pp, tp, r, &a1, &b1, &f1, &g1) != SNN_OK || a1 != a ||
                                            b1 != b || f1 != f || g1 != g)
                                            ok = 0;
                                    }
                                    n++;
                                }
                }
    verdict(ok, "mesh4: coordinates of %.0f (world, pp, cp, tp, rank) cases = the nested enumeration", n);
    /* the communicators on the world: every factorisation of this world */
    const int ws = snn_comm_size(W), me = snn_comm_rank(W);
    ok = 1;
    for (int pp = 1; pp <= ws; pp++)
        for (int cp = 1; cp <= ws; cp++)
            for (int tp = 1; tp <= ws; tp++) {
                if ((long)pp * cp * tp > ws || ws % (pp * cp * tp)) continue;
                snn_mesh4 m;
                CHECK(snn_mesh4_create(W, pp, cp, tp, &m), "mesh4");
                if (snn_mesh4_rank_of(&m, m.dp, m.pp, m.cp, m.tp) != me) ok = 0;
                snn_comm *ax[5] = {m.dp_comm, m.pp_comm, m.cp_comm, m.tp_comm, m.dpcp_comm};
                for (int k = 0; k < 5; k++) {
                    int sz = snn_comm_size(ax[k]);
                    int want = k == 0 ? m.dp_size : k == 1 ? pp : k == 2 ? cp : k == 3 ? tp : m.dp_size * cp;
                    int idx = k == 0 ? m.dp : k == 1 ? m.pp : k == 2 ? m.cp : k == 3 ? m.tp : m.dp * cp + m.cp;
                    if (sz != want || snn_comm_rank(ax[k]) != idx) ok = 0;
                    int coords[4] = {m.dp, m.pp, m.cp, m.tp}, *all = malloc((size_t)sz * 4 * sizeof(int));
                    CHECK(snn_comm_allgather(ax[k], coords, 4, SNN_COMM_I32, all), "allgather");
                    for (int j = 0; j < sz; j++)
                        for (int q = 0; q < 4; q++) {
                            int varies = q == k || (k == 4 && (q == 0 || q == 2));
                            if (!varies && all[j * 4 + q] != coords[q]) ok = 0;
                        }
                    free(all);
                }
                snn_mesh4_free(&m);
            }
    verdict(ok, "mesh4: axis communicators hold the ranks differing only in their coordinate (world %.0f)", ws);
}

static void attn_case(int heads, int groups, int hd, int S, int T, int N) {
    const int cp = snn_comm_size(W), me = snn_comm_rank(W), sl = S / cp, R = T * N;
    const int Wd = (heads + 2 * groups) * hd, OW = heads * hd;
    const snn_run run = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    float *x = malloc((size_t)R * S * Wd * 4), *dy = malloc((size_t)R * S * OW * 4), *y = malloc((size_t)R * S * OW * 4),
          *dx = malloc((size_t)R * S * Wd * 4);
    float *xl = malloc((size_t)R * sl * Wd * 4), *dyl = malloc((size_t)R * sl * OW * 4),
          *yl = malloc((size_t)R * sl * OW * 4), *dxl = malloc((size_t)R * sl * Wd * 4),
          *ref_y = malloc((size_t)R * sl * OW * 4), *ref_dx = malloc((size_t)R * sl * Wd * 4);
    snn_rng rng = snn_rng_make(1234 + (uint64_t)heads * 7 + (uint64_t)groups, 3); /* the same on every rank */
    for (size_t i = 0; i < (size_t)R * S * Wd; i++) x[i] = 1.5f * urand(&rng);
    for (size_t i = 0; i < (size_t)R * S * OW; i++) dy[i] = urand(&rng);
    for (size_t i = 0; i < (size_t)R * S * OW; i++) y[i] = NAN;
    for (size_t i = 0; i < (size_t)R * S * Wd; i++) dx[i] = NAN;
    snn_module *dense = snn_attention_new(heads, groups, hd), *cpa = snn_lm_cp_attention_new(heads, groups, hd, S, W);
    if (!dense || !cpa) die("alloc");
    CHECK(dense->ops->setup(dense, snn_shape2(S, Wd)), "dense setup");
    dense->in = snn_shape2(S, Wd);
    CHECK(cpa->ops->setup(cpa, snn_shape2(sl, Wd)), "cp setup");
    cpa->in = snn_shape2(sl, Wd);
    snn_arena a1 = {0}, a2 = {0};
    snn_arena_begin_measure(&a1);
    dense->ops->reserve(dense, &a1, T, N);
    CHECK(snn_arena_allocate(&a1, a1.used), "arena");
    dense->ops->reserve(dense, &a1, T, N);
    snn_arena_begin_measure(&a2);
    cpa->ops->reserve(cpa, &a2, T, N);
    CHECK(snn_arena_allocate(&a2, a2.used), "arena");
    cpa->ops->reserve(cpa, &a2, T, N);
    CHECK(dense->ops->forward(dense, &run, x, y), "dense forward");
    CHECK(dense->ops->backward(dense, &run, x, y, dy, dx), "dense backward");
    snn_lm_cp_shard(x, xl, R, S, cp, me, (size_t)Wd * 4);
    snn_lm_cp_shard(dy, dyl, R, S, cp, me, (size_t)OW * 4);
    snn_lm_cp_shard(y, ref_y, R, S, cp, me, (size_t)OW * 4);
    snn_lm_cp_shard(dx, ref_dx, R, S, cp, me, (size_t)Wd * 4);
    for (size_t i = 0; i < (size_t)R * sl * OW; i++) yl[i] = NAN;
    for (size_t i = 0; i < (size_t)R * sl * Wd; i++) dxl[i] = NAN;
    CHECK(cpa->ops->forward(cpa, &run, xl, yl), "cp forward");
    CHECK(cpa->ops->backward(cpa, &run, xl, yl, dyl, dxl), "cp backward");
    double ey = max_rel(yl, ref_y, (size_t)R * sl * OW), ex = max_rel(dxl, ref_dx, (size_t)R * sl * Wd);
    char fmt[160];
    snprintf(fmt, sizeof fmt, "CP attention (heads %d, groups %d, S %d, CP %d): forward and backward max rel %%.3g",
             heads, groups, S, cp);
    verdict(ey <= 1e-5 && ex <= 1e-5, fmt, fmax(ey, ex));
    snn_module_free(dense);
    snn_module_free(cpa);
    snn_arena_free(&a1);
    snn_arena_free(&a2);
    free(x), free(dy), free(y), free(dx), free(xl), free(dyl), free(yl), free(dxl), free(ref_y), free(ref_dx);
}

/* ---------------- training against the single process ---------------- */

static void opts_for(const char *model, const char *pos, snn_gpt_opts *o) {
    int spiking = !strcmp(model, "spikelm");
    if (!spiking && strcmp(model, "gpt")) {
        fprintf(stderr, "model must be gpt or spikelm\n");
        exit(2);
    }
    *o = snn_gpt_defaults(spiking);
    o->vocab = 96;
    o->context = 32;
    o->seq = 16;
    o->layers = 2;
    o->hidden = 64;
    o->heads = 4;
    o->groups = 4;
    o->ffn = 128;
    o->time_steps = spiking ? 2 : 1;
    if (!strcmp(pos, "rope")) {
        o->pos = SNN_LM_POS_ROPE;
        o->groups = 2; /* GQA */
        o->tied = 0;
        if (!spiking) {
            o->norm = SNN_LM_NORM_RMSNORM;
            o->act = SNN_LM_ACT_SWIGLU;
            o->bias = 0;
        } else {
            o->reduce_sum = 1;
        }
    } else if (strcmp(pos, "learned")) {
        fprintf(stderr, "position must be learned or rope\n");
        exit(2);
    }
}

/* Parameters (grad 0) or gradients (grad 1) of two models, tensor by tensor:
 *   l2      the worst relative L2 distance |a - b| / |b|;
 *   close   the worst |a - b| / (1e-5 |b| + 1e-6 sqrt(n)): the reference's "equal within
 *           rtol 1e-5, atol 1e-6" taken in the L2 norm (<= 1 passes);
 *   all     the relative L2 distance of all tensors together;
 *   kbias   max |a - b| over the key slices of the c_attn biases (left out of the others). */
typedef struct {
    double l2, close, all, elem, kbias;
    const char *name; /* the tensor of the worst `close` */
    int names_ok;
} tensor_cmp;

/* The key slice of a fused q|k|v bias, [heads*hd, (heads+groups)*hd): adding a constant
 * vector to every key shifts all scores of a query row by the same amount, so the loss does
 * not depend on it and its true gradient is exactly 0. What the backward computes there is
 * rounding noise, which AdamW's normalisation turns into updates of up to about lr per
 * step, so two correct runs that merely sum in another order (the single process with other
 * microbatches included) disagree there. It is compared on its own, against that bound. */
static int key_bias(const char *name, size_t j, const snn_gpt_opts *o) {
    const size_t n = strlen(name), k = strlen(".c_attn.bias");
    if (n < k || strcmp(name + n - k, ".c_attn.bias") != 0) return 0;
    const size_t hd = (size_t)(o->hidden / o->heads);
    return j >= (size_t)o->heads * hd && j < (size_t)(o->heads + o->groups) * hd;
}

static tensor_cmp compare(snn_model *a, snn_model *b, int grad, const snn_gpt_opts *o) {
    tensor_cmp c = {0, 0, 0, 0, 0, "", snn_model_num_tensors(a) == snn_model_num_tensors(b)};
    double tn = 0, td = 0;
    for (size_t i = 0; i < snn_model_num_tensors(b) && c.names_ok; i++) {
        snn_tensor_info x, y;
        CHECK(snn_model_tensor(a, i, &x), "tensor");
        CHECK(snn_model_tensor(b, i, &y), "tensor");
        if (strcmp(x.name, y.name) || x.numel != y.numel || x.is_buffer != y.is_buffer) {
            c.names_ok = 0;
            break;
        }
        if (grad && x.is_buffer) continue;
        const float *p = grad ? x.grad : x.data, *q = grad ? y.grad : y.data;
        double num = 0, den = 0, top = 0, dmax = 0;
        size_t n = 0;
        for (size_t j = 0; j < x.numel; j++) {
            double d = (double)p[j] - (double)q[j];
            if (!isfinite(d)) d = INFINITY;
            if (!grad && key_bias(y.name, j, o)) {
                c.kbias = fmax(c.kbias, fabs(d));
                continue;
            }
            num += d * d;
            den += (double)q[j] * q[j];
            top = fmax(top, fabs((double)q[j]));
            dmax = fmax(dmax, fabs(d));
            n++;
        }
        tn += num;
        td += den;
        const double l2 = sqrt(num / (den > 0 ? den : 1.0)), el = dmax / (top > 0 ? top : 1.0);
        const double cl = sqrt(num) / (1e-5 * sqrt(den) + 1e-6 * sqrt((double)n));
        if (getenv("CP_DEBUG") && snn_comm_rank(W) == 0)
            fprintf(stderr, "  %s %-28s relL2 %.3g  close %.3g  elementwise %.3g\n", grad ? "grad " : "param", y.name,
                    l2, cl, el);
        c.l2 = isnan(l2) || l2 > c.l2 ? l2 : c.l2;
        c.elem = isnan(el) || el > c.elem ? el : c.elem;
        if (isnan(cl) || cl > c.close) c.close = cl, c.name = y.name;
    }
    c.all = sqrt(tn / (td > 0 ? td : 1.0));
    return c;
}

/* One step of the single-process oracle, as snn lm train does it: the global batch ids,
 * labels, mask [K][rows][S] in K microbatches of `rows`, loss / global token count,
 * clip 1, the optimizer. */
static double dense_step(snn_model *m, snn_optimizer *opt, const snn_gpt_opts *o, const int32_t *ids,
                         const int32_t *lab, const float *mask, int K, int rows, float *x, float *dl, double *tl) {
    const int S = o->seq, T = o->time_steps, V = o->vocab;
    const size_t per = (size_t)rows * S;
    double count = 0;
    for (size_t i = 0; i < (size_t)K * per; i++) count += mask ? mask[i] : 1.0;
    const float scale = (float)(1.0 / count);
    snn_model_zero_grad(m);
    double ls = 0, cn = 0;
    for (int k = 0; k < K; k++) {
        for (int t = 0; t < T; t++)
            for (size_t i = 0; i < per; i++) x[(size_t)t * per + i] = (float)ids[(size_t)k * per + i];
        const float *y;
        double l, c;
        CHECK(snn_model_forward(m, x, 1, &y), "dense forward");
        CHECK(snn_lm_cross_entropy(y, lab + (size_t)k * per, mask ? mask + (size_t)k * per : NULL, T, rows, S, V,
                                   o->reduce_sum, tl, &l, &c, dl, scale),
              "dense loss");
        CHECK(snn_model_backward(m, dl), "dense backward");
        ls += l;
        cn += c;
    }
    float gn = snn_clip_grad_norm(snn_model_grads(m), snn_model_num_params(m), 1.0f);
    CHECK(snn_optimizer_step(opt, -1.0f, !isfinite(gn)), "dense step");
    return ls / cn;
}

static int train(const char *model, const char *pos, int DP, int steps) {
    const int ws = snn_comm_size(W);
    if (DP <= 0 || ws % DP) {
        fprintf(stderr, "world %d not divisible by DP %d\n", ws, DP);
        return 2;
    }
    const int CP = ws / DP, N = 2, K = 2, NG = DP * N;
    snn_gpt_opts o;
    opts_for(model, pos, &o);
    const int S = o.seq, T = o.time_steps, V = o.vocab;
    const int use_mask = o.pos == SNN_LM_POS_ROPE;
    const uint64_t seed = 77;
    snn_mesh4 mesh;
    CHECK(snn_mesh4_create(W, 1, CP, 1, &mesh), "mesh");
    snn_lm_cp *cpm;
    CHECK(snn_lm_cp_create(&o, seed, mesh.cp_comm, mesh.dpcp_comm, N, &cpm), "CP model");
    /* ref: the oracle; alt: the same single process with twice the microbatches of half
     * the size, to show how far a mere change of summation order moves the result */
    snn_model *m = snn_lm_cp_model(cpm), *ref, *alt;
    CHECK(snn_gpt_create(&o, seed, &ref), "dense model");
    CHECK(snn_model_plan(ref, T, NG), "dense plan");
    CHECK(snn_gpt_create(&o, seed, &alt), "dense model");
    CHECK(snn_model_plan(alt, T, NG / 2), "dense plan");
    const size_t np = snn_model_num_params(ref);
    int same = np == snn_model_num_params(m) && !memcmp(snn_model_params(m), snn_model_params(ref), np * 4);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW); /* lr 1e-3, betas (0.9, 0.999), wd 0.01 */
    snn_optimizer *opt, *ropt, *aopt;
    CHECK(snn_optimizer_create_for_model(&oo, m, &opt), "optimizer");
    CHECK(snn_optimizer_create_for_model(&oo, ref, &ropt), "optimizer");
    CHECK(snn_optimizer_create_for_model(&oo, alt, &aopt), "optimizer");
    const size_t gsz = (size_t)K * NG * S, lsz = (size_t)K * N * S;
    int32_t *ids = malloc(gsz * 4), *lab = malloc(gsz * 4), *lids = malloc(lsz * 4), *llab = malloc(lsz * 4);
    float *mask = malloc(gsz * 4), *lmask = malloc(lsz * 4), *x = malloc((size_t)T * NG * S * 4),
          *dl = malloc((size_t)T * NG * S * V * 4);
    double *tl = malloc((size_t)NG * S * sizeof(double));
    double worst_loss = 0, grad1 = 0, worst_grad = 0;
    char fmt[240];
    for (int step = 0; step < steps; step++) {
        snn_rng rng = snn_rng_make(seed * 1000 + (uint64_t)step, 9); /* the global batch, the same everywhere */
        for (size_t i = 0; i < gsz; i++) {
            ids[i] = (int32_t)snn_rng_next_below(&rng, (uint32_t)V);
            lab[i] = (int32_t)snn_rng_next_below(&rng, (uint32_t)V);
            mask[i] = snn_rng_next_uniform(&rng) < 0.8f ? 1.0f : 0.0f;
        }
        /* this replica's samples: rows dp*N .. dp*N+N-1 of every global microbatch */
        for (int k = 0; k < K; k++) {
            const size_t src = ((size_t)k * NG + (size_t)mesh.dp * N) * S, dst = (size_t)k * N * S;
            memcpy(lids + dst, ids + src, (size_t)N * S * 4);
            memcpy(llab + dst, lab + src, (size_t)N * S * 4);
            memcpy(lmask + dst, mask + src, (size_t)N * S * 4);
        }
        double loss;
        float gn;
        CHECK(snn_lm_cp_train_step(cpm, opt, lids, llab, use_mask ? lmask : NULL, K, -1.0f, 1.0f, &loss, &gn),
              "CP step");
        const float *mk = use_mask ? mask : NULL;
        double rl = dense_step(ref, ropt, &o, ids, lab, mk, K, NG, x, dl, tl);
        dense_step(alt, aopt, &o, ids, lab, mk, 2 * K, NG / 2, x, dl, tl);
        const double e = fabs(loss - rl) / fmax(fabs(rl), 1e-30);
        if (!(e <= 1e-5)) fprintf(stderr, "rank %d step %d: loss %.9g vs %.9g\n", snn_comm_rank(W), step, loss, rl);
        worst_loss = fmax(worst_loss, isfinite(e) ? e : INFINITY);
        /* the (clipped) gradients of this step, before Adam's normalisation amplifies
         * rounding in tiny components */
        tensor_cmp g = compare(m, ref, 1, &o);
        if (step == 0) grad1 = g.names_ok ? g.l2 : INFINITY;
        worst_grad = fmax(worst_grad, g.names_ok ? g.close : INFINITY);
        if (snn_comm_rank(W) == 0 && step == steps - 1)
            printf("     %s %s CP %d DP %d: step %d loss %.7f (single process %.7f), grad norm %.6g\n", model, pos, CP,
                   DP, step + 1, loss, rl, gn);
    }
    snprintf(fmt, sizeof fmt, "%s %s CP %d DP %d: initial parameters equal the dense model's", model, pos, CP, DP);
    verdict(same, fmt, 0);
    snprintf(fmt, sizeof fmt, "%s %s CP %d DP %d: per-step loss over %d AdamW steps, max rel %%.3g", model, pos, CP,
             DP, steps);
    verdict(worst_loss <= 1e-5, fmt, worst_loss);
    /* step 1 starts from the same weights: only the summation order differs; later steps
     * also carry the weights' own rounding differences */
    snprintf(fmt, sizeof fmt, "%s %s CP %d DP %d: gradients of step 1, worst tensor rel L2 %%.3g", model, pos, CP, DP);
    verdict(grad1 <= 1e-5, fmt, grad1);
    snprintf(fmt, sizeof fmt, "%s %s CP %d DP %d: gradients of every step, rtol 1e-5 / atol 1e-6 (L2): worst %%.3g "
             "of the bound", model, pos, CP, DP);
    verdict(worst_grad <= 1.0, fmt, worst_grad);
    tensor_cmp c = compare(m, ref, 0, &o), f = compare(alt, ref, 0, &o);
    snprintf(fmt, sizeof fmt,
             "%s %s CP %d DP %d: all %zu tensors after %d steps: rtol 1e-5 / atol 1e-6 (L2) worst %%.3g of the bound "
             "(%s); rel L2 worst tensor %.3g, all tensors %.3g, element-wise %.3g; the single process against "
             "itself with 2x the microbatches: %.3g of the bound, rel L2 %.3g / %.3g, element-wise %.3g",
             model, pos, CP, DP, snn_model_num_tensors(ref), steps, c.name, c.l2, c.all, c.elem, f.close, f.l2, f.all,
             f.elem);
    verdict(c.names_ok && c.close <= 1.0 && c.all <= 1e-5, fmt, c.names_ok ? c.close : INFINITY);
    if (o.bias) {
        const double bound = 2.0 * oo.lr * steps;
        snprintf(fmt, sizeof fmt,
                 "%s %s CP %d DP %d: key slices of the c_attn biases (no effect on the loss): max |diff| %%.3g <= "
                 "2 lr steps = %.3g (single process against itself: %.3g)",
                 model, pos, CP, DP, bound, f.kbias);
        verdict(c.kbias <= bound, fmt, c.kbias);
    }
    /* the CP replicas themselves: every rank of the world holds the same weights */
    float *p0 = malloc(np * 4);
    memcpy(p0, snn_model_params(m), np * 4);
    CHECK(snn_comm_broadcast(W, p0, np, SNN_COMM_F32, 0), "broadcast");
    snprintf(fmt, sizeof fmt, "%s %s CP %d DP %d: every rank holds rank 0's weights bit for bit", model, pos, CP,
             DP);
    verdict(!memcmp(p0, snn_model_params(m), np * 4), fmt, 0);
    free(p0);
    snn_optimizer_free(opt);
    snn_optimizer_free(ropt);
    snn_optimizer_free(aopt);
    snn_lm_cp_free(cpm);
    snn_model_free(ref);
    snn_model_free(alt);
    snn_mesh4_free(&mesh);
    free(ids), free(lab), free(lids), free(llab), free(mask), free(lmask), free(x), free(dl), free(tl);
    return 0;
}

/* driver_lm_cp bench MODEL SEQ STEPS: this rank's activation arena and the mean wall time of
 * a CP training step (1 warm-up step first) of a 4-layer, hidden-128 model with the world as
 * the CP group; rank 0 prints the maxima over the ranks. Not a test: for docs/lm.md. */
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench(const char *model, int S, int steps) {
    snn_gpt_opts o;
    opts_for(model, "rope", &o);
    o.vocab = 256;
    o.layers = 4;
    o.hidden = 128;
    o.ffn = 512;
    o.context = S;
    o.seq = S;
    const int N = 1, cp = snn_comm_size(W);
    snn_lm_cp *c;
    CHECK(snn_lm_cp_create(&o, 5, W, NULL, N, &c), "CP model");
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    snn_optimizer *opt;
    CHECK(snn_optimizer_create_for_model(&oo, snn_lm_cp_model(c), &opt), "optimizer");
    int32_t *ids = malloc((size_t)N * S * 4), *lab = malloc((size_t)N * S * 4);
    snn_rng rng = snn_rng_make(3, 3);
    for (int i = 0; i < N * S; i++) ids[i] = (int32_t)snn_rng_next_below(&rng, 256), lab[i] = (int32_t)snn_rng_next_below(&rng, 256);
    double loss, first = 0, t = 0;
    for (int s = 0; s <= steps; s++) {
        CHECK(snn_comm_barrier(W), "barrier");
        double t0 = now_s();
        CHECK(snn_lm_cp_train_step(c, opt, ids, lab, NULL, 1, -1.0f, 1.0f, &loss, NULL), "step");
        if (s) t += now_s() - t0;
        else first = loss;
    }
    double v[2] = {t / steps, (double)snn_model_arena_bytes(snn_lm_cp_model(c))};
    CHECK(snn_comm_allreduce(W, v, 2, SNN_COMM_F64, SNN_COMM_MAX), "allreduce");
    if (snn_comm_rank(W) == 0)
        printf("{\"model\":\"%s\",\"seq\":%d,\"cp\":%d,\"T\":%d,\"step_seconds\":%.4f,\"arena_bytes_per_rank\":%.0f,"
               "\"first_loss\":%.7f,\"last_loss\":%.7f}\n", model, S, cp, o.time_steps, v[0], v[1], first, loss);
    snn_optimizer_free(opt);
    snn_lm_cp_free(c);
    free(ids), free(lab);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: driver_lm_cp unit | train MODEL POS DP [STEPS] | bench MODEL SEQ STEPS\n");
        return 2;
    }
    CHECK(snn_comm_init_world(&W), "init");
    int rc = 0;
    if (!strcmp(argv[1], "unit")) {
        check_layout();
        check_mesh();
        const int cp = snn_comm_size(W);
        attn_case(4, 4, 8, 4 * cp * (cp > 1 ? 2 : 1), 2, 2);
        attn_case(4, 2, 8, 16 * cp, 1, 3);
        attn_case(6, 1, 4, 2 * cp * (cp > 1 ? 2 : 1), 2, 1);
        { /* a bad label in one rank's tokens: refused on every rank, and the group still works */
            snn_gpt_opts o;
            opts_for("gpt", "learned", &o);
            o.seq = 4 * cp;
            snn_lm_cp *c;
            CHECK(snn_lm_cp_create(&o, 1, W, NULL, 1, &c), "CP model");
            snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
            snn_optimizer *opt;
            CHECK(snn_optimizer_create_for_model(&oo, snn_lm_cp_model(c), &opt), "optimizer");
            int32_t ids[64], lab[64];
            for (int i = 0; i < o.seq; i++) ids[i] = i % o.vocab, lab[i] = (3 * i + 1) % o.vocab;
            lab[o.seq / (2 * cp) + (cp > 1)] = o.vocab; /* a token of rank 1 when CP > 1 */
            double loss = NAN;
            snn_status st = snn_lm_cp_train_step(c, opt, ids, lab, NULL, 1, -1.0f, 1.0f, &loss, NULL);
            int ok = st != SNN_OK && strstr(snn_last_error(), "vocabulary") != NULL;
            lab[o.seq / (2 * cp) + (cp > 1)] = 0;
            st = snn_lm_cp_train_step(c, opt, ids, lab, NULL, 1, -1.0f, 1.0f, &loss, NULL);
            ok = ok && st == SNN_OK && isfinite(loss);
            verdict(ok, "a label outside the vocabulary is refused on every rank; the next step runs", 0);
            snn_optimizer_free(opt);
            snn_lm_cp_free(c);
        }
        if (cp > 1) { /* the model builder refuses a sequence the layout cannot cut */
            snn_gpt_opts o;
            opts_for("spikelm", "learned", &o);
            o.seq = 2 * cp * 2 + 2;
            snn_lm_cp *c = NULL;
            snn_status st = snn_lm_cp_create(&o, 1, W, NULL, 1, &c);
            const char *e = snn_last_error();
            int ok = st != SNN_OK && !c && strstr(e, "sequence_length") && strstr(e, "context_parallel_size");
            if (snn_comm_rank(W) == 0) printf("     refused: %s\n", e);
            verdict(ok, "snn_lm_cp_create refuses S %% (2 CP) != 0 (S = 4 CP + 2)", 0);
        }
    } else if (!strcmp(argv[1], "bench") && argc >= 5) {
        rc = bench(argv[2], atoi(argv[3]), atoi(argv[4]));
    } else if (!strcmp(argv[1], "train") && argc >= 5) {
        rc = train(argv[2], argv[3], atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 5);
    } else {
        fprintf(stderr, "usage: driver_lm_cp unit | train MODEL POS DP [STEPS] | bench MODEL SEQ STEPS\n");
        rc = 2;
    }
    if (rc == 0 && failures) rc = 1;
    snn_comm_free(W);
    return rc;
}
