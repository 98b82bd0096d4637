/* snn bench crossover: the linear workload over a sweep of widths (and batch sizes), FP8
 * against a 16-bit baseline, to find where FP8 starts to win (>= 1.05x by default) for
 * training and for inference, as the precision guide's "When FP8 is faster" tables do.
 * Writes a JSON report and a hand-written SVG plot of speed-up against width. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cmds.h"

#define MAX_POINTS 64

typedef struct point {
    int batch, width, classes;
    double train_x, infer_x;
} point;

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int sort_unique(int *v, int n) {
    qsort(v, (size_t)n, sizeof(int), cmp_int);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || v[m - 1] != v[i]) v[m++] = v[i];
    return m;
}

/* Where FP8 starts to win along ascending widths: the smallest width from which every
 * larger width in the sweep also wins (a single lucky point does not count). */
static cJSON *crossover_json(const point *p, int n, int training, double thr, char *line, size_t cap) {
    cJSON *o = cJSON_CreateObject();
    int from = n;
    for (int i = n - 1; i >= 0; i--) {
        double x = training ? p[i].train_x : p[i].infer_x;
        if (!(x >= thr)) break;
        from = i;
    }
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if ((training ? p[i].train_x : p[i].infer_x) >= thr) first = i;
    const char *what = training ? "training" : "inference";
    cJSON_AddNumberToObject(o, "threshold", bench_f2d((float)thr));
    if (first >= 0) cJSON_AddNumberToObject(o, "first_win_width", p[first].width);
    else cJSON_AddNullToObject(o, "first_win_width");
    if (from == n) {
        cJSON_AddStringToObject(o, "status", "no_crossover_in_range");
        cJSON_AddNullToObject(o, "crossover_width");
        cJSON_AddNullToObject(o, "between");
        snprintf(line, cap, "%s: FP8 does not reach %.2fx up to width %d", what, thr, p[n - 1].width);
    } else if (from == 0) {
        cJSON_AddStringToObject(o, "status", "wins_from_smallest_width");
        cJSON_AddNumberToObject(o, "crossover_width", p[0].width);
        cJSON_AddNullToObject(o, "between");
        snprintf(line, cap, "%s: FP8 wins at every width from %d (crossover at or below it)", what, p[0].width);
    } else {
        cJSON_AddStringToObject(o, "status", "crossover");
        cJSON_AddNumberToObject(o, "crossover_width", p[from].width);
        int b[2] = {p[from - 1].width, p[from].width};
        cJSON_AddItemToObject(o, "between", cJSON_CreateIntArray(b, 2));
        snprintf(line, cap, "%s: FP8 starts to win between width %d and %d", what, b[0], b[1]);
    }
    cJSON_AddStringToObject(o, "summary", line);
    return o;
}

static const char *recommend(double tr, double in, double tthr, double ithr, const char *base, char *buf, size_t cap) {
    int t = tr >= tthr, i = in >= ithr;
    if (t && i) snprintf(buf, cap, "fp8");
    else if (i) snprintf(buf, cap, "fp8 for inference, %s for training", base);
    else if (t) snprintf(buf, cap, "fp8 for training, %s for inference", base);
    else snprintf(buf, cap, "%s", base);
    return buf;
}

/* ---------------- SVG ---------------- */

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

