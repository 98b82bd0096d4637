/* snn bench: the precision benchmarks of SpikingJelly's precision guide, on the CPU and
 * (linear, fcsnn, crossover with --device cuda, in a -DSNN_CUDA=ON build) on one GPU.
 *
 *   bench linear     dense MLP (the guide's LinearWorkload), training and inference
 *   bench fcsnn      FC-SNN ([Linear -> LIF] blocks), with a forward/backward split
 *   bench neuron     the fused LIF kernels: time, bytes moved, achieved bandwidth
 *   bench crossover  width sweep of FP8 against a 16-bit baseline, JSON + SVG
 *   bench lm         language model: training tokens/s and MFU, cached decoding (bench_lm.c)
 *
 * On a GPU the workloads run on the one engine (snn_model_to -> prepare -> optimizer, the
 * loop of snn train); the hand-built GPU network is a labelled reference next to it.
 *
 * Shared here: the workload runner with SpikingJelly's trial discipline (one base state,
 * a fresh model per (trial, precision), rotated precision order, untimed preparation and
 * warm-up), the statistics, the memory probes, the efficiency assessment and the JSON
 * metadata. docs/benchmarks.md describes the protocol and the JSON schema. */
#ifndef SNN_TOOL_BENCH_H
#define SNN_TOOL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "common.h"

/* Same layout as the OPT_STRINGS destination of args.c. */
typedef struct str_list {
    const char **v;
    int n;
} str_list;

/* ---- workloads ---- */
typedef enum { BENCH_LINEAR = 0, BENCH_FCSNN = 1 } bench_kind;

typedef struct bench_workload {
    bench_kind kind;
    int T;            /* time steps (1 for the MLP) */
    int N;            /* batch */
    int in, width, depth, classes; /* depth counts Linear layers in both workloads */
    float tau;        /* fcsnn LIF tau */
    float lr, momentum;
    uint64_t seed;
    int warmup, training_steps, inference_steps;
} bench_workload;

snn_status bench_build(const bench_workload *w, snn_model **out);

/* Per-trial metrics, in the order of bench_metric_names. */
enum {
    BM_PREP_MS, BM_TRAIN_MS, BM_TRAIN_SPS, BM_TRAIN_ALLOC_MB, BM_TRAIN_RSS_MB,
    BM_INFER_MS, BM_INFER_SPS, BM_INFER_ALLOC_MB, BM_INFER_RSS_MB,
    BM_UPDATE, BM_CHECKSUM,
    BM_FWD_MS, BM_LOSS_MS, BM_BWDOPT_MS, BM_OPT_MS, BM_BWD_MS, BM_FINAL_LOSS,
    BM_TRAIN_CPU_MS, BM_INFER_CPU_MS,
    BM_COUNT
};
extern const char *const bench_metric_names[BM_COUNT];

/* Neuron layers whose spike rates a trial records (snn_model_spike_rates). */
#define BENCH_MAX_RATES 64

typedef struct bench_trial {
    int trial, position;      /* trial index and place in that trial's rotated order */
    double v[BM_COUNT];
    int loss_finite, output_finite;
    /* fraction of ones in each neuron layer's output over the fixed batch: after the last
     * timed training step (train mode) and after the last inference step (eval mode) */
    double rate_train[BENCH_MAX_RATES], rate_infer[BENCH_MAX_RATES];
} bench_trial;

typedef struct bench_result {
    const char *name;           /* precision mode as given: "fp8" */
    snn_precision_config cfg;
    bench_trial *trials;
    int n;
    cJSON *report;              /* snn_precision_describe of the last trial */
    cJSON *converge;            /* --converge result or NULL */
    int n_rates;                /* neuron layers (model order), at most BENCH_MAX_RATES */
    char rate_names[BENCH_MAX_RATES][48], rate_kinds[BENCH_MAX_RATES][24];
    /* --device cuda: the hand-built GPU network (src/backend/cuda/cuda_bench_*.cu) on the
     * same base state, a labelled reference next to the engine's figures while it exists */
    bench_trial *ref_trials;    /* NULL when the reference did not run */
    cJSON *ref_report;
    char ref_skipped[256];      /* why it did not run ("" when it did) */
} bench_result;

typedef struct bench_suite {
    bench_workload w;
    int trials, P, quiet;
    bench_result *res;
    float *x;                   /* fixed input [T][N][in] */
    int32_t *y;                 /* fixed targets [N] */
    float *base_params, *base_buffers;
    size_t n_params, n_buffers;
    cJSON *failures;            /* array of strings: checks that failed */
    cJSON *metadata;            /* bench_metadata at the start of the run */
    int cuda_device;            /* -1: CPU; else the GPU runs the workload (bench_cuda.c) */
    size_t *layer_w, *layer_b;  /* cuda: offsets of Linear l's weight and bias in base_params */
    int n_layers;
} bench_suite;

/* Precision options shared by the workload benchmarks. */
typedef struct bench_flags {
    str_list precisions;
    const char *baseline, *recipe, *storage, *fwd, *bwd, *device, *output;
    int trials, warmup, training_steps, inference_steps, require_efficiency, quiet;
    float min_training_speedup, min_inference_speedup;
    uint64_t seed;
    /* --converge DATASET */
    const char *converge, *data_dir, *converge_optimizer;
    int converge_epochs, converge_steps, converge_test_samples;
    float converge_lr;
} bench_flags;

