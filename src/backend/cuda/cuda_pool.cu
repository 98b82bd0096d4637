/* Max pooling on the GPU (interface and semantics: cuda_layers.h; reference: src/nn/pool.c).
 * Every output element is written by exactly one thread (gathers, no atomics); the backward
 * sums are formed in the CPU module's order from +0, so results are bitwise equal to it. */
#include "backend/cuda/cuda_lower.h"

/* ---- MaxPool2d ----
 * Forward: one thread per output; the window is scanned row-major over its in-image taps
 * (padding is -inf, so it never wins), a strictly larger value replaces the best (first
 * maximum wins ties) and a NaN wins and ends the scan, as in src/nn/pool.c. When every tap is
 * -inf the first in-image tap is the argmax, as on the CPU. With the kernel size KT known at
 * compile time the taps are loaded together first, then scanned. */
template <int KT>
__global__ void maxpool_fwd_kernel(const float *__restrict__ x, float *__restrict__ y,
                                   uint8_t *__restrict__ arg, int B, int C, int H, int W, int k,
                                   int stride, int pad, int Ho, int Wo, Div dWo, Div dHo) {
    const int n = B * C * Ho * Wo;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int t = dv(i, dWo), ox = i - t * Wo;
        const int plane = dv(t, dHo), oy = t - plane * Ho;
        const int y0 = oy * stride - pad, x0 = ox * stride - pad;
        const float *xp = x + (size_t)plane * H * W;
        float best = -INFINITY;
        int a;
        if (KT) {
            float v[KT ? KT * KT : 1];
            bool in[KT ? KT * KT : 1];
#pragma unroll
            for (int ky = 0; ky < KT; ky++)
#pragma unroll
                for (int kx = 0; kx < KT; kx++) {
                    const int iy = y0 + ky, ix = x0 + kx, tp = ky * KT + kx;
                    in[tp] = (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W;
                    v[tp] = in[tp] ? xp[(size_t)iy * W + ix] : -INFINITY;
                }
            a = -1;
            bool stop = false;
#pragma unroll
            for (int tp = 0; tp < KT * KT; tp++) {
                if (!in[tp] || stop) continue;
                if (a < 0) a = tp; /* the first in-image tap */
                if (v[tp] > best || isnan(v[tp])) {
                    best = v[tp];
                    a = tp;
                    stop = isnan(v[tp]);
                }
            }
        } else {
            const int ky0 = y0 < 0 ? -y0 : 0, ky1 = H - y0 < k ? H - y0 : k;
            const int kx0 = x0 < 0 ? -x0 : 0, kx1 = W - x0 < k ? W - x0 : k;
            a = ky0 * k + kx0;
            for (int ky = ky0; ky < ky1; ky++) {
                const float *xr = xp + (size_t)(y0 + ky) * W + x0;
                for (int kx = kx0; kx < kx1; kx++) {
                    const float v = xr[kx];
                    if (v > best || isnan(v)) {
                        best = v;
                        a = ky * k + kx;
                        if (isnan(v)) goto done;
                    }
                }
            }
        }
    done:
        y[i] = best;
        arg[i] = (uint8_t)a;
    }
}

/* Forward of the k3 s2 p1 pool (the Spikformer SPS's) with W a multiple of 4: one thread per
 * pair of outputs (oy, 2px), (oy, 2px + 1), whose windows span input columns 4px - 1 ..
 * 4px + 3: per tap row one aligned float4 and one scalar (the previous float4's last, a
 * cache hit) instead of 9 scalar loads per output; y and arg stored in pairs. The scan is
 * the general kernel's (same taps, same order, same tie and NaN rules). */
__device__ __forceinline__ void pool_scan9(const float (&v)[9], const bool (&in)[9], float &best,
                                           int &a) {
    best = -INFINITY;
    a = -1;
    bool stop = false;
#pragma unroll
    for (int tp = 0; tp < 9; tp++) {
        if (!in[tp] || stop) continue;
        if (a < 0) a = tp; /* the first in-image tap */
        if (v[tp] > best || isnan(v[tp])) {
            best = v[tp];
            a = tp;
            stop = isnan(v[tp]);
        }
    }
}

__global__ void maxpool_fwd_k3s2_pair_kernel(const float *__restrict__ x, float *__restrict__ y,
                                             uint8_t *__restrict__ arg, int B, int C, int H,
                                             int W, int Ho, int Wo, Div dWp, Div dHo) {
    const int Wp = Wo >> 1, n = B * C * Ho * Wp;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int t = dv(i, dWp), px = i - t * Wp; /* t = plane*Ho + oy */
        const int plane = dv(t, dHo), oy = t - plane * Ho;
        const float *xp = x + (size_t)plane * H * W + 4 * px;
        float va[9], vb[9];
        bool ia[9], ib[9];
#pragma unroll
        for (int ky = 0; ky < 3; ky++) {
            const int iy = 2 * oy - 1 + ky;
            const bool row = (unsigned)iy < (unsigned)H, left = row && px > 0;
            float4 f = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            if (row) f = *(const float4 *)(xp + (size_t)iy * W);
            va[ky * 3] = left ? xp[(size_t)iy * W - 1] : -INFINITY;
            va[ky * 3 + 1] = f.x;
            va[ky * 3 + 2] = vb[ky * 3] = f.y;
            vb[ky * 3 + 1] = f.z;
            vb[ky * 3 + 2] = f.w;
            ia[ky * 3] = left;
            ia[ky * 3 + 1] = ia[ky * 3 + 2] = ib[ky * 3] = ib[ky * 3 + 1] = ib[ky * 3 + 2] = row;
        }
        float ba, bb;
        int aa, ab;
        pool_scan9(va, ia, ba, aa);
        pool_scan9(vb, ib, bb, ab);
        const size_t o = (size_t)t * Wo + 2 * px;
        *(float2 *)(y + o) = make_float2(ba, bb);
        *(uchar2 *)(arg + o) = make_uchar2((unsigned char)aa, (unsigned char)ab);
    }
}

/* Backward: one thread per input element sums dy over the windows that contain it and whose
 * argmax is it. Windows oy with oy*stride - pad <= y <= oy*stride - pad + k - 1, visited in
 * increasing output order: the order in which the CPU module scatters. NC: at most this many
 * windows per dimension (ceil(k / stride), 0 = not known at compile time); then the loops
 * unroll, every candidate's arg and dy load together and a non-matching window adds +0.0f
 * (a no-op, see col2im). */
template <int NC>
__global__ void maxpool_bwd_kernel(const float *__restrict__ dy, const uint8_t *__restrict__ arg,
                                   float *__restrict__ dx, int B, int C, int H, int W, int k,
                                   int stride, int pad, int Ho, int Wo, Div dW, Div dH, Div ds) {
    const int n = B * C * H * W;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int t = dv(i, dW), xq = i - t * W;
        const int plane = dv(t, dH), y = t - plane * H;
        const int ly = y + pad - k + 1, lx = xq + pad - k + 1;
        const int oy0 = ly <= 0 ? 0 : dv(ly + stride - 1, ds);
        const int ox0 = lx <= 0 ? 0 : dv(lx + stride - 1, ds);
        int oy1 = dv(y + pad, ds), ox1 = dv(xq + pad, ds); /* inclusive */
        if (oy1 > Ho - 1) oy1 = Ho - 1;
        if (ox1 > Wo - 1) ox1 = Wo - 1;
        const size_t base = (size_t)plane * Ho * Wo;
        float acc = 0.0f;
        if (NC) {
#pragma unroll
            for (int a = 0; a < NC; a++)
#pragma unroll
                for (int b = 0; b < NC; b++) {
                    const int oy = oy0 + a, ox = ox0 + b;
                    const bool ok = oy <= oy1 && ox <= ox1;
                    const size_t o = base + (size_t)oy * Wo + ox;
                    const int want = (y - (oy * stride - pad)) * k + (xq - (ox * stride - pad));
                    const int got = ok ? arg[o] : -1;
                    const float g = ok ? dy[o] : 0.0f;
                    acc += got == want ? g : 0.0f;
                }
        } else {
            for (int oy = oy0; oy <= oy1; oy++)
                for (int ox = ox0; ox <= ox1; ox++) {
                    const size_t o = base + (size_t)oy * Wo + ox;
                    const int want = (y - (oy * stride - pad)) * k + (xq - (ox * stride - pad));
                    if (arg[o] == want) acc += dy[o];
                }
        }
        dx[i] = acc;
    }
}

