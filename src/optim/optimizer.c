/* SGD, Adam and AdamW over one flat FP32 array, matching torch.optim (1.13) operation for
 * operation: scalar coefficients are computed in double (as Python does) and rounded to
 * FP32 once; each tensor op of torch is one rounded FP32 op here, with an FMA exactly where
 * torch's vectorised CPU kernel uses one (add with alpha), so results agree to the last bit
 * or so rather than to a loose tolerance.
 *
 * The per-element update is an entry of the op table (snn_optim_update in
 * src/backend/backend.h): this file computes the step's scalars once and hands them to the
 * backend of the parameters' device, so one rule serves the CPU and the GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "nn/model_internal.h"
#include "optim/optim_internal.h"
#include "snn/optim.h"

struct snn_optimizer {
    snn_optim_opts o;
    size_t n;
    const snn_backend *be; /* the device of params, grads, mask and state */
    float *params;
    const float *grads;
    uint8_t *mask;       /* 1 = weight decay applies */
    float *state[2];     /* SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq */
    const char *state_name[2];
    int n_state;
    long steps;
    int nonfinite;       /* the last step wrote a NaN or an infinity */
    /* On a device: host copies of the state handed out by snn_optimizer_state (read to save,
     * written to restore). Downloaded when first handed out after a step, uploaded before
     * the next step, so a restore written into them reaches the device. */
    float *host_state[2];
    int host_live;
    /* bumped after every update: the model's parameter version (snn_model.param_version),
     * which tells 16-bit weight copies when they are stale; NULL for bare arrays */
    uint64_t *version;
};

snn_optim_opts snn_optim_defaults(snn_optim_kind kind) {
    snn_optim_opts o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = kind == SNN_OPTIM_SGD ? 0.01f : 1e-3f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.weight_decay = kind == SNN_OPTIM_ADAMW ? 0.01f : 0.0f;
    return o;
}

const char *snn_optim_kind_name(snn_optim_kind kind) {
    switch (kind) {
    case SNN_OPTIM_SGD: return "sgd";
    case SNN_OPTIM_ADAM: return "adam";
    case SNN_OPTIM_ADAMW: return "adamw";
    }
    return NULL;
}

int snn_optim_kind_parse(const char *name) {
    if (!name) return -1;
    for (int k = SNN_OPTIM_SGD; k <= SNN_OPTIM_ADAMW; k++)
        if (strcmp(name, snn_optim_kind_name((snn_optim_kind)k)) == 0) return k;
    return -1;
}

