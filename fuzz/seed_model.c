/* Seeds for fuzz_model: small checkpoints of each model kind written by the library itself
 * (plain model checkpoints and fp8/fp16/bf16 training checkpoints with optimizer state). */
#include <stdio.h>
#include <string.h>

#include "snn/snn.h"

static int train_save(snn_model *m, const char *mode, snn_optim_kind k, const char *path) {
    snn_precision_config cfg;
    snn_precision *p = NULL;
    snn_optimizer *opt = NULL;
    snn_optim_opts oo = snn_optim_defaults(k);
    if (k == SNN_OPTIM_SGD) oo.momentum = 0.9f;
    snn_status st = snn_precision_config_parse(mode, !strcmp(mode, "fp8") ? "delayed" : NULL, NULL, NULL, NULL, &cfg);
    if (st == SNN_OK && !strcmp(mode, "fp8")) cfg.amax_history_len = 2;
    if (st == SNN_OK) st = snn_prepare_model_for_precision(m, "cpu", &cfg, &p);
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&oo, m, &opt);
    if (st == SNN_OK) st = snn_training_checkpoint_save(m, p, opt, path, NULL);
    snn_optimizer_free(opt);
    snn_precision_free(p);
    if (st != SNN_OK) fprintf(stderr, "%s: %s\n", path, snn_last_error());
    return st != SNN_OK;
}

/* A seed that does not load would only exercise the error paths. */
static int reloads(const char *path) {
    snn_model *m = NULL;
    snn_status st = snn_model_load(path, 1, &m, NULL);
    if (st != SNN_OK) fprintf(stderr, "seed %s does not load: %s\n", path, snn_last_error());
    snn_model_free(m);
    return st != SNN_OK;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char path[4096];
    int bad = 0;
    snn_model *m = NULL;
    snn_fcsnn_opts fo = {.in_features = 16, .hidden = 8, .depth = 1, .classes = 3};
    snn_convsnn_opts co = {.in_channels = 1, .height = 4, .width = 4, .channels = 1, .classes = 2};
    snn_spikformer_opts so = {.in_channels = 1, .image_size = 16, .classes = 2, .embed_dim = 8, .heads = 1,
                              .depth = 1, .mlp_ratio = 1};
    for (int kind = 0; kind < 4; kind++) {
        snn_status st = kind == 0 ? snn_fcsnn_create(&fo, 1, &m)
                      : kind == 1 ? snn_convsnn_create(&co, 1, &m)
                      : kind == 2 ? snn_spikformer_create(&so, 1, &m)
                                  : snn_model_create_from_config(
                                        "{\"model\":\"mlp\",\"in_features\":16,\"width\":8,\"depth\":2,\"classes\":3}", 1, &m);
        if (st != SNN_OK) {
            fprintf(stderr, "model %d: %s\n", kind, snn_last_error());
            return 1;
        }
        snprintf(path, sizeof path, "%s/model%d.safetensors", argv[1], kind);
        bad |= snn_model_save(m, path, NULL) != SNN_OK;
        snn_model_free(m);
        bad |= reloads(path);
    }
    const char *modes[3] = {"fp8", "fp16", "bf16"};
    for (int i = 0; i < 3; i++) {
        snn_fcsnn_opts f2 = {.in_features = 16, .hidden = 16, .depth = 1, .classes = 8};
        if (snn_fcsnn_create(&f2, 2, &m) != SNN_OK) return 1;
        snprintf(path, sizeof path, "%s/train_%s.safetensors", argv[1], modes[i]);
        bad |= train_save(m, modes[i], i == 2 ? SNN_OPTIM_SGD : SNN_OPTIM_ADAM, path);
        snn_model_free(m);
        bad |= reloads(path);
    }
    return bad;
}
