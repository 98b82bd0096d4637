/* Convolution, pooling and element-wise layers: queries for the precision system and the
 * shared convolution engine. Constructors are in nn/layers.h.
 *
 * Shapes (per sample; the B = T*N rows are independent):
 *   Conv2d    [C, H, W] -> [O, H', W'], weight [O, C, k, k], bias [O]
 *   Conv1d    [C, L]    -> [O, L'],     weight [O, C, k],    bias [O]
 *   MaxPool2d / AvgPool2d [C, H, W] -> [C, H', W'] (floor mode; AvgPool counts padding)
 *   Flatten   any -> [numel];  Dropout, GELU: any -> same;  Residual: y = x + inner(x)
 * where H' = (H + 2p - k) / s + 1 (floor), like PyTorch. */
#ifndef SNN_NN_LAYERS_CONV_H
#define SNN_NN_LAYERS_CONV_H

#include "backend/backend.h"
#include "backend/cpu/cpu_im2col.h"
#include "nn/layers.h"

/* Loops touching fewer floats than this stay on one thread: a parallel region costs
 * microseconds, and far more when the cores are shared with other processes. */
#define SNN_PAR_MIN_WORK ((size_t)32768)

/* Conv1d queries. A pointwise Conv1d (kernel 1, stride 1, padding 0) is a Linear over the
 * channel dimension: y[o][l] = sum_c W[o][c] x[c][l] + b[o], computed as one GEMM per sample
 * with no im2col; it is the FP8 candidate of Spikformer. The weight is params[0], [O, C, 1],
 * the bias (if any) params[1]. All three return 0/-1 when m is not a Conv1d. */
int snn_conv1d_is_pointwise(const snn_module *m);
int snn_conv1d_in_channels(const snn_module *m);
int snn_conv1d_out_channels(const snn_module *m);
/* Conv2d queries (0/-1 when m is not a Conv2d). */
int snn_conv2d_in_channels(const snn_module *m);
int snn_conv2d_out_channels(const snn_module *m);

/* Dropout's Philox stream: FNV-1a of the module's dotted name (so two Dropout layers draw
 * different masks). Element i of sample n keeps with probability 1-p when
 * snn_rng_uniform(seed, stream, step * N * numel + n * numel + i) >= p. */
uint64_t snn_dropout_stream(const snn_module *m);

/* ---- shared engine of Conv1d and Conv2d (internal) ----
 * Two strategies, picked per layer when the arena is reserved:
 *  - per-sample (unfolding convolutions with P = H'*W' >= 128): OpenMP over samples; each
 *    thread unfolds one sample into its own column block (cache-resident) and runs a
 *    single-threaded GEMM straight into y (resp. a dcol GEMM and col2im into dx).
 *  - batched (everything else, and every pointwise layer): a chunk of samples is unfolded
 *    side by side into one [K][chunk*P] matrix and multiplied by ONE GEMM, threaded by the
 *    BLAS; the copies around it are threaded over samples. A per-sample GEMM on a narrow
 *    output would repack W for very little work.
 * A pointwise geometry (1x1, stride 1, no padding) never unfolds: the batched form only
 * lays the samples' [C][P] blocks side by side (row copies) so that one GEMM covers the
 * chunk, and the per-sample form (when forced) reads x and writes dx directly.
 * dW uses the batched form (K = chunk*P is a long, efficient reduction), except for a
 * per-sample layer with a small weight (O*K), whose one-GEMM output would thread poorly:
 * there fixed groups of 8 samples accumulate partial dW in parallel, added in group order.
 * Either way the summation order does not depend on the thread count. Every step is an
 * op-table entry (im2col, gemm, conv_scatter, conv_gather, conv_bias_grad, col2im,
 * sum_groups_add), so the engine runs on any device; the per-sample strategy calls the
 * entries from OpenMP threads and is therefore chosen on the CPU table only (elsewhere
 * everything is batched). With the OpenMP build of OpenBLAS
 * (what CMake prefers), a GEMM called inside a parallel region runs on the calling thread,
 * so the two levels of parallelism never nest. */
typedef struct snn_conv_engine {
    snn_conv_geom g;
    int out_ch;
    int chunk;        /* samples per batched GEMM, set by reserve */
    int per_sample;   /* forward and dx strategy, set by reserve */
    int direct;       /* 1x1 kernel, stride 1, no padding: x is its own column matrix */
    int threads;      /* column blocks reserved for the per-sample strategy */
    float *col;       /* [K][max(chunk, threads) * P] columns; also dcol */
    float *buf;       /* [O][chunk*P] GEMM output (batched forward) / gathered dy */
    float *partial;   /* [n_groups][O*K] grouped dW partial sums, or NULL */
    size_t n_groups;
    int y_store;      /* snn_dtype y and dy are stored in (0: FP32): a 16-bit output boundary
                         (precision/prec_store.c), the module sets it from its out_store */
} snn_conv_engine;

/* Overrides for modules reserved afterwards (tests exercise every path with them,
 * benchmarks tune with them); not thread-safe.
 * chunk: samples per batched GEMM (0: automatic, the default; capped at B).
 * strategy: 0 automatic, 1 batched, 2 per-sample. */
void snn_conv_set_max_chunk(int samples);
void snn_conv_set_strategy(int strategy);
/* dW_grouped: 0 automatic, 1 never, 2 whenever the strategy is per-sample. */
void snn_conv_set_dw_grouped(int mode);

/* be: the table the module runs on (the per-sample strategy is the CPU's only). */
void snn_conv_engine_reserve(snn_conv_engine *e, const struct snn_backend *be, snn_arena *a, size_t B);
/* y[b][O][P] = W[O][K] col(x_b) + bias (bias may be NULL), through be's entries only. */
snn_status snn_conv_engine_forward(snn_conv_engine *e, const snn_run *r, const struct snn_backend *be, size_t B,
                                   const float *W, const float *bias, const float *x, float *y);
/* dW += dy col^T; db += sum dy (db may be NULL); dx = col2im(W^T dy) (dx may be NULL). */
snn_status snn_conv_engine_backward(snn_conv_engine *e, const snn_run *r, const struct snn_backend *be, size_t B,
                                    const float *W, float *dW, float *db, const float *x, const float *dy,
                                    float *dx);

#endif