static void write_svg(const char *path, const point *pts, int np, const int *batches, int nbatch, double tthr,
                      double ithr, const char *base, const char *recipe, int depth, int cuda_device) {
    FILE *f = fopen(path, "w");
    if (!f) die_usage("cannot write '%s': %s", path, strerror(errno));
    const double W = 780, H = 470, L = 70, R = 230, Tm = 50, B = 60;
    double pw = W - L - R, ph = H - Tm - B;
    int wmin = pts[0].width, wmax = pts[0].width;
    double ymax = 1.2;
    for (int i = 0; i < np; i++) {
        if (pts[i].width < wmin) wmin = pts[i].width;
        if (pts[i].width > wmax) wmax = pts[i].width;
        if (isfinite(pts[i].train_x) && pts[i].train_x * 1.1 > ymax) ymax = pts[i].train_x * 1.1;
        if (isfinite(pts[i].infer_x) && pts[i].infer_x * 1.1 > ymax) ymax = pts[i].infer_x * 1.1;
    }
    double ystep = ymax <= 2 ? 0.2 : ymax <= 5 ? 0.5 : ymax <= 10 ? 1 : ceil(ymax / 10);
    ymax = ceil(ymax / ystep - 1e-9) * ystep;
    int logx = wmax >= 4 * wmin;
    double x0 = logx ? log2(wmin) : wmin, x1 = logx ? log2(wmax) : wmax;
    if (x1 <= x0) {
        x0 -= 1;
        x1 += 1;
    }
#define SX(w) (L + pw * (((logx ? log2((double)(w)) : (double)(w)) - x0) / (x1 - x0)))
#define SY(y) (Tm + ph * (1.0 - (y) / ymax))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">FP8 (%s) speed-up over %s, "
               "linear workload, depth %d, %s</text>\n", L + pw / 2, recipe, base, depth,
            cuda_device >= 0 ? "GPU" : "CPU");
    /* grid and y ticks */
    int nticks = (int)(ymax / ystep + 0.5);
    for (int k = 0; k <= nticks; k++) {
        double y = k * ystep;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", L, SY(y), L + pw, SY(y));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2g</text>\n", L - 6, SY(y) + 4, y);
    }
    for (int i = 0; i < np; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= pts[j].width == pts[i].width;
        if (dup) continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", SX(pts[i].width), Tm,
                SX(pts[i].width), Tm + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", SX(pts[i].width), Tm + ph + 18,
                pts[i].width);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", L, Tm, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">width (hidden and output features)%s</text>\n",
            L + pw / 2, H - 18, logx ? ", log scale" : "");
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
               "FP8 / %s throughput</text>\n", Tm + ph / 2, Tm + ph / 2, base);
    /* reference lines: parity and the win threshold */
    if (1.0 <= ymax)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" stroke-width=\"1.2\"/>\n",
                L, SY(1.0), L + pw, SY(1.0));
    double thr = tthr > ithr ? tthr : ithr;
    if (thr <= ymax)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"3 3\"/>\n",
                L, SY(thr), L + pw, SY(thr));
    /* series: per batch size, training (solid) and inference (dashed) */
    int li = 0;
    for (int b = 0; b < nbatch; b++) {
        for (int mode = 0; mode < 2; mode++, li++) {
            const char *col = palette[li % 8];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                    mode ? " stroke-dasharray=\"7 4\"" : "");
            for (int i = 0; i < np; i++) {
                double v = mode ? pts[i].infer_x : pts[i].train_x;
                if (pts[i].batch == batches[b] && isfinite(v)) fprintf(f, "%.1f,%.1f ", SX(pts[i].width), SY(v));
            }
            fprintf(f, "\"/>\n");
            for (int i = 0; i < np; i++) {
                double v = mode ? pts[i].infer_x : pts[i].train_x;
                if (pts[i].batch != batches[b] || !isfinite(v)) continue;
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s, batch %d, width %d: "
                           "%.3fx</title></circle>\n", SX(pts[i].width), SY(v), col, mode ? "inference" : "training",
                        pts[i].batch, pts[i].width, v);
            }
            double ly = Tm + 10 + 20 * li;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                    W - R + 15, ly, W - R + 45, ly, col, mode ? " stroke-dasharray=\"7 4\"" : "");
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s, batch %d</text>\n", W - R + 52, ly + 4,
                    mode ? "inference" : "training", batches[b]);
        }
    }
    double ly = Tm + 10 + 20 * li;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\" stroke-width=\"1.2\"/>\n",
            W - R + 15, ly, W - R + 45, ly);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">1.0x (parity)</text>\n", W - R + 52, ly + 4);
    ly += 20;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-dasharray=\"3 3\"/>\n",
            W - R + 15, ly, W - R + 45, ly);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%.2fx (win)</text>\n", W - R + 52, ly + 4, thr);
    fprintf(f, "</svg>\n");
#undef SX
#undef SY
    if (fclose(f) != 0) die_usage("cannot write '%s': %s", path, strerror(errno));
}

/* ---------------- command ---------------- */

