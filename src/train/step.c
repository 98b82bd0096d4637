/* One training step whose values stay on the model's device: forward, loss, backward,
 * FP16's unscaling and overflow check, the gradient norm and clip, and the optimizer's update,
 * with no host wait in between. On a table with graphs the whole step is one region of
 * src/nn/model_graph.c (SNN_GRAPH_STEP): recorded once, then one launch a step. The host
 * writes the step's scalars (the update's, the labels) into a page-locked block that the step
 * copies to the device first (a recorded copy reads the block when its graph runs), and reads
 * one small block of results at the end: the loss, the number correct, the norm, the skip and
 * non-finite flags.
 *
 * The same code runs on the CPU table, where "device" memory is host memory: one step for both
 * devices. It computes what snn_precision_backward with the host loss computes, bit for bit
 * (tests/test_train_step.c): the loss and the clip rule are the bodies both paths share
 * (class_loss_body.h, optim_step_body.h); the clip's factor is applied inside the update, which
 * gives the same weights as scaling the gradients first.
 *
 * FP8's recipes update their scales on the host from the step's amaxes after the step, as
 * snn_precision_backward does (delayed scaling's new scales are values its kernels take, so its
 * step is a new graph each time and runs eagerly; current scaling's stay on the device).
 * Data-parallel hooks (snn_precision_sync: DDP) run where snn_precision_backward runs them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error_internal.h"
#include "nn/model_internal.h"
#include "optim/optim_internal.h"
#include "precision/runtime.h"
#include "train/step.h"

/* the device block: [update scalars | labels] (copied from the host block) then the results
 * and the loss's scratch */
typedef struct step_results {
    double loss, correct, sumsq;
    float norm;
    int nonfinite, skip, pad;
} step_results;

#define STEP_ALIGN 64
static size_t up(size_t b) { return (b + STEP_ALIGN - 1) / STEP_ALIGN * STEP_ALIGN; }

struct snn_train_step {
    snn_model *m;
    snn_precision *p;
    snn_optimizer *opt;
    const snn_backend *be;
    int kind, N, Ncap, C, T; /* N: this step's batch, at most Ncap, the planned one at creation */
    float max_norm;
    int norm;            /* the gradient norm is measured (clipping, or asked for) */
    size_t off_labels, off_res, off_work, in_bytes, dev_bytes;
    unsigned char *host; /* page-locked on a device: [snn_optim_update | labels] */
    int host_pinned;
    unsigned char *dev;
    float *host_dx;      /* the loss's gradient on the CPU: the caller's [T][N][classes] array */
    float *dx;           /* this step's: the model's dy buffer on a device (a new plan moves it), host_dx on the CPU */
    /* this step's */
    const float *x;      /* the input (device memory, or the model's page-locked input buffer) */
    int x_upload;
    uint64_t step0;
    snn_optim_arrays a;
    int k, all;          /* the weight copies the update writes (prec_wcopy.c) */
    float scale;         /* FP16's loss scale (0: none) */
    float last_scale;    /* the scale of the previous run: another one is another graph */
    int adam;            /* the update is Adam's (it needs both states) */
};

int snn_train_step_supported(const snn_model *m, const snn_precision *p, const snn_optimizer *opt) {
    if (!m || !p || !opt) return 0;
    const snn_backend *be = m->run.be;
    const char *env = getenv("SNN_TRAIN_STEP");
    if (env && !strcmp(env, "host")) return 0; /* the host-valued step (A/B, and a way out) */
    /* On a device table only with SNN_TRAIN_STEP=device until the step has run on a GPU (its
     * CUDA entries were written 2026-12-08 without one; tests/cuda/test_cuda_step.c sets it) */
    if (m->owned_be && !(env && !strcmp(env, "device"))) return 0;
    if (!be || !be->class_loss || !be->optim_step || !be->sumsq_to || !be->upload_async || !be->nonfinite_to)
        return 0;
    return snn_optimizer_for_model(opt, m);
}

void snn_train_step_free(snn_train_step *s) {
    if (!s) return;
    if (s->host) {
        if (s->host_pinned) s->be->free_host(s->be, s->host);
        else free(s->host);
    }
    if (s->dev) s->be->free(s->be, s->dev);
    free(s);
}

