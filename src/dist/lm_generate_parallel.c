/* Cached generation with tensor and pipeline parallelism (snn/lm_dist.h).
 *
 * Each rank holds its (pp, tp) part of the dense model twice, as two stages that share the
 * weights' values: one for the prefill (S = P) and one for the decode steps (S = 1). Every
 * local attention core of layer i in both points at the same KV cache of this rank's
 * key/value groups, so the cache is sharded over TP exactly as the heads are. A forward
 * runs the pipeline stage by stage (the previous stage's hidden states arrive over the PP
 * group, this stage's leave to the next); on the last stage the last position's logits
 * (this rank's vocabulary shard) are reduced over T and gathered over TP, the next token is
 * picked there (greedy or sampled, each row from its own stream as in one process) and
 * broadcast over the PP group, so every rank of the model-parallel group appends the same
 * token. DP replicas decode contiguous slices of the prompt rows; world rank 0 gathers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "dist/comm.h"
#include "dist/lm_stage.h"
#include "models/gpt_gen.h"
#include "nn/lm_layers.h"
#include "nn/model_internal.h"
#include "snn/lm_dist.h"

typedef struct {
    snn_lm_stage *sg;
    snn_gen_mods mods;
} gen_stage;

typedef struct {
    const snn_gpt_opts *o;
    int T, Bl, V;
    float *x, *in, *zl, *zg, *z; /* first-stage ids, received activations, logits (local, gathered, full) */
} gen_bufs;

static snn_status dense_tensor(const char *name, void *ctx, int *rank, int64_t *shape, const float **data) {
    snn_model *d = ctx;
    for (size_t i = 0; i < snn_model_num_tensors(d); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(d, i, &ti));
        if (strcmp(ti.name, name)) continue;
        *rank = ti.rank;
        for (int k = 0; k < ti.rank; k++) shape[k] = ti.shape[k];
        *data = ti.data;
        return SNN_OK;
    }
    return snn_error(SNN_E_FORMAT, "the checkpoint's model has no tensor %s", name);
}

/* One pipeline forward of S positions (tokens [Bl][S] on the first stage) at offset off;
 * on the last stage, b->z [Bl][V] receives the T-reduced logits of the last position. */
static snn_status forward(gen_stage *g, gen_bufs *b, const int32_t *tokens, int S, int off) {
    snn_lm_stage *sg = g->sg;
    const size_t R = (size_t)b->T * (size_t)b->Bl;
    const float *x = b->x;
    SNN_TRY(snn_gen_set_offset(&g->mods, off));
    if (sg->first) {
        for (int t = 0; t < b->T; t++)
            for (size_t i = 0; i < (size_t)b->Bl * S; i++) b->x[(size_t)t * b->Bl * S + i] = (float)tokens[i];
    } else {
        SNN_TRY(snn_comm_recv(sg->pp, b->in, R * sg->in_numel, SNN_COMM_F32, sg->pp_rank - 1, 81));
        x = b->in;
    }
    const float *y;
    SNN_TRY(snn_model_forward(sg->model, x, 0, &y));
    if (!sg->last) return snn_comm_send(sg->pp, y, R * sg->out_numel, SNN_COMM_F32, sg->pp_rank + 1, 81);
    const int Vl = sg->vocab_local, Bl = b->Bl;
    for (int r = 0; r < Bl; r++)
        for (int v = 0; v < Vl; v++) {
            float a = 0.0f;
            for (int t = 0; t < b->T; t++) a += y[((((size_t)t * Bl + r) * S) + (size_t)(S - 1)) * Vl + v];
            b->zl[(size_t)r * Vl + v] = b->o->reduce_sum ? a : a / (float)b->T;
        }
    if (sg->tp_size == 1) {
        memcpy(b->z, b->zl, sizeof(float) * (size_t)Bl * b->V);
        return SNN_OK;
    }
    /* [TP][Bl][Vl] -> [Bl][V]: rank r holds the vocabulary rows [r*Vl, (r+1)*Vl) */
    SNN_TRY(snn_comm_allgather(sg->tp, b->zl, (size_t)Bl * Vl, SNN_COMM_F32, b->zg));
    for (int q = 0; q < sg->tp_size; q++)
        for (int r = 0; r < Bl; r++)
            memcpy(b->z + (size_t)r * b->V + (size_t)q * Vl, b->zg + ((size_t)q * Bl + r) * Vl, sizeof(float) * Vl);
    return SNN_OK;
}

