/* Linear/GEMM crossover of SpikingJelly's precision guide ("When FP8 is faster") on one GPU:
 * a dense MLP (depth−1) × [Linear(W, W) → GELU(exact)] → Linear(W, C), cross-entropy, plain SGD
 * (lr 1e-3, no momentum) on FP32 master weights; input randn[B, W], fixed labels.
 *
 * Precisions: fp16 (static loss scale 1024, unscaled inside the SGD kernel), bf16, fp8 (BF16
 * for everything outside the GEMMs; per-tensor current scaling amax → scale → quantise; E4M3
 * activations and weights, E5M2 gradients; fast accumulation only in the forward GEMMs;
 * weights re-quantised with transpose right after each SGD update, whose kernel also gives
 * their amax). Bias + GELU forward and GELU backward are fused elementwise kernels written here
 * (they also produce the amax the next FP8 quantisation needs).
 *
 * A training step (forward, CE, backward, SGD) and an inference step (forward) are each one
 * CUDA graph. For each shape the three precisions are built side by side, then timed in
 * `--trials` trials with the precision order rotated left by the trial index (as the guide's
 * benchmark does); each trial's time is the median of `--repeats` groups of `--iters` graph
 * launches after `--warmup` launches. Prints one JSON object per (shape, trial, precision),
 * one per (shape, precision) with the medians over trials, and a markdown table (--md). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <time.h>

#include "bench_common.h"

enum { P_FP16, P_BF16, P_FP8, NP };
static const char *pname[] = {"fp16", "bf16", "fp8"};
static int g_sms = 132;

/* ---- fused elementwise kernels (exact GELU, erf form) ---- */
__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ __half st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* Block max then one atomic per block; values are >= 0, so the unsigned bit pattern orders
 * like the float (NaN was dropped by fmaxf). */
__device__ __forceinline__ void block_amax(float m, float *amax) {
    __shared__ float red[32];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0 && m > 0.0f)
            atomicMax(reinterpret_cast<unsigned int *>(amax), __float_as_uint(m));
    }
}

/* z = round(y + bias[col]) (saved for the backward when zsave != NULL), a = round(gelu(z)),
 * amax = max(amax, |a|). 8 elements (16 bytes) per step; cols % 8 == 0 keeps a pack in a row.
 * y and zsave may be the same buffer. */
template <typename T>
__global__ void gelu_fwd_kernel(const T *y, const float *__restrict__ bias, int cols, size_t n8,
                                T *zsave, T *__restrict__ a, float *amax) {
    float mx = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 yv = reinterpret_cast<const uint4 *>(y)[i], zv, av;
        const T *ye = reinterpret_cast<const T *>(&yv);
        T *ze = reinterpret_cast<T *>(&zv), *ae = reinterpret_cast<T *>(&av);
        const int j = (int)((i * 8) % (size_t)cols);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            ze[k] = st<T>(ld(ye[k]) + bias[j + k]);
            const float z = ld(ze[k]);
            ae[k] = st<T>(0.5f * z * (1.0f + erff(z * 0.70710678118654752f)));
            mx = fmaxf(mx, fabsf(ld(ae[k])));
        }
        if (zsave) reinterpret_cast<uint4 *>(zsave)[i] = zv;
        reinterpret_cast<uint4 *>(a)[i] = av;
    }
    if (amax) block_amax(mx, amax);
}

/* gz = ga · gelu'(z), gelu'(z) = Φ(z) + z·φ(z); amax = max(amax, |gz|). ga and gz may alias. */
template <typename T>
__global__ void gelu_bwd_kernel(const T *ga, const T *__restrict__ z, T *gz, size_t n8,
                                float *amax) {
    float mx = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8;
         i += (size_t)gridDim.x * blockDim.x) {
        uint4 gv = reinterpret_cast<const uint4 *>(ga)[i];
        const uint4 zv = reinterpret_cast<const uint4 *>(z)[i];
        T *ge = reinterpret_cast<T *>(&gv);
        const T *ze = reinterpret_cast<const T *>(&zv);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float x = ld(ze[k]);
            const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
            const float pdf = 0.39894228040143268f * __expf(-0.5f * x * x);
            ge[k] = st<T>(ld(ge[k]) * (cdf + x * pdf));
            mx = fmaxf(mx, fabsf(ld(ge[k])));
        }
        reinterpret_cast<uint4 *>(gz)[i] = gv;
    }
    if (amax) block_amax(mx, amax);
}

