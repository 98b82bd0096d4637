#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <errno.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "snn/checkpoint.h"
#include "snn/comm.h"
#include "snn/cuda.h"
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
    t[n++] = opt_num("--T", OPT_INT, &f->T, "time steps (default 4)", "--time-steps", 1, 100000);
    t[n++] = opt_num("--hidden", OPT_INT, &f->hidden, "fcsnn: hidden width (default 512)", NULL, 1, 65536);
    t[n++] = opt_num("--depth", OPT_INT, &f->depth, "fcsnn: [Linear->LIF] blocks (2); spikformer: blocks (6)", NULL, 1, 1000);
    t[n++] = opt_num("--tau", OPT_FLOAT, &f->tau, "fcsnn: LIF time constant, > 1 (default 2)", NULL, 1e-30, 1e6);
    t[n++] = opt_num("--channels", OPT_INT, &f->channels, "convsnn: conv channels (default 128)", NULL, 1, 4096);
    t[n++] = opt_num("--image-size", OPT_INT, &f->image_size, "spikformer: image side, multiple of 16 (default 224)", NULL, 16, 4096);
    t[n++] = opt_num("--num-classes", OPT_INT, &f->num_classes, "classes of synthetic data (10; spikformer 1000)", "--classes", 2, 100000);
    t[n++] = opt_num("--embed-dim", OPT_INT, &f->embed_dim, "spikformer: embedding width (default 384)", NULL, 1, 16384);
    t[n++] = opt_num("--heads", OPT_INT, &f->heads, "spikformer: attention heads (default 12)", NULL, 1, 1024);
    return n;
}

void print_json_line(cJSON *j) {
    char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!txt) die_status(SNN_E_NOMEM, "writing the JSON summary");
    int bad = fputs(txt, stdout) == EOF || fputc('\n', stdout) == EOF;
    free(txt);
    if (bad) die_usage("cannot write to stdout: %s", strerror(errno));
}

int finish_stdout(void) {
    if (fflush(stdout) != 0 || ferror(stdout)) die_usage("cannot write to stdout: %s", strerror(errno));
    return 0;
}

double machine_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}

void check_fits(const char *what, double bytes) {
    double have = machine_bytes();
    if (have > 0 && bytes > have)
        die_usage("%s needs about %.1f GiB (%.0f bytes), more than this machine's %.1f GiB of memory", what,
                  bytes / 1073741824.0, bytes, have / 1073741824.0);
}

/* Parameters, gradients and two optimizer moments in FP32 (16 bytes a parameter), from the
 * zoo's layer shapes: checked before the constructors allocate and initialise anything. */
double model_bytes_estimate(const model_flags *f, int c, int h, int w, int classes) {
    double p = 0;
    if (!strcmp(f->model, "fcsnn")) {
        double hid = f->hidden ? f->hidden : 512, d = f->depth ? f->depth : 2, in = (double)c * h * w;
        p = in * hid + (d - 1) * hid * hid + hid * classes + d * hid + classes;
    } else if (!strcmp(f->model, "convsnn")) {
        double ch = f->channels ? f->channels : 128;
        p = ch * c * 9 + ch * ch * 9 + ch * (h / 4) * (w / 4) * 2048.0 + 2048.0 * classes;
    } else if (!strcmp(f->model, "spikformer")) {
        double e = f->embed_dim ? f->embed_dim : 384, d = f->depth ? f->depth : 6;
        p = 10 * e * e + 12 * e * e * d + e * classes;
    }
    return 16 * p;
}

snn_status model_build(const model_flags *f, int c, int h, int w, int classes, uint64_t seed,
                       snn_model **out) {
    if (f->T <= 0 || f->T > 100000) die_usage("--T must be between 1 and 100000, got %d", f->T);
    check_fits("the model", model_bytes_estimate(f, c, h, w, classes));
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
        /* the model takes the data's image size: a different --image-size would be ignored */
        if (f->image_size && f->image_size != h)
            die_usage("--image-size %d does not match the data's %dx%d images (spikformer takes the data's size)",
                      f->image_size, h, w);
        if (h % 16)
            die_usage("spikformer needs an image side that is a multiple of 16; the data's images are %dx%d "
                      "(--dataset synthetic --image-size S makes S x S images)", h, w);
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
        check_fits("the synthetic data", 4.0 * c * s * s * ((double)d->synthetic_train + d->synthetic_test));
        if (train) SNN_TRY_TOOL(snn_dataset_synthetic(d->synthetic_train, c, s, s, classes, seed, train));
        if (test) SNN_TRY_TOOL(snn_dataset_synthetic(d->synthetic_test, c, s, s, classes, seed + 1, test));
        return SNN_OK;
    }
    die_usage("unknown dataset '%s' (choose fashion-mnist, digits or synthetic)", name);
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
    /* a file holding NaN weights is bad input, not a failure of the run */
    if (st != SNN_OK) die_status(st == SNN_E_NUMERIC ? SNN_E_FORMAT : st, NULL);
    snn_precision_config pcfg;
    const char *pc = snn_ckpt_metadata(*ck, "snn_precision_config");
    if (precision_flags_given(pf)) {
        pcfg = precision_flags_config(pf);
        if (snn_precision_check_checkpoint(&pcfg, *ck) != SNN_OK) die_status(SNN_E_INVALID, NULL);
    } else if (!pc || snn_precision_config_from_json(pc, &pcfg) != SNN_OK) {
        pcfg = snn_precision_config_default();
    }
    /* device -> prepare, the precision guide's order: on a GPU the model is placed first and
     * the same library calls then run there. A build without CUDA refuses "cuda" here
     * (SNN_E_UNSUPPORTED, the message names the build): exit 2, one line. */
    if (device_is_cuda(pf->device) && (st = snn_model_to(*m, pf->device)) != SNN_OK)
        die_status(st, "placing the model");
    st = snn_prepare_model_for_precision(*m, pf->device ? pf->device : "cpu", &pcfg, prec);
    if (st != SNN_OK) die_status(st, "preparing the precision");
    /* FP8 scales and amax histories, the loss scale and the step count of the trained model:
     * without them delayed scaling would quantise with its initial scale of 1. */
    st = snn_training_checkpoint_restore(*m, *prec, NULL, *ck);
    if (st != SNN_OK) die_status(st, "restoring the precision state");
}

long ckpt_int_metadata(const snn_ckpt *ck, const char *key, long lo, long hi, long def) {
    const char *v = snn_ckpt_metadata(ck, key);
    if (!v) return def;
    char *end = NULL;
    errno = 0;
    long x = (v[0] >= '0' && v[0] <= '9') || (v[0] == '-' && v[1] >= '0' && v[1] <= '9') ? strtol(v, &end, 10) : 0;
    if (!end || *end || errno || x < lo || x > hi)
        die_usage("%s: metadata \"%s\" is \"%.40s\", expected an integer between %ld and %ld", snn_ckpt_path(ck), key,
                  v, lo, hi);
    return x;
}

int device_for_rank(const char *device, struct snn_comm *world, char *name, size_t cap) {
    int dev = device_parse(NULL, device);
    if (!strcmp(device, "cuda")) {
        int count = 0;
#ifdef SNN_HAVE_CUDA
        snn_status st = snn_cuda_device_count(&count);
        if (st != SNN_OK) die_status(st, "counting the GPUs");
#endif
        if (count <= 0) die_status(SNN_E_UNSUPPORTED, "--device cuda: no GPU is visible");
        dev = snn_comm_local_rank(world) % count;
    }
    snprintf(name, cap, "cuda:%d", dev);
    return dev;
}

int device_is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

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
