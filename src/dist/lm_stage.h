/* The local part of a gpt / spikelm language model on one rank of a (dp, pp, tp) mesh:
 * tensor parallel in Megatron's layout, a pipeline stage of the layers, and the 1F1B
 * schedule over microbatches (lm_pipeline.c). The stage is an ordinary snn_model whose
 * tensors carry the canonical (dense) GPT-2 names of src/models/gpt.c.
 *
 * Tensor parallel (TP ranks r = 0..TP-1; docs/lm.md "Tensor and pipeline parallel"):
 *   wte          vocab-parallel: rank r holds rows [r V/TP, (r+1) V/TP); a token outside
 *                them gives a zero row; the rows are summed (all-reduce) over TP.
 *   c_attn       column, split by head and query group: rank r holds its H/TP query heads
 *                and its key/value groups: G/TP of them when G >= TP, else the single
 *                group r / (TP/G), replicated on the TP/G ranks that share it (their
 *                gradients are summed over those ranks after the backward). The fused
 *                weight is [q | k | v] blocks of H*hd, G*hd, G*hd rows; the local one is
 *                [q_r | k_r | v_r].
 *   core, rope   on the local heads and groups.
 *   attn c_proj  row: input columns of the local heads, all-reduce of the output, then the
 *                full bias.
 *   c_fc         column (GELU: ffn/TP rows; SwiGLU: [gate_r; up_r], 2 ffn/TP rows).
 *   mlp c_proj   row.
 *   lm_head      vocab-parallel column (the logits of the local vocabulary rows); tied: the
 *                embedding's local rows. The cross-entropy is vocab-parallel: the maximum,
 *                the sum of exponentials and the label logit are all-reduced over TP, after
 *                the T reduction (mean or sum) of the logits as in src/nn/lm_loss.c.
 *   norms, wpe, bispike, biases after row layers: replicated (every TP rank computes the
 *                same values on the full hidden width).
 * Sequence parallel (sp, TP > 1; Megatron's sequence_parallel): outside the column ... row
 * regions the residual stream is cut along the sequence, rank r holding positions
 * [r S/TP, (r+1) S/TP): the norms, the bi-spiking transitions, the residual additions and
 * the learned positions run on that shard; a gather along the sequence precedes every
 * column layer (c_attn, c_fc, lm_head) and a reduce-scatter replaces the all-reduce after
 * every row layer (both c_proj) and the embedding; the gradients of the replicated tensors
 * (norms, wpe, biases after row layers), computed on the shard, are summed over TP.
 * Rules: TP divides heads, ffn and vocab; max(G, TP) % min(G, TP) == 0; with SP, TP
 * divides the sequence length.
 *
 * Pipeline: stage p holds the layers [p L/PP, (p+1) L/PP) (PP divides L); the first stage
 * also wte (+ wpe), the last ln_f + lm_head + the loss. Tied embeddings with PP > 1: the
 * last stage's head holds a copy of the embedding (its own tensor "lm_head.weight", loaded
 * from the canonical wte.weight); after the backward the two gradients are summed between
 * the first and the last stage, so both copies stay identical. Boundary tensors are the
 * residual stream [T mb, S, hidden]; stage (pp, tp) talks to (pp +- 1, tp). */
#ifndef SNN_DIST_LM_STAGE_H
#define SNN_DIST_LM_STAGE_H

#include "dist/comm.h"
#include "nn/module.h"
#include "snn/lm.h"
#include "snn/model.h"
#include "snn/optim.h"

/* Where a rank's part of a canonical tensor lies: along dimension dim (< 0: the whole
 * tensor, replicated), nseg ranges [start, start + len) of the canonical dimension,
 * concatenated in this order in the local tensor. kv_seg: index of the first segment that
 * is replicated over the ranks of a shared key/value group (nseg: none). */
typedef struct snn_lm_shard {
    int dim;
    int nseg;
    int start[3], len[3];
    int kv_seg;
} snn_lm_shard;