static unsigned ew_blocks(size_t n8) {
    size_t b = (n8 + 255) / 256, cap = (size_t)g_sms * 8;
    return (unsigned)(b < cap ? b : cap);
}

static void gelu_fwd(snn_dtype t, const void *y, const float *bias, int rows, int cols,
                     void *zsave, void *a, float *amax) {
    size_t n8 = (size_t)rows * cols / 8;
    if (t == SNN_F16)
        gelu_fwd_kernel<__half><<<ew_blocks(n8), 256, 0, stream()>>>(
            (const __half *)y, bias, cols, n8, (__half *)zsave, (__half *)a, amax);
    else
        gelu_fwd_kernel<__nv_bfloat16><<<ew_blocks(n8), 256, 0, stream()>>>(
            (const __nv_bfloat16 *)y, bias, cols, n8, (__nv_bfloat16 *)zsave,
            (__nv_bfloat16 *)a, amax);
    CU(cudaGetLastError());
}

static void gelu_bwd(snn_dtype t, const void *ga, const void *z, void *gz, size_t n, float *amax) {
    size_t n8 = n / 8;
    if (t == SNN_F16)
        gelu_bwd_kernel<__half><<<ew_blocks(n8), 256, 0, stream()>>>(
            (const __half *)ga, (const __half *)z, (__half *)gz, n8, amax);
    else
        gelu_bwd_kernel<__nv_bfloat16><<<ew_blocks(n8), 256, 0, stream()>>>(
            (const __nv_bfloat16 *)ga, (const __nv_bfloat16 *)z, (__nv_bfloat16 *)gz, n8, amax);
    CU(cudaGetLastError());
}

/* ---- the network ---- */
typedef struct {
    int in, out;
    float *w, *b, *gw, *gb; /* FP32 master weights and gradients */
    void *wk;               /* 16-bit working copy (fp16/bf16) */
    uint8_t *w8, *w8t;      /* FP8 weight [out][in] and transpose [in][out] */
    void *z, *a;            /* hidden layers: pre-activation (saved) and GELU output [B][out] */
    uint8_t *a8, *a8t;      /* FP8 GELU output and its transpose (next layer's input) */
} layer;

typedef struct {
    int prec, B, W, D, C;
    snn_dtype act; /* storage of activations and gradients outside the GEMMs */
    float lr, loss_scale;
    layer *L; /* D layers: 0..D-2 hidden (GELU), D-1 the head */
    float *x32;
    void *xa;
    uint8_t *x8, *x8t;
    float *logits, *loss, *ce_work;
    void *g[2]; /* gradient ping-pong [B][W] */
    uint8_t *g8, *g8t;
    int32_t *labels;
    /* amax/scale slots: [0] input, [1+l] GELU output of layer l, [1+D+l] weight l,
     * [1+2D+l] gradient at the output of layer l */
    float *amax, *sinv;
    size_t bytes;
    cudaGraphExec_t tg, ig;
    float loss_first;
    float *wsnap[2]; /* host copies of a weight sample before training */
} net;

#define SAMPLE 65536

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

