/* The lane bodies of the CUDA table's BatchNorm row sums for short rows
 * (cuda_table_norm.cu: bn_row_short_kernel, bn_grad_row_short_kernel) as __host__ __device__
 * functions, so tests/cuda/test_cuda_emul_conv.cu runs them on the CPU lane by lane, builds
 * backend.h's halving tree over the 32 lanes and checks the channel sums against the CPU
 * table's, bit for bit, with no GPU. x is stored as X (float, __nv_bfloat16 or __half: the
 * entries' xt); every value is widened to float before it is used. Private to the CUDA
 * backend and its tests. */
#ifndef SNN_CUDA_NORM_BODY_H
#define SNN_CUDA_NORM_BODY_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>

#include "backend/cuda/cuda_rn.h"

/* x stored as X is read through rn_widen (cuda_rn.h): every BF16 and F16 value is a float, so
 * what follows is the FP32 path's arithmetic on the same value. */

/* Lane `lane`'s partials of rows e0..e0+RR-1 of x[n][S] (rows past n give 0): Σ x[k] over
 * k = lane, lane + 32, ... in increasing k, or Σ (x - mu)² with mu = sum[c]/count when sum is
 * given (c = row % C). */
template <int RR, typename X>
SNN_HD void bn_row_short_lane(const X *x, size_t n, size_t C, size_t S, const double *sum, double count, size_t e0,
                              unsigned lane, double (&s)[RR]) {
    double mu[RR];
#pragma unroll
    for (int r = 0; r < RR; r++) {
        s[r] = 0.0;
        mu[r] = sum && e0 + r < n ? rn_ddiv(sum[(e0 + r) % C], count) : 0.0;
    }
    for (size_t k = lane; k < S; k += 32) {
        float v[RR];
#pragma unroll
        for (int r = 0; r < RR; r++) v[r] = e0 + r < n ? rn_widen(x[(e0 + r) * S + k]) : 0.0f;
#pragma unroll
        for (int r = 0; r < RR; r++) {
            if (!sum) {
                s[r] = rn_dadd(s[r], (double)v[r]);
            } else {
                const double d = rn_dsub((double)v[r], mu[r]);
                s[r] = rn_dadd(s[r], rn_dmul(d, d));
            }
        }
    }
}

/* Lane `lane`'s partials of the backward sums of rows e0..e0+RR-1: s0 = Σ dy, s1 = Σ dy·((x -
 * mean[c])·invstd[c]), k as above. */
template <int RR, typename X>
SNN_HD void bn_grad_row_short_lane(const X *x, const float *dy, size_t n, size_t C, size_t S, const double *mean,
                                   const double *invstd, size_t e0, unsigned lane, double (&s0)[RR],
                                   double (&s1)[RR]) {
    double mu[RR], is[RR];
#pragma unroll
    for (int r = 0; r < RR; r++) {
        s0[r] = s1[r] = 0.0;
        const size_t c = (e0 + r) % C;
        mu[r] = mean[c];
        is[r] = invstd[c];
    }
    for (size_t k = lane; k < S; k += 32) {
        float gv[RR], xv[RR];
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const bool in = e0 + r < n;
            gv[r] = in ? dy[(e0 + r) * S + k] : 0.0f;
            xv[r] = in ? rn_widen(x[(e0 + r) * S + k]) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < RR; r++) {
            const double g = (double)gv[r];
            s0[r] = rn_dadd(s0[r], g);
            s1[r] = rn_dadd(s1[r], rn_dmul(g, rn_dmul(rn_dsub((double)xv[r], mu[r]), is[r])));
        }
    }
}

/* BatchNorm's column sums acc[c] = Σ_i src[i·C + c] from 0.0 in row order (one thread a
 * channel: the order backend.h fixes), in two phases a tile of ROWS rows: a block of
 * COL_THREADS threads stages rows i0..i0+rows-1 of its COL_C channels (block blk: channels
 * blk·COL_C...) in shared memory, loads coalesced and all in flight (col_tile_load, thread tid);
 * then thread tid < COL_C adds its column of the tile in row order (col_tile_add). Channels at
 * or past C are staged as 0 and never written. NS arrays are summed side by side. */
#define COL_C 32
#define COL_THREADS 256
template <int NS, int ROWS>
SNN_HD void col_tile_load(const double *const (&src)[NS], int C, int blk, size_t i0, int rows, int tid,
                          double (&tile)[NS][ROWS][COL_C + 1]) {
    const int c0 = blk * COL_C;
    for (int q = tid; q < rows * COL_C; q += COL_THREADS) {
        const int r = q / COL_C, cc = q % COL_C;
        const bool in = c0 + cc < C;
#pragma unroll
        for (int k = 0; k < NS; k++) tile[k][r][cc] = in ? src[k][(i0 + r) * (size_t)C + (size_t)(c0 + cc)] : 0.0;
    }
}
template <int NS, int ROWS>
SNN_HD void col_tile_add(const double (&tile)[NS][ROWS][COL_C + 1], int rows, int tid, double (&acc)[NS]) {
    for (int r = 0; r < rows; r++)
#pragma unroll
        for (int k = 0; k < NS; k++) acc[k] = rn_dadd(acc[k], tile[k][r][tid]);
}
SNN_HD int col_tile_rows(size_t B, size_t i0, int rows_max) {
    return B - i0 < (size_t)rows_max ? (int)(B - i0) : rows_max;
}

#endif
