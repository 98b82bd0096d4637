/* DDP against a single process, run under `mpirun -np 2` (tests/cli_dist_ddp.sh):
 *   driver_ddp MODEL PRECISION STEPS B
 * Every rank trains MODEL (fcsnn | convsnn, small) for STEPS steps with batch B per rank
 * through snn_dist_train_classification on fresh synthetic data. After every step the
 * ranks compare their parameters, buffers, loss scale and FP8 amax histories and scales
 * bit for bit (all-gather). Then rank 0 trains the same model alone with the plain model
 * API and compares the final weights (the oracle):
 *   fcsnn:   one process with batch 2B (the same samples per step) -- must agree within
 *            1e-5 relative (FP32);
 *   convsnn: BatchNorm normalises with each replica's own batch statistics (DDP without
 *            SyncBatchNorm, as the reference), so the oracle runs the two halves of each
 *            2B batch as separate forward/backward passes, averages the gradients and
 *            keeps DP rank 0's running statistics -- must agree within 1e-5; the plain 2B
 *            batch is reported for information;
 *   convsnn-syncbn: the same with SyncBatchNorm (snn_ddp_sync_batchnorm): the oracle is one
 *            process with batch 2B, weights and BatchNorm buffers within 1e-5.
 * FP8 delayed: additionally the newest amax of the first Linear's input state must be the
 * MAX over ranks of the rank-local batch amax (so the check fails if the sync is absent).
 * DEVICE (optional, default cpu): "cuda" places every model (the ranks' and the oracle's) on
 * the GPU before prepare; the gradients then go through the host (an MPI communicator; the
 * ranks may share one GPU), or through NCCL with DDP_NCCL=1 (one GPU per rank, device
 * local_rank). The same checks hold. convsnn without SyncBatchNorm needs the CPU (its
 * oracle edits gradients and buffers in place).
 * Exit 0 only when every rank passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"
#include "dist/ddp.h"
#include "dist/sampler.h"
#include "dist/vision_train.h"
#include "precision/runtime.h"
#include "snn/loss.h"

static int checks, failures, R;
#define CK(c, ...)                                                                               \
    do {                                                                                         \
        checks++;                                                                                \
        if (!(c)) {                                                                              \
            failures++;                                                                          \
            if (failures < 20) {                                                                 \
                fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s: ", R, __FILE__, __LINE__, #c); \
                fprintf(stderr, __VA_ARGS__);                                                    \
                fputc('\n', stderr);                                                             \
            }                                                                                    \
        }                                                                                        \
    } while (0)
#define TRY(e)                                                                                   \
    do {                                                                                         \
        snn_status s_ = (e);                                                                     \
        if (s_ != SNN_OK) {                                                                      \
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", R, __FILE__, __LINE__, #e, snn_last_error()); \
            snn_comm_abort(g_world, 1);                                                          \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static snn_comm *g_world;
static const char *g_model;
static int g_B, g_T = 4, g_sync;
static uint64_t g_seed;
static float g_lr = 0.05f;
static char g_device[16] = "cpu";

static snn_status build(const char *model, const snn_precision_config *pc, snn_model **m, snn_precision **p,
                        snn_optimizer **o) {
    if (!strcmp(model, "fcsnn")) {
        snn_fcsnn_opts fo = {.in_features = 784, .hidden = 64, .depth = 2, .classes = 10};
        snn_status st = snn_fcsnn_create(&fo, g_seed, m);
        if (st != SNN_OK) return st;
    } else {
        snn_convsnn_opts co = {.in_channels = 1, .height = 28, .width = 28, .channels = 8, .classes = 10};
        snn_status st = snn_convsnn_create(&co, g_seed, m);
        if (st != SNN_OK) return st;
    }
    snn_status st = strcmp(g_device, "cpu") ? snn_model_to(*m, g_device) : SNN_OK;
    if (st == SNN_OK) st = snn_prepare_model_for_precision(*m, g_device, pc, p);
    if (st != SNN_OK) return st;
    snn_optim_opts oo = snn_optim_defaults(getenv("DDP_ADAM") ? SNN_OPTIM_ADAM : SNN_OPTIM_SGD);
    oo.lr = g_lr;
    return snn_optimizer_create_for_model(&oo, *m, o);
}

typedef struct step_ctx {
    snn_model *m;
    snn_precision *p;
    const snn_dataset *train;
    int fp8;
} step_ctx;

/* every rank holds the same bytes */
static int same_everywhere(const void *buf, size_t bytes) {
    int P = snn_comm_size(g_world);
    unsigned char *all = malloc(bytes * (size_t)P);
    if (!all) return 0;
    TRY(snn_comm_allgather(g_world, buf, bytes, SNN_COMM_U8, all));
    int ok = 1;
    for (int r = 1; r < P; r++) ok &= !memcmp(all, all + (size_t)r * bytes, bytes);
    free(all);
    return ok;
}

