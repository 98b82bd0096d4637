/* snn predict: class of every image of an IDX file (one line per image). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "snn/train.h"

static int print_prediction(int index, int cls, double score, void *user) {
    int json = *(const int *)user;
    if (!json) return printf("%d %d\n", index, cls) < 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddNumberToObject(j, "class", cls);
    cJSON_AddNumberToObject(j, "score", score);
    print_json_line(j);
    return 0;
}

int cmd_predict(int argc, char **argv) {
    if (eval_dist_wanted(argc, argv)) return cmd_predict_dist(argc, argv); /* an artifact, under mpirun */
    const char *ckpt_path = NULL, *input = NULL;
    int json = 0, batch = 256, T = 0;
    uint64_t seed = 42;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt_path, "model.safetensors written by snn train (required)", NULL, 0},
        {"--input", OPT_STRING, &input, "IDX image file (.gz or raw), e.g. t10k-images-idx3-ubyte.gz (required)", NULL, 0},
        opt_num("--batch-size", OPT_INT, &batch, "images per forward (default 256)", NULL, 1, SNN_TRAIN_MAX_BATCH),
        opt_num("--T", OPT_INT, &T, "time steps (default: the checkpoint's)", "--time-steps", 1, SNN_TRAIN_MAX_T),
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
    snn_model *m = NULL;
    snn_ckpt *ck = NULL;
    snn_precision *prec = NULL;
    load_checkpoint(ckpt_path, seed, &pf, &m, &ck, &prec);
    snn_status st;
    if (T == 0) T = (int)ckpt_int_metadata(ck, "time_steps", 1, SNN_TRAIN_MAX_T, 4);
    snn_dataset *ds = NULL;
    st = snn_dataset_load_idx(input, NULL, &ds);
    if (st != SNN_OK) die_status(st, NULL);
    size_t F = snn_dataset_features(ds);
    if (F != snn_model_input_numel(m))
        die_usage("%s has %zu values per image but the model expects %zu", input, F, snn_model_input_numel(m));
    int total = snn_dataset_size(ds), N = batch < total ? batch : total;
    if (total < 1) die_usage("%s holds no images", input);
    /* one call for every device: load_checkpoint placed the model where --device asked */
    st = snn_predict(m, ds, T, N, print_prediction, &json);
    if (st != SNN_OK) die_status(st == SNN_E_NUMERIC ? SNN_E_FORMAT : st, NULL);
    snn_dataset_free(ds);
    snn_ckpt_close(ck);
    snn_precision_free(prec);
    snn_model_free(m);
    return finish_stdout();
}
