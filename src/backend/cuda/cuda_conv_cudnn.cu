/* Conv2d through cuDNN's legacy convolution API (see cuda_conv_cudnn.h for the contract).
 * A plan fixes descriptors and algorithms at creation; the calls then only enqueue cuDNN
 * work and small epilogue kernels (bias, rounding, widening 16-bit outputs, bias gradient)
 * on the context's stream, with the caller's workspace. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_conv_cudnn.h"
#include "backend/cuda/cuda_internal.h"

/* ---- epilogue kernels (needed with and without cuDNN: snn_cudnn_round) ---- */

/* dst = round_to(TR, src) as FP32; TR = float copies. */
template <typename TR> __global__ void cd_round_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = Io<TR>::ld(Io<TR>::st(src[i]));
}

static snn_status launch_round(snn_cuda *c, snn_dtype t, float *dst, const float *src, size_t n) {
    if (!n) return SNN_OK;
    unsigned blocks = snn_grid(n, 256), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    if (blocks > cap) blocks = cap;
    cudaStream_t sm = snn_cuda_stream_of(c);
    if (t == SNN_BF16) cd_round_kernel<__nv_bfloat16><<<blocks, 256, 0, sm>>>(dst, src, n);
    else if (t == SNN_F16) cd_round_kernel<__half><<<blocks, 256, 0, sm>>>(dst, src, n);
    else cd_round_kernel<float><<<blocks, 256, 0, sm>>>(dst, src, n);
    SNN_CU_LAUNCHED("cudnn round");
    return SNN_OK;
}

extern "C" snn_status snn_cudnn_round(snn_cuda *c, snn_dtype t, float *dst, const float *src,
                                      size_t n) {
    if (!c || (n && (!dst || !src)))
        return snn_error(SNN_E_INVALID, "snn_cudnn_round: NULL context or tensor");
    if (t != SNN_F32 && t != SNN_BF16 && t != SNN_F16)
        return snn_error(SNN_E_INVALID, "snn_cudnn_round: type %s is not F32, BF16 or F16",
                         snn_cuda_dtype_name(t));
    return launch_round(c, t, dst, src, n);
}

#ifndef SNN_HAVE_CUDNN

static snn_status no_cudnn(void) {
    return snn_error(SNN_E_UNSUPPORTED, "built without cuDNN: the cuDNN convolution path is not "
                     "available (install cuDNN 9 next to the CUDA toolkit and reconfigure)");
}
extern "C" int snn_cudnn_built(void) { return 0; }
extern "C" snn_status snn_cudnn_create(snn_cuda *c, snn_cudnn **out) {
    if (out) *out = NULL;
    return no_cudnn();
}
extern "C" void snn_cudnn_destroy(snn_cudnn *h) { (void)h; }
extern "C" snn_status snn_cudnn_conv_create(snn_cudnn *h, const snn_cudnn_conv_desc *d,
                                            snn_cudnn_conv **out) {
    if (out) *out = NULL;
    return no_cudnn();
}
extern "C" void snn_cudnn_conv_destroy(snn_cudnn_conv *p) { (void)p; }
extern "C" size_t snn_cudnn_conv_work_bytes(const snn_cudnn_conv *p) { return 0; }
extern "C" snn_dtype snn_cudnn_conv_operand_type(const snn_cudnn_conv *p) { return SNN_F32; }
extern "C" const char *snn_cudnn_conv_describe(const snn_cudnn_conv *p) { return "built without cuDNN"; }
extern "C" snn_status snn_cudnn_conv_forward(snn_cudnn_conv *p, const void *x, const void *w,
                                             const float *bias, float *y, void *work) {
    return no_cudnn();
}
extern "C" snn_status snn_cudnn_conv_backward_data(snn_cudnn_conv *p, const void *w,
                                                   const void *dy, float *dx, void *work) {
    return no_cudnn();
}
extern "C" snn_status snn_cudnn_conv_backward_filter(snn_cudnn_conv *p, const void *x,
                                                     const void *dy, float *dw, float *db,
                                                     void *work) {
    return no_cudnn();
}

#else /* SNN_HAVE_CUDNN */

#include <cudnn.h>

#if CUDNN_MAJOR < 8
#error "the cuDNN convolution path needs cuDNN 8 or newer"
#endif

/* y[row][p] = round_to(TR, ld(src[row][p]) + bias[row % O]) over rows = B*O planes of P
 * pixels; one block per plane (the bias index is then one modulo per block). */
template <typename TS, typename TR>
__global__ void cd_fwd_epilogue(float *y, const TS *src, const float *bias, int O, int P) {
    const size_t row = blockIdx.x;
    const float b = bias ? bias[row % (size_t)O] : 0.0f;
    const TS *s = src + row * (size_t)P;
    float *d = y + row * (size_t)P;
    for (int p = threadIdx.x; p < P; p += blockDim.x) d[p] = Io<TR>::ld(Io<TR>::st(Io<TS>::ld(s[p]) + b));
}