static void build(net *n, uint64_t seed) {
    const int B = n->B, W = n->W, D = n->D;
    const int fp8 = n->prec == P_FP8;
    const size_t es = snn_dtype_size(n->act), act_n = (size_t)B * W;
    size_t b0 = g_alloc_bytes;
    n->L = (layer *)calloc((size_t)D, sizeof(layer));
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        L->in = W;
        L->out = l == D - 1 ? n->C : W;
        size_t nw = (size_t)L->in * L->out;
        L->w = (float *)dal(nw * 4);
        L->gw = (float *)dal(nw * 4);
        L->b = (float *)dal((size_t)L->out * 4);
        L->gb = (float *)dal((size_t)L->out * 4);
        /* PyTorch's Linear default: U(±1/sqrt(in)) for weight and bias; same seed for every
         * precision so all three start from the same model */
        float a = 1.0f / sqrtf((float)L->in);
        TRY(snn_cuda_fill_random(g_ctx, L->w, nw, seed + 100 + l, 0, -a, a));
        TRY(snn_cuda_fill_random(g_ctx, L->b, L->out, seed + 200 + l, 0, -a, a));
        if (fp8) {
            L->w8 = (uint8_t *)dal(nw);
            L->w8t = (uint8_t *)dal(nw);
        } else {
            L->wk = dal(nw * es);
            TRY(snn_cuda_convert(g_ctx, n->act, L->wk, SNN_F32, L->w, nw, NULL, 0));
        }
        if (l < D - 1) {
            L->z = dal(act_n * es);
            L->a = dal(act_n * es);
            if (fp8) {
                L->a8 = (uint8_t *)dal(act_n);
                L->a8t = (uint8_t *)dal(act_n);
            }
        }
    }
    n->x32 = (float *)dal(act_n * 4);
    TRY(snn_cuda_fill_random(g_ctx, n->x32, act_n, seed + 7, 1, 0.0f, 1.0f));
    if (fp8) {
        n->x8 = (uint8_t *)dal(act_n);
        n->x8t = (uint8_t *)dal(act_n);
        n->g8 = (uint8_t *)dal((size_t)B * (W > n->C ? W : n->C));
        n->g8t = (uint8_t *)dal((size_t)B * (W > n->C ? W : n->C));
    } else {
        n->xa = dal(act_n * es);
    }
    size_t gmax = (size_t)B * (W > n->C ? W : n->C);
    n->g[0] = dal(gmax * es);
    n->g[1] = dal(gmax * es);
    n->logits = (float *)dal((size_t)B * n->C * 4);
    n->loss = (float *)dal(4);
    n->ce_work = (float *)dal((size_t)B * 4);
    n->labels = (int32_t *)dal((size_t)B * 4);
    int32_t *lab = (int32_t *)malloc((size_t)B * 4);
    uint64_t s = seed * 2654435761u + 1;
    for (int b = 0; b < B; b++) { /* fixed pseudo-random targets in [0, C) */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        lab[b] = (int32_t)((s >> 33) % (uint64_t)n->C);
    }
    TRY(snn_cuda_upload(g_ctx, n->labels, lab, (size_t)B * 4));
    free(lab);
    size_t slots = (size_t)(3 * D + 1);
    n->amax = (float *)dal(slots * 4);
    n->sinv = (float *)dal(slots * 4);
    TRY(snn_cuda_memset(g_ctx, n->amax, 0, slots * 4));
    if (fp8) /* first quantisation of the weights (later ones follow each SGD update) */
        for (int l = 0; l < D; l++) {
            layer *L = &n->L[l];
            float *am = n->amax + 1 + D + l;
            TRY(snn_cuda_amax(g_ctx, SNN_F32, L->w, (size_t)L->in * L->out, am));
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out,
                                      L->in, am, n->sinv + 1 + D + l));
        }
    TRY(snn_cuda_synchronize(g_ctx));
    n->bytes = g_alloc_bytes - b0;
    for (int k = 0; k < 2; k++) {
        const layer *L = &n->L[k == 0 ? 0 : D - 1];
        n->wsnap[k] = (float *)malloc(SAMPLE * 4);
        TRY(snn_cuda_download(g_ctx, n->wsnap[k], L->w, SAMPLE * 4));
    }
}