/* Backward of the k3 s2 p1 pool (the Spikformer SPS's): window w covers inputs 2w-1..2w+1,
 * so input 2w is in window w alone and 2w+1 in windows w and w+1. One thread per window
 * (oy, ox) writes the 2x2 inputs (2oy + a, 2ox + b) from the 4 windows (oy..oy+1, ox..ox+1):
 * a quarter of the general kernel's loads and index work, and paired stores. Sums are
 * formed as there: from +0, windows in increasing output order. */
__global__ void maxpool_bwd_k3s2_kernel(const float *__restrict__ dy,
                                        const uint8_t *__restrict__ arg, float *__restrict__ dx,
                                        int B, int C, int H, int W, int Ho, int Wo, Div dWo,
                                        Div dHo) {
    const int n = B * C * Ho * Wo;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int t = dv(i, dWo), ox = i - t * Wo;
        const int plane = dv(t, dHo), oy = t - plane * Ho;
        const bool r1 = oy + 1 < Ho, c1 = ox + 1 < Wo;
        const float g00 = dy[i], g01 = c1 ? dy[i + 1] : 0.0f;
        const float g10 = r1 ? dy[i + Wo] : 0.0f, g11 = r1 && c1 ? dy[i + Wo + 1] : 0.0f;
        const int a00 = arg[i], a01 = c1 ? arg[i + 1] : -1;
        const int a10 = r1 ? arg[i + Wo] : -1, a11 = r1 && c1 ? arg[i + Wo + 1] : -1;
        /* tap index ky*3 + kx of input (2oy + a, 2ox + b) in each window that holds it */
        float v00 = 0.0f, v01 = 0.0f, v10 = 0.0f, v11 = 0.0f;
        v00 += a00 == 4 ? g00 : 0.0f;
        v01 += a00 == 5 ? g00 : 0.0f;
        v01 += a01 == 3 ? g01 : 0.0f;
        v10 += a00 == 7 ? g00 : 0.0f;
        v10 += a10 == 1 ? g10 : 0.0f;
        v11 += a00 == 8 ? g00 : 0.0f;
        v11 += a01 == 6 ? g01 : 0.0f;
        v11 += a10 == 2 ? g10 : 0.0f;
        v11 += a11 == 0 ? g11 : 0.0f;
        const int y = 2 * oy, xq = 2 * ox;
        float *d = dx + ((size_t)plane * H + y) * W + xq;
        const bool xr = xq + 1 < W, yr = y + 1 < H;
        if (xr && !(W & 1)) { /* even W: the pair is 8-byte aligned */
            *(float2 *)d = make_float2(v00, v01);
            if (yr) *(float2 *)(d + W) = make_float2(v10, v11);
        } else {
            d[0] = v00;
            if (xr) d[1] = v01;
            if (yr) {
                d[W] = v10;
                if (xr) d[W + 1] = v11;
            }
        }
    }
}

static snn_status check_pool(const char *what, int B, int C, int H, int W, int k, int stride,
                             int pad) {
    SNN_TRY(check_geom(what, B, C, H, W, k, stride, pad));
    if (k * k > 255 || pad > k / 2)
        return snn_error(SNN_E_INVALID,
                         "%s needs kernel*kernel <= 255 and padding <= kernel/2 (got kernel=%d "
                         "padding=%d)",
                         what, k, pad);
    return SNN_OK;
}

