/* The CUDA table's convolution and pooling entries (backend.h's "convolution and pooling").
 *
 * The runner's kernels in cuda_conv.cu / cuda_pool.cu compute other contracts (a
 * pixel-major column matrix [B*P][ldcol] for a square kernel, a uint8 argmax relative to the
 * window), so these entries have their own kernels, written for the CPU table's layouts and
 * its order of operations:
 *   im2col, conv_gather, transpose: copies (one thread per output element; the transpose
 *     through 32 x 32 shared-memory tiles);
 *   col2im, maxpool_backward, avgpool_backward: gathers, one thread per input pixel walking
 *     the column rows (taps) / the outputs that read it in increasing order from +0.0f, which
 *     is the order the CPU's scatter adds them in: bit-identical, no atomics;
 *   conv_scatter, sum_groups_add, maxpool_forward, avgpool_forward: one thread per output
 *     element doing the CPU's operations in its order (explicit __fadd_rn / __fmul_rn: no FMA
 *     contraction): bit-identical;
 *   conv_bias_grad: one block per channel, double partials of a fixed stride over the
 *     channel's B*P values and a fixed shared-memory tree (deterministic, but not the CPU's
 *     sequential order: backend.h's bound).
 * Index arithmetic runs in 32 bits when the element count fits (the common case) and in 64
 * bits otherwise; the 32-bit grid-stride loops step an unsigned index, which cannot wrap
 * (index < count <= 2^31 - 1, stride < 2^31) where an int could overflow on its last step. */
#include "backend/cuda/cuda_conv_body.h"
#include "backend/cuda/cuda_fastdiv.h"
#include "backend/cuda/cuda_table.h"

#include <limits.h>
#include <math.h>

namespace {

inline cudaStream_t stream_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

snn_status check_geom(const char *what, const snn_conv_geom *g, int nb) {
    if (!g || nb < 0 || g->C <= 0 || g->H <= 0 || g->W <= 0 || g->kh <= 0 || g->kw <= 0 || g->sh <= 0 ||
        g->sw <= 0 || g->ph < 0 || g->pw < 0 || g->Ho <= 0 || g->Wo <= 0 ||
        g->Ho != (g->H + 2 * g->ph - g->kh) / g->sh + 1 || g->Wo != (g->W + 2 * g->pw - g->kw) / g->sw + 1 ||
        g->H + 2 * g->ph < g->kh || g->W + 2 * g->pw < g->kw)
        return snn_error(SNN_E_INVALID, "%s: bad geometry or sample count", what);
    return SNN_OK;
}

snn_status check_pool(const char *what, const snn_conv_geom *g) {
    SNN_TRY(check_geom(what, g, 1));
    if (g->ph > g->kh / 2 || g->pw > g->kw / 2)
        return snn_error(SNN_E_INVALID, "%s: padding %dx%d exceeds half the kernel %dx%d", what, g->ph, g->pw, g->kh,
                         g->kw);
    /* argmax is an int32 index into a plane */
    if ((size_t)g->H * (size_t)g->W > (size_t)INT_MAX)
        return snn_error(SNN_E_INVALID, "%s: a %dx%d plane is too large", what, g->H, g->W);
    return SNN_OK;
}

/* The geometry as kernel arguments. */
Geo geo_of(const snn_conv_geom *g) {
    Geo r = {g->C, g->H, g->W, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->Ho, g->Wo};
    return r;
}

inline bool fits32(size_t n) { return n <= (size_t)0x7fffffff; }

/* ---------------------------------------------------------------- im2col / col2im */

/* V consecutive stored values from p (aligned to min(16, V·sizeof(S)) bytes) as FP32, in
 * loads of up to 16 bytes. */
template <typename S, int V> __device__ __forceinline__ void load_run(const S *p, float (&a)[V]) {
    constexpr int bytes = V * (int)sizeof(S), chunk = bytes < 16 ? bytes : 16, per = chunk / (int)sizeof(S);
#pragma unroll
    for (int c = 0; c < V; c += per) {
        S t[per];
        if constexpr (chunk == 16) {
            const uint4 u = *reinterpret_cast<const uint4 *>(p + c);
            memcpy(t, &u, 16);
        } else if constexpr (chunk == 8) {
            const uint2 u = *reinterpret_cast<const uint2 *>(p + c);
            memcpy(t, &u, 8);
        } else {
#pragma unroll
            for (int q = 0; q < per; q++) t[q] = p[c + q];
        }
#pragma unroll
        for (int q = 0; q < per; q++) a[c + q] = rn_widen(t[q]);
    }
}

/* An entry's `round` as a kernel argument: 0 none, 1 BF16, 2 F16 (RNE, overflow to inf). */
inline int round_code(snn_dtype t) { return t == SNN_BF16 ? 1 : t == SNN_F16 ? 2 : 0; }
snn_status check_round(snn_dtype t, const char *what) {
    if (t != SNN_F32 && t != SNN_BF16 && t != SNN_F16)
        return snn_error(SNN_E_INVALID, "%s: round must be f32, f16 or bf16", what);
    return SNN_OK;
}
__device__ __forceinline__ float round_by(int rc, float v) {
    return rc == 1 ? __bfloat162float(__float2bfloat16_rn(v)) : rc == 2 ? __half2float(__float2half_rn(v)) : v;
}

/* col2im's 2-D launch (snn_cuda_table_lines): the lines are sample and channel planes, x the
 * pixels of a plane (one division an element, and none by a stride of 1 in the tap loop). */

/* col[r*ld + s*P + p] for r < K, s < nb, p < P; element e = (r*nb + s)*P + p. A 1-D walk: a
 * 2-D form like col2im's below measured slower here (27.4 against 33.4 ms over a Spikformer-S
 * profile on the H200: one element per thread and line, so the per-line indices cost what the
 * per-element ones did). */
template <typename I, typename O = float>
__global__ void im2col_kernel(Geo g, I nb, const float *__restrict__ x, O *__restrict__ col, size_t ld) {
    const I P = (I)g.Ho * (I)g.Wo, K = (I)g.C * (I)g.kh * (I)g.kw, total = K * nb * P;
    const I in_n = (I)g.C * (I)g.H * (I)g.W, kk = (I)g.kh * (I)g.kw;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I p = e % P, rs = e / P, s = rs % nb, r = rs / nb;
        const I c = r / kk, t = r % kk, i = t / (I)g.kw, j = t % (I)g.kw;
        const int oh = (int)(p / (I)g.Wo), ow = (int)(p % (I)g.Wo);
        const int ih = oh * g.sh - g.ph + (int)i, iw = ow * g.sw - g.pw + (int)j;
        float v = 0.0f;
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
            v = x[(size_t)s * in_n + ((size_t)c * g.H + (size_t)ih) * g.W + (size_t)iw];
        col[(size_t)r * ld + (size_t)s * P + p] = rn_narrow<O>(v);
    }
}