static void forward(net *n, int train) {
    const int B = n->B, W = n->W, D = n->D, fp8 = n->prec == P_FP8;
    const size_t act_n = (size_t)B * W;
    const void *X;
    const float *xs = NULL;
    /* inference: fresh amax for the input and GELU outputs (training zeroes all slots) */
    if (fp8 && !train) TRY(snn_cuda_memset(g_ctx, n->amax, 0, (size_t)D * 4));
    if (fp8) { /* the input is quantised every step, as an FP8 Linear does */
        TRY(snn_cuda_amax(g_ctx, SNN_F32, n->x32, act_n, n->amax));
        TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, n->x8, train ? n->x8t : NULL, SNN_F32,
                                  n->x32, B, W, n->amax, n->sinv));
        X = n->x8;
        xs = n->sinv;
    } else { /* autocast's cast of the FP32 input */
        TRY(snn_cuda_convert(g_ctx, n->act, n->xa, SNN_F32, n->x32, act_n, NULL, 0));
        X = n->xa;
    }
    for (int l = 0; l < D; l++) {
        layer *L = &n->L[l];
        const int head = l == D - 1;
        snn_dtype ct = head ? SNN_F32 : n->act;
        void *C = head ? (void *)n->logits : L->z;
        if (fp8) {
            snn_cuda_gemm_desc d = gd(0, 1, B, L->out, L->in, SNN_F8E4M3, SNN_F8E4M3, ct, L->in,
                                      L->in, L->out, 1);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, X, L->w8, 0.0f, C, xs, n->sinv + 1 + D + l, NULL,
                              NULL));
        } else {
            snn_cuda_gemm_desc d = gd(0, 1, B, L->out, L->in, n->act, n->act, ct, L->in, L->in,
                                      L->out, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, X, L->wk, 0.0f, C, NULL, NULL, NULL, NULL));
        }
        if (head) break;
        /* bias + GELU in one pass; z overwrites the GEMM output in place */
        gelu_fwd(n->act, L->z, L->b, B, L->out, train ? L->z : NULL, L->a,
                 fp8 ? n->amax + 1 + l : NULL);
        if (fp8) {
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, L->a8, train ? L->a8t : NULL, n->act,
                                      L->a, B, L->out, n->amax + 1 + l, n->sinv + 1 + l));
            X = L->a8;
            xs = n->sinv + 1 + l;
        } else {
            X = L->a;
        }
    }
    /* training adds the head bias inside the cross-entropy kernel */
    if (!train) TRY(snn_cuda_bias_add(g_ctx, SNN_F32, n->logits, n->L[D - 1].b, B, n->C));
}

