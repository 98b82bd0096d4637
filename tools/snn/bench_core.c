/* snn bench: the workload runner (linear and fcsnn) with SpikingJelly's trial discipline,
 * the per-precision aggregation and the FP8 efficiency assessment. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "snn/loss.h"
#include "snn/mlp.h"
#include "snn/optim.h"

const char *const bench_metric_names[BM_COUNT] = {
    "preparation_ms", "training_ms", "training_samples_per_sec", "training_peak_allocated_mb",
    "training_peak_rss_delta_mb", "inference_ms", "inference_samples_per_sec",
    "inference_peak_allocated_mb", "inference_peak_rss_delta_mb", "parameter_update_max_abs",
    "output_checksum", "forward_ms", "loss_ms", "backward_optimizer_ms", "optimizer_ms",
    "backward_ms", "final_loss", "training_cpu_ms", "inference_cpu_ms"};

snn_status bench_build(const bench_workload *w, snn_model **out) {
    if (w->kind == BENCH_LINEAR) return snn_mlp_create(w->in, w->width, w->depth, w->classes, w->seed, out);
    /* The reference's DeepFCSNN has depth - 1 [Linear -> LIF] blocks and an output Linear;
     * snn_fcsnn_opts.depth counts the blocks. */
    snn_fcsnn_opts o = {.in_features = w->in, .hidden = w->width, .depth = w->depth - 1,
                        .classes = w->classes, .tau = w->tau};
    return snn_fcsnn_create(&o, w->seed, out);
}

/* CPU time of the whole process (all threads). Next to the wall time it shows how much of a
 * step the process actually ran: on a shared machine wall >> cpu / threads. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double mb(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* From the counts only: snn_optimizer_state would download a device optimizer's state (a host
 * copy for checkpoints) and make the next step upload it again, inside the timed optimizer
 * steps below. */
static size_t optimizer_state_bytes(snn_optimizer *o) {
    return snn_optimizer_num_states(o) * snn_optimizer_numel(o) * sizeof(float);
}

/* Operand copies of converted modules and the scaled dL/dy of fp16 (src/precision). */
static size_t precision_bytes(const snn_precision *p) { return snn_precision_scratch_bytes(p); }

static void die_run(snn_status st, const bench_result *r, const char *what) {
    char buf[160];
    snprintf(buf, sizeof buf, "bench %s (%s)", what, r->name);
    die_status(st, buf);
}

/* Spike rates of the last forward (untimed, after the loop): one entry per neuron layer. */
static void record_rates(snn_model *m, bench_result *r, double *out) {
    snn_spike_rate sr[BENCH_MAX_RATES];
    int n = 0;
    snn_status st = snn_model_spike_rates(m, sr, BENCH_MAX_RATES, &n);
    if (st != SNN_OK) die_run(st, r, "reading the spike rates");
    if (n > BENCH_MAX_RATES) n = BENCH_MAX_RATES;
    r->n_rates = n;
    for (int i = 0; i < n; i++) {
        snprintf(r->rate_names[i], sizeof r->rate_names[i], "%s", sr[i].name);
        snprintf(r->rate_kinds[i], sizeof r->rate_kinds[i], "%s", sr[i].kind);
        out[i] = sr[i].rate;
    }
}

/* The FP8 recipe the library resolved for this run (its report's policy), for the
 * hand-built reference: `auto` then means there what it means in snn train. */
static snn_fp8_recipe resolved_recipe(const bench_result *r) {
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(r->report, "policy");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(pol, "resolved_fp8_recipe");
    for (int i = 0; cJSON_IsString(rec) && i < SNN_FP8_RECIPE_COUNT; i++)
        if (!strcmp(rec->valuestring, snn_fp8_recipe_name((snn_fp8_recipe)i))) return (snn_fp8_recipe)i;
    return r->cfg.fp8_recipe;
}

/* One (trial, precision) run: fresh model from the base state, untimed prepare, SGD,
 * warm-up, timed training, timed inference, checks. */
