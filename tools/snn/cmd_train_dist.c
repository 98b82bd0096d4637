/* snn train with data parallelism: `mpirun -np N snn train --data-parallel ddp ...`.
 * The loop lives in the library (snn_dist_train_classification, snn/vision_dist.h); this file parses the flags,
 * builds the model, precision and optimizer on every rank, and turns failures into one
 * message for the whole job:
 *   - during set-up every rank meets the others at agreement points; a rank that fails
 *     (bad input, a missing file) brings its message there, rank 0 prints it once
 *     ("snn: error: rank R: ...") and every rank exits with its code (2 for bad input);
 *   - after set-up a failing rank prints its message and aborts the job (MPI_Abort), so
 *     no rank waits forever in a collective. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "common.h"
#include "dist_cli.h"
#include "snn/checkpoint.h"
#include "snn/comm.h"
#include "snn/cuda.h"
#include "snn/dist.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/vision_dist.h"

static snn_comm *g_world;

static int dist_flag(const char *a) {
    static const char *names[] = {"--data-parallel", "--tensor-parallel-size", "--pipeline-parallel-size",
                                  "--pipeline-microbatches", NULL};
    for (int i = 0; names[i]; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(a, names[i], n) && (a[n] == 0 || a[n] == '=')) return 1;
    }
    return 0;
}

int train_dist_wanted(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (dist_flag(argv[i])) return 1;
    /* N copies of the single-process loop would each train alone and overwrite one output */
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    return n && strcmp(n, "1") != 0;
}

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

/* JSON number; NaN/inf become null (strict JSON has no NaN). */
static void jnum(FILE *f, const char *key, double v, int last) {
    if (isfinite(v)) fprintf(f, "\"%s\":%.10g%s", key, v, last ? "" : ",");
    else fprintf(f, "\"%s\":null%s", key, last ? "" : ",");
}

typedef struct epoch_ctx {
    FILE *metrics;
    int quiet;
    /* step checkpoints (snn_vision_checkpoint_save): every `interval` steps into cfg.checkpoint_dir */
    const snn_mesh *mesh;
    const snn_vision_training_config *cfg;
    snn_model *model;
    snn_precision *prec;
    snn_optimizer *opt;
    long interval, per_epoch, saved_step;
    uint64_t seed;
} epoch_ctx;

/* Collective: every rank saves its shard of the step (progress follows from the step: the
 * loop runs whole epochs of per_epoch batches). */
static snn_status save_step(epoch_ctx *e, long step, char *dir, size_t cap) {
    snn_vision_progress pr = {step, step / e->per_epoch, step % e->per_epoch};
    uint64_t rng[SNN_VISION_RNG_WORDS] = {e->seed, (uint64_t)step, 0, 0};
    snn_status st = snn_vision_checkpoint_save(e->mesh, e->cfg, e->model, e->prec, e->opt, &pr, rng, dir, cap);
    if (st == SNN_OK) e->saved_step = step;
    return st;
}

static snn_status on_step(void *ctx, long step) {
    epoch_ctx *e = ctx;
    if (e->interval <= 0 || step % e->interval) return SNN_OK;
    return save_step(e, step, NULL, 0);
}

static const char *optim_registry_name(int k) {
    return k == SNN_OPTIM_SGD ? "torch.optim.SGD" : k == SNN_OPTIM_ADAM ? "torch.optim.Adam" : "torch.optim.AdamW";
}

static void print_epoch(FILE *f, const snn_dist_epoch_report *r) {
    /* SpikingJelly's per-epoch line, keys sorted */
    fprintf(f, "{\"epoch\":%d,\"optimizer_step\":%ld,", r->epoch, r->optimizer_step);
    jnum(f, "train_loss", r->train_loss, 0);
    jnum(f, "validation_accuracy", r->validation_accuracy, 0);
    jnum(f, "validation_loss", r->validation_loss, 1);
    fputs("}\n", f);
    fflush(f);
}

static void on_epoch(void *ctx, const snn_dist_epoch_report *r) {
    epoch_ctx *e = ctx;
    print_epoch(stdout, r);
    if (e->metrics) print_epoch(e->metrics, r);
}

