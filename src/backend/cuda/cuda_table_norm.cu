/* The CUDA table's entries for BatchNorm, dropout masks, token mean and spiking
 * self-attention (backend.h says what each computes; the CPU reference is
 * src/backend/cpu/cpu_layers.c).
 *
 * BatchNorm: backend.h fixes the order of every sum (per (row, channel) 32 lane partials in
 * increasing k and a halving tree over them, then the rows in increasing i), so these kernels
 * follow it exactly and give the CPU's bits: one warp per (row, channel), lane l summing the
 * k = l (mod 32) with coalesced loads and __shfl_down_sync building the tree (lane l adds lane
 * l + h, the CPU's a[l] += a[l + h]), into a double partial in the table's workspace; then one
 * thread per channel adds the B partials in row order. Every
 * double operation is an explicit __d*_rn intrinsic, so nvcc cannot contract a multiply and
 * an add into an FMA the CPU (-std=c17, contraction off) does not do; division and sqrt are
 * the IEEE ones on both sides. The runner's kernels (cuda_norm.cu: a one-pass shifted
 * variance) do not compute this contract, so they stay with the runner. x may be stored as
 * BF16 or F16 (xt; batchnorm_x16): every kernel is a template on x's type X and widens each
 * value exactly to float, so the results are the FP32 path's bits on the same values, and dx
 * is that path's float rounded once to X.
 *
 * Dropout: the mask is Philox (cuda_philox.h, shared with the runner) at base + i, the same
 * function as snn_rng_uniform; scale is computed on the host as the CPU does. Bit-identical.
 * Token mean: the forward walks each row in order (one thread per row: the runner's
 * warp-shuffle sum has another order); the backward is the runner's kernel (dy · (1/L),
 * exactly the contract). SSA: the runner's kernels (cuda_attn.cu), which recompute A in the
 * backward; the work area is their scratch. */
#include <limits.h>

#include "backend/cuda/cuda_layers.h"
#include "backend/cuda/cuda_norm_body.h"
#include "backend/cuda/cuda_philox.h"
#include "backend/cuda/cuda_table.h"

namespace {

#define NT 256 /* threads per block */

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

/* ---------------------------------------------------------------- BatchNorm */

/* x (and the backward's dx) is stored as X, the entries' xt: float, __nv_bfloat16 or __half
 * (a 16-bit convolution's output). Every kernel reads it through rn_widen (cuda_rn.h, exact),
 * so the sums and formulas below see the same floats the FP32 path would; dx is that path's
 * float, then rn_narrow to X (RNE, as the convolution's GEMM would convert it). */

/* The halving tree of backend.h over the 32 lanes' partials; lane 0 holds the result. */
__device__ __forceinline__ double lane_tree(double v) {
    for (int h = 16; h; h >>= 1) v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, h));
    return v;
}

/* part[i·C + c] = Σ_k x[i][c][k] (sum == NULL) or Σ_k (x - sum[c]/count)²: one warp a row.
 * Each lane loads RU of its values (k = lane, lane + 32, ...) before adding them in that
 * order: the loads overlap instead of each waiting for the previous add. */
#define RU 8
template <typename X>
__global__ void bn_row_kernel(const X *__restrict__ x, size_t B, int C, size_t S, const double *__restrict__ sum,
                              double count, double *__restrict__ part) {
    const size_t n = B * (size_t)C, nw = ((size_t)gridDim.x * blockDim.x) >> 5;
    const unsigned lane = threadIdx.x & 31u;
    for (size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; e < n; e += nw) {
        const X *p = x + e * S;
        const double mu = sum ? __ddiv_rn(sum[e % (size_t)C], count) : 0.0;
        double s = 0.0;
        size_t k = lane;
        for (; k + 32 * (RU - 1) < S; k += 32 * RU) {
            float v[RU];
#pragma unroll
            for (int u = 0; u < RU; u++) v[u] = rn_widen(p[k + 32 * u]);
#pragma unroll
            for (int u = 0; u < RU; u++) {
                if (!sum) {
                    s = __dadd_rn(s, (double)v[u]);
                } else {
                    const double d = __dsub_rn((double)v[u], mu);
                    s = __dadd_rn(s, __dmul_rn(d, d));
                }
            }
        }
        for (; k < S; k += 32) {
            const float v = rn_widen(p[k]);
            if (!sum) {
                s = __dadd_rn(s, (double)v);
            } else {
                const double d = __dsub_rn((double)v, mu);
                s = __dadd_rn(s, __dmul_rn(d, d));
            }
        }
        s = lane_tree(s);
        if (!lane) part[e] = s;
    }
}