static void run_one(bench_suite *s, bench_result *r, bench_trial *t) {
    const bench_workload *w = &s->w;
    size_t rss0 = bench_rss_bytes();
    bench_rss_reset_peak();
    snn_model *m = NULL;
    snn_status st = bench_build(w, &m);
    if (st != SNN_OK) die_run(st, r, "building the model");
    size_t np = snn_model_num_params(m), nb = snn_model_num_buffers(m);
    if (np != s->n_params || nb != s->n_buffers) die_run(SNN_E_INVALID, r, "model size differs from the base model");
    memcpy(snn_model_params(m), s->base_params, np * sizeof(float));
    if (nb) memcpy(snn_model_buffers(m), s->base_buffers, nb * sizeof(float));

    /* device -> prepare -> optimizer, as snn train does: on a GPU the model runs on the one
     * engine (the op table), the same loop as on the CPU. Placement and preparation are
     * timed but not part of the throughput. */
    char dev[32];
    bench_device_name(s->cuda_device, dev, sizeof dev);
    double t0 = now_seconds();
    if (s->cuda_device >= 0 && (st = snn_model_to(m, dev)) != SNN_OK) die_run(st, r, "placing the model on the GPU");
    snn_precision *p = NULL;
    st = snn_prepare_model_for_precision(m, dev, &r->cfg, &p);
    t->v[BM_PREP_MS] = (now_seconds() - t0) * 1e3;
    if (st != SNN_OK) die_run(st, r, "preparing the precision");
    st = snn_model_plan(m, w->T, w->N);
    if (st != SNN_OK) die_run(st, r, "planning activations");
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = w->lr;
    oo.momentum = w->momentum;
    snn_optimizer *opt = NULL;
    st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st != SNN_OK) die_run(st, r, "creating the optimizer");

    int T = w->T, N = w->N, C = (int)snn_model_output_numel(m);
    size_t ny = (size_t)T * N * C;
    float *snap = malloc(np * sizeof(float));
    float *dy = malloc(ny * sizeof(float));
    if (!snap || !dy) die_run(SNN_E_NOMEM, r, "allocating");
    memcpy(snap, snn_model_params(m), np * sizeof(float));

    int finite = 1;
    float loss = NAN;
    double fwd = 0, lossd = 0, bo = 0;
    const float *y = NULL;
    /* the batch waits in the model's input buffer, as snn train's loop encodes it there
     * (page-locked on a device) */
    float *xin = snn_model_input_buffer(m);
    if (!xin) die_run(SNN_E_STATE, r, "the model's input buffer");
    memcpy(xin, s->x, (size_t)T * N * snn_model_input_numel(m) * sizeof(float));
    for (int phase = 0; phase < 2; phase++) {
        int steps = phase ? w->training_steps : w->warmup;
        double tl0 = now_seconds(), c0 = cpu_seconds();
        for (int i = 0; i < steps; i++) {
            double a = now_seconds();
            st = snn_model_forward(m, xin, 1, &y);
            if (st != SNN_OK) die_run(st, r, "training forward");
            double b = now_seconds();
            st = snn_loss_cross_entropy_mean_t(y, s->y, T, N, C, &loss, dy, NULL);
            if (st != SNN_OK) die_run(st, r, "loss");
            double c = now_seconds();
            st = snn_precision_backward(p, dy, opt, -1.0f, 0.0f, NULL, NULL);
            if (st != SNN_OK) die_run(st, r, "backward");
            double d = now_seconds();
            finite &= isfinite(loss) != 0;
            if (phase) {
                fwd += b - a;
                lossd += c - b;
                bo += d - c;
            }
        }
        if (phase) {
            double sec = now_seconds() - tl0;
            t->v[BM_TRAIN_MS] = sec * 1e3 / steps;
            t->v[BM_TRAIN_CPU_MS] = (cpu_seconds() - c0) * 1e3 / steps;
            t->v[BM_TRAIN_SPS] = (double)N * steps / sec;
        }
    }
    record_rates(m, r, t->rate_train);
    int ts = w->training_steps;
    t->v[BM_FWD_MS] = fwd * 1e3 / ts;
    t->v[BM_LOSS_MS] = lossd * 1e3 / ts;
    t->v[BM_BWDOPT_MS] = bo * 1e3 / ts;
    t->v[BM_FINAL_LOSS] = loss;
    t->loss_finite = finite;
    double upd = 0;
    const float *pm = snn_model_params(m);
    for (size_t i = 0; i < np; i++) {
        double d = fabs((double)pm[i] - (double)snap[i]);
        if (!(d <= upd)) upd = d; /* NaN propagates */
    }
    t->v[BM_UPDATE] = upd;
    size_t arena = snn_model_arena_bytes(m), pb = precision_bytes(p);
    t->v[BM_TRAIN_ALLOC_MB] = mb((2 * np + nb) * sizeof(float) + optimizer_state_bytes(opt) + arena + pb);
    size_t peak = bench_rss_peak_bytes();
    t->v[BM_TRAIN_RSS_MB] = peak > rss0 ? mb(peak - rss0) : 0;

    /* inference: eval mode, same fixed batch (the probe batch of the checksum) */
    snn_model_zero_grad(m);
    bench_rss_reset_peak();
    for (int phase = 0; phase < 2; phase++) {
        int steps = phase ? w->inference_steps : w->warmup;
        double tl0 = now_seconds(), c0 = cpu_seconds();
        for (int i = 0; i < steps; i++) {
            st = snn_model_forward(m, xin, 0, &y);
            if (st != SNN_OK) die_run(st, r, "inference forward");
        }
        if (phase) {
            double sec = now_seconds() - tl0;
            t->v[BM_INFER_MS] = sec * 1e3 / steps;
            t->v[BM_INFER_CPU_MS] = (cpu_seconds() - c0) * 1e3 / steps;
            t->v[BM_INFER_SPS] = (double)N * steps / sec;
        }
    }
    record_rates(m, r, t->rate_infer);
    double sum = 0;
    int ofin = 1;
    for (size_t i = 0; i < ny; i++) {
        ofin &= isfinite(y[i]) != 0;
        sum += y[i];
    }
    t->output_finite = ofin;
    t->v[BM_CHECKSUM] = sum;
    t->v[BM_INFER_ALLOC_MB] = mb((np + nb) * sizeof(float) + arena + pb);
    peak = bench_rss_peak_bytes();
    t->v[BM_INFER_RSS_MB] = peak > rss0 ? mb(peak - rss0) : 0;

    /* The optimizer alone, for the backward/optimizer split: the same SGD update with
     * lr = 0 (same arithmetic, parameters unchanged), after the checksum was taken. */
    t0 = now_seconds();
    for (int i = 0; i < ts; i++) {
        st = snn_optimizer_step(opt, 0.0f, 0);
        if (st != SNN_OK) die_run(st, r, "optimizer timing");
    }
    t->v[BM_OPT_MS] = (now_seconds() - t0) * 1e3 / ts;
    t->v[BM_BWD_MS] = t->v[BM_BWDOPT_MS] - t->v[BM_OPT_MS];

    cJSON_Delete(r->report);
    r->report = cJSON_Parse(snn_precision_describe(p));
    free(snap);
    free(dy);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);
}

