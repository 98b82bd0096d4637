/* Internal helpers shared by the model zoo. */
#ifndef SNN_MODELS_ZOO_H
#define SNN_MODELS_ZOO_H

#include "nn/layers.h"
#include "nn/model_internal.h"
#include "snn/neuron.h"

/* Multi-step neuron module (src/neuron). */
snn_module *snn_neuron_module_new(const snn_neuron_opts *o);

/* Add `child` to `parent` under a local name (NULL: its index). */
snn_status snn_zoo_add(snn_module *parent, snn_module *child, const char *local_name);

#endif