/* The row sums for short rows (S <= SHORT_S, e.g. the 64 tokens of a Spikformer block): a
 * lane holds at most SHORT_S / 32 values of a row, so one row a warp leaves the loads
 * waiting on each other's trees. Here a warp takes RR consecutive rows at once: the loads of
 * all RR rows go out together, then RR trees. Each row's lane partials and tree are
 * bn_row_kernel's / bn_grad_row_kernel's, so are the bits. */
#define SHORT_S 256
#define RR 4
template <typename X>
__global__ void bn_row_short_kernel(const X *__restrict__ x, size_t B, int C, size_t S,
                                    const double *__restrict__ sum, double count, double *__restrict__ part) {
    const size_t n = B * (size_t)C, nw = ((size_t)gridDim.x * blockDim.x) >> 5;
    const unsigned lane = threadIdx.x & 31u;
    for (size_t e0 = (((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * RR; e0 < n; e0 += nw * RR) {
        double s[RR];
        bn_row_short_lane<RR>(x, n, (size_t)C, S, sum, count, e0, lane, s);
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const double t = lane_tree(s[r]);
            if (!lane && e0 + r < n) part[e0 + r] = t;
        }
    }
}

template <typename X>
__global__ void bn_grad_row_short_kernel(const X *__restrict__ x, const float *__restrict__ dy, size_t B, int C,
                                         size_t S, const double *__restrict__ mean, const double *__restrict__ invstd,
                                         double *__restrict__ p0, double *__restrict__ p1) {
    const size_t n = B * (size_t)C, nw = ((size_t)gridDim.x * blockDim.x) >> 5;
    const unsigned lane = threadIdx.x & 31u;
    for (size_t e0 = (((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * RR; e0 < n; e0 += nw * RR) {
        double s0[RR], s1[RR];
        bn_grad_row_short_lane<RR>(x, dy, n, (size_t)C, S, mean, invstd, e0, lane, s0, s1);
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const double t0 = lane_tree(s0[r]), t1 = lane_tree(s1[r]);
            if (!lane && e0 + r < n) {
                p0[e0 + r] = t0;
                p1[e0 + r] = t1;
            }
        }
    }
}

/* The column sums (cuda_norm_body.h: col_tile_load, col_tile_add): a block of COL_THREADS
 * threads per COL_C channels, tiles of ROWS rows in shared memory. */
template <int NS, int ROWS>
__device__ __forceinline__ void col_sums(const double *const (&src)[NS], size_t B, int C, double (&acc)[NS]) {
    __shared__ double tile[NS][ROWS][COL_C + 1];
#pragma unroll
    for (int k = 0; k < NS; k++) acc[k] = 0.0;
    for (size_t i0 = 0; i0 < B; i0 += ROWS) {
        const int rows = col_tile_rows(B, i0, ROWS);
        col_tile_load<NS, ROWS>(src, C, (int)blockIdx.x, i0, rows, (int)threadIdx.x, tile);
        __syncthreads();
        if (threadIdx.x < COL_C) col_tile_add<NS, ROWS>(tile, rows, (int)threadIdx.x, acc);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(COL_THREADS) bn_col_kernel(const double *__restrict__ part, size_t B, int C,
                                                             double *__restrict__ acc) {
    const double *src[1] = {part};
    double a[1];
    col_sums<1, 128>(src, B, C, a);
    const int c = blockIdx.x * COL_C + (int)threadIdx.x;
    if (threadIdx.x < COL_C && c < C) acc[c] = a[0];
}

__global__ void bn_stats_final_kernel(int C, int training, double eps, double mom, double count,
                                      const double *__restrict__ sum, const double *__restrict__ sqsum,
                                      float *__restrict__ rmean, float *__restrict__ rvar, double *__restrict__ mean,
                                      double *__restrict__ invstd) {
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
        if (training) {
            const double mu = __ddiv_rn(sum[c], count);
            const double var = __ddiv_rn(sqsum[c], count);
            const double unbiased = __ddiv_rn(sqsum[c], __dsub_rn(count, 1.0));
            mean[c] = mu;
            invstd[c] = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, eps)));
            const double keep = __dsub_rn(1.0, mom);
            rmean[c] = (float)__dadd_rn(__dmul_rn(keep, (double)rmean[c]), __dmul_rn(mom, mu));
            rvar[c] = (float)__dadd_rn(__dmul_rn(keep, (double)rvar[c]), __dmul_rn(mom, unbiased));
        } else {
            mean[c] = (double)rmean[c];
            invstd[c] = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn((double)rvar[c], eps)));
        }
    }
}

