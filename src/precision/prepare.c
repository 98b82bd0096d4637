/* snn_prepare_model_for_precision: capability check, analysis and conversion report,
 * module conversion, neuron precision, loss scaler (reference spikingjelly-core.md §6.2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "neuron/neuron_module.h"
#include "nn/layers_conv.h"
#include "backend/backend.h"
#include "optim/optim_internal.h"
#include "precision/runtime.h"

/* ---------- module classification (on the unconverted model) ---------- */

typedef enum { CLS_NONE, CLS_LINEAR, CLS_CONV1D_PW, CLS_LAYERNORM, CLS_HIGH, CLS_UNSUPPORTED } module_class;

/* snn_module_kind_is reads the module's own table, so these hold on a converted model too. */
static int is_linear(const snn_module *m) { return snn_module_kind_is(m, SNN_KIND_LINEAR); }
static int is_layernorm(const snn_module *m) { return snn_module_kind_is(m, SNN_KIND_LAYERNORM); }
static int is_gemm(const snn_module *m) {
    return is_linear(m) || snn_module_kind_is(m, SNN_KIND_CONV1D) || snn_module_kind_is(m, SNN_KIND_CONV2D);
}

static module_class classify(const snn_module *m, int fp8) {
    if (is_linear(m)) return CLS_LINEAR;
    if (snn_module_kind_is(m, SNN_KIND_CONV1D)) return snn_conv1d_is_pointwise(m) ? CLS_CONV1D_PW : CLS_UNSUPPORTED;
    if (is_layernorm(m)) return fp8 ? CLS_LAYERNORM : CLS_HIGH;
    if (snn_module_is_neuron(m) || snn_module_kind_is(m, SNN_KIND_BATCHNORM)) return CLS_HIGH;
    if (snn_module_kind_is(m, SNN_KIND_CONV2D)) return CLS_UNSUPPORTED;
    return CLS_NONE;
}

static int gemm_dims(const snn_module *m, int *in, int *out) {
    if (m->n_params < 1) return 0;
    const snn_param *w = &m->params[0];
    if (w->shape.rank < 2) return 0;
    *out = w->shape.d[0];
    *in = w->shape.d[1];
    return 1;
}

/* FP8 alignment of a GEMM module (the guide: in % 16 == 0 and out % 8 == 0). */
static int fp8_aligned(const snn_module *m) {
    int in, out;
    return gemm_dims(m, &in, &out) && in % 16 == 0 && out % 8 == 0;
}

static const char *display_name(const snn_module *m) { return m->name[0] ? m->name : "<root>"; }

/* Sequential children that form LayerNorm -> Linear or LayerNorm -> Linear -> GELU -> Linear. */
static const char *pattern_of(const snn_module *m) {
    if (!snn_module_kind_is(m, SNN_KIND_SEQUENTIAL)) return NULL;
    snn_module *const *c = m->children;
    if (m->n_children == 2 && is_layernorm(c[0]) && is_linear(c[1]) && fp8_aligned(c[1]))
        return "LayerNormLinear";
    if (m->n_children == 4 && is_layernorm(c[0]) && is_linear(c[1]) && snn_module_kind_is(c[2], SNN_KIND_GELU) &&
        is_linear(c[3]) && fp8_aligned(c[1]) && fp8_aligned(c[3]) &&
        c[3]->out.d[c[3]->out.rank - 1] == c[0]->in.d[c[0]->in.rank - 1] && c[1]->n_params == c[3]->n_params) /* fc2.out == H, biases alike */
        return "LayerNormMLP";
    return NULL;
}

typedef struct {
    int fp8;
    int total, n_linear, n_conv, n_ln, n_converted;
    int oom; /* a cJSON allocation failed: the report is incomplete */
    cJSON *convertible, *converted, *patterns, *skipped, *high, *unsupported;
} analysis;

/* cJSON calls that note an allocation failure in *oom instead of dropping (and leaking)
 * the item: the report must be complete or prepare fails with SNN_E_NOMEM. */
static void jadd(cJSON *arr, cJSON *item, int *oom) {
    if (!item || !arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        *oom = 1;
    }
}
static void jadd_str(cJSON *arr, const char *s, int *oom) { jadd(arr, cJSON_CreateString(s), oom); }
static void jset(cJSON *obj, const char *key, cJSON *item, int *oom) {
    if (!item || !obj || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        *oom = 1;
    }
}
static void jset_str(cJSON *obj, const char *key, const char *v, int *oom) { jset(obj, key, cJSON_CreateString(v), oom); }
static void jset_num(cJSON *obj, const char *key, double v, int *oom) { jset(obj, key, cJSON_CreateNumber(v), oom); }

