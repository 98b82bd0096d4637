/* FC-SNN workload of SpikingJelly's precision guide on one GPU: input [T, B, I] (randn),
 * D × [Linear(in, W) → LIF(tau 2, Sigmoid(4), hard reset 0)], Linear(W, C), cross-entropy on the
 * mean over T, SGD momentum 0.9 with FP32 master weights.
 *
 * Time folds into the GEMM M dimension (M = T·B); the neuron pass is one fused elementwise
 * kernel per layer (bias add, LIF recurrence, spike write, h save; backward: BPTT, bias-grad
 * partial sums, FP8 amax). A whole training step (forward, backward, optimizer) and an
 * inference step (forward) are each captured once in a CUDA graph and replayed: no host sync,
 * no allocation inside. Precisions: fp32 (TF32 off), fp16 (static loss scale 1024), bf16,
 * fp8 (E4M3 forward operands, E5M2 gradients, per-tensor current scaling; spikes written
 * directly as E4M3 with scale 1; the 10-class head stays BF16 as its width is not a multiple
 * of 16). Prints one JSON object per precision (and --json appends them to a file). */
#include <stdint.h>

#include "bench_common.h"

enum { P_FP32, P_FP16, P_BF16, P_FP8 };
static const char *pname[] = {"fp32", "fp16", "bf16", "fp8"};

typedef struct {
    int in, out;
    float *w, *b, *gw, *gb, *mw, *mb; /* FP32 master, grads, momentum */
    void *wk;                         /* 16-bit working copy (NULL: GEMMs read w or w8) */
    uint8_t *w8, *w8t;                /* FP8 weight [out][in] and its transpose [in][out] */
    void *h, *s;                      /* saved membrane, spikes [M][out] */
    uint8_t *s_t;                     /* FP8 spikes transposed [out][M] (next layer's wgrad) */
    snn_dtype s_type;
} layer;

typedef struct {
    int prec, T, B, M, W, D, I, C, overlap;
    snn_dtype act;
    float lr, momentum, loss_scale, gain;
    layer *L; /* D hidden layers, then the head at L[D] */
    float *x32;
    void *xa;
    uint8_t *x8, *x8t;
    void *y, *gs, *gy;
    uint8_t *gy8, *gy8t;
    float *tsum, *logits, *loss, *ce_work;
    void *dlogits;
    int32_t *labels;
    float *amax; /* [0] input, [1+l] weight l, [1+D+l] gradient l: zeroed each step */
    float *sinv; /* same slots: dequantisation factors */
    snn_cuda *side; /* optimizer stream for --overlap */
    cudaEvent_t *ev;
    snn_neuron_opts lif;
} net;

static snn_cuda_gemm_desc gd(int ta, int tb, int M, int N, int K, snn_dtype a, snn_dtype b,
                             snn_dtype c, int lda, int ldb, int ldc, int fast) {
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = ta;
    d.trans_b = tb;
    d.M = M;
    d.N = N;
    d.K = K;
    d.a_type = a;
    d.b_type = b;
    d.c_type = c;
    d.lda = lda;
    d.ldb = ldb;
    d.ldc = ldc;
    d.fast_accum = fast;
    return d;
}

