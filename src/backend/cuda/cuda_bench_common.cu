/* GPU benchmark protocol shared by the linear and FC-SNN workloads: allocation accounting,
 * graph capture, event timing of graph replays, the update and finiteness checks. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cuda/cuda_bench_impl.h"
#include "backend/cuda/cuda_fp8_delayed.h"

double snn_bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

snn_status snn_bench_alloc_get(snn_bench_alloc *a, size_t bytes, int infer, void **out) {
    *out = NULL;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        void **p = (void **)realloc(a->ptr, sizeof(void *) * (size_t)cap);
        if (!p) return snn_error(SNN_E_NOMEM, "out of host memory");
        a->ptr = p;
        a->cap = cap;
    }
    BT(snn_cuda_alloc(a->c, bytes, out));
    a->ptr[a->n++] = *out;
    a->train_bytes += bytes;
    if (infer) a->infer_bytes += bytes;
    return SNN_OK;
}

void snn_bench_alloc_free_all(snn_bench_alloc *a) {
    for (int i = 0; i < a->n; i++) snn_cuda_free(a->ptr[i]);
    free(a->ptr);
    a->ptr = NULL;
    a->n = a->cap = 0;
}

__global__ void bench_absdiff_kernel(const float *__restrict__ a, const float *__restrict__ b, size_t n,
                                     float *out) {
    unsigned m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned u = __float_as_uint(fabsf(a[i] - b[i])); /* NaN: above every other value */
        m = u > m ? u : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned v = __shfl_xor_sync(0xffffffffu, m, o);
        m = v > m ? v : m;
    }
    if ((threadIdx.x & 31) == 0 && m) atomicMax(reinterpret_cast<unsigned *>(out), m);
}

snn_status snn_bench_drift_max(snn_cuda *c, const float *a, float *b, const float *host, size_t n, float *out) {
    if (!n) return SNN_OK;
    BT(snn_cuda_upload(c, b, host, n * sizeof(float)));
    unsigned grid = snn_grid(n, 256);
    unsigned cap = (unsigned)snn_cuda_sm_count(c) * 8;
    if (grid > cap) grid = cap;
    bench_absdiff_kernel<<<grid, 256, 0, snn_cuda_stream_of(c)>>>(a, b, n, out);
    SNN_CU_LAUNCHED("bench_absdiff_kernel");
    return SNN_OK;
}

snn_bench_mode snn_bench_mode_of(const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p, snn_bench_fp8_delayed *dl) {
    snn_bench_mode m;
    m.fp8 = p == SNN_CUDA_BENCH_FP8;
    m.block = m.fp8 && cfg->fp8_block;
    m.pow2 = !cfg->fp8_block_fp32_scales;
    m.delayed = m.fp8 && !m.block && cfg->fp8_delayed;
    m.act = p == SNN_CUDA_BENCH_FP32 ? SNN_F32 : p == SNN_CUDA_BENCH_FP16 ? SNN_F16 : SNN_BF16;
    m.loss_scale = p == SNN_CUDA_BENCH_FP16 ? 1024.0f : 1.0f;
    dl->hlen = cfg->fp8_history_len ? cfg->fp8_history_len : 1024;
    dl->margin = cfg->fp8_margin;
    dl->most_recent = cfg->fp8_most_recent;
    return m;
}

/* ---- FP8 delayed scaling (cuda_bench_impl.h) ---- */

static __device__ __forceinline__ float slot_fp8_max(int slot, int grad0) {
    return slot >= grad0 ? 57344.0f : 448.0f;
}

__global__ void delayed_reset_kernel(int nslots, int grad0, int *pos, float *scale, float *qamax) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nslots) return;
    pos[i] = 0;
    scale[i] = 1.0f;
    qamax[i] = slot_fp8_max(i, grad0); /* fp8_max / 1 */
}

/* One block per slot (cuda_fp8_delayed.h); qamax = fp8_max / scale for the quantiser. */
__global__ void delayed_update_kernel(float *amax, float *hist, int *pos, float *scale, float *qamax, int hlen,
                                      int grad0, float margin_factor, int most_recent) {
    const int slot = blockIdx.x;
    const float fmax = slot_fp8_max(slot, grad0);
    if (snn_fp8_delayed_roll(slot, amax, hist, pos, hlen, most_recent, fmax, margin_factor, scale + slot))
        qamax[slot] = __fdiv_rn(fmax, scale[slot]);
}

