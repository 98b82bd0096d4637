/* snn — token data for language models: NumPy .npy files and the token dataset.
 *
 * A token dataset is a directory with train.npy, valid.npy and test.npy, each a 2-D
 * integer array [N, S+1] in C order (SpikingJelly's layout). Sample i is row i mod N;
 * its input is row[:-1] and its target row[1:].
 *
 * The .npy reader accepts format versions 1.0, 2.0 and 3.0 headers, little-endian
 * ("<i4", "<i8", "<u2"; "|u1" is not a token type) 2-D arrays with fortran_order False,
 * and checks every header field, the header padding, the size products against overflow
 * and the file size against the shape exactly. */
#ifndef SNN_TOKENS_H
#define SNN_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_npy_dtype {
    SNN_NPY_INT32 = 0,  /* "<i4" */
    SNN_NPY_INT64 = 1,  /* "<i8" */
    SNN_NPY_UINT16 = 2, /* "<u2" */
    SNN_NPY_DTYPE_COUNT
} snn_npy_dtype;

typedef struct snn_npy_array {
    snn_npy_dtype dtype;
    int64_t rows, cols;
    void *data;         /* rows*cols values of dtype, little-endian, C order; malloc'd */
} snn_npy_array;

/* Bytes per value (4, 8, 2). */
size_t snn_npy_dtype_size(snn_npy_dtype d);
/* Parse an .npy image in memory (the data is copied). */
snn_status snn_npy_parse(const void *buf, size_t len, snn_npy_array *out);
snn_status snn_npy_read(const char *path, snn_npy_array *out);
/* Write a version 1.0 file (2.0 when the header needs more than 65535 bytes), as
 * numpy.save does. The data is written with the host's byte order, which must be
 * little-endian (refused otherwise). */
snn_status snn_npy_write(const char *path, snn_npy_dtype dtype, int64_t rows, int64_t cols,
                         const void *data);
void snn_npy_free(snn_npy_array *a);

typedef struct snn_token_dataset snn_token_dataset;

/* Open DIR/SPLIT.npy (split "train", "valid" or "test"). Every value must lie in
 * [0, vocab_size) (vocab_size 0 only checks 0 <= value <= INT32_MAX); at least one row
 * and at least two columns. */
snn_status snn_token_dataset_open(const char *dir, const char *split, int64_t vocab_size,
                                  snn_token_dataset **out);
void snn_token_dataset_free(snn_token_dataset *ds);
int64_t snn_token_dataset_rows(const snn_token_dataset *ds);    /* N */
int64_t snn_token_dataset_seq_len(const snn_token_dataset *ds); /* S = columns - 1 */
/* The stored row r (S+1 values) of row r mod N; i >= 0. */
const int32_t *snn_token_dataset_row(const snn_token_dataset *ds, int64_t i);
/* Sample i: input = row[:-1] and target = row[1:] of row i mod N (S values each; either
 * pointer may be NULL). i must be >= 0. */
snn_status snn_token_dataset_sample(const snn_token_dataset *ds, int64_t i, int32_t *input,
                                    int32_t *target);
/* n samples idx[0..n) into input/target [n][S]. */
snn_status snn_token_dataset_batch(const snn_token_dataset *ds, const int64_t *idx, int n,
                                   int32_t *input, int32_t *target);

#ifdef __cplusplus
}
#endif
#endif