static void build(net *n) {
    const int M = n->M, W = n->W, D = n->D;
    const size_t es = snn_dtype_size(n->act);
    const int fp8 = n->prec == P_FP8;
    n->L = (layer *)calloc((size_t)D + 1, sizeof(layer));
    n->lif = snn_neuron_defaults(SNN_NEURON_LIF); /* tau 2, Sigmoid(4), hard reset to 0 */
    for (int l = 0; l <= D; l++) {
        layer *L = &n->L[l];
        L->in = l == 0 ? n->I : W;
        L->out = l == D ? n->C : W;
        size_t nw = (size_t)L->in * L->out;
        L->w = (float *)dal(nw * 4);
        L->gw = (float *)dal(nw * 4);
        L->mw = (float *)dal(nw * 4);
        L->b = (float *)dal((size_t)L->out * 4);
        L->gb = (float *)dal((size_t)L->out * 4);
        L->mb = (float *)dal((size_t)L->out * 4);
        /* Hidden weights U(±gain/sqrt(in)) keep ~25% of neurons spiking at every depth
         * (PyTorch's U(±1/sqrt(in)) lets activity die after two layers: GEMMs on zeros). */
        float a = (l == D ? 1.0f : n->gain) / sqrtf((float)L->in), ab = 1.0f / sqrtf((float)L->in);
        TRY(snn_cuda_fill_random(g_ctx, L->w, nw, 1000 + l, 0, -a, a));
        TRY(snn_cuda_fill_random(g_ctx, L->b, L->out, 2000 + l, 0, -ab, ab));
        TRY(snn_cuda_memset(g_ctx, L->mw, 0, nw * 4));
        TRY(snn_cuda_memset(g_ctx, L->mb, 0, (size_t)L->out * 4));
        if (n->prec == P_FP16 || n->prec == P_BF16 || (fp8 && l == D)) {
            L->wk = dal(nw * es);
            TRY(snn_cuda_convert(g_ctx, n->act, L->wk, SNN_F32, L->w, nw, NULL, 0));
        }
        if (fp8 && l < D) {
            L->w8 = (uint8_t *)dal(nw);
            L->w8t = (uint8_t *)dal(nw);
        }
        if (l < D) {
            L->s_type = fp8 ? (l == D - 1 ? SNN_BF16 : SNN_F8E4M3) : n->act;
            L->s = dal((size_t)M * W * snn_dtype_size(L->s_type));
            L->h = dal((size_t)M * W * es);
            if (fp8 && l < D - 1) L->s_t = (uint8_t *)dal((size_t)M * W);
        }
    }
    n->x32 = (float *)dal((size_t)M * n->I * 4);
    TRY(snn_cuda_fill_random(g_ctx, n->x32, (size_t)M * n->I, 7, 1, 0.0f, 1.0f));
    if (fp8) {
        n->x8 = (uint8_t *)dal((size_t)M * n->I);
        n->x8t = (uint8_t *)dal((size_t)M * n->I);
        n->gy8 = (uint8_t *)dal((size_t)M * W);
        n->gy8t = (uint8_t *)dal((size_t)M * W);
    } else if (n->act != SNN_F32) {
        n->xa = dal((size_t)M * n->I * es);
    }
    int wmax = W > n->I ? W : n->I;
    n->y = dal((size_t)M * W * es);
    n->gs = dal((size_t)M * wmax * es);
    n->gy = dal((size_t)M * W * es);
    n->tsum = (float *)dal((size_t)n->B * W * 4);
    n->logits = (float *)dal((size_t)M * n->C * 4);
    n->dlogits = dal((size_t)M * n->C * es);
    n->loss = (float *)dal(4);
    n->ce_work = (float *)dal((size_t)n->B * 4);
    n->labels = (int32_t *)dal((size_t)n->B * 4);
    int32_t *lab = (int32_t *)malloc((size_t)n->B * 4);
    for (int b = 0; b < n->B; b++) lab[b] = (int32_t)((b * 7 + 3) % n->C);
    TRY(snn_cuda_upload(g_ctx, n->labels, lab, (size_t)n->B * 4));
    free(lab);
    n->amax = (float *)dal((size_t)(2 * D + 2) * 4);
    n->sinv = (float *)dal((size_t)(2 * D + 2) * 4);
    TRY(snn_cuda_memset(g_ctx, n->amax, 0, (size_t)(2 * D + 2) * 4));
    if (fp8) /* first quantisation of the weights (later ones follow each SGD update) */
        for (int l = 0; l < D; l++) {
            layer *L = &n->L[l];
            TRY(snn_cuda_amax(g_ctx, SNN_F32, L->w, (size_t)L->in * L->out, n->amax + 1 + l));
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out,
                                      L->in, n->amax + 1 + l, n->sinv + 1 + l));
        }
    if (n->overlap) {
        TRY(snn_cuda_create(0, 0, &n->side));
        n->ev = (cudaEvent_t *)calloc((size_t)D + 2, sizeof(cudaEvent_t));
        for (int i = 0; i < D + 2; i++)
            CU(cudaEventCreateWithFlags(&n->ev[i], cudaEventDisableTiming));
    }
    TRY(snn_cuda_synchronize(g_ctx));
}

