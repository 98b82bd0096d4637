#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"

typedef struct {
    snn_model *m;
    size_t n_params, n_buffers, n_tensors;
    int assign;
} param_walk;

static void count_or_assign(snn_module *mod, void *ctx) {
    param_walk *w = ctx;
    for (int i = 0; i < mod->n_params; i++) {
        snn_param *p = &mod->params[i];
        if (w->assign) {
            snn_tensor_entry *e = &w->m->tensors[w->n_tensors];
            if (mod->name[0]) snprintf(e->name, sizeof e->name, "%s.%s", mod->name, p->name);
            else snprintf(e->name, sizeof e->name, "%s", p->name);
            e->param = p;
            if (p->kind == SNN_PARAM_WEIGHT) {
                p->offset = w->n_params;
                p->data = w->m->params + w->n_params;
                p->grad = w->m->grads + w->n_params;
            } else {
                p->offset = w->n_buffers;
                p->data = w->m->buffers + w->n_buffers;
                p->grad = NULL;
            }
        }
        if (p->kind == SNN_PARAM_WEIGHT) w->n_params += p->numel;
        else w->n_buffers += p->numel;
        w->n_tensors++;
    }
}

/* The tree belongs to the model from here on: the public construction API refuses to change it. */
static void seal(snn_module *mod, void *ctx) {
    (void)ctx;
    mod->sealed = 1;
}

snn_status snn_model_build(snn_module *root, const char *kind, const char *config_json,
                           snn_shape in, uint64_t seed, snn_model **out) {
    *out = NULL;
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory while building the model");
    snn_model *m = calloc(1, sizeof *m);
    if (!m) {
        snn_module_free(root);
        return snn_error(SNN_E_NOMEM, "out of memory while building the model");
    }
    m->root = root;
    snn_module_walk(root, seal, NULL);
    snprintf(m->kind, sizeof m->kind, "%s", kind);
    m->config_json = strdup(config_json ? config_json : "{}");
    m->in_shape = in;
    m->seed = seed;
    snn_module_name_tree(root, "");
    root->in = in;
    snn_status st = root->ops->setup(root, in);
    if (st != SNN_OK) {
        snn_model_free(m);
        return st;
    }
    param_walk w = {m, 0, 0, 0, 0};
    snn_module_walk(root, count_or_assign, &w);
    m->n_params = w.n_params;
    m->n_buffers = w.n_buffers;
    m->params = calloc(w.n_params ? w.n_params : 1, sizeof(float));
    m->grads = calloc(w.n_params ? w.n_params : 1, sizeof(float));
    m->buffers = calloc(w.n_buffers ? w.n_buffers : 1, sizeof(float));
    m->tensors = calloc(w.n_tensors ? w.n_tensors : 1, sizeof *m->tensors);
    if (!m->params || !m->grads || !m->buffers || !m->tensors || !m->config_json) {
        snn_model_free(m);
        return snn_error(SNN_E_NOMEM, "cannot allocate %zu parameters", w.n_params);
    }
    m->n_tensors = w.n_tensors;
    param_walk w2 = {m, 0, 0, 0, 1};
    snn_module_walk(root, count_or_assign, &w2);
    snn_rng rng = snn_rng_make(seed, 0x1417);
    if (root->ops->init) root->ops->init(root, &rng);
    m->run.be = snn_backend_cpu();
    m->run.seed = seed;
    *out = m;
    return SNN_OK;
}

void snn_model_free(snn_model *m) {
    if (!m) return;
    if (m->precision) ((snn_precision *)m->precision)->model = NULL; /* the caller frees it */
    snn_module_free(m->root);
    snn_arena_free(&m->arena);
    free(m->params);
    free(m->grads);
    free(m->buffers);
    free(m->tensors);
    free(m->config_json);
    free(m);
}

const char *snn_model_config_json(const snn_model *m) { return m->config_json; }
const char *snn_model_kind(const snn_model *m) { return m->kind; }

