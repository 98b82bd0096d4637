/* Thread-local error message storage (SQLite style: the code is the return value,
 * the sentence is kept for whoever wants to show it). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "snn/error.h"
#include "core/error_internal.h"

static _Thread_local char last_error[1024];

const char *snn_last_error(void) { return last_error; }

void snn_clear_error(void) { last_error[0] = '\0'; }

/* Format into a scratch buffer first: an argument may be snn_last_error() itself (a caller
 * re-wrapping the current message), and vsnprintf's source and destination must not overlap. */
snn_status snn_error(snn_status code, const char *fmt, ...) {
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof last_error);
    return code;
}

snn_status snn_error_prefix(snn_status code, const char *fmt, ...) {
    char prefix[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    old[sizeof old - 1] = '\0';
    snprintf(last_error, sizeof last_error, "%s: %s", prefix, old);
    return code;
}

const char *snn_status_name(snn_status s) {
    switch (s) {
    case SNN_OK: return "SNN_OK";
    case SNN_E_INVALID: return "SNN_E_INVALID";
    case SNN_E_SHAPE: return "SNN_E_SHAPE";
    case SNN_E_NOMEM: return "SNN_E_NOMEM";
    case SNN_E_IO: return "SNN_E_IO";
    case SNN_E_FORMAT: return "SNN_E_FORMAT";
    case SNN_E_UNSUPPORTED: return "SNN_E_UNSUPPORTED";
    case SNN_E_STATE: return "SNN_E_STATE";
    case SNN_E_NUMERIC: return "SNN_E_NUMERIC";
    }
    return "SNN_E_UNKNOWN";
}
