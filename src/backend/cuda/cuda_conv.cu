/* Convolution lowering on the GPU (interface and semantics: cuda_layers.h; references:
 * src/backend/cpu/cpu_im2col.c, src/nn/conv2d.c). Max pooling is in cuda_pool.cu.
 *
 * Every kernel writes each output element from exactly one thread (gathers, no atomics), so
 * results do not depend on the launch shape. Where a sum is formed (col2im) the terms are
 * added in the CPU code's order starting from 0, so the results are bitwise equal to the CPU
 * modules'. Index arithmetic is 32-bit: sizes are validated to keep
 * every per-tensor element count below 2^31 (col offsets, which can be larger, use size_t). */
#include "backend/cuda/cuda_lower.h"

/* ---- im2col ----
 * Block (bx, by): threadIdx.y picks the output pixel (row of col), threadIdx.x walks the
 * row's columns with step bx, so a warp writes consecutive columns (coalesced) and the
 * neighbouring pixels of a block read overlapping input (cache hits). The column index
 * j = (c*k + ky)*k + kx is split once per thread and then advanced by the step with carries,
 * keeping divisions out of the inner loop. */
template <typename T>
__global__ void im2col_kernel(T *__restrict__ col, int ldcol, const float *__restrict__ x, int B,
                              int C, int H, int W,
                              int k, int stride, int pad, int Ho, int Wo, Div dP, Div dWo) {
    const int kk = k * k, P = Ho * Wo, rows = B * P;
    const int j0 = threadIdx.x, step = blockDim.x;
    const int c0 = j0 / kk, ky0 = (j0 % kk) / k, kx0 = j0 % k;
    const int dc = step / kk, dky = (step % kk) / k, dkx = step % k;
    const size_t plane = (size_t)H * W;
    for (int row = blockIdx.x * blockDim.y + threadIdx.y; row < rows;
         row += gridDim.x * blockDim.y) {
        const int b = dv(row, dP), pix = row - b * P;
        const int oy = dv(pix, dWo), ox = pix - oy * Wo;
        const int iy0 = oy * stride - pad, ix0 = ox * stride - pad;
        const float *xb = x + (size_t)b * C * plane;
        T *out = col + (size_t)row * ldcol;
        int c = c0, ky = ky0, kx = kx0;
        for (int j = j0; j < ldcol; j += step) {
            const int iy = iy0 + ky, ix = ix0 + kx;
            float v = 0.0f; /* padding taps and the columns past C*k*k */
            if (c < C && (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W)
                v = xb[(size_t)c * plane + (size_t)iy * W + ix];
            out[j] = Io<T>::st(v);
            /* j += step as (c, ky, kx) digits: dkx, dky < k, so one carry each suffices */
            kx += dkx;
            if (kx >= k) { kx -= k; ky++; }
            ky += dky;
            if (ky >= k) { ky -= k; c++; }
            c += dc;
        }
    }
}

/* The tiled form, used when the input rows fit in shared memory: one block per (sample,
 * output row oy, chunk of CC channels). It first copies the k input rows that oy reads, for
 * its channels, into shared memory with coalesced reads, zero-filled where the taps fall in
 * the padding (tile[cc][ky][xx], xx = input column + pad, rows Wpp >= W + 2 pad apart, Wpp
 * odd), then writes the pixel rows' column segments [c0*k*k, (c0+CC)*k*k) (plus the zero
 * columns up to ldcol in the last chunk): with one chunk and ldcol = C*k*k this is one
 * contiguous stretch of Wo*ldcol outputs. The gather above re-reads every input value from
 * cache k*k times, with a warp's loads spread over about a dozen cache lines.
 *
 * VEC: each thread writes V = 16 / sizeof(T) consecutive columns of one pixel with one
 * 16-byte store (needs ldcol, every segment start and the base 16-byte aligned: checked by
 * the launcher). A warp covers 4 consecutive groups x 8 consecutive pixels: its stores fill
 * whole 32-byte sectors, and its shared-memory reads of one tap run along the pixels
 * (consecutive banks) instead of down the channels (the same bank for k = 1). */
#define IM2COL_SMEM_FLOATS 12288 /* 48 KiB at most: no opt-in needed */
template <typename T> struct Vec16 {
    static constexpr int V = 16 / (int)sizeof(T);
    union U {
        uint4 u;
        T t[V];
    };
};

template <typename T, bool VEC>
__global__ void im2col_tile_kernel(T *__restrict__ col, int ldcol, const float *__restrict__ x,
                                   int C, int H, int W, int k, int stride, int pad, int Ho, int Wo,
                                   int Wpp, int CC, int nchunk, Div d_seg, Div d_seg_last,
                                   Div d_kk, Div d_k, Div d_wp, Div d_gt, Div d_gt_last) {
    extern __shared__ float tile[]; /* CC * k * Wpp floats */
    const int Wp = W + 2 * pad, kk = k * k, K = C * kk;
    const int rowblk = blockIdx.x / nchunk, chunk = blockIdx.x - rowblk * nchunk;
    const int b = rowblk / Ho, oy = rowblk - b * Ho; /* rowblk = b*Ho + oy */
    const int c0 = chunk * CC, cn = min(CC, C - c0);
    const int iy0 = oy * stride - pad;
    const float *xb = x + ((size_t)b * C + c0) * H * W;
    const int tile_n = cn * k * Wp;
    for (int e = threadIdx.x; e < tile_n; e += blockDim.x) {
        const int r = dv(e, d_wp), xx = e - r * Wp; /* r = cc*k + ky */
        const int cc = dv(r, d_k), ky = r - cc * k;
        const int iy = iy0 + ky, ix = xx - pad;
        tile[r * Wpp + xx] = (unsigned)iy < (unsigned)H && (unsigned)ix < (unsigned)W
                                 ? xb[((size_t)cc * H + iy) * W + ix]
                                 : 0.0f;
    }
    __syncthreads();
    const bool last = chunk == nchunk - 1;
    const int taps = cn * kk, seg = taps + (last ? ldcol - K : 0);
    /* pixel (oy, ox) is row rowblk*Wo + ox of col */
    T *out = col + (size_t)rowblk * Wo * ldcol + (size_t)c0 * kk;
    if (VEC) {
        constexpr int V = Vec16<T>::V;
        const Div dgt = last ? d_gt_last : d_gt;
        const int ngroups = seg / V, ngt = (int)dgt.d; /* ngt = ceil(ngroups / 4) */
        const int items = ((Wo + 7) >> 3) * ngt * 32;
        for (int e = threadIdx.x; e < items; e += blockDim.x) {
            const int w = e & 31, tl = e >> 5;
            const int ot = dv(tl, dgt), gt = tl - ot * ngt;
            const int ox = ot * 8 + (w & 7), gi = gt * 4 + (w >> 3);
            if (ox >= Wo || gi >= ngroups) continue;
            const int jj = gi * V;
            int cc = dv(jj, d_kk), t = jj - cc * kk;
            int ky = dv(t, d_k), kx = t - ky * k;
            const float *tp = tile + ox * stride;
            typename Vec16<T>::U u;
#pragma unroll
            for (int i = 0; i < V; i++) {
                u.t[i] = Io<T>::st(jj + i < taps ? tp[(cc * k + ky) * Wpp + kx] : 0.0f);
                if (++kx == k) {
                    kx = 0;
                    if (++ky == k) { ky = 0; cc++; }
                }
            }
            *(uint4 *)(out + (size_t)ox * ldcol + jj) = u.u;
        }
        return;
    }
    const Div ds = last ? d_seg_last : d_seg;
    const int total = Wo * seg;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int ox = dv(e, ds), jj = e - ox * seg;
        float v = 0.0f;
        if (jj < taps) {
            const int cc = dv(jj, d_kk), t = jj - cc * kk;
            const int ky = dv(t, d_k), kx = t - ky * k;
            v = tile[(cc * k + ky) * Wpp + ox * stride + kx];
        }
        out[(size_t)ox * ldcol + jj] = Io<T>::st(v);
    }
}

