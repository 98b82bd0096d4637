/* Distributed vision configs: every validation rule refused with a message naming the field
 * (each case starts from a config that validates, so the check fails without the rule),
 * JSON round trips with randomised fields, the closed type registry, legacy precision
 * strings and the checkpoint recipe (reference spikingjelly-distributed.md §2.1-2.5, §8.9
 * items 60-62, 65-66, 77). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/model.h"
#include "snn/vision.h"

static uint64_t rs;

static int rnd(int lo, int hi) { /* inclusive */
    float u;
    snn_test_fill_uniform(&u, 1, 0.0f, 1.0f, &rs);
    return lo + (int)(u * (float)(hi - lo + 1)) % (hi - lo + 1);
}

static int refused(snn_status st, const char *a, const char *b) {
    const char *m = snn_last_error();
    if (st == SNN_OK) {
        fprintf(stderr, "  accepted, wanted a refusal naming \"%s\"\n", a);
        return 0;
    }
    if ((a && !strstr(m, a)) || (b && !strstr(m, b))) {
        fprintf(stderr, "  message lacks \"%s\"/\"%s\": %s\n", a, b ? b : "", m);
        return 0;
    }
    return 1;
}

static snn_vision_training_config good_training(void) {
    snn_vision_training_config c = snn_vision_training_config_default();
    c.model = snn_vision_model_config_default(SNN_VISION_MODEL_CONVSNN);
    snprintf(c.dataset_builder, sizeof c.dataset_builder, "snn.data.fashion_mnist");
    snn_kwargs_set_string(&c.dataset_kwargs, "root", "data/fashion");
    return c;
}

static snn_vision_prediction_config good_prediction(void) {
    snn_vision_prediction_config c = snn_vision_prediction_config_default();
    snprintf(c.artifact, sizeof c.artifact, "runs/model.artifact.safetensors");
    snprintf(c.dataset_builder, sizeof c.dataset_builder, "snn.data.synthetic");
    return c;
}

/* Training case i: break one rule of a valid config; returns the expected substrings
 * (NULL a when there are no more cases). */
