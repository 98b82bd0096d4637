/* Shared helpers of the CUDA benchmarks: error exits, allocation accounting, event timing of a
 * CUDA graph, medians, big-square GEMM rates (the floor rate of each precision). */
#ifndef SNN_BENCH_CUDA_COMMON_H
#define SNN_BENCH_CUDA_COMMON_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/cuda.h"

#define TRY(x)                                                                                   \
    do {                                                                                         \
        snn_status s_ = (x);                                                                     \
        if (s_ != SNN_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, snn_last_error()); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)
#define CU(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,                    \
                    cudaGetErrorString(e_));                                                     \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static snn_cuda *g_ctx;
static size_t g_alloc_bytes;

static inline void *dal(size_t bytes) {
    void *p = NULL;
    TRY(snn_cuda_alloc(g_ctx, bytes, &p));
    g_alloc_bytes += bytes;
    return p;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline cudaStream_t stream(void) { return (cudaStream_t)snn_cuda_stream(g_ctx); }

/* Median milliseconds of one launch of `exec`, over `reps` timed groups of `iters` launches
 * after `warm` untimed launches; min and max of the groups too. */
static inline double time_graph(cudaGraphExec_t exec, int warm, int reps, int iters, double *mn,
                         double *mx) {
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int i = 0; i < warm; i++) CU(cudaGraphLaunch(exec, stream()));
    CU(cudaStreamSynchronize(stream()));
    double *v = (double *)malloc(sizeof(double) * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        CU(cudaEventRecord(e0, stream()));
        for (int i = 0; i < iters; i++) CU(cudaGraphLaunch(exec, stream()));
        CU(cudaEventRecord(e1, stream()));
        CU(cudaEventSynchronize(e1));
        float ms;
        CU(cudaEventElapsedTime(&ms, e0, e1));
        v[r] = ms / iters;
    }
    *mn = 1e300;
    *mx = 0;
    for (int r = 0; r < reps; r++) {
        if (v[r] < *mn) *mn = v[r];
        if (v[r] > *mx) *mx = v[r];
    }
    double m = median(v, reps);
    free(v);
    CU(cudaEventDestroy(e0));
    CU(cudaEventDestroy(e1));
    return m;
}

/* TFLOP/s of an n×n×n GEMM (TN layout, random operands) of the given types. */
static inline double gemm_rate(int n, snn_dtype ab, snn_dtype c, int fast_accum) {
    size_t es = snn_dtype_size(ab), nn = (size_t)n * n;
    float *tmp = (float *)dal(nn * 4);
    void *A = dal(nn * es), *B = dal(nn * es), *C = dal(nn * snn_dtype_size(c));
    float *sc = (float *)dal(8);
    float ones[2] = {1.0f, 1.0f};
    TRY(snn_cuda_upload(g_ctx, sc, ones, 8));
    TRY(snn_cuda_fill_random(g_ctx, tmp, nn, 11, 0, -1.0f, 1.0f));
    TRY(snn_cuda_convert(g_ctx, ab, A, SNN_F32, tmp, nn, NULL, SNN_CONVERT_SATURATE));
    TRY(snn_cuda_fill_random(g_ctx, tmp, nn, 12, 0, -1.0f, 1.0f));
    TRY(snn_cuda_convert(g_ctx, ab, B, SNN_F32, tmp, nn, NULL, SNN_CONVERT_SATURATE));
    snn_cuda_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.trans_a = 0;
    d.trans_b = 1;
    d.M = d.N = d.K = n;
    d.a_type = d.b_type = ab;
    d.c_type = c;
    d.lda = d.ldb = d.ldc = n;
    d.fast_accum = fast_accum;
    int fp8 = snn_dtype_size(ab) == 1;
    const float *s = fp8 ? sc : NULL;
    TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, A, B, 0.0f, C, s, s, NULL, NULL));
    TRY(snn_cuda_synchronize(g_ctx));
    cudaGraph_t gr;
    cudaGraphExec_t ex;
    CU(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
    TRY(snn_cuda_gemm(g_ctx, &d, 1.0f, A, B, 0.0f, C, s, s, NULL, NULL));
    CU(cudaStreamEndCapture(stream(), &gr));
    CU(cudaGraphInstantiate(&ex, gr, 0));
    double mn, mx;
    int iters = n >= 8192 && es == 4 ? 2 : 10;
    double ms = time_graph(ex, 3, 7, iters, &mn, &mx);
    CU(cudaGraphExecDestroy(ex));
    CU(cudaGraphDestroy(gr));
    snn_cuda_free(tmp);
    snn_cuda_free(A);
    snn_cuda_free(B);
    snn_cuda_free(C);
    snn_cuda_free(sc);
    g_alloc_bytes -= nn * 4 + nn * es * 2 + nn * snn_dtype_size(c) + 8;
    return 2.0 * n * (double)n * n / (ms * 1e-3) / 1e12;
}

/* Host pseudo-random numbers for the drivers' weights and inputs (splitmix64): uniform in
 * [lo, hi) or, with normal != 0, N(0, 1) by Box-Muller. */
static inline uint64_t host_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float *host_fill(size_t n, uint64_t seed, int normal, float lo, float hi) {
    float *v = (float *)malloc(n * sizeof(float));
    if (!v) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = ((host_rng_next(&s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        if (normal) {
            double u2 = ((host_rng_next(&s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
            v[i] = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * u2));
        } else {
            v[i] = (float)(lo + (hi - lo) * u);
        }
    }
    return v;
}

static inline void device_json(FILE *f) {
    char name[256];
    int ma, mi, sms;
    TRY(snn_cuda_device_info(g_ctx, name, sizeof name, &ma, &mi, &sms));
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    fprintf(f, "\"device\": \"%s\", \"cc\": \"%d.%d\", \"sms\": %d, \"cuda_runtime\": %d, "
               "\"cuda_driver\": %d",
            name, ma, mi, sms, rt, drv);
}

#endif
