/* The distributed vision run configurations: defaults, the closed registries of dotted
 * names, validation in the reference's order (spikingjelly-distributed.md §2.1-2.5, 2.9),
 * equality. The JSON form is in vision_config_json.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/vision.h"

/* ---- kwargs ------------------------------------------------------------------------- */

static snn_kwarg *kw_slot(snn_kwargs *k, const char *key) {
    if (!key || !key[0] || strlen(key) >= sizeof k->items[0].key) {
        snn_error(SNN_E_INVALID, "keyword argument name \"%s\" is empty or longer than 31 characters",
                  key ? key : "");
        return NULL;
    }
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->items[i].key, key)) return &k->items[i];
    if (k->n >= SNN_VISION_KWARGS_MAX) {
        snn_error(SNN_E_INVALID, "too many keyword arguments (at most %d)", SNN_VISION_KWARGS_MAX);
        return NULL;
    }
    snn_kwarg *e = &k->items[k->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    return e;
}

snn_status snn_kwargs_set_number(snn_kwargs *k, const char *key, double v) {
    snn_kwarg *e = kw_slot(k, key);
    if (!e) return SNN_E_INVALID;
    e->type = SNN_KWARG_NUMBER;
    e->num[0] = v;
    e->num[1] = 0;
    e->str[0] = 0;
    return SNN_OK;
}

snn_status snn_kwargs_set_bool(snn_kwargs *k, const char *key, int v) {
    snn_kwarg *e = kw_slot(k, key);
    if (!e) return SNN_E_INVALID;
    e->type = SNN_KWARG_BOOL;
    e->num[0] = v ? 1 : 0;
    e->num[1] = 0;
    e->str[0] = 0;
    return SNN_OK;
}

snn_status snn_kwargs_set_string(snn_kwargs *k, const char *key, const char *v) {
    if (!v || strlen(v) >= sizeof k->items[0].str)
        return snn_error(SNN_E_INVALID, "keyword argument %s: the string is missing or too long", key);
    snn_kwarg *e = kw_slot(k, key);
    if (!e) return SNN_E_INVALID;
    e->type = SNN_KWARG_STRING;
    e->num[0] = e->num[1] = 0;
    snprintf(e->str, sizeof e->str, "%s", v);
    return SNN_OK;
}

snn_status snn_kwargs_set_pair(snn_kwargs *k, const char *key, double a, double b) {
    snn_kwarg *e = kw_slot(k, key);
    if (!e) return SNN_E_INVALID;
    e->type = SNN_KWARG_PAIR;
    e->num[0] = a;
    e->num[1] = b;
    e->str[0] = 0;
    return SNN_OK;
}

const snn_kwarg *snn_kwargs_get(const snn_kwargs *k, const char *key) {
    for (int i = 0; k && i < k->n; i++)
        if (!strcmp(k->items[i].key, key)) return &k->items[i];
    return NULL;
}

static int kwarg_equal(const snn_kwarg *a, const snn_kwarg *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case SNN_KWARG_STRING: return !strcmp(a->str, b->str);
    case SNN_KWARG_PAIR: return a->num[0] == b->num[0] && a->num[1] == b->num[1];
    default: return a->num[0] == b->num[0];
    }
}

int snn_kwargs_equal(const snn_kwargs *a, const snn_kwargs *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
        const snn_kwarg *o = snn_kwargs_get(b, a->items[i].key);
        if (!o || !kwarg_equal(&a->items[i], o)) return 0;
    }
    return 1;
}

/* ---- registries --------------------------------------------------------------------- */

typedef struct {
    const char *key;
    snn_kwarg_type type;
} reg_key;

typedef struct {
    const char *name;
    reg_key keys[8];
} reg_entry;

