#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
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
            p->data = (p->kind == SNN_PARAM_WEIGHT ? w->m->param_store : w->m->buffer_store) + p->offset;
            p->grad = p->kind == SNN_PARAM_WEIGHT ? w->m->grad_store + p->offset : NULL;
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

static void set_backend(snn_module *mod, void *ctx) { mod->be = ctx; }

/* The tree belongs to the model from here on: the public construction API refuses to change it. */
static void seal(snn_module *mod, void *ctx) {
    (void)ctx;
    mod->sealed = 1;
}

static snn_status model_build(snn_module *root, const char *kind, const char *config_json, snn_shape in,
                              uint64_t seed, int init, snn_model **out);

snn_status snn_model_build(snn_module *root, const char *kind, const char *config_json,
                           snn_shape in, uint64_t seed, snn_model **out) {
    return model_build(root, kind, config_json, in, seed, 1, out);
}

snn_status snn_model_build_uninit(snn_module *root, const char *kind, const char *config_json, snn_shape in,
                                  snn_model **out) {
    return model_build(root, kind, config_json, in, 0, 0, out);
}

static snn_status model_build(snn_module *root, const char *kind, const char *config_json, snn_shape in,
                              uint64_t seed, int init, snn_model **out) {
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
    m->param_store = m->params;
    m->grad_store = m->grads;
    m->buffer_store = m->buffers;
    param_walk w2 = {m, 0, 0, 0, 2, 0, NULL};
    snn_module_walk(root, count_or_assign, &w2);
    snn_rng rng = snn_rng_make(seed, 0x1417);
    if (init && root->ops->init) root->ops->init(root, &rng);
    m->run.be = snn_backend_cpu();
    snn_module_walk(root, set_backend, (void *)m->run.be);
    m->run.seed = seed;
    *out = m;
    return SNN_OK;
}

/* Device memory and the device's backend (nothing on the CPU). */
static void model_free_arena(snn_model *m) {
    snn_model_graph_free(m); /* graphs point into the arena */
    if (m->x_host) {
        if (m->x_host_be) m->x_host_be->free_host(m->x_host_be, m->x_host);
        else free(m->x_host);
        m->x_host = NULL;
        m->x_host_be = NULL;
    }
    if (m->owned_be && m->arena.base && !m->arena.measuring) {
        m->owned_be->free(m->owned_be, m->arena.base);
        memset(&m->arena, 0, sizeof m->arena);
    } else {
        snn_arena_free(&m->arena);
    }
}

static void model_free_device(snn_model *m) {
    snn_backend *be = m->owned_be;
    if (!be) return;
    model_free_arena(m);
    be->free(be, m->param_store);
    be->free(be, m->grad_store);
    be->free(be, m->buffer_store);
    free(m->out_host);
    m->out_host = NULL;
    m->param_store = m->params;
    m->grad_store = m->grads;
    m->buffer_store = m->buffers;
    m->run.be = snn_backend_cpu();
    m->owned_be = NULL;
    if (m->release_be) m->release_be(be);
    m->release_be = NULL;
}

void snn_model_bind_storage(snn_model *m) {
    param_walk w = {m, 0, 0, 0, 2, 0, NULL};
    snn_module_walk(m->root, count_or_assign, &w);
    snn_module_walk(m->root, set_backend, (void *)m->run.be);
    model_free_arena(m);
    m->T = m->N = 0;
    m->run.T = m->run.N = 0;
    m->last_x = NULL;
    m->out = m->x_store = m->dy_store = NULL;
}

void snn_model_release_device(snn_model *m) { model_free_device(m); }

