/* convsnn: SpikingJelly's Fashion-MNIST convolutional SNN,
 *   {Conv3x3(C) - BN - IF - MaxPool2} x 2 -> Flatten -> Linear(C*7*7 -> 2048) -> IF
 *   -> Linear(2048 -> classes) -> IF
 * The output spikes [T, N, classes] are read as firing rates. */
#include <stdio.h>

#include "models/zoo.h"

snn_status snn_convsnn_create(const snn_convsnn_opts *o, uint64_t seed, snn_model **out) {
    snn_convsnn_opts c = o ? *o : (snn_convsnn_opts){0};
    if (!c.in_channels) c.in_channels = 1;
    if (!c.height) c.height = 28;
    if (!c.width) c.width = 28;
    if (!c.channels) c.channels = 128;
    if (!c.classes) c.classes = 10;
    *out = NULL;
    SNN_TRY(snn_zoo_range("convsnn", "in_channels", c.in_channels, 1, SNN_ZOO_MAX_CHANNELS));
    SNN_TRY(snn_zoo_range("convsnn", "channels", c.channels, 1, SNN_ZOO_MAX_CHANNELS));
    SNN_TRY(snn_zoo_range("convsnn", "classes", c.classes, 1, SNN_ZOO_MAX_WIDTH));
    SNN_TRY(snn_zoo_range("convsnn", "height", c.height, 4, SNN_ZOO_MAX_SIDE));
    SNN_TRY(snn_zoo_range("convsnn", "width", c.width, 4, SNN_ZOO_MAX_SIDE));
    if (c.height % 4 || c.width % 4)
        return snn_error(SNN_E_INVALID,
                         "convsnn: image sides must be positive multiples of 4 (got %dx%d)", c.height, c.width);
    /* the largest activations: the input and the first convolution's output */
    SNN_TRY(snn_zoo_product("convsnn", "in_channels x height x width", c.in_channels, c.height, c.width,
                            SNN_ZOO_MAX_ACT));
    SNN_TRY(snn_zoo_product("convsnn", "channels x height x width", c.channels, c.height, c.width,
                            SNN_ZOO_MAX_ACT));
    snn_neuron_opts ifn = snn_neuron_defaults(SNN_NEURON_IF);
    snn_module *root = snn_sequential_new();
    if (!root) return snn_error(SNN_E_NOMEM, "out of memory");
    snn_module *net = snn_sequential_new();
    snn_status st = snn_zoo_add(root, net, "conv_fc");
    int in = c.in_channels;
    for (int b = 0; b < 2 && st == SNN_OK; b++) {
        st = snn_zoo_add(net, snn_conv2d_new(in, c.channels, 3, 1, 1, 0), NULL);
        if (st == SNN_OK) st = snn_zoo_add(net, snn_batchnorm_new(c.channels, 1e-5f, 0.1f), NULL);
        if (st == SNN_OK) st = snn_zoo_add(net, snn_neuron_module_new(&ifn), NULL);
        if (st == SNN_OK) st = snn_zoo_add(net, snn_maxpool2d_new(2, 2, 0), NULL);
        in = c.channels;
    }
    int flat = c.channels * (c.height / 4) * (c.width / 4);
    if (st == SNN_OK) st = snn_zoo_add(net, snn_flatten_new(), NULL);
    if (st == SNN_OK) st = snn_zoo_add(net, snn_linear_new(flat, 2048, 0), NULL);
    if (st == SNN_OK) st = snn_zoo_add(net, snn_neuron_module_new(&ifn), NULL);
    if (st == SNN_OK) st = snn_zoo_add(net, snn_linear_new(2048, c.classes, 0), NULL);
    if (st == SNN_OK) st = snn_zoo_add(net, snn_neuron_module_new(&ifn), NULL);
    if (st != SNN_OK) {
        snn_module_free(root);
        return st;
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"model\":\"convsnn\",\"in_channels\":%d,\"height\":%d,\"width\":%d,\"channels\":%d,\"classes\":%d}",
             c.in_channels, c.height, c.width, c.channels, c.classes);
    return snn_model_build(root, "convsnn", cfg, snn_shape3(c.in_channels, c.height, c.width), seed, out);
}