static const reg_entry datasets[] = {
    {"snn.data.fashion_mnist", {{"root", SNN_KWARG_STRING}}},
    {"snn.data.synthetic",
     {{"samples", SNN_KWARG_NUMBER}, {"validation_samples", SNN_KWARG_NUMBER}, {"channels", SNN_KWARG_NUMBER},
      {"height", SNN_KWARG_NUMBER}, {"width", SNN_KWARG_NUMBER}, {"classes", SNN_KWARG_NUMBER},
      {"seed", SNN_KWARG_NUMBER}}},
    {"snn.data.idx",
     {{"train_images", SNN_KWARG_STRING}, {"train_labels", SNN_KWARG_STRING}, {"images", SNN_KWARG_STRING},
      {"labels", SNN_KWARG_STRING}}},
    {"snn.data.digits_csv", {{"path", SNN_KWARG_STRING}, {"validation_fraction", SNN_KWARG_NUMBER}}},
    {NULL, {{0}}},
};
static const reg_entry optimizers[] = {
    {"torch.optim.SGD",
     {{"lr", SNN_KWARG_NUMBER}, {"momentum", SNN_KWARG_NUMBER}, {"dampening", SNN_KWARG_NUMBER},
      {"weight_decay", SNN_KWARG_NUMBER}, {"nesterov", SNN_KWARG_BOOL}}},
    {"torch.optim.Adam",
     {{"lr", SNN_KWARG_NUMBER}, {"betas", SNN_KWARG_PAIR}, {"eps", SNN_KWARG_NUMBER},
      {"weight_decay", SNN_KWARG_NUMBER}}},
    {"torch.optim.AdamW",
     {{"lr", SNN_KWARG_NUMBER}, {"betas", SNN_KWARG_PAIR}, {"eps", SNN_KWARG_NUMBER},
      {"weight_decay", SNN_KWARG_NUMBER}}},
    {NULL, {{0}}},
};
static const reg_entry losses[] = {
    {"torch.nn.functional.cross_entropy", {{0}}},
    {"torch.nn.functional.mse_loss", {{0}}},
    {NULL, {{0}}},
};
static const reg_entry schedulers[] = {
    {"torch.optim.lr_scheduler.CosineAnnealingLR", {{"T_max", SNN_KWARG_NUMBER}, {"eta_min", SNN_KWARG_NUMBER}}},
    {"torch.optim.lr_scheduler.StepLR", {{"step_size", SNN_KWARG_NUMBER}, {"gamma", SNN_KWARG_NUMBER}}},
    {"torch.optim.lr_scheduler.ConstantLR", {{0}}},
    {NULL, {{0}}},
};

static const reg_entry *reg_table(snn_vision_registry reg) {
    switch (reg) {
    case SNN_REG_DATASET: return datasets;
    case SNN_REG_OPTIMIZER: return optimizers;
    case SNN_REG_LOSS: return losses;
    case SNN_REG_SCHEDULER: return schedulers;
    }
    return NULL;
}

static const reg_entry *reg_find(snn_vision_registry reg, const char *name) {
    const reg_entry *t = reg_table(reg);
    for (; t && t->name; t++)
        if (name && !strcmp(t->name, name)) return t;
    return NULL;
}

int snn_vision_registry_has(snn_vision_registry reg, const char *name) { return reg_find(reg, name) != NULL; }

static void reg_list(snn_vision_registry reg, char *buf, size_t cap) {
    buf[0] = 0;
    size_t used = 0;
    for (const reg_entry *t = reg_table(reg); t && t->name; t++) {
        int n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", t->name);
        if (n < 0 || (size_t)n >= cap - used) break;
        used += (size_t)n;
    }
}

static const char *type_name(snn_kwarg_type t) {
    switch (t) {
    case SNN_KWARG_NUMBER: return "a number";
    case SNN_KWARG_BOOL: return "true or false";
    case SNN_KWARG_STRING: return "a string";
    case SNN_KWARG_PAIR: return "a pair of numbers";
    }
    return "?";
}

snn_status snn_vision_registry_check_kwargs(snn_vision_registry reg, const char *name, const char *field,
                                            const snn_kwargs *k) {
    const reg_entry *e = reg_find(reg, name);
    if (!e) return snn_error(SNN_E_INVALID, "%s: unknown name \"%s\"", field, name ? name : "");
    for (int i = 0; i < k->n; i++) {
        const reg_key *rk = NULL;
        for (int j = 0; j < 8 && e->keys[j].key; j++)
            if (!strcmp(e->keys[j].key, k->items[i].key)) rk = &e->keys[j];
        if (!rk) return snn_error(SNN_E_INVALID, "%s: %s takes no keyword argument \"%s\"", field, name, k->items[i].key);
        if (rk->type != k->items[i].type)
            return snn_error(SNN_E_INVALID, "%s: %s's argument \"%s\" must be %s", field, name, rk->key,
                             type_name(rk->type));
        if (k->items[i].type != SNN_KWARG_STRING &&
            (!isfinite(k->items[i].num[0]) || !isfinite(k->items[i].num[1])))
            return snn_error(SNN_E_INVALID, "%s: %s's argument \"%s\" must be finite", field, name, rk->key);
    }
    return SNN_OK;
}