template <typename T>
static void im2col_launch(snn_cuda *c, T *col, int ldcol, const float *x, int B, int C, int H,
                          int W, int k, int stride, int pad, int Ho, int Wo) {
    cudaStream_t st = snn_cuda_stream_of(c);
    const int Wpp = (W + 2 * pad) | 1; /* odd row pitch: the rows' taps fall in other banks */
    const int row_floats = k * Wpp, kk = k * k, K = C * kk;
    constexpr int V = Vec16<T>::V;
    int CC = row_floats <= IM2COL_SMEM_FLOATS ? IM2COL_SMEM_FLOATS / row_floats : 0;
    if (CC > C) CC = C;
    /* several chunks: whole groups of 8 channels keep every segment start 16-byte aligned */
    if (CC < C && CC >= 8) CC &= ~7;
    const int nchunk = CC ? (C + CC - 1) / CC : 0;
    if (CC && fits_int((long long)B * Ho * nchunk)) {
        const int last_taps = (C - (nchunk - 1) * CC) * kk;
        const int seg = nchunk > 1 ? CC * kk : ldcol, seg_last = last_taps + ldcol - K;
        const bool vec = ldcol % V == 0 && seg % V == 0 && seg_last % V == 0 &&
                         ((uintptr_t)col & 15) == 0;
        const size_t smem = (size_t)CC * row_floats * sizeof(float);
        const unsigned grid = (unsigned)((size_t)B * Ho * nchunk);
        /* ceil(groups / 4); at least 1 (the scalar path, where seg < V, does not use them) */
        const int gt = (seg / V + 3) / 4, gt_last = (seg_last / V + 3) / 4;
        const Div dgt = div_make(gt > 0 ? gt : 1), dgt_last = div_make(gt_last > 0 ? gt_last : 1);
#define I2C(VEC)                                                                                 \
    im2col_tile_kernel<T, VEC><<<grid, 256, smem, st>>>(                                         \
        col, ldcol, x, C, H, W, k, stride, pad, Ho, Wo, Wpp, CC, nchunk, div_make(seg),         \
        div_make(seg_last), div_make(kk), div_make(k), div_make(W + 2 * pad), dgt, dgt_last)
        if (vec) I2C(true);
        else I2C(false);
#undef I2C
        return;
    }
    unsigned bx = (unsigned)((ldcol + 31) / 32 * 32);
    if (bx > 256) bx = 256;
    const unsigned by = 256 / bx;
    const unsigned grid = capped_grid(c, (size_t)B * Ho * Wo, by, 32);
    im2col_kernel<T><<<grid, dim3(bx, by), 0, st>>>(col, ldcol, x, B, C, H, W, k, stride, pad, Ho,
                                                    Wo, div_make(Ho * Wo), div_make(Wo));
}

