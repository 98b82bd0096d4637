/* snn bench linear: the dense MLP workload of SpikingJelly's
 * benchmark_fp8_training_inference.py, (depth - 1) x [Linear(width, width), GELU] ->
 * Linear(width, classes), input randn[batch, width], cross-entropy, SGD. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cmds.h"

static cJSON *str_array(const bench_suite *s) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < s->P; i++) cJSON_AddItemToArray(a, cJSON_CreateString(s->res[i].name));
    return a;
}

/* Keys every workload config shares. */
static void add_common_config(cJSON *c, const bench_suite *s, const bench_flags *f) {
    char dev[32];
    cJSON_AddStringToObject(c, "device", bench_device_name(s->cuda_device, dev, sizeof dev));
    cJSON_AddNumberToObject(c, "warmup", f->warmup);
    cJSON_AddNumberToObject(c, "training_steps", f->training_steps);
    cJSON_AddNumberToObject(c, "inference_steps", f->inference_steps);
    cJSON_AddNumberToObject(c, "trials", f->trials);
    cJSON_AddStringToObject(c, "trial_order", "rotated");
    cJSON_AddStringToObject(c, "timing_scope", "steady_state_excludes_precision_conversion");
    cJSON_AddItemToObject(c, "precisions", str_array(s));
    cJSON_AddStringToObject(c, "baseline_precision", f->baseline);
    cJSON_AddStringToObject(c, "fp8_recipe", f->recipe ? f->recipe : "auto");
    cJSON_AddNumberToObject(c, "lr", bench_f2d(s->w.lr));
    cJSON_AddNumberToObject(c, "momentum", bench_f2d(s->w.momentum));
    cJSON_AddStringToObject(c, "optimizer", "sgd");
    cJSON_AddNumberToObject(c, "seed", (double)s->w.seed);
    cJSON_AddNumberToObject(c, "min_training_speedup", bench_f2d(f->min_training_speedup));
    cJSON_AddNumberToObject(c, "min_inference_speedup", bench_f2d(f->min_inference_speedup));
    if (s->cuda_device >= 0) {
        cJSON_AddStringToObject(c, "engine",
                                "the model snn train builds (zoo constructor), placed with snn_model_to, then "
                                "snn_prepare_model_for_precision and the optimizer (device -> prepare -> optimizer); "
                                "each training step is snn_model_forward (input copied in, output copied out), the "
                                "loss on the host and snn_precision_backward, the loop snn train runs");
        cJSON_AddStringToObject(c, "timing",
                                "host wall clock per step; every step ends on the host (the output copy and the "
                                "optimizer's finiteness check wait for the device), so the figures are whole-step "
                                "times; the forward/backward split is approximate where work is still queued");
        cJSON_AddStringToObject(c, "step_split",
                                "forward_ms: snn_model_forward (train mode, output copied to the host); loss_ms: "
                                "cross-entropy and dL/dy on the host; backward_optimizer_ms: snn_precision_backward "
                                "(dL/dy copied in, backward, loss scaling, SGD step, FP8 scale update); "
                                "optimizer_ms: the SGD step alone with lr 0; backward_ms = backward_optimizer_ms - "
                                "optimizer_ms");
        cJSON_AddStringToObject(c, "memory",
                                "*_peak_allocated_mb: parameters, buffers, activation arena and precision scratch, plus "
                                "gradients and optimizer state when training (the engine's device arrays, counted as "
                                "on the CPU); *_peak_rss_delta_mb: host resident set of the phase minus before the "
                                "model was built");
        cJSON_AddStringToObject(c, "reference",
                                "results[].reference_hand_built: the hand-built GPU network (CUDA graphs, CUDA-event "
                                "timing) on the same base state and recipe, with engine_over_hand_built_* ratios");
    } else {
        cJSON_AddStringToObject(c, "step_split",
                                "forward_ms: model forward; loss_ms: cross-entropy and dL/dy; backward_optimizer_ms: "
                                "snn_precision_backward (zero grads, backward, loss scaling, SGD step, FP8 scale update); "
                                "optimizer_ms: the SGD step alone, timed separately with lr 0; "
                                "backward_ms = backward_optimizer_ms - optimizer_ms");
        cJSON_AddStringToObject(c, "memory",
                                "*_peak_allocated_mb: parameters, buffers, activation arena and precision scratch, plus "
                                "gradients and optimizer state when training; *_peak_rss_delta_mb: peak resident set of "
                                "the phase (VmHWM, reset per phase) minus the resident set before the model was built");
    }
    if (f->converge) {
        cJSON *cv = cJSON_AddObjectToObject(c, "converge");
        cJSON_AddStringToObject(cv, "dataset", "fashion-mnist");
        cJSON_AddNumberToObject(cv, "epochs", f->converge_epochs);
        cJSON_AddNumberToObject(cv, "steps", f->converge_steps);
        int adam = !strcmp(f->converge_optimizer, "adam");
        cJSON_AddStringToObject(cv, "optimizer", f->converge_optimizer);
        cJSON_AddNumberToObject(cv, "lr", bench_f2d(f->converge_lr > 0 ? f->converge_lr : adam ? 1e-3f : s->w.lr));
        cJSON_AddNumberToObject(cv, "test_samples", f->converge_test_samples);
    }
}