static snn_status on_step(void *vctx, long step) {
    step_ctx *c = vctx;
    CK(same_everywhere(snn_model_params(c->m), sizeof(float) * snn_model_num_params(c->m)),
       "parameters differ across ranks after step %ld", step);
    /* BatchNorm buffers: each replica updates its own in the forward; DP rank 0's are
     * broadcast before the next forward (and before validation), checked at the end */
    float ls = snn_precision_loss_scale(c->p);
    CK(same_everywhere(&ls, sizeof ls), "loss scale differs after step %ld", step);
    size_t ns = snn_precision_fp8_state_count(c->p);
    if (c->fp8) CK(ns > 0, "no FP8 states");
    for (size_t i = 0; i < ns; i++) {
        snn_fp8_tensor_state *s = snn_precision_fp8_state(c->p, i);
        CK(same_everywhere(s->amax_history, sizeof(float) * (size_t)s->history_len),
           "amax history %zu differs after step %ld", i, step);
        float sc[2] = {s->scale, s->scale_inv};
        CK(same_everywhere(sc, sizeof sc), "FP8 scale %zu differs after step %ld", i, step);
    }
    /* the first step of an epoch after the first also carries the validation forward's
     * amax (evaluation quantises too), so the exact check runs on the other steps */
    long nbe = (long)(snn_dist_sampler_num_samples((size_t)snn_dataset_size(c->train), snn_comm_size(g_world)) /
                      (size_t)g_B);
    if (c->fp8 && ns && (step == 1 || (step - 1) % nbe != 0)) {
        /* the first Linear's input is the encoded batch (direct encoding: the pixels) */
        int P = snn_comm_size(g_world);
        size_t per = snn_dist_sampler_num_samples((size_t)snn_dataset_size(c->train), P);
        uint32_t *perm = malloc(sizeof(uint32_t) * (size_t)snn_dataset_size(c->train));
        uint32_t *idx = malloc(sizeof(uint32_t) * per);
        float *x = malloc(sizeof(float) * 784 * (size_t)g_B);
        long nb = (long)(per / (size_t)g_B), k = (step - 1) % nb;
        uint64_t epoch = (uint64_t)((step - 1) / nb) + 1;
        TRY(snn_dist_sampler_epoch(c->train, 1, g_seed, epoch, P, R, perm, idx));
        TRY(snn_dataset_batch(c->train, idx + (size_t)k * g_B, g_B, x, NULL));
        float local = snn_fp8_amax(x, 784 * (size_t)g_B), glob = local;
        TRY(snn_comm_allreduce(g_world, &glob, 1, SNN_COMM_F32, SNN_COMM_MAX));
        snn_fp8_tensor_state *s0 = snn_precision_fp8_state(c->p, 0);
        CK(s0->history_len > 1 && s0->amax_history[s0->history_len - 1] == glob,
           "newest input amax %g != max over ranks %g (local %g)", (double)s0->amax_history[s0->history_len - 1],
           (double)glob, (double)local);
        free(perm); free(idx); free(x);
    }
    return SNN_OK;
}

/* Relative L2 distance of all weights (and buffers): ||a - b|| / ||b||. */
static void refresh(snn_model *a, snn_model *b) { /* the host copies of device models */
    TRY(snn_model_params(a) && snn_model_buffers(a) && snn_model_params(b) && snn_model_buffers(b) ? SNN_OK
                                                                                                   : SNN_E_STATE);
}