static void fail(bench_suite *s, const char *fmt, const char *name, int trial) {
    char buf[256];
    snprintf(buf, sizeof buf, fmt, name, trial);
    cJSON_AddItemToArray(s->failures, cJSON_CreateString(buf));
}

/* --device cuda: where each Linear's weight and bias sit in the flat base parameters
 * (tensors come in model order; only the Linear layers have parameters). */
static void linear_offsets(bench_suite *s, const snn_model *base) {
    const bench_workload *w = &s->w;
    s->n_layers = 0;
    s->layer_w = calloc((size_t)w->depth, sizeof(size_t));
    s->layer_b = calloc((size_t)w->depth, sizeof(size_t));
    if (!s->layer_w || !s->layer_b) die_status(SNN_E_NOMEM, "allocating");
    const float *p0 = snn_model_params((snn_model *)base);
    size_t nt = snn_model_num_tensors(base);
    for (size_t i = 0; i < nt; i++) {
        snn_tensor_info ti;
        if (snn_model_tensor(base, i, &ti) != SNN_OK || ti.is_buffer) continue;
        int l = s->n_layers;
        int in = l == 0 ? w->in : w->width, out = l == w->depth - 1 ? w->classes : w->width;
        size_t len = strlen(ti.name);
        if (l < w->depth && len > 7 && !strcmp(ti.name + len - 7, ".weight") && ti.rank == 2 && ti.shape[0] == out &&
            ti.shape[1] == in) {
            s->layer_w[l] = (size_t)(ti.data - p0);
        } else if (l < w->depth && len > 5 && !strcmp(ti.name + len - 5, ".bias") && ti.rank == 1 &&
                   ti.shape[0] == out) {
            s->layer_b[l] = (size_t)(ti.data - p0);
            s->n_layers++;
        } else {
            die_status(SNN_E_INVALID, "bench: the model's parameters are not the Linear stack the GPU workload expects");
        }
    }
    if (s->n_layers != w->depth) die_status(SNN_E_INVALID, "bench: the model has a different number of Linear layers");
}

/* --device cuda: the hand-built network of the same workload right after the engine's run
 * of this (trial, precision), with the recipe the engine resolved; skipped (with the
 * reason) where it does not implement the workload. */
