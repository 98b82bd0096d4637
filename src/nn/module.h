/* The module contract: every layer, neuron and container implements these callbacks.
 *
 * Layout: activations are FP32 arrays of B = T*N rows in [T][N][per-sample shape] order.
 * Stateless layers treat the B rows independently (SpikingJelly's seq-to-ANN wrapping);
 * neurons see T and N separately and run their fused recurrence over T.
 *
 * Life cycle (driven by snn_model):
 *   setup(in)      once: validate the per-sample input shape, set m->out, declare
 *                  parameters/buffers with snn_module_add_param().
 *   (the model allocates one flat parameter, gradient and buffer array and points
 *    each snn_param's data/grad into it)
 *   init(rng)      draw initial parameters.
 *   reserve(a,T,N) take activation/saved-state memory from the arena (called twice:
 *                  measuring, then for real; do not touch the pointers while measuring).
 *   forward/backward per step, no allocation.
 *   reset()        clear recurrent state (neurons, dropout masks) between samples.
 *
 * Backward contract: dy is dL/dy; write dL/dx into dx (overwrite; dx may be NULL when no
 * one needs it) and ADD parameter gradients into param->grad. x and y are the same
 * buffers the forward saw and are still intact. */
#ifndef SNN_NN_MODULE_H
#define SNN_NN_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/error_internal.h"
#include "snn/rng.h"

#define SNN_MAX_RANK 4
#define SNN_MAX_PARAMS 6
#define SNN_NAME_MAX 96

typedef struct snn_shape {
    int rank;
    int d[SNN_MAX_RANK];
} snn_shape;

static inline snn_shape snn_shape1(int a) { snn_shape s = {1, {a, 1, 1, 1}}; return s; }
static inline snn_shape snn_shape2(int a, int b) { snn_shape s = {2, {a, b, 1, 1}}; return s; }
static inline snn_shape snn_shape3(int a, int b, int c) { snn_shape s = {3, {a, b, c, 1}}; return s; }
static inline size_t snn_shape_numel(snn_shape s) {
    size_t n = 1;
    for (int i = 0; i < s.rank; i++) n *= (size_t)s.d[i];
    return n;
}
/* "[3, 32, 32]" into buf. */
const char *snn_shape_str(snn_shape s, char *buf, size_t cap);

typedef enum { SNN_PARAM_WEIGHT = 0, SNN_PARAM_BUFFER = 1 } snn_param_kind;

typedef struct snn_param {
    char name[32];         /* local name: "weight", "bias", "running_mean", "w" */
    snn_shape shape;
    size_t numel;
    size_t offset;         /* into the model's flat parameter (or buffer) array */
    snn_param_kind kind;   /* trainable weight, or a buffer such as BN running stats */
    int decay;             /* weight decay applies (matrices and kernels, not biases/norms) */
    float *data;           /* set by the model after allocation */
    float *grad;           /* NULL for buffers */
} snn_param;

struct snn_precision_rt; /* precision state (src/precision), NULL in plain FP32 */
struct snn_backend;

/* What a forward/backward call needs to know about the step. */
typedef struct snn_run {
    int T, N;                         /* time steps and batch; rows B = T*N */
    int training;                     /* 1: train mode (BN batch stats, dropout on) */
    uint64_t seed;                    /* model seed (dropout masks etc.) */
    uint64_t step;                    /* sample-batch counter for per-batch randomness */
    const struct snn_backend *be;
    struct snn_precision_rt *prec;
    int gemm_type;                    /* snn_dtype a precision wrapper asks GEMM modules to
                                         multiply in (its operands hold such values, or the
                                         backend rounds them: snn_backend.gemm_rounds); 0: F32 */
    int w_store;                      /* snn_dtype of params[0].data while a wrapper has put a
                                         16-bit copy of the weight there (kinds with
                                         SNN_MODULE_W16 only); 0: F32 */
    int out_round;                    /* snn_dtype a wrapper asks a SNN_MODULE_ROUNDS_OUT kind
                                         to round its forward output and its dx to, in the
                                         pass that writes them; 0: none */
    const void *x16, *dy16;           /* a wrapper's 16-bit copies (gemm_type values) of x and,
                                         in a backward, dy, for a Linear to multiply instead of
                                         x and dy (no conversion in its GEMMs); NULL: none */
    const void *bias16;               /* a wrapper's 16-bit copy of the bias (params[1], rounded:
                                         SNN_MODULE_W16) for a GEMM writing a 16-bit C to add
                                         as that type (snn_gemm.bias_store); NULL: none */
    int dy16_ld;                      /* dy16's row stride in elements, its rows zero-padded
                                         past the width (a loss's 16-bit gradient,
                                         lm_cross_entropy16); 0: the row's width */
} snn_run;

