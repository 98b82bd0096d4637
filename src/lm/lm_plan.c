/* The language-model memory planner (SpikingJelly's plan_training).
 *
 * A static memory model of a Megatron-style run picks the TP / PP / CP topology and the
 * memory policy. Everything is done in double precision in the order the reference
 * evaluates its expressions (integer parameter counts truncated where it truncates), so
 * the estimates, and therefore the choices and the numbers in the "No topology fits"
 * message, are the reference's bit for bit.
 *
 * Points the reference leaves open, and how they are read here (also in docs/lm.md):
 *  - ffn_hidden_size and kv_channels of 0 mean Megatron Core's 4*hidden and
 *    hidden/heads; the gated linear unit is activation swiglu.
 *  - The PP > 1 activation factor min(1, num_microbatches / PP) is applied, but every
 *    candidate has num_microbatches >= PP, so it is always exactly 1 there (it only acts
 *    through snn_lm_plan_estimate).
 *  - A candidate of the reference's rules that snn's own config validation refuses (TP
 *    larger than num_query_groups but not a multiple of it, or ffn_hidden_size not
 *    divisible by TP: the layers could not be split) is not a candidate here; the count
 *    is reported. The reference would return such a config and fail later.
 *  - Megatron Core's TransformerConfig fields expert_tensor_parallel_size and
 *    microbatch_group_size_per_vp_stage do not exist in snn (no experts, no virtual
 *    stages), so the planner has nothing to set for them.
 *  - Without recompute the reference sets recompute_modules to None, which Megatron
 *    Core normalises to its default ["core_attn"]; snn stores that default (it has no
 *    None), so a planned config and a hand-written one with the same sizes have the same
 *    recipe. The granularity (none) is what switches recompute off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/lm_plan.h"

#define E(...) snn_error(SNN_E_INVALID, __VA_ARGS__)

static const char *const objective_names[] = {"throughput", "memory"};

const char *snn_lm_plan_objective_name(snn_lm_plan_objective o) {
    return (int)o >= 0 && o < SNN_LM_PLAN_OBJECTIVE_COUNT ? objective_names[o] : NULL;
}

int snn_lm_plan_objective_parse(const char *s) {
    for (int i = 0; s && i < SNN_LM_PLAN_OBJECTIVE_COUNT; i++)
        if (!strcmp(s, objective_names[i])) return i;
    return -1;
}

/* ---- static parameter analysis -------------------------------------------------------- */

typedef struct {
    int64_t sharded;    /* attention + mlp of one layer: divided by TP */
    int64_t replicated; /* the two norms of one layer */
    int64_t final_norm, word, position, output;
} analysis;

static int mul3(int64_t a, int64_t b, int64_t c, int64_t *r) {
    int64_t ab;
    return !__builtin_mul_overflow(a, b, &ab) && !__builtin_mul_overflow(ab, c, r) && *r <= ((int64_t)1 << 62);
}

static snn_status analyze(const snn_lm_training_config *c, analysis *a) {
    const snn_lm_transformer_config *t = &c->model.transformer;
    int64_t h = t->hidden_size, heads = t->num_attention_heads;
    int64_t g = snn_lm_transformer_query_groups(t), f = snn_lm_transformer_ffn(t);
    int64_t q = (int64_t)snn_lm_transformer_kv_channels(t) * heads; /* query projection width */
    int64_t hq, hf, hv, hs;
    if (!mul3(2, h, q, &hq) || !mul3(2, h, f, &hf) || !mul3(1, h, c->model.vocab_size, &hv) ||
        !mul3(1, h, c->model.max_sequence_length, &hs))
        return E("the model is too large for the memory planner (parameter counts overflow)");
    /* Q and the output projection are h*q each; K and V are h*q*g/heads each. */
    int64_t attention = (int64_t)((double)hq * (1.0 + (double)g / (double)heads));
    int64_t mlp = t->activation == SNN_LM_ACT_SWIGLU ? (int64_t)((double)hf * 1.5) : hf;
    int64_t norm = 2 * h * (t->normalization == SNN_LM_NORM_RMSNORM ? 1 : 2);
    a->sharded = attention + mlp;
    a->replicated = norm;
    a->final_norm = norm / 2;
    a->word = a->output = hv;
    a->position = c->model.position_embedding_type == SNN_LM_POS_LEARNED_ABSOLUTE ? hs : 0;
    return SNN_OK;
}

