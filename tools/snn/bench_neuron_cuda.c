/* snn bench neuron --device cuda: the fused neuron kernels of the CUDA backend
 * (snn_cuda_neuron_forward/backward) in a chosen storage type, timed with device events, and
 * the copy bandwidth of the same GPU (cudaMemcpy device to device, read + write) as the
 * reference. Bytes counted like the CPU path, with the storage type's size e:
 *   forward reads x, writes s and h (3e per element); backward reads h and gs, writes gx (3e).
 * Mixed precision (--neuron-storage S, snn_cuda_neuron_forward_mp in snn/cuda.h): x and h in S (e bytes), spikes, gs
 * and gx FP32: forward 2e + 4 bytes per element, backward e + 8. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_neuron_cuda.h"

#ifndef SNN_HAVE_CUDA

double bench_neuron_cuda_copy_gbs(size_t bytes, int repeats) {
    (void)bytes;
    (void)repeats;
    return 0;
}
int bench_neuron_cuda_run(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype io, int warmup,
                          int repeats, uint64_t seed, double *fwd, double *bwd, int *ok_fwd, int *ok_bwd) {
    (void)o; (void)k; (void)T; (void)N; (void)io; (void)warmup; (void)repeats; (void)seed;
    (void)fwd; (void)bwd; (void)ok_fwd; (void)ok_bwd;
    return -1;
}
int bench_neuron_cuda_run_mp(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype S, snn_dtype F,
                             snn_dtype B, int warmup, int repeats, uint64_t seed, double *fwd, double *bwd,
                             int *ok_fwd, int *ok_bwd) {
    (void)o; (void)k; (void)T; (void)N; (void)S; (void)F; (void)B; (void)warmup; (void)repeats; (void)seed;
    (void)fwd; (void)bwd; (void)ok_fwd; (void)ok_bwd;
    return -1;
}

#else

#include <cuda_runtime.h>

#include "snn/cuda.h" /* the fused and the mixed-precision neuron kernels */

static snn_cuda *ctx(void) { return bench_cuda_context(); }

static void *dmalloc(size_t bytes) {
    void *p = NULL;
    if (snn_cuda_alloc(ctx(), bytes, &p) != SNN_OK) die_status(SNN_E_NOMEM, "bench neuron: device memory");
    return p;
}

/* Milliseconds of one enqueue function, timed with events on the context's stream. */
typedef snn_status (*enqueue_fn)(void *arg);
static double timed_ms(enqueue_fn f, void *arg) {
    cudaStream_t st = (cudaStream_t)snn_cuda_stream(ctx());
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, st);
    snn_status s = f(arg);
    cudaEventRecord(b, st);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (s != SNN_OK) die_status(s, "bench neuron");
    return ms;
}

/* warmup untimed calls, then `repeats` timed ones (seconds per call), forward then backward */
static void time_fwd_bwd(enqueue_fn f, enqueue_fn b, void *arg, int warmup, int repeats, double *fwd, double *bwd) {
    for (int r = -warmup; r < repeats; r++) {
        double ms = timed_ms(f, arg);
        if (r >= 0) fwd[r] = ms * 1e-3;
    }
    for (int r = -warmup; r < repeats; r++) {
        double ms = timed_ms(b, arg);
        if (r >= 0) bwd[r] = ms * 1e-3;
    }
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_arg;
static snn_status do_copy(void *p) {
    copy_arg *c = p;
    return cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice,
                           (cudaStream_t)snn_cuda_stream(ctx())) == cudaSuccess
               ? SNN_OK
               : SNN_E_STATE;
}

double bench_neuron_cuda_copy_gbs(size_t bytes, int repeats) {
    copy_arg c = {dmalloc(bytes), dmalloc(bytes), bytes};
    snn_cuda_memset(ctx(), c.dst, 1, bytes);
    snn_cuda_memset(ctx(), (void *)c.src, 2, bytes);
    double *t = malloc(sizeof(double) * (size_t)repeats);
    if (!t) die_status(SNN_E_NOMEM, "bench neuron");
    timed_ms(do_copy, &c);
    for (int r = 0; r < repeats; r++) t[r] = timed_ms(do_copy, &c);
    double med = bench_percentile(t, repeats, .5);
    free(t);
    snn_cuda_free(c.dst);
    snn_cuda_free((void *)c.src);
    return 2.0 * (double)bytes / (med * 1e-3) / 1e9;
}

typedef struct {
    const snn_neuron_opts *o;
    float k;
    int T;
    size_t N;
    snn_dtype io;
    void *x, *s, *h, *gs, *gx;
} nrn_arg;
static snn_status do_fwd(void *p) {
    nrn_arg *a = p;
    return snn_cuda_neuron_forward(ctx(), a->o, a->k, a->T, a->N, a->io, a->io, a->x, NULL, 0, NULL,
                                   a->s, a->h, NULL, NULL);
}
static snn_status do_bwd(void *p) {
    nrn_arg *a = p;
    return snn_cuda_neuron_backward(ctx(), a->o, a->k, a->T, a->N, a->io, a->h, NULL, a->gs, NULL,
                                    NULL, a->gx, NULL, NULL, NULL, NULL);
}

