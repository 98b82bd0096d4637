/* Command-line driver of the dense GPU workload (src/backend/cuda/cuda_bench_linear.cu) over
 * the shapes of the precision guide's "When FP8 is faster" table: (depth−1) × [Linear(W, W) →
 * GELU] → Linear(W, C), cross-entropy, plain SGD (lr 1e-3) on FP32 master weights, input
 * randn[B, W], fixed labels, weights U(±1/sqrt(W)) (PyTorch's Linear default).
 *
 * For each shape, `--trials` trials run fp16, bf16 and fp8 with the precision order rotated
 * left by the trial index; every (trial, precision) builds a fresh network from the same host
 * weights (snn_cuda_bench_run: warm-up, `--steps` timed graph replays). Prints one JSON object
 * per (shape, trial, precision), one per shape with the medians over trials and the guide's
 * RTX 5090 ratios, and a markdown table (--md). `snn bench linear|crossover --device cuda`
 * run the same workload with the full benchmark protocol and JSON. */
#include <time.h>

#include "../../src/backend/cuda/cuda_bench.h" /* relative: the bench targets do not see src/ */
#include "bench_common.h"

enum { P_FP16, P_BF16, P_FP8, NP };
static const char *pname[] = {"fp16", "bf16", "fp8"};
static const snn_cuda_bench_precision pgpu[] = {SNN_CUDA_BENCH_FP16, SNN_CUDA_BENCH_BF16, SNN_CUDA_BENCH_FP8};

typedef struct {
    int B, W;
    double guide[4]; /* train FP8/FP16, FP8/BF16, infer FP8/FP16, FP8/BF16 (RTX 5090) */
} shape;