static void analyse(snn_module *m, analysis *a, int inside_pattern) {
    a->total++;
    module_class c = classify(m, a->fp8);
    const char *name = display_name(m);
    const char *pat = a->fp8 ? pattern_of(m) : NULL;
    if (pat && !inside_pattern) {
        cJSON *o = cJSON_CreateObject();
        jset_str(o, "module", name, &a->oom);
        jset_str(o, "pattern", pat, &a->oom);
        jset_str(o, "backend", "snn", &a->oom);
        jadd(a->patterns, o, &a->oom);
        a->n_converted++;
    }
    switch (c) {
    case CLS_LINEAR:
    case CLS_CONV1D_PW:
    case CLS_LAYERNORM:
        if (c == CLS_LINEAR) a->n_linear++;
        else if (c == CLS_CONV1D_PW) a->n_conv++;
        else a->n_ln++;
        jadd_str(a->convertible, name, &a->oom);
        if (!a->fp8) break;
        if (inside_pattern) break; /* converted as part of the pattern */
        if (c == CLS_LAYERNORM || fp8_aligned(m)) {
            jadd_str(a->converted, name, &a->oom);
            a->n_converted++;
        } else {
            jadd_str(a->skipped, name, &a->oom);
        }
        break;
    case CLS_HIGH:
        jadd_str(a->high, name, &a->oom);
        break;
    case CLS_UNSUPPORTED:
        jadd_str(a->unsupported, name, &a->oom);
        break;
    case CLS_NONE:
        if (m->n_children == 0) jadd_str(a->skipped, name, &a->oom);
        break;
    }
    for (int i = 0; i < m->n_children; i++) analyse(m->children[i], a, inside_pattern || pat != NULL);
}

static cJSON *conversion_report(snn_module *root, int fp8, int *n_converted, int *oom) {
    analysis a = {.fp8 = fp8};
    a.convertible = cJSON_CreateArray();
    a.converted = cJSON_CreateArray();
    a.patterns = cJSON_CreateArray();
    a.skipped = cJSON_CreateArray();
    a.high = cJSON_CreateArray();
    a.unsupported = cJSON_CreateArray();
    analyse(root, &a, 0);
    cJSON *r = cJSON_CreateObject();
    jset_num(r, "total_modules", a.total, &a.oom);
    jset_num(r, "convertible_linear", a.n_linear, &a.oom);
    jset_num(r, "convertible_torch_linear", 0, &a.oom); /* §6.5 key; C has one Linear type */
    jset_num(r, "convertible_pointwise_conv1d", a.n_conv, &a.oom);
    jset_num(r, "convertible_layer_norm", a.n_ln, &a.oom);
    jset(r, "convertible_modules", a.convertible, &a.oom);
    jset(r, "converted_modules", a.converted, &a.oom);
    jset(r, "converted_patterns", a.patterns, &a.oom);
    jset(r, "skipped_modules", a.skipped, &a.oom);
    jset(r, "high_precision_modules", a.high, &a.oom);
    jset(r, "unsupported_modules", a.unsupported, &a.oom);
    *n_converted = a.n_converted;
    *oom |= a.oom;
    return r;
}

/* ---------- conversion ---------- */

typedef struct {
    snn_precision *p;
    int count_only, n;
    snn_status st;
} convert_ctx;

static void wrap(convert_ctx *c, snn_module *m, snn_pm_kind kind) {
    if (c->count_only) {
        c->n++;
        return;
    }
    snn_prec_module *pm = &c->p->mods[c->n++];
    memset(pm, 0, sizeof *pm);
    pm->m = m;
    pm->orig = m->ops;
    pm->kind = kind;
    pm->p = c->p;
    if (kind != SNN_PM_NEURON) gemm_dims(m, &pm->in, &pm->out);
    if (kind == SNN_PM_FP8_LINEAR || kind == SNN_PM_FP8_CONV1D) {
        pm->spike_input = (m->precision_flags & SNN_PREC_SPIKE_INPUT) != 0;
        snn_status st = snn_fp8_state_init(&pm->sx, &c->p->fp8, SNN_FP8_ROLE_INPUT);
        if (st == SNN_OK) st = snn_fp8_state_init(&pm->sw, &c->p->fp8, SNN_FP8_ROLE_WEIGHT);
        if (st == SNN_OK) st = snn_fp8_state_init(&pm->sdy, &c->p->fp8, SNN_FP8_ROLE_GRAD);
        pm->has_fp8_state = 1;
        if (st != SNN_OK && c->st == SNN_OK) c->st = st;
    }
    m->prec = pm;
    m->own_ops = m->ops;
    m->ops = kind == SNN_PM_GEMM16 ? &snn_prec_gemm16_ops
             : kind == SNN_PM_NEURON ? &snn_prec_neuron_ops : &snn_prec_fp8_ops;
}