static void train_step(net *n) {
    const int B = n->B, D = n->D, fp8 = n->prec == P_FP8;
    const snn_dtype at = n->act;
    TRY(snn_cuda_memset(g_ctx, n->amax, 0, (size_t)(3 * D + 1) * 4));
    forward(n, 1);
    int cur = 0;
    TRY(snn_cuda_ce_mean_t(g_ctx, 1, B, n->C, n->logits, n->L[D - 1].b, n->labels, n->loss,
                           n->ce_work, at, n->g[cur], n->loss_scale));
    snn_cuda_sgd h = {n->lr, 0.0f, 0.0f, 1.0f / n->loss_scale, 0};
    for (int l = D - 1; l >= 0; l--) {
        layer *L = &n->L[l];
        void *G = n->g[cur], *dA = n->g[cur ^ 1];
        float *gam = n->amax + 1 + 2 * D + l, *gsi = n->sinv + 1 + 2 * D + l;
        TRY(snn_cuda_colsum(g_ctx, at, G, B, L->out, 0.0f, L->gb));
        if (fp8) {
            if (l == D - 1) TRY(snn_cuda_amax(g_ctx, at, G, (size_t)B * L->out, gam));
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E5M2, n->g8, n->g8t, at, G, B, L->out, gam,
                                      gsi));
            const uint8_t *XT = l == 0 ? n->x8t : n->L[l - 1].a8t;
            const float *xsc = n->sinv + (l == 0 ? 0 : l); /* slot of layer l's input */
            snn_cuda_gemm_desc d = gd(0, 1, L->out, L->in, B, SNN_F8E5M2, SNN_F8E4M3, SNN_F32, B,
                                      B, L->in, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->g8t, XT, 0.0f, L->gw, gsi, xsc, NULL, NULL));
            if (l > 0) {
                d = gd(0, 1, B, L->in, L->out, SNN_F8E5M2, SNN_F8E4M3, at, L->out, L->out, L->in, 0);
                TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, n->g8, L->w8t, 0.0f, dA, gsi,
                                  n->sinv + 1 + D + l, NULL, NULL));
            }
        } else {
            const void *Xin = l == 0 ? n->xa : n->L[l - 1].a;
            snn_cuda_gemm_desc d = gd(1, 0, L->out, L->in, B, at, at, SNN_F32, L->out, L->in,
                                      L->in, 0);
            TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, G, Xin, 0.0f, L->gw, NULL, NULL, NULL, NULL));
            if (l > 0) {
                d = gd(0, 0, B, L->in, L->out, at, at, at, L->out, L->in, L->in, 0);
                TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, G, L->wk, 0.0f, dA, NULL, NULL, NULL, NULL));
            }
        }
        if (l > 0) { /* dL/dz of layer l-1, in place over dL/da */
            gelu_bwd(at, dA, n->L[l - 1].z, dA, (size_t)B * L->in,
                     fp8 ? n->amax + 1 + 2 * D + (l - 1) : NULL);
            cur ^= 1;
        }
        /* the SGD update after the layer's last reader of its weights (the dgrad GEMM) */
        TRY(snn_cuda_sgd_update(g_ctx, &h, (size_t)L->in * L->out, L->w, L->gw, NULL, at,
                                fp8 ? NULL : L->wk, fp8 ? n->amax + 1 + D + l : NULL, NULL));
        TRY(snn_cuda_sgd_update(g_ctx, &h, (size_t)L->out, L->b, L->gb, NULL, at, NULL, NULL,
                                NULL));
        if (fp8)
            TRY(snn_cuda_quantize_fp8(g_ctx, SNN_F8E4M3, L->w8, L->w8t, SNN_F32, L->w, L->out,
                                      L->in, n->amax + 1 + D + l, n->sinv + 1 + D + l));
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

static void destroy(net *n) {
    for (int l = 0; l < n->D; l++) {
        layer *L = &n->L[l];
        void *p[] = {L->w, L->b, L->gw, L->gb, L->wk, L->w8, L->w8t, L->z, L->a, L->a8, L->a8t};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) snn_cuda_free(p[i]);
    }
    void *p[] = {n->x32, n->xa, n->x8, n->x8t, n->logits, n->loss, n->ce_work, n->g[0],
                 n->g[1], n->g8, n->g8t, n->labels, n->amax, n->sinv};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) snn_cuda_free(p[i]);
    if (n->tg) CU(cudaGraphExecDestroy(n->tg));
    if (n->ig) CU(cudaGraphExecDestroy(n->ig));
    free(n->wsnap[0]);
    free(n->wsnap[1]);
    free(n->L);
    g_alloc_bytes -= n->bytes;
}