/* A dotted registry name: first "must be a dotted path" (the reference's rule), then
 * "must be one snn implements". */
static snn_status check_dotted(snn_vision_registry reg, const char *field, const char *name) {
    if (!name[0] || !strchr(name, '.'))
        return snn_error(SNN_E_INVALID, "%s must be a dotted name such as \"%s\", got \"%s\"", field,
                         reg_table(reg)[0].name, name);
    if (!reg_find(reg, name)) {
        char list[512];
        reg_list(reg, list, sizeof list);
        return snn_error(SNN_E_INVALID, "%s \"%s\" is not one snn implements (known: %s)", field, name, list);
    }
    return SNN_OK;
}

/* ---- model config ------------------------------------------------------------------- */

static const char *const model_targets[] = {NULL, "snn.vision.FCSNNConfig", "snn.vision.ConvSNNConfig",
                                            "snn.vision.SpikformerConfig"};
static const char *const model_names[] = {NULL, "fcsnn", "convsnn", "spikformer"};

const char *snn_vision_model_target(snn_vision_model_kind k) {
    return (unsigned)k <= SNN_VISION_MODEL_SPIKFORMER ? model_targets[k] : NULL;
}
const char *snn_vision_model_name(snn_vision_model_kind k) {
    return (unsigned)k <= SNN_VISION_MODEL_SPIKFORMER ? model_names[k] : NULL;
}

snn_vision_model_config snn_vision_model_config_default(snn_vision_model_kind kind) {
    snn_vision_model_config m;
    memset(&m, 0, sizeof m);
    if (kind < SNN_VISION_MODEL_FCSNN || kind > SNN_VISION_MODEL_SPIKFORMER) return m;
    m.kind = kind;
    m.time_steps = 4;
    m.step_mode = 'm';
    m.num_classes = kind == SNN_VISION_MODEL_SPIKFORMER ? 1000 : 10;
    m.fcsnn = (snn_fcsnn_opts){.in_features = 784, .hidden = 512, .depth = 2, .classes = 0, .tau = 2.0f};
    m.convsnn = (snn_convsnn_opts){.in_channels = 1, .height = 28, .width = 28, .channels = 128, .classes = 0};
    m.spikformer = (snn_spikformer_opts){.in_channels = 3, .image_size = 224, .classes = 0, .embed_dim = 384,
                                         .heads = 12, .depth = 6, .mlp_ratio = 4.0f};
    return m;
}

snn_status snn_vision_model_config_validate(const snn_vision_model_config *m) {
    if (!m) return snn_error(SNN_E_INVALID, "model: a model config is required");
    if (!snn_vision_model_target(m->kind) || m->kind == SNN_VISION_MODEL_NONE)
        return snn_error(SNN_E_INVALID, "model: a model config (fcsnn, convsnn or spikformer) is required");
    if (m->time_steps <= 0) return snn_error(SNN_E_INVALID, "model.time_steps must be > 0, got %d", m->time_steps);
    if (m->num_classes <= 0) return snn_error(SNN_E_INVALID, "model.num_classes must be > 0, got %d", m->num_classes);
    if (m->step_mode != 'm' && m->step_mode != 's')
        return snn_error(SNN_E_INVALID, "model.step_mode must be 's' or 'm'");
    switch (m->kind) {
    case SNN_VISION_MODEL_FCSNN: {
        const snn_fcsnn_opts *f = &m->fcsnn;
        if (f->in_features <= 0) return snn_error(SNN_E_INVALID, "model.in_features must be > 0, got %d", f->in_features);
        if (f->hidden <= 0) return snn_error(SNN_E_INVALID, "model.hidden must be > 0, got %d", f->hidden);
        if (f->depth <= 0 || f->depth > 1000)
            return snn_error(SNN_E_INVALID, "model.depth must be in 1..1000, got %d", f->depth);
        if (!(f->tau > 1.0f) || !isfinite(f->tau))
            return snn_error(SNN_E_INVALID, "model.tau must be a finite number > 1.0, got %g", (double)f->tau);
        break;
    }
    case SNN_VISION_MODEL_CONVSNN: {
        const snn_convsnn_opts *c = &m->convsnn;
        if (c->in_channels <= 0) return snn_error(SNN_E_INVALID, "model.in_channels must be > 0, got %d", c->in_channels);
        if (c->channels <= 0) return snn_error(SNN_E_INVALID, "model.channels must be > 0, got %d", c->channels);
        if (c->height < 4 || c->height % 4 || c->width < 4 || c->width % 4)
            return snn_error(SNN_E_INVALID, "model.height and model.width must be positive multiples of 4, got %dx%d",
                             c->height, c->width);
        break;
    }
    case SNN_VISION_MODEL_SPIKFORMER: {
        const snn_spikformer_opts *s = &m->spikformer;
        if (m->step_mode != 'm')
            return snn_error(SNN_E_INVALID, "model.step_mode: Spikformer requires step_mode='m'");
        if (s->in_channels <= 0) return snn_error(SNN_E_INVALID, "model.in_channels must be > 0, got %d", s->in_channels);
        if (s->image_size <= 0 || s->image_size % 16)
            return snn_error(SNN_E_INVALID, "model.image_size must be a positive multiple of 16, got %d", s->image_size);
        if (s->embed_dim <= 0 || s->embed_dim % 8)
            return snn_error(SNN_E_INVALID, "model.embed_dim must be a positive multiple of 8, got %d", s->embed_dim);
        if (s->heads <= 0 || s->embed_dim % s->heads)
            return snn_error(SNN_E_INVALID, "model.heads must be > 0 and divide embed_dim %d, got %d", s->embed_dim,
                             s->heads);
        if (s->depth < 0 || s->depth > 1000)
            return snn_error(SNN_E_INVALID, "model.depth must be in 0..1000, got %d", s->depth);
        if (!(s->mlp_ratio > 0) || !isfinite(s->mlp_ratio))
            return snn_error(SNN_E_INVALID, "model.mlp_ratio must be a finite number > 0");
        break;
    }
    default: break;
    }
    return SNN_OK;
}

