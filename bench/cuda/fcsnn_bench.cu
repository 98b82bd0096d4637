/* Command-line driver of the FC-SNN GPU workload (src/backend/cuda/cuda_bench_fcsnn.cu):
 * input [T, B, I] ~ N(0, 1), D × [Linear(in, W) → LIF(tau 2, Sigmoid(4), hard reset 0)],
 * Linear(W, C), cross-entropy on the mean over T, SGD momentum 0.9 with FP32 master weights.
 * The same workload runs under `snn bench fcsnn --device cuda`, which adds the benchmark
 * protocol (trials, rotated order, medians, JSON); this driver keeps the per-precision JSON
 * lines that scripts/gpu-check summarises, with the GEMM floor rate of each precision.
 *
 * Hidden weights are U(±gain/sqrt(in)) (default gain 12 keeps ~25% of neurons spiking at every
 * depth; PyTorch's U(±1/sqrt(in)) lets activity die after two layers: GEMMs on zeros),
 * biases and the head U(±1/sqrt(in)). --depth counts the LIF blocks here (the head adds one
 * Linear); snn bench's --depth counts Linear layers. */
#include "../../src/backend/cuda/cuda_bench.h" /* relative: the bench targets do not see src/ */
#include "bench_common.h"

static const char *pname[] = {"fp32", "fp16", "bf16", "fp8"};