/* The elementwise passes walk (row, channel) lines in blockIdx.y and the S values of a line
 * in x: the channel is computed once a line, not with two 64-bit divisions an element. With
 * V = 4 (S a multiple of 4, each array aligned to four of its elements: bn_vec4) a thread
 * loads and stores four values of each array at once (16 bytes of float, 8 of a 16-bit x);
 * each value's operations are the same, so the bits are too. */
template <typename X, int V> struct alignas(sizeof(X) * V) VecX {
    X v[V];
};

template <typename X, int V>
__global__ void bn_apply_kernel(const X *__restrict__ x, size_t B, int C, size_t S, const double *__restrict__ mean,
                                const double *__restrict__ invstd, const float *__restrict__ w,
                                const float *__restrict__ b, float *__restrict__ y) {
    const size_t lines = B * (size_t)C, SV = S / V;
    for (size_t e = blockIdx.y; e < lines; e += gridDim.y) {
        const int c = (int)(e % (size_t)C);
        const double sc = __dmul_rn(invstd[c], (double)w[c]), mu = mean[c], bc = (double)b[c];
        const VecX<X, V> *xp = reinterpret_cast<const VecX<X, V> *>(x + e * S);
        VecX<float, V> *yp = reinterpret_cast<VecX<float, V> *>(y + e * S);
        for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < SV; k += (size_t)gridDim.x * blockDim.x) {
            const VecX<X, V> xv = xp[k];
            VecX<float, V> yv;
#pragma unroll
            for (int q = 0; q < V; q++)
                yv.v[q] = (float)__dadd_rn(__dmul_rn(__dsub_rn((double)rn_widen(xv.v[q]), mu), sc), bc);
            yp[k] = yv;
        }
    }
}

/* p0[i·C + c] = Σ_k dy, p1[i·C + c] = Σ_k dy·((x - mean)·invstd): one warp a row, loads
 * ahead of the adds as in bn_row_kernel. */
