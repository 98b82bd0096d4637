/* Pipeline schedules over the stages of a vision model (see vision_stage.h): GPipe training
 * with re-materialisation, and the forward-only streaming pipeline for evaluation.
 *
 * Messages between neighbouring stages are fixed-shape [T, mb, boundary] arrays (the
 * boundary shape is the stage's local input/output shape) in the compute dtype: FP32, or
 * BF16 when the stage model is prepared with bf16 precision (activations and gradients), sent with blocking send/recv
 * over the PP communicator: activations forward with tag k, gradients backward with tag
 * K + k, so a stage never confuses two microbatches. Every buffer is allocated by
 * snn_vision_pipeline_plan; the steps allocate nothing. */
#include <stdlib.h>
#include <string.h>

#include "dist/vision_stage.h"
#include "nn/model_internal.h"
#include "snn/dtype.h"
#include "snn/prepare.h"

struct snn_pipeline {
    int T, N, K, mb;
    size_t in_n, out_n;   /* floats of one microbatch at the stage input / output */
    float *xs;            /* [K][in_n] saved stage inputs */
    float *dys;           /* last stage: [K][out_n] loss gradients; else [out_n] received gradient */
    float *dx;            /* [in_n] input gradient to send back (not on the first stage) */
    float *bn;            /* snapshot of the BatchNorm running statistics */
    uint64_t *step0;      /* [K] model step count at each microbatch's first forward */
    double *mb_loss;      /* [K] */
    int *mb_correct;      /* [K] */
    int classes;
    int wire_bf16;        /* messages in BF16 (the compute dtype of a bf16 run) */
    uint16_t *wire;       /* [max(in_n, out_n)] BF16 message buffer */
};

void snn_vision_pipeline_free(snn_pipeline *p) {
    if (!p) return;
    free(p->xs);
    free(p->dys);
    free(p->dx);
    free(p->bn);
    free(p->step0);
    free(p->mb_loss);
    free(p->mb_correct);
    free(p->wire);
    free(p);
}

static snn_status overflow(void) { return snn_error(SNN_E_NOMEM, "pipeline buffers: size overflows"); }

snn_status snn_vision_pipeline_plan(snn_vision_stage *s, int T, int N, int K) {
    if (!s) return snn_error(SNN_E_INVALID, "snn_vision_pipeline_plan: stage is NULL");
    if (T <= 0 || N <= 0 || K <= 0)
        return snn_error(SNN_E_INVALID, "pipeline plan: T, batch and microbatches must be positive (T=%d, N=%d, K=%d)",
                         T, N, K);
    if (N % K)
        return snn_error(SNN_E_INVALID, "batch_size %d must be divisible by pipeline_microbatches %d", N, K);
    if (s->pp_size == 1) K = 1; /* microbatches only shape the pipeline */
    int mb = N / K;
    snn_pipeline *p = s->pipe;
    if (p && p->T == T && p->N == N && p->K == K) return SNN_OK;
    snn_vision_pipeline_free(p);
    s->pipe = NULL;
    p = calloc(1, sizeof *p);
    if (!p) return snn_error(SNN_E_NOMEM, "out of memory");
    p->T = T;
    p->N = N;
    p->K = K;
    p->mb = mb;
    size_t rows = (size_t)T * (size_t)mb;
    if (s->in_numel && rows > SIZE_MAX / s->in_numel / (size_t)K) {
        free(p);
        return overflow();
    }
    p->in_n = rows * s->in_numel;
    p->out_n = rows * s->out_numel;
    p->classes = (int)s->out_numel;
    size_t nb = snn_model_num_buffers(s->model);
    p->xs = malloc(sizeof(float) * (p->in_n * (size_t)K + 1));
    p->dys = malloc(sizeof(float) * (p->out_n * (size_t)(s->last ? K : 1) + 1));
    p->dx = malloc(sizeof(float) * (p->in_n + 1));
    p->bn = malloc(sizeof(float) * (nb + 1));
    p->step0 = calloc((size_t)K, sizeof *p->step0);
    p->mb_loss = calloc((size_t)K, sizeof *p->mb_loss);
    p->mb_correct = calloc((size_t)K, sizeof *p->mb_correct);
    p->wire = malloc(sizeof(uint16_t) * ((p->in_n > p->out_n ? p->in_n : p->out_n) + 1));
    /* a bf16 run sends its activations and gradients in bf16, as the reference's stage buffers */
    snn_precision *prec = snn_model_precision(s->model);
    p->wire_bf16 = prec && snn_precision_config_of(prec)->mode == SNN_PRECISION_BF16;
    s->pipe = p;
    if (!p->xs || !p->dys || !p->dx || !p->bn || !p->step0 || !p->mb_loss || !p->mb_correct || !p->wire)
        return snn_error(SNN_E_NOMEM, "cannot allocate the pipeline buffers");
    return snn_model_plan(s->model, T, mb);
}