snn_status snn_model_plan(snn_model *m, int T, int N) {
    if (T <= 0 || N <= 0)
        return snn_error(SNN_E_INVALID, "time steps and batch size must be positive (got T=%d, N=%d)", T, N);
    if (m->T == T && m->N == N && m->arena.base) return SNN_OK;
    snn_arena_free(&m->arena);
    size_t B = (size_t)T * (size_t)N;
    snn_arena_begin_measure(&m->arena);
    snn_arena_floats(&m->arena, B * snn_shape_numel(m->root->out));
    if (m->root->ops->reserve) m->root->ops->reserve(m->root, &m->arena, T, N);
    SNN_TRY(snn_arena_allocate(&m->arena, m->arena.used));
    m->out = snn_arena_floats(&m->arena, B * snn_shape_numel(m->root->out));
    if (m->root->ops->reserve) m->root->ops->reserve(m->root, &m->arena, T, N);
    m->T = T;
    m->N = N;
    if (m->precision) SNN_TRY(snn_precision_plan(m->precision, T, N));
    m->run.T = T;
    m->run.N = N;
    return SNN_OK;
}

void snn_model_reset(snn_model *m) {
    if (m->root->ops->reset) m->root->ops->reset(m->root);
}

snn_status snn_model_forward(snn_model *m, const float *x, int training, const float **y) {
    if (!m->arena.base) return snn_error(SNN_E_STATE, "snn_model_plan must be called before the first forward");
    snn_model_reset(m);
    m->run.training = training;
    m->run.step = m->step++;
    m->last_x = x;
    SNN_TRY(m->root->ops->forward(m->root, &m->run, x, m->out));
    *y = m->out;
    return SNN_OK;
}

snn_status snn_model_backward(snn_model *m, const float *dy) {
    if (!m->last_x) return snn_error(SNN_E_STATE, "backward called before forward");
    if (!m->run.training) return snn_error(SNN_E_STATE, "backward needs a forward in training mode");
    return m->root->ops->backward(m->root, &m->run, m->last_x, m->out, dy, NULL);
}

void snn_model_zero_grad(snn_model *m) { memset(m->grads, 0, m->n_params * sizeof(float)); }

size_t snn_model_input_numel(const snn_model *m) { return snn_shape_numel(m->in_shape); }
size_t snn_model_output_numel(const snn_model *m) { return snn_shape_numel(m->root->out); }
int snn_model_time_steps(const snn_model *m) { return m->T; }
size_t snn_model_num_params(const snn_model *m) { return m->n_params; }
float *snn_model_params(snn_model *m) { return m->params; }
float *snn_model_grads(snn_model *m) { return m->grads; }
size_t snn_model_num_buffers(const snn_model *m) { return m->n_buffers; }
float *snn_model_buffers(snn_model *m) { return m->buffers; }
size_t snn_model_arena_bytes(const snn_model *m) { return m->arena.size; }
size_t snn_model_num_tensors(const snn_model *m) { return m->n_tensors; }

snn_status snn_model_tensor(const snn_model *m, size_t i, snn_tensor_info *info) {
    if (i >= m->n_tensors) return snn_error(SNN_E_INVALID, "tensor index %zu out of range", i);
    const snn_tensor_entry *e = &m->tensors[i];
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->rank = e->param->shape.rank;
    for (int k = 0; k < info->rank; k++) info->shape[k] = e->param->shape.d[k];
    info->numel = e->param->numel;
    info->data = e->param->data;
    info->grad = e->param->grad;
    info->is_buffer = e->param->kind == SNN_PARAM_BUFFER;
    info->decay = e->param->decay;
    return SNN_OK;
}

uint64_t snn_model_step_count(const snn_model *m) { return m->step; }
void snn_model_set_step_count(snn_model *m, uint64_t step) { m->step = step; }
