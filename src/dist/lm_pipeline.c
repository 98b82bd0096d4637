/* The 1F1B pipeline schedule over the stages of a language model, the gradient reductions
 * of tensor / pipeline / data parallelism, the global-norm clip and the training step
 * (lm_stage.h).
 *
 * Schedule (Megatron's non-interleaved 1F1B), stage p of PP over K microbatches:
 *   warm-up    W = min(PP - p - 1, K) forwards;
 *   steady     K - W times: one forward (microbatch W + i), one backward (microbatch i);
 *   cool-down  the W remaining backwards.
 * A stage sends its output forward with tag k and its input gradient backward with tag
 * K + k. Where a stage both sends to and receives from one neighbour in the same step (the
 * steady phase), the two are posted together (snn_comm_sendrecv), so no pair of stages can
 * wait on each other however large the messages.
 *
 * Activations of a microbatch: the modules keep one set of saved activations (their arena),
 * so a stage keeps the INPUT of each microbatch in flight (a ring of min(K, W + 1)
 * fixed-shape slots [T mb, stage input]) and, before the backward of microbatch i, runs the
 * forward of i again from its saved input when the model's activations belong to another
 * microbatch (every stage but the last, whose backward follows its forward directly). The
 * forward is deterministic (the neuron state starts from reset in every forward, there is
 * no dropout), so the recomputed activations are those of the first forward, bit for bit.
 *
 * Every buffer is allocated by snn_lm_pipeline_plan; the step allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/lm_stage.h"
#include "nn/model_internal.h"
#include "snn/dtype.h"
#include "snn/prepare.h"

struct snn_lm_pipe {
    int T, mb, K, S, slots;
    size_t in_n, out_n;  /* floats of one microbatch at the stage input / output */
    float *xs;           /* [slots][in_n] microbatch inputs (first stage: the tiled ids) */
    float *dy;           /* [out_n] received output gradient, or the loss gradient (last) */
    float *dx;           /* [in_n] input gradient to send back (not on the first stage) */
    float *mx;           /* last stage, TP > 1: [mb S] */
    double *red, *tl;    /* last stage: [2 mb S], [mb S] */
    float *tied;         /* tied copy exchange: [numel of the embedding shard] */
    int wire_bf16;
    uint16_t *ws, *wr;   /* BF16 send / receive buffers */
    int cur;             /* microbatch whose activations the model holds (-1: none) */
    double loss_sum, count;
};

void snn_lm_pipeline_free(snn_lm_pipe *p) {
    if (!p) return;
    free(p->xs);
    free(p->dy);
    free(p->dx);
    free(p->mx);
    free(p->red);
    free(p->tl);
    free(p->tied);
    free(p->ws);
    free(p->wr);
    free(p);
}

static snn_status find_tensor(snn_model *m, const char *name, snn_tensor_info *ti) {
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        SNN_TRY(snn_model_tensor(m, i, ti));
        if (!strcmp(ti->name, name)) return SNN_OK;
    }
    return snn_error(SNN_E_STATE, "the stage has no tensor %s", name);
}

