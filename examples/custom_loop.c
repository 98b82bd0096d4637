/* Your own model, your own training loop (the precision guide's first path), from C.
 *
 *   build/examples/custom_loop [--in 4096] [--hidden 4096] [--out 1024] [--batch 32] [--steps 10]
 *                              [--device cpu] [--precision fp32|fp16|bf16|fp8]
 *                              [--fp8-recipe delayed|current|block|mxfp8|auto] [--lr 3e-5] [--seed 1]
 *
 * Builds Sequential(Linear(in, hidden), GELU, Linear(hidden, out)), prepares it for the
 * precision (device -> prepare -> optimizer: the optimizer is created after prepare), and
 * runs --steps AdamW steps of loss = mean(y^2) on one fixed random batch. Prints one JSON
 * line per step ({"step": s, "loss": l, "ms": wall time of the step}) and, at the end, the preparation report
 * (snn_precision_describe: config, policy, capability and conversion reports) as one line.
 * The order is the guide's: device (snn_model_to) -> prepare -> optimizer. On --device cuda the
 * same modules run on the GPU (the library's CUDA op table); the loop does not change.
 * Only the public headers are used. Exit status 2 with one "custom_loop: error: ..." line on
 * bad arguments or a refused configuration (e.g. --device cuda on a build without CUDA). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <snn/snn.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "custom_loop: error: %s%s%s\n", what, msg ? ": " : "", msg ? msg : "");
    return 2;
}

/* Strict: the whole string is a decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v > 0.0f) || v > 1e3f) return 0;
    *out = v;
    return 1;
}

/* The report without the whitespace between its tokens (strings are kept as they are), as
 * one JSON line. */
static void print_one_line(const char *json) {
    int in_str = 0, esc = 0;
    for (const char *p = json; *p; p++) {
        char c = *p;
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in_str = 0;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        } else if (c == '"') {
            in_str = 1;
        }
        putchar(c);
    }
    putchar('\n');
}

typedef struct {
    long in, hidden, out, batch, steps, seed;
    const char *device, *precision, *recipe;
    float lr;
} options;

static int parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: custom_loop [--in N] [--hidden N] [--out N] [--batch N] [--steps N] [--device cpu|cuda]\n"
                   "                   [--precision fp32|fp16|bf16|fp8] [--fp8-recipe delayed|current|block|mxfp8|auto]\n"
                   "                   [--lr X] [--seed N]\n");
            exit(0);
        }
        if (i + 1 >= argc) return fail(a, "needs a value (or is unknown; see --help)");
        const char *v = argv[++i];
        long *n = !strcmp(a, "--in") ? &o->in : !strcmp(a, "--hidden") ? &o->hidden : !strcmp(a, "--out") ? &o->out
                  : !strcmp(a, "--batch") ? &o->batch : !strcmp(a, "--steps") ? &o->steps
                  : !strcmp(a, "--seed") ? &o->seed : NULL;
        if (n) {
            long hi = !strcmp(a, "--seed") ? LONG_MAX : !strcmp(a, "--steps") ? 1000000 : 1 << 20;
            if (!parse_int(v, 1, hi, n)) {
                fprintf(stderr, "custom_loop: error: %s expects an integer in [1, %ld], got '%s'\n", a, hi, v);
                return 2;
            }
        } else if (!strcmp(a, "--device")) {
            o->device = v;
        } else if (!strcmp(a, "--precision")) {
            o->precision = v;
        } else if (!strcmp(a, "--fp8-recipe")) {
            o->recipe = v;
        } else if (!strcmp(a, "--lr")) {
            if (!parse_float(v, &o->lr)) return fail("--lr expects a number in (0, 1000]", v);
        } else {
            return fail("unknown option", a);
        }
    }
    if ((size_t)o->batch * (size_t)o->in > ((size_t)1 << 32) || (size_t)o->in * (size_t)o->hidden > ((size_t)1 << 32) ||
        (size_t)o->hidden * (size_t)o->out > ((size_t)1 << 32))
        return fail("sizes too large", "each matrix and the batch must hold at most 2^32 elements");
    return 0;
}

/* Create a module and add it to seq; a module that could not be added is still ours. */
static snn_status add(snn_module *seq, snn_status made, snn_module **child) {
    if (made != SNN_OK) return made;
    snn_status st = snn_sequential_add(seq, *child);
    if (st != SNN_OK) snn_module_destroy(*child);
    return st;
}