/* dx[s][c][ih][iw] = +0 + the entries of the taps (i, j) that read it, taps in increasing order:
 * line (s, c) = sc = s*C + c. */
template <typename I>
__global__ void col2im_kernel(Geo g, I nb, const float *__restrict__ col, size_t ld, int rc, float *__restrict__ dx) {
    const I P = (I)g.Ho * (I)g.Wo, HW = (I)g.H * (I)g.W, lines = nb * (I)g.C;
    for (I sc = blockIdx.y; sc < lines; sc += gridDim.y) {
        const I c = sc % (I)g.C, s = sc / (I)g.C;
        const float *cs = col + (size_t)s * P;
        float *dp = dx + (size_t)sc * HW;
        for (I pix = blockIdx.x * (I)blockDim.x + threadIdx.x; pix < HW; pix += (I)gridDim.x * blockDim.x) {
            const int ih = (int)(pix / (I)g.W), iw = (int)pix - ih * g.W;
            float acc = 0.0f;
            for (int i = 0; i < g.kh; i++) {
                const int th = ih + g.ph - i; /* = oh * sh */
                if (th < 0) break;            /* th only falls as i grows */
                const int oh = g.sh == 1 ? th : th / g.sh;
                if (oh * g.sh != th || oh >= g.Ho) continue;
                for (int j = 0; j < g.kw; j++) {
                    const int tw = iw + g.pw - j;
                    if (tw < 0) break;
                    const int ow = g.sw == 1 ? tw : tw / g.sw;
                    if (ow * g.sw != tw || ow >= g.Wo) continue;
                    const size_t r = ((size_t)c * g.kh + (size_t)i) * g.kw + (size_t)j;
                    acc = __fadd_rn(acc, cs[r * ld + (size_t)oh * g.Wo + (size_t)ow]);
                }
            }
            dp[pix] = round_by(rc, acc);
        }
    }
}

/* col2im for unit strides with every index below 2^31 (the convolutions of the zoo): tap (i,
 * j) of pixel (ih, iw) is output (ih + ph - i, iw + pw - j), so the loops have no division
 * and, unrolled for a 3 x 3 kernel, issue all their loads at once. A tap outside the output
 * adds +0.0f, which leaves the sum's bits unchanged (it starts at +0.0f, so it is never -0),
 * and the taps are added in the same increasing order: bit-identical to col2im_kernel. */
template <int KH, int KW>
__global__ void col2im_s1_kernel(Geo g, int nb, Div dC, Div dW, const float *__restrict__ col, size_t ld, int rc,
                                 float *__restrict__ dx) {
    const int kh = KH ? KH : g.kh, kw = KW ? KW : g.kw;
    const int P = g.Ho * g.Wo, HW = g.H * g.W, lines = nb * g.C;
    for (unsigned us = blockIdx.y; us < (unsigned)lines; us += gridDim.y) {
        const int sc = (int)us, s = dv(sc, dC), c = sc - s * g.C;
        const float *cs = col + (size_t)s * P + (size_t)c * kh * kw * ld;
        float *dp = dx + (size_t)sc * HW;
        for (unsigned up = blockIdx.x * blockDim.x + threadIdx.x; up < (unsigned)HW; up += gridDim.x * blockDim.x) {
            const int pix = (int)up, ih = dv(pix, dW), iw = pix - ih * g.W;
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < kh; i++) {
                const int oh = ih + g.ph - i;
#pragma unroll
                for (int j = 0; j < kw; j++) {
                    const int ow = iw + g.pw - j;
                    const bool in = (unsigned)oh < (unsigned)g.Ho && (unsigned)ow < (unsigned)g.Wo;
                    const float v = in ? cs[(size_t)(i * kw + j) * ld + (size_t)oh * g.Wo + ow] : 0.0f;
                    acc = __fadd_rn(acc, v);
                }
            }
            dp[pix] = round_by(rc, acc);
        }
    }
}

/* The same walk with every index below 2^31: the divisions as multiply-highs (cuda_fastdiv.h),
 * which is what the kernel's time goes to otherwise. */
template <typename O>
__global__ void im2col_fd_kernel(Geo g, int nb, Div dP, Div dnb, Div dkk, Div dkw, Div dWo,
                                 const float *__restrict__ x, O *__restrict__ col, size_t ld) {
    const int P = g.Ho * g.Wo, K = g.C * g.kh * g.kw, total = K * nb * P;
    const size_t in_n = (size_t)g.C * g.H * g.W;
    for (unsigned ue = blockIdx.x * blockDim.x + threadIdx.x; ue < (unsigned)total; ue += gridDim.x * blockDim.x) {
        const int e = (int)ue;
        const int rs = dv(e, dP), p = e - rs * P;
        const int r = dv(rs, dnb), s = rs - r * nb;
        const int c = dv(r, dkk), t = r - c * (int)dkk.d;
        const int i = dv(t, dkw), j = t - i * g.kw;
        const int oh = dv(p, dWo), ow = p - oh * g.Wo;
        const int ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
        float v = 0.0f;
        if ((unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W)
            v = x[(size_t)s * in_n + ((size_t)c * g.H + (size_t)ih) * g.W + (size_t)iw];
        col[(size_t)r * ld + (size_t)s * P + p] = rn_narrow<O>(v);
    }
}

/* ---- vectorised forms: V consecutive outputs a thread, one store of V elements ----
 * The walks above decompose every element's index (six divisions) and store 2 or 4 bytes at a
 * time; these decompose once per V consecutive elements of an output plane (or of a P-run of
 * a layout change) and store them in one 4- to 16-byte write. Each value and the element it
 * lands in are the same, so the results are bit-identical; used where the run length, the
 * leading dimension and the base are multiples of V (vec_width below). */

/* The widest V in {8, 4, 2, 1} (at most 16 bytes of elements of `esize` bytes) dividing the
 * run length and the leading dimension, with the base aligned to V elements. */
int vec_width(size_t esize, const void *base, size_t ld, size_t run) {
    for (int v = (int)(16 / esize) < 8 ? (int)(16 / esize) : 8; v > 1; v >>= 1)
        if (ld % (size_t)v == 0 && run % (size_t)v == 0 && (uintptr_t)base % ((size_t)v * esize) == 0)
            return v;
    return 1;
}

/* im2col in runs of V outputs (cuda_conv_body.h). */
template <typename O, int V>
__global__ void im2col_vec_kernel(Geo g, int nb, Im2colDiv d, const float *__restrict__ x, O *__restrict__ col,
                                  size_t ld) {
    const int total = g.C * g.kh * g.kw * nb * (g.Ho * g.Wo / V);
    for (unsigned e = blockIdx.x * blockDim.x + threadIdx.x; e < (unsigned)total; e += gridDim.x * blockDim.x)
        im2col_vec_item<O, V>(g, nb, d, x, col, ld, (int)e);
}

template <typename O, int V>
void launch_im2col_vec(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, O *col, size_t ld,
                       size_t total) {
    const unsigned grid = snn_cuda_table_grid(be, total / V, 256);
    const Im2colDiv d = {div_make(g->Ho * g->Wo / V), div_make(nb), div_make(g->kh * g->kw), div_make(g->kw),
                         div_make(g->Wo)};
    im2col_vec_kernel<O, V><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), nb, d, x, col, ld);
}

