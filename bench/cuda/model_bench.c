/* Training throughput of whole models on the GPU runner (include/snn/cuda.h): the step the
 * CLI runs with --device cuda, captured as one CUDA graph, input uploaded from the host every
 * step as in real training. Median of `trials` timed windows of `steps` steps each (device
 * events around each window), after warm-up steps (the eager first step and the capture).
 *
 *   model_bench spikformer IMAGE CLASSES EMBED HEADS DEPTH T BATCH f32|bf16 sgd|adamw STEPS TRIALS
 *   model_bench fcsnn WIDTH DEPTH T BATCH f32|bf16 STEPS TRIALS
 *   model_bench convsnn CHANNELS T BATCH f32|bf16 STEPS TRIALS
 * A trailing `ddp` adds a second device model of the same network whose step carries the
 * data-parallel collectives over an NCCL communicator of this one process (world size 1:
 * gradient average, BatchNorm broadcast, FP8 amax reduction inside the captured graph); the
 * two alternate trial by trial, and the record gives both medians and the DDP cost.
 * One JSON object on stdout (with the commit the library was built from). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/ddp.h"
#include "snn/cuda.h"
#include "snn/snn.h"

static void fail(const char *what) {
    fprintf(stderr, "model_bench: %s: %s\n", what, snn_last_error());
    exit(1);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int ddp = argc > 2 && !strcmp(argv[argc - 1], "ddp");
    if (ddp) argc--;
    if (argc < 2) {
        fprintf(stderr, "usage: see the comment at the top of bench/cuda/model_bench.c\n");
        return 2;
    }
    snn_model *m = NULL;
    int T = 0, N = 0, steps = 0, trials = 0;
    snn_dtype ct = SNN_BF16;
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = 1e-3f;
    oo.momentum = 0.9f;
    const char *model = argv[1];
    char desc[256];
    if (!strcmp(model, "spikformer") && argc == 13) {
        snn_spikformer_opts o = {.in_channels = 3, .image_size = atoi(argv[2]), .classes = atoi(argv[3]),
                                 .embed_dim = atoi(argv[4]), .heads = atoi(argv[5]), .depth = atoi(argv[6])};
        T = atoi(argv[7]);
        N = atoi(argv[8]);
        ct = !strcmp(argv[9], "f32") ? SNN_F32 : SNN_BF16;
        if (!strcmp(argv[10], "adamw")) oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
        steps = atoi(argv[11]);
        trials = atoi(argv[12]);
        if (snn_spikformer_create(&o, 1, &m) != SNN_OK) fail("spikformer");
        snprintf(desc, sizeof desc, "spikformer %dx%d classes %d D %d heads %d depth %d, %s", o.image_size,
                 o.image_size, o.classes, o.embed_dim, o.heads, o.depth, argv[10]);
    } else if (!strcmp(model, "fcsnn") && argc == 9) {
        snn_fcsnn_opts o = {.in_features = atoi(argv[2]), .hidden = atoi(argv[2]), .depth = atoi(argv[3]),
                            .classes = 10, .tau = 2.0f};
        T = atoi(argv[4]);
        N = atoi(argv[5]);
        ct = !strcmp(argv[6], "f32") ? SNN_F32 : SNN_BF16;
        steps = atoi(argv[7]);
        trials = atoi(argv[8]);
        if (snn_fcsnn_create(&o, 1, &m) != SNN_OK) fail("fcsnn");
        snprintf(desc, sizeof desc, "fcsnn width %d depth %d (input %d), sgd", o.hidden, o.depth, o.in_features);
    } else if (!strcmp(model, "convsnn") && argc == 8) {
        snn_convsnn_opts o = {.in_channels = 1, .height = 28, .width = 28, .channels = atoi(argv[2]), .classes = 10};
        T = atoi(argv[3]);
        N = atoi(argv[4]);
        ct = !strcmp(argv[5], "f32") ? SNN_F32 : SNN_BF16;
        steps = atoi(argv[6]);
        trials = atoi(argv[7]);
        if (snn_convsnn_create(&o, 1, &m) != SNN_OK) fail("convsnn");
        snprintf(desc, sizeof desc, "convsnn 28x28 channels %d, sgd", o.channels);
    } else {
        fprintf(stderr, "model_bench: bad arguments (see bench/cuda/model_bench.c)\n");
        return 2;
    }
    if (T <= 0 || N <= 0 || steps <= 0 || trials <= 0) {
        fprintf(stderr, "model_bench: T, batch, steps and trials must be positive\n");
        return 2;
    }
    snn_cuda *c = NULL;
    if (snn_cuda_create(0, 0, &c) != SNN_OK) fail("GPU");
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = ct, .loss = SNN_CUDA_LOSS_CE};
    snn_cuda_model *g = NULL, *gd = NULL;
    if (snn_cuda_model_create(c, m, &go, &oo, &g) != SNN_OK) fail("create");
    snn_comm *world = NULL, *nccl = NULL;
    snn_cuda_collectives coll;
    if (ddp) {
        if (snn_comm_init_world(&world) != SNN_OK || snn_comm_nccl_create(world, 0, &nccl) != SNN_OK) fail("NCCL");
        coll = snn_ddp_cuda_collectives(nccl);
        snn_cuda_model_opts gdo = go;
        gdo.dp = &coll;
        if (snn_cuda_model_create(c, m, &gdo, &oo, &gd) != SNN_OK) fail("create (ddp)");
    }
    size_t F = snn_model_input_numel(m), C = snn_model_output_numel(m);
    float *x = malloc(sizeof(float) * F * (size_t)N);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < F * (size_t)N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((s >> 40) & 0xFFFFFF) / 16777216.0f;
    }
    for (int i = 0; i < N; i++) y[i] = (int32_t)(i % (int)C);
    for (int i = 0; i < 3; i++) {
        if (snn_cuda_model_train_step(g, x, 0, y, -1.0f) != SNN_OK) fail("warm-up step");
        if (gd && snn_cuda_model_train_step(gd, x, 0, y, -1.0f) != SNN_OK) fail("warm-up step (ddp)");
    }
    if (snn_cuda_synchronize(c) != SNN_OK) fail("sync");
    cudaStream_t st = (cudaStream_t)snn_cuda_stream(c);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double *ms = malloc(sizeof(double) * (size_t)trials), *msd = malloc(sizeof(double) * (size_t)trials);
    for (int t = 0; t < trials; t++) {
        for (int v = 0; v < (gd ? 2 : 1); v++) { /* alternate: drift hits both alike */
            snn_cuda_model *gg = v ? gd : g;
            cudaEventRecord(e0, st);
            for (int i = 0; i < steps; i++)
                if (snn_cuda_model_train_step(gg, x, 0, y, -1.0f) != SNN_OK) fail("step");
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            float w = 0;
            cudaEventElapsedTime(&w, e0, e1);
            (v ? msd : ms)[t] = w / steps;
        }
    }
    double loss = 0;
    long corr = 0, n = 0;
    if (snn_cuda_model_take_stats(g, &loss, &corr, &n) != SNN_OK) fail("stats");
    qsort(ms, (size_t)trials, sizeof *ms, cmp_d);
    double med = ms[trials / 2], p25 = ms[trials / 4], p75 = ms[(3 * trials) / 4];
    char extra[256] = "";
    if (gd) {
        qsort(msd, (size_t)trials, sizeof *msd, cmp_d);
        double dmed = msd[trials / 2];
        snprintf(extra, sizeof extra, ",\"ddp_world_size\":1,\"ddp_backend\":\"nccl\",\"ddp_ms_per_step\":%.4f,"
                 "\"ddp_samples_per_s\":%.1f,\"ddp_cost_fraction\":%.5f,\"ddp_buckets\":%d", dmed, N * 1000.0 / dmed,
                 dmed / med - 1.0, snn_cuda_model_ddp_buckets(gd));
    }
    printf("{\"bench\":\"model\",\"model\":\"%s\",\"desc\":\"%s\",\"T\":%d,\"batch\":%d,\"compute\":\"%s\","
           "\"steps\":%d,\"trials\":%d,\"ms_per_step\":%.4f,\"ms_p25\":%.4f,\"ms_p75\":%.4f,"
           "\"samples_per_s\":%.1f,\"samples_per_s_p25\":%.1f,\"samples_per_s_p75\":%.1f,"
           "\"device_mib\":%.1f,\"parameters\":%zu,\"mean_loss\":%.5f,\"commit\":\"%s\"%s}\n",
           model, desc, T, N, snn_dtype_name(ct), steps, trials, med, p25, p75, N * 1000.0 / med,
           N * 1000.0 / p75, N * 1000.0 / p25, (double)snn_cuda_model_device_bytes(g) / 1048576.0,
           snn_model_num_params(m), n ? loss / (double)n : 0.0, snn_build_commit(), extra);
    if (getenv("SNN_MODEL_PROFILE")) {
        size_t cap = 1 << 20;
        char *rep = malloc(cap);
        if (rep && snn_cuda_model_profile(g, x, 0, y, 3, rep, cap) == SNN_OK)
            fprintf(stderr, "profile of %s, %s, T %d, batch %d:\n%s", model, snn_dtype_name(ct), T, N, rep);
        else
            fprintf(stderr, "profile failed: %s\n", snn_last_error());
        free(rep);
    }
    snn_cuda_model_destroy(g);
    snn_cuda_model_destroy(gd);
    snn_comm_free(nccl);
    snn_comm_free(world);
    snn_cuda_destroy(c);
    snn_model_free(m);
    free(x);
    free(y);
    free(ms);
    free(msd);
    return 0;
}
