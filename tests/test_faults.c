/* Fault injection in the style of SQLite's malloc tests: the k-th allocation of a scenario
 * fails (k = 0, 1, 2, ... until the scenario needs fewer), and the scenario must end with
 * an error status, no crash and no leak; then the k-th write, flush, sync, close or rename
 * of a checkpoint save fails with ENOSPC or EIO, and the previous checkpoint must stay
 * byte-identical with no temporary file left.
 *
 * Linked with -Wl,--wrap=malloc,... (CMakeLists.txt): every call the library's objects make
 * goes through the __wrap_ functions below. cJSON's allocations are routed here with
 * cJSON_InitHooks. Live allocations are counted (free is wrapped too), so a leak shows in
 * the Release build as well; under ASan LeakSanitizer checks again at exit. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "snn/snn.h"

/* ---------- the wrapped allocator ---------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);
void __real_free(void *p);

static long fail_at = -1;  /* index of the allocation to fail; -1: none */
static long n_allocs;      /* allocations seen since arming */
static long live;          /* allocations not yet freed */
static int injected;

extern char __executable_start;
static void *fail_site; /* caller of the failed allocation, for SNN_FAULTS_VERBOSE */

#define fail_now() fail_now_at(__builtin_return_address(0))
static int fail_now_at(void *site) {
    if (fail_at < 0) return 0;
    if (n_allocs++ == fail_at) {
        injected = 1;
        fail_site = site;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n) {
    if (fail_now()) return NULL;
    void *p = __real_malloc(n);
    if (p) live++;
    return p;
}
void *__wrap_calloc(size_t a, size_t b) {
    if (fail_now()) return NULL;
    void *p = __real_calloc(a, b);
    if (p) live++;
    return p;
}
void *__wrap_realloc(void *q, size_t n) {
    if (fail_now()) return NULL;
    void *p = __real_realloc(q, n);
    if (p && !q) live++;
    return p;
}
int __wrap_posix_memalign(void **p, size_t a, size_t n) {
    if (fail_now()) return ENOMEM;
    int r = __real_posix_memalign(p, a, n);
    if (!r) live++;
    return r;
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    if (fail_now()) return NULL;
    void *p = __real_aligned_alloc(a, n);
    if (p) live++;
    return p;
}
char *__wrap_strdup(const char *s) {
    if (fail_now()) return NULL;
    char *p = __real_strdup(s);
    if (p) live++;
    return p;
}
void __wrap_free(void *p) {
    if (p) live--;
    __real_free(p);
}
static void *hook_malloc(size_t n) { return __wrap_malloc(n); }
static void hook_free(void *p) { __wrap_free(p); }

/* ---------- wrapped I/O of the checkpoint writer ---------- */

size_t __real_fwrite(const void *p, size_t a, size_t b, FILE *f);
int __real_fflush(FILE *f);
int __real_fsync(int fd);
int __real_fclose(FILE *f);
int __real_rename(const char *a, const char *b);

static long io_fail_at = -1, n_io;
static int io_errno = ENOSPC, io_injected;
static const char *io_failed_call;

static int io_fail(const char *call) {
    if (io_fail_at < 0 || n_io++ != io_fail_at) return 0;
    io_injected = 1;
    io_failed_call = call;
    errno = io_errno;
    return 1;
}
size_t __wrap_fwrite(const void *p, size_t a, size_t b, FILE *f) {
    if (io_fail("fwrite")) {
        /* a short write: half the bytes reach the file, as on a disk that fills up */
        size_t half = a * b / 2;
        if (half) __real_fwrite(p, 1, half, f);
        errno = io_errno;
        return a ? half / a : 0;
    }
    return __real_fwrite(p, a, b, f);
}
int __wrap_fflush(FILE *f) { return io_fail("fflush") ? EOF : __real_fflush(f); }
int __wrap_fsync(int fd) { return io_fail("fsync") ? -1 : __real_fsync(fd); }
int __wrap_fclose(FILE *f) {
    int fail = io_fail("fclose");
    int r = __real_fclose(f);
    if (fail) errno = io_errno;
    return fail ? EOF : r;
}
int __wrap_rename(const char *a, const char *b) { return io_fail("rename") ? -1 : __real_rename(a, b); }

/* ---------- scenarios ---------- */

static char dir[256], ck[512], ck2[512];
static uint64_t rs;

/* A tiny fcsnn through the whole library: create, plan, prepare, optimizer, steps, and
 * (with save) a training checkpoint. Returns the first error. */
static snn_status run_training(const char *mode, int save, long *allocs_in_steps) {
    snn_fcsnn_opts fo = {.in_features = 32, .hidden = 16, .depth = 1, .classes = 8};
    snn_model *m = NULL;
    snn_precision *p = NULL;
    snn_optimizer *opt = NULL;
    snn_precision_config cfg;
    float x[2 * 3 * 32], dy[2 * 3 * 8];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)((i * 7919u) % 13) / 13.0f;
    for (size_t i = 0; i < sizeof dy / sizeof *dy; i++) dy[i] = (float)((int)(i % 5) - 2) * 0.01f;
    snn_status st = snn_precision_config_parse(mode, strcmp(mode, "fp8") ? NULL : "delayed", NULL, NULL, NULL, &cfg);
    if (st == SNN_OK) {
        cfg.amax_history_len = strcmp(mode, "fp8") ? cfg.amax_history_len : 4;
        st = snn_fcsnn_create(&fo, 3, &m);
    }
    if (st == SNN_OK) st = snn_prepare_model_for_precision(m, "cpu", &cfg, &p);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAM);
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st == SNN_OK) st = snn_model_plan(m, 2, 3);
    long before = n_allocs;
    for (int s = 0; s < 3 && st == SNN_OK; s++) {
        const float *y;
        st = snn_model_forward(m, x, 1, &y);
        if (st == SNN_OK) st = snn_precision_backward(p, dy, opt, 0.01f, 1.0f, NULL, NULL);
    }
    if (allocs_in_steps) *allocs_in_steps = n_allocs - before;
    if (st == SNN_OK) st = snn_model_check_finite(m);
    if (st == SNN_OK && save) st = snn_training_checkpoint_save(m, p, opt, ck, NULL);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);
    return st;
}