/* Weights, gradients and optimizer state of the largest pipeline stage. Bytes per
 * parameter with the optimizer state sharded over d = DP*CP ranks (mixed precision keeps
 * FP32 master weights and Adam moments). */
static double parameter_bytes(const snn_lm_training_config *c, const analysis *a, int tp, int pp, int64_t d) {
    const snn_lm_transformer_config *t = &c->model.transformer;
    double dd = (double)d;
    double per_param = t->fp16 ? 4.0 + 16.0 / dd : t->bf16 ? 6.0 + 12.0 / dd : 8.0 + 8.0 / dd;
    double layers_per_stage = (double)t->num_layers / (double)pp;
    double p = (double)a->sharded * layers_per_stage / (double)tp + (double)a->replicated * layers_per_stage;
    double input_stage = (double)a->word / (double)tp + (double)a->position;
    if (pp == 1) {
        p += input_stage + (double)a->final_norm;
        if (!c->model.share_embeddings_and_output_weights) p += (double)a->output / (double)tp;
    } else {
        double output_stage = (double)a->output / (double)tp + (double)a->final_norm;
        p += input_stage >= output_stage ? input_stage : output_stage;
    }
    return p * per_param;
}

/* Activations of one microbatch in flight on a stage: s tokens per CP rank, b = micro*T
 * folded batch rows. Selective recompute keeps the per-layer terms sharded by TP; the
 * full form keeps 10 unsharded and 24/TP sharded bytes per element and layer. */
static double activation_bytes(const snn_lm_training_config *c, int tp, int pp, int cp, int64_t nmb, int selective) {
    const snn_lm_transformer_config *t = &c->model.transformer;
    double s = (double)c->sequence_length / (double)cp;
    double b = (double)(c->micro_batch_size * c->model.time_steps);
    double h = (double)t->hidden_size, L = (double)t->num_layers, V = (double)c->model.vocab_size;
    double f4 = (double)(4 * (int64_t)snn_lm_transformer_ffn(t));
    double act;
    if (selective) act = s * b * h * (18.0 + f4 / h) * L / (double)tp;
    else act = s * b * h * (10.0 + 24.0 / (double)tp) * L;
    act += 8.0 * s * b * (double)pp;
    act += s * b * h * (double)pp;
    if (pp > 1) {
        double frac = (double)nmb / (double)pp;
        act *= frac < 1.0 ? frac : 1.0;
    } else if (selective) {
        act += s * b * h * 4.0 * (1.0 + V / h); /* the logits of the only stage */
    } else {
        act += (s * b * V / (double)tp + s * b * h) * 2.0;
    }
    if (!selective) act *= 1.05;
    return act * (t->params_dtype == SNN_LM_DTYPE_FLOAT32 ? 2.0 : 1.0);
}

snn_status snn_lm_plan_estimate(const snn_lm_training_config *c, int tp, int pp, int cp, int dp, int selective,
                                double *param_out, double *act_out) {
    if (!c) return E("TrainingConfig is NULL");
    if (tp < 1 || pp < 1 || cp < 1 || dp < 1) return E("tp, pp, cp and dp must be >= 1 (got %d, %d, %d, %d)", tp, pp, cp, dp);
    SNN_TRY(snn_lm_training_config_validate(c));
    int64_t spm = c->micro_batch_size * dp;
    if (c->global_batch_size % spm != 0)
        return E("global_batch_size (%lld) must be divisible by micro_batch_size*data_parallel_size (%lld*%d)",
                 (long long)c->global_batch_size, (long long)c->micro_batch_size, dp);
    analysis a;
    SNN_TRY(analyze(c, &a));
    if (param_out) *param_out = parameter_bytes(c, &a, tp, pp, (int64_t)dp * cp);
    if (act_out) *act_out = activation_bytes(c, tp, pp, cp, c->global_batch_size / spm, selective != 0);
    return SNN_OK;
}

/* ---- candidates --------------------------------------------------------------------------- */

typedef struct {
    int tp, pp, cp, dp;
    int64_t nmb;
} topology;

