/* Internal error helpers: set the thread-local message and return the code. */
#ifndef SNN_ERROR_INTERNAL_H
#define SNN_ERROR_INTERNAL_H

#include "snn/error.h"

#if defined(__GNUC__)
#define SNN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SNN_PRINTF(a, b)
#endif

/* Set the message and return `code`. */
snn_status snn_error(snn_status code, const char *fmt, ...) SNN_PRINTF(2, 3);
/* Put "prefix: " in front of the current message and return `code`. */
snn_status snn_error_prefix(snn_status code, const char *fmt, ...) SNN_PRINTF(2, 3);

#define SNN_TRY(expr)                                                                            \
    do {                                                                                         \
        snn_status snn_try_s_ = (expr);                                                          \
        if (snn_try_s_ != SNN_OK) return snn_try_s_;                                             \
    } while (0)

#endif
