/* Neuron layers (IFNode, LIFNode, ParametricLIFNode) as multi-step modules.
 *
 * Any per-sample shape; out = in. The [T][N][...] activation layout is exactly the
 * kernels' [T][n] layout with n = N * numel(per-sample). Every forward starts from the
 * reset membrane (v_reset, or 0 for soft reset): the model resets state between batches.
 * PLIF owns one trainable parameter "w" of shape [1] (no weight decay), k = sigmoid(w). */
#ifndef SNN_NEURON_MODULE_H
#define SNN_NEURON_MODULE_H

#include "nn/module.h"
#include "snn/neuron.h"

/* NULL options mean LIFNode defaults. Returns NULL only on allocation failure; invalid
 * options are reported by setup (SNN_E_INVALID). */
snn_module *snn_neuron_module_new(const snn_neuron_opts *o);
/* 1 if m is an IF/LIF/PLIF neuron module. */
int snn_module_is_neuron(const snn_module *m);
/* The module's options (m must be a neuron module). Edits take effect at the next forward;
 * changing kind or tau after setup is not supported (re-setup instead). */
snn_neuron_opts *snn_neuron_module_opts(snn_module *m);
/* The decay k the kernels get: 1/tau (LIF), sigmoid(w) (PLIF), 0 (IF, no leak). */
float snn_neuron_module_decay(snn_module *m);
/* PLIF: add dL/dw = gk k (1 - k) for the kernels' dL/dk = gk into w's gradient (on the
 * module's device). */
snn_status snn_neuron_module_add_plif_grad(snn_module *m, double gk);
/* Membrane after the last forward [N * numel] (NULL before reserve). */
const float *snn_neuron_module_v(const snn_module *m);
/* Pre-reset membrane saved by the last training forward [T][N * numel] (NULL if none).
 * Writable: under neuron precision the mixed-precision kernels (src/neuron/neuron_mp.c)
 * write h, rounded to the storage dtype, into this buffer and the backward reads it back. */
float *snn_neuron_module_h_seq(const snn_module *m);

#endif