int snn_vision_model_config_equal(const snn_vision_model_config *a, const snn_vision_model_config *b) {
    if (a->kind != b->kind || a->time_steps != b->time_steps || a->num_classes != b->num_classes ||
        a->step_mode != b->step_mode)
        return 0;
    switch (a->kind) {
    case SNN_VISION_MODEL_FCSNN:
        return a->fcsnn.in_features == b->fcsnn.in_features && a->fcsnn.hidden == b->fcsnn.hidden &&
               a->fcsnn.depth == b->fcsnn.depth && a->fcsnn.tau == b->fcsnn.tau;
    case SNN_VISION_MODEL_CONVSNN:
        return a->convsnn.in_channels == b->convsnn.in_channels && a->convsnn.height == b->convsnn.height &&
               a->convsnn.width == b->convsnn.width && a->convsnn.channels == b->convsnn.channels;
    case SNN_VISION_MODEL_SPIKFORMER:
        return a->spikformer.in_channels == b->spikformer.in_channels &&
               a->spikformer.image_size == b->spikformer.image_size &&
               a->spikformer.embed_dim == b->spikformer.embed_dim && a->spikformer.heads == b->spikformer.heads &&
               a->spikformer.depth == b->spikformer.depth && a->spikformer.mlp_ratio == b->spikformer.mlp_ratio;
    default: return 1;
    }
}

snn_status snn_vision_model_build(const snn_vision_model_config *m, uint64_t seed, snn_model **out) {
    SNN_TRY(snn_vision_model_config_validate(m));
    switch (m->kind) {
    case SNN_VISION_MODEL_FCSNN: {
        snn_fcsnn_opts o = m->fcsnn;
        o.classes = m->num_classes;
        return snn_fcsnn_create(&o, seed, out);
    }
    case SNN_VISION_MODEL_CONVSNN: {
        snn_convsnn_opts o = m->convsnn;
        o.classes = m->num_classes;
        return snn_convsnn_create(&o, seed, out);
    }
    default: {
        snn_spikformer_opts o = m->spikformer;
        o.classes = m->num_classes;
        return snn_spikformer_create(&o, seed, out);
    }
    }
}

/* ---- defaults ----------------------------------------------------------------------- */

static snn_precision_config bf16(void) {
    snn_precision_config p = snn_precision_config_default();
    p.mode = SNN_PRECISION_BF16;
    return p;
}

