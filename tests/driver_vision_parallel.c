/* Tensor and pipeline parallel training equals the dense model on one process.
 *
 * Every rank also trains the dense model (the oracle, built with the same seed) on the same
 * random batches; after 5 FP32 SGD steps each rank compares its local tensors with its part
 * of the dense tensors and the loss; the criterion is the relative L2 distance of all
 * weights and buffers together (sums over the world) and the loss, both <= 1e-5. (Per tensor
 * the worst relative distance is printed: a tensor near zero, such as a BatchNorm bias, has a
 * large relative distance from a tiny absolute one.) PP runs compare against the dense model trained with the same
 * microbatching (per-microbatch forward/backward, loss / K, one step).
 *
 *   driver_vision_parallel MODEL PP TP [K [bf16]]    MODEL: fcsnn | convsnn | spikformer
 * bf16: both models prepared for BF16, compared within 1e-3 (a BF16 rounding of a different
 * partial sum can move a spike).
 * Run with world = DP * PP * TP ranks (mpirun), or alone for PP = TP = 1 (then the stage must
 * equal the dense model bit for bit). With DP > 1 every replica trains on its share of a
 * global batch (gradients averaged by snn_vision_stage_dp_average) and the oracle runs the
 * global batch with K * DP microbatches; BatchNorm statistics are then not compared (each
 * replica keeps its own, as the reference's manual PP all-reduce does). Prints one line on rank 0; exit 0 when within 1e-5. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/vision_stage.h"
#include "nn/model_internal.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/rng.h"

/* Neurons of the stage and the dense model by name: count those whose state is smaller
 * than the dense neuron's (a channel shard) and those larger (never allowed). */
typedef struct {
    const snn_module *dense;
    int smaller, larger, n;
} neuron_cmp;

static const snn_module *find_module(const snn_module *m, const char *name) {
    if (!strcmp(m->name, name) && m->n_children == 0) return m;
    for (int i = 0; i < m->n_children; i++) {
        const snn_module *f = find_module(m->children[i], name);
        if (f) return f;
    }
    return NULL;
}

static void neuron_visit(snn_module *m, void *ctx) {
    neuron_cmp *c = ctx;
    const char *k = snn_module_own_ops(m)->kind;
    if (strcmp(k, "LIFNode") && strcmp(k, "IFNode")) return;
    const snn_module *d = find_module(c->dense, m->name);
    c->n++;
    if (!d || snn_shape_numel(m->in) > snn_shape_numel(d->in)) c->larger++;
    else if (snn_shape_numel(m->in) < snn_shape_numel(d->in)) c->smaller++;
}