extern "C" snn_status snn_cuda_im2col(snn_cuda *c, snn_dtype col_type, void *col, int ldcol,
                                      const float *x, int B, int C, int H, int W, int k,
                                      int stride, int pad) {
    SNN_TRY(check_geom("im2col", B, C, H, W, k, stride, pad));
    SNN_TRY(check_type16("im2col", col_type));
    if (!c || !col || !x) return snn_error(SNN_E_INVALID, "im2col needs a context, col and x");
    const int K = C * k * k, Ho = out_size(H, k, stride, pad), Wo = out_size(W, k, stride, pad);
    if (ldcol < K)
        return snn_error(SNN_E_INVALID, "im2col: ldcol %d is smaller than C*k*k = %d", ldcol, K);
    if (!fits_int((long long)B * Ho * Wo))
        return snn_error(SNN_E_INVALID, "im2col: %d output pixels are too many", B * Ho * Wo);
    switch (col_type) {
    case SNN_F32:
        im2col_launch<float>(c, (float *)col, ldcol, x, B, C, H, W, k, stride, pad, Ho, Wo);
        break;
    case SNN_BF16:
        im2col_launch<__nv_bfloat16>(c, (__nv_bfloat16 *)col, ldcol, x, B, C, H, W, k, stride,
                                     pad, Ho, Wo);
        break;
    default:
        im2col_launch<__half>(c, (__half *)col, ldcol, x, B, C, H, W, k, stride, pad, Ho, Wo);
        break;
    }
    SNN_CU_LAUNCHED("im2col");
    return SNN_OK;
}

/* ---- col2im: dx[b][c][y][x] gathers the (pixel, tap) entries that read it. Output pixel
 * oy reads row oy*stride - pad + ky, so input row y is read by tap ky from
 * oy = (y + pad - ky) / stride when that division is exact and 0 <= oy < Ho. Taps are
 * visited ky-major, kx-minor: the CPU col2im's order of additions. A sum starts at +0 and
 * is never -0, so skipping a tap equals adding +0.0f. R: the type the result is rounded to
 * and stored back as FP32 (float = none; a 16-bit layer's input gradient is 16-bit). ---- */
template <typename R> __device__ __forceinline__ float round_as(float v) {
    /* + 0.0f turns -0 into +0, as the runner's separate rounding pass (which added a
     * missing bias as 0.0f) did: the fused paths give the same bits */
    return Io<R>::ld(Io<R>::st(v + 0.0f));
}
template <> __device__ __forceinline__ float round_as<float>(float v) { return v; }

/* The gather form (images too wide for the tiled one): one thread per input element. With
 * the kernel size KT known at compile time (0 = run-time k) the loops unroll, non-taps add
 * +0.0f, and all the loads are in flight together. */
template <int KT, typename R>
__global__ void col2im_kernel(float *__restrict__ dx, const float *__restrict__ dcol, int ldcol,
                              int B, int C, int H, int W, int k_rt, int stride, int pad, int Ho,
                              int Wo, Div dW, Div dH, Div dC, Div ds) {
    const int k = KT ? KT : k_rt;
    const int n = B * C * H * W, P = Ho * Wo;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int t = dv(i, dW), xq = i - t * W;
        const int plane = dv(t, dH), y = t - plane * H;
        const int b = dv(plane, dC), ch = plane - b * C;
        const float *db = dcol + (size_t)b * P * ldcol + (size_t)ch * k * k;
        float acc = 0.0f;
#pragma unroll
        for (int ky = 0; ky < k; ky++) {
            const int ty = y + pad - ky; /* = oy * stride */
            const int oy = dv(ty > 0 ? ty : 0, ds);
            const bool oky = ty >= 0 && oy * stride == ty && oy < Ho;
#pragma unroll
            for (int kx = 0; kx < k; kx++) {
                const int tx = xq + pad - kx;
                const int ox = dv(tx > 0 ? tx : 0, ds);
                const bool ok = oky && tx >= 0 && ox * stride == tx && ox < Wo;
                acc += ok ? db[(size_t)(oy * Wo + ox) * ldcol + ky * k + kx] : 0.0f;
            }
        }
        dx[i] = round_as<R>(acc);
    }
}

/* The tiled form: one block per (sample, input row y); for each chunk of CC channels it
 * stages, with coalesced reads, the dcol entries that row y receives: for each tap row ky
 * that reads y (slot m = ky / stride: those ky are congruent to y + pad mod stride), pixel
 * row oy, every ox and the chunk's (cc, kx) columns, S[m][ox][cc*k + kx] (rows RS apart, RS
 * odd); one block per (sample, y, chunk). Then thread (cc, x) sums its taps from shared
 * memory: a warp's lanes run along x,
 * so along ox, RS apart (conflict-free), and write dx rows contiguously. The gather form's
 * warps read 32 cache lines per load (pixels are ldcol floats apart). With k = 1 this is a
 * tiled transpose [L][C] -> [C][L]. */