template <typename O>
void launch_im2col(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, O *col, size_t ld,
                   size_t total) {
    const int fit = fits32(total) && fits32((size_t)nb * g->C * g->H * g->W);
    const size_t P = (size_t)g->Ho * g->Wo;
    const int V = fit && !snn_cuda_table_vec_off() ? vec_width(sizeof(O), col, ld, P) : 1;
    if constexpr (sizeof(O) == 2) {
        if (V == 8) return launch_im2col_vec<O, 8>(be, g, nb, x, col, ld, total);
    }
    if (V == 4) return launch_im2col_vec<O, 4>(be, g, nb, x, col, ld, total);
    if (V == 2) return launch_im2col_vec<O, 2>(be, g, nb, x, col, ld, total);
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    if (fit)
        im2col_fd_kernel<O><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), nb, div_make(g->Ho * g->Wo), div_make(nb),
                                                             div_make(g->kh * g->kw), div_make(g->kw), div_make(g->Wo),
                                                             x, col, ld);
    else
        im2col_kernel<uint64_t, O><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), (uint64_t)nb, x, col, ld);
}

snn_status t_im2col(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, float *col, size_t ld) {
    SNN_TRY(snn_cuda_table_check(be, "im2col"));
    SNN_TRY(check_geom("im2col", g, nb));
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo, total = K * (size_t)nb * P;
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "im2col: ld %zu < %d samples x %zu", ld, nb, P);
    if (!total) return SNN_OK;
    if (!x || !col) return snn_error(SNN_E_INVALID, "im2col: NULL buffer");
    launch_im2col(be, g, nb, x, col, ld, total);
    SNN_CU_LAUNCHED("im2col");
    return SNN_OK;
}


snn_status t_im2col16(const snn_backend *be, snn_dtype t, const snn_conv_geom *g, int nb, const float *x, void *col,
                      size_t ld) {
    SNN_TRY(snn_cuda_table_check(be, "im2col16"));
    SNN_TRY(check_geom("im2col16", g, nb));
    if (t != SNN_BF16 && t != SNN_F16) return snn_error(SNN_E_INVALID, "im2col16: the type must be f16 or bf16");
    const size_t K = (size_t)g->C * g->kh * g->kw, P = (size_t)g->Ho * g->Wo, total = K * (size_t)nb * P;
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "im2col16: ld %zu < %d samples x %zu", ld, nb, P);
    if (!total) return SNN_OK;
    if (!x || !col) return snn_error(SNN_E_INVALID, "im2col16: NULL buffer");
    if (t == SNN_BF16) launch_im2col(be, g, nb, x, (__nv_bfloat16 *)col, ld, total);
    else launch_im2col(be, g, nb, x, (__half *)col, ld, total);
    SNN_CU_LAUNCHED("im2col16");
    return SNN_OK;
}

snn_status t_col2im(const snn_backend *be, const snn_conv_geom *g, int nb, const float *col, size_t ld, snn_dtype round,
                    float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "col2im"));
    SNN_TRY(check_geom("col2im", g, nb));
    SNN_TRY(check_round(round, "col2im"));
    const int rc = round_code(round);
    const size_t P = (size_t)g->Ho * g->Wo, total = (size_t)nb * g->C * g->H * g->W;
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "col2im: ld %zu < %d samples x %zu", ld, nb, P);
    if (!total) return SNN_OK;
    if (!dx || !col) return snn_error(SNN_E_INVALID, "col2im: NULL buffer");
    const snn_cuda_lines gr = snn_cuda_table_lines(be, (size_t)nb * g->C, (size_t)g->H * g->W);
    /* the unit-stride walk: every col offset below 2^31 too */
    if (g->sh == 1 && g->sw == 1 && fits32(total) && fits32((size_t)g->C * g->kh * g->kw * ld) && !snn_cuda_table_vec_off()) {
        const Div dC = div_make(g->C), dW = div_make(g->W);
        if (g->kh == 3 && g->kw == 3)
            col2im_s1_kernel<3, 3><<<gr.grid, gr.block, 0, stream_of(be)>>>(geo_of(g), nb, dC, dW, col, ld, rc, dx);
        else
            col2im_s1_kernel<0, 0><<<gr.grid, gr.block, 0, stream_of(be)>>>(geo_of(g), nb, dC, dW, col, ld, rc, dx);
        SNN_CU_LAUNCHED("col2im");
        return SNN_OK;
    }
    if (fits32(total) && fits32((size_t)nb * P))
        col2im_kernel<uint32_t><<<gr.grid, gr.block, 0, stream_of(be)>>>(geo_of(g), (uint32_t)nb, col, ld, rc, dx);
    else
        col2im_kernel<uint64_t><<<gr.grid, gr.block, 0, stream_of(be)>>>(geo_of(g), (uint64_t)nb, col, ld, rc, dx);
    SNN_CU_LAUNCHED("col2im");
    return SNN_OK;
}

