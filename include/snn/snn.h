/* snn — spiking neural networks in C with first-class numeric precision.
 * This header includes the whole public API. */
#ifndef SNN_SNN_H
#define SNN_SNN_H

#include "error.h"
#include "dtype.h"
#include "rng.h"
#include "neuron.h"
#include "model.h"
#include "nn.h"
#include "loss.h"
#include "optim.h"
#include "data.h"
#include "checkpoint.h"
#include "precision.h"
#include "prepare.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *snn_version(void);

#ifdef __cplusplus
}
#endif
#endif
