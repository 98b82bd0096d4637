/* NumPy .npy files: 2-D little-endian integer arrays (int32, int64, uint16) in C order.
 *
 * Layout (numpy.lib.format): the magic "\x93NUMPY", a major and minor version byte,
 * the header length (2 bytes little-endian for 1.0, 4 bytes for 2.0 and 3.0), then the
 * header: a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), }
 * padded with spaces and ended by '\n' so that the data starts at a multiple of 16 bytes
 * (numpy aligns to 64; older writers to 16). The parser here accepts exactly the three
 * keys, each once, with string / boolean / tuple values, and nothing else, because the
 * file is untrusted input. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "core/file_internal.h"
#include "snn/tokens.h"

#define NPY_MAX_HEADER (1u << 20) /* far above any real header; keeps parsing bounded */

size_t snn_npy_dtype_size(snn_npy_dtype d) {
    switch (d) {
    case SNN_NPY_INT32: return 4;
    case SNN_NPY_INT64: return 8;
    case SNN_NPY_UINT16: return 2;
    default: return 0;
    }
}
static const char *descr_of(snn_npy_dtype d) {
    return d == SNN_NPY_INT32 ? "<i4" : d == SNN_NPY_INT64 ? "<i8" : d == SNN_NPY_UINT16 ? "<u2" : NULL;
}

static int host_little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* ---- the header dict ---- */
typedef struct { const char *p, *end; } cur;

static void ws(cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}
static int lit(cur *c, char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) { c->p++; return 1; }
    return 0;
}
/* A quoted string (no escapes: none of the legal values needs one), copied into out. */
static int str(cur *c, char *out, size_t cap) {
    ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return 0;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[n] = '\0';
    return 1;
}
static int word(cur *c, const char *w) {
    ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) { c->p += n; return 1; }
    return 0;
}
/* A non-negative decimal integer without sign or leading zeros, at most INT64_MAX. */
static int dim(cur *c, int64_t *v) {
    ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9') return 0;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (x > (INT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *v = x;
    return 1;
}

static snn_status parse_header(const char *h, size_t n, const char *what, snn_npy_dtype *dt, int64_t *rows,
                               int64_t *cols) {
    if (n == 0 || h[n - 1] != '\n') return snn_error(SNN_E_FORMAT, "%s: .npy header does not end with a newline", what);
    cur c = {h, h + n - 1};
    if (!lit(&c, '{')) return snn_error(SNN_E_FORMAT, "%s: .npy header is not a dict", what);
    int have_descr = 0, have_fortran = 0, have_shape = 0;
    char descr[16];
    int64_t shape[2];
    int ndim = 0;
    for (;;) {
        char key[32];
        if (lit(&c, '}')) break;
        if (!str(&c, key, sizeof key) || !lit(&c, ':'))
            return snn_error(SNN_E_FORMAT, "%s: .npy header: expected a quoted key", what);
        if (strcmp(key, "descr") == 0) {
            if (have_descr++) return snn_error(SNN_E_FORMAT, "%s: .npy header repeats 'descr'", what);
            if (!str(&c, descr, sizeof descr)) return snn_error(SNN_E_FORMAT, "%s: .npy 'descr' is not a type string", what);
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran++) return snn_error(SNN_E_FORMAT, "%s: .npy header repeats 'fortran_order'", what);
            if (word(&c, "True"))
                return snn_error(SNN_E_FORMAT, "%s: .npy array is in Fortran order (C order needed)", what);
            if (!word(&c, "False")) return snn_error(SNN_E_FORMAT, "%s: .npy 'fortran_order' is not a boolean", what);
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++) return snn_error(SNN_E_FORMAT, "%s: .npy header repeats 'shape'", what);
            if (!lit(&c, '(')) return snn_error(SNN_E_FORMAT, "%s: .npy 'shape' is not a tuple", what);
            ndim = 0;
            int closed = 0;
            while (!closed) {
                if (lit(&c, ')')) break;
                int64_t v;
                if (ndim >= 2 || !dim(&c, &v)) {
                    if (ndim >= 2) return snn_error(SNN_E_FORMAT, "%s: .npy array has more than 2 dimensions", what);
                    return snn_error(SNN_E_FORMAT, "%s: .npy 'shape' holds a bad dimension", what);
                }
                shape[ndim++] = v;
                if (lit(&c, ',')) continue;
                if (!lit(&c, ')')) return snn_error(SNN_E_FORMAT, "%s: .npy 'shape' tuple is malformed", what);
                closed = 1;
            }
        } else {
            return snn_error(SNN_E_FORMAT, "%s: .npy header has an unexpected key '%.20s'", what, key);
        }
        if (lit(&c, ',')) continue;
        if (lit(&c, '}')) break;
        return snn_error(SNN_E_FORMAT, "%s: .npy header: expected ',' or '}'", what);
    }
    ws(&c);
    if (c.p != c.end) return snn_error(SNN_E_FORMAT, "%s: .npy header has bytes after the dict", what);
    if (!have_descr || !have_fortran || !have_shape)
        return snn_error(SNN_E_FORMAT, "%s: .npy header lacks %s", what,
                         !have_descr ? "'descr'" : !have_fortran ? "'fortran_order'" : "'shape'");
    if (ndim != 2) return snn_error(SNN_E_FORMAT, "%s: .npy array has %d dimensions (2 needed: [N, S+1])", what, ndim);
    if (strcmp(descr, "<i4") == 0) *dt = SNN_NPY_INT32;
    else if (strcmp(descr, "<i8") == 0) *dt = SNN_NPY_INT64;
    else if (strcmp(descr, "<u2") == 0) *dt = SNN_NPY_UINT16;
    else
        return snn_error(SNN_E_FORMAT, "%s: .npy type '%s' is not supported (little-endian <i4, <i8 or <u2)", what,
                         descr);
    *rows = shape[0];
    *cols = shape[1];
    return SNN_OK;
}

