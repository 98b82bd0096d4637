/* The dense workload of SpikingJelly's precision guide ("When FP8 is faster") on one GPU:
 * (depth−1) × [Linear(W, W) → GELU(exact)] → Linear(W, C), cross-entropy, plain SGD on FP32
 * master weights; input [B, W] and labels from the host (the CPU path's base state).
 *
 * Precisions: fp32 (FP32 GEMMs, TF32 off), fp16 (static loss scale 1024, unscaled inside the
 * SGD kernel), bf16, fp8 (BF16 outside the GEMMs; per-tensor current scaling amax → scale →
 * quantise; E4M3 activations and weights, E5M2 gradients; fast accumulation only in the
 * forward GEMMs; weights re-quantised with transpose right after each SGD update, whose
 * kernel also gives their amax), or delayed scaling (scales from device amax histories,
 * updated by one small kernel at the start of a step; every amax above is then recorded
 * into the history instead of feeding this step's scale, and the input is quantised and its
 * amax recorded in one pass), or block scaling (cfg.fp8_block: E4M3 everywhere, every
 * activation and gradient quantised into a 1x128-vector copy and a transposed column-wise
 * copy, weights into 128x128 tiles with their transpose, no amax slots; the GEMMs use
 * cuBLASLt's block-scale modes). Bias + GELU forward and GELU backward are fused elementwise
 * kernels here (they also produce the amax the next FP8 quantisation needs). */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_bench_impl.h"

/* ---- fused elementwise kernels (exact GELU, erf form), V elements per access ---- */

__device__ __forceinline__ void block_amax(float m, float *amax) {
    __shared__ float red[32];
    m = snn_warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.0f;
        m = snn_warp_max(m);
        if (threadIdx.x == 0) snn_atomic_max_pos(amax, m);
    }
}

/* z = round(y + bias[col]) (saved for the backward when zsave != NULL), a = round(gelu(z)),
 * amax = max(amax, |a|). cols % V == 0 keeps a pack inside a row. y and zsave may alias. */
template <typename T, int V>
__global__ void gelu_fwd_kernel(const T *y, const float *__restrict__ bias, int cols, size_t nv, T *zsave,
                                T *__restrict__ a, float *amax) {
    float mx = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
        Pack<T, V> yv = pack_ld<T, V>(y + i * V), zv, av;
        const int j = (int)((i * V) % (size_t)cols);
#pragma unroll
        for (int k = 0; k < V; k++) {
            zv.v[k] = Io<T>::st(Io<T>::ld(yv.v[k]) + bias[j + k]);
            const float z = Io<T>::ld(zv.v[k]);
            av.v[k] = Io<T>::st(0.5f * z * (1.0f + erff(z * 0.70710678118654752f)));
            mx = fmaxf(mx, fabsf(Io<T>::ld(av.v[k])));
        }
        if (zsave) pack_st<T, V>(zsave + i * V, zv);
        pack_st<T, V>(a + i * V, av);
    }
    if (amax) block_amax(mx, amax);
}

/* gz = ga · gelu'(z), gelu'(z) = Φ(z) + z·φ(z); amax = max(amax, |gz|). ga and gz may alias. */
template <typename T, int V>
__global__ void gelu_bwd_kernel(const T *ga, const T *__restrict__ z, T *gz, size_t nv, float *amax) {
    float mx = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
        Pack<T, V> gv = pack_ld<T, V>(ga + i * V);
        const Pack<T, V> zv = pack_ld<T, V>(z + i * V);
#pragma unroll
        for (int k = 0; k < V; k++) {
            const float x = Io<T>::ld(zv.v[k]);
            const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
            const float pdf = 0.39894228040143268f * __expf(-0.5f * x * x);
            gv.v[k] = Io<T>::st(Io<T>::ld(gv.v[k]) * (cdf + x * pdf));
            mx = fmaxf(mx, fabsf(Io<T>::ld(gv.v[k])));
        }
        pack_st<T, V>(gz + i * V, gv);
    }
    if (amax) block_amax(mx, amax);
}

static unsigned ew_blocks(snn_cuda *c, size_t nv) {
    size_t b = (nv + 255) / 256, cap = (size_t)snn_cuda_sm_count(c) * 8;
    b = b < cap ? b : cap;
    return (unsigned)(b ? b : 1);
}

