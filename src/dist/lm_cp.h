/* Context parallel (CP) for the language models (gpt, spikelm).
 *
 * Layout. The sequence of S tokens is cut into 2*CP chunks of c = S / (2*CP) tokens; CP
 * rank i holds chunks i and 2*CP-1-i, in that order (Megatron's load-balanced causal
 * layout: under the causal mask an early chunk has little work and a late one much, so
 * every rank gets one of each). Local token l of rank i has the global position
 *   l < c:  i*c + l,     l >= c:  (2*CP-1-i)*c + (l - c).
 *
 * Execution. Each rank runs the whole network on its S/CP tokens. Embedding, norms,
 * bi-spiking transitions, MLPs and the output head act per token and need nothing from the
 * other ranks; positions (learned absolute and RoPE) use the global positions above. The
 * attention core all-gathers K and V of the CP group (all-gather rather than a ring: one
 * collective per layer, simple, and exact; it holds the whole sequence's K/V, which is what
 * a ring would stream) and masks with the global positions; its backward sums the dK/dV
 * contributions of every rank (all-reduce of the whole [S] buffer, then each rank keeps its
 * own tokens' rows). Replicated parameters get their gradients summed over DP x CP; the
 * per-token loss is normalised by the token count of the whole global batch, so the run
 * equals the single-process one.
 *
 * Everything here is FP32 on the CPU (host buffers, the comm layer of comm.h). Forward and
 * backward are collectives over the CP group: the step functions check the whole (shared)
 * batch first so that bad input is refused on every rank alike; a failure after that (a
 * collective's) follows comm.h's rule: print it and snn_comm_abort. */
#ifndef SNN_DIST_LM_CP_H
#define SNN_DIST_LM_CP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"
#include "nn/module.h"
#include "snn/lm.h"
#include "snn/optim.h"

/* ---- layout (lm_cp_layout.c) ---- */

/* SNN_OK iff cp >= 1 and (cp == 1 or seq % (2*cp) == 0); the message names
 * sequence_length and context_parallel_size. */
snn_status snn_lm_cp_check(int seq, int cp);
/* Global position of local token l (0 <= l < seq/cp) on CP rank `rank`. cp == 1: l. */
int snn_lm_cp_position(int seq, int cp, int rank, int l);
/* full [rows][seq][elem bytes] -> local [rows][seq/cp][elem]: this rank's tokens. */
void snn_lm_cp_shard(const void *full, void *local, size_t rows, int seq, int cp, int rank, size_t elem);
/* The inverse over all ranks: parts [cp][rows][seq/cp][elem] (rank r's shard at r, as an
 * all-gather returns them) -> full [rows][seq][elem] in global order. */
void snn_lm_cp_unshard(const void *parts, void *full, size_t rows, int seq, int cp, size_t elem);

/* ---- CP-aware modules (lm_cp_attention.c, lm_cp_pos.c) ---- */

/* Causal self-attention core over a CP group: per sample [seq/cp, (heads+2*groups)*hd] of
 * this rank's tokens -> [seq/cp, heads*hd], attending to the keys of the whole sequence
 * (all ranks) with global positions. Forward and backward are collectives over `cp`
 * (every rank of it calls them in the same order). `cp` is not owned. */
snn_module *snn_lm_cp_attention_new(int heads, int groups, int head_dim, int seq, snn_comm *cp);

/* Turn a gpt/spikelm module tree built for seq/cp tokens into the CP network in place:
 * PositionEmbedding, RoPE and CausalSelfAttention become their CP forms (same parameters,
 * same names). Before snn_model_plan and precision preparation. */
snn_status snn_lm_cp_convert(snn_model *m, const snn_gpt_opts *o, int seq, snn_comm *cp);

/* ---- the CP model, its microbatch and its training step (lm_cp.c) ---- */

/* The CP model of `o` (o->seq = the GLOBAL S) for this rank of `cp`: snn_gpt_create for
 * S/CP tokens, then snn_lm_cp_convert. Not planned yet. */
snn_status snn_lm_cp_build(const snn_gpt_opts *o, uint64_t seed, snn_comm *cp, snn_model **out);

/* One microbatch on this rank's tokens, shaped as the language-model trainer's microbatch
 * seam (src/lm/lm_train_internal.h): m built by snn_lm_cp_build and planned for
 * (T, micro); o the GLOBAL options. snn_lm_cp_micro_run(ctx, ids, labels, mask, n, ...):
 * ids, labels [n][S] full sequences (the same on every rank of cp), mask [n][S] or NULL;
 * adds grad_scale * d(local loss sum) into the gradients when backward != 0; the local
 * loss sum and token count out. A collective over cp. */
typedef struct snn_lm_cp_micro snn_lm_cp_micro;
snn_status snn_lm_cp_micro_create(snn_model *m, const snn_gpt_opts *o, snn_comm *cp, int micro, snn_lm_cp_micro **out);
void snn_lm_cp_micro_free(snn_lm_cp_micro *c);
snn_status snn_lm_cp_micro_run(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                               float grad_scale, int backward, double *loss_sum, double *count);

typedef struct snn_lm_cp snn_lm_cp;

/* The model of `o` (o->seq = the GLOBAL sequence length S) for this rank of the CP group
 * `cp`, with the parameters snn_gpt_create(o, seed) would have (they do not depend on the
 * sequence length). grad: the group over which gradients and token counts are summed
 * (DP x CP; NULL = cp). micro: samples per microbatch. Both communicators are not owned. */
snn_status snn_lm_cp_create(const snn_gpt_opts *o, uint64_t seed, snn_comm *cp, snn_comm *grad, int micro,
                            snn_lm_cp **out);
void snn_lm_cp_free(snn_lm_cp *c);
snn_model *snn_lm_cp_model(snn_lm_cp *c);
int snn_lm_cp_local_seq(const snn_lm_cp *c);

/* Forward and backward of one microbatch. ids, labels [micro][S] are the full sequences
 * (the same on every rank of the CP group); mask [micro][S] or NULL (all ones). Gradients
 * are ADDED into the model's (grad_scale * d(local loss sum)); *loss_sum and *count are
 * this rank's tokens' (not reduced). A collective over cp. */
snn_status snn_lm_cp_microbatch(snn_lm_cp *c, const int32_t *ids, const int32_t *labels, const float *mask,
                                float grad_scale, double *loss_sum, double *count);
/* Sum the model's gradients over the grad group (in place, identical on every rank). */
snn_status snn_lm_cp_reduce_grads(snn_lm_cp *c);

/* One optimizer step over K microbatches of this DP replica: zero the gradients; the token
 * count of the whole global batch (local mask sums, all-reduced over grad); per microbatch
 * forward/backward with grad_scale = 1 / count; gradients summed over grad; the global
 * gradient-norm clip (clip <= 0: off); opt's update with lr (a skipped update when the norm
 * is not finite). ids, labels, mask: [K][micro][S] (mask may be NULL). *loss = the global
 * per-token loss, *grad_norm the norm before clipping (either may be NULL). */
snn_status snn_lm_cp_train_step(snn_lm_cp *c, snn_optimizer *opt, const int32_t *ids, const int32_t *labels,
                                const float *mask, int K, float lr, float clip, double *loss, float *grad_norm);

#endif
