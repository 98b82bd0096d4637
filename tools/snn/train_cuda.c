/* snn train / eval on the GPU: the same loop as the CPU path (shuffle, encode, step, evaluate
 * each epoch, metrics.jsonl, checkpoint), over the whole-model runner of include/snn/cuda.h.
 * A step is asynchronous; the loss and accuracy sums are read back every few steps for the
 * progress line and at the end of each epoch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "snn/checkpoint.h"
#include "snn/prepare.h"
#include "train_cuda.h"

int device_is_cuda(const char *device) { return device && !strncmp(device, "cuda", 4); }

#ifndef SNN_HAVE_CUDA

/* device_parse exits 2 with "built without CUDA" before any of these could run */
int train_cuda(const train_cuda_args *a) {
    device_parse(NULL, a->device);
    return 2;
}

gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg) {
    (void)m; (void)T; (void)N; (void)pcfg;
    device_parse(NULL, device);
    return NULL;
}
snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y) {
    (void)s; (void)xb; (void)valid; (void)y;
    return SNN_E_UNSUPPORTED;
}
void gpu_infer_close(gpu_infer *s) { (void)s; }

snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, double *acc, double *loss) {
    (void)m; (void)ds; (void)T; (void)N; (void)enc; (void)seed; (void)pcfg; (void)acc; (void)loss;
    device_parse(NULL, device);
    return SNN_E_UNSUPPORTED;
}

#else

#include "snn/cuda.h"

static snn_dtype compute_type(const snn_precision_config *p) {
    if (p->neuron_storage != SNN_NEURON_STORAGE_UNSET)
        die_usage("neuron precision flags (--neuron-storage/--neuron-fwd/--neuron-bwd) are not "
                  "available with --device cuda yet; the GPU neurons keep FP32 state");
    switch (p->mode) {
    case SNN_PRECISION_FP32: return SNN_F32;
    case SNN_PRECISION_BF16: return SNN_BF16;
    case SNN_PRECISION_FP16: return SNN_F16;
    default:
        die_usage("--precision %s is not available for model training with --device cuda yet "
                  "(fp32, bf16 and fp16 are; fp8 trains on the CPU, and `snn bench --device "
                  "cuda` measures it on the GPU)", snn_precision_mode_name(p->mode));
    }
    return SNN_F32;
}

static snn_status snn_cuda_open_for_tool(const char *device, snn_cuda **out) {
    return snn_cuda_create(device_parse(NULL, device), 0, out);
}

static snn_status evaluate_gpu(snn_cuda_model *g, const snn_dataset *ds, int T, int N, int C,
                               snn_encoding enc, uint64_t seed, double *acc, double *loss) {
    int n = snn_dataset_size(ds);
    size_t F = snn_dataset_features(ds);
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = enc == SNN_ENCODING_DIRECT ? NULL : malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    float *y = malloc(sizeof(float) * (size_t)C * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)N);
    double *mean = malloc(sizeof(double) * (size_t)C);
    snn_status st = (xb && y && yb && idx && mean && (xt || enc == SNN_ENCODING_DIRECT)) ? SNN_OK : SNN_E_NOMEM;
    long correct = 0;
    double loss_sum = 0;
    for (int start = 0; start < n && st == SNN_OK; start += N) {
        int valid = n - start < N ? n - start : N;
        for (int i = 0; i < valid; i++) idx[i] = (uint32_t)(start + i);
        st = snn_dataset_batch(ds, idx, valid, xb, yb);
        if (st == SNN_OK && xt)
            st = snn_encode(enc, xb, valid, F, T, seed, 0xE7A1000000000000ull + (uint64_t)start, xt);
        if (st == SNN_OK) st = snn_cuda_model_forward(g, xt ? xt : xb, xt != NULL, valid, y);
        if (st == SNN_OK) score_batch(y, T, N, C, yb, valid, mean, &correct, &loss_sum);
    }
    free(xb); free(xt); free(y); free(yb); free(idx); free(mean);
    if (st != SNN_OK) return st;
    *acc = (double)correct / n;
    *loss = loss_sum / n;
    return SNN_OK;
}

snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, double *acc, double *loss) {
    snn_dtype ct = compute_type(&pcfg);
    int n = snn_dataset_size(ds);
    if (n <= 0) return SNN_E_INVALID;
    if (N > n) N = n;
    snn_cuda *c = NULL;
    snn_status st0 = snn_cuda_open_for_tool(device, &c);
    if (st0 != SNN_OK) return st0;
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = ct};
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_cuda_model *g = NULL;
    snn_status st = snn_cuda_model_create(c, m, &o, &oo, &g);
    if (st == SNN_OK)
        st = evaluate_gpu(g, ds, T, N, (int)snn_model_output_numel(m), enc, seed, acc, loss);
    snn_cuda_model_destroy(g);
    snn_cuda_destroy(c);
    return st;
}

struct gpu_infer {
    snn_cuda *c;
    snn_cuda_model *g;
};

gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg) {
    gpu_infer *s = calloc(1, sizeof *s);
    if (!s) die_status(SNN_E_NOMEM, "allocating");
    snn_dtype ct = compute_type(&pcfg);
    snn_status st = snn_cuda_open_for_tool(device, &s->c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = ct};
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    st = snn_cuda_model_create(s->c, m, &o, &oo, &s->g);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    return s;
}

snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y) {
    return snn_cuda_model_forward(s->g, xb, 0, valid, y);
}

void gpu_infer_close(gpu_infer *s) {
    if (!s) return;
    snn_cuda_model_destroy(s->g);
    snn_cuda_destroy(s->c);
    free(s);
}