snn_status snn_vision_pipeline_set_wire_bf16(snn_vision_stage *s, int bf16) {
    if (!s->pipe) return snn_error(SNN_E_STATE, "snn_vision_pipeline_plan must be called first");
    s->pipe->wire_bf16 = bf16 != 0;
    return SNN_OK;
}

/* Fixed-shape messages between neighbouring stages, FP32 or BF16 on the wire. */
static snn_status send_msg(snn_vision_stage *s, const float *buf, size_t n, int dst, int tag) {
    snn_pipeline *p = s->pipe;
    if (!p->wire_bf16) return snn_comm_send(s->pp, buf, n, SNN_COMM_F32, dst, tag);
    for (size_t i = 0; i < n; i++) p->wire[i] = snn_f32_to_bf16(buf[i]);
    return snn_comm_send(s->pp, p->wire, 2 * n, SNN_COMM_U8, dst, tag);
}

static snn_status recv_msg(snn_vision_stage *s, float *buf, size_t n, int src, int tag) {
    snn_pipeline *p = s->pipe;
    if (!p->wire_bf16) return snn_comm_recv(s->pp, buf, n, SNN_COMM_F32, src, tag);
    SNN_TRY(snn_comm_recv(s->pp, p->wire, 2 * n, SNN_COMM_U8, src, tag));
    for (size_t i = 0; i < n; i++) buf[i] = snn_bf16_to_f32(p->wire[i]);
    return SNN_OK;
}

/* microbatch k of x [T, N, in] into dst [T, mb, in] */
static void gather(const snn_pipeline *p, size_t per, const float *x, int k, float *dst) {
    for (int t = 0; t < p->T; t++)
        memcpy(dst + (size_t)t * p->mb * per, x + ((size_t)t * p->N + (size_t)k * p->mb) * per,
               sizeof(float) * p->mb * per);
}

static void scatter(const snn_pipeline *p, size_t per, const float *src, int k, float *out) {
    for (int t = 0; t < p->T; t++)
        memcpy(out + ((size_t)t * p->N + (size_t)k * p->mb) * per, src + (size_t)t * p->mb * per,
               sizeof(float) * p->mb * per);
}

static snn_status loss_of(snn_vision_loss kind, const float *y, const int32_t *labels, int T, int n, int C,
                          float *loss, float *dy, int *correct) {
    if (kind == SNN_VISION_LOSS_MSE) return snn_loss_mse_rate(y, labels, T, n, C, loss, dy, correct);
    return snn_loss_cross_entropy_mean_t(y, labels, T, n, C, loss, dy, correct);
}

/* backward of the stage's last forward; dx NULL on the first stage */
static snn_status stage_backward(snn_vision_stage *s, const float *dy, float *dx) {
    snn_model *m = s->model;
    if (!dx) return snn_model_backward(m, dy);
    if (!m->last_x || !m->run.training) return snn_error(SNN_E_STATE, "pipeline backward before a training forward");
    return m->root->ops->backward(m->root, &m->run, m->last_x, m->out, dy, dx);
}

static snn_status step_pp1(snn_vision_stage *s, const float *x, const int32_t *labels, snn_vision_loss kind,
                           float *loss, int *correct) {
    snn_pipeline *p = s->pipe;
    const float *y;
    SNN_TRY(snn_model_forward(s->model, x, 1, &y));
    float l;
    int c;
    SNN_TRY(loss_of(kind, y, labels, p->T, p->N, p->classes, &l, p->dys, &c));
    SNN_TRY(snn_model_backward(s->model, p->dys));
    *loss = l;
    *correct = c;
    return SNN_OK;
}