int bench_workload_finish(bench_suite *s, bench_flags *f, cJSON *config) {
    add_common_config(config, s, f);
    bench_suite_run(s);
    cJSON_AddNumberToObject(config, "parameters", (double)s->n_params);
    /* what `auto` (or the recipe asked for) became: the library's resolution in prepare, the
     * same as in snn train */
    for (int i = 0; i < s->P; i++) {
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(s->res[i].report, "policy");
        const cJSON *rec = cJSON_GetObjectItemCaseSensitive(pol, "resolved_fp8_recipe");
        if (s->res[i].cfg.mode == SNN_PRECISION_FP8 && cJSON_IsString(rec)) {
            cJSON_AddStringToObject(config, "fp8_recipe_resolved", rec->valuestring);
            break;
        }
    }
    if (f->converge) {
        bench_converge_data d;
        bench_converge_load(f, &d);
        for (int i = 0; i < s->P; i++) s->res[i].converge = bench_converge_run(&s->w, &s->res[i].cfg, f, &d, s->quiet);
        bench_converge_free(&d);
    }
    cJSON *eff = bench_efficiency(s, f->baseline, f->min_training_speedup, f->min_inference_speedup,
                                  f->require_efficiency);
    bench_metadata_end(s->metadata);
    if (s->cuda_device >= 0) bench_cuda_metadata(s->metadata, s->cuda_device);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "metadata", s->metadata);
    s->metadata = NULL;
    cJSON_AddItemToObject(doc, "config", config);
    cJSON *res = cJSON_AddArrayToObject(doc, "results");
    for (int i = 0; i < s->P; i++) cJSON_AddItemToArray(res, bench_result_json(&s->res[i]));
    cJSON_AddItemToObject(doc, "efficiency", eff);
    if (!f->output || strcmp(f->output, "-")) bench_print_table(s, eff);
    bench_write_json(f->output, doc);
    int rc = bench_exit_code(s->failures);
    cJSON_Delete(doc);
    bench_suite_free(s);
    return rc;
}

int bench_linear(int argc, char **argv) {
    bench_suite s = {0};
    bench_flags f;
    bench_flags_defaults(&f, 20260718);
    int batch = 256, width = 512, depth = 4, classes = 0;
    float lr = 1e-3f, momentum = 0;
    opt t[48];
    int n = 0;
    t[n++] = opt_num("--batch-size", OPT_INT, &batch, "samples per step (default 256)", NULL, 1.0, 1048576.0);
    t[n++] = opt_num("--width", OPT_INT, &width, "input and hidden width (default 512)", NULL, 1.0, 1048576.0);
    t[n++] = opt_num("--depth", OPT_INT, &depth, "Linear layers, GELU between them (default 4)", NULL, 1.0, 1000.0);
    t[n++] = opt_num("--num-classes", OPT_INT, &classes, "output width (default: --width)", "--classes", 1.0, 1048576.0);
    t[n++] = opt_num("--lr", OPT_FLOAT, &lr, "SGD learning rate (default 1e-3)", NULL, 1e-38, 1e+38);
    t[n++] = opt_num("--momentum", OPT_FLOAT, &momentum, "SGD momentum (default 0)", NULL, 0.0, 1.0);
    n += bench_flags_options(&f, t + n, 0);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn bench linear [options]",
                  "Training and inference throughput of a dense MLP per precision mode, SpikingJelly's\n"
                  "FP8 benchmark protocol: fresh model per (trial, precision) from one base state,\n"
                  "preparation excluded, rotated precision order, medians with p25/p75. FP8 rows are\n"
                  "compared with the baseline (>= 1.05x is a win).",
                  t, n);
        return 0;
    }
    args_parse("bench linear", t, n, argc, argv, 3);
    s.metadata = bench_metadata(argc, argv);
    if (!classes) classes = width;
    if (batch <= 0 || width <= 0 || classes <= 0 || batch > (1 << 20) || width > (1 << 16) || classes > (1 << 16))
        die_usage("bench linear: --batch-size, --width and --num-classes must be positive (width, classes <= 65536)");
    if (depth < 1 || depth > 1000) die_usage("bench linear: --depth must be between 1 and 1000, got %d", depth);
    if (!(lr > 0) || momentum < 0 || momentum >= 1) die_usage("bench linear: --lr must be positive and --momentum in [0, 1)");
    bench_flags_check("linear", &f, &s);
    for (int i = 0; i < s.P; i++)
        if (s.res[i].cfg.mode == SNN_PRECISION_FP8 && (batch % 16 || width % 16 || classes % 16))
            die_usage("bench linear: with fp8, --batch-size, --width and --num-classes must be divisible by 16 "
                      "(got %d, %d, %d)", batch, width, classes);
    s.w = (bench_workload){.kind = BENCH_LINEAR, .T = 1, .N = batch, .in = width, .width = width, .depth = depth,
                           .classes = classes, .lr = lr, .momentum = momentum, .seed = f.seed, .warmup = f.warmup,
                           .training_steps = f.training_steps, .inference_steps = f.inference_steps};
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "workload", "linear");
    cJSON_AddNumberToObject(c, "batch_size", batch);
    cJSON_AddNumberToObject(c, "width", width);
    cJSON_AddNumberToObject(c, "depth", depth);
    cJSON_AddNumberToObject(c, "num_classes", classes);
    return bench_workload_finish(&s, &f, c);
}
