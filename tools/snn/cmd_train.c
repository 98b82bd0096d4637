/* snn train: argument parsing and printing around the library's training loop
 * (include/snn/train.h), which writes DIR/model.safetensors and DIR/metrics.jsonl. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmds.h"
#include "common.h"
#include "snn/checkpoint.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/train.h"

typedef struct train_flags {
    int epochs, batch_size, json, quiet, warmup;
    long max_steps, checkpoint_every;
    float lr, weight_decay, momentum, clip;
    const char *optimizer, *out, *encoding, *loss, *schedule, *resume;
    uint64_t seed;
} train_flags;

/* mkdir -p: the default --out is runs/latest, whose parent may not exist yet. */
static int make_dir(const char *d) {
    char p[4096];
    size_t n = strlen(d);
    if (n == 0 || n >= sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(p, d, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char ch = p[i];
        p[i] = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        p[i] = ch;
    }
    struct stat sb;
    if (stat(d, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* ---- progress ---- */

typedef struct progress_ctx {
    int tty, quiet;
} progress_ctx;

static int on_event(const snn_train_event *e, void *user) {
    progress_ctx *c = user;
    if (c->quiet) return 0;
    const snn_train_position *p = &e->pos;
    if (e->kind == SNN_TRAIN_EVENT_STEP && c->tty && (p->batch % 4 == 1 || p->batch == p->steps_per_epoch)) {
        int width = 28, nb = p->steps_per_epoch, fill = nb ? (int)((double)width * p->batch / nb) : width;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[width] = 0;
        fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f acc %.3f %.0f samples/s ", p->epoch, e->epochs, bar,
                p->batch, nb, e->loss, e->accuracy, e->samples_per_s);
        fflush(stderr);
    } else if (e->kind == SNN_TRAIN_EVENT_EPOCH) {
        if (c->tty) fputc('\n', stderr);
        /* the position has moved on to the next epoch when this one completed */
        char stop[48] = "";
        if (e->partial) snprintf(stop, sizeof stop, " (stopped at step %ld)", p->step);
        fprintf(stderr, "epoch %d%s: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f samples/s, %.1f s\n",
                e->partial ? p->epoch : p->epoch - 1, stop, e->loss, e->accuracy, e->test_loss, e->test_accuracy,
                e->samples_per_s, e->epoch_s);
    } else if (e->kind == SNN_TRAIN_EVENT_CHECKPOINT) {
        if (c->tty) fputc('\n', stderr);
        fprintf(stderr, "checkpoint at step %ld: %s\n", p->step, e->path);
    }
    return 0;
}

/* ---- resume: the checkpoint decides; a flag that disagrees with it is an error ---- */

static void contradicts(const char *flag, const char *given, const char *recorded) {
    die_usage("%s %s contradicts the checkpoint (%s); leave it out to continue the run", flag, given, recorded);
}

static void same_int(const opt *o, long given, long recorded, const char *what) {
    if (!o->seen || given == recorded) return;
    char a[32], b[96];
    snprintf(a, sizeof a, "%ld", given);
    snprintf(b, sizeof b, "%s %ld", what, recorded);
    contradicts(o->name, a, b);
}

static void same_float(const opt *o, float given, float recorded, const char *what) {
    if (!o->seen || given == recorded) return;
    char a[32], b[96];
    snprintf(a, sizeof a, "%g", (double)given);
    snprintf(b, sizeof b, "%s %g", what, (double)recorded);
    contradicts(o->name, a, b);
}

static void same_str(const opt *o, const char *given, const char *recorded, const char *what) {
    if (!o->seen || !strcmp(given, recorded)) return;
    char b[160];
    snprintf(b, sizeof b, "%s %s", what, recorded);
    contradicts(o->name, given, b);
}

/* Model flags against the checkpoint's model configuration. */
static void check_model_flags(opt *t, int n, const model_flags *mf, const snn_model *m) {
    const char *kind = snn_model_kind(m);
    same_str(args_find(t, n, "--model"), mf->model, kind, "model");
    cJSON *cfg = cJSON_Parse(snn_model_config_json(m));
    static const struct { const char *flag, *key; } map[] = {
        {"--hidden", "hidden"}, {"--depth", "depth"}, {"--channels", "channels"}, {"--image-size", "image_size"},
        {"--embed-dim", "embed_dim"}, {"--heads", "heads"}, {"--num-classes", "classes"}, {"--tau", "tau"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        opt *o = args_find(t, n, map[i].flag);
        if (!o || !o->seen) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, map[i].key);
        double given = o->type == OPT_FLOAT ? (double)*(float *)o->dst : (double)*(int *)o->dst;
        char a[32], b[96];
        snprintf(a, sizeof a, "%g", given);
        if (!cJSON_IsNumber(v)) {
            snprintf(b, sizeof b, "a %s has no %s", kind, map[i].key);
            cJSON_Delete(cfg);
            contradicts(o->name, a, b);
        }
        if (v->valuedouble != given && !(o->type == OPT_FLOAT && (float)v->valuedouble == (float)given)) {
            snprintf(b, sizeof b, "%s %g", map[i].key, v->valuedouble);
            cJSON_Delete(cfg);
            contradicts(o->name, a, b);
        }
    }
    cJSON_Delete(cfg);
}

/* The data flags a resume needs, from the checkpoint's model (spikformer's image size and
 * the classes of synthetic data). */
static void model_flags_from_checkpoint(const snn_model *m, model_flags *mf) {
    mf->model = snn_model_kind(m);
    cJSON *cfg = cJSON_Parse(snn_model_config_json(m));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "image_size");
    if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536) mf->image_size = (int)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(cfg, "classes");
    if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 1e6) mf->num_classes = (int)v->valuedouble;
    cJSON_Delete(cfg);
}

