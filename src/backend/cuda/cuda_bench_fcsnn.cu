/* FC-SNN workload of SpikingJelly's precision guide on one GPU: input [T, B, I] from the
 * host, (depth−1) × [Linear(in, W) → LIF(tau, Sigmoid(4), hard reset 0)], Linear(W, C),
 * cross-entropy on the mean over T, SGD with momentum on FP32 master weights.
 *
 * Time folds into the GEMM M dimension (M = T·B); the neuron pass is one fused elementwise
 * kernel per layer (bias add, LIF recurrence, spike write, h save; backward: BPTT, bias-grad
 * partial sums, FP8 amax). Precisions: fp32 (TF32 off), fp16 (static loss scale 1024), bf16,
 * fp8 (E4M3 forward operands, E5M2 gradients, per-tensor current or delayed scaling; spikes
 * written directly as E4M3 with scale 1; the last hidden layer's spikes and the output Linear
 * stay BF16, so the head runs BF16 GEMMs). Optionally each layer's SGD update runs on a second
 * stream as soon as its gradients are ready (overlap_optimizer).
 *
 * Neuron mixed precision (cfg.neuron_storage set; the default path above is untouched
 * without it): each LIF layer runs cuda_neuron_mp's kernels instead of the fused FP32 one.
 * The bias is added to the GEMM output y in its activation type (the CPU's converted Linear
 * writes GEMM + bias rounded to that type), y is converted to the storage dtype S, h_seq is
 * saved in S; spikes come out in the layer's spike type (BF16 and then E4M3 for the FP8
 * layers). The backward widens dL/ds to FP32, runs BPTT in B, sums dL/dx (FP32) for the
 * bias gradient and rounds it to the GEMMs' 16-bit type. Extra buffers: x in S (when S is
 * not y's type), dL/ds and dL/dx in FP32, all allocated with the rest.
 *
 * Block scaling (cfg.fp8_block, Float8BlockScaling): E4M3 everywhere; the input and the
 * gradients are quantised into 1x128 vectors (row-wise for the forward / dgrad GEMM, and a
 * column-wise transposed copy for wgrad, both from the high-precision source), weights into
 * 128x128 tiles with their transpose. Spikes are written as E4M3 1.0 with every block factor
 * 1 (one shared array of ones): with power-of-two scales TE would store 256 and 1/256, the
 * same products exactly. The GEMMs use cuBLASLt's block-scale modes.
 *
 * FP8 memory (training, per step live at once; M = T·B): the FP8 gradient copies gy8 [M][W]
 * and gy8t [W][M] live in the forward's GEMM-output scratch y (2·M·W bytes as BF16, dead
 * during the backward), and the transposed FP8 layer inputs a wgrad GEMM needs (x8t, the
 * spikes transposed) are made in the backward, one layer at a time, in the BF16 gy buffer
 * once gy has been quantised. So FP8 keeps no transposed copy per layer, and its buffers
 * are the BF16 path's minus the 16-bit hidden weight copies plus the FP8 weight pair (same
 * bytes), with E4M3 instead of BF16 spikes. */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_bench_impl.h"
#include "backend/cuda/cuda_neuron_mp.h"

typedef struct {
    int in, out;
    float *w, *b, *gw, *gb, *mw, *mb; /* FP32 master, grads, momentum */
    void *wk;                         /* 16-bit working copy (NULL: GEMMs read w or w8) */
    uint8_t *w8, *w8t;                /* FP8 weight [out][in] and its transpose [in][out] */
    float *sw, *swt;                  /* block scaling: their 128x128 tile factors */
    void *h, *s;                      /* saved membrane, spikes [M][out] */
    snn_dtype s_type;
} layer;