snn_vision_training_config snn_vision_training_config_default(void) {
    snn_vision_training_config c;
    memset(&c, 0, sizeof c);
    c.input_layout = SNN_LAYOUT_NCHW;
    c.epochs = 1;
    c.batch_size = 32;
    c.workers = 4;
    snprintf(c.optimizer, sizeof c.optimizer, "torch.optim.AdamW");
    snn_kwargs_set_number(&c.optimizer_kwargs, "lr", 1e-3);
    snn_kwargs_set_number(&c.optimizer_kwargs, "weight_decay", 0.0);
    snprintf(c.loss_function, sizeof c.loss_function, "torch.nn.functional.cross_entropy");
    c.tensor_parallel_size = c.pipeline_parallel_size = c.pipeline_microbatches = 1;
    c.data_parallel = SNN_DP_DDP;
    c.precision = bf16();
    c.memopt_compress_inputs = 1;
    c.memopt_checkpoint_budget = SNN_MEMOPT_MEMORY;
    c.execution_mode = SNN_EXEC_EAGER;
    c.cuda_graph_warmup_steps = 3;
    c.max_steps = SNN_VISION_UNSET;
    c.seed = 1234;
    return c;
}

snn_vision_prediction_config snn_vision_prediction_config_default(void) {
    snn_vision_prediction_config c;
    memset(&c, 0, sizeof c);
    c.batch_size = 32;
    c.workers = 4;
    c.tensor_parallel_size = c.pipeline_parallel_size = c.pipeline_microbatches = 1;
    c.data_parallel = SNN_DP_REPLICATE;
    c.precision = bf16();
    c.execution_mode = SNN_EXEC_EAGER;
    c.seed = 1234;
    return c;
}

snn_vision_evaluation_config snn_vision_evaluation_config_default(void) {
    snn_vision_evaluation_config c;
    memset(&c, 0, sizeof c);
    c.base = snn_vision_prediction_config_default();
    snprintf(c.loss_function, sizeof c.loss_function, "torch.nn.functional.cross_entropy");
    return c;
}

/* ---- validation --------------------------------------------------------------------- */

static int experimental_precision(const snn_precision_config *p) {
    return p->mode == SNN_PRECISION_FP8 || p->neuron_storage != SNN_NEURON_STORAGE_UNSET;
}

static snn_status check_precision(const snn_precision_config *p) {
    snn_status st = snn_precision_config_validate(p);
    if (st != SNN_OK) return snn_error_prefix(st, "precision");
    return SNN_OK;
}

static snn_status check_topology(int tp, int pp, int k, int batch) {
    if (tp <= 0) return snn_error(SNN_E_INVALID, "tensor_parallel_size must be > 0, got %d", tp);
    if (pp <= 0) return snn_error(SNN_E_INVALID, "pipeline_parallel_size must be > 0, got %d", pp);
    if (k <= 0) return snn_error(SNN_E_INVALID, "pipeline_microbatches must be > 0, got %d", k);
    if (batch % k)
        return snn_error(SNN_E_INVALID, "batch_size %d must be divisible by pipeline_microbatches %d", batch, k);
    return SNN_OK;
}

/* JSON numbers are doubles: a larger seed would not survive the round trip. */
static snn_status check_seed(int64_t seed) {
    if (seed > ((int64_t)1 << 53) || seed < -((int64_t)1 << 53))
        return snn_error(SNN_E_INVALID, "seed must be within +-2^53 (it is stored as a JSON number), got %lld",
                         (long long)seed);
    return SNN_OK;
}

