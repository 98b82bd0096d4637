/* Building a rank's stage of a gpt / spikelm model (lm_stage.h): the tensor-parallel module
 * tree, the shard rule of every tensor, loading from the dense model and gathering back.
 * The tree mirrors src/models/gpt.c with the same local names, so every tensor keeps its
 * dense name; loading checks each name and shape against the dense model, so a drift
 * between the two is an error, not a silent mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/lm_stage.h"
#include "dist/tp.h"
#include "models/zoo.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"
#include "nn/model_internal.h"

void snn_lm_pipeline_free(snn_lm_pipe *p); /* lm_pipeline.c */

snn_status snn_lm_stage_check(const snn_gpt_opts *o, int PP, int TP, int sp) {
    SNN_TRY(snn_gpt_opts_check(o));
    if (TP <= 0 || PP <= 0)
        return snn_error(SNN_E_INVALID, "tensor_parallel_size and pipeline_parallel_size must be > 0 (got %d, %d)", TP,
                         PP);
    if (o->layers % PP)
        return snn_error(SNN_E_INVALID, "pipeline_parallel_size %d must divide num_layers %d", PP, o->layers);
    if (o->heads % TP)
        return snn_error(SNN_E_INVALID, "tensor_parallel_size %d must divide num_attention_heads %d", TP, o->heads);
    int g = o->groups, hi = g > TP ? g : TP, lo = g > TP ? TP : g;
    if (hi % lo)
        return snn_error(SNN_E_INVALID, "num_query_groups %d and tensor_parallel_size %d: the larger must be "
                         "divisible by the smaller", g, TP);
    if (o->ffn % TP)
        return snn_error(SNN_E_INVALID, "tensor_parallel_size %d must divide ffn_hidden_size %d", TP, o->ffn);
    if (o->vocab % TP)
        return snn_error(SNN_E_INVALID, "tensor_parallel_size %d must divide vocab_size %d (the vocab-parallel "
                         "embedding and output)", TP, o->vocab);
    if (sp && TP > 1 && o->seq % TP)
        return snn_error(SNN_E_INVALID, "sequence_parallel: tensor_parallel_size %d must divide the sequence length %d",
                         TP, o->seq);
    return SNN_OK;
}

/* ---- construction ------------------------------------------------------------------------ */

typedef struct {
    const snn_gpt_opts *o;
    int P, r;
    snn_comm *tp;
    int hl, gl, fl; /* local heads, groups, ffn */
    int sp;
} bld;

/* Before a column layer: the tensor-parallel column wrapper (its input gradient all-reduced),
 * or with SP a gather along the sequence and the bare local layer. */
static snn_status add_col(snn_module *seq, const bld *b, snn_module *inner, const char *name) {
    if (!b->sp)
        return snn_zoo_add(seq, b->P == 1 ? inner : snn_tp_wrap_new(inner, SNN_TP_COLUMN, 1, 0, b->tp, b->r, b->P),
                           name);
    snn_status st = snn_zoo_add(seq, snn_sp_gather_new(b->o->seq, b->o->hidden, b->tp, b->r, b->P), "sp_gather");
    if (st != SNN_OK) {
        snn_module_free(inner);
        return st;
    }
    return snn_zoo_add(seq, inner, name);
}

/* A row layer [in_local -> hidden]: the row wrapper (all-reduce, then the full bias), or with
 * SP a container "name" holding the bare layer and the reduce-scatter with the bias. */
static snn_status add_row(snn_module *seq, const bld *b, int in_local, const char *name) {
    const snn_gpt_opts *o = b->o;
    if (b->P == 1) return snn_zoo_add(seq, snn_linear_new(in_local, o->hidden, o->bias), name);
    if (!b->sp)
        return snn_zoo_add(seq, snn_tp_wrap_new(snn_linear_new(in_local, o->hidden, 0), SNN_TP_ROW, 1,
                                                o->bias ? o->hidden : 0, b->tp, b->r, b->P),
                           name);
    snn_module *c = snn_sequential_new();
    SNN_TRY(snn_zoo_add(seq, c, name));
    SNN_TRY(snn_zoo_add(c, snn_linear_new(in_local, o->hidden, 0), "@"));
    return snn_zoo_add(c, snn_sp_scatter_new(o->seq, o->hidden, o->bias, b->tp, b->r, b->P), "@");
}


