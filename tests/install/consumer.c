/* Uses only the installed headers: builds Sequential(Linear(32, 64), LIF, Linear(64, 4)),
 * prepares it for bf16, trains 30 AdamW steps of a mean-square loss on a fixed batch and
 * saves it. Prints the version and commit; exit 0 iff the loss fell by half. */
#include <stdio.h>
#include <stdlib.h>

#include <snn/snn.h>

#define TRY(x)                                                                                   \
    do {                                                                                         \
        if ((x) != SNN_OK) {                                                                     \
            fprintf(stderr, "consumer: %s: %s\n", #x, snn_last_error());                         \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv) {
    snn_module *seq, *m;
    TRY(snn_sequential_create(&seq));
    TRY(snn_linear_create(32, 64, 1, &m));
    TRY(snn_sequential_add(seq, m));
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    TRY(snn_neuron_create(&lif, &m));
    TRY(snn_sequential_add(seq, m));
    TRY(snn_linear_create(64, 4, 1, &m));
    TRY(snn_sequential_add(seq, m));
    snn_model *model;
    int in[1] = {32};
    TRY(snn_model_create_from_module(seq, 1, in, 5, &model));
    snn_precision_config cfg;
    snn_precision *p;
    TRY(snn_precision_config_parse("bf16", NULL, NULL, NULL, NULL, &cfg));
    TRY(snn_prepare_model_for_precision(model, "cpu", &cfg, &p));
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 1e-2f;
    snn_optimizer *opt;
    TRY(snn_optimizer_create_for_model(&oo, model, &opt));
    enum { T = 4, N = 8 };
    float x[T * N * 32], dy[T * N * 4];
    snn_rng r = snn_rng_make(9, 1);
    for (int i = 0; i < T * N * 32; i++) x[i] = 2.0f * snn_rng_next_uniform(&r);
    TRY(snn_model_plan(model, T, N));
    double first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        const float *y;
        TRY(snn_model_forward(model, x, 1, &y));
        double l = 0;
        for (int i = 0; i < T * N * 4; i++) {
            l += (double)y[i] * y[i];
            dy[i] = 2.0f * y[i] / (T * N * 4);
        }
        l /= T * N * 4;
        if (s == 0) first = l;
        last = l;
        TRY(snn_precision_backward(p, dy, opt, -1, 0, NULL, NULL));
    }
    if (argc > 1) TRY(snn_model_save(model, argv[1], NULL));
    printf("snn %s commit %s: loss %.4g -> %.4g\n", snn_version(), snn_build_commit(), first, last);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    snn_model_free(model);
    return last < 0.5 * first ? 0 : 1;
}