static const shape k_shapes[] = {
    {4096, 2304, {0.553, 0.527, 0.915, 0.966}}, {4096, 2560, {0.720, 0.705, 1.117, 1.100}},
    {4096, 3072, {0.978, 1.026, 1.454, 1.629}}, {4096, 3200, {1.060, 1.067, 1.464, 1.614}},
    {3072, 4096, {1.390, 1.472, 1.513, 1.684}},
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static const char *verdict(double a, double b) {
    if (a >= 1.05 && b >= 1.05) return "win";
    if (a >= 1.05 || b >= 1.05) return "mixed";
    return "no win";
}

int main(int argc, char **argv) {
    int D = 8, warm = 3, steps = 35, trials = 3, only = -1;
    float lr = 1e-3f;
    double time_limit = 1e9;
    const char *json = NULL, *md = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--depth")) D = atoi(v), i++;
        else if (!strcmp(a, "--shape")) only = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warm = atoi(v), i++;
        else if (!strcmp(a, "--steps")) steps = atoi(v), i++;
        else if (!strcmp(a, "--trials")) trials = atoi(v), i++;
        else if (!strcmp(a, "--lr")) lr = (float)atof(v), i++;
        else if (!strcmp(a, "--time-limit")) time_limit = atof(v), i++;
        else if (!strcmp(a, "--json")) json = v, i++;
        else if (!strcmp(a, "--md")) md = v, i++;
        else {
            fprintf(stderr, "usage: %s [--depth D] [--shape 0..4] [--trials N] [--warmup N] "
                            "[--steps N] [--lr X] [--time-limit S] [--json FILE] [--md FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (D < 2 || trials < 1 || trials > 16 || steps < 1 || warm < 0) {
        fprintf(stderr, "need depth >= 2, 1 <= trials <= 16, steps >= 1, warmup >= 0\n");
        return 2;
    }
    const double t_start = now_s();
    TRY(snn_cuda_create(0, 0, &g_ctx));
    FILE *jf = json ? fopen(json, "a") : NULL;
    if (json && !jf) {
        fprintf(stderr, "cannot open %s\n", json);
        return 1;
    }
    const int nshapes = (int)(sizeof k_shapes / sizeof k_shapes[0]);
    double res[5][NP][2]; /* median samples/s over trials: [shape][precision][train, infer] */
    int done[5] = {0}, ntr[5] = {0};
    for (int si = 0; si < nshapes; si++) {
        if (only >= 0 && si != only) continue;
        if (now_s() - t_start > time_limit) {
            fprintf(stderr, "time limit reached: shape %d skipped\n", si);
            continue;
        }
        const shape *sh = &k_shapes[si];
        const int B = sh->B, W = sh->W, C = sh->W;
        float **w = (float **)calloc((size_t)D, sizeof(float *)), **b = (float **)calloc((size_t)D, sizeof(float *));
        for (int l = 0; l < D; l++) {
            float a = 1.0f / sqrtf((float)W);
            int out = l == D - 1 ? C : W;
            w[l] = host_fill((size_t)W * out, 20260718 + 100 + l, 0, -a, a);
            b[l] = host_fill((size_t)out, 20260718 + 200 + l, 0, -a, a);
        }
        float *x = host_fill((size_t)B * W, 20260718 + 7, 1, 0, 0);
        int32_t *y = (int32_t *)malloc((size_t)B * 4);
        uint64_t s = 20260718;
        for (int i = 0; i < B; i++) y[i] = (int32_t)(host_rng_next(&s) % (uint64_t)C);
        snn_cuda_bench_data data = {(const float *const *)w, (const float *const *)b, x, y};
        snn_cuda_bench_cfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.kind = SNN_CUDA_BENCH_LINEAR;
        cfg.T = 1;
        cfg.N = B;
        cfg.in = cfg.width = W;
        cfg.depth = D;
        cfg.classes = C;
        cfg.lr = lr;
        cfg.warmup = warm;
        cfg.training_steps = cfg.inference_steps = steps;
        cfg.autotune = 1;
        double tr_sps[NP][16], in_sps[NP][16];
        int nt = 0;
        for (int t = 0; t < trials; t++) {
            if (t > 0 && now_s() - t_start > time_limit) {
                fprintf(stderr, "time limit reached: %d trial(s) for shape %d\n", t, si);
                break;
            }
            for (int k = 0; k < NP; k++) {
                int p = (k + t) % NP; /* order rotated left by the trial index */
                snn_cuda_bench_result r;
                TRY(snn_cuda_bench_run(g_ctx, &cfg, pgpu[p], &data, &r));
                tr_sps[p][t] = B / (r.train_ms * 1e-3);
                in_sps[p][t] = B / (r.infer_ms * 1e-3);
                double fl = 2.0 * B * (double)W * W * D;
                char buf[1536];
                snprintf(buf, sizeof buf,
                         "{\"bench\": \"linear_crossover\", \"precision\": \"%s\", \"batch\": %d, "
                         "\"width\": %d, \"depth\": %d, \"classes\": %d, \"trial\": %d, "
                         "\"order_position\": %d, \"train_ms\": %.4f, \"train_samples_per_s\": %.1f, "
                         "\"forward_ms\": %.4f, \"loss_ms\": %.4f, \"backward_optimizer_ms\": %.4f, "
                         "\"optimizer_ms\": %.4f, \"infer_ms\": %.4f, \"infer_samples_per_s\": %.1f, "
                         "\"train_gemm_tflops\": %.1f, \"infer_gemm_tflops\": %.1f, \"allocated_mib\": %.1f, "
                         "\"infer_allocated_mib\": %.1f, \"device_used_mib\": %.1f, \"loss_now\": %.6g, "
                         "\"loss_finite\": %s, \"param_update_max_abs\": %.4g, \"output_finite\": %s, "
                         "\"output_checksum\": %.9g, \"steps\": %d, \"warmup\": %d, \"prep_ms\": %.1f, ",
                         pname[p], B, W, D, C, t, k, r.train_ms, tr_sps[p][t], r.forward_ms, r.loss_ms,
                         r.backward_optimizer_ms, r.optimizer_ms, r.infer_ms, in_sps[p][t],
                         3 * fl / (r.train_ms * 1e-3) / 1e12, fl / (r.infer_ms * 1e-3) / 1e12,
                         r.train_alloc_bytes / 1048576.0, r.infer_alloc_bytes / 1048576.0,
                         r.device_used_bytes / 1048576.0, r.final_loss, r.loss_finite ? "true" : "false",
                         r.update_max_abs, r.output_finite ? "true" : "false", r.checksum, steps, warm, r.prep_ms);
                printf("%s", buf);
                device_json(stdout);
                printf("}\n");
                fflush(stdout);
                if (jf) {
                    fprintf(jf, "%s", buf);
                    device_json(jf);
                    fprintf(jf, "}\n");
                    fflush(jf);
                }
            }
            nt = t + 1;
        }
        for (int l = 0; l < D; l++) {
            free(w[l]);
            free(b[l]);
        }
        free(w);
        free(b);
        free(x);
        free(y);
        for (int p = 0; p < NP; p++) {
            res[si][p][0] = median(tr_sps[p], nt);
            res[si][p][1] = median(in_sps[p], nt);
        }
        double r[4] = {res[si][P_FP8][0] / res[si][P_FP16][0], res[si][P_FP8][0] / res[si][P_BF16][0],
                       res[si][P_FP8][1] / res[si][P_FP16][1], res[si][P_FP8][1] / res[si][P_BF16][1]};
        char buf[1024];
        snprintf(buf, sizeof buf,
                 "{\"bench\": \"linear_crossover_summary\", \"batch\": %d, \"width\": %d, \"depth\": %d, "
                 "\"trials\": %d, \"train_samples_per_s\": {\"fp16\": %.1f, \"bf16\": %.1f, \"fp8\": %.1f}, "
                 "\"infer_samples_per_s\": {\"fp16\": %.1f, \"bf16\": %.1f, \"fp8\": %.1f}, "
                 "\"train_fp8_over_fp16\": %.3f, \"train_fp8_over_bf16\": %.3f, \"infer_fp8_over_fp16\": %.3f, "
                 "\"infer_fp8_over_bf16\": %.3f, \"guide_rtx5090\": [%.3f, %.3f, %.3f, %.3f], "
                 "\"train_verdict\": \"%s\", \"infer_verdict\": \"%s\"}",
                 B, W, D, nt, res[si][0][0], res[si][1][0], res[si][2][0], res[si][0][1], res[si][1][1],
                 res[si][2][1], r[0], r[1], r[2], r[3], sh->guide[0], sh->guide[1], sh->guide[2], sh->guide[3],
                 verdict(r[0], r[1]), verdict(r[2], r[3]));
        printf("%s\n", buf);
        fflush(stdout);
        if (jf) {
            fprintf(jf, "%s\n", buf);
            fflush(jf);
        }
        done[si] = 1;
        ntr[si] = nt;
    }
    if (jf) fclose(jf);
    /* markdown table */
    FILE *mf = md ? fopen(md, "w") : NULL;
    FILE *outs[2] = {stdout, mf};
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f) continue;
        fprintf(f, "| batch | width | train fp16 | train bf16 | train fp8 | infer fp16 | infer bf16 "
                   "| infer fp8 | train FP8/FP16 · FP8/BF16 | guide (RTX 5090) | infer FP8/FP16 · "
                   "FP8/BF16 | guide (RTX 5090) | ours: train / infer | trials |\n");
        fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int si = 0; si < nshapes; si++) {
            if (!done[si]) continue;
            const shape *sh = &k_shapes[si];
            double r[4] = {res[si][2][0] / res[si][0][0], res[si][2][0] / res[si][1][0],
                           res[si][2][1] / res[si][0][1], res[si][2][1] / res[si][1][1]};
            fprintf(f, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f× / %.3f× | "
                       "%.3f× / %.3f× | %.3f× / %.3f× | %.3f× / %.3f× | %s / %s | %d |\n",
                    sh->B, sh->W, res[si][0][0], res[si][1][0], res[si][2][0], res[si][0][1],
                    res[si][1][1], res[si][2][1], r[0], r[1], sh->guide[0], sh->guide[1], r[2],
                    r[3], sh->guide[2], sh->guide[3], verdict(r[0], r[1]), verdict(r[2], r[3]),
                    ntr[si]);
        }
    }
    if (mf) fclose(mf);
    fprintf(stderr, "linear_bench: %.1f s\n", now_s() - t_start);
    snn_cuda_destroy(g_ctx);
    return 0;
}
