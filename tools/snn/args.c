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

int args_wants_help(int argc, char **argv, int first) {
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

static void parse_value(const char *cmd, opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT:
    case OPT_LONG: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end) die_usage("%s: %s expects an integer, got '%s'", cmd, o->name, v);
        if (o->type == OPT_INT) {
            if (x < -2147483647L || x > 2147483647L) die_usage("%s: %s is out of range: %s", cmd, o->name, v);
            *(int *)o->dst = (int)x;
        } else {
            *(long *)o->dst = x;
        }
        break;
    }
    case OPT_U64: {
        if (*v == '-') die_usage("%s: %s expects a non-negative integer, got '%s'", cmd, o->name, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !*v || *end) die_usage("%s: %s expects a non-negative integer, got '%s'", cmd, o->name, v);
        *(uint64_t *)o->dst = x;
        break;
    }
    case OPT_FLOAT: {
        float x = strtof(v, &end);
        if (errno || !*v || *end || !isfinite(x)) die_usage("%s: %s expects a number, got '%s'", cmd, o->name, v);
        *(float *)o->dst = x;
        break;
    }
    case OPT_STRING:
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
