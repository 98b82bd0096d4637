/* Training and inference of a zoo model (FC-SNN by default; --model convsnn | spikformer) through the one engine (snn_model_to + the CUDA op table)
 * against the whole-model GPU runner (snn_cuda_model_*, one CUDA graph per step) on the same
 * network, in the same process: the A/B that says how far the engine is from the runner it is
 * replacing.
 *
 *   snn_engine_bench [--width 4096] [--depth 20] [--T 16] [--batch 256] [--in 784]
 *                    [--classes 10] [--precision bf16] [--trials 5] [--steps 5] [--json FILE]
 *                    [--model fcsnn|convsnn|spikformer] [--image 128] [--embed 384] [--heads 12]
 *                    [--runner 1]   (0: the engine only, e.g. under a kernel profiler)
 *                    [--optimizer adamw|sgd]  (sgd: momentum 0.9, the hand-built FC-SNN's)
 *
 * Engine step: snn_model_forward (input copied in, output copied out), the loss mean(y²) and
 * its gradient on the host, snn_precision_backward (backward, loss scaling, AdamW) — the loop
 * of examples/custom_loop.c, which is what a user of the library's own-loop path runs. Runner
 * step: snn_cuda_model_train_step (cross-entropy on the device). The engine runs twice: with
 * the input in host memory (copied in each step, as the runner's is) and with the batch
 * already on the GPU (snn_model_forward_view; engine_device_input_*). Inference: one forward in
 * evaluation mode each. Each trial times `steps` steps after one warm-up; the medians of the
 * trials are reported. One JSON line with the build's commit. Needs a GPU (exit 77 without). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "snn/cuda.h"
#include "snn/snn.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int die(const char *what) {
    fprintf(stderr, "engine_bench: error: %s: %s\n", what, snn_last_error());
    return 1;
}

static int parse(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv) {
    long width = 4096, depth = 20, T = 16, B = 256, in = 784, classes = 10, trials = 5, steps = 5;
    long image = 128, embed = 384, heads = 12, runner = 1, engine = 1, infer = 1;
    const char *prec = "bf16", *json = NULL, *model = "fcsnn", *optim = "adamw";
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        long *n = !strcmp(a, "--width") ? &width : !strcmp(a, "--depth") ? &depth : !strcmp(a, "--T") ? &T
                : !strcmp(a, "--batch") ? &B : !strcmp(a, "--in") ? &in : !strcmp(a, "--classes") ? &classes
                : !strcmp(a, "--trials") ? &trials : !strcmp(a, "--steps") ? &steps
                : !strcmp(a, "--image") ? &image : !strcmp(a, "--embed") ? &embed : !strcmp(a, "--heads") ? &heads
                : !strcmp(a, "--runner") ? &runner : !strcmp(a, "--engine") ? &engine
                : !strcmp(a, "--infer") ? &infer : NULL;
        if (n) {
            long lo = n == &runner || n == &engine || n == &infer ? 0 : 1;
            if (!parse(v, lo, 1 << 16, n)) {
                fprintf(stderr, "engine_bench: error: %s expects an integer in [%ld, 65536], got '%s'\n", a, lo, v);
                return 2;
            }
        } else if (!strcmp(a, "--precision")) {
            prec = v;
        } else if (!strcmp(a, "--model")) {
            if (strcmp(v, "fcsnn") && strcmp(v, "convsnn") && strcmp(v, "spikformer")) {
                fprintf(stderr, "engine_bench: error: --model is fcsnn, convsnn or spikformer, got '%s'\n", v);
                return 2;
            }
            model = v;
        } else if (!strcmp(a, "--optimizer")) {
            if (strcmp(v, "adamw") && strcmp(v, "sgd")) {
                fprintf(stderr, "engine_bench: error: --optimizer is adamw or sgd (momentum 0.9), got '%s'\n", v);
                return 2;
            }
            optim = v;
        } else if (!strcmp(a, "--json")) {
            json = v;
        } else {
            fprintf(stderr, "engine_bench: error: unknown option %s\n", a);
            return 2;
        }
    }
    if (trials > 64) trials = 64;
    snn_precision_config cfg;
    if (snn_precision_config_parse(prec, NULL, NULL, NULL, NULL, &cfg) != SNN_OK) return die("precision");
    snn_fcsnn_opts fo = {.in_features = (int)in, .hidden = (int)width, .depth = (int)depth, .classes = (int)classes,
                         .tau = 2.0f};
    /* convsnn: --in is the image side (1 channel), --width the channels; spikformer: 3 x
     * --image², --embed, --heads, --depth */
    snn_convsnn_opts co = {.in_channels = 1, .height = (int)in, .width = (int)in, .channels = (int)width,
                           .classes = (int)classes};
    snn_spikformer_opts so = {.in_channels = 3, .image_size = (int)image, .classes = (int)classes,
                              .embed_dim = (int)embed, .heads = (int)heads, .depth = (int)depth, .mlp_ratio = 4.0f};
    snn_model *m = NULL, *hm = NULL;
    for (int k = 0; k < 2; k++) {
        snn_model **dst = k ? &hm : &m;
        snn_status st = !strcmp(model, "fcsnn") ? snn_fcsnn_create(&fo, 7, dst)
                      : !strcmp(model, "convsnn") ? snn_convsnn_create(&co, 7, dst) : snn_spikformer_create(&so, 7, dst);
        if (st != SNN_OK) return die("model");
    }
    in = (long)snn_model_input_numel(m);
    if (snn_model_to(m, "cuda") != SNN_OK) {
        fprintf(stderr, "engine_bench: skipped: %s\n", snn_last_error());
        return 77;
    }
    snn_precision *p = NULL;
    snn_optimizer *opt = NULL;
    const int sgd = !strcmp(optim, "sgd");
    snn_optim_opts oo = snn_optim_defaults(sgd ? SNN_OPTIM_SGD : SNN_OPTIM_ADAMW);
    oo.lr = sgd ? 1e-3f : 1e-4f;
    if (sgd) oo.momentum = 0.9f;
    if (snn_prepare_model_for_precision(m, "cuda", &cfg, &p) != SNN_OK) return die("prepare");
    if (snn_optimizer_create_for_model(&oo, m, &opt) != SNN_OK) return die("optimizer");
    if (snn_model_plan(m, (int)T, (int)B) != SNN_OK) return die("plan");
    size_t nx = (size_t)T * B * in, ny = (size_t)T * B * classes;
    float *x = malloc(nx * sizeof *x), *dy = malloc(ny * sizeof *dy);
    int32_t *labels = malloc((size_t)B * sizeof *labels);
    if (!x || !dy || !labels) return die("out of memory");
    snn_rng rng = snn_rng_make(3, 1);
    /* Poisson-like spikes of a 30 % rate as the input, as an encoded image would be */
    for (size_t i = 0; i < nx; i++) x[i] = snn_rng_next_uniform(&rng) < 0.3f ? 1.0f : 0.0f;
    for (long b = 0; b < B; b++) labels[b] = (int32_t)(b % classes);

    /* the same batch already on the GPU (a loader that prefetches): snn_model_forward_view */
    snn_cuda *xc = NULL;
    float *x_dev = NULL;
    if (snn_cuda_create(0, 0, &xc) != SNN_OK || snn_cuda_alloc(xc, nx * sizeof *x, (void **)&x_dev) != SNN_OK ||
        snn_cuda_upload(xc, x_dev, x, nx * sizeof *x) != SNN_OK)
        return die("device input");
    double eng_train[64] = {0}, eng_inf[64] = {0}, dev_train[64] = {0}, dev_inf[64] = {0}, run_train[64] = {0},
           run_inf[64] = {0}, loss = 0;
    /* --engine 0 / --infer 0 leave phases out (a kernel profile of one part) */
    for (int t = 0; engine && t < trials; t++) {
        /* phases: 0 train / 1 infer with a host input, 2 train / 3 infer with a device input */
        for (int phase = 0; phase < 4; phase++) {
            const int training = phase % 2 == 0;
            if (!training && !infer) continue;
            double t0 = 0;
            for (long s = 0; s <= steps; s++) {
                if (s == 1) t0 = now_s(); /* step 0 warms up */
                const float *y;
                if (phase < 2) {
                    if (snn_model_forward(m, x, training, &y) != SNN_OK) return die("engine forward");
                } else {
                    snn_tensor_view xv = {.dtype = SNN_F32, .device = "cuda", .data = x_dev, .numel = nx};
                    snn_tensor_view yv = {.device = "cpu"};
                    if (snn_model_forward_view(m, &xv, training, &yv) != SNN_OK) return die("engine forward (view)");
                    y = yv.data;
                }
                if (!training) continue;
                loss = 0;
                for (size_t i = 0; i < ny; i++) {
                    loss += (double)y[i] * y[i];
                    dy[i] = 2.0f * y[i] / (float)ny;
                }
                if (snn_precision_backward(p, dy, opt, -1.0f, 0.0f, NULL, NULL) != SNN_OK) return die("engine step");
            }
            double dt = (now_s() - t0) / (double)steps;
            (phase == 0 ? eng_train : phase == 1 ? eng_inf : phase == 2 ? dev_train : dev_inf)[t] = dt;
        }
    }
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);

    /* the runner on the same network */
    snn_cuda *c = NULL;
    if (snn_cuda_create(0, 0, &c) != SNN_OK) return die("cuda context");
    snn_cuda_model_opts go = {.T = (int)T, .N = (int)B,
                              .compute = !strcmp(prec, "bf16") ? SNN_BF16 : !strcmp(prec, "fp16") ? SNN_F16 : SNN_F32,
                              .loss = SNN_CUDA_LOSS_CE};
    snn_cuda_model *g = NULL;
    int have_runner = runner && strcmp(prec, "fp8") != 0;
    if (have_runner && snn_cuda_model_create(c, hm, &go, &oo, &g) != SNN_OK) return die("runner");
    float *out = malloc(ny * sizeof *out);
    for (int t = 0; have_runner && t < trials; t++) {
        double t0 = 0;
        for (long s = 0; s <= steps; s++) {
            if (s == 1) {
                snn_cuda_synchronize(c);
                t0 = now_s();
            }
            if (snn_cuda_model_train_step(g, x, 1, labels, -1.0f) != SNN_OK) return die("runner step");
        }
        snn_cuda_synchronize(c);
        run_train[t] = (now_s() - t0) / (double)steps;
        for (long s = 0; infer && s <= steps; s++) {
            if (s == 1) {
                snn_cuda_synchronize(c);
                t0 = now_s();
            }
            if (snn_cuda_model_forward(g, x, 1, (int)B, out) != SNN_OK) return die("runner forward");
        }
        snn_cuda_synchronize(c);
        run_inf[t] = (now_s() - t0) / (double)steps;
    }
    double et = median(eng_train, (int)trials), ei = median(eng_inf, (int)trials);
    double dt_ = median(dev_train, (int)trials), di = median(dev_inf, (int)trials);
    double rt = have_runner ? median(run_train, (int)trials) : 0, ri = have_runner ? median(run_inf, (int)trials) : 0;
    char line[1024];
