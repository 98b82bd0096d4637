/* Spike-aware FP8 (snn_precision_set_spike_fp8, include/snn/prepare.h): a converted GEMM
 * whose input comes straight from a neuron takes the spikes as E4M3 with unit scale,
 * skipping the amax pass and the quantisation of that operand. Spikes are 0/1, exact in
 * E4M3 under every recipe's scale, so the claim is that training is BIT-identical with
 * the path on and off.
 *
 * For each recipe (delayed, current, block, mxfp8): two fcsnn (hidden 256, depth 3) from
 * the same seed, prepared for fp8, one with the spike path switched off; identical
 * forward + snn_precision_backward (AdamW) steps on fresh inputs; outputs, gradients and
 * updated weights must be bit-identical at every step. Also checked: the path is really
 * taken (spike-input modules counted, their input operand state untouched with the path
 * on, fed with the path off), the neurons do spike (so the operand is not all zeros).
 *
 * Timing (printed, not asserted): per step, the FP8 preparation (amax + quantisation,
 * forward row-wise and wgrad column-wise) of the spike operands that the path skips,
 * timed on the model's own spikes, and the whole training step with the path on and off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "neuron/neuron_module.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"
#include "snn/loss.h"
#include "snn/prepare.h"
#include "snn/snn.h"

enum { T = 4, N = 32, IN = 128, HID = 256, DEPTH = 3, CLASSES = 16, STEPS = 4, TIMED = 15 };

static uint64_t rs;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static snn_model *make(uint64_t seed, const char *recipe, snn_precision **p, snn_optimizer **opt) {
    snn_fcsnn_opts fo = {.in_features = IN, .hidden = HID, .depth = DEPTH, .classes = CLASSES};
    snn_model *m = NULL;
    CHECK_MSG(snn_fcsnn_create(&fo, seed, &m) == SNN_OK, "%s", snn_last_error());
    snn_precision_config c;
    CHECK(snn_precision_config_parse("fp8", recipe, NULL, NULL, NULL, &c) == SNN_OK);
    CHECK_MSG(snn_prepare_model_for_precision(m, "cpu", &c, p) == SNN_OK, "prepare %s: %s", recipe, snn_last_error());
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 1e-3f;
    CHECK(snn_optimizer_create_for_model(&oo, m, opt) == SNN_OK);
    CHECK(snn_model_plan(m, T, N) == SNN_OK);
    /* the default init leaves the deeper layers silent (an all-zero spike operand proves
     * little): larger weights, the same in both models, make every layer fire */
    float *w = snn_model_params(m);
    for (size_t i = 0; i < snn_model_num_params(m); i++) w[i] *= 6.0f;
    return m;
}