static void forward(net *n, int train) {
    const int M = n->M, W = n->W, D = n->D, fp8 = n->prec == P_FP8;
    const void *X;
    snn_dtype xt = n->act;
    const float *xs = NULL;
    if (fp8) {
        TRY(snn_cuda_amax(g_ctx, SNN_F32, n->x32, (size_t)M * n->I, n->amax));
        TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, n->x8, train ? n->x8t : NULL, SNN_F32,
                                  n->x32, M, n->I, n->amax, n->sinv));
        X = n->x8;
        xt = SNN_F8E4M3;
        xs = n->sinv;
    } else if (n->act != SNN_F32) {
        TRY(snn_cuda_convert(g_ctx, n->act, n->xa, SNN_F32, n->x32, (size_t)M * n->I, NULL, 0));
        X = n->xa;
    } else {
        X = n->x32;
    }
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        snn_dtype yt = fp8 ? SNN_BF16 : n->act;
        if (fp8) {
            snn_cuda_gemm_desc d = gd(0, 1, M, W, L->in, xt, SNN_F8E4M3, yt, L->in, L->in, W, 1);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, X, L->w8, 0.0f, n->y, xs, n->sinv + 1 + l, NULL, NULL));
        } else {
            snn_cuda_gemm_desc d = gd(0, 1, M, W, L->in, n->act, n->act, yt, L->in, L->in, W, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, X, L->wk ? L->wk : L->w, 0.0f, n->y, NULL, NULL,
                              NULL, NULL));
        }
        TRY(snn_cuda_neuron_forward(g_ctx, &n->lif, 0.5f, n->T, (size_t)n->B * W, yt, L->s_type,
                                    n->y, L->b, (size_t)W, NULL, L->s, train ? L->h : NULL, NULL,
                                    NULL));
        if (fp8 && train && L->s_t) TRY(snn_cuda_transpose_u8(g_ctx, L->s_t, L->s, M, W));
        X = L->s;
        xt = L->s_type;
        xs = NULL; /* spikes: exact in E4M3 with scale 1 */
    }
    layer *H = &n->L[D];
    snn_cuda_gemm_desc d = gd(0, 1, M, n->C, W, xt, xt, SNN_F32, W, W, n->C, 0);
    TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, X, H->wk ? H->wk : H->w, 0.0f, n->logits, NULL, NULL, NULL,
                      NULL));
    if (!train) TRY(snn_cuda_bias_add(g_ctx, SNN_F32, n->logits, H->b, M, n->C));
}

static void sgd_layer(net *n, int l, snn_cuda *c) {
    layer *L = &n->L[l];
    const int fp8 = n->prec == P_FP8 && l < n->D;
    snn_cuda_sgd h = {n->lr, n->momentum, 0.0f, 1.0f / n->loss_scale, 0};
    size_t nw = (size_t)L->in * L->out;
    TRY(snn_cuda_sgd_update(c, &h, nw, L->w, L->gw, L->mw, n->act == SNN_F16 ? SNN_F16 : SNN_BF16,
                            L->wk, fp8 ? n->amax + 1 + l : NULL, NULL));
    TRY(snn_cuda_sgd_update(c, &h, (size_t)L->out, L->b, L->gb, L->mb, SNN_BF16, NULL, NULL, NULL));
    if (fp8)
        TRY(snn_cuda_quantize_fp8(c, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out, L->in,
                                  n->amax + 1 + l, n->sinv + 1 + l));
}

/* Hand layer l's optimizer update to the side stream once its gradients and its last reader
 * (the dgrad GEMM) are done; or run it in line. */
static void update(net *n, int l, int slot) {
    if (!n->overlap) {
        sgd_layer(n, l, g_ctx);
        return;
    }
    CU(cudaEventRecord(n->ev[slot], stream()));
    CU(cudaStreamWaitEvent((cudaStream_t)snn_cuda_stream(n->side), n->ev[slot], 0));
    sgd_layer(n, l, n->side);
}

