/* snn bench neuron: the fused multi-step neuron kernels (snn_neuron_forward/backward) over
 * T x N sizes: time, bytes moved, achieved bandwidth, and that bandwidth as a fraction of a
 * copy bandwidth measured in the same run. The kernels are memory-bound elementwise
 * recurrences, so bandwidth, not FLOPs, is the figure of merit.
 *
 * Bytes counted per call (FP32, 4 bytes a value, T*N elements):
 *   forward  reads x, writes s and h_seq          = 12 * T * N
 *   backward reads h_seq and gs, writes gx        = 12 * T * N
 * (v0, v_seq, gv_seq, gv_last are NULL: not read or written.)
 * Mixed precision (--neuron-storage S [--neuron-fwd F --neuron-bwd B], the rules of
 * snn_neuron_forward_mp): on the CPU the emulation runs on FP32 buffers (12 * T * N both ways);
 * on the GPU x and h_seq are stored in S (e bytes), spikes, gs and gx are FP32:
 *   forward (2e + 4) * T * N, backward (e + 8) * T * N.
 * Copy reference: 2 * bytes / time (memcpy reads the source and writes the destination;
 * glibc uses non-temporal stores at these sizes, so there is no write-allocate read). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <omp.h>

#include "bench.h"
#include "snn/precision.h"
#include "bench_neuron_cuda.h"
#include "cmds.h"

typedef struct size_tn {
    int T;
    long N;
} size_tn;

static int parse_sizes(const str_list *l, size_tn *out, int cap) {
    int n = 0;
    for (int i = 0; i < l->n; i++) {
        const char *p = l->v[i];
        while (*p) {
            if (*p == ',') {
                p++;
                continue;
            }
            char *end;
            long T = strtol(p, &end, 10);
            if (end == p || (*end != 'x' && *end != 'X'))
                die_usage("bench neuron: --sizes expects TxN[,TxN...], got '%s'", l->v[i]);
            const char *q = end + 1;
            long N = strtol(q, &end, 10);
            if (end == q || (*end && *end != ',') || T <= 0 || N <= 0 || T > 100000 || N > (1L << 30) ||
                (double)T * (double)N > (double)(1L << 31))
                die_usage("bench neuron: --sizes expects positive TxN with T*N <= 2^31, got '%s'", l->v[i]);
            if (n == cap) die_usage("bench neuron: at most %d sizes", cap);
            out[n++] = (size_tn){(int)T, N};
            p = end;
        }
    }
    if (!n) die_usage("bench neuron: --sizes needs at least one TxN");
    return n;
}

static double median_pct(double *v, int n, double q) { return bench_percentile(v, n, q); }

/* Copy bandwidth in GB/s: one thread (memcpy) and all threads (each copies its chunk). */
static void copy_bandwidth(size_t bytes, int repeats, double *single, double *parallel) {
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) die_status(SNN_E_NOMEM, "bench neuron: allocating the copy buffers");
    memset(a, 1, bytes); /* first touch, so page faults are not timed */
    memset(b, 2, bytes);
    double *t1 = malloc(sizeof(double) * (size_t)repeats), *tp = malloc(sizeof(double) * (size_t)repeats);
    if (!t1 || !tp) die_status(SNN_E_NOMEM, "bench neuron");
    memcpy(b, a, bytes);
    for (int r = 0; r < repeats; r++) {
        double t0 = now_seconds();
        memcpy(b, a, bytes);
        t1[r] = now_seconds() - t0;
    }
    for (int r = -1; r < repeats; r++) {
        double t0 = now_seconds();
#pragma omp parallel
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t chunk = (bytes / (size_t)nt + 63) & ~(size_t)63, lo = chunk * (size_t)id;
            if (lo < bytes) memcpy(b + lo, a + lo, lo + chunk > bytes ? bytes - lo : chunk);
        }
        if (r >= 0) tp[r] = now_seconds() - t0;
    }
    *single = 2.0 * (double)bytes / median_pct(t1, repeats, 0.5) / 1e9;
    *parallel = 2.0 * (double)bytes / median_pct(tp, repeats, 0.5) / 1e9;
    /* keep the copies observable so they cannot be elided */
    if (b[bytes / 2] != 1) fprintf(stderr, "snn: warning: copy check failed\n");
    free(a);
    free(b);
    free(t1);
    free(tp);
}

