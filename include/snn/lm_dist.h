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

#ifdef __cplusplus
}
#endif
#endif
