/* snn train: train a model, write DIR/model.safetensors and DIR/metrics.jsonl. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "snn/loss.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "train_cuda.h"

typedef struct train_flags {
    int epochs, batch_size, json, quiet;
    long max_steps;
    float lr, weight_decay, momentum, clip;
    const char *optimizer, *out, *encoding, *loss, *schedule, *resume;
    uint64_t seed;
    int warmup;
} train_flags;

static void progress(int tty, int epoch, int epochs, int b, int nb, double loss, double acc, double sps) {
    if (!tty) return;
    int width = 28, fill = nb ? (int)((double)width * b / nb) : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f acc %.3f %.0f samples/s ", epoch, epochs, bar, b,
            nb, loss, acc, sps);
    fflush(stderr);
}

/* mkdir -p: the default --out is runs/latest, whose parent may not exist yet. */
static int make_dir(const char *d) {
    char p[4096];
    size_t n = strlen(d);
    if (n == 0 || n >= sizeof p) return -1;
    memcpy(p, d, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char ch = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        p[i] = ch;
    }
    struct stat sb;
    return stat(d, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}

int cmd_train(int argc, char **argv) {
    if (train_dist_wanted(argc, argv)) return cmd_train_dist(argc, argv);
    model_flags mf;
    model_flags_defaults(&mf);
    data_flags df = {.dataset = NULL, .data_dir = NULL, .synthetic_train = 2048, .synthetic_test = 512};
    train_flags tf = {.epochs = 0, .batch_size = 0, .max_steps = -1, .lr = 0, .optimizer = "adam",
                      .out = "runs/latest", .encoding = "direct", .loss = NULL, .seed = 42,
                      .schedule = "cosine", .clip = 0, .weight_decay = -1, .momentum = 0.9f};
    precision_flags pf = {0};
    opt t[64];
    int n = model_flags_options(&mf, t);
    n += precision_flags_options(&pf, t + n);
    t[n++] = (opt){"--resume", OPT_STRING, &tf.resume, "continue a training checkpoint (model, precision and optimizer state)", NULL, 0};
    t[n++] = (opt){"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0};
    t[n++] = (opt){"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files (default: Debian's location)", NULL, 0};
    t[n++] = (opt){"--synthetic-size", OPT_INT, &df.synthetic_train, "synthetic: training samples (default 2048)", NULL, 0};
    t[n++] = (opt){"--epochs", OPT_INT, &tf.epochs, "passes over the training data (fcsnn 10, convsnn 2, spikformer 1)", NULL, 0};
    t[n++] = (opt){"--max-steps", OPT_LONG, &tf.max_steps, "stop after this many optimizer steps", NULL, 0};
    t[n++] = (opt){"--batch-size", OPT_INT, &tf.batch_size, "samples per step (default 128; spikformer 32)", NULL, 0};
    t[n++] = (opt){"--lr", OPT_FLOAT, &tf.lr, "learning rate (adam/adamw 1e-3, sgd 0.1)", NULL, 0};
    t[n++] = (opt){"--optimizer", OPT_STRING, &tf.optimizer, "sgd | adam | adamw (default adam)", NULL, 0};
    t[n++] = (opt){"--momentum", OPT_FLOAT, &tf.momentum, "sgd momentum (default 0.9)", NULL, 0};
    t[n++] = (opt){"--weight-decay", OPT_FLOAT, &tf.weight_decay, "weight decay (adamw 0.01, else 0)", NULL, 0};
    t[n++] = (opt){"--schedule", OPT_STRING, &tf.schedule, "constant | cosine | step (default cosine)", NULL, 0};
    t[n++] = (opt){"--warmup", OPT_INT, &tf.warmup, "linear warm-up steps (default 0)", NULL, 0};
    t[n++] = (opt){"--clip", OPT_FLOAT, &tf.clip, "clip the global gradient norm (0: off)", NULL, 0};
    t[n++] = (opt){"--loss", OPT_STRING, &tf.loss, "ce | mse (ce; convsnn mse on firing rates)", NULL, 0};
    t[n++] = (opt){"--encoding", OPT_STRING, &tf.encoding, "direct | poisson (default direct)", NULL, 0};
    t[n++] = (opt){"--seed", OPT_U64, &tf.seed, "random seed (default 42)", NULL, 0};
    t[n++] = (opt){"--out", OPT_STRING, &tf.out, "output directory (default runs/latest)", NULL, 0};
    t[n++] = (opt){"--json", OPT_FLAG, &tf.json, "print a JSON summary as the last line of stdout", NULL, 0};
    t[n++] = (opt){"--quiet", OPT_FLAG, &tf.quiet, "no progress output", NULL, 0};
    if (args_wants_help(argc, argv, 2)) {
        args_help("snn train --model M --dataset D [options]",
                  "Train a spiking network with surrogate-gradient BPTT; writes DIR/model.safetensors\n"
                  "and DIR/metrics.jsonl, and prints the test accuracy.", t, n);
        return 0;
    }
    args_parse("train", t, n, argc, argv, 2);
    int spk = !strcmp(mf.model, "spikformer"), conv = !strcmp(mf.model, "convsnn");
    if (!tf.epochs) tf.epochs = spk ? 1 : conv ? 2 : 10;
    if (!tf.batch_size) tf.batch_size = spk ? 32 : 128;
    if (tf.epochs < 0) die_usage("--epochs must be positive, got %d", tf.epochs);
    if (tf.batch_size <= 0 || tf.batch_size > 1 << 20) die_usage("--batch-size must be between 1 and 1048576, got %d", tf.batch_size);
    if (df.synthetic_train <= 0) die_usage("--synthetic-size must be positive");
    int okind = snn_optim_kind_parse(tf.optimizer);
    if (okind < 0) die_usage("unknown optimizer '%s' (choose sgd, adam or adamw)", tf.optimizer);
    int lkind = snn_lr_kind_parse(tf.schedule);
    if (lkind < 0) die_usage("unknown schedule '%s' (choose constant, cosine or step)", tf.schedule);
    int loss_given = tf.loss != NULL;
    if (!tf.loss) tf.loss = conv ? "mse" : "ce";
    int use_mse = !strcmp(tf.loss, "mse");
    if (!use_mse && strcmp(tf.loss, "ce")) die_usage("unknown loss '%s' (choose ce or mse)", tf.loss);
    snn_encoding enc;
    if (snn_encoding_from_name(tf.encoding, &enc) != SNN_OK) die_usage("unknown encoding '%s' (choose direct or poisson)", tf.encoding);

    snn_dataset *train = NULL, *test = NULL;
    snn_status st = data_load(&df, &mf, tf.seed, &train, &test);
    if (st != SNN_OK) die_status(st, "loading the data");
    int c, h, w;
    snn_dataset_shape(train, &c, &h, &w);
    int classes = snn_dataset_classes(train);
    if (snn_dataset_classes(test) > classes) classes = snn_dataset_classes(test);
    snn_model *m = NULL;
    snn_ckpt *resume = NULL;
    int start_epoch = 1;
    snn_precision_config pcfg;
    if (tf.resume) {
        /* The checkpoint decides the model; the precision must match what it was trained with. */
        st = snn_model_load(tf.resume, tf.seed, &m, &resume);
        if (st != SNN_OK) die_status(st, "resuming");
        if (snn_model_input_numel(m) != snn_dataset_features(train) || (int)snn_model_output_numel(m) < classes)
            die_usage("%s does not fit the %s data (%zu features, %d classes)", tf.resume, df.dataset,
                      snn_dataset_features(train), classes);
        const char *pc = snn_ckpt_metadata(resume, "snn_precision_config");
        if (precision_flags_given(&pf)) pcfg = precision_flags_config(&pf);
        else if (!pc || snn_precision_config_from_json(pc, &pcfg) != SNN_OK) pcfg = snn_precision_config_default();
        const char *e = snn_ckpt_metadata(resume, "epochs");
        start_epoch = (e ? atoi(e) : 0) + 1;
        const char *kind = snn_model_kind(m);
        mf.model = kind;
        spk = !strcmp(kind, "spikformer");
        conv = !strcmp(kind, "convsnn");
        if (!loss_given) use_mse = conv; /* the default loss follows the checkpoint's model */
        const char *ts = snn_ckpt_metadata(resume, "time_steps");
        if (ts && atoi(ts) > 0) mf.T = atoi(ts);
    } else {
        pcfg = precision_flags_config(&pf);
        st = model_build(&mf, c, h, w, classes, tf.seed, &m);
        if (st != SNN_OK) die_status(st, "building the model");
    }
    /* device -> prepare -> optimizer (on the GPU the runner owns precision and optimizer) */
    int on_gpu = device_is_cuda(pf.device);
    snn_precision *prec = NULL;
    if (!on_gpu) {
        st = snn_prepare_model_for_precision(m, pf.device ? pf.device : "cpu", &pcfg, &prec);
        if (st != SNN_OK) die_status(st, "preparing the precision");
    } else if ((st = snn_precision_config_validate(&pcfg)) != SNN_OK) {
        die_status(st, "checking the precision");
    }

    snn_optim_opts oo = snn_optim_defaults((snn_optim_kind)okind);
    if (tf.lr > 0) oo.lr = tf.lr;
    else if (okind == SNN_OPTIM_SGD) oo.lr = 0.1f;
    if (tf.lr < 0) die_usage("--lr must be positive");
    if (okind == SNN_OPTIM_SGD) oo.momentum = tf.momentum;
    if (tf.weight_decay >= 0) oo.weight_decay = tf.weight_decay;
    /* On the GPU the runner keeps the optimizer state; this host optimizer carries it in and
     * out of checkpoints (the same layout, so CPU and GPU checkpoints resume on either). */
    snn_optimizer *opt = NULL;
    st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st != SNN_OK) die_status(st, "creating the optimizer");
    snn_loss_scaler gpu_scaler;
    snn_loss_scaler_init(&gpu_scaler, NULL);
    train_fp8_state gpu_fp8 = {0};
    if (resume) {
        /* fp8 on the GPU: the FP8 scaling state comes along (read through a CPU precision) */
        if (on_gpu && pcfg.mode == SNN_PRECISION_FP8) st = train_cuda_fp8_resume(m, &pcfg, opt, resume, &gpu_fp8);
        else st = on_gpu ? snn_training_checkpoint_restore_cfg(m, &pcfg, &gpu_scaler, opt, resume)
                         : snn_training_checkpoint_restore(m, prec, opt, resume);
        if (st != SNN_OK) die_status(st, "resuming");
    }
    if (start_epoch > tf.epochs) die_usage("%s already holds %d epochs; ask for more with --epochs", tf.resume, start_epoch - 1);

    int N = tf.batch_size, T = mf.T, ntrain = snn_dataset_size(train);
    if (N > ntrain) N = ntrain;
    int nb = ntrain / N;
    long total_steps = (long)nb * tf.epochs;
    if (tf.max_steps >= 0 && tf.max_steps < total_steps) total_steps = tf.max_steps;
    snn_lr_sched sched = {.kind = (snn_lr_kind)lkind, .base_lr = oo.lr, .warmup_steps = tf.warmup,
                          .warmup_start_factor = 0.1f, .total_steps = total_steps > tf.warmup ? total_steps : tf.warmup + 1,
                          .min_lr = 0, .step_size = nb > 0 ? nb : 1, .gamma = 0.5f};
    if (snn_lr_sched_check(&sched) != SNN_OK) die_status(SNN_E_INVALID, "learning-rate schedule");

    if (make_dir(tf.out) != 0) die_usage("cannot create output directory '%s': %s", tf.out, strerror(errno));
    if (on_gpu) {
        train_cuda_args ga = {.m = m, .train = train, .test = test, .dataset = df.dataset, .model_name = mf.model,
                              .device = pf.device, .out = tf.out, .T = T, .N = N, .epochs = tf.epochs,
                              .use_mse = use_mse, .quiet = tf.quiet, .json = tf.json, .total_steps = total_steps,
                              .oo = oo, .sched = sched, .clip = tf.clip, .enc = enc, .seed = tf.seed, .pcfg = pcfg,
                              .opt = opt, .start_epoch = start_epoch, .resumed = resume != NULL,
                              .scaler = gpu_scaler, .fp8 = gpu_fp8};
        int rc = train_cuda(&ga);
        train_fp8_state_free(&gpu_fp8);
        if (resume) snn_ckpt_close(resume);
        snn_optimizer_free(opt);
        snn_model_free(m);
        snn_dataset_free(train);
        snn_dataset_free(test);
        return rc;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", tf.out);
    FILE *metrics = fopen(path, "w");
    if (!metrics) die_usage("cannot write '%s': %s", path, strerror(errno));

    size_t F = snn_dataset_features(train);
    float *xb = malloc(sizeof(float) * F * (size_t)N);
    float *xt = malloc(sizeof(float) * F * (size_t)N * (size_t)T);
    int32_t *yb = malloc(sizeof(int32_t) * (size_t)N);
    uint32_t *order = malloc(sizeof(uint32_t) * (size_t)ntrain);
    size_t C = snn_model_output_numel(m);
    float *dy = malloc(sizeof(float) * C * (size_t)N * (size_t)T);
    if (!xb || !xt || !yb || !order || !dy) die_status(SNN_E_NOMEM, "allocating batches");
    st = snn_model_plan(m, T, N);
    if (st != SNN_OK) die_status(st, "planning activation memory");

    int tty = !tf.quiet && isatty(2);
    if (!tf.quiet)
        fprintf(stderr, "snn: training %s (%zu parameters) on %s: %d samples, T=%d, batch %d, %s lr %g, %d epochs\n",
                mf.model, snn_model_num_params(m), df.dataset, ntrain, T, N, tf.optimizer, (double)oo.lr, tf.epochs);
    double train_time = 0, t_start = now_seconds(), test_acc = 0, test_loss = 0;
    long step = (long)nb * (start_epoch - 1), samples = 0;
    int epoch = 0;
    for (epoch = start_epoch; epoch <= tf.epochs && step < total_steps; epoch++) {
        st = snn_dataset_shuffle(train, tf.seed, (uint64_t)epoch, order);
        if (st != SNN_OK) die_status(st, "shuffling");
        double loss_sum = 0, t0 = now_seconds();
        long correct = 0, seen = 0;
        int b;
        for (b = 0; b < nb && step < total_steps; b++) {
            st = snn_dataset_batch(train, order + (size_t)b * N, N, xb, yb);
            if (st == SNN_OK) st = snn_encode(enc, xb, N, F, T, tf.seed, ((uint64_t)epoch << 32) | (uint64_t)b, xt);
            const float *y = NULL;
            if (st == SNN_OK) st = snn_model_forward(m, xt, 1, &y);
            float loss = 0;
            int corr = 0;
            if (st == SNN_OK) st = use_mse ? snn_loss_mse_rate(y, yb, T, N, (int)C, &loss, dy, &corr)
                                           : snn_loss_cross_entropy_mean_t(y, yb, T, N, (int)C, &loss, dy, &corr);
            int skipped = 0;
            if (st == SNN_OK) st = snn_precision_backward(prec, dy, opt, snn_lr_schedule(&sched, step), tf.clip, NULL, &skipped);
            if (st != SNN_OK) die_status(st, "training step");
            if (!isfinite(loss)) die_usage("the loss became %f at step %ld; lower --lr", (double)loss, step);
            step++;
            loss_sum += loss;
            correct += corr;
            seen += N;
            if (tty && (b % 4 == 0 || b + 1 == nb))
                progress(tty, epoch, tf.epochs, b + 1, nb, loss_sum / (b + 1), (double)correct / seen,
                         (double)seen / (now_seconds() - t0));
        }
        double dt = now_seconds() - t0;
        train_time += dt;
        samples += seen;
        if (tty) fputc('\n', stderr);
        st = evaluate(m, test, T, N, enc, tf.seed, &test_acc, &test_loss);
        if (st != SNN_OK) die_status(st, "evaluating");
        st = snn_model_plan(m, T, N);
        if (st != SNN_OK) die_status(st, "planning");
        double tl = b ? loss_sum / b : 0, ta = seen ? (double)correct / seen : 0;
        fprintf(metrics,
                "{\"epoch\":%d,\"step\":%ld,\"train_loss\":%.6f,\"train_accuracy\":%.6f,\"test_loss\":%.6f,"
                "\"test_accuracy\":%.6f,\"samples_per_s\":%.1f,\"epoch_s\":%.3f,\"wall_s\":%.3f}\n",
                epoch, step, tl, ta, test_loss, test_acc, seen / dt, dt, now_seconds() - t_start);
        fflush(metrics);
        if (!tf.quiet)
            fprintf(stderr, "epoch %d: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f samples/s, %.1f s\n",
                    epoch, tl, ta, test_loss, test_acc, seen / dt, dt);
    }
    fclose(metrics);
    int epochs_done = epoch - 1;
    if (resume) snn_ckpt_close(resume);
    snprintf(path, sizeof path, "%s/model.safetensors", tf.out);
    char tbuf[32], ebuf[32];
    snprintf(tbuf, sizeof tbuf, "%d", T);
    snprintf(ebuf, sizeof ebuf, "%d", epochs_done);
    const char *meta[] = {"dataset", df.dataset, "time_steps", tbuf, "epochs", ebuf, "encoding",
                          snn_encoding_name(enc), NULL};
    st = snn_training_checkpoint_save(m, prec, opt, path, meta);
    if (st != SNN_OK) die_status(st, "saving the checkpoint");
    double wall = now_seconds() - t_start;
    printf("test accuracy: %.4f\n", test_acc);
    if (tf.json)
        printf("{\"model\":\"%s\",\"dataset\":\"%s\",\"test_accuracy\":%.6f,\"test_loss\":%.6f,"
               "\"samples_per_s\":%.1f,\"wall_s\":%.3f,\"train_s\":%.3f,\"epochs\":%d,\"steps\":%ld,"
               "\"T\":%d,\"batch_size\":%d,\"parameters\":%zu,\"precision\":\"%s\",\"fp8_recipe\":\"%s\",\"checkpoint\":\"%s\"}\n",
               mf.model, df.dataset, test_acc, test_loss, train_time > 0 ? samples / train_time : 0, wall,
               train_time, epochs_done, step, T, N, snn_model_num_params(m), snn_precision_mode_name(pcfg.mode), snn_fp8_recipe_name(pcfg.fp8_recipe), path);
    free(xb); free(xt); free(yb); free(order); free(dy);
    snn_optimizer_free(opt);
    snn_precision_free(prec);
    snn_model_free(m);
    snn_dataset_free(train);
    snn_dataset_free(test);
    return 0;
}
