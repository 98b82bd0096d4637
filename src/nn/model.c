#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"

typedef struct {
    snn_model *m;
    size_t n_params, n_buffers, n_tensors;
    int assign;    /* 0: count; 1: name tensors and give offsets; 2: set data pointers */
    int too_big;   /* a tensor or the total exceeds the limits */
    const char *big_name;
} param_walk;

static _Thread_local snn_model_build_check build_check;
static _Thread_local void *build_check_ctx;

void snn_model_set_build_check(snn_model_build_check fn, void *ctx) {
    build_check = fn;
    build_check_ctx = ctx;
}

static void count_or_assign(snn_module *mod, void *ctx) {
    param_walk *w = ctx;
    for (int i = 0; i < mod->n_params; i++) {
        snn_param *p = &mod->params[i];
        if (w->assign == 1) {
            snn_tensor_entry *e = &w->m->tensors[w->n_tensors];
            if (mod->name[0]) snprintf(e->name, sizeof e->name, "%s.%s", mod->name, p->name);
            else snprintf(e->name, sizeof e->name, "%s", p->name);
            e->param = p;
            p->offset = p->kind == SNN_PARAM_WEIGHT ? w->n_params : w->n_buffers;
        } else if (w->assign == 2) {
            p->data = (p->kind == SNN_PARAM_WEIGHT ? w->m->params : w->m->buffers) + p->offset;
            p->grad = p->kind == SNN_PARAM_WEIGHT ? w->m->grads + p->offset : NULL;
        } else {
            /* Recount with overflow checks: kernels index a tensor with int. */
            uint64_t n = 1;
            for (int d = 0; d < p->shape.rank; d++)
                if (p->shape.d[d] < 0 || __builtin_mul_overflow(n, (uint64_t)p->shape.d[d], &n)) n = UINT64_MAX;
            if (n > INT32_MAX || n != p->numel) {
                w->too_big = 1;
                if (!w->big_name) w->big_name = mod->name;
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
    if (!m->config_json) {
        snn_model_free(m);
        return snn_error(SNN_E_NOMEM, "out of memory while building the model");
    }
    snn_module_name_tree(root, "");
    root->in = in;
    snn_status st = root->ops->setup(root, in);
    if (st != SNN_OK) {
        snn_model_free(m);
        return st;
    }
    param_walk w = {m, 0, 0, 0, 0, 0, NULL};
    snn_module_walk(root, count_or_assign, &w);
    if (w.too_big || w.n_params > SNN_MODEL_MAX_PARAMS || w.n_buffers > SNN_MODEL_MAX_PARAMS ||
        w.n_params + w.n_buffers > SNN_MODEL_MAX_PARAMS) {
        st = w.too_big ? snn_error(SNN_E_INVALID, "%s: a tensor of module \"%s\" has more than the limit of %d values", kind,
                                   w.big_name ? w.big_name : "?", INT32_MAX)
                       : snn_error(SNN_E_INVALID, "%s: %zu parameters and %zu buffer values, more than the limit of %llu in all",
                                   kind, w.n_params, w.n_buffers, (unsigned long long)SNN_MODEL_MAX_PARAMS);
        snn_model_free(m);
        return st;
    }
    m->n_params = w.n_params;
    m->n_buffers = w.n_buffers;
    m->tensors = calloc(w.n_tensors ? w.n_tensors : 1, sizeof *m->tensors);
    if (!m->tensors) {
        snn_model_free(m);
        return snn_error(SNN_E_NOMEM, "out of memory while building the model (%zu tensors)", w.n_tensors);
    }
    m->n_tensors = w.n_tensors;
    param_walk w1 = {m, 0, 0, 0, 1, 0, NULL};
    snn_module_walk(root, count_or_assign, &w1);
    /* Shapes and names are known, nothing large is allocated yet: the last moment to turn
     * down a model that a checkpoint cannot fill. */
    if (build_check) {
        st = build_check(m, build_check_ctx);
        if (st != SNN_OK) {
            snn_model_free(m);
            return st;
        }
    }
    m->params = calloc(w.n_params ? w.n_params : 1, sizeof(float));
    m->grads = calloc(w.n_params ? w.n_params : 1, sizeof(float));
    m->buffers = calloc(w.n_buffers ? w.n_buffers : 1, sizeof(float));
    if (!m->params || !m->grads || !m->buffers) {
        snn_model_free(m);
        return snn_error(SNN_E_NOMEM, "cannot allocate %zu parameters and %zu buffer values (%llu MiB)", w.n_params,
                         w.n_buffers,
                         (unsigned long long)(((uint64_t)2 * w.n_params + w.n_buffers) * sizeof(float) >> 20));
    }
    param_walk w2 = {m, 0, 0, 0, 2, 0, NULL};
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

const char *snn_model_config_json(const snn_model *m) { return m ? m->config_json : NULL; }
const char *snn_model_kind(const snn_model *m) { return m ? m->kind : NULL; }

snn_status snn_model_plan(snn_model *m, int T, int N) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_model_plan: model is NULL");
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
    if (m && m->root->ops->reset) m->root->ops->reset(m->root);
}

snn_status snn_model_forward(snn_model *m, const float *x, int training, const float **y) {
    if (!m || !x || !y) return snn_error(SNN_E_INVALID, "snn_model_forward: NULL model, input or output pointer");
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
    if (!m || !dy) return snn_error(SNN_E_INVALID, "snn_model_backward: NULL model or dy");
    if (!m->last_x) return snn_error(SNN_E_STATE, "backward called before forward");
    if (!m->run.training) return snn_error(SNN_E_STATE, "backward needs a forward in training mode");
    return m->root->ops->backward(m->root, &m->run, m->last_x, m->out, dy, NULL);
}

void snn_model_zero_grad(snn_model *m) {
    if (m) memset(m->grads, 0, m->n_params * sizeof(float));
}

/* Getters answer 0 / NULL for a NULL model (the library never crashes on a NULL handle). */
size_t snn_model_input_numel(const snn_model *m) { return m ? snn_shape_numel(m->in_shape) : 0; }
size_t snn_model_output_numel(const snn_model *m) { return m ? snn_shape_numel(m->root->out) : 0; }
int snn_model_time_steps(const snn_model *m) { return m ? m->T : 0; }
size_t snn_model_num_params(const snn_model *m) { return m ? m->n_params : 0; }
float *snn_model_params(snn_model *m) { return m ? m->params : NULL; }
float *snn_model_grads(snn_model *m) { return m ? m->grads : NULL; }
size_t snn_model_num_buffers(const snn_model *m) { return m ? m->n_buffers : 0; }
float *snn_model_buffers(snn_model *m) { return m ? m->buffers : NULL; }
size_t snn_model_arena_bytes(const snn_model *m) { return m ? m->arena.size : 0; }
size_t snn_model_num_tensors(const snn_model *m) { return m ? m->n_tensors : 0; }

snn_status snn_model_tensor(const snn_model *m, size_t i, snn_tensor_info *info) {
    if (!m || !info) return snn_error(SNN_E_INVALID, "snn_model_tensor: NULL model or info");
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

uint64_t snn_model_step_count(const snn_model *m) { return m ? m->step : 0; }
void snn_model_set_step_count(snn_model *m, uint64_t step) {
    if (m) m->step = step;
}
