/* snn — language-model evaluation with tensor and pipeline parallelism (the stage layouts of
 * docs/lm.md "Tensor and pipeline parallel"). */
#ifndef SNN_LM_DIST_H
#define SNN_LM_DIST_H

#include <stdint.h>
#include "comm.h"
#include "lm.h"
#include "tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-token loss of a dense gpt / spikelm model (a checkpoint's canonical FP32 weights, o its
 * options) over samples first .. first+count-1 of ds, on world = DP x PP x TP ranks: every rank
 * takes its (pp, tp) part of `dense`; DP replica d evaluates the contiguous slice
 * [d*count/DP, (d+1)*count/DP) in forward-only pipelines of K microbatches of `micro` samples.
 * count must be a multiple of DP*micro*K (no padded rows: the stage's loss has no mask).
 * sp: sequence parallel. Collective over world; the totals come back on every rank. */
snn_status snn_lm_evaluate_parallel(snn_comm *world, snn_model *dense, const snn_gpt_opts *o, int tp_size,
                                    int pp_size, int sp, int K, const snn_token_dataset *ds, int micro,
                                    int64_t first, int64_t count, double *loss_sum, double *tokens);

/* Cached generation (prefill, then one decode step per token, as snn_gpt_generate) on
 * world = DP x PP x TP ranks: prompt [B][P] on every rank; DP replica d decodes the rows
 * [d*ceil(B/DP), ...); inside a replica the KV cache is sharded with the heads over TP and
 * the layers over PP, the last stage gathers the vocabulary shards of the last position,
 * picks the token (each row from its own stream (seed, s->first_row + row)) and broadcasts it
 * over the pipeline. out [B][P + max_new] is written on world rank 0. Sequence parallel is
 * not used for generation. Collective over world. */
snn_status snn_lm_generate_parallel(snn_comm *world, snn_model *dense, const snn_gpt_opts *o, int tp_size,
                                    int pp_size, const int32_t *prompt, int B, int P, int max_new,
                                    const snn_lm_sampling *s, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif
