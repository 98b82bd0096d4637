/* IDX files (MNIST family) from disk (gzip, with its trailer checked, or raw) or from memory.
 *
 * Hostile input is expected: the header is checked against a size cap before anything
 * is allocated, and the payload buffer grows only as real bytes arrive, so a 100-byte
 * file that claims a gigabyte of pixels costs a few kilobytes and a clear error. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"

#define IDX_TYPE_UBYTE 0x08
#define IDX_CHUNK ((size_t)1 << 22)

/* A byte source: a file (raw or gzip, src/data/zsrc.c) or a memory buffer. */
typedef struct {
    const char *name;
    snn_zsrc *z;
    const uint8_t *mem;
    size_t len, pos;
} idx_src;

/* Read up to n bytes into dst; *got = bytes read (short only at the end of the data). */
static snn_status src_read(idx_src *s, void *dst, size_t n, size_t *got) {
    *got = 0;
    if (!s->z) {
        size_t k = s->len - s->pos < n ? s->len - s->pos : n;
        memcpy(dst, s->mem + s->pos, k);
        s->pos += k;
        *got = k;
        return SNN_OK;
    }
    return snn_zsrc_read(s->z, dst, n, got);
}

static snn_status src_open_file(idx_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->name = path;
    return snn_zsrc_open(path, "IDX file", &s->z);
}

static void src_close(idx_src *s) {
    snn_zsrc_close(s->z);
    s->z = NULL;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Say "(decompressed)" after byte counts of gzip files, where the count is not the file
 * size a user sees with ls. */
static const char *src_unit(const idx_src *s) {
    return snn_zsrc_is_gzip(s->z) ? " (decompressed)" : "";
}

/* Read one IDX file of unsigned bytes with `ndims` dimensions. On success *data (malloc'd)
 * holds dims[0]*...*dims[ndims-1] bytes. */
static snn_status idx_read(idx_src *s, int ndims, const char *what, uint32_t dims[3],
                           uint8_t **data) {
    *data = NULL;
    uint8_t hdr[16];
    size_t hlen = 4 + 4 * (size_t)ndims, got;
    SNN_TRY(src_read(s, hdr, 4, &got));
    if (got < 4)
        return snn_error(SNN_E_FORMAT, "%s: truncated: expected at least %zu bytes of IDX header, found %zu%s",
                         s->name, hlen, got, src_unit(s));
    uint32_t magic = be32(hdr), want = (uint32_t)IDX_TYPE_UBYTE << 8 | (uint32_t)ndims;
    if (magic != want) {
        const char *hint = "";
        if (!s->z && hdr[0] == 0x1f && hdr[1] == 0x8b) hint = " (this is gzip data: decompress it first)";
        else if (hdr[0] == 0 && hdr[1] == 0 && hdr[2] != IDX_TYPE_UBYTE)
            hint = " (only unsigned-byte IDX data, type 0x08, is supported)";
        else if (hdr[0] == 0 && hdr[1] == 0 && hdr[3] != ndims)
            hint = ndims == 3 ? " (an IDX file with a different number of dimensions: is this a labels file?)"
                              : " (an IDX file with a different number of dimensions: is this an images file?)";
        return snn_error(SNN_E_FORMAT, "%s: not an IDX %s file: magic number 0x%08X, expected 0x%08X%s",
                         s->name, what, magic, want, hint);
    }
    SNN_TRY(src_read(s, hdr + 4, hlen - 4, &got));
    if (got < hlen - 4)
        return snn_error(SNN_E_FORMAT, "%s: truncated: expected a %zu-byte IDX header, found %zu bytes%s",
                         s->name, hlen, 4 + got, src_unit(s));
    uint64_t total = 1;
    for (int i = 0; i < ndims; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0 || dims[i] > 0x7fffffffu)
            return snn_error(SNN_E_FORMAT, "%s: dimension %d of the IDX header is %u (must be 1..2^31-1)",
                             s->name, i, dims[i]);
        total *= dims[i];  /* each factor < 2^31 and we stop past 2^30: no overflow */
        if (total > SNN_IDX_MAX_BYTES)
            break;
    }
    char shape[64];
    if (ndims == 3) snprintf(shape, sizeof shape, "%u images of %ux%u", dims[0], dims[1], dims[2]);
    else snprintf(shape, sizeof shape, "%u labels", dims[0]);
    if (total > SNN_IDX_MAX_BYTES)
        return snn_error(SNN_E_FORMAT, "%s: the IDX header claims %s, more than the %zu MiB limit",
                         s->name, shape, SNN_IDX_MAX_BYTES >> 20);
    if (!s->z && s->len - s->pos < total)
        return snn_error(SNN_E_FORMAT, "%s: truncated: expected %llu bytes (%zu-byte header + %s), found %zu",
                         s->name, (unsigned long long)(hlen + total), hlen, shape, s->len);
    /* Grow as data arrives: a lying header cannot make us allocate more than ~2x what
     * the file really holds. */
    size_t cap = total < IDX_CHUNK ? (size_t)total : IDX_CHUNK, have = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) return snn_error(SNN_E_NOMEM, "out of memory reading %s", s->name);
    for (;;) {
        snn_status st = src_read(s, buf + have, cap - have, &got);
        if (st != SNN_OK) {
            free(buf);
            return st;
        }
        have += got;
        if (have < cap) break;          /* end of data */
        if (have == total) break;
        size_t next = cap * 2 < total ? cap * 2 : (size_t)total;
        uint8_t *nb = realloc(buf, next);
        if (!nb) {
            free(buf);
            return snn_error(SNN_E_NOMEM, "out of memory reading %s (%zu bytes)", s->name, next);
        }
        buf = nb;
        cap = next;
    }
    if (have < total) {
        free(buf);
        return snn_error(SNN_E_FORMAT, "%s: truncated: expected %llu bytes (%zu-byte header + %s), found %zu%s",
                         s->name, (unsigned long long)(hlen + total), hlen, shape, hlen + have, src_unit(s));
    }
    /* Anything after the payload means the header and the file disagree. */
    uint8_t extra[256];
    snn_status st = src_read(s, extra, sizeof extra, &got);
    if (st != SNN_OK) {
        free(buf);
        return st;
    }
    if (got) {
        free(buf);
        return snn_error(SNN_E_FORMAT, "%s: %s%zu unexpected bytes after the %llu bytes that the header (%s) describes",
                         s->name, got == sizeof extra ? "at least " : "", got,
                         (unsigned long long)(hlen + total), shape);
    }
    *data = buf;
    return SNN_OK;
}

