/* Canonical JSON printing (see json_canon.h).
 *
 * cJSON keeps numbers as doubles and forgets whether the text said 1 or 1.0, which Python
 * distinguishes. snn_json_canonicalize therefore lexes the number tokens of the text
 * itself, in document order, and swaps each number node of the parsed tree (visited in
 * the same order) for a raw node holding its canonical spelling. */
#include "core/json_canon.h"
#include "snn/json.h" /* the public declarations, checked against the definitions here */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "snn/lm_config.h"

const char *snn_json_float_repr(double v, char buf[32]) {
    /* shortest %.*e that reads back exactly, then Python's layout: fixed notation for
     * decimal exponents in [-4, 16), otherwise d.ddde+XX */
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    char digits[24];
    int nd = 0, neg = 0;
    const char *p = e;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e may pad with zeros at prec 17 */
    digits[nd] = '\0';
    char *o = buf;
    if (neg) *o++ = '-';
    if (v == 0) {
        strcpy(o, "0.0");
        return buf;
    }
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0'; *o++ = '.';
            for (int i = 0; i < -exp - 1; i++) *o++ = '0';
            memcpy(o, digits, (size_t)nd); o += nd;
        } else {
            for (int i = 0; i <= exp; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp + 1) { memcpy(o, digits + exp + 1, (size_t)(nd - exp - 1)); o += nd - exp - 1; }
            else *o++ = '0';
        }
        *o = '\0';
    } else {
        *o++ = digits[0];
        if (nd > 1) { *o++ = '.'; memcpy(o, digits + 1, (size_t)(nd - 1)); o += nd - 1; }
        snprintf(o, 16, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    return buf;
}

cJSON *snn_json_int(long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return cJSON_CreateRaw(b);
}

cJSON *snn_json_float(double v) {
    char b[32];
    return cJSON_CreateRaw(snn_json_float_repr(v, b));
}

/* ---- a growing output buffer ---- */
typedef struct { char *p; size_t n, cap; int oom; } sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q; b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Decode one UTF-8 sequence; -1 if malformed (overlong, surrogate, > U+10FFFF). */
static long utf8_next(const unsigned char **s) {
    const unsigned char *p = *s;
    long c = p[0];
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return -1;
    if (n == 0) { *s = p + 1; return c; }
    c &= 0x3F >> n;
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) return -1;
        c = c << 6 | (p[i] & 0x3F);
    }
    static const long minv[4] = {0, 0x80, 0x800, 0x10000};
    if (c < minv[n] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return -1;
    *s = p + n + 1;
    return c;
}

static int put_string(sbuf *b, const char *str) {
    put(b, "\"", 1);
    const unsigned char *s = (const unsigned char *)str;
    char esc[32];
    while (*s) {
        long c = utf8_next(&s);
        if (c < 0) return -1;
        switch (c) {
        case '"': puts_(b, "\\\""); break;
        case '\\': puts_(b, "\\\\"); break;
        case '\n': puts_(b, "\\n"); break;
        case '\r': puts_(b, "\\r"); break;
        case '\t': puts_(b, "\\t"); break;
        case '\b': puts_(b, "\\b"); break;
        case '\f': puts_(b, "\\f"); break;
        default:
            if (c < 0x20 || c > 0x7E) {
                if (c >= 0x10000) {
                    long v = c - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04lx\\u%04lx", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04lx", c);
                }
                puts_(b, esc);
            } else {
                char ch = (char)c;
                put(b, &ch, 1);
            }
        }
    }
    put(b, "\"", 1);
    return 0;
}

static int key_cmp(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static snn_status print_node(sbuf *b, const cJSON *n, int depth) {
    if (depth > 64) return snn_error(SNN_E_FORMAT, "JSON nested deeper than 64 levels");
    if (cJSON_IsRaw(n)) { puts_(b, n->valuestring); return SNN_OK; }
    if (cJSON_IsNull(n)) { puts_(b, "null"); return SNN_OK; }
    if (cJSON_IsTrue(n)) { puts_(b, "true"); return SNN_OK; }
    if (cJSON_IsFalse(n)) { puts_(b, "false"); return SNN_OK; }
    if (cJSON_IsNumber(n)) {
        double v = n->valuedouble;
        if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0)
            return snn_error(SNN_E_INVALID, "canonical JSON: number %g is not a raw float node", v);
        char t[32];
        snprintf(t, sizeof t, "%lld", (long long)v);
        puts_(b, t);
        return SNN_OK;
    }
    if (cJSON_IsString(n)) {
        if (put_string(b, n->valuestring) < 0) return snn_error(SNN_E_FORMAT, "JSON string is not valid UTF-8");
        return SNN_OK;
    }
    if (cJSON_IsArray(n)) {
        put(b, "[", 1);
        int i = 0;
        for (const cJSON *c = n->child; c; c = c->next, i++) {
            if (i) put(b, ",", 1);
            SNN_TRY(print_node(b, c, depth + 1));
        }
        put(b, "]", 1);
        return SNN_OK;
    }
    if (cJSON_IsObject(n)) {
        int count = 0;
        for (const cJSON *c = n->child; c; c = c->next) count++;
        const cJSON **kids = malloc(sizeof *kids * (size_t)(count ? count : 1));
        if (!kids) return snn_error(SNN_E_NOMEM, "out of memory printing JSON");
        int i = 0;
        for (const cJSON *c = n->child; c; c = c->next) kids[i++] = c;
        qsort(kids, (size_t)count, sizeof *kids, key_cmp);
        snn_status st = SNN_OK;
        put(b, "{", 1);
        for (i = 0; i < count && st == SNN_OK; i++) {
            if (i && strcmp(kids[i - 1]->string, kids[i]->string) == 0) {
                st = snn_error(SNN_E_FORMAT, "JSON object has the key \"%.60s\" twice", kids[i]->string);
                break;
            }
            if (i) put(b, ",", 1);
            if (put_string(b, kids[i]->string) < 0) {
                st = snn_error(SNN_E_FORMAT, "JSON key is not valid UTF-8");
                break;
            }
            put(b, ":", 1);
            st = print_node(b, kids[i], depth + 1);
        }
        put(b, "}", 1);
        free(kids);
        return st;
    }
    return snn_error(SNN_E_FORMAT, "JSON value of unknown kind");
}