static double rel_l2(snn_model *a, snn_model *b, int buffers_too) {
    double d2 = 0, n2 = 0;
    refresh(a, b);
    for (size_t i = 0; i < snn_model_num_tensors(a); i++) {
        snn_tensor_info ta, tb;
        snn_model_tensor(a, i, &ta);
        snn_model_tensor(b, i, &tb);
        if (ta.is_buffer && !buffers_too) continue;
        for (size_t k = 0; k < ta.numel; k++) {
            double d = (double)ta.data[k] - tb.data[k];
            d2 += d * d;
            n2 += (double)tb.data[k] * tb.data[k];
        }
    }
    return sqrt(d2 / fmax(n2, 1e-300));
}

static double rel_diff(snn_model *a, snn_model *b, int buffers_too, const char **worst) {
    double w = 0;
    refresh(a, b);
    *worst = "";
    for (size_t i = 0; i < snn_model_num_tensors(a); i++) {
        snn_tensor_info ta, tb;
        snn_model_tensor(a, i, &ta);
        snn_model_tensor(b, i, &tb);
        if (ta.is_buffer && !buffers_too) continue;
        double md = 0, mx = 0;
        for (size_t k = 0; k < ta.numel; k++) {
            md = fmax(md, fabs((double)ta.data[k] - tb.data[k]));
            mx = fmax(mx, fabs((double)tb.data[k]));
        }
        double r = md / fmax(mx, 1e-30);
        if (!(r <= w)) w = r, *worst = ta.name;
    }
    return w;
}

/* The single-process oracle (plain model API). halves: 1 = one batch of 2B; 2 = two
 * passes of B (positions 0,2,4.. then 1,3,5.. of the window, as the DP ranks see them),
 * averaged gradients, rank 0's BatchNorm statistics. */
