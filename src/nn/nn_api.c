/* The public construction API (include/snn/nn.h) over the internal module constructors.
 *
 * The internal constructors trust their callers (the zoo): they take ownership on every path
 * and report bad hyper-parameters only when the model is set up. Here every argument is
 * checked up front, so a user gets the message at the call that caused it, and ownership
 * moves only on success. The tree's state lives in two fields of snn_module: parent (set by
 * snn_module_add_child) and sealed (set by snn_model_build for the whole tree). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/spikformer_parts.h"
#include "neuron/neuron_module.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"
#include "nn/model_internal.h"
#include "snn/nn.h"

/* Largest feature / channel count and kernel accepted: far beyond any model that fits in
 * memory, small enough that products of two of them cannot overflow. */
#define API_MAX_DIM (1 << 24)
/* Deepest nesting of containers: setup, forward and backward recurse over the tree. */
#define API_MAX_DEPTH 64
/* Local names are copied into the 96-byte dotted name together with their ancestors'. */
#define API_NAME_MAX 31

static const char *kind_of(const snn_module *m) { return snn_module_own_ops(m)->kind; }

static snn_status null_handle(const char *fn, const char *what) {
    return snn_error(SNN_E_INVALID, "%s: %s is NULL", fn, what);
}

static snn_status need_out(const char *fn, snn_module **out) {
    if (!out) return null_handle(fn, "the output pointer");
    *out = NULL;
    return SNN_OK;
}

static snn_status positive(const char *fn, const char *what, int v) {
    if (v < 1 || v > API_MAX_DIM)
        return snn_error(SNN_E_INVALID, "%s: %s must be in [1, %d], got %d", fn, what, API_MAX_DIM, v);
    return SNN_OK;
}

static snn_status finished(const char *fn, snn_module *m, snn_module **out) {
    if (!m) return snn_error(SNN_E_NOMEM, "%s: out of memory", fn);
    *out = m;
    return SNN_OK;
}

/* A module the caller may still change: not NULL, not part of a model. */
static snn_status changeable(const char *fn, const snn_module *m, const char *what) {
    if (!m) return null_handle(fn, what);
    if (m->sealed)
        return snn_error(SNN_E_STATE, "%s: %s (%s \"%s\") is part of a model and can no longer be changed", fn,
                         what, kind_of(m), m->name);
    return SNN_OK;
}

/* ---- containers ---- */

snn_status snn_sequential_create(snn_module **out) {
    SNN_TRY(need_out("snn_sequential_create", out));
    return finished("snn_sequential_create", snn_sequential_new(), out);
}

static int height(const snn_module *m) {
    int h = 0;
    for (int i = 0; i < m->n_children; i++) {
        int c = height(m->children[i]);
        if (c > h) h = c;
    }
    return h + 1;
}

static int depth(const snn_module *m) {
    int d = 0;
    for (; m; m = m->parent) d++;
    return d;
}

/* The checks every adoption needs: child free-standing, no cycle, bounded depth. */
static snn_status can_adopt(const char *fn, const snn_module *parent, const snn_module *child) {
    SNN_TRY(changeable(fn, child, "the child"));
    if (child->parent)
        return snn_error(SNN_E_STATE,
                         "%s: the %s module already belongs to a %s; a module can be added to one container, once",
                         fn, kind_of(child), kind_of(child->parent));
    if (parent) {
        for (const snn_module *a = parent; a; a = a->parent)
            if (a == child)
                return snn_error(SNN_E_INVALID, "%s: a %s cannot be added to itself or to one of its descendants",
                                 fn, kind_of(child));
        if (depth(parent) + height(child) > API_MAX_DEPTH)
            return snn_error(SNN_E_INVALID, "%s: containers nested deeper than %d levels", fn, API_MAX_DEPTH);
    } else if (height(child) + 1 > API_MAX_DEPTH) {
        return snn_error(SNN_E_INVALID, "%s: containers nested deeper than %d levels", fn, API_MAX_DEPTH);
    }
    return SNN_OK;
}

static int local_named(const snn_module *m) { return m->name[0] && strcmp(m->name, "@"); }

static const snn_module *sibling_named(const snn_module *parent, const char *name, const snn_module *self) {
    for (int i = 0; i < parent->n_children; i++)
        if (parent->children[i] != self && !strcmp(parent->children[i]->name, name)) return parent->children[i];
    return NULL;
}

