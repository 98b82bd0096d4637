/* Row reductions on the CPU shared by norms, losses and attention: numerically stable
 * softmax / log-softmax (shift by the row maximum, accumulate in double), log-sum-exp,
 * argmax and the mean over the leading (time) axis.
 *
 * All functions are pure (no errors, no allocation). Rows have n >= 1 elements; results
 * are deterministic (fixed summation order, independent of the thread count). */
#ifndef SNN_CPU_REDUCE_H
#define SNN_CPU_REDUCE_H

#include <stddef.h>

/* Largest element; NaN if any element is NaN. */
float snn_cpu_row_max(const float *x, int n);
/* Index of the first maximum (a NaN counts as the maximum, like torch.argmax). */
int snn_cpu_row_argmax(const float *x, int n);
/* log(sum_i exp(x_i)) computed as max + log(sum exp(x_i - max)); +inf if the max is +inf. */
double snn_cpu_row_logsumexp(const float *x, int n);

/* y = softmax(x) over one row; y may alias x. */
void snn_cpu_softmax_row(const float *x, float *y, int n);
/* y = log_softmax(x) = x - logsumexp(x) over one row; y may alias x. */
void snn_cpu_log_softmax_row(const float *x, float *y, int n);
/* Given y = softmax(x) and dy, dx = y * (dy - sum(dy * y)); dx may alias dy. */
void snn_cpu_softmax_backward_row(const float *y, const float *dy, float *dx, int n);

/* The same over `rows` contiguous rows of n elements (OpenMP over rows). */
void snn_cpu_softmax_rows(const float *x, float *y, size_t rows, int n);
void snn_cpu_log_softmax_rows(const float *x, float *y, size_t rows, int n);

/* Sum of n floats accumulated in double. */
double snn_cpu_sum(const float *x, size_t n);
/* y[j] = (1/T) sum_t x[t*M + j] for j < M: the mean over time of a [T][M] array, summed in
 * double in increasing t. y must not alias x unless T == 1. */
void snn_cpu_mean_axis0(const float *x, int T, size_t M, float *y);

#endif
