/* Classification losses on the time-averaged network output (see include/snn/loss.h).
 *
 * The mean over T is recomputed from the [T][N][C] array where it is needed instead of
 * being stored: the loss then needs no scratch memory (nothing is allocated inside a
 * training step) and the extra T-fold reads are negligible next to the network. Rows are
 * processed in order and sums run in double, so the loss is bit-for-bit reproducible. */
#include <math.h>
#include <stddef.h>

#include "core/error_internal.h"
#include "snn/loss.h"

/* mean_t x[t][idx] for a [T][NC] array, summed in increasing t. */
static inline double mean_t(const float *x, int T, size_t NC, size_t idx) {
    double s = 0.0;
    for (int t = 0; t < T; t++) s += x[(size_t)t * NC + idx];
    return s / (double)T;
}

static snn_status check_args(const char *what, const void *x, const int32_t *labels, int T,
                             int N, int C, const float *loss) {
    if (!x || !labels || !loss)
        return snn_error(SNN_E_INVALID, "%s: the output, label and loss pointers must not be NULL",
                         what);
    if (T <= 0 || N <= 0 || C <= 0)
        return snn_error(SNN_E_INVALID, "%s: T, N and C must be positive (got T=%d, N=%d, C=%d)",
                         what, T, N, C);
    for (int n = 0; n < N; n++)
        if (labels[n] < 0 || labels[n] >= C)
            return snn_error(SNN_E_INVALID,
                             "%s: label %d of sample %d is outside [0, %d); check that the "
                             "model's class count matches the data set",
                             what, (int)labels[n], n, C);
    return SNN_OK;
}

snn_status snn_loss_cross_entropy_mean_t(const float *logits, const int32_t *labels, int T, int N,
                                         int C, float *loss, float *dlogits, int *correct) {
    SNN_TRY(check_args("cross-entropy loss", logits, labels, T, N, C, loss));
    const size_t NC = (size_t)N * (size_t)C;
    /* d mean_t / d logits[t] = 1/T and the batch mean gives 1/N. */
    const double gscale = 1.0 / ((double)N * (double)T);
    double total = 0.0;
    int hits = 0;
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * (size_t)C;
        /* first pass: maximum (for a stable log-sum-exp) and the first argmax */
        double mx = mean_t(logits, T, NC, row);
        int arg = 0;
        for (int c = 1; c < C; c++) {
            double v = mean_t(logits, T, NC, row + (size_t)c);
            if (v > mx) {
                mx = v;
                arg = c;
            }
        }
        double s = 0.0;
        for (int c = 0; c < C; c++) s += exp(mean_t(logits, T, NC, row + (size_t)c) - mx);
        const double lse = mx + log(s);
        total += lse - mean_t(logits, T, NC, row + (size_t)labels[n]);
        hits += arg == labels[n];
        if (dlogits) {
            for (int c = 0; c < C; c++) {
                double p = exp(mean_t(logits, T, NC, row + (size_t)c) - lse);
                float g = (float)((p - (c == labels[n] ? 1.0 : 0.0)) * gscale);
                for (int t = 0; t < T; t++) dlogits[(size_t)t * NC + row + (size_t)c] = g;
            }
        }
    }
    *loss = (float)(total / (double)N);
    if (correct) *correct = hits;
    return SNN_OK;
}

snn_status snn_loss_mse_rate(const float *out, const int32_t *labels, int T, int N, int C,
                             float *loss, float *dout, int *correct) {
    SNN_TRY(check_args("MSE rate loss", out, labels, T, N, C, loss));
    const size_t NC = (size_t)N * (size_t)C;
    /* d/dr of mean((r - y)^2) over N*C values, then 1/T back to each step. */
    const double gscale = 2.0 / ((double)NC * (double)T);
    double total = 0.0;
    int hits = 0;
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * (size_t)C;
        double best = 0.0;
        int arg = 0;
        for (int c = 0; c < C; c++) {
            double r = mean_t(out, T, NC, row + (size_t)c);
            if (c == 0 || r > best) {
                best = r;
                arg = c;
            }
            double d = r - (c == labels[n] ? 1.0 : 0.0);
            total += d * d;
            if (dout) {
                float g = (float)(d * gscale);
                for (int t = 0; t < T; t++) dout[(size_t)t * NC + row + (size_t)c] = g;
            }
        }
        hits += arg == labels[n];
    }
    *loss = (float)(total / (double)NC);
    if (correct) *correct = hits;
    return SNN_OK;
}