static void run_reference(bench_suite *s, bench_result *r, int trial) {
    if (r->ref_skipped[0]) return;
    snn_fp8_recipe rec = resolved_recipe(r);
    if (!r->ref_trials) {
        if (!bench_cuda_reference_supported(s, r, rec, r->ref_skipped, sizeof r->ref_skipped)) {
            if (!r->ref_skipped[0]) snprintf(r->ref_skipped, sizeof r->ref_skipped, "not implemented");
            return;
        }
        r->ref_trials = calloc((size_t)r->n, sizeof(bench_trial));
        if (!r->ref_trials) die_status(SNN_E_NOMEM, "allocating results");
    }
    bench_trial *t = &r->ref_trials[trial];
    t->trial = trial;
    t->position = r->trials[trial].position;
    bench_cuda_run_reference(s, r, rec, t, &r->ref_report);
    if (!s->quiet)
        fprintf(stderr, "trial %d/%d %-5s hand-built reference: train %10.1f samples/s  infer %10.1f samples/s\n",
                trial + 1, s->trials, r->name, t->v[BM_TRAIN_SPS], t->v[BM_INFER_SPS]);
}

void bench_suite_run(bench_suite *s) {
    const bench_workload *w = &s->w;
    snn_model *base = NULL;
    snn_status st = bench_build(w, &base);
    if (st != SNN_OK) die_status(st, "building the model");
    if (s->cuda_device >= 0) linear_offsets(s, base);
    s->n_params = snn_model_num_params(base);
    s->n_buffers = snn_model_num_buffers(base);
    s->base_params = malloc(s->n_params * sizeof(float));
    s->base_buffers = malloc((s->n_buffers ? s->n_buffers : 1) * sizeof(float));
    size_t nx = (size_t)w->T * w->N * (size_t)w->in;
    s->x = malloc(nx * sizeof(float));
    s->y = malloc((size_t)w->N * sizeof(int32_t));
    if (!s->base_params || !s->base_buffers || !s->x || !s->y) die_status(SNN_E_NOMEM, "allocating the inputs");
    memcpy(s->base_params, snn_model_params(base), s->n_params * sizeof(float));
    if (s->n_buffers) memcpy(s->base_buffers, snn_model_buffers(base), s->n_buffers * sizeof(float));
    snn_model_free(base);
    snn_rng rx = snn_rng_make(w->seed, 0xBE7C400000000001ull), ry = snn_rng_make(w->seed, 0xBE7C400000000002ull);
    for (size_t i = 0; i < nx; i++) s->x[i] = snn_rng_next_normal(&rx);
    for (int i = 0; i < w->N; i++) s->y[i] = (int32_t)snn_rng_next_below(&ry, (uint32_t)w->classes);

    for (int trial = 0; trial < s->trials; trial++) {
        for (int k = 0; k < s->P; k++) {
            int idx = (trial + k) % s->P; /* trial i starts at precision i mod P */
            bench_result *r = &s->res[idx];
            bench_trial *t = &r->trials[trial];
            t->trial = trial;
            t->position = k;
            run_one(s, r, t);
            if (s->cuda_device >= 0) run_reference(s, r, trial);
            if (!s->quiet)
                fprintf(stderr, "trial %d/%d %-5s train %10.1f samples/s  infer %10.1f samples/s  loss %.4f\n",
                        trial + 1, s->trials, r->name, t->v[BM_TRAIN_SPS], t->v[BM_INFER_SPS], t->v[BM_FINAL_LOSS]);
            if (!t->loss_finite) fail(s, "%s trial %d: non-finite training loss", r->name, trial);
            if (!t->output_finite) fail(s, "%s trial %d: non-finite inference output", r->name, trial);
            if (!(t->v[BM_UPDATE] > 0) || !isfinite(t->v[BM_UPDATE]))
                fail(s, "%s trial %d: training did not change the parameters (parameter_update_max_abs is 0 or not finite)",
                     r->name, trial);
        }
    }
}

void bench_suite_free(bench_suite *s) {
    for (int i = 0; i < s->P; i++) {
        free(s->res[i].trials);
        free(s->res[i].ref_trials);
        cJSON_Delete(s->res[i].ref_report);
        cJSON_Delete(s->res[i].report);
        cJSON_Delete(s->res[i].converge);
    }
    free(s->res);
    free(s->x);
    free(s->y);
    free(s->base_params);
    free(s->base_buffers);
    free(s->layer_w);
    free(s->layer_b);
    cJSON_Delete(s->failures);
    cJSON_Delete(s->metadata);
}

