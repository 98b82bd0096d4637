/* Standalone SGEMM benchmark over the shapes our models issue, for comparing CBLAS
 * implementations (scripts/blas-compare.sh builds it once per library).
 *
 *   blas_compare LIBRARY_LABEL OUT.json [min_seconds_per_shape]
 *   blas_compare --probe      (one tiny call, so the library prints what it picked)
 *
 * Every call is row-major cblas_sgemm exactly as src/backend/cpu/cpu_gemm.c makes it, with
 * the transposes and leading dimensions of the module that issues it. Each shape is run
 * once to warm up, then repeated until min_seconds have passed (at least 5, at most 200
 * times); the median time is reported. A sample of output entries is checked against a
 * double-precision dot product so that a broken link cannot produce fast nonsense.
 * Thread count comes from the environment (OPENBLAS_NUM_THREADS / BLIS_NUM_THREADS /
 * OMP_NUM_THREADS), set by the script. */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;  /* model / layer / pass */
    int ta, tb, M, N, K;
    float beta;        /* 1 where the module accumulates (weight gradients) */
} shape;

/* fcsnn: Linear over B = T*N rows; y = x W^T, dW += dy^T x, dx = dy W (src/nn/linear.c).
 * convsnn (1x28x28, 128 channels, 3x3 pad 1, MaxPool 2 between), src/nn/conv2d.c's two
 * strategies: per-sample W[O][K] x col[K][P] (the default for P >= 128; each thread runs
 * its own samples, so these calls run single-threaded inside an OpenMP region), and the
 * batched W[O][K] x col[K][nb*P] with nb = 2^21 floats / (max(K, O) * P) samples:
 * conv1 K=9, P=784, nb=20; conv2 K=1152, P=196, nb=9.
 * spikformer (D=384, 224x224 -> L=196 tokens, MLP 4x): pointwise Conv1d per sample,
 * W[O][C] x x[C][L] (src/nn/conv1d.c). */
