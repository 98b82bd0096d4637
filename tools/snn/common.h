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

double now_seconds(void);

/* Print a cJSON object as one line on stdout and free it (exit 2 if it cannot be
 * printed). */
struct cJSON;
void print_json_line(struct cJSON *j);
/* Flush stdout; a write error (a full disk, a closed pipe) is exit 2 with a message
 * instead of a silent truncation. Returns 0 for main's exit code. */
int finish_stdout(void);

/* Physical memory of this machine in bytes (0 if unknown). */
double machine_bytes(void);
/* Exit 2 naming the size when `bytes` cannot fit in this machine's memory. */
void check_fits(const char *what, double bytes);
double model_bytes_estimate(const model_flags *f, int c, int h, int w, int classes);

/* --device: -1 for NULL or "cpu", N for "cuda" / "cuda:N". Anything else exits 2, and so does
 * cuda in a build without CUDA; `what` (may be NULL) prefixes the message ("bench linear"). */
int device_parse(const char *what, const char *dev);
/* 1 for "cuda" and "cuda:N" (any text after "cuda": snn_model_to or device_parse checks it). */
int device_is_cuda(const char *device);
/* This rank's GPU for --device (already checked by device_parse): cuda:N is N on every
 * rank; cuda is the node-local rank of `world` modulo the GPUs the process sees (several
 * ranks may share one). Writes "cuda:K" into name and returns K; exits 2 without a GPU. */
struct snn_comm;
int device_for_rank(const char *device, struct snn_comm *world, char *name, size_t cap);

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
struct snn_ckpt;
/* An integer metadata value of a checkpoint, strictly: absent gives def; text, a sign
 * where none belongs, overflow or a value outside [lo, hi] exits 2 naming the key. */
long ckpt_int_metadata(const struct snn_ckpt *ck, const char *key, long lo, long hi, long def);
/* Open a checkpoint written by snn train, rebuild its model, place it on pf->device (cpu by
 * default; cuda / cuda:N through snn_model_to) and prepare it there under the precision it
 * was trained with, restoring its FP8 / loss-scaler state (flags that disagree with the
 * checkpoint are refused). Exits on failure. */
void load_checkpoint(const char *path, uint64_t seed, const precision_flags *pf, snn_model **m,
                     struct snn_ckpt **ck, snn_precision **prec);