#define COL2IM_SMEM_FLOATS 12288
template <int KT, typename R>
__global__ void col2im_tile_kernel(float *__restrict__ dx, const float *__restrict__ dcol,
                                   int ldcol, int C, int H, int W, int k_rt, int stride, int pad,
                                   int Ho, int Wo, int CC, int nchunk, int nslot, int RS, Div dH,
                                   Div dw, Div dw_last, Div dk, Div dW, Div ds) {
    extern __shared__ float S[]; /* nslot * Wo * RS floats */
    const int k = KT ? KT : k_rt, kk = k * k;
    const int row = blockIdx.x / nchunk, chunk = blockIdx.x - row * nchunk;
    const int b = dv(row, dH), y = row - b * H;
    const float *db = dcol + (size_t)b * Ho * Wo * ldcol;
    const int r0 = (y + pad) - dv(y + pad, ds) * stride; /* the first ky that reads y */
    {
        const int c0 = chunk * CC, cn = min(CC, C - c0), w = cn * k;
        const Div dwc = chunk == nchunk - 1 ? dw_last : dw;
        for (int m = 0; m < nslot; m++) {
            const int ky = r0 + m * stride, ty = y + pad - ky;
            if (ky >= k || ty < 0) break; /* ty falls as m grows */
            const int oy = dv(ty, ds);
            if (oy >= Ho) continue;
            const float *src = db + (size_t)oy * Wo * ldcol + (size_t)c0 * kk + ky * k;
            float *dst = S + m * Wo * RS;
            const int tot = Wo * w;
            if (KT == 1) { /* the chunk's columns are one contiguous run per pixel */
                for (int e = threadIdx.x; e < tot; e += blockDim.x) {
                    const int ox = dv(e, dwc), j = e - ox * w;
                    dst[ox * RS + j] = src[(size_t)ox * ldcol + j];
                }
            } else {
                for (int e = threadIdx.x; e < tot; e += blockDim.x) {
                    const int ox = dv(e, dwc), j = e - ox * w;
                    const int cc = dv(j, dk), kx = j - cc * k;
                    dst[ox * RS + j] = src[(size_t)ox * ldcol + cc * kk + kx];
                }
            }
        }
        __syncthreads();
        const int nout = cn * W;
        for (int e = threadIdx.x; e < nout; e += blockDim.x) {
            const int cc = dv(e, dW), xq = e - cc * W;
            float acc = 0.0f;
#pragma unroll
            for (int ky = 0; ky < k; ky++) {
                const int ty = y + pad - ky;
                if (ty < 0) break;
                const int oy = dv(ty, ds);
                if (oy * stride != ty || oy >= Ho) continue;
                const float *sm = S + dv(ky, ds) * Wo * RS + cc * k;
#pragma unroll
                for (int kx = 0; kx < k; kx++) {
                    const int tx = xq + pad - kx;
                    if (tx < 0) break;
                    const int ox = dv(tx, ds);
                    if (ox * stride == tx && ox < Wo) acc += sm[ox * RS + kx];
                }
            }
            dx[(((size_t)b * C + c0 + cc) * H + y) * W + xq] = round_as<R>(acc);
        }
    }
}

/* The band form for k = 3, stride 1 (the Spikformer convs): the tiled form stages, per input
 * row, the third of the columns that row's taps read, so every dcol sector is fetched by 3
 * blocks. Here a block owns a band of input rows [y0, y1) and a chunk of CC channels and
 * streams the dcol pixel rows oy it needs, each staged whole (all 9 taps of its channels:
 * S[ox][cc*9 + ky*3 + kx], rows RS apart, RS odd) once, from the highest oy down. Input row
 * y gets tap row ky from oy = y + pad - ky, so in descending oy every row receives its taps
 * in ascending ky, kx: the CPU order. Thread (cc, x) keeps the 3 rows in flight in
 * registers (acc[j]: row oy - pad + j, which takes tap row j from this oy); after each oy
 * row oy - pad + 2 is complete and stored. C2B_NP (cc, x) pairs per thread of 256. */
#define C2B_NP 4
#define C2B_THREADS 256
template <typename R>
__global__ void __launch_bounds__(C2B_THREADS)
    col2im_band_kernel(float *__restrict__ dx, const float *__restrict__ dcol, int ldcol, int C,
                       int H, int W, int pad, int Ho, int Wo, int CC, int nchunk, int BR, int nband,
                       int RS, int vec, Div dW, Div dseg, Div dseg_last) {
    extern __shared__ float S[]; /* Wo * RS floats */
    const int chunk = (int)(blockIdx.x % (unsigned)nchunk), bb = (int)(blockIdx.x / (unsigned)nchunk);
    const int band = bb % nband, b = bb / nband;
    const int c0 = chunk * CC, cn = min(CC, C - c0), seg = cn * 9, npair = cn * W;
    const Div ds = chunk == nchunk - 1 ? dseg_last : dseg;
    const int y0 = band * BR, y1 = min(y0 + BR, H);
    const float *db = dcol + (size_t)b * Ho * Wo * ldcol + (size_t)c0 * 9;
    float *dxb = dx + ((size_t)b * C + c0) * H * W;
    float acc[C2B_NP][3];
    int sb[C2B_NP], xo[C2B_NP], xd[C2B_NP];
#pragma unroll
    for (int q = 0; q < C2B_NP; q++) {
        const int e = threadIdx.x + q * C2B_THREADS, cc = dv(e, dW), x = e - cc * W;
        xo[q] = e < npair ? x + pad : INT_MIN / 2; /* = ox of tap kx = 0; never valid past npair */
        sb[q] = (x + pad) * RS + cc * 9;
        xd[q] = cc * H * W + x;
        acc[q][0] = acc[q][1] = acc[q][2] = 0.0f;
    }
    for (int oy = y1 - 1 + pad; oy >= y0 + pad - 2; oy--) {
        if (oy >= 0 && oy < Ho) { /* uniform over the block */
            __syncthreads(); /* the previous row's reads are done */
            const float *src = db + (size_t)oy * Wo * ldcol;
            if (vec) { /* ldcol, segment starts and lengths multiples of 4, dcol 16-byte aligned */
                const int s4 = seg >> 2, tot = Wo * s4;
                for (int e = threadIdx.x; e < tot; e += C2B_THREADS) {
                    const int ox = dv(e, ds), j = (e - ox * s4) * 4;
                    const float4 v = *(const float4 *)(src + (size_t)ox * ldcol + j);
                    float *d = S + ox * RS + j;
                    d[0] = v.x;
                    d[1] = v.y;
                    d[2] = v.z;
                    d[3] = v.w;
                }
            } else {
                const int tot = Wo * seg;
                for (int e = threadIdx.x; e < tot; e += C2B_THREADS) {
                    const int ox = dv(e, ds), j = e - ox * seg;
                    S[ox * RS + j] = src[(size_t)ox * ldcol + j];
                }
            }
            __syncthreads();
#pragma unroll
            for (int q = 0; q < C2B_NP; q++)
#pragma unroll
                for (int j = 0; j < 3; j++)
#pragma unroll
                    for (int kx = 0; kx < 3; kx++)
                        if ((unsigned)(xo[q] - kx) < (unsigned)Wo)
                            acc[q][j] += S[sb[q] - kx * RS + j * 3 + kx];
        }
        const int y = oy - pad + 2; /* its last tap row (ky = 2) was this oy: complete */
        const bool emit = y >= y0 && y < y1;
#pragma unroll
        for (int q = 0; q < C2B_NP; q++) {
            if (emit && threadIdx.x + q * C2B_THREADS < npair)
                dxb[(size_t)xd[q] + (size_t)y * W] = round_as<R>(acc[q][2]);
            acc[q][2] = acc[q][1];
            acc[q][1] = acc[q][0];
            acc[q][0] = 0.0f;
        }
    }
}