/* ---------------------------------------------------------------- layout changes around the GEMM */

/* y[s][o][p] = round(src[o*ld + s*P + p] + b_o) (src NULL: y = bias[o]); 1-D walks, like im2col. */
/* y is stored as D: FP32 (rounded by rc) or a 16-bit type (conv_scatter16: RNE to D, rc 0);
 * the gathers read src stored as S (FP32, or a 16-bit output kept in its type). */
template <typename I, typename D = float>
__global__ void scatter_kernel(I nb, I O, I P, const float *__restrict__ src, size_t ld, const float *__restrict__ bias,
                               int rc, D *__restrict__ y) {
    const I total = nb * O * P;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I p = e % P, so = e / P, o = so % O, s = so / O;
        const float bo = bias ? bias[o] : 0.0f;
        y[e] = rn_narrow<D>(round_by(rc, src ? __fadd_rn(src[(size_t)o * ld + (size_t)s * P + p], bo) : bo));
    }
}

template <typename I, typename D = float, typename S = float>
__global__ void gather_kernel(I nb, I O, I P, const S *__restrict__ src, D *__restrict__ dst, size_t ld) {
    const I total = nb * O * P;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I p = e % P, so = e / P, o = so % O, s = so / O;
        dst[(size_t)o * ld + (size_t)s * P + p] = rn_narrow<D>(rn_widen(src[e]));
    }
}

/* The two with every index below 2^31, divisions as multiply-highs. */
template <typename D = float>
__global__ void scatter_fd_kernel(int nb, int O, int P, Div dP, Div dO, const float *__restrict__ src, size_t ld,
                                  const float *__restrict__ bias, int rc, D *__restrict__ y) {
    const int total = nb * O * P;
    for (unsigned ue = blockIdx.x * blockDim.x + threadIdx.x; ue < (unsigned)total; ue += gridDim.x * blockDim.x) {
        const int e = (int)ue;
        const int so = dv(e, dP), p = e - so * P, s = dv(so, dO), o = so - s * O;
        const float bo = bias ? bias[o] : 0.0f;
        y[e] = rn_narrow<D>(round_by(rc, src ? __fadd_rn(src[(size_t)o * ld + (size_t)s * P + p], bo) : bo));
    }
}

template <typename D, typename S = float>
__global__ void gather_fd_kernel(int nb, int O, int P, Div dP, Div dO, const S *__restrict__ src,
                                 D *__restrict__ dst, size_t ld) {
    const int total = nb * O * P;
    for (unsigned ue = blockIdx.x * blockDim.x + threadIdx.x; ue < (unsigned)total; ue += gridDim.x * blockDim.x) {
        const int e = (int)ue;
        const int so = dv(e, dP), p = e - so * P, s = dv(so, dO), o = so - s * O;
        dst[(size_t)o * ld + (size_t)s * P + p] = rn_narrow<D>(rn_widen(src[e]));
    }
}

/* The vectorised layout changes: item e covers elements [e*V, e*V + V) of y (one P-run, P % V
 * == 0), whose source run src[o*ld + s*P + p ...] is contiguous too. */
template <int V, typename D = float>
__global__ void scatter_vec_kernel(int nb, int O, int P, Div dPV, Div dO, const float *__restrict__ src, size_t ld,
                                   const float *__restrict__ bias, int rc, D *__restrict__ y) {
    typedef typename Stored<D>::T B;
    const int PV = P / V, total = nb * O * PV;
    for (unsigned ue = blockIdx.x * blockDim.x + threadIdx.x; ue < (unsigned)total; ue += gridDim.x * blockDim.x) {
        const int e = (int)ue;
        const int so = dv(e, dPV), p = (e - so * PV) * V, s = dv(so, dO), o = so - s * O;
        const float bo = bias ? bias[o] : 0.0f;
        B v[V];
        if (src) {
            float a[V];
            load_run<float, V>(src + (size_t)o * ld + (size_t)s * P + p, a);
#pragma unroll
            for (int q = 0; q < V; q++) v[q] = Stored<D>::of(round_by(rc, __fadd_rn(a[q], bo)));
        } else {
#pragma unroll
            for (int q = 0; q < V; q++) v[q] = Stored<D>::of(round_by(rc, bo));
        }
        store_run<B, V>(reinterpret_cast<B *>(y) + (size_t)e * V, v);
    }
}

template <typename D, int V, typename S = float>
__global__ void gather_vec_kernel(int nb, int O, int P, Div dPV, Div dO, const S *__restrict__ src,
                                  D *__restrict__ dst, size_t ld) {
    typedef typename Stored<D>::T B;
    const int PV = P / V, total = nb * O * PV;
    for (unsigned ue = blockIdx.x * blockDim.x + threadIdx.x; ue < (unsigned)total; ue += gridDim.x * blockDim.x) {
        const int e = (int)ue;
        const int so = dv(e, dPV), p = (e - so * PV) * V, s = dv(so, dO), o = so - s * O;
        float a[V];
        load_run<S, V>(src + (size_t)e * V, a);
        B v[V];
#pragma unroll
        for (int q = 0; q < V; q++) v[q] = Stored<D>::of(a[q]);
        store_run<B, V>(reinterpret_cast<B *>(dst) + (size_t)o * ld + (size_t)s * P + p, v);
    }
}

/* conv_scatter into y stored as D (float with rc, or 16-bit with rc 0). */
template <typename D>
void launch_scatter(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld, const float *bias,
                    int rc, D *y) {
    const size_t total = (size_t)nb * O * P;
    /* runs of V: P and ld multiples of V (ld only with a src), y aligned to V elements, src
     * to 16 bytes */
    int V = fits32(total) && !snn_cuda_table_vec_off() ? vec_width(sizeof(D), y, P, P) : 1;
    if (V > 4) V = 4;
    if (V == 4 && src && (ld % 4 != 0 || (uintptr_t)src % 16 != 0)) V = 1;
    if (V == 4) {
        scatter_vec_kernel<4, D><<<snn_cuda_table_grid(be, total / 4, 256), 256, 0, stream_of(be)>>>(
            nb, O, (int)P, div_make((int)P / 4), div_make(O), src, ld, bias, rc, y);
        return;
    }
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    if (fits32(total))
        scatter_fd_kernel<D><<<grid, 256, 0, stream_of(be)>>>(nb, O, (int)P, div_make((int)P), div_make(O), src, ld,
                                                               bias, rc, y);
    else
        scatter_kernel<uint64_t, D><<<grid, 256, 0, stream_of(be)>>>((uint64_t)nb, (uint64_t)O, (uint64_t)P, src,
                                                                             ld, bias, rc, y);
}

