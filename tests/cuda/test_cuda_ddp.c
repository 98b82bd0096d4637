/* GPU data parallelism inside the captured step, on one GPU (world size 1 over NCCL).
 *
 * For each model and precision, two device models start from the same parameters and see
 * the same batches: one plain, one with the DDP collectives of src/dist/ddp_cuda.c over an
 * NCCL communicator (and a third over the one-process communicator). The average of one
 * replica is the replica itself, so after every step the parameters, BatchNorm buffers and
 * FP8 delayed-scaling state must be bit-identical to the plain run, and they must have moved
 * from their initial values. A counting shim around the collectives shows where they run:
 * during the eager first step and once during capture, never from the host while the graph
 * replays (so the all-reduce is inside the graph).
 *
 * Exit 77 without a GPU, or in a build without NCCL; a build with NCCL whose library cannot
 * be opened on a machine with a GPU fails. */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/ddp.h"
#include "harness.h"
#include "snn/cuda.h"
#include "snn/snn.h"

static snn_cuda *gpu;
static uint64_t rng;

typedef struct {
    snn_cuda_collectives inner;
    int allreduce_calls, broadcast_calls;
} counting;

static snn_status cnt_allreduce(void *ctx, void *buf, size_t n, int op, void *stream) {
    counting *c = ctx;
    c->allreduce_calls++;
    return c->inner.allreduce(c->inner.ctx, buf, n, op, stream);
}
static snn_status cnt_broadcast(void *ctx, void *buf, size_t n, int root, void *stream) {
    counting *c = ctx;
    c->broadcast_calls++;
    return c->inner.broadcast(c->inner.ctx, buf, n, root, stream);
}

typedef struct {
    const char *name;
    int conv;            /* convsnn (BatchNorm buffers) instead of fcsnn */
    snn_dtype compute;
    int adamw;
    int fp8_delayed;
} ddp_case;

static snn_status make(const ddp_case *k, snn_model **m) {
    if (k->conv) {
        snn_convsnn_opts o = {.in_channels = 1, .height = 28, .width = 28, .channels = 16, .classes = 10};
        return snn_convsnn_create(&o, 11, m);
    }
    snn_fcsnn_opts o = {.in_features = 256, .hidden = 256, .depth = 2, .classes = 16, .tau = 2.0f};
    return snn_fcsnn_create(&o, 11, m);
}

static int tensors_equal(const snn_model *a, const snn_model *b, int *moved, const float *init, size_t init_n) {
    int same = 1;
    size_t off = 0;
    *moved = 0;
    for (size_t i = 0; i < snn_model_num_tensors(a); i++) {
        snn_tensor_info ta, tb;
        if (snn_model_tensor(a, i, &ta) != SNN_OK || snn_model_tensor(b, i, &tb) != SNN_OK) return 0;
        if (ta.numel != tb.numel || memcmp(ta.data, tb.data, ta.numel * sizeof(float))) {
            fprintf(stderr, "  tensor %s differs\n", ta.name);
            same = 0;
        }
        if (!ta.is_buffer && off + ta.numel <= init_n && memcmp(ta.data, init + off, ta.numel * sizeof(float)))
            *moved = 1;
        off += ta.numel;
    }
    return same;
}