/* Turn the parsed images (and labels, may be NULL) into a dataset. */
static snn_status idx_build(const char *img_name, const uint32_t idims[3], const uint8_t *pix,
                            const char *lbl_name, const uint32_t ldims[3], const uint8_t *lab,
                            snn_dataset **out) {
    if (lab && ldims[0] != idims[0])
        return snn_error(SNN_E_FORMAT, "%s holds %u images but %s holds %u labels: the files do not belong together",
                         img_name, idims[0], lbl_name, ldims[0]);
    snn_dataset *ds;
    SNN_TRY(snn_dataset_alloc((int)idims[0], 1, (int)idims[1], (int)idims[2], &ds));
    size_t total = (size_t)ds->n * ds->features;
    for (size_t i = 0; i < total; i++) ds->x[i] = (float)pix[i] / 255.0f;
    int maxl = -1;
    for (int i = 0; i < ds->n; i++) {
        ds->y[i] = lab ? (int32_t)lab[i] : -1;
        if (ds->y[i] > maxl) maxl = ds->y[i];
    }
    ds->classes = maxl + 1;
    *out = ds;
    return SNN_OK;
}

snn_status snn_dataset_from_idx_memory(const void *images, size_t images_len,
                                       const char *images_name, const void *labels,
                                       size_t labels_len, const char *labels_name,
                                       snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_from_idx_memory: out is NULL");
    *out = NULL;
    if (!images && images_len) return snn_error(SNN_E_INVALID, "snn_dataset_from_idx_memory: images is NULL");
    if (!labels && labels_len) return snn_error(SNN_E_INVALID, "snn_dataset_from_idx_memory: labels is NULL");
    idx_src si = {images_name ? images_name : "(images)", NULL, images, images_len, 0};
    idx_src sl = {labels_name ? labels_name : "(labels)", NULL, labels, labels_len, 0};
    uint32_t idims[3] = {0}, ldims[3] = {0};
    uint8_t *pix = NULL, *lab = NULL;
    snn_status st = idx_read(&si, 3, "images", idims, &pix);
    if (st == SNN_OK && labels) st = idx_read(&sl, 1, "labels", ldims, &lab);
    if (st == SNN_OK) st = idx_build(si.name, idims, pix, sl.name, ldims, lab, out);
    free(pix);
    free(lab);
    return st;
}