snn_status scatter_args(const snn_backend *be, const char *what, int nb, int O, size_t P, const float *src, size_t ld,
                        const float *bias, const void *y) {
    SNN_TRY(snn_cuda_table_check(be, what));
    if (nb < 0 || O < 0) return snn_error(SNN_E_INVALID, "%s: negative size", what);
    if (!nb || !O || !P) return SNN_OK;
    if (!y || (!src && !bias)) return snn_error(SNN_E_INVALID, "%s: NULL buffer", what);
    if (src && ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "%s: ld %zu < %d x %zu", what, ld, nb, P);
    return SNN_OK;
}

snn_status t_conv_scatter(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld,
                          const float *bias, snn_dtype round, float *y) {
    SNN_TRY(check_round(round, "conv_scatter"));
    SNN_TRY(scatter_args(be, "conv_scatter", nb, O, P, src, ld, bias, y));
    if (!nb || !O || !P) return SNN_OK;
    launch_scatter(be, nb, O, P, src, ld, bias, round_code(round), y);
    SNN_CU_LAUNCHED("conv_scatter");
    return SNN_OK;
}

snn_status t_conv_scatter16(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, const float *src, size_t ld,
                            const float *bias, void *y) {
    if (t != SNN_BF16 && t != SNN_F16) return snn_error(SNN_E_INVALID, "conv_scatter16: the type must be f16 or bf16");
    SNN_TRY(scatter_args(be, "conv_scatter16", nb, O, P, src, ld, bias, y));
    if (!nb || !O || !P) return SNN_OK;
    if (t == SNN_BF16) launch_scatter(be, nb, O, P, src, ld, bias, 0, (__nv_bfloat16 *)y);
    else launch_scatter(be, nb, O, P, src, ld, bias, 0, (__half *)y);
    SNN_CU_LAUNCHED("conv_scatter16");
    return SNN_OK;
}

template <typename D, typename S>
void launch_gather(const snn_backend *be, int nb, int O, size_t P, const S *src, D *dst, size_t ld) {
    const size_t total = (size_t)nb * O * P;
    /* runs of V: P and ld multiples of V, dst aligned to V elements, src to min(16, V
     * elements) bytes */
    int V = fits32(total) && !snn_cuda_table_vec_off() ? vec_width(sizeof(D), dst, ld, P) : 1;
    while (V >= 4 && (uintptr_t)src % (size_t)(V * sizeof(S) < 16 ? V * sizeof(S) : 16) != 0) V >>= 1;
    if (V >= 4) {
        const unsigned gv = snn_cuda_table_grid(be, total / V, 256);
        if constexpr (sizeof(D) == 2) {
            if (V == 8) {
                gather_vec_kernel<D, 8, S><<<gv, 256, 0, stream_of(be)>>>(nb, O, (int)P, div_make((int)P / 8),
                                                                          div_make(O), src, dst, ld);
                return;
            }
        }
        gather_vec_kernel<D, 4, S><<<gv, 256, 0, stream_of(be)>>>(nb, O, (int)P, div_make((int)P / 4), div_make(O),
                                                                      src, dst, ld);
        return;
    }
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    if (fits32(total))
        gather_fd_kernel<D, S><<<grid, 256, 0, stream_of(be)>>>(nb, O, (int)P, div_make((int)P), div_make(O), src,
                                                                dst, ld);
    else
        gather_kernel<uint64_t, D, S><<<grid, 256, 0, stream_of(be)>>>((uint64_t)nb, (uint64_t)O, (uint64_t)P, src,
                                                                                dst, ld);
}

snn_status gather_args(const snn_backend *be, const char *what, int nb, int O, size_t P, const void *src,
                       const void *dst, size_t ld) {
    SNN_TRY(snn_cuda_table_check(be, what));
    if (nb < 0 || O < 0) return snn_error(SNN_E_INVALID, "%s: negative size", what);
    if (!nb || !O || !P) return SNN_OK;
    if (!src || !dst) return snn_error(SNN_E_INVALID, "%s: NULL buffer", what);
    if (ld < (size_t)nb * P) return snn_error(SNN_E_SHAPE, "%s: ld %zu < %d x %zu", what, ld, nb, P);
    return SNN_OK;
}

snn_status t_conv_gather(const snn_backend *be, int nb, int O, size_t P, const float *src, float *dst, size_t ld) {
    SNN_TRY(gather_args(be, "conv_gather", nb, O, P, src, dst, ld));
    if (!nb || !O || !P) return SNN_OK;
    launch_gather(be, nb, O, P, src, dst, ld);
    SNN_CU_LAUNCHED("conv_gather");
    return SNN_OK;
}

snn_status t_conv_gather16(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, snn_dtype src_t,
                           const void *src, void *dst, size_t ld) {
    if (t != SNN_BF16 && t != SNN_F16) return snn_error(SNN_E_INVALID, "conv_gather16: the type must be f16 or bf16");
    if (src_t != SNN_F32 && src_t != t)
        return snn_error(SNN_E_INVALID, "conv_gather16: src must be stored as f32 or %s (got %s)", snn_dtype_name(t),
                         snn_dtype_name(src_t));
    SNN_TRY(gather_args(be, "conv_gather16", nb, O, P, src, dst, ld));
    if (!nb || !O || !P) return SNN_OK;
    if (t == SNN_BF16) {
        if (src_t == SNN_F32) launch_gather(be, nb, O, P, (const float *)src, (__nv_bfloat16 *)dst, ld);
        else launch_gather(be, nb, O, P, (const __nv_bfloat16 *)src, (__nv_bfloat16 *)dst, ld);
    } else {
        if (src_t == SNN_F32) launch_gather(be, nb, O, P, (const float *)src, (__half *)dst, ld);
        else launch_gather(be, nb, O, P, (const __half *)src, (__half *)dst, ld);
    }
    SNN_CU_LAUNCHED("conv_gather16");
    return SNN_OK;
}

