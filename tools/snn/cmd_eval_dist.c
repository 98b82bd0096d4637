/* snn eval --artifact / snn predict --artifact: evaluate (or predict with) a vision artifact (snn/vision.h) under mpirun on any
 * (dp, pp, tp) layout. Every rank builds its stage from the artifact
 * (snn_vision_stage_from_artifact); the test split's batches are dealt round-robin over DP;
 * each batch streams through the pipeline (snn_vision_pipeline_forward); the last stage's
 * TP rank 0 scores it and the totals are summed over the world. Direct encoding only (the
 * artifact holds no encoding; Poisson would need the single-process stream's numbering).
 * Errors in set-up are agreed on and reported once by rank 0 (exit 2 for bad input). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common.h"
#include "dist_cli.h"
#include "snn/dist.h"
#include "snn/train.h"
#include "snn/vision_dist.h"

static snn_comm *g_world;

int eval_dist_wanted(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], "--artifact", 10) && (argv[i][10] == 0 || argv[i][10] == '=')) return 1;
    return 0;
}

int cmd_eval_dist(int argc, char **argv) {
    snn_status st = snn_comm_init_world(&g_world);
    if (st != SNN_OK) die_status(st, "starting the distributed job");
    dist_cli_begin(g_world);
    const char *artifact = NULL;
    data_flags df = {.synthetic_train = 16, .synthetic_test = 512};
    int json = 0, batch = 256, tp = 1, pp = 1, micro = 1;
    uint64_t seed = 42;
    opt t[] = {
        {"--artifact", OPT_STRING, &artifact, "artifact (snn export-artifact, or a TP/PP run's model)", NULL, 0},
        {"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0},
        {"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files", NULL, 0},
        opt_num("--batch-size", OPT_INT, &batch, "samples per forward on each DP rank (256)", NULL, 1, 1 << 20),
        opt_num("--tensor-parallel-size", OPT_INT, &tp, "ranks per tensor-parallel group (1)", NULL, 1, 1 << 16),
        opt_num("--pipeline-parallel-size", OPT_INT, &pp, "pipeline stages (1)", NULL, 1, 4),
        opt_num("--pipeline-microbatches", OPT_INT, &micro, "microbatches per batch (1)", NULL, 1, 1 << 20),
        {"--seed", OPT_U64, &seed, "seed for synthetic data (default 42)", NULL, 0},
        {"--json", OPT_FLAG, &json, "print a JSON object as the last line", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 2)) {
        if (snn_comm_rank(g_world) == 0)
            args_help("mpirun -np N snn eval --artifact F --dataset D [options]",
                      "Test accuracy of a vision artifact over DP x PP x TP ranks (direct encoding).", t, n);
        snn_comm_free(g_world);
        return 0;
    }
    args_parse("eval", t, n, argc, argv, 2);
    if (!artifact) die_usage("eval: --artifact is required");
    if (batch % micro) die_usage("--batch-size %d must be divisible by --pipeline-microbatches %d", batch, micro);
    snn_mesh *mesh = NULL;
    st = snn_mesh_open(g_world, pp, tp, &mesh);
    if (st != SNN_OK) die_status(st, "building the (dp, pp, tp) mesh");
    dist_cli_setup_point();
    snn_vision_stage *sg = NULL;
    st = snn_vision_stage_from_artifact(artifact, mesh, &sg);
    if (st != SNN_OK) die_status(st, "loading the artifact");
    dist_cli_setup_point();
    const snn_vision_model_config *vmc = snn_vision_stage_model_config(sg);
    const int T = vmc->time_steps, C = vmc->num_classes;
    const int first = snn_vision_stage_is_first(sg), last = snn_vision_stage_is_last(sg);
    const int outputs = last && snn_vision_stage_tp_rank(sg) == 0; /* this rank scores the batches */
    const size_t in_numel = snn_vision_stage_input_numel(sg);
    model_flags mf;
    model_flags_defaults(&mf);
    mf.model = snn_vision_model_name(vmc->kind);
    mf.num_classes = C;
    if (vmc->kind == SNN_VISION_MODEL_SPIKFORMER) mf.image_size = vmc->spikformer.image_size;
    snn_dataset *test = NULL;
    st = data_load(&df, &mf, seed, NULL, &test);
    if (st != SNN_OK) die_status(st, "loading the data");
    dist_cli_setup_point();
    size_t F = snn_dataset_features(test);
    int ns = snn_dataset_size(test);
    if (ns < 1) die_usage("the %s test split has no samples to evaluate on", df.dataset);
    if (first && F != in_numel)
        die_usage("the dataset has %zu features per sample but the model expects %zu", F, in_numel);
    if (snn_dataset_classes(test) > C)
        die_usage("the dataset has %d classes but the model outputs %d", snn_dataset_classes(test), C);
    st = snn_vision_pipeline_plan(sg, T, batch, micro);
    if (st != SNN_OK) die_status(st, "planning the pipeline");
    float *xb = malloc(sizeof(float) * F * (size_t)batch), *xt = malloc(sizeof(float) * F * (size_t)batch * T);
    float *y = malloc(sizeof(float) * (size_t)C * (size_t)batch * T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)batch);
    uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)batch);
    double *mean = malloc(sizeof(double) * (size_t)C);
    if (!xb || !xt || !y || !yb || !idx || !mean) die_status(snn_error(SNN_E_NOMEM, "out of memory"), NULL);
    dist_cli_setup_point();
    args_die_hook = NULL; /* past set-up: a failing rank aborts the job */
    double t0 = now_seconds(), tot[3] = {0, 0, 0}; /* loss sum, correct, samples */
    long correct = 0;
    int nbatches = (ns + batch - 1) / batch;
    const int dp = snn_mesh_coord(mesh, SNN_MESH_DP), DP = snn_mesh_size(mesh, SNN_MESH_DP);
    for (int b = dp; st == SNN_OK && b < nbatches; b += DP) {
        int valid = ns - b * batch < batch ? ns - b * batch : batch;
        for (int i = 0; i < batch; i++) idx[i] = (uint32_t)(b * batch + (i < valid ? i : 0));
        st = snn_dataset_batch(test, idx, batch, xb, yb);
        if (st == SNN_OK) st = snn_encode(SNN_ENCODING_DIRECT, xb, batch, F, T, seed, (uint64_t)b, xt);
        if (st == SNN_OK) st = snn_vision_pipeline_forward(sg, xt, last ? y : NULL);
        if (st == SNN_OK && outputs) {
            snn_score_batch(y, T, batch, C, yb, valid, mean, &correct, &tot[0]);
            tot[2] += valid;
        }
    }
    /* the DP ranks without a batch in the last round still meet the pipeline's peers: every
     * rank of one pipeline runs the same b sequence, so nothing waits here */
    tot[1] = (double)correct;
    if (st == SNN_OK) st = snn_comm_allreduce(g_world, tot, 3, SNN_COMM_F64, SNN_COMM_SUM);
    if (st != SNN_OK) {
        fprintf(stderr, "snn: error: rank %d: %s\n", snn_comm_rank(g_world), snn_last_error());
        { snn_comm_abort(g_world, 1); exit(1); }
    }
    double dt = now_seconds() - t0, acc = tot[1] / tot[2], loss = tot[0] / tot[2];
    if (snn_comm_rank(g_world) == 0) {
        printf("test accuracy: %.4f (%d samples)\n", acc, ns);
        if (json)
            printf("{\"T\":%d,\"accuracy\":%.10g,\"artifact\":\"%s\",\"data_parallel_size\":%d,\"loss\":%.10g,"
                   "\"pipeline_parallel_size\":%d,\"samples\":%.0f,\"tensor_parallel_size\":%d,\"wall_s\":%.6g}\n",
                   T, acc, artifact, DP, loss, pp, tot[2], tp, dt);
        fflush(stdout);
    }
    free(xb); free(xt); free(y); free(yb); free(idx); free(mean);
    snn_dataset_free(test);
    snn_vision_stage_free(sg);
    snn_mesh_close(mesh);
    snn_comm_free(g_world);
    return 0;
}