template <typename X>
__global__ void bn_grad_row_kernel(const X *__restrict__ x, const float *__restrict__ dy, size_t B, int C, size_t S,
                                   const double *__restrict__ mean, const double *__restrict__ invstd,
                                   double *__restrict__ p0, double *__restrict__ p1) {
    const size_t n = B * (size_t)C, nw = ((size_t)gridDim.x * blockDim.x) >> 5;
    const unsigned lane = threadIdx.x & 31u;
    for (size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; e < n; e += nw) {
        const size_t c = e % (size_t)C;
        const double mu = mean[c], is = invstd[c];
        const X *px = x + e * S;
        const float *pg = dy + e * S;
        double s0 = 0.0, s1 = 0.0;
        size_t k = lane;
        for (; k + 32 * (RU / 2 - 1) < S; k += 32 * (RU / 2)) {
            float gv[RU / 2], xv[RU / 2];
#pragma unroll
            for (int u = 0; u < RU / 2; u++) {
                gv[u] = pg[k + 32 * u];
                xv[u] = rn_widen(px[k + 32 * u]);
            }
#pragma unroll
            for (int u = 0; u < RU / 2; u++) {
                const double g = (double)gv[u];
                s0 = __dadd_rn(s0, g);
                s1 = __dadd_rn(s1, __dmul_rn(g, __dmul_rn(__dsub_rn((double)xv[u], mu), is)));
            }
        }
        for (; k < S; k += 32) {
            const double g = (double)pg[k];
            s0 = __dadd_rn(s0, g);
            s1 = __dadd_rn(s1, __dmul_rn(g, __dmul_rn(__dsub_rn((double)rn_widen(px[k]), mu), is)));
        }
        s0 = lane_tree(s0);
        s1 = lane_tree(s1);
        if (!lane) {
            p0[e] = s0;
            p1[e] = s1;
        }
    }
}

__global__ void __launch_bounds__(COL_THREADS)
    bn_grad_col_kernel(const double *__restrict__ p0, const double *__restrict__ p1, size_t B, int C,
                       double *__restrict__ gsum, double *__restrict__ gdot, float *__restrict__ dw,
                       float *__restrict__ db) {
    const double *src[2] = {p0, p1};
    double a[2];
    col_sums<2, 64>(src, B, C, a);
    const int c = blockIdx.x * COL_C + (int)threadIdx.x;
    if (threadIdx.x < COL_C && c < C) {
        gsum[c] = a[0];
        gdot[c] = a[1];
        db[c] = __fadd_rn(db[c], (float)a[0]);
        dw[c] = __fadd_rn(dw[c], (float)a[1]);
    }
}

/* dx in X: the FP32 path's (float) of the double expression, then rn_narrow. */
template <typename X, int V>
__global__ void bn_dx_kernel(const X *__restrict__ x, const float *__restrict__ dy, size_t B, int C, size_t S,
                             int training, double count, const float *__restrict__ w, const double *__restrict__ mean,
                             const double *__restrict__ invstd, const double *__restrict__ gsum,
                             const double *__restrict__ gdot, X *__restrict__ dx) {
    const size_t lines = B * (size_t)C, SV = S / V;
    for (size_t e = blockIdx.y; e < lines; e += gridDim.y) {
        const int c = (int)(e % (size_t)C);
        const double is = invstd[c], k = __dmul_rn((double)w[c], is), mu = mean[c];
        const double a = training ? __ddiv_rn(gsum[c], count) : 0.0, bb = training ? __ddiv_rn(gdot[c], count) : 0.0;
        const VecX<X, V> *xp = reinterpret_cast<const VecX<X, V> *>(x + e * S);
        const VecX<float, V> *gp = reinterpret_cast<const VecX<float, V> *>(dy + e * S);
        VecX<X, V> *dp = reinterpret_cast<VecX<X, V> *>(dx + e * S);
        for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < SV; q += (size_t)gridDim.x * blockDim.x) {
            const VecX<float, V> gv = gp[q];
            VecX<X, V> out;
            if (training) {
                const VecX<X, V> xv = xp[q];
#pragma unroll
                for (int u = 0; u < V; u++) {
                    const double g = (double)gv.v[u];
                    const double xh = __dmul_rn(__dsub_rn((double)rn_widen(xv.v[u]), mu), is);
                    out.v[u] = rn_narrow<X>((float)__dmul_rn(k, __dsub_rn(__dsub_rn(g, a), __dmul_rn(xh, bb))));
                }
            } else {
#pragma unroll
                for (int u = 0; u < V; u++) out.v[u] = rn_narrow<X>((float)__dmul_rn(k, (double)gv.v[u]));
            }
            dp[q] = out;
        }
    }
}