typedef struct {
    snn_cuda *c;
    const snn_cuda_bench_data *d;
    int fp8, delayed, block, pow2, T, B, M, W, D, I, C, overlap;
    snn_dtype act;
    float lr, momentum, loss_scale, k;
    layer *L; /* D hidden layers, then the head at L[D] */
    float *x32;
    void *xa;
    uint8_t *x8, *x8t;
    void *y, *gs, *gy;
    uint8_t *gy8, *gy8t; /* FP8: inside y */
    uint8_t *xt_buf;     /* FP8 backward: the transposed input of the layer (inside gy, or own) */
    float *sx, *sxt, *sg, *sgt, *ones; /* block scaling: factors of x8, its column-wise copy,
                                          gy8, gy8t; 1.0 for every spike block */
    float *tsum, *logits, *loss, *ce_work, *col;
    void *dlogits;
    int32_t *labels;
    float *amax; /* [0] input, [1+l] weight l, [1+D+l] gradient l: zeroed each step */
    float *sinv; /* same slots: dequantisation factors */
    snn_bench_fp8_delayed dl; /* delayed scaling: histories and scales of the same slots */
    snn_cuda *side; /* optimizer stream for overlap */
    cudaEvent_t ev[2];
    int nev;
    snn_neuron_opts lif;
    /* neuron mixed precision (cfg.neuron_storage set): storage, forward and backward dtypes */
    int mp;
    snn_dtype ns, nf, nb;
    void *xs;         /* the neuron input in S [M][W] (NULL: S is y's type, y serves) */
    float *g32, *gx32; /* dL/ds and dL/dx in FP32 [M][W] */
} net;

#define NSLOTS(n) ((size_t)(2 * (n)->D + 2))

