/* snn bench: shared flags, statistics, memory probes, metadata and JSON output. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <omp.h>

#include "bench.h"

/* ---------------- flags ---------------- */

void bench_flags_defaults(bench_flags *f, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->baseline = "bf16";
    f->trials = 3;
    f->warmup = 2;
    f->training_steps = 5;
    f->inference_steps = 10;
    f->seed = seed;
    f->min_training_speedup = f->min_inference_speedup = 1.05f;
    f->converge_epochs = 1;
    f->converge_optimizer = "adam";
}

int bench_flags_options(bench_flags *f, opt *t, int neuron) {
    int n = 0;
    t[n++] = (opt){"--precisions", OPT_STRINGS, &f->precisions, "modes to compare: fp32 fp16 bf16 fp8 (default fp32 bf16 fp8)", NULL, 0};
    t[n++] = (opt){"--baseline-precision", OPT_STRING, &f->baseline, "fp32 | fp16 | bf16, the FP8 rows are compared with it (default bf16)", NULL, 0};
    t[n++] = (opt){"--fp8-recipe", OPT_STRING, &f->recipe, "auto | delayed | current | block | mxfp8 for the fp8 rows (default auto: the library's choice, as in snn train)", NULL, 0};
    if (neuron) {
        t[n++] = (opt){"--neuron-storage", OPT_STRING, &f->storage, "neuron storage for every row: fp32 | fp16 | bf16 | float8_e4m3fn | float8_e5m2", "--triton-storage", 0};
        t[n++] = (opt){"--neuron-fwd", OPT_STRING, &f->fwd, "neuron forward arithmetic: fp8 | fp16 | bf16 | fp32", "--triton-fwd", 0};
        t[n++] = (opt){"--neuron-bwd", OPT_STRING, &f->bwd, "neuron backward arithmetic: fp8 | fp16 | bf16 | fp32", "--triton-bwd", 0};
    }
    t[n++] = opt_num("--trials", OPT_INT, &f->trials, "runs per precision, order rotated per trial (default 3)", NULL, 1.0, 1000000.0);
    t[n++] = opt_num("--warmup", OPT_INT, &f->warmup, "untimed training (and inference) steps per run", NULL, 0.0, 1000000000.0);
    t[n++] = opt_num("--training-steps", OPT_INT, &f->training_steps, "timed training steps per run", "--steps", 1.0, 1000000000.0);
    t[n++] = opt_num("--inference-steps", OPT_INT, &f->inference_steps, "timed inference steps per run", NULL, 1.0, 1000000000.0);
    t[n++] = (opt){"--seed", OPT_U64, &f->seed, "seed of the base weights, input and targets", NULL, 0};
    t[n++] = (opt){"--device", OPT_STRING, &f->device, "cpu (default), cuda or cuda:N (linear, fcsnn, crossover; needs -DSNN_CUDA=ON)", NULL, 0};
    t[n++] = (opt){"--output", OPT_STRING, &f->output, "write the JSON report here ('-': stdout)", NULL, 0};
    t[n++] = (opt){"--json", OPT_FLAG, &bench_json, "print the JSON report as the last line of stdout", NULL, 0};
    t[n++] = opt_num("--min-training-speedup", OPT_FLOAT, &f->min_training_speedup, "FP8 training win threshold (default 1.05)", NULL, 0.0, 1000000.0);
    t[n++] = opt_num("--min-inference-speedup", OPT_FLOAT, &f->min_inference_speedup, "FP8 inference win threshold (default 1.05)", NULL, 0.0, 1000000.0);
    t[n++] = (opt){"--require-efficiency", OPT_FLAG, &f->require_efficiency, "exit 1 unless every FP8 row wins both", NULL, 0};
    t[n++] = (opt){"--quiet", OPT_FLAG, &f->quiet, "no progress lines on stderr", NULL, 0};
    t[n++] = (opt){"--converge", OPT_STRING, &f->converge, "also train each precision on fashion-mnist and report test accuracy", NULL, 0};
    t[n++] = opt_num("--converge-epochs", OPT_INT, &f->converge_epochs, "--converge budget in epochs (default 1)", NULL, 1.0, 1000000.0);
    t[n++] = opt_num("--converge-steps", OPT_INT, &f->converge_steps, "--converge budget in optimizer steps (overrides epochs)", NULL, 1.0, 1000000000.0);
    t[n++] = (opt){"--converge-optimizer", OPT_STRING, &f->converge_optimizer, "--converge optimizer: adam | sgd (default adam)", NULL, 0};
    t[n++] = opt_num("--converge-lr", OPT_FLOAT, &f->converge_lr, "--converge learning rate (adam 1e-3; sgd: the workload's --lr)", NULL, 1e-38, 1e+38);
    t[n++] = opt_num("--converge-test-samples", OPT_INT, &f->converge_test_samples, "evaluate on the first N test samples (default all)", NULL, 1.0, 1000000000.0);
    t[n++] = (opt){"--data-dir", OPT_STRING, &f->data_dir, "fashion-mnist directory (default: Debian's location)", NULL, 0};
    return n;
}

