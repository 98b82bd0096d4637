/* Neuron kernel benchmarks on one GPU.
 *  1. cudaMemcpy device-to-device bandwidth (bytes read + written), the ceiling.
 *  2. LIF (tau 2, Sigmoid) multi-step forward (training: writes s and h) + BPTT backward over
 *     T=16 × 2^20 neurons, per storage type; time, bytes moved, fraction of copy bandwidth.
 *     Four buffer sets are rotated so repeated runs do not hit the 60 MB L2.
 *  3. The Open Neuromorphic workload: Linear(n, n) + LIF(tau 5, ATan), batch 16, T=500, BF16,
 *     forward + backward of the output sum (weight and bias gradients; the input needs none),
 *     for n = 4096 and 16384, as one CUDA graph.
 * Prints one JSON object per measurement (--json appends them to a file). */
#include <stdint.h>

#include "bench_common.h"

static FILE *g_json;
static void emit(const char *s) {
    printf("%s\n", s);
    fflush(stdout);
    if (g_json) {
        fprintf(g_json, "%s\n", s);
        fflush(g_json);
    }
}

/* A plain 16-byte-per-thread grid-stride copy: the ceiling for our own kernels. */
__global__ void copy_kernel(uint4 *dst, const uint4 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* GB/s (bytes read + written) of cudaMemcpy device-to-device (*ms_memcpy) and of copy_kernel
 * (*ms_kernel) on 1 GiB, after a second of copies so the clocks have ramped up. */
static void copy_bandwidth(double *gbs_memcpy, double *gbs_kernel, double *ms_memcpy,
                           double *ms_kernel) {
    const size_t bytes = (size_t)1 << 30;
    void *a = dal(bytes), *b = dal(bytes);
    TRY(snn_cuda_memset(g_ctx, a, 1, bytes));
    int sms = 0;
    TRY(snn_cuda_device_info(g_ctx, NULL, 0, NULL, NULL, &sms));
    cudaGraphExec_t ex[2];
    for (int k = 0; k < 2; k++) {
        cudaGraph_t g;
        CU(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
        if (k == 0)
            CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream()));
        else
            copy_kernel<<<(unsigned)sms * 8, 512, 0, stream()>>>((uint4 *)b, (const uint4 *)a,
                                                                  bytes / 16);
        CU(cudaStreamEndCapture(stream(), &g));
        CU(cudaGraphInstantiate(&ex[k], g, 0));
        CU(cudaGraphDestroy(g));
    }
    double mn, mx;
    time_graph(ex[0], 400, 5, 1, &mn, &mx); /* warm-up: ~0.5 s of copies */
    *ms_memcpy = time_graph(ex[0], 3, 9, 5, &mn, &mx);
    *ms_kernel = time_graph(ex[1], 3, 9, 5, &mn, &mx);
    for (int k = 0; k < 2; k++) CU(cudaGraphExecDestroy(ex[k]));
    snn_cuda_free(a);
    snn_cuda_free(b);
    g_alloc_bytes = 0;
    *gbs_memcpy = 2.0 * bytes / (*ms_memcpy * 1e-3) / 1e9;
    *gbs_kernel = 2.0 * bytes / (*ms_kernel * 1e-3) / 1e9;
}

#define NSET 4
typedef struct { void *x, *s, *h, *gs, *gx; } nset;