static void training_case(int i, snn_vision_training_config *c, const char **a, const char **b) {
    *a = *b = NULL;
    switch (i) {
    case 0: c->model.kind = SNN_VISION_MODEL_NONE; *a = "model"; break;
    case 1: c->model.time_steps = 0; *a = "model.time_steps"; break;
    case 2: c->model.num_classes = -3; *a = "model.num_classes"; break;
    case 3: c->model.step_mode = 'x'; *a = "model.step_mode"; break;
    case 4: c->model.convsnn.height = 30; *a = "model.height"; break;
    case 5: c->model.convsnn.channels = 0; *a = "model.channels"; break;
    case 6: c->model.convsnn.in_channels = 0; *a = "model.in_channels"; break;
    case 7: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER); c->model.step_mode = 's';
        *a = "model.step_mode"; *b = "step_mode='m'"; break;
    case 8: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER); c->model.spikformer.image_size = 200;
        *a = "model.image_size"; break;
    case 9: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER); c->model.spikformer.heads = 7;
        *a = "model.heads"; break;
    case 10: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER); c->model.spikformer.embed_dim = 100;
        *a = "model.embed_dim"; break;
    case 11: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN); c->model.fcsnn.tau = 1.0f;
        *a = "model.tau"; break;
    case 12: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN); c->model.fcsnn.depth = 0;
        *a = "model.depth"; break;
    case 13: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN); c->model.fcsnn.hidden = 0;
        *a = "model.hidden"; break;
    case 14: c->model = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN); c->model.fcsnn.in_features = 0;
        *a = "model.in_features"; break;
    case 15: snprintf(c->dataset_builder, sizeof c->dataset_builder, "fashion_mnist"); *a = "dataset_builder"; *b = "dotted"; break;
    case 16: snprintf(c->dataset_builder, sizeof c->dataset_builder, "os.system"); *a = "dataset_builder"; *b = "not one snn implements"; break;
    case 17: c->dataset_builder[0] = 0; *a = "dataset_builder"; break;
    case 18: snn_kwargs_set_string(&c->dataset_kwargs, "download", "yes"); *a = "dataset_kwargs"; *b = "download"; break;
    case 19: snn_kwargs_set_number(&c->dataset_kwargs, "root", 3); *a = "dataset_kwargs"; *b = "must be a string"; break;
    case 20: c->input_layout = (snn_input_layout)7; *a = "input_layout"; break;
    case 21: c->epochs = 0; *a = "epochs"; break;
    case 22: c->batch_size = 0; *a = "batch_size"; break;
    case 23: c->workers = -1; *a = "workers"; break;
    case 24: snprintf(c->optimizer, sizeof c->optimizer, "AdamW"); *a = "optimizer"; *b = "dotted"; break;
    case 25: snprintf(c->optimizer, sizeof c->optimizer, "torch.optim.LBFGS"); *a = "optimizer"; *b = "not one"; break;
    case 26: snn_kwargs_set_number(&c->optimizer_kwargs, "amsgrad", 1); *a = "optimizer_kwargs"; *b = "amsgrad"; break;
    case 27: snn_kwargs_set_number(&c->optimizer_kwargs, "lr", 0.0 / 0.0); *a = "optimizer_kwargs"; *b = "finite"; break;
    case 28: snprintf(c->loss_function, sizeof c->loss_function, "cross_entropy"); *a = "loss_function"; *b = "dotted"; break;
    case 29: snprintf(c->loss_function, sizeof c->loss_function, "torch.nn.functional.nll_loss"); *a = "loss_function"; break;
    case 30: snn_kwargs_set_number(&c->loss_kwargs, "label_smoothing", 0.1); *a = "loss_kwargs"; *b = "label_smoothing"; break;
    case 31: c->mixup_alpha = -0.5; *a = "mixup_alpha"; break;
    case 32: snprintf(c->scheduler, sizeof c->scheduler, "cosine"); *a = "scheduler"; *b = "dotted"; break;
    case 33: snprintf(c->scheduler, sizeof c->scheduler, "torch.optim.lr_scheduler.StepLR");
        snn_kwargs_set_number(&c->scheduler_kwargs, "T_max", 3); *a = "scheduler_kwargs"; *b = "T_max"; break;
    case 34: snn_kwargs_set_number(&c->scheduler_kwargs, "gamma", 0.5); *a = "scheduler_kwargs"; break;
    case 35: c->tensor_parallel_size = 0; *a = "tensor_parallel_size"; break;
    case 36: c->pipeline_parallel_size = 0; *a = "pipeline_parallel_size"; break;
    case 37: c->pipeline_microbatches = 0; *a = "pipeline_microbatches"; break;
    case 38: c->batch_size = 10; c->pipeline_microbatches = 4; *a = "batch_size"; *b = "pipeline_microbatches"; break;
    case 39: c->data_parallel = SNN_DP_REPLICATE; *a = "data_parallel"; break;
    case 40: c->precision.mode = (snn_precision_mode)9; *a = "precision"; break;
    case 41: c->precision.fp8_recipe = SNN_FP8_RECIPE_DELAYED; *a = "precision"; *b = "fp8_recipe"; break;
    case 42: c->memopt_level = 5; *a = "memopt_level"; break;
    case 43: c->memopt_checkpoint_budget = (snn_memopt_budget)4; *a = "memopt_checkpoint_budget"; break;
    case 44: c->execution_mode = (snn_exec_mode)5; *a = "execution_mode"; break;
    case 45: c->cuda_graph_warmup_steps = 0; *a = "cuda_graph_warmup_steps"; *b = "positive"; break;
    case 46: c->max_steps = 0; *a = "max_steps"; break;
    case 47: c->timing_warmup_steps = -1; *a = "timing_warmup_steps"; break;
    case 48: c->max_steps = 5; c->timing_warmup_steps = 5; *a = "timing_warmup_steps"; *b = "max_steps"; break;
    case 49: c->checkpoint_interval = -1; *a = "checkpoint_interval"; break;
    case 50: c->checkpoint_interval = 10; *a = "checkpoint_interval"; *b = "checkpoint_dir"; break;
    case 51: c->pipeline_parallel_size = 2; c->precision.mode = SNN_PRECISION_FP16;
        *a = "Vision PP currently supports fp32 and bf16"; break;
    case 52: c->pipeline_parallel_size = 2; c->model.step_mode = 's'; *a = "step_mode='m'"; break;
    case 53: c->memopt_level = 1; c->model.step_mode = 's'; *a = "memopt_level"; *b = "step_mode='m'"; break;
    case 54: c->execution_mode = SNN_EXEC_CUDA_GRAPH; c->tensor_parallel_size = 2; *a = "single-rank"; break;
    case 55: c->execution_mode = SNN_EXEC_CUDA_GRAPH; c->pipeline_parallel_size = 2; *a = "single-rank"; break;
    case 56: c->execution_mode = SNN_EXEC_CUDA_GRAPH; c->memopt_level = 2; *a = "cuda_graph"; *b = "memopt"; break;
    case 57: c->precision.mode = SNN_PRECISION_FP8; c->data_parallel = SNN_DP_FSDP2; *a = "requires DDP"; break;
    case 58: c->precision.mode = SNN_PRECISION_FP8; c->tensor_parallel_size = 2; *a = "requires DDP"; break;
    case 59: c->precision.mode = SNN_PRECISION_FP8; c->pipeline_parallel_size = 2; *a = "requires DDP"; break;
    case 60: c->precision.neuron_storage = SNN_NEURON_STORAGE_BF16; c->tensor_parallel_size = 2; *a = "requires DDP"; break;
    case 61: c->seed = (int64_t)1 << 60; *a = "seed"; break;
    default: break;
    }
}

