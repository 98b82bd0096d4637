/* Losses on the time-averaged output and the CPU softmax helpers: finite differences,
 * invariances, argument errors. Values against PyTorch: tests/oracle_norms.py. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_reduce.h"
#include "harness.h"
#include "snn/loss.h"

static uint64_t rs;

typedef snn_status (*loss_fn)(const float *, const int32_t *, int, int, int, float *, float *,
                              int *);

static void random_labels(int32_t *lab, int N, int C) {
    float u[64];
    snn_test_fill_uniform(u, (size_t)N, 0.0f, (float)C, &rs);
    for (int n = 0; n < N; n++) lab[n] = (int32_t)u[n] < C ? (int32_t)u[n] : C - 1;
}

/* Central differences of the scalar loss against the returned gradient. */
static void fd_loss(const char *what, loss_fn f, int T, int N, int C, float lo, float hi) {
    size_t n = (size_t)T * N * C;
    float *x = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    int32_t lab[64];
    snn_test_fill_uniform(x, n, lo, hi, &rs);
    random_labels(lab, N, C);
    snn_test_poison(g, n);
    float loss = NAN;
    int correct = -1;
    CHECK(f(x, lab, T, N, C, &loss, g, &correct) == SNN_OK);
    CHECK(isfinite(loss) && correct >= 0 && correct <= N);
    /* same loss and count without a gradient array */
    float loss2 = NAN;
    int correct2 = -1;
    CHECK(f(x, lab, T, N, C, &loss2, NULL, &correct2) == SNN_OK);
    CHECK(loss2 == loss && correct2 == correct);
    /* the gradient reaches every step equally (mean over T) */
    size_t NC = (size_t)N * C;
    for (int t = 1; t < T; t++)
        CHECK_MSG(memcmp(g, g + (size_t)t * NC, NC * sizeof(float)) == 0,
                  "%s: step %d gradient differs from step 0", what, t);
    const float h = 1e-2f;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = x[i], lp, lm;
        x[i] = keep + h;
        CHECK(f(x, lab, T, N, C, &lp, NULL, NULL) == SNN_OK);
        x[i] = keep - h;
        CHECK(f(x, lab, T, N, C, &lm, NULL, NULL) == SNN_OK);
        x[i] = keep;
        double fd = ((double)lp - lm) / (2.0 * h);
        double err = fabs(fd - g[i]) / (2e-4 + 1e-2 * fabs(fd));
        if (err > worst) worst = err;
        CHECK_MSG(err <= 1.0, "%s T=%d N=%d C=%d: d[%zu] analytic %.6g finite difference %.6g",
                  what, T, N, C, i, (double)g[i], fd);
    }
    fprintf(stderr, "%s T=%d N=%d C=%d: worst error / tolerance %.3f\n", what, T, N, C, worst);
    free(x);
    free(g);
}

/* Labels out of range are refused before anything is written. */
static void bad_labels(loss_fn f) {
    float x[2 * 3 * 4], g[2 * 3 * 4];
    snn_test_fill_uniform(x, 24, -1, 1, &rs);
    int32_t lab[3] = {0, 4, 1};
    float loss = 12345.0f;
    int correct = 777;
    snn_test_poison(g, 24);
    CHECK(f(x, lab, 2, 3, 4, &loss, g, &correct) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "label 4") != NULL);
    CHECK(loss == 12345.0f && correct == 777 && isnan(g[0]));
    lab[1] = -1;
    CHECK(f(x, lab, 2, 3, 4, &loss, g, &correct) == SNN_E_INVALID);
    lab[1] = 3;
    CHECK(f(x, lab, 2, 3, 4, &loss, g, &correct) == SNN_OK);
    CHECK(f(x, lab, 0, 3, 4, &loss, g, &correct) == SNN_E_INVALID);
    CHECK(f(x, lab, 2, 3, 0, &loss, g, &correct) == SNN_E_INVALID);
    CHECK(f(NULL, lab, 2, 3, 4, &loss, g, &correct) == SNN_E_INVALID);
}

static void ce_properties(void) {
    /* softmax-CE gradient rows sum to zero; shifting all logits of a sample leaves it alone */
    enum { T = 3, N = 5, C = 11 };
    float x[T * N * C], g[T * N * C], g2[T * N * C];
    int32_t lab[N];
    snn_test_fill_uniform(x, T * N * C, -4, 4, &rs);
    random_labels(lab, N, C);
    float l1, l2;
    CHECK(snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &l1, g, NULL) == SNN_OK);
    for (int n = 0; n < N; n++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += g[n * C + c];
        CHECK_MSG(fabs(s) < 1e-6, "CE gradient row %d sums to %g", n, s);
        CHECK(g[n * C + lab[n]] < 0);
    }
    for (int i = 0; i < T * N * C; i++) x[i] += 1000.0f; /* also exercises stability */
    CHECK(snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &l2, g2, NULL) == SNN_OK);
    CHECK_MSG(fabsf(l1 - l2) < 2e-3f * fabsf(l1), "CE not shift invariant: %g vs %g", (double)l1,
              (double)l2);
    CHECK(snn_test_max_rel(g2, g, T * N * C, 1e-2) < 5e-2);
    /* a confident correct prediction: loss near 0, counted correct */
    memset(x, 0, sizeof x);
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) x[(t * N + n) * C + lab[n]] = 40.0f;
    int correct = -1;
    CHECK(snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &l1, NULL, &correct) == SNN_OK);
    CHECK(correct == N && l1 >= 0 && l1 < 1e-10f);
}

