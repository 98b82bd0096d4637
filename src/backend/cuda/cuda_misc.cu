/* GELU (exact erf form, src/nn/gelu.c) and the MSE loss on the firing rate
 * (src/train/loss.c's snn_loss_mse_rate). The arithmetic mirrors the CPU code operation for
 * operation with explicitly rounded intrinsics (the C build does not contract a*b+c into an
 * FMA, nvcc would), so the only differences left are erff/expf's last bits. */
#include <math.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layers.h"

namespace {

unsigned grid_cap(snn_cuda *c, size_t n, unsigned block) {
    unsigned g = snn_grid(n, block), cap = (unsigned)snn_cuda_sm_count(c) * 16u;
    return g < cap ? g : cap;
}

__global__ void gelu_fwd_kernel(const float *__restrict__ x, float *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        /* CPU: 0.5f * x * (1.0f + erff(x * 1/sqrt2)), left to right */
        const float e = erff(__fmul_rn(v, 0.70710678118654752f));
        y[i] = __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, e));
    }
}

__global__ void gelu_bwd_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                float *__restrict__ dx, size_t n) {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        const float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(v, 0.70710678118654752f))));
        const float pdf = __fmul_rn(inv_sqrt_2pi, expf(__fmul_rn(__fmul_rn(-0.5f, v), v)));
        dx[i] = __fmul_rn(dy[i], __fadd_rn(cdf, __fmul_rn(v, pdf)));
    }
}

} // namespace

extern "C" snn_status snn_cuda_gelu_forward(snn_cuda *c, const float *x, float *y, size_t n) {
    if (!c || !x || !y) return snn_error(SNN_E_INVALID, "gelu_forward: NULL context or buffer");
    if (n == 0) return SNN_OK;
    gelu_fwd_kernel<<<grid_cap(c, n, 256), 256, 0, snn_cuda_stream_of(c)>>>(x, y, n);
    SNN_CU_LAUNCHED("gelu_forward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_gelu_backward(snn_cuda *c, const float *x, const float *dy,
                                             float *dx, size_t n) {
    if (!c || !x || !dy || !dx)
        return snn_error(SNN_E_INVALID, "gelu_backward: NULL context or buffer");
    if (n == 0) return SNN_OK;
    gelu_bwd_kernel<<<grid_cap(c, n, 256), 256, 0, snn_cuda_stream_of(c)>>>(x, dy, dx, n);
    SNN_CU_LAUNCHED("gelu_backward");
    return SNN_OK;
}

/* ---- MSE on the rate ----
 * One block: the loss is a handful of values per sample, and a single block makes the sum
 * order fixed (deterministic) without a second kernel or scratch memory. Rates and the
 * loss run in double exactly as the CPU code (sum over t in increasing order, / T). */
#define MSE_THREADS 512

namespace {

__device__ __forceinline__ double rate_at(const float *out, int T, size_t NC, size_t idx) {
    double s = 0.0;
    for (int t = 0; t < T; t++) s = __dadd_rn(s, (double)out[(size_t)t * NC + idx]);
    return s / (double)T;
}

__global__ void __launch_bounds__(MSE_THREADS)
    mse_rate_kernel(int T, int B, int C, const float *__restrict__ out,
                    const int32_t *__restrict__ labels, float *loss, float *dout,
                    float grad_scale, int *correct) {
    __shared__ double red[MSE_THREADS];
    __shared__ int hred[MSE_THREADS];
    const size_t NC = (size_t)B * (size_t)C;
    const double gscale = 2.0 / ((double)NC * (double)T);
    double total = 0.0;
    for (size_t idx = threadIdx.x; idx < NC; idx += MSE_THREADS) {
        const int b = (int)(idx / (size_t)C), cc = (int)(idx - (size_t)b * C);
        const int y = labels[b];
        /* a label outside [0, C) cannot be refused without a host sync: it poisons the
         * loss and its sample's gradient with NaN (as the GPU cross-entropy does) */
        const bool ok = y >= 0 && y < C;
        const double d = rate_at(out, T, NC, idx) - (cc == y ? 1.0 : 0.0);
        total = ok ? __dadd_rn(total, __dmul_rn(d, d)) : (double)NAN;
        if (dout) {
            /* CPU: (float)(d * gscale); grad_scale 1 leaves that bit-identical */
            const float gv = ok ? (float)__dmul_rn(__dmul_rn(d, gscale), (double)grad_scale) : NAN;
            for (int t = 0; t < T; t++) dout[(size_t)t * NC + idx] = gv;
        }
    }
    int hits = 0;
    for (int b = threadIdx.x; b < B; b += MSE_THREADS) {
        const size_t row = (size_t)b * (size_t)C;
        double best = 0.0;
        int arg = 0;
        for (int cc = 0; cc < C; cc++) {
            const double r = rate_at(out, T, NC, row + (size_t)cc);
            if (cc == 0 || r > best) { /* first maximum, as the CPU code */
                best = r;
                arg = cc;
            }
        }
        hits += arg == labels[b];
    }
    red[threadIdx.x] = total;
    hred[threadIdx.x] = hits;
    __syncthreads();
    for (int s = MSE_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
            hred[threadIdx.x] += hred[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *loss = (float)(red[0] / (double)NC);
        if (correct) *correct = hred[0];
    }
}

} // namespace

extern "C" snn_status snn_cuda_mse_rate(snn_cuda *c, int T, int B, int C, const float *out,
                                        const int32_t *labels, float *loss, float *dout,
                                        float grad_scale, int *correct) {
    if (!c || !out || !labels || !loss)
        return snn_error(SNN_E_INVALID, "mse_rate: the context, output, label and loss pointers "
                                        "must not be NULL");
    if (T <= 0 || B <= 0 || C <= 0)
        return snn_error(SNN_E_INVALID, "mse_rate: T, B and C must be positive (got %d, %d, %d)",
                         T, B, C);
    mse_rate_kernel<<<1, MSE_THREADS, 0, snn_cuda_stream_of(c)>>>(T, B, C, out, labels, loss, dout,
                                                                 grad_scale, correct);
    SNN_CU_LAUNCHED("mse_rate");
    return SNN_OK;
}
