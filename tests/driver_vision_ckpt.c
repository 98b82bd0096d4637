/* Distributed checkpoints and the inference artifact, checked on a (pp, tp) mesh.
 *
 *   driver_vision_ckpt train MODEL PP TP DIR
 *     trains 3 SGD steps, saves DIR/ckpt/step_00000003, trains 2 more (run A); a stage built
 *     from another seed resumes from the checkpoint and trains the same 2 steps (run B): the
 *     weights and optimizer state of A and B must be identical bit for bit, and the progress
 *     and RNG words restored. Then: saving the same step again fails on every rank
 *     ("already exists"), a checkpoint_dir below a regular file fails on every rank with
 *     rank 0's message, a changed recipe is refused ("does not match"), and a save at step 5
 *     is exported (rank 0) to DIR/artifact.safetensors; every rank reloads the artifact for
 *     its own topology and must reproduce the trained stage's evaluation output exactly.
 *     The last stage's logits on a fixed batch go to DIR/logits.bin.
 *   driver_vision_ckpt eval ARTIFACT PP TP DIR
 *     loads the artifact for this topology, evaluates the same batch and compares with
 *     DIR/logits.bin (max relative difference <= 1e-5, identical loss and accuracy).
 * Exit 0 on success; rank 0 prints one summary line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dist/vision_ckpt.h"
#include "snn/checkpoint.h"
#include "snn/data.h"
#include "snn/train.h"
#include "snn/optim.h"
#include "snn/rng.h"

static int R;
static int failures;
#define CK(c, ...)                                                                               \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            failures++;                                                                          \
            fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s: ", R, __FILE__, __LINE__, #c);     \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
        }                                                                                        \
    } while (0)

static _Noreturn void die(snn_comm *w, const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", R, what, snn_last_error());
    snn_comm_abort(w, 1);
    exit(1);
}

enum { T = 2, N = 8, K = 2, SEED = 4242 };

static snn_vision_model_config model_of(const char *name) {
    snn_vision_model_config mc;
    if (!strcmp(name, "fcsnn784")) { /* Fashion-MNIST sized */
        mc = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
        mc.fcsnn.hidden = 64;
        mc.fcsnn.depth = 2;
    } else if (!strcmp(name, "fcsnn")) {
        mc = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
        mc.fcsnn.in_features = 48;
        mc.fcsnn.hidden = 32;
        mc.fcsnn.depth = 3;
    } else if (!strcmp(name, "convsnn")) {
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
    mc.time_steps = T;
    return mc;
}

static snn_dataset *g_fm; /* fcsnn784 trains on Fashion-MNIST's training set */

static void batch(uint64_t seed, int s, size_t in, int C, float *x, int32_t *lab) {
    if (g_fm && s < 1000) {
        uint32_t idx[N];
        float xb[N * 784];
        for (int i = 0; i < N; i++) idx[i] = (uint32_t)(((size_t)s * N + (size_t)i) % (size_t)snn_dataset_size(g_fm));
        snn_dataset_batch(g_fm, idx, N, xb, lab);
        snn_encode_direct(xb, N, in, T, x);
        return;
    }
    for (size_t i = 0; i < (size_t)T * N * in; i++) x[i] = 1.5f * snn_rng_uniform(seed, 7 + (uint64_t)s, i);
    for (int i = 0; i < N; i++) lab[i] = (int32_t)(snn_rng_uniform(seed, 99 + (uint64_t)s, (uint64_t)i) * C) % C;
}

static void train(snn_comm *w, snn_vision_stage *st, snn_optimizer *opt, int from, int to, size_t in, int C,
                  float *x, int32_t *lab) {
    for (int s = from; s < to; s++) {
        batch(SEED, s, in, C, x, lab);
        snn_model_zero_grad(st->model);
        float loss;
        int correct;
        if (snn_vision_pipeline_train_step(st, x, lab, SNN_VISION_LOSS_CE, &loss, &correct) != SNN_OK) die(w, "step");
        if (snn_optimizer_step(opt, -1, 0) != SNN_OK) die(w, "opt");
    }
}

