/* snn predict: class of every image of an IDX file (one line per image). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "train_cuda.h"

int cmd_predict(int argc, char **argv) {
    const char *ckpt_path = NULL, *input = NULL;
    int json = 0, batch = 256, T = 0;
    uint64_t seed = 42;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt_path, "model.safetensors written by snn train (required)", NULL, 0},
        {"--input", OPT_STRING, &input, "IDX image file (.gz or raw), e.g. t10k-images-idx3-ubyte.gz (required)", NULL, 0},
        {"--batch-size", OPT_INT, &batch, "images per forward (default 256)", NULL, 0},
        {"--T", OPT_INT, &T, "time steps (default: the checkpoint's)", "--time-steps", 0},
        {"--json", OPT_FLAG, &json, "one JSON object per image instead of plain lines", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    precision_flags pf = {0};
    opt all[32];
    memcpy(all, t, sizeof t);
    n += precision_flags_options(&pf, all + n);
    if (args_wants_help(argc, argv, 2)) {
        args_help("snn predict --checkpoint F --input images.idx [options]",
                  "Print the predicted class of each image: \"<index> <class>\" per line.", all, n);
        return 0;
    }
    args_parse("predict", all, n, argc, argv, 2);
    if (!ckpt_path) die_usage("predict: --checkpoint is required");
    if (!input) die_usage("predict: --input is required");
    if (batch <= 0) die_usage("--batch-size must be positive, got %d", batch);
    snn_model *m = NULL;
    snn_ckpt *ck = NULL;
    snn_precision *prec = NULL;
    load_checkpoint(ckpt_path, seed, &pf, &m, &ck, &prec);
    snn_status st;
    if (T == 0) {
        const char *v = snn_ckpt_metadata(ck, "time_steps");
        T = v && atoi(v) > 0 ? atoi(v) : 4;
    }
    if (T <= 0) die_usage("--T must be positive");
    snn_dataset *ds = NULL;
    st = snn_dataset_load_idx(input, NULL, &ds);
    if (st != SNN_OK) die_status(st, NULL);
    size_t F = snn_dataset_features(ds);
    if (F != snn_model_input_numel(m))
        die_usage("%s has %zu values per image but the model expects %zu", input, F, snn_model_input_numel(m));
    int total = snn_dataset_size(ds), N = batch < total ? batch : total, C = (int)snn_model_output_numel(m);
    gpu_infer *gpu = NULL;
    float *yg = NULL;
    if (device_is_cuda(pf.device)) {
        gpu = gpu_infer_open(m, T, N, pf.device, gpu_precision_config(&pf, ck), ck);
        yg = malloc(sizeof(float) * (size_t)C * N * (size_t)T);
        if (!yg) die_status(SNN_E_NOMEM, "allocating");
    } else {
        st = snn_model_plan(m, T, N);
        if (st != SNN_OK) die_status(st, "planning");
    }
    float *xb = malloc(sizeof(float) * F * N), *xt = malloc(sizeof(float) * F * N * (size_t)T);
    uint32_t *idx = malloc(sizeof(uint32_t) * N);
    if (!xb || !xt || !idx) die_status(SNN_E_NOMEM, "allocating");
    for (int start = 0; start < total; start += N) {
        int valid = total - start < N ? total - start : N;
        for (int i = 0; i < N; i++) idx[i] = (uint32_t)(start + (i < valid ? i : 0));
        st = snn_dataset_batch(ds, idx, N, xb, NULL);
        const float *y = NULL;
        if (gpu) {
            if (st == SNN_OK) st = gpu_infer_forward(gpu, xb, valid, yg);
            y = yg;
        } else {
            if (st == SNN_OK) st = snn_encode(SNN_ENCODING_DIRECT, xb, N, F, T, seed, 0, xt);
            if (st == SNN_OK) st = snn_model_forward(m, xt, 0, &y);
        }
        if (st != SNN_OK) die_status(st, "predicting");
        for (int i = 0; i < valid; i++) {
            int best = 0;
            double bv = -1e300;
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int tt = 0; tt < T; tt++) s += y[((size_t)tt * N + i) * C + c];
                if (s > bv) { bv = s; best = c; }
            }
            if (json) printf("{\"index\":%d,\"class\":%d,\"score\":%.6f}\n", start + i, best, bv / T);
            else printf("%d %d\n", start + i, best);
        }
    }
    free(xb); free(xt); free(idx); free(yg);
    gpu_infer_close(gpu);
    snn_dataset_free(ds);
    snn_ckpt_close(ck);
    snn_precision_free(prec);
    snn_model_free(m);
    return 0;
}