static void test_training_rules(void) {
    snn_vision_training_config base = good_training();
    CHECK_MSG(snn_vision_training_config_validate(&base) == SNN_OK, "%s", snn_last_error());
    int n = 0;
    for (int i = 0;; i++) {
        snn_vision_training_config c = base;
        const char *a, *b;
        training_case(i, &c, &a, &b);
        if (!a) break;
        n++;
        CHECK_MSG(refused(snn_vision_training_config_validate(&c), a, b), "training case %d", i);
    }
    CHECK(n == 62);
    /* the same combinations that are fine: PP with bf16 and fp32, fp8 with ddp at TP=PP=1,
     * cuda_graph alone, TP 2 with fsdp2 and bf16 */
    snn_vision_training_config c = base;
    c.pipeline_parallel_size = 2;
    CHECK(snn_vision_training_config_validate(&c) == SNN_OK);
    c.precision.mode = SNN_PRECISION_FP32;
    CHECK(snn_vision_training_config_validate(&c) == SNN_OK);
    c = base;
    c.precision.mode = SNN_PRECISION_FP8;
    c.precision.fp8_recipe = SNN_FP8_RECIPE_DELAYED;
    CHECK_MSG(snn_vision_training_config_validate(&c) == SNN_OK, "%s", snn_last_error());
    c = base;
    c.execution_mode = SNN_EXEC_CUDA_GRAPH;
    CHECK(snn_vision_training_config_validate(&c) == SNN_OK);
    c = base;
    c.tensor_parallel_size = 2;
    c.data_parallel = SNN_DP_FSDP2;
    CHECK(snn_vision_training_config_validate(&c) == SNN_OK);
    /* what the engine cannot run is a separate, named refusal */
    CHECK(refused(snn_vision_training_config_check_runnable(&c), "fsdp2", NULL));
    c = base;
    c.mixup_alpha = 0.5;
    CHECK(snn_vision_training_config_validate(&c) == SNN_OK);
    CHECK(refused(snn_vision_training_config_check_runnable(&c), "mixup_alpha", NULL));
    c = base;
    c.memopt_level = 1;
    CHECK(refused(snn_vision_training_config_check_runnable(&c), "memopt_level", NULL));
    CHECK(snn_vision_training_config_check_runnable(&base) == SNN_OK);
}