int train_cuda(const train_cuda_args *a) {
    snn_dtype ct = compute_type(&a->pcfg);
    snn_cuda *c = NULL;
    snn_status st = snn_cuda_open_for_tool(a->device, &c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    int N = a->N, T = a->T, ntrain = snn_dataset_size(a->train);
    snn_model *m = a->m;
    size_t F = snn_dataset_features(a->train), C = snn_model_output_numel(m);
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = ct, .loss = a->use_mse ? SNN_CUDA_LOSS_MSE_RATE : SNN_CUDA_LOSS_CE,
                             .clip = a->clip};
    snn_cuda_model *g = NULL;
    st = snn_cuda_model_create(c, m, &o, &a->oo, &g);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    if (a->resumed) {
        float scale;
        int tracker;
        snn_loss_scaler_get_state(&a->scaler, &scale, &tracker);
        st = snn_cuda_model_load_state(g, a->opt, scale, tracker);
        if (st != SNN_OK) die_status(st, "putting the resumed optimizer state on the GPU");
    }
    int nb = ntrain / N;
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = a->enc == SNN_ENCODING_DIRECT ? NULL : malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *order = malloc(sizeof(uint32_t) * (size_t)ntrain);
    if (!xb || !yb || !order || (!xt && a->enc != SNN_ENCODING_DIRECT)) die_status(SNN_E_NOMEM, "allocating batches");
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", a->out);
    FILE *metrics = fopen(path, "w");
    if (!metrics) die_usage("cannot write '%s'", path);
    int tty = !a->quiet && isatty(2);
    if (!a->quiet)
        fprintf(stderr, "snn: training %s (%zu parameters) on %s with %s (%s, %.0f MiB of device memory): %d samples, T=%d, batch %d, %s lr %g, %d epochs\n",
                a->model_name, snn_model_num_params(m), a->dataset, a->device, snn_dtype_name(ct),
                (double)snn_cuda_model_device_bytes(g) / 1048576.0, ntrain, T, N,
                snn_optim_kind_name(a->oo.kind), (double)a->oo.lr, a->epochs);
    double train_time = 0, t_start = now_seconds(), test_acc = 0, test_loss = 0;
    long step = (long)nb * (a->start_epoch - 1), samples = 0;
    int epoch;
    for (epoch = a->start_epoch; epoch <= a->epochs && step < a->total_steps; epoch++) {
        st = snn_dataset_shuffle(a->train, a->seed, (uint64_t)epoch, order);
        if (st != SNN_OK) die_status(st, "shuffling");
        double loss_sum = 0, t0 = now_seconds();
        long correct = 0, seen = 0, counted = 0;
        int b;
        for (b = 0; b < nb && step < a->total_steps; b++) {
            st = snn_dataset_batch(a->train, order + (size_t)b * N, N, xb, yb);
            if (st == SNN_OK && xt)
                st = snn_encode(a->enc, xb, N, F, T, a->seed, ((uint64_t)epoch << 32) | (uint64_t)b, xt);
            if (st == SNN_OK)
                st = snn_cuda_model_train_step(g, xt ? xt : xb, xt != NULL, yb, snn_lr_schedule(&a->sched, step));
            if (st != SNN_OK) die_status(st, "training step");
            step++;
            seen += N;
            if ((b % 32 == 31) || b + 1 == nb || step == a->total_steps) {
                double l;
                long cc, ss;
                st = snn_cuda_model_take_stats(g, &l, &cc, &ss);
                if (st != SNN_OK) die_status(st, "training step");
                loss_sum += l;
                correct += cc;
                counted += ss;
                if (!isfinite(l)) die_usage("the loss became %f near step %ld; lower --lr", l, step);
                if (tty) {
                    fprintf(stderr, "\repoch %d/%d %d/%d loss %.4f acc %.3f %.0f samples/s ", epoch, a->epochs, b + 1, nb,
                            loss_sum / counted, (double)correct / ((double)counted * N), seen / (now_seconds() - t0));
                    fflush(stderr);
                }
            }
        }
        double dt = now_seconds() - t0;
        train_time += dt;
        samples += seen;
        if (tty) fputc('\n', stderr);
        st = evaluate_gpu(g, a->test, T, N, (int)C, a->enc, a->seed, &test_acc, &test_loss);
        if (st != SNN_OK) die_status(st, "evaluating");
        double tl = counted ? loss_sum / counted : 0, ta = counted ? (double)correct / ((double)counted * N) : 0;
        fprintf(metrics,
                "{\"epoch\":%d,\"step\":%ld,\"train_loss\":%.6f,\"train_accuracy\":%.6f,\"test_loss\":%.6f,"
                "\"test_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_s\":%.3f,\"wall_s\":%.3f,\"device\":\"%s\"}\n",
                epoch, step, tl, ta, test_loss, test_acc, seen / dt, dt, now_seconds() - t_start, a->device);
        fflush(metrics);
        if (!a->quiet)
            fprintf(stderr, "epoch %d: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f samples/s, %.1f s\n",
                    epoch, tl, ta, test_loss, test_acc, seen / dt, dt);
    }
    fclose(metrics);
    int epochs_done = epoch - 1;
    st = snn_cuda_model_download(g);
    if (st != SNN_OK) die_status(st, "copying the model back from the GPU");
    snn_loss_scaler scaler = a->scaler;
    {
        float scale;
        int tracker;
        st = snn_cuda_model_save_state(g, a->opt, &scale, &tracker);
        if (st == SNN_OK && ct == SNN_F16) st = snn_loss_scaler_set_state(&scaler, scale, tracker);
        if (st != SNN_OK) die_status(st, "copying the optimizer state back from the GPU");
    }
    snprintf(path, sizeof path, "%s/model.safetensors", a->out);
    char tbuf[32], ebuf[32];
    snprintf(tbuf, sizeof tbuf, "%d", T);
    snprintf(ebuf, sizeof ebuf, "%d", epochs_done);
    const char *meta[] = {"dataset", a->dataset, "time_steps", tbuf, "epochs", ebuf, "encoding",
                          snn_encoding_name(a->enc), "trained_on", a->device, "gpu_compute",
                          snn_dtype_name(ct), NULL};
    st = snn_training_checkpoint_save_cfg(m, &a->pcfg, &scaler, a->opt, path, meta);
    if (st != SNN_OK) die_status(st, "saving the checkpoint");
    double wall = now_seconds() - t_start;
    printf("test accuracy: %.4f\n", test_acc);
    if (a->json)
        printf("{\"model\":\"%s\",\"dataset\":\"%s\",\"test_accuracy\":%.6f,\"test_loss\":%.6f,"
               "\"samples_per_s\":%.1f,\"wall_s\":%.3f,\"train_s\":%.3f,\"epochs\":%d,\"steps\":%ld,"
               "\"T\":%d,\"batch_size\":%d,\"parameters\":%zu,\"precision\":\"%s\",\"device\":\"%s\",\"checkpoint\":\"%s\"}\n",
               a->model_name, a->dataset, test_acc, test_loss, train_time > 0 ? samples / train_time : 0, wall,
               train_time, epochs_done, step, T, N, snn_model_num_params(m), snn_precision_mode_name(a->pcfg.mode),
               a->device, path);
    free(xb); free(xt); free(yb); free(order);
    snn_cuda_model_destroy(g);
    snn_cuda_destroy(c);
    return 0;
}

#endif