static snn_status parse(const unsigned char *b, size_t len, const char *what, snn_npy_array *out) {
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0) return snn_error(SNN_E_FORMAT, "%s: not a .npy file", what);
    unsigned major = b[6], minor = b[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return snn_error(SNN_E_FORMAT, "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0)", what, major,
                         minor);
    size_t pre = major == 1 ? 10 : 12;
    if (len < pre) return snn_error(SNN_E_FORMAT, "%s: .npy file is truncated", what);
    size_t hlen = major == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                             : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER) return snn_error(SNN_E_FORMAT, "%s: .npy header length %zu is implausible", what, hlen);
    if (hlen > len - pre) return snn_error(SNN_E_FORMAT, "%s: .npy header is truncated", what);
    if ((pre + hlen) % 16 != 0)
        return snn_error(SNN_E_FORMAT, "%s: .npy data offset %zu is not a multiple of 16", what, pre + hlen);
    const char *h = (const char *)b + pre;
    for (size_t i = 0; i < hlen; i++)
        if ((unsigned char)h[i] < 0x20 && h[i] != '\n' && h[i] != '\t')
            return snn_error(SNN_E_FORMAT, "%s: .npy header holds a control byte", what);
    snn_npy_dtype dt = SNN_NPY_INT32;
    int64_t rows = 0, cols = 0;
    SNN_TRY(parse_header(h, hlen, what, &dt, &rows, &cols));
    size_t es = snn_npy_dtype_size(dt);
    if (rows > 0 && (uint64_t)cols > (uint64_t)(SIZE_MAX / es) / (uint64_t)rows)
        return snn_error(SNN_E_FORMAT, "%s: .npy shape (%lld, %lld) overflows", what, (long long)rows, (long long)cols);
    size_t bytes = (size_t)rows * (size_t)cols * es;
    size_t have = len - pre - hlen;
    if (have != bytes)
        return snn_error(SNN_E_FORMAT, "%s: .npy data is %zu bytes, shape (%lld, %lld) of %s needs %zu", what, have,
                         (long long)rows, (long long)cols, descr_of(dt), bytes);
    if (!host_little_endian()) return snn_error(SNN_E_UNSUPPORTED, "%s: .npy reading needs a little-endian host", what);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return snn_error(SNN_E_NOMEM, "%s: cannot allocate %zu bytes", what, bytes);
    memcpy(data, b + pre + hlen, bytes);
    out->dtype = dt;
    out->rows = rows;
    out->cols = cols;
    out->data = data;
    return SNN_OK;
}

snn_status snn_npy_parse(const void *buf, size_t len, snn_npy_array *out) {
    if (!buf || !out) return snn_error(SNN_E_INVALID, "snn_npy_parse: NULL argument");
    return parse(buf, len, ".npy buffer", out);
}

snn_status snn_npy_read(const char *path, snn_npy_array *out) {
    if (!path || !out) return snn_error(SNN_E_INVALID, "snn_npy_read: NULL argument");
    FILE *f;
    SNN_TRY(snn_fopen_regular(path, ".npy file", &f));
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return snn_error(SNN_E_IO, "cannot seek in %s", path); }
    long end = ftell(f);
    if (end < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return snn_error(SNN_E_IO, "cannot size %s", path); }
    size_t n = (size_t)end;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) { fclose(f); return snn_error(SNN_E_NOMEM, "cannot allocate %zu bytes for %s", n, path); }
    size_t got = fread(b, 1, n, f);
    int extra = fgetc(f) != EOF; /* the file grew, or ftell lied (a pipe) */
    fclose(f);
    if (got != n || extra) { free(b); return snn_error(SNN_E_IO, "cannot read %s completely", path); }
    snn_status st = parse(b, n, path, out);
    free(b);
    return st;
}

snn_status snn_npy_write(const char *path, snn_npy_dtype dtype, int64_t rows, int64_t cols, const void *data) {
    if (!path) return snn_error(SNN_E_INVALID, "snn_npy_write: NULL path");
    const char *descr = descr_of(dtype);
    if (!descr) return snn_error(SNN_E_INVALID, "snn_npy_write: unknown dtype %d", (int)dtype);
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "snn_npy_write: negative shape");
    size_t es = snn_npy_dtype_size(dtype);
    if (rows > 0 && (uint64_t)cols > (uint64_t)(SIZE_MAX / es) / (uint64_t)rows)
        return snn_error(SNN_E_INVALID, "snn_npy_write: shape overflows");
    size_t bytes = (size_t)rows * (size_t)cols * es;
    if (bytes && !data) return snn_error(SNN_E_INVALID, "snn_npy_write: NULL data");
    if (!host_little_endian()) return snn_error(SNN_E_UNSUPPORTED, "snn_npy_write needs a little-endian host");
    char dict[160];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%lld, %lld), }", descr,
                      (long long)rows, (long long)cols);
    /* pad with spaces and a final newline so the data starts at a multiple of 64 */
    size_t total = 10 + (size_t)dl + 1;
    total = (total + 63) / 64 * 64;
    size_t hlen = total - 10;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    char header[256];
    memset(header, ' ', hlen);
    memcpy(header, dict, (size_t)dl);
    header[hlen - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return snn_error(SNN_E_IO, "cannot create %s: %s", path, strerror(errno));
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, hlen, f) == hlen &&
             (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok) return snn_error(SNN_E_IO, "cannot write %s", path);
    return SNN_OK;
}

void snn_npy_free(snn_npy_array *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
    a->rows = a->cols = 0;
}