static snn_module *norm_new(const snn_gpt_opts *o) {
    return o->norm == SNN_LM_NORM_RMSNORM ? snn_rmsnorm_new(o->hidden, o->eps) : snn_layernorm_new(o->hidden, o->eps);
}

static snn_status branch(snn_module *block, snn_module **seq) {
    snn_module *inner = snn_sequential_new();
    *seq = inner;
    if (!inner) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(inner->name, sizeof inner->name, "@");
    return snn_zoo_add(block, snn_residual_new(inner), "@");
}

static snn_status add_block(snn_module *h, const bld *b, int index) {
    const snn_gpt_opts *o = b->o;
    char name[16];
    snprintf(name, sizeof name, "%d", index);
    snn_module *blk = snn_sequential_new(), *a, *mlp;
    SNN_TRY(snn_zoo_add(h, blk, name));
    const int hd = o->hidden / o->heads, qkv = (b->hl + 2 * b->gl) * hd;
    SNN_TRY(branch(blk, &a));
    SNN_TRY(snn_zoo_add(a, norm_new(o), "ln_1"));
    if (o->spiking) SNN_TRY(snn_zoo_add(a, snn_bispike_new(o->spike_decay, o->spike_amplitude), "spike_1"));
    snn_module *attn = snn_sequential_new();
    SNN_TRY(snn_zoo_add(a, attn, "attn"));
    SNN_TRY(add_col(attn, b, snn_linear_new(o->hidden, qkv, o->bias), "c_attn"));
    if (o->pos == SNN_LM_POS_ROPE)
        SNN_TRY(snn_zoo_add(attn, snn_rope_new(b->hl, b->gl, hd, o->rope_theta, o->context), "rope"));
    SNN_TRY(snn_zoo_add(attn, snn_attention_new(b->hl, b->gl, hd), "core"));
    SNN_TRY(add_row(attn, b, b->hl * hd, "c_proj"));
    SNN_TRY(branch(blk, &mlp));
    SNN_TRY(snn_zoo_add(mlp, norm_new(o), "ln_2"));
    if (o->spiking) SNN_TRY(snn_zoo_add(mlp, snn_bispike_new(o->spike_decay, o->spike_amplitude), "spike_2"));
    snn_module *m = snn_sequential_new();
    SNN_TRY(snn_zoo_add(mlp, m, "mlp"));
    int gated = o->act == SNN_LM_ACT_SWIGLU;
    SNN_TRY(add_col(m, b, snn_linear_new(o->hidden, gated ? 2 * b->fl : b->fl, o->bias), "c_fc"));
    SNN_TRY(snn_zoo_add(m, gated ? snn_swiglu_new(b->fl) : snn_gelu_new(), "act"));
    SNN_TRY(add_row(m, b, b->fl, "c_proj"));
    return SNN_OK;
}

/* ---- shard rules ----------------------------------------------------------------------------- */

static snn_lm_shard seg1(int dim, int start, int len) {
    snn_lm_shard r = {dim, 1, {start, 0, 0}, {len, 0, 0}, 1};
    return r;
}

/* The rule of a canonical tensor name on this rank. */
static snn_lm_shard rule_of(const snn_lm_stage *s, const char *name) {
    const snn_gpt_opts *o = &s->opts;
    const int P = s->tp_size, r = s->tp_rank;
    snn_lm_shard rep = {-1, 0, {0}, {0}, 0};
    if (P == 1) return rep;
    const int hd = o->hidden / o->heads, H = o->heads, G = o->groups, hl = s->heads_local, gl = s->groups_local;
    const int fl = s->ffn_local, vl = s->vocab_local;
    if (!strcmp(name, "wte.weight") || !strcmp(name, "lm_head.weight")) return seg1(0, r * vl, vl);
    if (strstr(name, ".attn.c_attn.")) {
        int g0 = G >= P ? r * gl : r / (P / G);
        snn_lm_shard q = {0, 3, {r * hl * hd, (H + g0) * hd, (H + G + g0) * hd}, {hl * hd, gl * hd, gl * hd},
                          G < P ? 1 : 3};
        return q;
    }
    if (strstr(name, ".attn.c_proj.weight")) return seg1(1, r * hl * hd, hl * hd);
    if (strstr(name, ".mlp.c_fc.")) {
        if (o->act == SNN_LM_ACT_SWIGLU) {
            snn_lm_shard g = {0, 2, {r * fl, o->ffn + r * fl, 0}, {fl, fl, 0}, 2};
            return g;
        }
        return seg1(0, r * fl, fl);
    }
    if (strstr(name, ".mlp.c_proj.weight")) return seg1(1, r * fl, fl);
    return rep; /* norms, wpe, biases after row layers */
}

