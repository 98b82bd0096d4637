/* Spikformer (Zhou et al., ICLR 2023) as SpikingJelly defines it:
 *   SPS stem: 4 x [Conv3x3 (no bias) - BN2d - MaxPool(3, 2, 1) - LIF], channels D/8..D,
 *             then x + RPE(x), RPE = Conv3x3 - BN2d - LIF
 *   blocks:   x + SSA(x), x + MLP(x) on tokens [D, L]
 *   head:     mean over tokens -> Linear(D, classes)
 * All LIF: tau 2, detach_reset; the attention LIF has threshold 0.5; scale 0.125. */
#include <stdio.h>
#include <string.h>

#include "models/spikformer_parts.h"
#include "models/zoo.h"

static snn_neuron_opts spk_lif(float v_threshold) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 2.0f;
    o.detach_reset = 1;
    o.v_threshold = v_threshold;
    return o;
}

/* conv1x1 (no bias) -> BN1d -> LIF, named <name>, <name>_bn, <name>_lif inside `seq`. */
static snn_status add_proj(snn_module *seq, const char *name, int in, int out, float vth) {
    char bn[48], lif[48];
    snprintf(bn, sizeof bn, "%s_bn", name);
    snprintf(lif, sizeof lif, "%s_lif", name);
    snn_neuron_opts o = spk_lif(vth);
    SNN_TRY(snn_zoo_add(seq, snn_conv1d_new(in, out, 1, 1, 0, 0), name));
    SNN_TRY(snn_zoo_add(seq, snn_batchnorm_new(out, 1e-5f, 0.1f), bn));
    return snn_zoo_add(seq, snn_neuron_module_new(&o), lif);
}

static snn_status build_block(snn_module *blocks, int D, int heads, int hidden) {
    snn_module *blk = snn_sequential_new();
    SNN_TRY(snn_zoo_add(blocks, blk, NULL));
    /* attention: Residual("attn") around a transparent Sequential */
    snn_module *attn = snn_sequential_new();
    if (!attn) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(attn->name, sizeof attn->name, "@");
    snn_module *res = snn_residual_new(attn);
    SNN_TRY(snn_zoo_add(blk, res, "attn"));
    SNN_TRY(add_proj(attn, "qkv", D, 3 * D, 1.0f));
    SNN_TRY(snn_zoo_add(attn, snn_ssa_core_new(heads, 0.125f), "core"));
    snn_neuron_opts alif = spk_lif(0.5f);
    SNN_TRY(snn_zoo_add(attn, snn_neuron_module_new(&alif), "attn_lif"));
    SNN_TRY(add_proj(attn, "proj", D, D, 1.0f));
    /* MLP */
    snn_module *mlp = snn_sequential_new();
    if (!mlp) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(mlp->name, sizeof mlp->name, "@");
    SNN_TRY(snn_zoo_add(blk, snn_residual_new(mlp), "mlp"));
    SNN_TRY(add_proj(mlp, "fc1", D, hidden, 1.0f));
    return add_proj(mlp, "fc2", hidden, D, 1.0f);
}