static const char *dataset_canonical(const char *d) {
    return d && !strcmp(d, "fashion_mnist") ? "fashion-mnist" : d;
}

/* Default --out of a resume: the directory the checkpoint is in. */
static const char *dir_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) return ".";
    size_t n = (size_t)(slash - path);
    if (n == 0) return "/";
    if (n >= cap) die_usage("--resume path is too long (%zu bytes)", strlen(path));
    memcpy(buf, path, n);
    buf[n] = 0;
    return buf;
}

static void print_summary_json(const char *model, const char *dataset, const snn_train_summary *s, int T, int N,
                               size_t params, const snn_precision_config *pc, const char *path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", model);
    cJSON_AddStringToObject(j, "dataset", dataset);
    cJSON_AddNumberToObject(j, "test_accuracy", s->test_accuracy);
    cJSON_AddNumberToObject(j, "test_loss", s->test_loss);
    cJSON_AddNumberToObject(j, "samples_per_s", s->train_s > 0 ? (double)s->samples / s->train_s : 0);
    cJSON_AddNumberToObject(j, "wall_s", s->wall_s);
    cJSON_AddNumberToObject(j, "train_s", s->train_s);
    cJSON_AddNumberToObject(j, "epochs", s->epochs_done);
    cJSON_AddNumberToObject(j, "steps", (double)s->steps);
    cJSON_AddNumberToObject(j, "T", T);
    cJSON_AddNumberToObject(j, "batch_size", N);
    cJSON_AddNumberToObject(j, "parameters", (double)params);
    cJSON_AddStringToObject(j, "precision", snn_precision_mode_name(pc->mode));
    cJSON_AddStringToObject(j, "fp8_recipe", snn_fp8_recipe_name(pc->fp8_recipe));
    cJSON_AddStringToObject(j, "checkpoint", path);
    print_json_line(j);
}