static snn_status build(net *n, snn_bench_alloc *a) {
    const int M = n->M, W = n->W, D = n->D, fp8 = n->fp8;
    const size_t es = snn_dtype_size(n->act);
    n->L = (layer *)calloc((size_t)D + 1, sizeof(layer));
    if (!n->L) return snn_error(SNN_E_NOMEM, "out of host memory");
    for (int l = 0; l <= D; l++) {
        layer *L = &n->L[l];
        L->in = l == 0 ? n->I : W;
        L->out = l == D ? n->C : W;
        size_t nw = (size_t)L->in * L->out;
        BT(bench_alloc(a, nw * 4, 1, &L->w));
        BT(bench_alloc(a, nw * 4, 0, &L->gw));
        BT(bench_alloc(a, nw * 4, 0, &L->mw));
        BT(bench_alloc(a, (size_t)L->out * 4, 1, &L->b));
        BT(bench_alloc(a, (size_t)L->out * 4, 0, &L->gb));
        BT(bench_alloc(a, (size_t)L->out * 4, 0, &L->mb));
        if (n->act != SNN_F32 && (!fp8 || l == D)) BT(bench_alloc(a, nw * es, 1, &L->wk));
        if (fp8 && l < D) {
            BT(bench_alloc(a, nw, 1, &L->w8));
            BT(bench_alloc(a, nw, 0, &L->w8t));
            if (n->block) {
                BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(1, L->out, L->in) * 4, 1, &L->sw));
                BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(1, L->in, L->out) * 4, 0, &L->swt));
            }
        }
        if (l < D) {
            L->s_type = fp8 ? (l == D - 1 ? SNN_BF16 : SNN_F8E4M3) : n->act;
            BT(bench_alloc(a, (size_t)M * W * snn_dtype_size(L->s_type), 1, &L->s));
            BT(bench_alloc(a, (size_t)M * W * (n->mp ? snn_dtype_size(n->ns) : es), 0, &L->h));
        }
    }
    BT(bench_alloc(a, (size_t)M * n->I * 4, 1, &n->x32));
    BT(snn_cuda_upload(n->c, n->x32, n->d->x, (size_t)M * n->I * 4));
    if (fp8) BT(bench_alloc(a, (size_t)M * n->I, 1, &n->x8));
    else if (n->act != SNN_F32) BT(bench_alloc(a, (size_t)M * n->I * es, 1, &n->xa));
    int wmax = W > n->I ? W : n->I;
    BT(bench_alloc(a, (size_t)M * W * es, 1, &n->y));
    /* gs: with mixed-precision neurons under fp8 also the forward's BF16 spike scratch */
    BT(bench_alloc(a, (size_t)M * wmax * es, n->mp && fp8, &n->gs));
    BT(bench_alloc(a, (size_t)M * W * es, 0, &n->gy));
    if (fp8) { /* es == 2 (BF16 outside the GEMMs): y holds gy8 and gy8t exactly */
        n->gy8 = (uint8_t *)n->y;
        n->gy8t = n->gy8 + (size_t)M * W;
        /* the transposed spikes [W][M] always fit in gy; the transposed input [I][M] when I <= 2W */
        if ((size_t)n->I <= 2 * (size_t)W) n->xt_buf = (uint8_t *)n->gy;
        else BT(bench_alloc(a, (size_t)M * n->I, 0, &n->x8t));
    }
    BT(bench_alloc(a, (size_t)n->B * W * 4, 0, &n->tsum));
    if (n->mp) { /* y holds the Linear output in the activation type (BF16 under fp8) */
        if (n->ns != (fp8 ? SNN_BF16 : n->act)) BT(bench_alloc(a, (size_t)M * W * snn_dtype_size(n->ns), 1, &n->xs));
        BT(bench_alloc(a, (size_t)M * W * 4, 0, &n->g32));
        BT(bench_alloc(a, (size_t)M * W * 4, 0, &n->gx32));
    }
    BT(bench_alloc(a, (size_t)W * 4, 0, &n->col));
    BT(bench_alloc(a, (size_t)M * n->C * 4, 1, &n->logits));
    BT(bench_alloc(a, (size_t)M * n->C * (fp8 ? 2 : es), 0, &n->dlogits));
    BT(bench_alloc(a, 4, 0, &n->loss));
    BT(bench_alloc(a, (size_t)n->B * 4, 0, &n->ce_work));
    BT(bench_alloc(a, (size_t)n->B * 4, 0, &n->labels));
    BT(snn_cuda_upload(n->c, n->labels, n->d->y, (size_t)n->B * 4));
    if (n->block) {
        size_t sxn = snn_cuda_fp8_block_scale_count(0, M, n->I), sgn = snn_cuda_fp8_block_scale_count(0, M, W);
        BT(bench_alloc(a, sxn * 4, 1, &n->sx));
        BT(bench_alloc(a, sxn * 4, 0, &n->sxt));
        BT(bench_alloc(a, sgn * 4, 0, &n->sg));
        BT(bench_alloc(a, sgn * 4, 0, &n->sgt));
        BT(bench_alloc(a, sgn * 4, 1, &n->ones));
        float *h = (float *)malloc(sgn * 4);
        if (!h) return snn_error(SNN_E_NOMEM, "out of host memory");
        for (size_t i = 0; i < sgn; i++) h[i] = 1.0f;
        snn_status st = snn_cuda_upload(n->c, n->ones, h, sgn * 4);
        free(h);
        BT(st);
    }
    if (fp8 && !n->block) { /* per-tensor scaling state only where something is quantised */
        BT(bench_alloc(a, NSLOTS(n) * 4, 1, &n->amax));
        BT(bench_alloc(a, NSLOTS(n) * 4, 1, &n->sinv));
    }
    if (n->delayed)
        BT(snn_bench_delayed_alloc(a, &n->dl, (int)NSLOTS(n), 1 + D, n->dl.hlen, n->dl.margin, n->dl.most_recent));
    if (n->overlap) {
        int dev = 0;
        SNN_CU_TRY(cudaGetDevice(&dev));
        BT(snn_cuda_create(dev, 0, &n->side));
        for (; n->nev < 2; n->nev++) SNN_CU_TRY(cudaEventCreateWithFlags(&n->ev[n->nev], cudaEventDisableTiming));
    }
    return SNN_OK;
}