int bench_crossover(int argc, char **argv) {
    bench_flags f;
    bench_flags_defaults(&f, 20260718);
    f.warmup = 1;
    f.training_steps = 3;
    f.inference_steps = 5;
    str_list widths_arg = {0}, batches_arg = {0};
    int depth = 4, classes = 0;
    float lr = 1e-3f, momentum = 0;
    const char *svg = NULL;
    opt t[48];
    int n = 0;
    t[n++] = (opt){"--widths", OPT_STRINGS, &widths_arg, "widths to sweep, e.g. 256,512,1024 (default 256,512,1024)", NULL, 0};
    t[n++] = (opt){"--batch-sizes", OPT_STRINGS, &batches_arg, "batch sizes to sweep (default 256)", "--batch-size", 0};
    t[n++] = opt_num("--depth", OPT_INT, &depth, "Linear layers (default 4)", NULL, 1.0, 1000.0);
    t[n++] = opt_num("--num-classes", OPT_INT, &classes, "output width (default: each width)", "--classes", 1.0, 1048576.0);
    t[n++] = opt_num("--lr", OPT_FLOAT, &lr, "SGD learning rate (default 1e-3)", NULL, 1e-38, 1e+38);
    t[n++] = opt_num("--momentum", OPT_FLOAT, &momentum, "SGD momentum (default 0)", NULL, 0.0, 1.0);
    t[n++] = (opt){"--svg", OPT_STRING, &svg, "write the speed-up plot (SVG) here", NULL, 0};
    /* --precisions and --require-efficiency do not apply: the sweep always compares fp8 with
     * the baseline, and a sweep is expected to contain losing points. */
    opt shared[32];
    int ns = bench_flags_options(&f, shared, 0);
    for (int i = 0; i < ns; i++)
        if (strcmp(shared[i].name, "--precisions") && strcmp(shared[i].name, "--require-efficiency")) t[n++] = shared[i];
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn bench crossover --widths W,... [options]",
                  "Run the linear benchmark (fp8 against --baseline-precision) at each width and batch\n"
                  "size, report the speed-ups, where FP8 starts to win for training and for inference\n"
                  "(every larger width in the sweep must win too), a recommendation per layer size,\n"
                  "and write JSON (--output) and an SVG plot (--svg).",
                  t, n);
        return 0;
    }
    args_parse("bench crossover", t, n, argc, argv, 3);
    cJSON *md = bench_metadata(argc, argv);
    static const char *def_w[] = {"256,512,1024"}, *def_b[] = {"256"};
    if (!widths_arg.n) widths_arg = (str_list){def_w, 1};
    if (!batches_arg.n) batches_arg = (str_list){def_b, 1};
    int widths[MAX_POINTS], batches[MAX_POINTS];
    int nw = sort_unique(widths, bench_int_list("--widths", &widths_arg, widths, MAX_POINTS));
    int nbt = sort_unique(batches, bench_int_list("--batch-sizes", &batches_arg, batches, MAX_POINTS));
    if (nw * nbt > MAX_POINTS) die_usage("bench crossover: at most %d (batch, width) points", MAX_POINTS);
    if (depth < 1 || depth > 1000) die_usage("bench crossover: --depth must be between 1 and 1000, got %d", depth);
    if (classes < 0) die_usage("bench crossover: --num-classes must be positive");
    if (!(lr > 0) || momentum < 0 || momentum >= 1) die_usage("bench crossover: --lr must be positive and --momentum in [0, 1)");
    for (int i = 0; i < nw; i++)
        if (widths[i] % 16 || widths[i] > (1 << 16)) die_usage("bench crossover: fp8 needs widths divisible by 16 (got %d)", widths[i]);
    for (int i = 0; i < nbt; i++)
        if (batches[i] % 16) die_usage("bench crossover: fp8 needs batch sizes divisible by 16 (got %d)", batches[i]);
    if (classes % 16) die_usage("bench crossover: fp8 needs --num-classes divisible by 16 (got %d)", classes);
    snn_precision_config bc;
    if (!f.baseline || snn_precision_config_parse(f.baseline, NULL, NULL, NULL, NULL, &bc) != SNN_OK || bc.mode == SNN_PRECISION_FP8)
        die_usage("bench crossover: --baseline-precision must be fp32, fp16 or bf16");
    const char *pair[2] = {f.baseline, "fp8"};
    f.precisions = (str_list){pair, 2};
    int cuda_device;
    {
        bench_suite probe = {0}; /* validate every flag before the first point runs */
        bench_flags_check("crossover", &f, &probe);
        cuda_device = probe.cuda_device;
        /* on the GPU every point runs on the engine, which takes any of these sizes; the
         * hand-built reference is skipped (and says why) where it does not */
        bench_suite_free(&probe);
    }
    bench_converge_data data = {0};
    bench_converge_load(&f, &data);

    point pts[MAX_POINTS];
    int np = 0;
    cJSON *points = cJSON_CreateArray(), *failures = cJSON_CreateArray();
    char recipe_name[32] = "auto";
    for (int b = 0; b < nbt; b++) {
        for (int i = 0; i < nw; i++) {
            bench_suite s = {0};
            f.precisions = (str_list){pair, 2};
            bench_flags_check("crossover", &f, &s);
            int cls = classes ? classes : widths[i];
            s.w = (bench_workload){.kind = BENCH_LINEAR, .T = 1, .N = batches[b], .in = widths[i], .width = widths[i],
                                   .depth = depth, .classes = cls, .lr = lr, .momentum = momentum, .seed = f.seed,
                                   .warmup = f.warmup, .training_steps = f.training_steps,
                                   .inference_steps = f.inference_steps};
            if (!f.quiet) fprintf(stderr, "crossover: batch %d, width %d\n", batches[b], widths[i]);
            bench_suite_run(&s);
            if (f.converge)
                for (int k = 0; k < s.P; k++) s.res[k].converge = bench_converge_run(&s.w, &s.res[k].cfg, &f, &data, s.quiet);
            cJSON *eff = bench_efficiency(&s, f.baseline, f.min_training_speedup, f.min_inference_speedup, 0);
            const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(eff, "comparisons"), 0);
            point *p = &pts[np++];
            *p = (point){batches[b], widths[i], cls, NAN, NAN};
            cJSON *pt = cJSON_CreateObject();
            cJSON_AddNumberToObject(pt, "batch_size", p->batch);
            cJSON_AddNumberToObject(pt, "width", p->width);
            cJSON_AddNumberToObject(pt, "num_classes", cls);
            if (c0) {
                p->train_x = cJSON_GetObjectItemCaseSensitive(c0, "training_speedup")->valuedouble;
                p->infer_x = cJSON_GetObjectItemCaseSensitive(c0, "inference_speedup")->valuedouble;
                const cJSON *rn = cJSON_GetObjectItemCaseSensitive(c0, "fp8_recipe");
                if (cJSON_IsString(rn)) snprintf(recipe_name, sizeof recipe_name, "%s", rn->valuestring);
                const char *keys[] = {"fp8_recipe", "training_speedup", "inference_speedup", "training_memory_ratio",
                                      "inference_memory_ratio", "training_verdict", "inference_verdict"};
                for (int k = 0; k < 7; k++)
                    cJSON_AddItemToObject(pt, keys[k], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(c0, keys[k]), 1));
            }
            char rec[96];
            cJSON_AddStringToObject(pt, "recommendation", recommend(p->train_x, p->infer_x, f.min_training_speedup,
                                                                    f.min_inference_speedup, f.baseline, rec, sizeof rec));
            cJSON *rs = cJSON_AddArrayToObject(pt, "results");
            for (int k = 0; k < s.P; k++) cJSON_AddItemToArray(rs, bench_result_json(&s.res[k]));
            const cJSON *it;
            cJSON_ArrayForEach(it, s.failures) {
                char msg[300];
                snprintf(msg, sizeof msg, "batch %d width %d: %s", p->batch, p->width, it->valuestring);
                cJSON_AddItemToArray(failures, cJSON_CreateString(msg));
            }
            cJSON_AddItemToArray(points, pt);
            cJSON_Delete(eff);
            bench_suite_free(&s);
        }
    }
    bench_converge_free(&data);

    cJSON *cross = cJSON_CreateArray();
    int table = !f.output || strcmp(f.output, "-");
    if (table) {
        printf("crossover: fp8 (%s) vs %s, linear depth %d, %d trial(s), win = %.2fx training / %.2fx inference\n",
               recipe_name, f.baseline, depth, f.trials, f.min_training_speedup, f.min_inference_speedup);
        printf("%7s %7s %10s %10s  %s\n", "batch", "width", "train x", "infer x", "recommendation");
    }
    for (int b = 0; b < nbt; b++) {
        point sub[MAX_POINTS];
        int m = 0;
        for (int i = 0; i < np; i++)
            if (pts[i].batch == batches[b]) sub[m++] = pts[i];
        for (int i = 0; i < m && table; i++) {
            char rec[96];
            printf("%7d %7d %10.3f %10.3f  %s\n", sub[i].batch, sub[i].width, sub[i].train_x, sub[i].infer_x,
                   recommend(sub[i].train_x, sub[i].infer_x, f.min_training_speedup, f.min_inference_speedup, f.baseline,
                             rec, sizeof rec));
        }
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "batch_size", batches[b]);
        char lt[160], li[160];
        cJSON_AddItemToObject(c, "training", crossover_json(sub, m, 1, f.min_training_speedup, lt, sizeof lt));
        cJSON_AddItemToObject(c, "inference", crossover_json(sub, m, 0, f.min_inference_speedup, li, sizeof li));
        cJSON_AddItemToArray(cross, c);
        if (table) printf("batch %d: %s; %s\n", batches[b], lt, li);
    }
    if (svg) write_svg(svg, pts, np, batches, nbt, f.min_training_speedup, f.min_inference_speedup, f.baseline,
                       recipe_name, depth, cuda_device);

    bench_metadata_end(md);
    if (cuda_device >= 0) bench_cuda_metadata(md, cuda_device);
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddItemToObject(doc, "metadata", md);
    cJSON *c = cJSON_AddObjectToObject(doc, "config");
    cJSON_AddStringToObject(c, "workload", "linear");
    char devname[32];
    cJSON_AddStringToObject(c, "device", bench_device_name(cuda_device, devname, sizeof devname));
    cJSON_AddItemToObject(c, "widths", cJSON_CreateIntArray(widths, nw));
    cJSON_AddItemToObject(c, "batch_sizes", cJSON_CreateIntArray(batches, nbt));
    cJSON_AddNumberToObject(c, "depth", depth);
    if (classes) cJSON_AddNumberToObject(c, "num_classes", classes);
    else cJSON_AddStringToObject(c, "num_classes", "width");
    cJSON_AddStringToObject(c, "baseline_precision", f.baseline);
    cJSON_AddStringToObject(c, "fp8_recipe", f.recipe ? f.recipe : "auto");
    cJSON_AddStringToObject(c, "fp8_recipe_resolved", recipe_name); /* the library's resolution, as in snn train */
    cJSON_AddNumberToObject(c, "trials", f.trials);
    cJSON_AddNumberToObject(c, "warmup", f.warmup);
    cJSON_AddNumberToObject(c, "training_steps", f.training_steps);
    cJSON_AddNumberToObject(c, "inference_steps", f.inference_steps);
    cJSON_AddStringToObject(c, "trial_order", "rotated");
    cJSON_AddStringToObject(c, "timing_scope", "steady_state_excludes_precision_conversion");
    cJSON_AddNumberToObject(c, "lr", bench_f2d(lr));
    cJSON_AddNumberToObject(c, "momentum", bench_f2d(momentum));
    cJSON_AddNumberToObject(c, "seed", (double)f.seed);
    cJSON_AddNumberToObject(c, "min_training_speedup", bench_f2d(f.min_training_speedup));
    cJSON_AddNumberToObject(c, "min_inference_speedup", bench_f2d(f.min_inference_speedup));
    cJSON_AddStringToObject(c, "crossover_rule", "smallest width from which every larger width in the sweep reaches the threshold");
    if (f.converge) cJSON_AddStringToObject(c, "converge", "fashion-mnist");
    cJSON_AddItemToObject(doc, "points", points);
    cJSON_AddItemToObject(doc, "crossovers", cross);
    if (svg) cJSON_AddStringToObject(doc, "svg", svg);
    cJSON_AddItemToObject(doc, "failures", cJSON_Duplicate(failures, 1));
    cJSON_AddBoolToObject(doc, "passed", cJSON_GetArraySize(failures) == 0);
    bench_write_json(f.output, doc);
    int rc = bench_exit_code(failures);
    cJSON_Delete(doc);
    cJSON_Delete(failures);
    return rc;
}
