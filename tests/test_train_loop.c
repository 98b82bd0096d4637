/* The library's training loop (include/snn/train.h): a run stopped inside an epoch or at an
 * epoch's end and resumed writes the same checkpoint bytes as the run never stopped, in all
 * four precisions; a diverging run stops with SNN_E_NUMERIC and writes no checkpoint; the
 * optimizer's fused non-finite flag (vector body and scalar tail); eval/predict refuse a
 * non-finite model; the trainer metadata is parsed strictly; metrics.jsonl is trimmed to
 * the checkpoint; temporaries of dead writers are removed, live ones kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "snn/snn.h"
#include "snn/train.h"

static char tmpdir[256];

static uint8_t *slurp(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) *len = (size_t)n;
    return b;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

typedef struct run_cfg {
    const char *mode;
    snn_encoding enc;
    snn_optim_kind optim;
} run_cfg;

/* What the progress callback saw: the epoch each EPOCH event completed, steps seen. */
static int ev_epochs[16], ev_n, ev_steps, ev_ckpts;

static int on_event(const snn_train_event *e, void *user) {
    (void)user;
    if (e->kind == SNN_TRAIN_EVENT_STEP) ev_steps++;
    if (e->kind == SNN_TRAIN_EVENT_CHECKPOINT) ev_ckpts++;
    if (e->kind == SNN_TRAIN_EVENT_EPOCH && ev_n < 16)
        ev_epochs[ev_n++] = e->partial ? -e->pos.epoch : e->pos.epoch - 1;
    return 0;
}

/* Build, prepare and train (or resume) one run into dir. max_steps 0: to the end. */
static snn_status run(const run_cfg *rc, const snn_dataset *train, const snn_dataset *test, const char *dir,
                      long max_steps, const char *resume_from, snn_train_summary *sum) {
    snn_model *m = NULL;
    snn_ckpt *ck = NULL;
    snn_status st;
    if (resume_from) {
        st = snn_model_load(resume_from, 7, &m, &ck);
    } else {
        snn_fcsnn_opts fo = {.in_features = 64, .hidden = 32, .depth = 2, .classes = 10};
        st = snn_fcsnn_create(&fo, 7, &m);
    }
    if (st != SNN_OK) return st;
    snn_precision_config pc;
    snn_precision *p = NULL;
    st = snn_precision_config_parse(rc->mode, NULL, NULL, NULL, NULL, &pc);
    if (st == SNN_OK) st = snn_prepare_model_for_precision(m, "cpu", &pc, &p);
    snn_train_opts o = snn_train_opts_default();
    o.T = 2;
    o.batch_size = 8;
    o.epochs = 3;
    o.optim = snn_optim_defaults(rc->optim);
    o.optim.lr = rc->optim == SNN_OPTIM_SGD ? 0.05f : 0.01f;
    if (rc->optim == SNN_OPTIM_SGD) o.optim.momentum = 0.9f;
    o.encoding = rc->enc;
    o.max_steps = max_steps;
    o.out_dir = dir;
    o.dataset = "synthetic";
    o.seed = 11;
    snn_trainer *t = NULL;
    if (st == SNN_OK) st = snn_trainer_create(m, p, &o, snn_dataset_size(train), &t);
    if (st == SNN_OK && ck) st = snn_trainer_resume(t, ck);
    ev_n = ev_steps = ev_ckpts = 0;
    if (st == SNN_OK) st = snn_trainer_run(t, train, test, on_event, NULL, sum);
    snn_trainer_free(t);
    snn_ckpt_close(ck);
    snn_precision_free(p);
    snn_model_free(m);
    return st;
}