static void seg_copy(const snn_lm_shard *r, int rank, const int *canon, const float *a, float *b, int to_local,
                     int skip_kv) {
    size_t total = 1;
    for (int i = 0; i < rank; i++) total *= (size_t)canon[i];
    if (r->dim < 0) {
        memcpy(b, a, total * sizeof(float));
        return;
    }
    size_t outer = 1, inner = 1;
    for (int i = 0; i < r->dim; i++) outer *= (size_t)canon[i];
    for (int i = r->dim + 1; i < rank; i++) inner *= (size_t)canon[i];
    size_t D = (size_t)canon[r->dim], L = 0;
    for (int k = 0; k < r->nseg; k++) L += (size_t)r->len[k];
    for (size_t o = 0; o < outer; o++) {
        size_t l = 0;
        for (int k = 0; k < r->nseg; k++) {
            size_t lo = (o * L + l) * inner, co = (o * D + (size_t)r->start[k]) * inner, n = (size_t)r->len[k] * inner;
            l += (size_t)r->len[k];
            if (skip_kv && k >= r->kv_seg) continue;
            if (to_local) memcpy(b + lo, a + co, n * sizeof(float));
            else memcpy(b + co, a + lo, n * sizeof(float));
        }
    }
}

void snn_lm_shard_extract(const snn_lm_shard *r, int rank, const int *canon, const float *src, float *local) {
    seg_copy(r, rank, canon, src, local, 1, 0);
}

void snn_lm_shard_insert(const snn_lm_shard *r, int rank, const int *canon, const float *local, float *dst,
                         int skip_kv) {
    seg_copy(r, rank, canon, local, dst, 0, skip_kv);
}

static void local_shape(const snn_lm_shard *r, int rank, const int *canon, int *local) {
    for (int i = 0; i < rank; i++) local[i] = canon[i];
    if (r->dim < 0 || r->dim >= rank) return;
    int L = 0;
    for (int k = 0; k < r->nseg; k++) L += r->len[k];
    local[r->dim] = L;
}

const char *snn_lm_stage_canonical_name(const snn_lm_stage *s, size_t i) {
    snn_tensor_info ti;
    if (snn_model_tensor(s->model, i, &ti) != SNN_OK) return NULL;
    if (s->tied_copy && !strcmp(ti.name, "lm_head.weight")) return "wte.weight";
    return ti.name;
}

/* ---- build ---------------------------------------------------------------------------------------- */