static double trials_pct(const bench_trial *tr, int n, int metric, double q) {
    double v[1000];
    if (n > 1000) n = 1000;
    for (int i = 0; i < n; i++) v[i] = tr[i].v[metric];
    return bench_percentile(v, n, q);
}

static double metric_pct(const bench_result *r, int metric, double q) { return trials_pct(r->trials, r->n, metric, q); }

static double rate_median(const bench_result *r, int layer, int infer) {
    double v[1000];
    int n = r->n < 1000 ? r->n : 1000;
    for (int i = 0; i < n; i++) v[i] = infer ? r->trials[i].rate_infer[layer] : r->trials[i].rate_train[layer];
    return bench_percentile(v, n, 0.5);
}

static cJSON *rate_array(const bench_result *r, const double *v) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < r->n_rates; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* cJSON writes NaN as null, which is what a rate that is not available should read as. */
static cJSON *spike_rates_json(const bench_result *r) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < r->n_rates; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "module", r->rate_names[i]);
        cJSON_AddStringToObject(e, "kind", r->rate_kinds[i]);
        cJSON_AddNumberToObject(e, "training", rate_median(r, i, 0));
        cJSON_AddNumberToObject(e, "inference", rate_median(r, i, 1));
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

/* The hand-built network's figures, labelled as a reference, with the ratios engine /
 * hand-built of the medians (throughput: > 1 means the engine is faster). */
static cJSON *reference_json(const bench_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "what", "the hand-built GPU network of this workload (src/backend/cuda/cuda_bench_*.cu, "
                                       "CUDA graphs, CUDA-event timing): a reference while it exists, not the product");
    if (!r->ref_trials) {
        cJSON_AddBoolToObject(o, "ran", 0);
        cJSON_AddStringToObject(o, "skipped", r->ref_skipped[0] ? r->ref_skipped : "not run");
        return o;
    }
    cJSON_AddBoolToObject(o, "ran", 1);
    static const int keys[] = {BM_PREP_MS, BM_TRAIN_MS, BM_TRAIN_SPS, BM_INFER_MS, BM_INFER_SPS, BM_TRAIN_ALLOC_MB,
                               BM_INFER_ALLOC_MB, BM_FWD_MS, BM_LOSS_MS, BM_BWDOPT_MS, BM_OPT_MS, BM_BWD_MS,
                               BM_UPDATE, BM_CHECKSUM, BM_FINAL_LOSS};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        cJSON_AddNumberToObject(o, bench_metric_names[keys[k]], trials_pct(r->ref_trials, r->n, keys[k], 0.5));
    double ets = metric_pct(r, BM_TRAIN_SPS, .5), eis = metric_pct(r, BM_INFER_SPS, .5);
    cJSON_AddNumberToObject(o, "engine_over_hand_built_training", ets / trials_pct(r->ref_trials, r->n, BM_TRAIN_SPS, .5));
    cJSON_AddNumberToObject(o, "engine_over_hand_built_inference", eis / trials_pct(r->ref_trials, r->n, BM_INFER_SPS, .5));
    cJSON *arr = cJSON_AddArrayToObject(o, "trials");
    for (int i = 0; i < r->n; i++) {
        const bench_trial *t = &r->ref_trials[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "trial", t->trial);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            cJSON_AddNumberToObject(e, bench_metric_names[keys[k]], t->v[keys[k]]);
        cJSON_AddBoolToObject(e, "loss_finite", t->loss_finite);
        cJSON_AddBoolToObject(e, "output_finite", t->output_finite);
        cJSON_AddItemToArray(arr, e);
    }
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(r->ref_report, "policy");
    if (pol) cJSON_AddItemToObject(o, "policy", cJSON_Duplicate(pol, 1));
    const cJSON *cap = cJSON_GetObjectItemCaseSensitive(r->ref_report, "capability_report");
    if (cap) cJSON_AddItemToObject(o, "capability_report", cJSON_Duplicate(cap, 1));
    return o;
}

double bench_median_of(const bench_result *r, int metric) { return metric_pct(r, metric, 0.5); }

static void add_report_item(cJSON *o, const cJSON *report, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(report, key);
    if (it) cJSON_AddItemToObject(o, key, cJSON_Duplicate(it, 1));
}

