/* snn — models: a tree of modules with one flat parameter buffer, one flat gradient
 * buffer, one buffer array (BatchNorm running statistics) and one activation arena. */
#ifndef SNN_MODEL_H
#define SNN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_model snn_model;

/* Options of the model zoo. Zero fields take the documented defaults. */
typedef struct snn_fcsnn_opts {
    int in_features;   /* per-sample input size (784 for 28x28 images) */
    int hidden;        /* default 512 */
    int depth;         /* number of [Linear -> LIF] blocks, default 2 */
    int classes;       /* default 10 */
    float tau;         /* LIF tau, default 2.0 */
} snn_fcsnn_opts;

typedef struct snn_convsnn_opts {
    int in_channels, height, width; /* default 1x28x28 */
    int channels;                   /* default 128 */
    int classes;                    /* default 10 */
} snn_convsnn_opts;

typedef struct snn_spikformer_opts {
    int in_channels;  /* default 3 */
    int image_size;   /* default 224 (multiple of 16) */
    int classes;      /* default 1000 */
    int embed_dim;    /* default 384 */
    int heads;        /* default 12 */
    int depth;        /* default 6 */
    float mlp_ratio;  /* default 4 */
} snn_spikformer_opts;

snn_status snn_fcsnn_create(const snn_fcsnn_opts *o, uint64_t seed, snn_model **out);
snn_status snn_convsnn_create(const snn_convsnn_opts *o, uint64_t seed, snn_model **out);
snn_status snn_spikformer_create(const snn_spikformer_opts *o, uint64_t seed, snn_model **out);
/* Rebuild from the JSON written by snn_model_config_json (checkpoint metadata). */
snn_status snn_model_create_from_config(const char *json, uint64_t seed, snn_model **out);
void snn_model_free(snn_model *m);

/* JSON object {"model": "fcsnn", ...options} that rebuilds this model. */
const char *snn_model_config_json(const snn_model *m);
const char *snn_model_kind(const snn_model *m);

/* Size the activation arena for T time steps and batch N (done before the first step;
 * called again only when T or N change). */
snn_status snn_model_plan(snn_model *m, int T, int N);
/* x: [T, N, input...] FP32. On success *y points at the [T, N, classes] output, which
 * stays valid until the next forward. */
snn_status snn_model_forward(snn_model *m, const float *x, int training, const float **y);
/* A caller's array and where it lives: the model's input or output at the boundary of a
 * model placed on a device, so a batch already on the GPU is not copied through the host.
 * dtype: SNN_F32 (the only type a model takes or gives today). device: NULL or "cpu" for
 * host memory; "cuda" or "cuda:N" for memory of the model's own device (checked: a pointer
 * of another device or of the host is refused). numel: the number of values. */
typedef struct snn_tensor_view {
    snn_dtype dtype;
    const char *device;
    void *data;
    size_t numel;
} snn_tensor_view;
/* snn_model_forward with the input x given as a view (numel must be T * N * input size of
 * the plan). y (may be NULL): set y->device first ("cpu"/NULL: a host copy, as
 * snn_model_forward gives; the model's device: the device array itself, no copy); on success
 * y->data, y->numel and y->dtype describe the [T, N, classes] output, valid until the next
 * forward. On the CPU both are host memory and nothing is copied. */
snn_status snn_model_forward_view(snn_model *m, const snn_tensor_view *x, int training, snn_tensor_view *y);
/* The model's own input buffer: T * N * input-size floats of host memory, sized by
 * snn_model_plan (NULL before), page-locked on a device model so that passing it to
 * snn_model_forward uploads by DMA instead of through the driver's staging copy of an
 * ordinary array (docs/benchmarks.md has the difference measured on an H200). Fill it and
 * pass it as x. Valid until the next plan with another T or N, snn_model_to or free. */
