/* Shared by the GPU tests: the context, the test-local random state, host and device
 * allocation that exits 2 on failure (device buffers filled with 0xFF bytes: NaN in every
 * floating type, so unwritten outputs show), and the status check. */
#ifndef SNN_CUDA_TEST_UTIL_H
#define SNN_CUDA_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "snn/cuda.h"

static snn_cuda *g;
static uint64_t rng;

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) exit(2);
    return p;
}
static inline void *dalloc(size_t bytes) {
    void *p = NULL;
    if (!bytes) bytes = 4;
    if (snn_cuda_alloc(g, bytes, &p) != SNN_OK) {
        fprintf(stderr, "device allocation failed: %s\n", snn_last_error());
        exit(2);
    }
    snn_cuda_memset(g, p, 0xFF, bytes);
    return p;
}
static inline void *dcopy(const void *h, size_t bytes) {
    void *p = dalloc(bytes);
    snn_cuda_upload(g, p, h, bytes);
    return p;
}
#define OK(x) CHECK_MSG((x) == SNN_OK, "%s: %s", #x, snn_last_error())

#endif