typedef struct snn_lm_pipe snn_lm_pipe;

typedef struct snn_lm_stage {
    snn_gpt_opts opts;
    int pp_rank, pp_size, tp_rank, tp_size;
    snn_comm *tp, *pp, *dp; /* not owned; NULL when the degree is 1 (or build-only) */
    snn_comm *kv;           /* owned: the TP ranks sharing a replicated key/value group */
    int kv_leader;          /* 1 on the first rank of that group (or when none is shared) */
    snn_model *model;       /* the local stage (owned) */
    snn_lm_shard *rules;    /* per tensor of model, in snn_model_tensor order */
    size_t *norm_n;         /* per tensor: leading elements this rank counts in the global norm */
    size_t *kv_off;         /* per tensor: first element of replicated k/v rows (numel: none) */
    int sp;                 /* sequence parallel (TP > 1): the residual stream is [S/TP, hidden] */
    int layer_lo, layer_hi;
    int first, last;
    int tied_copy;          /* last stage holds a copy of wte as lm_head.weight */
    int heads_local, groups_local, vocab_local, vocab_lo, ffn_local;
    size_t in_numel, out_numel; /* per sample (per time step row) */
    snn_lm_pipe *pipe;
} snn_lm_stage;

/* The topology rules (the message names the fields). */
snn_status snn_lm_stage_check(const snn_gpt_opts *o, int pp_size, int tp_size, int sp);
/* Validate and build the stage's modules (parameters from a generic init: load them next).
 * tp / pp may be NULL to only learn the tensors (forward then fails where it communicates). */
snn_status snn_lm_stage_build(const snn_gpt_opts *o, int pp_rank, int pp_size, int tp_rank, int tp_size, int sp,
                              snn_comm *tp, snn_comm *pp, snn_lm_stage **out);
/* Build on the mesh (collective over the TP group: the key/value sharing groups are split
 * from it), then take this rank's part of the dense model built with `seed`. */
snn_status snn_lm_stage_create(const snn_gpt_opts *o, const snn_mesh *mesh, int sp, uint64_t seed,
                               snn_lm_stage **out);
/* get(name, ctx, &rank, shape, &data): the canonical tensor of that name. */
typedef snn_status (*snn_lm_canonical_get_fn)(const char *name, void *ctx, int *rank, int64_t *shape,
                                              const float **data);
snn_status snn_lm_stage_load_canonical(snn_lm_stage *s, snn_lm_canonical_get_fn get, void *ctx);
/* The inverse, for checkpoints and export: every canonical tensor of `dense` (a gpt /
 * spikelm model built with the same options) receives the merged TP/PP shards, on every
 * rank. Collective over the TP and PP groups. */
snn_status snn_lm_stage_gather(snn_lm_stage *s, snn_model *dense);
/* The canonical name a local tensor loads from ("lm_head.weight" -> "wte.weight" on a
 * tied copy). */
const char *snn_lm_stage_canonical_name(const snn_lm_stage *s, size_t i);
void snn_lm_stage_free(snn_lm_stage *s);

/* Shard arithmetic. */
void snn_lm_shard_extract(const snn_lm_shard *r, int rank, const int *canon, const float *src, float *local);
/* skip_kv: leave the replicated key/value segments out (a non-leader's copy). */
void snn_lm_shard_insert(const snn_lm_shard *r, int rank, const int *canon, const float *local, float *dst,
                         int skip_kv);

/* ---- TP layers (lm_tp_layers.c) ---- */
/* [S] ids -> [S, dim]; holds rows [lo, lo + local) of a [vocab, dim] embedding in its
 * child "@" (an Embedding, which a tied head points at); all-reduce over tp. */
snn_module *snn_vocab_parallel_embedding_new(int vocab, int lo, int local, int dim, snn_comm *tp, int tp_rank,
                                             int tp_size, int sp);