float *snn_model_input_buffer(snn_model *m);
/* dy: dL/dy for the last forward's output. Accumulates into the gradient buffer. */
snn_status snn_model_backward(snn_model *m, const float *dy);
void snn_model_zero_grad(snn_model *m);
/* Clear neuron membranes and dropout masks (done automatically at each forward). */
void snn_model_reset(snn_model *m);

size_t snn_model_input_numel(const snn_model *m);   /* per sample */
size_t snn_model_output_numel(const snn_model *m);  /* per sample and step: classes */
int snn_model_time_steps(const snn_model *m);      /* T of the last plan (0 before) */
size_t snn_model_num_params(const snn_model *m);   /* trainable scalars */
/* The host copy of the flat arrays. On a model placed on a device they are refreshed from
 * the device (a copy) on every call and are read-only views: writes do not reach the device. */
float *snn_model_params(snn_model *m);
float *snn_model_grads(snn_model *m);
size_t snn_model_num_buffers(const snn_model *m);
float *snn_model_buffers(snn_model *m);

/* Place the model on a device: "cpu" (the default), "cuda" or "cuda:N". Parameters and
 * buffers are copied there, gradients start at zero, and the next snn_model_plan sizes the
 * activations on the device. The order is device -> snn_prepare_model_for_precision ->
 * optimizer: a prepared model or one with an optimizer is refused. Every module kind of the
 * tree must run on the device (refused with the module's name otherwise). Inputs and dL/dy
 * stay host arrays (copied in); snn_model_forward returns a host copy of the output.
 * A snn built without CUDA refuses "cuda" with SNN_E_UNSUPPORTED. */
snn_status snn_model_to(snn_model *m, const char *device);
/* "cpu" or the device's backend name ("cuda"); NULL for a NULL model. */
const char *snn_model_device(const snn_model *m);
size_t snn_model_arena_bytes(const snn_model *m);
/* Forward passes so far (keys per-batch randomness such as dropout masks); saved in
 * training checkpoints so that a resume draws the same numbers. */
uint64_t snn_model_step_count(const snn_model *m);
void snn_model_set_step_count(snn_model *m, uint64_t step);

/* Named tensors (parameters then buffers) in a stable order, for checkpoints. */
typedef struct snn_tensor_info {
    const char *name;     /* "layers.0.weight" */
    int rank;
    int shape[4];
    size_t numel;
    float *data;
    float *grad;          /* NULL for buffers */
    int is_buffer;
    int decay;            /* weight decay applies */
} snn_tensor_info;
size_t snn_model_num_tensors(const snn_model *m);
snn_status snn_model_tensor(const snn_model *m, size_t i, snn_tensor_info *info);

/* SNN_OK when every parameter and buffer is finite; else SNN_E_NUMERIC with a message
 * naming the first tensor holding a NaN or an infinity and the index of that value.
 * One pass over the model's values (no allocation): call it before evaluating or saving
 * a model that came from outside. */
snn_status snn_model_check_finite(const snn_model *m);

/* Spike rates of the last snn_model_forward (training or evaluation): for every IF/LIF/PLIF
 * neuron module in tree order, the mean of its output over the whole [T, N, ...] batch,
 * i.e. the fraction of ones (spikes are 0 or 1). Works on any device (the sums run where
 * the model is). Writes the first min(cap, count) entries of out (out may be NULL with cap
 * 0) and sets *count to the number of neuron modules. A neuron whose output the model does
 * not keep apart (one inside a Residual or an attention block) gets rate NaN. SNN_E_STATE
 * before the first forward after snn_model_plan / snn_model_to. */
typedef struct snn_spike_rate {
    const char *name;  /* dotted module name ("layers.1"); valid while the model lives */
    const char *kind;  /* "LIFNode", "IFNode", "ParametricLIFNode" */
    size_t numel;      /* values counted: T * N * per-sample size */
    double rate;       /* fraction of ones in [0, 1], NaN where not available */
} snn_spike_rate;
snn_status snn_model_spike_rates(snn_model *m, snn_spike_rate *out, int cap, int *count);

#ifdef __cplusplus
}
#endif
#endif