static void lif_case(int T, size_t n, snn_dtype io, snn_dtype sp, double copy_gbs, int pack,
                     int prefetch) {
    TRY(snn_cuda_set_neuron_tuning(g_ctx, pack, prefetch));
    const size_t N = (size_t)T * n, es = snn_dtype_size(io), ss = snn_dtype_size(sp);
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    const float k = 0.5f;
    float *tmp = (float *)dal(N * 4);
    nset S[NSET];
    for (int i = 0; i < NSET; i++) {
        S[i].x = dal(N * es);
        S[i].s = dal(N * ss);
        S[i].h = dal(N * es);
        S[i].gs = dal(N * es);
        S[i].gx = dal(N * es);
        TRY(snn_cuda_fill_random(g_ctx, tmp, N, 100 + i, 0, -0.5f, 2.0f));
        TRY(snn_cuda_convert(g_ctx, io, S[i].x, SNN_F32, tmp, N, NULL, 0));
        TRY(snn_cuda_fill_random(g_ctx, tmp, N, 200 + i, 0, -1.0f, 1.0f));
        TRY(snn_cuda_convert(g_ctx, io, S[i].gs, SNN_F32, tmp, N, NULL, 0));
    }
    cudaGraphExec_t ex[3];
    for (int mode = 0; mode < 3; mode++) { /* 0 forward, 1 backward, 2 both */
        cudaGraph_t g;
        for (int i = 0; i < NSET; i++) { /* eager once: module loading */
            if (mode != 1)
                TRY(snn_cuda_neuron_forward(g_ctx, &o, k, T, n, io, sp, S[i].x, NULL, 0, NULL,
                                            S[i].s, S[i].h, NULL, NULL));
            if (mode != 0)
                TRY(snn_cuda_neuron_backward(g_ctx, &o, k, T, n, io, S[i].h, NULL, S[i].gs, NULL,
                                             NULL, S[i].gx, NULL, NULL, NULL, NULL));
        }
        TRY(snn_cuda_synchronize(g_ctx));
        CU(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < NSET; i++) {
            if (mode != 1)
                TRY(snn_cuda_neuron_forward(g_ctx, &o, k, T, n, io, sp, S[i].x, NULL, 0, NULL,
                                            S[i].s, S[i].h, NULL, NULL));
            if (mode != 0)
                TRY(snn_cuda_neuron_backward(g_ctx, &o, k, T, n, io, S[i].h, NULL, S[i].gs, NULL,
                                             NULL, S[i].gx, NULL, NULL, NULL, NULL));
        }
        CU(cudaStreamEndCapture(stream(), &g));
        CU(cudaGraphInstantiate(&ex[mode], g, 0));
        CU(cudaGraphDestroy(g));
    }
    double ms[3], mn, mx;
    for (int mode = 0; mode < 3; mode++) ms[mode] = time_graph(ex[mode], 3, 15, 5, &mn, &mx) / NSET;
    double bf = (double)N * (es + ss + es), bb = (double)N * 3 * es;
    double gbs[3] = {bf / (ms[0] * 1e-3) / 1e9, bb / (ms[1] * 1e-3) / 1e9,
                     (bf + bb) / (ms[2] * 1e-3) / 1e9};
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"bench\": \"lif_fwd_bwd\", \"T\": %d, \"neurons\": %zu, \"storage\": \"%s\", "
             "\"spikes\": \"%s\", \"pack_bytes\": %d, \"prefetch\": %d, \"fwd_ms\": %.5f, "
             "\"bwd_ms\": %.5f, \"fwd_bwd_ms\": %.5f, "
             "\"fwd_bytes\": %.0f, \"bwd_bytes\": %.0f, \"fwd_gbs\": %.1f, \"bwd_gbs\": %.1f, "
             "\"fwd_bwd_gbs\": %.1f, \"copy_gbs\": %.1f, \"fwd_fraction_of_copy\": %.3f, "
             "\"bwd_fraction_of_copy\": %.3f, \"fwd_bwd_fraction_of_copy\": %.3f}",
             T, n, snn_dtype_name(io), snn_dtype_name(sp), pack, prefetch, ms[0], ms[1], ms[2], bf, bb, gbs[0],
             gbs[1], gbs[2], copy_gbs, gbs[0] / copy_gbs, gbs[1] / copy_gbs, gbs[2] / copy_gbs);
    emit(buf);
    for (int mode = 0; mode < 3; mode++) CU(cudaGraphExecDestroy(ex[mode]));
    for (int i = 0; i < NSET; i++) {
        snn_cuda_free(S[i].x); snn_cuda_free(S[i].s); snn_cuda_free(S[i].h);
        snn_cuda_free(S[i].gs); snn_cuda_free(S[i].gx);
    }
    snn_cuda_free(tmp);
    g_alloc_bytes = 0;
    TRY(snn_cuda_set_neuron_tuning(g_ctx, 0, 0));
}