/* Launches the band form where it applies (k = 3, stride 1, a chunk of channels fits);
 * returns 0 otherwise. */
template <typename R>
static int col2im_band_launch(snn_cuda *c, float *dx, const float *dcol, int ldcol, int B, int C,
                              int H, int W, int pad, int Ho, int Wo) {
    if (W > C2B_NP * C2B_THREADS) return 0;
    int CC = C2B_NP * C2B_THREADS / W;
    if (CC > C) CC = C;
    while (CC > 0 && (long long)Wo * ((CC * 9) | 1) > COL2IM_SMEM_FLOATS) CC--;
    if (CC == 0) return 0;
    int nchunk = (C + CC - 1) / CC;
    CC = (C + nchunk - 1) / nchunk; /* balanced chunks */
    nchunk = (C + CC - 1) / CC;
    /* bands of 16 rows (dcol rows re-read at band edges: (BR + 2) / BR), narrower while the
     * grid is under ~3 waves of 6 resident blocks per SM */
    const long long want = 3LL * 6 * snn_cuda_sm_count(c);
    int BR = 16, nband = (H + BR - 1) / BR;
    while (BR > 4 && (long long)B * nband * nchunk < want) {
        BR /= 2;
        nband = (H + BR - 1) / BR;
    }
    if (!fits_int((long long)B * nband * nchunk)) return 0;
    const int RS = (CC * 9) | 1, cn_last = C - (nchunk - 1) * CC;
    const int vec = ldcol % 4 == 0 && CC % 4 == 0 && cn_last % 4 == 0 &&
                    ((uintptr_t)dcol & 15) == 0;
    const int sd = vec ? 4 : 1; /* staging items are 4 or 1 floats */
    const size_t smem = (size_t)Wo * RS * sizeof(float);
    col2im_band_kernel<R><<<(unsigned)((long long)B * nband * nchunk), C2B_THREADS, smem,
                            snn_cuda_stream_of(c)>>>(
        dx, dcol, ldcol, C, H, W, pad, Ho, Wo, CC, nchunk, BR, nband, RS, vec, div_make(W),
        div_make(CC * 9 / sd), div_make(cn_last * 9 / sd));
    return 1;
}

template <typename R>
static void col2im_launch(snn_cuda *c, float *dx, const float *dcol, int ldcol, int B, int C,
                          int H, int W, int k, int stride, int pad, int Ho, int Wo) {
    cudaStream_t st = snn_cuda_stream_of(c);
    if (k == 3 && stride == 1 &&
        col2im_band_launch<R>(c, dx, dcol, ldcol, B, C, H, W, pad, Ho, Wo))
        return;
    const int nslot = (k + stride - 1) / stride; /* tap rows that read one input row */
    const long long per_ch = (long long)nslot * Wo * k; /* floats per channel, before padding */
    int CC = 0;
    if (per_ch + (long long)nslot * Wo <= COL2IM_SMEM_FLOATS && fits_int((long long)B * H * C)) {
        CC = (int)((COL2IM_SMEM_FLOATS / ((long long)nslot * Wo) - 1) / k);
        if (CC > C) CC = C;
    }
    const Div dk = div_make(k), dW = div_make(W), ds = div_make(stride);
    if (CC > 0) {
        /* enough blocks to fill the GPU when B*H is small (a pointwise Conv1d has H = 1) */
        const long long want = ((long long)snn_cuda_sm_count(c) * 8 + B * H - 1) / (B * H);
        const int cc_par = (int)((C + want - 1) / want);
        if (CC > cc_par) CC = cc_par < 8 ? (8 < CC ? 8 : CC) : cc_par;
        int nchunk = (C + CC - 1) / CC;
        CC = (C + nchunk - 1) / nchunk; /* balanced chunks */
        nchunk = (C + CC - 1) / CC;
        const int RS = (CC * k) | 1;
        const size_t smem = (size_t)nslot * Wo * RS * sizeof(float);
        const unsigned grid = (unsigned)((long long)B * H * nchunk);
        const int cn_last = C - (nchunk - 1) * CC;
#define C2T(KT)                                                                                  \
    col2im_tile_kernel<KT, R><<<grid, 256, smem, st>>>(dx, dcol, ldcol, C, H, W, k, stride, pad, \
                                                       Ho, Wo, CC, nchunk, nslot, RS,            \
                                                       div_make(H), div_make(CC * k),        \
                                                       div_make(cn_last * k), dk, dW, ds)
        if (k == 3) C2T(3);
        else if (k == 1) C2T(1);
        else C2T(0);
#undef C2T
        return;
    }
    const size_t n = (size_t)B * C * H * W;
    const unsigned grid = capped_grid(c, n, 256, 32);
    const Div dH = div_make(H), dC = div_make(C);
#define C2I(KT)                                                                                  \
    col2im_kernel<KT, R><<<grid, 256, 0, st>>>(dx, dcol, ldcol, B, C, H, W, k, stride, pad, Ho,  \
                                               Wo, dW, dH, dC, ds)
    if (k == 3) C2I(3);
    else if (k == 1) C2I(1);
    else if (k == 2) C2I(2);
    else C2I(0);
#undef C2I
}