snn_status snn_sequential_add(snn_module *seq, snn_module *child) {
    const char *fn = "snn_sequential_add";
    SNN_TRY(changeable(fn, seq, "the container"));
    if (!snn_module_kind_is(seq, SNN_KIND_SEQUENTIAL))
        return snn_error(SNN_E_INVALID, "%s: modules can only be added to a Sequential, not to a %s", fn,
                         kind_of(seq));
    SNN_TRY(can_adopt(fn, seq, child));
    if (local_named(child) && sibling_named(seq, child->name, NULL))
        return snn_error(SNN_E_INVALID, "%s: this Sequential already has a child named \"%s\"", fn, child->name);
    /* Grow the array here rather than with snn_module_add_child, which frees the child when
     * it runs out of memory: on failure the caller keeps it. */
    snn_module **c = realloc(seq->children, sizeof *c * (size_t)(seq->n_children + 1));
    if (!c) return snn_error(SNN_E_NOMEM, "%s: out of memory", fn);
    seq->children = c;
    c[seq->n_children++] = child;
    child->parent = seq;
    return SNN_OK;
}

snn_status snn_residual_create(snn_module *inner, snn_module **out) {
    const char *fn = "snn_residual_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(can_adopt(fn, NULL, inner));
    if (local_named(inner))
        return snn_error(SNN_E_INVALID, "%s: the inner module is named \"%s\", but it shares the residual's name; "
                                        "name the Residual instead", fn, inner->name);
    /* snn_residual_new frees its inner module when it fails: give it a placeholder and swap
     * the caller's module in only once the residual exists. */
    snn_module *placeholder = snn_flatten_new();
    if (!placeholder) return snn_error(SNN_E_NOMEM, "%s: out of memory", fn);
    snn_module *r = snn_residual_new(placeholder);
    if (!r) return snn_error(SNN_E_NOMEM, "%s: out of memory", fn);
    r->children[0] = inner;
    inner->parent = r;
    snn_module_free(placeholder);
    /* Transparent: the inner module is named like the residual (no extra ".0" level). */
    snprintf(inner->name, sizeof inner->name, "@");
    *out = r;
    return SNN_OK;
}

/* ---- layers ---- */

snn_status snn_linear_create(int in_features, int out_features, int bias, snn_module **out) {
    const char *fn = "snn_linear_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "in_features", in_features));
    SNN_TRY(positive(fn, "out_features", out_features));
    return finished(fn, snn_linear_new(in_features, out_features, bias != 0), out);
}

static snn_status conv_args(const char *fn, int in, int outc, int kernel, int stride, int padding) {
    SNN_TRY(positive(fn, "in_channels", in));
    SNN_TRY(positive(fn, "out_channels", outc));
    SNN_TRY(positive(fn, "kernel", kernel));
    SNN_TRY(positive(fn, "stride", stride));
    if (padding < 0 || padding > API_MAX_DIM)
        return snn_error(SNN_E_INVALID, "%s: padding must be in [0, %d], got %d", fn, API_MAX_DIM, padding);
    return SNN_OK;
}

snn_status snn_conv1d_create(int in_channels, int out_channels, int kernel, int stride, int padding, int bias,
                             snn_module **out) {
    const char *fn = "snn_conv1d_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(conv_args(fn, in_channels, out_channels, kernel, stride, padding));
    return finished(fn, snn_conv1d_new(in_channels, out_channels, kernel, stride, padding, bias != 0), out);
}

snn_status snn_conv2d_create(int in_channels, int out_channels, int kernel, int stride, int padding, int bias,
                             snn_module **out) {
    const char *fn = "snn_conv2d_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(conv_args(fn, in_channels, out_channels, kernel, stride, padding));
    return finished(fn, snn_conv2d_new(in_channels, out_channels, kernel, stride, padding, bias != 0), out);
}

static snn_status eps_arg(const char *fn, float eps) {
    if (!(eps >= 0.0f) || !isfinite(eps))
        return snn_error(SNN_E_INVALID, "%s: eps must be a finite value >= 0, got %g", fn, (double)eps);
    return SNN_OK;
}