static void convert_visit(snn_module *m, void *ctx) {
    convert_ctx *c = ctx;
    snn_precision *p = c->p;
    int gemm = is_gemm(m);
    if (p->cfg.neuron_storage != SNN_NEURON_STORAGE_UNSET && snn_module_is_neuron(m)) {
        wrap(c, m, SNN_PM_NEURON);
        return;
    }
    /* the LM head and the attention core multiply in the mode's 16-bit type (as Megatron
     * Core's output layer and core attention: BF16 under fp8 too); FP8 for them is not a rule
     * of the reference */
    if ((snn_module_kind_is(m, SNN_KIND_LM_HEAD) || snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION)) &&
        p->cfg.mode != SNN_PRECISION_FP32) {
        wrap(c, m, SNN_PM_GEMM16);
        if (!c->count_only) c->p->mods[c->n - 1].direct_shared = p->be->gemm_rounds;
        return;
    }
    if (!gemm || p->cfg.mode == SNN_PRECISION_FP32) return;
    if (p->cfg.mode == SNN_PRECISION_FP8 && fp8_aligned(m)) {
        if (is_linear(m)) return wrap(c, m, SNN_PM_FP8_LINEAR);
        if (snn_conv1d_is_pointwise(m)) return wrap(c, m, SNN_PM_FP8_CONV1D);
    }
    wrap(c, m, SNN_PM_GEMM16);
}

/* Spike-aware FP8: mark GEMM modules whose input comes straight from a neuron (the previous
 * child of the same Sequential). Their input is 0/1, exact in E4M3 with scale 1, so the
 * amax pass and the quantisation of that operand can be skipped. */
static void mark_spike_inputs(snn_module *m) {
    if (snn_module_kind_is(m, SNN_KIND_SEQUENTIAL))
        for (int i = 1; i < m->n_children; i++)
            if (snn_module_is_neuron(m->children[i - 1])) m->children[i]->precision_flags |= SNN_PREC_SPIKE_INPUT;
    for (int i = 0; i < m->n_children; i++) mark_spike_inputs(m->children[i]);
}

typedef struct {
    cJSON *names;
    int n, oom;
} neuron_list;

static void count_neurons(snn_module *m, void *ctx) {
    neuron_list *l = ctx;
    if (snn_module_is_neuron(m)) {
        jadd_str(l->names, display_name(m), &l->oom);
        l->n++;
    }
}

/* ---------- prepare ---------- */

/* The device named must be the one the model is on (snn_model_to places it: the order is
 * device -> prepare -> optimizer). */
static snn_status check_device(const snn_model *m, const char *device, const snn_precision_config *cfg, char *norm,
                               size_t cap) {
    const char *on = snn_model_device(m);
    if (!device || !*device) device = "cpu";
    int want_cuda = !strncmp(device, "cuda", 4) && (device[4] == 0 || device[4] == ':');
    if (strcmp(device, "cpu") && !want_cuda)
        return snn_error(SNN_E_INVALID, "unknown device '%s' (use cpu, cuda or cuda:N)", device);
    int on_cuda = strcmp(on, "cpu") != 0;
    if (want_cuda && !on_cuda)
        return snn_error(SNN_E_STATE, "device '%s': the model is on the CPU; place it first with snn_model_to(model, "
                         "\"%s\") (the order is device -> prepare -> optimizer)", device, device);
    if (!want_cuda && on_cuda)
        return snn_error(SNN_E_STATE, "device 'cpu': the model was placed on %s; prepare it for that device", on);
    if (cfg->mode == SNN_PRECISION_FP8 && !snn_model_backend(m)->fp8_qdq)
        return snn_error(SNN_E_UNSUPPORTED, "precision 'fp8' on %s: this backend has no FP8 quantisation entry", on);
    snprintf(norm, cap, "%s", device);
    return SNN_OK;
}

