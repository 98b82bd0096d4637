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

/* Size limits of the zoo (docs/security.md). They bound every product the constructors
 * and the modules' setup compute in int, so a configuration from a file can ask for a
 * large model but never an overflowing one. */
#define SNN_ZOO_MAX_FEATURES (1 << 24)  /* per-sample input size */
#define SNN_ZOO_MAX_WIDTH (1 << 20)     /* hidden, width, classes, embedding */
#define SNN_ZOO_MAX_CHANNELS (1 << 16)  /* convolution channels */
#define SNN_ZOO_MAX_SIDE (1 << 14)      /* image height / width */
#define SNN_ZOO_MAX_DEPTH 1000          /* layers or blocks */
#define SNN_ZOO_MAX_ACT (1 << 28)       /* values of one sample's activation at any layer */

/* "<model>: <field> must be in lo..hi, got v" unless lo <= v <= hi. */
snn_status snn_zoo_range(const char *model, const char *field, long long v, long long lo, long long hi);
/* a*b*c (each >= 0) unless it exceeds `limit`: then an error naming `what`. */
snn_status snn_zoo_product(const char *model, const char *what, int64_t a, int64_t b, int64_t c,
                           int64_t limit);

#endif