snn_status snn_bench_delayed_alloc(snn_bench_alloc *a, snn_bench_fp8_delayed *d, int nslots, int grad0, int hlen,
                                   int margin, int most_recent) {
    memset(d, 0, sizeof *d);
    if (hlen < 1) return snn_error(SNN_E_INVALID, "fp8 delayed scaling: amax history length must be >= 1 (got %d)", hlen);
    if (margin < 0 || margin > 126) return snn_error(SNN_E_INVALID, "fp8 delayed scaling: margin must be in [0, 126] (got %d)", margin);
    d->nslots = nslots;
    d->grad0 = grad0;
    d->hlen = hlen;
    d->margin = margin;
    d->most_recent = most_recent;
    size_t ring = hlen > 1 ? (size_t)hlen - 1 : 1;
    /* an inference step updates the input's scale too: every buffer here is an inference buffer */
    BT(bench_alloc(a, (size_t)nslots * ring * 4, 1, &d->hist));
    BT(bench_alloc(a, (size_t)nslots * 4, 1, &d->pos));
    BT(bench_alloc(a, (size_t)nslots * 4, 1, &d->scale));
    BT(bench_alloc(a, (size_t)nslots * 4, 1, &d->qamax));
    return SNN_OK;
}

snn_status snn_bench_delayed_reset(snn_cuda *c, const snn_bench_fp8_delayed *d) {
    size_t ring = d->hlen > 1 ? (size_t)d->hlen - 1 : 1;
    BT(snn_cuda_memset(c, d->hist, 0, (size_t)d->nslots * ring * 4));
    delayed_reset_kernel<<<snn_grid((size_t)d->nslots, 128), 128, 0, snn_cuda_stream_of(c)>>>(d->nslots, d->grad0, d->pos,
                                                                                             d->scale, d->qamax);
    SNN_CU_LAUNCHED("delayed_reset_kernel");
    return SNN_OK;
}

snn_status snn_bench_delayed_update(snn_cuda *c, const snn_bench_fp8_delayed *d, float *amax) {
    delayed_update_kernel<<<(unsigned)d->nslots, 256, 0, snn_cuda_stream_of(c)>>>(
        amax, d->hist, d->pos, d->scale, d->qamax, d->hlen, d->grad0, ldexpf(1.0f, -d->margin), d->most_recent);
    SNN_CU_LAUNCHED("delayed_update_kernel");
    return SNN_OK;
}

/* 4 elements per thread and iteration: 16 (F32) or 8 (BF16) bytes in, 4 bytes out. */
template <typename S, typename Q>
__global__ void quantize_scaled_kernel(const S *__restrict__ src, Q *__restrict__ q, size_t n4,
                                       const float *__restrict__ scale, float *scale_inv, float *amax) {
    const float s = *scale;
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = __frcp_rn(s);
    float mx = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const Pack<S, 4> v = pack_ld<S, 4>(src + 4 * i);
        Pack<Q, 4> o;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float x = Io<S>::ld(v.v[k]);
            mx = fmaxf(mx, fabsf(x)); /* fmaxf drops NaN, as snn_cuda_amax does */
            o.v[k] = Io<Q>::st(x * s);
        }
        pack_st<Q, 4>(q + 4 * i, o);
    }
    if (!amax) return;
    __shared__ float red[32];
    mx = snn_warp_max(mx);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        mx = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.0f;
        mx = snn_warp_max(mx);
        if (threadIdx.x == 0) snn_atomic_max_pos(amax, mx);
    }
}

template <typename S, typename Q>
static void quantize_scaled_t(cudaStream_t st, unsigned grid, const void *src, void *q, size_t n4, const float *scale,
                              float *scale_inv, float *amax) {
    quantize_scaled_kernel<S, Q><<<grid, 256, 0, st>>>((const S *)src, (Q *)q, n4, scale, scale_inv, amax);
}

