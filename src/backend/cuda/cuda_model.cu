/* Whole models on the GPU: mirror a host model's tree, lay out one device parameter buffer,
 * plan every activation, and run training steps as one CUDA graph (see include/snn/cuda.h).
 *
 * Memory is planned like the CPU model's arena: a measuring pass sums every buffer, one
 * cudaMalloc takes it, a second pass hands out the pointers. Parameters get their own padded
 * layout (each tensor starts on a 128-byte boundary, so cuBLASLt sees aligned operands);
 * upload and download go tensor by tensor between the two layouts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_model_internal.h"

#define GM_ALIGN_FLOATS 32

/* ---- small kernels of the step ---- */
__global__ void gm_broadcast_kernel(float *dst, const float *src, size_t n, int T) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * (size_t)T;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i % n];
}

/* x [T][N][F] = x1 [N][F] repeated over T (direct encoding) */
static snn_status broadcast_input(snn_cuda_model *g) {
    size_t n = (size_t)g->B * g->in_feat;
    unsigned blocks = snn_grid(n, 256);
    gm_broadcast_kernel<<<blocks < 4096u ? blocks : 4096u, 256, 0, snn_cuda_stream_of(g->c)>>>(
        g->x, g->x1, (size_t)g->N * g->in_feat, g->T);
    SNN_CU_LAUNCHED("broadcast input");
    return SNN_OK;
}

/* correct += [argmax_c mean_t out[t][b][c] == label[b]] (first maximum), one thread a sample */
__global__ void gm_correct_kernel(const float *out, const int32_t *labels, int T, int B, int C,
                                  int *correct) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int best = 0;
    float bv = -INFINITY;
    for (int k = 0; k < C; k++) {
        float s = 0.0f;
        for (int t = 0; t < T; t++) s += out[((size_t)t * B + b) * C + k];
        if (s > bv) {
            bv = s;
            best = k;
        }
    }
    if (best == labels[b]) atomicAdd(correct, 1);
}

__global__ void gm_accumulate_kernel(const float *loss, const int *correct, snn_gm_stats *acc) {
    acc->loss += (double)*loss;
    acc->correct += *correct;
    acc->steps += 1;
}

/* The model's forward counter (snn_model_forward's step): one per forward, training or not */
__global__ void gm_count_forward_kernel(unsigned long long *count) { *count += 1; }

static snn_status count_forward(snn_cuda_model *g) {
    gm_count_forward_kernel<<<1, 1, 0, snn_cuda_stream_of(g->c)>>>(g->fwd_count);
    SNN_CU_LAUNCHED("forward counter");
    return SNN_OK;
}

__global__ void gm_sumsq_kernel(const float *x, size_t n, double *out) {
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    __shared__ double red[32];
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (unsigned w = 0; w < blockDim.x / 32; w++) t += red[w];
        atomicAdd(out, t);
    }
}

/* torch's clip_grad_norm_: coef = max_norm / (norm + 1e-6) in FP32, applied when < 1; a
 * non-finite norm leaves the gradients alone (as the CPU code does). */
__global__ void gm_clip_finalize_kernel(const double *norm2, float max_norm,
                                        snn_cuda_step_scalars *s) {
    /* grad_scale is 1, or 1/loss_scale under FP16 loss scaling: the norm of the true
     * gradients is the measured one times it (the CPU clips after unscaling) */
    const float unscale = s->grad_scale;
    float norm = (float)(sqrt(*norm2) * (double)unscale);
    float coef = max_norm / (norm + 1e-6f);
    if (isfinite(norm) && coef < 1.0f) s->grad_scale = unscale * coef;
}

/* ---- FP16 dynamic loss scaling on the device (PyTorch's GradScaler rule, as
 * src/precision/loss_scaler.c): the "skip this step" flag is read by the optimizer kernel ---- */
__global__ void gm_scaler_begin_kernel(const snn_gm_scaler *sc, snn_cuda_step_scalars *s) {
    s->grad_scale = (float)(1.0 / (double)sc->scale); /* rounded once, like torch */
    s->skip = 0;
}

__global__ void gm_scale_kernel(float *x, size_t n, const snn_gm_scaler *sc) {
    const float k = sc->scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= k;
}