static const shape shapes[] = {
    {"fcsnn B=1024 784->512 fwd", 0, 1, 1024, 512, 784, 0},
    {"fcsnn B=1024 784->512 dW", 1, 0, 512, 784, 1024, 1},
    {"fcsnn B=1024 512->512 fwd", 0, 1, 1024, 512, 512, 0},
    {"fcsnn B=1024 512->512 dW", 1, 0, 512, 512, 1024, 1},
    {"fcsnn B=1024 512->512 dx", 0, 0, 1024, 512, 512, 0},
    {"fcsnn B=4096 784->512 fwd", 0, 1, 4096, 512, 784, 0},
    {"fcsnn B=4096 784->512 dW", 1, 0, 512, 784, 4096, 1},
    {"fcsnn B=4096 512->512 fwd", 0, 1, 4096, 512, 512, 0},
    {"fcsnn B=4096 512->512 dW", 1, 0, 512, 512, 4096, 1},
    {"fcsnn B=4096 512->512 dx", 0, 0, 4096, 512, 512, 0},
    {"convsnn conv1 sample fwd", 0, 0, 128, 784, 9, 0},
    {"convsnn conv1 sample dW", 0, 1, 128, 9, 784, 1},
    {"convsnn conv2 sample fwd", 0, 0, 128, 196, 1152, 0},
    {"convsnn conv2 sample dW", 0, 1, 128, 1152, 196, 1},
    {"convsnn conv2 sample dcol", 1, 0, 1152, 196, 128, 0},
    {"convsnn conv1 batched fwd", 0, 0, 128, 20 * 784, 9, 0},
    {"convsnn conv1 batched dW", 0, 1, 128, 9, 20 * 784, 1},
    {"convsnn conv2 batched fwd", 0, 0, 128, 9 * 196, 1152, 0},
    {"convsnn conv2 batched dW", 0, 1, 128, 1152, 9 * 196, 1},
    {"convsnn conv2 batched dcol", 1, 0, 1152, 9 * 196, 128, 0},
    {"spikformer 384->384 fwd", 0, 0, 384, 196, 384, 0},
    {"spikformer 384->384 dW", 0, 1, 384, 384, 196, 1},
    {"spikformer 384->384 dx", 1, 0, 384, 196, 384, 0},
    {"spikformer 384->1536 fwd", 0, 0, 1536, 196, 384, 0},
    {"spikformer 384->1536 dW", 0, 1, 1536, 384, 196, 1},
    {"spikformer 384->1536 dx", 1, 0, 384, 196, 1536, 0},
    {"spikformer 1536->384 fwd", 0, 0, 384, 196, 1536, 0},
    {"spikformer 1536->384 dW", 0, 1, 384, 1536, 196, 1},
    {"spikformer 1536->384 dx", 1, 0, 1536, 196, 384, 0},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t lcg = 0x853c49e6748fea9bull;
static float urand(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Shapes of the stored operands: A is M x K (K x M when transposed), B is K x N (N x K). */
static void run_gemm(const shape *s, const float *A, const float *B, float *C) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
}

/* C[i][j] (for beta 0) against a double dot product. */
static double check(const shape *s, const float *A, const float *B, const float *C) {
    double worst = 0;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    for (int t = 0; t < 64; t++) {
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((lcg >> 33) % (uint64_t)s->M);
        lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((lcg >> 33) % (uint64_t)s->N);
        double acc = 0, mag = 0;
        for (int k = 0; k < s->K; k++) {
            double a = s->ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
            double b = s->tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
            acc += a * b;
            mag += fabs(a * b);
        }
        double err = fabs(C[(size_t)i * s->N + j] - acc) / (mag + 1e-30);
        if (err > worst) worst = err;
    }
    return worst;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--probe") == 0) {
        float a[4] = {1, 2, 3, 4}, c[4];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, a, 2, 0.0f, c, 2);
        return c[0] == 7.0f ? 0 : 1;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIBRARY_LABEL OUT.json [min_seconds_per_shape]\n", argv[0]);
        return 2;
    }
    const char *label = argv[1];
    double min_s = argc > 3 ? atof(argv[3]) : 0.5;
    FILE *out = fopen(argv[2], "w");
    if (!out) {
        fprintf(stderr, "cannot write %s\n", argv[2]);
        return 1;
    }
    const char *thr = getenv("OMP_NUM_THREADS");
    fprintf(out, "{\n  \"library\": \"%s\",\n  \"threads\": \"%s\",\n  \"min_seconds\": %g,\n  \"results\": [\n",
            label, thr ? thr : "", min_s);
    int bad = 0;
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    printf("%-30s %6s %6s %6s  %10s %9s %5s\n", "shape", "M", "N", "K", "median ms", "GFLOP/s", "reps");
    for (int si = 0; si < ns; si++) {
        const shape *s = &shapes[si];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
        float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float)), *C = malloc(nc * sizeof(float));
        if (!A || !B || !C) return 1;
        for (size_t i = 0; i < na; i++) A[i] = urand();
        for (size_t i = 0; i < nb; i++) B[i] = urand();
        memset(C, 0, nc * sizeof(float));
        shape s0 = *s;
        s0.beta = 0;
        run_gemm(&s0, A, B, C); /* warm-up, and the result to check */
        double err = check(s, A, B, C);
        if (!(err < 1e-4)) {
            fprintf(stderr, "%s: wrong result (relative error %.3g)\n", s->name, err);
            bad = 1;
        }
        double times[200];
        int reps = 0;
        double t_start = now();
        while (reps < 200 && (reps < 5 || now() - t_start < min_s)) {
            double t0 = now();
            run_gemm(s, A, B, C);
            times[reps++] = now() - t0;
        }
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        double med = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
        double gflops = 2.0 * s->M * s->N * (double)s->K / med * 1e-9;
        printf("%-30s %6d %6d %6d  %10.3f %9.1f %5d\n", s->name, s->M, s->N, s->K, med * 1e3, gflops, reps);
        fprintf(out,
                "    {\"name\": \"%s\", \"trans_a\": %d, \"trans_b\": %d, \"M\": %d, \"N\": %d, \"K\": %d, "
                "\"beta\": %g, \"median_ms\": %.6f, \"min_ms\": %.6f, \"gflops\": %.3f, \"reps\": %d, "
                "\"check_rel_err\": %.3g}%s\n",
                s->name, s->ta, s->tb, s->M, s->N, s->K, s->beta, med * 1e3, times[0] * 1e3, gflops, reps, err,
                si + 1 < ns ? "," : "");
        free(A), free(B), free(C);
    }
    fprintf(out, "  ]\n}\n");
    fclose(out);
    return bad;
}
