/* Building a rank's stage of a vision model: the tensor-parallel recipes and pipeline cuts
 * described in vision_stage.h, the shard rule of every tensor, and loading the stage from
 * canonical (dense) tensors. The module trees mirror src/models/{fcsnn,convsnn,spikformer}.c
 * with the same local names, so every tensor keeps its dense name; loading checks each name
 * and shape against the dense model, so a drift between the two is an error, not a silent
 * mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/vision_stage.h"
#include "models/spikformer_parts.h"
#include "models/zoo.h"

/* ---- construction helpers ------------------------------------------------------------- */

typedef struct {
    int P, r;          /* TP size and rank */
    snn_comm *tp;
    snn_module *root;
    snn_module *cur;   /* the container units are currently added to */
    const char *cur_name;
} bld;

static snn_module *col(bld *b, snn_module *inner, int groups) {
    return b->P == 1 ? inner : snn_tp_wrap_new(inner, SNN_TP_COLUMN, groups, 0, b->tp, b->r, b->P);
}
static snn_module *shard(bld *b, snn_module *inner, int groups) {
    return b->P == 1 ? inner : snn_tp_wrap_new(inner, SNN_TP_SHARD, groups, 0, b->tp, b->r, b->P);
}
/* row-parallel layer built by the caller without bias; bias features restored here */
static snn_module *row(bld *b, snn_module *inner, int bias) {
    return b->P == 1 ? inner : snn_tp_wrap_new(inner, SNN_TP_ROW, 1, bias, b->tp, b->r, b->P);
}

/* Add m under root (parent NULL) or under root's container `parent` (created on first use;
 * units of one container are consecutive). */
static snn_status place(bld *b, const char *parent, snn_module *m, const char *local) {
    if (!m) return snn_error(SNN_E_NOMEM, "out of memory while building the stage");
    if (!parent) {
        b->cur = NULL;
        b->cur_name = NULL;
        return snn_zoo_add(b->root, m, local);
    }
    if (!b->cur || strcmp(b->cur_name, parent)) {
        snn_module *seq = snn_sequential_new();
        snn_status st = snn_zoo_add(b->root, seq, parent);
        if (st != SNN_OK) {
            snn_module_free(m);
            return st;
        }
        b->cur = seq;
        b->cur_name = parent;
    }
    return snn_zoo_add(b->cur, m, local);
}

static snn_status divisible(const char *what, int n, int P) {
    if (n % P)
        return snn_error(SNN_E_INVALID, "tensor_parallel_size %d must divide the %s (%d)", P, what, n);
    return SNN_OK;
}

/* ---- fcsnn: units 2i (Linear), 2i+1 (LIF), 2*depth (head) ------------------------------ */

static snn_status fcsnn_unit(const snn_vision_model_config *c, bld *b, int u) {
    const snn_fcsnn_opts *f = &c->fcsnn;
    char name[16];
    snprintf(name, sizeof name, "%d", u);
    int P = b->P;
    if (u == 2 * f->depth) { /* head */
        int in = f->depth ? f->hidden : f->in_features;
        if (f->depth % 2) return place(b, "layers", row(b, snn_linear_new(in / P, c->num_classes, P == 1), c->num_classes), name);
        return place(b, "layers", snn_linear_new(in, c->num_classes, 1), name);
    }
    int i = u / 2;
    if (u % 2) {
        snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
        lif.tau = f->tau;
        return place(b, "layers", snn_neuron_module_new(&lif), name);
    }
    int in = i ? f->hidden : f->in_features;
    if (i % 2 == 0) return place(b, "layers", col(b, snn_linear_new(in, f->hidden / P, 1), 1), name);
    return place(b, "layers", row(b, snn_linear_new(in / P, f->hidden, P == 1), f->hidden), name);
}

/* ---- convsnn: the 13 layers of conv_fc --------------------------------------------------- */