#define RATE(sec) ((sec) > 0 ? (double)B / (sec) : 0.0) /* 0: the phase did not run */
    snprintf(line, sizeof line,
             "{\"bench\": \"engine_%s\", \"commit\": \"%s\", \"commit_dirty\": %d, \"precision\": \"%s\", \"optimizer\": \"%s\", "
             "\"width\": %ld, \"depth\": %ld, \"T\": %ld, \"batch\": %ld, \"in\": %ld, \"classes\": %ld, "
             "\"trials\": %ld, \"steps\": %ld, \"engine_train_samples_per_s\": %.1f, "
             "\"engine_infer_samples_per_s\": %.1f, \"engine_device_input_train_samples_per_s\": %.1f, "
             "\"engine_device_input_infer_samples_per_s\": %.1f, \"runner_train_samples_per_s\": %.1f, "
             "\"runner_infer_samples_per_s\": %.1f, \"engine_over_runner_train\": %.4f, "
             "\"engine_over_runner_infer\": %.4f, \"last_loss\": %.6g}",
             model, snn_build_commit(), snn_build_dirty(), prec, optim, width, depth, T, B, in, classes, trials, steps,
             RATE(et), RATE(ei), RATE(dt_), RATE(di), RATE(rt), RATE(ri), rt > 0 && et > 0 ? rt / et : 0.0,
             ri > 0 && ei > 0 ? ri / ei : 0.0,
             loss / (double)ny);
    puts(line);
    if (json) {
        FILE *f = fopen(json, "a");
        if (!f || fprintf(f, "%s\n", line) < 0 || fclose(f) != 0) {
            fprintf(stderr, "engine_bench: error: cannot write %s\n", json);
            return 1;
        }
    }
    free(out);
    snn_cuda_free(x_dev);
    snn_cuda_destroy(xc);
    snn_cuda_model_destroy(g);
    snn_cuda_destroy(c);
    snn_model_free(hm);
    free(x);
    free(dy);
    free(labels);
    return 0;
}
