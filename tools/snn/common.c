#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "common.h"
#include "snn/checkpoint.h"
#include "snn/loss.h"

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void model_flags_defaults(model_flags *f) {
    memset(f, 0, sizeof *f);
    f->model = "fcsnn";
    f->T = 4;
}

int model_flags_options(model_flags *f, opt *t) {
    int n = 0;
    t[n++] = (opt){"--model", OPT_STRING, &f->model, "fcsnn | convsnn | spikformer (default fcsnn)", NULL, 0};
    t[n++] = (opt){"--T", OPT_INT, &f->T, "time steps (default 4)", "--time-steps", 0};
    t[n++] = (opt){"--hidden", OPT_INT, &f->hidden, "fcsnn: hidden width (default 512)", NULL, 0};
    t[n++] = (opt){"--depth", OPT_INT, &f->depth, "fcsnn: [Linear->LIF] blocks (2); spikformer: blocks (6)", NULL, 0};
    t[n++] = (opt){"--tau", OPT_FLOAT, &f->tau, "fcsnn: LIF time constant (default 2)", NULL, 0};
    t[n++] = (opt){"--channels", OPT_INT, &f->channels, "convsnn: conv channels (default 128)", NULL, 0};
    t[n++] = (opt){"--image-size", OPT_INT, &f->image_size, "spikformer: image side, multiple of 16 (default 224)", NULL, 0};
    t[n++] = (opt){"--num-classes", OPT_INT, &f->num_classes, "classes of synthetic data (10; spikformer 1000)", "--classes", 0};
    t[n++] = (opt){"--embed-dim", OPT_INT, &f->embed_dim, "spikformer: embedding width (default 384)", NULL, 0};
    t[n++] = (opt){"--heads", OPT_INT, &f->heads, "spikformer: attention heads (default 12)", NULL, 0};
    return n;
}

static void check_positive(const char *name, int v) {
    if (v < 0) die_usage("%s must be positive, got %d", name, v);
}

snn_status model_build(const model_flags *f, int c, int h, int w, int classes, uint64_t seed,
                       snn_model **out) {
    check_positive("--hidden", f->hidden);
    check_positive("--depth", f->depth);
    check_positive("--channels", f->channels);
    check_positive("--image-size", f->image_size);
    check_positive("--embed-dim", f->embed_dim);
    check_positive("--heads", f->heads);
    if (f->T <= 0 || f->T > 100000) die_usage("--T must be between 1 and 100000, got %d", f->T);
    if (!strcmp(f->model, "fcsnn")) {
        snn_fcsnn_opts o = {.in_features = c * h * w, .hidden = f->hidden, .depth = f->depth,
                            .classes = classes, .tau = f->tau};
        return snn_fcsnn_create(&o, seed, out);
    }
    if (!strcmp(f->model, "convsnn")) {
        snn_convsnn_opts o = {.in_channels = c, .height = h, .width = w, .channels = f->channels,
                              .classes = classes};
        return snn_convsnn_create(&o, seed, out);
    }
    if (!strcmp(f->model, "spikformer")) {
        if (h != w) die_usage("spikformer needs square images, the data has %dx%d", h, w);
        snn_spikformer_opts o = {.in_channels = c, .image_size = h, .classes = classes,
                                 .embed_dim = f->embed_dim, .heads = f->heads, .depth = f->depth};
        return snn_spikformer_create(&o, seed, out);
    }
    die_usage("unknown model '%s' (choose fcsnn, convsnn or spikformer)", f->model);
}