void snn_model_free(snn_model *m) {
    if (!m) return;
    if (m->precision) ((snn_precision *)m->precision)->model = NULL; /* the caller frees it */
    snn_module_free(m->root);
    model_free_device(m);
    model_free_arena(m); /* a host model's arena and input buffer */
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
    model_free_arena(m);
    m->last_x = NULL; /* the last forward's activations went with the arena */
    size_t B = (size_t)T * (size_t)N;
    const int dev = m->owned_be != NULL;
    size_t n_out = B * snn_shape_numel(m->root->out), n_in = B * snn_shape_numel(m->in_shape);
    snn_arena_begin_measure(&m->arena);
    snn_arena_floats(&m->arena, n_out);
    if (dev) {
        snn_arena_floats(&m->arena, n_in);
        snn_arena_floats(&m->arena, n_out);
    }
    if (m->root->ops->reserve) m->root->ops->reserve(m->root, &m->arena, T, N);
    size_t bytes = m->arena.used;
    if (dev) {
        /* device activations: one allocation of the measured size, as on the CPU */
        void *base = NULL;
        SNN_TRY(m->owned_be->alloc(m->owned_be, bytes ? bytes : SNN_ARENA_ALIGN, &base));
        memset(&m->arena, 0, sizeof m->arena);
        m->arena.base = base;
        m->arena.size = bytes ? bytes : SNN_ARENA_ALIGN;
        float *oh = realloc(m->out_host, (n_out ? n_out : 1) * sizeof(float));
        if (!oh) {
            model_free_arena(m);
            return snn_error(SNN_E_NOMEM, "out of memory for the host copy of the output");
        }
        m->out_host = oh;
    } else {
        SNN_TRY(snn_arena_allocate(&m->arena, bytes));
    }
    /* the input buffer a caller (the library's loops) may fill and pass to the forward:
     * page-locked on a device, so its upload runs at the link's speed */
    if (dev) {
        snn_status st = m->owned_be->alloc_host(m->owned_be, (n_in ? n_in : 1) * sizeof(float), (void **)&m->x_host);
        if (st != SNN_OK) {
            model_free_arena(m);
            return st;
        }
        m->x_host_be = m->owned_be;
    } else if (!(m->x_host = malloc((n_in ? n_in : 1) * sizeof(float)))) {
        model_free_arena(m);
        return snn_error(SNN_E_NOMEM, "out of memory for the model's input buffer (%zu values)", n_in);
    }
    m->out = snn_arena_floats(&m->arena, n_out);
    if (dev) {
        m->x_store = snn_arena_floats(&m->arena, n_in);
        m->dy_store = snn_arena_floats(&m->arena, n_out);
    }
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
    /* the caller's arrays are host memory */
    snn_tensor_view xv = {.dtype = SNN_F32, .device = NULL, .data = (void *)x,
                          .numel = (size_t)m->T * m->N * snn_shape_numel(m->in_shape)};
    snn_tensor_view yv = {.device = NULL};
    SNN_TRY(snn_model_forward_view(m, &xv, training, &yv));
    *y = yv.data;
    return SNN_OK;
}

/* Does `device` name where the model lives? NULL / "cpu" is the host; "cuda" any index of
 * the model's CUDA device, "cuda:N" exactly. *on_dev: the view is device memory. */
static snn_status view_place(const snn_model *m, const char *device, const char *what, int *on_dev) {
    *on_dev = 0;
    if (!device || !strcmp(device, "cpu")) return SNN_OK;
    const snn_backend *be = m->run.be;
    char mine[32];
    snprintf(mine, sizeof mine, "%s:%d", be->name, be->index);
    if (!m->owned_be || (strcmp(device, be->name) && strcmp(device, mine)))
        return snn_error(SNN_E_INVALID, "snn_model_forward_view: %s is on '%.40s' but the model is on %s", what, device,
                         m->owned_be ? mine : "cpu");
    *on_dev = 1;
    return SNN_OK;
}

/* The regions model_graph.c records: the root's forward and backward. */
static snn_status root_forward(snn_model *m, void *ctx) {
    (void)ctx;
    return m->root->ops->forward(m->root, &m->run, m->last_x, m->out);
}
static snn_status root_backward(snn_model *m, void *dy) {
    return m->root->ops->backward(m->root, &m->run, m->last_x, m->out, dy, NULL);
}
static snn_module *output_module(const snn_model *m);
/* What selects the output module's 16-bit output / gradient form (model_graph.c's variant). */
static int output_variant(const snn_model *m) {
    const snn_module *o = output_module(m);
    return o ? (o->y_store ? 1 : 0) | (o->dy_store ? 2 : 0) : 0; /* the rows' ld follow from the model */
}