snn_status snn_prepare_model_for_precision(snn_model *m, const char *device, const snn_precision_config *cfg_in,
                                           snn_precision **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_prepare_model_for_precision: out is NULL");
    *out = NULL;
    if (!m) return snn_error(SNN_E_INVALID, "snn_prepare_model_for_precision: model is NULL");
    if (m->optimizer_bound)
        return snn_error(SNN_E_STATE,
                         "an optimizer was created before snn_prepare_model_for_precision; the order is device -> "
                         "prepare -> optimizer (preparation changes how parameters are used, an earlier "
                         "optimizer would not follow): create the optimizer after prepare");
    if (m->precision)
        return snn_error(SNN_E_STATE, "this model is already prepared for a precision; build a fresh model to change it");
    snn_precision_config cfg = cfg_in ? *cfg_in : snn_precision_config_default();
    SNN_TRY(snn_precision_config_validate(&cfg));
    char dev[32];
    SNN_TRY(check_device(m, device, &cfg, dev, sizeof dev));

    snn_precision *p = calloc(1, sizeof *p);
    if (!p) return snn_error(SNN_E_NOMEM, "out of memory");
    p->cfg = cfg;
    p->model = m;
    p->be = snn_model_backend(m);
    snprintf(p->device, sizeof p->device, "%s", dev);
    p->half = cfg.mode == SNN_PRECISION_FP16 ? SNN_F16 : cfg.mode == SNN_PRECISION_FP32 ? SNN_F32 : SNN_BF16;
    int fp8 = cfg.mode == SNN_PRECISION_FP8;
    snn_status st = SNN_OK;
    if (fp8) {
        st = snn_fp8_recipe_params_init(&p->fp8, &cfg, 0, 0);
        p->resolved_recipe = p->fp8.recipe;
    }
    /* the report is computed on the model as it is, before conversion */
    int n_conv = 0, oom = 0;
    cJSON *report = st == SNN_OK ? conversion_report(m->root, fp8, &n_conv, &oom) : NULL;
    if (st == SNN_OK && fp8 && n_conv == 0)
        st = snn_error(SNN_E_UNSUPPORTED,
                       "precision='fp8' did not convert any model modules: FP8 needs a Linear with in %% 16 == 0 and "
                       "out %% 8 == 0, or a pointwise Conv1d with the same alignment");
    neuron_list nl = {cJSON_CreateArray(), 0, 0};
    snn_module_walk(m->root, count_neurons, &nl);
    cJSON *neurons = nl.names;
    oom |= nl.oom;
    if (st == SNN_OK && cfg.neuron_storage != SNN_NEURON_STORAGE_UNSET && nl.n == 0)
        st = snn_error(SNN_E_INVALID,
                       "neuron precision requested (neuron_storage=%s), but the model has no multi-step "
                       "IF/LIF/PLIF neurons",
                       snn_neuron_storage_name(cfg.neuron_storage));
    p->spike_fp8 = 1;
    /* SNN_FP8_GEMM: 'codes' (the default) runs a GPU's per-tensor FP8 GEMMs on FP8 codes
     * (prec_fp8_codes.c), 'emulate' keeps them on the CPU's emulation (quantise -> dequantise
     * -> FP32 GEMM: bit-exact with the CPU, 9x slower to train FC-SNN W8192 on an H100); the
     * two are an A/B in one binary */
    const char *fg = getenv("SNN_FP8_GEMM");
    if (st == SNN_OK && fg && strcmp(fg, "codes") && strcmp(fg, "emulate"))
        st = snn_error(SNN_E_INVALID, "SNN_FP8_GEMM must be 'codes' or 'emulate' (got '%s')", fg);
    p->fp8_emulate = fg && !strcmp(fg, "emulate");
    if (st == SNN_OK && fp8) mark_spike_inputs(m->root);
    if (st == SNN_OK) {
        convert_ctx cc = {.p = p, .count_only = 1};
        snn_module_walk(m->root, convert_visit, &cc);
        p->mods = calloc(cc.n ? (size_t)cc.n : 1, sizeof *p->mods);
        if (!p->mods) st = snn_error(SNN_E_NOMEM, "out of memory");
        if (st == SNN_OK) {
            convert_ctx c2 = {.p = p};
            snn_module_walk(m->root, convert_visit, &c2);
            p->n_mods = c2.n;
            st = c2.st;
        }
    }
    if (st == SNN_OK && cfg.mode == SNN_PRECISION_FP16) {
        p->use_scaler = 1;
        st = snn_loss_scaler_init(&p->scaler, NULL);
    }
    if (st == SNN_OK) {
        cJSON *top = cJSON_CreateObject();
        jset(top, "conversion_report", report, &oom);
        cJSON *nr = cJSON_CreateObject();
        jset(nr, "converted_modules", cfg.neuron_storage != SNN_NEURON_STORAGE_UNSET ? neurons : cJSON_CreateArray(),
             &oom);
        if (cfg.neuron_storage == SNN_NEURON_STORAGE_UNSET) cJSON_Delete(neurons);
        jset(nr, "unsupported_modules", cJSON_CreateArray(), &oom);
        jset(top, "neurons", nr, &oom);
        p->report = top ? cJSON_PrintUnformatted(top) : NULL;
        cJSON_Delete(top);
        report = NULL;
        neurons = NULL;
        p->neurons_converted = cfg.neuron_storage != SNN_NEURON_STORAGE_UNSET;
        if (oom || !p->report) st = snn_error(SNN_E_NOMEM, "out of memory writing the precision report");
    } else if (oom && st == SNN_OK) {
        st = snn_error(SNN_E_NOMEM, "out of memory writing the precision report");
    }
    cJSON_Delete(report);
    if (st != SNN_OK) {
        cJSON_Delete(neurons);
        m->precision = p; /* let free unwrap what was wrapped */
        snn_precision_free(p);
        return st;
    }
    m->precision = p;
    snn_precision_assign_stores(p);
    if (m->arena.base) {
        st = snn_precision_plan(p, m->T, m->N);
        if (st != SNN_OK) {
            snn_precision_free(p);
            return st;
        }
    }
    *out = p;
    return SNN_OK;
}

