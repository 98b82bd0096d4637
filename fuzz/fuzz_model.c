/* libFuzzer target: the model layer of a checkpoint. The input is a whole safetensors file
 * (model configuration and trainer metadata in the header, tensors after it) and goes
 * through the full load path: configuration -> model (sizes straight from the input, no
 * cap of the fuzzer's own) -> tensor table against the configuration -> weights -> finite
 * checks, then, when the model loads, the training state (precision configuration, FP8
 * state, loss scaler, optimizer) and one forward pass, so that any tensor or shape that
 * slipped through meets the kernels under ASan/UBSan. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snn/snn.h"

static void train_state(snn_model *m, const snn_ckpt *c) {
    snn_precision_config cfg = snn_precision_config_default();
    const char *pc = snn_ckpt_metadata(c, "snn_precision_config");
    if (pc && snn_precision_config_from_json(pc, &cfg) != SNN_OK) return;
    snn_precision *p = NULL;
    if (snn_prepare_model_for_precision(m, "cpu", &cfg, &p) != SNN_OK) return;
    const char *kind = snn_ckpt_metadata(c, "optimizer");
    snn_optim_kind k = SNN_OPTIM_ADAM;
    for (int i = SNN_OPTIM_SGD; kind && i <= SNN_OPTIM_ADAMW; i++)
        if (!strcmp(kind, snn_optim_kind_name((snn_optim_kind)i))) k = (snn_optim_kind)i;
    snn_optim_opts oo = snn_optim_defaults(k);
    if (k == SNN_OPTIM_SGD) oo.momentum = 0.9f;
    snn_optimizer *opt = NULL;
    if (snn_optimizer_create_for_model(&oo, m, &opt) == SNN_OK) {
        if (snn_training_checkpoint_restore(m, p, opt, c) == SNN_OK && snn_model_check_finite(m) != SNN_OK) abort();
        snn_optimizer_free(opt);
    }
    snn_precision_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    snn_ckpt *c = NULL;
    if (snn_ckpt_open_memory(data, size, "fuzz", &c) != SNN_OK) return 0;
    snn_model *m = NULL;
    if (snn_model_from_checkpoint(c, 1, &m) == SNN_OK) {
        /* loaded means: every tensor finite */
        if (snn_model_check_finite(m) != SNN_OK) abort();
        size_t in = snn_model_input_numel(m);
        if (in <= (1u << 16) && snn_model_num_params(m) <= (1u << 20) && snn_model_plan(m, 1, 1) == SNN_OK) {
            float *x = calloc(in, sizeof *x);
            const float *y;
            for (size_t i = 0; x && i < in; i++) x[i] = (float)(i % 7) / 7.0f;
            if (x && snn_model_forward(m, x, 0, &y) == SNN_OK) {
                volatile float acc = 0;
                for (size_t i = 0; i < snn_model_output_numel(m); i++) acc += y[i];
            }
            free(x);
        }
        snn_model_free(m);
        m = NULL;
        if (snn_model_from_checkpoint(c, 1, &m) == SNN_OK) train_state(m, c);
        snn_model_free(m);
    }
    snn_ckpt_close(c);
    return 0;
}
