/* Checkpoints in the safetensors format: a writer that lays tensors out contiguously and
 * commits atomically, and a reader that trusts nothing in the file.
 *
 * The reader keeps the whole file in one buffer of the file's real size and checks every
 * header field against it before handing out a pointer, so a hostile file can at worst
 * produce an error message. The JSON header is parsed by cJSON after a cheap pre-scan that
 * bounds the number of JSON values (cJSON's nodes are ~60 bytes each). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/error_internal.h"
#include "core/file_internal.h"
#include "snn/checkpoint.h"
#include "snn/snn.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this file assumes a little-endian host"
#endif

/* At most this many JSON values in a header: ~64 MiB of cJSON nodes. A model with
 * ten thousand tensors needs about 100 000. */
#define CKPT_MAX_JSON_VALUES (1u << 20)
/* Integers in the header must be exact in a double (cJSON parses numbers as doubles). */
#define CKPT_MAX_INT 9007199254740992.0

static const struct {
    const char *name;
    size_t size;
} dtype_table[SNN_CKPT_DTYPE_COUNT] = {
    [SNN_CKPT_F32] = {"F32", 4},     [SNN_CKPT_F16] = {"F16", 2},
    [SNN_CKPT_BF16] = {"BF16", 2},   [SNN_CKPT_U8] = {"U8", 1},
    [SNN_CKPT_I32] = {"I32", 4},     [SNN_CKPT_F64] = {"F64", 8},
    [SNN_CKPT_I8] = {"I8", 1},       [SNN_CKPT_I16] = {"I16", 2},
    [SNN_CKPT_I64] = {"I64", 8},     [SNN_CKPT_U16] = {"U16", 2},
    [SNN_CKPT_U32] = {"U32", 4},     [SNN_CKPT_U64] = {"U64", 8},
    [SNN_CKPT_BOOL] = {"BOOL", 1},   [SNN_CKPT_F8_E4M3] = {"F8_E4M3", 1},
    [SNN_CKPT_F8_E5M2] = {"F8_E5M2", 1}, [SNN_CKPT_F8_E8M0] = {"F8_E8M0", 1},
};

const char *snn_ckpt_dtype_name(snn_ckpt_dtype t) {
    return (unsigned)t < SNN_CKPT_DTYPE_COUNT ? dtype_table[t].name : NULL;
}

size_t snn_ckpt_dtype_size(snn_ckpt_dtype t) {
    return (unsigned)t < SNN_CKPT_DTYPE_COUNT ? dtype_table[t].size : 0;
}

snn_status snn_ckpt_dtype_from_name(const char *name, snn_ckpt_dtype *out) {
    for (int i = 0; name && i < SNN_CKPT_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_table[i].name)) {
            *out = (snn_ckpt_dtype)i;
            return SNN_OK;
        }
    return snn_error(SNN_E_INVALID, "unknown safetensors dtype \"%s\"", name ? name : "(null)");
}

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF): Python's json decodes the
 * header as UTF-8 and rejects anything else, so we neither write nor accept it. */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned min, cp;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; min = 0x80; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; min = 0x800; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; min = 0x10000; cp = c & 0x07; }
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

/* Product of the dims times the element size, or 0 with *ok = 0 on overflow. */
static size_t shape_bytes(int rank, const int64_t *shape, size_t elem, size_t *numel, int *ok) {
    uint64_t n = 1, b;
    *ok = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n)) *ok = 0;
    if (!*ok || __builtin_mul_overflow(n, (uint64_t)elem, &b) || b > SIZE_MAX) {
        *ok = 0;
        return 0;
    }
    *numel = (size_t)n;
    return (size_t)b;
}

/* ====================================================================== writer */

typedef struct {
    char *name;
    snn_ckpt_dtype dtype;
    int rank;
    int64_t shape[SNN_CKPT_MAX_RANK];
    size_t nbytes;
    void *data;
} w_tensor;

struct snn_ckpt_writer {
    w_tensor *t;
    size_t nt, cap_t;
    char **meta;  /* key, value, key, value ... */
    size_t nm, cap_m;
};

snn_status snn_ckpt_writer_begin(snn_ckpt_writer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_ckpt_writer_begin: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? SNN_OK : snn_error(SNN_E_NOMEM, "out of memory creating a checkpoint writer");
}