static void test_resume_identity(const snn_dataset *train, const snn_dataset *test) {
    /* 48 samples, batch 8: 6 steps an epoch, 18 in all */
    const run_cfg cfgs[] = {{"fp32", SNN_ENCODING_DIRECT, SNN_OPTIM_ADAM}, {"bf16", SNN_ENCODING_POISSON, SNN_OPTIM_ADAMW},
                            {"fp16", SNN_ENCODING_DIRECT, SNN_OPTIM_ADAM}, {"fp8", SNN_ENCODING_DIRECT, SNN_OPTIM_SGD}};
    const long stops[] = {6, 9}; /* an epoch's end, inside the second epoch */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        char full[512], part[512], fck[600], pck[600], first[600];
        snprintf(full, sizeof full, "%s/full_%s", tmpdir, cfgs[i].mode);
        mkdir(full, 0700);
        snn_train_summary s0, s1, s2;
        snn_status st = run(&cfgs[i], train, test, full, 0, NULL, &s0);
        CHECK_MSG(st == SNN_OK, "%s straight run: %s", cfgs[i].mode, snn_last_error());
        CHECK(s0.steps == 18 && s0.epochs_done == 3);
        CHECK_MSG(ev_n == 3 && ev_epochs[0] == 1 && ev_epochs[1] == 2 && ev_epochs[2] == 3 && ev_steps == 18 &&
                      ev_ckpts == 1, "events: %d epochs (%d %d %d), %d steps, %d checkpoints", ev_n, ev_epochs[0],
                  ev_epochs[1], ev_epochs[2], ev_steps, ev_ckpts);
        snprintf(fck, sizeof fck, "%s/model.safetensors", full);
        for (size_t k = 0; k < 2; k++) {
            snprintf(part, sizeof part, "%s/part_%s_%ld", tmpdir, cfgs[i].mode, stops[k]);
            mkdir(part, 0700);
            snprintf(pck, sizeof pck, "%s/model.safetensors", part);
            st = run(&cfgs[i], train, test, part, stops[k], NULL, &s1);
            CHECK_MSG(st == SNN_OK && s1.steps == stops[k], "%s stop at %ld: %s", cfgs[i].mode, stops[k],
                      snn_last_error());
            /* stop 6: epoch 1 complete; stop 9: epoch 1, then epoch 2 stopped inside */
            CHECK(k == 0 ? ev_n == 1 && ev_epochs[0] == 1 : ev_n == 2 && ev_epochs[0] == 1 && ev_epochs[1] == -2);
            snprintf(first, sizeof first, "%s/first.safetensors", part);
            rename(pck, first);
            /* the stopped run's state differs from the end's: the comparison can fail */
            CHECK(!same_file(first, fck));
            st = run(&cfgs[i], train, test, part, 0, first, &s2);
            CHECK_MSG(st == SNN_OK, "%s resume from %ld: %s", cfgs[i].mode, stops[k], snn_last_error());
            CHECK(s2.steps == 18 && s2.epochs_done == 3);
            CHECK_MSG(same_file(fck, pck), "%s: stop at step %ld + resume differs from the straight run",
                      cfgs[i].mode, stops[k]);
        }
    }
}