static snn_status convsnn_unit(const snn_vision_model_config *c, bld *b, int u) {
    const snn_convsnn_opts *o = &c->convsnn;
    int P = b->P, C = o->channels;
    char name[16];
    snprintf(name, sizeof name, "%d", u);
    snn_neuron_opts ifn = snn_neuron_defaults(SNN_NEURON_IF);
    int flat = C * (o->height / 4) * (o->width / 4);
    snn_module *m = NULL;
    switch (u) {
    case 0: m = col(b, snn_conv2d_new(o->in_channels, C / P, 3, 1, 1, 0), 1); break;
    case 1: m = shard(b, snn_batchnorm_new(C / P, 1e-5f, 0.1f), 1); break;
    case 4: m = row(b, snn_conv2d_new(C / P, C, 3, 1, 1, 0), 0); break;
    case 5: m = snn_batchnorm_new(C, 1e-5f, 0.1f); break;
    case 2: case 6: case 10: case 12: m = snn_neuron_module_new(&ifn); break;
    case 3: case 7: m = snn_maxpool2d_new(2, 2, 0); break;
    case 8: m = snn_flatten_new(); break;
    case 9: m = col(b, snn_linear_new(flat, 2048 / P, 0), 1); break;
    case 11: m = row(b, snn_linear_new(2048 / P, c->num_classes, 0), 0); break;
    default: return snn_error(SNN_E_INVALID, "convsnn has no unit %d", u);
    }
    return place(b, "conv_fc", m, name);
}

/* ---- spikformer: 0 patch_embed, 1 tokens, 2.. blocks, then pool, head --------------------- */

static snn_neuron_opts spk_lif(float vth) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 2.0f;
    o.detach_reset = 1;
    o.v_threshold = vth;
    return o;
}

static snn_status add_named(snn_module *seq, snn_module *m, const char *fmt, const char *base) {
    char n[48];
    snprintf(n, sizeof n, fmt, base);
    return snn_zoo_add(seq, m, n);
}

/* conv1x1 -> BN -> LIF as in spikformer.c; mode 0 replicated, 1 column (groups), 2 row */
static snn_status spk_proj(bld *b, snn_module *seq, const char *name, int in, int out, int mode, int groups) {
    int P = b->P;
    snn_neuron_opts o = spk_lif(1.0f);
    if (mode == 1) {
        SNN_TRY(snn_zoo_add(seq, col(b, snn_conv1d_new(in, out / P, 1, 1, 0, 0), groups), name));
        SNN_TRY(add_named(seq, shard(b, snn_batchnorm_new(out / P, 1e-5f, 0.1f), groups), "%s_bn", name));
    } else {
        snn_module *conv = mode == 2 ? row(b, snn_conv1d_new(in / P, out, 1, 1, 0, 0), 0)
                                     : snn_conv1d_new(in, out, 1, 1, 0, 0);
        SNN_TRY(snn_zoo_add(seq, conv, name));
        SNN_TRY(add_named(seq, snn_batchnorm_new(out, 1e-5f, 0.1f), "%s_bn", name));
    }
    return add_named(seq, snn_neuron_module_new(&o), "%s_lif", name);
}