snn_status snn_batchnorm_create(int features, float eps, float momentum, snn_module **out) {
    const char *fn = "snn_batchnorm_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "features", features));
    SNN_TRY(eps_arg(fn, eps));
    if (!(momentum >= 0.0f && momentum <= 1.0f))
        return snn_error(SNN_E_INVALID, "%s: momentum must be in [0, 1], got %g", fn, (double)momentum);
    return finished(fn, snn_batchnorm_new(features, eps, momentum), out);
}

snn_status snn_layernorm_create(int features, float eps, snn_module **out) {
    const char *fn = "snn_layernorm_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "features", features));
    SNN_TRY(eps_arg(fn, eps));
    return finished(fn, snn_layernorm_new(features, eps), out);
}

snn_status snn_rmsnorm_create(int features, float eps, snn_module **out) {
    const char *fn = "snn_rmsnorm_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "features", features));
    SNN_TRY(eps_arg(fn, eps));
    return finished(fn, snn_rmsnorm_new(features, eps), out);
}

static snn_status pool_args(const char *fn, int kernel, int stride, int padding) {
    SNN_TRY(positive(fn, "kernel", kernel));
    if (stride < 0 || stride > API_MAX_DIM)
        return snn_error(SNN_E_INVALID, "%s: stride must be in [0, %d] (0: the kernel size), got %d", fn,
                         API_MAX_DIM, stride);
    if (padding < 0 || padding > kernel / 2)
        return snn_error(SNN_E_INVALID, "%s: padding must be in [0, kernel/2 = %d], got %d", fn, kernel / 2,
                         padding);
    return SNN_OK;
}

snn_status snn_maxpool2d_create(int kernel, int stride, int padding, snn_module **out) {
    const char *fn = "snn_maxpool2d_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(pool_args(fn, kernel, stride, padding));
    return finished(fn, snn_maxpool2d_new(kernel, stride, padding), out);
}

snn_status snn_avgpool2d_create(int kernel, int stride, int padding, snn_module **out) {
    const char *fn = "snn_avgpool2d_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(pool_args(fn, kernel, stride, padding));
    return finished(fn, snn_avgpool2d_new(kernel, stride, padding), out);
}

snn_status snn_dropout_create(float p, snn_module **out) {
    const char *fn = "snn_dropout_create";
    SNN_TRY(need_out(fn, out));
    /* p = 1 would scale the (empty) kept set by 1/0. */
    if (!(p >= 0.0f && p < 1.0f))
        return snn_error(SNN_E_INVALID, "%s: p must be in [0, 1), got %g", fn, (double)p);
    return finished(fn, snn_dropout_new(p), out);
}

snn_status snn_flatten_create(snn_module **out) {
    SNN_TRY(need_out("snn_flatten_create", out));
    return finished("snn_flatten_create", snn_flatten_new(), out);
}

snn_status snn_gelu_create(snn_module **out) {
    SNN_TRY(need_out("snn_gelu_create", out));
    return finished("snn_gelu_create", snn_gelu_new(), out);
}

/* rank 1..4, every dimension >= 1, element count without overflow. */
static snn_status shape_arg(const char *fn, int rank, const int *shape, snn_shape *s) {
    if (rank < 1 || rank > SNN_MAX_RANK)
        return snn_error(SNN_E_INVALID, "%s: rank must be in [1, %d], got %d", fn, SNN_MAX_RANK, rank);
    if (!shape) return null_handle(fn, "the shape");
    snn_shape r = {rank, {1, 1, 1, 1}};
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1 || shape[i] > API_MAX_DIM)
            return snn_error(SNN_E_INVALID, "%s: dimension %d must be in [1, %d], got %d", fn, i, API_MAX_DIM,
                             shape[i]);
        n *= (size_t)shape[i];
        if (n > (size_t)1 << 40)
            return snn_error(SNN_E_INVALID, "%s: a sample of more than 2^40 elements", fn);
        r.d[i] = shape[i];
    }
    *s = r;
    return SNN_OK;
}

snn_status snn_reshape_create(int rank, const int *shape, snn_module **out) {
    const char *fn = "snn_reshape_create";
    snn_shape s;
    SNN_TRY(need_out(fn, out));
    SNN_TRY(shape_arg(fn, rank, shape, &s));
    return finished(fn, snn_reshape_new(s), out);
}

snn_status snn_token_mean_create(snn_module **out) {
    SNN_TRY(need_out("snn_token_mean_create", out));
    return finished("snn_token_mean_create", snn_token_mean_new(), out);
}