static snn_status check_opts(const snn_optim_opts *o) {
    if (!snn_optim_kind_name(o->kind))
        return snn_error(SNN_E_INVALID, "unknown optimizer kind %d (use sgd, adam or adamw)", (int)o->kind);
    const char *k = snn_optim_kind_name(o->kind);
    if (!isfinite(o->lr) || o->lr < 0)
        return snn_error(SNN_E_INVALID, "%s: learning rate must be finite and >= 0 (got %g)", k, o->lr);
    if (!isfinite(o->weight_decay) || o->weight_decay < 0)
        return snn_error(SNN_E_INVALID, "%s: weight decay must be finite and >= 0 (got %g)", k, o->weight_decay);
    if (o->kind == SNN_OPTIM_SGD) {
        if (!isfinite(o->momentum) || o->momentum < 0)
            return snn_error(SNN_E_INVALID, "sgd: momentum must be finite and >= 0 (got %g)", o->momentum);
        if (!isfinite(o->dampening))
            return snn_error(SNN_E_INVALID, "sgd: dampening must be finite (got %g)", o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return snn_error(SNN_E_INVALID,
                             "sgd: nesterov needs momentum > 0 and dampening 0 (got momentum %g, dampening %g)",
                             o->momentum, o->dampening);
    } else {
        if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
            return snn_error(SNN_E_INVALID, "%s: betas must be in [0, 1) (got %g, %g)", k, o->beta1, o->beta2);
        if (!isfinite(o->eps) || o->eps <= 0)
            return snn_error(SNN_E_INVALID, "%s: eps must be finite and > 0 (got %g)", k, o->eps);
    }
    return SNN_OK;
}

static snn_status optimizer_create_on(const snn_backend *be, const snn_optim_opts *o, size_t n, float *params,
                                      const float *grads, const uint8_t *decay_mask, snn_optimizer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_optimizer_create: out is NULL");
    *out = NULL;
    if (!o) return snn_error(SNN_E_INVALID, "snn_optimizer_create: options are NULL (use snn_optim_defaults)");
    SNN_TRY(check_opts(o));
    if (n == 0) return snn_error(SNN_E_INVALID, "the optimizer was given no parameters (n = 0)");
    if (!params || !grads)
        return snn_error(SNN_E_INVALID, "snn_optimizer_create: params and grads must not be NULL");
    if (n > (SIZE_MAX / sizeof(float)) / 4)
        return snn_error(SNN_E_NOMEM, "the optimizer cannot hold %zu parameters", n);
    snn_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return snn_error(SNN_E_NOMEM, "out of memory creating the optimizer");
    opt->o = *o;
    opt->n = n;
    opt->be = be;
    opt->params = params;
    opt->grads = grads;
    uint8_t *mask = malloc(n);
    if (!mask) goto nomem;
    if (decay_mask) {
        for (size_t i = 0; i < n; i++) mask[i] = decay_mask[i] != 0;
    } else {
        memset(mask, 1, n);
    }
    if (be->alloc(be, n, (void **)&opt->mask) != SNN_OK || be->upload(be, opt->mask, mask, n) != SNN_OK) {
        free(mask);
        goto nomem;
    }
    free(mask);
    if (o->kind == SNN_OPTIM_SGD) {
        if (o->momentum != 0) opt->state_name[opt->n_state++] = "momentum_buffer";
    } else {
        opt->state_name[opt->n_state++] = "exp_avg";
        opt->state_name[opt->n_state++] = "exp_avg_sq";
    }
    for (int s = 0; s < opt->n_state; s++)
        if (be->alloc(be, n * sizeof(float), (void **)&opt->state[s]) != SNN_OK) goto nomem;
    *out = opt;
    return SNN_OK;
nomem:
    snn_optimizer_free(opt);
    return snn_error(SNN_E_NOMEM, "out of %s memory for the optimizer state of %zu parameters", be->name, n);
}

snn_status snn_optimizer_create_on(const snn_backend *be, const snn_optim_opts *o, size_t n, float *params,
                                   const float *grads, const uint8_t *decay_mask, snn_optimizer **out) {
    if (!be) return snn_error(SNN_E_INVALID, "snn_optimizer_create_on: no backend");
    return optimizer_create_on(be, o, n, params, grads, decay_mask, out);
}

snn_status snn_optimizer_create(const snn_optim_opts *o, size_t n, float *params, const float *grads,
                                const uint8_t *decay_mask, snn_optimizer **out) {
    return optimizer_create_on(snn_backend_cpu(), o, n, params, grads, decay_mask, out);
}

snn_status snn_optimizer_create_for_model(const snn_optim_opts *o, snn_model *m,
                                          snn_optimizer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_optimizer_create_for_model: out is NULL");
    *out = NULL;
    if (!m) return snn_error(SNN_E_INVALID, "snn_optimizer_create_for_model: model is NULL");
    size_t n = snn_model_num_params(m);
    float *params = snn_model_params(m); /* the host view: where each tensor lies */
    if (n == 0) return snn_error(SNN_E_INVALID, "the model has no trainable parameters to optimize");
    uint8_t *mask = malloc(n);
    if (!mask) return snn_error(SNN_E_NOMEM, "out of memory building the weight-decay mask");
    memset(mask, 1, n);
    size_t nt = snn_model_num_tensors(m);
    for (size_t t = 0; t < nt; t++) {
        snn_tensor_info info;
        snn_status st = snn_model_tensor(m, t, &info);
        if (st != SNN_OK) {
            free(mask);
            return st;
        }
        if (info.is_buffer) continue;
        /* every parameter tensor is a slice of the flat array */
        if (info.data < params || (size_t)(info.data - params) + info.numel > n) {
            free(mask);
            return snn_error(SNN_E_STATE, "tensor %s lies outside the model's parameter array", info.name);
        }
        memset(mask + (info.data - params), info.decay ? 1 : 0, info.numel);
    }
    /* the optimizer works where the model's parameters live */
    snn_status st = optimizer_create_on(m->run.be, o, n, m->param_store, m->grad_store, mask, out);
    free(mask);
    /* the precision system refuses to prepare a model that already has an optimizer: its
     * master weights and state would be built for the wrong parameters */
    if (st == SNN_OK) {
        m->optimizer_bound = 1;
        (*out)->version = &m->param_version;
    }
    return st;
}

void snn_optimizer_free(snn_optimizer *opt) {
    if (!opt) return;
    opt->be->free(opt->be, opt->mask);
    for (int s = 0; s < 2; s++) {
        opt->be->free(opt->be, opt->state[s]);
        free(opt->host_state[s]);
    }
    free(opt);
}

const snn_optim_opts *snn_optimizer_opts(const snn_optimizer *opt) { return &opt->o; }
size_t snn_optimizer_numel(const snn_optimizer *opt) { return opt->n; }
const float *snn_optimizer_params(const snn_optimizer *opt) { return opt ? opt->params : NULL; }
int snn_optimizer_for_model(const snn_optimizer *opt, const snn_model *m) {
    return opt && m && opt->params == m->param_store && opt->n == m->n_params;
}
size_t snn_optimizer_num_states(const snn_optimizer *opt) { return (size_t)opt->n_state; }
long snn_optimizer_steps(const snn_optimizer *opt) { return opt->steps; }
int snn_optimizer_nonfinite(const snn_optimizer *opt) { return opt ? opt->nonfinite : 0; }

snn_status snn_optimizer_set_steps(snn_optimizer *opt, long steps) {
    if (steps < 0) return snn_error(SNN_E_INVALID, "optimizer step count must be >= 0 (got %ld)", steps);
    opt->steps = steps;
    return SNN_OK;
}

snn_status snn_optimizer_state(snn_optimizer *opt, size_t i, snn_optim_state *info) {
    if (i >= (size_t)opt->n_state)
        return snn_error(SNN_E_INVALID, "optimizer state index %zu out of range (%s has %d)", i,
                         snn_optim_kind_name(opt->o.kind), opt->n_state);
    info->name = opt->state_name[i];
    info->numel = opt->n;
    info->data = opt->state[i];
    if (opt->be->device == SNN_DEVICE_CPU) return SNN_OK;
    if (!opt->host_live) {
        for (int s = 0; s < opt->n_state; s++) {
            if (!opt->host_state[s] && !(opt->host_state[s] = malloc((opt->n ? opt->n : 1) * sizeof(float))))
                return snn_error(SNN_E_NOMEM, "out of host memory for a copy of the optimizer state (%zu floats)",
                                 opt->n);
            SNN_TRY(opt->be->download(opt->be, opt->host_state[s], opt->state[s], opt->n * sizeof(float)));
        }
        opt->host_live = 1;
    }
    info->data = opt->host_state[i];
    return SNN_OK;
}

snn_status snn_optimizer_find_state(snn_optimizer *opt, const char *name, snn_optim_state *info) {
    for (int s = 0; s < opt->n_state; s++)
        if (name && strcmp(name, opt->state_name[s]) == 0) return snn_optimizer_state(opt, (size_t)s, info);
    return snn_error(SNN_E_INVALID, "%s optimizer has no state named \"%s\"",
                     snn_optim_kind_name(opt->o.kind), name ? name : "(null)");
}

/* ---- updates ---------------------------------------------------------------------------- */

/* The step's scalars (backend.h's snn_optim_update), in double, rounded once. */
static snn_optim_update step_scalars(const snn_optimizer *opt, double lr) {
    snn_optim_update u;
    memset(&u, 0, sizeof u);
    const snn_optim_opts *o = &opt->o;
    u.wd = o->weight_decay;
    u.gscale = 1.0f;
    if (o->kind == SNN_OPTIM_SGD) {
        u.adam = 0;
        u.l2 = o->weight_decay != 0;
        u.nlr = (float)(-lr);
        u.mom = o->momentum;
        u.keep = (float)(1.0 - (double)o->dampening); /* torch: alpha = 1 - dampening */
        u.nesterov = o->nesterov;
        u.first = opt->steps == 0;                    /* torch: buffer = clone(d_p) on the first step */
        return u;
    }
    const double b1 = o->beta1, b2 = o->beta2, t = (double)(opt->steps + 1);
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const int adamw = o->kind == SNN_OPTIM_ADAMW;
    u.adam = 1;
    u.fb1 = (float)b1;
    u.fc1 = (float)(1.0 - b1);
    u.fb2 = (float)b2;
    u.fc2 = (float)(1.0 - b2);
    u.neg_step = (float)(-(lr / bc1));
    u.bc2_sqrt = (float)sqrt(bc2);
    u.eps = o->eps;
    /* AdamW: p *= 1 - lr*wd before the update (torch computes the factor in double) */
    u.shrink = (float)(1.0 - lr * (double)o->weight_decay);
    u.l2 = !adamw && o->weight_decay != 0;
    u.decoupled = adamw && o->weight_decay != 0;
    return u;
}

snn_status snn_optimizer_step(snn_optimizer *opt, float lr, int skip) {
    return snn_optimizer_step_scaled(opt, lr, skip, 1.0f);
}

snn_status snn_optimizer_step_scaled(snn_optimizer *opt, float lr, int skip, float gscale) {
    return snn_optimizer_step_copies(opt, lr, skip, gscale, NULL, 0);
}

snn_status snn_optimizer_step_copies(snn_optimizer *opt, float lr, int skip, float gscale,
                                     const snn_optim_copy *copies, int n_copies) {
    if (!opt) return snn_error(SNN_E_INVALID, "snn_optimizer_step: optimizer is NULL");
    if (!(gscale > 0.0f && gscale <= 1.0f))
        return snn_error(SNN_E_INVALID, "snn_optimizer_step: gradient factor %g outside (0, 1]", (double)gscale);
    if (skip) {
        opt->nonfinite = 0;
        return SNN_OK;
    }
    snn_optim_update u;
    snn_optim_arrays a;
    SNN_TRY(snn_optimizer_begin_step(opt, lr, &u, &a));
    u.gscale = gscale;
    u.copies = copies;
    u.n_copies = copies ? n_copies : 0;
    int bad = 0;
    SNN_TRY(opt->be->optim_update(opt->be, &u, a.n, a.w, a.g, a.s0, a.s1, a.mask, &bad));
    snn_optimizer_end_step(opt, 0, bad);
    return SNN_OK;
}

/* The host's part of a step before the update and after it: snn_optimizer_step's, and the
 * training step on a device's (src/train/step.c), which runs the update as optim_step. */
snn_status snn_optimizer_begin_step(snn_optimizer *opt, float lr, snn_optim_update *u, snn_optim_arrays *a) {
    if (!opt || !u || !a) return snn_error(SNN_E_INVALID, "snn_optimizer_begin_step: NULL argument");
    if (!isfinite(lr))
        return snn_error(SNN_E_INVALID, "learning rate is not finite (%g); check the schedule with snn_lr_sched_check", lr);
    if (lr < 0) lr = opt->o.lr;
    if (opt->host_live) { /* the host copies may hold a restore */
        for (int s = 0; s < opt->n_state; s++)
            SNN_TRY(opt->be->upload(opt->be, opt->state[s], opt->host_state[s], opt->n * sizeof(float)));
        opt->host_live = 0;
    }
    *u = step_scalars(opt, (double)lr);
    a->n = opt->n;
    a->w = opt->params;
    a->g = opt->grads;
    a->s0 = opt->state[0];
    a->s1 = opt->state[1];
    a->mask = opt->mask;
    return SNN_OK;
}

void snn_optimizer_end_step(snn_optimizer *opt, int skipped, int nonfinite) {
    if (!opt) return;
    opt->nonfinite = skipped ? 0 : nonfinite != 0;
    if (skipped) return;
    opt->steps++;
    if (opt->version) ++*opt->version;
}

void snn_optimizer_track_version(snn_optimizer *opt, uint64_t *version) {
    if (opt) opt->version = version;
}