static void prediction_case(int i, snn_vision_evaluation_config *e, const char **a, const char **b) {
    snn_vision_prediction_config *c = &e->base;
    *a = *b = NULL;
    switch (i) {
    case 0: c->artifact[0] = 0; *a = "artifact"; break;
    case 1: snprintf(c->dataset_builder, sizeof c->dataset_builder, "synthetic"); *a = "dataset_builder"; *b = "dotted"; break;
    case 2: snprintf(c->dataset_builder, sizeof c->dataset_builder, "my.data"); *a = "dataset_builder"; break;
    case 3: snn_kwargs_set_string(&c->dataset_kwargs, "root", "x"); *a = "dataset_kwargs"; break;
    case 4: c->input_layout = (snn_input_layout)3; *a = "input_layout"; break;
    case 5: c->batch_size = 0; *a = "batch_size"; break;
    case 6: c->workers = -2; *a = "workers"; break;
    case 7: c->tensor_parallel_size = 0; *a = "tensor_parallel_size"; break;
    case 8: c->pipeline_parallel_size = -1; *a = "pipeline_parallel_size"; break;
    case 9: c->pipeline_microbatches = 0; *a = "pipeline_microbatches"; break;
    case 10: c->batch_size = 6; c->pipeline_microbatches = 4; *a = "batch_size"; *b = "divisible"; break;
    case 11: c->data_parallel = SNN_DP_DDP; *a = "data_parallel"; *b = "ddp"; break;
    case 12: c->precision.mode = (snn_precision_mode)7; *a = "precision"; break;
    case 13: c->execution_mode = SNN_EXEC_CUDA_GRAPH; *a = "execution_mode"; break;
    case 14: c->execution_mode = SNN_EXEC_COMPILE; c->pipeline_parallel_size = 2; *a = "compile"; *b = "without PP"; break;
    case 15: c->execution_mode = SNN_EXEC_COMPILE; c->data_parallel = SNN_DP_FSDP2; *a = "compile"; break;
    case 16: c->pipeline_parallel_size = 2; c->precision.mode = SNN_PRECISION_FP16; *a = "Vision PP"; break;
    case 17: c->seed = -((int64_t)1 << 55); *a = "seed"; break;
    /* evaluation-only fields */
    case 18: snprintf(e->loss_function, sizeof e->loss_function, "mse"); *a = "loss_function"; *b = "dotted"; break;
    case 19: snprintf(e->loss_function, sizeof e->loss_function, "a.b"); *a = "loss_function"; break;
    case 20: snn_kwargs_set_number(&e->loss_kwargs, "reduction", 1); *a = "loss_kwargs"; break;
    case 21: e->timing_warmup_batches = -1; *a = "timing_warmup_batches"; break;
    default: break;
    }
}

static void test_inference_rules(void) {
    snn_vision_evaluation_config base = snn_vision_evaluation_config_default();
    base.base = good_prediction();
    CHECK_MSG(snn_vision_evaluation_config_validate(&base) == SNN_OK, "%s", snn_last_error());
    CHECK(snn_vision_prediction_config_validate(&base.base) == SNN_OK);
    int n = 0;
    for (int i = 0;; i++) {
        snn_vision_evaluation_config e = base;
        const char *a, *b;
        prediction_case(i, &e, &a, &b);
        if (!a) break;
        n++;
        CHECK_MSG(refused(snn_vision_evaluation_config_validate(&e), a, b), "evaluation case %d", i);
        if (i < 18) CHECK_MSG(refused(snn_vision_prediction_config_validate(&e.base), a, b), "prediction case %d", i);
    }
    CHECK(n == 22);
    /* item 62: TP2/PP2/K2/batch 4/fsdp2 is a valid evaluation config */
    snn_vision_evaluation_config e = base;
    e.base.tensor_parallel_size = 2;
    e.base.pipeline_parallel_size = 2;
    e.base.pipeline_microbatches = 2;
    e.base.batch_size = 4;
    e.base.data_parallel = SNN_DP_FSDP2;
    CHECK_MSG(snn_vision_evaluation_config_validate(&e) == SNN_OK, "%s", snn_last_error());
    CHECK(refused(snn_vision_prediction_config_check_runnable(&e.base), "fsdp2", NULL));
}

