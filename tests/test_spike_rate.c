/* snn_model_spike_rates: each neuron's rate is the mean of its output over the batch. The
 * last neuron's output is the model's output; an inner neuron's output is the output of a
 * second model holding the same first layers (parameters are drawn in tree order from the
 * seed, so the shared prefix gets the same weights). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/snn.h"

enum { T = 3, N = 5, IN = 8, H = 16, OUT = 6 };

static snn_model *build(int full, int residual) {
    snn_module *seq = NULL, *l = NULL, *n = NULL;
    if (snn_sequential_create(&seq) != SNN_OK) return NULL;
    snn_linear_create(IN, H, 1, &l);
    snn_sequential_add(seq, l);
    snn_neuron_create(NULL, &n);
    snn_sequential_add(seq, n);
    if (full) {
        snn_linear_create(H, OUT, 1, &l);
        snn_sequential_add(seq, l);
        snn_neuron_create(NULL, &n);
        if (residual) {
            snn_module *r = NULL;
            snn_residual_create(n, &r);
            n = r;
        }
        snn_sequential_add(seq, n);
    }
    snn_model *m = NULL;
    int shape[1] = {IN};
    if (snn_model_create_from_module(seq, 1, shape, 42, &m) != SNN_OK) return NULL;
    if (snn_model_plan(m, T, N) != SNN_OK) {
        snn_model_free(m);
        return NULL;
    }
    return m;
}

static double mean(const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += y[i];
    return s / (double)n;
}

int main(void) {
    uint64_t seed = snn_test_seed();
    float x[T * N * IN];
    snn_test_fill_uniform(x, T * N * IN, -4.0f, 4.0f, &seed);

    snn_model *m = build(1, 0), *head = build(0, 0);
    CHECK(m && head);
    if (!m || !head) return snn_test_finish("test_spike_rate");
    snn_spike_rate r[4];
    int n = -1;
    CHECK(snn_model_spike_rates(m, r, 4, &n) == SNN_E_STATE); /* no forward yet */
    CHECK(n == 0);
    for (int training = 0; training < 2; training++) {
        const float *y = NULL, *yh = NULL;
        CHECK(snn_model_forward(m, x, training, &y) == SNN_OK);
        double want_last = mean(y, T * N * OUT);
        CHECK(snn_model_forward(head, x, training, &yh) == SNN_OK);
        double want_first = mean(yh, T * N * H);
        CHECK(snn_model_spike_rates(m, r, 4, &n) == SNN_OK);
        CHECK(n == 2);
        CHECK(!strcmp(r[0].name, "1") && !strcmp(r[1].name, "3"));
        CHECK(!strcmp(r[0].kind, "LIFNode") && !strcmp(r[1].kind, "LIFNode"));
        CHECK(r[0].numel == (size_t)T * N * H && r[1].numel == (size_t)T * N * OUT);
        CHECK_MSG(fabs(r[0].rate - want_first) < 1e-12, "%g vs %g", r[0].rate, want_first);
        CHECK_MSG(fabs(r[1].rate - want_last) < 1e-12, "%g vs %g", r[1].rate, want_last);
        CHECK(want_first > 0 && want_first < 1); /* the input is strong enough to make some spike */
    }
    /* the count without room for entries */
    CHECK(snn_model_spike_rates(m, NULL, 0, &n) == SNN_OK && n == 2);
    CHECK(snn_model_spike_rates(m, NULL, 1, &n) == SNN_E_INVALID);
    CHECK(snn_model_spike_rates(NULL, r, 4, &n) == SNN_E_INVALID);
    /* only the first entry asked for */
    CHECK(snn_model_spike_rates(m, r, 1, &n) == SNN_OK && n == 2 && !strcmp(r[0].name, "1"));
    /* planning for another size drops the outputs */
    CHECK(snn_model_plan(m, T + 1, N) == SNN_OK);
    CHECK(snn_model_spike_rates(m, r, 4, &n) == SNN_E_STATE);
    snn_model_free(m);
    snn_model_free(head);

    /* a neuron inside a Residual: its output is not kept apart */
    snn_model *rm = build(1, 1);
    CHECK(rm != NULL);
    if (rm) {
        const float *y = NULL;
        CHECK(snn_model_forward(rm, x, 1, &y) == SNN_OK);
        CHECK(snn_model_spike_rates(rm, r, 4, &n) == SNN_OK);
        CHECK(n == 2 && isfinite(r[0].rate) && isnan(r[1].rate));
        snn_model_free(rm);
    }

    /* the zoo FC-SNN: depth LIF layers, each rate in [0, 1] */
    snn_fcsnn_opts fo = {.in_features = 32, .hidden = 32, .depth = 2, .classes = 10, .tau = 2.0f};
    snn_model *fm = NULL;
    CHECK(snn_fcsnn_create(&fo, 7, &fm) == SNN_OK);
    if (fm) {
        float xf[2 * 4 * 32];
        snn_test_fill_uniform(xf, 2 * 4 * 32, -1.0f, 1.0f, &seed);
        const float *y = NULL;
        CHECK(snn_model_plan(fm, 2, 4) == SNN_OK);
        CHECK(snn_model_forward(fm, xf, 1, &y) == SNN_OK);
        CHECK(snn_model_spike_rates(fm, r, 4, &n) == SNN_OK);
        CHECK(n == 2);
        for (int i = 0; i < n && i < 4; i++) CHECK(r[i].rate >= 0 && r[i].rate <= 1);
        snn_model_free(fm);
    }
    return snn_test_finish("test_spike_rate");
}