template <typename T>
static snn_status gelu_fwd_t(snn_cuda *c, const void *y, const float *bias, int rows, int cols, void *zsave,
                             void *a, float *amax) {
    constexpr int V = 16 / sizeof(T);
    size_t n = (size_t)rows * cols;
    cudaStream_t s = snn_cuda_stream_of(c);
    if (cols % V == 0)
        gelu_fwd_kernel<T, V><<<ew_blocks(c, n / V), 256, 0, s>>>((const T *)y, bias, cols, n / V, (T *)zsave,
                                                                  (T *)a, amax);
    else
        gelu_fwd_kernel<T, 1><<<ew_blocks(c, n), 256, 0, s>>>((const T *)y, bias, cols, n, (T *)zsave, (T *)a,
                                                              amax);
    SNN_CU_LAUNCHED("gelu_fwd_kernel");
    return SNN_OK;
}

template <typename T>
static snn_status gelu_bwd_t(snn_cuda *c, const void *ga, const void *z, void *gz, int cols, size_t n,
                             float *amax) {
    constexpr int V = 16 / sizeof(T);
    cudaStream_t s = snn_cuda_stream_of(c);
    if (cols % V == 0)
        gelu_bwd_kernel<T, V><<<ew_blocks(c, n / V), 256, 0, s>>>((const T *)ga, (const T *)z, (T *)gz, n / V, amax);
    else
        gelu_bwd_kernel<T, 1><<<ew_blocks(c, n), 256, 0, s>>>((const T *)ga, (const T *)z, (T *)gz, n, amax);
    SNN_CU_LAUNCHED("gelu_bwd_kernel");
    return SNN_OK;
}

static snn_status gelu_fwd(snn_cuda *c, snn_dtype t, const void *y, const float *bias, int rows, int cols,
                           void *zsave, void *a, float *amax) {
    if (t == SNN_F16) return gelu_fwd_t<__half>(c, y, bias, rows, cols, zsave, a, amax);
    if (t == SNN_BF16) return gelu_fwd_t<__nv_bfloat16>(c, y, bias, rows, cols, zsave, a, amax);
    return gelu_fwd_t<float>(c, y, bias, rows, cols, zsave, a, amax);
}

static snn_status gelu_bwd(snn_cuda *c, snn_dtype t, const void *ga, const void *z, void *gz, int cols, size_t n,
                           float *amax) {
    if (t == SNN_F16) return gelu_bwd_t<__half>(c, ga, z, gz, cols, n, amax);
    if (t == SNN_BF16) return gelu_bwd_t<__nv_bfloat16>(c, ga, z, gz, cols, n, amax);
    return gelu_bwd_t<float>(c, ga, z, gz, cols, n, amax);
}

/* ---- the network ---- */
typedef struct {
    int in, out;
    float *w, *b, *gw, *gb; /* FP32 master weights and gradients */
    void *wk;               /* 16-bit working copy (fp16/bf16; fp32 reads w) */
    uint8_t *w8, *w8t;      /* FP8 weight [out][in] and transpose [in][out] */
    void *z, *a;            /* hidden layers: pre-activation (saved) and GELU output [B][out] */
    uint8_t *a8, *a8t;      /* FP8 GELU output and its transpose (next layer's input) */
    float *sw, *swt, *sa, *sat; /* block scaling: factors of w8, w8t, a8, a8t */
} layer;

typedef struct {
    snn_cuda *c;
    const snn_cuda_bench_data *d;
    int fp8, delayed, block, pow2, B, W, D, C;
    snn_dtype act; /* storage of activations and gradients outside the GEMMs */
    float lr, loss_scale;
    layer *L; /* D layers: 0..D-2 hidden (GELU), D-1 the head */
    float *x32;
    void *xa;
    uint8_t *x8, *x8t;
    float *logits, *loss, *ce_work;
    void *g[2]; /* gradient ping-pong [B][max(W, C)] */
    uint8_t *g8, *g8t;
    float *sx, *sxt, *sg, *sgt; /* block scaling: factors of x8, x8t, g8, g8t */
    int32_t *labels;
    /* amax/scale slots: [0] input, [1+l] GELU output of layer l, [1+D+l] weight l,
     * [1+2D+l] gradient at the output of layer l */
    float *amax, *sinv;
    snn_bench_fp8_delayed dl; /* delayed scaling: histories and scales of the same slots */
} net;

/* The "amax" a current-scaling quantisation of slot k reads: this step's amax (current) or
 * the one that reproduces the history's scale (delayed, cuda_bench_impl.h). */
