/* The bodies of convolution and pooling walks of the CUDA table (cuda_table_conv.cu) as
 * __host__ __device__ functions of one work item, so that tests/cuda/test_cuda_emul_conv.cu runs
 * them on the CPU, item after item, against the CPU table's entries: their indexing, vector
 * packing and edge handling are checked with nvcc and no GPU (as cuda_neuron_body.h does for
 * the neuron kernels). The kernels are grid-stride loops over these bodies.
 * Private to the CUDA backend and its tests. */
#ifndef SNN_CUDA_CONV_BODY_H
#define SNN_CUDA_CONV_BODY_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_fastdiv.h"
#include "backend/cuda/cuda_rn.h"


/* A convolution or pooling geometry as kernel arguments (snn_conv_geom's fields). */
struct Geo {
    int C, H, W, kh, kw, sh, sw, ph, pw, Ho, Wo;
};

/* The stored bits of an FP32 value in type O. */
template <typename O> struct Stored;
template <> struct Stored<float> {
    typedef uint32_t T;
    static SNN_HD T of(float v) {
        T u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
};
template <> struct Stored<__nv_bfloat16> {
    typedef uint16_t T;
    static SNN_HD T of(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
template <> struct Stored<__half> {
    typedef uint16_t T;
    static SNN_HD T of(float v) { return __half_as_ushort(__float2half_rn(v)); }
};

/* One aligned store of V elements of bits B (2 to 16 bytes). */
template <typename B, int V> SNN_HD void store_run(B *dst, const B (&v)[V]) {
    constexpr int bytes = V * (int)sizeof(B);
    static_assert(bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16, "store of 2 to 16 bytes");
    if constexpr (bytes == 16) {
        uint4 u;
        memcpy(&u, v, 16);
        *reinterpret_cast<uint4 *>(dst) = u;
    } else if constexpr (bytes == 8) {
        uint2 u;
        memcpy(&u, v, 8);
        *reinterpret_cast<uint2 *>(dst) = u;
    } else if constexpr (bytes == 4) {
        uint32_t u;
        memcpy(&u, v, 4);
        *reinterpret_cast<uint32_t *>(dst) = u;
    } else {
        *dst = v[0];
    }
}

/* The divisors of im2col's vectorised walk. */
struct Im2colDiv {
    Div PV, nb, kk, kw, Wo;
};

/* im2col, item e = (r*nb + s)*(P/V) + q (P = H'W', P % V == 0, ld % V == 0, col aligned to V
 * elements, every index below 2^31): writes col[r*ld + s*P + qV + u] for u < V, outputs
 * qV..qV+V-1 of the flattened output plane of sample s, tap r = (c*kh + i)*kw + j. A run
 * may cross into the next output row when W' is not a multiple of V. */
template <typename O, int V>
SNN_HD void im2col_vec_item(const Geo &g, int nb, const Im2colDiv &d, const float *x, O *col, size_t ld, int e) {
    typedef typename Stored<O>::T B;
    const int P = g.Ho * g.Wo, PV = P / V, kk = g.kh * g.kw;
    const size_t plane = (size_t)g.H * g.W;
    const int line = dv(e, d.PV), p0 = (e - line * PV) * V;
    const int r = dv(line, d.nb), s = line - r * nb;
    const int c = dv(r, d.kk), t = r - c * kk;
    const int i = dv(t, d.kw), j = t - i * g.kw;
    int oh = dv(p0, d.Wo), ow = p0 - oh * g.Wo;
    const float *xc = x + ((size_t)s * g.C + (size_t)c) * plane;
    B v[V];
#pragma unroll
    for (int u = 0; u < V; u++) {
        const int ih = oh * g.sh - g.ph + i, iw = ow * g.sw - g.pw + j;
        v[u] = Stored<O>::of((unsigned)ih < (unsigned)g.H && (unsigned)iw < (unsigned)g.W ? xc[ih * g.W + iw] : 0.0f);
        if (++ow == g.Wo) {
            ow = 0;
            ++oh;
        }
    }
    store_run<B, V>(reinterpret_cast<B *>(col) + (size_t)r * ld + (size_t)s * P + p0, v);
}

/* maxpool_forward for a 3 x 3 window, stride 2, padding 1, output i of `planes` planes
 * (32-bit indices): the taps unrolled, visited in row-major order over the clipped window with
 * the CPU's rule (a larger value or the first NaN wins; the argmax starts at the window's first
 * pixel). */
SNN_HD void maxpool_fwd_k3s2_item(const Geo &g, const Div &dWo, const Div &dHo, const float *x, float *y,
                                     int32_t *arg, int i) {
    const int Ho = g.Ho, Wo = g.Wo, H = g.H, W = g.W;
    const int t = dv(i, dWo), ox = i - t * Wo;
    const int pl = dv(t, dHo), oy = t - pl * Ho;
    (void)Ho;
    const int h0 = 2 * oy - 1 < 0 ? 0 : 2 * oy - 1, w0 = 2 * ox - 1 < 0 ? 0 : 2 * ox - 1;
    const float *xp = x + (size_t)pl * H * W;
    float v[9];
    bool in[9];
#pragma unroll
    for (int ky = 0; ky < 3; ky++)
#pragma unroll
        for (int kx = 0; kx < 3; kx++) {
            const int ih = 2 * oy - 1 + ky, iw = 2 * ox - 1 + kx;
            in[ky * 3 + kx] = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
            v[ky * 3 + kx] = in[ky * 3 + kx] ? xp[ih * W + iw] : 0.0f;
        }
    float best = -INFINITY;
    int32_t a = h0 * W + w0;
    bool nan = false;
#pragma unroll
    for (int q = 0; q < 9; q++) {
        const bool qnan = v[q] != v[q];
        if (in[q] && !nan && (v[q] > best || qnan)) {
            best = v[q];
            a = (2 * oy - 1 + q / 3) * W + (2 * ox - 1 + q % 3);
            nan = qnan;
        }
    }
    y[i] = best;
    arg[i] = a;
}

/* maxpool_backward for a 3 x 3 window, stride 2, padding 1, output i (32-bit indices): the
 * thread of output (oy, ox) writes the 2 x 2 inputs (2oy + a, 2ox + b), which only the windows
 * (oy..oy+1, ox..ox+1) can hold: (2oy, 2ox) lies in window (oy, ox) alone, (2oy, 2ox + 1) also
 * in (oy, ox + 1), (2oy + 1, 2ox) also in (oy + 1, ox), and (2oy + 1, 2ox + 1) in all four.
 * Each sum starts from +0.0f and takes the windows in increasing output order, as the general
 * walk does; a window whose argmax is another input adds +0.0f, which changes no bits (the
 * sum is never -0). Every input is written once: H <= 2 H', W <= 2 W'. pair: W even and dx
 * 8-byte aligned (two-float stores). */
SNN_HD void maxpool_bwd_k3s2_item(const Geo &g, const Div &dWo, const Div &dHo, const float *dy,
                                     const int32_t *arg, float *dx, int i) {
    const int Ho = g.Ho, Wo = g.Wo, H = g.H, W = g.W;
    const int t = dv(i, dWo), ox = i - t * Wo;
    const int pl = dv(t, dHo), oy = t - pl * Ho;
    const bool r1 = oy + 1 < Ho, c1 = ox + 1 < Wo;
    const float g00 = dy[i], g01 = c1 ? dy[i + 1] : 0.0f;
    const float g10 = r1 ? dy[i + Wo] : 0.0f, g11 = r1 && c1 ? dy[i + Wo + 1] : 0.0f;
    const int32_t a00 = arg[i], a01 = c1 ? arg[i + 1] : -1;
    const int32_t a10 = r1 ? arg[i + Wo] : -1, a11 = r1 && c1 ? arg[i + Wo + 1] : -1;
    const int y = 2 * oy, xq = 2 * ox;
    const int32_t p00 = y * W + xq, p01 = p00 + 1, p10 = p00 + W, p11 = p10 + 1;
    float v00 = 0.0f, v01 = 0.0f, v10 = 0.0f, v11 = 0.0f;
    v00 = rn_fadd(v00, a00 == p00 ? g00 : 0.0f);
    v01 = rn_fadd(v01, a00 == p01 ? g00 : 0.0f);
    v01 = rn_fadd(v01, a01 == p01 ? g01 : 0.0f);
    v10 = rn_fadd(v10, a00 == p10 ? g00 : 0.0f);
    v10 = rn_fadd(v10, a10 == p10 ? g10 : 0.0f);
    v11 = rn_fadd(v11, a00 == p11 ? g00 : 0.0f);
    v11 = rn_fadd(v11, a01 == p11 ? g01 : 0.0f);
    v11 = rn_fadd(v11, a10 == p11 ? g10 : 0.0f);
    v11 = rn_fadd(v11, a11 == p11 ? g11 : 0.0f);
    float *d = dx + ((size_t)pl * H + y) * W + xq;
    const bool xr = xq + 1 < W, yr = y + 1 < H;
    if (xr && !(W & 1)) { /* even W: the pair is 8-byte aligned (the launcher checks dx) */
        *reinterpret_cast<float2 *>(d) = make_float2(v00, v01);
        if (yr) *reinterpret_cast<float2 *>(d + W) = make_float2(v10, v11);
    } else {
        d[0] = v00;
        if (xr) d[1] = v01;
        if (yr) {
            d[W] = v10;
            if (xr) d[W + 1] = v11;
        }
    }
}

/* maxpool_backward for windows that tile the input exactly (stride = kernel, no padding,
 * H = H' kh, W = W' kw), output i: every input lies in one window, so the thread of an
 * output writes its kh x kw inputs: +0.0f plus dy where the argmax is that input, +0.0f plus
 * +0.0f elsewhere: the general walk's sums from +0.0f. */
SNN_HD void maxpool_bwd_tile_item(const Geo &g, const Div &dWo, const Div &dHo, const float *dy,
                                     const int32_t *arg, float *dx, int i) {
    const int Ho = g.Ho, Wo = g.Wo, W = g.W;
    const int t = dv(i, dWo), ox = i - t * Wo;
    const int pl = dv(t, dHo), oy = t - pl * Ho;
    const float gv = dy[i];
    const int32_t a = arg[i];
    float *d = dx + (size_t)pl * g.H * W;
    for (int ky = 0; ky < g.kh; ky++) {
        const int row = (oy * g.kh + ky) * W + ox * g.kw;
        for (int kx = 0; kx < g.kw; kx++) d[row + kx] = rn_fadd(0.0f, a == row + kx ? gv : 0.0f);
    }
}

#endif