cJSON *bench_result_json(const bench_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "precision", r->name);
    char cfg[1024];
    if (snn_precision_config_to_json(&r->cfg, cfg, sizeof cfg) == SNN_OK)
        cJSON_AddItemToObject(o, "precision_config", cJSON_Parse(cfg));
    cJSON_AddNumberToObject(o, "trial_count", r->n);
    cJSON *arr = cJSON_AddArrayToObject(o, "trials");
    for (int i = 0; i < r->n; i++) {
        const bench_trial *t = &r->trials[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "precision", r->name);
        cJSON_AddNumberToObject(e, "trial", t->trial);
        cJSON_AddNumberToObject(e, "order_position", t->position);
        for (int k = 0; k < BM_COUNT; k++) cJSON_AddNumberToObject(e, bench_metric_names[k], t->v[k]);
        cJSON_AddBoolToObject(e, "loss_finite", t->loss_finite);
        cJSON_AddBoolToObject(e, "output_finite", t->output_finite);
        cJSON_AddItemToObject(e, "spike_rates_training", rate_array(r, t->rate_train));
        cJSON_AddItemToObject(e, "spike_rates_inference", rate_array(r, t->rate_infer));
        cJSON_AddItemToArray(arr, e);
    }
    for (int k = 0; k < BM_COUNT; k++) {
        char key[96];
        cJSON_AddNumberToObject(o, bench_metric_names[k], metric_pct(r, k, 0.5));
        snprintf(key, sizeof key, "%s_p25", bench_metric_names[k]);
        cJSON_AddNumberToObject(o, key, metric_pct(r, k, 0.25));
        snprintf(key, sizeof key, "%s_p75", bench_metric_names[k]);
        cJSON_AddNumberToObject(o, key, metric_pct(r, k, 0.75));
    }
    /* The same base weights, input and precision give the same checksum in every trial
     * unless something is non-deterministic; the spread makes that visible. */
    cJSON_AddNumberToObject(o, "output_checksum_spread", metric_pct(r, BM_CHECKSUM, 1) - metric_pct(r, BM_CHECKSUM, 0));
    add_report_item(o, r->report, "policy");
    add_report_item(o, r->report, "capability_report");
    add_report_item(o, r->report, "conversion_report");
    add_report_item(o, r->report, "neurons");
    cJSON_AddItemToObject(o, "spike_rates", spike_rates_json(r));
    if (r->converge) cJSON_AddItemToObject(o, "converge", cJSON_Duplicate(r->converge, 1));
    if (r->ref_trials || r->ref_skipped[0]) cJSON_AddItemToObject(o, "reference_hand_built", reference_json(r));
    return o;
}

static const bench_result *find_mode(const bench_suite *s, const char *name) {
    for (int i = 0; i < s->P; i++)
        if (!strcmp(s->res[i].name, name)) return &s->res[i];
    return NULL;
}

static void add_failure(bench_suite *s, const char *msg) { cJSON_AddItemToArray(s->failures, cJSON_CreateString(msg)); }