snn_status data_load(const data_flags *d, const model_flags *f, uint64_t seed, snn_dataset **train,
                     snn_dataset **test) {
    if (train) *train = NULL;
    if (test) *test = NULL;
    const char *name = d->dataset;
    if (!name) die_usage("--dataset is required (fashion-mnist, digits or synthetic)");
    if (!strcmp(name, "fashion-mnist") || !strcmp(name, "fashion_mnist")) {
        if (train) SNN_TRY_TOOL(snn_dataset_load_fashion_mnist(d->data_dir, 1, train));
        if (test) SNN_TRY_TOOL(snn_dataset_load_fashion_mnist(d->data_dir, 0, test));
        return SNN_OK;
    }
    if (!strcmp(name, "digits")) {
        char path[4096];
        const char *p = NULL;
        if (d->data_dir) {
            snprintf(path, sizeof path, "%s/digits.csv.gz", d->data_dir);
            p = path;
        }
        snn_dataset *all = NULL, *tr = NULL, *te = NULL;
        SNN_TRY_TOOL(snn_dataset_load_digits_csv(p, &all));
        snn_status st = snn_dataset_split(all, 0.2, 1234, &tr, &te);
        snn_dataset_free(all);
        if (st != SNN_OK) return st;
        if (train) *train = tr; else snn_dataset_free(tr);
        if (test) *test = te; else snn_dataset_free(te);
        return SNN_OK;
    }
    if (!strcmp(name, "synthetic")) {
        int spk = !strcmp(f->model, "spikformer");
        int c = spk ? 3 : 1, s = spk ? (f->image_size ? f->image_size : 224) : 28;
        int classes = f->num_classes ? f->num_classes : (spk ? 1000 : 10);
        if (train) SNN_TRY_TOOL(snn_dataset_synthetic(d->synthetic_train, c, s, s, classes, seed, train));
        if (test) SNN_TRY_TOOL(snn_dataset_synthetic(d->synthetic_test, c, s, s, classes, seed + 1, test));
        return SNN_OK;
    }
    die_usage("unknown dataset '%s' (choose fashion-mnist, digits or synthetic)", name);
}

void score_batch(const float *y, int T, int N, int C, const int32_t *yb, int valid, double *mean,
                 long *correct, double *loss_sum) {
    for (int i = 0; i < valid; i++) {
        /* prediction and cross-entropy on the mean output over T */
        int best = 0;
        double mx = -1e300, z = 0;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += y[((size_t)t * N + i) * C + c];
            mean[c] = s / T;
            if (mean[c] > mx) {
                mx = mean[c];
                best = c;
            }
        }
        for (int c = 0; c < C; c++) z += exp(mean[c] - mx);
        *loss_sum += -(mean[yb[i]] - mx - log(z));
        *correct += best == yb[i];
    }
}

snn_status evaluate(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc,
                    uint64_t seed, double *accuracy, double *loss) {
    int n = snn_dataset_size(ds);
    size_t F = snn_dataset_features(ds);
    int C = (int)snn_model_output_numel(m);
    if (n <= 0) return SNN_E_INVALID;
    if (N > n) N = n;
    SNN_TRY_TOOL(snn_model_plan(m, T, N));
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)N);
    double *mean = malloc(sizeof(double) * (size_t)C);
    snn_status st = (xb && xt && yb && idx && mean) ? SNN_OK : SNN_E_NOMEM;
    long correct = 0;
    double loss_sum = 0;
    for (int start = 0; start < n && st == SNN_OK; start += N) {
        /* the last batch is padded with sample 0; only the `valid` real samples count */
        int valid = n - start < N ? n - start : N;
        for (int i = 0; i < N; i++) idx[i] = (uint32_t)(start + (i < valid ? i : 0));
        st = snn_dataset_batch(ds, idx, N, xb, yb);
        if (st == SNN_OK) st = snn_encode(enc, xb, N, F, T, seed, 0xE7A1000000000000ull + (uint64_t)start, xt);
        const float *y = NULL;
        if (st == SNN_OK) st = snn_model_forward(m, xt, 0, &y);
        if (st != SNN_OK) break;
        score_batch(y, T, N, C, yb, valid, mean, &correct, &loss_sum);
    }
    free(xb); free(xt); free(yb); free(idx); free(mean);
    if (st != SNN_OK) return st;
    *accuracy = (double)correct / n;
    if (loss) *loss = loss_sum / n;
    return SNN_OK;
}