/* dst[i] = ld(src[i]) (16-bit -> FP32, exact) or dst[i] += ld(src[i]) */
template <typename TS, bool ADD>
__global__ void cd_widen(float *dst, const TS *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = Io<TS>::ld(src[i]);
        dst[i] = ADD ? dst[i] + v : v;
    }
}

/* Bias gradient, pass 1: part[o][j] = sum over b in chunk j, p of dy[b][o][p] (FP32), one
 * block per (o, j); pass 2: db[o] += sum_j part[o][j] in j order. Fixed chunks and a fixed
 * reduction tree: the result does not depend on scheduling. */
#define CD_DB_THREADS 256
template <typename TS>
__global__ void cd_db_partial(float *part, const TS *dy, int B, int O, int P, int per_chunk) {
    const int o = blockIdx.x, j = blockIdx.y;
    const int b0 = j * per_chunk, b1 = min(B, b0 + per_chunk);
    float acc = 0.0f;
    for (int b = b0; b < b1; b++) {
        const TS *s = dy + ((size_t)b * O + o) * (size_t)P;
        for (int p = threadIdx.x; p < P; p += blockDim.x) acc += Io<TS>::ld(s[p]);
    }
    __shared__ float red[CD_DB_THREADS / 32];
    acc = snn_warp_sum(acc);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < CD_DB_THREADS / 32 ? red[threadIdx.x] : 0.0f;
        v = snn_warp_sum(v);
        if (threadIdx.x == 0) part[(size_t)o * gridDim.y + j] = v;
    }
}
__global__ void cd_db_final(float *db, const float *part, int O, int chunks) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= O) return;
    float s = 0.0f;
    for (int j = 0; j < chunks; j++) s += part[(size_t)o * chunks + j];
    db[o] += s;
}

/* ---- errors ---- */

static snn_status dnn_fail(cudnnStatus_t s, const char *what) {
    char detail[512] = "";
#if CUDNN_MAJOR >= 9
    cudnnGetLastErrorString(detail, sizeof detail);
#endif
    /* cuDNN 9 groups its codes by thousands: 2xxx bad parameter, 3xxx not supported,
     * 4xxx internal (allocation failures among them), 5xxx execution failed. */
    const int cat = (int)s / 1000;
    snn_status code = cat == 2 ? SNN_E_INVALID : SNN_E_UNSUPPORTED;
    if (s == CUDNN_STATUS_ALLOC_FAILED) code = SNN_E_NOMEM;
#if CUDNN_MAJOR >= 9
    if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = SNN_E_NOMEM;
#endif
    const char *hint = "";
#if CUDNN_MAJOR >= 9
    if (s == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
        hint = " (libcudnn_cnn / libcudnn_engines_* must sit next to libcudnn on the library "
               "path)";
#endif
    return snn_error(code, "cuDNN %s failed: %s%s%s%s%s", what, cudnnGetErrorString(s),
                     detail[0] ? " [" : "", detail, detail[0] ? "]" : "", hint);
}
#define DNN_TRY(call, what)                                                                      \
    do {                                                                                         \
        cudnnStatus_t dnn_s_ = (call);                                                           \
        if (dnn_s_ != CUDNN_STATUS_SUCCESS) return dnn_fail(dnn_s_, what);                       \
    } while (0)

/* ---- handle ---- */

struct snn_cudnn {
    snn_cuda *c;
    cudnnHandle_t h;
};

extern "C" int snn_cudnn_built(void) { return 1; }

extern "C" snn_status snn_cudnn_create(snn_cuda *c, snn_cudnn **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_cudnn_create: NULL output");
    *out = NULL;
    if (!c) return snn_error(SNN_E_INVALID, "snn_cudnn_create: NULL CUDA context");
    /* The library found at run time must be the major version the headers described. */
    size_t v = cudnnGetVersion();
    if (v / 10000 != CUDNN_MAJOR)
        return snn_error(SNN_E_UNSUPPORTED, "cuDNN %zu.%zu was loaded but snn was built against "
                         "cuDNN %d.%d: install the matching major version", v / 10000,
                         v / 100 % 100, CUDNN_MAJOR, CUDNN_MINOR);
    snn_cudnn *h = (snn_cudnn *)calloc(1, sizeof *h);
    if (!h) return snn_error(SNN_E_NOMEM, "out of memory");
    h->c = c;
    cudnnStatus_t s = cudnnCreate(&h->h);
    if (s != CUDNN_STATUS_SUCCESS) {
        free(h);
        return dnn_fail(s, "cudnnCreate");
    }
    s = cudnnSetStream(h->h, snn_cuda_stream_of(c));
    if (s != CUDNN_STATUS_SUCCESS) {
        cudnnDestroy(h->h);
        free(h);
        return dnn_fail(s, "cudnnSetStream");
    }
    *out = h;
    return SNN_OK;
}

extern "C" void snn_cudnn_destroy(snn_cudnn *h) {
    if (!h) return;
    cudnnDestroy(h->h);
    free(h);
}

/* ---- plan ---- */

enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2 };
static const char *const dir_name[3] = {"forward", "backward data", "backward filter"};