void snn_ckpt_writer_free(snn_ckpt_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->nt; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    for (size_t i = 0; i < 2 * w->nm; i++) free(w->meta[i]);
    free(w->t);
    free(w->meta);
    free(w);
}

static snn_status check_key(const char *what, const char *s) {
    if (!s || !*s) return snn_error(SNN_E_INVALID, "checkpoint %s must be a non-empty string", what);
    if (!utf8_valid((const unsigned char *)s, strlen(s)))
        return snn_error(SNN_E_INVALID, "checkpoint %s \"%s\" is not valid UTF-8", what, s);
    return SNN_OK;
}

snn_status snn_ckpt_writer_add_tensor(snn_ckpt_writer *w, const char *name, snn_ckpt_dtype dtype,
                                      int rank, const int64_t *shape, const void *data) {
    if (!w) return snn_error(SNN_E_INVALID, "snn_ckpt_writer_add_tensor: writer is NULL");
    SNN_TRY(check_key("tensor name", name));
    if (!strcmp(name, "__metadata__"))
        return snn_error(SNN_E_INVALID, "\"__metadata__\" is reserved and cannot name a tensor");
    size_t elem = snn_ckpt_dtype_size(dtype);
    if (!elem) return snn_error(SNN_E_INVALID, "tensor %s: unknown dtype %d", name, (int)dtype);
    if (rank < 0 || rank > SNN_CKPT_MAX_RANK || (rank > 0 && !shape))
        return snn_error(SNN_E_INVALID, "tensor %s: rank %d outside 0..%d", name, rank, SNN_CKPT_MAX_RANK);
    size_t numel;
    int ok;
    size_t nbytes = shape_bytes(rank, shape, elem, &numel, &ok);
    if (!ok) return snn_error(SNN_E_INVALID, "tensor %s: negative or overflowing shape", name);
    if (nbytes && !data) return snn_error(SNN_E_INVALID, "tensor %s: data is NULL", name);
    for (size_t i = 0; i < w->nt; i++)
        if (!strcmp(w->t[i].name, name))
            return snn_error(SNN_E_INVALID, "tensor %s added twice to a checkpoint", name);
    if (w->nt == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 16;
        w_tensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return snn_error(SNN_E_NOMEM, "out of memory adding tensor %s", name);
        w->t = nt;
        w->cap_t = cap;
    }
    w_tensor *t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return snn_error(SNN_E_NOMEM, "out of memory copying tensor %s (%zu bytes)", name, nbytes);
    }
    if (nbytes) memcpy(t->data, data, nbytes);
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->shape[i] = shape[i];
    t->nbytes = nbytes;
    w->nt++;
    return SNN_OK;
}

snn_status snn_ckpt_writer_add_metadata(snn_ckpt_writer *w, const char *key, const char *value) {
    if (!w) return snn_error(SNN_E_INVALID, "snn_ckpt_writer_add_metadata: writer is NULL");
    SNN_TRY(check_key("metadata key", key));
    if (!value) return snn_error(SNN_E_INVALID, "metadata %s: value is NULL", key);
    if (!utf8_valid((const unsigned char *)value, strlen(value)))
        return snn_error(SNN_E_INVALID, "metadata %s: value is not valid UTF-8", key);
    for (size_t i = 0; i < w->nm; i++)
        if (!strcmp(w->meta[2 * i], key))
            return snn_error(SNN_E_INVALID, "metadata key %s added twice to a checkpoint", key);
    if (w->nm == w->cap_m) {
        size_t cap = w->cap_m ? 2 * w->cap_m : 8;
        char **nm = realloc(w->meta, 2 * cap * sizeof *nm);
        if (!nm) return snn_error(SNN_E_NOMEM, "out of memory adding metadata %s", key);
        w->meta = nm;
        w->cap_m = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return snn_error(SNN_E_NOMEM, "out of memory adding metadata %s", key);
    }
    w->meta[2 * w->nm] = k;
    w->meta[2 * w->nm + 1] = v;
    w->nm++;
    return SNN_OK;
}

