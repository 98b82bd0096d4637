/* Model zoo: shapes, parameter counts against hand-counted formulas, dotted names, and
 * that a few training steps on a fixed batch reduce the loss. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/loss.h"
#include "snn/optim.h"
#include "snn/snn.h"

static int has_tensor(const snn_model *m, const char *name) {
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        if (snn_model_tensor(m, i, &ti) == SNN_OK && !strcmp(ti.name, name)) return 1;
    }
    return 0;
}

/* Train `steps` Adam steps on one random batch; return first and last loss. */
static void overfit(snn_model *m, int T, int N, int steps, uint64_t *rs, float *first, float *last) {
    size_t F = snn_model_input_numel(m), C = snn_model_output_numel(m);
    float *x = malloc(sizeof(float) * F * N * T), *dy = malloc(sizeof(float) * C * N * T);
    int32_t *y = malloc(sizeof(int32_t) * N);
    snn_test_fill_uniform(x, F * N, 0.0f, 1.0f, rs);
    for (int t = 1; t < T; t++) memcpy(x + (size_t)t * F * N, x, sizeof(float) * F * N);
    for (int i = 0; i < N; i++) y[i] = i % (int)C;
    CHECK(snn_model_plan(m, T, N) == SNN_OK);
    snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_ADAM);
    o.lr = 3e-3f;
    snn_optimizer *opt = NULL;
    CHECK(snn_optimizer_create_for_model(&o, m, &opt) == SNN_OK);
    for (int s = 0; s < steps; s++) {
        const float *out;
        float loss;
        CHECK(snn_model_forward(m, x, 1, &out) == SNN_OK);
        CHECK(snn_loss_cross_entropy_mean_t(out, y, T, N, (int)C, &loss, dy, NULL) == SNN_OK);
        CHECK(isfinite(loss));
        if (s == 0) *first = loss;
        *last = loss;
        snn_model_zero_grad(m);
        CHECK(snn_model_backward(m, dy) == SNN_OK);
        CHECK(snn_optimizer_step(opt, -1, 0) == SNN_OK);
    }
    snn_optimizer_free(opt);
    free(x); free(dy); free(y);
}

int main(void) {
    uint64_t rs = snn_test_seed();
    /* fcsnn 784-64-64-10: (784*64+64) + (64*64+64) + (64*10+10) */
    snn_model *m = NULL;
    snn_fcsnn_opts fo = {.in_features = 784, .hidden = 64, .depth = 2, .classes = 10};
    CHECK(snn_fcsnn_create(&fo, rs, &m) == SNN_OK);
    CHECK(snn_model_num_params(m) == (size_t)(784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10));
    CHECK(has_tensor(m, "layers.0.weight") && has_tensor(m, "layers.2.weight") && has_tensor(m, "layers.4.bias"));
    float a = 0, b = 0;
    overfit(m, 4, 16, 60, &rs, &a, &b); /* 30 steps left ~1 % of seeds just above half */
    CHECK_MSG(b < 0.5f * a, "fcsnn loss %g -> %g", a, b);
    snn_model_free(m);

    /* convsnn on 1x8x8 with 8 channels: conv 1*8*9, BN 2*8, conv 8*8*9, BN 2*8,
     * Linear (8*2*2 -> 2048), Linear(2048 -> 10) (no biases) */
    snn_convsnn_opts co = {.in_channels = 1, .height = 8, .width = 8, .channels = 8, .classes = 10};
    CHECK(snn_convsnn_create(&co, rs, &m) == SNN_OK);
    CHECK(snn_model_num_params(m) == (size_t)(72 + 16 + 576 + 16 + 32 * 2048 + 2048 * 10));
    CHECK(snn_model_num_buffers(m) == 32);
    CHECK(has_tensor(m, "conv_fc.0.weight") && has_tensor(m, "conv_fc.1.running_mean"));
    overfit(m, 2, 8, 20, &rs, &a, &b);
    CHECK_MSG(b < a, "convsnn loss %g -> %g", a, b);
    snn_model_free(m);

    /* spikformer tiny: names of the FP8 candidates */
    snn_spikformer_opts so = {.in_channels = 3, .image_size = 32, .classes = 7, .embed_dim = 32, .heads = 4, .depth = 2};
    CHECK(snn_spikformer_create(&so, rs, &m) == SNN_OK);
    CHECK(has_tensor(m, "blocks.0.attn.qkv.weight"));
    CHECK(has_tensor(m, "blocks.1.attn.proj.weight"));
    CHECK(has_tensor(m, "blocks.1.mlp.fc1.weight") && has_tensor(m, "blocks.1.mlp.fc2.weight"));
    CHECK(has_tensor(m, "patch_embed.proj_conv0.weight") && has_tensor(m, "patch_embed.rpe.conv.weight"));
    CHECK(has_tensor(m, "head.weight") && has_tensor(m, "head.bias"));
    overfit(m, 2, 4, 25, &rs, &a, &b);
    CHECK_MSG(b < a, "spikformer loss %g -> %g", a, b);
    snn_model_free(m);

    /* invalid configurations are errors with messages */
    snn_spikformer_opts bad = so;
    bad.image_size = 30;
    CHECK(snn_spikformer_create(&bad, 1, &m) == SNN_E_INVALID && strstr(snn_last_error(), "multiple of 16"));
    bad = so;
    bad.heads = 5;
    CHECK(snn_spikformer_create(&bad, 1, &m) == SNN_E_INVALID && strstr(snn_last_error(), "divisible"));
    snn_fcsnn_opts badf = fo;
    badf.tau = 0.5f;
    CHECK(snn_fcsnn_create(&badf, 1, &m) != SNN_OK && m == NULL);
    CHECK(snn_model_create_from_config("{\"model\":\"resnet\"}", 1, &m) == SNN_E_INVALID);
    CHECK(snn_model_create_from_config("not json", 1, &m) == SNN_E_FORMAT);
    return snn_test_finish("test_models");
}