/* The config a candidate would return. */
static void candidate_config(const snn_lm_training_config *src, const topology *k, int selective,
                             snn_lm_plan_objective obj, snn_lm_training_config *out) {
    *out = *src;
    snn_lm_transformer_config *t = &out->model.transformer;
    t->tensor_model_parallel_size = k->tp;
    t->pipeline_model_parallel_size = k->pp;
    t->context_parallel_size = k->cp;
    t->sequence_parallel = k->tp > 1;
    if (k->pp > 1) t->pipeline_dtype = t->params_dtype;
    t->recompute_granularity = selective ? SNN_LM_RECOMPUTE_SELECTIVE : SNN_LM_RECOMPUTE_NONE;
    t->recompute_method = SNN_LM_RECOMPUTE_METHOD_NONE;
    t->recompute_num_layers = 0;
    t->recompute_modules = SNN_LM_RECOMPUTE_CORE_ATTN;
    out->use_snn_memopt = src->use_snn_memopt || obj == SNN_LM_PLAN_MEMORY || selective;
}

/* Ascending divisors of n (at most 1600 for an int). */
static int divisors(int n, int *d) {
    int lo = 0, hi = 0, high[1600];
    for (int i = 1; (int64_t)i * i <= n; i++)
        if (n % i == 0) {
            d[lo++] = i;
            if (i != n / i) high[hi++] = n / i;
        }
    while (hi > 0) d[lo++] = high[--hi];
    return lo;
}

static snn_status collect(const snn_lm_training_config *src, int world, snn_lm_plan_objective obj, topology **out,
                          int *count, int *refused, char *refusal, size_t refusal_size) {
    const snn_lm_transformer_config *t = &src->model.transformer;
    int *dw = malloc(1600 * sizeof *dw);
    if (!dw) return snn_error(SNN_E_NOMEM, "memory planner: out of memory");
    int nd = divisors(world, dw), n = 0, cap = 0;
    int g = snn_lm_transformer_query_groups(t);
    topology *list = NULL;
    snn_lm_training_config *cand = malloc(sizeof *cand);
    if (!cand) { free(dw); return snn_error(SNN_E_NOMEM, "memory planner: out of memory"); }
    *refused = 0;
    for (int i = 0; i < nd; i++) {
        int tp = dw[i];
        if (t->num_attention_heads % tp) continue;
        if ((g > tp ? g : tp) % (g < tp ? g : tp)) continue;
        int rest_tp = world / tp;
        for (int j = 0; j < nd && dw[j] <= rest_tp; j++) {
            int pp = dw[j];
            if (rest_tp % pp || t->num_layers % pp) continue;
            int rest = rest_tp / pp;
            for (int k = 0; k < nd && dw[k] <= rest; k++) {
                int cp = dw[k];
                if (rest % cp) continue;
                int dp = rest / cp;
                if (cp > 1 && src->sequence_length % (2 * (int64_t)cp)) continue;
                int64_t spm = src->micro_batch_size * dp;
                if (src->global_batch_size % spm) continue;
                int64_t nmb = src->global_batch_size / spm;
                if (nmb < pp) continue;
                topology top = {tp, pp, cp, dp, nmb};
                candidate_config(src, &top, 0, obj, cand);
                if (snn_lm_training_config_validate(cand) != SNN_OK) {
                    if (++*refused == 1) snprintf(refusal, refusal_size, "%s", snn_last_error());
                    continue;
                }
                if (n == cap) {
                    int nc = cap ? (cap < (1 << 28) ? 2 * cap : 0) : 64;
                    topology *nl = nc ? realloc(list, (size_t)nc * sizeof *nl) : NULL;
                    if (!nl) {
                        free(list); free(dw); free(cand);
                        return snn_error(SNN_E_NOMEM, "memory planner: out of memory");
                    }
                    list = nl;
                    cap = nc;
                }
                list[n++] = top;
            }
        }
    }
    free(dw);
    free(cand);
    snn_clear_error();
    *out = list;
    *count = n;
    return SNN_OK;
}

/* Is candidate x (estimate ex) preferred to y (ey)? Throughput: fewest pipeline stages,
 * then context parallel, then tensor parallel, then the estimate; memory: the estimate,
 * then PP, CP, TP. */
static int better(snn_lm_plan_objective obj, const topology *x, double ex, const topology *y, double ey) {
    double kx[4], ky[4];
    if (obj == SNN_LM_PLAN_THROUGHPUT) {
        kx[0] = x->pp; kx[1] = x->cp; kx[2] = x->tp; kx[3] = ex;
        ky[0] = y->pp; ky[1] = y->cp; ky[2] = y->tp; ky[3] = ey;
    } else {
        kx[0] = ex; kx[1] = x->pp; kx[2] = x->cp; kx[3] = x->tp;
        ky[0] = ey; ky[1] = y->pp; ky[2] = y->cp; ky[3] = y->tp;
    }
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i];
    return 0;
}