/* A growing string for the header. */
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt_u64(strbuf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal; bytes >= 0x80 pass through (already checked to be UTF-8). */
static void sb_json_string(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* (key, index) pairs sorted with qsort (qsort_r is not standard C). */
typedef struct {
    size_t size;
    const char *name;
    size_t idx;
} sort_key;

/* Data order: larger elements first (stable), so with the header padded to 8 bytes every
 * tensor starts at a multiple of its element size and a reader may map it in place. */
static int by_elem_size(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const sort_key *)a)->name, ((const sort_key *)b)->name);
}

static snn_status write_all(FILE *f, const void *p, size_t n, const char *tmp) {
    if (n && fwrite(p, 1, n, f) != n)
        return snn_error(SNN_E_IO, "cannot write %s: %s", tmp, strerror(errno));
    return SNN_OK;
}

/* fsync the directory holding path, so the rename itself survives a crash. */
static snn_status sync_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return snn_error(SNN_E_IO, "cannot open directory %s to sync it: %s", dir, strerror(errno));
    /* Some file systems cannot sync a directory (EINVAL); the data itself is synced. */
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL && e != EROFS)
        return snn_error(SNN_E_IO, "cannot sync directory %s: %s", dir, strerror(e));
    return SNN_OK;
}

snn_status snn_ckpt_writer_commit(snn_ckpt_writer *w, const char *path) {
    if (!w || !path || !*path) return snn_error(SNN_E_INVALID, "snn_ckpt_writer_commit: NULL writer or path");
    sort_key *order = malloc((w->nt ? w->nt : 1) * sizeof *order);
    uint64_t *begin = malloc((w->nt ? w->nt : 1) * sizeof *begin);
    if (!order || !begin) {
        free(order);
        free(begin);
        return snn_error(SNN_E_NOMEM, "out of memory writing %s", path);
    }
    for (size_t i = 0; i < w->nt; i++) order[i] = (sort_key){snn_ckpt_dtype_size(w->t[i].dtype), NULL, i};
    qsort(order, w->nt, sizeof *order, by_elem_size);
    uint64_t off = 0;
    for (size_t k = 0; k < w->nt; k++) {
        begin[order[k].idx] = off;
        off += w->t[order[k].idx].nbytes;
    }
    strbuf h = {0};
    sb_str(&h, "{");
    int first = 1;
    if (w->nm) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i) sb_str(&h, ",");
            sb_json_string(&h, w->meta[2 * i]);
            sb_str(&h, ":");
            sb_json_string(&h, w->meta[2 * i + 1]);
        }
        sb_str(&h, "}");
        first = 0;
    }
    for (size_t i = 0; i < w->nt; i++) {
        const w_tensor *t = &w->t[i];
        if (!first) sb_str(&h, ",");
        first = 0;
        sb_json_string(&h, t->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, snn_ckpt_dtype_name(t->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->rank; d++) {
            if (d) sb_str(&h, ",");
            sb_fmt_u64(&h, (uint64_t)t->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_fmt_u64(&h, begin[i]);
        sb_str(&h, ",");
        sb_fmt_u64(&h, begin[i] + t->nbytes);
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while (!h.oom && h.len % 8) sb_str(&h, " "); /* on OOM sb_put adds nothing */
    free(begin);
    if (h.oom || h.len > SNN_CKPT_MAX_HEADER) {
        free(order);
        free(h.s);
        return h.oom ? snn_error(SNN_E_NOMEM, "out of memory writing %s", path)
                     : snn_error(SNN_E_INVALID, "checkpoint header for %s would exceed %llu bytes", path,
                                 (unsigned long long)SNN_CKPT_MAX_HEADER);
    }
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        free(order);
        free(h.s);
        return snn_error(SNN_E_INVALID, "checkpoint path is too long: %s", path);
    }
    snn_status st = SNN_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) st = snn_error(SNN_E_IO, "cannot create %s: %s", tmp, strerror(errno));
    if (st == SNN_OK) {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
        st = write_all(f, len8, 8, tmp);
        if (st == SNN_OK) st = write_all(f, h.s, h.len, tmp);
        for (size_t k = 0; st == SNN_OK && k < w->nt; k++)
            st = write_all(f, w->t[order[k].idx].data, w->t[order[k].idx].nbytes, tmp);
        if (st == SNN_OK && fflush(f) != 0) st = snn_error(SNN_E_IO, "cannot write %s: %s", tmp, strerror(errno));
        if (st == SNN_OK && fsync(fileno(f)) != 0)
            st = snn_error(SNN_E_IO, "cannot sync %s to disk: %s", tmp, strerror(errno));
        if (fclose(f) != 0 && st == SNN_OK) st = snn_error(SNN_E_IO, "cannot close %s: %s", tmp, strerror(errno));
        if (st == SNN_OK && rename(tmp, path) != 0)
            st = snn_error(SNN_E_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (st != SNN_OK) unlink(tmp);
        else st = sync_dir(path);
    }
    free(order);
    free(h.s);
    return st;
}

/* ====================================================================== reader */

typedef struct {
    char *name;
    snn_ckpt_dtype dtype;
    int rank;
    int64_t shape[SNN_CKPT_MAX_RANK];
    size_t numel, begin, nbytes;
} r_tensor;

struct snn_ckpt {
    char *path;
    uint8_t *buf;
    size_t len;
    const uint8_t *data;  /* start of the data region */
    size_t data_len;
    r_tensor *t;          /* sorted by offset */
    size_t nt;
    size_t *by_name;      /* indices into t sorted by name */
    char **meta;          /* key, value, ... */
    size_t nm;
};

void snn_ckpt_close(snn_ckpt *c) {
    if (!c) return;
    for (size_t i = 0; i < c->nt; i++) free(c->t[i].name);
    for (size_t i = 0; i < 2 * c->nm; i++) free(c->meta[i]);
    free(c->t);
    free(c->by_name);
    free(c->meta);
    free(c->buf);
    free(c->path);
    free(c);
}

/* Count JSON values (commas, colons and openers outside strings) without parsing, and
 * note any \u0000 escape inside a string: cJSON decodes it into a NUL that silently cuts
 * the name short ("layers.0.weight\u0000evil" would load as "layers.0.weight"). */
static size_t json_value_count(const uint8_t *s, size_t n, int *has_nul) {
    size_t count = 0;
    int in_str = 0;
    *has_nul = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = s[i];
        if (in_str) {
            if (ch == '\\') {
                if (n - i > 5 && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) *has_nul = 1;
                i++;
            } else if (ch == '"') {
                in_str = 0;
            }
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == ',' || ch == ':' || ch == '[' || ch == '{') {
            count++;
        }
    }
    return count;
}

static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= CKPT_MAX_INT) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_offset(const void *a, const void *b) {
    const r_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

#define BAD(...) snn_error(SNN_E_FORMAT, __VA_ARGS__)

/* Validate one tensor entry of the header into *t (name already copied). */
static snn_status parse_entry(const snn_ckpt *c, const cJSON *e, r_tensor *t) {
    const char *p = c->path, *n = t->name;
    if (!cJSON_IsObject(e)) return BAD("%s: header entry \"%s\" is not an object", p, n);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt)) return BAD("%s: tensor \"%s\" has no \"dtype\" string", p, n);
    if (snn_ckpt_dtype_from_name(dt->valuestring, &t->dtype) != SNN_OK)
        return BAD("%s: tensor \"%s\" has unknown dtype \"%.40s\"", p, n, dt->valuestring);
    if (!cJSON_IsArray(sh)) return BAD("%s: tensor \"%s\" has no \"shape\" array", p, n);
    int rank = cJSON_GetArraySize(sh);
    if (rank > SNN_CKPT_MAX_RANK)
        return BAD("%s: tensor \"%s\" has rank %d, more than %d", p, n, rank, SNN_CKPT_MAX_RANK);
    t->rank = 0;
    for (const cJSON *d = sh->child; d; d = d->next) {
        uint64_t v;
        if (!json_uint(d, &v)) return BAD("%s: tensor \"%s\": shape entries must be integers >= 0", p, n);
        t->shape[t->rank++] = (int64_t)v;
    }
    int ok;
    size_t nbytes = shape_bytes(t->rank, t->shape, snn_ckpt_dtype_size(t->dtype), &t->numel, &ok);
    if (!ok) return BAD("%s: tensor \"%s\": the shape's size overflows", p, n);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return BAD("%s: tensor \"%s\" has no \"data_offsets\" [begin, end] pair", p, n);
    uint64_t b, en;
    if (!json_uint(off->child, &b) || !json_uint(off->child->next, &en))
        return BAD("%s: tensor \"%s\": data_offsets must be integers >= 0", p, n);
    if (b > en || en > c->data_len)
        return BAD("%s: tensor \"%s\": data_offsets [%llu, %llu] are outside the %zu-byte data region (file truncated?)",
                   p, n, (unsigned long long)b, (unsigned long long)en, c->data_len);
    if (en - b != nbytes)
        return BAD("%s: tensor \"%s\": data_offsets span %llu bytes but %s of that shape needs %zu",
                   p, n, (unsigned long long)(en - b), dt->valuestring, nbytes);
    t->begin = (size_t)b;
    t->nbytes = nbytes;
    return SNN_OK;
}