typedef struct snn_module snn_module;

/* A module's hyper-parameters as plain numbers, for code that executes the module elsewhere
 * (the CUDA model runner). Fields a kind does not use stay 0. */
typedef struct snn_module_desc {
    int in_features, out_features, bias; /* Linear; Conv1d/2d (channels) */
    int kernel, stride, padding;         /* Conv1d/2d, MaxPool2d, AvgPool2d */
    float eps, momentum;                 /* BatchNorm, LayerNorm (eps) */
    float p;                             /* Dropout */
    int heads;                           /* SpikingSelfAttentionCore */
    float scale;                         /* SpikingSelfAttentionCore */
} snn_module_desc;

/* snn_module_ops.flags: the kind reads params[0] (its weight) only as an operand of its GEMMs
 * and passes snn_run.w_store as that operand's store type (Linear: b_store; the convolutions:
 * a_store), so a precision wrapper may put a 16-bit copy of the weight there (converted once
 * per forward, reused by the backward). Its params[1], when it has one, is the bias its GEMMs
 * add: a 16-bit wrapper rounds it to the 16-bit type like the weight (torch.autocast casts
 * F.linear's bias too) and swaps the rounded copy into params[1].data for the call; a GEMM
 * with a 16-bit C may take it as that type (snn_run.bias16, snn_gemm.bias_store). */
#define SNN_MODULE_W16 1u
/* The kind honours snn_run.out_round (its last pass over y and dx rounds them), so the
 * wrapper's own rounding pass goes. */
#define SNN_MODULE_ROUNDS_OUT 4u
/* The kind honours snn_module.in_store / out_store (16-bit activations and gradients). */
#define SNN_MODULE_TYPED_IO 2u
/* The kind multiplies dy only in 16-bit GEMMs and takes it from snn_run.dy16 with the row
 * stride snn_run.dy16_ld, so a loss may write the model's output gradient in that form
 * (snn_module.dy_store; the LM head). */
#define SNN_MODULE_DY16 8u
/* The kind honours snn_module.dx_add (its backward writes dx = dx_add + its gradient), so a
 * Residual whose branch starts with it needs no pass of its own to sum the gradients. */
#define SNN_MODULE_DX_ADD 16u
/* The kind's training forward draws random numbers at an offset of snn_run.step, a value
 * that moves every forward (Dropout): a recorded graph of it would repeat one draw, so a
 * model holding it records no training graphs (model_graph.c). */
#define SNN_MODULE_STEP_RANDOM 32u
/* On a table whose GEMMs round their operands (gemm_rounds), the kind's GEMMs read dy only
 * through a conversion to the GEMM type (the convolutions: conv_gather16, or the GEMM's own
 * operand rounding), so a 16-bit wrapper's FP32 rounding pass over dy serves only the bias
 * gradient: for an instance without a bias the wrapper leaves dy as it is. */
#define SNN_MODULE_ROUNDS_DY 64u

/* What a module is: code that asks "is this a Linear?" compares this id (through
 * snn_module_kind_is), never the display name. One value per ops table; a table that
 * leaves it 0 (SNN_KIND_NONE, e.g. a test double) is no kind any check looks for. */
typedef enum snn_module_kind_id {
    SNN_KIND_NONE = 0,
    /* src/nn */
    SNN_KIND_SEQUENTIAL,
    SNN_KIND_RESIDUAL,
    SNN_KIND_LINEAR,
    SNN_KIND_CONV1D,
    SNN_KIND_CONV2D,
    SNN_KIND_BATCHNORM,
    SNN_KIND_LAYERNORM,
    SNN_KIND_RMSNORM,
    SNN_KIND_GELU,
    SNN_KIND_SWIGLU,
    SNN_KIND_DROPOUT,
    SNN_KIND_FLATTEN,
    SNN_KIND_MAXPOOL2D,
    SNN_KIND_AVGPOOL2D,
    SNN_KIND_EMBEDDING,
    SNN_KIND_POSITION_EMBEDDING,
    SNN_KIND_ROPE,
    SNN_KIND_CAUSAL_SELF_ATTENTION,
    SNN_KIND_LM_HEAD,
    SNN_KIND_ELASTIC_BISPIKE,
    /* src/neuron */
    SNN_KIND_IF_NODE,
    SNN_KIND_LIF_NODE,
    SNN_KIND_PLIF_NODE,
    /* src/models */
    SNN_KIND_RESHAPE,
    SNN_KIND_TOKEN_MEAN,
    SNN_KIND_SPIKING_SELF_ATTENTION_CORE,
    /* src/dist: the parallel replacements are kinds of their own, not the module they replace */
    SNN_KIND_TENSOR_PARALLEL,
    SNN_KIND_VOCAB_PARALLEL_EMBEDDING,
    SNN_KIND_SEQUENCE_PARALLEL,
    SNN_KIND_CP_POSITION_EMBEDDING,
    SNN_KIND_CP_ROPE,
    SNN_KIND_CP_CAUSAL_SELF_ATTENTION,
    /* src/precision: wrapper tables (a wrapped module keeps its own kind, see own_ops) */
    SNN_KIND_PREC_GEMM16,
    SNN_KIND_PREC_FP8_GEMM,
    SNN_KIND_PREC_NEURON,
    SNN_KIND_COUNT
} snn_module_kind_id;