static snn_status spk_block(bld *b, const snn_spikformer_opts *s, snn_module **out) {
    int D = s->embed_dim, hidden = (int)((float)D * s->mlp_ratio);
    snn_module *blk = snn_sequential_new();
    snn_module *attn = snn_sequential_new();
    snn_module *mlp = snn_sequential_new();
    if (!blk || !attn || !mlp) {
        snn_module_free(blk);
        snn_module_free(attn);
        snn_module_free(mlp);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    *out = blk;
    snprintf(attn->name, sizeof attn->name, "@");
    snprintf(mlp->name, sizeof mlp->name, "@");
    snn_status st = snn_zoo_add(blk, snn_residual_new(attn), "attn");
    if (st == SNN_OK) st = snn_zoo_add(blk, snn_residual_new(mlp), "mlp");
    if (st != SNN_OK) return st;
    SNN_TRY(spk_proj(b, attn, "qkv", D, 3 * D, 1, 3));
    SNN_TRY(snn_zoo_add(attn, snn_ssa_core_new(s->heads / b->P, 0.125f), "core"));
    snn_neuron_opts alif = spk_lif(0.5f);
    SNN_TRY(snn_zoo_add(attn, snn_neuron_module_new(&alif), "attn_lif"));
    SNN_TRY(spk_proj(b, attn, "proj", D, D, 2, 1));
    SNN_TRY(spk_proj(b, mlp, "fc1", D, hidden, 1, 1));
    return spk_proj(b, mlp, "fc2", hidden, D, 2, 1);
}

static snn_status spk_stem(bld *b, const snn_spikformer_opts *s, snn_module **out) {
    int D = s->embed_dim, P = b->P, in = s->in_channels;
    int chans[4] = {D / 8, D / 4, D / 2, D};
    snn_neuron_opts lif = spk_lif(1.0f);
    snn_module *stem = snn_sequential_new();
    if (!stem) return snn_error(SNN_E_NOMEM, "out of memory");
    *out = stem;
    for (int i = 0; i < 4; i++) {
        char n[32];
        snn_module *conv, *bn;
        if (i % 2 == 0) { /* column, BN sharded; the next (row) conv reads the shard */
            conv = col(b, snn_conv2d_new(in, chans[i] / P, 3, 1, 1, 0), 1);
            bn = shard(b, snn_batchnorm_new(chans[i] / P, 1e-5f, 0.1f), 1);
        } else {
            conv = row(b, snn_conv2d_new(in / P, chans[i], 3, 1, 1, 0), 0);
            bn = snn_batchnorm_new(chans[i], 1e-5f, 0.1f);
        }
        snprintf(n, sizeof n, "proj_conv%d", i);
        SNN_TRY(snn_zoo_add(stem, conv, n));
        snprintf(n, sizeof n, "proj_bn%d", i);
        SNN_TRY(snn_zoo_add(stem, bn, n));
        snprintf(n, sizeof n, "maxpool%d", i);
        SNN_TRY(snn_zoo_add(stem, snn_maxpool2d_new(3, 2, 1), n));
        snprintf(n, sizeof n, "proj_lif%d", i);
        SNN_TRY(snn_zoo_add(stem, snn_neuron_module_new(&lif), n));
        in = chans[i];
    }
    snn_module *rpe = snn_sequential_new();
    if (!rpe) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(rpe->name, sizeof rpe->name, "@");
    SNN_TRY(snn_zoo_add(stem, snn_residual_new(rpe), "rpe"));
    SNN_TRY(snn_zoo_add(rpe, snn_conv2d_new(D, D, 3, 1, 1, 0), "conv"));
    SNN_TRY(snn_zoo_add(rpe, snn_batchnorm_new(D, 1e-5f, 0.1f), "bn"));
    return snn_zoo_add(rpe, snn_neuron_module_new(&lif), "lif");
}

static snn_status spikformer_unit(const snn_vision_model_config *c, bld *b, int u) {
    const snn_spikformer_opts *s = &c->spikformer;
    int depth = s->depth, side = s->image_size / 16;
    snn_module *m = NULL;
    if (u == 0) {
        snn_status st = spk_stem(b, s, &m);
        if (st != SNN_OK) {
            snn_module_free(m);
            return st;
        }
        return place(b, NULL, m, "patch_embed");
    }
    if (u == 1) return place(b, NULL, snn_reshape_new(snn_shape2(s->embed_dim, side * side)), "tokens");
    if (u < 2 + depth) {
        snn_status st = spk_block(b, s, &m);
        if (st != SNN_OK) {
            snn_module_free(m);
            return st;
        }
        char n[16];
        snprintf(n, sizeof n, "%d", u - 2);
        return place(b, "blocks", m, n);
    }
    if (u == 2 + depth) return place(b, NULL, snn_token_mean_new(), "pool");
    return place(b, NULL, snn_linear_new(s->embed_dim, c->num_classes, 1), "head");
}

/* ---- units and cuts -------------------------------------------------------------------- */

static snn_status tp_check(const snn_vision_model_config *c, int P) {
    if (P <= 0) return snn_error(SNN_E_INVALID, "tensor_parallel_size must be > 0, got %d", P);
    if (P == 1) return SNN_OK;
    switch (c->kind) {
    case SNN_VISION_MODEL_FCSNN: return divisible("fcsnn hidden width", c->fcsnn.hidden, P);
    case SNN_VISION_MODEL_CONVSNN:
        SNN_TRY(divisible("convsnn channels", c->convsnn.channels, P));
        return divisible("convsnn fc1 width", 2048, P);
    default: {
        const snn_spikformer_opts *s = &c->spikformer;
        SNN_TRY(divisible("Spikformer heads", s->heads, P));
        SNN_TRY(divisible("Spikformer stem channels (embed_dim / 8)", s->embed_dim / 8, P));
        return divisible("Spikformer MLP width", (int)((float)s->embed_dim * s->mlp_ratio), P);
    }
    }
}

static int n_units_of(const snn_vision_model_config *c) {
    switch (c->kind) {
    case SNN_VISION_MODEL_FCSNN: return 2 * c->fcsnn.depth + 1;
    case SNN_VISION_MODEL_CONVSNN: return 13;
    default: return c->spikformer.depth + 4;
    }
}

snn_status snn_vision_stage_units(const snn_vision_model_config *c, int pp_rank, int pp_size, int *lo, int *hi,
                                  int *n_units) {
    SNN_TRY(snn_vision_model_config_validate(c));
    if (pp_size != 1 && pp_size != 2 && pp_size != 4)
        return snn_error(SNN_E_INVALID, "pipeline_parallel_size must be 1, 2 or 4, got %d", pp_size);
    if (pp_rank < 0 || pp_rank >= pp_size)
        return snn_error(SNN_E_INVALID, "pipeline rank %d out of range for %d stages", pp_rank, pp_size);
    int n = n_units_of(c);
    *n_units = n;
    if (c->kind == SNN_VISION_MODEL_FCSNN) {
        int pieces = c->fcsnn.depth + 1;
        if (pieces < pp_size)
            return snn_error(SNN_E_INVALID, "pipeline_parallel_size %d needs an fcsnn with depth >= %d", pp_size,
                             pp_size - 1);
        int a = pp_rank * pieces / pp_size, z = (pp_rank + 1) * pieces / pp_size;
        *lo = 2 * a;
        *hi = z == pieces ? n : 2 * z;
        return SNN_OK;
    }
    int starts[5];
    if (c->kind == SNN_VISION_MODEL_CONVSNN) {
        int s[5] = {0, 4, 8, 11, 13};
        memcpy(starts, s, sizeof s);
    } else {
        int d = c->spikformer.depth, k = (d + 2) / 3;
        if (pp_size == 4 && d - 2 * k < 1)
            return snn_error(SNN_E_INVALID, "pipeline_parallel_size 4 is not supported for a %d-block Spikformer "
                             "(its last stage would hold no block; use 2)", d);
        if (pp_size > 1 && d < 1)
            return snn_error(SNN_E_INVALID, "pipeline parallelism needs a Spikformer with at least one block");
        int s[5] = {0, 1, 2 + k < 2 + d ? 2 + k : 2 + d, 2 + 2 * k < 2 + d ? 2 + 2 * k : 2 + d, n};
        memcpy(starts, s, sizeof s);
    }
    int per = 4 / pp_size;
    *lo = starts[pp_rank * per];
    *hi = starts[(pp_rank + 1) * per];
    return SNN_OK;
}

static snn_status add_units(const snn_vision_model_config *c, bld *b, int lo, int hi) {
    for (int u = lo; u < hi; u++) {
        snn_status st;
        switch (c->kind) {
        case SNN_VISION_MODEL_FCSNN: st = fcsnn_unit(c, b, u); break;
        case SNN_VISION_MODEL_CONVSNN: st = convsnn_unit(c, b, u); break;
        default: st = spikformer_unit(c, b, u); break;
        }
        if (st != SNN_OK) return st;
    }
    return SNN_OK;
}

static snn_shape model_input_shape(const snn_vision_model_config *c) {
    switch (c->kind) {
    case SNN_VISION_MODEL_FCSNN: return snn_shape1(c->fcsnn.in_features);
    case SNN_VISION_MODEL_CONVSNN: return snn_shape3(c->convsnn.in_channels, c->convsnn.height, c->convsnn.width);
    default: return snn_shape3(c->spikformer.in_channels, c->spikformer.image_size, c->spikformer.image_size);
    }
}

/* The per-sample input shape of unit `lo` in the TP-local network: set up all units before it
 * (setup declares parameters but allocates none). */
static snn_status input_shape_at(const snn_vision_model_config *c, bld proto, int lo, snn_shape *in) {
    *in = model_input_shape(c);
    if (lo == 0) return SNN_OK;
    bld b = proto;
    b.root = snn_sequential_new();
    b.cur = NULL;
    b.cur_name = NULL;
    if (!b.root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_status st = add_units(c, &b, 0, lo);
    if (st == SNN_OK) {
        snn_module_name_tree(b.root, "");
        b.root->in = *in;
        st = b.root->ops->setup(b.root, *in);
    }
    if (st == SNN_OK) *in = b.root->out;
    snn_module_free(b.root);
    return st;
}

/* ---- shard rules ------------------------------------------------------------------------ */

typedef struct {
    snn_vision_stage *s;
    size_t i;
} rule_walk;

static void rules_visit(snn_module *m, const snn_module *parent, rule_walk *w) {
    snn_tp_mode mode;
    int groups;
    int pw = parent && snn_tp_is_wrapper(parent, &mode, &groups);
    for (int p = 0; p < m->n_params; p++) {
        snn_shard_rule r = {-1, 1};
        if (pw && mode != SNN_TP_ROW) r = (snn_shard_rule){0, groups};
        else if (pw && mode == SNN_TP_ROW && !strcmp(m->params[p].name, "weight")) r = (snn_shard_rule){1, 1};
        w->s->rules[w->i++] = r;
    }
    for (int k = 0; k < m->n_children; k++) rules_visit(m->children[k], m, w);
}

snn_status snn_vision_stage_build(const snn_vision_model_config *c, int pp_rank, int pp_size, int tp_rank,
                                  int tp_size, snn_comm *tp, snn_comm *pp, snn_vision_stage **out) {
    *out = NULL;
    int lo = 0, hi = 0, n = 0;
    SNN_TRY(snn_vision_stage_units(c, pp_rank, pp_size, &lo, &hi, &n));
    SNN_TRY(tp_check(c, tp_size));
    if (tp_rank < 0 || tp_rank >= tp_size)
        return snn_error(SNN_E_INVALID, "tensor-parallel rank %d out of range for %d ranks", tp_rank, tp_size);
    if (hi <= lo) return snn_error(SNN_E_INVALID, "pipeline stage %d of %d would be empty", pp_rank, pp_size);
    bld b = {tp_size, tp_rank, tp, NULL, NULL, NULL};
    snn_shape in;
    SNN_TRY(input_shape_at(c, b, lo, &in));
    b.root = snn_sequential_new();
    if (!b.root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_status st = add_units(c, &b, lo, hi);
    if (st != SNN_OK) {
        snn_module_free(b.root);
        return st;
    }
    snn_vision_stage *s = calloc(1, sizeof *s);
    if (!s) {
        snn_module_free(b.root);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    s->cfg = *c;
    s->pp_rank = pp_rank;
    s->pp_size = pp_size;
    s->tp_rank = tp_rank;
    s->tp_size = tp_size;
    s->tp = tp;
    s->pp = pp;
    s->first = lo == 0;
    s->last = hi == n;
    char cfg[96];
    snprintf(cfg, sizeof cfg, "{\"model\":\"%s-stage\",\"pp\":%d,\"tp\":%d}", snn_vision_model_name(c->kind), pp_rank,
             tp_rank);
    st = snn_model_build(b.root, snn_vision_model_name(c->kind), cfg, in, 0x5eed, &s->model);
    if (st != SNN_OK) {
        free(s);
        return st;
    }
    s->rules = calloc(snn_model_num_tensors(s->model) + 1, sizeof *s->rules);
    if (!s->rules) {
        snn_vision_stage_free(s);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    rule_walk w = {s, 0};
    rules_visit(s->model->root, NULL, &w);
    s->in_numel = snn_shape_numel(in);
    s->out_numel = snn_model_output_numel(s->model);
    *out = s;
    return SNN_OK;
}

snn_status snn_vision_stage_load_canonical(snn_vision_stage *s, snn_canonical_get_fn get, void *ctx) {
    for (size_t i = 0; i < snn_model_num_tensors(s->model); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(s->model, i, &ti));
        int rank = 0;
        int64_t shape[SNN_CKPT_MAX_RANK];
        const float *data = NULL;
        SNN_TRY(get(ti.name, ctx, &rank, shape, &data));
        int canon[SNN_CKPT_MAX_RANK], local[SNN_CKPT_MAX_RANK];
        if (rank != ti.rank)
            return snn_error(SNN_E_FORMAT, "%s: canonical tensor of rank %d for a rank-%d stage tensor", ti.name, rank,
                             ti.rank);
        for (int k = 0; k < rank; k++) canon[k] = (int)shape[k];
        SNN_TRY(snn_shard_local_shape(ti.name, s->rules[i], rank, canon, s->tp_size, local));
        for (int k = 0; k < rank; k++)
            if (local[k] != ti.shape[k])
                return snn_error(SNN_E_FORMAT, "%s: dimension %d is %d after sharding the canonical %d, the stage "
                                 "holds %d", ti.name, k, local[k], canon[k], ti.shape[k]);
        snn_shard_extract(s->rules[i], rank, canon, s->tp_rank, s->tp_size, data, ti.data);
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

snn_status snn_vision_stage_create(const snn_vision_model_config *c, const snn_mesh *mesh, uint64_t seed,
                                   snn_vision_stage **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_vision_stage_create: out is NULL");
    *out = NULL;
    if (!c || !mesh) return snn_error(SNN_E_INVALID, "snn_vision_stage_create needs a model config and a mesh");
    SNN_TRY(snn_vision_stage_build(c, mesh->pp, mesh->pp_size, mesh->tp, mesh->tp_size,
                                   mesh->tp_size > 1 ? mesh->tp_comm : NULL, mesh->pp_size > 1 ? mesh->pp_comm : NULL,
                                   out));
    snn_model *dense = NULL;
    snn_status st = snn_vision_model_build(c, seed, &dense);
    if (st == SNN_OK) st = snn_vision_stage_load_canonical(*out, dense_get, dense);
    snn_model_free(dense);
    if (st != SNN_OK) {
        snn_vision_stage_free(*out);
        *out = NULL;
    }
    return st;
}

int snn_vision_stage_blocks(const snn_vision_stage *s) {
    const snn_module *root = s->model->root;
    for (int i = 0; i < root->n_children; i++) {
        const snn_module *c = root->children[i];
        if (!strcmp(c->name, "blocks") || !strcmp(c->name, "layers") || !strcmp(c->name, "conv_fc")) return c->n_children;
    }
    return 0;
}

void snn_vision_pipeline_free(snn_pipeline *p); /* vision_pipeline.c */

void snn_vision_stage_free(snn_vision_stage *s) {
    if (!s) return;
    snn_vision_pipeline_free(s->pipe);
    snn_model_free(s->model);
    free(s->rules);
    free(s);
}