int precision_flags_options(precision_flags *f, opt *t) {
    int n = 0;
    t[n++] = (opt){"--precision", OPT_STRING, &f->mode, "fp32 | fp16 | bf16 | fp8 (default fp32)", NULL, 0};
    t[n++] = (opt){"--fp8-recipe", OPT_STRING, &f->recipe, "auto | delayed | current | block | mxfp8 (fp8 only)", NULL, 0};
    t[n++] = (opt){"--neuron-storage", OPT_STRING, &f->storage, "fp32 | fp16 | bf16 | float8_e4m3fn | float8_e5m2", "--triton-storage", 0};
    t[n++] = (opt){"--neuron-fwd", OPT_STRING, &f->fwd, "neuron forward arithmetic: fp8 | fp16 | bf16 | fp32", "--triton-fwd", 0};
    t[n++] = (opt){"--neuron-bwd", OPT_STRING, &f->bwd, "neuron backward arithmetic: fp8 | fp16 | bf16 | fp32", "--triton-bwd", 0};
    t[n++] = (opt){"--device", OPT_STRING, &f->device, "cpu (default) | cuda | cuda:N", NULL, 0};
    return n;
}

int precision_flags_given(const precision_flags *f) {
    return f->mode || f->recipe || f->storage || f->fwd || f->bwd;
}

snn_precision_config precision_flags_config(const precision_flags *f) {
    snn_precision_config c;
    snn_status st = snn_precision_config_parse(f->mode ? f->mode : "fp32", f->recipe, f->storage, f->fwd, f->bwd, &c);
    if (st != SNN_OK) die_status(SNN_E_INVALID, "invalid precision configuration");
    return c;
}

void load_checkpoint(const char *path, uint64_t seed, const precision_flags *pf, snn_model **m, snn_ckpt **ck,
                     snn_precision **prec) {
    snn_status st = snn_model_load(path, seed, m, ck);
    if (st != SNN_OK) die_status(st, NULL);
    snn_precision_config pcfg;
    const char *pc = snn_ckpt_metadata(*ck, "snn_precision_config");
    if (precision_flags_given(pf)) {
        pcfg = precision_flags_config(pf);
        if (snn_precision_check_checkpoint(&pcfg, *ck) != SNN_OK) die_status(SNN_E_INVALID, NULL);
    } else if (!pc || snn_precision_config_from_json(pc, &pcfg) != SNN_OK) {
        pcfg = snn_precision_config_default();
    }
    if (pf->device && !strncmp(pf->device, "cuda", 4)) {
        /* the GPU runner takes the precision as its compute type (tools/snn/train_cuda.c) */
        *prec = NULL;
        return;
    }
    st = snn_prepare_model_for_precision(*m, pf->device ? pf->device : "cpu", &pcfg, prec);
    if (st != SNN_OK) die_status(st, "preparing the precision");
    /* FP8 scales and amax histories, the loss scale and the step count of the trained model:
     * without them delayed scaling would quantise with its initial scale of 1. */
    st = snn_training_checkpoint_restore(*m, *prec, NULL, *ck);
    if (st != SNN_OK) die_status(st, "restoring the precision state");
}

int device_parse(const char *what, const char *dev) {
    if (!dev || !strcmp(dev, "cpu")) return -1;
    if (strncmp(dev, "cuda", 4))
        die_usage("%s%s--device must be cpu, cuda or cuda:N (got '%s')", what ? what : "", what ? ": " : "", dev);
#ifndef SNN_HAVE_CUDA
    die_usage("this snn was built without CUDA (configure with -DSNN_CUDA=ON)");
    return -1;
#else
    if (!dev[4]) return 0;
    char *end = NULL;
    long n = dev[4] == ':' ? strtol(dev + 5, &end, 10) : -1;
    if (n < 0 || n > 1024 || !end || end == dev + 5 || *end)
        die_usage("%s%s--device must be cpu, cuda or cuda:N (got '%s')", what ? what : "", what ? ": " : "", dev);
    return (int)n;
#endif
}