int cmd_train(int argc, char **argv) {
    if (train_dist_wanted(argc, argv)) return cmd_train_dist(argc, argv);
    model_flags mf;
    model_flags_defaults(&mf);
    data_flags df = {.dataset = NULL, .data_dir = NULL, .synthetic_train = 2048, .synthetic_test = 512};
    train_flags tf = {.epochs = 0, .batch_size = 0, .max_steps = 0, .lr = 0, .optimizer = "adam",
                      .out = "runs/latest", .encoding = "direct", .loss = NULL, .seed = 42,
                      .schedule = "cosine", .clip = 0, .weight_decay = -1, .momentum = 0.9f};
    precision_flags pf = {0};
    opt t[64];
    int n = model_flags_options(&mf, t);
    n += precision_flags_options(&pf, t + n);
    t[n++] = (opt){"--resume", OPT_STRING, &tf.resume, "continue the run of a checkpoint written by snn train (everything but --epochs, --max-steps, --checkpoint-every and --out comes from it)", NULL, 0};
    t[n++] = (opt){"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0};
    t[n++] = (opt){"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files (default: Debian's location)", NULL, 0};
    t[n++] = opt_num("--synthetic-size", OPT_INT, &df.synthetic_train, "synthetic: training samples (default 2048)", NULL, 1, 1000000);
    t[n++] = opt_num("--epochs", OPT_INT, &tf.epochs, "passes over the training data (fcsnn 10, convsnn 2, spikformer 1)", NULL, 1, SNN_TRAIN_MAX_EPOCHS);
    t[n++] = opt_num("--max-steps", OPT_LONG, &tf.max_steps, "stop once the run has taken this many steps (the schedule still spans --epochs; --resume continues)", NULL, 1, (double)SNN_TRAIN_MAX_STEPS);
    t[n++] = opt_num("--checkpoint-every", OPT_LONG, &tf.checkpoint_every, "also write the checkpoint every N steps", NULL, 1, (double)SNN_TRAIN_MAX_STEPS);
    t[n++] = opt_num("--batch-size", OPT_INT, &tf.batch_size, "samples per step (default 128; spikformer 32)", NULL, 1, SNN_TRAIN_MAX_BATCH);
    t[n++] = opt_num("--lr", OPT_FLOAT, &tf.lr, "learning rate, > 0 (adam/adamw 1e-3, sgd 0.1)", NULL, 1e-30, 1e6);
    t[n++] = (opt){"--optimizer", OPT_STRING, &tf.optimizer, "sgd | adam | adamw (default adam)", NULL, 0};
    t[n++] = opt_num("--momentum", OPT_FLOAT, &tf.momentum, "sgd momentum, 0 to 1 (default 0.9)", NULL, 0, 1);
    t[n++] = opt_num("--weight-decay", OPT_FLOAT, &tf.weight_decay, "weight decay, >= 0 (adamw 0.01, else 0)", NULL, 0, 1e6);
    t[n++] = (opt){"--schedule", OPT_STRING, &tf.schedule, "constant | cosine | step (default cosine)", NULL, 0};
    t[n++] = opt_num("--warmup", OPT_INT, &tf.warmup, "linear warm-up steps (default 0)", NULL, 0, 2147483647.0);
    t[n++] = opt_num("--clip", OPT_FLOAT, &tf.clip, "clip the global gradient norm (0: off, the default)", NULL, 0, 1e30);
    t[n++] = (opt){"--loss", OPT_STRING, &tf.loss, "ce | mse (ce; convsnn mse on firing rates)", NULL, 0};
    t[n++] = (opt){"--encoding", OPT_STRING, &tf.encoding, "direct | poisson (default direct)", NULL, 0};
    t[n++] = (opt){"--seed", OPT_U64, &tf.seed, "random seed (default 42)", NULL, 0};
    t[n++] = (opt){"--out", OPT_STRING, &tf.out, "output directory (default runs/latest; with --resume the checkpoint's)", NULL, 0};
    t[n++] = (opt){"--json", OPT_FLAG, &tf.json, "print a JSON summary as the last line of stdout", NULL, 0};
    t[n++] = (opt){"--quiet", OPT_FLAG, &tf.quiet, "no progress output", NULL, 0};
    if (args_wants_help(argc, argv, 2)) {
        args_help("snn train --model M --dataset D [options] | snn train --resume DIR/model.safetensors",
                  "Train a spiking network with surrogate-gradient BPTT; writes DIR/model.safetensors\n"
                  "and DIR/metrics.jsonl, and prints the test accuracy.", t, n);
        return 0;
    }
    args_parse("train", t, n, argc, argv, 2);
#define SEEN(name) (args_find(t, n, name)->seen)
    const int on_gpu = device_is_cuda(pf.device);
    snn_train_opts o = snn_train_opts_default();
    snn_train_position rpos = {0};
    snn_model *m = NULL;
    snn_ckpt *resume = NULL;
    snn_status st;
    char outbuf[4096];
    if (tf.resume) {
        /* the checkpoint decides the model and the run */
        st = snn_model_load(tf.resume, tf.seed, &m, &resume);
        if (st != SNN_OK) die_status(st == SNN_E_NUMERIC ? SNN_E_FORMAT : st, "resuming");
        st = snn_train_opts_from_checkpoint(resume, &o, &rpos);
        if (st != SNN_OK) die_status(SNN_E_FORMAT, "resuming");
        check_model_flags(t, n, &mf, m);
        same_int(args_find(t, n, "--T"), mf.T, o.T, "time steps");
        if (SEEN("--batch-size") && tf.batch_size != o.batch_size &&
            !(tf.batch_size > o.batch_size && o.batch_size == rpos.train_samples))
            same_int(args_find(t, n, "--batch-size"), tf.batch_size, o.batch_size, "batch size");
        same_str(args_find(t, n, "--optimizer"), tf.optimizer, snn_optim_kind_name(o.optim.kind), "optimizer");
        same_float(args_find(t, n, "--lr"), tf.lr, o.optim.lr, "learning rate");
        same_float(args_find(t, n, "--momentum"), tf.momentum, o.optim.momentum, "momentum");
        same_float(args_find(t, n, "--weight-decay"), tf.weight_decay, o.optim.weight_decay, "weight decay");
        same_str(args_find(t, n, "--schedule"), tf.schedule, snn_lr_kind_name(o.schedule), "schedule");
        same_int(args_find(t, n, "--warmup"), tf.warmup, o.warmup, "warm-up");
        same_float(args_find(t, n, "--clip"), tf.clip, o.clip, "clip");
        if (tf.loss) same_str(args_find(t, n, "--loss"), tf.loss, snn_train_loss_name(o.loss), "loss");
        same_str(args_find(t, n, "--encoding"), tf.encoding, snn_encoding_name(o.encoding), "encoding");
        if (SEEN("--seed") && tf.seed != o.seed) {
            char a[32], b[64];
            snprintf(a, sizeof a, "%llu", (unsigned long long)tf.seed);
            snprintf(b, sizeof b, "seed %llu", (unsigned long long)o.seed);
            contradicts("--seed", a, b);
        }
        if (o.dataset && df.dataset && strcmp(dataset_canonical(df.dataset), dataset_canonical(o.dataset)))
            contradicts("--dataset", df.dataset, o.dataset);
        if (!df.dataset) df.dataset = o.dataset;
        if (!df.dataset) die_usage("%s does not name its dataset: give --dataset", tf.resume);
        if (!SEEN("--synthetic-size")) df.synthetic_train = rpos.train_samples;
        tf.seed = o.seed; /* synthetic data and the data order come from the run's seed */
        model_flags_from_checkpoint(m, &mf);
        mf.T = o.T;
        /* what may change: the planned length, where to stop, how often to save, where */
        if (SEEN("--epochs")) o.epochs = tf.epochs;
        o.max_steps = tf.max_steps; /* a stop point belongs to one invocation */
        if (SEEN("--checkpoint-every")) o.checkpoint_every = tf.checkpoint_every;
        o.out_dir = SEEN("--out") ? tf.out : dir_of(tf.resume, outbuf, sizeof outbuf);
        if (rpos.epochs_done >= o.epochs)
            die_usage("%s already holds %d of %d epochs; ask for more with --epochs", tf.resume, rpos.epochs_done,
                      o.epochs);
        if (o.max_steps && o.max_steps <= rpos.step)
            die_usage("--max-steps %ld: %s is already at step %ld", o.max_steps, tf.resume, rpos.step);
    } else {
        int spk = !strcmp(mf.model, "spikformer"), conv = !strcmp(mf.model, "convsnn");
        o.epochs = tf.epochs ? tf.epochs : spk ? 1 : conv ? 2 : 10;
        o.batch_size = tf.batch_size ? tf.batch_size : spk ? 32 : 128;
        o.T = mf.T;
        int okind = snn_optim_kind_parse(tf.optimizer);
        if (okind < 0) die_usage("unknown optimizer '%s' (choose sgd, adam or adamw)", tf.optimizer);
        o.optim = snn_optim_defaults((snn_optim_kind)okind);
        if (tf.lr > 0) o.optim.lr = tf.lr;
        else if (okind == SNN_OPTIM_SGD) o.optim.lr = 0.1f;
        if (okind == SNN_OPTIM_SGD) o.optim.momentum = tf.momentum;
        else if (SEEN("--momentum")) die_usage("--momentum applies to --optimizer sgd only");
        if (tf.weight_decay >= 0) o.optim.weight_decay = tf.weight_decay;
        int lkind = snn_lr_kind_parse(tf.schedule);
        if (lkind < 0) die_usage("unknown schedule '%s' (choose constant, cosine or step)", tf.schedule);
        o.schedule = (snn_lr_kind)lkind;
        o.warmup = tf.warmup;
        o.clip = tf.clip;
        const char *loss = tf.loss ? tf.loss : conv ? "mse" : "ce";
        int l = snn_train_loss_parse(loss);
        if (l < 0) die_usage("unknown loss '%s' (choose ce or mse)", loss);
        o.loss = (snn_train_loss)l;
        if (snn_encoding_from_name(tf.encoding, &o.encoding) != SNN_OK)
            die_usage("unknown encoding '%s' (choose direct or poisson)", tf.encoding);
        o.seed = tf.seed;
        o.max_steps = tf.max_steps;
        o.checkpoint_every = tf.checkpoint_every;
        o.out_dir = tf.out;
    }
    if (strlen(o.out_dir) + 40 >= 4096)
        die_usage("--out is %zu bytes long; at most 4055 leave room for the checkpoint's name", strlen(o.out_dir));
    snn_dataset *train = NULL, *test = NULL;
    st = data_load(&df, &mf, tf.seed, &train, &test);
    if (st != SNN_OK) die_setup(st, "loading the data");
    df.dataset = dataset_canonical(df.dataset);
    o.dataset = df.dataset;
    if (snn_dataset_size(train) < 1 || snn_dataset_size(test) < 1)
        die_usage("the %s data has %d training and %d test samples; training needs at least one of each",
                  df.dataset, snn_dataset_size(train), snn_dataset_size(test));
    int c, h, w;
    snn_dataset_shape(train, &c, &h, &w);
    int classes = snn_dataset_classes(train);
    if (snn_dataset_classes(test) > classes) classes = snn_dataset_classes(test);
    snn_precision_config pcfg;
    if (resume) {
        if (snn_model_input_numel(m) != snn_dataset_features(train) || (int)snn_model_output_numel(m) < classes)
            die_usage("%s does not fit the %s data (%zu features, %d classes)", tf.resume, df.dataset,
                      snn_dataset_features(train), classes);
        const char *pc = snn_ckpt_metadata(resume, "snn_precision_config");
        if (precision_flags_given(&pf)) {
            pcfg = precision_flags_config(&pf);
            if (snn_precision_check_checkpoint(&pcfg, resume) != SNN_OK) die_status(SNN_E_INVALID, "resuming");
        } else if (!pc || snn_precision_config_from_json(pc, &pcfg) != SNN_OK) {
            die_usage("%s has no valid precision configuration (\"snn_precision_config\")", tf.resume);
        }
    } else {
        pcfg = precision_flags_config(&pf);
        st = model_build(&mf, c, h, w, classes, tf.seed, &m);
        if (st != SNN_OK) die_setup(st, "building the model");
    }
    if (pcfg.neuron_bwd == SNN_NEURON_COMPUTE_FP8 && !snn_precision_config_uses_loss_scaler(&pcfg) && !tf.quiet)
        fprintf(stderr, "snn: warning: --neuron-bwd fp8 without loss scaling (only --precision fp16 scales the loss): "
                        "small surrogate gradients underflow in FP8 and the run may stop learning\n");
    if (make_dir(o.out_dir) != 0) die_usage("cannot create output directory '%s': %s", o.out_dir, strerror(errno));
    /* On a GPU the model runs on the op-table engine, the same loop as on the CPU: the model is
     * placed first (snn_model_to), then prepared. A build without CUDA refuses the device here
     * with the library's message naming the build. */
    if (on_gpu && (st = snn_model_to(m, pf.device)) != SNN_OK) die_status(st, "placing the model");
    /* device -> prepare -> optimizer (the trainer creates it) */
    snn_precision *prec = NULL;
    st = snn_prepare_model_for_precision(m, pf.device ? pf.device : "cpu", &pcfg, &prec);
    if (st != SNN_OK) die_status(st, "preparing the precision");
    snn_trainer *tr = NULL;
    st = snn_trainer_create(m, prec, &o, snn_dataset_size(train), &tr);
    if (st != SNN_OK) die_setup(st, "setting up training");
    check_fits("training (activation memory, parameters and optimizer state)", (double)snn_model_arena_bytes(m) + 16.0 * (double)snn_model_num_params(m));
    if (resume) {
        st = snn_trainer_resume(tr, resume);
        if (st != SNN_OK) die_status(st == SNN_E_NOMEM ? st : SNN_E_FORMAT, "resuming");
    }
    const snn_train_opts *ro = snn_trainer_opts(tr);
    const snn_train_position *pos = snn_trainer_position(tr);
    progress_ctx pc = {.tty = !tf.quiet && isatty(2), .quiet = tf.quiet};
    if (!tf.quiet) {
        fprintf(stderr, "snn: training %s (%zu parameters) on %s: %d samples, T=%d, batch %d, %s lr %g, %d epochs",
                snn_model_kind(m), snn_model_num_params(m), df.dataset, snn_dataset_size(train), ro->T, ro->batch_size,
                snn_optim_kind_name(ro->optim.kind), (double)ro->optim.lr, ro->epochs);
        if (resume) fprintf(stderr, ", resuming at epoch %d, step %ld", pos->epoch, pos->step);
        fputc('\n', stderr);
    }
    snn_train_summary sum;
    st = snn_trainer_run(tr, train, test, on_event, &pc, &sum);
    if (st != SNN_OK) die_status(st, "training");
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", o.out_dir);
    if (printf("test accuracy: %.4f\n", sum.test_accuracy) < 0) die_status(SNN_E_IO, "writing to stdout");
    if (tf.json)
        print_summary_json(snn_model_kind(m), df.dataset, &sum, ro->T, ro->batch_size, snn_model_num_params(m), &pcfg,
                           path);
    snn_trainer_free(tr);
    if (resume) snn_ckpt_close(resume);
    snn_precision_free(prec);
    snn_model_free(m);
    snn_dataset_free(train);
    snn_dataset_free(test);
    return finish_stdout();
}