snn_status bn_args(const snn_backend *be, const char *what, snn_dtype xt, size_t B, int C, size_t S, const void *x) {
    SNN_TRY(snn_cuda_table_check(be, what));
    if (xt != SNN_F32 && xt != SNN_BF16 && xt != SNN_F16)
        return snn_error(SNN_E_INVALID, "%s: x stored as %s (f32, f16 or bf16 only)", what, snn_dtype_name(xt));
    if (C <= 0 || (B && S && !x)) return snn_error(SNN_E_INVALID, "%s: bad arguments (C = %d)", what, C);
    return SNN_OK;
}

/* fn(XType<X>()) with X the storage of xt (bn_args has refused any other types): each entry's
 * launches are written once and instantiated for the three. */
template <typename X> struct XType {
    typedef X T;
};
template <typename Fn> void with_x(snn_dtype xt, Fn &&fn) {
    if (xt == SNN_BF16) fn(XType<__nv_bfloat16>());
    else if (xt == SNN_F16) fn(XType<__half>());
    else fn(XType<float>());
}

/* Lines of S values as vectors of 4 (VecX): S a multiple of 4, x and dx aligned to four of
 * their X (8 bytes for a 16-bit x), f (y or dy, float) to 16 bytes. */
template <typename X> bool bn_vec4(size_t S, const X *x, const X *dx, const float *f) {
    const uintptr_t a = 4 * sizeof(X);
    return !snn_cuda_table_vec_off() && S % 4 == 0 && (uintptr_t)x % a == 0 && (uintptr_t)dx % a == 0 &&
           (uintptr_t)f % 16 == 0;
}

unsigned col_grid(int C) { return (unsigned)((C + COL_C - 1) / COL_C); }

unsigned grid(const snn_backend *be, size_t n) { return snn_cuda_table_grid(be, n ? n : 1, NT); }

snn_status t_batchnorm_stats(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, const void *x,
                             const double *sum, double count, double *acc) {
    SNN_TRY(bn_args(be, "batchnorm_stats", xt, B, C, S, x));
    if (!acc) return snn_error(SNN_E_INVALID, "batchnorm_stats: acc is NULL");
    const size_t rows = B * (size_t)C;
    cudaStream_t st = st_of(be);
    if (!rows) {
        SNN_CU_TRY(cudaMemsetAsync(acc, 0, (size_t)C * sizeof(double), st));
        return SNN_OK;
    }
    void *ws = NULL;
    SNN_TRY(snn_cuda_table_ws(be, rows * sizeof(double), &ws));
    double *part = (double *)ws;
    if (S == 0) {
        SNN_CU_TRY(cudaMemsetAsync(part, 0, rows * sizeof(double), st));
    } else {
        with_x(xt, [&](auto t) {
            typedef typename decltype(t)::T X;
            const X *xx = static_cast<const X *>(x);
            if (S <= SHORT_S)
                bn_row_short_kernel<X><<<grid(be, (rows + RR - 1) / RR * 32), NT, 0, st>>>(xx, B, C, S, sum, count,
                                                                                          part);
            else
                bn_row_kernel<X><<<grid(be, rows * 32), NT, 0, st>>>(xx, B, C, S, sum, count, part);
        });
        SNN_CU_LAUNCHED("batchnorm_stats");
    }
    /* COL_C channels a block (col_sums) */
    bn_col_kernel<<<col_grid(C), COL_THREADS, 0, st>>>(part, B, C, acc);
    SNN_CU_LAUNCHED("batchnorm_stats (channels)");
    return SNN_OK;
}

