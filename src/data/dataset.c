/* The in-memory dataset: creation, subsets, the seeded split and shuffle, batching. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "snn/rng.h"

/* Streams of Philox draws owned by this file (other users pick other streams). */
#define SHUFFLE_STREAM 0x5348554600000000ull  /* "SHUF" << 32, xor epoch */

snn_status snn_dataset_alloc(int n, int c, int h, int w, snn_dataset **out) {
    *out = NULL;
    if (n < 0 || c <= 0 || h <= 0 || w <= 0)
        return snn_error(SNN_E_INVALID, "dataset needs n >= 0 and positive c, h, w (got n=%d, %dx%dx%d)",
                         n, c, h, w);
    /* c*h*w can overflow 64 bits (three 31-bit factors): check each step. */
    size_t features, bytes;
    if (__builtin_mul_overflow((size_t)c, (size_t)h, &features) ||
        __builtin_mul_overflow(features, (size_t)w, &features) ||
        __builtin_mul_overflow(features, (size_t)(n ? n : 1) * sizeof(float), &bytes))
        return snn_error(SNN_E_NOMEM, "dataset of %d samples of %dx%dx%d is too large", n, c, h, w);
    snn_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return snn_error(SNN_E_NOMEM, "out of memory allocating a dataset");
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->features = features;
    ds->x = malloc((n ? (size_t)n : 1) * features * sizeof(float));
    ds->y = malloc((n ? (size_t)n : 1) * sizeof(int32_t));
    if (!ds->x || !ds->y) {
        snn_dataset_free(ds);
        return snn_error(SNN_E_NOMEM, "out of memory: %d samples of %zu features need %zu MiB", n,
                         features, (size_t)n * features * sizeof(float) >> 20);
    }
    *out = ds;
    return SNN_OK;
}

void snn_dataset_free(snn_dataset *ds) {
    if (!ds) return;
    free(ds->x);
    free(ds->y);
    free(ds);
}

snn_status snn_dataset_create(int n, int c, int h, int w, int classes, const float *x,
                              const int32_t *y, snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_create: out is NULL");
    *out = NULL;
    if (!x && n > 0) return snn_error(SNN_E_INVALID, "snn_dataset_create: x is NULL");
    if (y && classes <= 0)
        return snn_error(SNN_E_INVALID, "labelled dataset needs classes > 0 (got %d)", classes);
    snn_dataset *ds;
    SNN_TRY(snn_dataset_alloc(n, c, h, w, &ds));
    for (int i = 0; i < n; i++) {
        int32_t l = y ? y[i] : -1;
        if (y && (l < 0 || l >= classes)) {
            snn_dataset_free(ds);
            return snn_error(SNN_E_INVALID, "label %d of sample %d is outside [0, %d)", (int)l, i,
                             classes);
        }
        ds->y[i] = l;
    }
    if (n) memcpy(ds->x, x, (size_t)n * ds->features * sizeof(float));
    ds->classes = y ? classes : 0;
    *out = ds;
    return SNN_OK;
}

snn_status snn_dataset_synthetic(int n, int c, int h, int w, int classes, uint64_t seed,
                                 snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_synthetic: out is NULL");
    *out = NULL;
    if (classes <= 0)
        return snn_error(SNN_E_INVALID, "synthetic dataset needs classes > 0 (got %d)", classes);
    snn_dataset *ds;
    SNN_TRY(snn_dataset_alloc(n, c, h, w, &ds));
    ds->classes = classes;
    /* One stream for pixels, one for labels: changing the image size keeps the labels. */
    uint64_t total = (uint64_t)n * ds->features;
    for (uint64_t i = 0; i < total; i += 4) {
        uint32_t r[4];
        snn_philox(seed, 0x44415441ull /* "DATA" */, i / 4, r);
        for (uint64_t k = 0; k < 4 && i + k < total; k++)
            ds->x[i + k] = (float)(r[k] >> 8) * (1.0f / 16777216.0f);
    }
    snn_rng lr = snn_rng_make(seed, 0x4C41424Cull /* "LABL" */);
    for (int i = 0; i < n; i++) ds->y[i] = (int32_t)snn_rng_next_below(&lr, (uint32_t)classes);
    *out = ds;
    return SNN_OK;
}