/* The base state: weights from the host, momentum 0, working copies, FP8 quantisation. */
static snn_status load(void *p) {
    net *n = (net *)p;
    if (n->fp8 && !n->block) BT(snn_cuda_memset(n->c, n->amax, 0, NSLOTS(n) * 4));
    if (n->delayed) BT(snn_bench_delayed_reset(n->c, &n->dl));
    for (int l = 0; l <= n->D; l++) {
        layer *L = &n->L[l];
        size_t nw = (size_t)L->in * L->out;
        BT(snn_cuda_upload(n->c, L->w, n->d->weights[l], nw * 4));
        BT(snn_cuda_upload(n->c, L->b, n->d->biases[l], (size_t)L->out * 4));
        BT(snn_cuda_memset(n->c, L->mw, 0, nw * 4));
        BT(snn_cuda_memset(n->c, L->mb, 0, (size_t)L->out * 4));
        if (L->wk) BT(snn_cuda_convert(n->c, n->act, L->wk, SNN_F32, L->w, nw, NULL, 0));
        if (L->w8 && n->block) {
            BT(snn_cuda_quantize_fp8_block(n->c, SNN_F8E4M3, 1, n->pow2, SNN_F32, L->w, L->out, L->in, L->w8, L->sw,
                                           L->w8t, L->swt));
        } else if (L->w8) { /* delayed: scale 1 now, this amax gives the first step's update its scale */
            BT(snn_cuda_amax(n->c, SNN_F32, L->w, nw, n->amax + 1 + l));
            BT(snn_cuda_quantize_fp8(n->c, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out, L->in,
                                     n->delayed ? n->dl.qamax + 1 + l : n->amax + 1 + l, n->sinv + 1 + l));
        }
    }
    return snn_cuda_synchronize(n->c);
}

/* Neuron mixed precision, forward of one LIF layer, in the CPU's order (prec_exec.c): the
 * Linear's output with its bias, rounded to the activation type (the CPU's converted Linear
 * rounds GEMM + bias once; here the GEMM already wrote y in that type, so the GEMM result
 * is rounded once more before the bias is added), then the mixed kernel on its rounding to
 * S. Spikes are 0/1, exact in every type: the E4M3 spikes the next FP8 GEMM reads are
 * converted from BF16 ones written into gs (dead until the backward). */
static snn_status neuron_forward_mp(net *n, layer *L, snn_dtype yt, int train) {
    snn_cuda *c = n->c;
    const size_t MW = (size_t)n->M * n->W;
    BT(snn_cuda_bias_add(c, yt, n->y, L->b, n->M, n->W));
    const void *x = n->y;
    if (n->xs) {
        BT(snn_cuda_convert(c, n->ns, n->xs, yt, n->y, MW, NULL, 0));
        x = n->xs;
    }
    int e4 = L->s_type == SNN_F8E4M3;
    BT(snn_cuda_neuron_forward_mp(c, &n->lif, n->k, n->T, (size_t)n->B * n->W, n->ns, n->nf,
                                  e4 ? SNN_BF16 : L->s_type, x, NULL, e4 ? n->gs : L->s, train ? L->h : NULL, NULL));
    if (e4) BT(snn_cuda_convert(c, SNN_F8E4M3, L->s, SNN_BF16, n->gs, MW, NULL, 0));
    return SNN_OK;
}

/* Backward of one LIF layer: dL/ds (gs, activation type) to FP32, BPTT in B from h_seq (S),
 * dL/dx FP32; the bias gradient sums it over T·batch, and the GEMMs get it rounded to gt
 * (as the CPU's converted Linear rounds dy), with its amax for FP8 per-tensor scaling. */
static snn_status neuron_backward_mp(net *n, layer *L, snn_dtype gt, float *gy_amax) {
    snn_cuda *c = n->c;
    const size_t MW = (size_t)n->M * n->W;
    BT(snn_cuda_convert(c, SNN_F32, n->g32, gt, n->gs, MW, NULL, 0));
    BT(snn_cuda_neuron_backward_mp(c, &n->lif, n->k, n->T, (size_t)n->B * n->W, n->ns, n->nf, n->nb, L->h, NULL,
                                   n->g32, NULL, n->gx32, NULL, NULL));
    BT(snn_cuda_colsum(c, SNN_F32, n->gx32, n->M, n->W, 0.0f, L->gb));
    BT(snn_cuda_convert(c, gt, n->gy, SNN_F32, n->gx32, MW, NULL, 0));
    if (gy_amax) BT(snn_cuda_amax(c, gt, n->gy, MW, gy_amax));
    return SNN_OK;
}