typedef struct snn_module_ops {
    snn_module_kind_id id; /* what the module is; type checks compare this */
    const char *kind;   /* "Linear", "LIFNode", "Sequential", ... (display name for reports
                           and errors; never compared) */
    /* The devices the kind's forward/backward run on: SNN_DEVMASK bits of backend.h. 0 means
     * the CPU only (the kind still touches host memory directly); a kind that calls only the
     * op table (m->be, r->be) declares SNN_DEVMASK_ALL. */
    unsigned devices;
    unsigned flags;     /* SNN_MODULE_* below */
    snn_status (*setup)(snn_module *m, snn_shape in);
    void (*init)(snn_module *m, snn_rng *rng);
    void (*reserve)(snn_module *m, snn_arena *a, int T, int N);
    snn_status (*forward)(snn_module *m, const snn_run *r, const float *x, float *y);
    snn_status (*backward)(snn_module *m, const snn_run *r, const float *x, const float *y,
                           const float *dy, float *dx);
    void (*reset)(snn_module *m);   /* optional */
    void (*destroy)(snn_module *m); /* optional: free m->impl contents (not m->impl itself) */
    void (*describe)(const snn_module *m, snn_module_desc *d); /* optional, see above */
    /* optional: the weight the kind's GEMMs read when it is not params[0] (a tied LMHead
     * reads the embedding's); a precision wrapper rounds and swaps this one */
    snn_param *(*gemm_weight)(snn_module *m);
} snn_module_ops;

struct snn_module {
    const snn_module_ops *ops;
    char name[SNN_NAME_MAX];     /* dotted path from the model root: "layers.3" */
    snn_shape in, out;           /* per-sample shapes */
    snn_param params[SNN_MAX_PARAMS];
    int n_params;
    snn_module **children;       /* containers only */
    int n_children;
    void *impl;                  /* module-specific state, malloc'd, freed by snn_module_free */
    int precision_flags;         /* set by prepare (src/precision) */
    void *prec;                  /* precision wrapper state (src/precision), NULL if none;
                                    while set, ops points at the wrapper's table */
    const snn_module_ops *own_ops; /* the module's own table while wrapped, else NULL */
    snn_module *parent;          /* the container holding it (set by snn_module_add_child) */
    int sealed;                  /* part of a model: the public API refuses to change it */
    const struct snn_backend *be; /* the op table of the device the model is placed on (set
                                     by the model; the CPU table until snn_model_to) */
    /* How x / dx (in_store) and y / dy (out_store) are stored: SNN_F32 (0, the default) or a
     * 16-bit type, set by the precision system between two modules whose values at that
     * boundary are exactly that type anyway (src/precision/prec_store.c); only for kinds with
     * SNN_MODULE_TYPED_IO. The buffers keep their FP32 size. */
    int in_store, out_store;
    /* A 16-bit Linear -> plain neuron boundary on a device with neuron_forward_io_bias
     * (prec_store.c): the Linear writes its FP32 product without the bias (defer_bias) and
     * the neuron adds bias_src's bias and rounds in its forward. Gradients cross the
     * boundary as before (in_store / out_store). */
    int defer_bias;
    struct snn_module *bias_src;
    /* A defer_bias neuron whose x is stored FP32 (in_store 0: an FP8 mode, where the FP8
     * Linear's output is rounded to the base precision but the gradient coming back is FP32):
     * the type it rounds bias + product to. 0 when in_store says it. */
    int x_round;
    /* An FP8 mode's defer_bias neuron -> FP8 Linear on codes (prec_store.c): in an inference
     * forward the neuron writes its spikes as E4M3 codes (1.0 is 0x38: what the Linear's
     * quantisation of spikes at unit scale writes), rows of the Linear's width (a multiple of
     * 16), and the Linear multiplies them as they are: no FP32 spikes, no quantisation pass.
     * A training forward keeps FP32 spikes (the Linear's backward quantises them transposed).
     * y_codes / x_codes mark the two sides; codes_fwd: the module's last forward wrote (read)
     * codes (snn_module_codes_now). */
    int y_codes, x_codes, codes_fwd;
    /* The bias its GEMMs add as a 16-bit wrapper rounded it (FP32 values; the wrapper's copy,
     * refreshed by the module's forward), which a defer_bias neuron adds instead of
     * params[1].data; NULL: params[1].data as it is. */
    const float *bias_rounded;
    /* The gradient this module's backward receives, when a loss wrote it in a 16-bit type
     * straight into the model's dy buffer: set for one backward by snn_model_backward_dy16
     * on the module that writes the model's output (a SNN_MODULE_DY16 kind inside a direct
     * 16-bit precision wrapper). dy_store: its snn_dtype (0: as out_store says); dy_ld: its
     * row stride in elements, padded so that the GEMMs read it in place. */
    int dy_store, dy_ld;
    /* The output this module's forward writes, likewise: set for one forward by
     * snn_model_forward_y16 on the same module, which then writes y_store values (16-bit) in
     * rows of y_ld elements (zeros past the row's width) into the model's output buffer, the
     * rows a 16-bit loss reads in place (lm_cross_entropy16). */
    int y_store, y_ld;
    /* A residual branch whose last module is a 16-bit GEMM Linear (prec_store.c): the Linear's
     * forward leaves its output unrounded (round_deferred: the 16-bit type; its backward never
     * reads that output), and the Residual around the branch (branch_round: the same type)
     * rounds it in its sum (add_rounded), one pass where there were two. 0: none. */
    int round_deferred, branch_round;
    /* Set for one backward by a Residual on its branch's first module when that kind has
     * SNN_MODULE_DX_ADD: the residual's skip gradient, which the backward adds to the dx it
     * writes (one FP32 add: dx = dx_add + its gradient). NULL otherwise. */
    const float *dx_add;
};
/* Whether a forward with r passes the boundary buffer buf as E4M3 codes (y_codes / x_codes
 * above): both sides ask with the same buffer and run, so they agree. */