/* ---------------------------------------------------------------- reductions */

#define BG_THREADS 256

/* Block per channel (grid-stride over channels): thread t sums elements t, t + 256, ... of
 * the channel's B*P values (b-major) in double, then a fixed tree. */
__global__ void bias_grad_kernel(size_t B, int O, size_t P, const float *__restrict__ dy, float *__restrict__ db) {
    __shared__ double part[BG_THREADS];
    const size_t n = B * P;
    for (int o = blockIdx.x; o < O; o += gridDim.x) {
        double acc = 0.0;
        for (size_t e = threadIdx.x; e < n; e += BG_THREADS) {
            const size_t b = e / P, p = e % P;
            acc += (double)dy[(b * (size_t)O + (size_t)o) * P + p];
        }
        part[threadIdx.x] = acc;
        __syncthreads();
        for (int h = BG_THREADS / 2; h > 0; h >>= 1) {
            if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0) db[o] = __fadd_rn(db[o], (float)part[0]);
        __syncthreads(); /* part is reused by the next channel */
    }
}

snn_status t_conv_bias_grad(const snn_backend *be, size_t B, int O, size_t P, const float *dy, float *db) {
    SNN_TRY(snn_cuda_table_check(be, "conv_bias_grad"));
    if (O < 0) return snn_error(SNN_E_INVALID, "conv_bias_grad: negative size");
    if (!O) return SNN_OK;
    if (!db || (B && P && !dy)) return snn_error(SNN_E_INVALID, "conv_bias_grad: NULL buffer");
    const unsigned grid = O < 65535 ? (unsigned)O : 65535u;
    bias_grad_kernel<<<grid, BG_THREADS, 0, stream_of(be)>>>(B, O, P, dy, db);
    SNN_CU_LAUNCHED("conv_bias_grad");
    return SNN_OK;
}

__global__ void sum_groups_kernel(int groups, size_t n, const float *__restrict__ part, float *__restrict__ dst) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int g = 0; g < groups; g++) acc = __fadd_rn(acc, part[(size_t)g * n + i]);
        dst[i] = __fadd_rn(dst[i], acc);
    }
}

snn_status t_sum_groups_add(const snn_backend *be, int groups, size_t n, const float *part, float *dst) {
    SNN_TRY(snn_cuda_table_check(be, "sum_groups_add"));
    if (groups < 0) return snn_error(SNN_E_INVALID, "sum_groups_add: negative group count");
    if (!n) return SNN_OK;
    if (!dst || (groups && !part)) return snn_error(SNN_E_INVALID, "sum_groups_add: NULL buffer");
    sum_groups_kernel<<<snn_cuda_table_grid(be, n, 256), 256, 0, stream_of(be)>>>(groups, n, part, dst);
    SNN_CU_LAUNCHED("sum_groups_add");
    return SNN_OK;
}

/* ---------------------------------------------------------------- transpose */

#define TR_TILE 32
#define TR_ROWS 8

/* Tile (blockIdx.y, blockIdx.x) of matrix b; the +1 column keeps the shared reads free of
 * bank conflicts. */
__global__ void transpose_kernel(size_t B, int R, int C, const float *__restrict__ x, float *__restrict__ y) {
    __shared__ float tile[TR_TILE][TR_TILE + 1];
    const size_t n = (size_t)R * (size_t)C;
    const int c0 = blockIdx.x * TR_TILE, r0 = blockIdx.y * TR_TILE;
    for (size_t b = blockIdx.z; b < B; b += gridDim.z) {
        const float *xb = x + b * n;
        float *yb = y + b * n;
        for (int k = threadIdx.y; k < TR_TILE; k += TR_ROWS) {
            const int r = r0 + k, c = c0 + (int)threadIdx.x;
            if (r < R && c < C) tile[k][threadIdx.x] = xb[(size_t)r * C + c];
        }
        __syncthreads();
        for (int k = threadIdx.y; k < TR_TILE; k += TR_ROWS) {
            const int c = c0 + k, r = r0 + (int)threadIdx.x;
            if (r < R && c < C) yb[(size_t)c * R + r] = tile[threadIdx.x][k];
        }
        __syncthreads();
    }
}

snn_status t_transpose(const snn_backend *be, size_t B, int R, int C, const float *x, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "transpose"));
    if (R < 0 || C < 0) return snn_error(SNN_E_INVALID, "transpose: negative size");
    if (!B || !R || !C) return SNN_OK;
    if (!x || !y) return snn_error(SNN_E_INVALID, "transpose: NULL buffer");
    const unsigned gx = (unsigned)((C + TR_TILE - 1) / TR_TILE), gy = (unsigned)((R + TR_TILE - 1) / TR_TILE);
    if (gy > 65535u) return snn_error(SNN_E_INVALID, "transpose: %d rows are too many", R);
    const unsigned gz = B < 65535 ? (unsigned)B : 65535u;
    transpose_kernel<<<dim3(gx, gy, gz), dim3(TR_TILE, TR_ROWS), 0, stream_of(be)>>>(B, R, C, x, y);
    SNN_CU_LAUNCHED("transpose");
    return SNN_OK;
}

/* ---------------------------------------------------------------- pooling */

/* The clipped window [*a, *b) of output o along one axis. */
__device__ __forceinline__ void window(int o, int s, int p, int k, int n, int *a, int *b) {
    const int lo = o * s - p, hi = lo + k;
    *a = lo < 0 ? 0 : lo;
    *b = hi > n ? n : hi;
}

/* The outputs [*a, *b) along one axis whose window holds input i. */
__device__ __forceinline__ void readers(int i, const Div &ds, int p, int k, int no, int *a, int *b) {
    const int t = i + p - k + 1; /* o*s >= t */
    int lo = t <= 0 ? 0 : dv(t + (int)ds.d - 1, ds);
    int hi = dv(i + p, ds) + 1; /* o*s <= i + p */
    if (hi > no) hi = no;
    *a = lo;
    *b = hi > lo ? hi : lo;
}

/* The pooling walks' index divisions: multiply-highs (cuda_fastdiv.h) for 32-bit indices,
 * the hardware division for 64-bit ones. */