snn_status snn_dataset_subset(const snn_dataset *ds, const uint32_t *idx, int n,
                              snn_dataset **out) {
    if (!ds || !out || (!idx && n > 0))
        return snn_error(SNN_E_INVALID, "snn_dataset_subset: NULL argument");
    *out = NULL;
    snn_dataset *s;
    SNN_TRY(snn_dataset_alloc(n, ds->c, ds->h, ds->w, &s));
    s->classes = ds->classes;
    snn_status st = snn_dataset_batch(ds, idx, n, s->x, s->y);
    if (st != SNN_OK) {
        snn_dataset_free(s);
        return st;
    }
    *out = s;
    return SNN_OK;
}

snn_status snn_dataset_split(const snn_dataset *ds, double test_fraction, uint64_t seed,
                             snn_dataset **train, snn_dataset **test) {
    if (!ds || !train || !test) return snn_error(SNN_E_INVALID, "snn_dataset_split: NULL argument");
    *train = *test = NULL;
    if (!(test_fraction > 0.0 && test_fraction < 1.0))
        return snn_error(SNN_E_INVALID, "test fraction must be in (0, 1), got %g", test_fraction);
    int n_test = (int)(test_fraction * ds->n + 0.5);
    int n_train = ds->n - n_test;
    uint32_t *order = malloc((ds->n ? (size_t)ds->n : 1) * sizeof *order);
    if (!order) return snn_error(SNN_E_NOMEM, "out of memory splitting %d samples", ds->n);
    /* Epoch ~0 keeps the split's permutation apart from the training shuffles. */
    snn_status st = snn_dataset_shuffle(ds, seed, ~0ull, order);
    if (st == SNN_OK) st = snn_dataset_subset(ds, order, n_train, train);
    if (st == SNN_OK) st = snn_dataset_subset(ds, order + n_train, n_test, test);
    free(order);
    if (st != SNN_OK) {
        snn_dataset_free(*train);
        *train = NULL;
    }
    return st;
}

int snn_dataset_size(const snn_dataset *ds) { return ds ? ds->n : 0; }
size_t snn_dataset_features(const snn_dataset *ds) { return ds ? ds->features : 0; }
int snn_dataset_classes(const snn_dataset *ds) { return ds ? ds->classes : 0; }
const float *snn_dataset_data(const snn_dataset *ds) { return ds ? ds->x : NULL; }
const int32_t *snn_dataset_labels(const snn_dataset *ds) { return ds ? ds->y : NULL; }

void snn_dataset_shape(const snn_dataset *ds, int *c, int *h, int *w) {
    if (c) *c = ds ? ds->c : 0;
    if (h) *h = ds ? ds->h : 0;
    if (w) *w = ds ? ds->w : 0;
}

snn_status snn_dataset_shuffle(const snn_dataset *ds, uint64_t seed, uint64_t epoch,
                               uint32_t *order) {
    if (!ds || (!order && ds->n > 0)) return snn_error(SNN_E_INVALID, "snn_dataset_shuffle: NULL argument");
    for (int i = 0; i < ds->n; i++) order[i] = (uint32_t)i;
    snn_rng r = snn_rng_make(seed, SHUFFLE_STREAM ^ epoch);
    for (int i = ds->n - 1; i > 0; i--) {
        uint32_t j = snn_rng_next_below(&r, (uint32_t)i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    return SNN_OK;
}

snn_status snn_dataset_batch(const snn_dataset *ds, const uint32_t *idx, int n, float *x,
                             int32_t *y) {
    if (!ds || (n > 0 && (!idx || !x))) return snn_error(SNN_E_INVALID, "snn_dataset_batch: NULL argument");
    if (n < 0) return snn_error(SNN_E_INVALID, "batch size must be >= 0 (got %d)", n);
    for (int k = 0; k < n; k++) {
        if (idx[k] >= (uint32_t)ds->n)
            return snn_error(SNN_E_INVALID, "sample index %u out of range (dataset has %d samples)",
                             idx[k], ds->n);
        memcpy(x + (size_t)k * ds->features, ds->x + (size_t)idx[k] * ds->features,
               ds->features * sizeof(float));
        if (y) y[k] = ds->y[idx[k]];
    }
    return SNN_OK;
}
