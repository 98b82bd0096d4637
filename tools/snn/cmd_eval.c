/* snn eval: accuracy of a checkpoint on a dataset's test split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "train_cuda.h"

/* Time steps and encoding recorded in the checkpoint (defaults if absent). */
static int ckpt_time_steps(const snn_ckpt *c) {
    const char *v = snn_ckpt_metadata(c, "time_steps");
    int T = v ? atoi(v) : 4;
    return T > 0 && T <= 100000 ? T : 4;
}

int cmd_eval(int argc, char **argv) {
    const char *ckpt_path = NULL, *encoding = NULL;
    data_flags df = {.synthetic_train = 16, .synthetic_test = 512};
    int json = 0, batch = 256, T = 0;
    uint64_t seed = 42;
    opt t[] = {
        {"--checkpoint", OPT_STRING, &ckpt_path, "model.safetensors written by snn train (required)", NULL, 0},
        {"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0},
        {"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files", NULL, 0},
        {"--batch-size", OPT_INT, &batch, "samples per forward (default 256)", NULL, 0},
        {"--T", OPT_INT, &T, "time steps (default: the checkpoint's)", "--time-steps", 0},
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
    if (batch <= 0) die_usage("--batch-size must be positive, got %d", batch);
    snn_model *m = NULL;
    snn_ckpt *ck = NULL;
    snn_precision *prec = NULL;
    load_checkpoint(ckpt_path, seed, &pf, &m, &ck, &prec);
    snn_status st;
    if (T == 0) T = ckpt_time_steps(ck);
    if (T < 0) die_usage("--T must be positive");
    if (!encoding) encoding = snn_ckpt_metadata(ck, "encoding") ? snn_ckpt_metadata(ck, "encoding") : "direct";
    snn_encoding enc;
    if (snn_encoding_from_name(encoding, &enc) != SNN_OK) die_usage("unknown encoding '%s'", encoding);
    model_flags mf;
    model_flags_defaults(&mf);
    mf.model = snn_model_kind(m);
    snn_dataset *test = NULL;
    st = data_load(&df, &mf, seed, NULL, &test);
    if (st != SNN_OK) die_status(st, "loading the data");
    if (snn_dataset_features(test) != snn_model_input_numel(m))
        die_usage("the dataset has %zu features per sample but the model expects %zu", snn_dataset_features(test),
                  snn_model_input_numel(m));
    if ((size_t)snn_dataset_classes(test) > snn_model_output_numel(m))
        die_usage("the dataset has %d classes but the model outputs %zu", snn_dataset_classes(test),
                  snn_model_output_numel(m));
    double acc = 0, loss = 0, t0 = now_seconds();
    if (device_is_cuda(pf.device))
        st = eval_cuda(m, test, T, batch, enc, seed, pf.device, gpu_precision_config(&pf, ck), ck, &acc, &loss);
    else
        st = evaluate(m, test, T, batch, enc, seed, &acc, &loss);
    if (st != SNN_OK) die_status(st, "evaluating");
    double dt = now_seconds() - t0;
    printf("test accuracy: %.4f (%d samples)\n", acc, snn_dataset_size(test));
    if (json)
        printf("{\"checkpoint\":\"%s\",\"dataset\":\"%s\",\"accuracy\":%.6f,\"test_accuracy\":%.6f,\"loss\":%.6f,"
               "\"samples\":%d,\"T\":%d,\"samples_per_s\":%.1f,\"wall_s\":%.3f}\n",
               ckpt_path, df.dataset, acc, acc, loss, snn_dataset_size(test), T, snn_dataset_size(test) / dt, dt);
    snn_dataset_free(test);
    snn_ckpt_close(ck);
    snn_precision_free(prec);
    snn_model_free(m);
    return 0;
}