/* The shared defaults: baseline bf16, 3 trials, 2 warm-up, 5 training and 10 inference
 * steps, 1.05x thresholds, 1 converge epoch. */
void bench_flags_defaults(bench_flags *f, uint64_t seed);
/* Adds the shared options (at most 24) to t; `neuron` adds the neuron precision flags. */
int bench_flags_options(bench_flags *f, opt *t, int neuron);
/* Check the shared flags (exit 2 on bad input) and fill s->res with one entry per
 * precision (configs parsed and validated). */
void bench_flags_check(const char *cmd, bench_flags *f, bench_suite *s);
/* -1 for "cpu" (or NULL), N for "cuda" / "cuda:N". Exit 2 for anything else, and for cuda
 * in a build without CUDA or on a machine without a usable GPU (naming the problem). */
int bench_check_device(const char *cmd, const char *dev);
/* "cpu" or "cuda:N" for the JSON config. */
const char *bench_device_name(int cuda_device, char *buf, size_t cap);

/* ---- --device cuda (bench_cuda.c) ---- */
/* Exit 2 unless the flags are ones the GPU path takes (no neuron precision flags without
 * neurons, no --converge). */
void bench_cuda_check_flags(const char *cmd, const bench_flags *f);
/* Open the GPU (once per process); exit 2 naming the problem when there is none. */
void bench_cuda_open(int device);
/* The context bench_cuda_open made (NULL before). */
struct snn_cuda;
struct snn_cuda *bench_cuda_context(void);
/* 1 when the hand-built GPU network implements s->w with r's precision and the FP8 recipe
 * the library resolved (`resolved`, from the engine's report); else 0 with the reason in
 * why. */
int bench_cuda_reference_supported(const bench_suite *s, const bench_result *r, snn_fp8_recipe resolved,
                                   char *why, size_t cap);
/* One (trial, precision) run of the hand-built GPU network, filling t and *report. */
void bench_cuda_run_reference(bench_suite *s, bench_result *r, snn_fp8_recipe resolved, bench_trial *t,
                              cJSON **report);
/* Set metadata.device and add the GPU, driver and CUDA runtime versions. */
void bench_cuda_metadata(cJSON *md, int device);

/* Build the base model, fixed inputs and targets; run every (trial, precision) with the
 * rotated order; record failed checks. Library failures exit through die_status. */
void bench_suite_run(bench_suite *s);
void bench_suite_free(bench_suite *s);
/* {"precision", "trial_count", "trials": [...], medians, _p25, _p75, "output_checksum_spread",
 *  "conversion_report", "capability_report", "policy", "converge"} */
cJSON *bench_result_json(const bench_result *r);
/* The efficiency object; adds failed checks and (with require) speed misses to failures. */
cJSON *bench_efficiency(bench_suite *s, const char *baseline, double min_train, double min_infer,
                        int require);
/* The results table and the FP8 comparisons on stdout. */
void bench_print_table(const bench_suite *s, const cJSON *efficiency);
double bench_median_of(const bench_result *r, int metric);

/* ---- --converge ---- */
typedef struct bench_converge_data {
    snn_dataset *train, *test;
    const char *name;
} bench_converge_data;
void bench_converge_load(const bench_flags *f, bench_converge_data *d);
void bench_converge_free(bench_converge_data *d);
/* Train a fresh model of workload w (input and classes taken from the data) with cfg for
 * the flags' budget and evaluate it. Returns the JSON record. */
cJSON *bench_converge_run(const bench_workload *w, const snn_precision_config *cfg,
                          const bench_flags *f, const bench_converge_data *d, int quiet);

/* ---- helpers ---- */
/* A float flag as the decimal the user typed (0.05f -> 0.05, not 0.0500000007), for JSON. */
double bench_f2d(float x);
double bench_percentile(const double *v, int n, double q); /* linear, position (n-1)q */
size_t bench_rss_bytes(void);       /* current resident set */
size_t bench_rss_peak_bytes(void);  /* high-water mark (VmHWM) */
int bench_rss_reset_peak(void);     /* 1 if the kernel reset VmHWM to the current RSS */
/* Call at the start of a run; bench_metadata_end adds the load average at the end. */
cJSON *bench_metadata(int argc, char **argv);
void bench_metadata_end(cJSON *md);
/* Write the report to path ('-': stdout, NULL: nowhere) and, with --json (bench_json),
 * as one line at the end of stdout. A write error exits 2 naming the file. */
extern int bench_json;
void bench_write_json(const char *path, const cJSON *doc);
/* Split "a,b c" style lists of positive integers; exits 2 on bad values. Returns count. */
int bench_int_list(const char *flag, const str_list *l, int *out, int cap);
/* The command's verdict: 0 if failures is empty, else prints them and returns 1. */
int bench_exit_code(const cJSON *failures);

/* Shared tail of bench linear / fcsnn: --converge, efficiency, JSON document (metadata,
 * config, results, efficiency), table; returns the exit code. Takes ownership of config. */
int bench_workload_finish(bench_suite *s, bench_flags *f, cJSON *config);

int bench_linear(int argc, char **argv);
int bench_fcsnn(int argc, char **argv);
int bench_neuron(int argc, char **argv);
int bench_crossover(int argc, char **argv);
int bench_lm(int argc, char **argv);

#endif
