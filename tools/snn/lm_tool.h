/* Shared by the snn lm subcommands (cmd_lm*.c). */
#ifndef SNN_TOOL_LM_H
#define SNN_TOOL_LM_H

#include <stdint.h>

#include "snn/checkpoint.h"
#include "snn/lm.h"
#include "snn/lm_config.h"
#include "snn/lm_train.h"
#include "snn/tokens.h"

#define LM_CKPT_FILE "checkpoint.safetensors"

int cmd_lm_train(int argc, char **argv);
int cmd_lm_export(int argc, char **argv);

/* A training checkpoint opened for inference: the model (FP32 master weights), the
 * training configuration it was written with, its recipe and progress. */
typedef struct lm_loaded {
    snn_model *m;
    snn_ckpt *ck;
    snn_lm_training_config cfg;
    snn_gpt_opts o;
    long step;
    char path[4096]; /* the checkpoint file */
} lm_loaded;
/* path: a step_XXXXXXX directory or its checkpoint.safetensors. Exits 2 on a missing or
 * foreign checkpoint, 1 on other failures. */
void lm_load(const char *path, lm_loaded *out);
void lm_loaded_free(lm_loaded *l);

/* Round every parameter to BF16 (round to nearest even): the values an export holds. */
void lm_round_params_bf16(snn_model *m);

/* Forward-only loss over samples first..first+count-1 of ds (row i mod N) in batches of
 * N = micro (a short last batch is padded with zero loss mask): snn_lm_evaluate with its
 * scratch from lm_eval_buffers. Returns the totals; m must be planned for (T, micro). */
typedef struct lm_eval_buf {
    snn_lm_eval_scratch *s;
} lm_eval_buf;
int lm_eval_buffers(lm_eval_buf *b, int T, int micro, int S);
void lm_eval_buffers_free(lm_eval_buf *b);
snn_status lm_evaluate(snn_model *m, const snn_gpt_opts *o, const snn_token_dataset *ds, int micro,
                       int64_t first, int64_t count, lm_eval_buf *b, double *loss_sum, double *tokens);

/* Tile ids [N][S] T times into the model input x [T][N][S]. */
void lm_tile(const int32_t *ids, int T, int N, int S, float *x);
/* Peak resident memory of the process in bytes. */
long long lm_peak_rss(void);
/* Parse a size "5GB", "100MB", "2KiB", "123" (bytes); -1 on error. */
long long lm_parse_size(const char *s);

#endif