/* max |w_now − w_before| over the sampled weights of the first and the last layer */
static double param_delta(net *n) {
    float *h = (float *)malloc(SAMPLE * 4);
    double m = 0;
    for (int k = 0; k < 2; k++) {
        TRY(snn_cuda_download(g_ctx, h, n->L[k == 0 ? 0 : n->D - 1].w, SAMPLE * 4));
        for (int i = 0; i < SAMPLE; i++) {
            double d = fabs((double)h[i] - n->wsnap[k][i]);
            if (!(d <= m)) m = d; /* a NaN propagates */
        }
    }
    free(h);
    return m;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef struct {
    int B, W;
    double guide[4]; /* train FP8/FP16, FP8/BF16, infer FP8/FP16, FP8/BF16 (RTX 5090) */
} shape;

static const shape k_shapes[] = {
    {4096, 2304, {0.553, 0.527, 0.915, 0.966}}, {4096, 2560, {0.720, 0.705, 1.117, 1.100}},
    {4096, 3072, {0.978, 1.026, 1.454, 1.629}}, {4096, 3200, {1.060, 1.067, 1.464, 1.614}},
    {3072, 4096, {1.390, 1.472, 1.513, 1.684}},
};

static const char *verdict(double a, double b) {
    if (a >= 1.05 && b >= 1.05) return "win";
    if (a >= 1.05 || b >= 1.05) return "mixed";
    return "no win";
}

int main(int argc, char **argv) {
    int D = 8, warm = 3, reps = 7, iters = 5, trials = 3, only = -1;
    float lr = 1e-3f;
    double time_limit = 1e9;
    const char *json = NULL, *md = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--depth")) D = atoi(v), i++;
        else if (!strcmp(a, "--shape")) only = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warm = atoi(v), i++;
        else if (!strcmp(a, "--repeats")) reps = atoi(v), i++;
        else if (!strcmp(a, "--iters")) iters = atoi(v), i++;
        else if (!strcmp(a, "--trials")) trials = atoi(v), i++;
        else if (!strcmp(a, "--lr")) lr = (float)atof(v), i++;
        else if (!strcmp(a, "--time-limit")) time_limit = atof(v), i++;
        else if (!strcmp(a, "--json")) json = v, i++;
        else if (!strcmp(a, "--md")) md = v, i++;
        else {
            fprintf(stderr, "usage: %s [--depth D] [--shape 0..4] [--trials N] [--warmup N] "
                            "[--repeats N] [--iters N] [--lr X] [--time-limit S] [--json FILE] "
                            "[--md FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (D < 2 || reps < 5 || trials < 1 || iters < 1 || warm < 1) {
        fprintf(stderr, "need depth >= 2, repeats >= 5, trials, iters, warmup >= 1\n");
        return 2;
    }
    const double t_start = now_s();
    TRY(snn_cuda_create(0, 0, &g_ctx));
    snn_cuda_set_gemm_autotune(g_ctx, 1);
    {
        char name[256];
        int ma, mi;
        TRY(snn_cuda_device_info(g_ctx, name, sizeof name, &ma, &mi, &g_sms));
    }
    FILE *jf = json ? fopen(json, "a") : NULL;
    if (json && !jf) {
        fprintf(stderr, "cannot open %s\n", json);
        return 1;
    }
    const int nshapes = (int)(sizeof k_shapes / sizeof k_shapes[0]);
    double res[5][NP][2]; /* median samples/s over trials: [shape][precision][train, infer] */
    double rr[5][4][2];   /* per-trial ratio min/max */
    int done[5] = {0}, ntr[5] = {0};
    for (int si = 0; si < nshapes; si++) {
        if (only >= 0 && si != only) continue;
        if (now_s() - t_start > time_limit) {
            fprintf(stderr, "time limit reached: shape %d skipped\n", si);
            continue;
        }
        const shape *sh = &k_shapes[si];
        net nets[NP];
        double tr_sps[NP][16], in_sps[NP][16];
        for (int p = 0; p < NP; p++) {
            net *n = &nets[p];
            memset(n, 0, sizeof *n);
            n->prec = p;
            n->act = p == P_FP16 ? SNN_F16 : SNN_BF16;
            n->B = sh->B;
            n->W = sh->W;
            n->C = sh->W;
            n->D = D;
            n->lr = lr;
            n->loss_scale = p == P_FP16 ? 1024.0f : 1.0f;
            build(n, 20260718);
            train_step(n); /* eager: cuBLASLt plans (autotuned) and module loading */
            TRY(snn_cuda_synchronize(g_ctx));
            TRY(snn_cuda_download(g_ctx, &n->loss_first, n->loss, 4));
            n->tg = capture(n, 1);
            forward(n, 0);
            TRY(snn_cuda_synchronize(g_ctx));
            n->ig = capture(n, 0);
        }
        int nt = 0;
        for (int t = 0; t < trials && t < 16; t++) {
            if (t > 0 && now_s() - t_start > time_limit) {
                fprintf(stderr, "time limit reached: %d trial(s) for shape %d\n", t, si);
                break;
            }
            for (int k = 0; k < NP; k++) {
                int p = (k + t) % NP; /* order rotated left by the trial index */
                net *n = &nets[p];
                double mn, mx, imn, imx;
                double tms = time_graph(n->tg, warm, reps, iters, &mn, &mx);
                double ims = time_graph(n->ig, warm, reps, iters, &imn, &imx);
                tr_sps[p][t] = n->B / (tms * 1e-3);
                in_sps[p][t] = n->B / (ims * 1e-3);
                float loss, lg[256];
                TRY(snn_cuda_download(g_ctx, &loss, n->loss, 4));
                TRY(snn_cuda_download(g_ctx, lg, n->logits, sizeof lg));
                int fin = 1;
                double cs = 0;
                for (int i = 0; i < 256; i++) fin &= isfinite(lg[i]) ? 1 : 0, cs += lg[i];
                double fl = 2.0 * n->B * (double)n->W * n->W * D;
                char buf[1536];
                snprintf(buf, sizeof buf,
                         "{\"bench\": \"linear_crossover\", \"precision\": \"%s\", \"batch\": %d, "
                         "\"width\": %d, \"depth\": %d, \"classes\": %d, \"trial\": %d, "
                         "\"order_position\": %d, \"train_ms\": %.4f, \"train_ms_min\": %.4f, "
                         "\"train_ms_max\": %.4f, \"train_samples_per_s\": %.1f, "
                         "\"infer_ms\": %.4f, \"infer_ms_min\": %.4f, \"infer_ms_max\": %.4f, "
                         "\"infer_samples_per_s\": %.1f, \"train_gemm_tflops\": %.1f, "
                         "\"infer_gemm_tflops\": %.1f, \"allocated_mib\": %.1f, "
                         "\"loss_first_step\": %.6g, \"loss_now\": %.6g, \"loss_finite\": %s, "
                         "\"param_update_max_abs\": %.4g, \"output_finite\": %s, "
                         "\"output_checksum\": %.6g, \"repeats\": %d, \"iters_per_repeat\": %d, "
                         "\"warmup\": %d, ",
                         pname[p], n->B, n->W, D, n->C, t, k, tms, mn, mx, tr_sps[p][t], ims, imn,
                         imx, in_sps[p][t], 3 * fl / (tms * 1e-3) / 1e12,
                         fl / (ims * 1e-3) / 1e12, n->bytes / 1048576.0, (double)n->loss_first,
                         (double)loss, isfinite(loss) && isfinite(n->loss_first) ? "true" : "false",
                         param_delta(n), fin ? "true" : "false", cs / 256, reps, iters, warm);
                printf("%s", buf);
                device_json(stdout);
                printf("}\n");
                fflush(stdout);
                if (jf) {
                    fprintf(jf, "%s", buf);
                    device_json(jf);
                    fprintf(jf, "}\n");
                    fflush(jf);
                }
            }
            nt = t + 1;
        }
        for (int p = 0; p < NP; p++) {
            double a[16], b[16];
            memcpy(a, tr_sps[p], sizeof(double) * nt);
            memcpy(b, in_sps[p], sizeof(double) * nt);
            res[si][p][0] = median(a, nt);
            res[si][p][1] = median(b, nt);
        }
        for (int q = 0; q < 4; q++) { /* per-trial ratio spread */
            rr[si][q][0] = 1e300;
            rr[si][q][1] = 0;
            for (int t = 0; t < nt; t++) {
                double num = q < 2 ? tr_sps[P_FP8][t] : in_sps[P_FP8][t];
                double den = q % 2 == 0 ? (q < 2 ? tr_sps[P_FP16][t] : in_sps[P_FP16][t])
                                        : (q < 2 ? tr_sps[P_BF16][t] : in_sps[P_BF16][t]);
                double r = num / den;
                if (r < rr[si][q][0]) rr[si][q][0] = r;
                if (r > rr[si][q][1]) rr[si][q][1] = r;
            }
        }
        double r[4] = {res[si][P_FP8][0] / res[si][P_FP16][0], res[si][P_FP8][0] / res[si][P_BF16][0],
                       res[si][P_FP8][1] / res[si][P_FP16][1], res[si][P_FP8][1] / res[si][P_BF16][1]};
        char buf[1536];
        snprintf(buf, sizeof buf,
                 "{\"bench\": \"linear_crossover_summary\", \"batch\": %d, \"width\": %d, "
                 "\"depth\": %d, \"trials\": %d, \"train_samples_per_s\": {\"fp16\": %.1f, "
                 "\"bf16\": %.1f, \"fp8\": %.1f}, \"infer_samples_per_s\": {\"fp16\": %.1f, "
                 "\"bf16\": %.1f, \"fp8\": %.1f}, \"train_fp8_over_fp16\": %.3f, "
                 "\"train_fp8_over_bf16\": %.3f, \"infer_fp8_over_fp16\": %.3f, "
                 "\"infer_fp8_over_bf16\": %.3f, \"trial_ratio_range\": [[%.3f, %.3f], "
                 "[%.3f, %.3f], [%.3f, %.3f], [%.3f, %.3f]], \"guide_rtx5090\": [%.3f, %.3f, "
                 "%.3f, %.3f], \"train_verdict\": \"%s\", \"infer_verdict\": \"%s\"}",
                 sh->B, sh->W, D, nt, res[si][0][0], res[si][1][0], res[si][2][0], res[si][0][1],
                 res[si][1][1], res[si][2][1], r[0], r[1], r[2], r[3], rr[si][0][0], rr[si][0][1],
                 rr[si][1][0], rr[si][1][1], rr[si][2][0], rr[si][2][1], rr[si][3][0],
                 rr[si][3][1], sh->guide[0], sh->guide[1], sh->guide[2], sh->guide[3],
                 verdict(r[0], r[1]), verdict(r[2], r[3]));
        printf("%s\n", buf);
        fflush(stdout);
        if (jf) {
            fprintf(jf, "%s\n", buf);
            fflush(jf);
        }
        done[si] = 1;
        ntr[si] = nt;
        for (int p = 0; p < NP; p++) destroy(&nets[p]);
    }
    if (jf) fclose(jf);
    /* markdown table */
    FILE *mf = md ? fopen(md, "w") : NULL;
    FILE *outs[2] = {stdout, mf};
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f) continue;
        fprintf(f, "| batch | width | train fp16 | train bf16 | train fp8 | infer fp16 | infer bf16 "
                   "| infer fp8 | train FP8/FP16 · FP8/BF16 | guide (RTX 5090) | infer FP8/FP16 · "
                   "FP8/BF16 | guide (RTX 5090) | ours: train / infer | trials |\n");
        fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int si = 0; si < nshapes; si++) {
            if (!done[si]) continue;
            const shape *sh = &k_shapes[si];
            double r[4] = {res[si][2][0] / res[si][0][0], res[si][2][0] / res[si][1][0],
                           res[si][2][1] / res[si][0][1], res[si][2][1] / res[si][1][1]};
            fprintf(f, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f× / %.3f× | "
                       "%.3f× / %.3f× | %.3f× / %.3f× | %.3f× / %.3f× | %s / %s | %d |\n",
                    sh->B, sh->W, res[si][0][0], res[si][1][0], res[si][2][0], res[si][0][1],
                    res[si][1][1], res[si][2][1], r[0], r[1], sh->guide[0], sh->guide[1], r[2],
                    r[3], sh->guide[2], sh->guide[3], verdict(r[0], r[1]), verdict(r[2], r[3]),
                    ntr[si]);
        }
    }
    if (mf) fclose(mf);
    fprintf(stderr, "linear_bench: %.1f s\n", now_s() - t_start);
    snn_cuda_destroy(g_ctx);
    return 0;
}