snn_status snn_bench_quantize_scaled(snn_cuda *c, snn_dtype q_type, void *q, snn_dtype src_type, const void *src,
                                     size_t n, const float *scale, float *scale_inv, float *amax) {
    if (n % 4 || !snn_aligned(src, 16) || !snn_aligned(q, 4))
        return snn_error(SNN_E_INVALID, "fp8 delayed quantisation needs n %% 4 == 0 and aligned buffers (n = %zu)", n);
    if ((src_type != SNN_F32 && src_type != SNN_BF16) || (q_type != SNN_F8E4M3 && q_type != SNN_F8E5M2))
        return snn_error(SNN_E_INVALID, "fp8 delayed quantisation: F32/BF16 to E4M3/E5M2 only");
    if (!n) return SNN_OK;
    size_t n4 = n / 4;
    unsigned grid = snn_grid(n4, 256), cap = (unsigned)snn_cuda_sm_count(c) * 8;
    if (grid > cap) grid = cap;
    cudaStream_t st = snn_cuda_stream_of(c);
    const int e4 = q_type == SNN_F8E4M3;
    if (src_type == SNN_F32) {
        if (e4) quantize_scaled_t<float, snn_e4m3>(st, grid, src, q, n4, scale, scale_inv, amax);
        else quantize_scaled_t<float, snn_e5m2>(st, grid, src, q, n4, scale, scale_inv, amax);
    } else {
        if (e4) quantize_scaled_t<__nv_bfloat16, snn_e4m3>(st, grid, src, q, n4, scale, scale_inv, amax);
        else quantize_scaled_t<__nv_bfloat16, snn_e5m2>(st, grid, src, q, n4, scale, scale_inv, amax);
    }
    SNN_CU_LAUNCHED("quantize_scaled_kernel");
    return SNN_OK;
}

/* bad |= the loss is not finite: captured after the loss of every training step, so the
 * check covers every step, as the CPU path's does. */
__global__ void bench_loss_flag_kernel(const float *loss, int *bad) {
    if (!isfinite(*loss)) *bad = 1;
}