template <typename I> __device__ __forceinline__ I qd(I n, const Div &d);
template <> __device__ __forceinline__ uint32_t qd<uint32_t>(uint32_t n, const Div &d) { return (uint32_t)dv((int)n, d); }
template <> __device__ __forceinline__ uint64_t qd<uint64_t>(uint64_t n, const Div &d) { return n / d.d; }

/* The divisors of a pooling geometry. */
struct PoolDiv {
    Div in_n, out_n, W, Wo, sh, sw;
};
PoolDiv pool_div(const snn_conv_geom *g) {
    PoolDiv d = {div_make(g->H * g->W), div_make(g->Ho * g->Wo), div_make(g->W), div_make(g->Wo), div_make(g->sh),
                 div_make(g->sw)};
    return d;
}

template <typename I>
__global__ void maxpool_fwd_kernel(Geo g, PoolDiv d, const float *__restrict__ x, float *__restrict__ y,
                                   int32_t *__restrict__ arg) {
    const I out_n = (I)g.Ho * (I)g.Wo, total = (I)g.C * out_n;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I pl = qd<I>(e, d.out_n), o = e - pl * out_n;
        const int oh = dv((int)o, d.Wo), ow = (int)o - oh * g.Wo;
        int h0, h1, w0, w1;
        window(oh, g.sh, g.ph, g.kh, g.H, &h0, &h1);
        window(ow, g.sw, g.pw, g.kw, g.W, &w0, &w1);
        const float *xp = x + (size_t)pl * g.H * g.W;
        float best = -INFINITY;
        int32_t a = h0 * g.W + w0;
        bool nan = false;
        for (int ih = h0; ih < h1 && !nan; ih++)
            for (int iw = w0; iw < w1; iw++) {
                const float v = xp[(size_t)ih * g.W + iw];
                if (v > best || isnan(v)) {
                    best = v;
                    a = ih * g.W + iw;
                    if (isnan(v)) {
                        nan = true;
                        break;
                    }
                }
            }
        y[e] = best;
        arg[e] = a;
    }
}

template <typename I>
__global__ void maxpool_bwd_kernel(Geo g, PoolDiv d, const float *__restrict__ dy, const int32_t *__restrict__ arg,
                                   float *__restrict__ dx) {
    const I in_n = (I)g.H * (I)g.W, total = (I)g.C * in_n;
    const size_t out_n = (size_t)g.Ho * g.Wo;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I pl = qd<I>(e, d.in_n), pix = e - pl * in_n;
        const int ih = dv((int)pix, d.W), iw = (int)pix - ih * g.W;
        int a0, a1, b0, b1;
        readers(ih, d.sh, g.ph, g.kh, g.Ho, &a0, &a1);
        readers(iw, d.sw, g.pw, g.kw, g.Wo, &b0, &b1);
        const float *gp = dy + (size_t)pl * out_n;
        const int32_t *ap = arg + (size_t)pl * out_n;
        float acc = 0.0f;
        for (int oh = a0; oh < a1; oh++)
            for (int ow = b0; ow < b1; ow++) {
                const size_t o = (size_t)oh * g.Wo + ow;
                if (ap[o] == (int32_t)pix) acc = __fadd_rn(acc, gp[o]);
            }
        dx[e] = acc;
    }
}

/* The pooling walks of cuda_conv_body.h, one output a thread. */
__global__ void maxpool_fwd_k3s2_kernel(Geo g, int planes, Div dWo, Div dHo, const float *__restrict__ x,
                                        float *__restrict__ y, int32_t *__restrict__ arg) {
    const int n = planes * g.Ho * g.Wo;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n; i += gridDim.x * blockDim.x)
        maxpool_fwd_k3s2_item(g, dWo, dHo, x, y, arg, (int)i);
}

__global__ void maxpool_bwd_k3s2_kernel(Geo g, int planes, Div dWo, Div dHo, const float *__restrict__ dy,
                                        const int32_t *__restrict__ arg, float *__restrict__ dx) {
    const int n = planes * g.Ho * g.Wo;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n; i += gridDim.x * blockDim.x)
        maxpool_bwd_k3s2_item(g, dWo, dHo, dy, arg, dx, (int)i);
}

__global__ void maxpool_bwd_tile_kernel(Geo g, int planes, Div dWo, Div dHo, const float *__restrict__ dy,
                                        const int32_t *__restrict__ arg, float *__restrict__ dx) {
    const int n = planes * g.Ho * g.Wo;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)n; i += gridDim.x * blockDim.x)
        maxpool_bwd_tile_item(g, dWo, dHo, dy, arg, dx, (int)i);
}

template <typename I>
__global__ void avgpool_fwd_kernel(Geo g, PoolDiv d, float inv, const float *__restrict__ x, float *__restrict__ y) {
    const I out_n = (I)g.Ho * (I)g.Wo, total = (I)g.C * out_n;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I pl = qd<I>(e, d.out_n), o = e - pl * out_n;
        const int oh = dv((int)o, d.Wo), ow = (int)o - oh * g.Wo;
        int h0, h1, w0, w1;
        window(oh, g.sh, g.ph, g.kh, g.H, &h0, &h1);
        window(ow, g.sw, g.pw, g.kw, g.W, &w0, &w1);
        const float *xp = x + (size_t)pl * g.H * g.W;
        float acc = 0.0f;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) acc = __fadd_rn(acc, xp[(size_t)ih * g.W + iw]);
        y[e] = __fmul_rn(acc, inv);
    }
}

template <typename I>
__global__ void avgpool_bwd_kernel(Geo g, PoolDiv d, float inv, const float *__restrict__ dy, float *__restrict__ dx) {
    const I in_n = (I)g.H * (I)g.W, total = (I)g.C * in_n;
    const size_t out_n = (size_t)g.Ho * g.Wo;
    for (I e = blockIdx.x * (I)blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
        const I pl = qd<I>(e, d.in_n), pix = e - pl * in_n;
        const int ih = dv((int)pix, d.W), iw = (int)pix - ih * g.W;
        int a0, a1, b0, b1;
        readers(ih, d.sh, g.ph, g.kh, g.Ho, &a0, &a1);
        readers(iw, d.sw, g.pw, g.kw, g.Wo, &b0, &b1);
        const float *gp = dy + (size_t)pl * out_n;
        float acc = 0.0f;
        for (int oh = a0; oh < a1; oh++)
            for (int ow = b0; ow < b1; ow++) acc = __fadd_rn(acc, __fmul_rn(gp[(size_t)oh * g.Wo + ow], inv));
        dx[e] = acc;
    }
}