extern "C" snn_status snn_cuda_col2im_round(snn_cuda *c, float *dx, const float *dcol, int ldcol,
                                            int B, int C, int H, int W, int k, int stride, int pad,
                                            snn_dtype round_to) {
    SNN_TRY(check_geom("col2im", B, C, H, W, k, stride, pad));
    SNN_TRY(check_type16("col2im", round_to));
    if (!c || !dx || !dcol) return snn_error(SNN_E_INVALID, "col2im needs a context, dx and dcol");
    const int K = C * k * k, Ho = out_size(H, k, stride, pad), Wo = out_size(W, k, stride, pad);
    if (ldcol < K)
        return snn_error(SNN_E_INVALID, "col2im: ldcol %d is smaller than C*k*k = %d", ldcol, K);
    if (!fits_int((long long)B * Ho * Wo))
        return snn_error(SNN_E_INVALID, "col2im: %d output pixels are too many", B * Ho * Wo);
    switch (round_to) {
    case SNN_F32:
        col2im_launch<float>(c, dx, dcol, ldcol, B, C, H, W, k, stride, pad, Ho, Wo);
        break;
    case SNN_BF16:
        col2im_launch<__nv_bfloat16>(c, dx, dcol, ldcol, B, C, H, W, k, stride, pad, Ho, Wo);
        break;
    default:
        col2im_launch<__half>(c, dx, dcol, ldcol, B, C, H, W, k, stride, pad, Ho, Wo);
        break;
    }
    SNN_CU_LAUNCHED("col2im");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_col2im(snn_cuda *c, float *dx, const float *dcol, int ldcol, int B,
                                      int C, int H, int W, int k, int stride, int pad) {
    return snn_cuda_col2im_round(c, dx, dcol, ldcol, B, C, H, W, k, stride, pad, SNN_F32);
}

/* ---- layout changes between [B][P][O] and [B][O][P]: 32x32 tiles through shared memory so
 * both the read and the write run along the contiguous dimension. Block 32 x 8. ---- */
#define TT 32

template <typename R>
__global__ void pixel_to_channel_kernel(float *dst, const float *src, const float *bias, int B,
                                        int O, int P) {
    __shared__ float tile[TT][TT + 1];
    const int p0 = blockIdx.x * TT, o0 = blockIdx.y * TT;
    for (int b = blockIdx.z; b < B; b += gridDim.z) {
        const float *sb = src + (size_t)b * P * O;
        float *dbp = dst + (size_t)b * O * P;
        for (int dy = threadIdx.y; dy < TT; dy += blockDim.y) {
            const int p = p0 + dy, o = o0 + threadIdx.x;
            if (p < P && o < O) tile[dy][threadIdx.x] = sb[(size_t)p * O + o];
        }
        __syncthreads();
        for (int dy = threadIdx.y; dy < TT; dy += blockDim.y) {
            const int o = o0 + dy, p = p0 + threadIdx.x;
            if (o < O && p < P) {
                float v = tile[threadIdx.x][dy];
                if (bias) v += bias[o];
                dbp[(size_t)o * P + p] = round_as<R>(v);
            }
        }
        __syncthreads(); /* the tile is refilled for the next sample */
    }
}

template <typename T>
__global__ void channel_to_pixel_kernel(T *dst, const float *src, int B, int O, int P) {
    __shared__ float tile[TT][TT + 1];
    const int p0 = blockIdx.x * TT, o0 = blockIdx.y * TT;
    for (int b = blockIdx.z; b < B; b += gridDim.z) {
        const float *sb = src + (size_t)b * O * P;
        T *dbp = dst + (size_t)b * P * O;
        for (int dy = threadIdx.y; dy < TT; dy += blockDim.y) {
            const int o = o0 + dy, p = p0 + threadIdx.x;
            if (o < O && p < P) tile[dy][threadIdx.x] = sb[(size_t)o * P + p];
        }
        __syncthreads();
        for (int dy = threadIdx.y; dy < TT; dy += blockDim.y) {
            const int p = p0 + dy, o = o0 + threadIdx.x;
            if (p < P && o < O) dbp[(size_t)p * O + o] = Io<T>::st(tile[threadIdx.x][dy]);
        }
        __syncthreads();
    }
}

/* The 16-byte form: tiles of LT_O channels x LT_P pixels (2048 floats), 256 threads, each
 * moving two float4 on each side (the 4-byte form above ran at ~1.9 TB/s). Needs O and P
 * multiples of 4 and 16-byte aligned pointers (8-byte for 16-bit nhwc output: the launchers
 * check). Pixel-major side: a warp covers 8 pixels x 4 float4 of channels (whole 32-byte
 * sectors); its scalar shared accesses tile[o][p] (rows LT_LD apart) conflict 2-way at most.
 * Channel-major side: a warp moves 32 float4 along one channel row (512 contiguous bytes)
 * with 16-byte shared accesses. */
#define LT_O 16
#define LT_P 128
#define LT_LD (LT_P + 4)
__device__ __forceinline__ void lt_pix(int idx, int &ol, int &pl) {
    ol = ((idx >> 3) & 3) * 4;
    pl = (idx & 7) | ((idx >> 5) << 3);
}

template <typename R>
__global__ void __launch_bounds__(256)
    pixel_to_channel_vec_kernel(float *__restrict__ dst, const float *__restrict__ src,
                                const float *__restrict__ bias, int B, int O, int P) {
    __shared__ __align__(16) float tile[LT_O * LT_LD];
    const int p0 = blockIdx.x * LT_P, o0 = blockIdx.y * LT_O;
    for (int b = blockIdx.z; b < B; b += gridDim.z) {
        const float *sb = src + (size_t)b * P * O;
        float *db = dst + (size_t)b * O * P;
        float4 v[2];
#pragma unroll
        for (int q = 0; q < 2; q++) { /* both loads in flight before the shared stores */
            int ol, pl;
            lt_pix(q * 256 + threadIdx.x, ol, pl);
            if (p0 + pl < P && o0 + ol < O)
                v[q] = *(const float4 *)(sb + (size_t)(p0 + pl) * O + o0 + ol);
        }
#pragma unroll
        for (int q = 0; q < 2; q++) {
            int ol, pl;
            lt_pix(q * 256 + threadIdx.x, ol, pl);
            if (p0 + pl < P && o0 + ol < O) {
                float *t = tile + ol * LT_LD + pl;
                t[0] = v[q].x;
                t[LT_LD] = v[q].y;
                t[2 * LT_LD] = v[q].z;
                t[3 * LT_LD] = v[q].w;
            }
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int idx = q * 256 + threadIdx.x, ol = idx >> 5, pl = (idx & 31) * 4;
            const int o = o0 + ol, p = p0 + pl;
            if (o < O && p < P) {
                float4 w = *(const float4 *)(tile + ol * LT_LD + pl);
                if (bias) {
                    const float bo = bias[o];
                    w.x += bo;
                    w.y += bo;
                    w.z += bo;
                    w.w += bo;
                }
                w.x = round_as<R>(w.x);
                w.y = round_as<R>(w.y);
                w.z = round_as<R>(w.z);
                w.w = round_as<R>(w.w);
                *(float4 *)(db + (size_t)o * P + p) = w;
            }
        }
        __syncthreads(); /* the tile is refilled for the next sample */
    }
}

template <typename T> __device__ __forceinline__ void store4(T *d, float a, float b, float c,
                                                             float e) {
    union {
        uint2 u;
        T t[4];
    } x;
    x.t[0] = Io<T>::st(a);
    x.t[1] = Io<T>::st(b);
    x.t[2] = Io<T>::st(c);
    x.t[3] = Io<T>::st(e);
    *(uint2 *)d = x.u;
}
template <> __device__ __forceinline__ void store4<float>(float *d, float a, float b, float c,
                                                          float e) {
    *(float4 *)d = make_float4(a, b, c, e);
}

template <typename T>
__global__ void __launch_bounds__(256)
    channel_to_pixel_vec_kernel(T *__restrict__ dst, const float *__restrict__ src, int B, int O,
                                int P) {
    __shared__ __align__(16) float tile[LT_O * LT_LD];
    const int p0 = blockIdx.x * LT_P, o0 = blockIdx.y * LT_O;
    for (int b = blockIdx.z; b < B; b += gridDim.z) {
        const float *sb = src + (size_t)b * O * P;
        T *db = dst + (size_t)b * P * O;
        float4 v[2];
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int idx = q * 256 + threadIdx.x, ol = idx >> 5, pl = (idx & 31) * 4;
            if (o0 + ol < O && p0 + pl < P)
                v[q] = *(const float4 *)(sb + (size_t)(o0 + ol) * P + p0 + pl);
        }
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int idx = q * 256 + threadIdx.x, ol = idx >> 5, pl = (idx & 31) * 4;
            if (o0 + ol < O && p0 + pl < P) *(float4 *)(tile + ol * LT_LD + pl) = v[q];
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < 2; q++) {
            int ol, pl;
            lt_pix(q * 256 + threadIdx.x, ol, pl);
            const int o = o0 + ol, p = p0 + pl;
            if (p < P && o < O) {
                const float *t = tile + ol * LT_LD + pl;
                store4<T>(db + (size_t)p * O + o, t[0], t[LT_LD], t[2 * LT_LD], t[3 * LT_LD]);
            }
        }
        __syncthreads();
    }
}