snn_status snn_dataset_load_idx(const char *images_path, const char *labels_path,
                                snn_dataset **out) {
    if (!out || !images_path) return snn_error(SNN_E_INVALID, "snn_dataset_load_idx: NULL argument");
    *out = NULL;
    idx_src si, sl;
    uint32_t idims[3] = {0}, ldims[3] = {0};
    uint8_t *pix = NULL, *lab = NULL;
    snn_status st = src_open_file(&si, images_path);
    if (st != SNN_OK) return st;
    st = idx_read(&si, 3, "images", idims, &pix);
    src_close(&si);
    if (st == SNN_OK && labels_path) {
        st = src_open_file(&sl, labels_path);
        if (st == SNN_OK) {
            st = idx_read(&sl, 1, "labels", ldims, &lab);
            src_close(&sl);
        }
    }
    if (st == SNN_OK) st = idx_build(images_path, idims, pix, labels_path, ldims, lab, out);
    free(pix);
    free(lab);
    return st;
}

/* dir/name.gz if it exists, else dir/name if it exists, else SNN_E_IO with directions. */
static snn_status find_file(const char *dir, const char *name, char *path, size_t cap) {
    struct stat st;
    snprintf(path, cap, "%s/%s.gz", dir, name);
    if (stat(path, &st) == 0) return SNN_OK;
    snprintf(path, cap, "%s/%s", dir, name);
    if (stat(path, &st) == 0) return SNN_OK;
    return snn_error(SNN_E_IO,
                     "Fashion-MNIST not found: neither %s.gz nor %s exists; install the data with "
                     "`apt-get install dataset-fashion-mnist` (files go to %s) or point --data-dir "
                     "at a directory holding the four IDX files",
                     path, path, SNN_FASHION_MNIST_DIR);
}

snn_status snn_dataset_load_fashion_mnist(const char *dir, int train, snn_dataset **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_dataset_load_fashion_mnist: out is NULL");
    *out = NULL;
    if (!dir) dir = SNN_FASHION_MNIST_DIR;
    if (strlen(dir) > 3000) return snn_error(SNN_E_INVALID, "data directory name is too long");
    char ip[4096], lp[4096];
    const char *pre = train ? "train" : "t10k";
    char in[64], ln[64];
    snprintf(in, sizeof in, "%s-images-idx3-ubyte", pre);
    snprintf(ln, sizeof ln, "%s-labels-idx1-ubyte", pre);
    SNN_TRY(find_file(dir, in, ip, sizeof ip));
    SNN_TRY(find_file(dir, ln, lp, sizeof lp));
    snn_dataset *ds;
    SNN_TRY(snn_dataset_load_idx(ip, lp, &ds));
    if (ds->h != 28 || ds->w != 28 || ds->classes > 10) {
        snn_status st = snn_error(SNN_E_FORMAT,
                                  "%s: Fashion-MNIST has 28x28 images and labels 0..9, found %dx%d images and labels up to %d",
                                  ip, ds->h, ds->w, ds->classes - 1);
        snn_dataset_free(ds);
        return st;
    }
    ds->classes = 10;
    *out = ds;
    return SNN_OK;
}