static int fail(snn_comm *w, const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", w ? snn_comm_rank(w) : 0, what, snn_last_error());
    if (w) snn_comm_abort(w, 1);
    exit(1);
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
        if (isnan(a[i])) return INFINITY;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: driver_vision_parallel MODEL PP TP [K]\n");
        return 2;
    }
    int PP = atoi(argv[2]), TP = atoi(argv[3]), K = argc > 4 ? atoi(argv[4]) : 2;
    snn_vision_model_config mc;
    if (!strcmp(argv[1], "fcsnn")) {
        mc = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
        mc.fcsnn.in_features = 48;
        mc.fcsnn.hidden = 32;
        mc.fcsnn.depth = 3;
    } else if (!strcmp(argv[1], "convsnn")) {
        mc = snn_vision_model_config_default(SNN_VISION_MODEL_CONVSNN);
        mc.convsnn.height = mc.convsnn.width = 8;
        mc.convsnn.channels = 8;
    } else {
        mc = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER);
        mc.spikformer.image_size = 32;
        mc.spikformer.embed_dim = 32;
        mc.spikformer.heads = 4;
        mc.spikformer.depth = 2;
        mc.spikformer.mlp_ratio = 2;
        mc.num_classes = 10;
    }
    mc.time_steps = 2;
    const int T = 2, N = 4 * K, steps = 5;

    snn_comm *w = NULL;
    if (snn_comm_init_world(&w) != SNN_OK) return fail(NULL, "init");
    snn_mesh mesh;
    if (snn_mesh_create(w, PP, TP, &mesh) != SNN_OK) return fail(w, "mesh");
    /* with DP > 1 each replica trains on its share of a global batch of N * DP; the oracle
     * runs the global batch with K * DP microbatches (the same microbatch size) */
    const int DP = mesh.dp_size;
    uint64_t seed = 0;
    if (snn_comm_rank(w) == 0) {
        const char *e = getenv("SNN_TEST_SEED");
        seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
        fprintf(stderr, "test seed: SNN_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    if (snn_comm_broadcast(w, &seed, 1, SNN_COMM_I64, 0) != SNN_OK) return fail(w, "seed");

    snn_vision_stage *st = NULL;
    snn_model *dense = NULL;
    if (snn_vision_stage_create(&mc, &mesh, seed, &st) != SNN_OK) return fail(w, "stage");
    if (snn_vision_model_build(&mc, seed, &dense) != SNN_OK) return fail(w, "dense");
    /* optional BF16 (argument 5): both prepared before planning and before the optimizers */
    int bf16 = argc > 5 && !strcmp(argv[5], "bf16");
    snn_precision *pst = NULL, *pde = NULL;
    if (bf16) {
        snn_precision_config pc = snn_precision_config_default();
        pc.mode = SNN_PRECISION_BF16;
        if (snn_prepare_model_for_precision(st->model, "cpu", &pc, &pst) != SNN_OK) return fail(w, "prepare stage");
        if (snn_prepare_model_for_precision(dense, "cpu", &pc, &pde) != SNN_OK) return fail(w, "prepare dense");
    }
    const double tol = bf16 ? 1e-3 : 1e-5;
    if (snn_vision_pipeline_plan(st, T, N, K) != SNN_OK) return fail(w, "plan");
    int Kd = (PP > 1 ? K : 1) * DP, mb = N * DP / Kd, NG = N * DP;
    if (snn_model_plan(dense, T, mb) != SNN_OK) return fail(w, "dense plan");

    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = 0.05f;
    oo.momentum = 0.9f;
    snn_optimizer *opt = NULL, *dopt = NULL;
    if (snn_optimizer_create_for_model(&oo, st->model, &opt) != SNN_OK) return fail(w, "opt");
    if (snn_optimizer_create_for_model(&oo, dense, &dopt) != SNN_OK) return fail(w, "dense opt");

    size_t in = snn_model_input_numel(dense), C = (size_t)mc.num_classes;
    float *xg = malloc(sizeof(float) * T * NG * in), *xm = malloc(sizeof(float) * T * mb * in);
    float *x = malloc(sizeof(float) * T * N * in);
    float *dy = malloc(sizeof(float) * T * mb * C);
    int32_t *labg = malloc(sizeof(int32_t) * NG), *lab = NULL;
    double worst_loss = 0;
    float *p0 = malloc(sizeof(float) * snn_model_num_params(dense));
    memcpy(p0, snn_model_params(dense), sizeof(float) * snn_model_num_params(dense));
    uint64_t tp_calls0, tp_bytes0;
    snn_tp_comm_stats(&tp_calls0, &tp_bytes0);
    for (int s = 0; s < steps; s++) {
        /* fresh inputs every step: Philox draws every rank can make (scaled so neurons fire) */
        for (size_t i = 0; i < (size_t)T * NG * in; i++) xg[i] = 1.5f * snn_rng_uniform(seed, 7 + (uint64_t)s, i);
        for (int i = 0; i < NG; i++) labg[i] = (int32_t)(snn_rng_uniform(seed, 99 + (uint64_t)s, (uint64_t)i) * C) % (int)C;
        /* this replica's samples [dp * N, (dp + 1) * N) of every time step */
        for (int t = 0; t < T; t++)
            memcpy(x + (size_t)t * N * in, xg + ((size_t)t * NG + (size_t)mesh.dp * N) * in, sizeof(float) * N * in);
        lab = labg + (size_t)mesh.dp * N;
        snn_model_zero_grad(st->model);
        float loss = NAN;
        int correct = -1;
        if (snn_vision_pipeline_train_step(st, st->first ? x : NULL, st->last ? lab : NULL, SNN_VISION_LOSS_CE, &loss,
                                           &correct) != SNN_OK)
            return fail(w, "train step");
        if (snn_vision_stage_dp_average(st, mesh.dp_comm) != SNN_OK) return fail(w, "dp average");
        if (snn_optimizer_step(opt, -1, 0) != SNN_OK) return fail(w, "step");
        double dl_dp = loss;
        if (snn_comm_allreduce(mesh.dp_comm, &dl_dp, 1, SNN_COMM_F64, SNN_COMM_SUM) != SNN_OK) return fail(w, "loss");
        loss = (float)(dl_dp / DP);
        /* the oracle: one process, the same microbatching */
        snn_model_zero_grad(dense);
        double dl = 0;
        for (int k = 0; k < Kd; k++) {
            for (int t = 0; t < T; t++)
                memcpy(xm + (size_t)t * mb * in, xg + ((size_t)t * NG + (size_t)k * mb) * in, sizeof(float) * mb * in);
            const float *y;
            float l;
            if (snn_model_forward(dense, xm, 1, &y) != SNN_OK) return fail(w, "dense fwd");
            if (snn_loss_cross_entropy_mean_t(y, labg + k * mb, T, mb, (int)C, &l, dy, NULL) != SNN_OK)
                return fail(w, "loss");
            for (size_t i = 0; i < (size_t)T * mb * C; i++) dy[i] /= (float)Kd;
            if (snn_model_backward(dense, dy) != SNN_OK) return fail(w, "dense bwd");
            dl += l / Kd;
        }
        if (snn_optimizer_step(dopt, -1, 0) != SNN_OK) return fail(w, "dense step");
        double le = fabs(loss - dl) / fmax(fabs(dl), 1e-6);
        if (le > worst_loss) worst_loss = le;
    }
    /* compare the local tensors with this rank's part of the dense ones */
    double worst = 0, sums[2] = {0, 0}; /* per tensor worst; global squared diff and norm */
    char worst_name[160] = "";
    for (size_t i = 0; i < snn_model_num_tensors(st->model); i++) {
        snn_tensor_info ti, di;
        snn_model_tensor(st->model, i, &ti);
        if (DP > 1 && ti.is_buffer) continue; /* each replica's BatchNorm statistics are its own */
        int found = 0;
        for (size_t j = 0; j < snn_model_num_tensors(dense) && !found; j++) {
            snn_model_tensor(dense, j, &di);
            if (strcmp(di.name, ti.name)) continue;
            found = 1;
            float *part = malloc(sizeof(float) * ti.numel);
            snn_shard_extract(st->rules[i], di.rank, di.shape, st->tp_rank, st->tp_size, di.data, part);
            double e = rel_l2(ti.data, part, ti.numel);
            for (size_t q = 0; q < ti.numel; q++) {
                double d = (double)ti.data[q] - part[q];
                sums[0] += isnan(ti.data[q]) ? INFINITY : d * d;
                sums[1] += (double)part[q] * part[q];
            }
            if (e > worst) {
                worst = e;
                snprintf(worst_name, sizeof worst_name, "%s", ti.name);
            }
            free(part);
        }
        if (!found) worst = INFINITY;
    }
    uint64_t calls, bytes;
    snn_tp_comm_stats(&calls, &bytes);
    calls -= tp_calls0;
    /* the test is not vacuous: training moved the dense weights */
    double moved = rel_l2(snn_model_params(dense), p0, snn_model_num_params(dense));
    neuron_cmp nc = {dense->root, 0, 0, 0};
    snn_module_walk(st->model->root, neuron_visit, &nc);
    if (snn_comm_allreduce(w, sums, 2, SNN_COMM_F64, SNN_COMM_SUM) != SNN_OK) return fail(w, "reduce");
    double global = sqrt(sums[0] / sums[1]);
    double red[5] = {worst, worst_loss, (double)calls, (double)nc.larger, -(double)nc.smaller};
    if (snn_comm_allreduce(w, red, 5, SNN_COMM_F64, SNN_COMM_MAX) != SNN_OK) return fail(w, "reduce");
    /* with TP every rank has neurons holding only their channel shard's state */
    int ok = global <= tol && red[1] <= tol && (TP == 1 ? red[2] == 0 : red[2] > 0) && moved > 1e-4 &&
             red[3] == 0 && (TP == 1 ? red[4] == 0 : red[4] < 0) && nc.n > 0;
    if (PP == 1 && TP == 1 && DP == 1) ok = ok && red[0] == 0 && red[1] == 0; /* a one-rank stage IS the dense model */
    /* BF16 messages between stages: the boundaries of these cuts carry spikes or small sums of
     * spikes, exact in BF16, so the forward (evaluation and the training loss) is unchanged */
    double wire_diff = 0;
    if (PP > 1 && !bf16) {
        float *o32 = malloc(sizeof(float) * T * N * C), *o16 = malloc(sizeof(float) * T * N * C);
        float l32, l16;
        int c32, c16;
        for (size_t i = 0; i < (size_t)T * N * in; i++) x[i] = 1.5f * snn_rng_uniform(seed, 5000, i);
        if (snn_vision_pipeline_forward(st, x, st->last ? o32 : NULL) != SNN_OK) return fail(w, "fwd32");
        snn_model_zero_grad(st->model);
        if (snn_vision_pipeline_train_step(st, x, lab, SNN_VISION_LOSS_CE, &l32, &c32) != SNN_OK) return fail(w, "t32");
        size_t ng = snn_model_num_params(st->model);
        float *g32 = malloc(sizeof(float) * ng);
        memcpy(g32, snn_model_grads(st->model), sizeof(float) * ng);
        snn_vision_pipeline_set_wire_bf16(st, 1);
        if (snn_vision_pipeline_forward(st, x, st->last ? o16 : NULL) != SNN_OK) return fail(w, "fwd16");
        snn_model_zero_grad(st->model);
        if (snn_vision_pipeline_train_step(st, x, lab, SNN_VISION_LOSS_CE, &l16, &c16) != SNN_OK) return fail(w, "t16");
        if (st->last && memcmp(o32, o16, sizeof(float) * T * N * C)) wire_diff = 1;
        if (l32 != l16 || c32 != c16) wire_diff = 1;
        /* ... while the gradients sent back were rounded: the first stage's gradients moved */
        if (st->first && !memcmp(g32, snn_model_grads(st->model), sizeof(float) * ng)) wire_diff = 1;
        free(g32);
        free(o32);
        free(o16);
    }
    if (snn_comm_allreduce(w, &wire_diff, 1, SNN_COMM_F64, SNN_COMM_MAX) != SNN_OK) return fail(w, "reduce");
    ok = ok && wire_diff == 0;
    if (snn_comm_rank(w) == 0)
        printf("%s DP%d PP%d TP%d K%d: %d steps, weights rel L2 %.3g (worst tensor %.3g, %s on rank 0), loss rel %.3g, TP all-reduces "
               "%.0f, weights moved %.3g, sharded neurons >= %.0f per rank%s: %s\n",
               argv[1], DP, PP, TP, K, steps, global, red[0], worst_name, red[1], red[2], moved, -red[4],
               PP > 1 && !bf16 ? (wire_diff == 0 ? ", BF16 messages: same forward" : ", BF16 messages: DIFFERENT forward") : "",
               ok ? "ok" : "FAIL");
    snn_optimizer_free(opt);
    snn_optimizer_free(dopt);
    snn_vision_stage_free(st);
    snn_model_free(dense);
    snn_precision_free(pst);
    snn_precision_free(pde);
    free(x);
    free(xm);
    free(dy);
    free(labg);
    free(xg);
    free(p0);
    snn_mesh_free(&mesh);
    snn_comm_free(w);
    return ok ? 0 : 1;
}