static snn_status parse_metadata(snn_ckpt *c, const cJSON *m) {
    const char *p = c->path;
    if (!cJSON_IsObject(m)) return BAD("%s: \"__metadata__\" is not an object", p);
    size_t n = (size_t)cJSON_GetArraySize(m);
    c->meta = calloc(2 * n + 1, sizeof *c->meta);
    if (!c->meta) return snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!cJSON_IsString(e)) return BAD("%s: metadata \"%s\" is not a string", p, e->string);
        c->meta[2 * c->nm] = strdup(e->string);
        c->meta[2 * c->nm + 1] = strdup(e->valuestring);
        c->nm++;
        if (!c->meta[2 * c->nm - 2] || !c->meta[2 * c->nm - 1])
            return snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
    }
    /* Duplicate keys: a JSON object may legally repeat them, a checkpoint may not. */
    char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
    for (size_t i = 0; i < n; i++) keys[i] = c->meta[2 * i];
    qsort(keys, n, sizeof *keys, cmp_str_ptr);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(keys[i - 1], keys[i])) {
            snn_status st = BAD("%s: metadata key \"%s\" appears twice", p, keys[i]);
            free(keys);
            return st;
        }
    free(keys);
    return SNN_OK;
}

/* Everything after the buffer is in place: header, entries, layout. */
static snn_status parse(snn_ckpt *c) {
    const char *p = c->path;
    if (c->len < 8)
        return BAD("%s: %zu bytes is too short for a safetensors file (8-byte header length first)", p, c->len);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)c->buf[i] << (8 * i);
    if (hl > SNN_CKPT_MAX_HEADER)
        return BAD("%s: header length %llu exceeds the %llu-byte limit (not a safetensors file?)", p,
                   (unsigned long long)hl, (unsigned long long)SNN_CKPT_MAX_HEADER);
    if (hl > c->len - 8)
        return BAD("%s: header length %llu but only %zu bytes follow (file truncated?)", p,
                   (unsigned long long)hl, c->len - 8);
    if (hl < 2 || c->buf[8] != '{') return BAD("%s: the header is not a JSON object", p);
    const uint8_t *h = c->buf + 8;
    if (!utf8_valid(h, (size_t)hl)) return BAD("%s: the header is not valid UTF-8", p);
    int has_nul;
    if (json_value_count(h, (size_t)hl, &has_nul) > CKPT_MAX_JSON_VALUES)
        return BAD("%s: the header holds more than %u JSON values", p, CKPT_MAX_JSON_VALUES);
    if (has_nul)
        return BAD("%s: a name or value in the header contains an escaped NUL (\\u0000); tensor names and "
                   "metadata are NUL-free strings", p);
    c->data = h + hl;
    c->data_len = c->len - 8 - (size_t)hl;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)h, (size_t)hl, &end, 0);
    if (!root) {
        size_t at = end && end >= (const char *)h ? (size_t)(end - (const char *)h) : 0;
        return BAD("%s: the header is not valid JSON (error near byte %zu of %llu)", p, at,
                   (unsigned long long)hl);
    }
    /* Only padding (spaces, per the format) may follow the JSON object. */
    for (const char *q = end; q < (const char *)h + hl; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            cJSON_Delete(root);
            return BAD("%s: unexpected bytes after the JSON header at byte %zu", p,
                       (size_t)(q - (const char *)h));
        }
    snn_status st = SNN_OK;
    if (!cJSON_IsObject(root)) st = BAD("%s: the header is not a JSON object", p);
    size_t n = st == SNN_OK ? (size_t)cJSON_GetArraySize(root) : 0;
    if (st == SNN_OK) {
        c->t = calloc(n ? n : 1, sizeof *c->t);
        c->by_name = calloc(n ? n : 1, sizeof *c->by_name);
        if (!c->t || !c->by_name) st = snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
    }
    int n_meta = 0;
    for (const cJSON *e = st == SNN_OK ? root->child : NULL; e && st == SNN_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (n_meta++) st = BAD("%s: \"__metadata__\" appears twice", p);
            else st = parse_metadata(c, e);
            continue;
        }
        r_tensor *t = &c->t[c->nt];
        t->name = strdup(e->string);
        if (!t->name) {
            st = snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
            break;
        }
        c->nt++;
        st = parse_entry(c, e, t);
    }
    cJSON_Delete(root);
    if (st != SNN_OK) return st;
    /* Layout: sorted by offset, the tensors must tile the data region exactly. */
    qsort(c->t, c->nt, sizeof *c->t, cmp_offset);
    size_t pos = 0;
    for (size_t i = 0; i < c->nt; i++) {
        if (c->t[i].begin != pos)
            return BAD("%s: tensor \"%s\" starts at byte %zu of the data but the previous tensor ends at %zu (%s)",
                       p, c->t[i].name, c->t[i].begin, pos, c->t[i].begin < pos ? "overlap" : "gap");
        pos += c->t[i].nbytes;
    }
    if (pos != c->data_len)
        return BAD("%s: the tensors cover %zu bytes but the data region holds %zu", p, pos, c->data_len);
    sort_key *keys = malloc((c->nt ? c->nt : 1) * sizeof *keys);
    if (!keys) return snn_error(SNN_E_NOMEM, "out of memory reading %s", p);
    for (size_t i = 0; i < c->nt; i++) keys[i] = (sort_key){0, c->t[i].name, i};
    qsort(keys, c->nt, sizeof *keys, by_name);
    for (size_t i = 0; i < c->nt; i++) c->by_name[i] = keys[i].idx;
    free(keys);
    for (size_t i = 1; i < c->nt; i++)
        if (!strcmp(c->t[c->by_name[i - 1]].name, c->t[c->by_name[i]].name))
            return BAD("%s: tensor \"%s\" appears twice in the header", p, c->t[c->by_name[i]].name);
    return SNN_OK;
}

