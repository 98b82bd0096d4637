/* snn bench --device cuda: the hand-built GPU network of the linear or FC-SNN workload
 * (src/backend/cuda/cuda_bench_*.cu), run after each engine run (bench_core.c, the model
 * placed with snn_model_to) on the same base state and FP8 recipe and reported only as
 * results[].reference_hand_built while that code exists; plus the GPU flag checks and the
 * device metadata. Built only with -DSNN_CUDA=ON; without it the device check
 * (bench_common.c) refuses cuda before anything here is called. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#ifdef SNN_HAVE_CUDA
#include "snn/cuda_bench.h"

static snn_cuda *g_cuda;
static int g_cuda_dev = -1;

snn_cuda *bench_cuda_context(void) { return g_cuda; }

void bench_cuda_check_flags(const char *cmd, const bench_flags *f) {
    /* Every FP8 recipe runs on the engine (prepare refuses what the device cannot do); the
     * hand-built reference runs where it implements the recipe and is skipped otherwise. */
    /* fcsnn runs its LIF layers on the mixed-precision GPU neurons (cuda_neuron_mp.h) with
     * these flags; the linear workload has no neurons. */
    if ((f->storage || f->fwd || f->bwd) && strcmp(cmd, "fcsnn"))
        die_usage("bench %s: --neuron-storage/--neuron-fwd/--neuron-bwd apply to workloads with neurons (the GPU "
                  "%s workload has none); use them with 'snn bench fcsnn' or 'snn bench neuron'",
                  cmd, cmd);
    if (f->converge)
        die_usage("bench %s: --converge runs on the CPU only; drop it or use --device cpu", cmd);
}

void bench_cuda_open(int device) {
    if (g_cuda) {
        if (device != g_cuda_dev) die_usage("--device cuda:%d: another GPU (cuda:%d) is already open", device, g_cuda_dev);
        return;
    }
    if (snn_cuda_create(device, 0, &g_cuda) != SNN_OK)
        die_usage("--device cuda:%d: no usable GPU: %s", device, snn_last_error());
    g_cuda_dev = device;
}

void bench_cuda_metadata(cJSON *md, int device) {
    char dev[32];
    cJSON_ReplaceItemInObject(md, "device", cJSON_CreateString(bench_device_name(device, dev, sizeof dev)));
    snn_cuda_bench_device d;
    if (!g_cuda || snn_cuda_bench_device_info(g_cuda, &d) != SNN_OK) {
        cJSON_AddNullToObject(md, "gpu");
        return;
    }
    char buf[64];
    cJSON_AddStringToObject(md, "gpu", d.name);
    snprintf(buf, sizeof buf, "%d.%d", d.cc_major, d.cc_minor);
    cJSON_AddStringToObject(md, "gpu_compute_capability", buf);
    cJSON_AddNumberToObject(md, "gpu_sm_count", d.sm_count);
    cJSON_AddNumberToObject(md, "gpu_memory_mib", (double)(d.total_memory >> 20));
    snprintf(buf, sizeof buf, "%d.%d", d.runtime_version / 1000, d.runtime_version % 1000 / 10);
    cJSON_AddStringToObject(md, "cuda_runtime_version", buf);
    snprintf(buf, sizeof buf, "%d.%d", d.driver_version / 1000, d.driver_version % 1000 / 10);
    cJSON_AddStringToObject(md, "cuda_driver_version", buf);
}

static snn_cuda_bench_precision gpu_precision(snn_precision_mode m) {
    switch (m) {
    case SNN_PRECISION_FP32: return SNN_CUDA_BENCH_FP32;
    case SNN_PRECISION_FP16: return SNN_CUDA_BENCH_FP16;
    case SNN_PRECISION_BF16: return SNN_CUDA_BENCH_BF16;
    default: return SNN_CUDA_BENCH_FP8;
    }
}

/* FP8 on the hand-built network: the recipe the library resolved for the engine (`auto`
 * means the same there as in snn train), 'delayed' and 'block' as such, 'current' current
 * scaling; bench_cuda_reference_supported refuses the others. */