cJSON *bench_efficiency(bench_suite *s, const char *baseline, double min_train, double min_infer, int require) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "baseline_precision", baseline);
    cJSON_AddNumberToObject(e, "min_training_speedup", bench_f2d((float)min_train));
    cJSON_AddNumberToObject(e, "min_inference_speedup", bench_f2d((float)min_infer));
    cJSON_AddBoolToObject(e, "require_efficiency", require);
    cJSON *cmp = cJSON_AddArrayToObject(e, "comparisons");
    const bench_result *b = find_mode(s, baseline);
    for (int i = 0; i < s->P && b; i++) {
        const bench_result *r = &s->res[i];
        if (r->cfg.mode != SNN_PRECISION_FP8) continue;
        double tr = bench_median_of(r, BM_TRAIN_SPS) / bench_median_of(b, BM_TRAIN_SPS);
        double in = bench_median_of(r, BM_INFER_SPS) / bench_median_of(b, BM_INFER_SPS);
        double tm = bench_median_of(r, BM_TRAIN_ALLOC_MB) / bench_median_of(b, BM_TRAIN_ALLOC_MB);
        double im = bench_median_of(r, BM_INFER_ALLOC_MB) / bench_median_of(b, BM_INFER_ALLOC_MB);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "precision", r->name);
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(r->report, "policy");
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(pol, "resolved_fp8_recipe");
        cJSON_AddStringToObject(c, "fp8_recipe", cJSON_IsString(rec) ? rec->valuestring : snn_fp8_recipe_name(r->cfg.fp8_recipe));
        cJSON_AddStringToObject(c, "baseline_precision", baseline);
        cJSON_AddNumberToObject(c, "training_speedup", tr);
        cJSON_AddNumberToObject(c, "inference_speedup", in);
        cJSON_AddNumberToObject(c, "training_memory_ratio", tm);
        cJSON_AddNumberToObject(c, "inference_memory_ratio", im);
        int ok = isfinite(tr) && tr > 0 && isfinite(in) && in > 0;
        if (!ok) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s vs %s: speed-ups are not finite positive numbers", r->name, baseline);
            add_failure(s, msg);
        }
        int tp = ok && tr >= min_train, ip = ok && in >= min_infer;
        cJSON_AddStringToObject(c, "training_verdict", tp ? "win" : "no win");
        cJSON_AddStringToObject(c, "inference_verdict", ip ? "win" : "no win");
        cJSON_AddBoolToObject(c, "training_passed", tp);
        cJSON_AddBoolToObject(c, "inference_passed", ip);
        cJSON_AddBoolToObject(c, "passed", tp && ip);
        cJSON_AddItemToArray(cmp, c);
        if (require && !(tp && ip)) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s vs %s: training %.3fx (needs %.2fx), inference %.3fx (needs %.2fx)", r->name,
                     baseline, tr, min_train, in, min_infer);
            add_failure(s, msg);
        }
    }
    cJSON_AddItemToObject(e, "failures", cJSON_Duplicate(s->failures, 1));
    cJSON_AddBoolToObject(e, "passed", cJSON_GetArraySize(s->failures) == 0);
    return e;
}