snn_status snn_model_forward_view(snn_model *m, const snn_tensor_view *x, int training, snn_tensor_view *y) {
    if (!m || !x) return snn_error(SNN_E_INVALID, "snn_model_forward_view: NULL model or input view");
    if (!m->arena.base) return snn_error(SNN_E_STATE, "snn_model_plan must be called before the first forward");
    size_t n_in = (size_t)m->T * m->N * snn_shape_numel(m->in_shape);
    if (x->dtype != SNN_F32)
        return snn_error(SNN_E_UNSUPPORTED, "snn_model_forward_view: the input is %s; models take f32 inputs",
                         snn_dtype_name(x->dtype) ? snn_dtype_name(x->dtype) : "an unknown type");
    if (x->numel != n_in)
        return snn_error(SNN_E_SHAPE, "snn_model_forward_view: the input holds %zu values, the plan (T=%d, N=%d) "
                         "needs %zu", x->numel, m->T, m->N, n_in);
    if (!x->data) return snn_error(SNN_E_INVALID, "snn_model_forward_view: the input's data is NULL");
    int x_dev = 0, y_dev = 0;
    SNN_TRY(view_place(m, x->device, "the input", &x_dev));
    if (y) SNN_TRY(view_place(m, y->device, "the output", &y_dev));
    const snn_backend *be = m->run.be;
    if (x_dev) SNN_TRY(be->check_ptr(be, x->data, n_in * sizeof(float)));
    snn_model_reset(m);
    m->run.training = training;
    m->run.step = m->step++;
    size_t n_out = (size_t)m->T * m->N * snn_shape_numel(m->root->out);
    const float *xs = x->data;
    if (m->owned_be && !x_dev) {
        SNN_TRY(be->upload(be, m->x_store, xs, n_in * sizeof(float)));
        xs = m->x_store;
    }
    m->last_x = xs;
    SNN_TRY(snn_model_graph_run(m, training ? SNN_GRAPH_FWD_TRAIN : SNN_GRAPH_FWD_INFER, xs, m->out,
                                output_variant(m), root_forward, NULL));
    if (!y) return SNN_OK;
    y->dtype = SNN_F32;
    y->numel = n_out;
    y->data = m->out;
    if (m->owned_be && !y_dev) {
        SNN_TRY(be->download(be, m->out_host, m->out, n_out * sizeof(float)));
        y->data = m->out_host;
    }
    return SNN_OK;
}

snn_status snn_model_backward_stored(snn_model *m, const float *dy_store) {
    if (!m || !dy_store) return snn_error(SNN_E_INVALID, "snn_model_backward: NULL model or dy");
    if (!m->last_x) return snn_error(SNN_E_STATE, "backward called before forward");
    if (!m->run.training) return snn_error(SNN_E_STATE, "backward needs a forward in training mode");
    return snn_model_graph_run(m, SNN_GRAPH_BWD, dy_store, m->last_x, output_variant(m), root_backward,
                               (void *)dy_store);
}

/* The module whose forward writes the model's output: the last child down the Sequentials. */
static snn_module *output_module(const snn_model *m) {
    snn_module *o = m->root;
    while (o && snn_module_is_sequential(o) && o->n_children > 0) o = o->children[o->n_children - 1];
    return o;
}

int snn_model_output_dy16(const snn_model *m, snn_dtype *t, int *ld) {
    if (!m || !m->owned_be || !m->dy_store || !m->precision || !m->T || !m->N) return 0;
    const snn_module *o = output_module(m);
    const snn_dtype d = snn_precision_dy16_type(m->precision, o);
    if (d == SNN_F32 || o->out.rank < 1) return 0;
    const size_t width = (size_t)o->out.d[o->out.rank - 1], rows = (size_t)m->T * m->N * snn_shape_numel(o->out) / width;
    const size_t pad = (width + 7) / 8 * 8; /* 16-byte rows: what a 16-bit GEMM reads in place */
    const size_t n_out = (size_t)m->T * m->N * snn_shape_numel(m->root->out);
    if (pad > 0x7fffffff || rows * pad * 2 > n_out * sizeof(float)) return 0; /* the dy buffer holds it */
    if (t) *t = d;
    if (ld) *ld = (int)pad;
    return 1;
}

/* The output module when (t, ld) is what snn_model_output_dy16 says; else NULL with the error
 * set (`what`: the caller; `noun`: what it asked for). */
static snn_module *output16(snn_model *m, snn_dtype t, int ld, const char *what, const char *noun) {
    snn_dtype want;
    int want_ld;
    if (snn_model_output_dy16(m, &want, &want_ld) && t == want && ld == want_ld) return output_module(m);
    snn_error(SNN_E_STATE, "%s: the model's output module does not take a %s %s with rows of %d here", what,
              snn_dtype_name(t) ? snn_dtype_name(t) : "?", noun, ld);
    return NULL;
}

snn_status snn_model_backward_dy16(snn_model *m, snn_dtype t, int ld) {
    snn_module *o = output16(m, t, ld, "snn_model_backward_dy16", "dy");
    if (!o) return SNN_E_STATE;
    o->dy_store = (int)t;
    o->dy_ld = ld;
    snn_status st = snn_model_backward_stored(m, m->dy_store);
    o->dy_store = o->dy_ld = 0;
    return st;
}