/* Sequence parallel (sp != 0 above: the embedding's output is this rank's [S/TP, dim]
 * positions, a reduce-scatter instead of the all-reduce). Gather [S/TP, h] -> [S, h]
 * before a column layer (backward: reduce-scatter of the partial input gradient);
 * scatter [S, h] partial sums -> [S/TP, h] after a row layer, then its bias (backward:
 * all-gather). */
snn_module *snn_sp_gather_new(int S, int h, snn_comm *tp, int tp_rank, int tp_size);
snn_module *snn_sp_scatter_new(int S, int h, int bias, snn_comm *tp, int tp_rank, int tp_size);
/* Collectives issued by the vocab-parallel and sequence-parallel layers of this process. */
unsigned long long snn_lm_tp_comm_calls(void);
/* The embedding module inside (for a tied head). */
snn_module *snn_vocab_parallel_embedding_inner(snn_module *m);
/* snn_lm_cross_entropy over the vocabulary shard [lo, lo + Vl) of each rank: logits
 * [T][N][S][Vl], labels [N][S] global ids, no mask. Scratch: mx [N S] floats, red [2 N S]
 * doubles. dlogits [T][N][S][Vl] receives grad_scale * d(loss_sum)/d(logits). */
snn_status snn_lm_vocab_parallel_ce(snn_comm *tp, const float *logits, const int32_t *labels, int T, int N,
                                    int S, int V, int lo, int Vl, int reduce_sum, float *mx, double *red,
                                    double *token_loss, double *loss_sum, double *count, float *dlogits,
                                    float grad_scale);

/* ---- the pipeline and the training step (lm_pipeline.c) ---- */
/* Buffers for microbatches of `micro` semantic samples and K microbatches per step
 * (num_microbatches, K >= PP as in SpikingJelly's topology rules).
 * pipeline_bf16: inter-stage messages in BF16 (must equal the params dtype: refused
 * unless the stage model is prepared for BF16). Allocates everything a step needs. */
snn_status snn_lm_pipeline_plan(snn_lm_stage *s, int micro, int K, int pipeline_bf16);
/* Forward and backward of K microbatches with the 1F1B schedule, gradients ACCUMULATED.
 * ids [K micro][S] (first stage; NULL elsewhere), labels [K micro][S] (last stage; NULL
 * elsewhere). Per-token losses are scaled by grad_scale (1 / global token count). The
 * sums (loss, tokens) of this pipeline come back on every stage (broadcast over PP). */
snn_status snn_lm_pipeline_train(snn_lm_stage *s, const int32_t *ids, const int32_t *labels, float grad_scale,
                                 double *loss_sum, double *count);
/* Forward only (evaluation): the loss sums of K microbatches, on every stage. */
snn_status snn_lm_pipeline_eval(snn_lm_stage *s, const int32_t *ids, const int32_t *labels, double *loss_sum,
                                double *count);
/* After the backward: the tied-embedding gradients summed between the first and the last
 * stage, the replicated key/value rows summed over the ranks sharing them, and the
 * gradients summed over DP. */
snn_status snn_lm_stage_reduce_grads(snn_lm_stage *s);
/* The global gradient norm (sharded tensors summed over TP, replicated ones counted once,
 * summed over PP), clipped to max_norm like snn_clip_grad_norm (max_norm <= 0: measure). */
snn_status snn_lm_stage_clip_grad_norm(snn_lm_stage *s, float max_norm, float *norm);
/* One optimizer step: zero the gradients, the pipeline over the K microbatches (loss per
 * token over the global token count DP K micro S), reduce, clip, opt (an optimizer over
 * s->model) with lr (< 0: its own). *loss = the global mean token loss, on every rank. */
snn_status snn_lm_stage_train_step(snn_lm_stage *s, snn_optimizer *opt, const int32_t *ids, const int32_t *labels,
                                   float lr, float clip, double *loss, float *grad_norm);

#endif