snn_status snn_lm_plan_training(const snn_lm_training_config *in, int world_size, uint64_t device_memory_bytes,
                                snn_lm_plan_objective obj, double memory_fraction, snn_lm_training_config *out,
                                snn_lm_plan_report *rep) {
    snn_lm_plan_report r;
    memset(&r, 0, sizeof r);
    if (rep) *rep = r;
    if (!in || !out) return E("memory planner: the input and output configs must not be NULL");
    if (world_size <= 0 || device_memory_bytes == 0)
        return E("world_size and device_memory_bytes must be positive.");
    if ((int)obj < 0 || obj >= SNN_LM_PLAN_OBJECTIVE_COUNT) return E("objective must be 'throughput' or 'memory'.");
    if (!(memory_fraction > 0 && memory_fraction <= 1)) return E("memory_fraction must be in (0, 1].");
    /* the input is read from a private copy, so out may alias it */
    snn_lm_training_config *src = malloc(2 * sizeof *src);
    if (!src) return snn_error(SNN_E_NOMEM, "memory planner: out of memory");
    snn_lm_training_config *best_cfg = src + 1;
    *src = *in;
    snn_status st = snn_lm_training_config_validate(src);
    analysis a;
    if (st == SNN_OK) st = analyze(src, &a);
    topology *list = NULL;
    int n = 0;
    char refusal[256] = "";
    if (st == SNN_OK) st = collect(src, world_size, obj, &list, &n, &r.refused_by_validation, refusal, sizeof refusal);
    if (st != SNN_OK) { free(src); return st; }
    r.topologies = n;
    if (n == 0) {
        free(src);
        if (rep) *rep = r;
        if (r.refused_by_validation)
            return E("No topology satisfies the model and batch constraints. (The config validation refuses all %d "
                     "topologies the rules allow, e.g.: %s)", r.refused_by_validation, refusal);
        return E("No topology satisfies the model and batch constraints.");
    }
    const snn_lm_transformer_config *t = &src->model.transformer;
    double budget = (double)device_memory_bytes * memory_fraction;
    double smallest = INFINITY;
    int chosen = -1, chosen_sel = 0;
    double chosen_p = 0, chosen_a = 0;
    for (int sel = 0; sel <= 1 && chosen < 0; sel++) {
        int feasible = 0;
        for (int i = 0; i < n; i++) {
            const topology *k = &list[i];
            if (sel && (t->fp8 != SNN_LM_FP8_NONE || k->cp > 1)) continue; /* FP8 savings never assumed */
            double p = parameter_bytes(src, &a, k->tp, k->pp, (int64_t)k->dp * k->cp);
            double ac = activation_bytes(src, k->tp, k->pp, k->cp, k->nmb, sel);
            double est = p + ac;
            r.estimates++;
            if (est < smallest) smallest = est;
            if (!(est <= budget)) continue;
            feasible++;
            if (chosen < 0 || better(obj, k, est, &list[chosen], chosen_p + chosen_a)) {
                chosen = i;
                chosen_sel = sel;
                chosen_p = p;
                chosen_a = ac;
            }
        }
        r.feasible = feasible;
    }
    r.budget_bytes = budget;
    r.smallest_estimate_bytes = smallest;
    if (chosen < 0) {
        free(list);
        free(src);
        if (rep) *rep = r;
        /* the reference prints int() of both: truncated toward zero */
        return E("No topology fits the memory budget: budget=%.0f bytes, smallest estimate=%.0f bytes.", trunc(budget),
                 trunc(smallest));
    }
    const topology *k = &list[chosen];
    candidate_config(src, k, chosen_sel, obj, best_cfg);
    st = snn_lm_training_config_validate(best_cfg);
    if (st != SNN_OK) {
        free(list);
        free(src);
        return snn_error_prefix(st, "the planned config");
    }
    r.tensor_parallel_size = k->tp;
    r.pipeline_parallel_size = k->pp;
    r.context_parallel_size = k->cp;
    r.data_parallel_size = k->dp;
    r.num_microbatches = k->nmb;
    r.selective_recompute = chosen_sel;
    r.use_snn_memopt = best_cfg->use_snn_memopt;
    r.parameter_bytes = chosen_p;
    r.activation_bytes = chosen_a;
    r.estimate_bytes = chosen_p + chosen_a;
    *out = *best_cfg;
    if (rep) *rep = r;
    free(list);
    free(src);
    return SNN_OK;
}