static const float *qscale_src(const net *n, size_t k) { return n->delayed ? n->dl.qamax + k : n->amax + k; }

#define NSLOTS(n) ((size_t)(3 * (n)->D + 1))

static snn_status build(net *n, snn_bench_alloc *a) {
    const int B = n->B, W = n->W, D = n->D, fp8 = n->fp8;
    const size_t es = snn_dtype_size(n->act), act_n = (size_t)B * W;
    n->L = (layer *)calloc((size_t)D, sizeof(layer));
    if (!n->L) return snn_error(SNN_E_NOMEM, "out of host memory");
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        L->in = W;
        L->out = l == D - 1 ? n->C : W;
        size_t nw = (size_t)L->in * L->out;
        BT(bench_alloc(a, nw * 4, 1, &L->w));
        BT(bench_alloc(a, nw * 4, 0, &L->gw));
        BT(bench_alloc(a, (size_t)L->out * 4, 1, &L->b));
        BT(bench_alloc(a, (size_t)L->out * 4, 0, &L->gb));
        if (fp8) {
            BT(bench_alloc(a, nw, 1, &L->w8));
            BT(bench_alloc(a, nw, 0, &L->w8t));
            if (n->block) {
                BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(1, L->out, L->in) * 4, 1, &L->sw));
                BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(1, L->in, L->out) * 4, 0, &L->swt));
            }
        } else if (n->act != SNN_F32) {
            BT(bench_alloc(a, nw * es, 1, &L->wk));
        }
        if (l < D - 1) {
            BT(bench_alloc(a, act_n * es, 1, &L->z));
            BT(bench_alloc(a, act_n * es, 1, &L->a));
            if (fp8) {
                BT(bench_alloc(a, act_n, 1, &L->a8));
                BT(bench_alloc(a, act_n, 0, &L->a8t));
                if (n->block) {
                    BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(0, B, W) * 4, 1, &L->sa));
                    BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(0, W, B) * 4, 0, &L->sat));
                }
            }
        }
    }
    BT(bench_alloc(a, act_n * 4, 1, &n->x32));
    BT(snn_cuda_upload(n->c, n->x32, n->d->x, act_n * 4));
    size_t gmax = (size_t)B * (W > n->C ? W : n->C);
    if (fp8) {
        BT(bench_alloc(a, act_n, 1, &n->x8));
        BT(bench_alloc(a, act_n, 0, &n->x8t));
        BT(bench_alloc(a, gmax, 0, &n->g8));
        BT(bench_alloc(a, gmax, 0, &n->g8t));
        if (n->block) {
            size_t gs = (size_t)B * (W > n->C ? W : n->C) / 128;
            BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(0, B, W) * 4, 1, &n->sx));
            BT(bench_alloc(a, snn_cuda_fp8_block_scale_count(0, W, B) * 4, 0, &n->sxt));
            BT(bench_alloc(a, gs * 4, 0, &n->sg));
            BT(bench_alloc(a, gs * 4, 0, &n->sgt));
        }
    } else if (n->act != SNN_F32) {
        BT(bench_alloc(a, act_n * es, 1, &n->xa));
    }
    BT(bench_alloc(a, gmax * es, 0, &n->g[0]));
    BT(bench_alloc(a, gmax * es, 0, &n->g[1]));
    BT(bench_alloc(a, (size_t)B * n->C * 4, 1, &n->logits));
    BT(bench_alloc(a, 4, 0, &n->loss));
    BT(bench_alloc(a, (size_t)B * 4, 0, &n->ce_work));
    BT(bench_alloc(a, (size_t)B * 4, 0, &n->labels));
    BT(snn_cuda_upload(n->c, n->labels, n->d->y, (size_t)B * 4));
    if (fp8 && !n->block) { /* per-tensor scaling state only where something is quantised */
        BT(bench_alloc(a, NSLOTS(n) * 4, 1, &n->amax));
        BT(bench_alloc(a, NSLOTS(n) * 4, 1, &n->sinv));
    }
    if (n->delayed)
        BT(snn_bench_delayed_alloc(a, &n->dl, (int)NSLOTS(n), 1 + 2 * D, n->dl.hlen, n->dl.margin, n->dl.most_recent));
    return SNN_OK;
}