int bench_neuron_cuda_run(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype io, int warmup,
                          int repeats, uint64_t seed, double *fwd, double *bwd, int *ok_fwd, int *ok_bwd) {
    const size_t e = (size_t)T * N, es = snn_dtype_size(io);
    float *hx = malloc(e * 4), *hg = malloc(e * 4), *back = malloc(e * 4);
    void *tmp = malloc(e * es);
    if (!hx || !hg || !back || !tmp) die_status(SNN_E_NOMEM, "bench neuron: host buffers");
    snn_rng rx = snn_rng_make(seed, 1), rg = snn_rng_make(seed, 2);
    for (size_t i = 0; i < e; i++) {
        hx[i] = snn_rng_next_normal(&rx);
        hg[i] = snn_rng_next_normal(&rg);
    }
    nrn_arg a = {o, k, T, N, io, dmalloc(e * es), dmalloc(e * es), dmalloc(e * es), dmalloc(e * es),
                 dmalloc(e * es)};
    snn_convert(io, tmp, SNN_F32, hx, e, 0);
    snn_cuda_upload(ctx(), a.x, tmp, e * es);
    snn_convert(io, tmp, SNN_F32, hg, e, 0);
    snn_cuda_upload(ctx(), a.gs, tmp, e * es);
    snn_cuda_memset(ctx(), a.gx, 0xFF, e * es); /* NaN in every type: the check sees what backward wrote */
    time_fwd_bwd(do_fwd, do_bwd, &a, warmup, repeats, fwd, bwd);
    int okf = 1, okb = 1;
    snn_cuda_download(ctx(), tmp, a.s, e * es);
    snn_convert(SNN_F32, back, io, tmp, e, 0);
    for (size_t i = 0; i < e; i++) okf &= back[i] == 0.0f || back[i] == 1.0f;
    snn_cuda_download(ctx(), tmp, a.h, e * es);
    snn_convert(SNN_F32, back, io, tmp, e, 0);
    for (size_t i = 0; i < e; i++) okf &= isfinite(back[i]) != 0;
    snn_cuda_download(ctx(), tmp, a.gx, e * es);
    snn_convert(SNN_F32, back, io, tmp, e, 0);
    for (size_t i = 0; i < e; i++) okb &= isfinite(back[i]) != 0;
    *ok_fwd = okf;
    *ok_bwd = okb;
    snn_cuda_free(a.x);
    snn_cuda_free(a.s);
    snn_cuda_free(a.h);
    snn_cuda_free(a.gs);
    snn_cuda_free(a.gx);
    free(hx);
    free(hg);
    free(back);
    free(tmp);
    return 0;
}

/* ---- mixed precision ---- */

typedef struct {
    const snn_neuron_opts *o;
    float k;
    int T;
    size_t N;
    snn_dtype S, F, B;
    void *x, *h;
    float *s, *gs, *gx;
} mp_arg;
static snn_status do_fwd_mp(void *p) {
    mp_arg *a = p;
    return snn_cuda_neuron_forward_mp(ctx(), a->o, a->k, a->T, a->N, a->S, a->F, SNN_F32, a->x, NULL, a->s, a->h,
                                      NULL);
}
static snn_status do_bwd_mp(void *p) {
    mp_arg *a = p;
    return snn_cuda_neuron_backward_mp(ctx(), a->o, a->k, a->T, a->N, a->S, a->F, a->B, a->h, NULL, a->gs, NULL,
                                       a->gx, NULL, NULL);
}

int bench_neuron_cuda_run_mp(const snn_neuron_opts *o, float k, int T, size_t N, snn_dtype S, snn_dtype F,
                             snn_dtype B, int warmup, int repeats, uint64_t seed, double *fwd, double *bwd,
                             int *ok_fwd, int *ok_bwd) {
    const size_t e = (size_t)T * N, es = snn_dtype_size(S);
    float *hx = malloc(e * 4), *hg = malloc(e * 4), *back = malloc(e * 4);
    void *tmp = malloc(e * es);
    if (!hx || !hg || !back || !tmp) die_status(SNN_E_NOMEM, "bench neuron: host buffers");
    snn_rng rx = snn_rng_make(seed, 1), rg = snn_rng_make(seed, 2);
    for (size_t i = 0; i < e; i++) {
        hx[i] = snn_rng_next_normal(&rx);
        hg[i] = snn_rng_next_normal(&rg);
    }
    mp_arg a = {o, k, T, N, S, F, B, dmalloc(e * es), dmalloc(e * es), dmalloc(e * 4), dmalloc(e * 4), dmalloc(e * 4)};
    /* x cast to the storage as a model would (FP8 saturating) */
    unsigned sat = S == SNN_F8E4M3 || S == SNN_F8E5M2 ? SNN_CONVERT_SATURATE : 0u;
    snn_convert(S, tmp, SNN_F32, hx, e, sat);
    snn_cuda_upload(ctx(), a.x, tmp, e * es);
    snn_cuda_upload(ctx(), a.gs, hg, e * 4);
    snn_cuda_memset(ctx(), a.s, 0xFF, e * 4); /* NaN: the checks see what the kernels wrote */
    snn_cuda_memset(ctx(), a.h, 0xFF, e * es);
    snn_cuda_memset(ctx(), a.gx, 0xFF, e * 4);
    time_fwd_bwd(do_fwd_mp, do_bwd_mp, &a, warmup, repeats, fwd, bwd);
    int okf = 1, okb = 1;
    snn_cuda_download(ctx(), back, a.s, e * 4);
    for (size_t i = 0; i < e; i++) okf &= back[i] == 0.0f || back[i] == 1.0f;
    snn_cuda_download(ctx(), tmp, a.h, e * es);
    snn_convert(SNN_F32, back, S, tmp, e, 0);
    for (size_t i = 0; i < e; i++) okf &= isfinite(back[i]) != 0;
    snn_cuda_download(ctx(), back, a.gx, e * 4);
    for (size_t i = 0; i < e; i++) okb &= isfinite(back[i]) != 0;
    *ok_fwd = okf;
    *ok_bwd = okb;
    snn_cuda_free(a.x);
    snn_cuda_free(a.h);
    snn_cuda_free(a.s);
    snn_cuda_free(a.gs);
    snn_cuda_free(a.gx);
    free(hx);
    free(hg);
    free(back);
    free(tmp);
    return 0;
}

#endif