snn_status snn_lm_pipeline_plan(snn_lm_stage *s, int micro, int K, int pipeline_bf16) {
    if (micro <= 0 || K <= 0 || K > 16000)
        return snn_error(SNN_E_INVALID, "pipeline plan: micro_batch_size must be > 0 and the microbatches in "
                         "1..16000 (got %d, %d)", micro, K);
    if (K < s->pp_size)
        return snn_error(SNN_E_INVALID, "num_microbatches %d (global_batch_size / (micro_batch_size x DP)) must be >= "
                         "pipeline_parallel_size %d", K, s->pp_size);
    snn_precision *prec = snn_model_precision(s->model);
    int params_bf16 = prec && snn_precision_config_of(prec)->mode == SNN_PRECISION_BF16;
    if (pipeline_bf16 != params_bf16)
        return snn_error(SNN_E_INVALID, "pipeline_dtype %s must equal params_dtype %s", pipeline_bf16 ? "bf16" : "fp32",
                         params_bf16 ? "bf16" : "fp32");
    const int T = s->opts.time_steps, S = s->opts.seq;
    snn_lm_pipe *p = s->pipe;
    if (p && p->mb == micro && p->K == K && p->wire_bf16 == pipeline_bf16) return SNN_OK;
    snn_lm_pipeline_free(p);
    s->pipe = NULL;
    p = calloc(1, sizeof *p);
    if (!p) return snn_error(SNN_E_NOMEM, "out of memory");
    s->pipe = p;
    p->T = T;
    p->mb = micro;
    p->K = K;
    p->S = S;
    int W = s->pp_size - s->pp_rank - 1;
    if (W > K) W = K;
    p->slots = W + 1 < K ? W + 1 : K;
    size_t rows = (size_t)T * (size_t)micro;
    if (rows > SIZE_MAX / 8 / (s->in_numel + s->out_numel + 1) / (size_t)(p->slots + 1))
        return snn_error(SNN_E_NOMEM, "pipeline buffers: size overflows");
    p->in_n = rows * s->in_numel;
    p->out_n = rows * s->out_numel;
    p->wire_bf16 = pipeline_bf16;
    p->cur = -1;
    size_t tok = (size_t)micro * (size_t)S;
    p->xs = malloc(sizeof(float) * (p->in_n * (size_t)p->slots + 1));
    p->dy = malloc(sizeof(float) * (p->out_n + 1));
    p->dx = malloc(sizeof(float) * (p->in_n + 1));
    p->mx = malloc(sizeof(float) * (tok + 1));
    p->red = malloc(sizeof(double) * (2 * tok + 1));
    p->tl = malloc(sizeof(double) * (tok + 1));
    size_t big = p->in_n > p->out_n ? p->in_n : p->out_n;
    p->ws = malloc(sizeof(uint16_t) * (big + 1));
    p->wr = malloc(sizeof(uint16_t) * (big + 1));
    if (!p->xs || !p->dy || !p->dx || !p->mx || !p->red || !p->tl || !p->ws || !p->wr)
        return snn_error(SNN_E_NOMEM, "cannot allocate the pipeline buffers");
    if (s->opts.tied && s->pp_size > 1 && (s->first || s->last)) {
        snn_tensor_info ti;
        SNN_TRY(find_tensor(s->model, s->first ? "wte.weight" : "lm_head.weight", &ti));
        p->tied = malloc(sizeof(float) * (ti.numel + 1));
        if (!p->tied) return snn_error(SNN_E_NOMEM, "cannot allocate the pipeline buffers");
    }
    return snn_model_plan(s->model, T, micro);
}

/* ---- messages -------------------------------------------------------------------------------- */

static const void *wire_out(snn_lm_pipe *p, const float *buf, size_t n, snn_comm_dtype *t, size_t *cnt) {
    if (!p->wire_bf16) {
        *t = SNN_COMM_F32;
        *cnt = n;
        return buf;
    }
    for (size_t i = 0; i < n; i++) p->ws[i] = snn_f32_to_bf16(buf[i]);
    *t = SNN_COMM_U8;
    *cnt = 2 * n;
    return p->ws;
}

static void wire_in(snn_lm_pipe *p, float *buf, size_t n) {
    if (p->wire_bf16)
        for (size_t i = 0; i < n; i++) buf[i] = snn_bf16_to_f32(p->wr[i]);
}

static snn_status send_to(snn_lm_stage *s, const float *buf, size_t n, int dst, int tag) {
    snn_comm_dtype t;
    size_t c;
    const void *w = wire_out(s->pipe, buf, n, &t, &c);
    return snn_comm_send(s->pp, w, c, t, dst, tag);
}

static snn_status recv_from(snn_lm_stage *s, float *buf, size_t n, int src, int tag) {
    snn_lm_pipe *p = s->pipe;
    if (!p->wire_bf16) return snn_comm_recv(s->pp, buf, n, SNN_COMM_F32, src, tag);
    SNN_TRY(snn_comm_recv(s->pp, p->wr, 2 * n, SNN_COMM_U8, src, tag));
    wire_in(p, buf, n);
    return SNN_OK;
}