static snn_status build(snn_module *root, const snn_spikformer_opts *s) {
    int D = s->embed_dim;
    snn_module *stem = snn_sequential_new();
    SNN_TRY(snn_zoo_add(root, stem, "patch_embed"));
    int in = s->in_channels;
    int chans[4] = {D / 8, D / 4, D / 2, D};
    snn_neuron_opts lif = spk_lif(1.0f);
    for (int i = 0; i < 4; i++) {
        char n[32];
        snprintf(n, sizeof n, "proj_conv%d", i);
        SNN_TRY(snn_zoo_add(stem, snn_conv2d_new(in, chans[i], 3, 1, 1, 0), n));
        snprintf(n, sizeof n, "proj_bn%d", i);
        SNN_TRY(snn_zoo_add(stem, snn_batchnorm_new(chans[i], 1e-5f, 0.1f), n));
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
    SNN_TRY(snn_zoo_add(rpe, snn_neuron_module_new(&lif), "lif"));
    int side = s->image_size / 16;
    SNN_TRY(snn_zoo_add(root, snn_reshape_new(snn_shape2(D, side * side)), "tokens"));
    snn_module *blocks = snn_sequential_new();
    SNN_TRY(snn_zoo_add(root, blocks, "blocks"));
    int hidden = (int)((float)D * s->mlp_ratio);
    for (int b = 0; b < s->depth; b++) SNN_TRY(build_block(blocks, D, s->heads, hidden));
    SNN_TRY(snn_zoo_add(root, snn_token_mean_new(), "pool"));
    return snn_zoo_add(root, snn_linear_new(D, s->classes, 1), "head");
}

/* Spikformer's init: truncated normal (std 0.02) for Linear/Conv weights, zero biases. */
static void spk_init(snn_module *m, void *ctx) {
    snn_rng *rng = ctx;
    if (!snn_module_kind_is(m, SNN_KIND_LINEAR) && !snn_module_kind_is(m, SNN_KIND_CONV1D) &&
        !snn_module_kind_is(m, SNN_KIND_CONV2D))
        return;
    for (int i = 0; i < m->n_params; i++) {
        snn_param *p = &m->params[i];
        if (!strcmp(p->name, "weight")) snn_init_trunc_normal(p->data, p->numel, 0.02f, rng);
        else if (!strcmp(p->name, "bias")) memset(p->data, 0, p->numel * sizeof(float));
    }
}

snn_status snn_spikformer_create(const snn_spikformer_opts *o, uint64_t seed, snn_model **out) {
    snn_spikformer_opts s = o ? *o : (snn_spikformer_opts){0};
    if (!s.in_channels) s.in_channels = 3;
    if (!s.image_size) s.image_size = 224;
    if (!s.classes) s.classes = 1000;
    if (!s.embed_dim) s.embed_dim = 384;
    if (!s.heads) s.heads = 12;
    if (!s.depth) s.depth = 6;
    if (s.mlp_ratio == 0) s.mlp_ratio = 4.0f;
    *out = NULL;
    if (s.image_size <= 0 || s.image_size % 16)
        return snn_error(SNN_E_INVALID, "spikformer: --image-size must be a positive multiple of 16 (patch size 16), got %d", s.image_size);
    if (s.embed_dim <= 0 || s.embed_dim % 8)
        return snn_error(SNN_E_INVALID, "spikformer: --embed-dim must be a positive multiple of 8, got %d", s.embed_dim);
    if (s.heads <= 0 || s.embed_dim <= 0 || s.embed_dim % s.heads)
        return snn_error(SNN_E_INVALID, "spikformer: --embed-dim %d is not divisible by --heads %d", s.embed_dim, s.heads);
    if (s.depth < 0 || s.classes <= 0 || s.in_channels <= 0 || !(s.mlp_ratio > 0))
        return snn_error(SNN_E_INVALID, "spikformer: depth, classes, channels and mlp ratio must be positive");
    SNN_TRY(snn_zoo_range("spikformer", "image_size", s.image_size, 16, SNN_ZOO_MAX_SIDE));
    SNN_TRY(snn_zoo_range("spikformer", "embed_dim", s.embed_dim, 8, SNN_ZOO_MAX_CHANNELS));
    SNN_TRY(snn_zoo_range("spikformer", "in_channels", s.in_channels, 1, SNN_ZOO_MAX_CHANNELS));
    SNN_TRY(snn_zoo_range("spikformer", "classes", s.classes, 1, SNN_ZOO_MAX_WIDTH));
    SNN_TRY(snn_zoo_range("spikformer", "depth", s.depth, 1, SNN_ZOO_MAX_DEPTH));
    if (!(s.mlp_ratio <= 64.0f) || (double)s.embed_dim * s.mlp_ratio < 1.0 ||
        (double)s.embed_dim * s.mlp_ratio > SNN_ZOO_MAX_WIDTH)
        return snn_error(SNN_E_INVALID, "spikformer: mlp_ratio must give an MLP width in 1..%d (embed_dim x ratio, ratio <= 64)",
                         SNN_ZOO_MAX_WIDTH);
    int64_t tokens = (int64_t)(s.image_size / 16) * (s.image_size / 16);
    int64_t hidden = (int64_t)((float)s.embed_dim * s.mlp_ratio);
    SNN_TRY(snn_zoo_product("spikformer", "in_channels x image_size^2", s.in_channels, s.image_size, s.image_size,
                            SNN_ZOO_MAX_ACT));
    SNN_TRY(snn_zoo_product("spikformer", "embed_dim/8 x image_size^2", s.embed_dim / 8, s.image_size,
                            s.image_size, SNN_ZOO_MAX_ACT));
    SNN_TRY(snn_zoo_product("spikformer", "3 x embed_dim x tokens", 3, s.embed_dim, tokens, SNN_ZOO_MAX_ACT));
    SNN_TRY(snn_zoo_product("spikformer", "mlp width x tokens", hidden, tokens, 1, SNN_ZOO_MAX_ACT));
    SNN_TRY(snn_zoo_product("spikformer", "embed_dim x embed_dim / heads (attention)", s.embed_dim,
                            s.embed_dim / s.heads, 1, SNN_ZOO_MAX_ACT));
    snn_module *root = snn_sequential_new();
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_status st = build(root, &s);
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    char cfg[320];
    snprintf(cfg, sizeof cfg,
             "{\"model\":\"spikformer\",\"in_channels\":%d,\"image_size\":%d,\"classes\":%d,"
             "\"embed_dim\":%d,\"heads\":%d,\"depth\":%d,\"mlp_ratio\":%.9g}",
             s.in_channels, s.image_size, s.classes, s.embed_dim, s.heads, s.depth, (double)s.mlp_ratio);
    SNN_TRY(snn_model_build(root, "spikformer", cfg, snn_shape3(s.in_channels, s.image_size, s.image_size),
                            seed, out));
    snn_rng rng = snn_rng_make(seed, 0x5f1c);
    snn_module_walk((*out)->root, spk_init, &rng);
    return SNN_OK;
}