static void randomise(snn_vision_training_config *c) {
    c->model.time_steps = rnd(1, 16);
    c->model.num_classes = rnd(2, 100);
    c->model.convsnn.channels = rnd(1, 64);
    c->model.step_mode = 's';
    c->input_layout = SNN_LAYOUT_NTCHW;
    c->pipeline_microbatches = rnd(1, 4);
    c->batch_size = c->pipeline_microbatches * rnd(1, 16);
    c->workers = rnd(0, 8);
    c->epochs = rnd(1, 50);
    snprintf(c->loss_function, sizeof c->loss_function, "torch.nn.functional.mse_loss");
    c->mixup_alpha = 0.5;
    c->tensor_parallel_size = 2;
    c->data_parallel = SNN_DP_FSDP2;
    snprintf(c->checkpoint_dir, sizeof c->checkpoint_dir, "runs/ckpt-%d", rnd(0, 999));
    c->checkpoint_interval = rnd(1, 100);
    c->max_steps = rnd(10, 1000);
    c->timing_warmup_steps = rnd(0, 9);
    snprintf(c->optimizer, sizeof c->optimizer, "torch.optim.SGD");
    memset(&c->optimizer_kwargs, 0, sizeof c->optimizer_kwargs);
    float lr;
    snn_test_fill_uniform(&lr, 1, 1e-4f, 1.0f, &rs);
    snn_kwargs_set_number(&c->optimizer_kwargs, "lr", lr);
    snn_kwargs_set_number(&c->optimizer_kwargs, "momentum", 0.9);
    snn_kwargs_set_bool(&c->optimizer_kwargs, "nesterov", 1);
    snprintf(c->scheduler, sizeof c->scheduler, "torch.optim.lr_scheduler.CosineAnnealingLR");
    snn_kwargs_set_number(&c->scheduler_kwargs, "T_max", rnd(1, 500));
    c->seed = rnd(0, 1 << 30);
    snprintf(c->resume, sizeof c->resume, "runs/old/step_%08d", rnd(1, 99));
}