static snn_status ckpt_new(const char *name, snn_ckpt **out) {
    *out = calloc(1, sizeof **out);
    if (!*out || !((*out)->path = strdup(name ? name : "(memory)"))) {
        free(*out);
        *out = NULL;
        return snn_error(SNN_E_NOMEM, "out of memory opening a checkpoint");
    }
    return SNN_OK;
}

static snn_status finish_open(snn_ckpt *c, snn_ckpt **out) {
    snn_status st = parse(c);
    if (st != SNN_OK) {
        snn_ckpt_close(c);
        return st;
    }
    *out = c;
    return SNN_OK;
}

snn_status snn_ckpt_open_memory(const void *buf, size_t len, const char *name, snn_ckpt **out) {
    if (!out || (!buf && len)) return snn_error(SNN_E_INVALID, "snn_ckpt_open_memory: NULL argument");
    *out = NULL;
    snn_ckpt *c;
    SNN_TRY(ckpt_new(name, &c));
    c->buf = malloc(len ? len : 1);
    if (!c->buf) {
        snn_ckpt_close(c);
        return snn_error(SNN_E_NOMEM, "out of memory copying a %zu-byte checkpoint", len);
    }
    if (len) memcpy(c->buf, buf, len);
    c->len = len;
    return finish_open(c, out);
}