struct snn_cudnn_conv {
    snn_cudnn *h;
    snn_cudnn_conv_desc d;
    int Ho, Wo;
    snn_dtype op;              /* storage type of x, w, dy */
    cudnnMathType_t math;      /* the plan's math type */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd, dwd; /* dwd: the weight gradient's (FP32 unless STORE_16) */
    cudnnConvolutionDescriptor_t cd[3]; /* one per direction: each carries its math type */
    int algo[3];
    int fallback[3];            /* 1: chosen from the fixed list, not from cuDNN's ranking */
    size_t ws[3];               /* cuDNN workspace of each direction's algorithm */
    size_t ws_max, stage_off, part_off, work;
    int db_chunks, db_per_chunk;
    char text[400];
};

static size_t up256(size_t n) { return (n + 255) / 256 * 256; }

static cudnnDataType_t dnn_type(snn_dtype t) {
    return t == SNN_BF16 ? CUDNN_DATA_BFLOAT16 : t == SNN_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* FFT and Winograd transform the operands (rounding them) and so change the numerics the
 * contract promises; DIRECT is not implemented by cuDNN. */
static int algo_numerics_ok(int dir, int a) {
    switch (dir) {
    case DIR_FWD:
        return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
               a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
               a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
    case DIR_BWD_DATA: return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    default:
        return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
               a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    }
}

static const char *algo_name(int dir, int a) {
    static const char *const f[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                     "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const bd[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                     "WINOGRAD_NONFUSED"};
    static const char *const bf[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                     "WINOGRAD_NONFUSED", "FFT_TILING"};
    if (a < 0) return "?";
    if (dir == DIR_FWD) return a < 8 ? f[a] : "?";
    if (dir == DIR_BWD_DATA) return a < 6 ? bd[a] : "?";
    return a < 7 ? bf[a] : "?";
}

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op+conversion";
    case CUDNN_FMA_MATH: return "fma";
    default: return "?";
    }
}

/* A candidate from cuDNN's ranking (heuristic or timed), direction-independent. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
} cand;

#define CD_MAX_CANDS 16

/* Buffers for timing the candidates (tune only). */
typedef struct {
    void *x, *w, *y, *dx, *dw, *ws;
    size_t ws_bytes;
} tune_bufs;

static snn_status list_cands(snn_cudnn_conv *p, int dir, const tune_bufs *tb, cand *out, int *n) {
    cudnnHandle_t h = p->h->h;
    cudnnConvolutionDescriptor_t cd = p->cd[dir];
    int got = 0;
    *n = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CD_MAX_CANDS];
        if (tb)
            DNN_TRY(cudnnFindConvolutionForwardAlgorithmEx(h, p->xd, tb->x, p->wd, tb->w, cd, p->yd,
                                                           tb->y, CD_MAX_CANDS, &got, r, tb->ws,
                                                           tb->ws_bytes),
                    "cudnnFindConvolutionForwardAlgorithmEx");
        else
            DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, p->xd, p->wd, cd, p->yd, CD_MAX_CANDS,
                                                           &got, r),
                    "cudnnGetConvolutionForwardAlgorithm_v7");
        for (int i = 0; i < got; i++) out[i] = cand{(int)r[i].algo, r[i].status, r[i].determinism, r[i].mathType};
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CD_MAX_CANDS];
        if (tb)
            DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p->wd, tb->w, p->yd, tb->y, cd,
                                                                p->xd, tb->dx, CD_MAX_CANDS, &got,
                                                                r, tb->ws, tb->ws_bytes),
                    "cudnnFindConvolutionBackwardDataAlgorithmEx");
        else
            DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->wd, p->yd, cd, p->xd,
                                                                CD_MAX_CANDS, &got, r),
                    "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        for (int i = 0; i < got; i++) out[i] = cand{(int)r[i].algo, r[i].status, r[i].determinism, r[i].mathType};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CD_MAX_CANDS];
        if (tb)
            DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p->xd, tb->x, p->yd, tb->y, cd,
                                                                  p->dwd, tb->dw, CD_MAX_CANDS,
                                                                  &got, r, tb->ws, tb->ws_bytes),
                    "cudnnFindConvolutionBackwardFilterAlgorithmEx");
        else
            DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->xd, p->yd, cd, p->dwd,
                                                                  CD_MAX_CANDS, &got, r),
                    "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        for (int i = 0; i < got; i++) out[i] = cand{(int)r[i].algo, r[i].status, r[i].determinism, r[i].mathType};
    }
    *n = got < 0 ? 0 : got > CD_MAX_CANDS ? CD_MAX_CANDS : got;
    return SNN_OK;
}