static int gpu_delayed(const snn_precision_config *pc, snn_fp8_recipe resolved) {
    return pc->mode == SNN_PRECISION_FP8 && resolved == SNN_FP8_RECIPE_DELAYED;
}
static int gpu_block(const snn_precision_config *pc, snn_fp8_recipe resolved) {
    return pc->mode == SNN_PRECISION_FP8 && resolved == SNN_FP8_RECIPE_BLOCK;
}

static snn_cuda_bench_cfg gpu_cfg(const bench_workload *w, const snn_precision_config *pc, snn_fp8_recipe resolved) {
    snn_cuda_bench_cfg c = {.kind = w->kind == BENCH_LINEAR ? SNN_CUDA_BENCH_LINEAR : SNN_CUDA_BENCH_FCSNN,
                            .T = w->T, .N = w->N, .in = w->in, .width = w->width, .depth = w->depth,
                            .classes = w->classes, .tau = w->tau, .lr = w->lr, .momentum = w->momentum,
                            .warmup = w->warmup, .training_steps = w->training_steps,
                            .inference_steps = w->inference_steps, .overlap_optimizer = 0, .autotune = 1};
    if (gpu_delayed(pc, resolved)) {
        c.fp8_delayed = 1;
        c.fp8_history_len = pc->amax_history_len ? pc->amax_history_len : SNN_FP8_DEFAULT_HISTORY_LEN;
        c.fp8_margin = pc->margin;
        c.fp8_most_recent = pc->amax_compute_algo == SNN_AMAX_COMPUTE_MOST_RECENT;
    }
    if (gpu_block(pc, resolved)) {
        c.fp8_block = 1;
        c.fp8_block_fp32_scales = pc->block_fp32_scales;
    }
    c.neuron_storage = pc->neuron_storage;
    c.neuron_fwd = pc->neuron_fwd;
    c.neuron_bwd = pc->neuron_bwd;
    return c;
}

int bench_cuda_reference_supported(const bench_suite *s, const bench_result *r, snn_fp8_recipe resolved,
                                   char *why, size_t cap) {
    snn_cuda_bench_device d;
    if (r->cfg.mode == SNN_PRECISION_FP8) {
        int have_dev = g_cuda && snn_cuda_bench_device_info(g_cuda, &d) == SNN_OK;
        if (resolved != SNN_FP8_RECIPE_CURRENT && resolved != SNN_FP8_RECIPE_DELAYED &&
            resolved != SNN_FP8_RECIPE_BLOCK) {
            snprintf(why, cap, "the hand-built network has no '%s' FP8 recipe", snn_fp8_recipe_name(resolved));
            return 0;
        }
        if (resolved == SNN_FP8_RECIPE_BLOCK && (!have_dev || d.cc_major != 9)) {
            snprintf(why, cap, "the hand-built network's block recipe needs compute capability 9.x");
            return 0;
        }
    }
    snn_cuda_bench_cfg cfg = gpu_cfg(&s->w, &r->cfg, resolved);
    if (snn_cuda_bench_check(&cfg, gpu_precision(r->cfg.mode)) != SNN_OK) {
        snprintf(why, cap, "%s", snn_last_error());
        return 0;
    }
    return 1;
}

static cJSON *names(int from, int step, int count) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < count; i++) {
        char b[32];
        snprintf(b, sizeof b, "layers.%d", from + step * i);
        cJSON_AddItemToArray(a, cJSON_CreateString(b));
    }
    return a;
}

/* The report snn_precision_describe gives on the CPU, for what the GPU workload does: module
 * names as in the CPU model (layers.<2i> the Linear layers, layers.<2i+1> GELU / LIF). */
/* Delayed FP8 only: final losses of this run and of the current-scaling reference run. */
typedef struct loss_check {
    int on;
    double delayed, current, ratio;
    int passed;
} loss_check;

