/* snn bench: dispatch to the benchmark subcommands (bench_*.c). */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cmds.h"

static void bench_usage(FILE *f) {
    fprintf(f,
            "usage: snn bench <workload> [options]\n\n"
            "workloads:\n"
            "  linear     dense MLP, training and inference throughput per precision, FP8 verdict\n"
            "  fcsnn      fully connected SNN, same protocol, forward/backward/optimizer split\n"
            "  neuron     fused LIF kernels: time, bytes moved, bandwidth vs a memcpy figure\n"
            "  lm         language model: training tokens/s and MFU, cached decoding vs the bandwidth floor\n"
            "  crossover  width sweep of FP8 against a baseline: where FP8 starts to win, JSON + SVG\n"
            "\n"
            "snn bench <workload> --help lists its options; docs/benchmarks.md has the protocol\n"
            "and the JSON schema.\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 3) die_usage("bench: which workload? (linear, fcsnn, neuron, lm or crossover; see snn bench --help)");
    const char *w = argv[2];
    if (!strcmp(w, "--help") || !strcmp(w, "-h") || !strcmp(w, "help")) {
        bench_usage(stdout);
        return 0;
    }
    if (!strcmp(w, "linear")) return bench_linear(argc, argv);
    if (!strcmp(w, "fcsnn")) return bench_fcsnn(argc, argv);
    if (!strcmp(w, "neuron")) return bench_neuron(argc, argv);
    if (!strcmp(w, "crossover")) return bench_crossover(argc, argv);
    if (!strcmp(w, "lm")) return bench_lm(argc, argv);
    die_usage("bench: unknown workload '%s' (choose linear, fcsnn, neuron, lm or crossover)", w);
}
