/* Helper for tests/oracle_nn_api.py: a model built through the public API only,
 *   Linear(16, 32) -> LayerNorm(32) -> LIF(tau 2, Sigmoid) -> Residual(Linear(32, 32), GELU, RMSNorm(32))
 *   -> PLIF(tau 3, soft reset, detach_reset, no decay_input, ATan 2.5, threshold 0.7)
 *   -> Linear(32, 5)
 * and one training step of loss = mean(y^2).
 *
 *   driver_nn_api sgd|adamw T N IN OUT
 *     IN:  parameters (snn_model_params order), x [T][N][16]          (raw float32)
 *     OUT: y [T][N][5], gradients, parameters after one step          (raw float32)
 *     stdout: one line "name numel decay" per parameter tensor, in the flat order.
 * SGD: lr 0.1, momentum 0.9, weight decay 0.01; AdamW: lr 0.01, betas (0.9, 0.999), eps 1e-3,
 * weight decay 0.05 (a large eps keeps the first step a smooth function of the gradient). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/snn.h"

#define TRY(x)                                                                                   \
    do {                                                                                         \
        if ((x) != SNN_OK) {                                                                     \
            fprintf(stderr, "driver_nn_api: %s: %s\n", #x, snn_last_error());                    \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

static snn_status add(snn_module *seq, snn_status made, snn_module **m) {
    return made != SNN_OK ? made : snn_sequential_add(seq, *m);
}

static snn_status build(snn_model **out) {
    snn_module *root, *inner, *m, *res;
    snn_status st = snn_sequential_create(&root);
    if (st == SNN_OK) st = add(root, snn_linear_create(16, 32, 1, &m), &m);
    if (st == SNN_OK) st = add(root, snn_layernorm_create(32, 1e-5f, &m), &m);
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    if (st == SNN_OK) st = add(root, snn_neuron_create(&lif, &m), &m);
    if (st == SNN_OK) st = snn_sequential_create(&inner);
    if (st == SNN_OK) st = add(inner, snn_linear_create(32, 32, 1, &m), &m);
    if (st == SNN_OK) st = add(inner, snn_gelu_create(&m), &m);
    if (st == SNN_OK) st = add(inner, snn_rmsnorm_create(32, 1e-5f, &m), &m);
    if (st == SNN_OK) st = add(root, snn_residual_create(inner, &res), &res);
    snn_neuron_opts plif = snn_neuron_defaults(SNN_NEURON_PLIF);
    plif.tau = 3.0f;
    plif.soft_reset = 1;
    plif.detach_reset = 1;
    plif.decay_input = 0;
    plif.surrogate = SNN_SG_ATAN;
    plif.alpha = 2.5f;
    plif.v_threshold = 0.7f;
    if (st == SNN_OK) st = add(root, snn_neuron_create(&plif, &m), &m);
    if (st == SNN_OK) st = add(root, snn_linear_create(32, 5, 1, &m), &m);
    if (st != SNN_OK) return st; /* a driver: the leak on failure does not matter */
    int in[1] = {16};
    return snn_model_create_from_module(root, 1, in, 1, out);
}

int main(int argc, char **argv) {
    if (argc != 6) return fprintf(stderr, "usage: driver_nn_api sgd|adamw T N IN OUT\n"), 2;
    int adamw = !strcmp(argv[1], "adamw"), T = atoi(argv[2]), N = atoi(argv[3]);
    snn_model *m;
    TRY(build(&m));
    size_t P = snn_model_num_params(m), X = (size_t)T * N * 16, Y = (size_t)T * N * 5;
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        TRY(snn_model_tensor(m, i, &ti));
        if (!ti.is_buffer) printf("%s %zu %d\n", ti.name, ti.numel, ti.decay);
    }
    float *x = malloc(X * sizeof *x), *dy = malloc(Y * sizeof *dy);
    FILE *f = fopen(argv[4], "rb");
    if (!f || fread(snn_model_params(m), sizeof(float), P, f) != P || fread(x, sizeof(float), X, f) != X)
        return fprintf(stderr, "driver_nn_api: cannot read %s\n", argv[4]), 1;
    fclose(f);
    snn_optim_opts o = snn_optim_defaults(adamw ? SNN_OPTIM_ADAMW : SNN_OPTIM_SGD);
    if (adamw) {
        o.lr = 0.01f;
        o.eps = 1e-3f;
        o.weight_decay = 0.05f;
    } else {
        o.lr = 0.1f;
        o.momentum = 0.9f;
        o.weight_decay = 0.01f;
    }
    snn_optimizer *opt;
    TRY(snn_optimizer_create_for_model(&o, m, &opt));
    TRY(snn_model_plan(m, T, N));
    const float *y;
    TRY(snn_model_forward(m, x, 1, &y));
    for (size_t i = 0; i < Y; i++) dy[i] = 2.0f * y[i] / (float)Y;
    f = fopen(argv[5], "wb");
    if (!f || fwrite(y, sizeof(float), Y, f) != Y) return fprintf(stderr, "driver_nn_api: cannot write\n"), 1;
    snn_model_zero_grad(m);
    TRY(snn_model_backward(m, dy));
    TRY(snn_optimizer_step(opt, -1, 0));
    if (fwrite(snn_model_grads(m), sizeof(float), P, f) != P || fwrite(snn_model_params(m), sizeof(float), P, f) != P)
        return fprintf(stderr, "driver_nn_api: cannot write\n"), 1;
    fclose(f);
    snn_optimizer_free(opt);
    snn_model_free(m);
    free(x);
    free(dy);
    return 0;
}