/* Load the training checkpoint back: model, precision, optimizer, restore. */
static snn_status run_load(void) {
    snn_model *m = NULL;
    snn_ckpt *c = NULL;
    snn_precision *p = NULL;
    snn_optimizer *opt = NULL;
    snn_precision_config cfg;
    snn_status st = snn_model_load(ck, 1, &m, &c);
    if (st == SNN_OK) st = snn_precision_config_from_json(snn_ckpt_metadata(c, "snn_precision_config"), &cfg);
    if (st == SNN_OK) st = snn_prepare_model_for_precision(m, "cpu", &cfg, &p);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAM);
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st == SNN_OK) st = snn_training_checkpoint_restore(m, p, opt, c);
    if (st == SNN_OK) st = snn_model_check_finite(m);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_ckpt_close(c);
    snn_model_free(m);
    return st;
}

typedef snn_status (*scenario)(void *ctx);

/* Fail each allocation in turn; returns how many allocations the scenario makes. */
static long sweep_allocs(const char *name, scenario fn, void *ctx) {
    long k = 0, silent = 0, crashes_or_leaks = 0;
    for (;; k++) {
        if (getenv("SNN_FAULTS_VERBOSE")) fprintf(stderr, "%s: k=%ld\n", name, k);
        long live0 = live;
        fail_at = k;
        n_allocs = 0;
        injected = 0;
        snn_status st = fn(ctx);
        fail_at = -1;
        if (!injected) {
            CHECK_MSG(st == SNN_OK, "%s: clean run failed: %s", name, snn_last_error());
            break;
        }
        if (st == SNN_OK) silent++;
        if (getenv("SNN_FAULTS_VERBOSE") && (st == SNN_OK || live != live0))
            fprintf(stderr, "  allocation %ld from 0x%lx: status %s, %ld leaked\n", k,
                    (unsigned long)((char *)fail_site - &__executable_start), snn_status_name(st), live - live0);
        if (live != live0) crashes_or_leaks++;
        CHECK_MSG(st != SNN_OK, "%s: allocation %ld failed but the run returned SNN_OK", name, k);
        CHECK_MSG(live == live0, "%s: allocation %ld failed: %ld allocations leaked (%s)", name, k, live - live0,
                  snn_last_error());
        CHECK_MSG(st != SNN_OK && snn_last_error()[0], "%s: allocation %ld: an error without a message", name, k);
    }
    fprintf(stderr, "%s: %ld allocations, each failed once: %ld silent successes, %ld leaks\n", name, k, silent,
            crashes_or_leaks);
    return k;
}