snn_status snn_ckpt_open(const char *path, snn_ckpt **out) {
    if (!out || !path) return snn_error(SNN_E_INVALID, "snn_ckpt_open: NULL argument");
    *out = NULL;
    int fd;
    uint64_t fsize;
    SNN_TRY(snn_open_regular(path, "checkpoint", &fd, &fsize));
    if (fsize > SIZE_MAX) {
        close(fd);
        return snn_error(SNN_E_NOMEM, "%s: %llu bytes do not fit in memory on this host", path,
                         (unsigned long long)fsize);
    }
    snn_ckpt *c;
    snn_status st = ckpt_new(path, &c);
    if (st != SNN_OK) {
        close(fd);
        return st;
    }
    c->len = (size_t)fsize;
    c->buf = malloc(c->len ? c->len : 1);
    if (!c->buf) st = snn_error(SNN_E_NOMEM, "out of memory reading %s (%zu bytes)", path, c->len);
    size_t have = 0;
    while (st == SNN_OK && have < c->len) {
        ssize_t r = read(fd, c->buf + have, c->len - have);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = snn_error(SNN_E_IO, "cannot read %s: %s", path, strerror(errno));
        else if (r == 0) st = snn_error(SNN_E_IO, "%s shrank while being read (%zu of %zu bytes)", path, have, c->len);
        else have += (size_t)r;
    }
    close(fd);
    if (st != SNN_OK) {
        snn_ckpt_close(c);
        return st;
    }
    return finish_open(c, out);
}