snn_status snn_vision_training_config_validate(const snn_vision_training_config *c) {
    if (!c) return snn_error(SNN_E_INVALID, "a training config is required");
    SNN_TRY(snn_vision_model_config_validate(&c->model));
    SNN_TRY(check_dotted(SNN_REG_DATASET, "dataset_builder", c->dataset_builder));
    SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_DATASET, c->dataset_builder, "dataset_kwargs", &c->dataset_kwargs));
    if (c->input_layout != SNN_LAYOUT_NCHW && c->input_layout != SNN_LAYOUT_NTCHW)
        return snn_error(SNN_E_INVALID, "input_layout must be NCHW or NTCHW");
    if (c->epochs <= 0) return snn_error(SNN_E_INVALID, "epochs must be > 0, got %d", c->epochs);
    if (c->batch_size <= 0) return snn_error(SNN_E_INVALID, "batch_size must be > 0, got %d", c->batch_size);
    if (c->workers < 0) return snn_error(SNN_E_INVALID, "workers must be >= 0, got %d", c->workers);
    SNN_TRY(check_dotted(SNN_REG_OPTIMIZER, "optimizer", c->optimizer));
    SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_OPTIMIZER, c->optimizer, "optimizer_kwargs", &c->optimizer_kwargs));
    SNN_TRY(check_dotted(SNN_REG_LOSS, "loss_function", c->loss_function));
    SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_LOSS, c->loss_function, "loss_kwargs", &c->loss_kwargs));
    if (!(c->mixup_alpha >= 0) || !isfinite(c->mixup_alpha))
        return snn_error(SNN_E_INVALID, "mixup_alpha must be a finite number >= 0, got %g", c->mixup_alpha);
    if (c->scheduler[0]) {
        SNN_TRY(check_dotted(SNN_REG_SCHEDULER, "scheduler", c->scheduler));
        SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_SCHEDULER, c->scheduler, "scheduler_kwargs",
                                                 &c->scheduler_kwargs));
    } else if (c->scheduler_kwargs.n) {
        return snn_error(SNN_E_INVALID, "scheduler_kwargs is set but scheduler is none");
    }
    SNN_TRY(check_topology(c->tensor_parallel_size, c->pipeline_parallel_size, c->pipeline_microbatches,
                           c->batch_size));
    if (c->data_parallel != SNN_DP_DDP && c->data_parallel != SNN_DP_FSDP2)
        return snn_error(SNN_E_INVALID, "data_parallel must be ddp or fsdp2 for training");
    SNN_TRY(check_precision(&c->precision));
    if (c->memopt_level < 0 || c->memopt_level > 4)
        return snn_error(SNN_E_INVALID, "memopt_level must be in 0..4, got %d", c->memopt_level);
    if (c->memopt_checkpoint_budget < SNN_MEMOPT_SPEED || c->memopt_checkpoint_budget > SNN_MEMOPT_MEMORY)
        return snn_error(SNN_E_INVALID, "memopt_checkpoint_budget must be speed, balanced or memory");
    if (c->execution_mode < SNN_EXEC_EAGER || c->execution_mode > SNN_EXEC_CUDA_GRAPH)
        return snn_error(SNN_E_INVALID, "execution_mode must be eager, compile or cuda_graph");
    if (c->cuda_graph_warmup_steps <= 0)
        return snn_error(SNN_E_INVALID, "cuda_graph_warmup_steps must be positive, got %d", c->cuda_graph_warmup_steps);
    if (c->max_steps != SNN_VISION_UNSET && c->max_steps <= 0)
        return snn_error(SNN_E_INVALID, "max_steps must be > 0 when set, got %ld", c->max_steps);
    if (c->timing_warmup_steps < 0)
        return snn_error(SNN_E_INVALID, "timing_warmup_steps must be >= 0, got %ld", c->timing_warmup_steps);
    if (c->max_steps != SNN_VISION_UNSET && c->timing_warmup_steps >= c->max_steps)
        return snn_error(SNN_E_INVALID, "timing_warmup_steps %ld must be < max_steps %ld", c->timing_warmup_steps,
                         c->max_steps);
    if (c->checkpoint_interval < 0)
        return snn_error(SNN_E_INVALID, "checkpoint_interval must be >= 0, got %ld", c->checkpoint_interval);
    if (c->checkpoint_interval > 0 && !c->checkpoint_dir[0])
        return snn_error(SNN_E_INVALID, "checkpoint_interval > 0 requires checkpoint_dir");
    /* cross-field rules */
    if (c->pipeline_parallel_size > 1 && c->precision.mode == SNN_PRECISION_FP16)
        return snn_error(SNN_E_INVALID, "precision: Vision PP currently supports fp32 and bf16 (pipeline_parallel_size "
                         "%d with fp16)", c->pipeline_parallel_size);
    if (c->pipeline_parallel_size > 1 && c->model.step_mode != 'm')
        return snn_error(SNN_E_INVALID, "model.step_mode: pipeline_parallel_size > 1 requires step_mode='m'");
    if (c->memopt_level > 0 && c->model.step_mode != 'm')
        return snn_error(SNN_E_INVALID, "memopt_level > 0 requires model.step_mode='m'");
    if (c->execution_mode == SNN_EXEC_CUDA_GRAPH) {
        if (c->tensor_parallel_size != 1 || c->pipeline_parallel_size != 1)
            return snn_error(SNN_E_INVALID, "execution_mode cuda_graph requires a single-rank job "
                             "(tensor_parallel_size = pipeline_parallel_size = 1, one data-parallel rank)");
        if (c->memopt_level > 0)
            return snn_error(SNN_E_INVALID, "execution_mode cuda_graph cannot be combined with memopt_level > 0");
    }
    if (experimental_precision(&c->precision) &&
        (c->data_parallel != SNN_DP_DDP || c->tensor_parallel_size != 1 || c->pipeline_parallel_size != 1))
        return snn_error(SNN_E_INVALID, "precision: experimental precision (FP8 model precision or neuron mixed precision) requires DDP with "
                         "tensor_parallel_size = pipeline_parallel_size = 1");
    return check_seed(c->seed);
}

