/* snn — building your own model from C: modules, containers, and a model from a root module.
 *
 * A module is an opaque snn_module handle made by one of the constructors below. Models are
 * trees: containers (Sequential, Residual) own their children, a model owns its root.
 *
 * Ownership, in four rules:
 *   1. A constructor gives you a free-standing module: you own it. Free it with
 *      snn_module_destroy, or hand it to a container or a model.
 *   2. snn_sequential_add(seq, child) and snn_residual_create(inner, ...) move the child
 *      into the container on success; from then on the container frees it. On failure
 *      nothing moves: you still own the child.
 *   3. snn_model_create_from_module(root, ...) moves the whole tree into the model, on
 *      success AND on failure (a failure frees the tree: the shape checks run while it is
 *      being built). The handles of the tree stay readable until snn_model_free, but the
 *      tree is sealed: adding, renaming, destroying or building a second model is refused.
 *   4. After snn_model_free every handle of its tree is gone (like any freed pointer).
 * Misuse is an error with a message (snn_last_error), never a crash: NULL handles, adding a
 * module that already has a parent (twice, or to two containers), adding a container to
 * itself or to one of its descendants, destroying a module that belongs to a container or
 * a model, changing a sealed tree, a child name used twice inside one container.
 *
 * Names. Parameters are named by dotted paths from the root, as in PyTorch's
 * state_dict: a child is called by its index ("layers.3.weight") unless it was given a
 * local name with snn_module_set_name ("blocks.0.attn.qkv.weight"). A Residual adds no
 * level: its inner module shares the residual's name (x + f(x) written around f). The
 * names are what checkpoints store, so a model built here with the zoo's structure and
 * names loads the zoo's checkpoints (snn_model_load_weights), and vice versa.
 *
 * Shapes. Every module sees a per-sample shape (no batch and no time dimension); the
 * model runs B = T*N rows. Shapes are checked when the model is created: a mismatch is
 * SNN_E_SHAPE naming the module ("layers.2 (Linear): Linear expects inputs whose last
 * dimension is 64, got [32]").
 *
 * A model made here is a normal snn_model: snn_model_plan / forward / backward,
 * snn_prepare_model_for_precision, snn_optimizer_create_for_model, snn_model_save and
 * training checkpoints work as for the zoo models. Its configuration JSON is
 * {"model": "custom"}: snn_model_load cannot rebuild it from a file; build the same tree
 * again and call snn_model_load_weights or snn_training_checkpoint_restore. */
#ifndef SNN_NN_H
#define SNN_NN_H

#include <stdint.h>
#include "error.h"
#include "model.h"
#include "neuron.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_module snn_module;

/* ---- containers ---- */
/* Runs its children in order; the output of one is the input of the next. */
snn_status snn_sequential_create(snn_module **out);
/* Append child (see the ownership rules). seq must be a Sequential. */
snn_status snn_sequential_add(snn_module *seq, snn_module *child);
/* y = x + inner(x); inner must keep the per-sample shape. Takes inner on success. The inner
 * module shares the residual's name, so it must not have a name of its own. */
snn_status snn_residual_create(snn_module *inner, snn_module **out);

/* ---- layers (stateless over the B = T*N rows) ---- */
/* y = x W^T + b, W [out, in] (PyTorch layout) over the last dimension.
 * Init: Uniform(-1/sqrt(in), 1/sqrt(in)) for W and b, as torch.nn.Linear. */
snn_status snn_linear_create(int in_features, int out_features, int bias, snn_module **out);
/* [C, L] -> [O, L'] and [C, H, W] -> [O, H', W'] with square kernels, torch's init. */
snn_status snn_conv1d_create(int in_channels, int out_channels, int kernel, int stride, int padding,
                             int bias, snn_module **out);
snn_status snn_conv2d_create(int in_channels, int out_channels, int kernel, int stride, int padding,
                             int bias, snn_module **out);
/* BatchNorm over channel dim 0 of [C], [C, L] or [C, H, W] (BatchNorm1d/2d); batch
 * statistics over the B rows in training, running statistics in eval. eps >= 0,
 * momentum in [0, 1] (torch: 1e-5, 0.1). */
snn_status snn_batchnorm_create(int features, float eps, float momentum, snn_module **out);
/* LayerNorm over the last dimension (features), with weight and bias. eps >= 0. */
snn_status snn_layernorm_create(int features, float eps, snn_module **out);
/* RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight (no bias, no
 * mean subtraction; torch.nn.RMSNorm). eps >= 0. */
