/* Inside the language-model trainer (lm_train.c, lm_train_ckpt.c).
 *
 * The microbatch seam. An optimizer step is, on every DP rank:
 *     zero the gradient buffer
 *     for each of num_microbatches microbatches:   <- lm_micro_fn
 *         forward + loss (+ backward) of `micro` samples, gradients ACCUMULATED
 *     agree on failures; distributed optimizer step (DP reduction, clip, AdamW, all-gather)
 * Everything around the microbatch (sampler, schedule, reductions, optimizer, checkpoints)
 * is independent of how the model computes. lm_micro_fn is the one place that knows: the
 * default (lm_micro_local) runs the whole replicated model on this process; another
 * function receives the same ids / labels / mask of this rank's microbatch, must add
 * grad_scale * d(loss_sum)/d(params) into its parameters' gradients and return the
 * microbatch's loss_sum and token count. A tensor / pipeline parallel run does not use this
 * seam (1F1B interleaves the microbatches of a step): it replaces the whole step
 * (lm_train_stage.c, the `staged` fields below). */
#ifndef SNN_LM_TRAIN_INTERNAL_H
#define SNN_LM_TRAIN_INTERNAL_H

#include <stdint.h>

#include "dist/comm.h"
#include "dist/dist_optim.h"
#include "dist/lm_stage.h"
#include "snn/lm_train.h"
#include "snn/optim.h"
#include "snn/prepare.h"

/* ids, labels: [n][S]; mask: [n][S] or NULL (all ones); grad_scale: the factor on
 * d(loss_sum)/d(logits) (1 / global token count); backward 0: forward and loss only.
 * *loss_sum, *tokens: the microbatch's masked sums. */
typedef snn_status (*lm_micro_fn)(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                                  float grad_scale, int backward, double *loss_sum, double *tokens);

/* The default microbatch: the whole model on this process. Its scratch is allocated once. */
typedef struct lm_local_micro {
    snn_model *m;
    const snn_gpt_opts *o;
    int micro;
    float *x, *dlogits;   /* [T][micro][S], [T][micro][S][V] */
    double *token_loss;   /* [micro][S] */
    /* a model on a device, not fp16 / fp8 (whose fused step takes the host dlogits): the
     * loss runs through the model's op table on its device output, dlogits go straight into
     * the model's dL/dy staging, so only the labels travel up (the forward still hands out
     * its host copy of the logits: snn_model_forward always downloads) */
    int dev_loss;
    int32_t *d_labels;    /* device [micro][S] */
    double *d_token_loss; /* device [micro][S] */
} lm_local_micro;
snn_status lm_micro_local(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                          float grad_scale, int backward, double *loss_sum, double *tokens);

struct snn_lm_trainer {
    snn_lm_training_config cfg;
    char device[32];          /* "cpu", "cuda", "cuda:N": where the model runs (one process) */
    snn_comm *comm;           /* the world: DP x CP (TP = PP = 1) or the (dp, pp, tp) mesh */
    int rank, dp;             /* rank in and size of comm */
    int cp, dp_size, dp_rank; /* context parallel: dp_rank = rank / cp reads the samples */
    snn_mesh4 mesh;           /* cp > 1: its cp_comm runs the CP attention (src/dist/lm_cp.h) */
    int have_mesh;
    struct snn_lm_cp_micro *cpm; /* cp > 1: the microbatch on this rank's tokens */
    /* tensor / pipeline parallel (TP * PP > 1; lm_train_stage.c): the stage replaces the
     * local microbatch and the distributed optimizer; m stays the dense canonical model,
     * the target of checkpoint gathers and the source of loads; dp_rank = the mesh's dp */
    int staged;
    snn_mesh smesh;
    snn_lm_stage *stage;
    snn_optimizer *sopt;      /* AdamW on the stage's local parameters (DP 1) */
    snn_dist_optim *sdopt;    /* DP > 1: the same, its state sharded over the mesh's DP group */
    snn_precision *sprec;     /* the stage model's bf16 preparation */
    int32_t *kids, *klabels;  /* [K micro][S] of one step */
    int64_t *kidx;
    snn_lm_train_info info;
    snn_gpt_opts o;
    snn_token_dataset *train, *valid;
    snn_model *m;
    snn_precision_config pcfg;
    snn_precision *prec;
    int fused_step;           /* fp16 / fp8: snn_precision_backward does backward + step */
    snn_dist_optim *opt;      /* NULL when staged */
    snn_optim_opts oo;
    char *recipe, *cfg_json;
    long G, M, K, S;          /* global, micro, microbatches per rank, sequence */
    long step, consumed, sched;
    int64_t *perm, *idx;
    int32_t *ids, *labels;
    lm_local_micro local;
    lm_micro_fn micro_fn;
    void *micro_ctx;
    snn_lm_eval_scratch *eval;
    /* running metrics */
    double train_secs;
    long timed;
    snn_lm_step_metrics last;
    char last_dir[4200];
};

/* Replace the microbatch (before the first step; ctx must outlive the trainer; NULL fn
 * restores the local one). Refused under fp16 / fp8, whose fused one-process step runs the
 * backward itself from the local microbatch's dlogits. A stage whose ranks are not all
 * data-parallel replicas also needs the trainer's communicator to be the DP group of its
 * mesh rather than the world; that is the stage's set-up to do. */
snn_status lm_trainer_set_micro(snn_lm_trainer *t, lm_micro_fn fn, void *ctx);

/* Collective: 0 on every rank when st is SNN_OK on every rank; else the first failing
 * rank's status (and message) everywhere. Allocates nothing on success. */
snn_status lm_agree(snn_lm_trainer *t, snn_status st);
/* Peak resident memory of this process in bytes. */
long long lm_peak_rss_bytes(void);

/* The tensor / pipeline parallel path (lm_train_stage.c). */
snn_status lm_stage_setup(snn_lm_trainer *t, const snn_optim_opts *oo);
void lm_stage_free(snn_lm_trainer *t);
/* One step: the K microbatches of this DP rank through the 1F1B pipeline, reductions,
 * the global-norm clip, AdamW. Global loss sums and the norm on every rank. */
snn_status lm_stage_step(snn_lm_trainer *t, float lr, double *loss_sum, double *tokens, float *grad_norm);
snn_status lm_stage_validate(snn_lm_trainer *t, double *loss_sum, double *tokens);
/* Collective: the stage's weights into the dense model m and (full != NULL, on the
 * writing rank) its optimizer state into `full`, an optimizer over m. */
snn_status lm_stage_gather(snn_lm_trainer *t, snn_optimizer *full);
/* Local: every rank takes its part of the canonical optimizer state (state[i]: numel of
 * m floats, unaligned) and then of m's weights. */
snn_status lm_stage_scatter(snn_lm_trainer *t, const void *const *state, size_t nstates, long steps, const char *src);

#define LM_TRAIN_CKPT_FILE "checkpoint.safetensors"

#endif