static void test_diverging_run(const snn_dataset *train, const snn_dataset *test) {
    snn_fcsnn_opts fo = {.in_features = 64, .hidden = 32, .depth = 2, .classes = 10};
    snn_model *m = NULL;
    snn_precision *p = NULL;
    snn_precision_config pc = snn_precision_config_default();
    CHECK(snn_fcsnn_create(&fo, 3, &m) == SNN_OK);
    CHECK(snn_prepare_model_for_precision(m, "cpu", &pc, &p) == SNN_OK);
    snn_train_opts o = snn_train_opts_default();
    o.T = 2;
    o.batch_size = 8;
    o.epochs = 2;
    o.optim = snn_optim_defaults(SNN_OPTIM_ADAM);
    o.optim.lr = 1e38f; /* Adam moves a weight by about lr a step: it overflows within 4 steps */
    o.schedule = SNN_LR_CONSTANT;
    char dir[512], ck[600];
    snprintf(dir, sizeof dir, "%s/nan", tmpdir);
    mkdir(dir, 0700);
    snprintf(ck, sizeof ck, "%s/model.safetensors", dir);
    o.out_dir = dir;
    snn_trainer *t = NULL;
    CHECK(snn_trainer_create(m, p, &o, snn_dataset_size(train), &t) == SNN_OK);
    snn_train_summary s;
    snn_status st = snn_trainer_run(t, train, test, NULL, NULL, &s);
    CHECK_MSG(st == SNN_E_NUMERIC, "a diverging run returned %s: %s", snn_status_name(st), snn_last_error());
    if (getenv("SNN_TEST_VERBOSE")) fprintf(stderr, "diverging run: %s\n", snn_last_error());
    CHECK(!exists(ck));
    /* a NaN weight: the checkpoint writer, eval and predict refuse the model */
    snn_model_params(m)[5] = NAN;
    CHECK(snn_trainer_save(t, ck, NULL) == SNN_E_NUMERIC && !exists(ck));
    double acc;
    CHECK(snn_evaluate(m, test, 2, 8, SNN_ENCODING_DIRECT, 1, &acc, NULL) == SNN_E_NUMERIC);
    CHECK(strstr(snn_last_error(), "non-finite") != NULL);
    snn_trainer_free(t);
    snn_precision_free(p);
    snn_model_free(m);
}

static int count_pred(int index, int cls, double score, void *user) {
    (void)index; (void)cls; (void)score;
    (*(int *)user)++;
    return 0;
}

static void test_predict_refuses_nan(const snn_dataset *test) {
    snn_fcsnn_opts fo = {.in_features = 64, .hidden = 32, .depth = 2, .classes = 10};
    snn_model *m = NULL;
    CHECK(snn_fcsnn_create(&fo, 3, &m) == SNN_OK);
    int n = 0;
    CHECK(snn_predict(m, test, 2, 5, count_pred, &n) == SNN_OK && n == snn_dataset_size(test));
    snn_model_params(m)[snn_model_num_params(m) - 1] = INFINITY;
    n = 0;
    CHECK(snn_predict(m, test, 2, 5, count_pred, &n) == SNN_E_NUMERIC && n == 0);
    snn_model_free(m);
}

/* The flag comes from the update itself: the AVX body (index < n - n % 8) and the tail. */
static void test_optimizer_flag(void) {
    const snn_optim_kind kinds[] = {SNN_OPTIM_SGD, SNN_OPTIM_ADAM, SNN_OPTIM_ADAMW};
    const size_t where[] = {3, 17, 100000};
    uint64_t rs = snn_test_seed();
    for (size_t k = 0; k < 3; k++)
        for (size_t w = 0; w < 3; w++) {
            size_t n = where[w] < 1000 ? 20 : 200003;
            float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
            snn_test_fill_uniform(p, n, -1, 1, &rs);
            snn_test_fill_uniform(g, n, -1, 1, &rs);
            snn_optim_opts o = snn_optim_defaults(kinds[k]);
            snn_optimizer *opt = NULL;
            CHECK(snn_optimizer_create(&o, n, p, g, NULL, &opt) == SNN_OK);
            CHECK(snn_optimizer_step(opt, 1e-3f, 0) == SNN_OK && snn_optimizer_nonfinite(opt) == 0);
            g[where[w] % n] = NAN;
            CHECK(snn_optimizer_step(opt, 1e-3f, 0) == SNN_OK);
            CHECK_MSG(snn_optimizer_nonfinite(opt) == 1, "%s: NaN gradient at %zu of %zu not flagged",
                      snn_optim_kind_name(kinds[k]), where[w] % n, n);
            CHECK(snn_optimizer_step(opt, 1e-3f, 1) == SNN_OK && snn_optimizer_nonfinite(opt) == 0);
            snn_optimizer_free(opt);
            free(p);
            free(g);
        }
}

