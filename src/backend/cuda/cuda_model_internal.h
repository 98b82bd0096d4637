/* The whole-model runner's internal state, shared by cuda_model.cu (planning, memory, the
 * public API) and cuda_model_exec.cu (forward and backward of each module kind).
 *
 * The module tree of the host model is mirrored as a tree of gnodes. Every pointer a step
 * uses (inputs, outputs, gradients, saved state, parameters) is resolved once when the model
 * is planned, so a step is a fixed sequence of launches on fixed buffers: exactly what a
 * CUDA graph needs. CUDA C++ only. */
#ifndef SNN_CUDA_MODEL_INTERNAL_H
#define SNN_CUDA_MODEL_INTERNAL_H

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"
#include "backend/cuda/cuda_layernorm.h"
extern "C" {
#include "nn/model_internal.h"
#include "nn/module.h"
#include "neuron/neuron_module.h"
#include "precision/fp8.h"
}

struct gm_f8;  /* one FP8 GEMM module (cuda_model_fp8.cu) */
struct gm_fp8; /* the model's FP8 recipe state (cuda_model_fp8.cu) */

enum gkind {
    GK_SEQ,      /* Sequential: children in order */
    GK_RES,      /* Residual: y = x + inner(x) */
    GK_ALIAS,    /* Flatten, Reshape, Dropout in eval: y is x */
    GK_LINEAR,
    GK_CONV,     /* Conv2d, pointwise Conv1d (as a 1 x L image) */
    GK_BN,
    GK_MAXPOOL,
    GK_NEURON,
    GK_GELU,
    GK_TMEAN,
    GK_SSA,
    GK_LN,       /* LayerNorm over the last dimension */
    GK_DROPOUT,  /* Dropout with p > 0 (in eval a copy) */
    GK_AVGPOOL
};

struct gnode {
    snn_module *m;
    gkind kind;
    snn_module_desc d;
    gnode **kids;
    int n_kids;
    size_t in_numel, out_numel; /* per sample */
    /* resolved pointers (device) */
    const float *x;   /* forward input */
    float *y;         /* forward output (aliases x for GK_ALIAS) */
    const float *gy;  /* dL/dy */
    float *gin;       /* dL/dx, NULL when nobody needs it */
    int need_gin;
    /* parameters (device FP32 masters, gradients, compute-type copies) */
    float *w, *gw, *b, *gb;
    const void *wc;
    float *rmean, *rvar; /* BN running statistics (device buffers) */
    /* Linear / conv geometry and saved operands */
    int rows;            /* Linear: GEMM rows (B times the leading per-sample dims) */
    int C, H, W, k, s, p, Ho, Wo, P, Kc, ldcol, O;
    void *xc;            /* Linear: input in the compute type; conv: im2col columns */
    /* BN */
    int S;
    float *mean, *invstd;
    /* LayerNorm: V vectors of d.in_features, statistics in double */
    size_t V;
    double *lmean, *lrstd;
    /* MaxPool */
    uint8_t *arg;
    /* neuron */
    snn_neuron_opts nopt;
    float nk;
    float *h;            /* pre-reset membrane [T][n] saved by the training forward */
    int plif;            /* ParametricLIF: k = sigmoid(*w) on the device, dL/dw into *gw */
    float *gk;           /* PLIF: device dL/dk of the step */
    void *xs;            /* neuron precision: x in the storage dtype (NULL for FP32 storage) */
    double *gkd;         /* neuron precision, PLIF: dL/dk and its block sums */
    /* Dropout */
    float *mask;         /* [N][per-sample]: 0 or 1/(1-p) */
    /* SSA / token mean */
    int L, heads;
    /* FP8 (compute f8e4m3): a converted GEMM module, and "my input is spikes" (the
       previous child of my Sequential is a neuron: the CPU's spike_fp8 marking) */
    gm_f8 *f8;
    int spike_in;
    /* profiling */
    float fwd_ms, bwd_ms;
};