static void test_round_trip(void) {
    snn_vision_training_config c = good_training();
    randomise(&c);
    char *j = NULL, *j2 = NULL;
    CHECK_MSG(snn_vision_training_config_to_json(&c, &j) == SNN_OK, "%s", snn_last_error());
    snn_vision_training_config d;
    memset(&d, 0x5a, sizeof d);
    CHECK_MSG(j && snn_vision_training_config_from_json(j, &d) == SNN_OK, "%s", snn_last_error());
    CHECK(snn_vision_training_config_equal(&c, &d));
    CHECK(j && strstr(j, "\"_target_\":\t\"snn.vision.TrainingConfig\""));
    CHECK(j && strstr(j, "\"_target_\":\t\"snn.vision.ConvSNNConfig\""));
    CHECK(j && strstr(j, "\"_path_\""));
    CHECK(snn_vision_training_config_to_json(&d, &j2) == SNN_OK && j2 && !strcmp(j, j2));
    /* sorted keys: "_target_" < "batch_size" < ... < "workers" */
    CHECK(j && strstr(j, "batch_size") < strstr(j, "workers") && strstr(j, "checkpoint_dir") < strstr(j, "seed"));
    free(j);
    free(j2);
    /* any change makes them different (the equality is not vacuous) */
    d.model.convsnn.channels++;
    CHECK(!snn_vision_training_config_equal(&c, &d));

    /* spikformer with fp8 delayed, e4m3 storage, bf16 fwd, fp16 bwd (item 60) */
    snn_vision_training_config s = good_training();
    s.model = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER);
    s.model.spikformer.image_size = 32;
    s.model.spikformer.embed_dim = 8 * rnd(1, 8) * 4;
    s.model.spikformer.heads = 4;
    s.model.spikformer.depth = rnd(1, 4);
    s.precision.mode = SNN_PRECISION_FP8;
    s.precision.fp8_recipe = SNN_FP8_RECIPE_DELAYED;
    s.precision.neuron_storage = SNN_NEURON_STORAGE_E4M3;
    s.precision.neuron_fwd = SNN_NEURON_COMPUTE_BF16;
    s.precision.neuron_bwd = SNN_NEURON_COMPUTE_FP16;
    s.precision.amax_history_len = rnd(1, 64);
    CHECK_MSG(snn_vision_training_config_to_json(&s, &j) == SNN_OK, "%s", snn_last_error());
    CHECK(j && snn_vision_training_config_from_json(j, &d) == SNN_OK && snn_vision_training_config_equal(&s, &d));
    CHECK(d.precision.amax_history_len == s.precision.amax_history_len &&
          d.precision.neuron_bwd == SNN_NEURON_COMPUTE_FP16);
    free(j);

    /* fcsnn with a fractional tau survives */
    snn_vision_model_config m = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
    snn_test_fill_uniform(&m.fcsnn.tau, 1, 1.1f, 5.0f, &rs);
    m.fcsnn.hidden = rnd(1, 300);
    CHECK(snn_vision_model_config_to_json(&m, &j) == SNN_OK);
    snn_vision_model_config m2;
    CHECK(j && snn_vision_model_config_from_json(j, &m2) == SNN_OK && snn_vision_model_config_equal(&m, &m2));
    free(j);

    /* prediction and evaluation */
    snn_vision_evaluation_config e = snn_vision_evaluation_config_default();
    e.base = good_prediction();
    e.base.batch_size = 2 * rnd(1, 40);
    e.base.pipeline_microbatches = 2;
    e.base.precision.mode = SNN_PRECISION_FP32;
    snn_kwargs_set_number(&e.base.dataset_kwargs, "samples", rnd(1, 1000));
    e.timing_warmup_batches = rnd(0, 5);
    CHECK(snn_vision_evaluation_config_to_json(&e, &j) == SNN_OK);
    snn_vision_evaluation_config e2;
    CHECK(j && snn_vision_evaluation_config_from_json(j, &e2) == SNN_OK && snn_vision_evaluation_config_equal(&e, &e2));
    /* an evaluation config is not a prediction config */
    snn_vision_prediction_config p2;
    CHECK(j && refused(snn_vision_prediction_config_from_json(j, &p2), "EvaluationConfig", "PredictionConfig"));
    free(j);
    CHECK(snn_vision_prediction_config_to_json(&e.base, &j) == SNN_OK);
    CHECK(j && snn_vision_prediction_config_from_json(j, &p2) == SNN_OK && snn_vision_prediction_config_equal(&e.base, &p2));
    CHECK(j && !strstr(j, "loss_function"));  /* a prediction config has no loss field */
    CHECK(j && refused(snn_vision_evaluation_config_from_json(j, &e2), "PredictionConfig", NULL));
    CHECK(j && refused(snn_vision_training_config_from_json(j, &d), "PredictionConfig", NULL));
    free(j);
}

/* Replace the first occurrence of `from` in a JSON text. */
static char *edit(const char *json, const char *from, const char *to) {
    const char *p = strstr(json, from);
    if (!p) return NULL;
    size_t n = strlen(json) - strlen(from) + strlen(to) + 1;
    char *o = malloc(n);
    if (!o) return NULL;
    memcpy(o, json, (size_t)(p - json));
    strcpy(o + (p - json), to);
    strcat(o, p + strlen(from));
    return o;
}