snn_status snn_vision_prediction_config_validate(const snn_vision_prediction_config *c) {
    if (!c) return snn_error(SNN_E_INVALID, "a prediction config is required");
    if (!c->artifact[0]) return snn_error(SNN_E_INVALID, "artifact: the path of an inference artifact is required");
    SNN_TRY(check_dotted(SNN_REG_DATASET, "dataset_builder", c->dataset_builder));
    SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_DATASET, c->dataset_builder, "dataset_kwargs", &c->dataset_kwargs));
    if (c->input_layout != SNN_LAYOUT_NCHW && c->input_layout != SNN_LAYOUT_NTCHW)
        return snn_error(SNN_E_INVALID, "input_layout must be NCHW or NTCHW");
    if (c->batch_size <= 0) return snn_error(SNN_E_INVALID, "batch_size must be > 0, got %d", c->batch_size);
    if (c->workers < 0) return snn_error(SNN_E_INVALID, "workers must be >= 0, got %d", c->workers);
    SNN_TRY(check_topology(c->tensor_parallel_size, c->pipeline_parallel_size, c->pipeline_microbatches,
                           c->batch_size));
    if (c->data_parallel != SNN_DP_REPLICATE && c->data_parallel != SNN_DP_FSDP2)
        return snn_error(SNN_E_INVALID, "data_parallel must be replicate or fsdp2 for inference (ddp is for training)");
    SNN_TRY(check_precision(&c->precision));
    if (c->execution_mode != SNN_EXEC_EAGER && c->execution_mode != SNN_EXEC_COMPILE)
        return snn_error(SNN_E_INVALID, "execution_mode must be eager or compile for inference");
    if (c->execution_mode == SNN_EXEC_COMPILE &&
        (c->data_parallel != SNN_DP_REPLICATE || c->pipeline_parallel_size > 1))
        return snn_error(SNN_E_INVALID, "execution_mode compile requires replicated execution without PP "
                         "(data_parallel replicate, pipeline_parallel_size 1)");
    if (c->pipeline_parallel_size > 1 && c->precision.mode == SNN_PRECISION_FP16)
        return snn_error(SNN_E_INVALID, "precision: Vision PP currently supports fp32 and bf16 (pipeline_parallel_size "
                         "%d with fp16)", c->pipeline_parallel_size);
    return check_seed(c->seed);
}

snn_status snn_vision_evaluation_config_validate(const snn_vision_evaluation_config *c) {
    if (!c) return snn_error(SNN_E_INVALID, "an evaluation config is required");
    SNN_TRY(snn_vision_prediction_config_validate(&c->base));
    SNN_TRY(check_dotted(SNN_REG_LOSS, "loss_function", c->loss_function));
    SNN_TRY(snn_vision_registry_check_kwargs(SNN_REG_LOSS, c->loss_function, "loss_kwargs", &c->loss_kwargs));
    if (c->timing_warmup_batches < 0)
        return snn_error(SNN_E_INVALID, "timing_warmup_batches must be >= 0, got %d", c->timing_warmup_batches);
    return SNN_OK;
}

snn_status snn_vision_training_config_check_runnable(const snn_vision_training_config *c) {
    SNN_TRY(snn_vision_training_config_validate(c));
    if (c->data_parallel == SNN_DP_FSDP2)
        return snn_error(SNN_E_UNSUPPORTED, "data_parallel fsdp2 is not implemented by snn (use ddp)");
    if (c->memopt_level > 0)
        return snn_error(SNN_E_UNSUPPORTED, "memopt_level > 0 is not implemented by snn (use 0)");
    if (c->execution_mode != SNN_EXEC_EAGER)
        return snn_error(SNN_E_UNSUPPORTED, "execution_mode %s is not implemented by the distributed trainer (use eager)",
                         c->execution_mode == SNN_EXEC_COMPILE ? "compile" : "cuda_graph");
    if (c->mixup_alpha > 0)
        return snn_error(SNN_E_UNSUPPORTED, "mixup_alpha > 0 is not implemented by snn (use 0)");
    return SNN_OK;
}

