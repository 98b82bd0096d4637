/* Inside the language-model trainer (lm_train.c, lm_train_ckpt.c).
 *
 * The microbatch seam. An optimizer step is, on every DP rank:
 *     zero the gradient buffer
 *     for each of num_microbatches microbatches:   <- lm_micro_fn
 *         forward + loss (+ backward) of `micro` samples, gradients ACCUMULATED
 *     agree on failures; distributed optimizer step (DP reduction, clip, AdamW, all-gather)
 * Everything around the microbatch (sampler, schedule, reductions, optimizer, checkpoints)
 * is independent of how the model computes. lm_micro_fn is the one place that knows: the
 * default (lm_micro_local) runs the whole replicated model on this process. A tensor /
 * pipeline parallel stage replaces it with its own function and context (src/dist/lm_stage*):
 * it receives the same ids / labels / mask of this rank's microbatch, must add
 * grad_scale * d(loss_sum)/d(params) into its parameters' gradients and return the
 * microbatch's loss_sum and token count (on the stage that computes the loss; the trainer
 * reduces the pairs over DP, a pipeline reduces them over its stages first). */
#ifndef SNN_LM_TRAIN_INTERNAL_H
#define SNN_LM_TRAIN_INTERNAL_H

#include <stdint.h>

#include "dist/comm.h"
#include "dist/dist_optim.h"
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
} lm_local_micro;
snn_status lm_micro_local(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                          float grad_scale, int backward, double *loss_sum, double *tokens);

struct snn_lm_trainer {
    snn_lm_training_config cfg;
    snn_comm *comm;           /* the world: DP x CP (TP = PP = 1); gradients and the optimizer over it */
    int rank, dp;             /* rank in and size of comm */
    int cp, dp_size, dp_rank; /* context parallel: dp_rank = rank / cp reads the samples */
    snn_mesh4 mesh;           /* cp > 1: its cp_comm runs the CP attention (src/dist/lm_cp.h) */
    int have_mesh;
    struct snn_lm_cp_micro *cpm; /* cp > 1: the microbatch on this rank's tokens */
    snn_lm_train_info info;
    snn_gpt_opts o;
    snn_token_dataset *train, *valid;
    snn_model *m;
    snn_precision_config pcfg;
    snn_precision *prec;
    int fused_step;           /* fp16 / fp8: snn_precision_backward does backward + step */
    snn_dist_optim *opt;
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

#define LM_TRAIN_CKPT_FILE "checkpoint.safetensors"

#endif