static void test_decode_errors(void) {
    snn_vision_training_config c = good_training();
    snprintf(c.resume, sizeof c.resume, "runs/a/step_00000010");
    char *j = NULL;
    CHECK(snn_vision_training_config_to_json(&c, &j) == SNN_OK);
    if (!j) return;
    snn_vision_training_config d;
    struct { const char *from, *to, *a, *b; } cases[] = {
        {"snn.vision.TrainingConfig", "evil.module.Config", "unsupported config target", "evil.module.Config"},
        {"snn.vision.ConvSNNConfig", "torch.nn.Module", "unsupported config target", "torch.nn.Module"},
        {"snn.precision.PrecisionConfig", "os.system", "unsupported config target", NULL},
        {"\"workers\":", "\"num_workers\":", "unexpected field", "num_workers"},
        {"\"channels\":", "\"width_mult\":", "unexpected field", "width_mult"},
        {"\"batch_size\":\t32", "\"batch_size\":\t3.5", "batch_size", "integer"},
        {"\"batch_size\":\t32", "\"batch_size\":\t\"32\"", "batch_size", "integer"},
        {"\"input_layout\":\t\"NCHW\"", "\"input_layout\":\t\"NHWC\"", "input_layout", NULL},
        {"\"data_parallel\":\t\"ddp\"", "\"data_parallel\":\t\"zero3\"", "data_parallel", NULL},
        {"\"mode\":\t\"bf16\"", "\"mode\":\t\"fp64\"", "precision", "mode"},
        {"\"fp8_recipe\":", "\"strictness\":\t\"warn\",\"fp8_recipe\":", "precision", "strictness"},
        {"\"memopt_compress_inputs\":\ttrue", "\"memopt_compress_inputs\":\t1", "memopt_compress_inputs", NULL},
        {"\"epochs\":\t1", "\"epochs\":\t0", "epochs", NULL},
        {"\"_path_\"", "\"path\"", "_path_", NULL},
        {"\"step_mode\":\t\"m\"", "\"step_mode\":\t\"multi\"", "model.step_mode", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = edit(j, cases[i].from, cases[i].to);
        CHECK_MSG(bad != NULL, "case %zu: pattern %s not in %s", i, cases[i].from, j);
        if (!bad) continue;
        CHECK_MSG(refused(snn_vision_training_config_from_json(bad, &d), cases[i].a, cases[i].b), "decode case %zu", i);
        free(bad);
    }
    /* a missing model is refused; garbage is refused */
    CHECK(refused(snn_vision_training_config_from_json("{\"_target_\": \"snn.vision.TrainingConfig\", "
                                                       "\"dataset_builder\": \"snn.data.fashion_mnist\"}", &d),
                  "model", NULL));
    CHECK(refused(snn_vision_training_config_from_json("[1, 2]", &d), "JSON object", NULL));
    CHECK(refused(snn_vision_training_config_from_json("{\"epochs\": 1}", &d), "_target_", NULL));
    /* missing optional fields take the defaults */
    CHECK_MSG(snn_vision_training_config_from_json("{\"_target_\": \"snn.vision.TrainingConfig\", \"model\": "
                                                   "{\"_target_\": \"snn.vision.FCSNNConfig\"}, \"dataset_builder\": "
                                                   "\"snn.data.synthetic\"}", &d) == SNN_OK, "%s", snn_last_error());
    CHECK(d.batch_size == 32 && d.epochs == 1 && d.workers == 4 && d.seed == 1234 && d.max_steps == SNN_VISION_UNSET &&
          d.precision.mode == SNN_PRECISION_BF16 && d.model.time_steps == 4 && d.model.step_mode == 'm' &&
          !strcmp(d.optimizer, "torch.optim.AdamW") && snn_kwargs_get(&d.optimizer_kwargs, "lr")->num[0] == 1e-3);
    free(j);
}

static void test_recipe(void) {
    snn_vision_training_config c = good_training();
    randomise(&c);
    char *r = NULL;
    CHECK(snn_vision_training_recipe_json(&c, &r) == SNN_OK);
    if (!r) return;
    CHECK(!strstr(r, "\"epochs\"") && !strstr(r, "max_steps") && !strstr(r, "checkpoint_dir") &&
          !strstr(r, "checkpoint_interval") && !strstr(r, "\"resume\""));
    int match = -1;
    CHECK(snn_vision_recipe_matches(r, &c, &match) == SNN_OK && match == 1);
    /* the run-specific fields may change between a run and its resume */
    snn_vision_training_config c2 = c;
    c2.epochs += 3;
    c2.max_steps += 10;
    c2.checkpoint_interval = 0;
    c2.checkpoint_dir[0] = 0;
    snprintf(c2.resume, sizeof c2.resume, "elsewhere");
    CHECK(snn_vision_recipe_matches(r, &c2, &match) == SNN_OK && match == 1);
    /* but not the rest */
    c2 = c;
    c2.batch_size = c.batch_size * 2;
    CHECK(snn_vision_recipe_matches(r, &c2, &match) == SNN_OK && match == 0);
    c2 = c;
    c2.precision.mode = SNN_PRECISION_FP32;
    CHECK(snn_vision_recipe_matches(r, &c2, &match) == SNN_OK && match == 0);
    free(r);
    /* a legacy precision string is upgraded: "bf16" matches a default bf16 config, but not
     * one with neuron fields (item 77) */
    c = good_training();
    CHECK(snn_vision_training_recipe_json(&c, &r) == SNN_OK);
    if (!r) return;
    const char *p0 = strstr(r, "\"precision\":\t{");
    const char *p1 = p0 ? strchr(p0, '}') : NULL;
    CHECK(p0 && p1);
    if (!p0 || !p1) return;
    size_t pre = (size_t)(p0 - r);
    char *legacy = malloc(strlen(r) + 32);
    memcpy(legacy, r, pre);
    strcpy(legacy + pre, "\"precision\": \"bf16\"");
    strcat(legacy, p1 + 1);
    CHECK_MSG(snn_vision_recipe_matches(legacy, &c, &match) == SNN_OK && match == 1, "%s", snn_last_error());
    c2 = c;
    c2.precision.neuron_storage = SNN_NEURON_STORAGE_BF16;
    CHECK(snn_vision_recipe_matches(legacy, &c2, &match) == SNN_OK && match == 0);
    char *bad = edit(legacy, "\"bf16\"", "\"fp8\"");
    CHECK(bad && refused(snn_vision_recipe_matches(bad, &c, &match), "legacy precision string", "fp8"));
    free(bad);
    bad = edit(r, "\"batch_size\"", "\"epochs\":\t2,\"batch_size\"");
    CHECK(bad && refused(snn_vision_recipe_matches(bad, &c, &match), "run-specific", "epochs"));
    free(bad);
    free(legacy);
    free(r);
}

/* zoo model -> vision config -> the same model (config text and every weight) */
static void test_from_zoo(void) {
    snn_model *z[3] = {NULL, NULL, NULL};
    snn_fcsnn_opts f = {.in_features = 20 + rnd(0, 50), .hidden = rnd(4, 40), .depth = rnd(1, 3), .classes = rnd(2, 9),
                        .tau = 1.5f + (float)rnd(0, 10) / 8};
    snn_convsnn_opts cv = {.in_channels = rnd(1, 3), .height = 4 * rnd(1, 4), .width = 4 * rnd(1, 4),
                           .channels = rnd(1, 8), .classes = rnd(2, 9)};
    snn_spikformer_opts sp = {.in_channels = 3, .image_size = 16 * rnd(1, 2), .classes = rnd(2, 9), .embed_dim = 32,
                              .heads = 4, .depth = rnd(1, 2), .mlp_ratio = 2};
    uint64_t seed = (uint64_t)rnd(1, 1000);
    CHECK(snn_fcsnn_create(&f, seed, &z[0]) == SNN_OK);
    CHECK(snn_convsnn_create(&cv, seed, &z[1]) == SNN_OK);
    CHECK(snn_spikformer_create(&sp, seed, &z[2]) == SNN_OK);
    for (int i = 0; i < 3; i++) {
        if (!z[i]) continue;
        snn_vision_model_config mc;
        snn_model *b = NULL;
        CHECK_MSG(snn_vision_model_config_from_zoo(snn_model_config_json(z[i]), 3, &mc) == SNN_OK, "%s", snn_last_error());
        CHECK(mc.time_steps == 3 && snn_vision_model_build(&mc, seed, &b) == SNN_OK && b);
        if (b) {
            CHECK(!strcmp(snn_model_config_json(b), snn_model_config_json(z[i])));
            CHECK(snn_model_num_params(b) == snn_model_num_params(z[i]) &&
                  !memcmp(snn_model_params(b), snn_model_params(z[i]), snn_model_num_params(b) * sizeof(float)));
        }
        snn_model_free(b);
        snn_model_free(z[i]);
    }
    snn_vision_model_config mc;
    CHECK(refused(snn_vision_model_config_from_zoo("{\"model\":\"mlp\",\"width\":3}", 4, &mc), "mlp", NULL));
    CHECK(refused(snn_vision_model_config_from_zoo("{\"model\":\"fcsnn\",\"widht\":3}", 4, &mc), "widht", NULL));
}

int main(void) {
    rs = snn_test_seed();
    test_training_rules();
    test_inference_rules();
    test_round_trip();
    test_decode_errors();
    test_recipe();
    test_from_zoo();
    return snn_test_finish("test_vision_config");
}
