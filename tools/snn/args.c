#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "snn/snn.h"

void (*args_die_hook)(int code, const char *msg);

_Noreturn void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (args_die_hook) {
        char m[1024];
        vsnprintf(m, sizeof m, fmt, ap);
        args_die_hook(2, m);
    }
    fputs("snn: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

_Noreturn void die_status(int status, const char *what) {
    const char *msg = snn_last_error();
    if (args_die_hook) {
        char m[1280];
        snprintf(m, sizeof m, "%s%s%s", what ? what : "", what && *msg ? ": " : "", msg);
        args_die_hook(status == SNN_E_NOMEM || status == SNN_E_NUMERIC ? 1 : 2, m);
    }
    fprintf(stderr, "snn: error: %s%s%s\n", what ? what : "", what && *msg ? ": " : "", msg);
    /* Invalid input of any kind (options, files, shapes, configurations) is exit 2;
     * out-of-memory or numeric failure during a run is exit 1. */
    exit(status == SNN_E_NOMEM || status == SNN_E_NUMERIC ? 1 : 2);
}

_Noreturn void die_setup(int status, const char *what) {
    (void)status;
    const char *msg = snn_last_error();
    if (args_die_hook) {
        char m[1280];
        snprintf(m, sizeof m, "%s%s%s", what ? what : "", what && *msg ? ": " : "", msg);
        args_die_hook(2, m);
    }
    fprintf(stderr, "snn: error: %s%s%s\n", what ? what : "", what && *msg ? ": " : "", msg);
    exit(2);
}

opt *args_find(opt *table, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(table[k].name, name)) return &table[k];
    return NULL;
}

void args_range(opt *table, int n, const char *name, double lo, double hi) {
    opt *o = args_find(table, n, name);
    if (!o || (o->type != OPT_INT && o->type != OPT_LONG && o->type != OPT_FLOAT)) {
        fprintf(stderr, "snn: internal error: no numeric option %s\n", name);
        abort();
    }
    o->ranged = 1;
    o->lo = lo;
    o->hi = hi;
}

/* "1048576", "1e-05": ranges as a user would write them */
static const char *num_text(char *buf, size_t len, double v) {
    if (v == floor(v) && fabs(v) < 1e18) snprintf(buf, len, "%.0f", v);
    else snprintf(buf, len, "%g", v);
    return buf;
}

int args_wants_help(int argc, char **argv, int first) {
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

static void parse_value(const char *cmd, opt *o, const char *v) {
    char *end = NULL, a[32], b[32];
    errno = 0;
    switch (o->type) {
    case OPT_INT:
    case OPT_LONG: {
        /* strtol accepts leading spaces and a sign; a number is digits with an optional '-' */
        if (!*v || !(isdigit((unsigned char)v[0]) || (v[0] == '-' && isdigit((unsigned char)v[1]))))
            die_usage("%s: %s expects an integer, got '%s'", cmd, o->name, v);
        long long x = strtoll(v, &end, 10);
        if (*end) die_usage("%s: %s expects an integer, got '%s'", cmd, o->name, v);
        double lo = o->ranged ? o->lo : 1;
        double hi = o->ranged ? o->hi : (o->type == OPT_INT ? 2147483647.0 : 9.2e18);
        if (errno == ERANGE || (double)x < lo || (double)x > hi) {
            if (!o->ranged && x < 1) die_usage("%s: %s must be a positive integer, got '%s'", cmd, o->name, v);
            die_usage("%s: %s must be between %s and %s, got '%s'", cmd, o->name, num_text(a, sizeof a, lo),
                      num_text(b, sizeof b, hi), v);
        }
        if (o->type == OPT_INT) *(int *)o->dst = (int)x;
        else *(long *)o->dst = (long)x;
        break;
    }
    case OPT_U64: {
        if (!isdigit((unsigned char)v[0])) die_usage("%s: %s expects a non-negative integer, got '%s'", cmd, o->name, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || *end) die_usage("%s: %s expects a non-negative integer below 2^64, got '%s'", cmd, o->name, v);
        *(uint64_t *)o->dst = x;
        break;
    }
    case OPT_FLOAT: {
        if (!*v || isspace((unsigned char)v[0])) die_usage("%s: %s expects a number, got '%s'", cmd, o->name, v);
        float x = strtof(v, &end);
        if (*end || !isfinite(x) || (errno == ERANGE && x != 0))
            die_usage("%s: %s expects a finite number, got '%s'", cmd, o->name, v);
        if (errno == ERANGE) die_usage("%s: %s is too small to represent, got '%s'", cmd, o->name, v);
        if (!o->ranged) {
            if (!(x > 0)) die_usage("%s: %s must be positive, got '%s'", cmd, o->name, v);
        } else if ((double)x < o->lo || (double)x > o->hi) {
            die_usage("%s: %s must be between %s and %s, got '%s'", cmd, o->name, num_text(a, sizeof a, o->lo),
                      num_text(b, sizeof b, o->hi), v);
        }
        *(float *)o->dst = x;
        break;
    }
    case OPT_STRING:
        if (!*v) die_usage("%s: %s needs a non-empty value", cmd, o->name);
        *(const char **)o->dst = v;
        break;
    default:
        break;
    }
}

void args_parse(const char *cmd, opt *table, int n, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) die_usage("%s: unexpected argument '%s' (see snn %s --help)", cmd, a, cmd);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        opt *o = NULL;
        for (int k = 0; k < n && !o; k++) {
            if ((strlen(table[k].name) == len && !strncmp(table[k].name, a, len)) ||
                (table[k].alias && strlen(table[k].alias) == len && !strncmp(table[k].alias, a, len)))
                o = &table[k];
        }
        if (!o) die_usage("%s: unknown option '%.*s' (see snn %s --help)", cmd, (int)len, a, cmd);
        o->seen = 1;
        if (o->type == OPT_FLAG) {
            if (eq) die_usage("%s: %s takes no value", cmd, o->name);
            *(int *)o->dst = 1;
            continue;
        }
        if (o->type == OPT_STRINGS) {
            /* consume values up to the next option; dst is a struct {const char **v; int n;} */
            struct { const char **v; int n; } *lst = o->dst;
            lst->v = (const char **)&argv[i + 1];
            lst->n = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                i++;
                lst->n++;
            }
            if (lst->n == 0) die_usage("%s: %s needs at least one value", cmd, o->name);
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) die_usage("%s: %s needs a value", cmd, o->name);
            v = argv[++i];
        }
        parse_value(cmd, o, v);
    }
}

void args_help(const char *usage, const char *summary, const opt *table, int n) {
    printf("usage: %s\n\n%s\n\noptions:\n", usage, summary);
    for (int k = 0; k < n; k++) {
        char left[64];
        const char *meta = table[k].type == OPT_FLAG ? "" : table[k].type == OPT_STRING ? " S"
                           : table[k].type == OPT_FLOAT ? " X" : table[k].type == OPT_STRINGS ? " S..." : " N";
        snprintf(left, sizeof left, "%s%s", table[k].name, meta);
        printf("  %-24s %s\n", left, table[k].help);
    }
    printf("  %-24s %s\n", "--help", "show this help");
}