/* The base state: weights from the host, working copies, first FP8 quantisation. */
static snn_status load(void *p) {
    net *n = (net *)p;
    if (n->fp8 && !n->block) BT(snn_cuda_memset(n->c, n->amax, 0, NSLOTS(n) * 4));
    if (n->delayed) BT(snn_bench_delayed_reset(n->c, &n->dl));
    for (int l = 0; l < n->D; l++) {
        layer *L = &n->L[l];
        size_t nw = (size_t)L->in * L->out;
        BT(snn_cuda_upload(n->c, L->w, n->d->weights[l], nw * 4));
        BT(snn_cuda_upload(n->c, L->b, n->d->biases[l], (size_t)L->out * 4));
        if (L->wk) BT(snn_cuda_convert(n->c, n->act, L->wk, SNN_F32, L->w, nw, NULL, 0));
        if (n->block) {
            BT(snn_cuda_quantize_fp8_block(n->c, SNN_F8E4M3, 1, n->pow2, SNN_F32, L->w, L->out, L->in, L->w8, L->sw,
                                           L->w8t, L->swt));
        } else if (n->fp8) {
            float *am = n->amax + 1 + n->D + l;
            BT(snn_cuda_amax(n->c, SNN_F32, L->w, nw, am));
            BT(snn_cuda_quantize_fp8(n->c, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out, L->in,
                                     qscale_src(n, 1 + n->D + l), n->sinv + 1 + n->D + l));
        }
    }
    return snn_cuda_synchronize(n->c);
}

static snn_status forward(net *n, int train) {
    snn_cuda *c = n->c;
    const int B = n->B, W = n->W, D = n->D, fp8 = n->fp8;
    const size_t act_n = (size_t)B * W;
    const void *X;
    const float *xs = NULL;
    if (n->block) { /* 1x128 vectors along W for this GEMM, along B (transposed) for wgrad */
        BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, SNN_F32, n->x32, B, W, n->x8, n->sx,
                                       train ? n->x8t : NULL, train ? n->sxt : NULL));
        X = n->x8;
        xs = n->sx;
    } else if (n->delayed) { /* scales from the histories; the input quantised, its amax recorded, in one pass */
        BT(snn_bench_delayed_update(c, &n->dl, n->amax));
        BT(snn_bench_quantize_scaled(c, SNN_F8E4M3, n->x8, SNN_F32, n->x32, act_n, n->dl.scale, n->sinv, n->amax));
        if (train) BT(snn_cuda_transpose_u8(c, n->x8t, n->x8, B, W));
        X = n->x8;
        xs = n->sinv;
    } else if (fp8) { /* the input is quantised every step, as an FP8 Linear does */
        /* training zeroes every slot first; inference needs fresh input and GELU-output slots */
        BT(snn_cuda_memset(c, n->amax, 0, (train ? NSLOTS(n) : (size_t)D) * 4));
        BT(snn_cuda_amax(c, SNN_F32, n->x32, act_n, n->amax));
        BT(snn_cuda_quantize_fp8(c, SNN_F8E4M3, n->x8, train ? n->x8t : NULL, SNN_F32, n->x32, B, W, n->amax,
                                 n->sinv));
        X = n->x8;
        xs = n->sinv;
    } else if (n->act != SNN_F32) { /* autocast's cast of the FP32 input */
        BT(snn_cuda_convert(c, n->act, n->xa, SNN_F32, n->x32, act_n, NULL, 0));
        X = n->xa;
    } else {
        X = n->x32;
    }
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        const int head = l == D - 1;
        snn_dtype ct = head ? SNN_F32 : n->act;
        void *C = head ? (void *)n->logits : L->z;
        if (n->block) {
            snn_cuda_gemm_desc d =
                snn_cuda_gd(0, 1, B, L->out, L->in, SNN_F8E4M3, SNN_F8E4M3, ct, L->in, L->in, L->out, 0);
            d.a_scale_mode = SNN_CUDA_SCALE_VEC128;
            d.b_scale_mode = SNN_CUDA_SCALE_BLK128;
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->w8, 0.0f, C, xs, L->sw, NULL, NULL));
        } else if (fp8) {
            snn_cuda_gemm_desc d =
                snn_cuda_gd(0, 1, B, L->out, L->in, SNN_F8E4M3, SNN_F8E4M3, ct, L->in, L->in, L->out, 1);
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->w8, 0.0f, C, xs, n->sinv + 1 + D + l, NULL, NULL));
        } else {
            snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, B, L->out, L->in, n->act, n->act, ct, L->in, L->in, L->out, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, X, L->wk ? L->wk : L->w, 0.0f, C, NULL, NULL, NULL, NULL));
        }
        if (head) break;
        /* bias + GELU in one pass; z overwrites the GEMM output in place */
        BT(gelu_fwd(c, n->act, L->z, L->b, B, L->out, train ? L->z : NULL, L->a,
                    fp8 && !n->block ? n->amax + 1 + l : NULL));
        if (n->block) {
            BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, n->act, L->a, B, L->out, L->a8, L->sa,
                                           train ? L->a8t : NULL, train ? L->sat : NULL));
            X = L->a8;
            xs = L->sa;
        } else if (fp8) {
            BT(snn_cuda_quantize_fp8(c, SNN_F8E4M3, L->a8, train ? L->a8t : NULL, n->act, L->a, B, L->out,
                                     qscale_src(n, 1 + l), n->sinv + 1 + l));
            X = L->a8;
            xs = n->sinv + 1 + l;
        } else {
            X = L->a;
        }
    }
    /* training adds the head bias inside the cross-entropy kernel */
    if (!train) BT(snn_cuda_bias_add(c, SNN_F32, n->logits, n->L[D - 1].b, B, n->C));
    return SNN_OK;
}

