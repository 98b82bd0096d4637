/* RMSNorm on the GPU (the op table's rmsnorm entries; src/nn/rmsnorm.c is the reference).
 *
 * Forward, per vector of F: ss = sum x^2 (double), rstd = 1/sqrt(ss/F + eps) (double, saved),
 * y = (float)(x * rstd * w). Backward with g = dy * w: s = sum g * x * rstd (double),
 * dx = (float)(rstd * (g - x * rstd * s/F)); dw[j] += (float)(sum over vectors of
 * dy * x * rstd) (double).
 *
 * Every double operation is written with an explicitly rounded intrinsic in the CPU code's
 * order (nvcc would contract a*b+c into an FMA; the C build does not), so the only
 * difference from the CPU is the order of the per-vector sums (a block's tree instead of a
 * left-to-right loop) and, for dw, the split of the vectors into chunks: with at most
 * RMS_CHUNK vectors there is one chunk and dw is summed in the CPU's order. One block per
 * vector; the dw column sums in two passes (chunk partials in a double workspace, then the
 * chunks in order), no atomics: deterministic. */
#include <math.h>

#include "backend/cuda/cuda_internal.h"

namespace {

#define RMS_CHUNK 64      /* vectors per dw partial (at least) */
#define RMS_MAX_CHUNKS 512 /* cap on the number of dw partials */


__global__ void __launch_bounds__(256)
    rms_fwd_kernel(size_t V, int F, double eps, const float *__restrict__ x, const float *__restrict__ w,
                   float *__restrict__ y, double *__restrict__ rstd) {
    __shared__ double red[256];
    for (size_t v = blockIdx.x; v < V; v += gridDim.x) {
        const float *p = x + v * (size_t)F;
        float *q = y + v * (size_t)F;
        double ss = 0.0;
        for (int j = threadIdx.x; j < F; j += blockDim.x) {
            const double a = (double)p[j];
            ss = __dadd_rn(ss, __dmul_rn(a, a));
        }
        ss = snn_block_sum_d(ss, red);
        const double is = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)F), eps)));
        if (threadIdx.x == 0) rstd[v] = is;
        for (int j = threadIdx.x; j < F; j += blockDim.x)
            q[j] = __double2float_rn(__dmul_rn(__dmul_rn((double)p[j], is), (double)w[j]));
    }
}

__global__ void __launch_bounds__(256)
    rms_dx_kernel(size_t V, int F, const float *__restrict__ x, const float *__restrict__ w,
                  const double *__restrict__ rstd, const float *__restrict__ dy, float *__restrict__ dx) {
    __shared__ double red[256];
    for (size_t v = blockIdx.x; v < V; v += gridDim.x) {
        const size_t o = v * (size_t)F;
        const double is = rstd[v];
        double s = 0.0;
        for (int j = threadIdx.x; j < F; j += blockDim.x)
            s = __dadd_rn(s, __dmul_rn(__dmul_rn((double)dy[o + j], (double)w[j]), __dmul_rn((double)x[o + j], is)));
        s = snn_block_sum_d(s, red);
        const double c = __ddiv_rn(s, (double)F);
        for (int j = threadIdx.x; j < F; j += blockDim.x) {
            const double gw = __dmul_rn((double)dy[o + j], (double)w[j]);
            const double xc = __dmul_rn(__dmul_rn((double)x[o + j], is), c);
            dx[o + j] = __double2float_rn(__dmul_rn(is, __dsub_rn(gw, xc)));
        }
    }
}

/* part[ch][j] = sum over the vectors of chunk ch (in order) of dy * (x * rstd). */
__global__ void __launch_bounds__(256)
    rms_dw_part_kernel(size_t V, int F, size_t chunk, const float *__restrict__ x, const double *__restrict__ rstd,
                       const float *__restrict__ dy, double *__restrict__ part) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= F) return;
    const size_t v0 = (size_t)blockIdx.y * chunk, v1 = v0 + chunk < V ? v0 + chunk : V;
    double acc = 0.0;
    for (size_t v = v0; v < v1; v++) {
        const size_t o = v * (size_t)F + (size_t)j;
        acc = __dadd_rn(acc, __dmul_rn((double)dy[o], __dmul_rn((double)x[o], rstd[v])));
    }
    part[(size_t)blockIdx.y * (size_t)F + (size_t)j] = acc;
}

__global__ void rms_dw_sum_kernel(int F, int nch, const double *__restrict__ part, float *__restrict__ dw) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= F) return;
    double acc = 0.0;
    for (int ch = 0; ch < nch; ch++) acc = __dadd_rn(acc, part[(size_t)ch * (size_t)F + (size_t)j]);
    dw[j] = __fadd_rn(dw[j], __double2float_rn(acc));
}

unsigned rms_block(int F) { return F >= 1024 ? 256u : F >= 256 ? 128u : F >= 64 ? 64u : 32u; }
unsigned rms_grid(size_t V) { return V < 65536 ? (unsigned)V : 65536u; }

} // namespace

/* The number of dw chunks for V vectors and their size (the caller sizes the workspace:
 * nch * F doubles). */
void snn_cuda_rmsnorm_chunks(size_t V, size_t *chunk, int *nch) {
    size_t c = RMS_CHUNK;
    if ((V + c - 1) / c > RMS_MAX_CHUNKS) c = (V + RMS_MAX_CHUNKS - 1) / RMS_MAX_CHUNKS;
    *chunk = c;
    *nch = V ? (int)((V + c - 1) / c) : 0;
}

/* Arguments are checked by the caller (cuda_backend.cu): V > 0, F > 0, buffers present. */
snn_status snn_cuda_rmsnorm_forward(snn_cuda *c, size_t V, int F, float eps, const float *x, const float *w,
                                    float *y, double *rstd) {
    rms_fwd_kernel<<<rms_grid(V), rms_block(F), 0, snn_cuda_stream_of(c)>>>(V, F, (double)eps, x, w, y, rstd);
    SNN_CU_LAUNCHED("rmsnorm_forward");
    return SNN_OK;
}

/* dx may be NULL; part: a device workspace of nch * F doubles (snn_cuda_rmsnorm_chunks). */
snn_status snn_cuda_rmsnorm_backward(snn_cuda *c, size_t V, int F, const float *x, const float *w,
                                     const double *rstd, const float *dy, float *dx, float *dw, double *part) {
    cudaStream_t st = snn_cuda_stream_of(c);
    if (dx) {
        rms_dx_kernel<<<rms_grid(V), rms_block(F), 0, st>>>(V, F, x, w, rstd, dy, dx);
        SNN_CU_LAUNCHED("rmsnorm_backward dx");
    }
    size_t chunk;
    int nch;
    snn_cuda_rmsnorm_chunks(V, &chunk, &nch);
    dim3 grid((unsigned)((F + 255) / 256), (unsigned)nch);
    rms_dw_part_kernel<<<grid, 256, 0, st>>>(V, F, chunk, x, rstd, dy, part);
    SNN_CU_LAUNCHED("rmsnorm_backward dw partials");
    rms_dw_sum_kernel<<<(unsigned)((F + 255) / 256), 256, 0, st>>>(F, nch, part, dw);
    SNN_CU_LAUNCHED("rmsnorm_backward dw");
    return SNN_OK;
}
