#ifndef SNN_SPIKFORMER_PARTS_H
#define SNN_SPIKFORMER_PARTS_H

#include "nn/module.h"

snn_module *snn_reshape_new(snn_shape to);
snn_module *snn_token_mean_new(void);
snn_module *snn_ssa_core_new(int heads, float scale);

#endif