__global__ void gm_found_inf_kernel(const float *g, size_t n, snn_cuda_step_scalars *s) {
    int bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        bad |= !isfinite(g[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0) s->skip = 1;
}

__global__ void gm_scaler_update_kernel(snn_gm_scaler *sc, const snn_cuda_step_scalars *s) {
    if (s->skip) {
        sc->scale = (float)((double)sc->scale * 0.5);
        sc->tracker = 0;
    } else if (sc->tracker + 1 == 2000) {
        float grown = (float)((double)sc->scale * 2.0);
        if (isfinite(grown)) sc->scale = grown;
        sc->tracker = 0;
    } else {
        sc->tracker++;
    }
}

/* ---- tree ---- */
static void gnode_free(gnode *n) {
    if (!n) return;
    for (int i = 0; i < n->n_kids; i++) gnode_free(n->kids[i]);
    free(n->kids);
    free(n->f8);
    free(n);
}

static snn_status gnode_build(snn_module *m, gnode **out) {
    gnode *n = (gnode *)calloc(1, sizeof *n);
    if (!n) return snn_error(SNN_E_NOMEM, "out of memory");
    *out = n;
    n->m = m;
    n->d = snn_module_describe(m);
    n->in_numel = snn_shape_numel(m->in);
    n->out_numel = snn_shape_numel(m->out);
    const char *k = snn_module_own_ops(m)->kind;
    const char *nm = m->name[0] ? m->name : "(root)";
    if (m->prec)
        return snn_error(SNN_E_UNSUPPORTED,
                         "module %s carries a CPU precision wrapper; on the GPU pick the "
                         "precision with the runner's compute type instead", nm);
    if (!strcmp(k, "Sequential") || !strcmp(k, "Residual")) {
        n->kind = !strcmp(k, "Sequential") ? GK_SEQ : GK_RES;
        n->n_kids = m->n_children;
        if (n->kind == GK_RES && m->n_children != 1)
            return snn_error(SNN_E_STATE, "Residual %s must have one child", nm);
        n->kids = (gnode **)calloc(m->n_children ? m->n_children : 1, sizeof *n->kids);
        if (!n->kids) return snn_error(SNN_E_NOMEM, "out of memory");
        for (int i = 0; i < m->n_children; i++) SNN_TRY(gnode_build(m->children[i], &n->kids[i]));
        return SNN_OK;
    }
    if (!strcmp(k, "Flatten") || !strcmp(k, "Reshape")) {
        n->kind = GK_ALIAS;
        return SNN_OK;
    }
    if (!strcmp(k, "Dropout")) {
        /* p > 0: the CPU's Philox mask, drawn on the device (cuda_model_layers.cu) */
        n->kind = n->d.p > 0.0f ? GK_DROPOUT : GK_ALIAS;
        return SNN_OK;
    }
    if (!strcmp(k, "Linear")) {
        n->kind = GK_LINEAR;
        n->rows = 0; /* set in plan: depends on B */
        return SNN_OK;
    }
    if (!strcmp(k, "Conv2d") || !strcmp(k, "Conv1d")) {
        n->kind = GK_CONV;
        n->O = n->d.out_features;
        n->C = n->d.in_features;
        if (!strcmp(k, "Conv2d")) {
            n->H = m->in.d[1];
            n->W = m->in.d[2];
            n->k = n->d.kernel;
            n->s = n->d.stride;
            n->p = n->d.padding;
            n->Ho = m->out.d[1];
            n->Wo = m->out.d[2];
        } else {
            if (n->d.kernel != 1 || n->d.stride != 1 || n->d.padding != 0)
                return snn_error(SNN_E_UNSUPPORTED,
                                 "Conv1d %s: only pointwise (kernel 1, stride 1, padding 0) Conv1d "
                                 "runs on the GPU", nm);
            n->H = 1;
            n->W = m->in.rank >= 2 ? m->in.d[1] : 1;
            n->k = 1;
            n->s = 1;
            n->p = 0;
            n->Ho = 1;
            n->Wo = n->W;
        }
        n->P = n->Ho * n->Wo;
        n->Kc = n->C * n->k * n->k;
        n->ldcol = (n->Kc + 7) / 8 * 8;
        return SNN_OK;
    }
    if (!strcmp(k, "BatchNorm")) {
        n->kind = GK_BN;
        n->C = n->d.in_features;
        n->S = (int)(n->in_numel / (size_t)n->C);
        return SNN_OK;
    }
    if (!strcmp(k, "LayerNorm")) {
        n->kind = GK_LN;
        return SNN_OK;
    }
    if (!strcmp(k, "MaxPool2d") || !strcmp(k, "AvgPool2d")) {
        n->kind = !strcmp(k, "MaxPool2d") ? GK_MAXPOOL : GK_AVGPOOL;
        n->Ho = m->out.d[1];
        n->Wo = m->out.d[2];
        n->C = m->in.d[0];
        n->H = m->in.d[1];
        n->W = m->in.d[2];
        n->k = n->d.kernel;
        n->s = n->d.stride;
        n->p = n->d.padding;
        return SNN_OK;
    }
    if (snn_module_is_neuron(m)) {
        n->kind = GK_NEURON;
        n->nopt = *snn_neuron_module_opts(m);
        /* PLIF: k = sigmoid(w) is read from the parameter buffer on the device */
        n->plif = n->nopt.kind == SNN_NEURON_PLIF;
        n->nk = snn_neuron_module_decay(m);
        return SNN_OK;
    }
    if (!strcmp(k, "GELU")) {
        n->kind = GK_GELU;
        return SNN_OK;
    }
    if (!strcmp(k, "TokenMean")) {
        n->kind = GK_TMEAN;
        n->C = m->in.d[0];
        n->L = m->in.rank >= 2 ? m->in.d[1] : 1;
        return SNN_OK;
    }
    if (!strcmp(k, "SpikingSelfAttentionCore")) {
        n->kind = GK_SSA;
        n->C = m->in.d[0] / 3;
        n->L = m->in.rank >= 2 ? m->in.d[1] : 1;
        n->heads = n->d.heads;
        return SNN_OK;
    }
    return snn_error(SNN_E_UNSUPPORTED, "module %s (%s) has no GPU implementation yet", nm, k);
}

/* ---- parameters ---- */
static size_t entry_index(const snn_cuda_model *g, const snn_param *p) {
    for (size_t i = 0; i < g->host->n_tensors; i++)
        if (g->host->tensors[i].param == p) return i;
    return (size_t)-1;
}

static void bind_params(snn_cuda_model *g, gnode *n) {
    snn_module *m = n->m;
    size_t es = snn_cuda_dsize(g->o.compute);
    for (int i = 0; i < m->n_params; i++) {
        snn_param *p = &m->params[i];
        size_t off = g->doff[entry_index(g, p)];
        if (p->kind == SNN_PARAM_BUFFER) {
            if (!strcmp(p->name, "running_mean")) n->rmean = g->buffers + off;
            if (!strcmp(p->name, "running_var")) n->rvar = g->buffers + off;
            continue;
        }
        if (!strcmp(p->name, "weight")) {
            n->w = g->params + off;
            n->gw = g->grads + off;
            n->wc = (const char *)g->wc + off * es;
        } else if (!strcmp(p->name, "bias")) {
            n->b = g->params + off;
            n->gb = g->grads + off;
        } else if (n->plif && !strcmp(p->name, "w")) {
            n->w = g->params + off;
            n->gw = g->grads + off;
        }
    }
    for (int i = 0; i < n->n_kids; i++) bind_params(g, n->kids[i]);
}

/* ---- activation planning: forward pointers, then backward pointers ---- */
static float *takef(snn_cuda_model *g, size_t n) { return (float *)g->act.take(n * sizeof(float)); }

static void note_scratch(size_t *have, size_t want) {
    if (want > *have) *have = want;
}

static void plan_fwd(snn_cuda_model *g, gnode *n, const float *x) {
    const size_t B = (size_t)g->B;
    n->x = x;
    size_t es = snn_cuda_dsize(g->o.compute);
    switch (n->kind) {
    case GK_SEQ: {
        const float *cur = x;
        for (int i = 0; i < n->n_kids; i++) {
            plan_fwd(g, n->kids[i], cur);
            cur = n->kids[i]->y;
        }
        n->y = (float *)cur;
        return;
    }
    case GK_RES:
        plan_fwd(g, n->kids[0], x);
        n->y = takef(g, B * n->out_numel);
        return;
    case GK_ALIAS: n->y = (float *)x; return;
    case GK_LINEAR:
        if (n->f8) {
            n->y = takef(g, B * n->out_numel);
            note_scratch(&g->scratch_a_bytes, snn_gm_fp8_plan_node(g, n));
            return;
        }
        n->rows = (int)(B * n->in_numel / (size_t)n->d.in_features);
        n->y = takef(g, B * n->out_numel);
        if (g->o.compute != SNN_F32) n->xc = g->act.take((size_t)n->rows * n->d.in_features * es);
        note_scratch(&g->scratch_a_bytes, (size_t)n->rows * n->d.out_features * es);
        return;
    case GK_CONV: {
        size_t BP = B * (size_t)n->P;
        n->y = takef(g, B * n->out_numel);
        if (n->f8) { /* FP8 pointwise Conv1d: token-major GEMMs, no im2col */
            note_scratch(&g->scratch_a_bytes, snn_gm_fp8_plan_node(g, n));
            return;
        }
        n->xc = g->act.take(BP * (size_t)n->ldcol * es);
        note_scratch(&g->scratch_a_bytes, BP * (size_t)n->O * sizeof(float));
        note_scratch(&g->scratch_b_bytes, BP * (size_t)n->O * es);
        note_scratch(&g->scratch_c_bytes, BP * (size_t)n->Kc * sizeof(float));
        return;
    }
    case GK_BN:
        n->y = takef(g, B * n->out_numel);
        n->mean = takef(g, (size_t)n->C);
        n->invstd = takef(g, (size_t)n->C);
        note_scratch(&g->bn_work_bytes, snn_cuda_batchnorm_work_bytes(g->B, n->C, n->S));
        return;
    case GK_LN:
        n->V = B * n->in_numel / (size_t)n->d.in_features;
        n->y = takef(g, B * n->out_numel);
        n->lmean = (double *)g->act.take(n->V * sizeof(double));
        n->lrstd = (double *)g->act.take(n->V * sizeof(double));
        note_scratch(&g->ln_work_bytes, snn_cuda_layernorm_work_bytes(n->V, n->d.in_features));
        return;
    case GK_MAXPOOL:
        n->y = takef(g, B * n->out_numel);
        n->arg = (uint8_t *)g->act.take(B * n->out_numel);
        return;
    case GK_NEURON:
        n->y = takef(g, B * n->out_numel);
        if (g->nprec) return snn_gm_nprec_plan(g, n);
        n->h = takef(g, B * n->in_numel);
        if (n->plif) n->gk = takef(g, 1);
        return;
    case GK_DROPOUT:
        n->y = takef(g, B * n->out_numel);
        n->mask = takef(g, (size_t)g->N * n->in_numel);
        return;
    case GK_AVGPOOL:
    case GK_GELU:
    case GK_TMEAN: n->y = takef(g, B * n->out_numel); return;
    case GK_SSA:
        n->y = takef(g, B * n->out_numel);
        note_scratch(&g->ssa_work_bytes, snn_cuda_ssa_work_bytes(g->B, n->C, n->L, n->heads));
        return;
    }
}

/* need: someone reads dL/dx of this node. Kinds whose kernels always write dx get a buffer
 * regardless (BN, neurons, attention, pooling, token mean, GELU). */
static void plan_bwd(snn_cuda_model *g, gnode *n, const float *gy, int need) {
    const size_t B = (size_t)g->B;
    n->gy = gy;
    n->need_gin = need;
    switch (n->kind) {
    case GK_SEQ: {
        const float *cur = gy;
        for (int i = n->n_kids - 1; i >= 0; i--) {
            plan_bwd(g, n->kids[i], cur, i > 0 || need);
            cur = n->kids[i]->gin;
        }
        n->gin = (float *)cur;
        return;
    }
    case GK_RES:
        plan_bwd(g, n->kids[0], gy, 1);
        n->gin = need ? takef(g, B * n->in_numel) : NULL;
        return;
    case GK_ALIAS: n->gin = (float *)gy; return;
    case GK_LINEAR:
    case GK_CONV: n->gin = need ? takef(g, B * n->in_numel) : NULL; return;
    default: n->gin = takef(g, B * n->in_numel); return;
    }
}

static snn_status plan_all(snn_cuda_model *g) {
    const size_t B = (size_t)g->B, TNF = B * g->in_feat, out = B * g->classes;
    g->x = takef(g, TNF);
    g->x1 = takef(g, (size_t)g->N * g->in_feat);
    g->labels = (int32_t *)g->act.take((size_t)g->N * sizeof(int32_t));
    g->dout = takef(g, out);
    g->loss = takef(g, 1);
    g->correct = (int *)g->act.take(sizeof(int));
    g->acc = (snn_gm_stats *)g->act.take(sizeof(snn_gm_stats));
    g->ce_work = takef(g, (size_t)g->N);
    g->norm2 = (double *)g->act.take(sizeof(double));
    g->scal = (snn_cuda_step_scalars *)g->act.take(sizeof(snn_cuda_step_scalars));
    g->scaler = (snn_gm_scaler *)g->act.take(sizeof(snn_gm_scaler));
    g->opt_steps = (long long *)g->act.take(sizeof(long long));
    g->fwd_count = (unsigned long long *)g->act.take(sizeof(unsigned long long));
    plan_fwd(g, g->root, g->x);
    plan_bwd(g, g->root, g->dout, 0);
    if (g->f8) snn_gm_fp8_plan_model(g);
    g->scratch_a = g->act.take(g->scratch_a_bytes);
    g->scratch_b = g->act.take(g->scratch_b_bytes);
    g->scratch_c = g->act.take(g->scratch_c_bytes);
    g->bn_work = g->bn_work_bytes ? g->act.take(g->bn_work_bytes) : NULL;
    g->ssa_work = g->ssa_work_bytes ? g->act.take(g->ssa_work_bytes) : NULL;
    g->ln_work = g->ln_work_bytes ? g->act.take(g->ln_work_bytes) : NULL;
    return SNN_OK;
}

static snn_status layout_params(snn_cuda_model *g) {
    snn_model *m = g->host;
    g->doff = (size_t *)calloc(m->n_tensors ? m->n_tensors : 1, sizeof(size_t));
    if (!g->doff) return snn_error(SNN_E_NOMEM, "out of memory");
    size_t np = 0, nb = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const snn_param *p = m->tensors[i].param;
        size_t *cur = p->kind == SNN_PARAM_WEIGHT ? &np : &nb;
        g->doff[i] = *cur;
        *cur += (p->numel + GM_ALIGN_FLOATS - 1) / GM_ALIGN_FLOATS * GM_ALIGN_FLOATS;
    }
    g->n_dev = np ? np : GM_ALIGN_FLOATS;
    g->n_buf_dev = nb ? nb : GM_ALIGN_FLOATS;
    g->has_buffers = nb > 0;
    return SNN_OK;
}