static cJSON *gpu_report(const bench_suite *s, const bench_result *r, const snn_cuda_bench_result *g,
                         const snn_cuda_bench_cfg *cfg, const loss_check *lc, snn_fp8_recipe resolved_recipe) {
    const bench_workload *w = &s->w;
    int fp8 = r->cfg.mode == SNN_PRECISION_FP8, D = w->depth, fcsnn = w->kind == BENCH_FCSNN;
    const char *resolved = snn_fp8_recipe_name(resolved_recipe);
    const char *mode = snn_precision_mode_name(r->cfg.mode);
    cJSON *top = cJSON_CreateObject();
    cJSON *pol = cJSON_AddObjectToObject(top, "policy");
    cJSON_AddStringToObject(pol, "name", mode);
    cJSON_AddStringToObject(pol, "device_type", "cuda");
    cJSON_AddBoolToObject(pol, "autocast", r->cfg.mode != SNN_PRECISION_FP32);
    if (r->cfg.mode != SNN_PRECISION_FP32)
        cJSON_AddStringToObject(pol, "dtype", r->cfg.mode == SNN_PRECISION_FP16 ? "f16" : "bf16");
    cJSON_AddBoolToObject(pol, "grad_scaler", r->cfg.mode == SNN_PRECISION_FP16);
    if (r->cfg.mode == SNN_PRECISION_FP16) {
        cJSON_AddNumberToObject(pol, "loss_scale", 1024);
        cJSON_AddStringToObject(pol, "loss_scale_kind", "static");
    }
    if (fp8) {
        cJSON_AddStringToObject(pol, "backend", "snn-cuda-cublaslt");
        cJSON_AddStringToObject(pol, "fp8_recipe", snn_fp8_recipe_name(r->cfg.fp8_recipe));
        cJSON_AddStringToObject(pol, "resolved_fp8_recipe", resolved);
        cJSON_AddStringToObject(pol, "forward_dtype", "f8e4m3");
        cJSON_AddStringToObject(pol, "backward_dtype", cfg->fp8_block ? "f8e4m3" : "f8e5m2");
        if (cfg->fp8_block) {
            cJSON_AddStringToObject(pol, "block_scaling", "1x128 vectors (inputs, gradients), 128x128 tiles "
                                                          "(weights), FP32 factors");
            cJSON_AddBoolToObject(pol, "power_of_two_scales", !cfg->fp8_block_fp32_scales);
        }
        if (cfg->fp8_delayed) {
            cJSON_AddNumberToObject(pol, "amax_history_len", cfg->fp8_history_len);
            cJSON_AddStringToObject(pol, "amax_compute_algo", cfg->fp8_most_recent ? "most_recent" : "max");
            cJSON_AddNumberToObject(pol, "margin", cfg->fp8_margin);
            cJSON_AddStringToObject(pol, "scaling_state", "device (amax histories and scales updated by a kernel at "
                                                          "the start of each step, inside the CUDA graph)");
        }
        if (lc->on) {
            cJSON *l = cJSON_AddObjectToObject(pol, "delayed_loss_check");
            cJSON_AddNumberToObject(l, "delayed_final_loss", lc->delayed);
            cJSON_AddNumberToObject(l, "current_scaling_final_loss", lc->current);
            cJSON_AddNumberToObject(l, "ratio", lc->ratio);
            cJSON_AddNumberToObject(l, "max_factor", 2.0);
            cJSON_AddBoolToObject(l, "passed", lc->passed);
        }
        /* hidden FC-SNN layers after the first take the previous LIF's spikes as E4M3, scale 1 */
        cJSON_AddItemToObject(pol, "spike_fp8_modules", names(2, 2, fcsnn && g->fp8_layers > 1 ? g->fp8_layers - 1 : 0));
    }
    cJSON *cap = cJSON_AddObjectToObject(top, "capability_report");
    char dev[32];
    cJSON_AddStringToObject(cap, "requested_mode", mode);
    cJSON_AddStringToObject(cap, "device", bench_device_name(s->cuda_device, dev, sizeof dev));
    cJSON_AddStringToObject(cap, "device_type", "cuda");
    cJSON_AddBoolToObject(cap, "cuda_built", 1);
    cJSON_AddBoolToObject(cap, "can_convert", 1);
    cJSON_AddBoolToObject(cap, "can_execute", 1);
    if (fp8) {
        cJSON_AddStringToObject(cap, "fp8_recipe_requested", snn_fp8_recipe_name(r->cfg.fp8_recipe));
        cJSON_AddStringToObject(cap, "fp8_recipe_resolved", resolved);
    }
    /* exact sums of the run's device allocations (all live for the whole run: sum = peak) */
    cJSON_AddNumberToObject(cap, "training_alloc_bytes", (double)g->train_alloc_bytes);
    cJSON_AddNumberToObject(cap, "inference_alloc_bytes", (double)g->infer_alloc_bytes);
    cJSON_AddNumberToObject(cap, "device_used_bytes", (double)g->device_used_bytes);
    cJSON_AddStringToObject(cap, "execution_note",
                            fp8 && cfg->fp8_delayed
                                ? "CUDA: cuBLASLt FP8 GEMMs (E4M3 x E4M3 forward with fast accumulation, E5M2 "
                                  "gradients), per-tensor delayed scaling (amax histories on the device), BF16 "
                                  "between the GEMMs, FP32 master weights; whole steps replayed as CUDA graphs"
                            : fp8 && cfg->fp8_block
                                ? "CUDA: cuBLASLt block-scaled FP8 GEMMs (E4M3 everywhere, 1x128 / 128x128 FP32 "
                                  "scale factors, FP32 promotion), BF16 between the GEMMs, FP32 master weights; "
                                  "whole steps replayed as CUDA graphs"
                            : fp8 ? "CUDA: cuBLASLt FP8 GEMMs (E4M3 x E4M3 forward with fast accumulation, E5M2 "
                                  "gradients), per-tensor current scaling, BF16 between the GEMMs, FP32 master "
                                  "weights; whole steps replayed as CUDA graphs"
                            : r->cfg.mode == SNN_PRECISION_FP32
                                ? "CUDA: FP32 cuBLASLt GEMMs (TF32 off); whole steps replayed as CUDA graphs"
                                : "CUDA: 16-bit cuBLASLt GEMMs with FP32 accumulation, 16-bit activations, FP32 "
                                  "master weights; whole steps replayed as CUDA graphs");
    if (fcsnn && cfg->neuron_storage != SNN_NEURON_STORAGE_UNSET)
        cJSON_AddStringToObject(cap, "neuron_execution",
                                "CUDA mixed-precision neurons (cuda_neuron_mp, bit-identical to the CPU emulation): "
                                "Linear output + bias in the activation type, converted to the storage dtype; h_seq "
                                "kept in it; charge/reset in neuron_fwd, BPTT in neuron_bwd; dL/dx FP32, rounded to "
                                "the activation type for the GEMMs");
    cJSON *rep = cJSON_AddObjectToObject(top, "conversion_report");
    cJSON_AddNumberToObject(rep, "total_modules", 2 + 2 * (D - 1) + 1);
    /* Linear layers that meet the FP8 alignment, as the CPU rule counts them */
    int conv = 0;
    for (int l = 0; l < D; l++) {
        int in = l == 0 ? w->in : w->width, out = l == D - 1 ? w->classes : w->width;
        conv += in % 16 == 0 && out % 8 == 0;
    }
    cJSON_AddNumberToObject(rep, "convertible_linear", conv);
    cJSON_AddNumberToObject(rep, "convertible_torch_linear", 0);
    cJSON_AddNumberToObject(rep, "convertible_pointwise_conv1d", 0);
    cJSON_AddNumberToObject(rep, "convertible_layer_norm", 0);
    cJSON *cv = cJSON_AddArrayToObject(rep, "convertible_modules");
    for (int l = 0; l < D; l++) {
        int in = l == 0 ? w->in : w->width, out = l == D - 1 ? w->classes : w->width;
        char b[32];
        snprintf(b, sizeof b, "layers.%d", 2 * l);
        if (in % 16 == 0 && out % 8 == 0) cJSON_AddItemToArray(cv, cJSON_CreateString(b));
    }
    /* GPU: the first fp8_layers Linear layers, plus the head when head_fp8 */
    cJSON *done = names(0, 2, g->fp8_layers < D ? g->fp8_layers : D);
    cJSON_AddItemToObject(rep, "converted_modules", done);
    cJSON_AddItemToObject(rep, "converted_patterns", cJSON_CreateArray());
    cJSON_AddItemToObject(rep, "skipped_modules", cJSON_CreateArray());
    cJSON *hp = names(1, 2, D - 1);
    if (fp8 && !g->head_fp8) {
        char b[32];
        snprintf(b, sizeof b, "layers.%d", 2 * (D - 1)); /* the output Linear runs BF16 GEMMs */
        cJSON_AddItemToArray(hp, cJSON_CreateString(b));
    }
    cJSON_AddItemToObject(rep, "high_precision_modules", hp);
    cJSON_AddItemToObject(rep, "unsupported_modules", cJSON_CreateArray());
    /* as the CPU's report: the LIF modules run the mixed-precision neurons when a storage is set */
    cJSON *nr = cJSON_AddObjectToObject(top, "neurons");
    cJSON_AddItemToObject(nr, "converted_modules",
                          fcsnn && cfg->neuron_storage != SNN_NEURON_STORAGE_UNSET ? names(1, 2, D - 1)
                                                                                   : cJSON_CreateArray());
    cJSON_AddItemToObject(nr, "unsupported_modules", cJSON_CreateArray());
    return top;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static int same_workload(const bench_workload *a, const bench_workload *b) {
    return a->kind == b->kind && a->T == b->T && a->N == b->N && a->in == b->in && a->width == b->width &&
           a->depth == b->depth && a->classes == b->classes && a->tau == b->tau && a->lr == b->lr &&
           a->momentum == b->momentum && a->seed == b->seed && a->warmup == b->warmup &&
           a->training_steps == b->training_steps;
}

void bench_cuda_run_reference(bench_suite *s, bench_result *r, snn_fp8_recipe resolved, bench_trial *t,
                              cJSON **report) {
    const bench_workload *w = &s->w;
    int D = w->depth;
    const float **wt = malloc(sizeof(float *) * (size_t)D), **bs = malloc(sizeof(float *) * (size_t)D);
    if (!wt || !bs) die_status(SNN_E_NOMEM, "allocating");
    for (int l = 0; l < D; l++) {
        wt[l] = s->base_params + s->layer_w[l];
        bs[l] = s->base_params + s->layer_b[l];
    }
    snn_cuda_bench_cfg cfg = gpu_cfg(w, &r->cfg, resolved);
    snn_cuda_bench_data d = {.weights = wt, .biases = bs, .x = s->x, .y = s->y};
    snn_cuda_bench_result g;
    snn_status st = snn_cuda_bench_run(g_cuda, &cfg, gpu_precision(r->cfg.mode), &d, &g);
    /* Delayed scaling: the same seed and steps once with current scaling (untimed, not a
     * trial; once per suite: every trial starts from the same base state) for the loss check. */
    static bench_workload ref_w;
    static int ref_have;
    static double ref_loss = NAN;
    loss_check lc = {0, NAN, NAN, NAN, 0};
    if (st == SNN_OK && cfg.fp8_delayed) {
        if (!ref_have || !same_workload(&ref_w, w)) {
            snn_cuda_bench_cfg cc = cfg;
            cc.fp8_delayed = cc.fp8_history_len = cc.fp8_margin = cc.fp8_most_recent = 0;
            snn_cuda_bench_result gr;
            st = snn_cuda_bench_run(g_cuda, &cc, SNN_CUDA_BENCH_FP8, &d, &gr);
            ref_loss = gr.final_loss;
            ref_w = *w;
            ref_have = st == SNN_OK;
        }
        lc.on = 1;
        lc.delayed = g.final_loss;
        lc.current = ref_loss;
        lc.ratio = g.final_loss / ref_loss;
        lc.passed = isfinite(lc.ratio) && lc.ratio <= 2.0 && lc.ratio >= 0.5;
    }
    free(wt);
    free(bs);
    if (st != SNN_OK) {
        char what[160];
        snprintf(what, sizeof what, "bench %s on the GPU (%s)", w->kind == BENCH_LINEAR ? "linear" : "fcsnn", r->name);
        die_status(st, what);
    }
    if (lc.on) {
        if (!s->quiet)
            fprintf(stderr, "%s (delayed) trial %d: final loss %.5f, current scaling %.5f (ratio %.3f)\n", r->name,
                    t->trial, lc.delayed, lc.current, lc.ratio);
        if (!lc.passed) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "%s trial %d: delayed-scaling final loss %.5g is not within 2x of current scaling's %.5g", r->name,
                     t->trial, lc.delayed, lc.current);
            cJSON_AddItemToArray(s->failures, cJSON_CreateString(msg));
        }
    }
    double *v = t->v;
    v[BM_PREP_MS] = g.prep_ms;
    v[BM_TRAIN_MS] = g.train_ms;
    v[BM_TRAIN_SPS] = w->N / (g.train_ms * 1e-3);
    v[BM_TRAIN_ALLOC_MB] = mib(g.train_alloc_bytes);
    v[BM_TRAIN_RSS_MB] = mib(g.device_used_bytes);
    v[BM_INFER_MS] = g.infer_ms;
    v[BM_INFER_SPS] = w->N / (g.infer_ms * 1e-3);
    v[BM_INFER_ALLOC_MB] = mib(g.infer_alloc_bytes);
    v[BM_INFER_RSS_MB] = mib(g.device_used_bytes);
    v[BM_UPDATE] = g.update_max_abs;
    v[BM_CHECKSUM] = g.checksum;
    v[BM_FWD_MS] = g.forward_ms;
    v[BM_LOSS_MS] = g.loss_ms;
    v[BM_BWDOPT_MS] = g.backward_optimizer_ms;
    v[BM_OPT_MS] = g.optimizer_ms;
    v[BM_BWD_MS] = g.backward_optimizer_ms - g.optimizer_ms;
    v[BM_FINAL_LOSS] = g.final_loss;
    v[BM_TRAIN_CPU_MS] = g.train_cpu_ms;
    v[BM_INFER_CPU_MS] = g.infer_cpu_ms;
    t->loss_finite = g.loss_finite;
    t->output_finite = g.output_finite;
    cJSON_Delete(*report);
    *report = gpu_report(s, r, &g, &cfg, &lc, resolved);
}

#else /* no CUDA in this build: bench_check_device exits before any of these is reached */

void bench_cuda_check_flags(const char *cmd, const bench_flags *f) {
    (void)f;
    die_usage("bench %s: this snn was built without CUDA (configure with -DSNN_CUDA=ON)", cmd);
}
void bench_cuda_open(int device) {
    (void)device;
    die_usage("this snn was built without CUDA (configure with -DSNN_CUDA=ON)");
}
int bench_cuda_reference_supported(const bench_suite *s, const bench_result *r, snn_fp8_recipe resolved,
                                   char *why, size_t cap) {
    (void)s;
    (void)r;
    (void)resolved;
    snprintf(why, cap, "this snn was built without CUDA");
    return 0;
}
void bench_cuda_run_reference(bench_suite *s, bench_result *r, snn_fp8_recipe resolved, bench_trial *t,
                              cJSON **report) {
    (void)s;
    (void)r;
    (void)resolved;
    (void)t;
    (void)report;
    die_usage("this snn was built without CUDA (configure with -DSNN_CUDA=ON)");
}
void bench_cuda_metadata(cJSON *md, int device) {
    (void)md;
    (void)device;
}

#endif