/* Linear(n,n) + LIF(tau 5, ATan), batch 16, T 500, BF16: forward + backward of sum(s). */
static void open_neuromorphic(int nn, double bf16_tflops) {
    const int T = 500, B = 16, M = T * B;
    const size_t xn = (size_t)M * nn, wn = (size_t)nn * nn;
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    o.surrogate = SNN_SG_ATAN;
    const float k = 1.0f / 5.0f;
    float *tmp = (float *)dal(xn > wn ? xn * 4 : wn * 4);
    void *x = dal(xn * 2), *w = dal(wn * 2), *y = dal(xn * 2), *s = dal(xn * 2), *h = dal(xn * 2);
    void *ones = dal(xn * 2), *gx = dal(xn * 2), *gw = dal(wn * 2);
    float *b = (float *)dal((size_t)nn * 4), *gb = (float *)dal((size_t)nn * 4);
    float *tsum = (float *)dal((size_t)B * nn * 4);
    float a = 1.0f / sqrtf((float)nn);
    TRY(snn_cuda_fill_random(g_ctx, tmp, xn, 31, 1, 0.0f, 1.0f));
    TRY(snn_cuda_convert(g_ctx, SNN_BF16, x, SNN_F32, tmp, xn, NULL, 0));
    TRY(snn_cuda_fill_random(g_ctx, tmp, wn, 32, 0, -a, a));
    TRY(snn_cuda_convert(g_ctx, SNN_BF16, w, SNN_F32, tmp, wn, NULL, 0));
    TRY(snn_cuda_fill_random(g_ctx, b, (size_t)nn, 33, 0, -a, a));
    TRY(snn_cuda_fill_random(g_ctx, tmp, xn, 34, 0, 1.0f, 1.0f)); /* the gradient of sum(): 1 */
    TRY(snn_cuda_convert(g_ctx, SNN_BF16, ones, SNN_F32, tmp, xn, NULL, 0));
    snn_cuda_gemm_desc fd, wd;
    memset(&fd, 0, sizeof fd);
    fd.trans_a = 0;
    fd.trans_b = 1;
    fd.M = M;
    fd.N = nn;
    fd.K = nn;
    fd.a_type = fd.b_type = fd.c_type = SNN_BF16;
    fd.lda = fd.ldb = fd.ldc = nn;
    wd = fd;
    wd.trans_a = 1;
    wd.trans_b = 0;
    wd.M = nn;
    wd.N = nn;
    wd.K = M;
    cudaGraphExec_t ex[2];
    for (int mode = 0; mode < 2; mode++) { /* 0 forward only, 1 forward + backward */
        for (int cap = 0; cap < 2; cap++) {
            cudaGraph_t g;
            if (cap) CU(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
            TRY(snn_cuda_gemm(g_ctx, &fd, 1.0f, x, w, 0.0f, y, NULL, NULL, NULL, NULL));
            TRY(snn_cuda_neuron_forward(g_ctx, &o, k, T, (size_t)B * nn, SNN_BF16, SNN_BF16, y, b,
                                        (size_t)nn, NULL, s, mode ? h : NULL, NULL, NULL));
            if (mode) {
                TRY(snn_cuda_neuron_backward(g_ctx, &o, k, T, (size_t)B * nn, SNN_BF16, h, NULL,
                                             ones, NULL, NULL, gx, NULL, NULL, tsum, NULL));
                TRY(snn_cuda_colsum(g_ctx, SNN_F32, tsum, B, nn, 0.0f, gb));
                TRY(snn_cuda_gemm(g_ctx, &wd, 1.0f, gx, x, 0.0f, gw, NULL, NULL, NULL, NULL));
            }
            if (cap) {
                CU(cudaStreamEndCapture(stream(), &g));
                CU(cudaGraphInstantiate(&ex[mode], g, 0));
                CU(cudaGraphDestroy(g));
            } else {
                TRY(snn_cuda_synchronize(g_ctx));
            }
        }
    }
    double mn, mx, mn2, mx2;
    double f_ms = time_graph(ex[0], 3, 9, 5, &mn, &mx);
    double fb_ms = time_graph(ex[1], 3, 9, 5, &mn2, &mx2);
    double flops = 2.0 * 2.0 * M * (double)nn * nn; /* forward GEMM + weight-gradient GEMM */
    double floor_ms = flops / (bf16_tflops * 1e12) * 1e3;
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{\"bench\": \"open_neuromorphic\", \"n\": %d, \"batch\": %d, \"T\": %d, "
             "\"dtype\": \"bf16\", \"neuron\": \"LIF tau 5 ATan\", \"fwd_ms\": %.4f, "
             "\"fwd_bwd_ms\": %.4f, \"fwd_bwd_ms_min\": %.4f, \"fwd_bwd_ms_max\": %.4f, "
             "\"gemm_flops\": %.4g, \"bf16_gemm_tflops\": %.1f, \"gemm_floor_ms\": %.4f, "
             "\"floor_fraction\": %.3f}",
             nn, B, T, f_ms, fb_ms, mn2, mx2, flops, bf16_tflops, floor_ms, floor_ms / fb_ms);
    emit(buf);
    CU(cudaGraphExecDestroy(ex[0]));
    CU(cudaGraphExecDestroy(ex[1]));
    void *p[] = {tmp, x, w, y, s, h, ones, gx, gw, b, gb, tsum};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) snn_cuda_free(p[i]);
    g_alloc_bytes = 0;
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int on = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--no-open-neuromorphic")) on = 0;
        else {
            fprintf(stderr, "usage: %s [--json FILE] [--no-open-neuromorphic]\n", argv[0]);
            return 2;
        }
    }
    TRY(snn_cuda_create(0, 0, &g_ctx));
    snn_cuda_set_gemm_autotune(g_ctx, 1);
    g_json = json ? fopen(json, "a") : NULL;
    double g1, g2, m1, m2;
    copy_bandwidth(&g1, &g2, &m1, &m2);
    double copy = g1 > g2 ? g1 : g2; /* the ceiling: the faster of the two */
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"bench\": \"copy\", \"bytes\": %zu, \"memcpy_ms\": %.4f, \"memcpy_gbs\": %.1f, "
             "\"kernel_ms\": %.4f, \"kernel_gbs\": %.1f, \"gbs_read_plus_write\": %.1f}",
             (size_t)1 << 30, m1, g1, m2, g2, copy);
    emit(buf);
    /* launch-shape sweep (pack bytes x prefetch; 0,0 = the automatic choice) */
    static const int tune[][2] = {{0, 0}, {16, 1}, {16, 2}, {8, 1}, {8, 2}};
    for (int i = 0; i < 5; i++)
        lif_case(16, (size_t)1 << 20, SNN_BF16, SNN_BF16, copy, tune[i][0], tune[i][1]);
    lif_case(16, (size_t)1 << 20, SNN_F32, SNN_F32, copy, 0, 0);
    lif_case(16, (size_t)1 << 20, SNN_F32, SNN_F32, copy, 8, 1);
    lif_case(16, (size_t)1 << 20, SNN_BF16, SNN_F8E4M3, copy, 0, 0);
    lif_case(16, (size_t)1 << 20, SNN_F16, SNN_F16, copy, 0, 0);
    lif_case(16, (size_t)1 << 22, SNN_BF16, SNN_BF16, copy, 0, 0);
    /* the neuron part of the Open Neuromorphic workload: T 500, batch 16 x n features */
    for (int i = 0; i < 5; i++) {
        lif_case(500, (size_t)16 * 4096, SNN_BF16, SNN_BF16, copy, tune[i][0], tune[i][1]);
        lif_case(500, (size_t)16 * 16384, SNN_BF16, SNN_BF16, copy, tune[i][0], tune[i][1]);
    }
    if (on) {
        double r = gemm_rate(8192, SNN_BF16, SNN_BF16, 0);
        snprintf(buf, sizeof buf, "{\"bench\": \"gemm_rate\", \"n\": 8192, \"dtype\": \"bf16\", "
                                  "\"tflops\": %.1f}",
                 r);
        emit(buf);
        open_neuromorphic(4096, r);
        open_neuromorphic(16384, r);
    }
    if (g_json) fclose(g_json);
    snn_cuda_destroy(g_ctx);
    return 0;
}