void snn_precision_free(snn_precision *p) {
    if (!p) return;
    /* Unwrap the modules, unless the model (and its modules) is already gone. */
    snn_precision_clear_stores(p);
    for (int i = 0; p->model && i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        pm->m->ops = pm->orig;
        pm->m->own_ops = NULL;
        pm->m->prec = NULL;
    }
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (pm->w16) p->be->free(p->be, pm->w16);
        if (pm->b16) p->be->free(p->be, pm->b16);
        if (pm->b32) p->be->free(p->be, pm->b32);
        if (p->model) pm->m->bias_rounded = NULL;
        if (pm->x16) p->be->free(p->be, pm->x16);
        if (pm->w8) p->be->free(p->be, pm->w8);
        if (pm->w8t) p->be->free(p->be, pm->w8t);
        if (pm->has_fp8_state) {
            snn_fp8_state_free(&pm->sx);
            snn_fp8_state_free(&pm->sw);
            snn_fp8_state_free(&pm->sdy);
        }
    }
    if (p->model && p->model->precision == p) p->model->precision = NULL;
    if (p->model) snn_model_graph_invalidate(p->model); /* the wrappers are gone */
    free(p->mods);
    free(p->wcopy);
    free(p->wcopy_pm);
    p->be->free(p->be, p->scratch);
    p->be->free(p->be, p->dy_scaled);
    free(p->report);
    free(p->describe);
    free(p->amax_pack);
    p->be->free(p->be, p->fp8_dev);
    free(p->fp8_host);
    free(p->fp8_used);
    free(p);
}

const snn_precision_config *snn_precision_config_of(const snn_precision *p) { return p ? &p->cfg : NULL; }
snn_precision *snn_model_precision(snn_model *m) { return m ? (snn_precision *)m->precision : NULL; }
snn_status snn_precision_set_spike_fp8(snn_precision *p, int enabled) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_set_spike_fp8: precision is NULL");
    p->spike_fp8 = enabled != 0;
    if (p->model) snn_precision_assign_stores(p); /* the FP8 codes boundaries depend on it */
    return SNN_OK;
}

int snn_precision_spike_fp8_modules(const snn_precision *p) {
    if (!p) return 0;
    int n = 0;
    for (int i = 0; i < p->n_mods; i++) n += p->mods[i].spike_input;
    return p->spike_fp8 ? n : 0;
}

float snn_precision_loss_scale(const snn_precision *p) { return !p ? NAN : p->use_scaler ? snn_loss_scaler_scale(&p->scaler) : 1.0f; }

