/* Token dataset: DIR/{train,valid,test}.npy integer arrays [N, S+1] held as int32.
 * Sample i is row i mod N: input = row[:-1], target = row[1:] (next-token prediction). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/tokens.h"

struct snn_token_dataset {
    int64_t rows, cols;
    int32_t *tok; /* rows * cols */
};

snn_status snn_token_dataset_open(const char *dir, const char *split, int64_t vocab_size, snn_token_dataset **out) {
    if (!dir || !split || !out) return snn_error(SNN_E_INVALID, "snn_token_dataset_open: NULL argument");
    if (strcmp(split, "train") && strcmp(split, "valid") && strcmp(split, "test"))
        return snn_error(SNN_E_INVALID, "token dataset split '%.20s' (use train, valid or test)", split);
    if (vocab_size < 0 || vocab_size > (int64_t)INT32_MAX + 1)
        return snn_error(SNN_E_INVALID, "vocab_size %lld is out of range", (long long)vocab_size);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s.npy", dir, split) >= sizeof path)
        return snn_error(SNN_E_INVALID, "token dataset path is too long");
    snn_npy_array a;
    SNN_TRY(snn_npy_read(path, &a));
    if (a.rows < 1 || a.cols < 2) {
        snn_status st = snn_error(SNN_E_FORMAT, "%s: shape (%lld, %lld): at least one row of at least 2 tokens needed",
                                  path, (long long)a.rows, (long long)a.cols);
        snn_npy_free(&a);
        return st;
    }
    size_t n = (size_t)a.rows * (size_t)a.cols; /* the reader checked the byte size */
    int32_t *tok = malloc(n * sizeof *tok);
    if (!tok) { snn_npy_free(&a); return snn_error(SNN_E_NOMEM, "%s: cannot allocate %zu tokens", path, n); }
    int64_t hi = vocab_size ? vocab_size : (int64_t)INT32_MAX + 1;
    for (size_t i = 0; i < n; i++) {
        int64_t v = a.dtype == SNN_NPY_INT32 ? ((const int32_t *)a.data)[i]
                  : a.dtype == SNN_NPY_INT64 ? ((const int64_t *)a.data)[i]
                                             : ((const uint16_t *)a.data)[i];
        if (v < 0 || v >= hi) {
            snn_status st = snn_error(SNN_E_FORMAT, "%s: token %lld at row %zu, column %zu is outside [0, %lld)",
                                      path, (long long)v, i / (size_t)a.cols, i % (size_t)a.cols, (long long)hi);
            free(tok);
            snn_npy_free(&a);
            return st;
        }
        tok[i] = (int32_t)v;
    }
    snn_token_dataset *ds = malloc(sizeof *ds);
    if (!ds) { free(tok); snn_npy_free(&a); return snn_error(SNN_E_NOMEM, "out of memory"); }
    ds->rows = a.rows;
    ds->cols = a.cols;
    ds->tok = tok;
    snn_npy_free(&a);
    *out = ds;
    return SNN_OK;
}

void snn_token_dataset_free(snn_token_dataset *ds) {
    if (!ds) return;
    free(ds->tok);
    free(ds);
}

int64_t snn_token_dataset_rows(const snn_token_dataset *ds) { return ds ? ds->rows : 0; }
int64_t snn_token_dataset_seq_len(const snn_token_dataset *ds) { return ds ? ds->cols - 1 : 0; }

const int32_t *snn_token_dataset_row(const snn_token_dataset *ds, int64_t i) {
    if (!ds || i < 0) return NULL;
    return ds->tok + (size_t)(i % ds->rows) * (size_t)ds->cols;
}

snn_status snn_token_dataset_sample(const snn_token_dataset *ds, int64_t i, int32_t *input, int32_t *target) {
    if (!ds) return snn_error(SNN_E_INVALID, "token dataset is NULL");
    if (i < 0) return snn_error(SNN_E_INVALID, "sample index %lld is negative", (long long)i);
    const int32_t *r = snn_token_dataset_row(ds, i);
    size_t s = (size_t)ds->cols - 1;
    if (input) memcpy(input, r, s * sizeof *r);
    if (target) memcpy(target, r + 1, s * sizeof *r);
    return SNN_OK;
}

snn_status snn_token_dataset_batch(const snn_token_dataset *ds, const int64_t *idx, int n, int32_t *input,
                                   int32_t *target) {
    if (!ds || (n > 0 && !idx)) return snn_error(SNN_E_INVALID, "snn_token_dataset_batch: NULL argument");
    if (n < 0) return snn_error(SNN_E_INVALID, "batch size %d is negative", n);
    size_t s = (size_t)ds->cols - 1;
    for (int b = 0; b < n; b++)
        SNN_TRY(snn_token_dataset_sample(ds, idx[b], input ? input + (size_t)b * s : NULL,
                                         target ? target + (size_t)b * s : NULL));
    return SNN_OK;
}
