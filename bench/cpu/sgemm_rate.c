/* The FP32 GEMM rate of this machine, for the floor of bench/cpu/fcsnn_vs_torch.py: one
 * large square row-major cblas_sgemm (the best case of the BLAS libsnn links), repeated,
 * median and best time. Thread count comes from the environment (OMP_NUM_THREADS /
 * OPENBLAS_NUM_THREADS), as for the benchmarks themselves.
 *
 *   sgemm_rate [n] [reps] [B d0 d1 ... dL]      default n 2048, reps 7
 *
 * With B and the layer widths d0..dL (fcsnn: B = T*N rows, 784 1024 1024 10) it also times
 * the GEMM calls one training and one inference step of that network issue, with the
 * transposes, leading dimensions and beta of src/nn/linear.c (forward y = x W^T; backward
 * dW += dy^T x, and dx = dy W for every layer but the first): the GEMM time of a step at the
 * exact shapes, a tighter floor than the square rate.
 *
 * Prints one JSON object on stdout. A sample of C entries is checked against a double dot
 * product so that a broken link cannot report a fast nonsense rate. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* OpenBLAS extensions (declared here so that the file builds against any OpenBLAS cblas.h). */
char *openblas_get_corename(void);
char *openblas_get_config(void);
int openblas_get_num_threads(void);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *filled(size_t n, uint64_t *s) {
    float *p = malloc(n * sizeof(float));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((*s >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
    return p;
}

/* Median seconds of the forward GEMMs (train = 0) or forward + backward GEMMs (train = 1)
 * of a step over B rows and widths d[0..L]. Returns < 0 when out of memory. */
static double step_gemm_seconds(int B, const int *d, int L, int train, int reps) {
    int maxw = 0;
    for (int i = 0; i <= L; i++) maxw = d[i] > maxw ? d[i] : maxw;
    uint64_t s = 0x2545f4914f6cdd1dull;
    float *x = filled((size_t)B * maxw, &s), *y = filled((size_t)B * maxw, &s);
    float *W = filled((size_t)maxw * maxw, &s), *G = filled((size_t)maxw * maxw, &s);
    double *t = malloc((size_t)(reps + 1) * sizeof(double));
    double med = -1;
    if (x && y && W && G && t) {
        for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
            double a = now();
            for (int l = 0; l < L; l++) {
                int in = d[l], out = d[l + 1];
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, W, in, 1.0f, y, out);
            }
            for (int l = train ? L - 1 : -1; l >= 0; l--) {
                int in = d[l], out = d[l + 1];
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, y, out, x, in, 1.0f, G, in);
                if (l > 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, y, out, W, in, 0.0f, x, in);
            }
            t[r] = now() - a;
        }
        qsort(t + 1, (size_t)reps, sizeof *t, cmp_double);
        med = t[1 + reps / 2];
    }
    free(x);
    free(y);
    free(W);
    free(G);
    free(t);
    return med;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (n < 16 || n > 16384 || reps < 1 || reps > 1000 || argc == 4 || argc > 68) {
        fprintf(stderr, "usage: sgemm_rate [n 16..16384] [reps 1..1000] [B d0 d1 ... dL]\n");
        return 2;
    }
    size_t nn = (size_t)n * n;
    float *A = malloc(nn * sizeof(float)), *B = malloc(nn * sizeof(float)), *C = malloc(nn * sizeof(float));
    double *t = malloc((size_t)reps * sizeof(double));
    if (!A || !B || !C || !t) {
        fprintf(stderr, "sgemm_rate: out of memory\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < nn; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        A[i] = (float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        B[i] = (float)((s >> 40) * (1.0 / 16777216.0)) - 0.5f;
    }
    /* one untimed call: thread pool start-up and page faults of C */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    for (int r = 0; r < reps; r++) {
        double a = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        t[r] = now() - a;
    }
    double worst = 0;
    for (int k = 0; k < 32; k++) {
        int i = (k * 7919) % n, j = (k * 104729 + 13) % n;
        double acc = 0, mag = 0;
        for (int l = 0; l < n; l++) {
            acc += (double)A[(size_t)i * n + l] * B[(size_t)l * n + j];
            mag += fabs((double)A[(size_t)i * n + l] * B[(size_t)l * n + j]);
        }
        double e = fabs(C[(size_t)i * n + j] - acc) / (mag + 1e-30);
        if (e > worst) worst = e;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double flop = 2.0 * n * (double)n * n;
    double med = t[reps / 2];
    int L = argc - 5, rows = argc > 3 ? atoi(argv[3]) : 0, d[64];
    if (L >= 1 && L < 64 && rows > 0) {
        for (int i = 0; i <= L; i++) d[i] = atoi(argv[4 + i]);
        double inf = step_gemm_seconds(rows, d, L, 0, reps), tr = step_gemm_seconds(rows, d, L, 1, reps);
        printf("{\"step_rows\": %d, \"step_layers\": %d, \"step_inference_gemm_ms\": %.6g, "
               "\"step_training_gemm_ms\": %.6g, ", rows, L, inf * 1e3, tr * 1e3);
    } else {
        printf("{");
    }
    printf("\"n\": %d, \"reps\": %d, \"median_s\": %.6g, \"best_s\": %.6g, \"gflops_median\": %.4f, "
           "\"gflops_best\": %.4f, \"max_rel_err\": %.3g, \"ok\": %s, \"openblas_core\": \"%s\", "
           "\"openblas_config\": \"%s\", \"openblas_threads\": %d}\n",
           n, reps, med, t[0], flop / med * 1e-9, flop / t[0] * 1e-9, worst, worst < 1e-4 ? "true" : "false",
           openblas_get_corename(), openblas_get_config(), openblas_get_num_threads());
    free(A);
    free(B);
    free(C);
    free(t);
    return worst < 1e-4 ? 0 : 1;
}