static void oracle(const snn_dataset *train, int steps, int halves, snn_model **out_m) {
    snn_precision_config pc = snn_precision_config_default();
    snn_model *m;
    snn_precision *p;
    snn_optimizer *o;
    TRY(build(g_model, &pc, &m, &p, &o));
    int n = snn_dataset_size(train), B2 = 2 * g_B, nb = n / B2, Nb = halves == 1 ? B2 : g_B;
    uint32_t *perm = malloc(sizeof(uint32_t) * (size_t)n), idx[4096];
    float *xb = malloc(sizeof(float) * 784 * (size_t)B2), *xt = malloc(sizeof(float) * 784 * (size_t)B2 * g_T);
    float *dy = malloc(sizeof(float) * 10 * (size_t)B2 * g_T);
    float *saved = malloc(sizeof(float) * (snn_model_num_buffers(m) + 1));
    int32_t yb[4096];
    TRY(snn_model_plan(m, g_T, Nb));
    int use_mse = !strcmp(g_model, "convsnn");
    for (int s = 0; s < steps; s++) {
        int epoch = s / nb + 1, k = s % nb;
        TRY(snn_dataset_shuffle(train, g_seed, (uint64_t)epoch, perm));
        snn_model_zero_grad(m);
        for (int h = 0; h < halves; h++) {
            for (int j = 0; j < Nb; j++) idx[j] = perm[(size_t)k * B2 + (halves == 1 ? (size_t)j : (size_t)(2 * j + h))];
            TRY(snn_dataset_batch(train, idx, Nb, xb, yb));
            snn_encode_direct(xb, Nb, 784, g_T, xt);
            const float *y;
            TRY(snn_model_forward(m, xt, 1, &y));
            float loss;
            TRY(use_mse ? snn_loss_mse_rate(y, yb, g_T, Nb, 10, &loss, dy, NULL)
                        : snn_loss_cross_entropy_mean_t(y, yb, g_T, Nb, 10, &loss, dy, NULL));
            TRY(snn_model_backward(m, dy));
            if (halves == 2 && h == 0) memcpy(saved, snn_model_buffers(m), sizeof(float) * snn_model_num_buffers(m));
        }
        if (halves == 2) {
            memcpy(snn_model_buffers(m), saved, sizeof(float) * snn_model_num_buffers(m));
            float *g = snn_model_grads(m);
            for (size_t i = 0; i < snn_model_num_params(m); i++) g[i] *= 0.5f;
        }
        TRY(snn_optimizer_step(o, -1.0f, 0));
    }
    free(perm); free(xb); free(xt); free(dy); free(saved);
    snn_optimizer_free(o);
    snn_precision_free(p);
    *out_m = m;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: driver_ddp fcsnn|convsnn|convsnn-syncbn fp32|fp16|bf16|fp8 STEPS B [cpu|cuda]\n");
        return 2;
    }
    if (snn_comm_init_world(&g_world) != SNN_OK) {
        fprintf(stderr, "%s\n", snn_last_error());
        return 1;
    }
    R = snn_comm_rank(g_world);
    int P = snn_comm_size(g_world);
    g_model = argv[1];
    if (!strcmp(g_model, "convsnn-syncbn")) {
        g_model = "convsnn";
        g_sync = 1;
    }
    snn_comm *nccl = NULL;
    if (argc == 6 && strcmp(argv[5], "cpu")) {
        if (strcmp(argv[5], "cuda") || (!strcmp(g_model, "convsnn") && !g_sync)) snn_comm_abort(g_world, 2);
        snprintf(g_device, sizeof g_device, "cuda:%d", getenv("DDP_NCCL") ? snn_comm_local_rank(g_world) : 0);
        if (getenv("DDP_NCCL")) TRY(snn_comm_nccl_create(g_world, snn_comm_local_rank(g_world), &nccl));
    }
    int steps = atoi(argv[3]);
    g_B = atoi(argv[4]);
    if (g_B <= 0 || g_B > 2048 || steps <= 0) snn_comm_abort(g_world, 2);
    g_seed = R == 0 ? (uint64_t)time(NULL) * 2654435761u : 0;
    if (getenv("SNN_TEST_SEED")) g_seed = strtoull(getenv("SNN_TEST_SEED"), NULL, 10);
    TRY(snn_comm_broadcast(g_world, &g_seed, 1, SNN_COMM_I64, 0));
    snn_precision_config pc;
    TRY(snn_precision_config_parse(argv[2], !strcmp(argv[2], "fp8") ? "delayed" : "auto", NULL, NULL, NULL, &pc));
    if (pc.mode == SNN_PRECISION_FP8) pc.amax_history_len = 4; /* short: the window rolls within the run */

    /* fresh data: 3 windows of 2B per epoch so that the run crosses an epoch boundary */
    int n = 2 * g_B * P / 2 * 3;
    snn_dataset *train, *val;
    TRY(snn_dataset_synthetic(n, 1, 28, 28, 10, g_seed ^ 0x5eed, &train));
    TRY(snn_dataset_synthetic(4 * P, 1, 28, 28, 10, g_seed ^ 0x7e57, &val));
    snn_model *m;
    snn_precision *p;
    snn_optimizer *o;
    TRY(build(g_model, &pc, &m, &p, &o));
    if (g_sync) {
        int nbn = 0;
        TRY(snn_ddp_sync_batchnorm(g_world, m, &nbn));
        CK(nbn == 2, "%d BatchNorms synchronised (convsnn has 2)", nbn);
    }
    /* FP16: start from a loss scale that overflows, so that the first steps are skipped
     * (each rank must skip the same ones and back off to the same scale) */
    if (pc.mode == SNN_PRECISION_FP16) p->scaler.scale = 16777216.0f;
    snn_mesh mesh;
    TRY(snn_mesh_create(g_world, 1, 1, &mesh));
    step_ctx sc = {.m = m, .p = p, .train = train, .fp8 = pc.mode == SNN_PRECISION_FP8};
    snn_dist_train_opts to = {.model = m, .prec = p, .opt = o, .train = train, .val = val, .time_steps = g_T,
                              .batch_size = g_B, .epochs = 1000, .max_steps = steps,
                              .use_mse = !strcmp(g_model, "convsnn"), .enc = SNN_ENCODING_DIRECT, .seed = g_seed,
                              .sched = {.kind = SNN_LR_CONSTANT, .base_lr = g_lr, .total_steps = steps},
                              .bucket_bytes = 4096 /* several buckets even for these small models */,
                              .on_step = on_step, .ctx = &sc, .device_dp = nccl};
    snn_dist_metrics met;
    TRY(snn_dist_train_classification(&mesh, &to, &met));
    CK(met.optimizer_step == steps, "%g steps", met.optimizer_step);
    if (pc.mode == SNN_PRECISION_FP16) {
        CK(met.skipped_steps >= 1 && met.skipped_steps < steps, "%g skipped steps", met.skipped_steps);
        CK(same_everywhere(&met.skipped_steps, sizeof met.skipped_steps), "skipped steps differ across ranks");
        if (R == 0) printf("  fp16: %g of %d steps skipped on overflow on every rank\n", met.skipped_steps, steps);
    }
    if (snn_model_num_buffers(m))
        CK(same_everywhere(snn_model_buffers(m), sizeof(float) * snn_model_num_buffers(m)),
           "BatchNorm buffers differ across ranks after training");
    CK(met.data_parallel_size == P && met.global_batch_size == (double)g_B * P, "sizes");
    if (R == 0) printf("ddp %s%s %s on %s%s: %d ranks, %d steps, batch %d per rank, seed %llu\n", g_model,
                       g_sync ? " (SyncBatchNorm)" : "", argv[2], g_device,
                       strcmp(g_device, "cpu") ? (nccl ? " (NCCL)" : " (through the host)") : "", P, steps, g_B,
                       (unsigned long long)g_seed);
    if (R == 0 && P == 2 && pc.mode == SNN_PRECISION_FP32) {
        const char *wn;
        snn_model *ref;
        int halves = !strcmp(g_model, "convsnn") && !g_sync ? 2 : 1;
        oracle(train, steps, halves, &ref);
        double r = rel_diff(m, ref, halves == 2 || g_sync, &wn);
        printf("  vs one process (%s): max relative weight difference %.3g (%s)\n",
               halves == 1 ? "batch 2B" : "two B halves per step, averaged", r, r > 0 ? wn : "bit-identical");
        if (g_sync) {
            /* one process sums the 2B batch's BatchNorm statistics and loss in another order
             * than two ranks do (last-bit differences), and an IF neuron near its threshold
             * can then spike in one run and not the other: a rare flip moves a near-zero
             * tensor (a BN bias) by a few per cent of its own size. The whole model is held
             * to 1e-5 in relative L2, each tensor's worst element reported. */
            double l2 = rel_l2(m, ref, 1);
            printf("  SyncBatchNorm: relative L2 distance of all weights and buffers %.3g\n", l2);
            CK(l2 <= 1e-5, "relative L2 distance %g", l2);
        } else {
            CK(r <= 1e-5, "relative difference %g in %s", r, wn);
        }
        /* the difference must be small because the runs agree, not because nothing moved */
        snn_model *init;
        snn_precision *ip;
        snn_optimizer *io;
        snn_precision_config f32 = snn_precision_config_default();
        TRY(build(g_model, &f32, &init, &ip, &io));
        double moved = 0, top = 0;
        const float *pm = snn_model_params(m), *pi = snn_model_params(init); /* one copy each */
        for (size_t i = 0; i < snn_model_num_params(m); i++) {
            moved = fmax(moved, fabs((double)pm[i] - pi[i]));
            top = fmax(top, fabs((double)pi[i]));
        }
        moved /= top;
        printf("  weights moved from the initialisation by %.3g relative\n", moved);
        CK(moved > 1e-3, "training did not move the weights (%g)", moved);
        snn_optimizer_free(io); snn_precision_free(ip); snn_model_free(init);
        if (halves == 2) {
            snn_model *plain;
            oracle(train, steps, 1, &plain);
            printf("  (information) vs one batch of 2B, BatchNorm over all 2B: %.3g\n", rel_diff(m, plain, 0, &wn));
            snn_model_free(plain);
        }
        snn_model_free(ref);
    }
    int64_t f = failures, c = checks;
    snn_comm_allreduce(g_world, &f, 1, SNN_COMM_I64, SNN_COMM_SUM);
    snn_comm_allreduce(g_world, &c, 1, SNN_COMM_I64, SNN_COMM_SUM);
    if (R == 0) printf("  %lld checks, %lld failures\n", (long long)c, (long long)f);
    snn_mesh_free(&mesh);
    snn_comm_free(nccl);
    snn_optimizer_free(o);
    snn_precision_free(p);
    snn_model_free(m);
    snn_dataset_free(train);
    snn_dataset_free(val);
    snn_comm_free(g_world);
    return f ? 1 : 0;
}