/* ---- neurons ---- */

snn_status snn_neuron_create(const snn_neuron_opts *o, snn_module **out) {
    const char *fn = "snn_neuron_create";
    SNN_TRY(need_out(fn, out));
    snn_neuron_opts d = o ? *o : snn_neuron_defaults(SNN_NEURON_LIF);
    if (snn_neuron_opts_validate(&d) != SNN_OK) return snn_error_prefix(SNN_E_INVALID, "%s", fn);
    return finished(fn, snn_neuron_module_new(&d), out);
}

/* ---- spiking self-attention ---- */

snn_status snn_ssa_core_create(int heads, float scale, snn_module **out) {
    const char *fn = "snn_ssa_core_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "heads", heads));
    if (!(scale > 0.0f) || !isfinite(scale))
        return snn_error(SNN_E_INVALID, "%s: scale must be a finite value > 0, got %g", fn, (double)scale);
    return finished(fn, snn_ssa_core_new(heads, scale), out);
}

/* Add an internally made child under a local name; frees it when adding fails. */
static snn_status add_named(snn_module *seq, snn_module *child, const char *name) {
    if (!child) return snn_error(SNN_E_NOMEM, "out of memory");
    snprintf(child->name, sizeof child->name, "%s", name);
    snn_status st = snn_sequential_add(seq, child);
    if (st != SNN_OK) snn_module_free(child);
    return st;
}

static snn_neuron_opts spk_lif(float v_threshold) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.tau = 2.0f;
    o.detach_reset = 1;
    o.v_threshold = v_threshold;
    return o;
}

/* conv1x1 (no bias) -> BatchNorm1d -> LIF as <name>, <name>_bn, <name>_lif. */
static snn_status add_proj(snn_module *seq, const char *name, int in, int outc) {
    char bn[48], lif[48];
    snprintf(bn, sizeof bn, "%s_bn", name);
    snprintf(lif, sizeof lif, "%s_lif", name);
    snn_neuron_opts o = spk_lif(1.0f);
    SNN_TRY(add_named(seq, snn_conv1d_new(in, outc, 1, 1, 0, 0), name));
    SNN_TRY(add_named(seq, snn_batchnorm_new(outc, 1e-5f, 0.1f), bn));
    return add_named(seq, snn_neuron_module_new(&o), lif);
}

snn_status snn_spiking_self_attention_create(int dim, int heads, float scale, snn_module **out) {
    const char *fn = "snn_spiking_self_attention_create";
    SNN_TRY(need_out(fn, out));
    SNN_TRY(positive(fn, "dim", dim));
    SNN_TRY(positive(fn, "heads", heads));
    if (dim % heads) return snn_error(SNN_E_INVALID, "%s: dim %d is not divisible by %d heads", fn, dim, heads);
    if (scale == 0.0f) scale = 0.125f;
    if (!(scale > 0.0f) || !isfinite(scale))
        return snn_error(SNN_E_INVALID, "%s: scale must be a finite value > 0 (or 0 for 0.125), got %g", fn,
                         (double)scale);
    snn_module *seq = snn_sequential_new();
    if (!seq) return snn_error(SNN_E_NOMEM, "%s: out of memory", fn);
    snn_neuron_opts alif = spk_lif(0.5f);
    snn_status st = add_proj(seq, "qkv", dim, 3 * dim);
    if (st == SNN_OK) st = add_named(seq, snn_ssa_core_new(heads, scale), "core");
    if (st == SNN_OK) st = add_named(seq, snn_neuron_module_new(&alif), "attn_lif");
    if (st == SNN_OK) st = add_proj(seq, "proj", dim, dim);
    if (st == SNN_OK) st = snn_residual_create(seq, out);
    if (st != SNN_OK) {
        snn_module_free(seq);
        return snn_error_prefix(st, "%s", fn);
    }
    return SNN_OK;
}

/* ---- handles ---- */