static snn_status exchange(snn_lm_stage *s, const float *sbuf, size_t sn, int stag, float *rbuf, size_t rn, int peer,
                           int rtag) {
    snn_lm_pipe *p = s->pipe;
    snn_comm_dtype t;
    size_t c;
    const void *w = wire_out(p, sbuf, sn, &t, &c);
    if (!p->wire_bf16) return snn_comm_sendrecv(s->pp, w, c, peer, stag, rbuf, rn, peer, rtag, SNN_COMM_F32);
    SNN_TRY(snn_comm_sendrecv(s->pp, w, c, peer, stag, p->wr, 2 * rn, peer, rtag, SNN_COMM_U8));
    wire_in(p, rbuf, rn);
    return SNN_OK;
}

/* ---- one microbatch -------------------------------------------------------------------------- */

static float *slot(snn_lm_pipe *p, int k) { return p->xs + (size_t)(k % p->slots) * p->in_n; }

static snn_status loss_of(snn_lm_stage *s, const float *y, const int32_t *labels, float scale, int with_grad) {
    snn_lm_pipe *p = s->pipe;
    const snn_gpt_opts *o = &s->opts;
    double l = 0, c = 0;
    if (s->tp_size == 1)
        SNN_TRY(snn_lm_cross_entropy(y, labels, NULL, p->T, p->mb, p->S, o->vocab, o->reduce_sum, p->tl, &l, &c,
                                     with_grad ? p->dy : NULL, scale));
    else
        SNN_TRY(snn_lm_vocab_parallel_ce(s->tp, y, labels, p->T, p->mb, p->S, o->vocab, s->vocab_lo, s->vocab_local,
                                         o->reduce_sum, p->mx, p->red, p->tl, &l, &c, p->dy, scale));
    p->loss_sum += l;
    p->count += c;
    return SNN_OK;
}

/* Forward of microbatch k from its slot (first stage: tile its ids there first); on the
 * last stage also its loss and loss gradient. */
static snn_status forward(snn_lm_stage *s, int k, const int32_t *ids, const int32_t *labels, float scale,
                          int training) {
    snn_lm_pipe *p = s->pipe;
    float *x = slot(p, k);
    if (s->first) {
        const size_t S = (size_t)p->S, mb = (size_t)p->mb;
        const int32_t *src = ids + (size_t)k * mb * S;
        for (int t = 0; t < p->T; t++)
            for (size_t i = 0; i < mb * S; i++) x[(size_t)t * mb * S + i] = (float)src[i];
    }
    const float *y;
    SNN_TRY(snn_model_forward(s->model, x, training, &y)); /* resets the neuron state first */
    p->cur = k;
    if (s->last) SNN_TRY(loss_of(s, y, labels + (size_t)k * p->mb * p->S, scale, training));
    return SNN_OK;
}

static snn_status backward(snn_lm_stage *s, int i) {
    snn_lm_pipe *p = s->pipe;
    snn_model *m = s->model;
    if (p->cur != i) { /* re-materialise microbatch i's activations from its saved input */
        const float *y;
        SNN_TRY(snn_model_forward(m, slot(p, i), 1, &y));
        p->cur = i;
    }
    if (s->first) return snn_model_backward(m, p->dy);
    return m->root->ops->backward(m->root, &m->run, m->last_x, m->out, p->dy, p->dx);
}

