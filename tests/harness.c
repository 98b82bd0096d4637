#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

int snn_test_failures = 0;
int snn_test_checks = 0;

uint64_t snn_test_seed(void) {
    const char *e = getenv("SNN_TEST_SEED");
    uint64_t s = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    fprintf(stderr, "test seed: SNN_TEST_SEED=%llu\n", (unsigned long long)s);
    return s;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void snn_test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state) {
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(state) >> 40) / 16777216.0; /* 24 bits: exact in float */
        float v = (float)(lo + (hi - lo) * u);
        /* rounding to float can reach hi; the interval is half-open */
        x[i] = v < hi ? v : nextafterf(hi, lo);
    }
}

void snn_test_poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

double snn_test_max_rel(const float *a, const float *b, size_t n, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double r = d / fmax(fabs((double)b[i]), floor);
        if (isnan(a[i]) || isnan(b[i])) r = INFINITY;
        if (r > worst) worst = r;
    }
    return worst;
}

int snn_test_finish(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failures\n", name, snn_test_checks, snn_test_failures);
    return snn_test_failures ? 1 : 0;
}