int bench_check_device(const char *cmd, const char *dev) {
    char what[64];
    snprintf(what, sizeof what, "bench %s", cmd);
    return device_parse(what, dev);
}

const char *bench_device_name(int cuda_device, char *buf, size_t cap) {
    if (cuda_device < 0) snprintf(buf, cap, "cpu");
    else snprintf(buf, cap, "cuda:%d", cuda_device);
    return buf;
}

static const char *const default_precisions[] = {"fp32", "bf16", "fp8"};

void bench_flags_check(const char *cmd, bench_flags *f, bench_suite *s) {
    s->cuda_device = bench_check_device(cmd, f->device);
    if (f->trials < 1 || f->trials > 1000) die_usage("bench %s: --trials must be between 1 and 1000, got %d", cmd, f->trials);
    if (f->warmup < 0 || f->warmup > 1000000) die_usage("bench %s: --warmup must be 0 or more, got %d", cmd, f->warmup);
    if (f->training_steps < 1 || f->training_steps > 1000000)
        die_usage("bench %s: --training-steps must be at least 1, got %d", cmd, f->training_steps);
    if (f->inference_steps < 1 || f->inference_steps > 1000000)
        die_usage("bench %s: --inference-steps must be at least 1, got %d", cmd, f->inference_steps);
    if (!(f->min_training_speedup > 0) || !(f->min_inference_speedup > 0))
        die_usage("bench %s: --min-training-speedup and --min-inference-speedup must be positive", cmd);
    if (f->precisions.n == 0) {
        f->precisions.v = (const char **)default_precisions;
        f->precisions.n = 3;
    }
    int P = f->precisions.n, has_fp8 = 0;
    s->P = P;
    s->trials = f->trials;
    s->quiet = f->quiet;
    s->res = calloc((size_t)P, sizeof *s->res);
    if (!s->res) die_status(SNN_E_NOMEM, "allocating results");
    for (int i = 0; i < P; i++) {
        const char *name = f->precisions.v[i];
        snn_precision_config probe;
        if (snn_precision_config_parse(name, NULL, NULL, NULL, NULL, &probe) != SNN_OK)
            die_usage("bench %s: --precisions: %s", cmd, snn_last_error());
        int fp8 = probe.mode == SNN_PRECISION_FP8;
        has_fp8 |= fp8;
        snn_precision_config c;
        if (snn_precision_config_parse(name, fp8 ? f->recipe : NULL, f->storage, f->fwd, f->bwd, &c) != SNN_OK)
            die_usage("bench %s: invalid precision configuration for %s: %s", cmd, name, snn_last_error());
        for (int j = 0; j < i; j++)
            if (s->res[j].cfg.mode == c.mode) die_usage("bench %s: --precisions lists %s twice", cmd, name);
        s->res[i].cfg = c;
        s->res[i].name = snn_precision_mode_name(c.mode);
        s->res[i].n = f->trials;
        s->res[i].trials = calloc((size_t)f->trials, sizeof(bench_trial));
        if (!s->res[i].trials) die_status(SNN_E_NOMEM, "allocating results");
    }
    if (f->recipe && !has_fp8) die_usage("bench %s: --fp8-recipe needs fp8 in --precisions", cmd);
    snn_precision_config b;
    if (snn_precision_config_parse(f->baseline, NULL, NULL, NULL, NULL, &b) != SNN_OK)
        die_usage("bench %s: --baseline-precision: %s", cmd, snn_last_error());
    if (b.mode == SNN_PRECISION_FP8) die_usage("bench %s: --baseline-precision must be fp32, fp16 or bf16 (FP8 is what is compared)", cmd);
    int found = 0;
    for (int i = 0; i < P; i++) found |= s->res[i].cfg.mode == b.mode;
    if (!found) die_usage("bench %s: --baseline-precision %s is not in --precisions", cmd, f->baseline);
    f->baseline = snn_precision_mode_name(b.mode);
    if (f->converge) {
        if (strcmp(f->converge, "fashion-mnist") && strcmp(f->converge, "fashion_mnist"))
            die_usage("bench %s: --converge supports fashion-mnist only, got '%s'", cmd, f->converge);
        if (f->converge_epochs < 1) die_usage("bench %s: --converge-epochs must be at least 1", cmd);
        if (f->converge_steps < 0) die_usage("bench %s: --converge-steps must be 0 or more", cmd);
        if (f->converge_test_samples < 0) die_usage("bench %s: --converge-test-samples must be 0 or more", cmd);
        if (f->converge_lr < 0) die_usage("bench %s: --converge-lr must be positive", cmd);
        if (strcmp(f->converge_optimizer, "adam") && strcmp(f->converge_optimizer, "sgd"))
            die_usage("bench %s: --converge-optimizer must be adam or sgd, got '%s'", cmd, f->converge_optimizer);
    } else if (f->converge_steps || f->converge_lr || f->converge_test_samples || f->data_dir ||
               strcmp(f->converge_optimizer, "adam")) {
        die_usage("bench %s: the --converge-* and --data-dir options need --converge fashion-mnist", cmd);
    }
    s->failures = cJSON_CreateArray();
    if (s->cuda_device >= 0) { /* last: every flag was checked before the GPU is touched */
        bench_cuda_open(s->cuda_device);
        bench_cuda_check_flags(cmd, f);
    }
}