int bench_neuron(int argc, char **argv) {
    str_list sizes_arg = {0};
    const char *neuron = "lif", *output = NULL, *device = NULL, *storage = "f32";
    const char *nstorage = NULL, *nfwd = NULL, *nbwd = NULL;
    int warmup = 2, repeats = 10, copy_mib = 256, quiet = 0;
    float tau = 2.0f;
    uint64_t seed = 0;
    opt t[16];
    int n = 0;
    t[n++] = (opt){"--sizes", OPT_STRINGS, &sizes_arg, "TxN[,TxN...] (default 16x65536,64x65536,64x262144)", NULL, 0};
    t[n++] = (opt){"--neuron", OPT_STRING, &neuron, "if | lif | plif (default lif)", "--neurons", 0};
    t[n++] = opt_num("--tau", OPT_FLOAT, &tau, "LIF/PLIF tau (default 2: k = 0.5)", NULL, 1e-30, 1000000.0);
    t[n++] = opt_num("--warmup", OPT_INT, &warmup, "untimed calls per kernel and size (default 2)", NULL, 0.0, 1000000000.0);
    t[n++] = opt_num("--repeats", OPT_INT, &repeats, "timed calls per kernel and size (default 10)", NULL, 1.0, 1000000000.0);
    t[n++] = opt_num("--copy-mib", OPT_INT, &copy_mib, "size of the memcpy bandwidth reference in MiB (default 256)", NULL, 1.0, 1048576.0);
    t[n++] = (opt){"--seed", OPT_U64, &seed, "seed of x and gs, N(0, 1) (default 0)", NULL, 0};
    t[n++] = (opt){"--device", OPT_STRING, &device, "cpu (default) | cuda | cuda:N", NULL, 0};
    t[n++] = (opt){"--storage", OPT_STRING, &storage, "cuda: f32 (default) | bf16 | f16 storage of x, s, h, gs, gx", NULL, 0};
    t[n++] = (opt){"--neuron-storage", OPT_STRING, &nstorage, "mixed precision: storage fp32 | fp16 | bf16 | float8_e4m3fn | float8_e5m2", "--triton-storage", 0};
    t[n++] = (opt){"--neuron-fwd", OPT_STRING, &nfwd, "mixed precision: forward arithmetic fp32 | fp16 | bf16 | fp8", "--triton-fwd", 0};
    t[n++] = (opt){"--neuron-bwd", OPT_STRING, &nbwd, "mixed precision: backward arithmetic fp32 | fp16 | bf16 | fp8", "--triton-bwd", 0};
    t[n++] = (opt){"--output", OPT_STRING, &output, "write the JSON report here ('-': stdout)", NULL, 0};
    t[n++] = (opt){"--json", OPT_FLAG, &bench_json, "print the JSON report as the last line of stdout", NULL, 0};
    t[n++] = (opt){"--quiet", OPT_FLAG, &quiet, "no progress lines", NULL, 0};
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn bench neuron [options]",
                  "Time the fused multi-step neuron kernels (Sigmoid(4) surrogate, threshold 1, hard\n"
                  "reset to 0, decay_input) and report the bandwidth they reach: forward moves\n"
                  "12*T*N bytes (reads x, writes s and h), backward 12*T*N (reads h and gs, writes gx),\n"
                  "compared with a memcpy bandwidth measured in the same run.\n"
                  "--neuron-storage/--neuron-fwd/--neuron-bwd time the mixed-precision kernels instead\n"
                  "(snn_neuron_forward_mp on the CPU, FP32 buffers; on the GPU x and h are stored in the\n"
                  "storage dtype, spikes, gs and gx FP32).",
                  t, n);
        return 0;
    }
    args_parse("bench neuron", t, n, argc, argv, 3);
    cJSON *md = bench_metadata(argc, argv);
    const int gpu = bench_check_device("neuron", device);
    snn_dtype io = SNN_F32;
    if (!strcasecmp(storage, "f32") || !strcasecmp(storage, "fp32")) io = SNN_F32;
    else if (!strcasecmp(storage, "bf16")) io = SNN_BF16;
    else if (!strcasecmp(storage, "f16") || !strcasecmp(storage, "fp16")) io = SNN_F16;
    else die_usage("bench neuron: unknown --storage '%s' (choose f32, bf16 or f16)", storage);
    if (gpu < 0 && io != SNN_F32)
        die_usage("bench neuron: --storage %s needs --device cuda (the CPU kernels here are FP32)", storage);
    /* Mixed precision: the flags parsed by the precision configuration's rules (aliases, the
     * ambiguous 'fp8' storage, F/B needing a storage, FP8 arithmetic needing FP8 storage). */
    int mp = 0;
    snn_dtype mS = SNN_F32, mF = SNN_F32, mB = SNN_F32;
    if (nstorage || nfwd || nbwd) {
        snn_precision_config pc;
        if (snn_precision_config_parse("fp32", NULL, nstorage, nfwd, nbwd, &pc) != SNN_OK)
            die_usage("bench neuron: %s", snn_last_error());
        if (pc.neuron_storage == SNN_NEURON_STORAGE_UNSET)
            die_usage("bench neuron: --neuron-fwd/--neuron-bwd need --neuron-storage");
        if (io != SNN_F32)
            die_usage("bench neuron: --storage %s is the plain kernels' storage; with --neuron-storage the mixed-precision "
                      "kernels run (drop --storage)", storage);
        mp = 1;
        mS = snn_neuron_storage_dtype(pc.neuron_storage);
        mF = snn_neuron_compute_dtype(pc.neuron_fwd, pc.neuron_storage);
        mB = snn_neuron_compute_dtype(pc.neuron_bwd, pc.neuron_storage);
    }
    if (gpu >= 0) {
        bench_cuda_open(gpu);
        bench_cuda_metadata(md, gpu);
    }
    const double es = (double)snn_dtype_size(io);
    static const char *def_sizes[] = {"16x65536,64x65536,64x262144"};
    if (!sizes_arg.n) sizes_arg = (str_list){def_sizes, 1};
    size_tn sizes[64];
    int ns = parse_sizes(&sizes_arg, sizes, 64);
    snn_neuron_kind kind;
    if (!strcasecmp(neuron, "if") || !strcmp(neuron, "IFNode")) kind = SNN_NEURON_IF;
    else if (!strcasecmp(neuron, "lif") || !strcmp(neuron, "LIFNode")) kind = SNN_NEURON_LIF;
    else if (!strcasecmp(neuron, "plif") || !strcmp(neuron, "ParametricLIFNode")) kind = SNN_NEURON_PLIF;
    else die_usage("bench neuron: unknown neuron '%s' (choose if, lif or plif)", neuron);
    const char *kname = kind == SNN_NEURON_IF ? "IFNode" : kind == SNN_NEURON_LIF ? "LIFNode" : "ParametricLIFNode";
    if (!(tau > 1)) die_usage("bench neuron: --tau must be greater than 1");
    if (warmup < 0 || repeats < 1 || repeats > 100000) die_usage("bench neuron: --warmup >= 0 and --repeats >= 1 needed");
    if (copy_mib < 1 || copy_mib > 65536) die_usage("bench neuron: --copy-mib must be between 1 and 65536");
    snn_neuron_opts o = snn_neuron_defaults(kind);
    o.tau = tau;
    if (snn_neuron_opts_validate(&o) != SNN_OK) die_status(SNN_E_INVALID, "bench neuron");
    float k = kind == SNN_NEURON_IF ? 1.0f : 1.0f / tau; /* LIF 1/tau; PLIF sigmoid(w0) = 1/tau */

    double bw1 = 0, bwp = 0;
    if (gpu >= 0) {
        bw1 = bwp = bench_neuron_cuda_copy_gbs((size_t)copy_mib << 20, repeats < 5 ? 5 : repeats);
        if (!quiet) fprintf(stderr, "GPU copy bandwidth (cudaMemcpy device to device): %.2f GB/s\n", bw1);
    } else {
        copy_bandwidth((size_t)copy_mib << 20, repeats < 5 ? 5 : repeats, &bw1, &bwp);
        if (!quiet) fprintf(stderr, "copy bandwidth: %.2f GB/s (1 thread), %.2f GB/s (%d threads)\n", bw1, bwp, omp_get_max_threads());
    }
    double ref = bw1 > bwp ? bw1 : bwp;

    cJSON *failures = cJSON_CreateArray();
    cJSON *rows = cJSON_CreateArray();
    double *times = malloc(sizeof(double) * (size_t)repeats);
    if (!times) die_status(SNN_E_NOMEM, "bench neuron");
    int table = !output || strcmp(output, "-");
    if (table) printf("neuron %s, copy reference %.2f GB/s (%s)\n", kname, ref, bwp >= bw1 ? "all threads" : "1 thread");
    if (table && mp)
        printf("mixed precision: storage %s, forward %s, backward %s\n", snn_dtype_name(mS), snn_dtype_name(mF),
               snn_dtype_name(mB));
    if (table) printf("%8s %9s %-9s %10s %10s %10s %10s %9s %9s\n", "T", "N", "kernel", "median ms", "p25 ms", "p75 ms", "MB moved",
           "GB/s", "of copy");
    for (int si = 0; si < ns; si++) {
        int T = sizes[si].T;
        size_t N = (size_t)sizes[si].N, e = (size_t)T * N;
        double *gtf = NULL, *gtb = NULL;
        int gokf = 1, gokb = 1;
        if (gpu >= 0) {
            gtf = malloc(sizeof(double) * (size_t)repeats);
            gtb = malloc(sizeof(double) * (size_t)repeats);
            if (!gtf || !gtb) die_status(SNN_E_NOMEM, "bench neuron");
            if (mp)
                bench_neuron_cuda_run_mp(&o, k, T, N, mS, mF, mB, warmup, repeats, seed, gtf, gtb, &gokf, &gokb);
            else
                bench_neuron_cuda_run(&o, k, T, N, io, warmup, repeats, seed, gtf, gtb, &gokf, &gokb);
        }
        const size_t he = gpu >= 0 ? 1 : e; /* host tensors only for the CPU kernels */
        float *x = malloc(he * 4), *s = malloc(he * 4), *h = malloc(he * 4), *gs = malloc(he * 4), *gx = malloc(he * 4);
        if (!x || !s || !h || !gs || !gx) die_status(SNN_E_NOMEM, "bench neuron: allocating the tensors");
        snn_rng rx = snn_rng_make(seed, 1), rg = snn_rng_make(seed, 2);
        for (size_t i = 0; i < he && gpu < 0; i++) {
            x[i] = snn_rng_next_normal(&rx);
            gs[i] = snn_rng_next_normal(&rg);
            gx[i] = NAN; /* poisoned: the check below sees what backward wrote */
        }
        for (int proc = 0; proc < 2; proc++) {
            int ok = 1;
            if (gpu >= 0) {
                memcpy(times, proc ? gtb : gtf, sizeof(double) * (size_t)repeats);
                ok = proc ? gokb : gokf;
            } else {
                for (int r = -warmup; r < repeats; r++) {
                    double t0 = now_seconds();
                    snn_status st = SNN_OK;
                    if (proc == 0 && mp) st = snn_neuron_forward_mp(&o, k, T, N, mS, mF, x, NULL, s, h, NULL);
                    else if (proc == 0) snn_neuron_forward(&o, k, T, N, x, NULL, s, h, NULL, NULL);
                    else if (mp) st = snn_neuron_backward_mp(&o, k, T, N, mS, mF, mB, h, NULL, gs, NULL, gx, NULL, NULL);
                    else snn_neuron_backward(&o, k, T, N, h, NULL, gs, NULL, NULL, gx, NULL, NULL);
                    if (st != SNN_OK) die_status(st, "bench neuron");
                    double dt = now_seconds() - t0;
                    if (r >= 0) times[r] = dt;
                }
                if (proc == 0) {
                    for (size_t i = 0; i < e; i++) ok &= (s[i] == 0.0f || s[i] == 1.0f) && isfinite(h[i]);
                } else {
                    for (size_t i = 0; i < e; i++) ok &= isfinite(gx[i]) != 0;
                }
            }
            /* bytes per element: the plain kernels 3e; mixed precision on the GPU x/h in S,
             * spikes, gs, gx FP32; the CPU emulation works on FP32 buffers (12) */
            double per = 3.0 * es;
            if (mp && gpu >= 0) per = proc ? (double)snn_dtype_size(mS) + 8.0 : 2.0 * (double)snn_dtype_size(mS) + 4.0;
            double med = bench_percentile(times, repeats, .5), bytes = per * (double)e;
            double gbps = bytes / med / 1e9;
            const char *pname = proc ? "backward" : "forward";
            if (!ok) {
                char msg[160];
                snprintf(msg, sizeof msg, "%s %dx%zu: %s", pname, T, N,
                         proc ? "non-finite gx" : "spikes not in {0, 1} or non-finite h");
                cJSON_AddItemToArray(failures, cJSON_CreateString(msg));
            }
            cJSON *row = cJSON_CreateObject();
            cJSON_AddNumberToObject(row, "T", T);
            cJSON_AddNumberToObject(row, "N", (double)N);
            cJSON_AddNumberToObject(row, "elements", (double)e);
            cJSON_AddStringToObject(row, "neuron_type", kname);
            cJSON_AddStringToObject(row, "process", pname);
            cJSON_AddNumberToObject(row, "median_ms", med * 1e3);
            cJSON_AddNumberToObject(row, "p25_ms", bench_percentile(times, repeats, .25) * 1e3);
            cJSON_AddNumberToObject(row, "p75_ms", bench_percentile(times, repeats, .75) * 1e3);
            cJSON_AddNumberToObject(row, "min_ms", bench_percentile(times, repeats, 0) * 1e3);
            cJSON_AddNumberToObject(row, "max_ms", bench_percentile(times, repeats, 1) * 1e3);
            cJSON_AddNumberToObject(row, "bytes", bytes);
            cJSON_AddNumberToObject(row, "bandwidth_gb_s", gbps);
            cJSON_AddNumberToObject(row, "fraction_of_copy_bandwidth", gbps / ref);
            cJSON_AddNumberToObject(row, "throughput_melems_s", (double)e / med / 1e6);
            cJSON_AddBoolToObject(row, "success", ok);
            cJSON_AddItemToArray(rows, row);
            if (table) printf("%8d %9zu %-9s %10.3f %10.3f %10.3f %10.1f %9.2f %8.0f%%\n", T, N, pname, med * 1e3,
                   bench_percentile(times, repeats, .25) * 1e3, bench_percentile(times, repeats, .75) * 1e3,
                   bytes / 1e6, gbps, 100 * gbps / ref);
        }
        free(x);
        free(s);
        free(h);
        free(gs);
        free(gx);
        free(gtf);
        free(gtb);
    }
    free(times);
    bench_metadata_end(md);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "metadata", md);
    cJSON *c = cJSON_AddObjectToObject(doc, "config");
    cJSON *sz = cJSON_AddArrayToObject(c, "sizes");
    for (int i = 0; i < ns; i++) {
        char b[48];
        snprintf(b, sizeof b, "%dx%ld", sizes[i].T, sizes[i].N);
        cJSON_AddItemToArray(sz, cJSON_CreateString(b));
    }
    cJSON_AddStringToObject(c, "neuron", kname);
    cJSON_AddNumberToObject(c, "tau", bench_f2d(tau));
    cJSON_AddNumberToObject(c, "k", k);
    cJSON_AddNumberToObject(c, "v_threshold", o.v_threshold);
    cJSON_AddNumberToObject(c, "v_reset", o.v_reset);
    cJSON_AddStringToObject(c, "surrogate", snn_surrogate_name(o.surrogate));
    cJSON_AddBoolToObject(c, "decay_input", o.decay_input);
    cJSON_AddBoolToObject(c, "detach_reset", o.detach_reset);
    cJSON_AddNumberToObject(c, "warmup", warmup);
    cJSON_AddNumberToObject(c, "repeats", repeats);
    char dn[32];
    cJSON_AddStringToObject(c, "device", bench_device_name(gpu, dn, sizeof dn));
    cJSON_AddStringToObject(c, "storage", snn_dtype_name(mp ? mS : io));
    cJSON_AddBoolToObject(c, "mixed_precision", mp);
    cJSON_AddStringToObject(c, "neuron_storage", mp ? snn_dtype_name(mS) : "none");
    cJSON_AddStringToObject(c, "neuron_fwd", mp ? snn_dtype_name(mF) : "none");
    cJSON_AddStringToObject(c, "neuron_bwd", mp ? snn_dtype_name(mB) : "none");
    if (mp && gpu >= 0) {
        cJSON_AddStringToObject(c, "spike_dtype", "f32");
        cJSON_AddStringToObject(c, "bytes_forward", "(2*e+4)*T*N (e = storage bytes): reads x (S), writes s (f32) and h_seq (S)");
        cJSON_AddStringToObject(c, "bytes_backward", "(e+8)*T*N: reads h_seq (S) and gs (f32), writes gx (f32)");
    } else if (mp) {
        cJSON_AddStringToObject(c, "spike_dtype", "f32");
        cJSON_AddStringToObject(c, "bytes_forward", "12*T*N: the CPU emulation reads x, writes s and h_seq as FP32");
        cJSON_AddStringToObject(c, "bytes_backward", "12*T*N: reads h_seq and gs, writes gx, FP32");
    } else {
        cJSON_AddStringToObject(c, "bytes_forward", "3*e*T*N (e = storage bytes): reads x, writes s and h_seq");
        cJSON_AddStringToObject(c, "bytes_backward", "3*e*T*N: reads h_seq and gs, writes gx");
    }
    cJSON *mb = cJSON_AddObjectToObject(doc, "memory_bandwidth");
    cJSON_AddNumberToObject(mb, "copy_bytes", (double)((size_t)copy_mib << 20));
    cJSON_AddNumberToObject(mb, "single_thread_gb_s", bw1);
    cJSON_AddNumberToObject(mb, "all_threads_gb_s", bwp);
    cJSON_AddNumberToObject(mb, "threads", omp_get_max_threads());
    cJSON_AddNumberToObject(mb, "reference_gb_s", ref);
    cJSON_AddStringToObject(mb, "formula", gpu >= 0 ? "2 * copy_bytes / median time of cudaMemcpy device to device (read + write)"
                                                     : "2 * copy_bytes / median time of memcpy (read + write); reference = the larger");
    cJSON_AddItemToObject(doc, "rows", rows);
    cJSON_AddItemToObject(doc, "failures", cJSON_Duplicate(failures, 1));
    cJSON_AddBoolToObject(doc, "passed", cJSON_GetArraySize(failures) == 0);
    bench_write_json(output, doc);
    int rc = bench_exit_code(failures);
    cJSON_Delete(doc);
    cJSON_Delete(failures);
    return rc;
}
