/* snn eval: accuracy of a checkpoint on a dataset's test split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "snn/train.h"

int cmd_eval(int argc, char **argv) {
    if (eval_dist_wanted(argc, argv)) return cmd_eval_dist(argc, argv); /* an artifact, under mpirun */
    const char *ckpt_path = NULL, *encoding = NULL;
    data_flags df = {.synthetic_train = 16, .synthetic_test = 512};
    int json = 0, batch = 256, T = 0;
    uint64_t seed = 42;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt_path, "model.safetensors written by snn train (required)", NULL, 0},
        {"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0},
        {"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files", NULL, 0},
        opt_num("--batch-size", OPT_INT, &batch, "samples per forward (default 256)", NULL, 1, SNN_TRAIN_MAX_BATCH),
        opt_num("--T", OPT_INT, &T, "time steps (default: the checkpoint's)", "--time-steps", 1, SNN_TRAIN_MAX_T),
        {"--encoding", OPT_STRING, &encoding, "direct | poisson (default: the checkpoint's)", NULL, 0},
        {"--seed", OPT_U64, &seed, "seed for synthetic data and Poisson encoding (default 42)", NULL, 0},
        {"--json", OPT_FLAG, &json, "print a JSON object as the last line", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    precision_flags pf = {0};
    opt all[32];
    memcpy(all, t, sizeof t);
    n += precision_flags_options(&pf, all + n);
    if (args_wants_help(argc, argv, 2)) {
        args_help("snn eval --checkpoint F --dataset D [options]", "Test accuracy of a trained model.", all, n);
        return 0;
    }
    args_parse("eval", all, n, argc, argv, 2);
    if (!ckpt_path) die_usage("eval: --checkpoint is required");
    snn_model *m = NULL;
    snn_ckpt *ck = NULL;
    snn_precision *prec = NULL;
    load_checkpoint(ckpt_path, seed, &pf, &m, &ck, &prec);
    snn_status st;
    if (T == 0) T = (int)ckpt_int_metadata(ck, "time_steps", 1, SNN_TRAIN_MAX_T, 4);
    if (!encoding) encoding = snn_ckpt_metadata(ck, "encoding") ? snn_ckpt_metadata(ck, "encoding") : "direct";
    snn_encoding enc;
    if (snn_encoding_from_name(encoding, &enc) != SNN_OK) die_usage("unknown encoding '%s'", encoding);
    model_flags mf;
    model_flags_defaults(&mf);
    mf.model = snn_model_kind(m);
    snn_dataset *test = NULL;
    st = data_load(&df, &mf, seed, NULL, &test);
    if (st != SNN_OK) die_setup(st, "loading the data");
    if (snn_dataset_size(test) < 1)
        die_usage("the %s test split has no samples to evaluate on", df.dataset);
    if (snn_dataset_features(test) != snn_model_input_numel(m))
        die_usage("the dataset has %zu features per sample but the model expects %zu", snn_dataset_features(test),
                  snn_model_input_numel(m));
    if ((size_t)snn_dataset_classes(test) > snn_model_output_numel(m))
        die_usage("the dataset has %d classes but the model outputs %zu", snn_dataset_classes(test),
                  snn_model_output_numel(m));
    double acc = 0, loss = 0, t0 = now_seconds();
    /* one call for every device: load_checkpoint placed the model where --device asked */
    st = snn_evaluate(m, test, T, batch, enc, seed, &acc, &loss);
    if (st != SNN_OK) die_status(st == SNN_E_NUMERIC ? SNN_E_FORMAT : st, NULL);
    double dt = now_seconds() - t0;
    printf("test accuracy: %.4f (%d samples)\n", acc, snn_dataset_size(test));
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "checkpoint", ckpt_path);
        cJSON_AddStringToObject(j, "dataset", df.dataset);
        cJSON_AddNumberToObject(j, "accuracy", acc);
        cJSON_AddNumberToObject(j, "test_accuracy", acc);
        cJSON_AddNumberToObject(j, "loss", loss);
        cJSON_AddNumberToObject(j, "samples", snn_dataset_size(test));
        cJSON_AddNumberToObject(j, "T", T);
        cJSON_AddNumberToObject(j, "samples_per_s", dt > 0 ? snn_dataset_size(test) / dt : 0);
        cJSON_AddNumberToObject(j, "wall_s", dt);
        print_json_line(j);
    }
    snn_dataset_free(test);
    snn_ckpt_close(ck);
    snn_precision_free(prec);
    snn_model_free(m);
    return finish_stdout();
}
