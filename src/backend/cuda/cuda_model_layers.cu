/* Module kinds of the whole-model runner whose per-step values live on the device, so that a
 * captured CUDA graph replays them correctly:
 *  - ParametricLIF: k = sigmoid(w) is computed by each kernel from w in the FP32 parameter
 *    buffer (it changes every step); the backward sums dL/dk on the device and chains
 *    dL/dw = dL/dk · k(1 - k) (both in double from w, like src/neuron/neuron_module.c).
 *    The bodies are the shared neuron kernels' (cuda_neuron_body.h), one neuron per thread.
 *  - Dropout in training: the mask is drawn from Philox-4x32-10 exactly as src/nn/dropout.c
 *    does (key = the model seed, stream = snn_dropout_stream(module), counter = forward
 *    count · N·numel + i, read from the device counter), so it equals the CPU's mask.
 *  - AvgPool2d: PyTorch's defaults as src/nn/pool.c (floor mode, padding counted in the
 *    divisor), with the CPU's order of additions, so results are bit-identical.
 * Products are explicit __fmul_rn where a sum follows, so nvcc cannot contract into FMA. */
#include "backend/cuda/cuda_model_internal.h"
#include "backend/cuda/cuda_neuron_body.h"
#include "backend/cuda/cuda_philox.h"
extern "C" {
#include "nn/layers_conv.h"
}

namespace {

/* ---- ParametricLIF ---- */
__device__ __forceinline__ double plif_k(const float *w) { return 1.0 / (1.0 + exp(-(double)*w)); }

__global__ void plif_fwd_kernel(FwdArgs a, const float *w) {
    a.p.k = (float)plif_k(w); /* snn_plif_k: in double, rounded once */
    neuron_fwd_body<float, float, 1, 4>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x);
}

__global__ void __launch_bounds__(256) plif_bwd_kernel(BwdArgs a, const float *w, float *gk) {
    a.p.k = (float)plif_k(w);
    float dk, mx;
    neuron_bwd_body<float, 1, 4, true, -1>(a, blockIdx.x * (size_t)blockDim.x + threadIdx.x, &dk,
                                           &mx);
    __shared__ float red[8];
    dk = snn_warp_sum(dk);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = dk;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < (int)blockDim.x / 32; i++) s += red[i];
        atomicAdd(gk, s);
    }
}

/* dL/dw += dL/dk · k (1 - k) */
__global__ void plif_chain_kernel(const float *w, const float *gk, float *gw) {
    const double k = plif_k(w);
    *gw += (float)((double)*gk * k * (1.0 - k));
}

/* Philox-4x32-10: cuda_philox.h (shared with the op table's dropout). */

/* One thread per (sample, element): draw the mask once, apply it at every step. */
__global__ void dropout_fwd_kernel(const float *x, float *y, float *mask, size_t per_t, int T,
                                   float p, float scale, uint64_t seed, uint64_t stream,
                                   const unsigned long long *count) {
    const uint64_t base = (uint64_t)*count * (uint64_t)per_t;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per_t;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = (float)(philox_first(seed, stream, base + i) >> 8) * (1.0f / 16777216.0f);
        const float m = u >= p ? scale : 0.0f;
        mask[i] = m;
        for (int t = 0; t < T; t++) y[(size_t)t * per_t + i] = x[(size_t)t * per_t + i] * m;
    }
}

__global__ void dropout_bwd_kernel(const float *gy, float *gx, const float *mask, size_t per_t,
                                   int T) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < per_t;
         i += (size_t)gridDim.x * blockDim.x) {
        const float m = mask[i];
        for (int t = 0; t < T; t++) gx[(size_t)t * per_t + i] = gy[(size_t)t * per_t + i] * m;
    }
}

/* ---- AvgPool2d over [planes][H][W] ---- */
struct pool_geom {
    int H, W, Ho, Wo, k, s, p;
    float inv;
};

/* Output o of the [planes][Ho][Wo] result. */
SNN_HD float avgpool_fwd_one(const float *x, size_t o, const pool_geom &q) {
    const size_t out_n = (size_t)q.Ho * q.Wo;
    const size_t pl = o / out_n;
    const int oh = (int)(o % out_n) / q.Wo, ow = (int)(o % out_n) % q.Wo;
    const int lh = oh * q.s - q.p, lw = ow * q.s - q.p;
    const int h0 = lh > 0 ? lh : 0, h1 = lh + q.k < q.H ? lh + q.k : q.H;
    const int w0 = lw > 0 ? lw : 0, w1 = lw + q.k < q.W ? lw + q.k : q.W;
    const float *xp = x + pl * (size_t)q.H * q.W;
    float acc = 0.0f;
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) acc += xp[(size_t)ih * q.W + iw];
    return acc * q.inv;
}

SNN_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Gather for input element i of [planes][H][W]: dy·inv of every window over it, in the
 * CPU's (oh, ow) order, starting from 0. */
SNN_HD float avgpool_bwd_one(const float *dy, size_t i, const pool_geom &q) {
    const size_t in_n = (size_t)q.H * q.W;
    const size_t pl = i / in_n;
    const int ih = (int)(i % in_n) / q.W, iw = (int)(i % in_n) % q.W;
    /* windows oh with oh·s - p <= ih < oh·s - p + k */
    const int hl = ih + q.p - q.k + 1, wl = iw + q.p - q.k + 1;
    const int oh0 = hl <= 0 ? 0 : (hl + q.s - 1) / q.s, ow0 = wl <= 0 ? 0 : (wl + q.s - 1) / q.s;
    const int oh1 = (ih + q.p) / q.s < q.Ho - 1 ? (ih + q.p) / q.s : q.Ho - 1;
    const int ow1 = (iw + q.p) / q.s < q.Wo - 1 ? (iw + q.p) / q.s : q.Wo - 1;
    const float *gp = dy + pl * (size_t)q.Ho * q.Wo;
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++) acc = acc + mul_rn(gp[(size_t)oh * q.Wo + ow], q.inv);
    return acc;
}