const char *snn_ckpt_path(const snn_ckpt *c) { return c ? c->path : NULL; }
size_t snn_ckpt_num_tensors(const snn_ckpt *c) { return c ? c->nt : 0; }
size_t snn_ckpt_num_metadata(const snn_ckpt *c) { return c ? c->nm : 0; }

static void fill_tensor(const snn_ckpt *c, const r_tensor *r, snn_ckpt_tensor *t) {
    memset(t, 0, sizeof *t);
    t->name = r->name;
    t->dtype = r->dtype;
    t->rank = r->rank;
    for (int i = 0; i < r->rank; i++) t->shape[i] = r->shape[i];
    t->numel = r->numel;
    t->nbytes = r->nbytes;
    t->data = c->data + r->begin;
}

snn_status snn_ckpt_tensor_at(const snn_ckpt *c, size_t i, snn_ckpt_tensor *t) {
    if (!c || !t) return snn_error(SNN_E_INVALID, "snn_ckpt_tensor_at: NULL argument");
    if (i >= c->nt) return snn_error(SNN_E_INVALID, "%s: tensor index %zu out of range (%zu tensors)", c->path, i, c->nt);
    fill_tensor(c, &c->t[i], t);
    return SNN_OK;
}

static const r_tensor *lookup(const snn_ckpt *c, const char *name) {
    size_t lo = 0, hi = c->nt;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(c->t[c->by_name[mid]].name, name);
        if (!r) return &c->t[c->by_name[mid]];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int snn_ckpt_has(const snn_ckpt *c, const char *name) { return c && name && lookup(c, name) != NULL; }

snn_status snn_ckpt_find(const snn_ckpt *c, const char *name, snn_ckpt_tensor *t) {
    if (!c || !name || !t) return snn_error(SNN_E_INVALID, "snn_ckpt_find: NULL argument");
    const r_tensor *r = lookup(c, name);
    if (!r) return snn_error(SNN_E_INVALID, "%s has no tensor named \"%s\"", c->path, name);
    fill_tensor(c, r, t);
    return SNN_OK;
}

snn_status snn_ckpt_read(const snn_ckpt *c, const char *name, snn_ckpt_dtype dtype, void *dst,
                         size_t dst_bytes) {
    snn_ckpt_tensor t = {0};
    SNN_TRY(snn_ckpt_find(c, name, &t));
    if (t.dtype != dtype)
        return snn_error(SNN_E_SHAPE, "%s: tensor \"%s\" is %s, not %s", c->path, name,
                         snn_ckpt_dtype_name(t.dtype), snn_ckpt_dtype_name(dtype) ? snn_ckpt_dtype_name(dtype) : "?");
    if (t.nbytes != dst_bytes)
        return snn_error(SNN_E_SHAPE, "%s: tensor \"%s\" holds %zu bytes, the destination %zu", c->path,
                         name, t.nbytes, dst_bytes);
    if (t.nbytes) memcpy(dst, t.data, t.nbytes);
    return SNN_OK;
}

const char *snn_ckpt_metadata(const snn_ckpt *c, const char *key) {
    for (size_t i = 0; c && key && i < c->nm; i++)
        if (!strcmp(c->meta[2 * i], key)) return c->meta[2 * i + 1];
    return NULL;
}

snn_status snn_ckpt_metadata_at(const snn_ckpt *c, size_t i, const char **key, const char **value) {
    if (!c || i >= c->nm) return snn_error(SNN_E_INVALID, "metadata index %zu out of range", i);
    if (key) *key = c->meta[2 * i];
    if (value) *value = c->meta[2 * i + 1];
    return SNN_OK;
}