static snn_status dmalloc(snn_cuda_model *g, size_t bytes, void **p) {
    SNN_TRY(snn_cuda_alloc(g->c, bytes, p));
    g->device_bytes += bytes;
    return SNN_OK;
}

/* Host <-> device tensor by tensor (the layouts differ by the padding). */
static snn_status copy_params(snn_cuda_model *g, int to_device, int grads_only) {
    snn_model *m = g->host;
    for (size_t i = 0; i < m->n_tensors; i++) {
        snn_param *p = m->tensors[i].param;
        size_t bytes = p->numel * sizeof(float);
        int w = p->kind == SNN_PARAM_WEIGHT;
        if (grads_only) {
            if (w) SNN_TRY(snn_cuda_download(g->c, p->grad, g->grads + g->doff[i], bytes));
            continue;
        }
        float *d = (w ? g->params : g->buffers) + g->doff[i];
        if (to_device) SNN_TRY(snn_cuda_upload(g->c, d, p->data, bytes));
        else SNN_TRY(snn_cuda_download(g->c, p->data, d, bytes));
    }
    return SNN_OK;
}

static snn_status refresh_compute_copy(snn_cuda_model *g) {
    if (g->o.compute == SNN_F32) return SNN_OK;
    return snn_cuda_convert(g->c, g->o.compute, g->wc, SNN_F32, g->params, g->n_dev, NULL, 0);
}

