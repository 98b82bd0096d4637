/* snn — language models: `gpt` (GPT-2 layout) and `spikelm` (the same network with an
 * elastic bi-spiking transition after the input and pre-MLP norm of every layer).
 *
 * Both are ordinary snn_model trees: input [T][N][S] token ids (as FP32 integer values,
 * the prompt tiled T times along the batch: folded row t*N + n), output the logits
 * [T][N][S][vocab]; the loss reduces them over T (mean or sum) first. Parameter names are
 * GPT-2's: wte.weight, wpe.weight, h.{i}.ln_1.weight, h.{i}.attn.c_attn.weight (fused
 * q|k|v, [out, in] as in PyTorch's Linear), h.{i}.attn.c_proj.*, h.{i}.ln_2.*,
 * h.{i}.mlp.c_fc.*, h.{i}.mlp.c_proj.*, ln_f.*, and lm_head.weight when untied. */
#ifndef SNN_LM_H
#define SNN_LM_H

#include <stdint.h>
#include "error.h"
#include "lm_config.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The network's shape as plain numbers (the enums are lm_config.h's). The Megatron-style
 * records of lm_config.h map onto it with snn_gpt_opts_from_model_config. */
typedef struct snn_gpt_opts {
    int spiking;          /* 0: gpt, 1: spikelm */
    int vocab;            /* > 0 */
    int context;          /* max_sequence_length, > 0 */
    int seq;              /* S of this instance, 1..context */
    int layers, hidden, heads;
    int groups;           /* query groups (GQA), divides heads */
    int ffn;              /* MLP width */
    snn_lm_normalization norm;
    snn_lm_activation act;     /* GELU here is the exact (erf) form */
    snn_lm_position_embedding pos;
    int bias;             /* linear biases */
    int tied;             /* share embedding and output weights */
    float eps;            /* norm epsilon */
    float rope_theta;
    int time_steps;       /* T (gpt: 1) */
    int reduce_sum;       /* temporal output reduction: 0 mean, 1 sum */
    float spike_decay;    /* spikelm, [0, 1] */
    float spike_amplitude;/* spikelm, > 0 */
} snn_gpt_opts;

/* GPT-2 small's shape scaled down: vocab 256, context 128, 4 layers, hidden 128, 4 heads,
 * groups = heads, ffn 4*hidden, LayerNorm, GELU, learned positions, biases, tied, eps 1e-5,
 * T 1, mean; spikelm: T 4, decay 0.25, amplitude 1. */
snn_gpt_opts snn_gpt_defaults(int spiking);
/* Check every field; the message names the field. */
snn_status snn_gpt_opts_check(const snn_gpt_opts *o);
snn_status snn_gpt_create(const snn_gpt_opts *o, uint64_t seed, snn_model **out);
/* The options of a gpt/spikelm model (from its configuration JSON). */
snn_status snn_gpt_opts_of(const snn_model *m, snn_gpt_opts *o);
snn_status snn_gpt_opts_from_json(const char *json, snn_gpt_opts *o);

/* The network of a Megatron-style model record (lm_config.h) for sequences of length seq.
 * Refused (SNN_E_UNSUPPORTED, naming the field) where the record asks for something this
 * network does not have: kv_channels other than hidden / heads, a QKV bias without the
 * linear biases. Precision and topology fields are not the network's business. */
snn_status snn_gpt_opts_from_model_config(const snn_lm_model_config *mc, int seq, snn_gpt_opts *o);

/* Decoding. temperature 0 = greedy (argmax of the T-reduced logits, first maximum);
 * else softmax(z / temperature) restricted to the top_k (<= 0: all) most likely tokens and
 * the smallest set whose mass reaches top_p (1: all), drawn with the seed. */
typedef struct snn_lm_sampling {
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    int eos;              /* -1: none; a finished row keeps emitting eos */
    int64_t first_row;    /* global index of prompt row 0: row b draws from its own stream
                             (seed, first_row + b), so rows split over processes draw the
                             same tokens as in one call */
} snn_lm_sampling;

/* Cached generation from prompts [B][P] (ids): prefill once, then one decode step per new
 * token with the token tiled T times; only the KV cache persists between steps (the neuron
 * state restarts from reset in every call). P + max_new must fit the context.
 * out [B][P + max_new]. The model's parameters are read, not changed. */
snn_status snn_gpt_generate(snn_model *m, const int32_t *prompt, int B, int P, int max_new,
                            const snn_lm_sampling *s, int32_t *out);

/* Wall-clock split of one snn_gpt_generate_timed call (seconds). setup: building the two
 * instances, moving the weights and the cache to the model's device, planning; prefill: the
 * prompt's forward; decode: the rest, decode_steps forwards of one position per row and
 * every token pick. */
typedef struct snn_lm_generate_stats {
    double setup_seconds, prefill_seconds, decode_seconds;
    int decode_steps;
} snn_lm_generate_stats;

/* snn_gpt_generate that also reports its timing (stats may be NULL). */
snn_status snn_gpt_generate_timed(snn_model *m, const int32_t *prompt, int B, int P, int max_new,
                                  const snn_lm_sampling *s, int32_t *out, snn_lm_generate_stats *stats);

/* Per-token language-model cross-entropy on logits reduced over T.
 *   logits [T][N][S][V]; z = mean_t (reduce_sum 0) or sum_t (reduce_sum 1) of them;
 *   labels [N][S] in [0, V); mask [N][S] (NULL = all ones).
 *   token_loss out [N][S]: mask * (logsumexp(z) - z[label]) in double;
 *   *loss_sum = sum of token_loss (in order), *count = sum of mask;
 *   dlogits (may be NULL) [T][N][S][V] = grad_scale * d(loss_sum)/d(logits).
 * Labels outside [0, V) are refused before anything is written. */
snn_status snn_lm_cross_entropy(const float *logits, const int32_t *labels, const float *mask, int T,
                                int N, int S, int V, int reduce_sum, double *token_loss,
                                double *loss_sum, double *count, float *dlogits, float grad_scale);

#ifdef __cplusplus
}
#endif
#endif
