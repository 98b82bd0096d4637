/* scikit-learn's digits data set as CSV (sklearn/datasets/data/digits.csv.gz): one sample
 * per line, 64 pixel values 0..16 (8x8, row-major) then the label. Read through zlib, so
 * the file may be gzip-compressed or plain. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

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

snn_status snn_dataset_load_digits_csv(const char *path, snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_load_digits_csv: out is NULL");
    *out = NULL;
    if (!path) path = SNN_DIGITS_CSV_PATH;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        int e = errno;
        if (!strcmp(path, SNN_DIGITS_CSV_PATH))
            return snn_error(SNN_E_IO, "cannot open %s: %s; the digits data set comes with scikit-learn "
                             "(`apt-get install python3-sklearn`), or pass the path of a digits CSV",
                             path, strerror(e));
        return snn_error(SNN_E_IO, "cannot open %s: %s", path, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return snn_error(SNN_E_IO, "%s is a directory, not a digits CSV file", path);
    }
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return snn_error(SNN_E_NOMEM, "cannot set up zlib to read %s", path);
    }
    char *line = malloc(DIGITS_LINE_MAX);
    float *x = NULL;
    int32_t *y = NULL;
    size_t n = 0, cap = 0;
    long lineno = 0;
    int maxl = -1;
    snn_status st = line ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
    while (st == SNN_OK && gzgets(gz, line, DIGITS_LINE_MAX)) {
        lineno++;
        size_t len = strlen(line);
        int complete = len > 0 && line[len - 1] == '\n';
        if (!complete && !gzeof(gz)) {
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
    if (st == SNN_OK) {
        int err;
        const char *msg = gzerror(gz, &err);
        if (err != Z_OK)
            st = snn_error(err == Z_ERRNO ? SNN_E_IO : SNN_E_FORMAT, "%s: %s after line %ld", path,
                           err == Z_ERRNO ? strerror(errno) : (err == Z_BUF_ERROR ? "the gzip stream ends early" : msg),
                           lineno);
    }
    if (st == SNN_OK && n == 0) st = snn_error(SNN_E_FORMAT, "%s: no samples (empty file)", path);
    gzclose(gz);
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