snn_status snn_module_set_name(snn_module *m, const char *name) {
    const char *fn = "snn_module_set_name";
    SNN_TRY(changeable(fn, m, "the module"));
    if (!name) return null_handle(fn, "the name");
    size_t n = strlen(name);
    int ok = n >= 1 && n <= API_NAME_MAX && (name[0] == '_' || (name[0] >= 'A' && name[0] <= 'Z') ||
                                             (name[0] >= 'a' && name[0] <= 'z'));
    for (size_t i = 1; ok && i < n; i++) {
        char c = name[i];
        ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    }
    if (!ok)
        return snn_error(SNN_E_INVALID,
                         "%s: \"%.40s\" is not a module name (letters, digits and '_', not starting with a digit, "
                         "1 to %d characters)",
                         fn, name, API_NAME_MAX);
    if (snn_module_kind_is(m->parent, SNN_KIND_RESIDUAL))
        return snn_error(SNN_E_INVALID, "%s: the inner module of a Residual shares the residual's name; name the "
                                        "Residual instead", fn);
    if (m->parent && sibling_named(m->parent, name, m))
        return snn_error(SNN_E_INVALID, "%s: this %s already has a child named \"%s\"", fn, kind_of(m->parent),
                         name);
    snprintf(m->name, sizeof m->name, "%s", name);
    return SNN_OK;
}

const char *snn_module_name(const snn_module *m) {
    if (!m) return NULL;
    return strcmp(m->name, "@") ? m->name : "";
}

const char *snn_module_kind(const snn_module *m) { return m ? kind_of(m) : NULL; }

int snn_module_num_children(const snn_module *m) { return m ? m->n_children : 0; }

snn_status snn_module_destroy(snn_module *m) {
    if (!m) return SNN_OK;
    if (m->sealed)
        return snn_error(SNN_E_STATE, "snn_module_destroy: the %s \"%s\" belongs to a model; snn_model_free frees it",
                         kind_of(m), m->name);
    if (m->parent)
        return snn_error(SNN_E_STATE, "snn_module_destroy: the %s belongs to a %s, which frees it", kind_of(m),
                         kind_of(m->parent));
    snn_module_free(m);
    return SNN_OK;
}

/* ---- models ---- */

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const snn_tensor_entry *const *)a)->name, (*(const snn_tensor_entry *const *)b)->name);
}

static void longest_name(snn_module *m, void *ctx) {
    size_t *n = ctx;
    size_t l = strlen(m->name);
    if (l > *n) *n = l;
}

/* Checkpoints key tensors by their dotted names: a name cut at the buffer's end, or two
 * equal names, would silently overwrite one tensor with another. */
static snn_status check_names(snn_model *m) {
    size_t longest = 0;
    snn_module_walk(m->root, longest_name, &longest);
    if (longest + 1 >= SNN_NAME_MAX)
        return snn_error(SNN_E_INVALID, "a dotted module name is longer than %d characters; use shorter names",
                         SNN_NAME_MAX - 2);
    if (m->n_tensors < 2) return SNN_OK;
    const snn_tensor_entry **v = malloc(m->n_tensors * sizeof *v);
    if (!v) return snn_error(SNN_E_NOMEM, "out of memory");
    for (size_t i = 0; i < m->n_tensors; i++) v[i] = &m->tensors[i];
    qsort(v, m->n_tensors, sizeof *v, cmp_name);
    snn_status st = SNN_OK;
    for (size_t i = 1; i < m->n_tensors && st == SNN_OK; i++)
        if (!strcmp(v[i]->name, v[i - 1]->name))
            st = snn_error(SNN_E_INVALID, "two tensors are named \"%s\"; give the modules distinct names",
                           v[i]->name);
    free(v);
    return st;
}

snn_status snn_model_create_from_module(snn_module *root, int rank, const int *shape, uint64_t seed,
                                        snn_model **out) {
    const char *fn = "snn_model_create_from_module";
    if (!out) return null_handle(fn, "the output pointer");
    *out = NULL;
    SNN_TRY(can_adopt(fn, NULL, root));
    snn_shape in;
    SNN_TRY(shape_arg(fn, rank, shape, &in));
    snn_model *m = NULL;
    /* snn_model_build owns root from here on, and frees it when setup fails. */
    SNN_TRY(snn_model_build(root, "custom", "{\"model\":\"custom\"}", in, seed, &m));
    snn_status st = check_names(m);
    if (st != SNN_OK) {
        snn_model_free(m);
        return snn_error_prefix(st, "%s", fn);
    }
    *out = m;
    return SNN_OK;
}

const snn_module *snn_model_root(const snn_model *m) { return m ? m->root : NULL; }
