#include "snn/snn.h"

#ifndef SNN_VERSION_STRING
#define SNN_VERSION_STRING "0.0.0"
#endif

const char *snn_version(void) { return SNN_VERSION_STRING; }