static snn_status forward(net *n, int train) {
    snn_cuda *c = n->c;
    const int M = n->M, W = n->W, D = n->D, fp8 = n->fp8;
    const void *X;
    snn_dtype xt = n->act;
    const float *xs = NULL;
    if (n->block) {
        BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, SNN_F32, n->x32, M, n->I, n->x8, n->sx, NULL,
                                       NULL));
        X = n->x8;
        xt = SNN_F8E4M3;
        xs = n->sx;
    } else if (n->delayed) {
        /* scales from the histories (this step's quantisations use them), then the input
         * quantised with its scale while its amax is recorded: one pass over x */
        BT(snn_bench_delayed_update(c, &n->dl, n->amax));
        BT(snn_bench_quantize_scaled(c, SNN_F8E4M3, n->x8, SNN_F32, n->x32, (size_t)M * n->I, n->dl.scale, n->sinv,
                                     n->amax));
        X = n->x8;
        xt = SNN_F8E4M3;
        xs = n->sinv;
    } else if (fp8) { /* current scaling: amax pass, then the quantisation */
        if (train) BT(snn_cuda_memset(c, n->amax, 0, NSLOTS(n) * 4));
        BT(snn_cuda_amax(c, SNN_F32, n->x32, (size_t)M * n->I, n->amax));
        BT(snn_cuda_quantize_fp8(c, SNN_F8E4M3, n->x8, NULL, SNN_F32, n->x32, M, n->I, n->amax, n->sinv));
        X = n->x8;
        xt = SNN_F8E4M3;
        xs = n->sinv;
    } else if (n->act != SNN_F32) {
        BT(snn_cuda_convert(c, n->act, n->xa, SNN_F32, n->x32, (size_t)M * n->I, NULL, 0));
        X = n->xa;
    } else {
        X = n->x32;
    }
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        snn_dtype yt = fp8 ? SNN_BF16 : n->act;
        if (n->block) {
            snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, W, L->in, xt, SNN_F8E4M3, yt, L->in, L->in, W, 0);
            d.a_scale_mode = SNN_CUDA_SCALE_VEC128;
            d.b_scale_mode = SNN_CUDA_SCALE_BLK128;
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->w8, 0.0f, n->y, l == 0 ? xs : n->ones, L->sw, NULL, NULL));
        } else if (fp8) {
            snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, W, L->in, xt, SNN_F8E4M3, yt, L->in, L->in, W, 1);
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->w8, 0.0f, n->y, xs, n->sinv + 1 + l, NULL, NULL));
        } else {
            snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, W, L->in, n->act, n->act, yt, L->in, L->in, W, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->wk ? L->wk : L->w, 0.0f, n->y, NULL, NULL, NULL, NULL));
        }
        if (n->mp) BT(neuron_forward_mp(n, L, yt, train));
        else
            BT(snn_cuda_neuron_forward(c, &n->lif, n->k, n->T, (size_t)n->B * W, yt, L->s_type, n->y, L->b,
                                       (size_t)W, NULL, L->s, train ? L->h : NULL, NULL, NULL));
        X = L->s;
        xt = L->s_type;
        xs = NULL; /* spikes: exact in E4M3 with scale 1 */
    }
    layer *H = &n->L[D];
    snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, n->C, W, xt, xt, SNN_F32, W, W, n->C, 0);
    BT(snn_cuda_gemm(c, &d, 1.0f, X, H->wk ? H->wk : H->w, 0.0f, n->logits, NULL, NULL, NULL, NULL));
    if (!train) BT(snn_cuda_bias_add(c, SNN_F32, n->logits, H->b, M, n->C));
    return SNN_OK;
}

static snn_status train_forward(void *p) { return forward((net *)p, 1); }
static snn_status infer(void *p) { return forward((net *)p, 0); }

static snn_status train_loss(void *p) {
    net *n = (net *)p;
    return snn_cuda_ce_mean_t(n->c, n->T, n->B, n->C, n->logits, n->L[n->D].b, n->labels, n->loss, n->ce_work,
                              n->fp8 ? SNN_BF16 : n->act, n->dlogits, n->loss_scale);
}