extern "C" snn_status snn_cuda_maxpool2d_forward(snn_cuda *c, const float *x, float *y,
                                                 uint8_t *arg, int B, int C, int H, int W, int k,
                                                 int stride, int pad) {
    SNN_TRY(check_pool("maxpool2d_forward", B, C, H, W, k, stride, pad));
    if (!c || !x || !y || !arg)
        return snn_error(SNN_E_INVALID, "maxpool2d_forward needs a context, x, y and arg");
    const int Ho = out_size(H, k, stride, pad), Wo = out_size(W, k, stride, pad);
    const size_t n = (size_t)B * C * Ho * Wo;
    const unsigned grid = capped_grid(c, n, 256, 32);
    const Div dWo = div_make(Wo), dHo = div_make(Ho);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (k == 3 && stride == 2 && pad == 1 && W % 4 == 0 && ((uintptr_t)x & 15) == 0 &&
        ((uintptr_t)y & 7) == 0 && ((uintptr_t)arg & 1) == 0) { /* then Wo = W / 2, even */
        const unsigned g2 = capped_grid(c, n / 2, 256, 32);
        maxpool_fwd_k3s2_pair_kernel<<<g2, 256, 0, st>>>(x, y, arg, B, C, H, W, Ho, Wo,
                                                         div_make(Wo / 2), dHo);
        SNN_CU_LAUNCHED("maxpool2d_forward");
        return SNN_OK;
    }
#define MPF(KT)                                                                                  \
    maxpool_fwd_kernel<KT><<<grid, 256, 0, st>>>(x, y, arg, B, C, H, W, k, stride, pad, Ho, Wo,   \
                                                 dWo, dHo)
    if (k == 3) MPF(3);
    else if (k == 2) MPF(2);
    else MPF(0);
#undef MPF
    SNN_CU_LAUNCHED("maxpool2d_forward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_maxpool2d_backward(snn_cuda *c, const float *dy, const uint8_t *arg,
                                                  float *dx, int B, int C, int H, int W, int k,
                                                  int stride, int pad) {
    SNN_TRY(check_pool("maxpool2d_backward", B, C, H, W, k, stride, pad));
    if (!c || !dy || !arg || !dx)
        return snn_error(SNN_E_INVALID, "maxpool2d_backward needs a context, dy, arg and dx");
    const int Ho = out_size(H, k, stride, pad), Wo = out_size(W, k, stride, pad);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (k == 3 && stride == 2 && pad == 1) {
        const unsigned grid = capped_grid(c, (size_t)B * C * Ho * Wo, 256, 32);
        maxpool_bwd_k3s2_kernel<<<grid, 256, 0, st>>>(dy, arg, dx, B, C, H, W, Ho, Wo,
                                                      div_make(Wo), div_make(Ho));
        SNN_CU_LAUNCHED("maxpool2d_backward");
        return SNN_OK;
    }
    const size_t n = (size_t)B * C * H * W;
    const unsigned grid = capped_grid(c, n, 256, 32);
    const Div dW = div_make(W), dH = div_make(H), ds = div_make(stride);
    const int nc = (k + stride - 1) / stride; /* windows per dimension that hold a pixel */
#define MPB(NC)                                                                                  \
    maxpool_bwd_kernel<NC><<<grid, 256, 0, st>>>(dy, arg, dx, B, C, H, W, k, stride, pad, Ho, Wo, \
                                                 dW, dH, ds)
    if (nc == 1) MPB(1);
    else if (nc == 2) MPB(2);
    else if (nc == 3) MPB(3);
    else MPB(0);
#undef MPB
    SNN_CU_LAUNCHED("maxpool2d_backward");
    return SNN_OK;
}