static snn_status sc_train(void *ctx) { return run_training(ctx, 0, NULL); }
static snn_status sc_save(void *ctx) {
    (void)ctx;
    return run_training("fp8", 1, NULL);
}
static snn_status sc_load(void *ctx) {
    (void)ctx;
    return run_load();
}
static snn_status sc_data(void *ctx) {
    snn_dataset *ds = NULL;
    snn_status st = snn_dataset_load_digits_csv(ctx, &ds);
    snn_dataset_free(ds);
    return st;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    unsigned char *b = __real_malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    __real_fclose(f);
    return b;
}

static int temp_files_left(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

/* Each I/O call of a save fails in turn, with ENOSPC and with EIO. */
static void sweep_io(void) {
    size_t n_old;
    unsigned char *old = slurp(ck, &n_old);
    CHECK(old && n_old > 0);
    for (int e = 0; e < 2; e++) {
        io_errno = e ? EIO : ENOSPC;
        long k = 0;
        for (;; k++) {
            io_fail_at = k;
            n_io = 0;
            io_injected = 0;
            io_failed_call = NULL;
            long live0 = live;
            snn_status st = run_training("fp8", 1, NULL);
            io_fail_at = -1;
            if (!io_injected) {
                CHECK_MSG(st == SNN_OK, "clean save failed: %s", snn_last_error());
                break;
            }
            CHECK_MSG(st == SNN_E_IO && strstr(snn_last_error(), strerror(io_errno)),
                      "%s failing with %s: status %s: %s", io_failed_call, strerror(io_errno), snn_status_name(st),
                      snn_last_error());
            size_t n_now;
            unsigned char *now = slurp(ck, &n_now);
            int same = now && n_now == n_old && !memcmp(now, old, n_old);
            /* the directory sync comes after the rename: the new file is complete then */
            int after_rename = !strcmp(io_failed_call, "fsync") && k == n_io - 1;
            CHECK_MSG(same || after_rename, "%s (call %ld) failing with %s changed the previous checkpoint",
                      io_failed_call, k, strerror(io_errno));
            CHECK_MSG(temp_files_left() == 0, "%s failing left a temporary file", io_failed_call);
            CHECK(live == live0);
            if (!same) {
                /* restore the old bytes for the next round */
                FILE *f = fopen(ck, "wb");
                __real_fwrite(old, 1, n_old, f);
                __real_fclose(f);
            }
            __real_free(now);
        }
        fprintf(stderr, "checkpoint save: %ld I/O calls, each failed once with %s\n", k, strerror(io_errno));
        CHECK(k >= 5);
    }
    __real_free(old);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rs = seed;
    cJSON_Hooks hooks = {hook_malloc, hook_free};
    cJSON_InitHooks(&hooks);
    /* hundreds of saves, each with two fsyncs: on tmpfs when there is one */
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/snn_test_faults_XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(ck, sizeof ck, "%s/train.safetensors", dir);
    snprintf(ck2, sizeof ck2, "%s/digits.csv", dir);
    /* the wrappers are really in the path: a clean run counts allocations */
    fail_at = 1L << 40;
    n_allocs = 0;
    long in_steps = -1;
    CHECK(run_training("fp32", 0, &in_steps) == SNN_OK);
    fail_at = -1;
    CHECK_MSG(n_allocs > 10, "only %ld allocations seen: is the test linked with --wrap?", n_allocs);
    CHECK_MSG(in_steps == 0, "%ld allocations inside the training steps", in_steps);

    const char *modes[] = {"fp32", "bf16", "fp16", "fp8"};
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "training run (%s)", modes[i]);
        CHECK(sweep_allocs(name, sc_train, (void *)modes[i]) > 10);
    }
    CHECK(run_training("fp8", 1, NULL) == SNN_OK);
    CHECK(sweep_allocs("training checkpoint save (fp8)", sc_save, NULL) > 10);
    CHECK(sweep_allocs("training checkpoint load (fp8)", sc_load, NULL) > 10);
    /* a data loader, through the gzip-checking reader */
    FILE *f = fopen(ck2, "w");
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 64; i++) fprintf(f, "%d,", (r + i) % 17);
        fprintf(f, "%d\n", r);
    }
    __real_fclose(f);
    CHECK(sweep_allocs("digits CSV load", sc_data, ck2) > 2);
    CHECK(run_training("fp8", 1, NULL) == SNN_OK);
    sweep_io();
    unlink(ck);
    unlink(ck2);
    rmdir(dir);
    return snn_test_finish("test_faults");
}