__global__ void avgpool_fwd_kernel(const float *x, float *y, size_t planes, pool_geom q) {
    const size_t n = planes * q.Ho * q.Wo;
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < n;
         o += (size_t)gridDim.x * blockDim.x)
        y[o] = avgpool_fwd_one(x, o, q);
}

__global__ void avgpool_bwd_kernel(const float *dy, float *dx, size_t planes, pool_geom q) {
    const size_t n = planes * q.H * q.W;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dx[i] = avgpool_bwd_one(dy, i, q);
}

unsigned grid_for(snn_cuda_model *g, size_t work) {
    unsigned b = snn_grid(work, 256), cap = (unsigned)snn_cuda_sm_count(g->c) * 16u;
    return b < cap ? b : cap;
}

NeuronP neuron_params(const snn_neuron_opts *o) {
    NeuronP p;
    p.kind = (int)o->kind;
    p.decay_input = o->decay_input;
    p.soft = o->soft_reset;
    p.detach = o->detach_reset;
    p.sg = (int)o->surrogate;
    p.alpha = snn_neuron_alpha(o);
    p.vth = o->v_threshold;
    p.vreset = o->v_reset;
    p.k = 0.5f; /* replaced on the device by sigmoid(w) */
    return p;
}

} // namespace

snn_status snn_gm_plif_forward(snn_cuda_model *g, gnode *n, int training) {
    FwdArgs a;
    memset(&a, 0, sizeof a);
    a.p = neuron_params(&n->nopt);
    a.T = g->T;
    a.n = (size_t)g->N * n->in_numel;
    a.x = n->x;
    a.s = n->y;
    a.h = training ? n->h : NULL;
    plif_fwd_kernel<<<snn_grid(a.n, 256), 256, 0, snn_cuda_stream_of(g->c)>>>(a, n->w);
    SNN_CU_LAUNCHED("ParametricLIF forward");
    return SNN_OK;
}

snn_status snn_gm_plif_backward(snn_cuda_model *g, gnode *n) {
    BwdArgs a;
    memset(&a, 0, sizeof a);
    a.p = neuron_params(&n->nopt);
    a.T = g->T;
    a.n = (size_t)g->N * n->in_numel;
    a.h = n->h;
    a.gs = n->gy;
    a.gx = n->gin;
    a.want_gk = 1;
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    SNN_CU_TRY(cudaMemsetAsync(n->gk, 0, sizeof(float), sm));
    plif_bwd_kernel<<<snn_grid(a.n, 256), 256, 0, sm>>>(a, n->w, n->gk);
    SNN_CU_LAUNCHED("ParametricLIF backward");
    plif_chain_kernel<<<1, 1, 0, sm>>>(n->w, n->gk, n->gw);
    SNN_CU_LAUNCHED("ParametricLIF dL/dw");
    return SNN_OK;
}

snn_status snn_gm_dropout_forward(snn_cuda_model *g, gnode *n, int training) {
    const size_t per_t = (size_t)g->N * n->in_numel;
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    if (!training) {
        SNN_CU_TRY(cudaMemcpyAsync(n->y, n->x, sizeof(float) * per_t * (size_t)g->T,
                                   cudaMemcpyDeviceToDevice, sm));
        return SNN_OK;
    }
    const float p = n->d.p, scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    dropout_fwd_kernel<<<grid_for(g, per_t), 256, 0, sm>>>(n->x, n->y, n->mask, per_t, g->T, p, scale,
                                                           g->host->run.seed,
                                                           snn_dropout_stream(n->m), g->fwd_count);
    SNN_CU_LAUNCHED("dropout");
    return SNN_OK;
}

snn_status snn_gm_dropout_backward(snn_cuda_model *g, gnode *n) {
    const size_t per_t = (size_t)g->N * n->in_numel;
    dropout_bwd_kernel<<<grid_for(g, per_t), 256, 0, snn_cuda_stream_of(g->c)>>>(n->gy, n->gin,
                                                                                n->mask, per_t, g->T);
    SNN_CU_LAUNCHED("dropout backward");
    return SNN_OK;
}

static pool_geom geom_of(const gnode *n) {
    pool_geom q = {n->H, n->W, n->Ho, n->Wo, n->k, n->s, n->p, 1.0f / (float)(n->k * n->k)};
    return q;
}

snn_status snn_gm_avgpool_forward(snn_cuda_model *g, gnode *n) {
    const size_t planes = (size_t)g->B * n->C;
    avgpool_fwd_kernel<<<grid_for(g, planes * n->Ho * n->Wo), 256, 0, snn_cuda_stream_of(g->c)>>>(
        n->x, n->y, planes, geom_of(n));
    SNN_CU_LAUNCHED("avgpool");
    return SNN_OK;
}

snn_status snn_gm_avgpool_backward(snn_cuda_model *g, gnode *n) {
    const size_t planes = (size_t)g->B * n->C;
    avgpool_bwd_kernel<<<grid_for(g, planes * n->H * n->W), 256, 0, snn_cuda_stream_of(g->c)>>>(
        n->gy, n->gin, planes, geom_of(n));
    SNN_CU_LAUNCHED("avgpool backward");
    return SNN_OK;
}