snn_status snn_precision_plan(snn_precision *p, int T, int N) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_plan: precision is NULL");
    if (!p->model) return snn_error(SNN_E_STATE, "snn_precision_plan: the model of this precision has been freed");
    if (T <= 0 || N <= 0) return snn_error(SNN_E_INVALID, "snn_precision_plan: T and N must be positive, got %d and %d", T, N);
    size_t B = (size_t)T * (size_t)N, need = 0;
    snn_model_graph_invalidate(p->model); /* the scratch may move */
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        snn_module *m = pm->m;
        size_t nx = B * snn_shape_numel(m->in), ny = B * snn_shape_numel(m->out);
        size_t nw = m->n_params ? m->params[0].numel : 0, s;
        if (pm->kind == SNN_PM_NEURON) s = nx;
        else if (pm->direct_shared) s = 0; /* the GEMMs round */
        else if (pm->kind == SNN_PM_GEMM16) s = nx + (snn_prec_gemm_weight(pm) ? snn_prec_gemm_weight(pm)->numel : 0) + ny;
        else s = 3 * nx + 2 * ny + nw + 64; /* FP8: + the token-major region's rounding */
        if (s > need) need = s;
        /* FP8 codes (bytes) of a Linear on a table with fp8_codes */
        const size_t s8 = snn_prec_fp8_codes_scratch(p, pm, pm->in > 0 ? nx / (size_t)pm->in : 0);
        if (s8 > need) need = s8;
        if (snn_prec_gemm16_direct(p, pm) && nw && !pm->w16)
            SNN_TRY(p->be->alloc(p->be, nw * 2, &pm->w16));
        const snn_param *bias = pm->kind == SNN_PM_GEMM16 ? snn_prec_gemm_bias(pm) : NULL;
        if (pm->w16 && bias && !pm->b16) {
            SNN_TRY(p->be->alloc(p->be, bias->numel * 2, &pm->b16));
            SNN_TRY(p->be->alloc(p->be, bias->numel * 4, (void **)&pm->b32));
            pm->w16_valid = 0;
            m->bias_rounded = pm->b32;
        }
        /* a Linear's 16-bit copy of x, kept from its forward for its backward (prec_exec.c);
         * none where x is stored 16-bit already (a 16-bit boundary, assigned before the plan) */
        if (snn_prec_gemm16_direct(p, pm) && (pm->orig->flags & SNN_MODULE_TYPED_IO) && !pm->m->in_store &&
            nx > pm->x16_cap) {
            void *x16 = NULL;
            SNN_TRY(p->be->alloc(p->be, nx * 2, &x16));
            if (pm->x16) p->be->free(p->be, pm->x16);
            pm->x16 = x16;
            pm->x16_cap = nx;
            pm->x16_valid = 0;
        }
    }
    size_t ndy = B * snn_shape_numel(p->model->root->out);
    SNN_TRY(snn_prec_fp8_codes_plan(p));
    if (!p->wcopy && p->n_mods) { /* host arrays the step fills (prec_wcopy.c) */
        p->wcopy = calloc(2 * (size_t)p->n_mods, sizeof *p->wcopy);
        p->wcopy_pm = calloc(2 * (size_t)p->n_mods, sizeof *p->wcopy_pm);
        if (!p->wcopy || !p->wcopy_pm) {
            free(p->wcopy);
            free(p->wcopy_pm);
            p->wcopy = NULL;
            p->wcopy_pm = NULL;
            return snn_error(SNN_E_NOMEM, "out of memory for the precision's weight-copy list (%d modules)", p->n_mods);
        }
    }
    /* on the model's device; planned once per (T, N), nothing is allocated in a step */
    if (need > p->scratch_cap) {
        float *s = NULL;
        SNN_TRY(p->be->alloc(p->be, need * sizeof(float), (void **)&s));
        p->be->free(p->be, p->scratch);
        p->scratch = s;
        p->scratch_cap = need;
    }
    if (ndy > p->dy_cap) {
        float *s = NULL;
        SNN_TRY(p->be->alloc(p->be, ndy * sizeof(float), (void **)&s));
        p->be->free(p->be, p->dy_scaled);
        p->dy_scaled = s;
        p->dy_cap = ndy;
    }
    return SNN_OK;
}

/* ---------- the training step ---------- */

snn_status snn_precision_fp8_after_step(snn_precision *p) {
    SNN_TRY(snn_precision_fp8_flush(p)); /* the step's amaxes from the device (codes path) */
    if (p->sync.amax) SNN_TRY(snn_precision_sync_amax(p));
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (!pm->has_fp8_state) continue;
        SNN_TRY(snn_fp8_state_update(&pm->sx, &p->fp8));
        SNN_TRY(snn_fp8_state_update(&pm->sw, &p->fp8));
        SNN_TRY(snn_fp8_state_update(&pm->sdy, &p->fp8));
        /* delayed scaling hands its new scales to the FP8 kernels by value */
        if (p->fp8.recipe == SNN_FP8_RECIPE_DELAYED) snn_model_graph_invalidate(p->model);
    }
    return SNN_OK;
}