static void train_step(net *n) {
    const int M = n->M, W = n->W, D = n->D, fp8 = n->prec == P_FP8;
    TRY(snn_cuda_memset(g_ctx, n->amax, 0, (size_t)(2 * D + 2) * 4));
    forward(n, 1);
    layer *H = &n->L[D];
    snn_dtype dlt = fp8 ? SNN_BF16 : n->act;
    TRY(snn_cuda_ce_mean_t(g_ctx, n->T, n->B, n->C, n->logits, H->b, n->labels, n->loss,
                           n->ce_work, dlt, n->dlogits, n->loss_scale));
    layer *Ls = &n->L[D - 1];
    snn_cuda_gemm_desc d = gd(1, 0, n->C, W, M, dlt, dlt, SNN_F32, n->C, W, W, 0);
    TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->dlogits, Ls->s, 0.0f, H->gw, NULL, NULL, NULL, NULL));
    TRY(snn_cuda_colsum(g_ctx, dlt, n->dlogits, M, n->C, 0.0f, H->gb));
    d = gd(0, 0, M, W, n->C, dlt, dlt, dlt, n->C, W, W, 0);
    TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->dlogits, H->wk ? H->wk : H->w, 0.0f, n->gs, NULL, NULL,
                      NULL, NULL));
    update(n, D, D);
    for (int l = D - 1; l >= 0; l--) {
        layer *L = &n->L[l];
        snn_dtype gt = fp8 ? SNN_BF16 : n->act;
        float *gam = n->amax + 1 + D + l, *gsi = n->sinv + 1 + D + l;
        TRY(snn_cuda_neuron_backward(g_ctx, &n->lif, 0.5f, n->T, (size_t)n->B * W, gt, L->h, NULL,
                                     n->gs, NULL, NULL, n->gy, NULL, NULL, n->tsum,
                                     fp8 ? gam : NULL));
        TRY(snn_cuda_colsum(g_ctx, SNN_F32, n->tsum, n->B, W, 0.0f, L->gb));
        if (fp8) {
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E5M2, n->gy8, n->gy8t, SNN_BF16, n->gy, M, W, gam,
                                      gsi));
            const uint8_t *xT = l == 0 ? n->x8t : n->L[l - 1].s_t;
            const float *xsc = l == 0 ? n->sinv : NULL;
            d = gd(0, 1, W, L->in, M, SNN_F8E5M2, SNN_F8E4M3, SNN_F32, M, M, L->in, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->gy8t, xT, 0.0f, L->gw, gsi, xsc, NULL, NULL));
            if (l > 0) {
                d = gd(0, 1, M, L->in, W, SNN_F8E5M2, SNN_F8E4M3, SNN_BF16, W, W, L->in, 0);
                TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->gy8, L->w8t, 0.0f, n->gs, gsi,
                                  n->sinv + 1 + l, NULL, NULL));
            }
        } else {
            const void *Xin = l == 0 ? (n->act == SNN_F32 ? (const void *)n->x32 : n->xa)
                                     : n->L[l - 1].s;
            d = gd(1, 0, W, L->in, M, n->act, n->act, SNN_F32, W, L->in, L->in, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->gy, Xin, 0.0f, L->gw, NULL, NULL, NULL, NULL));
            if (l > 0) {
                d = gd(0, 0, M, L->in, W, n->act, n->act, n->act, W, L->in, L->in, 0);
                TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->gy, L->wk ? L->wk : L->w, 0.0f, n->gs, NULL,
                                  NULL, NULL, NULL));
            }
        }
        update(n, l, l);
    }
    if (n->overlap) { /* join the optimizer stream */
        CU(cudaEventRecord(n->ev[D + 1], (cudaStream_t)snn_cuda_stream(n->side)));
        CU(cudaStreamWaitEvent(stream(), n->ev[D + 1], 0));
    }
}

