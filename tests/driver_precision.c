/* Driver for tests/oracle_precision.py: one converted FP8 module (the model's root), forward
 * and backward on data from a file, results to a file.
 *
 *   driver_precision linear|conv1d RECIPE B K NOUT L IN.bin OUT.bin
 *
 * linear: Linear(K, NOUT) with bias, input [B][K] (L must be 1);
 * conv1d: Conv1d(K, NOUT, kernel 1) with bias, input [B][K][L].
 * IN.bin (float32): X, W [NOUT][K], b [NOUT], dY (shaped like the output).
 * OUT.bin (float32): Y, dX, dW [NOUT][K], db [NOUT], after one training forward and one
 * backward (dX requested) under fp8 with RECIPE. Exit 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/layers.h"
#include "nn/model_internal.h"
#include "snn/prepare.h"
#include "snn/snn.h"

static int fail(const char *what) {
    fprintf(stderr, "driver_precision: %s: %s\n", what, snn_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: driver_precision linear|conv1d RECIPE B K NOUT L IN.bin OUT.bin\n");
        return 2;
    }
    int conv = !strcmp(argv[1], "conv1d");
    int B = atoi(argv[3]), K = atoi(argv[4]), O = atoi(argv[5]), L = atoi(argv[6]);
    if (B <= 0 || K <= 0 || O <= 0 || L <= 0 || (!conv && L != 1)) return 2;
    size_t nx = (size_t)B * K * L, ny = (size_t)B * O * L, nw = (size_t)O * K;
    size_t nin = nx + nw + O + ny;
    float *in = malloc(nin * sizeof(float)), *dx = malloc(nx * sizeof(float));
    FILE *f = fopen(argv[7], "rb");
    if (!in || !dx || !f || fread(in, sizeof(float), nin, f) != nin) {
        fprintf(stderr, "driver_precision: cannot read %s\n", argv[7]);
        return 1;
    }
    fclose(f);
    const float *X = in, *W = in + nx, *bias = W + nw, *dY = bias + O;

    snn_module *root = conv ? snn_conv1d_new(K, O, 1, 1, 0, 1) : snn_linear_new(K, O, 1);
    snn_model *m = NULL;
    if (snn_model_build(root, "oracle", "{}", conv ? snn_shape2(K, L) : snn_shape1(K), 1, &m) != SNN_OK)
        return fail("build");
    snn_precision_config cfg;
    if (snn_precision_config_parse("fp8", argv[2], NULL, NULL, NULL, &cfg) != SNN_OK) return fail("config");
    snn_precision *p = NULL;
    if (snn_prepare_model_for_precision(m, "cpu", &cfg, &p) != SNN_OK) return fail("prepare");
    /* weight [O][K] (Conv1d: [O][K][1], the same floats), then bias */
    snn_tensor_info tw, tb;
    if (snn_model_tensor(m, 0, &tw) != SNN_OK || snn_model_tensor(m, 1, &tb) != SNN_OK || tw.numel != nw ||
        tb.numel != (size_t)O)
        return fail("tensors");
    memcpy(tw.data, W, nw * sizeof(float));
    memcpy(tb.data, bias, (size_t)O * sizeof(float));
    if (snn_model_plan(m, 1, B) != SNN_OK) return fail("plan");
    const float *y = NULL;
    if (snn_model_forward(m, X, 1, &y) != SNN_OK) return fail("forward");
    /* the model's backward passes no dX at the root; call the root's own backward with one */
    snn_model_zero_grad(m);
    for (size_t i = 0; i < nx; i++) dx[i] = -12345.0f;
    if (m->root->ops->backward(m->root, &m->run, X, m->out, dY, dx) != SNN_OK) return fail("backward");

    f = fopen(argv[8], "wb");
    if (!f || fwrite(y, sizeof(float), ny, f) != ny || fwrite(dx, sizeof(float), nx, f) != nx ||
        fwrite(tw.grad, sizeof(float), nw, f) != nw || fwrite(tb.grad, sizeof(float), (size_t)O, f) != (size_t)O) {
        fprintf(stderr, "driver_precision: cannot write %s\n", argv[8]);
        return 1;
    }
    fclose(f);
    snn_precision_free(p);
    snn_model_free(m);
    free(in);
    free(dx);
    return 0;
}
