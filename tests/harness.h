/* Minimal test harness: CHECK counts failures and keeps going; main returns the count. */
#ifndef SNN_TEST_HARNESS_H
#define SNN_TEST_HARNESS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int snn_test_failures;
extern int snn_test_checks;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        snn_test_checks++;                                                                       \
        if (!(cond)) {                                                                           \
            snn_test_failures++;                                                                 \
            if (snn_test_failures <= 20)                                                         \
                fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);         \
        }                                                                                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                     \
    do {                                                                                         \
        snn_test_checks++;                                                                       \
        if (!(cond)) {                                                                           \
            snn_test_failures++;                                                                 \
            if (snn_test_failures <= 20) {                                                       \
                fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);         \
                fprintf(stderr, __VA_ARGS__);                                                    \
                fputc('\n', stderr);                                                             \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* Seed for fresh random inputs: SNN_TEST_SEED from the environment, else time-based;
 * printed so a failure can be replayed. */
uint64_t snn_test_seed(void);
/* Fill with uniform values in [lo, hi) from a test-local generator. */
void snn_test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t *state);
/* Fill with a NaN pattern so unwritten outputs are caught. */
void snn_test_poison(float *x, size_t n);
/* max |a-b| / max(|b|, floor) over n values. */
double snn_test_max_rel(const float *a, const float *b, size_t n, double floor);
int snn_test_finish(const char *name);

#endif