/* The 16-byte forms apply: O, P multiples of 4, P >= 32 (narrower tiles idle most lanes),
 * pointers aligned for the float4 / 4-element accesses. */
static int lt_vec_ok(int O, int P, const void *f32a, const void *b, size_t balign) {
    return O % 4 == 0 && P % 4 == 0 && P >= 32 && (O + LT_O - 1) / LT_O <= 65535 &&
           ((uintptr_t)f32a & 15) == 0 && ((uintptr_t)b & (balign - 1)) == 0;
}
static dim3 lt_grid(int B, int O, int P) {
    return dim3((unsigned)((P + LT_P - 1) / LT_P), (unsigned)((O + LT_O - 1) / LT_O),
                (unsigned)(B < 65535 ? B : 65535));
}

static snn_status check_bop(const char *what, int B, int O, int P) {
    if (B <= 0 || O <= 0 || P <= 0)
        return snn_error(SNN_E_INVALID, "%s needs positive B, O and P (got %d, %d, %d)", what, B,
                         O, P);
    if (!fits_int((long long)B * O * P))
        return snn_error(SNN_E_INVALID, "%s: B*O*P = %lld is too large (2^31 elements at most)",
                         what, (long long)B * O * P);
    return SNN_OK;
}

static dim3 tile_grid(int B, int O, int P) {
    return dim3((unsigned)((P + TT - 1) / TT), (unsigned)((O + TT - 1) / TT),
                (unsigned)(B < 65535 ? B : 65535));
}

