/* Classification losses on the time-averaged network output (see include/snn/loss.h).
 *
 * Each sample's loss and gradient come from src/backend/class_loss_body.h, the body the op
 * table's class_loss entry runs on either device (the training step on a device keeps its
 * loss there); the samples' losses are summed in increasing n, in double, so the loss is
 * bit-for-bit reproducible and the same on every table. */
#include <math.h>
#include <stddef.h>

#include "backend/class_loss_body.h"
#include "core/error_internal.h"
#include "snn/loss.h"

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
    const double gscale = snn_cl_gscale(0, T, N, C);
    double total = 0.0;
    int hits = 0;
    for (int n = 0; n < N; n++) {
        int hit = 0;
        total += snn_cl_cross_entropy(logits, labels[n], T, NC, (size_t)n * (size_t)C, C, gscale, dlogits, &hit);
        hits += hit;
    }
    *loss = (float)(total / snn_cl_divisor(0, N, C));
    if (correct) *correct = hits;
    return SNN_OK;
}

snn_status snn_loss_mse_rate(const float *out, const int32_t *labels, int T, int N, int C,
                             float *loss, float *dout, int *correct) {
    SNN_TRY(check_args("MSE rate loss", out, labels, T, N, C, loss));
    const size_t NC = (size_t)N * (size_t)C;
    /* d/dr of mean((r - y)^2) over N*C values, then 1/T back to each step. */
    const double gscale = snn_cl_gscale(1, T, N, C);
    double total = 0.0;
    int hits = 0;
    for (int n = 0; n < N; n++) {
        int hit = 0;
        total += snn_cl_mse_rate(out, labels[n], T, NC, (size_t)n * (size_t)C, C, gscale, dout, &hit);
        hits += hit;
    }
    *loss = (float)(total / snn_cl_divisor(1, N, C));
    if (correct) *correct = hits;
    return SNN_OK;
}
