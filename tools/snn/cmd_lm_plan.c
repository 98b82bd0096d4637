/* snn lm plan: the memory planner (snn/lm_plan.h) on a TrainingConfig JSON file.
 * stdout: the planned snn.lm.TrainingConfig as canonical JSON (one line); stderr: the
 * chosen topology and its estimate. Bad input, and a config that no topology fits, is
 * exit 2 with one "snn: error:" line. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "snn/error.h"
#include "snn/lm_config.h"
#include "snn/lm_plan.h"

int snn_cmd_lm_plan(int argc, char **argv);

/* A finite double from the whole of s (strtod's leading spaces refused). */
static int parse_double(const char *s, double *v) {
    char *end;
    if (!s || !*s || !(s[0] == '.' || s[0] == '-' || s[0] == '+' || (s[0] >= '0' && s[0] <= '9'))) return 0;
    errno = 0;
    *v = strtod(s, &end);
    return !*end && errno == 0 && isfinite(*v);
}

static double mib(double b) { return b / (1024.0 * 1024.0); }

int snn_cmd_lm_plan(int argc, char **argv) {
    int world = 0;
    const char *mem_s = NULL, *objective_s = "throughput", *fraction_s = "0.9", *config = NULL;
    opt t[] = {
        {"--world-size", OPT_INT, &world, "number of devices (required)", NULL, 0},
        {"--device-memory-gib", OPT_STRING, &mem_s, "memory of one device in GiB, e.g. 80 or 0.5 (required)", NULL, 0},
        {"--objective", OPT_STRING, &objective_s, "throughput (default) | memory", NULL, 0},
        {"--memory-fraction", OPT_STRING, &fraction_s, "share of the memory the estimate may use, in (0, 1] (default 0.9)", NULL, 0},
        {"--config", OPT_STRING, &config, "the snn.lm.TrainingConfig JSON file (or give it as the argument)", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn lm plan --world-size W --device-memory-gib M [--objective throughput|memory] "
                  "[--memory-fraction F] CONFIG.json",
                  "Choose tensor / pipeline / context parallel sizes and the memory policy of a training config.",
                  t, n);
        return 0;
    }
    /* the one positional argument (the config) may stand anywhere; options keep their order */
    char **rest = malloc((size_t)argc * sizeof *rest);
    if (!rest) die_usage("lm plan: out of memory");
    int nr = 0;
    const char *pos = NULL;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--", 2)) {
            rest[nr++] = argv[i];
            if (!strchr(a, '=') && i + 1 < argc) rest[nr++] = argv[++i]; /* every option takes a value */
            continue;
        }
        if (pos) die_usage("lm plan: give one config file (got '%s' and '%s')", pos, a);
        pos = a;
    }
    args_parse("lm plan", t, n, nr, rest, 0);
    free(rest);
    if (pos && config) die_usage("lm plan: give the config once (argument or --config)");
    if (pos) config = pos;
    if (!config) die_usage("lm plan: a TrainingConfig JSON file is required");
    if (!t[0].seen) die_usage("lm plan: --world-size is required");
    if (!mem_s) die_usage("lm plan: --device-memory-gib is required");
    double gib, fraction;
    if (!parse_double(mem_s, &gib) || !(gib > 0))
        die_usage("lm plan: --device-memory-gib must be a positive number, got '%s'", mem_s);
    /* bytes as the reference's int(): truncated; at least one byte, at most 2^63 */
    double bytes = floor(gib * 1073741824.0);
    if (!(bytes >= 1) || bytes > 9223372036854775808.0)
        die_usage("lm plan: --device-memory-gib %s is out of range (1 byte to 2^63 bytes)", mem_s);
    int obj = snn_lm_plan_objective_parse(objective_s);
    if (obj < 0) die_usage("lm plan: --objective must be throughput or memory, got '%s'", objective_s);
    if (!parse_double(fraction_s, &fraction) || !(fraction > 0 && fraction <= 1))
        die_usage("lm plan: --memory-fraction must be in (0, 1], got '%s'", fraction_s);

    snn_lm_training_config in, out;
    snn_status st = snn_lm_training_config_load(config, &in);
    if (st != SNN_OK) die_status(st == SNN_E_IO ? SNN_E_INVALID : st, "lm plan: loading the config");
    snn_lm_plan_report r;
    st = snn_lm_plan_training(&in, world, (uint64_t)bytes, (snn_lm_plan_objective)obj, fraction, &out, &r);
    if (st != SNN_OK) die_status(st == SNN_E_NOMEM ? st : SNN_E_INVALID, "lm plan");
    char *json = NULL;
    if ((st = snn_lm_training_config_to_json(&out, &json)) != SNN_OK) die_status(st, "lm plan: writing the config");
    printf("%s\n", json);
    free(json);
    fprintf(stderr,
            "snn lm plan: tensor %d x pipeline %d x context %d x data %d (%lld microbatches), recompute %s, "
            "use_snn_memopt %s; estimate %.17g bytes (%.2f MiB) = parameters %.17g + activations %.17g; "
            "budget %.17g bytes (%.2f MiB); %d topologies, %d refused by validation, %d estimates, %d within budget\n",
            r.tensor_parallel_size, r.pipeline_parallel_size, r.context_parallel_size, r.data_parallel_size,
            (long long)r.num_microbatches, r.selective_recompute ? "selective core_attn" : "none",
            r.use_snn_memopt ? "true" : "false", r.estimate_bytes, mib(r.estimate_bytes), r.parameter_bytes,
            r.activation_bytes, r.budget_bytes, mib(r.budget_bytes), r.topologies, r.refused_by_validation,
            r.estimates, r.feasible);
    return ferror(stdout) ? 1 : 0;
}
