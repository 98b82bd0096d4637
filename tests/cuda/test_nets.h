/* The small models of the GPU tests that hold whole-model runs to each other
 * (tests/cuda/test_cuda_graph.c, test_cuda_step.c): the zoo's FC-SNN, convsnn and Spikformer at
 * test sizes, and an MLP with a PLIF neuron (a module that waits for the device). Header-only. */
#ifndef SNN_TESTS_CUDA_NETS_H
#define SNN_TESTS_CUDA_NETS_H

#include "snn/snn.h"

typedef enum { NET_FCSNN, NET_PLIF, NET_CONVSNN, NET_SPIKFORMER } net_kind;
static const char *net_name[] = {"fcsnn", "plif-mlp", "convsnn", "spikformer"};

static snn_status build(net_kind k, uint64_t seed, snn_model **out) {
    if (k == NET_FCSNN) {
        snn_fcsnn_opts o = {.in_features = 64, .hidden = 128, .depth = 3, .classes = 10, .tau = 2.0f};
        return snn_fcsnn_create(&o, seed, out);
    }
    if (k == NET_CONVSNN) {
        snn_convsnn_opts o = {.in_channels = 1, .height = 12, .width = 12, .channels = 16, .classes = 10};
        return snn_convsnn_create(&o, seed, out);
    }
    if (k == NET_SPIKFORMER) {
        snn_spikformer_opts o = {.in_channels = 3, .image_size = 32, .classes = 10, .embed_dim = 64, .heads = 4,
                                 .depth = 1, .mlp_ratio = 2.0f};
        return snn_spikformer_create(&o, seed, out);
    }
    /* Linear, PLIF, Linear, GELU, Linear */
    snn_module *seq = NULL, *c = NULL;
    snn_status st = snn_sequential_create(&seq);
    snn_neuron_opts plif = snn_neuron_defaults(SNN_NEURON_PLIF);
    plif.v_threshold = 0.3f;
    if (st == SNN_OK && (st = snn_linear_create(48, 96, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_neuron_create(&plif, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(96, 64, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_gelu_create(&c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st == SNN_OK && (st = snn_linear_create(64, 16, 1, &c)) == SNN_OK) st = snn_sequential_add(seq, c);
    if (st != SNN_OK) {
        snn_module_destroy(seq);
        return st;
    }
    int shape[1] = {48};
    return snn_model_create_from_module(seq, 1, shape, seed, out);
}

#endif