extern "C" snn_status snn_cuda_nhwc_to_nchw_round(snn_cuda *c, float *dst, const float *src,
                                                  const float *bias, int B, int O, int P,
                                                  snn_dtype round_to) {
    SNN_TRY(check_bop("nhwc_to_nchw", B, O, P));
    SNN_TRY(check_type16("nhwc_to_nchw", round_to));
    if (!c || !dst || !src)
        return snn_error(SNN_E_INVALID, "nhwc_to_nchw needs a context, dst and src");
    if ((O + TT - 1) / TT > 65535)
        return snn_error(SNN_E_INVALID, "nhwc_to_nchw: O = %d is too large", O);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (lt_vec_ok(O, P, src, dst, 16)) {
        const dim3 lg = lt_grid(B, O, P);
        if (round_to == SNN_F32)
            pixel_to_channel_vec_kernel<float><<<lg, 256, 0, st>>>(dst, src, bias, B, O, P);
        else if (round_to == SNN_BF16)
            pixel_to_channel_vec_kernel<__nv_bfloat16><<<lg, 256, 0, st>>>(dst, src, bias, B, O, P);
        else
            pixel_to_channel_vec_kernel<__half><<<lg, 256, 0, st>>>(dst, src, bias, B, O, P);
        SNN_CU_LAUNCHED("nhwc_to_nchw");
        return SNN_OK;
    }
    const dim3 grid = tile_grid(B, O, P), block(TT, 8);
    switch (round_to) {
    case SNN_F32:
        pixel_to_channel_kernel<float><<<grid, block, 0, st>>>(dst, src, bias, B, O, P);
        break;
    case SNN_BF16:
        pixel_to_channel_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(dst, src, bias, B, O, P);
        break;
    default:
        pixel_to_channel_kernel<__half><<<grid, block, 0, st>>>(dst, src, bias, B, O, P);
        break;
    }
    SNN_CU_LAUNCHED("nhwc_to_nchw");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_nhwc_to_nchw(snn_cuda *c, float *dst, const float *src,
                                            const float *bias, int B, int O, int P) {
    return snn_cuda_nhwc_to_nchw_round(c, dst, src, bias, B, O, P, SNN_F32);
}

extern "C" snn_status snn_cuda_nchw_to_nhwc(snn_cuda *c, snn_dtype dst_type, void *dst,
                                            const float *src, int B, int O, int P) {
    SNN_TRY(check_bop("nchw_to_nhwc", B, O, P));
    SNN_TRY(check_type16("nchw_to_nhwc", dst_type));
    if (!c || !dst || !src)
        return snn_error(SNN_E_INVALID, "nchw_to_nhwc needs a context, dst and src");
    if ((O + TT - 1) / TT > 65535)
        return snn_error(SNN_E_INVALID, "nchw_to_nhwc: O = %d is too large", O);
    cudaStream_t st = snn_cuda_stream_of(c);
    if (lt_vec_ok(O, P, src, dst, dst_type == SNN_F32 ? 16 : 8)) {
        const dim3 lg = lt_grid(B, O, P);
        if (dst_type == SNN_F32)
            channel_to_pixel_vec_kernel<float><<<lg, 256, 0, st>>>((float *)dst, src, B, O, P);
        else if (dst_type == SNN_BF16)
            channel_to_pixel_vec_kernel<__nv_bfloat16><<<lg, 256, 0, st>>>(
                (__nv_bfloat16 *)dst, src, B, O, P);
        else
            channel_to_pixel_vec_kernel<__half><<<lg, 256, 0, st>>>((__half *)dst, src, B, O, P);
        SNN_CU_LAUNCHED("nchw_to_nhwc");
        return SNN_OK;
    }
    const dim3 grid = tile_grid(B, O, P), block(TT, 8);
    switch (dst_type) {
    case SNN_F32:
        channel_to_pixel_kernel<float><<<grid, block, 0, st>>>((float *)dst, src, B, O, P);
        break;
    case SNN_BF16:
        channel_to_pixel_kernel<__nv_bfloat16><<<grid, block, 0, st>>>((__nv_bfloat16 *)dst, src,
                                                                       B, O, P);
        break;
    default:
        channel_to_pixel_kernel<__half><<<grid, block, 0, st>>>((__half *)dst, src, B, O, P);
        break;
    }
    SNN_CU_LAUNCHED("nchw_to_nhwc");
    return SNN_OK;
}

