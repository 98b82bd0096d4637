#ifndef SNN_MODEL_INTERNAL_H
#define SNN_MODEL_INTERNAL_H

#include "nn/module.h"
#include "snn/model.h"

typedef struct snn_tensor_entry {
    char name[SNN_NAME_MAX + 32];
    snn_param *param;
} snn_tensor_entry;

struct snn_model {
    snn_module *root;
    char kind[32];
    char *config_json;
    snn_shape in_shape;
    uint64_t seed;
    /* flat storage */
    float *params, *grads, *buffers;
    size_t n_params, n_buffers;
    snn_tensor_entry *tensors;
    size_t n_tensors;
    /* activations */
    snn_arena arena;
    int T, N;
    float *out;          /* [T, N, classes] */
    const float *last_x;
    uint64_t step;
    snn_run run;
    int optimizer_bound; /* an optimizer has been created for this model */
    void *precision;     /* prepared precision state (src/precision), NULL before prepare */
};

/* Build: take ownership of root (already holding its children), set up shapes for the
 * per-sample input shape, allocate flat buffers, initialise with the seed. */
snn_status snn_model_build(snn_module *root, const char *kind, const char *config_json,
                           snn_shape in, uint64_t seed, snn_model **out);

/* At most this many parameter plus buffer values in one model (16 GiB of FP32). */
#define SNN_MODEL_MAX_PARAMS ((size_t)1 << 32)

/* A check that snn_model_build runs once the tensor table (names, shapes) is filled in
 * and before the parameter buffers are allocated; tensor data pointers are NULL during
 * the call. Thread-local; fn NULL removes it. snn_model_load uses it to compare a
 * checkpoint's tensors with the model its configuration describes before the model
 * costs any memory. */
typedef snn_status (*snn_model_build_check)(const snn_model *m, void *ctx);
void snn_model_set_build_check(snn_model_build_check fn, void *ctx);

#endif