snn_status snn_json_print_canonical(const cJSON *root, char **out) {
    if (!root || !out) return snn_error(SNN_E_INVALID, "snn_json_print_canonical needs a tree and an output");
    sbuf b = {0};
    snn_status st = print_node(&b, root, 0);
    if (st == SNN_OK && b.oom) st = snn_error(SNN_E_NOMEM, "out of memory printing JSON");
    if (st != SNN_OK) { free(b.p); return st; }
    *out = b.p;
    return SNN_OK;
}

/* ---- canonicalising JSON text ---- */

typedef struct { char **lex; size_t n, cap, next; } lexemes;

/* The number tokens of the text in order (strings skipped); 0 on success. */
static int lex_numbers(const char *s, lexemes *L) {
    for (const char *p = s; *p;) {
        if (*p == '"') {
            for (p++; *p && *p != '"'; p++)
                if (*p == '\\' && p[1]) p++;
            if (*p) p++;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            const char *q = p;
            while (*q && strchr("+-0123456789.eE", *q)) q++;
            if (L->n == L->cap) {
                size_t cap = L->cap ? 2 * L->cap : 16;
                char **x = realloc(L->lex, cap * sizeof *x);
                if (!x) return -1;
                L->lex = x; L->cap = cap;
            }
            char *t = strndup(p, (size_t)(q - p));
            if (!t) return -1;
            L->lex[L->n++] = t;
            p = q;
        } else {
            p++;
        }
    }
    return 0;
}

static snn_status respell_numbers(cJSON *n, lexemes *L) {
    for (cJSON *c = n->child; c; c = c->next) {
        if (cJSON_IsNumber(c)) {
            if (L->next >= L->n) return snn_error(SNN_E_FORMAT, "JSON number tokens out of step");
            const char *lx = L->lex[L->next++];
            char buf[40];
            if (strpbrk(lx, ".eE")) {
                double v = strtod(lx, NULL);
                if (!isfinite(v)) return snn_error(SNN_E_INVALID, "JSON number %.40s is not finite", lx);
                snn_json_float_repr(v, buf);
            } else {
                /* Python keeps integers exact: keep the digits, drop a minus on zero */
                snprintf(buf, sizeof buf, "%.39s", strcmp(lx, "-0") == 0 ? "0" : lx);
                if (strlen(lx) > 39) return snn_error(SNN_E_INVALID, "JSON integer %.20s... is too long", lx);
            }
            char *dup = strdup(buf);
            if (!dup) return snn_error(SNN_E_NOMEM, "out of memory");
            c->type = cJSON_Raw;
            c->valuestring = dup;
        } else if (cJSON_IsArray(c) || cJSON_IsObject(c)) {
            SNN_TRY(respell_numbers(c, L));
        }
    }
    return SNN_OK;
}

snn_status snn_json_canonicalize(const char *json, char **out) {
    if (!json || !out) return snn_error(SNN_E_INVALID, "snn_json_canonicalize: NULL argument");
    cJSON *root = cJSON_Parse(json);
    if (!root) return snn_error(SNN_E_FORMAT, "malformed JSON");
    lexemes L = {0};
    snn_status st = SNN_OK;
    if (lex_numbers(json, &L) != 0) st = snn_error(SNN_E_NOMEM, "out of memory");
    /* wrap so that a top-level number is visited as a child too */
    cJSON holder;
    memset(&holder, 0, sizeof holder);
    holder.type = cJSON_Array;
    holder.child = root;
    if (st == SNN_OK) st = respell_numbers(&holder, &L);
    if (st == SNN_OK && L.next != L.n) st = snn_error(SNN_E_FORMAT, "JSON number tokens out of step");
    if (st == SNN_OK) st = snn_json_print_canonical(root, out);
    for (size_t i = 0; i < L.n; i++) free(L.lex[i]);
    free(L.lex);
    cJSON_Delete(root);
    return st;
}