static snn_optimizer *make_opt(snn_comm *w, snn_model *m) {
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = 0.05f;
    oo.momentum = 0.9f;
    snn_optimizer *o = NULL;
    if (snn_optimizer_create_for_model(&oo, m, &o) != SNN_OK) die(w, "optimizer");
    return o;
}

/* the last stage's logits of the fixed evaluation batch (NULL elsewhere) */
static void eval_logits(snn_comm *w, snn_vision_stage *st, size_t in, int C, float *x, float *out) {
    int32_t lab[N];
    batch(SEED, 1000, in, C, x, lab);
    if (snn_vision_pipeline_forward(st, x, st->last ? out : NULL) != SNN_OK) die(w, "eval forward");
}

static void loss_acc(const float *y, int C, double *loss, int *correct) {
    int32_t lab[N];
    float *x = NULL;
    (void)x;
    for (int i = 0; i < N; i++) lab[i] = (int32_t)(snn_rng_uniform(SEED, 99 + 1000, (uint64_t)i) * C) % C;
    float l;
    snn_loss_cross_entropy_mean_t(y, lab, T, N, C, &l, NULL, correct);
    *loss = l;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: driver_vision_ckpt train MODEL PP TP DIR | eval ARTIFACT PP TP DIR\n");
        return 2;
    }
    int PP = atoi(argv[3]), TP = atoi(argv[4]);
    const char *dir = argv[5];
    snn_comm *w = NULL;
    if (snn_comm_init_world(&w) != SNN_OK) return 1;
    R = snn_comm_rank(w);
    snn_mesh mesh;
    if (snn_mesh_create(w, PP, TP, &mesh) != SNN_OK) die(w, "mesh");
    char path[1200], logits_path[1200];
    snprintf(logits_path, sizeof logits_path, "%s/logits.bin", dir);

    if (!strcmp(argv[1], "fmnist")) {
        /* the artifact on Fashion-MNIST's test set: batches of 250 dealt round-robin over DP,
         * scored on the output rank (last stage, tp 0) of each replica, summed over the world */
        snn_vision_stage *st = NULL;
        snn_dataset *ds = NULL;
        if (snn_vision_stage_from_artifact(argv[2], &mesh, &st) != SNN_OK) die(w, "artifact");
        if (snn_dataset_load_fashion_mnist(NULL, 0, &ds) != SNN_OK) die(w, "fashion-mnist");
        const int B = 250, Tm = st->cfg.time_steps, C = st->cfg.num_classes;
        if (snn_vision_pipeline_plan(st, Tm, B, K) != SNN_OK) die(w, "plan");
        size_t F = snn_dataset_features(ds);
        int n = snn_dataset_size(ds);
        float *xb = malloc(sizeof(float) * B * F), *xt = malloc(sizeof(float) * Tm * B * F),
              *y = malloc(sizeof(float) * Tm * B * C);
        int32_t *yb = malloc(sizeof(int32_t) * B);
        uint32_t *idx = malloc(sizeof(uint32_t) * B);
        double mean[64], tot[3] = {0, 0, 0};
        long correct = 0;
        for (int b = mesh.dp; b * B < n; b += mesh.dp_size) {
            int valid = n - b * B < B ? n - b * B : B;
            for (int i = 0; i < B; i++) idx[i] = (uint32_t)(b * B + (i < valid ? i : 0));
            if (snn_dataset_batch(ds, idx, B, xb, yb) != SNN_OK) die(w, "batch");
            snn_encode_direct(xb, B, F, Tm, xt);
            if (snn_vision_pipeline_forward(st, xt, st->last ? y : NULL) != SNN_OK) die(w, "forward");
            if (st->last && st->tp_rank == 0) {
                snn_score_batch(y, Tm, B, C, yb, valid, mean, &correct, &tot[0]);
                tot[2] += valid;
            }
        }
        tot[1] = (double)correct;
        if (snn_comm_allreduce(w, tot, 3, SNN_COMM_F64, SNN_COMM_SUM) != SNN_OK) die(w, "reduce");
        if (R == 0)
            printf("{\"loss\": %.17g, \"accuracy\": %.17g, \"samples\": %.0f, \"pp\": %d, \"tp\": %d, \"dp\": %d}\n",
                   tot[0] / tot[2], tot[1] / tot[2], tot[2], PP, TP, mesh.dp_size);
        free(xb);
        free(xt);
        free(y);
        free(yb);
        free(idx);
        snn_dataset_free(ds);
        snn_vision_stage_free(st);
        snn_mesh_free(&mesh);
        snn_comm_free(w);
        return tot[2] == n ? 0 : 1;
    }
    if (!strcmp(argv[1], "eval")) {
        snn_vision_stage *st = NULL;
        if (snn_vision_stage_from_artifact(argv[2], &mesh, &st) != SNN_OK) die(w, "artifact");
        if (snn_vision_pipeline_plan(st, T, N, K) != SNN_OK) die(w, "plan");
        size_t in = st->first ? st->in_numel : 1;
        if (!st->first) {
            snn_vision_model_config mc;
            snn_ckpt *c;
            snn_vision_artifact_open(argv[2], &mc, NULL, NULL, &c);
            snn_ckpt_close(c);
            snn_model *d;
            snn_vision_model_build(&mc, 0, &d);
            in = snn_model_input_numel(d);
            snn_model_free(d);
        }
        int C = st->cfg.num_classes;
        float *x = malloc(sizeof(float) * T * N * in), *y = malloc(sizeof(float) * T * N * C),
              *ref = malloc(sizeof(float) * T * N * C);
        eval_logits(w, st, in, C, x, y);
        double rel = 0, l1 = 0, l2 = 0;
        int c1 = 0, c2 = 0;
        if (st->last && st->tp_rank == 0) {
            FILE *f = fopen(logits_path, "rb");
            CK(f && fread(ref, sizeof(float), (size_t)T * N * C, f) == (size_t)T * N * C, "read %s", logits_path);
            if (f) fclose(f);
            for (size_t i = 0; i < (size_t)T * N * C; i++) {
                double r = fabs((double)y[i] - ref[i]) / fmax(fabs((double)ref[i]), 1e-3);
                if (r > rel || isnan(y[i])) rel = isnan(y[i]) ? INFINITY : r;
            }
            loss_acc(y, C, &l1, &c1);
            loss_acc(ref, C, &l2, &c2);
            CK(rel <= 1e-5, "logits differ by %.3g relative", rel);
            CK(c1 == c2 && fabs(l1 - l2) <= 1e-6 * fabs(l2), "loss %.9g vs %.9g, correct %d vs %d", l1, l2, c1, c2);
            printf("eval PP%d TP%d from %s: logits max rel %.3g, loss %.7f (trained %.7f), correct %d/%d\n", PP, TP,
                   argv[2], rel, l1, l2, c1, N);
        }
        if (PP == 1 && TP == 1) { /* the artifact is also a plain model checkpoint */
            snn_model *pm = NULL;
            const float *py;
            CK(snn_model_load(argv[2], 0, &pm, NULL) == SNN_OK, "snn_model_load: %s", snn_last_error());
            if (pm && snn_model_plan(pm, T, N) == SNN_OK && snn_model_forward(pm, x, 0, &py) == SNN_OK)
                CK(!memcmp(py, y, sizeof(float) * T * N * C), "snn_model_load gives other logits");
            else CK(0, "plain model: %s", snn_last_error());
            snn_model_free(pm);
        }
        snn_status agreed = snn_comm_agree(w, failures ? SNN_E_NUMERIC : SNN_OK);
        snn_vision_stage_free(st);
        free(x);
        free(y);
        free(ref);
        snn_mesh_free(&mesh);
        snn_comm_free(w);
        return agreed == SNN_OK ? 0 : 1;
    }

    snn_vision_model_config mc = model_of(argv[2]);
    snn_vision_training_config cfg = snn_vision_training_config_default();
    cfg.model = mc;
    snprintf(cfg.dataset_builder, sizeof cfg.dataset_builder, "snn.data.synthetic");
    cfg.precision.mode = SNN_PRECISION_FP32;
    cfg.tensor_parallel_size = TP;
    cfg.pipeline_parallel_size = PP;
    cfg.pipeline_microbatches = K;
    cfg.batch_size = N;
    snprintf(cfg.checkpoint_dir, sizeof cfg.checkpoint_dir, "%s/ckpt", dir);
    cfg.checkpoint_interval = 3;
    if (snn_vision_training_config_validate(&cfg) != SNN_OK) die(w, "config");

    snn_vision_stage *a = NULL, *b = NULL;
    if (snn_vision_stage_create(&mc, &mesh, SEED, &a) != SNN_OK) die(w, "stage A");
    if (snn_vision_pipeline_plan(a, T, N, K) != SNN_OK) die(w, "plan A");
    snn_model *dense;
    if (snn_vision_model_build(&mc, 0, &dense) != SNN_OK) die(w, "dense");
    size_t in = snn_model_input_numel(dense);
    snn_model_free(dense);
    int C = mc.num_classes;
    float *x = malloc(sizeof(float) * T * N * in);
    int32_t lab[N];
    snn_optimizer *oa = make_opt(w, a->model);
    if (!strcmp(argv[2], "fcsnn784")) { /* learn something first, so the evaluation means something */
        if (snn_dataset_load_fashion_mnist(NULL, 1, &g_fm) != SNN_OK) die(w, "fashion-mnist");
        train(w, a, oa, 100, 400, in, C, x, lab);
    }
    train(w, a, oa, 0, 3, in, C, x, lab);
    snn_vision_progress pr = {3, 0, 3};
    uint64_t rng[SNN_VISION_RNG_WORDS] = {SEED, 3, 0xfeedfacecafebeefull, (uint64_t)R};
    char step_dir[1200];
    if (snn_vision_checkpoint_save(&mesh, &cfg, a->model, NULL, oa, &pr, rng, step_dir, sizeof step_dir) != SNN_OK)
        die(w, "save");
    struct stat sb;
    CK(stat(step_dir, &sb) == 0 && S_ISDIR(sb.st_mode), "%s missing", step_dir);
    snprintf(path, sizeof path, "%s/ckpt/.step_00000003.partial", dir);
    CK(stat(path, &sb) != 0, "partial directory left behind");
    train(w, a, oa, 3, 5, in, C, x, lab);

    /* B: another seed, resumed */
    if (snn_vision_stage_create(&mc, &mesh, SEED + 1, &b) != SNN_OK) die(w, "stage B");
    if (snn_vision_pipeline_plan(b, T, N, K) != SNN_OK) die(w, "plan B");
    snn_optimizer *ob = make_opt(w, b->model);
    size_t np = snn_model_num_params(a->model);
    CK(memcmp(snn_model_params(a->model), snn_model_params(b->model), np * sizeof(float)) != 0, "seeds gave equal weights");
    snn_vision_progress got = {-1, -1, -1};
    uint64_t rng2[SNN_VISION_RNG_WORDS] = {0};
    if (snn_vision_checkpoint_load(&mesh, &cfg, step_dir, b->model, NULL, ob, &got, rng2) != SNN_OK) die(w, "load");
    CK(got.step == 3 && got.epoch == 0 && got.batch_in_epoch == 3, "progress %ld %ld %ld", got.step, got.epoch,
       got.batch_in_epoch);
    CK(!memcmp(rng, rng2, sizeof rng), "rng words not restored");
    train(w, b, ob, 3, 5, in, C, x, lab);
    CK(!memcmp(snn_model_params(a->model), snn_model_params(b->model), np * sizeof(float)), "resumed weights differ");
    CK(!memcmp(snn_model_buffers(a->model), snn_model_buffers(b->model),
               snn_model_num_buffers(a->model) * sizeof(float)), "resumed buffers differ");
    snn_optim_state sa, sb2;
    snn_optimizer_state(oa, 0, &sa);
    snn_optimizer_state(ob, 0, &sb2);
    CK(!memcmp(sa.data, sb2.data, sa.numel * sizeof(float)) && snn_optimizer_steps(oa) == snn_optimizer_steps(ob),
       "momentum differs");

    /* failures, agreed on every rank, no hang */
    snn_status s1 = snn_vision_checkpoint_save(&mesh, &cfg, a->model, NULL, oa, &pr, rng, NULL, 0);
    CK(s1 != SNN_OK && strstr(snn_last_error(), "already exists"), "second save: %s", snn_last_error());
    snn_vision_training_config bad = cfg;
    snprintf(path, sizeof path, "%s/afile", dir);
    if (R == 0) {
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
    }
    snn_comm_barrier(w);
    snprintf(bad.checkpoint_dir, sizeof bad.checkpoint_dir, "%s/afile/sub", dir);
    s1 = snn_vision_checkpoint_save(&mesh, &bad, a->model, NULL, oa, &pr, rng, NULL, 0);
    CK(s1 != SNN_OK && strstr(snn_last_error(), "afile"), "save below a file: %s", snn_last_error());
    bad = cfg;
    bad.batch_size = 2 * N;
    s1 = snn_vision_checkpoint_load(&mesh, &bad, step_dir, b->model, NULL, ob, &got, NULL);
    CK(s1 != SNN_OK && strstr(snn_last_error(), "Checkpoint configuration does not match"), "recipe: %s",
       snn_last_error());
    bad = cfg;
    bad.precision.mode = SNN_PRECISION_BF16;
    s1 = snn_vision_checkpoint_load(&mesh, &bad, step_dir, b->model, NULL, ob, &got, NULL);
    CK(s1 != SNN_OK && strstr(snn_last_error(), "does not match"), "precision recipe: %s", snn_last_error());

    /* artifact round trip for this topology: exactly the trained stage */
    pr.step = 5;
    if (snn_vision_checkpoint_save(&mesh, &cfg, a->model, NULL, oa, &pr, rng, step_dir, sizeof step_dir) != SNN_OK)
        die(w, "save 5");
    char art[1200];
    snprintf(art, sizeof art, "%s/artifact.safetensors", dir);
    snn_status es = R == 0 ? snn_vision_export_artifact(step_dir, art) : SNN_OK;
    if (snn_comm_agree(w, es) != SNN_OK) die(w, "export");
    float *y = malloc(sizeof(float) * T * N * C), *y2 = malloc(sizeof(float) * T * N * C);
    eval_logits(w, a, in, C, x, y);
    snn_vision_stage *c = NULL;
    if (snn_vision_stage_from_artifact(art, &mesh, &c) != SNN_OK) die(w, "from artifact");
    for (size_t i = 0; i < snn_model_num_tensors(a->model); i++) {
        snn_tensor_info ti, tc;
        snn_model_tensor(a->model, i, &ti);
        snn_model_tensor(c->model, i, &tc);
        CK(!strcmp(ti.name, tc.name) && !memcmp(ti.data, tc.data, ti.numel * sizeof(float)), "tensor %s", ti.name);
    }
    if (snn_vision_pipeline_plan(c, T, N, K) != SNN_OK) die(w, "plan C");
    eval_logits(w, c, in, C, x, y2);
    if (a->last) CK(!memcmp(y, y2, sizeof(float) * T * N * C), "artifact stage output differs");
    if (a->last && a->tp_rank == 0) {
        FILE *f = fopen(logits_path, "wb");
        CK(f && fwrite(y, sizeof(float), (size_t)T * N * C, f) == (size_t)T * N * C, "write logits");
        if (f) fclose(f);
        double l;
        int corr;
        loss_acc(y, C, &l, &corr);
        int varied = 0;
        for (size_t i = 1; i < (size_t)T * N * C; i++) varied |= y[i] != y[0];
        CK(varied, "the evaluation logits are all equal: the comparison would be vacuous");
        printf("train %s PP%d TP%d: resume bit-identical, artifact %s, eval loss %.7f correct %d/%d\n", argv[2], PP,
               TP, art, l, corr, N);
    }
    snn_status agreed = snn_comm_agree(w, failures ? SNN_E_NUMERIC : SNN_OK);
    snn_optimizer_free(oa);
    snn_optimizer_free(ob);
    snn_vision_stage_free(a);
    snn_vision_stage_free(b);
    snn_vision_stage_free(c);
    free(x);
    free(y);
    free(y2);
    snn_dataset_free(g_fm);
    snn_mesh_free(&mesh);
    snn_comm_free(w);
    return agreed == SNN_OK && !failures ? 0 : 1;
}
