/* snn — command-line tool. One file per subcommand (cmd_*.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cmds.h"
#include "snn/snn.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: snn <command> [options]\n\n"
            "commands:\n"
            "  train     train a model and write a checkpoint and metrics\n"
            "  eval      accuracy of a checkpoint on a dataset\n"
            "  predict   class predictions of a checkpoint for an IDX image file\n"
            "  inspect   the precision/FP8 conversion report of a model, without training\n"
            "  bench     precision benchmarks: linear, fcsnn, neuron, crossover\n"
            "  export-artifact  merge a distributed checkpoint into one inference artifact\n"
            "  lm        language models: prepare-data, train, eval, generate, export\n"
            "\n"
            "snn <command> --help shows the options of a command; snn --version the version.\n");
}

/* Runtime settings read by libgomp and OpenBLAS when they are loaded, before main: when the
 * user has not chosen them we set them and re-execute ourselves once.
 * OpenMP threads that spin while they wait (libgomp's default) lose badly when the cores are
 * shared with other processes: measured 4x slower fcsnn training on a loaded 2-core machine. */
static void choose_runtime_env(char **argv) {
    int again = 0;
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = 1;
    }
    /* OpenBLAS 0.3.21 does not recognise recent AVX-512 processors (AMD Zen 4/5, some
     * virtualised Xeons) and falls back to AVX2 or even SSE3 kernels: measured 2x (Zen 5) to
     * 4x (a virtualised Xeon) slower SGEMM. It reads OPENBLAS_CORETYPE when loaded. */
#if defined(__x86_64__) && defined(__GNUC__)
    if (!getenv("OPENBLAS_CORETYPE") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        again = 1;
    }
#endif
    if (again) execv("/proc/self/exe", argv);
    /* exec failed: carry on with the defaults */
}

int main(int argc, char **argv) {
    choose_runtime_env(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--version") || !strcmp(c, "version")) {
#ifdef SNN_HAVE_CUDA
        const char *dev = " (cuda)";
#else
        const char *dev = "";
#endif
        printf("snn %s%s commit %s%s\n", snn_version(), dev, snn_build_commit(), snn_build_dirty() ? " (dirty)" : "");
        return 0;
    }
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "train")) return cmd_train(argc, argv);
    if (!strcmp(c, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(c, "predict")) return cmd_predict(argc, argv);
    if (!strcmp(c, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(c, "bench")) return cmd_bench(argc, argv);
    if (!strcmp(c, "export-artifact")) return cmd_export_artifact(argc, argv);
    if (!strcmp(c, "lm")) return cmd_lm(argc, argv);
    die_usage("unknown command '%s' (try snn --help)", c);
}