static snn_status train_forward(void *p) { return forward((net *)p, 1); }
static snn_status infer(void *p) { return forward((net *)p, 0); }

static snn_status train_loss(void *p) {
    net *n = (net *)p;
    return snn_cuda_ce_mean_t(n->c, 1, n->B, n->C, n->logits, n->L[n->D - 1].b, n->labels, n->loss, n->ce_work,
                              n->act, n->g[0], n->loss_scale);
}

static snn_status sgd(net *n, layer *L, int l, float lr) {
    snn_cuda_sgd h = {lr, 0.0f, 0.0f, 1.0f / n->loss_scale, 0};
    snn_dtype wt = n->act == SNN_F16 ? SNN_F16 : SNN_BF16;
    BT(snn_cuda_sgd_update(n->c, &h, (size_t)L->in * L->out, L->w, L->gw, NULL, wt, L->wk,
                           n->fp8 && !n->block ? n->amax + 1 + n->D + l : NULL, NULL));
    return snn_cuda_sgd_update(n->c, &h, (size_t)L->out, L->b, L->gb, NULL, wt, NULL, NULL, NULL);
}

static snn_status train_backward(void *p) {
    net *n = (net *)p;
    snn_cuda *c = n->c;
    const int B = n->B, D = n->D, fp8 = n->fp8;
    const snn_dtype at = n->act;
    int cur = 0;
    for (int l = D - 1; l >= 0; l--) {
        layer *L = &n->L[l];
        void *G = n->g[cur], *dA = n->g[cur ^ 1];
        float *gam = n->amax + 1 + 2 * D + l, *gsi = n->sinv + 1 + 2 * D + l;
        BT(snn_cuda_colsum(c, at, G, B, L->out, 0.0f, L->gb));
        if (n->block) { /* dY: 1x128 along out (dgrad) and, transposed, along B (wgrad) */
            BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 0, n->pow2, at, G, B, L->out, n->g8, n->sg, n->g8t,
                                           n->sgt));
            const uint8_t *XT = l == 0 ? n->x8t : n->L[l - 1].a8t;
            const float *xst = l == 0 ? n->sxt : n->L[l - 1].sat;
            snn_cuda_gemm_desc d =
                snn_cuda_gd(0, 1, L->out, L->in, B, SNN_F8E4M3, SNN_F8E4M3, SNN_F32, B, B, L->in, 0);
            d.a_scale_mode = d.b_scale_mode = SNN_CUDA_SCALE_VEC128;
            BT(snn_cuda_gemm(c, &d, 1.0f, n->g8t, XT, 0.0f, L->gw, n->sgt, xst, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 1, B, L->in, L->out, SNN_F8E4M3, SNN_F8E4M3, at, L->out, L->out, L->in, 0);
                d.a_scale_mode = SNN_CUDA_SCALE_VEC128;
                d.b_scale_mode = SNN_CUDA_SCALE_BLK128;
                BT(snn_cuda_gemm(c, &d, 1.0f, n->g8, L->w8t, 0.0f, dA, n->sg, L->swt, NULL, NULL));
            }
        } else if (fp8) {
            if (l == D - 1) BT(snn_cuda_amax(c, at, G, (size_t)B * L->out, gam));
            BT(snn_cuda_quantize_fp8(c, SNN_F8E5M2, n->g8, n->g8t, at, G, B, L->out,
                                     qscale_src(n, 1 + 2 * D + l), gsi));
            const uint8_t *XT = l == 0 ? n->x8t : n->L[l - 1].a8t;
            const float *xsc = n->sinv + (l == 0 ? 0 : l); /* slot of layer l's input */
            snn_cuda_gemm_desc d =
                snn_cuda_gd(0, 1, L->out, L->in, B, SNN_F8E5M2, SNN_F8E4M3, SNN_F32, B, B, L->in, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, n->g8t, XT, 0.0f, L->gw, gsi, xsc, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 1, B, L->in, L->out, SNN_F8E5M2, SNN_F8E4M3, at, L->out, L->out, L->in, 0);
                BT(snn_cuda_gemm(c, &d, 1.0f, n->g8, L->w8t, 0.0f, dA, gsi, n->sinv + 1 + D + l, NULL, NULL));
            }
        } else {
            const void *Xin = l == 0 ? (n->xa ? n->xa : (const void *)n->x32) : n->L[l - 1].a;
            snn_cuda_gemm_desc d = snn_cuda_gd(1, 0, L->out, L->in, B, at, at, SNN_F32, L->out, L->in, L->in, 0);
            BT(snn_cuda_gemm(c, &d, 1.0f, G, Xin, 0.0f, L->gw, NULL, NULL, NULL, NULL));
            if (l > 0) {
                d = snn_cuda_gd(0, 0, B, L->in, L->out, at, at, at, L->out, L->in, L->in, 0);
                BT(snn_cuda_gemm(c, &d, 1.0f, G, L->wk ? L->wk : L->w, 0.0f, dA, NULL, NULL, NULL, NULL));
            }
        }
        if (l > 0) { /* dL/dz of layer l-1, in place over dL/da */
            BT(gelu_bwd(c, at, dA, n->L[l - 1].z, dA, L->in, (size_t)B * L->in,
                        fp8 && !n->block ? n->amax + 1 + 2 * D + (l - 1) : NULL));
            cur ^= 1;
        }
        /* the SGD update after the layer's last reader of its weights (the dgrad GEMM) */
        BT(sgd(n, L, l, n->lr));
        if (n->block)
            BT(snn_cuda_quantize_fp8_block(c, SNN_F8E4M3, 1, n->pow2, SNN_F32, L->w, L->out, L->in, L->w8, L->sw,
                                           L->w8t, L->swt));
        else if (fp8)
            BT(snn_cuda_quantize_fp8(c, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out, L->in,
                                     qscale_src(n, 1 + D + l), n->sinv + 1 + D + l));
    }
    return SNN_OK;
}