snn_status t_batchnorm_forward(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, int training,
                               float eps, float momentum, double count, const double *sum, const double *sqsum,
                               const void *x, const float *w, const float *b, float *running_mean,
                               float *running_var, double *mean, double *invstd, float *y) {
    SNN_TRY(bn_args(be, "batchnorm_forward", xt, B, C, S, x));
    if (!w || !b || !running_mean || !running_var || !mean || !invstd || (B && S && !y) ||
        (training && (!sum || !sqsum)))
        return snn_error(SNN_E_INVALID, "batchnorm_forward: NULL argument");
    cudaStream_t st = st_of(be);
    bn_stats_final_kernel<<<grid(be, (size_t)C), NT, 0, st>>>(C, training, (double)eps, (double)momentum, count, sum,
                                                              sqsum, running_mean, running_var, mean, invstd);
    SNN_CU_LAUNCHED("batchnorm_forward (statistics)");
    const size_t n = B * (size_t)C * S;
    if (n) {
        with_x(xt, [&](auto t) {
            typedef typename decltype(t)::T X;
            const X *xx = static_cast<const X *>(x);
            if (bn_vec4(S, xx, xx, y)) {
                const snn_cuda_lines l = snn_cuda_table_lines(be, B * (size_t)C, S / 4);
                bn_apply_kernel<X, 4><<<l.grid, l.block, 0, st>>>(xx, B, C, S, mean, invstd, w, b, y);
            } else {
                const snn_cuda_lines l = snn_cuda_table_lines(be, B * (size_t)C, S);
                bn_apply_kernel<X, 1><<<l.grid, l.block, 0, st>>>(xx, B, C, S, mean, invstd, w, b, y);
            }
        });
        SNN_CU_LAUNCHED("batchnorm_forward");
    }
    return SNN_OK;
}

snn_status t_batchnorm_backward_sums(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, const void *x,
                                     const float *dy, const double *mean, const double *invstd, double *gsum,
                                     double *gdot, float *dw, float *db) {
    SNN_TRY(bn_args(be, "batchnorm_backward_sums", xt, B, C, S, x));
    if (!mean || !invstd || !gsum || !gdot || !dw || !db || (B && S && !dy))
        return snn_error(SNN_E_INVALID, "batchnorm_backward_sums: NULL argument");
    const size_t rows = B * (size_t)C;
    cudaStream_t st = st_of(be);
    double *p0 = NULL, *p1 = NULL;
    if (rows) {
        void *ws = NULL;
        SNN_TRY(snn_cuda_table_ws(be, 2 * rows * sizeof(double), &ws));
        p0 = (double *)ws;
        p1 = p0 + rows;
        if (S == 0) {
            SNN_CU_TRY(cudaMemsetAsync(p0, 0, 2 * rows * sizeof(double), st));
        } else {
            with_x(xt, [&](auto t) {
                typedef typename decltype(t)::T X;
                const X *xx = static_cast<const X *>(x);
                if (S <= SHORT_S)
                    bn_grad_row_short_kernel<X><<<grid(be, (rows + RR - 1) / RR * 32), NT, 0, st>>>(
                        xx, dy, B, C, S, mean, invstd, p0, p1);
                else
                    bn_grad_row_kernel<X><<<grid(be, rows * 32), NT, 0, st>>>(xx, dy, B, C, S, mean, invstd, p0, p1);
            });
            SNN_CU_LAUNCHED("batchnorm_backward_sums");
        }
    }
    bn_grad_col_kernel<<<col_grid(C), COL_THREADS, 0, st>>>(p0, p1, B, C, gsum, gdot, dw, db);
    SNN_CU_LAUNCHED("batchnorm_backward_sums (channels)");
    return SNN_OK;
}