static void run_case(const ddp_case *k, snn_comm *nccl, snn_comm *self) {
    snn_model *m[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) CHECK(make(k, &m[i]) == SNN_OK);
    if (!m[0] || !m[1] || !m[2]) return;
    const int T = 4, N = 32;
    size_t F = snn_model_input_numel(m[0]), C = snn_model_output_numel(m[0]);
    /* the initial parameters, to show that the steps moved them */
    size_t np = 0;
    for (size_t i = 0; i < snn_model_num_tensors(m[0]); i++) {
        snn_tensor_info t;
        snn_model_tensor(m[0], i, &t);
        np += t.numel;
    }
    float *init = malloc(np * sizeof(float));
    size_t off = 0;
    for (size_t i = 0; i < snn_model_num_tensors(m[0]); i++) {
        snn_tensor_info t;
        snn_model_tensor(m[0], i, &t);
        memcpy(init + off, t.data, t.numel * sizeof(float));
        off += t.numel;
    }
    snn_precision_config pc = snn_precision_config_default();
    if (k->fp8_delayed) {
        pc.mode = SNN_PRECISION_FP8;
        pc.fp8_recipe = SNN_FP8_RECIPE_DELAYED;
        pc.amax_history_len = 16;
    }
    counting cn = {.inner = snn_ddp_cuda_collectives(nccl)};
    snn_cuda_collectives shim = {.ctx = &cn, .size = cn.inner.size, .allreduce = cnt_allreduce, .broadcast = cnt_broadcast};
    snn_cuda_collectives selfc = snn_ddp_cuda_collectives(self);
    const snn_cuda_collectives *dps[3] = {NULL, &shim, &selfc};
    snn_optim_opts oo = snn_optim_defaults(k->adamw ? SNN_OPTIM_ADAMW : SNN_OPTIM_SGD);
    oo.lr = k->adamw ? 1e-3f : 0.05f;
    oo.momentum = k->adamw ? 0.0f : 0.9f;
    snn_cuda_model *g[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        snn_cuda_model_opts go = {.T = T, .N = N, .compute = k->compute, .loss = SNN_CUDA_LOSS_CE, .dp = dps[i]};
        if (k->fp8_delayed) go.fp8 = &pc;
        snn_status st = snn_cuda_model_create(gpu, m[i], &go, &oo, &g[i]);
        CHECK_MSG(st == SNN_OK, "%s: create: %s", k->name, snn_last_error());
    }
    float *x = malloc(sizeof(float) * F * (size_t)N);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)N);
    const int steps = 6;
    int ok = g[0] && g[1] && g[2];
    for (int s = 0; ok && s < steps; s++) {
        snn_test_fill_uniform(x, F * (size_t)N, 0.0f, 1.0f, &rng);
        for (int i = 0; i < N; i++) y[i] = (int32_t)((rng = rng * 6364136223846793005ull + 1) >> 40) % (int32_t)C;
        for (int i = 0; i < 3; i++) {
            snn_status st = snn_cuda_model_train_step(g[i], x, 0, y, -1.0f);
            CHECK_MSG(st == SNN_OK, "%s: step %d, model %d: %s", k->name, s, i, snn_last_error());
            if (st != SNN_OK) ok = 0;
        }
        if (!ok) break;
        for (int i = 0; i < 3; i++) CHECK(snn_cuda_model_download(g[i]) == SNN_OK);
        int moved = 0;
        CHECK_MSG(tensors_equal(m[0], m[1], &moved, init, np), "%s: NCCL DDP differs from plain after step %d",
                  k->name, s + 1);
        CHECK_MSG(moved, "%s: parameters did not move after step %d", k->name, s + 1);
        CHECK_MSG(tensors_equal(m[0], m[2], &moved, init, np), "%s: one-process DDP differs after step %d", k->name,
                  s + 1);
    }
    if (ok) {
        CHECK(snn_cuda_model_ddp_buckets(g[0]) == 0);
        CHECK_MSG(snn_cuda_model_ddp_buckets(g[1]) >= 1, "%s: no gradient bucket", k->name);
    }
    if (ok && k->fp8_delayed) {
        int nm[2] = {0, 0}, hl[2] = {0, 0};
        CHECK(snn_cuda_model_fp8_state(g[0], &nm[0], &hl[0], NULL, NULL) == SNN_OK);
        CHECK(snn_cuda_model_fp8_state(g[1], &nm[1], &hl[1], NULL, NULL) == SNN_OK);
        CHECK(nm[0] > 0 && nm[0] == nm[1] && hl[0] == hl[1]);
        size_t ns = (size_t)nm[0] * 3, nh = ns * (size_t)(hl[0] > 0 ? hl[0] : 1);
        float *sa = malloc(ns * 4), *sb = malloc(ns * 4), *ha = malloc(nh * 4), *hb = malloc(nh * 4);
        CHECK(snn_cuda_model_fp8_state(g[0], NULL, NULL, sa, ha) == SNN_OK);
        CHECK(snn_cuda_model_fp8_state(g[1], NULL, NULL, sb, hb) == SNN_OK);
        CHECK_MSG(!memcmp(sa, sb, ns * 4) && !memcmp(ha, hb, nh * 4), "%s: FP8 scales or amax histories differ",
                  k->name);
        int nonzero = 0;
        for (size_t i = 0; i < nh; i++) nonzero |= ha[i] != 0.0f;
        CHECK_MSG(nonzero, "%s: the amax histories are empty", k->name);
        free(sa); free(sb); free(ha); free(hb);
    }
    /* eager step 1 + the capture of step 2: the collectives were enqueued twice (per
     * bucket and call site), then the graph replayed them without the host */
    int sites = snn_cuda_model_ddp_buckets(g[1]) + (k->fp8_delayed ? 1 : 0);
    CHECK_MSG(cn.allreduce_calls == 2 * sites, "%s: %d all-reduce calls from the host (want %d)", k->name,
              cn.allreduce_calls, 2 * sites);
    CHECK_MSG(cn.broadcast_calls == (k->conv ? 2 : 0), "%s: %d broadcast calls (want %d)", k->name,
              cn.broadcast_calls, k->conv ? 2 : 0);
    printf("%s: %d steps, bit-identical to the plain step (NCCL and one-process), collectives %d+%d host calls\n",
           k->name, steps, cn.allreduce_calls, cn.broadcast_calls);
    for (int i = 0; i < 3; i++) {
        snn_cuda_model_destroy(g[i]);
        snn_model_free(m[i]);
    }
    free(init);
    free(x);
    free(y);
}