static snn_status optimizer_lr0(void *p) {
    net *n = (net *)p;
    for (int l = n->D - 1; l >= 0; l--) BT(sgd(n, &n->L[l], l, 0.0f));
    return SNN_OK;
}

static snn_status update_max(void *p, float *out) {
    net *n = (net *)p;
    for (int l = 0; l < n->D; l++) { /* against the base state, staged through the gradient buffers */
        layer *L = &n->L[l];
        size_t nw = (size_t)L->in * L->out;
        BT(snn_bench_drift_max(n->c, L->w, L->gw, n->d->weights[l], nw, out));
        BT(snn_bench_drift_max(n->c, L->b, L->gb, n->d->biases[l], (size_t)L->out, out));
    }
    return SNN_OK;
}

extern "C" snn_status snn_cuda_bench_run_linear(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
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
    n.B = cfg->N;
    n.W = cfg->width;
    n.C = cfg->classes;
    n.D = cfg->depth;
    n.lr = cfg->lr;
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
        ops.loss = n.loss;
        ops.logits = n.logits;
        ops.n_logits = (size_t)n.B * n.C;
        st = snn_bench_protocol(c, cfg, &ops, &a, t0, free0, r);
    }
    r->layers = n.D;
    r->fp8_layers = n.fp8 ? n.D : 0;
    r->head_fp8 = n.fp8;
    /* a failed run may leave work queued: let it finish before the buffers go */
    cudaStreamSynchronize(snn_cuda_stream_of(c));
    snn_bench_alloc_free_all(&a);
    free(n.L);
    return st;
}