static snn_status sgd_layer(net *n, int l, snn_cuda *c, float lr, int requant) {
    layer *L = &n->L[l];
    snn_cuda_sgd h = {lr, n->momentum, 0.0f, 1.0f / n->loss_scale, 0};
    BT(snn_cuda_sgd_update(c, &h, (size_t)L->in * L->out, L->w, L->gw, L->mw, n->act == SNN_F16 ? SNN_F16 : SNN_BF16,
                           L->wk, L->w8 && !n->block ? n->amax + 1 + l : NULL, NULL));
    BT(snn_cuda_sgd_update(c, &h, (size_t)L->out, L->b, L->gb, L->mb, SNN_BF16, NULL, NULL, NULL));
    /* current: the scale from this update's amax; delayed: from the history (the amax
     * just recorded joins it at the next step's update) */
    if (L->w8 && requant && n->block)
        BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 1, n->pow2, SNN_F32, L->w, L->out, L->in, L->w8, L->sw, L->w8t,
                                       L->swt));
    else if (L->w8 && requant)
        BT(snn_cuda_quantize_fp8(c, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out, L->in,
                                 n->delayed ? n->dl.qamax + 1 + l : n->amax + 1 + l, n->sinv + 1 + l));
    return SNN_OK;
}

/* Hand layer l's optimizer update to the side stream once its gradients and its last reader
 * (the dgrad GEMM) are done; or run it in line. */
static snn_status update(net *n, int l) {
    if (!n->overlap) return sgd_layer(n, l, n->c, n->lr, 1);
    SNN_CU_TRY(cudaEventRecord(n->ev[0], snn_cuda_stream_of(n->c)));
    SNN_CU_TRY(cudaStreamWaitEvent(snn_cuda_stream_of(n->side), n->ev[0], 0));
    return sgd_layer(n, l, n->side, n->lr, 1);
}