int main(void) {
    rng = snn_test_seed();
    if (snn_cuda_create(0, 0, &gpu) != SNN_OK) {
        fprintf(stderr, "no GPU: %s (skipped)\n", snn_last_error());
        return 77;
    }
    snn_comm *world = NULL, *nccl = NULL, *self = NULL;
    CHECK(snn_comm_init_world(&world) == SNN_OK);
    CHECK(snn_comm_self(&self) == SNN_OK);
    snn_status st = snn_comm_nccl_create(world, 0, &nccl);
    if (st == SNN_E_UNSUPPORTED && strstr(snn_last_error(), "no NCCL communicator")) {
        fprintf(stderr, "%s (skipped)\n", snn_last_error());
        snn_comm_free(self);
        snn_comm_free(world);
        snn_cuda_destroy(gpu);
        return 77;
    }
    CHECK_MSG(st == SNN_OK, "NCCL communicator: %s", snn_last_error());
    if (st == SNN_OK) {
        /* host collectives are refused on an NCCL communicator, with a message */
        float v = 1.0f;
        CHECK(snn_comm_allreduce(nccl, &v, 1, SNN_COMM_F32, SNN_COMM_SUM) == SNN_E_UNSUPPORTED);
        CHECK(strstr(snn_last_error(), "device buffers") != NULL);
        const ddp_case cases[] = {
            {"fcsnn bf16 sgd", 0, SNN_BF16, 0, 0},
            {"fcsnn fp32 adamw", 0, SNN_F32, 1, 0},
            {"fcsnn fp16 adamw (loss scaling)", 0, SNN_F16, 1, 0},
            {"fcsnn fp8 delayed", 0, SNN_F8E4M3, 1, 1},
            {"convsnn bf16 (BatchNorm buffers broadcast)", 1, SNN_BF16, 1, 0},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i], nccl, self);
    }
    snn_comm_free(nccl);
    snn_comm_free(self);
    snn_comm_free(world);
    snn_cuda_destroy(gpu);
    printf("test_cuda_ddp: %d checks, %d failures\n", snn_test_checks, snn_test_failures);
    return snn_test_failures ? 1 : 0;
}