snn_status t_batchnorm_backward_input(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, int training,
                                      double count, const void *x, const float *dy, const float *w,
                                      const double *mean, const double *invstd, const double *gsum,
                                      const double *gdot, void *dx) {
    SNN_TRY(bn_args(be, "batchnorm_backward_input", xt, B, C, S, x));
    if (!w || !mean || !invstd || (B && S && (!dy || !dx)) || (training && (!gsum || !gdot)))
        return snn_error(SNN_E_INVALID, "batchnorm_backward_input: NULL argument");
    const size_t n = B * (size_t)C * S;
    if (!n) return SNN_OK;
    cudaStream_t st = st_of(be);
    with_x(xt, [&](auto t) {
        typedef typename decltype(t)::T X;
        const X *xx = static_cast<const X *>(x);
        X *dd = static_cast<X *>(dx);
        if (bn_vec4(S, xx, dd, dy)) {
            const snn_cuda_lines l = snn_cuda_table_lines(be, B * (size_t)C, S / 4);
            bn_dx_kernel<X, 4><<<l.grid, l.block, 0, st>>>(xx, dy, B, C, S, training, count, w, mean, invstd, gsum,
                                                            gdot, dd);
        } else {
            const snn_cuda_lines l = snn_cuda_table_lines(be, B * (size_t)C, S);
            bn_dx_kernel<X, 1><<<l.grid, l.block, 0, st>>>(xx, dy, B, C, S, training, count, w, mean, invstd, gsum,
                                                            gdot, dd);
        }
    });
    SNN_CU_LAUNCHED("batchnorm_backward_input");
    return SNN_OK;
}

/* ---------------------------------------------------------------- dropout */

__global__ void dropout_mask_kernel(uint64_t seed, uint64_t stream, uint64_t base, float p, float scale, size_t n,
                                    float *__restrict__ mask) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mask[i] = philox_uniform(seed, stream, base + (uint64_t)i) >= p ? scale : 0.0f;
}

__global__ void dropout_apply_kernel(const float *__restrict__ x, const float *__restrict__ mask, size_t n, size_t total,
                                     float *__restrict__ y) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x)
        y[e] = __fmul_rn(x[e], mask[e % n]);
}

snn_status t_dropout_mask(const snn_backend *be, uint64_t seed, uint64_t stream, uint64_t base, float p, size_t n,
                          float *mask) {
    SNN_TRY(snn_cuda_table_check(be, "dropout_mask"));
    if (n && !mask) return snn_error(SNN_E_INVALID, "dropout_mask: mask is NULL");
    if (!n) return SNN_OK;
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; /* on the host: the CPU's rounding */
    dropout_mask_kernel<<<grid(be, n), NT, 0, st_of(be)>>>(seed, stream, base, p, scale, n, mask);
    SNN_CU_LAUNCHED("dropout_mask");
    return SNN_OK;
}

snn_status t_dropout_apply(const snn_backend *be, int T, size_t n, const float *x, const float *mask, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "dropout_apply"));
    if (T < 0 || (T && n && (!x || !mask || !y))) return snn_error(SNN_E_INVALID, "dropout_apply: bad arguments");
    const size_t total = (size_t)T * n;
    if (!total) return SNN_OK;
    dropout_apply_kernel<<<grid(be, total), NT, 0, st_of(be)>>>(x, mask, n, total, y);
    SNN_CU_LAUNCHED("dropout_apply");
    return SNN_OK;
}

/* ---------------------------------------------------------------- token mean */

__global__ void tmean_rows_kernel(const float *__restrict__ x, size_t rows, int L, float inv, float *__restrict__ y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows; i += (size_t)gridDim.x * blockDim.x) {
        const float *p = x + i * (size_t)L;
        float s = 0.0f;
        for (int l = 0; l < L; l++) s = __fadd_rn(s, p[l]);
        y[i] = __fmul_rn(s, inv);
    }
}