/* Sequential(Linear(in, hidden), GELU, Linear(hidden, out)). */
static snn_status build(const options *o, snn_model **out) {
    snn_module *seq = NULL, *m = NULL;
    snn_status st = snn_sequential_create(&seq);
    if (st != SNN_OK) return st;
    st = add(seq, snn_linear_create((int)o->in, (int)o->hidden, 1, &m), &m);
    if (st == SNN_OK) st = add(seq, snn_gelu_create(&m), &m);
    if (st == SNN_OK) st = add(seq, snn_linear_create((int)o->hidden, (int)o->out, 1, &m), &m);
    if (st != SNN_OK) {
        snn_module_destroy(seq); /* frees what was added */
        return st;
    }
    int shape[1] = {(int)o->in};
    /* the model takes the tree (and frees it if the shapes do not fit) */
    return snn_model_create_from_module(seq, 1, shape, (uint64_t)o->seed, out);
}

int main(int argc, char **argv) {
    options o = {.in = 4096, .hidden = 4096, .out = 1024, .batch = 32, .steps = 10, .seed = 1,
                 .device = "cpu", .precision = "fp32", .recipe = NULL, .lr = 3e-5f};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.recipe && strcmp(o.precision, "fp8"))
        return fail("--fp8-recipe needs --precision fp8", NULL);

    snn_precision_config cfg;
    if (snn_precision_config_parse(o.precision, o.recipe, NULL, NULL, NULL, &cfg) != SNN_OK)
        return fail("precision", snn_last_error());
    snn_model *m = NULL;
    if (build(&o, &m) != SNN_OK) return fail("model", snn_last_error());
    snn_precision *p = NULL;
    snn_optimizer *opt = NULL;
    float *x = NULL, *dy = NULL;
    rc = 2;
    /* 1. device: parameters move there, the modules stay the same */
    if (snn_model_to(m, o.device) != SNN_OK) {
        fail("device", snn_last_error());
        goto done;
    }
    /* 2. precision: prepare converts the GEMM modules in place */
    if (snn_prepare_model_for_precision(m, o.device, &cfg, &p) != SNN_OK) {
        fail("prepare", snn_last_error());
        goto done;
    }
    /* 3. the optimizer, after prepare */
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = o.lr;
    if (snn_optimizer_create_for_model(&oo, m, &opt) != SNN_OK) {
        fail("optimizer", snn_last_error());
        goto done;
    }
    if (snn_model_plan(m, 1, (int)o.batch) != SNN_OK) {
        fail("plan", snn_last_error());
        goto done;
    }
    size_t nx = (size_t)o.batch * (size_t)o.in, ny = (size_t)o.batch * (size_t)o.out;
    x = malloc(nx * sizeof *x);
    dy = malloc(ny * sizeof *dy);
    if (!x || !dy) {
        fail("out of memory", NULL);
        goto done;
    }
    snn_rng rng = snn_rng_make((uint64_t)o.seed, 7);
    for (size_t i = 0; i < nx; i++) x[i] = 2.0f * snn_rng_next_uniform(&rng) - 1.0f;
    for (long s = 0; s < o.steps; s++) {
        double t0 = now_ms();
        const float *y;
        if (snn_model_forward(m, x, 1, &y) != SNN_OK) {
            fail("forward", snn_last_error());
            goto done;
        }
        double loss = 0;
        for (size_t i = 0; i < ny; i++) {
            loss += (double)y[i] * y[i];
            dy[i] = 2.0f * y[i] / (float)ny; /* d mean(y^2) / dy */
        }
        loss /= (double)ny;
        /* backward, loss scaling (fp16), unscale, optimizer step, FP8 scale update */
        if (snn_precision_backward(p, dy, opt, -1.0f, 0.0f, NULL, NULL) != SNN_OK) {
            fail("step", snn_last_error());
            goto done;
        }
        /* ms: wall time of the step as the caller sees it (forward, host loss, backward, update) */
        printf("{\"step\": %ld, \"loss\": %.9g, \"ms\": %.3f}\n", s + 1, loss, now_ms() - t0);
        fflush(stdout);
    }
    print_one_line(snn_precision_describe(p));
    rc = 0;
done:
    free(x);
    free(dy);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(m);
    return rc;
}
