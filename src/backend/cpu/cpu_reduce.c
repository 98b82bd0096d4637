/* Row reductions (see cpu_reduce.h). Sums run in double so that losses and norms agree
 * with a float64 reference to well below FP32 rounding, whatever the row length. */
#include <math.h>

#include "backend/cpu/cpu_reduce.h"

float snn_cpu_row_max(const float *x, int n) {
    float m = x[0];
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) return x[i];
        if (x[i] > m) m = x[i];
    }
    return m;
}

int snn_cpu_row_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) return i;
        if (x[i] > x[best]) best = i;
    }
    return best;
}

double snn_cpu_row_logsumexp(const float *x, int n) {
    double m = snn_cpu_row_max(x, n);
    /* An infinite or NaN maximum decides the result; shifting by it would give NaN. */
    if (!isfinite(m)) return m;
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

void snn_cpu_softmax_row(const float *x, float *y, int n) {
    float m = snn_cpu_row_max(x, n);
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        y[i] = e;
        s += e;
    }
    float inv = (float)(1.0 / s);
    for (int i = 0; i < n; i++) y[i] *= inv;
}

void snn_cpu_log_softmax_row(const float *x, float *y, int n) {
    double lse = snn_cpu_row_logsumexp(x, n);
    for (int i = 0; i < n; i++) y[i] = (float)((double)x[i] - lse);
}

void snn_cpu_softmax_backward_row(const float *y, const float *dy, float *dx, int n) {
    double dot = 0.0;
    for (int i = 0; i < n; i++) dot += (double)dy[i] * (double)y[i];
    for (int i = 0; i < n; i++) dx[i] = (float)((double)y[i] * ((double)dy[i] - dot));
}

void snn_cpu_softmax_rows(const float *x, float *y, size_t rows, int n) {
#pragma omp parallel for schedule(static) if (rows * (size_t)n > 32768)
    for (size_t r = 0; r < rows; r++) snn_cpu_softmax_row(x + r * (size_t)n, y + r * (size_t)n, n);
}

void snn_cpu_log_softmax_rows(const float *x, float *y, size_t rows, int n) {
#pragma omp parallel for schedule(static) if (rows * (size_t)n > 32768)
    for (size_t r = 0; r < rows; r++)
        snn_cpu_log_softmax_row(x + r * (size_t)n, y + r * (size_t)n, n);
}

double snn_cpu_sum(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

void snn_cpu_mean_axis0(const float *x, int T, size_t M, float *y) {
    double inv = 1.0 / (double)T;
#pragma omp parallel for schedule(static) if ((size_t)T * M > 65536)
    for (size_t j = 0; j < M; j++) {
        double s = 0.0;
        for (int t = 0; t < T; t++) s += x[(size_t)t * M + j];
        y[j] = (float)(s * inv);
    }
}