int main(int argc, char **argv) {
    int W = 4096, D = 20, I = 0, B = 256, T = 16, C = 10, warm = 3, steps = 35, overlap = 0;
    float lr = 0.05f, gain = 12.0f;
    const char *precs = "fp32,fp16,bf16,fp8", *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--width")) W = atoi(v), i++;
        else if (!strcmp(a, "--depth")) D = atoi(v), i++;
        else if (!strcmp(a, "--input-dim")) I = atoi(v), i++;
        else if (!strcmp(a, "--batch")) B = atoi(v), i++;
        else if (!strcmp(a, "--time-steps")) T = atoi(v), i++;
        else if (!strcmp(a, "--classes")) C = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warm = atoi(v), i++;
        else if (!strcmp(a, "--steps")) steps = atoi(v), i++;
        else if (!strcmp(a, "--lr")) lr = (float)atof(v), i++;
        else if (!strcmp(a, "--init-gain")) gain = (float)atof(v), i++;
        else if (!strcmp(a, "--overlap")) overlap = atoi(v), i++;
        else if (!strcmp(a, "--precisions")) precs = v, i++;
        else if (!strcmp(a, "--json")) json = v, i++;
        else {
            fprintf(stderr, "usage: %s [--width W] [--depth D] [--input-dim I] [--batch B] "
                            "[--time-steps T] [--classes C] [--precisions fp32,fp16,bf16,fp8] "
                            "[--warmup N] [--steps N] [--lr X] [--init-gain G] [--overlap 0|1] "
                            "[--json FILE]\n",
                    argv[0]);
            return 2;
        }
    }
    if (I <= 0) I = W;
    if (W <= 0 || D < 1 || B <= 0 || T <= 0 || C <= 0 || steps < 1 || warm < 0) {
        fprintf(stderr, "invalid sizes (need positive sizes, depth >= 1, steps >= 1)\n");
        return 2;
    }
    TRY(snn_cuda_create(0, 0, &g_ctx));
    snn_cuda_set_gemm_autotune(g_ctx, 1);
    FILE *jf = json ? fopen(json, "a") : NULL;
    if (json && !jf) {
        fprintf(stderr, "cannot open %s\n", json);
        return 1;
    }
    /* host base state: every precision starts from it */
    const int L = D + 1, M = T * B;
    float **w = (float **)calloc((size_t)L, sizeof(float *)), **b = (float **)calloc((size_t)L, sizeof(float *));
    for (int l = 0; l < L; l++) {
        int in = l == 0 ? I : W, out = l == D ? C : W;
        float a = (l == D ? 1.0f : gain) / sqrtf((float)in), ab = 1.0f / sqrtf((float)in);
        w[l] = host_fill((size_t)in * out, 1000 + l, 0, -a, a);
        b[l] = host_fill((size_t)out, 2000 + l, 0, -ab, ab);
    }
    float *x = host_fill((size_t)M * I, 7, 1, 0, 0);
    int32_t *y = (int32_t *)malloc((size_t)B * 4);
    for (int i = 0; i < B; i++) y[i] = (int32_t)((i * 7 + 3) % C);
    snn_cuda_bench_data data = {(const float *const *)w, (const float *const *)b, x, y};
    snn_cuda_bench_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = SNN_CUDA_BENCH_FCSNN;
    cfg.T = T;
    cfg.N = B;
    cfg.in = I;
    cfg.width = W;
    cfg.depth = D + 1;
    cfg.classes = C;
    cfg.tau = 2.0f;
    cfg.lr = lr;
    cfg.momentum = 0.9f;
    cfg.warmup = warm;
    cfg.training_steps = steps;
    cfg.inference_steps = steps;
    cfg.overlap_optimizer = overlap;
    cfg.autotune = 1;
    for (int p = 0; p < 4; p++) {
        if (!strstr(precs, pname[p])) continue;
        /* the floor rate of this precision: a big square GEMM in the same run */
        static const snn_dtype ab[] = {SNN_F32, SNN_F16, SNN_BF16, SNN_F8E4M3};
        static const snn_dtype cc[] = {SNN_F32, SNN_F16, SNN_BF16, SNN_BF16};
        double rate = gemm_rate(8192, ab[p], cc[p], p == SNN_CUDA_BENCH_FP8);
        if (snn_cuda_bench_check(&cfg, (snn_cuda_bench_precision)p) != SNN_OK) {
            fprintf(stderr, "%s skipped: %s\n", pname[p], snn_last_error());
            continue;
        }
        snn_cuda_bench_result r;
        TRY(snn_cuda_bench_run(g_ctx, &cfg, (snn_cuda_bench_precision)p, &data, &r));
        double ff = 0;
        for (int l = 0; l < L; l++) ff += 2.0 * M * (double)(l == 0 ? I : W) * (l == D ? C : W);
        double floor_t = 3 * ff / (rate * 1e12) * 1e3, floor_i = ff / (rate * 1e12) * 1e3;
        char buf[2048];
        snprintf(buf, sizeof buf,
                 "{\"bench\": \"fcsnn\", \"precision\": \"%s\", \"width\": %d, \"depth\": %d, "
                 "\"input_dim\": %d, \"batch\": %d, \"time_steps\": %d, \"classes\": %d, "
                 "\"overlap_optimizer\": %d, \"train_ms\": %.4f, \"train_samples_per_s\": %.1f, "
                 "\"forward_ms\": %.4f, \"loss_ms\": %.4f, \"backward_optimizer_ms\": %.4f, "
                 "\"optimizer_ms\": %.4f, \"infer_ms\": %.4f, \"infer_samples_per_s\": %.1f, "
                 "\"gemm_floor_tflops\": %.1f, \"train_gemm_floor_ms\": %.4f, \"infer_gemm_floor_ms\": "
                 "%.4f, \"train_floor_fraction\": %.3f, \"infer_floor_fraction\": %.3f, "
                 "\"allocated_mib\": %.1f, \"device_used_mib\": %.1f, \"loss_after\": %.6g, "
                 "\"loss_finite\": %s, \"param_delta\": %.3g, \"logit_finite\": %s, "
                 "\"last_hidden_spike_rate_first_step\": %.4f, \"last_hidden_spike_rate\": %.4f, "
                 "\"warmup\": %d, \"steps\": %d, \"prep_ms\": %.1f}",
                 pname[p], W, D, I, B, T, C, overlap, r.train_ms, B / (r.train_ms * 1e-3), r.forward_ms, r.loss_ms,
                 r.backward_optimizer_ms, r.optimizer_ms, r.infer_ms, B / (r.infer_ms * 1e-3), rate, floor_t, floor_i,
                 floor_t / r.train_ms, floor_i / r.infer_ms, r.train_alloc_bytes / 1048576.0,
                 r.device_used_bytes / 1048576.0, r.final_loss, r.loss_finite ? "true" : "false", r.update_max_abs,
                 r.output_finite ? "true" : "false", r.spike_rate_first, r.spike_rate_last, warm, steps, r.prep_ms);
        printf("%s\n", buf);
        fflush(stdout);
        if (jf) {
            fprintf(jf, "%s\n", buf);
            fflush(jf);
        }
    }
    if (jf) fclose(jf);
    for (int l = 0; l < L; l++) {
        free(w[l]);
        free(b[l]);
    }
    free(w);
    free(b);
    free(x);
    free(y);
    snn_cuda_destroy(g_ctx);
    return 0;
}