static void correct_counting(void) {
    /* argmax of the mean over T, first class on ties (spikes tie a lot: all-zero rates) */
    enum { T = 2, N = 4, C = 3 };
    float x[T * N * C] = {0};
    int32_t lab[N] = {0, 1, 2, 1};
    /* sample 0: all zero -> class 0 (correct); sample 1: tie between 1 and 2 -> 1 (correct);
     * sample 2: class 1 wins over time only on average (incorrect); sample 3: class 2 */
    x[(0 * N + 1) * C + 1] = 1;
    x[(1 * N + 1) * C + 2] = 1;
    x[(0 * N + 2) * C + 2] = 1;
    x[(0 * N + 2) * C + 1] = 0.9f;
    x[(1 * N + 2) * C + 1] = 0.9f;
    x[(0 * N + 3) * C + 2] = 1;
    float l;
    int c1 = -1, c2 = -1;
    CHECK(snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &l, NULL, &c1) == SNN_OK);
    CHECK(snn_loss_mse_rate(x, lab, T, N, C, &l, NULL, &c2) == SNN_OK);
    CHECK_MSG(c1 == 2 && c2 == 2, "correct counts %d %d, want 2", c1, c2);
    /* MSE of an exact one-hot rate is zero */
    float y[T * N * C] = {0};
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) y[(t * N + n) * C + lab[n]] = 1;
    CHECK(snn_loss_mse_rate(y, lab, T, N, C, &l, NULL, &c1) == SNN_OK);
    CHECK(l == 0.0f && c1 == N);
}

static void reduce_helpers(void) {
    enum { R = 6, K = 13 };
    float x[R * K], y[R * K], z[R * K], w[R * K];
    snn_test_fill_uniform(x, R * K, -30, 30, &rs);
    x[3] = 80.0f; /* exp(80) overflows FP32: the shift must prevent it */
    snn_test_poison(y, R * K);
    snn_test_poison(z, R * K);
    snn_cpu_softmax_rows(x, y, R, K);
    snn_cpu_log_softmax_rows(x, z, R, K);
    for (int r = 0; r < R; r++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            s += y[r * K + k];
            CHECK(y[r * K + k] >= 0 && z[r * K + k] <= 0);
            double e = exp((double)z[r * K + k]);
            CHECK_MSG(fabs(e - y[r * K + k]) <= 1e-6 * (1 + y[r * K + k]),
                      "exp(log_softmax) %g != softmax %g", e, (double)y[r * K + k]);
        }
        CHECK_MSG(fabs(s - 1.0) < 1e-6, "softmax row %d sums to %.9f", r, s);
        int a = snn_cpu_row_argmax(x + r * K, K);
        for (int k = 0; k < K; k++) CHECK(x[r * K + k] <= x[r * K + a]);
        CHECK(snn_cpu_row_max(x + r * K, K) == x[r * K + a]);
        double lse = snn_cpu_row_logsumexp(x + r * K, K);
        CHECK(fabs(lse - ((double)x[r * K] - z[r * K])) < 1e-5 * (1 + fabs(lse)));
    }
    /* in place, and the softmax backward against central differences of sum(dy * softmax) */
    memcpy(w, x, sizeof x);
    snn_cpu_softmax_row(w, w, K);
    CHECK(memcmp(w, y, K * sizeof(float)) == 0);
    float dy[K], dx[K];
    snn_test_fill_uniform(x, K, -2, 2, &rs);
    snn_test_fill_uniform(dy, K, -1, 1, &rs);
    snn_cpu_softmax_row(x, y, K);
    snn_cpu_softmax_backward_row(y, dy, dx, K);
    for (int k = 0; k < K; k++) {
        double f[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            float keep = x[k];
            x[k] = keep + (sgn ? -1e-2f : 1e-2f);
            snn_cpu_softmax_row(x, z, K);
            x[k] = keep;
            f[sgn] = 0;
            for (int j = 0; j < K; j++) f[sgn] += (double)dy[j] * z[j];
        }
        double fd = (f[0] - f[1]) / 2e-2;
        CHECK_MSG(fabs(fd - dx[k]) < 1e-4 + 1e-2 * fabs(fd), "softmax backward %d: %g vs %g", k,
                  (double)dx[k], fd);
    }
    /* ties: first index */
    float t3[4] = {1, 5, 5, 2};
    CHECK(snn_cpu_row_argmax(t3, 4) == 1);
    /* mean over axis 0 */
    float m[3 * 5], mo[5];
    snn_test_fill_uniform(m, 15, -1, 1, &rs);
    snn_test_poison(mo, 5);
    snn_cpu_mean_axis0(m, 3, 5, mo);
    for (int j = 0; j < 5; j++)
        CHECK(fabs(mo[j] - ((double)m[j] + m[5 + j] + m[10 + j]) / 3.0) < 1e-7);
    CHECK(fabs(snn_cpu_sum(m, 15) - (snn_cpu_sum(m, 7) + snn_cpu_sum(m + 7, 8))) < 1e-12);
}

int main(void) {
    rs = snn_test_seed();
    fd_loss("cross-entropy", snn_loss_cross_entropy_mean_t, 3, 5, 7, -3, 3);
    fd_loss("cross-entropy", snn_loss_cross_entropy_mean_t, 1, 1, 2, -3, 3);
    fd_loss("cross-entropy", snn_loss_cross_entropy_mean_t, 4, 3, 10, -6, 6);
    fd_loss("mse-rate", snn_loss_mse_rate, 3, 5, 7, 0, 1);
    fd_loss("mse-rate", snn_loss_mse_rate, 1, 2, 3, -1, 2);
    fd_loss("mse-rate", snn_loss_mse_rate, 5, 3, 10, 0, 1);
    bad_labels(snn_loss_cross_entropy_mean_t);
    bad_labels(snn_loss_mse_rate);
    ce_properties();
    correct_counting();
    reduce_helpers();
    return snn_test_finish("test_loss");
}
