/* snn bench --converge: speed alone says nothing about whether a precision still trains, so
 * each precision also trains on real data (Fashion-MNIST) for a fixed budget from the same
 * initial weights, and its test accuracy is reported next to the speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "snn/loss.h"
#include "snn/train.h"
#include "snn/optim.h"

void bench_converge_load(const bench_flags *f, bench_converge_data *d) {
    memset(d, 0, sizeof *d);
    if (!f->converge) return;
    d->name = "fashion-mnist";
    snn_status st = snn_dataset_load_fashion_mnist(f->data_dir, 1, &d->train);
    if (st == SNN_OK) st = snn_dataset_load_fashion_mnist(f->data_dir, 0, &d->test);
    if (st != SNN_OK) die_status(st, "--converge: loading fashion-mnist");
    int n = snn_dataset_size(d->test);
    if (f->converge_test_samples > 0 && f->converge_test_samples < n) {
        /* the first N test samples (a fixed subset, the same for every precision) */
        uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)f->converge_test_samples);
        if (!idx) die_status(SNN_E_NOMEM, "--converge");
        for (int i = 0; i < f->converge_test_samples; i++) idx[i] = (uint32_t)i;
        snn_dataset *sub = NULL;
        st = snn_dataset_subset(d->test, idx, f->converge_test_samples, &sub);
        free(idx);
        if (st != SNN_OK) die_status(st, "--converge: test subset");
        snn_dataset_free(d->test);
        d->test = sub;
    }
}

void bench_converge_free(bench_converge_data *d) {
    snn_dataset_free(d->train);
    snn_dataset_free(d->test);
    memset(d, 0, sizeof *d);
}

cJSON *bench_converge_run(const bench_workload *w0, const snn_precision_config *cfg, const bench_flags *f,
                          const bench_converge_data *d, int quiet) {
    bench_workload w = *w0;
    w.in = (int)snn_dataset_features(d->train);
    w.classes = snn_dataset_classes(d->train);
    int T = w.T, N = w.N, ntrain = snn_dataset_size(d->train);
    if (N > ntrain) N = ntrain;
    int adam = !strcmp(f->converge_optimizer, "adam");
    float lr = f->converge_lr > 0 ? f->converge_lr : adam ? 1e-3f : w.lr;
    snn_model *m = NULL;
    snn_status st = bench_build(&w, &m);
    if (st != SNN_OK) die_status(st, "--converge: building the model");
    snn_precision *p = NULL;
    st = snn_prepare_model_for_precision(m, "cpu", cfg, &p);
    if (st != SNN_OK) die_status(st, "--converge: preparing the precision");
    if ((st = snn_model_plan(m, T, N)) != SNN_OK) die_status(st, "--converge: planning");
    snn_optim_opts oo = snn_optim_defaults(adam ? SNN_OPTIM_ADAM : SNN_OPTIM_SGD);
    oo.lr = lr;
    if (!adam) oo.momentum = w.momentum;
    snn_optimizer *opt = NULL;
    if ((st = snn_optimizer_create_for_model(&oo, m, &opt)) != SNN_OK) die_status(st, "--converge: optimizer");

    int nb = ntrain / N;
    long budget = f->converge_steps > 0 ? f->converge_steps : (long)nb * f->converge_epochs;
    size_t F = snn_dataset_features(d->train), C = snn_model_output_numel(m);
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *order = malloc(sizeof(uint32_t) * (size_t)ntrain);
    float *dy = malloc(sizeof(float) * C * (size_t)N * (size_t)T);
    if (!xb || !xt || !yb || !order || !dy) die_status(SNN_E_NOMEM, "--converge");

    long step = 0;
    int epoch = 0, diverged = 0;
    double loss_tail = 0, t0 = now_seconds();
    long tail_n = 0, tail_from = budget > 50 ? budget - 50 : 0;
    while (step < budget && !diverged) {
        epoch++;
        if ((st = snn_dataset_shuffle(d->train, w.seed, (uint64_t)epoch, order)) != SNN_OK) die_status(st, "--converge");
        for (int b = 0; b < nb && step < budget; b++, step++) {
            st = snn_dataset_batch(d->train, order + (size_t)b * N, N, xb, yb);
            if (st == SNN_OK) snn_encode_direct(xb, N, F, T, xt);
            const float *y = NULL;
            float loss = NAN;
            if (st == SNN_OK) st = snn_model_forward(m, xt, 1, &y);
            if (st == SNN_OK) st = snn_loss_cross_entropy_mean_t(y, yb, T, N, (int)C, &loss, dy, NULL);
            if (st == SNN_OK) st = snn_precision_backward(p, dy, opt, -1.0f, 0.0f, NULL, NULL);
            if (st != SNN_OK) die_status(st, "--converge: training step");
            if (!isfinite(loss)) {
                diverged = 1;
                break;
            }
            if (step >= tail_from) {
                loss_tail += loss;
                tail_n++;
            }
        }
    }
    double train_s = now_seconds() - t0;
    double acc = NAN, test_loss = NAN;
    if (!diverged) {
        st = snn_evaluate(m, d->test, T, N, SNN_ENCODING_DIRECT, w.seed, &acc, &test_loss);
        if (st != SNN_OK) die_status(st, "--converge: evaluating");
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dataset", d->name);
    cJSON_AddNumberToObject(o, "in_features", w.in);
    cJSON_AddNumberToObject(o, "classes", w.classes);
    cJSON_AddNumberToObject(o, "batch_size", N);
    cJSON_AddStringToObject(o, "optimizer", adam ? "adam" : "sgd");
    cJSON_AddNumberToObject(o, "lr", bench_f2d(lr));
    if (!adam) cJSON_AddNumberToObject(o, "momentum", bench_f2d(w.momentum));
    cJSON_AddNumberToObject(o, "steps", (double)step);
    cJSON_AddNumberToObject(o, "epochs", (double)step / nb);
    cJSON_AddNumberToObject(o, "train_seconds", train_s);
    cJSON_AddNumberToObject(o, "train_samples_per_sec", train_s > 0 ? (double)step * N / train_s : 0);
    cJSON_AddNumberToObject(o, "final_train_loss", tail_n ? loss_tail / tail_n : NAN);
    cJSON_AddBoolToObject(o, "diverged", diverged);
    cJSON_AddNumberToObject(o, "test_samples", snn_dataset_size(d->test));
    cJSON_AddNumberToObject(o, "test_accuracy", acc);
    cJSON_AddNumberToObject(o, "test_loss", test_loss);
    const cJSON *conv = NULL;
    cJSON *rep = cJSON_Parse(snn_precision_describe(p));
    conv = cJSON_GetObjectItemCaseSensitive(rep, "conversion_report");
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(conv, "converted_modules");
    cJSON_AddNumberToObject(o, "converted_modules", cJSON_GetArraySize(cm));
    cJSON_Delete(rep);
    if (!quiet)
        fprintf(stderr, "converge %-5s %ld steps in %.1f s: test accuracy %.4f\n",
                snn_precision_mode_name(cfg->mode), step, train_s, acc);
    free(xb);
    free(xt);
    free(yb);
    free(order);
    free(dy);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);
    return o;
}
