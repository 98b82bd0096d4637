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
    /* flat storage: the host copy (params, grads, buffers) and the storage modules use
     * (param_store, grad_store, buffer_store): the same arrays on the CPU, device memory
     * after snn_model_to(m, "cuda"), when the host copy is refreshed by the getters. */
    float *params, *grads, *buffers;
    float *param_store, *grad_store, *buffer_store;
    struct snn_backend *owned_be; /* a device backend this model created (freed with it) */
    void (*release_be)(struct snn_backend *be); /* how owned_be is freed */
    float *x_store, *dy_store;    /* device: staging of the caller's input and dL/dy (arena) */
    float *out_host;              /* device: the host copy of the output */
    float *x_host;                /* snn_model_input_buffer: [T, N, input] host memory
                                     (page-locked on a device), sized by the plan */
    const struct snn_backend *x_host_be; /* the table that page-locked x_host, NULL: malloc */
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
    /* Bumped by every write of param_store (an optimizer update, snn_model_to, a push of the
     * host copy, a broadcast or gather of the parameters): copies derived from the weights
     * (a precision wrapper's 16-bit weight, prec_exec.c) are rebuilt only when it moved. */
    uint64_t param_version;
    void *precision;     /* prepared precision state (src/precision), NULL before prepare */
    /* graphs of the forward and backward on a device (model_graph.c) */
    struct snn_model_graphs *graphs;
    uint64_t graph_epoch;  /* bumped by snn_model_graph_invalidate */
    uint64_t fwd_version;  /* param_version at the latest forward */
    int fwd_seen;
};

/* ---- graphs (model_graph.c) ---- */
typedef enum snn_graph_region {
    SNN_GRAPH_FWD_INFER,
    SNN_GRAPH_FWD_TRAIN,
    SNN_GRAPH_BWD,
    SNN_GRAPH_STEP, /* a whole training step (src/train/step.c): the others inside it run as part of it */
    SNN_GRAPH_REGIONS
} snn_graph_region;
typedef snn_status (*snn_graph_body)(snn_model *m, void *ctx);
/* Run body (the region's host code) eagerly, or record it into a graph, or replay its graph
 * (a, b: the region's input and output pointers; variant: anything else that selects its
 * device work), as model_graph.c describes. On the CPU: body. */
snn_status snn_model_graph_run(snn_model *m, snn_graph_region region, const void *a, const void *b, int variant,
                               snn_graph_body body, void *ctx);
/* Host state that modules pass to the device by value changed (FP8 delayed scales, the
 * storage assignment, a position offset): no graph recorded before this runs again. */
void snn_model_graph_invalidate(snn_model *m);
/* Free the graphs (a new plan, the device released). */
void snn_model_graph_free(snn_model *m);
typedef struct snn_graph_stats {
    long records, replays, record_failures, dry_failures;
} snn_graph_stats;
snn_graph_stats snn_model_graph_stats(const snn_model *m);

/* Build: take ownership of root (already holding its children), set up shapes for the
 * per-sample input shape, allocate flat buffers, initialise with the seed. */
snn_status snn_model_build(snn_module *root, const char *kind, const char *config_json,
                           snn_shape in, uint64_t seed, snn_model **out);
/* The same without the initialisation (parameters zero, buffers as their modules' setup
 * left them zero): for a model whose values are copied in next (seed 0). */
snn_status snn_model_build_uninit(snn_module *root, const char *kind, const char *config_json, snn_shape in,
                                  snn_model **out);

/* Point every parameter at the model's current storage and every module at its backend;
 * the activation arena is released (plan again). */
void snn_model_bind_storage(snn_model *m);
/* Tests: place a fresh CPU model on a table the caller made (a test double of a device, e.g.
 * the CPU table with graph entries of its own). Once the checks pass the model owns the table
 * and release frees it (with the model, on a move back to the CPU, or when placing fails); a
 * refused call leaves it with the caller. */
snn_status snn_model_to_table(snn_model *m, struct snn_backend *be, void (*release)(struct snn_backend *));
/* Free the device storage and backend; the stores point at the host copy again (whose
 * contents the caller refreshed first). */
void snn_model_release_device(snn_model *m);

/* After writing the host copy of a device model's parameters and buffers (a checkpoint
 * restore, a broadcast from another rank): send it to the device and wait. No-op on the
 * CPU, where the host copy is the storage. */
snn_status snn_model_push_host(snn_model *m);
/* Refresh the host copy of a device model's parameters and buffers (before reading it
 * through snn_model_tensor: a checkpoint save, a finiteness check). No-op on the CPU. */
snn_status snn_model_pull_host(const snn_model *m);

/* Run backward from dy already in the model's storage (the device's memory). */
snn_status snn_model_backward_stored(snn_model *m, const float *dy_store);
/* A 16-bit output gradient: whether the module writing the model's output takes its dy as
 * 16-bit rows (SNN_MODULE_DY16 inside a direct 16-bit precision wrapper on a device), in
 * which type *t and with which row stride *ld (elements, a multiple of 8); the rows fit the
 * model's dy buffer. snn_model_backward_dy16 then runs the backward from such a dy, which a
 * loss wrote into m->dy_store (the LM loss: lm_cross_entropy16). Refused unless (t, ld) is
 * what snn_model_output_dy16 says. */
int snn_model_output_dy16(const snn_model *m, snn_dtype *t, int *ld);
snn_status snn_model_backward_dy16(snn_model *m, snn_dtype t, int ld);
/* The forward of snn_model_forward_view (no output view) with the output module writing its
 * output as 16-bit rows of the same (t, ld) into the model's output buffer (m->out), the
 * rows lm_cross_entropy16 reads in place; the same refusal. m->out holds t values after it. */
snn_status snn_model_forward_y16(snn_model *m, const snn_tensor_view *x, int training, snn_dtype t, int ld);
/* Copy the caller's host dy into the model's staging buffer; *out is its storage pointer
 * (dy itself on the CPU). */
snn_status snn_model_stage_dy(snn_model *m, const float *dy, const float **out);
/* The model's op table (the CPU one, or its device's). */
static inline const struct snn_backend *snn_model_backend(const snn_model *m) { return m->run.be; }

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
