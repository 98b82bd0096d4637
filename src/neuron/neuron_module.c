/* Neuron modules: the fused kernels behind the module contract (src/nn/module.h). */
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "neuron/neuron_module.h"

typedef struct {
    snn_neuron_opts o;
    size_t numel;     /* per-sample elements */
    int T, N;         /* what reserve() sized the buffers for */
    float *h_seq;     /* [T][N*numel] pre-reset membrane, saved for backward */
    float *v;         /* [N*numel] membrane after the last step */
    int ready;        /* buffers are real (not measuring placeholders) */
    int have_h;       /* the last forward was a training forward and saved h_seq */
} neuron_impl;

/* The membrane every forward starts from (and reset() restores). */
static float neuron_v_init(const snn_neuron_opts *o) { return o->soft_reset ? 0.0f : o->v_reset; }

static snn_status neuron_setup(snn_module *m, snn_shape in) {
    neuron_impl *p = m->impl;
    char b[64];
    SNN_TRY(snn_neuron_opts_validate(&p->o));
    if (in.rank < 1 || snn_shape_numel(in) == 0)
        return snn_error(SNN_E_SHAPE, "%s expects a non-empty per-sample input, got %s",
                         snn_neuron_kind_name(p->o.kind), snn_shape_str(in, b, sizeof b));
    m->out = in;
    p->numel = snn_shape_numel(in);
    m->n_params = 0;
    /* One scalar shared by all neurons of the layer; SpikingJelly applies no special
     * decay rule, and a leak parameter should not be pulled toward 0 (k = 1/2). */
    if (p->o.kind == SNN_NEURON_PLIF) snn_module_add_param(m, "w", snn_shape1(1), SNN_PARAM_WEIGHT, 0);
    return SNN_OK;
}

static void neuron_init(snn_module *m, snn_rng *rng) {
    (void)rng;
    neuron_impl *p = m->impl;
    if (p->o.kind == SNN_NEURON_PLIF) m->params[0].data[0] = snn_plif_w0(p->o.tau);
}

static void neuron_reset(snn_module *m) {
    neuron_impl *p = m->impl;
    p->have_h = 0;
    if (!p->ready || !m->be) return;
    /* the kernels start every forward from the reset value themselves; this keeps the
     * readable membrane (snn_neuron_module_v) consistent between batches */
    (void)m->be->fill(m->be, p->v, neuron_v_init(&p->o), (size_t)p->N * p->numel);
}

static void neuron_reserve(snn_module *m, snn_arena *a, int T, int N) {
    neuron_impl *p = m->impl;
    p->T = T;
    p->N = N;
    p->h_seq = snn_arena_floats(a, (size_t)T * (size_t)N * p->numel);
    p->v = snn_arena_floats(a, (size_t)N * p->numel);
    p->ready = !a->measuring && p->h_seq && p->v;
    p->have_h = 0;
    neuron_reset(m);
}

/* PLIF's w as a host value (one copy from a device). */
static float plif_w(snn_module *m) {
    if (!m->be || m->be->device == SNN_DEVICE_CPU) return m->params[0].data[0];
    float h = 0.0f;
    if (m->be->download(m->be, &h, m->params[0].data, sizeof h) != SNN_OK) return NAN;
    return h;
}

float snn_neuron_module_decay(snn_module *m) {
    neuron_impl *p = m->impl;
    switch (p->o.kind) {
    case SNN_NEURON_LIF: return snn_neuron_lif_k(p->o.tau);
    case SNN_NEURON_PLIF: return m->params[0].data ? snn_plif_k(plif_w(m)) : snn_neuron_lif_k(p->o.tau);
    default: return 0.0f;
    }
}

snn_status snn_neuron_module_add_plif_grad(snn_module *m, double gk) {
    /* dL/dw = dL/dk k (1 - k): sigmoid'(w) in double from w itself */
    double kd = 1.0 / (1.0 + exp(-(double)plif_w(m)));
    float d = (float)(gk * kd * (1.0 - kd));
    if (m->be->device == SNN_DEVICE_CPU) {
        m->params[0].grad[0] += d;
        return SNN_OK;
    }
    float g = 0.0f;
    SNN_TRY(m->be->download(m->be, &g, m->params[0].grad, sizeof g));
    g += d;
    return m->be->upload(m->be, m->params[0].grad, &g, sizeof g);
}

static snn_status neuron_check_run(snn_module *m, const snn_run *r) {
    neuron_impl *p = m->impl;
    if (!p->ready)
        return snn_error(SNN_E_STATE, "%s %s: reserve() must run before forward/backward",
                         snn_module_own_ops(m)->kind, m->name);
    if (r->T > p->T || r->N > p->N || r->T < 0 || r->N < 0)
        return snn_error(SNN_E_STATE, "%s %s: run with T=%d, N=%d but buffers were reserved for T=%d, N=%d",
                         snn_module_own_ops(m)->kind, m->name, r->T, r->N, p->T, p->N);
    return SNN_OK;
}