snn_status snn_lm_pipeline_train(snn_lm_stage *s, const int32_t *ids, const int32_t *labels, float grad_scale,
                                 double *loss_sum, double *count) {
    snn_lm_pipe *p = s->pipe;
    if (!p) return snn_error(SNN_E_STATE, "snn_lm_pipeline_plan must be called before a pipeline step");
    if (s->first && !ids) return snn_error(SNN_E_INVALID, "the first pipeline stage needs the token ids");
    if (s->last && !labels) return snn_error(SNN_E_INVALID, "the last pipeline stage needs the labels");
    const int K = p->K, prev = s->pp_rank - 1, next = s->pp_rank + 1;
    int W = s->pp_size - s->pp_rank - 1;
    if (W > K) W = K;
    const int R = K - W;
    snn_model *m = s->model;
    const uint64_t step0 = snn_model_step_count(m);
    p->loss_sum = p->count = 0;
    p->cur = -1;
    for (int k = 0; k < W; k++) { /* warm-up */
        if (!s->first) SNN_TRY(recv_from(s, slot(p, k), p->in_n, prev, k));
        SNN_TRY(forward(s, k, ids, labels, grad_scale, 1));
        if (!s->last) SNN_TRY(send_to(s, m->out, p->out_n, next, k));
    }
    if (R > 0 && !s->first) SNN_TRY(recv_from(s, slot(p, W), p->in_n, prev, W));
    for (int i = 0; i < R; i++) { /* steady: 1F1B */
        const int k = W + i;
        SNN_TRY(forward(s, k, ids, labels, grad_scale, 1));
        if (!s->last) SNN_TRY(exchange(s, m->out, p->out_n, k, p->dy, p->out_n, next, K + i));
        SNN_TRY(backward(s, i));
        if (s->first) continue;
        if (i == R - 1) SNN_TRY(send_to(s, p->dx, p->in_n, prev, K + i));
        else SNN_TRY(exchange(s, p->dx, p->in_n, K + i, slot(p, k + 1), p->in_n, prev, k + 1));
    }
    for (int i = R; i < K; i++) { /* cool-down */
        if (!s->last) SNN_TRY(recv_from(s, p->dy, p->out_n, next, K + i));
        SNN_TRY(backward(s, i));
        if (!s->first) SNN_TRY(send_to(s, p->dx, p->in_n, prev, K + i));
    }
    /* one forward per microbatch in the step count, recomputations not counted */
    snn_model_set_step_count(m, step0 + (uint64_t)K);
    double tot[2] = {p->loss_sum, p->count};
    if (s->pp) SNN_TRY(snn_comm_broadcast(s->pp, tot, 2, SNN_COMM_F64, s->pp_size - 1));
    *loss_sum = tot[0];
    *count = tot[1];
    return SNN_OK;
}

snn_status snn_lm_pipeline_eval(snn_lm_stage *s, const int32_t *ids, const int32_t *labels, double *loss_sum,
                                double *count) {
    snn_lm_pipe *p = s->pipe;
    if (!p) return snn_error(SNN_E_STATE, "snn_lm_pipeline_plan must be called before a pipeline forward");
    if (s->first && !ids) return snn_error(SNN_E_INVALID, "the first pipeline stage needs the token ids");
    if (s->last && !labels) return snn_error(SNN_E_INVALID, "the last pipeline stage needs the labels");
    p->loss_sum = p->count = 0;
    for (int k = 0; k < p->K; k++) {
        if (!s->first) SNN_TRY(recv_from(s, slot(p, k), p->in_n, s->pp_rank - 1, k));
        SNN_TRY(forward(s, k, ids, labels, 1.0f, 0));
        if (!s->last) SNN_TRY(send_to(s, s->model->out, p->out_n, s->pp_rank + 1, k));
    }
    p->cur = -1;
    double tot[2] = {p->loss_sum, p->count};
    if (s->pp) SNN_TRY(snn_comm_broadcast(s->pp, tot, 2, SNN_COMM_F64, s->pp_size - 1));
    *loss_sum = tot[0];
    *count = tot[1];
    return SNN_OK;
}

/* ---- gradients ------------------------------------------------------------------------------- */