static cudnnStatus_t ws_query(snn_cudnn_conv *p, int dir, int algo, size_t *bytes) {
    cudnnHandle_t h = p->h->h;
    *bytes = 0;
    if (dir == DIR_FWD)
        return cudnnGetConvolutionForwardWorkspaceSize(h, p->xd, p->wd, p->cd[dir], p->yd,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (dir == DIR_BWD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->wd, p->yd, p->cd[dir], p->xd,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p->xd, p->yd, p->cd[dir], p->dwd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* The math type a candidate runs with, or -1 to refuse it:
 *  - FP32 without TF32: the plan's FMA (cuDNN's ranking may report another type than the
 *    descriptor's; the descriptor decides what runs).
 *  - 16-bit operands stored 16-bit: tensor-op candidates only. A tensor-core MMA multiplies
 *    16-bit values exactly and accumulates in FP32 (the descriptors' compute type), so the
 *    output is one rounding of an FP32 sum, the contract. cuDNN's default-math kernels on
 *    16-bit data are not held to that: on an H200 with cuDNN 9 the default-math FP16
 *    backward-data ALGO_1 kernel (k 3, stride 1, pad 1) returned dx 1.44 ulp from the
 *    rounded FP32 sum, more than two FP32 summation orders can produce (they differ by
 *    ~1e-7 of the sum of |terms|): evidence of an intermediate 16-bit rounding (of partial
 *    sums or products) inside the kernel, although the compute type is CUDNN_DATA_FLOAT.
 *  - 16-bit values stored as FP32: the candidate's own (FP32 FMA or TF32: exact products of
 *    16-bit values either way); down-conversion of FP32 operands to 16 bits is refused. */
static int run_math(const snn_cudnn_conv *p, const cand *c) {
    if (p->math == CUDNN_FMA_MATH) return CUDNN_FMA_MATH;
    if (c->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return -1;
    if (p->op != SNN_F32 && c->math != CUDNN_TENSOR_OP_MATH) return -1;
    return (int)c->math;
}

static snn_status choose(snn_cudnn_conv *p, int dir, const tune_bufs *tb, size_t limit) {
    cand cs[CD_MAX_CANDS];
    int n = 0;
    DNN_TRY(cudnnSetConvolutionMathType(p->cd[dir], p->math), "cudnnSetConvolutionMathType");
    SNN_TRY(list_cands(p, dir, tb, cs, &n));
    char why[160] = "";
    for (int i = 0; i < n; i++) {
        const cand *c = &cs[i];
        if (c->status != CUDNN_STATUS_SUCCESS || !algo_numerics_ok(dir, c->algo) ||
            c->det != CUDNN_DETERMINISTIC)
            continue;
        int m = run_math(p, c);
        if (m < 0) continue;
        DNN_TRY(cudnnSetConvolutionMathType(p->cd[dir], (cudnnMathType_t)m),
                "cudnnSetConvolutionMathType");
        size_t bytes = 0;
        cudnnStatus_t s = ws_query(p, dir, c->algo, &bytes);
        if (s != CUDNN_STATUS_SUCCESS) continue;
        if (bytes > limit) {
            snprintf(why, sizeof why, " (%s needs %zu workspace bytes, the limit is %zu)",
                     algo_name(dir, c->algo), bytes, limit);
            continue;
        }
        p->algo[dir] = c->algo;
        p->ws[dir] = bytes;
        p->fallback[dir] = 0;
        return SNN_OK;
    }
    /* The ranking left nothing usable (it may omit or mark unsupported what would run, or
     * offer it only with down-conversion or, for 16-bit storage, only with default math):
     * try the allowed algorithms in a fixed order with the plan's own math type (tensor-op
     * for 16-bit compute). The description says "fallback" for such a direction. */
    static const int fallback[3][3] = {
        {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
         CUDNN_CONVOLUTION_FWD_ALGO_GEMM},
        {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, -1, -1},
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, -1, -1}};
    DNN_TRY(cudnnSetConvolutionMathType(p->cd[dir], p->math), "cudnnSetConvolutionMathType");
    for (int i = 0; i < 3 && fallback[dir][i] >= 0; i++) {
        const int a = fallback[dir][i];
        int nondet = 0; /* the ranking's word on determinism stands */
        for (int j = 0; j < n; j++)
            nondet |= cs[j].algo == a && cs[j].status == CUDNN_STATUS_SUCCESS &&
                      cs[j].det != CUDNN_DETERMINISTIC;
        if (nondet) continue;
        size_t bytes = 0;
        if (ws_query(p, dir, a, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
        p->algo[dir] = a;
        p->ws[dir] = bytes;
        p->fallback[dir] = 1;
        return SNN_OK;
    }
    return snn_error(SNN_E_UNSUPPORTED,
                     "cuDNN offers no deterministic non-FFT/non-Winograd %s algorithm for conv "
                     "B=%d C=%d %dx%d -> O=%d k=%d stride=%d pad=%d (%s, %d candidates)%s; use the "
                     "im2col path (snn_cuda_im2col) for this layer or raise workspace_limit",
                     dir_name[dir], p->d.B, p->d.C, p->d.H, p->d.W, p->d.O, p->d.k, p->d.stride,
                     p->d.pad, snn_cuda_dtype_name(p->d.compute), n, why);
}

extern "C" void snn_cudnn_conv_destroy(snn_cudnn_conv *p) {
    if (!p) return;
    for (int i = 0; i < 3; i++)
        if (p->cd[i]) cudnnDestroyConvolutionDescriptor(p->cd[i]);
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->dwd) cudnnDestroyFilterDescriptor(p->dwd);
    free(p);
}

static snn_status check_desc(const snn_cudnn_conv_desc *d) {
    if (d->B <= 0 || d->C <= 0 || d->H <= 0 || d->W <= 0 || d->O <= 0 || d->k <= 0 ||
        d->stride <= 0 || d->pad < 0)
        return snn_error(SNN_E_INVALID,
                         "cuDNN conv needs positive B, C, H, W, O, kernel and stride and padding "
                         ">= 0 (got B=%d C=%d H=%d W=%d O=%d kernel=%d stride=%d padding=%d)",
                         d->B, d->C, d->H, d->W, d->O, d->k, d->stride, d->pad);
    if (d->H + 2 * d->pad < d->k || d->W + 2 * d->pad < d->k)
        return snn_error(SNN_E_INVALID, "cuDNN conv: kernel %d with padding %d does not fit a "
                         "%dx%d image", d->k, d->pad, d->H, d->W);
    if (d->compute != SNN_F32 && d->compute != SNN_BF16 && d->compute != SNN_F16)
        return snn_error(SNN_E_INVALID, "cuDNN conv: compute type %s is not supported (F32, "
                         "BF16 or F16)", snn_cuda_dtype_name(d->compute));
    if (d->store != SNN_CUDNN_STORE_16 && d->store != SNN_CUDNN_STORE_F32)
        return snn_error(SNN_E_INVALID, "cuDNN conv: store %d is neither SNN_CUDNN_STORE_16 nor "
                         "SNN_CUDNN_STORE_F32", (int)d->store);
    const long long Ho = (d->H + 2LL * d->pad - d->k) / d->stride + 1;
    const long long Wo = (d->W + 2LL * d->pad - d->k) / d->stride + 1;
    const long long lim = 0x7fffffffLL;
    if ((long long)d->B * d->C * d->H * d->W > lim || (long long)d->B * d->O * Ho * Wo > lim ||
        (long long)d->O * d->C * d->k * d->k > lim)
        return snn_error(SNN_E_INVALID, "cuDNN conv: a tensor of B=%d C=%d %dx%d -> O=%d has "
                         "2^31 elements or more; split the batch", d->B, d->C, d->H, d->W, d->O);
    return SNN_OK;
}

static snn_status build_desc(snn_cudnn_conv *p) {
    const snn_cudnn_conv_desc *d = &p->d;
    const cudnnDataType_t t = dnn_type(p->op);
    /* dW comes out of cuDNN in the operand type: FP32 unless the operands are 16-bit. */
    DNN_TRY(cudnnCreateTensorDescriptor(&p->xd), "cudnnCreateTensorDescriptor");
    DNN_TRY(cudnnCreateTensorDescriptor(&p->yd), "cudnnCreateTensorDescriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&p->wd), "cudnnCreateFilterDescriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&p->dwd), "cudnnCreateFilterDescriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NCHW, t, d->B, d->C, d->H, d->W),
            "cudnnSetTensor4dDescriptor (x)");
    DNN_TRY(cudnnSetFilter4dDescriptor(p->wd, t, CUDNN_TENSOR_NCHW, d->O, d->C, d->k, d->k),
            "cudnnSetFilter4dDescriptor (w)");
    DNN_TRY(cudnnSetFilter4dDescriptor(p->dwd, t, CUDNN_TENSOR_NCHW, d->O, d->C, d->k, d->k),
            "cudnnSetFilter4dDescriptor (dw)");
    for (int i = 0; i < 3; i++) {
        DNN_TRY(cudnnCreateConvolutionDescriptor(&p->cd[i]), "cudnnCreateConvolutionDescriptor");
        /* CROSS_CORRELATION: PyTorch's (and the CPU module's) convolution, no kernel flip;
         * FP32 accumulation for every operand type. */
        DNN_TRY(cudnnSetConvolution2dDescriptor(p->cd[i], d->pad, d->pad, d->stride, d->stride, 1,
                                                1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "cudnnSetConvolution2dDescriptor");
        DNN_TRY(cudnnSetConvolutionMathType(p->cd[i], p->math), "cudnnSetConvolutionMathType");
    }
    int n = 0, c = 0, h = 0, w = 0;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(p->cd[0], p->xd, p->wd, &n, &c, &h, &w),
            "cudnnGetConvolution2dForwardOutputDim");
    if (n != d->B || c != d->O || h != p->Ho || w != p->Wo)
        return snn_error(SNN_E_STATE, "cuDNN conv: cuDNN's output shape %dx%dx%dx%d differs from "
                         "Conv2d's %dx%dx%dx%d", n, c, h, w, d->B, d->O, p->Ho, p->Wo);
    DNN_TRY(cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NCHW, t, d->B, d->O, p->Ho, p->Wo),
            "cudnnSetTensor4dDescriptor (y)");
    return SNN_OK;
}

static void free_tune(tune_bufs *t) {
    cudaFree(t->x);
    cudaFree(t->w);
    cudaFree(t->y);
    cudaFree(t->dx);
    cudaFree(t->dw);
    cudaFree(t->ws);
}

static snn_status alloc_tune(snn_cudnn_conv *p, tune_bufs *t, size_t limit) {
    const snn_cudnn_conv_desc *d = &p->d;
    const size_t es = snn_cuda_dsize(p->op);
    const size_t nx = (size_t)d->B * d->C * d->H * d->W, ny = (size_t)d->B * d->O * p->Ho * p->Wo;
    const size_t nw = (size_t)d->O * d->C * d->k * d->k;
    memset(t, 0, sizeof *t);
    /* timing needs a workspace as large as the largest candidate may take */
    t->ws_bytes = limit;
    SNN_CU_TRY(cudaMalloc(&t->x, nx * es));
    SNN_CU_TRY(cudaMalloc(&t->w, nw * es));
    SNN_CU_TRY(cudaMalloc(&t->y, ny * es));
    SNN_CU_TRY(cudaMalloc(&t->dx, nx * es));
    SNN_CU_TRY(cudaMalloc(&t->dw, nw * es));
    if (t->ws_bytes) SNN_CU_TRY(cudaMalloc(&t->ws, t->ws_bytes));
    /* Small finite values (zero bytes are 0.0 in every type): the timing does not depend on
     * them, and no NaN reaches a kernel. */
    cudaStream_t sm = snn_cuda_stream_of(p->h->c);
    SNN_CU_TRY(cudaMemsetAsync(t->x, 0, nx * es, sm));
    SNN_CU_TRY(cudaMemsetAsync(t->w, 0, nw * es, sm));
    SNN_CU_TRY(cudaMemsetAsync(t->y, 0, ny * es, sm));
    SNN_CU_TRY(cudaStreamSynchronize(sm));
    return SNN_OK;
}

extern "C" snn_status snn_cudnn_conv_create(snn_cudnn *h, const snn_cudnn_conv_desc *d,
                                            snn_cudnn_conv **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_cudnn_conv_create: NULL output");
    *out = NULL;
    if (!h || !d) return snn_error(SNN_E_INVALID, "snn_cudnn_conv_create: NULL handle or desc");
    SNN_TRY(check_desc(d));
    snn_cudnn_conv *p = (snn_cudnn_conv *)calloc(1, sizeof *p);
    if (!p) return snn_error(SNN_E_NOMEM, "out of memory");
    p->h = h;
    p->d = *d;
    p->Ho = (d->H + 2 * d->pad - d->k) / d->stride + 1;
    p->Wo = (d->W + 2 * d->pad - d->k) / d->stride + 1;
    const int is16 = d->compute != SNN_F32;
    p->op = is16 && d->store == SNN_CUDNN_STORE_16 ? d->compute : SNN_F32;
    /* F32: FMA (no TF32) unless allowed. 16-bit: tensor cores; for FP32-stored 16-bit values
     * that is TF32, exact on them. */
    p->math = !is16 && !d->allow_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    for (int i = 0; i < 3; i++) p->algo[i] = -1;
    const size_t limit = d->workspace_limit ? d->workspace_limit : ((size_t)256 << 20);
    snn_status st = build_desc(p);
    tune_bufs tb;
    memset(&tb, 0, sizeof tb);
    if (!st && d->tune) st = alloc_tune(p, &tb, limit);
    for (int dir = 0; dir < 3 && !st; dir++) st = choose(p, dir, d->tune ? &tb : NULL, limit);
    if (d->tune) {
        /* Find*Ex ran on the stream; finish before the buffers go */
        cudaStreamSynchronize(snn_cuda_stream_of(h->c));
        free_tune(&tb);
    }
    if (st) {
        snn_cudnn_conv_destroy(p);
        return st;
    }
    /* work = [cuDNN workspace][16-bit output staging][bias-gradient partials] */
    p->ws_max = p->ws[0] > p->ws[1] ? p->ws[0] : p->ws[1];
    if (p->ws[2] > p->ws_max) p->ws_max = p->ws[2];
    size_t stage = 0;
    if (p->op != SNN_F32) {
        size_t nx = (size_t)d->B * d->C * d->H * d->W, ny = (size_t)d->B * d->O * p->Ho * p->Wo;
        size_t nw = (size_t)d->O * d->C * d->k * d->k, m = nx > ny ? nx : ny;
        stage = (m > nw ? m : nw) * snn_cuda_dsize(p->op);
    }
    /* bias gradient: about 4 blocks per SM in total, chunks of whole samples */
    int want = (snn_cuda_sm_count(h->c) * 4 + d->O - 1) / d->O;
    if (want < 1) want = 1;
    if (want > d->B) want = d->B;
    p->db_per_chunk = (d->B + want - 1) / want;
    p->db_chunks = (d->B + p->db_per_chunk - 1) / p->db_per_chunk;
    p->stage_off = up256(p->ws_max);
    p->part_off = p->stage_off + up256(stage);
    p->work = p->part_off + up256((size_t)d->O * p->db_chunks * sizeof(float));
    /* what runs, read back from the descriptors: algorithm, math type, accumulation type */
    cudnnMathType_t mt[3];
    const char *acc = "f32";
    for (int i = 0; i < 3; i++) {
        cudnnGetConvolutionMathType(p->cd[i], &mt[i]);
        int ph, pw, sh, sw, dh, dw;
        cudnnConvolutionMode_t mode;
        cudnnDataType_t ct = CUDNN_DATA_FLOAT;
        cudnnGetConvolution2dDescriptor(p->cd[i], &ph, &pw, &sh, &sw, &dh, &dw, &mode, &ct);
        if (ct != CUDNN_DATA_FLOAT) acc = "NOT f32";
    }
    snprintf(p->text, sizeof p->text,
             "fwd %s/%s%s ws %zu B; bwd-data %s/%s%s ws %zu B; bwd-filter %s/%s%s ws %zu B; "
             "operands %s, accumulation %s%s; work %zu B",
             algo_name(0, p->algo[0]), math_name(mt[0]), p->fallback[0] ? " (fallback)" : "",
             p->ws[0], algo_name(1, p->algo[1]), math_name(mt[1]),
             p->fallback[1] ? " (fallback)" : "", p->ws[1], algo_name(2, p->algo[2]),
             math_name(mt[2]), p->fallback[2] ? " (fallback)" : "", p->ws[2],
             snn_cuda_dtype_name(p->op), acc, d->tune ? ", timed" : ", heuristic", p->work);
    *out = p;
    return SNN_OK;
}

extern "C" size_t snn_cudnn_conv_work_bytes(const snn_cudnn_conv *p) { return p ? p->work : 0; }
extern "C" snn_dtype snn_cudnn_conv_operand_type(const snn_cudnn_conv *p) { return p ? p->op : SNN_F32; }
extern "C" const char *snn_cudnn_conv_describe(const snn_cudnn_conv *p) { return p ? p->text : "(none)"; }

/* ---- execution ---- */

static snn_status check_call(const snn_cudnn_conv *p, const char *what, const void *a,
                             const void *b, const void *out, const void *work) {
    if (!p) return snn_error(SNN_E_INVALID, "%s: NULL plan", what);
    if (!a || !b || !out)
        return snn_error(SNN_E_INVALID, "%s: NULL tensor", what);
    if (p->work && !work)
        return snn_error(SNN_E_INVALID, "%s: the plan needs %zu bytes of work (got NULL)", what,
                         p->work);
    if (!snn_aligned(work, 16))
        return snn_error(SNN_E_INVALID, "%s: work must be 16-byte aligned", what);
    return SNN_OK;
}

static unsigned elem_grid(snn_cuda *c, size_t n) {
    unsigned blocks = snn_grid(n, 256), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    return blocks < cap ? blocks : cap;
}

extern "C" snn_status snn_cudnn_conv_forward(snn_cudnn_conv *p, const void *x, const void *w,
                                             const float *bias, float *y, void *work) {
    SNN_TRY(check_call(p, "snn_cudnn_conv_forward", x, w, y, work));
    snn_cuda *c = p->h->c;
    cudaStream_t sm = snn_cuda_stream_of(c);
    const float one = 1.0f, zero = 0.0f;
    void *out = p->op == SNN_F32 ? (void *)y : (char *)work + p->stage_off;
    DNN_TRY(cudnnConvolutionForward(p->h->h, &one, p->xd, x, p->wd, w, p->cd[DIR_FWD],
                                    (cudnnConvolutionFwdAlgo_t)p->algo[DIR_FWD], work,
                                    p->ws[DIR_FWD], &zero, p->yd, out),
            "cudnnConvolutionForward");
    const int P = p->Ho * p->Wo;
    const unsigned rows = (unsigned)((size_t)p->d.B * p->d.O);
    const unsigned thr = P >= 256 ? 256 : P >= 128 ? 128 : 64;
    if (p->d.compute == SNN_F32) {
        if (!bias) return SNN_OK;
        cd_fwd_epilogue<float, float><<<rows, thr, 0, sm>>>(y, y, bias, p->d.O, P);
    } else if (p->op == SNN_F32) { /* FP32-stored 16-bit: add bias, round once */
        if (p->d.compute == SNN_BF16)
            cd_fwd_epilogue<float, __nv_bfloat16><<<rows, thr, 0, sm>>>(y, y, bias, p->d.O, P);
        else
            cd_fwd_epilogue<float, __half><<<rows, thr, 0, sm>>>(y, y, bias, p->d.O, P);
    } else if (p->op == SNN_BF16) {
        cd_fwd_epilogue<__nv_bfloat16, __nv_bfloat16><<<rows, thr, 0, sm>>>(
            y, (const __nv_bfloat16 *)out, bias, p->d.O, P);
    } else {
        cd_fwd_epilogue<__half, __half><<<rows, thr, 0, sm>>>(y, (const __half *)out, bias,
                                                              p->d.O, P);
    }
    SNN_CU_LAUNCHED("cudnn conv forward epilogue");
    return SNN_OK;
}

extern "C" snn_status snn_cudnn_conv_backward_data(snn_cudnn_conv *p, const void *w,
                                                   const void *dy, float *dx, void *work) {
    SNN_TRY(check_call(p, "snn_cudnn_conv_backward_data", w, dy, dx, work));
    snn_cuda *c = p->h->c;
    cudaStream_t sm = snn_cuda_stream_of(c);
    const float one = 1.0f, zero = 0.0f;
    void *out = p->op == SNN_F32 ? (void *)dx : (char *)work + p->stage_off;
    DNN_TRY(cudnnConvolutionBackwardData(p->h->h, &one, p->wd, w, p->yd, dy, p->cd[DIR_BWD_DATA],
                                         (cudnnConvolutionBwdDataAlgo_t)p->algo[DIR_BWD_DATA],
                                         work, p->ws[DIR_BWD_DATA], &zero, p->xd, out),
            "cudnnConvolutionBackwardData");
    const size_t n = (size_t)p->d.B * p->d.C * p->d.H * p->d.W;
    if (p->d.compute == SNN_F32) return SNN_OK;
    if (p->op == SNN_F32) return launch_round(c, p->d.compute, dx, dx, n);
    if (p->op == SNN_BF16)
        cd_widen<__nv_bfloat16, false><<<elem_grid(c, n), 256, 0, sm>>>(dx, (const __nv_bfloat16 *)out, n);
    else
        cd_widen<__half, false><<<elem_grid(c, n), 256, 0, sm>>>(dx, (const __half *)out, n);
    SNN_CU_LAUNCHED("cudnn conv backward data epilogue");
    return SNN_OK;
}

extern "C" snn_status snn_cudnn_conv_backward_filter(snn_cudnn_conv *p, const void *x,
                                                     const void *dy, float *dw, float *db,
                                                     void *work) {
    SNN_TRY(check_call(p, "snn_cudnn_conv_backward_filter", x, dy, dw, work));
    snn_cuda *c = p->h->c;
    cudaStream_t sm = snn_cuda_stream_of(c);
    const float one = 1.0f, zero = 0.0f;
    const size_t nw = (size_t)p->d.O * p->d.C * p->d.k * p->d.k;
    /* FP32 dW: cuDNN accumulates into it (beta = 1). 16-bit dW: into the staging area, then
     * widened and added. */
    void *out = p->op == SNN_F32 ? (void *)dw : (char *)work + p->stage_off;
    DNN_TRY(cudnnConvolutionBackwardFilter(p->h->h, &one, p->xd, x, p->yd, dy,
                                           p->cd[DIR_BWD_FILTER],
                                           (cudnnConvolutionBwdFilterAlgo_t)p->algo[DIR_BWD_FILTER],
                                           work, p->ws[DIR_BWD_FILTER],
                                           p->op == SNN_F32 ? &one : &zero, p->dwd, out),
            "cudnnConvolutionBackwardFilter");
    if (p->op == SNN_BF16)
        cd_widen<__nv_bfloat16, true><<<elem_grid(c, nw), 256, 0, sm>>>(dw, (const __nv_bfloat16 *)out, nw);
    else if (p->op == SNN_F16)
        cd_widen<__half, true><<<elem_grid(c, nw), 256, 0, sm>>>(dw, (const __half *)out, nw);
    if (p->op != SNN_F32) SNN_CU_LAUNCHED("cudnn conv backward filter epilogue");
    if (!db) return SNN_OK;
    float *part = (float *)((char *)work + p->part_off);
    const int P = p->Ho * p->Wo;
    dim3 grid((unsigned)p->d.O, (unsigned)p->db_chunks);
    if (p->op == SNN_BF16)
        cd_db_partial<__nv_bfloat16><<<grid, CD_DB_THREADS, 0, sm>>>(
            part, (const __nv_bfloat16 *)dy, p->d.B, p->d.O, P, p->db_per_chunk);
    else if (p->op == SNN_F16)
        cd_db_partial<__half><<<grid, CD_DB_THREADS, 0, sm>>>(part, (const __half *)dy, p->d.B,
                                                              p->d.O, P, p->db_per_chunk);
    else
        cd_db_partial<float><<<grid, CD_DB_THREADS, 0, sm>>>(part, (const float *)dy, p->d.B,
                                                             p->d.O, P, p->db_per_chunk);
    SNN_CU_LAUNCHED("cudnn conv bias gradient");
    cd_db_final<<<(p->d.O + 127) / 128, 128, 0, sm>>>(db, part, p->d.O, p->db_chunks);
    SNN_CU_LAUNCHED("cudnn conv bias gradient (final)");
    return SNN_OK;
}

#endif /* SNN_HAVE_CUDNN */