void bench_print_table(const bench_suite *s, const cJSON *eff) {
    const bench_workload *w = &s->w;
    printf("%s: batch %d, %s%d, depth %d, classes %d, %d trial(s), %d timed training / %d inference steps\n",
           w->kind == BENCH_LINEAR ? "linear" : "fcsnn", w->N, w->kind == BENCH_LINEAR ? "width " : "hidden ",
           w->width, w->depth, w->classes, s->trials, w->training_steps, w->inference_steps);
    if (w->kind == BENCH_FCSNN) printf("T %d, input %d\n", w->T, w->in);
    if (s->cuda_device >= 0)
        printf("device cuda:%d: the engine (snn_model_to + prepare + optimizer, the loop of snn train); the "
               "hand-built GPU network is shown as a reference\n", s->cuda_device);
    printf("%-6s %22s %22s %9s %9s %11s %16s\n", "prec", "train samples/s", "infer samples/s", "train MB",
           "infer MB", "update", "checksum");
    printf("%-6s %22s %22s %9s %9s %11s %16s\n", "", "median [p25, p75]", "median [p25, p75]", "alloc", "alloc",
           "max|dp|", "sum(output)");
    for (int i = 0; i < s->P; i++) {
        const bench_result *r = &s->res[i];
        char a[64], b[64];
        snprintf(a, sizeof a, "%.0f [%.0f, %.0f]", metric_pct(r, BM_TRAIN_SPS, .5), metric_pct(r, BM_TRAIN_SPS, .25),
                 metric_pct(r, BM_TRAIN_SPS, .75));
        snprintf(b, sizeof b, "%.0f [%.0f, %.0f]", metric_pct(r, BM_INFER_SPS, .5), metric_pct(r, BM_INFER_SPS, .25),
                 metric_pct(r, BM_INFER_SPS, .75));
        printf("%-6s %22s %22s %9.1f %9.1f %11.3g %16.6g\n", r->name, a, b, bench_median_of(r, BM_TRAIN_ALLOC_MB),
               bench_median_of(r, BM_INFER_ALLOC_MB), bench_median_of(r, BM_UPDATE), bench_median_of(r, BM_CHECKSUM));
    }
    printf("\n%-6s %10s %10s %10s %10s %10s   (ms per training step, medians)\n", "prec", "forward", "loss",
           "backward", "optimizer", "bwd+opt");
    for (int i = 0; i < s->P; i++) {
        const bench_result *r = &s->res[i];
        printf("%-6s %10.3f %10.3f %10.3f %10.3f %10.3f\n", r->name, bench_median_of(r, BM_FWD_MS),
               bench_median_of(r, BM_LOSS_MS), bench_median_of(r, BM_BWD_MS), bench_median_of(r, BM_OPT_MS),
               bench_median_of(r, BM_BWDOPT_MS));
    }
    for (int i = 0; i < s->P; i++) {
        const bench_result *r = &s->res[i];
        if (r->n_rates) {
            printf("%s spike rates (train/eval):", r->name);
            for (int k = 0; k < r->n_rates; k++)
                printf(" %s %.4f/%.4f", r->rate_names[k], rate_median(r, k, 0), rate_median(r, k, 1));
            printf("\n");
        }
    }
    for (int i = 0; i < s->P; i++) {
        const bench_result *r = &s->res[i];
        if (r->ref_trials)
            printf("%s engine / hand-built reference: training %.3fx (%.0f vs %.0f samples/s), inference %.3fx "
                   "(%.0f vs %.0f samples/s)\n",
                   r->name, metric_pct(r, BM_TRAIN_SPS, .5) / trials_pct(r->ref_trials, r->n, BM_TRAIN_SPS, .5),
                   metric_pct(r, BM_TRAIN_SPS, .5), trials_pct(r->ref_trials, r->n, BM_TRAIN_SPS, .5),
                   metric_pct(r, BM_INFER_SPS, .5) / trials_pct(r->ref_trials, r->n, BM_INFER_SPS, .5),
                   metric_pct(r, BM_INFER_SPS, .5), trials_pct(r->ref_trials, r->n, BM_INFER_SPS, .5));
        else if (r->ref_skipped[0])
            printf("%s hand-built reference skipped: %s\n", r->name, r->ref_skipped);
    }
    for (int i = 0; i < s->P; i++) {
        const cJSON *c = s->res[i].converge;
        if (!c) continue;
        const cJSON *acc = cJSON_GetObjectItemCaseSensitive(c, "test_accuracy");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "steps");
        const cJSON *sec = cJSON_GetObjectItemCaseSensitive(c, "train_seconds");
        printf("%s converge: test accuracy %.4f after %d steps (%.1f s)\n", s->res[i].name,
               cJSON_IsNumber(acc) ? acc->valuedouble : NAN, cJSON_IsNumber(st) ? st->valueint : 0,
               cJSON_IsNumber(sec) ? sec->valuedouble : NAN);
    }
    /* delayed FP8 on the hand-built GPU network: its final loss next to current scaling's */
    for (int i = 0; i < s->P; i++) {
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(s->res[i].ref_report, "policy");
        const cJSON *lc = cJSON_GetObjectItemCaseSensitive(pol, "delayed_loss_check");
        if (!lc) continue;
        printf("%s (delayed) final loss %.5f, current scaling %.5f (ratio %.3f, must be within 2x): %s\n",
               s->res[i].name, cJSON_GetObjectItemCaseSensitive(lc, "delayed_final_loss")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(lc, "current_scaling_final_loss")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(lc, "ratio")->valuedouble,
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(lc, "passed")) ? "passed" : "FAILED");
    }
    const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(eff, "comparisons"), *c;
    if (cJSON_GetArraySize(cmp)) printf("\n");
    cJSON_ArrayForEach(c, cmp) {
        const bench_result *fr = find_mode(s, cJSON_GetObjectItemCaseSensitive(c, "precision")->valuestring);
        const bench_result *br = find_mode(s, cJSON_GetObjectItemCaseSensitive(c, "baseline_precision")->valuestring);
        if (fr && br)
            printf("%s vs %s training memory (sum of allocations): %.1f vs %.1f MiB\n", fr->name, br->name,
                   bench_median_of(fr, BM_TRAIN_ALLOC_MB), bench_median_of(br, BM_TRAIN_ALLOC_MB));
        printf("%s (%s) vs %s: training %.3fx (%s), inference %.3fx (%s); memory %.2fx / %.2fx\n",
               cJSON_GetObjectItemCaseSensitive(c, "precision")->valuestring,
               cJSON_GetObjectItemCaseSensitive(c, "fp8_recipe")->valuestring,
               cJSON_GetObjectItemCaseSensitive(c, "baseline_precision")->valuestring,
               cJSON_GetObjectItemCaseSensitive(c, "training_speedup")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(c, "training_verdict")->valuestring,
               cJSON_GetObjectItemCaseSensitive(c, "inference_speedup")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(c, "inference_verdict")->valuestring,
               cJSON_GetObjectItemCaseSensitive(c, "training_memory_ratio")->valuedouble,
               cJSON_GetObjectItemCaseSensitive(c, "inference_memory_ratio")->valuedouble);
    }
    printf("checks: %s\n", cJSON_GetArraySize(s->failures) ? "FAILED" : "passed");
}