extern "C" snn_status snn_cuda_model_create(snn_cuda *c, snn_model *m, const snn_cuda_model_opts *o,
                                            const snn_optim_opts *opt, snn_cuda_model **out) {
    *out = NULL;
    if (!c || !m || !o || !opt) return snn_error(SNN_E_INVALID, "snn_cuda_model_create: NULL argument");
    if (o->T <= 0 || o->N <= 0)
        return snn_error(SNN_E_INVALID, "GPU model: T and N must be positive (got T=%d, N=%d)", o->T, o->N);
    if (o->compute != SNN_F32 && o->compute != SNN_BF16 && o->compute != SNN_F16 &&
        o->compute != SNN_F8E4M3)
        return snn_error(SNN_E_UNSUPPORTED,
                         "GPU model: compute type %s is not supported (f32, bf16, f16 with "
                         "dynamic loss scaling, or f8e4m3 for FP8 training with opts.fp8)",
                         snn_cuda_dtype_name(o->compute));
    if ((size_t)o->T * (size_t)o->N > (1u << 30))
        return snn_error(SNN_E_INVALID, "GPU model: T*N too large");
    snn_cuda_model *g = (snn_cuda_model *)calloc(1, sizeof *g);
    if (!g) return snn_error(SNN_E_NOMEM, "out of memory");
    g->c = c;
    g->host = m;
    g->o = *o;
    g->opt = *opt;
    g->T = o->T;
    g->N = o->N;
    g->B = o->T * o->N;
    g->graph_mode = -1;
    g->in_feat = snn_model_input_numel(m);
    g->classes = snn_model_output_numel(m);
    snn_status st = gnode_build(m->root, &g->root);
    if (st == SNN_OK) st = snn_gm_nprec_init(g, o->neuron ? o->neuron : o->compute == SNN_F8E4M3 ? o->fp8 : NULL);
    if (st == SNN_OK && o->compute == SNN_F8E4M3) {
        /* FP8: the converted GEMM modules run FP8; every other one runs BF16, as the CPU's
         * fp8 mode (the recipe config is copied: the caller's may go away) */
        st = snn_gm_fp8_init(g, o->fp8);
        g->o.compute = SNN_BF16;
        g->o.fp8 = NULL;
    }
    if (st == SNN_OK) st = layout_params(g);
    /* measure, allocate, assign */
    if (st == SNN_OK) {
        g->act.base = NULL;
        g->act.used = 0;
        st = plan_all(g);
    }
    if (st == SNN_OK) {
        size_t need = g->act.used + 256;
        st = dmalloc(g, need, &g->act_mem);
        if (st == SNN_OK) {
            g->act.base = (char *)g->act_mem;
            g->act.used = 0;
            g->scratch_a_bytes = g->scratch_b_bytes = g->scratch_c_bytes = 0;
            g->bn_work_bytes = g->ssa_work_bytes = g->ln_work_bytes = 0;
            plan_all(g);
        }
    }
    size_t es = snn_cuda_dsize(g->o.compute);
    int adam = opt->kind != SNN_OPTIM_SGD;
    if (st == SNN_OK) st = dmalloc(g, g->n_dev * sizeof(float), (void **)&g->params);
    if (st == SNN_OK) st = dmalloc(g, g->n_dev * sizeof(float), (void **)&g->grads);
    if (st == SNN_OK) st = dmalloc(g, g->n_dev * sizeof(float) * (adam ? 2 : 1), (void **)&g->state);
    if (st == SNN_OK) st = dmalloc(g, g->n_buf_dev * sizeof(float), (void **)&g->buffers);
    if (st == SNN_OK) st = dmalloc(g, g->n_dev, (void **)&g->decay);
    if (st == SNN_OK) {
        if (g->o.compute == SNN_F32) g->wc = g->params;
        else st = dmalloc(g, g->n_dev * es, &g->wc);
    }
    if (st == SNN_OK) {
        /* zero everything the padding touches, then the real values */
        cudaStream_t sm = snn_cuda_stream_of(c);
        cudaMemsetAsync(g->params, 0, g->n_dev * sizeof(float), sm);
        cudaMemsetAsync(g->grads, 0, g->n_dev * sizeof(float), sm);
        cudaMemsetAsync(g->state, 0, g->n_dev * sizeof(float) * (adam ? 2 : 1), sm);
        cudaMemsetAsync(g->buffers, 0, g->n_buf_dev * sizeof(float), sm);
        cudaMemsetAsync(g->act_mem, 0, g->act.used, sm);
        if (g->f8) st = snn_gm_fp8_reset(g);
        if (st == SNN_OK) st = snn_cuda_synchronize(c);
    }
    if (st == SNN_OK) st = copy_params(g, 1, 0);
    if (st == SNN_OK) {
        snn_gm_scaler sc0 = {65536.0f, 0}; /* GradScaler's defaults, as the CPU */
        st = snn_cuda_upload(c, g->scaler, &sc0, sizeof sc0);
    }
    if (st == SNN_OK) {
        unsigned long long fc = (unsigned long long)snn_model_step_count(m);
        st = snn_cuda_upload(c, g->fwd_count, &fc, sizeof fc);
    }
    if (st == SNN_OK) {
        uint8_t *mask = (uint8_t *)calloc(g->n_dev, 1);
        if (!mask) st = snn_error(SNN_E_NOMEM, "out of memory");
        for (size_t i = 0; mask && i < m->n_tensors; i++) {
            const snn_param *p = m->tensors[i].param;
            if (p->kind == SNN_PARAM_WEIGHT && p->decay) memset(mask + g->doff[i], 1, p->numel);
        }
        if (st == SNN_OK) st = snn_cuda_upload(c, g->decay, mask, g->n_dev);
        free(mask);
    }
    if (st == SNN_OK) {
        bind_params(g, g->root);
        st = refresh_compute_copy(g);
    }
    if (st == SNN_OK) {
        g->dopt.kind = opt->kind == SNN_OPTIM_SGD ? 0 : opt->kind == SNN_OPTIM_ADAM ? 1 : 2;
        g->dopt.momentum = opt->momentum;
        g->dopt.weight_decay = opt->weight_decay;
        g->dopt.beta1 = opt->beta1;
        g->dopt.beta2 = opt->beta2;
        g->dopt.eps = opt->eps;
        g->dopt.nesterov = opt->nesterov;
        if (opt->kind == SNN_OPTIM_SGD && opt->dampening != 0.0f)
            st = snn_error(SNN_E_UNSUPPORTED, "GPU model: SGD dampening is not supported (use 0)");
    }
    if (st == SNN_OK) {
        g->pin_lab_off = ((size_t)g->B * g->in_feat * sizeof(float) + 255) & ~(size_t)255;
        g->pin_scal_off = (g->pin_lab_off + (size_t)g->N * sizeof(int32_t) + 255) & ~(size_t)255;
        size_t bytes = g->pin_scal_off + 256;
        for (int k = 0; k < 2 && st == SNN_OK; k++) {
            cudaError_t e = cudaMallocHost(&g->pin[k], bytes);
            if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->pin_ev[k], cudaEventDisableTiming);
            if (e != cudaSuccess) st = snn_cuda_fail(e, "pinned staging buffer");
        }
    }
    if (st == SNN_OK) st = snn_gm_ddp_init(g);
    if (st == SNN_OK) st = snn_cuda_synchronize(c);
    if (st != SNN_OK) {
        snn_cuda_model_destroy(g);
        return st;
    }
    *out = g;
    return SNN_OK;
}