/* 1 when every DP rank has a GPU of its own: (host, device) pairs all distinct. */
static int gpus_distinct(snn_comm *dp, int dev) {
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    uint64_t key = 1469598103934665603ull; /* FNV-1a of the host name, then the device */
    for (const char *c = host; *c; c++) key = (key ^ (unsigned char)*c) * 1099511628211ull;
    key = key * 64u + (uint64_t)dev;
    int n = snn_comm_size(dp);
    uint64_t *all = calloc((size_t)n, sizeof *all);
    if (!all) die_status(SNN_E_NOMEM, "allocating");
    snn_status st = snn_comm_allgather(dp, &key, sizeof key, SNN_COMM_U8, all);
    if (st != SNN_OK) die_status(st, "exchanging the GPU of each rank");
    int ok = 1;
    for (int i = 0; i < n && ok; i++)
        for (int j = i + 1; j < n && ok; j++) ok = all[i] != all[j];
    free(all);
    return ok;
}

/* The device communicator of the DP group for a model on GPU `dev`: NCCL when every rank
 * has its own GPU (auto, nccl); NULL (gradients through the host over MPI) when ranks share
 * one, when NCCL cannot be opened (auto only), or with host. */
static snn_comm *dp_device_comm(snn_comm *dp, int dev, const char *how, int rank, int quiet) {
    if (snn_comm_size(dp) == 1 || !strcmp(how, "host")) return NULL;
    int distinct = gpus_distinct(dp, dev);
    if (!distinct) {
        if (!strcmp(how, "nccl"))
            die_usage("--gpu-collectives nccl needs one GPU per rank; ranks share a GPU here (use auto or host)");
        if (rank == 0 && !quiet)
            fprintf(stderr, "snn: ranks share a GPU: gradients are averaged through the host\n");
        return NULL;
    }
    snn_comm *c = NULL;
    snn_status st = snn_comm_nccl_create(dp, dev, &c);
    if (st == SNN_OK) return c;
    if (!strcmp(how, "nccl") || st != SNN_E_UNSUPPORTED) die_status(st, "creating the NCCL communicator");
    if (rank == 0 && !quiet) fprintf(stderr, "snn: %s; gradients are averaged through the host\n", snn_last_error());
    return NULL;
}