snn_status snn_precision_backward(snn_precision *p, const float *dy, snn_optimizer *opt, float lr, float clip_norm,
                                  float *grad_norm, int *skipped) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_backward: precision is NULL");
    if (!dy) return snn_error(SNN_E_INVALID, "snn_precision_backward: dy is NULL");
    if (!opt) return snn_error(SNN_E_INVALID, "snn_precision_backward needs an optimizer");
    snn_model *m = p->model;
    if (!m) return snn_error(SNN_E_STATE, "snn_precision_backward: the model of this precision has been freed");
    /* An optimizer of another model would step that model's weights with its (zero)
     * gradients: this one would silently train nothing. */
    if (!snn_optimizer_for_model(opt, m))
        return snn_error(SNN_E_INVALID, "snn_precision_backward: the optimizer was created for another model "
                         "(create it with snn_optimizer_create_for_model on this precision's model)");
    if (m->T <= 0 || !m->last_x)
        return snn_error(SNN_E_STATE, "snn_precision_backward: no forward pass to differentiate (plan and run forward first)");
    size_t n = snn_model_num_params(m);
    size_t ndy = (size_t)m->T * m->N * snn_shape_numel(m->root->out);
    const snn_backend *be = p->be;
    float *grads = m->grad_store; /* on the model's device */
    snn_model_zero_grad(m);
    const float *g;
    SNN_TRY(snn_model_stage_dy(m, dy, &g));
    if (p->use_scaler) {
        SNN_TRY(be->scale(be, p->dy_scaled, g, snn_loss_scaler_scale(&p->scaler), ndy));
        g = p->dy_scaled;
    }
    SNN_TRY(snn_model_backward_stored(m, g));
    if (p->sync.grads) SNN_TRY(p->sync.grads(p->sync.ctx, grads, n));
    int found_inf = 0;
    if (p->use_scaler) {
        /* torch's unscale: flag inf/NaN, multiply by float(1/double(scale)) */
        int bad = 0;
        SNN_TRY(be->nonfinite(be, grads, n, &bad));
        SNN_TRY(be->scale(be, grads, grads, (float)(1.0 / (double)snn_loss_scaler_scale(&p->scaler)), n));
        found_inf = bad;
    }
    if (p->use_scaler && p->sync.overflow) SNN_TRY(p->sync.overflow(p->sync.ctx, &found_inf));
    /* A negative max_norm only measures. Without a loss scaler a non-finite gradient is not
     * skipped here: the caller sees it in the norm and the loss. */
    float norm = NAN;
    if ((clip_norm > 0 || grad_norm) && !found_inf) SNN_TRY(snn_clip_grad_norm_on(be, grads, n, clip_norm > 0 ? clip_norm : -1.0f, &norm));
    /* the update writes the 16-bit weight copies the next forward would cast (prec_wcopy.c) */
    int all = 0;
    const int k = found_inf ? 0 : snn_prec_weight_copies(p, opt, &all);
    SNN_TRY(snn_optimizer_step_copies(opt, lr, found_inf, 1.0f, k ? p->wcopy : NULL, k));
    if (k) snn_prec_weight_copies_written(p, k, all);
    if (p->use_scaler) SNN_TRY(snn_loss_scaler_update(&p->scaler, found_inf));
    SNN_TRY(snn_precision_fp8_after_step(p));
    if (grad_norm) *grad_norm = norm;
    if (skipped) *skipped = found_inf && p->use_scaler;
    return SNN_OK;
}

/* ---------- describe ---------- */

