/* Placing a model on a device: snn_model_to. The module tree stays one tree; only its
 * storage (parameters, gradients, buffers, activations) moves and every module's op table
 * (m->be) becomes the device's. A kind that does not run on the device is refused by name
 * before anything moves. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/model_internal.h"

typedef struct {
    snn_device_type dev;
    const snn_module *bad;
} device_check;

static void check_kind(snn_module *mod, void *ctx) {
    device_check *c = ctx;
    if (c->bad) return;
    if (!(snn_module_own_ops(mod)->devices & SNN_DEVMASK(c->dev))) c->bad = mod;
}

/* "cpu", "cuda", "cuda:N" (N a decimal in [0, 63]). */
static snn_status parse_device(const char *s, snn_device_type *dev, int *index) {
    *index = 0;
    if (!s) return snn_error(SNN_E_INVALID, "snn_model_to: device is NULL (use \"cpu\", \"cuda\" or \"cuda:N\")");
    if (!strcmp(s, "cpu")) {
        *dev = SNN_DEVICE_CPU;
        return SNN_OK;
    }
    if (!strcmp(s, "cuda")) {
        *dev = SNN_DEVICE_CUDA;
        return SNN_OK;
    }
    if (!strncmp(s, "cuda:", 5) && s[5] >= '0' && s[5] <= '9') {
        char *end;
        errno = 0;
        long v = strtol(s + 5, &end, 10);
        if (!errno && !*end && v >= 0 && v <= 63) {
            *dev = SNN_DEVICE_CUDA;
            *index = (int)v;
            return SNN_OK;
        }
    }
    return snn_error(SNN_E_INVALID, "unknown device '%s' (use cpu, cuda or cuda:N with N in [0, 63])", s);
}

static snn_status place(snn_model *m, snn_backend *be, void (*release)(snn_backend *));

static snn_status to_cpu(snn_model *m) {
    if (!m->owned_be) return SNN_OK;
    /* refresh the host copy, then let the device go */
    if (!snn_model_params(m) || !snn_model_buffers(m))
        return snn_error(SNN_E_STATE, "snn_model_to(cpu): copying the parameters back failed: %s", snn_last_error());
    memset(m->grads, 0, m->n_params * sizeof(float));
    snn_model_release_device(m);
    snn_model_bind_storage(m);
    m->param_version++;
    return SNN_OK;
}

snn_status snn_model_to(snn_model *m, const char *device) {
    if (!m) return snn_error(SNN_E_INVALID, "snn_model_to: model is NULL");
    snn_device_type dev = SNN_DEVICE_CPU;
    int index = 0;
    SNN_TRY(parse_device(device, &dev, &index));
    if (m->precision || m->optimizer_bound)
        return snn_error(SNN_E_STATE, "snn_model_to: place the model before %s (the order is device -> prepare -> "
                         "optimizer)", m->precision ? "snn_prepare_model_for_precision" : "creating its optimizer");
    if (dev == SNN_DEVICE_CPU) return to_cpu(m);
    if (m->owned_be)
        return snn_error(SNN_E_STATE, "snn_model_to: the model is on %s already; move it to cpu first to change "
                         "devices", m->run.be->name);
    device_check c = {dev, NULL};
    snn_module_walk(m->root, check_kind, &c);
    if (c.bad)
        return snn_error(SNN_E_UNSUPPORTED,
                         "module '%s' (%s) runs on the CPU only in this version of snn, so the model cannot be "
                         "placed on '%s' (docs/architecture.md lists the kinds each device runs)",
                         c.bad->name[0] ? c.bad->name : "<root>", snn_module_own_ops(c.bad)->kind, device);
    snn_backend *be = NULL;
    SNN_TRY(snn_backend_cuda_create(index, &be));
    return place(m, be, snn_backend_cuda_destroy);
}

snn_status snn_model_to_table(snn_model *m, snn_backend *be, void (*release)(snn_backend *)) {
    if (!m || !be || !release) return snn_error(SNN_E_INVALID, "snn_model_to_table: NULL argument");
    if (m->owned_be || m->precision || m->optimizer_bound)
        return snn_error(SNN_E_STATE, "snn_model_to_table: a fresh model on the CPU only");
    return place(m, be, release);
}

/* Move m's storage to be (a device table the model owns from now on, freed by release). */
static snn_status place(snn_model *m, snn_backend *be, void (*release)(snn_backend *)) {
    float *p = NULL, *g = NULL, *b = NULL;
    snn_status st = be->alloc(be, (m->n_params ? m->n_params : 1) * sizeof(float), (void **)&p);
    if (st == SNN_OK) st = be->alloc(be, (m->n_params ? m->n_params : 1) * sizeof(float), (void **)&g);
    if (st == SNN_OK) st = be->alloc(be, (m->n_buffers ? m->n_buffers : 1) * sizeof(float), (void **)&b);
    if (st == SNN_OK) st = be->upload(be, p, m->params, m->n_params * sizeof(float));
    if (st == SNN_OK) st = be->upload(be, b, m->buffers, m->n_buffers * sizeof(float));
    if (st == SNN_OK) st = be->synchronize(be);
    if (st != SNN_OK) {
        be->free(be, p);
        be->free(be, g);
        be->free(be, b);
        release(be);
        return st;
    }
    m->owned_be = be;
    m->release_be = release;
    m->run.be = be;
    m->param_version++;
    m->param_store = p;
    m->grad_store = g;
    m->buffer_store = b;
    snn_model_bind_storage(m);
    return SNN_OK;
}

const char *snn_model_device(const snn_model *m) { return !m ? NULL : m->owned_be ? m->run.be->name : "cpu"; }