snn_status t_token_mean_forward(const snn_backend *be, size_t rows, int L, const float *x, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "token_mean_forward"));
    if (L <= 0 || (rows && (!x || !y))) return snn_error(SNN_E_INVALID, "token_mean_forward: bad arguments");
    if (!rows) return SNN_OK;
    tmean_rows_kernel<<<grid(be, rows), NT, 0, st_of(be)>>>(x, rows, L, 1.0f / (float)L, y);
    SNN_CU_LAUNCHED("token_mean_forward");
    return SNN_OK;
}

snn_status t_token_mean_backward(const snn_backend *be, size_t rows, int L, const float *dy, float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "token_mean_backward"));
    if (L <= 0 || (rows && (!dy || !dx))) return snn_error(SNN_E_INVALID, "token_mean_backward: bad arguments");
    if (!rows) return SNN_OK;
    if (rows > (size_t)INT_MAX)
        return snn_error(SNN_E_INVALID, "token_mean_backward: %zu rows (2^31 at most on CUDA)", rows);
    return snn_cuda_token_mean_backward(snn_cuda_table_ctx(be), dy, dx, (int)rows, 1, L);
}

/* ---------------------------------------------------------------- spiking self-attention */

snn_status ssa_args(const snn_backend *be, const char *what, size_t B, int C, int L, int heads, const void *x,
                    const void *y) {
    SNN_TRY(snn_cuda_table_check(be, what));
    if (C <= 0 || L <= 0 || heads <= 0 || C % heads)
        return snn_error(SNN_E_INVALID, "%s: C = %d, L = %d, heads = %d (C must be a positive multiple of heads)",
                         what, C, L, heads);
    if (B > (size_t)INT_MAX) return snn_error(SNN_E_INVALID, "%s: %zu rows (2^31 at most on CUDA)", what, B);
    if (B && (!x || !y)) return snn_error(SNN_E_INVALID, "%s: NULL argument", what);
    return SNN_OK;
}

size_t t_ssa_work_bytes(const snn_backend *be, size_t B, int C, int L, int heads) {
    (void)be;
    if (!B || B > (size_t)INT_MAX) return 0;
    return snn_cuda_ssa_work_bytes((int)B, C, L, heads);
}

snn_status t_ssa_forward(const snn_backend *be, size_t B, int C, int L, int heads, float scale, const float *x,
                         float *y, void *work) {
    SNN_TRY(ssa_args(be, "ssa_forward", B, C, L, heads, x, y));
    if (!B) return SNN_OK;
    return snn_cuda_ssa_forward(snn_cuda_table_ctx(be), x, y, (int)B, C, L, heads, scale, work);
}

snn_status t_ssa_backward(const snn_backend *be, size_t B, int C, int L, int heads, float scale, const float *x,
                          const float *dy, float *dx, void *work) {
    SNN_TRY(ssa_args(be, "ssa_backward", B, C, L, heads, x, dx));
    if (!B) return SNN_OK;
    if (!dy) return snn_error(SNN_E_INVALID, "ssa_backward: dy is NULL");
    return snn_cuda_ssa_backward(snn_cuda_table_ctx(be), x, dy, dx, (int)B, C, L, heads, scale, work);
}

} // namespace

void snn_cuda_install_norm(snn_backend *be) {
    be->batchnorm_stats = t_batchnorm_stats;
    be->batchnorm_forward = t_batchnorm_forward;
    be->batchnorm_backward_sums = t_batchnorm_backward_sums;
    be->batchnorm_backward_input = t_batchnorm_backward_input;
    be->batchnorm_x16 = 1; /* x and dx also as BF16 / F16 (the VecX kernels' X) */
    be->dropout_mask = t_dropout_mask;
    be->dropout_apply = t_dropout_apply;
    be->token_mean_forward = t_token_mean_forward;
    be->token_mean_backward = t_token_mean_backward;
    be->ssa_forward = t_ssa_forward;
    be->ssa_backward = t_ssa_backward;
    be->ssa_work_bytes = t_ssa_work_bytes;
}