/* Bump allocator over one cudaMalloc: measure first (base NULL), then assign. */
struct garena {
    char *base;
    size_t used, cap;
    void *take(size_t bytes) {
        size_t off = (used + 255) & ~(size_t)255;
        used = off + bytes;
        return base ? (void *)(base + off) : (void *)(uintptr_t)(off + 256); /* non-NULL */
    }
};

/* Per-step loss and accuracy summed on the device */
struct snn_gm_stats {
    double loss;
    long long correct, steps;
};

/* FP16 loss scaler state (device) */
struct snn_gm_scaler {
    float scale;
    int tracker;
};

struct snn_cuda_model {
    snn_cuda *c;
    snn_model *host;
    snn_cuda_model_opts o;
    snn_optim_opts opt;
    int T, N, B;
    size_t in_feat, classes;
    gnode *root;
    /* flat device storage */
    size_t n_dev, n_buf_dev;       /* floats (padded layout) */
    int has_buffers;               /* the model has buffers (BatchNorm statistics) */
    /* data parallelism (o.dp): gradient buckets on a side stream (cuda_model_ddp.cu) */
    cudaStream_t ddp_stream;
    cudaEvent_t ddp_fork, ddp_join;
    size_t ddp_bucket, ddp_end; /* floats; [ddp_end, n_dev) is reduced or in flight */
    int ddp_buckets;               /* buckets of the last step */
    size_t *doff;                  /* device offset per host tensor entry */
    float *params, *grads, *state, *buffers;
    void *wc;                      /* compute-type copy of params (== params for F32) */
    uint8_t *decay;
    /* activations and scratch */
    garena act;
    void *act_mem;
    float *x, *x1;                 /* input [T][N][F] and the [N][F] staging of direct input */
    int32_t *labels;
    float *dout;                   /* dL/d(output) [T][N][C] */
    float *loss;                   /* this step's loss */
    int *correct;                  /* this step's correct count */
    snn_gm_stats *acc;             /* sums since the last snn_cuda_model_take_stats */
    float *ce_work;
    void *scratch_a, *scratch_b, *scratch_c; /* shared GEMM scratch (conv, linear) */
    size_t scratch_a_bytes, scratch_b_bytes, scratch_c_bytes;
    void *bn_work, *ssa_work, *ln_work;
    size_t bn_work_bytes, ssa_work_bytes, ln_work_bytes;
    double *norm2;                 /* clipping */
    snn_cuda_step_scalars *scal;   /* device */
    snn_gm_scaler *scaler;         /* device, FP16 only */
    snn_cuda_opt dopt;
    long long *opt_steps;          /* device: completed (not skipped) optimizer steps */
    unsigned long long *fwd_count; /* device: the model's forward counter (snn_model's step:
                                      dropout masks are drawn from it) */
    int no_update;                 /* profiling: no optimizer or scaler update */
    /* graph */
    cudaGraphExec_t graph;
    int graph_mode;                /* x_has_time of the captured graph, -1 none */
    int warm;                      /* eager steps run so far */
    size_t device_bytes;
    void *pin[2];                  /* pinned staging: input, labels, step scalars */
    cudaEvent_t pin_ev[2];
    int pin_i;
    size_t pin_lab_off, pin_scal_off;
    int prof;                      /* time each leaf module (snn_cuda_model_profile) */
    gm_fp8 *f8;                    /* FP8 training (o.compute was f8e4m3; o.compute is BF16
                                      then, the type of every unconverted GEMM) */
    cudaEvent_t ev[2];
    int nprec;                     /* neuron precision: storage nS, arithmetic nF / nB */
    snn_dtype nS, nF, nB;
};

/* cuda_model.cu: everything of one step after the input and scalars are staged; staging */
snn_status snn_gm_enqueue_step(snn_cuda_model *g, int x_has_time);
snn_status snn_gm_stage_step(snn_cuda_model *g, const float *x, int x_has_time,
                             const int32_t *labels, const snn_cuda_step_scalars *s);