double bench_f2d(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)x);
    return strtod(b, NULL);
}

/* ---------------- statistics ---------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *v, int n, double q) {
    if (n <= 0) return NAN;
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return NAN;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double pos = (n - 1) * q;
    int lo = (int)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
    double r = s[lo] + (s[hi] - s[lo]) * (pos - lo);
    free(s);
    return r;
}

/* ---------------- memory ---------------- */

static size_t status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, len = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, len)) {
            kb = (size_t)strtoull(line + len, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

size_t bench_rss_bytes(void) { return status_kb("VmRSS:") * 1024; }

size_t bench_rss_peak_bytes(void) {
    size_t kb = status_kb("VmHWM:");
    if (!kb) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0) kb = (size_t)ru.ru_maxrss;
    }
    return kb * 1024;
}

/* Writing 5 to clear_refs resets the peak RSS to the current RSS (Linux 4.0+), so each
 * phase gets its own peak; without it the peak is the process's high-water mark. */
int bench_rss_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return 0;
    int ok = fputs("5", f) >= 0;
    ok &= fclose(f) == 0;
    return ok;
}

/* ---------------- metadata ---------------- */

static int capture(const char *cmd, char *buf, size_t cap) {
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = 0;
    int rc = pclose(p);
    while (n && isspace((unsigned char)buf[n - 1])) buf[--n] = 0;
    return rc == 0 && n > 0;
}

/* The commit of the library this binary runs, as the build recorded it (snn_build_commit,
 * snn_build_dirty): what the figures measure. An SNN_COMMIT / GIT_COMMIT in the environment
 * is noted next to it (commit_env), never in its place: it may name another tree. */
static void add_commit(cJSON *md) {
    const char *envs[] = {"SNN_COMMIT", "GIT_COMMIT"};
    if (strcmp(snn_build_commit(), "unknown")) {
        cJSON_AddStringToObject(md, "commit", snn_build_commit());
        cJSON_AddBoolToObject(md, "commit_dirty", snn_build_dirty());
        cJSON_AddStringToObject(md, "commit_source", "build");
    } else {
        /* Built outside git: the binary lives in a build directory inside the source tree, ask
         * git there, so the commit is found whatever the working directory is. */
        char exe[4096], cmd[4200], out[128];
        int found = 0;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            char *slash = strrchr(exe, '/');
            if (slash) *slash = 0;
            int safe = 1;
            for (char *c = exe; *c; c++) safe &= *c != '\'';
            if (safe) {
                snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD 2>/dev/null", exe);
                if (capture(cmd, out, sizeof out)) {
                    cJSON_AddStringToObject(md, "commit", out);
                    cJSON_AddNullToObject(md, "commit_dirty");
                    cJSON_AddStringToObject(md, "commit_source", "git");
                    found = 1;
                }
            }
        }
        if (!found) {
            cJSON_AddNullToObject(md, "commit");
            cJSON_AddNullToObject(md, "commit_dirty");
            cJSON_AddStringToObject(md, "commit_source", "unknown");
        }
    }
    for (int i = 0; i < 2; i++) {
        const char *e = getenv(envs[i]);
        if (e && *e) {
            cJSON_AddStringToObject(md, "commit_env", e);
            char src[32];
            snprintf(src, sizeof src, "env:%s", envs[i]);
            cJSON_AddStringToObject(md, "commit_env_source", src);
            break;
        }
    }
}