snn_status snn_lm_stage_build(const snn_gpt_opts *o, int pp_rank, int pp_size, int tp_rank, int tp_size, int sp,
                              snn_comm *tp, snn_comm *pp, snn_lm_stage **out) {
    *out = NULL;
    SNN_TRY(snn_lm_stage_check(o, pp_size, tp_size, sp));
    if (pp_rank < 0 || pp_rank >= pp_size || tp_rank < 0 || tp_rank >= tp_size)
        return snn_error(SNN_E_INVALID, "stage coordinates (pp %d of %d, tp %d of %d) out of range", pp_rank, pp_size,
                         tp_rank, tp_size);
    snn_lm_stage *s = calloc(1, sizeof *s);
    if (!s) return snn_error(SNN_E_NOMEM, "out of memory");
    s->opts = *o;
    s->pp_rank = pp_rank;
    s->pp_size = pp_size;
    s->tp_rank = tp_rank;
    s->tp_size = tp_size;
    s->tp = tp_size > 1 ? tp : NULL;
    s->pp = pp_size > 1 ? pp : NULL;
    s->kv_leader = 1;
    s->sp = sp && tp_size > 1;
    s->heads_local = o->heads / tp_size;
    s->groups_local = o->groups >= tp_size ? o->groups / tp_size : 1;
    s->ffn_local = o->ffn / tp_size;
    s->vocab_local = o->vocab / tp_size;
    s->vocab_lo = tp_rank * s->vocab_local;
    const int per = o->layers / pp_size;
    s->layer_lo = pp_rank * per;
    s->layer_hi = s->layer_lo + per;
    s->first = pp_rank == 0;
    s->last = pp_rank == pp_size - 1;
    s->tied_copy = o->tied && pp_size > 1 && s->last;
    bld b = {o, tp_size, tp_rank, s->tp, s->heads_local, s->groups_local, s->ffn_local, s->sp};

    snn_module *root = snn_sequential_new(), *wte = NULL, *h = NULL;
    snn_status st = root ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory");
    if (st == SNN_OK && s->first) {
        wte = tp_size == 1 ? snn_embedding_new(o->vocab, o->hidden)
                           : snn_vocab_parallel_embedding_new(o->vocab, s->vocab_lo, s->vocab_local, o->hidden, s->tp,
                                                              tp_rank, tp_size, s->sp);
        st = snn_zoo_add(root, wte, "wte");
        if (st == SNN_OK && o->pos == SNN_LM_POS_LEARNED_ABSOLUTE)
            st = snn_zoo_add(root, snn_posemb_new(o->context, o->hidden), "wpe");
    }
    if (st == SNN_OK) {
        h = snn_sequential_new();
        st = snn_zoo_add(root, h, "h");
    }
    for (int i = s->layer_lo; i < s->layer_hi && st == SNN_OK; i++) st = add_block(h, &b, i);
    if (st == SNN_OK && s->last) {
        st = snn_zoo_add(root, norm_new(o), "ln_f");
        snn_module *tied = NULL;
        if (o->tied && s->first) tied = tp_size == 1 ? wte : snn_vocab_parallel_embedding_inner(wte);
        if (st == SNN_OK) st = add_col(root, &b, snn_lm_head_new(o->hidden, s->vocab_local, tied), "lm_head");
    }
    if (st != SNN_OK) {
        snn_module_free(root);
        free(s);
        return st;
    }
    char cfg[128];
    snprintf(cfg, sizeof cfg, "{\"model\":\"%s-stage\",\"pp\":%d,\"tp\":%d}", o->spiking ? "spikelm" : "gpt", pp_rank,
             tp_rank);
    snn_shape in = s->first ? snn_shape1(o->seq) : snn_shape2(s->sp ? o->seq / tp_size : o->seq, o->hidden);
    st = snn_model_build(root, o->spiking ? "spikelm" : "gpt", cfg, in, 0x5eed, &s->model);
    if (st != SNN_OK) {
        free(s);
        return st;
    }
    if (s->sp && s->first && o->pos == SNN_LM_POS_LEARNED_ABSOLUTE) { /* the positions of this shard */
        st = snn_lm_set_offset(s->model->root->children[1], tp_rank * (o->seq / tp_size));
        if (st != SNN_OK) {
            snn_lm_stage_free(s);
            return st;
        }
    }
    size_t n = snn_model_num_tensors(s->model);
    s->rules = calloc(n + 1, sizeof *s->rules);
    s->norm_n = calloc(n + 1, sizeof *s->norm_n);
    s->kv_off = calloc(n + 1, sizeof *s->kv_off);
    if (!s->rules || !s->norm_n || !s->kv_off) {
        snn_lm_stage_free(s);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        snn_tensor_info ti;
        snn_model_tensor(s->model, i, &ti);
        const char *cn = snn_lm_stage_canonical_name(s, i);
        s->rules[i] = rule_of(s, cn);
        s->kv_off[i] = ti.numel;
        s->norm_n[i] = s->rules[i].dim < 0 && tp_rank != 0 ? 0 : ti.numel;
        if (s->tied_copy && !strcmp(ti.name, "lm_head.weight")) s->norm_n[i] = 0; /* counted on the first stage */
        if (s->rules[i].dim == 0 && s->rules[i].kv_seg < s->rules[i].nseg) {
            size_t inner = ti.numel / (size_t)ti.shape[0];
            s->kv_off[i] = (size_t)s->rules[i].len[0] * inner;
        }
    }
    s->in_numel = snn_shape_numel(in);
    s->out_numel = snn_model_output_numel(s->model);
    *out = s;
    return SNN_OK;
}

/* The non-leaders of a shared key/value group count only their query rows in the norm. */
static void apply_kv_leader(snn_lm_stage *s) {
    for (size_t i = 0; i < snn_model_num_tensors(s->model); i++)
        if (s->kv_off[i] < s->norm_n[i] && !s->kv_leader) s->norm_n[i] = s->kv_off[i];
}

