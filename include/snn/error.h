/* snn — errors are values.
 *
 * Every library function that can fail returns an snn_status. On failure it also
 * stores a sentence for the user in a thread-local buffer, read by snn_last_error().
 * The library never prints and never exits. */
#ifndef SNN_ERROR_H
#define SNN_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum snn_status {
    SNN_OK = 0,
    SNN_E_INVALID = 1,     /* an argument or option is invalid */
    SNN_E_SHAPE = 2,       /* tensor shapes do not fit together */
    SNN_E_NOMEM = 3,       /* an allocation failed or would be unreasonably large */
    SNN_E_IO = 4,          /* a file could not be opened, read or written */
    SNN_E_FORMAT = 5,      /* a file is truncated, corrupt or of the wrong kind */
    SNN_E_UNSUPPORTED = 6, /* valid request that this build, device or recipe cannot run */
    SNN_E_STATE = 7,       /* calls made in the wrong order (e.g. optimizer before prepare) */
    SNN_E_NUMERIC = 8      /* a non-finite value where none is allowed */
} snn_status;

/* The message of the last failure on this thread ("" if none). */
const char *snn_last_error(void);
/* A short name for a status code ("SNN_E_FORMAT"). */
const char *snn_status_name(snn_status s);
/* Forget the last error message. */
void snn_clear_error(void);
/* Set this thread's message (printf format) and return `code`, as the library's own
 * failures do: a callback the library calls (snn_dist_train_opts.on_step, ...) or a program
 * that reports its own failures next to the library's (the snn tool) fails the same way, and
 * snn_last_error() has the sentence. The message is truncated to the library's buffer. */
#if defined(__GNUC__)
snn_status snn_error(snn_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#else
snn_status snn_error(snn_status code, const char *fmt, ...);
#endif

#ifdef __cplusplus
}
#endif
#endif