static inline int snn_module_codes_now(int flag, const snn_run *r, const void *buf) {
    return flag && r && !r->training && buf && ((uintptr_t)buf & 15u) == 0;
}

/* The module's own ops table, also while a precision wrapper is installed: type checks
 * ("is this a Conv1d?") go through snn_module_kind_is below, which reads this, not m->ops. */
static inline const snn_module_ops *snn_module_own_ops(const snn_module *m) {
    return m->own_ops ? m->own_ops : m->ops;
}

/* The one type check: is m a module of kind k? Looks at the module's own table, so a module
 * wrapped by the precision system is still what it was. NULL is no kind. */
static inline int snn_module_kind_is(const snn_module *m, snn_module_kind_id k) {
    return m && k != SNN_KIND_NONE && snn_module_own_ops(m)->id == k;
}

/* The module's hyper-parameters (zeros for kinds without describe). */
static inline snn_module_desc snn_module_describe(const snn_module *m) {
    snn_module_desc d = {0};
    const snn_module_ops *o = snn_module_own_ops(m);
    if (o->describe) o->describe(m, &d);
    return d;
}

/* Allocate a module with zeroed impl of impl_size bytes. NULL on allocation failure. */
snn_module *snn_module_new(const snn_module_ops *ops, size_t impl_size);
void snn_module_free(snn_module *m);  /* frees children recursively */
/* Declare a parameter during setup. Returns its index or -1 (too many). */
int snn_module_add_param(snn_module *m, const char *name, snn_shape shape, snn_param_kind kind,
                         int decay);
/* Append a child (containers). Takes ownership (frees the child on failure); sets its parent. */
snn_status snn_module_add_child(snn_module *parent, snn_module *child);
/* Give every module its dotted name: children of `m` are named prefix.i unless they have
 * a local name already (then prefix.localname). */
void snn_module_name_tree(snn_module *m, const char *prefix);

/* Walk the tree in pre-order (parents before children). */
typedef void (*snn_module_visit_fn)(snn_module *m, void *ctx);
/* A module changed host state that its forward hands to the device by value (a position
 * offset, a KV cache): graphs recorded before (src/nn/model_graph.c) must not run again. A
 * module does not know its model, so every model's graphs go. */
void snn_graph_invalidate_all(void);
void snn_module_walk(snn_module *m, snn_module_visit_fn fn, void *ctx);

/* Helpers used by many modules. */
static inline size_t snn_rows(const snn_run *r) { return (size_t)r->T * (size_t)r->N; }

#endif
