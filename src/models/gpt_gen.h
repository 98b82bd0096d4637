/* Pieces of cached generation shared by one-process generation (gpt_generate.c) and the
 * tensor/pipeline-parallel one (src/dist/lm_generate_parallel.c). */
#ifndef SNN_MODELS_GPT_GEN_H
#define SNN_MODELS_GPT_GEN_H

#include "nn/module.h"
#include "snn/lm.h"
#include "snn/rng.h"

/* snn_gpt_create without the initialisation (parameters zero): an instance whose weights
 * are copied from another model next (the generation instances; 124M random values take
 * seconds to draw). */
snn_status snn_gpt_create_empty(const snn_gpt_opts *o, snn_model **out);

/* The modules of a model whose forward depends on the position offset (learned positions,
 * RoPE, attention cores) and the attention cores (the KV cache holders), in tree order. */
typedef struct snn_gen_mods {
    snn_module *core[1024], *pos[2048];
    int n_core, n_pos;
} snn_gen_mods;
void snn_gen_collect(snn_model *m, snn_gen_mods *g);
snn_status snn_gen_set_offset(const snn_gen_mods *g, int off);

/* The next token of one row from z[V] (reduced over T): greedy (first maximum) at
 * temperature 0, else top-k / top-p sampling from rng. scratch: snn_gen_scratch_bytes(V). */
size_t snn_gen_scratch_bytes(int V);
int snn_gen_pick(const float *z, int V, const snn_lm_sampling *s, snn_rng *rng, void *scratch);

/* Check the sampling settings against a model of this vocabulary (the messages name them). */
snn_status snn_gen_check_sampling(const snn_lm_sampling *s, int vocab);

#endif