snn_status snn_train_step_create(snn_model *m, snn_precision *p, snn_optimizer *opt, int kind, float max_norm,
                                 int measure_norm, float *host_dx, snn_train_step **out) {
    *out = NULL;
    if (!snn_train_step_supported(m, p, opt))
        return snn_error(SNN_E_UNSUPPORTED, "the training step with device values does not run this model "
                         "(a data-parallel hook, another model's optimizer, a table without its entries, "
                         "SNN_TRAIN_STEP=host, or a device model without SNN_TRAIN_STEP=device)");
    if (kind != 0 && kind != 1) return snn_error(SNN_E_INVALID, "training step: loss kind %d (0 or 1)", kind);
    if (m->T <= 0 || m->N <= 0) return snn_error(SNN_E_STATE, "training step: plan the model first");
    snn_train_step *s = calloc(1, sizeof *s);
    if (!s) return snn_error(SNN_E_NOMEM, "out of memory for the training step");
    s->m = m;
    s->p = p;
    s->opt = opt;
    s->be = m->run.be;
    s->kind = kind;
    s->max_norm = max_norm > 0 ? max_norm : -1.0f;
    s->norm = max_norm > 0 || measure_norm;
    s->T = m->T;
    s->N = s->Ncap = m->N;
    s->C = (int)snn_shape_numel(m->root->out);
    s->off_labels = up(sizeof(snn_optim_update));
    s->in_bytes = s->off_labels + (size_t)s->N * sizeof(int32_t);
    s->off_res = up(s->in_bytes);
    s->off_work = up(s->off_res + sizeof(step_results));
    s->dev_bytes = s->off_work + 2 * (size_t)s->N * sizeof(double);
    snn_status st = SNN_OK;
    if (s->be->alloc_host && m->owned_be) {
        st = s->be->alloc_host(s->be, s->in_bytes, (void **)&s->host);
        s->host_pinned = st == SNN_OK;
    } else if (!(s->host = calloc(1, s->in_bytes))) {
        st = snn_error(SNN_E_NOMEM, "out of memory for the training step's host block");
    }
    if (st == SNN_OK) st = s->be->alloc(s->be, s->dev_bytes, (void **)&s->dev);
    s->host_dx = host_dx;
    if (st == SNN_OK && !m->owned_be && !host_dx)
        st = snn_error(SNN_E_STATE, "training step: no buffer for the loss's gradient");
    if (st != SNN_OK) {
        snn_train_step_free(s);
        return st;
    }
    /* the region's device work includes this step's constants: a graph recorded before does
     * not hold them */
    snn_model_graph_invalidate(m);
    *out = s;
    return SNN_OK;
}

static snn_status step_body(snn_model *m, void *ctx) {
    snn_train_step *s = ctx;
    const snn_backend *be = s->be;
    snn_precision *p = s->p;
    unsigned char *dev = s->dev;
    step_results *res = (step_results *)(dev + s->off_res);
    m->step = s->step0; /* a pass that is run again (a graph that could not replay) counts once */
    SNN_TRY(be->upload_async(be, dev, s->host, s->off_labels + (size_t)s->N * sizeof(int32_t)));
    const size_t n_in = (size_t)m->T * m->N * snn_shape_numel(m->in_shape);
    const float *xs = s->x;
    if (s->x_upload) {
        SNN_TRY(be->upload_async(be, m->x_store, s->x, n_in * sizeof(float)));
        xs = m->x_store;
    }
    snn_tensor_view xv = {.dtype = SNN_F32, .device = m->owned_be ? be->name : "cpu", .data = (void *)xs, .numel = n_in};
    SNN_TRY(snn_model_forward_view(m, &xv, 1, NULL));
    snn_class_loss q = {.kind = s->kind, .x = m->out, .labels = (const int32_t *)(dev + s->off_labels), .T = s->T,
                        .N = s->N, .C = s->C, .dx = s->dx, .work = (double *)(dev + s->off_work), .res = &res->loss};
    SNN_TRY(be->class_loss(be, &q));
    const size_t n = m->n_params, ndy = (size_t)s->T * s->N * (size_t)s->C;
    float *grads = m->grad_store ? m->grad_store : m->grads;
    snn_model_zero_grad(m);
    const float *g = s->dx;
    if (s->scale > 0) { /* FP16: the scaled dL/dy, then torch's unscale and overflow check */
        SNN_TRY(be->scale(be, p->dy_scaled, g, s->scale, ndy));
        g = p->dy_scaled;
    }
    SNN_TRY(snn_model_backward_stored(m, g));
    /* data parallel: the gradients averaged over the group (DDP's hook; on a device the step
     * then runs eagerly: snn_train_step_run) */
    if (p->sync.grads) SNN_TRY(p->sync.grads(p->sync.ctx, grads, n));
    if (s->scale > 0) {
        SNN_TRY(be->nonfinite_to(be, grads, n, &res->skip));
        SNN_TRY(be->scale(be, grads, grads, (float)(1.0 / (double)s->scale), n));
        if (p->sync.overflow) { /* every rank takes the same skip decision: through the host */
            int skip = 0;
            SNN_TRY(be->download(be, &skip, &res->skip, sizeof skip));
            SNN_TRY(p->sync.overflow(p->sync.ctx, &skip));
            SNN_TRY(be->upload(be, &res->skip, &skip, sizeof skip));
        }
    }
    if (s->norm) SNN_TRY(be->sumsq_to(be, grads, n, &res->sumsq));
    snn_optim_step os = {.u = (const snn_optim_update *)dev, .adam = s->adam, .sumsq = s->norm ? &res->sumsq : NULL,
                         .max_norm = s->max_norm,
                         .skip = s->scale > 0 ? &res->skip : NULL, .n = s->a.n, .w = s->a.w, .g = s->a.g,
                         .s0 = s->a.s0, .s1 = s->a.s1, .decay_mask = s->a.mask, .copies = s->k ? p->wcopy : NULL,
                         .n_copies = s->k, .nonfinite = &res->nonfinite, .norm = &res->norm};
    return be->optim_step(be, &os);
}

