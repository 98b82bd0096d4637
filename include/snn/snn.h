/* snn — spiking neural networks in C with first-class numeric precision.
 * This header includes the whole public API. */
#ifndef SNN_SNN_H
#define SNN_SNN_H

#include "error.h"
#include "dtype.h"
#include "rng.h"
#include "neuron.h"
#include "model.h"
#include "mlp.h"
#include "nn.h"
#include "loss.h"
#include "optim.h"
#include "data.h"
#include "checkpoint.h"
#include "precision.h"
#include "prepare.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *snn_version(void);
/* The git commit the library was built from ("3ece281"; "unknown" when it was built outside
 * a git checkout) and whether tracked files differed from it then (1) or not (0). */
const char *snn_build_commit(void);
int snn_build_dirty(void);

#ifdef __cplusplus
}
#endif
#endif