snn_status snn_lm_stage_reduce_grads(snn_lm_stage *s) {
    snn_model *m = s->model;
    snn_lm_pipe *p = s->pipe;
    if (s->opts.tied && s->pp_size > 1 && (s->first || s->last)) {
        /* Megatron's rule: the embedding and its copy on the last stage add their gradients */
        if (!p || !p->tied) return snn_error(SNN_E_STATE, "snn_lm_pipeline_plan must be called first");
        snn_tensor_info ti;
        SNN_TRY(find_tensor(m, s->first ? "wte.weight" : "lm_head.weight", &ti));
        int peer = s->first ? s->pp_size - 1 : 0;
        SNN_TRY(snn_comm_sendrecv(s->pp, ti.grad, ti.numel, peer, 1, p->tied, ti.numel, peer, 1, SNN_COMM_F32));
        /* first + last on both stages: the same sum bit for bit */
        if (s->first)
            for (size_t i = 0; i < ti.numel; i++) ti.grad[i] = ti.grad[i] + p->tied[i];
        else
            for (size_t i = 0; i < ti.numel; i++) ti.grad[i] = p->tied[i] + ti.grad[i];
    }
    if (s->sp) /* replicated tensors computed on a sequence shard: sum their gradients over TP */
        for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
            snn_tensor_info ti;
            SNN_TRY(snn_model_tensor(m, i, &ti));
            if (ti.is_buffer || s->rules[i].dim >= 0) continue;
            SNN_TRY(snn_comm_allreduce(s->tp, ti.grad, ti.numel, SNN_COMM_F32, SNN_COMM_SUM));
        }
    if (s->kv)
        for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
            snn_tensor_info ti;
            SNN_TRY(snn_model_tensor(m, i, &ti));
            if (ti.is_buffer || s->kv_off[i] >= ti.numel) continue;
            SNN_TRY(snn_comm_allreduce(s->kv, ti.grad + s->kv_off[i], ti.numel - s->kv_off[i], SNN_COMM_F32,
                                       SNN_COMM_SUM));
        }
    if (s->dp)
        SNN_TRY(snn_comm_allreduce(s->dp, snn_model_grads(m), snn_model_num_params(m), SNN_COMM_F32, SNN_COMM_SUM));
    return SNN_OK;
}

snn_status snn_lm_stage_clip_grad_norm(snn_lm_stage *s, float max_norm, float *norm_out) {
    snn_model *m = s->model;
    double total = 0.0;
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        SNN_TRY(snn_model_tensor(m, i, &ti));
        if (ti.is_buffer) continue;
        double acc = 0.0;
        for (size_t j = 0; j < s->norm_n[i]; j++) acc += (double)ti.grad[j] * (double)ti.grad[j];
        total += acc;
    }
    if (s->tp) SNN_TRY(snn_comm_allreduce(s->tp, &total, 1, SNN_COMM_F64, SNN_COMM_SUM));
    if (s->pp) SNN_TRY(snn_comm_allreduce(s->pp, &total, 1, SNN_COMM_F64, SNN_COMM_SUM));
    const float norm = (float)sqrt(total);
    *norm_out = norm;
    if (!isfinite(norm) || !(max_norm > 0.0f)) return SNN_OK;
    const float coef = max_norm / (norm + 1e-6f); /* as snn_clip_grad_norm */
    if (coef < 1.0f) {
        float *g = snn_model_grads(m);
        for (size_t i = 0, n = snn_model_num_params(m); i < n; i++) g[i] *= coef;
    }
    return SNN_OK;
}

snn_status snn_lm_stage_train_step(snn_lm_stage *s, snn_optimizer *opt, const int32_t *ids, const int32_t *labels,
                                   float lr, float clip, double *loss, float *grad_norm) {
    snn_lm_pipe *p = s->pipe;
    if (!p) return snn_error(SNN_E_STATE, "snn_lm_pipeline_plan must be called before a training step");
    if (!snn_optimizer_for_model(opt, s->model))
        return snn_error(SNN_E_INVALID, "the optimizer does not belong to this stage's model");
    const int dp = s->dp ? snn_comm_size(s->dp) : 1;
    const double tokens = (double)dp * p->K * p->mb * p->S; /* every label counts: no mask */
    snn_model_zero_grad(s->model);
    double tot[2];
    SNN_TRY(snn_lm_pipeline_train(s, ids, labels, (float)(1.0 / tokens), &tot[0], &tot[1]));
    SNN_TRY(snn_lm_stage_reduce_grads(s));
    float gn;
    SNN_TRY(snn_lm_stage_clip_grad_norm(s, clip, &gn));
    SNN_TRY(snn_optimizer_step(opt, lr, !isfinite(gn)));
    if (s->dp) SNN_TRY(snn_comm_allreduce(s->dp, tot, 2, SNN_COMM_F64, SNN_COMM_SUM));
    *loss = tot[0] / tot[1];
    *grad_norm = gn;
    return SNN_OK;
}
