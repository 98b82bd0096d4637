/* snn bench fcsnn: the FC-SNN workload of SpikingJelly's benchmark_train_precision_snn_fc.py
 * (depth - 1 [Linear -> LIF] blocks and an output Linear, input randn[T, batch, input_dim],
 * cross-entropy on the mean over T, SGD with momentum), with the guide era's trials,
 * rotated order and medians, and the training step split into its phases. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cmds.h"

int bench_fcsnn(int argc, char **argv) {
    bench_suite s = {0};
    bench_flags f;
    bench_flags_defaults(&f, 20260531);
    int T = 4, batch = 64, in = 784, hidden = 512, classes = 16, depth = 3;
    float tau = 2.0f, lr = 5e-2f, momentum = 0.9f;
    opt t[48];
    int n = 0;
    t[n++] = opt_num("--time-steps", OPT_INT, &T, "T (default 4)", "--T", 1.0, 100000.0);
    t[n++] = opt_num("--batch-size", OPT_INT, &batch, "samples per step (default 64)", NULL, 1.0, 1048576.0);
    t[n++] = opt_num("--input-dim", OPT_INT, &in, "input features (default 784)", NULL, 1.0, 16777216.0);
    t[n++] = opt_num("--hidden-dim", OPT_INT, &hidden, "hidden width (default 512)", "--hidden", 1.0, 1048576.0);
    t[n++] = opt_num("--num-classes", OPT_INT, &classes, "output width (default 16)", "--classes", 1.0, 1048576.0);
    t[n++] = opt_num("--depth", OPT_INT, &depth, "Linear layers: depth-1 [Linear->LIF] blocks + output Linear (default 3)", NULL, 1.0, 1000.0);
    t[n++] = opt_num("--tau", OPT_FLOAT, &tau, "LIF time constant (default 2)", NULL, 1e-30, 1000000.0);
    t[n++] = opt_num("--lr", OPT_FLOAT, &lr, "SGD learning rate (default 0.05)", NULL, 1e-38, 1e+38);
    t[n++] = opt_num("--momentum", OPT_FLOAT, &momentum, "SGD momentum (default 0.9)", NULL, 0.0, 1.0);
    n += bench_flags_options(&f, t + n, 1);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn bench fcsnn [options]",
                  "Training and inference throughput of a fully connected SNN per precision mode\n"
                  "(SpikingJelly's benchmark_train_precision_snn_fc.py with trials, rotated order and\n"
                  "medians), with the training step split into forward, loss, backward and optimizer.\n"
                  "The neuron precision flags apply to every row.",
                  t, n);
        return 0;
    }
    args_parse("bench fcsnn", t, n, argc, argv, 3);
    s.metadata = bench_metadata(argc, argv);
    if (T <= 0 || T > 100000) die_usage("bench fcsnn: --time-steps must be between 1 and 100000, got %d", T);
    if (batch <= 0 || in <= 0 || hidden <= 0 || classes <= 0 || batch > (1 << 20) || in > (1 << 20) ||
        hidden > (1 << 16) || classes > (1 << 16))
        die_usage("bench fcsnn: --batch-size, --input-dim, --hidden-dim and --num-classes must be positive");
    if (depth < 2 || depth > 1000) die_usage("bench fcsnn: --depth must be between 2 and 1000 (it counts Linear layers), got %d", depth);
    if (!(tau > 1)) die_usage("bench fcsnn: --tau must be greater than 1, got %g", (double)tau);
    if (!(lr > 0) || momentum < 0 || momentum >= 1) die_usage("bench fcsnn: --lr must be positive and --momentum in [0, 1)");
    bench_flags_check("fcsnn", &f, &s);
    for (int i = 0; i < s.P; i++)
        if (s.res[i].cfg.mode == SNN_PRECISION_FP8 && (in % 16 || hidden % 16 || classes % 16))
            die_usage("bench fcsnn: with fp8, --input-dim, --hidden-dim and --num-classes must be divisible by "
                      "16 (got %d, %d, %d)", in, hidden, classes);
    s.w = (bench_workload){.kind = BENCH_FCSNN, .T = T, .N = batch, .in = in, .width = hidden, .depth = depth,
                           .classes = classes, .tau = tau, .lr = lr, .momentum = momentum, .seed = f.seed,
                           .warmup = f.warmup, .training_steps = f.training_steps,
                           .inference_steps = f.inference_steps};
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "workload", "fcsnn");
    cJSON_AddNumberToObject(c, "time_steps", T);
    cJSON_AddNumberToObject(c, "batch_size", batch);
    cJSON_AddNumberToObject(c, "input_dim", in);
    cJSON_AddNumberToObject(c, "hidden_dim", hidden);
    cJSON_AddNumberToObject(c, "num_classes", classes);
    cJSON_AddNumberToObject(c, "depth", depth);
    cJSON_AddNumberToObject(c, "tau", bench_f2d(tau));
    cJSON_AddStringToObject(c, "neuron", "LIF, Sigmoid(4) surrogate, hard reset, detach_reset false");
    cJSON_AddStringToObject(c, "neuron_storage", f.storage ? f.storage : "none");
    cJSON_AddStringToObject(c, "neuron_fwd", f.fwd ? f.fwd : "fp32");
    cJSON_AddStringToObject(c, "neuron_bwd", f.bwd ? f.bwd : "fp32");
    return bench_workload_finish(&s, &f, c);
}
