/* scikit-learn's digits data set as CSV (sklearn/datasets/data/digits.csv.gz): one sample
 * per line, 64 pixel values 0..16 (8x8, row-major) then the label. The file may be
 * gzip-compressed (trailer checked) or plain. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"

#define DIGITS_PIXELS 64
#define DIGITS_LINE_MAX 4096
/* 16 million samples (4 GiB of floats) is far beyond any digits file: a hostile or wrong
 * file stops here instead of filling memory. */
#define DIGITS_MAX_SAMPLES (1 << 24)

/* Parse one field (a number, spaces around it allowed) ending at ',' or the line end. */
static int parse_field(char **p, double *v) {
    char *s = *p, *end;
    while (*s == ' ' || *s == '\t') s++;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(*v)) return -1;
    while (*end == ' ' || *end == '\t') end++;
    *p = end;
    return 0;
}

static snn_status parse_line(const char *path, long lineno, char *line, float *px, int32_t *label) {
    char *p = line;
    for (int f = 0; f <= DIGITS_PIXELS; f++) {
        double v;
        if (parse_field(&p, &v) != 0)
            return snn_error(SNN_E_FORMAT, "%s: line %ld, field %d: not a number (a digits CSV line is 64 pixel values 0..16 and a label)",
                             path, lineno, f + 1);
        if (f < DIGITS_PIXELS) {
            if (v < 0 || v > 16)
                return snn_error(SNN_E_FORMAT, "%s: line %ld, field %d: pixel value %g is outside 0..16",
                                 path, lineno, f + 1, v);
            px[f] = (float)(v / 16.0);
            if (*p != ',')
                return snn_error(SNN_E_FORMAT, "%s: line %ld has %d fields, expected %d (64 pixels and a label)",
                                 path, lineno, f + 1, DIGITS_PIXELS + 1);
            p++;
        } else {
            if (v < 0 || v > 255 || v != floor(v))
                return snn_error(SNN_E_FORMAT, "%s: line %ld: label %g is not an integer in 0..255",
                                 path, lineno, v);
            *label = (int32_t)v;
            if (*p == ',')
                return snn_error(SNN_E_FORMAT, "%s: line %ld has more than %d fields (64 pixels and a label)",
                                 path, lineno, DIGITS_PIXELS + 1);
            if (*p != '\0')
                return snn_error(SNN_E_FORMAT, "%s: line %ld: unexpected text after the label", path, lineno);
        }
    }
    return SNN_OK;
}

/* Buffered line reader over a zsrc: like fgets, one line (with its '\n') or up to cap-1
 * bytes per call; *have = its length (0 at the end of the data). */
typedef struct {
    snn_zsrc *z;
    char buf[1 << 16];
    size_t pos, len;
    int end;
} line_reader;

static snn_status next_line(line_reader *r, char *line, size_t cap, int *have) {
    size_t n = 0;
    *have = 0;
    while (n + 1 < cap) {
        if (r->pos == r->len) {
            if (r->end) break;
            size_t got;
            SNN_TRY(snn_zsrc_read(r->z, r->buf, sizeof r->buf, &got));
            r->pos = 0;
            r->len = got;
            if (got < sizeof r->buf) r->end = 1;
            if (!got) break;
        }
        char c = r->buf[r->pos++];
        line[n++] = c;
        if (c == '\n') break;
    }
    line[n] = '\0';
    *have = (int)n;
    return SNN_OK;
}

static int reader_at_end(const line_reader *r) { return r->end && r->pos == r->len; }

snn_status snn_dataset_load_digits_csv(const char *path, snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_load_digits_csv: out is NULL");
    *out = NULL;
    if (!path) path = SNN_DIGITS_CSV_PATH;
    line_reader *lr = calloc(1, sizeof *lr);
    if (!lr) return snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
    snn_status st = snn_zsrc_open(path, "digits CSV file", &lr->z);
    if (st != SNN_OK) {
        free(lr);
        if (!strcmp(path, SNN_DIGITS_CSV_PATH) && access(path, F_OK) != 0)
            return snn_error(st, "%s; the digits data set comes with scikit-learn "
                             "(`apt-get install python3-sklearn`), or pass the path of a digits CSV",
                             snn_last_error());
        return st;
    }
    char *line = malloc(DIGITS_LINE_MAX);
    float *x = NULL;
    int32_t *y = NULL;
    size_t n = 0, cap = 0;
    long lineno = 0;
    int maxl = -1, have = 0;
    if (!line) st = snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
    while (st == SNN_OK && (st = next_line(lr, line, DIGITS_LINE_MAX, &have)) == SNN_OK && have) {
        lineno++;
        size_t len = (size_t)have;
        int complete = len > 0 && line[len - 1] == '\n';
        if (memchr(line, '\0', len) != NULL) {
            st = snn_error(SNN_E_FORMAT, "%s: line %ld holds a NUL byte: not a digits CSV file", path, lineno);
            break;
        }
        if (!complete && !reader_at_end(lr)) {
            st = snn_error(SNN_E_FORMAT, "%s: line %ld is longer than %d bytes: not a digits CSV file",
                           path, lineno, DIGITS_LINE_MAX - 2);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = '\0';
        if (len == 0) continue;
        if (n == cap) {
            if (n >= DIGITS_MAX_SAMPLES) {
                st = snn_error(SNN_E_FORMAT, "%s: more than %d samples: not a digits CSV file", path,
                               DIGITS_MAX_SAMPLES);
                break;
            }
            cap = cap ? cap * 2 : 1024;
            float *nx = realloc(x, cap * DIGITS_PIXELS * sizeof(float));
            if (nx) x = nx;
            int32_t *ny = realloc(y, cap * sizeof(int32_t));
            if (ny) y = ny;
            if (!nx || !ny) {
                st = snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
                break;
            }
        }
        st = parse_line(path, lineno, line, x + n * DIGITS_PIXELS, &y[n]);
        if (st == SNN_OK && y[n] > maxl) maxl = y[n];
        n++;
    }
    if (st == SNN_OK && n == 0) st = snn_error(SNN_E_FORMAT, "%s: no samples (empty file)", path);
    snn_zsrc_close(lr->z);
    free(lr);
    free(line);
    snn_dataset *ds = NULL;
    if (st == SNN_OK) st = snn_dataset_alloc((int)n, 1, 8, 8, &ds);
    if (st == SNN_OK) {
        memcpy(ds->x, x, n * DIGITS_PIXELS * sizeof(float));
        memcpy(ds->y, y, n * sizeof(int32_t));
        ds->classes = maxl + 1;
        *out = ds;
    }
    free(x);
    free(y);
    return st;
}