snn_status snn_rmsnorm_create(int features, float eps, snn_module **out);
/* [C, H, W] pooling, floor mode; stride 0 means stride = kernel; 0 <= padding <= kernel/2.
 * AvgPool counts the padding (torch's count_include_pad). */
snn_status snn_maxpool2d_create(int kernel, int stride, int padding, snn_module **out);
snn_status snn_avgpool2d_create(int kernel, int stride, int padding, snn_module **out);
/* p in [0, 1): one mask per sample and element, the same at every time step (SpikingJelly's
 * multi-step Dropout); kept units scaled by 1/(1-p); identity in eval. Masks are drawn from
 * (model seed, the module's dotted name, step), so they are reproducible. */
snn_status snn_dropout_create(float p, snn_module **out);
/* Any per-sample shape -> [numel]. */
snn_status snn_flatten_create(snn_module **out);
/* GELU (erf form, torch's default). */
snn_status snn_gelu_create(snn_module **out);
/* Same data, new per-sample shape (rank 1..4, same element count, checked at model build). */
snn_status snn_reshape_create(int rank, const int *shape, snn_module **out);
/* [C, L] -> [C]: the mean over the L tokens (Spikformer's head). */
snn_status snn_token_mean_create(snn_module **out);

/* ---- neurons ---- */
/* IFNode / LIFNode / ParametricLIFNode, multi-step, any per-sample shape. o holds every
 * option (kind, tau, decay_input, v_threshold, v_reset or soft reset, detach_reset,
 * surrogate and alpha); start from snn_neuron_defaults(kind). NULL means LIF defaults.
 * The options are validated here (snn_neuron_opts_validate) and copied. */
snn_status snn_neuron_create(const snn_neuron_opts *o, snn_module **out);

/* ---- spiking self-attention (Spikformer) ---- */
/* The attention product without softmax on [3C, L] (Q, K, V stacked on the channel axis)
 * -> [C, L]: per head Y = scale * (V K^T) Q; C divisible by heads. scale > 0. */
snn_status snn_ssa_core_create(int heads, float scale, snn_module **out);
/* The whole Spikformer attention block on tokens [dim, L], as a Residual:
 *   x + proj(attn_lif(core(qkv(x))))
 * with qkv = Conv1d(dim, 3 dim, 1, no bias) - BatchNorm - LIF, core = snn_ssa_core(heads,
 * scale), attn_lif = LIF(threshold 0.5), proj = Conv1d(dim, dim, 1) - BatchNorm - LIF; all LIF
 * tau 2 with detach_reset, BatchNorm eps 1e-5, momentum 0.1. Names inside: qkv, qkv_bn,
 * qkv_lif, core, attn_lif, proj, proj_bn, proj_lif (the zoo Spikformer's). scale 0: 0.125. */
snn_status snn_spiking_self_attention_create(int dim, int heads, float scale, snn_module **out);

/* ---- handles ---- */
/* Give m a local name for the dotted paths: [A-Za-z_][A-Za-z0-9_]*, at most 31 characters,
 * unique among its siblings. Refused for a sealed tree and for a Residual's inner module. */
snn_status snn_module_set_name(snn_module *m, const char *name);
/* The module's name: its local name before the model is built, its dotted path after
 * ("" for the root). NULL for a NULL handle. */
const char *snn_module_name(const snn_module *m);
/* "Linear", "Sequential", "LIF", ... (NULL for a NULL handle). */
const char *snn_module_kind(const snn_module *m);
/* Number of children of a container (0 for other modules and NULL). */
int snn_module_num_children(const snn_module *m);
/* Free a free-standing module (and its children). SNN_E_STATE for a module that belongs to
 * a container or a model (its owner frees it). NULL is accepted and does nothing. */
snn_status snn_module_destroy(snn_module *m);

/* ---- models ---- */
/* Build a model from root with the per-sample input shape shape[0..rank) (rank 1..4, every
 * dimension >= 1): shapes are checked, parameters laid out in one flat array and drawn from
 * seed (each module's init, in tree order), as snn_fcsnn_create & co. do. The tree moves
 * into the model (rule 3). root must be free-standing (no parent, not in a model). */
snn_status snn_model_create_from_module(snn_module *root, int rank, const int *shape, uint64_t seed,
                                        snn_model **out);
/* The root module of any model (NULL for NULL), for reading: names, kinds, children. */
const snn_module *snn_model_root(const snn_model *m);

#ifdef __cplusplus
}
#endif
#endif