/* cuda_optim.cu: the optimizer update with t = *steps + 1 read on the device; *steps is
 * incremented afterwards unless s_dev->skip */
snn_status snn_gm_opt_update(snn_cuda *c, const snn_cuda_opt *o, const snn_cuda_step_scalars *s_dev,
                             size_t n, float *w, const float *grad, float *state,
                             const uint8_t *decay_mask, long long *steps);

/* cuda_model_layers.cu: ParametricLIF, Dropout (training), AvgPool2d */
snn_status snn_gm_plif_forward(snn_cuda_model *g, gnode *n, int training);
snn_status snn_gm_plif_backward(snn_cuda_model *g, gnode *n);
snn_status snn_gm_dropout_forward(snn_cuda_model *g, gnode *n, int training);
snn_status snn_gm_dropout_backward(snn_cuda_model *g, gnode *n);
snn_status snn_gm_avgpool_forward(snn_cuda_model *g, gnode *n);
snn_status snn_gm_avgpool_backward(snn_cuda_model *g, gnode *n);

/* cuda_model_nprec.cu: neuron mixed precision. init (after the tree is built: the CPU's
 * checks; sets g->nprec when cfg sets neuron_storage), plan (a neuron's buffers), the
 * forward and backward of a neuron when g->nprec. create passes opts.neuron, else with
 * compute f8e4m3 opts.fp8. */
snn_status snn_gm_nprec_init(snn_cuda_model *g, const snn_precision_config *cfg);
void snn_gm_nprec_plan(snn_cuda_model *g, gnode *n);
snn_status snn_gm_nprec_forward(snn_cuda_model *g, gnode *n, int training);
snn_status snn_gm_nprec_backward(snn_cuda_model *g, gnode *n);

/* cuda_model_ddp.cu: init/free (create/destroy), begin (before the backward), leaf_done
 * (after each leaf's backward: start a bucket when the finished tail is large enough),
 * finish (the last bucket; the step's stream waits for all of them) */
snn_status snn_gm_ddp_init(snn_cuda_model *g);
void snn_gm_ddp_free(snn_cuda_model *g);
snn_status snn_gm_ddp_begin(snn_cuda_model *g);
snn_status snn_gm_ddp_leaf_done(snn_cuda_model *g, gnode *n);
snn_status snn_gm_ddp_finish(snn_cuda_model *g);

/* cuda_model_exec.cu */
snn_status snn_gm_forward(snn_cuda_model *g, gnode *n, int training);
snn_status snn_gm_backward(snn_cuda_model *g, gnode *n);
/* One GEMM C = op(A) op(B) with FP32 accumulation (types from g's compute setting). */
snn_status snn_gm_gemm(snn_cuda_model *g, int ta, int tb, int M, int N, int K, snn_dtype ab,
                       const void *A, int lda, const void *Bm, int ldb, float beta, float *C,
                       int ldc);

/* cuda_model_fp8.cu: FP8 training. init (after the tree is built: recipe, refusals, which
 * modules convert), plan_node (a converted module's buffers; returns the FP32 scratch bytes
 * it needs in scratch_a), plan_model (the scale slots), reset (after the arena is zeroed),
 * forward/backward of a converted module, after_step (delayed scaling, after the optimizer). */
snn_status snn_gm_fp8_init(snn_cuda_model *g, const snn_precision_config *cfg);
void snn_gm_fp8_free(snn_cuda_model *g);
size_t snn_gm_fp8_plan_node(snn_cuda_model *g, gnode *n);
void snn_gm_fp8_plan_model(snn_cuda_model *g);
snn_status snn_gm_fp8_reset(snn_cuda_model *g);
snn_status snn_gm_fp8_forward(snn_cuda_model *g, gnode *n, int training);
snn_status snn_gm_fp8_backward(snn_cuda_model *g, gnode *n);
snn_status snn_gm_fp8_after_step(snn_cuda_model *g);

#endif