snn_status snn_vision_pipeline_train_step(snn_vision_stage *s, const float *x, const int32_t *labels,
                                          snn_vision_loss kind, float *loss, int *correct) {
    snn_pipeline *p = s->pipe;
    if (!p) return snn_error(SNN_E_STATE, "snn_vision_pipeline_plan must be called before a pipeline step");
    if (s->first && !x) return snn_error(SNN_E_INVALID, "the first pipeline stage needs the input batch");
    if (s->last && !labels) return snn_error(SNN_E_INVALID, "the last pipeline stage needs the labels");
    if (s->pp_size == 1) return step_pp1(s, x, labels, kind, loss, correct);
    snn_model *m = s->model;
    int K = p->K, prev = s->pp_rank - 1, next = s->pp_rank + 1;
    const float *y;
    /* forward of every microbatch */
    for (int k = 0; k < K; k++) {
        float *xk = p->xs + (size_t)k * p->in_n;
        if (s->first) gather(p, s->in_numel, x, k, xk);
        else SNN_TRY(recv_msg(s, xk, p->in_n, prev, k));
        p->step0[k] = snn_model_step_count(m);
        SNN_TRY(snn_model_forward(m, xk, 1, &y)); /* resets the stage's neuron state first */
        if (!s->last) {
            SNN_TRY(send_msg(s, y, p->out_n, next, k));
        } else {
            float l;
            SNN_TRY(loss_of(kind, y, labels + (size_t)k * p->mb, p->T, p->mb, p->classes, &l,
                            p->dys + (size_t)k * p->out_n, &p->mb_correct[k]));
            p->mb_loss[k] = l;
            float inv = 1.0f / (float)K; /* the step's loss is the mean of the microbatch losses */
            float *g = p->dys + (size_t)k * p->out_n;
            for (size_t i = 0; i < p->out_n; i++) g[i] *= inv;
        }
    }
    uint64_t step_after = snn_model_step_count(m);
    size_t nb = snn_model_num_buffers(m);
    memcpy(p->bn, snn_model_buffers(m), nb * sizeof(float));
    /* backwards in reverse order; the last microbatch's activations are still in place */
    for (int k = K - 1; k >= 0; k--) {
        if (k != K - 1) {
            snn_model_set_step_count(m, p->step0[k]);
            SNN_TRY(snn_model_forward(m, p->xs + (size_t)k * p->in_n, 1, &y));
        }
        const float *dy = p->dys + (s->last ? (size_t)k * p->out_n : 0);
        if (!s->last) SNN_TRY(recv_msg(s, p->dys, p->out_n, next, K + k));
        SNN_TRY(stage_backward(s, dy, s->first ? NULL : p->dx));
        if (!s->first) SNN_TRY(send_msg(s, p->dx, p->in_n, prev, K + k));
    }
    memcpy(snn_model_buffers(m), p->bn, nb * sizeof(float));
    snn_model_set_step_count(m, step_after);
    /* loss on the last stage, broadcast over the pipeline */
    double tot[2] = {0, 0};
    if (s->last)
        for (int k = 0; k < K; k++) {
            tot[0] += p->mb_loss[k] / K;
            tot[1] += p->mb_correct[k];
        }
    SNN_TRY(snn_comm_broadcast(s->pp, tot, 2, SNN_COMM_F64, s->pp_size - 1));
    *loss = (float)tot[0];
    *correct = (int)tot[1];
    return SNN_OK;
}

snn_status snn_vision_pipeline_forward(snn_vision_stage *s, const float *x, float *out) {
    if (!s) return snn_error(SNN_E_INVALID, "snn_vision_pipeline_forward: stage is NULL");
    snn_pipeline *p = s->pipe;
    if (!p) return snn_error(SNN_E_STATE, "snn_vision_pipeline_plan must be called before a pipeline forward");
    if (s->first && !x) return snn_error(SNN_E_INVALID, "the first pipeline stage needs the input batch");
    if (s->last && !out) return snn_error(SNN_E_INVALID, "the last pipeline stage needs an output buffer");
    const float *y;
    if (s->pp_size == 1) {
        SNN_TRY(snn_model_forward(s->model, x, 0, &y));
        memcpy(out, y, p->out_n * sizeof(float));
        return SNN_OK;
    }
    for (int k = 0; k < p->K; k++) {
        if (s->first) gather(p, s->in_numel, x, k, p->xs);
        else SNN_TRY(recv_msg(s, p->xs, p->in_n, s->pp_rank - 1, k));
        SNN_TRY(snn_model_forward(s->model, p->xs, 0, &y));
        if (!s->last) SNN_TRY(send_msg(s, y, p->out_n, s->pp_rank + 1, k));
        else scatter(p, s->out_numel, y, k, out);
    }
    return snn_comm_barrier(s->pp); /* work never piles up across batches */
}

snn_status snn_vision_stage_dp_average(snn_vision_stage *s, snn_comm *dp) {
    int n = dp ? snn_comm_size(dp) : 1;
    if (n == 1) return SNN_OK;
    float *g = snn_model_grads(s->model);
    size_t np = snn_model_num_params(s->model);
    SNN_TRY(snn_comm_allreduce(dp, g, np, SNN_COMM_F32, SNN_COMM_SUM));
    float inv = 1.0f / (float)n;
    for (size_t i = 0; i < np; i++) g[i] *= inv;
    return SNN_OK;
}