/* 32-bit indices when both the input and the output element counts fit. */
inline bool pool_fits32(const snn_conv_geom *g) {
    return fits32((size_t)g->C * g->H * g->W) && fits32((size_t)g->C * g->Ho * g->Wo);
}

snn_status t_maxpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y, int32_t *argmax) {
    SNN_TRY(snn_cuda_table_check(be, "maxpool_forward"));
    SNN_TRY(check_pool("maxpool_forward", g));
    if (!x || !y || !argmax) return snn_error(SNN_E_INVALID, "maxpool_forward: NULL buffer");
    const size_t total = (size_t)g->C * g->Ho * g->Wo;
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    const PoolDiv d = pool_div(g);
    if (g->kh == 3 && g->kw == 3 && g->sh == 2 && g->sw == 2 && g->ph == 1 && g->pw == 1 && pool_fits32(g) &&
        !snn_cuda_table_vec_off()) {
        maxpool_fwd_k3s2_kernel<<<grid, 256, 0, stream_of(be)>>>(geo_of(g), g->C, div_make(g->Wo), div_make(g->Ho), x,
                                                                 y, argmax);
        SNN_CU_LAUNCHED("maxpool_forward");
        return SNN_OK;
    }
    if (pool_fits32(g)) maxpool_fwd_kernel<uint32_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), d, x, y, argmax);
    else maxpool_fwd_kernel<uint64_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), d, x, y, argmax);
    SNN_CU_LAUNCHED("maxpool_forward");
    return SNN_OK;
}

snn_status t_maxpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy, const int32_t *argmax,
                              float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "maxpool_backward"));
    SNN_TRY(check_pool("maxpool_backward", g));
    if (!dy || !dx || !argmax) return snn_error(SNN_E_INVALID, "maxpool_backward: NULL buffer");
    const size_t total = (size_t)g->C * g->H * g->W;
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    const PoolDiv d = pool_div(g);
    if (g->kh == 3 && g->kw == 3 && g->sh == 2 && g->sw == 2 && g->ph == 1 && g->pw == 1 && pool_fits32(g) &&
        (uintptr_t)dx % 8 == 0 && !snn_cuda_table_vec_off()) {
        const size_t nout = (size_t)g->C * g->Ho * g->Wo;
        maxpool_bwd_k3s2_kernel<<<snn_cuda_table_grid(be, nout, 256), 256, 0, stream_of(be)>>>(
            geo_of(g), g->C, div_make(g->Wo), div_make(g->Ho), dy, argmax, dx);
        SNN_CU_LAUNCHED("maxpool_backward");
        return SNN_OK;
    }
    if (g->sh == g->kh && g->sw == g->kw && g->ph == 0 && g->pw == 0 && g->H == g->Ho * g->kh &&
        g->W == g->Wo * g->kw && pool_fits32(g) && !snn_cuda_table_vec_off()) {
        const size_t nout = (size_t)g->C * g->Ho * g->Wo;
        maxpool_bwd_tile_kernel<<<snn_cuda_table_grid(be, nout, 256), 256, 0, stream_of(be)>>>(
            geo_of(g), g->C, div_make(g->Wo), div_make(g->Ho), dy, argmax, dx);
        SNN_CU_LAUNCHED("maxpool_backward");
        return SNN_OK;
    }
    if (pool_fits32(g)) maxpool_bwd_kernel<uint32_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), d, dy, argmax, dx);
    else maxpool_bwd_kernel<uint64_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), d, dy, argmax, dx);
    SNN_CU_LAUNCHED("maxpool_backward");
    return SNN_OK;
}

snn_status t_avgpool_forward(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y) {
    SNN_TRY(snn_cuda_table_check(be, "avgpool_forward"));
    SNN_TRY(check_pool("avgpool_forward", g));
    if (!x || !y) return snn_error(SNN_E_INVALID, "avgpool_forward: NULL buffer");
    const float inv = 1.0f / (float)(g->kh * g->kw); /* the CPU's rounded FP32 reciprocal */
    const size_t total = (size_t)g->C * g->Ho * g->Wo;
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    if (pool_fits32(g)) avgpool_fwd_kernel<uint32_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), pool_div(g), inv, x, y);
    else avgpool_fwd_kernel<uint64_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), pool_div(g), inv, x, y);
    SNN_CU_LAUNCHED("avgpool_forward");
    return SNN_OK;
}

snn_status t_avgpool_backward(const snn_backend *be, const snn_conv_geom *g, const float *dy, float *dx) {
    SNN_TRY(snn_cuda_table_check(be, "avgpool_backward"));
    SNN_TRY(check_pool("avgpool_backward", g));
    if (!dy || !dx) return snn_error(SNN_E_INVALID, "avgpool_backward: NULL buffer");
    const float inv = 1.0f / (float)(g->kh * g->kw);
    const size_t total = (size_t)g->C * g->H * g->W;
    const unsigned grid = snn_cuda_table_grid(be, total, 256);
    if (pool_fits32(g)) avgpool_bwd_kernel<uint32_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), pool_div(g), inv, dy, dx);
    else avgpool_bwd_kernel<uint64_t><<<grid, 256, 0, stream_of(be)>>>(geo_of(g), pool_div(g), inv, dy, dx);
    SNN_CU_LAUNCHED("avgpool_backward");
    return SNN_OK;
}

} // namespace

void snn_cuda_install_conv(snn_backend *be) {
    be->im2col = t_im2col;
    be->col2im = t_col2im;
    be->conv_scatter = t_conv_scatter;
    be->conv_gather = t_conv_gather;
    be->im2col16 = t_im2col16;
    be->conv_gather16 = t_conv_gather16;
    be->conv_scatter16 = t_conv_scatter16;
    be->conv_bias_grad = t_conv_bias_grad;
    be->sum_groups_add = t_sum_groups_add;
    be->transpose = t_transpose;
    be->maxpool_forward = t_maxpool_forward;
    be->maxpool_backward = t_maxpool_backward;
    be->avgpool_forward = t_avgpool_forward;
    be->avgpool_backward = t_avgpool_backward;
}