snn_status snn_train_step_run(snn_train_step *s, const snn_tensor_view *x, const int32_t *labels, float lr,
                              snn_train_step_result *r) {
    if (!s || !x || !labels || !r) return snn_error(SNN_E_INVALID, "snn_train_step_run: NULL argument");
    snn_model *m = s->m;
    snn_precision *p = s->p;
    /* a smaller batch (an epoch's ragged last one) fits the step's blocks */
    if (m->T != s->T || m->N > s->Ncap || !m->arena.base)
        return snn_error(SNN_E_STATE, "training step: the model is planned for T %d, N %d; the step was made for "
                         "T %d and at most N %d", m->T, m->N, s->T, s->Ncap);
    s->N = m->N;
    const size_t n_in = (size_t)m->T * m->N * snn_shape_numel(m->in_shape);
    if (x->dtype != SNN_F32 || x->numel != n_in || !x->data)
        return snn_error(SNN_E_SHAPE, "training step: the input must be %zu f32 values", n_in);
    for (int i = 0; i < s->N; i++)
        if (labels[i] < 0 || labels[i] >= s->C)
            return snn_error(SNN_E_INVALID, "label %d of sample %d is outside [0, %d); check that the model's "
                             "class count matches the data set", (int)labels[i], i, s->C);
    s->dx = m->owned_be ? m->dy_store : s->host_dx;
    /* the input: device memory as it is; a host array through the model's page-locked buffer */
    const int on_dev = m->owned_be && x->device && strcmp(x->device, "cpu");
    s->x = x->data;
    s->x_upload = m->owned_be && !on_dev;
    if (s->x_upload && x->data != m->x_host) {
        memcpy(m->x_host, x->data, n_in * sizeof(float));
        s->x = m->x_host;
    }
    if (on_dev) SNN_TRY(s->be->check_ptr(s->be, x->data, n_in * sizeof(float)));
    /* the host's half: the update's scalars and the labels, the weight copies, the loss scale */
    snn_optim_update u;
    SNN_TRY(snn_optimizer_begin_step(s->opt, lr, &u, &s->a));
    if (u.adam && (!s->a.s0 || !s->a.s1)) return snn_error(SNN_E_STATE, "training step: Adam without its state");
    s->adam = u.adam != 0;
    memcpy(s->host, &u, sizeof u);
    memcpy(s->host + s->off_labels, labels, (size_t)s->N * sizeof(int32_t));
    s->k = snn_prec_weight_copies(p, s->opt, &s->all);
    s->scale = p->use_scaler ? snn_loss_scaler_scale(&p->scaler) : 0.0f;
    /* the scale goes to the kernels by value: whoever changed it (this step's scaler update
     * below, or another loop on the same model), a graph recorded with the old one is stale */
    if (s->scale != s->last_scale) snn_model_graph_invalidate(m);
    s->last_scale = s->scale;
    s->step0 = m->step;
    const int variant = s->kind + 2 * (s->scale > 0) + 4 * (s->k > 0) + 8 * (s->max_norm > 0) + 16 * s->N;
    /* DDP's gradient hook on a device enqueues its collective itself, not through the op table,
     * so a replay's dry pass would enqueue it too: with a hook, the step runs eagerly there */
    if (p->sync.grads && m->owned_be) SNN_TRY(step_body(m, s));
    else SNN_TRY(snn_model_graph_run(m, SNN_GRAPH_STEP, s->x, s->dev, variant, step_body, s));
    step_results res;
    SNN_TRY(s->be->download(s->be, &res, s->dev + s->off_res, sizeof res));
    /* the host's bookkeeping of what ran */
    const int skipped = s->scale > 0 && res.skip;
    snn_optimizer_end_step(s->opt, skipped, res.nonfinite);
    if (!skipped && s->k) snn_prec_weight_copies_written(p, s->k, s->all);
    /* FP8: the amaxes come back and the recipes update (on the host, after the step's graph) */
    SNN_TRY(snn_precision_fp8_after_step(p));
    if (p->use_scaler) SNN_TRY(snn_loss_scaler_update(&p->scaler, skipped));
    r->loss = (float)res.loss;
    r->correct = (int)res.correct;
    r->grad_norm = skipped || !s->norm ? NAN : res.norm;
    r->skipped = skipped;
    r->nonfinite = res.nonfinite != 0;
    return SNN_OK;
}