static snn_status train_backward(void *p) {
    net *n = (net *)p;
    snn_cuda *c = n->c;
    const int M = n->M, W = n->W, D = n->D, fp8 = n->fp8;
    layer *H = &n->L[D];
    snn_dtype dlt = fp8 ? SNN_BF16 : n->act;
    layer *Ls = &n->L[D - 1];
    snn_cuda_gemm_desc d = snn_cuda_gd(1, 0, n->C, W, M, dlt, dlt, SNN_F32, n->C, W, W, 0);
    BT(snn_cuda_gemm(c, &d, 1.0f, n->dlogits, Ls->s, 0.0f, H->gw, NULL, NULL, NULL, NULL));
    BT(snn_cuda_colsum(c, dlt, n->dlogits, M, n->C, 0.0f, H->gb));
    d = snn_cuda_gd(0, 0, M, W, n->C, dlt, dlt, dlt, n->C, W, W, 0);
    BT(snn_cuda_gemm(c, &d, 1.0f, n->dlogits, H->wk ? H->wk : H->w, 0.0f, n->gs, NULL, NULL, NULL, NULL));
    BT(update(n, D));
    for (int l = D - 1; l >= 0; l--) {
        layer *L = &n->L[l];
        snn_dtype gt = fp8 ? SNN_BF16 : n->act;
        float *gam = n->amax + 1 + D + l, *gsi = n->sinv + 1 + D + l;
        if (n->mp) {
            BT(neuron_backward_mp(n, L, gt, fp8 && !n->block ? gam : NULL));
        } else {
            BT(snn_cuda_neuron_backward(c, &n->lif, n->k, n->T, (size_t)n->B * W, gt, L->h, NULL, n->gs, NULL, NULL,
                                        n->gy, NULL, NULL, n->tsum, fp8 && !n->block ? gam : NULL));
            BT(snn_cuda_colsum(c, SNN_F32, n->tsum, n->B, W, 0.0f, L->gb));
        }
        if (n->block) {
            BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, SNN_BF16, n->gy, M, W, n->gy8, n->sg, n->gy8t,
                                           n->sgt));
            /* the layer input's column-wise copy [in][M]: quantised from x, or the spikes transposed */
            uint8_t *xT = l == 0 && n->x8t ? n->x8t : n->xt_buf;
            if (l == 0)
                BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, SNN_F32, n->x32, M, n->I, NULL, NULL, xT,
                                               n->sxt));
            else
                BT(snn_cuda_transpose_u8(c, xT, n->L[l - 1].s, M, L->in));
            d = snn_cuda_gd(0, 1, W, L->in, M, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, M, M, L->in, 0);
            d.a_scale_mode = d.b_scale_mode = SNN_CUDA_SCALE_VEC128;
            BT(snn_cuda_gemm(c, &d, 1.0f, n->gy8t, xT, 0.0f, L->gw, n->sgt, l == 0 ? n->sxt : n->ones, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 1, M, L->in, W, SNN_F8E4M3, SNN_F8E4M3, SNN_BF16, W, W, L->in, 0);
                d.a_scale_mode = SNN_CUDA_SCALE_VEC128;
                d.b_scale_mode = SNN_CUDA_SCALE_BLK128;
                BT(snn_cuda_gemm(c, &d, 1.0f, n->gy8, L->w8t, 0.0f, n->gs, n->sg, L->swt, NULL, NULL));
            }
        } else if (fp8) {
            BT(snn_cuda_quantize_fp8(c, SNN_F8E5M2, n->gy8, n->gy8t, SNN_BF16, n->gy, M, W,
                                     n->delayed ? n->dl.qamax + 1 + D + l : gam, gsi));
            /* the layer input transposed [in][M] for the wgrad GEMM, in gy (quantised, dead) */
            uint8_t *xT = l == 0 && n->x8t ? n->x8t : n->xt_buf;
            BT(snn_cuda_transpose_u8(c, xT, l == 0 ? (const void *)n->x8 : n->L[l - 1].s, M, L->in));
            const float *xsc = l == 0 ? n->sinv : NULL;
            d = snn_cuda_gd(0, 1, W, L->in, M, SNN_F8E5M2, SNN_F8E4M3, SNN_F32, M, M, L->in, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, n->gy8t, xT, 0.0f, L->gw, gsi, xsc, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 1, M, L->in, W, SNN_F8E5M2, SNN_F8E4M3, SNN_BF16, W, W, L->in, 0);
                BT(snn_cuda_gemm(c, &d, 1.0f, n->gy8, L->w8t, 0.0f, n->gs, gsi, n->sinv + 1 + l, NULL, NULL));
            }
        } else {
            const void *Xin = l == 0 ? (n->act == SNN_F32 ? (const void *)n->x32 : n->xa) : n->L[l - 1].s;
            d = snn_cuda_gd(1, 0, W, L->in, M, n->act, n->act, SNN_F32, W, L->in, L->in, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, n->gy, Xin, 0.0f, L->gw, NULL, NULL, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 0, M, L->in, W, n->act, n->act, n->act, W, L->in, L->in, 0);
                BT(snn_cuda_gemm(c, &d, 1.0f, n->gy, L->wk ? L->wk : L->w, 0.0f, n->gs, NULL, NULL, NULL, NULL));
            }
        }
        BT(update(n, l));
    }
    if (n->overlap) { /* join the optimizer stream */
        SNN_CU_TRY(cudaEventRecord(n->ev[1], snn_cuda_stream_of(n->side)));
        SNN_CU_TRY(cudaStreamWaitEvent(snn_cuda_stream_of(c), n->ev[1], 0));
    }
    return SNN_OK;
}

static snn_status optimizer_lr0(void *p) {
    net *n = (net *)p;
    for (int l = n->D; l >= 0; l--) BT(sgd_layer(n, l, n->c, 0.0f, 0));
    return SNN_OK;
}

static snn_status update_max(void *p, float *out) {
    net *n = (net *)p;
    for (int l = 0; l <= n->D; l++) { /* against the base state, staged through the gradient buffers */
        layer *L = &n->L[l];
        size_t nw = (size_t)L->in * L->out;
        BT(snn_bench_drift_max(n->c, L->w, L->gw, n->d->weights[l], nw, out));
        BT(snn_bench_drift_max(n->c, L->b, L->gb, n->d->biases[l], (size_t)L->out, out));
    }
    return SNN_OK;
}