/* snn predict --artifact F --input images.idx: "<index> <class>" per image (--json: one
 * object per image with index, class, score = the winning mean-over-T output), in order;
 * --output FILE also writes the logits (mean over T) as safetensors: "index" I64 [N] and
 * "logits" F32 [N, C], rows in sample order. DP replica d predicts the contiguous slice
 * [d*ceil(N/DP), ...) of the images; its output rank (last pipeline stage, TP rank 0) sends
 * the slice's logits to world rank 0, which merges, prints and writes. */
int cmd_predict_dist(int argc, char **argv) {
    snn_status st = snn_comm_init_world(&g_world);
    if (st != SNN_OK) die_status(st, "starting the distributed job");
    dist_cli_begin(g_world);
    const char *artifact = NULL, *input = NULL;
    int json = 0, batch = 256, tp = 1, pp = 1, micro = 1;
    const char *output = NULL;
    opt t[] = {
        {"--artifact", OPT_STRING, &artifact, "artifact (snn export-artifact, or a TP/PP run's model)", NULL, 0},
        {"--input", OPT_STRING, &input, "IDX image file (.gz or raw) (required)", NULL, 0},
        opt_num("--batch-size", OPT_INT, &batch, "images per forward (256)", NULL, 1, 1 << 20),
        opt_num("--tensor-parallel-size", OPT_INT, &tp, "ranks per tensor-parallel group (1)", NULL, 1, 1 << 16),
        opt_num("--pipeline-parallel-size", OPT_INT, &pp, "pipeline stages (1)", NULL, 1, 4),
        opt_num("--pipeline-microbatches", OPT_INT, &micro, "microbatches per batch (1)", NULL, 1, 1 << 20),
        {"--json", OPT_FLAG, &json, "one JSON object per image instead of plain lines", NULL, 0},
        {"--output", OPT_STRING, &output, "also write index + logits (mean over T) as safetensors", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 2)) {
        if (snn_comm_rank(g_world) == 0)
            args_help("mpirun -np N snn predict --artifact F --input images.idx [options]",
                      "Predicted class of each image with a vision artifact over PP x TP ranks.", t, n);
        snn_comm_free(g_world);
        return 0;
    }
    args_parse("predict", t, n, argc, argv, 2);
    if (!artifact) die_usage("predict: --artifact is required");
    if (!input) die_usage("predict: --input is required");
    if (batch % micro) die_usage("--batch-size %d must be divisible by --pipeline-microbatches %d", batch, micro);
    snn_mesh *mesh = NULL;
    st = snn_mesh_open(g_world, pp, tp, &mesh);
    if (st != SNN_OK) die_status(st, "building the (dp, pp, tp) mesh");
    dist_cli_setup_point();
    snn_vision_stage *sg = NULL;
    st = snn_vision_stage_from_artifact(artifact, mesh, &sg);
    if (st != SNN_OK) die_status(st, "loading the artifact");
    dist_cli_setup_point();
    snn_dataset *ds = NULL;
    st = snn_dataset_load_idx(input, NULL, &ds);
    if (st != SNN_OK) die_status(st, NULL);
    dist_cli_setup_point();
    const snn_vision_model_config *vmc = snn_vision_stage_model_config(sg);
    const int T = vmc->time_steps, C = vmc->num_classes, total = snn_dataset_size(ds);
    const int last = snn_vision_stage_is_last(sg);
    size_t F = snn_dataset_features(ds), in_numel = snn_vision_stage_input_numel(sg);
    if (total < 1) die_usage("%s holds no images", input);
    if (snn_vision_stage_is_first(sg) && F != in_numel)
        die_usage("%s has %zu values per image but the model expects %zu", input, F, in_numel);
    st = snn_vision_pipeline_plan(sg, T, batch, micro);
    if (st != SNN_OK) die_status(st, "planning the pipeline");
    float *xb = malloc(sizeof(float) * F * (size_t)batch), *xt = malloc(sizeof(float) * F * (size_t)batch * T);
    float *y = malloc(sizeof(float) * (size_t)C * (size_t)batch * T);
    uint32_t *idx = malloc(sizeof(uint32_t) * (size_t)batch);
    if (!xb || !xt || !y || !idx) die_status(snn_error(SNN_E_NOMEM, "out of memory"), NULL);
    dist_cli_setup_point();
    args_die_hook = NULL;
    const int DP = snn_mesh_size(mesh, SNN_MESH_DP), dp = snn_mesh_coord(mesh, SNN_MESH_DP), per = (total + DP - 1) / DP;
    const int lo = dp * per < total ? dp * per : total, hi = lo + per < total ? lo + per : total;
    const int outputs = last && snn_vision_stage_tp_rank(sg) == 0, root = snn_comm_rank(g_world) == 0;
    float *lg = malloc(sizeof(float) * (size_t)C * (size_t)(per > 0 ? per : 1));
    float *all = root ? malloc(sizeof(float) * (size_t)C * (size_t)total) : NULL;
    if (!lg || (root && !all)) die_status(snn_error(SNN_E_NOMEM, "out of memory for %d x %d logits", total, C), NULL);
    for (int start = lo; st == SNN_OK && start < hi; start += batch) {
        int valid = hi - start < batch ? hi - start : batch;
        for (int i = 0; i < batch; i++) idx[i] = (uint32_t)(start + (i < valid ? i : 0));
        st = snn_dataset_batch(ds, idx, batch, xb, NULL);
        if (st == SNN_OK) st = snn_encode(SNN_ENCODING_DIRECT, xb, batch, F, T, 0, (uint64_t)start, xt);
        if (st == SNN_OK) st = snn_vision_pipeline_forward(sg, xt, last ? y : NULL);
        for (int i = 0; st == SNN_OK && outputs && i < valid; i++)
            for (int c = 0; c < C; c++) {
                double v = 0;
                for (int tt = 0; tt < T; tt++) v += y[((size_t)tt * batch + i) * C + c];
                lg[(size_t)(start - lo + i) * C + c] = (float)(v / T);
            }
    }
    /* merge on world rank 0: replica d's output rank sends its slice */
    for (int d = 0; st == SNN_OK && d < DP; d++) {
        int src = snn_mesh_rank_of(mesh, d, snn_mesh_size(mesh, SNN_MESH_PP) - 1, 0);
        int dlo = d * per < total ? d * per : total, dn = (dlo + per < total ? dlo + per : total) - dlo;
        if (dn <= 0) continue;
        size_t cnt = (size_t)dn * C;
        if (root && src == 0) memcpy(all + (size_t)dlo * C, lg, cnt * sizeof(float));
        else if (root) st = snn_comm_recv(g_world, all + (size_t)dlo * C, cnt, SNN_COMM_F32, src, 71);
        else if (snn_comm_rank(g_world) == src) st = snn_comm_send(g_world, lg, cnt, SNN_COMM_F32, 0, 71);
    }
    for (int i = 0; st == SNN_OK && root && i < total; i++) {
        int best = 0;
        const float *r = all + (size_t)i * C;
        for (int c = 1; c < C; c++)
            if (r[c] > r[best]) best = c;
        if (json) printf("{\"index\":%d,\"class\":%d,\"score\":%.9g}\n", i, best, (double)r[best]);
        else printf("%d %d\n", i, best);
    }
    if (st == SNN_OK && root && output) {
        int64_t *ix = malloc(sizeof(int64_t) * (size_t)total);
        snn_ckpt_writer *w = NULL;
        st = ix ? snn_ckpt_writer_begin(&w) : snn_error(SNN_E_NOMEM, "out of memory");
        for (int i = 0; ix && i < total; i++) ix[i] = i;
        int64_t s1[1] = {total}, s2[2] = {total, C};
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "index", SNN_CKPT_I64, 1, s1, ix);
        if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "logits", SNN_CKPT_F32, 2, s2, all);
        if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_predictions", "logits are the mean over time steps");
        if (st == SNN_OK) st = snn_ckpt_writer_commit(w, output);
        snn_ckpt_writer_free(w);
        free(ix);
    }
    free(lg);
    free(all);
    if (st != SNN_OK) {
        fprintf(stderr, "snn: error: rank %d: %s\n", snn_comm_rank(g_world), snn_last_error());
        { snn_comm_abort(g_world, 1); exit(1); }
    }
    fflush(stdout);
    if (snn_comm_agree(g_world, SNN_OK) != SNN_OK) { snn_comm_abort(g_world, 1); exit(1); }
    free(xb); free(xt); free(y); free(idx);
    snn_dataset_free(ds);
    snn_vision_stage_free(sg);
    snn_mesh_close(mesh);
    snn_comm_free(g_world);
    return 0;
}
