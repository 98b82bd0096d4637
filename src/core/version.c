#include "snn/snn.h"

#ifndef SNN_VERSION_STRING
#define SNN_VERSION_STRING "0.0.0"
#endif

/* The build writes snn_git.h (cmake/gitinfo.cmake); builds without CMake (scripts/gpu-check's
 * fallback, fuzz/run.sh) do not, and report "unknown". */
#if defined(__has_include)
#if __has_include("snn_git.h")
#include "snn_git.h"
#endif
#endif
#ifndef SNN_GIT_COMMIT
#define SNN_GIT_COMMIT "unknown"
#define SNN_GIT_DIRTY 0
#endif

const char *snn_version(void) { return SNN_VERSION_STRING; }
const char *snn_build_commit(void) { return SNN_GIT_COMMIT; }
int snn_build_dirty(void) { return SNN_GIT_DIRTY; }