/* A checkpoint holding a given "snn_trainer" text. */
static snn_status trainer_ckpt(const char *json, snn_ckpt **out) {
    snn_ckpt_writer *w = NULL;
    float v = 1;
    int64_t shape[1] = {1};
    char path[600];
    snprintf(path, sizeof path, "%s/meta.safetensors", tmpdir);
    snn_status st = snn_ckpt_writer_begin(&w);
    if (st == SNN_OK) st = snn_ckpt_writer_add_tensor(w, "x", SNN_CKPT_F32, 1, shape, &v);
    if (st == SNN_OK) st = snn_ckpt_writer_add_metadata(w, "snn_trainer", json);
    if (st == SNN_OK) st = snn_ckpt_writer_commit(w, path);
    snn_ckpt_writer_free(w);
    if (st == SNN_OK) st = snn_ckpt_open(path, out);
    return st;
}

static void test_metadata_strict(void) {
    snn_train_opts o = snn_train_opts_default();
    o.epochs = 3;
    snn_train_position pos = {.epoch = 2, .batch = 1, .step = 7, .epochs_done = 1, .steps_per_epoch = 6,
                              .total_steps = 18, .train_samples = 48};
    char buf[4096];
    const char *kv[12];
    CHECK(snn_train_metadata(&o, &pos, buf, sizeof buf, kv, 12) == SNN_OK);
    CHECK(!strcmp(kv[0], "snn_trainer"));
    const char *good = kv[1];
    snn_ckpt *c = NULL;
    snn_train_opts r;
    snn_train_position rp;
    CHECK(trainer_ckpt(good, &c) == SNN_OK);
    CHECK_MSG(snn_train_opts_from_checkpoint(c, &r, &rp) == SNN_OK, "%s", snn_last_error());
    CHECK(rp.step == 7 && rp.epoch == 2 && rp.batch == 1 && r.epochs == 3 && r.optim.lr == o.optim.lr &&
          r.optim.beta2 == o.optim.beta2 && r.seed == 42);
    snn_ckpt_close(c);
    /* each mutation replaces one field's text */
    static const struct { const char *from, *to; } bad[] = {
        {"\"epochs\":3", "\"epochs\":\"abc\""},    {"\"epochs\":3", "\"epochs\":-1"},
        {"\"epochs\":3", "\"epochs\":1e300"},      {"\"epochs\":3", "\"epochs\":2.5"},
        {"\"time_steps\":4", "\"time_steps\":400000000"}, {"\"time_steps\":4", "\"time_steps\":-4"},
        {"\"step\":7", "\"step\":8"},              {"\"step\":7", "\"stp\":7"},
        {"\"seed\":\"42\"", "\"seed\":\"4x2\""},   {"\"seed\":\"42\"", "\"seed\":\"99999999999999999999999\""},
        {"\"batch\":1", "\"batch\":6"},            {"\"lr\":", "\"lr\":-"},
        {"\"schedule\":\"cosine\"", "\"schedule\":\"exp\""}, {"\"format\":1", "\"format\":2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char mut[4096];
        const char *at = strstr(good, bad[i].from);
        CHECK_MSG(at != NULL, "mutation %zu: '%s' not in %s", i, bad[i].from, good);
        if (!at) continue;
        snprintf(mut, sizeof mut, "%.*s%s%s", (int)(at - good), good, bad[i].to, at + strlen(bad[i].from));
        c = NULL;
        CHECK(trainer_ckpt(mut, &c) == SNN_OK);
        snn_status st = snn_train_opts_from_checkpoint(c, &r, &rp);
        CHECK_MSG(st == SNN_E_FORMAT, "mutation %zu (%s) gave %s", i, bad[i].to, snn_status_name(st));
        snn_ckpt_close(c);
    }
    c = NULL;
    CHECK(trainer_ckpt("[1,2]", &c) == SNN_OK);
    CHECK(snn_train_opts_from_checkpoint(c, &r, &rp) == SNN_E_FORMAT);
    snn_ckpt_close(c);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

static void test_run_dir(void) {
    char path[600], p2[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", tmpdir);
    write_text(path, "{\"epoch\":1,\"step\":10}\n{\"epoch\":2,\"step\":20}\n{\"epoch\":3,\"step\":20,\"partial\":true}\n"
                     "{\"epoch\":3,\"step\":30}\n{\"epoch\":4,\"st");
    CHECK(snn_metrics_trim(path, 20) == SNN_OK);
    size_t n;
    uint8_t *b = slurp(path, &n);
    CHECK(b && n == strlen("{\"epoch\":1,\"step\":10}\n{\"epoch\":2,\"step\":20}\n") &&
          !memcmp(b, "{\"epoch\":1,\"step\":10}\n{\"epoch\":2,\"step\":20}\n", n));
    free(b);
    snprintf(p2, sizeof p2, "%s/none.jsonl", tmpdir);
    CHECK(snn_metrics_trim(p2, 5) == SNN_OK && !exists(p2));
    /* a pid that is certainly gone: a child that exited and was reaped */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[600], live[600], other[600];
    snprintf(stale, sizeof stale, "%s/model.safetensors.tmp.%ld", tmpdir, (long)dead);
    snprintf(live, sizeof live, "%s/model.safetensors.tmp.%ld", tmpdir, (long)getppid());
    snprintf(other, sizeof other, "%s/model.safetensors.tmp.12ab", tmpdir);
    write_text(stale, "x");
    write_text(live, "x");
    write_text(other, "x");
    int removed = -1;
    CHECK(snn_run_dir_clean(tmpdir, "model.safetensors", &removed) == SNN_OK);
    CHECK(removed == 1 && !exists(stale) && exists(live) && exists(other));
    unlink(live);
    unlink(other);
}

static void test_misuse(const snn_dataset *train) {
    snn_fcsnn_opts fo = {.in_features = 64, .hidden = 32, .depth = 2, .classes = 10};
    snn_model *m = NULL, *m2 = NULL;
    snn_precision *p2 = NULL;
    snn_precision_config pc = snn_precision_config_default();
    CHECK(snn_fcsnn_create(&fo, 3, &m) == SNN_OK && snn_fcsnn_create(&fo, 4, &m2) == SNN_OK);
    snn_train_opts o = snn_train_opts_default();
    snn_trainer *t = NULL;
    CHECK(snn_trainer_create(m, NULL, &o, 48, &t) == SNN_E_STATE && !t);
    CHECK(snn_prepare_model_for_precision(m2, "cpu", &pc, &p2) == SNN_OK);
    CHECK(snn_trainer_create(m, p2, &o, 48, &t) == SNN_E_INVALID && !t);
    o.batch_size = 0;
    CHECK(snn_trainer_create(m2, p2, &o, 48, &t) == SNN_E_INVALID && !t);
    o = snn_train_opts_default();
    o.out_dir = "";
    CHECK(snn_trainer_create(m2, p2, &o, 48, &t) == SNN_E_INVALID && !t);
    (void)train;
    snn_precision_free(p2);
    snn_model_free(m);
    snn_model_free(m2);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/snn_test_train_loop_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    snn_dataset *train = NULL, *test = NULL;
    CHECK(snn_dataset_synthetic(48, 1, 8, 8, 10, snn_test_seed(), &train) == SNN_OK);
    CHECK(snn_dataset_synthetic(20, 1, 8, 8, 10, 99, &test) == SNN_OK);
    test_resume_identity(train, test);
    test_diverging_run(train, test);
    test_predict_refuses_nan(test);
    test_optimizer_flag();
    test_metadata_strict();
    test_run_dir();
    test_misuse(train);
    snn_dataset_free(train);
    snn_dataset_free(test);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return snn_test_finish("test_train_loop");
}
