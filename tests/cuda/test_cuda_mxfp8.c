/* snn_cuda_mxfp8_qdq (the GPU runner's exact mxfp8 emulation) against the CPU's
 * snn_fp8_prepare_operand with the mxfp8 recipe (out_qdq), bit for bit: row-wise (1x32) and
 * column-wise (32x1) blocks, E4M3 (input role) and E5M2 (gradient role under hybrid), odd
 * shapes with partial blocks at both edges, the Conv1d source layout, and the raw copy used
 * for spikes. The data mixes per-block magnitudes from 2^-140 (blocks whose E8M0 scale
 * clamps at 2^-127, with subnormal results) to 2^120, a zero block, a NaN and an inf.
 * Exit 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_mxfp8.h"
#include "harness.h"
#include "precision/fp8.h"
#include "snn/cuda.h"
#include "snn/precision.h"

static snn_cuda *g;
static uint64_t rng;

static int same(float a, float b) {
    if (isnan(a) && isnan(b)) return 1;
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

/* x [rows][cols]: uniform values times 2^(base + delta): base random per 32x32 region over
 * 2^-135 .. 2^119, delta in -3 .. 3 per 8x8 patch, so 1x32 and 32x1 blocks both see mixed
 * but comparable magnitudes (most elements survive the block's scale); a zero block; and a
 * region near 2^-128 (columns 32 .. 63 of the last 32 rows: whole 1x32 blocks and, at the
 * bottom, 32x1 blocks) where the E8M0 scale bottoms out at 2^-127 and results are subnormal. */
static void fill(float *x, int rows, int cols) {
    snn_test_fill_uniform(x, (size_t)rows * cols, -1.0f, 1.0f, &rng);
    const uint32_t salt = (uint32_t)rng;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint32_t region = (uint32_t)((r / 32) * 7 + (c / 32) * 13), patch = (uint32_t)((r / 8) * 5 + (c / 8) * 3);
            int base = (int)((region * 2654435761u + salt) % 255u) - 135;
            int delta = (int)((patch * 40503u + salt) % 7u) - 3;
            x[(size_t)r * cols + c] = ldexpf(x[(size_t)r * cols + c], base + delta);
        }
    for (int r = 0; r < rows && r < 32; r++) /* a zero block (column 0 .. 31 of rows 0 .. 31) */
        for (int c = 0; c < cols && c < 32; c++) x[(size_t)r * cols + c] = 0.0f;
    for (int r = rows > 32 ? rows - 32 : 0; r < rows; r++) /* near 2^-128 */
        for (int c = 32; c < cols && c < 64; c++)
            x[(size_t)r * cols + c] = ldexpf(0.5f + 0.5f * (float)((r * 7 + c * 3) % 8) / 8.0f, -128);
    x[(size_t)(rows / 2) * cols + cols / 2] = NAN;
    x[(size_t)(rows - 1) * cols + cols - 1] = INFINITY;
}

static void check_case(const snn_fp8_recipe_params *p, snn_fp8_role role, int colwise, int rows, int cols,
                       int L, int raw) {
    const size_t n = (size_t)rows * cols;
    float *x = malloc(n * 4), *src = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
    fill(x, rows, cols);
    /* the device source: token-major x, or its Conv1d layout [rows/L][cols][L] */
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            src[L == 1 ? (size_t)r * cols + c : ((size_t)(r / L) * cols + c) * L + r % L] = x[(size_t)r * cols + c];
    snn_test_poison(want, n);
    snn_test_poison(got, n);
    snn_dtype t = snn_fp8_role_dtype(p, role);
    if (raw) memcpy(want, x, n * 4);
    else CHECK(snn_fp8_prepare_operand(NULL, role, p, colwise ? SNN_FP8_COLWISE : SNN_FP8_ROWWISE, x, rows, cols,
                                       want, NULL, NULL) == SNN_OK);
    void *ds = NULL, *dd = NULL;
    CHECK(snn_cuda_alloc(g, n * 4, &ds) == SNN_OK && snn_cuda_alloc(g, n * 4, &dd) == SNN_OK);
    CHECK(snn_cuda_upload(g, ds, src, n * 4) == SNN_OK);
    CHECK(snn_cuda_upload(g, dd, got, n * 4) == SNN_OK); /* poisoned */
    CHECK(snn_cuda_mxfp8_qdq(g, t, colwise, ds, rows, cols, L, raw, dd) == SNN_OK);
    CHECK(snn_cuda_synchronize(g) == SNN_OK);
    CHECK(snn_cuda_download(g, got, dd, n * 4) == SNN_OK);
    size_t bad = 0, first = n, nonzero = 0, tiny = 0;
    for (size_t i = 0; i < n; i++) {
        if (!same(want[i], got[i]) && bad++ == 0) first = i;
        if (want[i] != 0.0f && isfinite(want[i])) nonzero++;
        if (want[i] != 0.0f && fabsf(want[i]) < 1e-37f) tiny++;
    }
    const char *tn = t == SNN_F8E4M3 ? "e4m3" : "e5m2";
    printf("%-9s %s %dx%d L=%d%s: %zu mismatches, %zu nonzero, %zu below 1e-37\n", colwise ? "colwise" : "rowwise",
           tn, rows, cols, L, raw ? " raw" : "", bad, nonzero, tiny);
    CHECK_MSG(bad == 0, "%s %s %dx%d L=%d: %zu mismatches, first at %zu: cpu %a gpu %a", colwise ? "colwise" : "rowwise",
              tn, rows, cols, L, bad, first, first < n ? (double)want[first] : 0.0, first < n ? (double)got[first] : 0.0);
    CHECK_MSG(nonzero > n / 2, "too few nonzero values (%zu of %zu): the data does not test much", nonzero, n);
    if (!raw) CHECK_MSG(tiny > 0, "no subnormal-range results: the 2^-127 scale path is untested");
    snn_cuda_free(ds);
    snn_cuda_free(dd);
    free(x); free(src); free(want); free(got);
}

int main(void) {
    rng = snn_test_seed();
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        printf("no CUDA device: %s (skipped)\n", snn_last_error());
        return 77;
    }
    snn_precision_config pc;
    CHECK(snn_precision_config_parse("fp8", "mxfp8", NULL, NULL, NULL, &pc) == SNN_OK);
    snn_fp8_recipe_params p;
    CHECK(snn_fp8_recipe_params_init(&p, &pc, 9, 0) == SNN_OK);
    CHECK(p.recipe == SNN_FP8_RECIPE_MXFP8 && p.block_len == 32);
    /* gradients in E5M2 too (the hybrid format), whatever the default format is */
    snn_fp8_recipe_params ph = p;
    ph.bwd_dtype = SNN_F8E5M2;
    CHECK(snn_fp8_role_dtype(&p, SNN_FP8_ROLE_INPUT) == SNN_F8E4M3);
    for (int colwise = 0; colwise < 2; colwise++)
        for (int role = 0; role < 3; role += 2) {
            const snn_fp8_recipe_params *pp = role == SNN_FP8_ROLE_GRAD ? &ph : &p;
            check_case(pp, (snn_fp8_role)role, colwise, 77, 101, 1, 0);
            check_case(pp, (snn_fp8_role)role, colwise, 130, 45, 1, 0);
            check_case(pp, (snn_fp8_role)role, colwise, 75, 70, 5, 0); /* Conv1d layout */
        }
    check_case(&p, SNN_FP8_ROLE_INPUT, 0, 75, 70, 5, 1);
    check_case(&p, SNN_FP8_ROLE_INPUT, 0, 40, 64, 1, 1);
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_mxfp8");
}
