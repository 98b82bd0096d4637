/* snn — datasets: in-memory samples, loaders, a seeded shuffle, batching and the
 * spike encoders that turn a batch into the [T][N][features] input of a model.
 *
 * A dataset holds n samples of features = c*h*w FP32 values in [0, 1] (row-major
 * [c][h][w]) and one int32 label per sample (-1 for unlabelled data). All loaders
 * validate what they read: a truncated, corrupt or hostile file is SNN_E_FORMAT (or
 * SNN_E_IO when it cannot be opened) with a message naming the file. See docs/data.md. */
#ifndef SNN_DATA_H
#define SNN_DATA_H

#include <stddef.h>
#include <stdint.h>
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_dataset snn_dataset;

/* Default locations of the data sets that Debian packages ship. */
#define SNN_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define SNN_DIGITS_CSV_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
/* Upper bound on the pixel bytes of one IDX file (1 GiB): a header that claims more is
 * refused before anything is allocated. */
#define SNN_IDX_MAX_BYTES ((size_t)1 << 30)

/* ---- creation and loaders ---- */

/* A copy of caller data: x is [n][c*h*w] in [0, 1]; y is [n] labels in [0, classes)
 * (y may be NULL: unlabelled, labels -1 and classes 0). */
snn_status snn_dataset_create(int n, int c, int h, int w, int classes, const float *x,
                              const int32_t *y, snn_dataset **out);

/* IDX files (the MNIST family): images with magic 0x00000803 ([n][h][w] unsigned bytes,
 * scaled by 1/255) and labels with magic 0x00000801 ([n] unsigned bytes). Each file may be
 * gzip-compressed or raw. labels_path may be NULL (unlabelled images, e.g. for predict).
 * classes = largest label + 1. */
snn_status snn_dataset_load_idx(const char *images_path, const char *labels_path,
                                snn_dataset **out);
/* The same from memory (raw IDX bytes, not compressed); the names are used in messages.
 * labels may be NULL. This is the parser the file loader uses and the fuzz target calls. */
snn_status snn_dataset_from_idx_memory(const void *images, size_t images_len,
                                       const char *images_name, const void *labels,
                                       size_t labels_len, const char *labels_name,
                                       snn_dataset **out);
/* Fashion-MNIST from dir (NULL: SNN_FASHION_MNIST_DIR): train (60000) or test (10000)
 * 1x28x28 images, 10 classes. Reads the .gz files, or raw files of the same name without
 * ".gz". A missing file is SNN_E_IO naming the path and how to get the data. */
snn_status snn_dataset_load_fashion_mnist(const char *dir, int train, snn_dataset **out);
/* scikit-learn's digits.csv(.gz): per line 64 pixel values 0..16 then the label.
 * path NULL: SNN_DIGITS_CSV_PATH. Images are 1x8x8 scaled by 1/16; classes = max label + 1. */
snn_status snn_dataset_load_digits_csv(const char *path, snn_dataset **out);
/* n random samples: pixels uniform in [0, 1), labels uniform in [0, classes), drawn from
 * Philox with `seed` (same seed, same data). */
snn_status snn_dataset_synthetic(int n, int c, int h, int w, int classes, uint64_t seed,
                                 snn_dataset **out);

/* A new dataset of the samples idx[0..n) (copied, in that order). */
snn_status snn_dataset_subset(const snn_dataset *ds, const uint32_t *idx, int n,
                              snn_dataset **out);
/* Seeded random split: round(test_fraction * size) samples go to *test, the rest to
 * *train (both keep the shape and class count of ds). 0 < test_fraction < 1. */
snn_status snn_dataset_split(const snn_dataset *ds, double test_fraction, uint64_t seed,
                             snn_dataset **train, snn_dataset **test);
void snn_dataset_free(snn_dataset *ds);

/* ---- accessors ---- */
int snn_dataset_size(const snn_dataset *ds);
size_t snn_dataset_features(const snn_dataset *ds);   /* c*h*w */
void snn_dataset_shape(const snn_dataset *ds, int *c, int *h, int *w);
int snn_dataset_classes(const snn_dataset *ds);       /* 0 when unlabelled */
const float *snn_dataset_data(const snn_dataset *ds); /* [n][features] */
const int32_t *snn_dataset_labels(const snn_dataset *ds);

/* ---- batching ---- */

/* order[0..size) = a permutation of 0..size-1, a pure function of (seed, epoch):
 * Fisher-Yates driven by Philox. */
snn_status snn_dataset_shuffle(const snn_dataset *ds, uint64_t seed, uint64_t epoch,
                               uint32_t *order);
/* Gather samples idx[0..n): x is [n][features], y is [n] (y may be NULL). */
snn_status snn_dataset_batch(const snn_dataset *ds, const uint32_t *idx, int n, float *x,
                             int32_t *y);

/* ---- spike encoders: x [N][features] -> out [T][N][features] ---- */
typedef enum snn_encoding {
    SNN_ENCODING_DIRECT = 0,  /* the analog values at every step (first layer encodes) */
    SNN_ENCODING_POISSON = 1  /* out = 1 if uniform < x else 0, fresh at every step */
} snn_encoding;

/* "direct" or "poisson" (also "rate"). */
snn_status snn_encoding_from_name(const char *name, snn_encoding *out);
const char *snn_encoding_name(snn_encoding e);
/* Repeat x over T steps. */
void snn_encode_direct(const float *x, int N, size_t features, int T, float *out);
/* Bernoulli spikes with probability x (clamped to [0, 1]). Element (t, n, f) uses
 * 24-bit uniform number e % 4 of snn_philox(seed, stream, e / 4) where
 * e = (t*N + n)*features + f: the result depends only on (seed, stream, x, T), never on
 * threads. Give each batch its own stream (e.g. epoch << 32 | batch). */
void snn_encode_poisson(const float *x, int N, size_t features, int T, uint64_t seed,
                        uint64_t stream, float *out);
/* Dispatch on e (seed and stream are ignored by the direct encoder). */
snn_status snn_encode(snn_encoding e, const float *x, int N, size_t features, int T,
                      uint64_t seed, uint64_t stream, float *out);

#ifdef __cplusplus
}
#endif
#endif