static snn_status stage_for(const snn_gpt_opts *o, int S, const snn_mesh *mesh, snn_model *dense, int T, int Bl,
                            gen_stage *g) {
    snn_gpt_opts os = *o;
    os.seq = S;
    SNN_TRY(snn_lm_stage_create(&os, mesh, 0, 1, &g->sg));
    SNN_TRY(snn_lm_stage_load_canonical(g->sg, dense_tensor, dense));
    SNN_TRY(snn_model_plan(g->sg->model, T, Bl));
    snn_gen_collect(g->sg->model, &g->mods);
    return SNN_OK;
}

snn_status snn_lm_generate_parallel(snn_comm *world, snn_model *dense, const snn_gpt_opts *o, int tp_size,
                                    int pp_size, const int32_t *prompt, int B, int P, int max_new,
                                    const snn_lm_sampling *s, int32_t *out) {
    if (!world || !dense || !o || !prompt || !s || !out)
        return snn_error(SNN_E_INVALID, "snn_lm_generate_parallel: NULL argument");
    if (B <= 0 || B > 4096 || P <= 0 || max_new <= 0)
        return snn_error(SNN_E_INVALID, "generate: batch (1..4096), prompt length and max_new_tokens must be "
                         "positive (got %d, %d, %d)", B, P, max_new);
    if ((long)P + max_new > o->context)
        return snn_error(SNN_E_INVALID, "generate: prompt (%d) + max_new_tokens (%d) exceed the context %d", P, max_new,
                         o->context);
    SNN_TRY(snn_gen_check_sampling(s, o->vocab));
    for (long i = 0; i < (long)B * P; i++)
        if (prompt[i] < 0 || prompt[i] >= o->vocab)
            return snn_error(SNN_E_INVALID, "generate: prompt token %d is not in [0, %d)", prompt[i], o->vocab);
    SNN_TRY(snn_lm_stage_check(o, pp_size, tp_size, 0));
    snn_mesh mesh;
    SNN_TRY(snn_mesh_create(world, pp_size, tp_size, &mesh));
    const int DP = mesh.dp_size, per = (B + DP - 1) / DP;
    const int lo = mesh.dp * per < B ? mesh.dp * per : B, Bl = lo + per < B ? per : B - lo;
    const int T = o->time_steps, V = o->vocab, cap = P + max_new;
    gen_stage pre = {0}, dec = {0};
    gen_bufs b = {.o = o, .T = T, .Bl = Bl, .V = V};
    float *kv = NULL;
    int32_t *mine = malloc(sizeof(int32_t) * (size_t)(Bl > 0 ? Bl : 1) * cap);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(Bl > 0 ? Bl : 1));
    snn_rng *rng = malloc(sizeof(snn_rng) * (size_t)(Bl > 0 ? Bl : 1));
    void *scratch = malloc(snn_gen_scratch_bytes(V));
    snn_status st = mine && tok && rng && scratch ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory for generation");
    if (st == SNN_OK && Bl > 0) { /* a replica without rows builds nothing */
        st = stage_for(o, P, &mesh, dense, T, Bl, &pre);
        if (st == SNN_OK) st = stage_for(o, 1, &mesh, dense, T, Bl, &dec);
        if (st == SNN_OK && (pre.mods.n_core != dec.mods.n_core || pre.mods.n_core < 1))
            st = snn_error(SNN_E_STATE, "generate: the prefill and decode stages hold %d and %d attention cores",
                           pre.mods.n_core, dec.mods.n_core);
        const size_t R = (size_t)T * Bl, hd = (size_t)(o->hidden / o->heads);
        const size_t one = R * (size_t)(pre.sg ? pre.sg->groups_local : 1) * (size_t)cap * hd;
        if (st == SNN_OK) {
            kv = malloc(sizeof(float) * 2 * one * (size_t)pre.mods.n_core);
            size_t in_max = pre.sg->in_numel > dec.sg->in_numel ? pre.sg->in_numel : dec.sg->in_numel;
            b.x = malloc(sizeof(float) * R * (size_t)P);
            b.in = malloc(sizeof(float) * R * in_max);
            b.zl = malloc(sizeof(float) * (size_t)Bl * (size_t)pre.sg->vocab_local);
            b.zg = malloc(sizeof(float) * (size_t)Bl * (size_t)V);
            b.z = malloc(sizeof(float) * (size_t)Bl * (size_t)V);
            if (!kv || !b.x || !b.in || !b.zl || !b.zg || !b.z)
                st = snn_error(SNN_E_NOMEM, "generate: cannot allocate the KV cache (%zu floats)",
                               2 * one * (size_t)pre.mods.n_core);
        }
        for (int l = 0; st == SNN_OK && l < pre.mods.n_core; l++) {
            float *k = kv + 2 * one * (size_t)l, *v = k + one;
            st = snn_attention_attach_cache(pre.mods.core[l], k, v, (int)R, cap);
            if (st == SNN_OK) st = snn_attention_attach_cache(dec.mods.core[l], k, v, (int)R, cap);
        }
        for (int r = 0; r < Bl; r++) {
            memcpy(mine + (size_t)r * cap, prompt + (size_t)(lo + r) * P, sizeof(int32_t) * P);
            rng[r] = snn_rng_make(s->seed, 0x9e11 + (uint64_t)(s->first_row + lo + r));
        }
        /* prompts [Bl][P] for the prefill: the first stage tiles them */
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)Bl * P);
        if (st == SNN_OK && !ids) st = snn_error(SNN_E_NOMEM, "out of memory");
        for (int r = 0; ids && r < Bl; r++) memcpy(ids + (size_t)r * P, mine + (size_t)r * cap, sizeof(int32_t) * P);
        if (st == SNN_OK) st = forward(&pre, &b, ids, P, 0);
        free(ids);
        for (int step = 0; st == SNN_OK && step < max_new; step++) {
            if (pre.sg->last)
                for (int r = 0; r < Bl; r++) {
                    int prev = mine[(size_t)r * cap + P + step - 1];
                    int finished = step > 0 && s->eos >= 0 && prev == s->eos;
                    tok[r] = finished ? s->eos : snn_gen_pick(b.z + (size_t)r * V, V, s, &rng[r], scratch);
                }
            /* the output stage's tokens to every stage of the pipeline */
            if (pre.sg->pp) st = snn_comm_broadcast(pre.sg->pp, tok, (size_t)Bl, SNN_COMM_I32, pp_size - 1);
            if (st != SNN_OK) break;
            int all_done = 1;
            for (int r = 0; r < Bl; r++) {
                mine[(size_t)r * cap + P + step] = tok[r];
                all_done &= s->eos >= 0 && tok[r] == s->eos;
            }
            if (step + 1 == max_new) break;
            if (all_done) {
                for (int r = 0; r < Bl; r++)
                    for (int i = P + step + 1; i < cap; i++) mine[(size_t)r * cap + i] = s->eos;
                break;
            }
            st = forward(&dec, &b, tok, 1, P + step);
        }
    }
    /* every rank knows its replica's rows; (pp 0, tp 0) of each replica sends them to rank 0 */
    snn_status agreed = snn_comm_agree(world, st);
    for (int d = 0; agreed == SNN_OK && d < DP; d++) {
        int dlo = d * per < B ? d * per : B, dn = (dlo + per < B ? per : B - dlo);
        if (dn <= 0) continue;
        int src = snn_mesh_rank_of(&mesh, d, 0, 0), me = snn_comm_rank(world);
        size_t n = (size_t)dn * cap;
        if (me == 0 && src == 0) memcpy(out + (size_t)dlo * cap, mine, n * sizeof(int32_t));
        else if (me == 0) agreed = snn_comm_recv(world, out + (size_t)dlo * cap, n, SNN_COMM_I32, src, 82);
        else if (me == src) agreed = snn_comm_send(world, mine, n, SNN_COMM_I32, 0, 82);
    }
    for (int l = 0; l < pre.mods.n_core; l++) snn_attention_attach_cache(pre.mods.core[l], NULL, NULL, 0, 0);
    for (int l = 0; l < dec.mods.n_core; l++) snn_attention_attach_cache(dec.mods.core[l], NULL, NULL, 0, 0);
    if (pre.sg) snn_lm_stage_free(pre.sg);
    if (dec.sg) snn_lm_stage_free(dec.sg);
    snn_mesh_free(&mesh);
    free(kv); free(b.x); free(b.in); free(b.zl); free(b.zg); free(b.z);
    free(mine); free(tok); free(rng); free(scratch);
    return agreed;
}