snn_status snn_vision_prediction_config_check_runnable(const snn_vision_prediction_config *c) {
    SNN_TRY(snn_vision_prediction_config_validate(c));
    if (c->data_parallel == SNN_DP_FSDP2)
        return snn_error(SNN_E_UNSUPPORTED, "data_parallel fsdp2 is not implemented by snn (use replicate)");
    if (c->execution_mode != SNN_EXEC_EAGER)
        return snn_error(SNN_E_UNSUPPORTED, "execution_mode compile is not implemented by snn (use eager)");
    return SNN_OK;
}

/* ---- equality ----------------------------------------------------------------------- */

static int prec_equal(const snn_precision_config *a, const snn_precision_config *b) {
    char x[1024], y[1024];
    if (snn_precision_config_to_json(a, x, sizeof x) != SNN_OK) return 0;
    if (snn_precision_config_to_json(b, y, sizeof y) != SNN_OK) return 0;
    return !strcmp(x, y);
}

int snn_vision_training_config_equal(const snn_vision_training_config *a, const snn_vision_training_config *b) {
    return snn_vision_model_config_equal(&a->model, &b->model) && !strcmp(a->dataset_builder, b->dataset_builder) &&
           snn_kwargs_equal(&a->dataset_kwargs, &b->dataset_kwargs) && a->input_layout == b->input_layout &&
           a->epochs == b->epochs && a->batch_size == b->batch_size && a->workers == b->workers &&
           !strcmp(a->optimizer, b->optimizer) && snn_kwargs_equal(&a->optimizer_kwargs, &b->optimizer_kwargs) &&
           !strcmp(a->loss_function, b->loss_function) && snn_kwargs_equal(&a->loss_kwargs, &b->loss_kwargs) &&
           a->mixup_alpha == b->mixup_alpha && !strcmp(a->scheduler, b->scheduler) &&
           snn_kwargs_equal(&a->scheduler_kwargs, &b->scheduler_kwargs) &&
           a->tensor_parallel_size == b->tensor_parallel_size &&
           a->pipeline_parallel_size == b->pipeline_parallel_size &&
           a->pipeline_microbatches == b->pipeline_microbatches && a->data_parallel == b->data_parallel &&
           prec_equal(&a->precision, &b->precision) && a->memopt_level == b->memopt_level &&
           a->memopt_compress_inputs == b->memopt_compress_inputs &&
           a->memopt_checkpoint_budget == b->memopt_checkpoint_budget && a->execution_mode == b->execution_mode &&
           a->cuda_graph_warmup_steps == b->cuda_graph_warmup_steps && a->max_steps == b->max_steps &&
           a->timing_warmup_steps == b->timing_warmup_steps && !strcmp(a->checkpoint_dir, b->checkpoint_dir) &&
           a->checkpoint_interval == b->checkpoint_interval && !strcmp(a->resume, b->resume) && a->seed == b->seed;
}

int snn_vision_prediction_config_equal(const snn_vision_prediction_config *a,
                                       const snn_vision_prediction_config *b) {
    return !strcmp(a->artifact, b->artifact) && !strcmp(a->dataset_builder, b->dataset_builder) &&
           snn_kwargs_equal(&a->dataset_kwargs, &b->dataset_kwargs) && a->input_layout == b->input_layout &&
           a->batch_size == b->batch_size && a->workers == b->workers &&
           a->tensor_parallel_size == b->tensor_parallel_size &&
           a->pipeline_parallel_size == b->pipeline_parallel_size &&
           a->pipeline_microbatches == b->pipeline_microbatches && a->data_parallel == b->data_parallel &&
           prec_equal(&a->precision, &b->precision) && a->execution_mode == b->execution_mode && a->seed == b->seed;
}

int snn_vision_evaluation_config_equal(const snn_vision_evaluation_config *a,
                                       const snn_vision_evaluation_config *b) {
    return snn_vision_prediction_config_equal(&a->base, &b->base) && !strcmp(a->loss_function, b->loss_function) &&
           snn_kwargs_equal(&a->loss_kwargs, &b->loss_kwargs) && a->timing_warmup_batches == b->timing_warmup_batches;
}