/* Fraction of spikes in the last hidden layer (BF16/F16/F32 spikes there in every mode). */
static snn_status diag(void *p, int after, snn_cuda_bench_result *r) {
    net *n = (net *)p;
    layer *L = &n->L[n->D - 1];
    BT(snn_cuda_colsum(n->c, L->s_type, L->s, n->M, n->W, 0.0f, n->col));
    float *h = (float *)malloc((size_t)n->W * 4);
    if (!h) return snn_error(SNN_E_NOMEM, "out of host memory");
    snn_status st = snn_cuda_download(n->c, h, n->col, (size_t)n->W * 4);
    double s = 0;
    for (int j = 0; st == SNN_OK && j < n->W; j++) s += h[j];
    free(h);
    BT(st);
    double rate = s / ((double)n->M * n->W);
    if (after) r->spike_rate_last = rate;
    else r->spike_rate_first = rate;
    return SNN_OK;
}

extern "C" snn_status snn_cuda_bench_run_fcsnn(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
                                               const snn_cuda_bench_data *d, snn_cuda_bench_result *r) {
    double t0 = snn_bench_now();
    size_t free0 = 0, total = 0;
    BT(snn_cuda_synchronize(c));
    SNN_CU_TRY(cudaMemGetInfo(&free0, &total));
    net n;
    memset(&n, 0, sizeof n);
    n.c = c;
    n.d = d;
    const snn_bench_mode md = snn_bench_mode_of(cfg, p, &n.dl);
    n.fp8 = md.fp8;
    n.block = md.block;
    n.pow2 = md.pow2;
    n.delayed = md.delayed;
    n.act = md.act;
    n.loss_scale = md.loss_scale;
    n.T = cfg->T;
    n.B = cfg->N;
    n.M = cfg->T * cfg->N;
    n.W = cfg->width;
    n.D = cfg->depth - 1; /* hidden [Linear -> LIF] blocks; the head is L[D] */
    n.I = cfg->in;
    n.C = cfg->classes;
    n.lr = cfg->lr;
    n.momentum = cfg->momentum;
    n.overlap = cfg->overlap_optimizer;
    n.lif = snn_neuron_defaults(SNN_NEURON_LIF); /* Sigmoid(4), hard reset to 0, threshold 1 */
    n.lif.tau = cfg->tau;
    n.k = 1.0f / cfg->tau;
    n.mp = cfg->neuron_storage != SNN_NEURON_STORAGE_UNSET;
    if (n.mp) {
        n.ns = snn_neuron_storage_dtype(cfg->neuron_storage);
        n.nf = snn_neuron_compute_dtype(cfg->neuron_fwd, cfg->neuron_storage);
        n.nb = snn_neuron_compute_dtype(cfg->neuron_bwd, cfg->neuron_storage);
    }
    snn_bench_alloc a;
    memset(&a, 0, sizeof a);
    a.c = c;
    snn_status st = build(&n, &a);
    if (st == SNN_OK) {
        snn_bench_ops ops;
        memset(&ops, 0, sizeof ops);
        ops.net = &n;
        ops.load = load;
        ops.train_forward = train_forward;
        ops.train_loss = train_loss;
        ops.train_backward = train_backward;
        ops.infer = infer;
        ops.optimizer_lr0 = optimizer_lr0;
        ops.update_max = update_max;
        ops.diag = diag;
        ops.loss = n.loss;
        ops.logits = n.logits;
        ops.n_logits = (size_t)n.M * n.C;
        st = snn_bench_protocol(c, cfg, &ops, &a, t0, free0, r);
    }
    r->layers = n.D + 1;
    r->fp8_layers = n.fp8 ? n.D : 0;
    r->head_fp8 = 0;
    cudaStreamSynchronize(snn_cuda_stream_of(c));
    if (n.side) snn_cuda_synchronize(n.side);
    snn_bench_alloc_free_all(&a);
    for (int i = 0; i < n.nev; i++) cudaEventDestroy(n.ev[i]);
    if (n.side) snn_cuda_destroy(n.side);
    free(n.L);
    return st;
}