int cmd_train_dist(int argc, char **argv) {
    int help = args_wants_help(argc, argv, 2);
    snn_status st = snn_comm_init_world(&g_world);
    if (st != SNN_OK) die_status(st, "starting the distributed job");
    dist_cli_begin(g_world);
    int rank = snn_comm_rank(g_world), world = snn_comm_size(g_world);

    model_flags mf;
    model_flags_defaults(&mf);
    data_flags df = {.dataset = NULL, .data_dir = NULL, .synthetic_train = 2048, .synthetic_test = 512};
    precision_flags pf = {0};
    int epochs = 0, batch = 0, warmup = 0, quiet = 0, tp = 1, pp = 1, micro = 1, timing_warmup = 0, bucket_mb = 25;
    int sync_bn = 0;
    long max_steps = -1;
    float lr = 0, wd = -1, momentum = 0.9f, clip = 0;
    const char *optimizer = "adam", *out = "runs/latest", *encoding = "direct", *loss = NULL, *schedule = "cosine";
    const char *data_parallel = "ddp", *ckpt_dir = NULL, *resume = NULL, *gpu_coll = "auto";
    long ckpt_interval = 0;
    uint64_t seed = 42;
    opt t[64];
    int n = model_flags_options(&mf, t);
    n += precision_flags_options(&pf, t + n);
    t[n++] = (opt){"--data-parallel", OPT_STRING, &data_parallel, "ddp (default; fsdp2 is not built)", NULL, 0};
    t[n++] = (opt){"--tensor-parallel-size", OPT_INT, &tp, "ranks per tensor-parallel group (1)", NULL, 0};
    t[n++] = (opt){"--pipeline-parallel-size", OPT_INT, &pp, "pipeline stages (1)", NULL, 0};
    t[n++] = (opt){"--pipeline-microbatches", OPT_INT, &micro, "GPipe microbatches per batch (1)", NULL, 0};
    t[n++] = (opt){"--dataset", OPT_STRING, &df.dataset, "fashion-mnist | digits | synthetic (required)", NULL, 0};
    t[n++] = (opt){"--data-dir", OPT_STRING, &df.data_dir, "directory of the data files (default: Debian's location)", NULL, 0};
    t[n++] = opt_num("--synthetic-size", OPT_INT, &df.synthetic_train, "synthetic: training samples (default 2048)", NULL, 1, 1000000);
    t[n++] = opt_num("--epochs", OPT_INT, &epochs, "passes over the training data (fcsnn 10, convsnn 2, spikformer 1)", NULL, 1, 1000000);
    t[n++] = opt_num("--max-steps", OPT_LONG, &max_steps, "stop after this many optimizer steps", NULL, 1, 1e15);
    t[n++] = opt_num("--timing-warmup-steps", OPT_INT, &timing_warmup, "steps left out of the throughput (0)", NULL, 0, 2147483647.0);
    t[n++] = opt_num("--batch-size", OPT_INT, &batch, "samples per step on each data-parallel rank (128; spikformer 32)", NULL, 1, 1 << 20);
    t[n++] = opt_num("--lr", OPT_FLOAT, &lr, "learning rate, > 0 (adam/adamw 1e-3, sgd 0.1)", NULL, 1e-30, 1e6);
    t[n++] = (opt){"--optimizer", OPT_STRING, &optimizer, "sgd | adam | adamw (default adam)", NULL, 0};
    t[n++] = opt_num("--momentum", OPT_FLOAT, &momentum, "sgd momentum, 0 to 1 (default 0.9)", NULL, 0, 1);
    t[n++] = opt_num("--weight-decay", OPT_FLOAT, &wd, "weight decay, >= 0 (adamw 0.01, else 0)", NULL, 0, 1e6);
    t[n++] = (opt){"--schedule", OPT_STRING, &schedule, "constant | cosine | step (default cosine)", NULL, 0};
    t[n++] = opt_num("--warmup", OPT_INT, &warmup, "linear warm-up steps (default 0)", NULL, 0, 2147483647.0);
    t[n++] = opt_num("--clip", OPT_FLOAT, &clip, "clip the global gradient norm (0: off)", NULL, 0, 1e30);
    t[n++] = (opt){"--loss", OPT_STRING, &loss, "ce | mse (ce; convsnn mse on firing rates)", NULL, 0};
    t[n++] = (opt){"--encoding", OPT_STRING, &encoding, "direct | poisson (default direct)", NULL, 0};
    t[n++] = (opt){"--seed", OPT_U64, &seed, "random seed, the same on every rank (default 42)", NULL, 0};
    t[n++] = opt_num("--bucket-cap-mb", OPT_INT, &bucket_mb, "DDP gradient bucket size in MiB (25)", NULL, 1, 4096);
    t[n++] = (opt){"--sync-batchnorm", OPT_FLAG, &sync_bn,
                   "BatchNorm statistics over the whole data-parallel batch (torch's SyncBatchNorm)", NULL, 0};
    t[n++] = (opt){"--gpu-collectives", OPT_STRING, &gpu_coll,
                   "--device cuda: auto (NCCL when every rank has its own GPU, else through the host) | nccl | host",
                   NULL, 0};
    t[n++] = (opt){"--checkpoint-dir", OPT_STRING, &ckpt_dir, "write step checkpoints (step_XXXXXXXX/) here", NULL, 0};
    t[n++] = opt_num("--checkpoint-interval", OPT_LONG, &ckpt_interval, "steps between checkpoints (0: only the last)", NULL, 0, 1e15);
    t[n++] = (opt){"--resume", OPT_STRING, &resume, "continue from a step directory of the same run", NULL, 0};
    t[n++] = (opt){"--out", OPT_STRING, &out, "output directory, written by rank 0 (default runs/latest)", NULL, 0};
    t[n++] = (opt){"--quiet", OPT_FLAG, &quiet, "no progress output", NULL, 0};
    if (help) {
        if (rank == 0)
            args_help("mpirun -np N snn train --data-parallel ddp --model M --dataset D [options]",
                      "Data-parallel training over MPI ranks (one process works without mpirun). Rank 0\n"
                      "prints one JSON line per epoch and the final metrics; --batch-size is per rank.", t, n);
        snn_comm_free(g_world);
        return 0;
    }
    args_parse("train", t, n, argc, argv, 2);
    if (strcmp(data_parallel, "ddp") && strcmp(data_parallel, "fsdp2"))
        die_usage("--data-parallel must be ddp or fsdp2, got '%s'", data_parallel);
    int spk = !strcmp(mf.model, "spikformer"), conv = !strcmp(mf.model, "convsnn");
    if (!epochs) epochs = spk ? 1 : conv ? 2 : 10;
    if (!batch) batch = spk ? 32 : 128;
    if (epochs < 0) die_usage("--epochs must be positive, got %d", epochs);
    if (batch <= 0 || batch > 1 << 20) die_usage("--batch-size must be between 1 and 1048576, got %d", batch);
    if (max_steps == 0 || max_steps < -1) die_usage("--max-steps must be positive, got %ld", max_steps);
    if (timing_warmup < 0) die_usage("--timing-warmup-steps must be >= 0, got %d", timing_warmup);
    if (bucket_mb <= 0 || bucket_mb > 4096) die_usage("--bucket-cap-mb must be between 1 and 4096, got %d", bucket_mb);
    if (lr < 0) die_usage("--lr must be positive");
    if (df.synthetic_train <= 0) die_usage("--synthetic-size must be positive");
    int okind = snn_optim_kind_parse(optimizer);
    if (okind < 0) die_usage("unknown optimizer '%s' (choose sgd, adam or adamw)", optimizer);
    int lkind = snn_lr_kind_parse(schedule);
    if (lkind < 0) die_usage("unknown schedule '%s' (choose constant, cosine or step)", schedule);
    if (!loss) loss = conv ? "mse" : "ce";
    int use_mse = !strcmp(loss, "mse");
    if (!use_mse && strcmp(loss, "ce")) die_usage("unknown loss '%s' (choose ce or mse)", loss);
    snn_encoding enc;
    if (snn_encoding_from_name(encoding, &enc) != SNN_OK) die_usage("unknown encoding '%s' (choose direct or poisson)", encoding);
    const int on_gpu = device_is_cuda(pf.device);
    if (on_gpu) device_parse(NULL, pf.device); /* a build without CUDA says so here */
    snn_precision_config pcfg = precision_flags_config(&pf);
    st = snn_dist_check_rules(data_parallel, tp, pp, micro, batch, &pcfg);
    if (st != SNN_OK) die_status(st, NULL);
    snn_mesh *mesh = NULL;
    st = snn_mesh_open(g_world, pp, tp, &mesh);
    if (st != SNN_OK) die_status(st, "building the (dp, pp, tp) mesh");
    const int dp_size = snn_mesh_size(mesh, SNN_MESH_DP);
    if (!strcmp(data_parallel, "fsdp2")) die_usage("--data-parallel fsdp2 is not built; use ddp");
    int parallel = tp != 1 || pp != 1;
    if (on_gpu && parallel)
        die_usage("--device cuda trains data parallel only: --tensor-parallel-size and --pipeline-parallel-size "
                  "must be 1 (got %d and %d)", tp, pp);
    if (sync_bn && parallel)
        die_usage("--sync-batchnorm is built for data parallelism (tensor and pipeline parallel size 1)");
    if (strcmp(gpu_coll, "auto") && strcmp(gpu_coll, "nccl") && strcmp(gpu_coll, "host"))
        die_usage("--gpu-collectives must be auto, nccl or host, got '%s'", gpu_coll);
    if (parallel && clip > 0)
        die_usage("--clip with --tensor-parallel-size %d --pipeline-parallel-size %d is not built", tp, pp);
    dist_cli_setup_point();

    snn_dataset *train = NULL, *test = NULL;
    st = data_load(&df, &mf, seed, &train, &test);
    if (st != SNN_OK) die_status(st, "loading the data");
    dist_cli_setup_point();
    int c, h, w;
    snn_dataset_shape(train, &c, &h, &w);
    int classes = snn_dataset_classes(train);
    if (snn_dataset_classes(test) > classes) classes = snn_dataset_classes(test);
    snn_model *m = NULL;
    st = model_build(&mf, c, h, w, classes, seed, &m);
    if (st != SNN_OK) die_status(st, "building the model");
    snn_vision_stage *stage = NULL;
    snn_vision_model_config vmc;
    int need_vcfg = parallel || ckpt_dir || resume;
    st = need_vcfg ? snn_vision_model_config_from_zoo(snn_model_config_json(m), mf.T, &vmc) : SNN_OK;
    if (st != SNN_OK) die_status(st, "describing the model for checkpoints");
    if (parallel) { /* this rank's part of the same dense model (snn_vision_stage_create) */
        st = snn_vision_stage_create(&vmc, mesh, seed, &stage);
        if (st != SNN_OK) die_status(st, "building the model's stage");
        snn_model_free(m);
        m = snn_vision_stage_model(stage);
    }
    dist_cli_setup_point();
    /* the precision guide's order on a GPU: device, then prepare, then the optimizer */
    char devname[32] = "cpu";
    snn_comm *dev_dp = NULL;
    if (on_gpu) {
        int dev = device_for_rank(pf.device, g_world, devname, sizeof devname);
        st = snn_model_to(m, devname);
        if (st != SNN_OK) die_status(st, "placing the model");
        dev_dp = dp_device_comm(snn_mesh_comm(mesh, SNN_MESH_DP), dev, gpu_coll, rank, quiet);
    }
    dist_cli_setup_point();
    snn_precision *prec = NULL;
    st = snn_prepare_model_for_precision(m, devname, &pcfg, &prec);
    if (st != SNN_OK) die_status(st, "preparing the precision");
    snn_optim_opts oo = snn_optim_defaults((snn_optim_kind)okind);
    if (lr > 0) oo.lr = lr;
    else if (okind == SNN_OPTIM_SGD) oo.lr = 0.1f;
    if (okind == SNN_OPTIM_SGD) oo.momentum = momentum;
    if (wd >= 0) oo.weight_decay = wd;
    int n_bn = 0;
    if (sync_bn && (st = snn_ddp_sync_batchnorm(snn_mesh_comm(mesh, SNN_MESH_DP), m, &n_bn)) != SNN_OK)
        die_status(st, "--sync-batchnorm");
    if (sync_bn && !n_bn) die_usage("--sync-batchnorm: model %s has no BatchNorm", mf.model);
    snn_optimizer *opt = NULL;
    st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st != SNN_OK) die_status(st, "creating the optimizer");

    snn_dist_train_opts o = {.model = m, .stage = stage, .microbatches = micro, .prec = prec, .opt = opt, .train = train, .val = test, .time_steps = mf.T,
                             .batch_size = batch, .epochs = epochs, .max_steps = max_steps,
                             .timing_warmup_steps = timing_warmup, .use_mse = use_mse, .enc = enc, .seed = seed,
                             .clip = clip, .bucket_bytes = (size_t)bucket_mb << 20, .on_epoch = on_epoch,
                             .device_dp = dev_dp};
    long total = snn_dist_total_steps(mesh, &o);
    if (total <= 0) die_usage("no training step fits: %d samples over %d ranks", snn_dataset_size(train), dp_size);
    if (max_steps > 0 && timing_warmup >= max_steps)
        die_usage("--timing-warmup-steps %d must be < --max-steps %ld", timing_warmup, max_steps);
    /* the step schedule decays once per epoch, as snn train's: batches of one epoch */
    long per_epoch = (long)snn_dist_loader_batches(
        snn_dist_sampler_num_samples((size_t)snn_dataset_size(train), dp_size), batch, pp > 1);
    if (per_epoch < 1) per_epoch = 1;
    o.sched = (snn_lr_sched){.kind = (snn_lr_kind)lkind, .base_lr = oo.lr, .warmup_steps = warmup,
                             .warmup_start_factor = 0.1f, .total_steps = total > warmup ? total : warmup + 1,
                             .min_lr = 0, .step_size = per_epoch, .gamma = 0.5f};
    if (snn_lr_sched_check(&o.sched) != SNN_OK) die_status(SNN_E_INVALID, "learning-rate schedule");
    if (snn_dataset_size(test) % dp_size)
        die_usage("validation dataset size %d must be divisible by the data-parallel size %d", snn_dataset_size(test),
                  dp_size);
    /* the checkpoint recipe (config.json): what must match for --resume */
    snn_vision_training_config vcfg = snn_vision_training_config_default();
    char ckpt_path[4096] = "";
    if (need_vcfg) {
        vcfg.model = vmc;
        snprintf(vcfg.dataset_builder, sizeof vcfg.dataset_builder, "snn.data.%s",
                 !strcmp(df.dataset, "fashion-mnist") ? "fashion_mnist" : !strcmp(df.dataset, "digits") ? "digits_csv"
                                                                                                      : "synthetic");
        vcfg.epochs = epochs;
        vcfg.batch_size = batch;
        snprintf(vcfg.optimizer, sizeof vcfg.optimizer, "%s", optim_registry_name(okind));
        vcfg.optimizer_kwargs = (snn_kwargs){0};
        snn_kwargs_set_number(&vcfg.optimizer_kwargs, "lr", oo.lr);
        snn_kwargs_set_number(&vcfg.optimizer_kwargs, "weight_decay", oo.weight_decay);
        if (okind == SNN_OPTIM_SGD) snn_kwargs_set_number(&vcfg.optimizer_kwargs, "momentum", oo.momentum);
        snprintf(vcfg.loss_function, sizeof vcfg.loss_function, "torch.nn.functional.%s",
                 use_mse ? "mse_loss" : "cross_entropy");
        vcfg.tensor_parallel_size = tp;
        vcfg.pipeline_parallel_size = pp;
        vcfg.pipeline_microbatches = micro;
        vcfg.precision = pcfg;
        vcfg.max_steps = max_steps > 0 ? max_steps : vcfg.max_steps;
        vcfg.timing_warmup_steps = timing_warmup;
        vcfg.seed = (int64_t)seed;
        if (ckpt_dir) snprintf(ckpt_path, sizeof ckpt_path, "%s", ckpt_dir);
        else snprintf(ckpt_path, sizeof ckpt_path, "%s/checkpoint", out);
        snprintf(vcfg.checkpoint_dir, sizeof vcfg.checkpoint_dir, "%s", ckpt_path);
        vcfg.checkpoint_interval = ckpt_interval;
        if (resume) snprintf(vcfg.resume, sizeof vcfg.resume, "%s", resume);
        st = snn_vision_training_config_validate(&vcfg);
        if (st != SNN_OK) die_status(st, "checking the training configuration");
    } else if (ckpt_interval > 0) {
        die_usage("--checkpoint-interval needs --checkpoint-dir");
    }
    epoch_ctx ec = {.metrics = NULL, .quiet = quiet, .mesh = mesh, .cfg = &vcfg, .model = m, .prec = prec,
                    .opt = opt, .interval = ckpt_dir ? ckpt_interval : 0, .per_epoch = per_epoch, .saved_step = -1,
                    .seed = seed};
    if (resume) {
        snn_vision_progress pr;
        uint64_t rng[SNN_VISION_RNG_WORDS];
        st = snn_vision_checkpoint_load(mesh, &vcfg, resume, m, prec, opt, &pr, rng);
        if (st != SNN_OK) die_status(st, "resuming");
        if (pr.step > total) die_usage("--resume: the checkpoint is at step %ld, past this run's %ld steps", pr.step, total);
        o.start_step = pr.step;
        ec.saved_step = pr.step;
    }
    if (ckpt_dir || resume || parallel) o.on_step = on_step;
    char path[4096];
    if (rank == 0) {
        if (make_dir(out) != 0) die_usage("cannot create output directory '%s': %s", out, strerror(errno));
        snprintf(path, sizeof path, "%s/metrics.jsonl", out);
        ec.metrics = fopen(path, "w");
        if (!ec.metrics) die_usage("cannot write '%s': %s", path, strerror(errno));
    }
    o.ctx = &ec;
    dist_cli_setup_point();
    dist_cli_running();

    if (rank == 0 && !quiet)
        fprintf(stderr, "snn: training %s (%zu parameters) on %s, DP %d x PP %d x TP %d (mpi world %d, backend %s): "
                "T=%d, batch %d per DP rank (global %d), %s lr %g, %ld steps\n", mf.model, snn_model_num_params(m),
                df.dataset, dp_size, snn_mesh_size(mesh, SNN_MESH_PP), snn_mesh_size(mesh, SNN_MESH_TP), world,
                snn_comm_backend_name(g_world), mf.T, batch, batch * dp_size, optimizer, (double)oo.lr, total);
    snn_dist_metrics met;
    st = snn_dist_train_classification(mesh, &o, &met);
    if (st != SNN_OK) die_status(st, "training");
    char step_dir[4096] = "";
    if (need_vcfg && (long)met.optimizer_step != ec.saved_step) {
        st = save_step(&ec, (long)met.optimizer_step, step_dir, sizeof step_dir);
        if (st != SNN_OK) die_status(st, "saving the last checkpoint");
    } else if (need_vcfg) {
        snprintf(step_dir, sizeof step_dir, "%s/step_%08ld", ckpt_path, (long)met.optimizer_step);
    }
    dist_cli_agreeing(); /* rank 0's write is agreed on before anyone reports success */
    if (rank == 0 && parallel) { /* the dense model: merge the shards (an artifact loads as a model) */
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        remove(path);
        st = snn_vision_export_artifact(step_dir, path);
        if (st != SNN_OK) die_status(st, "writing the model artifact");
    }
    if (rank == 0) {
        if (ec.metrics) fclose(ec.metrics);
        snprintf(path, sizeof path, "%s/model.safetensors", out);
        char tbuf[32], ebuf[32];
        snprintf(tbuf, sizeof tbuf, "%d", mf.T);
        snprintf(ebuf, sizeof ebuf, "%d", epochs);
        const char *meta[] = {"dataset", df.dataset, "time_steps", tbuf, "epochs", ebuf, "encoding",
                              snn_encoding_name(enc), NULL};
        st = parallel ? SNN_OK : snn_training_checkpoint_save(m, prec, opt, path, meta);
        if (st != SNN_OK) die_status(st, "saving the model");
        /* the final metrics object (all values numbers, keys sorted) */
        fputc('{', stdout);
        jnum(stdout, "data_parallel_size", met.data_parallel_size, 0);
        jnum(stdout, "global_batch_size", met.global_batch_size, 0);
        jnum(stdout, "images_per_second", met.images_per_second, 0);
        jnum(stdout, "optimizer_step", met.optimizer_step, 0);
        jnum(stdout, "peak_memory_bytes", met.peak_memory_bytes, 0);
        jnum(stdout, "peak_reserved_memory_bytes", met.peak_reserved_memory_bytes, 0);
        jnum(stdout, "pipeline_parallel_size", met.pipeline_parallel_size, 0);
        jnum(stdout, "skipped_steps", met.skipped_steps, 0);
        jnum(stdout, "tensor_parallel_size", met.tensor_parallel_size, 0);
        jnum(stdout, "timed_steps", met.timed_steps, 0);
        jnum(stdout, "total_peak_memory_bytes", met.total_peak_memory_bytes, 0);
        jnum(stdout, "total_peak_reserved_memory_bytes", met.total_peak_reserved_memory_bytes, 0);
        jnum(stdout, "train_loss", met.train_loss, 0);
        jnum(stdout, "training_seconds", met.training_seconds, 0);
        jnum(stdout, "validation_accuracy", met.validation_accuracy, 0);
        jnum(stdout, "validation_loss", met.validation_loss, 1);
        fputs("}\n", stdout);
        fflush(stdout);
    }
    dist_cli_setup_point();
    args_die_hook = NULL;
    snn_optimizer_free(opt);
    snn_precision_free(prec);
    if (stage) snn_vision_stage_free(stage);
    else snn_model_free(m);
    snn_dataset_free(train);
    snn_dataset_free(test);
    snn_mesh_close(mesh);
    snn_comm_free(dev_dp);
    snn_comm_free(g_world);
    return 0;
}