snn_status snn_model_forward_y16(snn_model *m, const snn_tensor_view *x, int training, snn_dtype t, int ld) {
    snn_module *o = output16(m, t, ld, "snn_model_forward_y16", "output");
    if (!o) return SNN_E_STATE;
    o->y_store = (int)t;
    o->y_ld = ld;
    snn_status st = snn_model_forward_view(m, x, training, NULL);
    o->y_store = o->y_ld = 0;
    return st;
}

snn_status snn_model_stage_dy(snn_model *m, const float *dy, const float **out) {
    *out = dy;
    if (!m->owned_be) return SNN_OK;
    if (!m->dy_store) return snn_error(SNN_E_STATE, "snn_model_plan must be called before backward");
    size_t n_out = (size_t)m->T * m->N * snn_shape_numel(m->root->out);
    SNN_TRY(m->run.be->upload(m->run.be, m->dy_store, dy, n_out * sizeof(float)));
    *out = m->dy_store;
    return SNN_OK;
}

snn_status snn_model_backward(snn_model *m, const float *dy) {
    if (!m || !dy) return snn_error(SNN_E_INVALID, "snn_model_backward: NULL model or dy");
    const float *d;
    SNN_TRY(snn_model_stage_dy(m, dy, &d));
    return snn_model_backward_stored(m, d);
}

snn_status snn_model_push_host(snn_model *m) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_model_push_host: model is NULL");
    if (!m->owned_be) return SNN_OK;
    const snn_backend *be = m->run.be;
    m->param_version++;
    SNN_TRY(be->upload(be, m->param_store, m->params, m->n_params * sizeof(float)));
    SNN_TRY(be->upload(be, m->buffer_store, m->buffers, m->n_buffers * sizeof(float)));
    return be->synchronize(be);
}

snn_status snn_model_pull_host(const snn_model *m) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_model_pull_host: model is NULL");
    if (!m->owned_be) return SNN_OK;
    const snn_backend *be = m->run.be;
    SNN_TRY(be->download(be, m->params, m->param_store, m->n_params * sizeof(float)));
    return be->download(be, m->buffers, m->buffer_store, m->n_buffers * sizeof(float));
}

void snn_model_zero_grad(snn_model *m) {
    if (!m) return;
    if (m->owned_be) (void)m->run.be->fill(m->run.be, m->grad_store, 0.0f, m->n_params);
    else memset(m->grads, 0, m->n_params * sizeof(float));
}

/* The host copy of a device model's storage, refreshed (a download) on every call. */
static float *host_view(const snn_model *m, float *host, const float *store, size_t n) {
    if (m->owned_be && n && m->run.be->download(m->run.be, host, store, n * sizeof(float)) != SNN_OK) return NULL;
    return host;
}

/* Getters answer 0 / NULL for a NULL model (the library never crashes on a NULL handle). */
float *snn_model_input_buffer(snn_model *m) { return m ? m->x_host : NULL; }
size_t snn_model_input_numel(const snn_model *m) { return m ? snn_shape_numel(m->in_shape) : 0; }
size_t snn_model_output_numel(const snn_model *m) { return m ? snn_shape_numel(m->root->out) : 0; }
int snn_model_time_steps(const snn_model *m) { return m ? m->T : 0; }
size_t snn_model_num_params(const snn_model *m) { return m ? m->n_params : 0; }
float *snn_model_params(snn_model *m) { return m ? host_view(m, m->params, m->param_store, m->n_params) : NULL; }
float *snn_model_grads(snn_model *m) { return m ? host_view(m, m->grads, m->grad_store, m->n_params) : NULL; }
size_t snn_model_num_buffers(const snn_model *m) { return m ? m->n_buffers : 0; }
float *snn_model_buffers(snn_model *m) { return m ? host_view(m, m->buffers, m->buffer_store, m->n_buffers) : NULL; }
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
    /* host pointers: the model's host copy (refreshed by snn_model_params on a device) */
    int w = e->param->kind == SNN_PARAM_WEIGHT;
    info->data = (w ? m->params : m->buffers) + e->param->offset;
    info->grad = w ? m->grads + e->param->offset : NULL;
    info->is_buffer = e->param->kind == SNN_PARAM_BUFFER;
    info->decay = e->param->decay;
    return SNN_OK;
}

uint64_t snn_model_step_count(const snn_model *m) { return m ? m->step : 0; }
void snn_model_set_step_count(snn_model *m, uint64_t step) {
    if (m) m->step = step;
}