/* One training step; returns the step time in ms. *y receives the output. */
static double step(snn_model *m, snn_precision *p, snn_optimizer *opt, const float *x, const int32_t *lab,
                   float *yout, float *dy) {
    double t0 = now_ms();
    const float *y;
    CHECK(snn_model_forward(m, x, 1, &y) == SNN_OK);
    float loss;
    CHECK(snn_loss_cross_entropy_mean_t(y, lab, T, N, CLASSES, &loss, dy, NULL) == SNN_OK);
    CHECK_MSG(snn_precision_backward(p, dy, opt, -1, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
    double t1 = now_ms();
    memcpy(yout, y, sizeof(float) * (size_t)T * N * CLASSES);
    return t1 - t0;
}

/* The neurons of the fcsnn, in order (children of "layers"). */
static int neurons_of(snn_model *m, snn_module **out) {
    snn_module *layers = m->root->children[0];
    int k = 0;
    for (int i = 0; i < layers->n_children; i++)
        if (snn_module_is_neuron(layers->children[i])) out[k++] = layers->children[i];
    return k;
}

static void run_recipe(const char *recipe, uint64_t seed, double *t_prep, double *t_on, double *t_off) {
    snn_precision *pa = NULL, *pb = NULL;
    snn_optimizer *oa = NULL, *ob = NULL;
    snn_model *a = make(seed, recipe, &pa, &oa), *b = make(seed, recipe, &pb, &ob);
    CHECK(snn_precision_set_spike_fp8(pb, 0) == SNN_OK);
    int nspk = snn_precision_spike_fp8_modules(pa);
    CHECK_MSG(nspk == DEPTH, "%s: %d spike-input modules, expected %d (the Linear after each LIF)", recipe, nspk, DEPTH);
    CHECK(snn_precision_spike_fp8_modules(pb) == 0);
    size_t nx = (size_t)T * N * IN, ny = (size_t)T * N * CLASSES, np = snn_model_num_params(a);
    CHECK(np == snn_model_num_params(b));
    float *x = malloc(nx * sizeof(float)), *ya = malloc(ny * sizeof(float)), *yb = malloc(ny * sizeof(float));
    float *dya = malloc(ny * sizeof(float)), *dyb = malloc(ny * sizeof(float));
    int32_t lab[N];
    size_t spikes[DEPTH] = {0}, total = 0;
    for (int s = 0; s < STEPS + TIMED; s++) {
        snn_test_fill_uniform(x, nx, -1.0f, 4.0f, &rs);
        for (int i = 0; i < N; i++) lab[i] = (int32_t)((rs >> (i % 32)) % CLASSES) ^ (s & 1);
        snn_test_poison(ya, ny), snn_test_poison(yb, ny);
        /* alternate which model goes first, so neither always runs on a warm cache */
        double ta, tb;
        if (s % 2) {
            tb = step(b, pb, ob, x, lab, yb, dyb);
            ta = step(a, pa, oa, x, lab, ya, dya);
        } else {
            ta = step(a, pa, oa, x, lab, ya, dya);
            tb = step(b, pb, ob, x, lab, yb, dyb);
        }
        if (s >= STEPS) t_on[s - STEPS] = ta, t_off[s - STEPS] = tb;
        CHECK_MSG(!memcmp(ya, yb, ny * sizeof(float)), "%s step %d: outputs differ with the spike path", recipe, s);
        CHECK_MSG(!memcmp(dya, dyb, ny * sizeof(float)), "%s step %d: dL/dy differs", recipe, s);
        CHECK_MSG(!memcmp(snn_model_grads(a), snn_model_grads(b), np * sizeof(float)),
                  "%s step %d: gradients differ with the spike path", recipe, s);
        CHECK_MSG(!memcmp(snn_model_params(a), snn_model_params(b), np * sizeof(float)),
                  "%s step %d: updated weights differ with the spike path", recipe, s);
        snn_module *nr[DEPTH];
        CHECK(neurons_of(a, nr) == DEPTH);
        for (int l = 0; l < DEPTH; l++) {
            const float *h = snn_neuron_module_h_seq(nr[l]);
            float vth = snn_neuron_module_opts(nr[l])->v_threshold;
            for (size_t i = 0; h && i < (size_t)T * N * HID; i++) spikes[l] += h[i] >= vth;
        }
        total += (size_t)T * N * HID;
    }
    for (int l = 0; l < DEPTH; l++) {
        double rate = (double)spikes[l] / (double)total;
        if (getenv("SPK_VERBOSE")) fprintf(stderr, "%s layer %d rate %.4f\n", recipe, l, rate);
        CHECK_MSG(rate > 0.01 && rate < 0.99, "%s: neuron layer %d spike rate %.4f: the spike operand is degenerate",
                  recipe, l, rate);
    }
    /* the path is taken: with it on, the spike operand's state never saw a quantisation
     * (last_amax stays 0); with it off, the generic path recorded the spikes' amax, 1 */
    for (int i = 0; i < pa->n_mods; i++) {
        if (!pa->mods[i].spike_input) continue;
        CHECK_MSG(pa->mods[i].sx.last_amax == 0.0f, "%s %s: the spike operand was quantised with the path on", recipe,
                  pa->mods[i].m->name);
        CHECK_MSG(pb->mods[i].sx.last_amax == 1.0f, "%s %s: spike operand amax %g with the path off", recipe,
                  pb->mods[i].m->name, pb->mods[i].sx.last_amax);
    }

    /* timing: the preparation the path skips, on the model's own spikes */
    snn_module *nr[DEPTH];
    neurons_of(b, nr);
    int rows = T * N;
    size_t ne = (size_t)rows * HID;
    float *spk = malloc(sizeof(float) * ne * DEPTH), *q = malloc(sizeof(float) * ne);
    for (int l = 0; l < DEPTH; l++) {
        const float *h = snn_neuron_module_h_seq(nr[l]);
        float vth = snn_neuron_module_opts(nr[l])->v_threshold;
        for (size_t i = 0; i < ne; i++) spk[l * ne + i] = h[i] >= vth ? 1.0f : 0.0f;
    }
    double tp[TIMED];
    for (int r = 0; r < TIMED; r++) {
        snn_fp8_tensor_state st[DEPTH];
        for (int l = 0; l < DEPTH; l++) CHECK(snn_fp8_state_init(&st[l], &pb->fp8, SNN_FP8_ROLE_INPUT) == SNN_OK);
        double t0 = now_ms();
        for (int l = 0; l < DEPTH; l++) {
            CHECK(snn_fp8_prepare_operand(&st[l], SNN_FP8_ROLE_INPUT, &pb->fp8, SNN_FP8_ROWWISE, spk + l * ne, rows, HID,
                                          q, NULL, NULL) == SNN_OK);
            CHECK(snn_fp8_prepare_operand(&st[l], SNN_FP8_ROLE_INPUT, &pb->fp8, SNN_FP8_COLWISE, spk + l * ne, rows,
                                          HID, q, NULL, NULL) == SNN_OK);
        }
        tp[r] = now_ms() - t0;
        for (int l = 0; l < DEPTH; l++) snn_fp8_state_free(&st[l]);
        /* exactness of the generic path on spikes (the reason the results match) */
        CHECK(!memcmp(q, spk + (DEPTH - 1) * ne, sizeof(float) * ne));
    }
    *t_prep = median(tp, TIMED);
    free(spk), free(q);
    free(x), free(ya), free(yb), free(dya), free(dyb);
    snn_optimizer_free(oa), snn_optimizer_free(ob);
    snn_precision_free(pa), snn_precision_free(pb);
    snn_model_free(a), snn_model_free(b);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rs = seed;
    const char *recipes[4] = {"delayed", "current", "block", "mxfp8"};
    fprintf(stderr, "fcsnn in %d hidden %d depth %d, T %d, N %d (GEMM rows %d):\n", IN, HID, DEPTH, T, N, T * N);
    for (int r = 0; r < 4; r++) {
        double prep, on[TIMED], off[TIMED];
        run_recipe(recipes[r], seed + (uint64_t)r, &prep, on, off);
        double mon = median(on, TIMED), moff = median(off, TIMED), lon = on[0], loff = off[0];
        fprintf(stderr,
                "  %-7s spike-operand FP8 preparation skipped: %.3f ms/step (median of %d); training step median "
                "%.2f ms with the path, %.2f ms without (%.1f%% saved), fastest %.2f vs %.2f ms; the skipped "
                "preparation is %.1f%% of the median step without the path\n",
                recipes[r], prep, TIMED, mon, moff, 100.0 * (moff - mon) / moff, lon, loff, 100.0 * prep / moff);
    }
    return snn_test_finish("test_spike_fp8");
}
