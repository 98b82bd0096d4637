/* Evaluation and prediction loops, and the finiteness check of a whole model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/train.h"
#include "train/train_internal.h"

snn_status snn_train_model_finite(const snn_model *m, const char *what) {
    snn_status st = snn_model_check_finite(m);
    return st == SNN_OK ? SNN_OK : snn_error_prefix(st, "%s", what);
}

int snn_train_size_mul(size_t *out, size_t a, size_t b, size_t c) {
    if (a && b > SIZE_MAX / a) return 0;
    size_t ab = a * b;
    if (ab && c > SIZE_MAX / ab) return 0;
    *out = ab * c;
    return 1;
}

void snn_score_batch(const float *y, int T, int N, int C, const int32_t *yb, int valid, double *mean,
                     long *correct, double *loss_sum) {
    for (int i = 0; i < valid; i++) {
        /* prediction and cross-entropy on the mean output over T */
        int best = 0;
        double mx = -INFINITY, z = 0;
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

/* Batch buffers of an inference loop over ds. */
typedef struct infer_bufs {
    float *xb, *xt;
    int32_t *yb;
    uint32_t *idx;
    double *mean;
} infer_bufs;

static void bufs_free(infer_bufs *b) {
    free(b->xb);
    free(b->xt);
    free(b->yb);
    free(b->idx);
    free(b->mean);
}

static snn_status infer_setup(snn_model *m, const snn_dataset *ds, int T, int *N, const char *what,
                              infer_bufs *b) {
    memset(b, 0, sizeof *b);
    if (!m || !ds) return snn_error(SNN_E_INVALID, "%s: model or dataset is NULL", what);
    int n = snn_dataset_size(ds);
    if (n <= 0) return snn_error(SNN_E_INVALID, "%s: the dataset has no samples", what);
    if (T < 1 || T > SNN_TRAIN_MAX_T)
        return snn_error(SNN_E_INVALID, "%s: time steps must be between 1 and %d (got %d)", what, SNN_TRAIN_MAX_T, T);
    if (*N < 1) return snn_error(SNN_E_INVALID, "%s: batch size must be positive (got %d)", what, *N);
    size_t F = snn_dataset_features(ds);
    if (F != snn_model_input_numel(m))
        return snn_error(SNN_E_SHAPE, "%s: the data has %zu values per sample, the model expects %zu", what, F,
                         snn_model_input_numel(m));
    SNN_TRY(snn_train_model_finite(m, what));
    if (*N > n) *N = n;
    size_t C = snn_model_output_numel(m), bx, bt;
    if (!snn_train_size_mul(&bx, F, (size_t)*N, sizeof(float)) ||
        !snn_train_size_mul(&bt, bx, (size_t)T, 1))
        return snn_error(SNN_E_NOMEM, "%s: a batch of %d x %d steps x %zu values is too large", what, *N, T, F);
    SNN_TRY(snn_model_plan(m, T, *N));
    b->xb = malloc(bx);
    b->xt = malloc(bt);
    b->yb = malloc(sizeof(int32_t) * (size_t)*N);
    b->idx = malloc(sizeof(uint32_t) * (size_t)*N);
    b->mean = malloc(sizeof(double) * (C ? C : 1));
    if (!b->xb || !b->xt || !b->yb || !b->idx || !b->mean) {
        bufs_free(b);
        return snn_error(SNN_E_NOMEM, "%s: out of memory for batches of %zu bytes", what, bt);
    }
    return SNN_OK;
}

snn_status snn_evaluate(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                        double *accuracy, double *loss) {
    infer_bufs b;
    if (!accuracy) return snn_error(SNN_E_INVALID, "snn_evaluate: accuracy is NULL");
    SNN_TRY(infer_setup(m, ds, T, &N, "evaluating", &b));
    int n = snn_dataset_size(ds), C = (int)snn_model_output_numel(m);
    size_t F = snn_dataset_features(ds);
    snn_status st = SNN_OK;
    long correct = 0;
    double loss_sum = 0;
    for (int start = 0; start < n && st == SNN_OK; start += N) {
        /* the last batch is padded with sample 0; only the `valid` real samples count */
        int valid = n - start < N ? n - start : N;
        for (int i = 0; i < N; i++) b.idx[i] = (uint32_t)(start + (i < valid ? i : 0));
        st = snn_dataset_batch(ds, b.idx, N, b.xb, b.yb);
        for (int i = 0; st == SNN_OK && i < valid; i++)
            if (b.yb[i] < 0 || b.yb[i] >= C)
                st = snn_error(SNN_E_SHAPE, "evaluating: sample %d has label %d, the model has %d classes", start + i,
                               (int)b.yb[i], C);
        float *xt = snn_model_input_buffer(m) ? snn_model_input_buffer(m) : b.xt; /* see loop.c */
        if (st == SNN_OK) st = snn_encode(enc, b.xb, N, F, T, seed, 0xE7A1000000000000ull + (uint64_t)start, xt);
        const float *y = NULL;
        if (st == SNN_OK) st = snn_model_forward(m, xt, 0, &y);
        if (st == SNN_OK) snn_score_batch(y, T, N, C, b.yb, valid, b.mean, &correct, &loss_sum);
    }
    bufs_free(&b);
    if (st != SNN_OK) return st;
    *accuracy = (double)correct / n;
    if (loss) *loss = loss_sum / n;
    return SNN_OK;
}

snn_status snn_predict(snn_model *m, const snn_dataset *ds, int T, int N, snn_predict_callback cb, void *user) {
    infer_bufs b;
    if (!cb) return snn_error(SNN_E_INVALID, "snn_predict: callback is NULL");
    SNN_TRY(infer_setup(m, ds, T, &N, "predicting", &b));
    int n = snn_dataset_size(ds), C = (int)snn_model_output_numel(m);
    size_t F = snn_dataset_features(ds);
    snn_status st = SNN_OK;
    for (int start = 0; start < n && st == SNN_OK; start += N) {
        int valid = n - start < N ? n - start : N;
        for (int i = 0; i < N; i++) b.idx[i] = (uint32_t)(start + (i < valid ? i : 0));
        st = snn_dataset_batch(ds, b.idx, N, b.xb, NULL);
        float *xt = snn_model_input_buffer(m) ? snn_model_input_buffer(m) : b.xt;
        if (st == SNN_OK) st = snn_encode(SNN_ENCODING_DIRECT, b.xb, N, F, T, 0, 0, xt);
        const float *y = NULL;
        if (st == SNN_OK) st = snn_model_forward(m, xt, 0, &y);
        for (int i = 0; st == SNN_OK && i < valid; i++) {
            int best = 0;
            double bv = -INFINITY;
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int t = 0; t < T; t++) s += y[((size_t)t * N + i) * C + c];
                if (s > bv) {
                    bv = s;
                    best = c;
                }
            }
            if (cb(start + i, best, bv / T, user) != 0)
                st = snn_error(SNN_E_IO, "predicting: stopped at sample %d (the output could not be written)",
                               start + i);
        }
    }
    bufs_free(&b);
    return st;
}
