/* Constructors and helpers of the language-model modules (token embedding, positions,
 * causal attention, RMSNorm, SwiGLU, output head, elastic bi-spiking transition).
 *
 * They follow the module contract (module.h): activations are [T][N][per-sample] FP32 with
 * T folded into the batch (row t*N + n). Token ids travel as FP32 integer values through
 * that contract (exact up to 2^24, far above any vocabulary here); the embedding refuses
 * anything that is not an integer id inside the vocabulary. */
#ifndef SNN_NN_LM_LAYERS_H
#define SNN_NN_LM_LAYERS_H

#include "nn/module.h"
#include "snn/lm.h"

/* [S] ids -> [S, dim]; weight [vocab, dim]. */
snn_module *snn_embedding_new(int vocab, int dim);
/* Learned absolute positions: [S, dim] -> x + weight[offset + s]; weight [max_len, dim]. */
snn_module *snn_posemb_new(int max_len, int dim);
/* Rotary positions on a fused [S, (heads + 2*groups) * head_dim] q|k|v row: the q and k heads
 * are rotated (rotate-half pairing i, i + head_dim/2; angle pos * theta^(-2i/head_dim)),
 * v is copied. No parameters. */
snn_module *snn_rope_new(int heads, int groups, int head_dim, float theta, int max_len);
/* Causal self-attention core on a fused q|k|v row [S, (heads + 2*groups) * head_dim] ->
 * [S, heads * head_dim]; query head h reads key/value group h / (heads / groups).
 * softmax(q k^T / sqrt(head_dim)) v with position i seeing keys 0..i. */
snn_module *snn_attention_new(int heads, int groups, int head_dim);
/* Decoding: attach a KV cache for `rows` folded rows of up to `capacity` positions
 * (k and v each rows*groups*capacity*head_dim floats, owned by the caller). While attached,
 * forward writes the new keys/values at positions offset..offset+S-1 and the queries attend
 * to cache positions 0..offset+i; backward is refused. NULL detaches. */
snn_status snn_attention_attach_cache(snn_module *m, float *k, float *v, int rows, int capacity);
/* Position offset of the next forward (posemb, rope, attention with a cache). */
snn_status snn_lm_set_offset(snn_module *m, int offset);

/* The attention core's masked row softmax (attention.c): row i of Z [rows][ld] keeps columns
 * 0..last[i] (last NULL: 0..i+off), the rest of its cols become 0. */
void snn_attn_softmax_rows(float *Z, int rows, int cols, int ld, int off, const int *last);
snn_module *snn_rmsnorm_new(int features, float eps);
/* [.., 2F] -> [.., F]: y = silu(gate) * up with gate = x[:F], up = x[F:]. */
snn_module *snn_swiglu_new(int features);
/* Output head [S, dim] -> [S, vocab] logits, y = x W^T. tied != NULL: W is the weight of
 * that embedding module (no parameter of its own; gradients go into the embedding's). */
snn_module *snn_lm_head_new(int dim, int vocab, snn_module *tied);
/* Elastic bi-spiking transition over T (SpikeLM): per element, from reset state,
 *   v_0 = x_0;  v_t = v_{t-1} * decay * (a - sg(s_{t-1})) + x_t;
 *   s_t = a * round(clamp(v_t / a, -1, 1))  (round half to even),
 * backward straight through the rounding: ds/dv = 1 where |v / a| <= 1, else 0. */
snn_module *snn_bispike_new(float decay, float amplitude);

#endif