static snn_status capture(snn_cuda *c, snn_status (*fn)(void *), void *net, cudaGraphExec_t *out) {
    cudaStream_t s = snn_cuda_stream_of(c);
    cudaGraph_t g = NULL;
    *out = NULL;
    SNN_CU_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    snn_status st = fn(net);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (st != SNN_OK) {
        if (g) cudaGraphDestroy(g);
        return st;
    }
    if (e != cudaSuccess) return snn_cuda_fail(e, "cudaStreamEndCapture (benchmark step)");
    e = cudaGraphInstantiate(out, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return snn_cuda_fail(e, "cudaGraphInstantiate (benchmark step)");
    return SNN_OK;
}

typedef struct loss_step {
    const snn_bench_ops *ops;
    int *bad;
    cudaStream_t s;
} loss_step;

static snn_status loss_with_flag(void *p) {
    loss_step *l = (loss_step *)p;
    BT(l->ops->train_loss(l->ops->net));
    bench_loss_flag_kernel<<<1, 1, 0, l->s>>>(l->ops->loss, l->bad);
    SNN_CU_LAUNCHED("bench_loss_flag_kernel");
    return SNN_OK;
}

enum { G_FWD, G_LOSS, G_BWD, G_INFER, G_OPT, G_N };
enum { CHUNK = 32 }; /* training steps per batch of events */

static snn_status run_graphs(snn_cuda *c, const snn_cuda_bench_cfg *cfg, const snn_bench_ops *ops,
                             cudaGraphExec_t *g, cudaEvent_t *ev, float *dmax, snn_cuda_bench_result *r) {
    cudaStream_t s = snn_cuda_stream_of(c);
    /* training: warm-up, then timed steps, each three graph launches with events between */
    for (int i = 0; i < cfg->warmup; i++)
        for (int k = G_FWD; k <= G_BWD; k++) SNN_CU_TRY(cudaGraphLaunch(g[k], s));
    SNN_CU_TRY(cudaStreamSynchronize(s));
    double part[3] = {0, 0, 0}, total = 0;
    double c0 = cpu_now();
    for (int done = 0; done < cfg->training_steps;) {
        int n = cfg->training_steps - done < CHUNK ? cfg->training_steps - done : CHUNK;
        SNN_CU_TRY(cudaEventRecord(ev[0], s));
        for (int j = 0; j < n; j++)
            for (int k = 0; k < 3; k++) {
                SNN_CU_TRY(cudaGraphLaunch(g[G_FWD + k], s));
                SNN_CU_TRY(cudaEventRecord(ev[3 * j + k + 1], s));
            }
        SNN_CU_TRY(cudaEventSynchronize(ev[3 * n]));
        for (int j = 0; j < 3 * n; j++) {
            float ms;
            SNN_CU_TRY(cudaEventElapsedTime(&ms, ev[j], ev[j + 1]));
            part[j % 3] += ms;
        }
        float ms;
        SNN_CU_TRY(cudaEventElapsedTime(&ms, ev[0], ev[3 * n]));
        total += ms;
        done += n;
    }
    int ts = cfg->training_steps;
    r->train_cpu_ms = (cpu_now() - c0) * 1e3 / ts;
    r->train_ms = total / ts;
    r->forward_ms = part[0] / ts;
    r->loss_ms = part[1] / ts;
    r->backward_optimizer_ms = part[2] / ts;
    float loss;
    BT(snn_cuda_download(c, &loss, ops->loss, sizeof loss));
    r->final_loss = loss;
    if (ops->diag) BT(ops->diag(ops->net, 1, r));

    /* update check over every parameter, before inference (as on the CPU) */
    SNN_CU_TRY(cudaMemsetAsync(dmax, 0, sizeof(float), s));
    BT(ops->update_max(ops->net, dmax));
    float upd;
    BT(snn_cuda_download(c, &upd, dmax, sizeof upd));
    r->update_max_abs = upd;

    /* inference */
    for (int i = 0; i < cfg->warmup; i++) SNN_CU_TRY(cudaGraphLaunch(g[G_INFER], s));
    SNN_CU_TRY(cudaStreamSynchronize(s));
    c0 = cpu_now();
    SNN_CU_TRY(cudaEventRecord(ev[0], s));
    for (int i = 0; i < cfg->inference_steps; i++) SNN_CU_TRY(cudaGraphLaunch(g[G_INFER], s));
    SNN_CU_TRY(cudaEventRecord(ev[1], s));
    SNN_CU_TRY(cudaEventSynchronize(ev[1]));
    r->infer_cpu_ms = (cpu_now() - c0) * 1e3 / cfg->inference_steps;
    float ims;
    SNN_CU_TRY(cudaEventElapsedTime(&ims, ev[0], ev[1]));
    r->infer_ms = ims / cfg->inference_steps;
    float *h = (float *)malloc(ops->n_logits * sizeof(float));
    if (!h) return snn_error(SNN_E_NOMEM, "out of host memory (%zu logits)", ops->n_logits);
    snn_status st = snn_cuda_download(c, h, ops->logits, ops->n_logits * sizeof(float));
    double sum = 0;
    int fin = 1;
    for (size_t i = 0; st == SNN_OK && i < ops->n_logits; i++) {
        fin &= isfinite(h[i]) != 0;
        sum += h[i];
    }
    free(h);
    BT(st);
    r->checksum = sum;
    r->output_finite = fin;

    /* the optimizer alone (lr 0: same arithmetic, weights unchanged), after the checksum */
    SNN_CU_TRY(cudaEventRecord(ev[0], s));
    for (int i = 0; i < ts; i++) SNN_CU_TRY(cudaGraphLaunch(g[G_OPT], s));
    SNN_CU_TRY(cudaEventRecord(ev[1], s));
    SNN_CU_TRY(cudaEventSynchronize(ev[1]));
    SNN_CU_TRY(cudaEventElapsedTime(&ims, ev[0], ev[1]));
    r->optimizer_ms = ims / ts;
    return SNN_OK;
}

snn_status snn_bench_protocol(snn_cuda *c, const snn_cuda_bench_cfg *cfg, const snn_bench_ops *ops,
                              snn_bench_alloc *a, double t0, size_t free0, snn_cuda_bench_result *r) {
    cudaStream_t s = snn_cuda_stream_of(c);
    int *bad = NULL;
    float *dmax = NULL;
    BT(bench_alloc(a, sizeof(int), 0, &bad));
    BT(bench_alloc(a, sizeof(float), 0, &dmax));
    BT(ops->load(ops->net));
    /* eager step: cuBLASLt heuristics and autotuning synchronize, so they run before capture */
    snn_cuda_set_gemm_autotune(c, cfg->autotune);
    BT(ops->train_forward(ops->net));
    BT(ops->train_loss(ops->net));
    BT(ops->train_backward(ops->net));
    BT(ops->infer(ops->net));
    BT(ops->optimizer_lr0(ops->net));
    BT(snn_cuda_synchronize(c));
    if (ops->diag) BT(ops->diag(ops->net, 0, r));

    cudaGraphExec_t g[G_N] = {NULL, NULL, NULL, NULL, NULL};
    cudaEvent_t ev[3 * CHUNK + 1];
    int nev = 0;
    snn_status st = SNN_OK;
    loss_step ls = {ops, bad, s};
    snn_status (*fns[G_N])(void *) = {ops->train_forward, loss_with_flag, ops->train_backward, ops->infer,
                                      ops->optimizer_lr0};
    for (int k = 0; k < G_N && st == SNN_OK; k++) st = capture(c, fns[k], k == G_LOSS ? (void *)&ls : ops->net, &g[k]);
    for (; st == SNN_OK && nev < 3 * CHUNK + 1; nev++) {
        cudaError_t e = cudaEventCreate(&ev[nev]);
        if (e != cudaSuccess) st = snn_cuda_fail(e, "cudaEventCreate");
        if (e != cudaSuccess) break;
    }
    /* back to the base state: the eager step trained once */
    if (st == SNN_OK) st = ops->load(ops->net);
    if (st == SNN_OK) {
        cudaError_t e = cudaMemsetAsync(bad, 0, sizeof(int), s);
        if (e != cudaSuccess) st = snn_cuda_fail(e, "cudaMemsetAsync");
    }
    if (st == SNN_OK) st = snn_cuda_synchronize(c);
    if (st == SNN_OK) {
        r->prep_ms = (snn_bench_now() - t0) * 1e3;
        size_t fr = 0, total = 0;
        cudaError_t e = cudaMemGetInfo(&fr, &total);
        if (e != cudaSuccess) st = snn_cuda_fail(e, "cudaMemGetInfo");
        r->device_used_bytes = free0 > fr ? free0 - fr : 0;
    }
    if (st == SNN_OK) st = run_graphs(c, cfg, ops, g, ev, dmax, r);
    if (st == SNN_OK) {
        int hb = 1;
        st = snn_cuda_download(c, &hb, bad, sizeof hb);
        r->loss_finite = !hb && isfinite(r->final_loss);
    }
    for (int k = 0; k < G_N; k++)
        if (g[k]) cudaGraphExecDestroy(g[k]);
    for (int i = 0; i < nev; i++) cudaEventDestroy(ev[i]);
    r->train_alloc_bytes = a->train_bytes;
    r->infer_alloc_bytes = a->infer_bytes;
    return st;
}

extern "C" snn_status snn_cuda_bench_check(const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p) {
    if (!cfg) return snn_error(SNN_E_INVALID, "cuda bench: cfg is NULL");
    if (cfg->T < 1 || cfg->N < 1 || cfg->in < 1 || cfg->width < 1 || cfg->classes < 1)
        return snn_error(SNN_E_INVALID, "cuda bench: sizes must be positive");
    if (cfg->classes > 12288)
        return snn_error(SNN_E_INVALID, "the CUDA cross-entropy supports up to 12288 classes (got %d)", cfg->classes);
    if (cfg->training_steps < 1 || cfg->inference_steps < 1 || cfg->warmup < 0)
        return snn_error(SNN_E_INVALID, "cuda bench: need at least one timed training and inference step");
    if ((int)p < 0 || (int)p > 3) return snn_error(SNN_E_INVALID, "cuda bench: unknown precision %d", (int)p);
    if (p == SNN_CUDA_BENCH_FP8 && cfg->fp8_delayed &&
        (cfg->fp8_history_len < 0 || cfg->fp8_margin < 0 || cfg->fp8_margin > 126))
        return snn_error(SNN_E_INVALID, "cuda bench: fp8 delayed scaling needs amax_history_len >= 1 and margin in [0, 126]");
    if (p == SNN_CUDA_BENCH_FP8 && cfg->fp8_block && cfg->fp8_delayed)
        return snn_error(SNN_E_INVALID, "cuda bench: choose one FP8 recipe (block or delayed)");
    if (cfg->neuron_storage != SNN_NEURON_STORAGE_UNSET || cfg->neuron_fwd != SNN_NEURON_COMPUTE_FP32 ||
        cfg->neuron_bwd != SNN_NEURON_COMPUTE_FP32) {
        if (cfg->kind != SNN_CUDA_BENCH_FCSNN)
            return snn_error(SNN_E_INVALID, "cuda bench: the neuron precision (storage/fwd/bwd) applies to the fcsnn "
                                            "workload only (linear has no neurons)");
        /* the CPU's rules (neuron_fwd/bwd need a storage, FP8 arithmetic needs FP8 storage, ...) */
        snn_precision_config pc = snn_precision_config_default();
        pc.mode = p == SNN_CUDA_BENCH_FP32   ? SNN_PRECISION_FP32
                  : p == SNN_CUDA_BENCH_FP16 ? SNN_PRECISION_FP16
                  : p == SNN_CUDA_BENCH_BF16 ? SNN_PRECISION_BF16
                                             : SNN_PRECISION_FP8;
        pc.neuron_storage = cfg->neuron_storage;
        pc.neuron_fwd = cfg->neuron_fwd;
        pc.neuron_bwd = cfg->neuron_bwd;
        BT(snn_precision_config_validate(&pc));
    }
    if (cfg->kind == SNN_CUDA_BENCH_LINEAR) {
        if (cfg->T != 1) return snn_error(SNN_E_INVALID, "cuda bench linear: T must be 1");
        if (cfg->depth < 2)
            return snn_error(SNN_E_INVALID, "the CUDA linear workload needs --depth >= 2 (got %d)", cfg->depth);
        if (cfg->in != cfg->width)
            return snn_error(SNN_E_INVALID, "the CUDA linear workload needs input width == width");
        if (cfg->momentum != 0.0f)
            return snn_error(SNN_E_INVALID, "the CUDA linear workload runs plain SGD: --momentum must be 0 with --device cuda");
        if (p == SNN_CUDA_BENCH_FP8 && (cfg->N % 16 || cfg->width % 16 || cfg->classes % 16))
            return snn_error(SNN_E_INVALID, "fp8 needs batch, width and classes divisible by 16");
        if (p == SNN_CUDA_BENCH_FP8 && cfg->fp8_block && (cfg->N % 128 || cfg->width % 128 || cfg->classes % 128))
            return snn_error(SNN_E_INVALID, "the fp8 block recipe needs batch, width and classes divisible by 128 "
                                            "(got %d, %d, %d)", cfg->N, cfg->width, cfg->classes);
    } else if (cfg->kind == SNN_CUDA_BENCH_FCSNN) {
        if (cfg->depth < 2) return snn_error(SNN_E_INVALID, "cuda bench fcsnn: depth must be at least 2");
        if (!(cfg->tau > 1.0f)) return snn_error(SNN_E_INVALID, "cuda bench fcsnn: tau must be greater than 1");
        if (p == SNN_CUDA_BENCH_FP8 && (cfg->width % 16 || cfg->in % 16 || ((long)cfg->T * cfg->N) % 16))
            return snn_error(SNN_E_INVALID, "fp8 needs hidden width, input dim and T*batch divisible by 16");
        if (p == SNN_CUDA_BENCH_FP8 && cfg->fp8_block &&
            (cfg->width % 128 || cfg->in % 128 || ((long)cfg->T * cfg->N) % 128))
            return snn_error(SNN_E_INVALID, "the fp8 block recipe needs hidden width, input dim and T*batch divisible "
                                            "by 128 (got %d, %d, %ld)", cfg->width, cfg->in, (long)cfg->T * cfg->N);
    } else {
        return snn_error(SNN_E_INVALID, "cuda bench: unknown workload %d", (int)cfg->kind);
    }
    return SNN_OK;
}

extern "C" snn_status snn_cuda_bench_run(snn_cuda *c, const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p,
                                         const snn_cuda_bench_data *d, snn_cuda_bench_result *out) {
    if (!c || !d || !out) return snn_error(SNN_E_INVALID, "cuda bench: NULL argument");
    BT(snn_cuda_bench_check(cfg, p));
    memset(out, 0, sizeof *out);
    out->spike_rate_first = out->spike_rate_last = NAN;
    if (cfg->kind == SNN_CUDA_BENCH_LINEAR) return snn_cuda_bench_run_linear(c, cfg, p, d, out);
    return snn_cuda_bench_run_fcsnn(c, cfg, p, d, out);
}

extern "C" snn_status snn_cuda_bench_device_info(snn_cuda *c, snn_cuda_bench_device *o) {
    memset(o, 0, sizeof *o);
    BT(snn_cuda_device_info(c, o->name, sizeof o->name, &o->cc_major, &o->cc_minor, &o->sm_count));
    SNN_CU_TRY(cudaRuntimeGetVersion(&o->runtime_version));
    SNN_CU_TRY(cudaDriverGetVersion(&o->driver_version));
    SNN_CU_TRY(cudaGetDevice(&o->device));
    size_t fr = 0;
    SNN_CU_TRY(cudaMemGetInfo(&fr, &o->total_memory));
    return SNN_OK;
}
