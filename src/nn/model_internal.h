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

#endif