extern "C" void snn_cuda_model_destroy(snn_cuda_model *g) {
    if (!g) return;
    if (g->graph) cudaGraphExecDestroy(g->graph);
    cudaStreamSynchronize(snn_cuda_stream_of(g->c));
    snn_gm_ddp_free(g);
    for (int k = 0; k < 2; k++) {
        if (g->pin[k]) cudaFreeHost(g->pin[k]);
        if (g->pin_ev[k]) cudaEventDestroy(g->pin_ev[k]);
    }
    snn_cuda_free(g->act_mem);
    snn_cuda_free(g->params);
    snn_cuda_free(g->grads);
    snn_cuda_free(g->state);
    snn_cuda_free(g->buffers);
    snn_cuda_free(g->decay);
    if (g->wc != g->params) snn_cuda_free(g->wc);
    gnode_free(g->root);
    snn_gm_fp8_free(g);
    free(g->doff);
    free(g);
}

/* Everything of one step after the input and scalars are on the device. */
snn_status snn_gm_enqueue_step(snn_cuda_model *g, int x_has_time) {
    snn_cuda *c = g->c;
    cudaStream_t sm = snn_cuda_stream_of(c);
    if (!x_has_time) SNN_TRY(broadcast_input(g));
    const snn_cuda_collectives *dp = g->o.dp;
    if (dp && g->has_buffers) SNN_TRY(dp->broadcast(dp->ctx, g->buffers, g->n_buf_dev, 0, sm));
    SNN_CU_TRY(cudaMemsetAsync(g->grads, 0, g->n_dev * sizeof(float), sm));
    const int scaled = g->o.compute == SNN_F16;
    const unsigned eb = (unsigned)snn_cuda_sm_count(c) * 8u;
    if (scaled) {
        gm_scaler_begin_kernel<<<1, 1, 0, sm>>>(g->scaler, g->scal);
        SNN_CU_LAUNCHED("loss scaler");
    }
    SNN_TRY(snn_gm_forward(g, g->root, 1));
    SNN_TRY(count_forward(g));
    const float *y = g->root->y;
    SNN_CU_TRY(cudaMemsetAsync(g->correct, 0, sizeof(int), sm));
    /* data parallel: every replica's gradient carries 1/size; the buckets then sum */
    const float dscale = dp && dp->size > 1 ? 1.0f / (float)dp->size : 1.0f;
    if (g->o.loss == SNN_CUDA_LOSS_CE) {
        SNN_TRY(snn_cuda_ce_mean_t(c, g->T, g->N, (int)g->classes, y, NULL, g->labels, g->loss,
                                   g->ce_work, SNN_F32, g->dout, dscale));
        gm_correct_kernel<<<(g->N + 127) / 128, 128, 0, sm>>>(y, g->labels, g->T, g->N,
                                                              (int)g->classes, g->correct);
        SNN_CU_LAUNCHED("accuracy");
    } else {
        SNN_TRY(snn_cuda_mse_rate(c, g->T, g->N, (int)g->classes, y, g->labels, g->loss, g->dout,
                                  dscale, g->correct));
    }
    gm_accumulate_kernel<<<1, 1, 0, sm>>>(g->loss, g->correct, g->acc);
    SNN_CU_LAUNCHED("accumulate");
    if (scaled) {
        gm_scale_kernel<<<eb, 256, 0, sm>>>(g->dout, (size_t)g->B * g->classes, g->scaler);
        SNN_CU_LAUNCHED("loss scaling");
    }
    /* DDP: the replicas' gradients averaged, in buckets overlapping the backward, before
     * anything reads them (overflow check, norm, optimizer): every replica takes the same step */
    if (dp) SNN_TRY(snn_gm_ddp_begin(g));
    SNN_TRY(snn_gm_backward(g, g->root));
    if (dp) SNN_TRY(snn_gm_ddp_finish(g));
    if (scaled) {
        gm_found_inf_kernel<<<eb, 256, 0, sm>>>(g->grads, g->n_dev, g->scal);
        SNN_CU_LAUNCHED("overflow check");
    }
    if (g->o.clip > 0.0f) {
        SNN_CU_TRY(cudaMemsetAsync(g->norm2, 0, sizeof(double), sm));
        gm_sumsq_kernel<<<(unsigned)snn_cuda_sm_count(c) * 4u, 256, 0, sm>>>(g->grads, g->n_dev, g->norm2);
        SNN_CU_LAUNCHED("gradient norm");
        gm_clip_finalize_kernel<<<1, 1, 0, sm>>>(g->norm2, g->o.clip, g->scal);
        SNN_CU_LAUNCHED("clip");
    }
    if (g->no_update) return SNN_OK; /* profiling */
    SNN_TRY(snn_gm_opt_update(c, &g->dopt, g->scal, g->n_dev, g->params, g->grads, g->state,
                              g->decay, g->opt_steps));
    if (scaled) {
        gm_scaler_update_kernel<<<1, 1, 0, sm>>>(g->scaler, g->scal);
        SNN_CU_LAUNCHED("loss scaler update");
    }
    /* FP8 delayed scaling: new scales from the amax histories, after the optimizer step
     * (the CPU's order in snn_precision_backward) */
    if (g->f8) SNN_TRY(snn_gm_fp8_after_step(g));
    return refresh_compute_copy(g);
}