static void add_cpu_model(cJSON *md) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ') c++;
                    c[strcspn(c, "\n")] = 0;
                    cJSON_AddStringToObject(md, "cpu", c);
                    fclose(f);
                    return;
                }
            }
        }
        fclose(f);
    }
    cJSON_AddNullToObject(md, "cpu");
}

static double loadavg1(void) {
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = NAN;
        fclose(f);
    }
    return l;
}

cJSON *bench_metadata(int argc, char **argv) {
    cJSON *md = cJSON_CreateObject();
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    cJSON_AddStringToObject(md, "host", host);
    struct utsname u;
    if (uname(&u) == 0) {
        char plat[600];
        snprintf(plat, sizeof plat, "%s %s %s", u.sysname, u.release, u.machine);
        cJSON_AddStringToObject(md, "platform", plat);
    }
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *cmd = malloc(len);
    if (cmd) {
        cmd[0] = 0;
        for (int i = 0; i < argc; i++) {
            if (i) strcat(cmd, " ");
            strcat(cmd, argv[i]);
        }
        cJSON_AddStringToObject(md, "command", cmd);
        free(cmd);
    }
    add_commit(md);
    cJSON_AddStringToObject(md, "snn_version", snn_version());
    cJSON_AddStringToObject(md, "device", "cpu");
    add_cpu_model(md);
    cJSON_AddNumberToObject(md, "online_cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(md, "omp_max_threads", omp_get_max_threads());
    time_t now = time(NULL);
    struct tm tm;
    char date[64];
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(md, "date_utc", date);
    double l = loadavg1();
    if (isfinite(l)) cJSON_AddNumberToObject(md, "loadavg_1min_start", l);
    cJSON_AddBoolToObject(md, "rss_peak_reset_supported", bench_rss_reset_peak());
    return md;
}

void bench_metadata_end(cJSON *md) {
    double l = loadavg1();
    if (isfinite(l)) cJSON_AddNumberToObject(md, "loadavg_1min_end", l);
}

/* ---------------- output ---------------- */

int bench_json = 0;

void bench_write_json(const char *path, const cJSON *doc) {
    if (path) {
        char *s = cJSON_Print(doc);
        if (!s) die_status(SNN_E_NOMEM, "formatting the JSON report");
        if (!strcmp(path, "-")) {
            int ok = printf("%s\n", s) >= 0 && fflush(stdout) == 0;
            if (!ok) die_usage("cannot write the JSON report to stdout: %s", strerror(errno));
        } else {
            FILE *f = fopen(path, "w");
            if (!f) die_usage("cannot write '%s': %s", path, strerror(errno));
            /* a full disk shows at the flush or the close: a report is never left empty
             * after the checks were printed */
            int ok = fprintf(f, "%s\n", s) >= 0;
            ok &= fflush(f) == 0;
            ok &= !ferror(f);
            ok &= fclose(f) == 0;
            if (!ok) die_usage("cannot write '%s': %s", path, strerror(errno));
        }
        free(s);
    }
    if (bench_json) {
        char *s = cJSON_PrintUnformatted(doc);
        if (!s) die_status(SNN_E_NOMEM, "formatting the JSON report");
        int ok = printf("%s\n", s) >= 0 && fflush(stdout) == 0;
        free(s);
        if (!ok) die_usage("cannot write the JSON report to stdout: %s", strerror(errno));
    }
}

int bench_int_list(const char *flag, const str_list *l, int *out, int cap) {
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        const char *p = l->v[i];
        while (*p) {
            if (*p == ',') {
                p++;
                continue;
            }
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v <= 0 || v > (1 << 20) || (*end && *end != ','))
                die_usage("%s expects positive integers separated by commas, got '%s'", flag, l->v[i]);
            if (n == cap) die_usage("%s: at most %d values", flag, cap);
            out[n++] = (int)v;
            p = end;
        }
    }
    if (n == 0) die_usage("%s needs at least one value", flag);
    return n;
}

int bench_exit_code(const cJSON *failures) {
    int n = cJSON_GetArraySize(failures);
    const cJSON *it;
    cJSON_ArrayForEach(it, failures) fprintf(stderr, "snn: bench check failed: %s\n", it->valuestring);
    return n ? 1 : 0;
}