static cudaGraphExec_t capture(net *n, int train) {
    cudaGraph_t g;
    cudaGraphExec_t ex;
    CU(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    if (train)
        train_step(n);
    else
        forward(n, 0);
    CU(cudaStreamEndCapture(stream(), &g));
    CU(cudaGraphInstantiate(&ex, g, 0));
    CU(cudaGraphDestroy(g));
    return ex;
}

/* Fraction of spikes in the last hidden layer (BF16/F16/F32 spikes there in every mode). */
static double spike_rate(net *n) {
    layer *L = &n->L[n->D - 1];
    float *col = (float *)dal((size_t)n->W * 4);
    TRY(snn_cuda_colsum(g_ctx, L->s_type, L->s, n->M, n->W, 0.0f, col));
    float *h = (float *)malloc((size_t)n->W * 4);
    TRY(snn_cuda_download(g_ctx, h, col, (size_t)n->W * 4));
    double s = 0;
    for (int j = 0; j < n->W; j++) s += h[j];
    free(h);
    snn_cuda_free(col);
    g_alloc_bytes -= (size_t)n->W * 4;
    return s / ((double)n->M * n->W);
}

static void destroy(net *n) {
    for (int l = 0; l <= n->D; l++) {
        layer *L = &n->L[l];
        void *p[] = {L->w, L->b, L->gw, L->gb, L->mw, L->mb, L->wk, L->w8, L->w8t, L->h, L->s, L->s_t};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) snn_cuda_free(p[i]);
    }
    void *p[] = {n->x32, n->xa, n->x8, n->x8t, n->y, n->gs, n->gy, n->gy8, n->gy8t, n->tsum,
                 n->logits, n->loss, n->ce_work, n->dlogits, n->labels, n->amax, n->sinv};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) snn_cuda_free(p[i]);
    if (n->side) {
        for (int i = 0; i < n->D + 2; i++) cudaEventDestroy(n->ev[i]);
        free(n->ev);
        snn_cuda_destroy(n->side);
    }
    free(n->L);
    g_alloc_bytes = 0;
}

static double fwd_flops(const net *n) {
    double f = 0;
    for (int l = 0; l <= n->D; l++) f += 2.0 * n->M * (double)n->L[l].in * n->L[l].out;
    return f;
}

