/* The classification losses of one sample, for the host functions of include/snn/loss.h and
 * both tables' class_loss entry (backend.h): one body, the same bits on the CPU and on a CUDA
 * device (every double operation rounded to nearest, none contracted, exp and log from
 * core/mathd.h).
 *
 * x is [T][N][C] (NC = N·C apart per time step), the sample's row starts at `row` (= n·C).
 * The mean over T is recomputed where it is needed instead of being stored: no scratch, and
 * the extra reads are small next to the network. Sums run in double, in increasing index. */
#ifndef SNN_BACKEND_CLASS_LOSS_BODY_H
#define SNN_BACKEND_CLASS_LOSS_BODY_H

#include <stddef.h>
#include <stdint.h>

#include "core/mathd.h"

/* mean_t x[t][idx], summed in increasing t */
SNN_MATHD_HD double snn_cl_mean_t(const float *x, int T, size_t NC, size_t idx) {
    double s = 0.0;
    for (int t = 0; t < T; t++) s = SNN_MATHD_ADD(s, (double)x[(size_t)t * NC + idx]);
    return SNN_MATHD_DIV(s, (double)T);
}

/* Cross-entropy of the time-averaged logits against `label`: returns the sample's loss
 * (log-sum-exp minus the label's logit), *hit = the first argmax is the label; with dx, the
 * gradient (softmax - one-hot)·gscale written to all T steps of the row. */
SNN_MATHD_HD double snn_cl_cross_entropy(const float *x, int label, int T, size_t NC, size_t row, int C,
                                         double gscale, float *dx, int *hit) {
    double mx = snn_cl_mean_t(x, T, NC, row);
    int arg = 0;
    for (int c = 1; c < C; c++) {
        const double v = snn_cl_mean_t(x, T, NC, row + (size_t)c);
        if (v > mx) {
            mx = v;
            arg = c;
        }
    }
    double s = 0.0;
    for (int c = 0; c < C; c++) s = SNN_MATHD_ADD(s, snn_exp_det(SNN_MATHD_SUB(snn_cl_mean_t(x, T, NC, row + (size_t)c), mx)));
    const double lse = SNN_MATHD_ADD(mx, snn_log_det(s));
    *hit = arg == label;
    if (dx) {
        for (int c = 0; c < C; c++) {
            const double p = snn_exp_det(SNN_MATHD_SUB(snn_cl_mean_t(x, T, NC, row + (size_t)c), lse));
            const float g = (float)SNN_MATHD_MUL(SNN_MATHD_SUB(p, c == label ? 1.0 : 0.0), gscale);
            for (int t = 0; t < T; t++) dx[(size_t)t * NC + row + (size_t)c] = g;
        }
    }
    return SNN_MATHD_SUB(lse, snn_cl_mean_t(x, T, NC, row + (size_t)label));
}

/* Squared error of the firing rate (the mean over T) against the one-hot label: returns the
 * sample's sum over its C classes, *hit = the first argmax is the label; with dx, (r - y)·gscale
 * to all T steps. */
SNN_MATHD_HD double snn_cl_mse_rate(const float *x, int label, int T, size_t NC, size_t row, int C, double gscale,
                                    float *dx, int *hit) {
    double best = 0.0, sum = 0.0;
    int arg = 0;
    for (int c = 0; c < C; c++) {
        const double r = snn_cl_mean_t(x, T, NC, row + (size_t)c);
        if (c == 0 || r > best) {
            best = r;
            arg = c;
        }
        const double d = SNN_MATHD_SUB(r, c == label ? 1.0 : 0.0);
        sum = SNN_MATHD_ADD(sum, SNN_MATHD_MUL(d, d));
        if (dx) {
            const float g = (float)SNN_MATHD_MUL(d, gscale);
            for (int t = 0; t < T; t++) dx[(size_t)t * NC + row + (size_t)c] = g;
        }
    }
    *hit = arg == label;
    return sum;
}

/* The gradient's factor and the loss's divisor: cross-entropy 1/(N·T) and N, the MSE
 * 2/(N·C·T) and N·C. */
SNN_MATHD_HD double snn_cl_gscale(int mse, int T, int N, int C) {
    return mse ? SNN_MATHD_DIV(2.0, SNN_MATHD_MUL(SNN_MATHD_MUL((double)N, (double)C), (double)T))
               : SNN_MATHD_DIV(1.0, SNN_MATHD_MUL((double)N, (double)T));
}
SNN_MATHD_HD double snn_cl_divisor(int mse, int N, int C) {
    return mse ? SNN_MATHD_MUL((double)N, (double)C) : (double)N;
}

#endif
