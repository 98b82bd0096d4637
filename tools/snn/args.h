/* Command-line option tables for the snn tool. Bad input is reported as one line
 * "snn: error: ..." on stderr and exit code 2. */
#ifndef SNN_TOOL_ARGS_H
#define SNN_TOOL_ARGS_H

#include <stdint.h>

typedef enum { OPT_INT, OPT_LONG, OPT_FLOAT, OPT_STRING, OPT_FLAG, OPT_U64, OPT_STRINGS } opt_type;

typedef struct opt {
    const char *name;   /* "--batch-size" */
    opt_type type;
    void *dst;          /* int*, long*, float*, const char**, int* (flag), uint64_t* */
    const char *help;
    const char *alias;  /* optional second spelling */
    int seen;
    /* Accepted range of a number (args_range). Without one, integers must be >= 1 and
     * floats > 0: zero or a negative value never silently means "default" or "off". */
    int ranged;
    double lo, hi;
} opt;

/* A numeric option with its accepted range [lo, hi]. */
static inline opt opt_num(const char *name, opt_type type, void *dst, const char *help, const char *alias,
                          double lo, double hi) {
    opt o = {name, type, dst, help, alias, 0, 1, lo, hi};
    return o;
}

/* Set the accepted range [lo, hi] of the numeric option `name` (exits if there is none:
 * a programming error). */
void args_range(opt *table, int n, const char *name, double lo, double hi);
/* The option `name` of the table (NULL if none). */
opt *args_find(opt *table, int n, const char *name);

/* Parse argv[first..argc) into the table; positional arguments are refused.
 * Returns 0, or exits with code 2 on a bad option (after printing the error). */
void args_parse(const char *cmd, opt *table, int n, int argc, char **argv, int first);
/* Print "usage" and the option table. */
void args_help(const char *usage, const char *summary, const opt *table, int n);
/* Print "snn: error: <msg>" and exit(2). */
_Noreturn void die_usage(const char *fmt, ...);
/* Print "snn: error: <library message>" and exit(1) (runtime failure, not bad input) or 2. */
_Noreturn void die_status(int status, const char *what);
/* The same for a failure while setting a run up (building the model, planning memory):
 * what the options asked for is the cause, so out-of-memory is exit 2 too. */
_Noreturn void die_setup(int status, const char *what);
int args_wants_help(int argc, char **argv, int first);
/* When set, die_usage/die_status hand their exit code and message (without the
 * "snn: error: " prefix) to this function instead of printing and exiting; it must not
 * return. The distributed commands use it to agree on a failure across ranks. */
extern void (*args_die_hook)(int code, const char *msg);

#endif

/* In the tool: propagate a library failure as a status (message already set). */
#define SNN_TRY_TOOL(expr)                                                                       \
    do {                                                                                         \
        snn_status st_try_ = (expr);                                                             \
        if (st_try_ != SNN_OK) return st_try_;                                                   \
    } while (0)