const char *snn_precision_describe(snn_precision *p) {
    if (!p) return NULL;
    char cfgjson[1024];
    if (snn_precision_config_to_json(&p->cfg, cfgjson, sizeof cfgjson) != SNN_OK) snprintf(cfgjson, sizeof cfgjson, "{}");
    cJSON *top = cJSON_CreateObject();
    cJSON_AddItemToObject(top, "config", cJSON_Parse(cfgjson));
    const char *mode = snn_precision_mode_name(p->cfg.mode);
    cJSON *pol = cJSON_CreateObject();
    cJSON_AddStringToObject(pol, "name", mode);
    const int on_cuda = p->be->device == SNN_DEVICE_CUDA;
    cJSON_AddStringToObject(pol, "device_type", on_cuda ? "cuda" : "cpu");
    cJSON_AddBoolToObject(pol, "autocast", p->cfg.mode != SNN_PRECISION_FP32);
    if (p->cfg.mode != SNN_PRECISION_FP32) cJSON_AddStringToObject(pol, "dtype", snn_dtype_name(p->half));
    cJSON_AddBoolToObject(pol, "grad_scaler", p->use_scaler);
    if (p->cfg.mode == SNN_PRECISION_FP8) {
        cJSON_AddStringToObject(pol, "backend", "snn-cpu-exact");
        cJSON_AddStringToObject(pol, "fp8_recipe", snn_fp8_recipe_name(p->cfg.fp8_recipe));
        cJSON_AddStringToObject(pol, "resolved_fp8_recipe", snn_fp8_recipe_name(p->resolved_recipe));
        cJSON_AddStringToObject(pol, "forward_dtype", snn_dtype_name(p->fp8.fwd_dtype));
        cJSON_AddStringToObject(pol, "backward_dtype", snn_dtype_name(p->fp8.bwd_dtype));
        cJSON *spk = cJSON_CreateArray();
        for (int i = 0; p->spike_fp8 && i < p->n_mods; i++)
            if (p->mods[i].spike_input) cJSON_AddItemToArray(spk, cJSON_CreateString(p->mods[i].m->name));
        cJSON_AddItemToObject(pol, "spike_fp8_modules", spk);
    }
    cJSON_AddItemToObject(top, "policy", pol);
    cJSON *cap = cJSON_CreateObject();
    cJSON_AddStringToObject(cap, "requested_mode", mode);
    cJSON_AddStringToObject(cap, "device", p->device);
    cJSON_AddStringToObject(cap, "device_type", on_cuda ? "cuda" : "cpu");
#ifdef SNN_HAVE_CUDA
    cJSON_AddBoolToObject(cap, "cuda_built", 1);
#else
    cJSON_AddBoolToObject(cap, "cuda_built", 0);
#endif
    cJSON_AddBoolToObject(cap, "can_convert", 1);
    cJSON_AddBoolToObject(cap, "can_execute", 1);
    if (p->cfg.mode == SNN_PRECISION_FP8) {
        cJSON_AddStringToObject(cap, "fp8_recipe_requested", snn_fp8_recipe_name(p->cfg.fp8_recipe));
        cJSON_AddStringToObject(cap, "fp8_recipe_resolved", snn_fp8_recipe_name(p->resolved_recipe));
    }
    cJSON_AddStringToObject(cap, "execution_note",
                            p->cfg.mode == SNN_PRECISION_FP8 && on_cuda && p->be->fp8_codes && !p->fp8_emulate &&
                                    (p->fp8.recipe == SNN_FP8_RECIPE_DELAYED || p->fp8.recipe == SNN_FP8_RECIPE_CURRENT)
                                ? "CUDA: FP8 GEMMs on FP8 codes (cuBLASLt, one factor per operand, FP32 "
                                  "accumulation), the products of the CPU reference's quantise -> dequantise -> FP32 "
                                  "GEMM, for Linear and pointwise Conv1d; recipe auto resolves as on Hopper (sm_90): "
                                  "delayed"
                            : p->cfg.mode == SNN_PRECISION_FP8
                                ? (on_cuda ? "CUDA: FP8 GEMMs as the CPU reference: quantise -> dequantise -> FP32 GEMM "
                                             "(the block and mxfp8 recipes); recipe auto resolves as on Hopper (sm_90): "
                                             "delayed"
                                           : "CPU reference: FP8 GEMMs run exactly as quantise -> dequantise -> FP32 "
                                             "GEMM; recipe auto resolves as on Hopper (sm_90): delayed")
                            : on_cuda ? (p->cfg.mode == SNN_PRECISION_FP32
                                             ? "CUDA: FP32 GEMMs without TF32, the CPU reference's rules"
                                             : "CUDA: 16-bit GEMMs with FP32 accumulation on operands rounded as the CPU "
                                               "reference rounds them (RNE)")
                            : p->cfg.mode == SNN_PRECISION_FP32
                                ? "CPU reference: FP32 everywhere"
                                : "CPU reference: 16-bit GEMM operands are rounded exactly (RNE), FP32 accumulation");
    cJSON_AddItemToObject(top, "capability_report", cap);
    cJSON *rep = cJSON_Parse(p->report);
    cJSON_AddItemToObject(top, "conversion_report", cJSON_DetachItemFromObject(rep, "conversion_report"));
    cJSON_AddItemToObject(top, "neurons", cJSON_DetachItemFromObject(rep, "neurons"));
    cJSON_Delete(rep);
    free(p->describe);
    p->describe = cJSON_Print(top);
    cJSON_Delete(top);
    return p->describe ? p->describe : "{}";
}