static snn_status neuron_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    neuron_impl *p = m->impl;
    SNN_TRY(neuron_check_run(m, r));
    size_t n = (size_t)r->N * p->numel;
    float k = snn_neuron_module_decay(m);
    /* h_seq is only needed by backward, so inference skips writing it. */
    const int codes = snn_module_codes_now(m->y_codes, r, y);
    m->codes_fwd = 0;
    if (m->bias_src) { /* x: the Linear's FP32 product; its bias and rounding here */
        const snn_param *b = &m->bias_src->params[1];
        /* the bias as the Linear's 16-bit wrapper rounded it (module.h) */
        const float *bd = m->bias_src->bias_rounded ? m->bias_src->bias_rounded : b->data;
        /* 16-bit modes: x, spikes and gradients in_store; FP8 modes: x rounded to x_round,
         * spikes FP32, or E4M3 codes for the FP8 Linear after it in an inference forward */
        const snn_dtype rt = (snn_dtype)(m->in_store ? m->in_store : m->x_round);
        const snn_dtype sp = codes ? SNN_F8E4M3 : m->in_store ? (snn_dtype)m->in_store : SNN_F32;
        SNN_TRY(m->be->neuron_forward_io_bias(m->be, &p->o, k, r->T, n, rt, sp, x, bd, b->numel, y,
                                              r->training ? p->h_seq : NULL, p->v));
        m->codes_fwd = codes;
    } else if (m->in_store) { /* 16-bit x and spikes (in_store == out_store: prec_store.c) */
        SNN_TRY(m->be->neuron_forward_io(m->be, &p->o, k, r->T, n, (snn_dtype)m->in_store, x, y,
                                         r->training ? p->h_seq : NULL, p->v));
    } else {
        SNN_TRY(m->be->neuron_forward(m->be, &p->o, k, r->T, n, x, y, r->training ? p->h_seq : NULL, p->v));
    }
    p->have_h = r->training != 0;
    return SNN_OK;
}

static snn_status neuron_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                  const float *dy, float *dx) {
    (void)x;
    (void)y;
    neuron_impl *p = m->impl;
    SNN_TRY(neuron_check_run(m, r));
    if (!p->have_h)
        return snn_error(SNN_E_STATE, "%s %s: backward needs a training-mode forward first",
                         snn_module_own_ops(m)->kind, m->name);
    size_t n = (size_t)r->N * p->numel;
    float k = snn_neuron_module_decay(m);
    int plif = p->o.kind == SNN_NEURON_PLIF;
    double gk = 0.0;
    /* Only spikes leave the layer: no gradient on the membrane sequence or final state. */
    if (m->in_store)
        SNN_TRY(m->be->neuron_backward_io(m->be, &p->o, k, r->T, n, (snn_dtype)m->in_store, p->h_seq, dy, dx,
                                          plif ? &gk : NULL));
    else
        SNN_TRY(m->be->neuron_backward(m->be, &p->o, k, r->T, n, p->h_seq, dy, dx, plif ? &gk : NULL));
    if (plif) SNN_TRY(snn_neuron_module_add_plif_grad(m, gk));
    return SNN_OK;
}

#define NEURON_OPS(NAME, ID, KIND)                                                               \
    static const snn_module_ops NAME = {                                                         \
        .id = ID,                                                                                \
        .kind = KIND,                                                                            \
        .devices = SNN_DEVMASK_ALL,                                                              \
        .flags = SNN_MODULE_TYPED_IO,                                                            \
        .setup = neuron_setup,                                                                   \
        .init = neuron_init,                                                                     \
        .reserve = neuron_reserve,                                                               \
        .forward = neuron_forward,                                                               \
        .backward = neuron_backward,                                                             \
        .reset = neuron_reset,                                                                   \
    }
NEURON_OPS(if_ops, SNN_KIND_IF_NODE, "IFNode");
NEURON_OPS(lif_ops, SNN_KIND_LIF_NODE, "LIFNode");
NEURON_OPS(plif_ops, SNN_KIND_PLIF_NODE, "ParametricLIFNode");

/* Compares the module's own table, so a neuron wrapped by the precision system still is one. */
int snn_module_is_neuron(const snn_module *m) {
    return snn_module_kind_is(m, SNN_KIND_IF_NODE) || snn_module_kind_is(m, SNN_KIND_LIF_NODE) ||
           snn_module_kind_is(m, SNN_KIND_PLIF_NODE);
}

snn_module *snn_neuron_module_new(const snn_neuron_opts *o) {
    snn_neuron_opts opts = o ? *o : snn_neuron_defaults(SNN_NEURON_LIF);
    const snn_module_ops *ops = opts.kind == SNN_NEURON_IF ? &if_ops
                              : opts.kind == SNN_NEURON_PLIF ? &plif_ops : &lif_ops;
    snn_module *m = snn_module_new(ops, sizeof(neuron_impl));
    if (!m) return NULL;
    neuron_impl *p = m->impl;
    p->o = opts;
    return m;
}

snn_neuron_opts *snn_neuron_module_opts(snn_module *m) {
    return snn_module_is_neuron(m) ? &((neuron_impl *)m->impl)->o : NULL;
}

const float *snn_neuron_module_v(const snn_module *m) {
    const neuron_impl *p = m->impl;
    return p->ready ? p->v : NULL;
}

float *snn_neuron_module_h_seq(const snn_module *m) {
    const neuron_impl *p = m->impl;
    return p->ready && p->have_h ? p->h_seq : NULL;
}
