#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/module.h"

const char *snn_shape_str(snn_shape s, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < s.rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %d" : "%d", s.d[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

snn_module *snn_module_new(const snn_module_ops *ops, size_t impl_size) {
    snn_module *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->ops = ops;
    m->be = snn_backend_cpu(); /* a module lives on the CPU until its model is placed elsewhere */
    if (impl_size) {
        m->impl = calloc(1, impl_size);
        if (!m->impl) {
            free(m);
            return NULL;
        }
    }
    return m;
}

void snn_module_free(snn_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) snn_module_free(m->children[i]);
    free(m->children);
    if (m->ops && m->ops->destroy) m->ops->destroy(m);
    free(m->impl);
    free(m);
}

int snn_module_add_param(snn_module *m, const char *name, snn_shape shape, snn_param_kind kind,
                         int decay) {
    if (m->n_params >= SNN_MAX_PARAMS) return -1;
    snn_param *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->shape = shape;
    p->numel = snn_shape_numel(shape);
    p->kind = kind;
    p->decay = decay;
    return m->n_params++;
}

snn_status snn_module_add_child(snn_module *parent, snn_module *child) {
    if (!child) return snn_error(SNN_E_NOMEM, "out of memory while building the model");
    snn_module **c = realloc(parent->children, sizeof *c * (size_t)(parent->n_children + 1));
    if (!c) {
        snn_module_free(child);
        return snn_error(SNN_E_NOMEM, "out of memory while building the model");
    }
    parent->children = c;
    c[parent->n_children++] = child;
    child->parent = parent;
    return SNN_OK;
}

void snn_module_name_tree(snn_module *m, const char *prefix) {
    if (prefix != m->name) snprintf(m->name, sizeof m->name, "%s", prefix);
    for (int i = 0; i < m->n_children; i++) {
        snn_module *c = m->children[i];
        char local[SNN_NAME_MAX], full[SNN_NAME_MAX * 2];
        /* A child may carry a local name (set before naming, no dots); default is its index.
         * The local name "@" makes the child transparent: it shares its parent's name, so a
         * wrapper (Residual around a Sequential) adds no level to the dotted names. */
        if (c->name[0] && !strchr(c->name, '.')) snprintf(local, sizeof local, "%s", c->name);
        else snprintf(local, sizeof local, "%d", i);
        if (!strcmp(local, "@")) snprintf(full, sizeof full, "%s", prefix);
        else if (prefix[0]) snprintf(full, sizeof full, "%s.%s", prefix, local);
        else snprintf(full, sizeof full, "%s", local);
        snprintf(c->name, sizeof c->name, "%s", full);
        snn_module_name_tree(c, c->name);
    }
}

void snn_module_walk(snn_module *m, snn_module_visit_fn fn, void *ctx) {
    fn(m, ctx);
    for (int i = 0; i < m->n_children; i++) snn_module_walk(m->children[i], fn, ctx);
}