int main(int argc, char **argv) {
    int W = 4096, D = 20, I = 0, B = 256, T = 16, C = 10, warm = 3, reps = 7, iters = 5, overlap = 0;
    float lr = 0.05f, gain = 12.0f;
    const char *precs = "fp32,fp16,bf16,fp8", *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--width")) W = atoi(v), i++;
        else if (!strcmp(a, "--depth")) D = atoi(v), i++;
        else if (!strcmp(a, "--input-dim")) I = atoi(v), i++;
        else if (!strcmp(a, "--batch")) B = atoi(v), i++;
        else if (!strcmp(a, "--time-steps")) T = atoi(v), i++;
        else if (!strcmp(a, "--classes")) C = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warm = atoi(v), i++;
        else if (!strcmp(a, "--repeats")) reps = atoi(v), i++;
        else if (!strcmp(a, "--iters")) iters = atoi(v), i++;
        else if (!strcmp(a, "--lr")) lr = (float)atof(v), i++;
        else if (!strcmp(a, "--init-gain")) gain = (float)atof(v), i++;
        else if (!strcmp(a, "--overlap")) overlap = atoi(v), i++;
        else if (!strcmp(a, "--precisions")) precs = v, i++;
        else if (!strcmp(a, "--json")) json = v, i++;
        else {
            fprintf(stderr, "usage: %s [--width W] [--depth D] [--input-dim I] [--batch B] "
                            "[--time-steps T] [--classes C] [--precisions fp32,fp16,bf16,fp8] "
                            "[--warmup N] [--repeats N] [--iters N] [--lr X] [--init-gain G] "
                            "[--overlap 0|1] [--json FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (I <= 0) I = W;
    if (W <= 0 || D < 1 || B <= 0 || T <= 0 || C <= 0 || reps < 5) {
        fprintf(stderr, "invalid sizes (need positive sizes, depth >= 1, repeats >= 5)\n");
        return 2;
    }
    TRY(snn_cuda_create(0, 0, &g_ctx));
    snn_cuda_set_gemm_autotune(g_ctx, 1);
    FILE *jf = json ? fopen(json, "a") : NULL;
    double rates[4] = {0, 0, 0, 0};
    for (int p = 0; p < 4; p++) {
        if (!strstr(precs, pname[p])) continue;
        /* the floor rate of this precision: a big square GEMM in the same run */
        static const snn_dtype ab[] = {SNN_F32, SNN_F16, SNN_BF16, SNN_F8E4M3};
        static const snn_dtype cc[] = {SNN_F32, SNN_F16, SNN_BF16, SNN_BF16};
        rates[p] = gemm_rate(8192, ab[p], cc[p], p == P_FP8);
        net n;
        memset(&n, 0, sizeof n);
        n.prec = p;
        n.act = p == P_FP32 ? SNN_F32 : p == P_FP16 ? SNN_F16 : SNN_BF16;
        n.T = T; n.B = B; n.M = T * B; n.W = W; n.D = D; n.I = I; n.C = C;
        n.lr = lr;
        n.momentum = 0.9f;
        n.loss_scale = p == P_FP16 ? 1024.0f : 1.0f;
        n.gain = gain;
        n.overlap = overlap;
        if (p == P_FP8 && (W % 16 || I % 16 || n.M % 16)) {
            fprintf(stderr, "fp8 needs width, input dim and T*batch multiples of 16; skipped\n");
            continue;
        }
        size_t free0, total;
        CU(cudaMemGetInfo(&free0, &total));
        build(&n);
        float w_before, w_after;
        TRY(snn_cuda_download(g_ctx, &w_before, n.L[D / 2].w + 5, 4));
        train_step(&n); /* eager: cuBLASLt plans (autotuned) and module loading */
        TRY(snn_cuda_synchronize(g_ctx));
        if (n.side) TRY(snn_cuda_synchronize(n.side));
        double rate_first = spike_rate(&n);
        cudaGraphExec_t tg = capture(&n, 1);
        double tmin, tmax, imin, imax;
        double t_ms = time_graph(tg, warm, reps, iters, &tmin, &tmax);
        float loss;
        TRY(snn_cuda_download(g_ctx, &loss, n.loss, 4));
        TRY(snn_cuda_download(g_ctx, &w_after, n.L[D / 2].w + 5, 4));
        double rate_last = spike_rate(&n);
        size_t free1;
        CU(cudaMemGetInfo(&free1, &total));
        size_t train_alloc = g_alloc_bytes;
        forward(&n, 0);
        TRY(snn_cuda_synchronize(g_ctx));
        cudaGraphExec_t ig = capture(&n, 0);
        double i_ms = time_graph(ig, warm, reps, iters, &imin, &imax);
        float lg;
        TRY(snn_cuda_download(g_ctx, &lg, n.logits, 4));
        double ff = fwd_flops(&n);
        double floor_t = 3 * ff / (rates[p] * 1e12) * 1e3, floor_i = ff / (rates[p] * 1e12) * 1e3;
        char buf[2048];
        int len = snprintf(buf, sizeof buf,
            "{\"bench\": \"fcsnn\", \"precision\": \"%s\", \"width\": %d, \"depth\": %d, "
            "\"input_dim\": %d, \"batch\": %d, \"time_steps\": %d, \"classes\": %d, "
            "\"overlap_optimizer\": %d, \"train_ms\": %.4f, \"train_ms_min\": %.4f, "
            "\"train_ms_max\": %.4f, \"train_samples_per_s\": %.1f, \"infer_ms\": %.4f, "
            "\"infer_ms_min\": %.4f, \"infer_ms_max\": %.4f, \"infer_samples_per_s\": %.1f, "
            "\"gemm_floor_tflops\": %.1f, \"train_gemm_floor_ms\": %.4f, \"infer_gemm_floor_ms\": "
            "%.4f, \"train_floor_fraction\": %.3f, \"infer_floor_fraction\": %.3f, "
            "\"allocated_mib\": %.1f, \"device_used_mib\": %.1f, \"loss_after\": %.6g, "
            "\"loss_finite\": %s, \"param_delta\": %.3g, \"logit_finite\": %s, "
            "\"last_hidden_spike_rate_first_step\": %.4f, \"last_hidden_spike_rate\": %.4f, \"repeats\": %d, \"iters_per_repeat\": %d}",
            pname[p], W, D, I, B, T, C, overlap, t_ms, tmin, tmax, B / (t_ms * 1e-3), i_ms, imin,
            imax, B / (i_ms * 1e-3), rates[p], floor_t, floor_i, floor_t / t_ms, floor_i / i_ms,
            train_alloc / 1048576.0, (double)(free0 - free1) / 1048576.0, (double)loss,
            isfinite(loss) ? "true" : "false", (double)fabsf(w_after - w_before),
            isfinite(lg) ? "true" : "false", rate_first, rate_last, reps, iters);
        (void)len;
        printf("%s\n", buf);
        fflush(stdout);
        if (jf) {
            fprintf(jf, "%s\n", buf);
            fflush(jf);
        }
        CU(cudaGraphExecDestroy(tg));
        CU(cudaGraphExecDestroy(ig));
        destroy(&n);
    }
    if (jf) fclose(jf);
    snn_cuda_destroy(g_ctx);
    return 0;
}