snn_status snn_lm_stage_load_canonical(snn_lm_stage *s, snn_lm_canonical_get_fn get, void *ctx) {
    for (size_t i = 0; i < snn_model_num_tensors(s->model); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(s->model, i, &ti));
        const char *cn = snn_lm_stage_canonical_name(s, i);
        int rank = 0;
        int64_t shape[SNN_MAX_RANK];
        const float *data = NULL;
        SNN_TRY(get(cn, ctx, &rank, shape, &data));
        if (rank != ti.rank)
            return snn_error(SNN_E_FORMAT, "%s: canonical tensor of rank %d for a rank-%d stage tensor", ti.name, rank,
                             ti.rank);
        int canon[SNN_MAX_RANK], local[SNN_MAX_RANK];
        for (int k = 0; k < rank; k++) canon[k] = (int)shape[k];
        local_shape(&s->rules[i], rank, canon, local);
        for (int k = 0; k < rank; k++)
            if (local[k] != ti.shape[k])
                return snn_error(SNN_E_FORMAT, "%s: dimension %d is %d after sharding the canonical %d, the stage "
                                 "holds %d", ti.name, k, local[k], canon[k], ti.shape[k]);
        snn_lm_shard_extract(&s->rules[i], rank, canon, data, ti.data);
    }
    return SNN_OK;
}

static snn_status dense_get(const char *name, void *ctx, int *rank, int64_t *shape, const float **data) {
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
    return snn_error(SNN_E_FORMAT, "the dense %s model has no tensor %s", snn_model_kind(d), name);
}

snn_status snn_lm_stage_create(const snn_gpt_opts *o, const snn_mesh *mesh, int sp, uint64_t seed,
                               snn_lm_stage **out) {
    *out = NULL;
    snn_lm_stage *s = NULL;
    SNN_TRY(snn_lm_stage_build(o, mesh->pp, mesh->pp_size, mesh->tp, mesh->tp_size, sp, mesh->tp_comm, mesh->pp_comm,
                               &s));
    s->dp = mesh->dp_size > 1 ? mesh->dp_comm : NULL;
    snn_status st = SNN_OK;
    if (mesh->tp_size > o->groups) { /* ranks sharing one replicated key/value group */
        int share = mesh->tp_size / o->groups;
        st = snn_comm_split(mesh->tp_comm, mesh->tp / share, mesh->tp, &s->kv);
        s->kv_leader = mesh->tp % share == 0;
        apply_kv_leader(s);
    }
    snn_model *dense = NULL;
    if (st == SNN_OK) st = snn_gpt_create(o, seed, &dense);
    if (st == SNN_OK) st = snn_lm_stage_load_canonical(s, dense_get, dense);
    snn_model_free(dense);
    if (st != SNN_OK) {
        snn_lm_stage_free(s);
        return st;
    }
    *out = s;
    return SNN_OK;
}

snn_status snn_lm_stage_gather(snn_lm_stage *s, snn_model *dense) {
    for (size_t j = 0; j < snn_model_num_tensors(dense); j++) {
        snn_tensor_info di;
        SNN_TRY(snn_model_tensor(dense, j, &di));
        memset(di.data, 0, di.numel * sizeof(float));
        for (size_t i = 0; i < snn_model_num_tensors(s->model); i++) {
            snn_tensor_info ti;
            SNN_TRY(snn_model_tensor(s->model, i, &ti));
            if (strcmp(ti.name, di.name) || (s->tied_copy && !strcmp(ti.name, "lm_head.weight"))) continue;
            const snn_lm_shard *r = &s->rules[i];
            int local[SNN_MAX_RANK];
            local_shape(r, di.rank, di.shape, local);
            for (int k = 0; k < di.rank; k++)
                if (local[k] != ti.shape[k])
                    return snn_error(SNN_E_FORMAT, "%s: the stage's tensor does not fit the dense one", ti.name);
            /* each value is contributed by exactly one rank; the others add zeros */
            if (r->dim >= 0 || s->tp_rank == 0) snn_lm_shard_insert(r, di.rank, di.shape, ti.data, di.data, !s->kv_leader);
            break;
        }
        if (s->tp) SNN_TRY(snn_comm_allreduce(s->tp, di.data, di.numel, SNN_COMM_F32, SNN_COMM_SUM));
        if (s->pp) SNN_TRY(snn_comm_allreduce(s->pp, di.data, di.numel, SNN_COMM_F32, SNN_COMM_SUM));
    }
    return SNN_OK;
}

void snn_lm_stage_free(snn_lm_stage *s) {
    if (!s) return;
    snn_lm_pipeline_free(s->pipe);
    snn_model_free(s->model);
    snn_comm_free(s->kv);
    free(s->rules);
    free(s->norm_n);
    free(s->kv_off);
    free(s);
}