/* Host -> device staging through two pinned buffers: the copies are asynchronous, so the host
 * assembles the next batch while the device still runs the previous step; a buffer is
 * reused only after the copy out of it has completed (its event). */
snn_status snn_gm_stage_step(snn_cuda_model *g, const float *x, int x_has_time,
                             const int32_t *labels, const snn_cuda_step_scalars *s) {
    const int k = g->pin_i;
    g->pin_i ^= 1;
    SNN_CU_TRY(cudaEventSynchronize(g->pin_ev[k]));
    char *p = (char *)g->pin[k];
    size_t nx = (x_has_time ? (size_t)g->B : (size_t)g->N) * g->in_feat * sizeof(float);
    size_t nl = (size_t)g->N * sizeof(int32_t);
    memcpy(p, x, nx);
    memcpy(p + g->pin_lab_off, labels, nl);
    memcpy(p + g->pin_scal_off, s, sizeof *s);
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    SNN_CU_TRY(cudaMemcpyAsync(x_has_time ? g->x : g->x1, p, nx, cudaMemcpyHostToDevice, sm));
    SNN_CU_TRY(cudaMemcpyAsync(g->labels, p + g->pin_lab_off, nl, cudaMemcpyHostToDevice, sm));
    SNN_CU_TRY(cudaMemcpyAsync(g->scal, p + g->pin_scal_off, sizeof *s, cudaMemcpyHostToDevice, sm));
    SNN_CU_TRY(cudaEventRecord(g->pin_ev[k], sm));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_train_step(snn_cuda_model *g, const float *x, int x_has_time,
                                                const int32_t *labels, float lr) {
    if (!g || !x || !labels) return snn_error(SNN_E_INVALID, "snn_cuda_model_train_step: NULL argument");
    for (int i = 0; i < g->N; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= g->classes)
            return snn_error(SNN_E_INVALID, "label %d of sample %d is outside [0, %zu)", (int)labels[i],
                             i, g->classes);
    snn_cuda_step_scalars s;
    memset(&s, 0, sizeof s);
    s.lr = lr < 0 ? g->opt.lr : lr;
    /* Adam's bias corrections come from the step count on the device (a skipped FP16 step
     * does not advance it, and the host cannot know without synchronising) */
    s.bc1 = s.bc2 = 1.0f;
    s.grad_scale = 1.0f;
    s.skip = 0;
    SNN_TRY(snn_gm_stage_step(g, x, x_has_time, labels, &s));
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    /* First step eagerly (cuBLASLt picks its algorithms then), then capture once per input
     * mode and replay. */
    if (g->o.no_graph || g->warm < 1) {
        g->warm++;
        return snn_gm_enqueue_step(g, x_has_time);
    }
    if (g->graph_mode != x_has_time) {
        if (g->graph) cudaGraphExecDestroy(g->graph);
        g->graph = NULL;
        cudaGraph_t graph;
        SNN_CU_TRY(cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal));
        snn_status st = snn_gm_enqueue_step(g, x_has_time);
        cudaError_t e = cudaStreamEndCapture(sm, &graph);
        if (st != SNN_OK) {
            if (e == cudaSuccess) cudaGraphDestroy(graph);
            return st;
        }
        SNN_CU_TRY(e);
        e = cudaGraphInstantiate(&g->graph, graph, 0);
        cudaGraphDestroy(graph);
        SNN_CU_TRY(e);
        g->graph_mode = x_has_time;
    }
    SNN_CU_TRY(cudaGraphLaunch(g->graph, sm));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_take_stats(snn_cuda_model *g, double *loss_sum, long *correct,
                                                long *steps) {
    snn_gm_stats a;
    SNN_TRY(snn_cuda_download(g->c, &a, g->acc, sizeof a));
    SNN_CU_TRY(cudaMemsetAsync(g->acc, 0, sizeof a, snn_cuda_stream_of(g->c)));
    if (loss_sum) *loss_sum = a.loss;
    if (correct) *correct = (long)a.correct;
    if (steps) *steps = (long)a.steps;
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_forward(snn_cuda_model *g, const float *x, int x_has_time,
                                             int n, float *out) {
    if (!g || !x || !out) return snn_error(SNN_E_INVALID, "snn_cuda_model_forward: NULL argument");
    if (n <= 0 || n > g->N)
        return snn_error(SNN_E_INVALID, "GPU forward: %d samples do not fit the planned batch of %d", n, g->N);
    /* a partial batch: the rest of the rows keep whatever they held (their outputs are ignored) */
    size_t F = g->in_feat;
    if (x_has_time) {
        for (int t = 0; t < g->T; t++)
            SNN_TRY(snn_cuda_upload(g->c, g->x + (size_t)t * g->N * F, x + (size_t)t * n * F,
                                    (size_t)n * F * sizeof(float)));
    } else {
        SNN_TRY(snn_cuda_upload(g->c, g->x1, x, (size_t)n * F * sizeof(float)));
        SNN_TRY(broadcast_input(g));
    }
    /* DDP evaluates with replica 0's BatchNorm statistics, as every DDP forward does */
    if (g->o.dp && g->has_buffers)
        SNN_TRY(g->o.dp->broadcast(g->o.dp->ctx, g->buffers, g->n_buf_dev, 0, snn_cuda_stream_of(g->c)));
    SNN_TRY(snn_gm_forward(g, g->root, 0));
    SNN_TRY(count_forward(g));
    SNN_TRY(snn_cuda_download(g->c, out, g->root->y, (size_t)g->B * g->classes * sizeof(float)));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_download(snn_cuda_model *g) {
    SNN_TRY(snn_cuda_synchronize(g->c));
    unsigned long long fc = 0;
    SNN_TRY(snn_cuda_download(g->c, &fc, g->fwd_count, sizeof fc));
    snn_model_set_step_count(g->host, (uint64_t)fc);
    return copy_params(g, 0, 0);
}

extern "C" snn_status snn_cuda_model_download_grads(snn_cuda_model *g) {
    SNN_TRY(snn_cuda_synchronize(g->c));
    return copy_params(g, 0, 1);
}

extern "C" size_t snn_cuda_model_device_bytes(const snn_cuda_model *g) { return g ? g->device_bytes : 0; }

extern "C" snn_status snn_cuda_model_loss_scale(snn_cuda_model *g, float *scale) {
    snn_gm_scaler sc;
    SNN_TRY(snn_cuda_download(g->c, &sc, g->scaler, sizeof sc));
    *scale = g->o.compute == SNN_F16 ? sc.scale : 1.0f;
    return SNN_OK;
}
