/* Shared by the subcommands: model flags, dataset loading, evaluation. */
#ifndef SNN_TOOL_COMMON_H
#define SNN_TOOL_COMMON_H

#include <stdint.h>

#include "args.h"
#include "snn/data.h"
#include "snn/prepare.h"
#include "snn/snn.h"

typedef struct model_flags {
    const char *model;      /* fcsnn | convsnn | spikformer */
    int hidden, depth, T;
    float tau;
    int image_size, num_classes, embed_dim, heads, channels;
} model_flags;

/* Adds the model options to an option table; returns the number added (at most 10). */
int model_flags_options(model_flags *f, opt *table);
void model_flags_defaults(model_flags *f);

/* Build the model the flags describe, for samples of shape c x h x w and `classes` classes. */
snn_status model_build(const model_flags *f, int c, int h, int w, int classes, uint64_t seed,
                       snn_model **out);

typedef struct data_flags {
    const char *dataset;    /* fashion-mnist | digits | synthetic */
    const char *data_dir;
    int synthetic_train, synthetic_test;
} data_flags;

/* Load the train and/or test split. For synthetic data the shape comes from the model
 * flags (1x28x28 for fcsnn/convsnn, 3xSxS for spikformer). Either output may be NULL. */
snn_status data_load(const data_flags *d, const model_flags *f, uint64_t seed, snn_dataset **train,
                     snn_dataset **test);

/* Accuracy of m on ds with T steps and batch N (partial last batch padded). */
snn_status evaluate(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc,
                    uint64_t seed, double *accuracy, double *loss);

/* Accumulate predictions (argmax of the mean over T) and the cross-entropy of that mean for
 * the first `valid` samples of y [T][N][C]; mean is scratch of C doubles. */
void score_batch(const float *y, int T, int N, int C, const int32_t *yb, int valid, double *mean,
                 long *correct, double *loss_sum);

double now_seconds(void);

/* --device: -1 for NULL or "cpu", N for "cuda" / "cuda:N". Anything else exits 2, and so does
 * cuda in a build without CUDA; `what` (may be NULL) prefixes the message ("bench linear"). */
int device_parse(const char *what, const char *dev);

#endif

/* --precision, --fp8-recipe, --neuron-storage/fwd/bwd (and the --triton-* aliases). */
typedef struct precision_flags {
    const char *mode, *recipe, *storage, *fwd, *bwd;
    const char *device;   /* --device: cpu (default), cuda, cuda:N */
} precision_flags;
int precision_flags_options(precision_flags *f, opt *table);
/* 1 if any precision flag was given. */
int precision_flags_given(const precision_flags *f);
/* Parse and validate; a bad value or combination exits 2 with the validation message. */
snn_precision_config precision_flags_config(const precision_flags *f);
/* Open a checkpoint written by snn train, rebuild its model and prepare it under the
 * precision it was trained with (flags that disagree are refused). Exits on failure. */
struct snn_ckpt;
void load_checkpoint(const char *path, uint64_t seed, const precision_flags *pf, snn_model **m,
                     struct snn_ckpt **ck, snn_precision **prec);
