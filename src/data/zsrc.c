/* Data files, raw or gzip, read in constant memory with the gzip trailer checked.
 *
 * zlib's gzread stops quietly at a non-gzip byte after a member ("trailing garbage") and
 * leaves a missing trailer to a gzerror() that callers forget; here the whole file is
 * accounted for: each member inflates to Z_STREAM_END (inflate with windowBits 15 + 16
 * checks the CRC-32 and ISIZE fields), another member may follow (as gzip itself allows),
 * and anything else after the last member is refused. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/file_internal.h"
#include "data/data_internal.h"

#define ZSRC_IN (1u << 16)

struct snn_zsrc {
    const char *name;
    int fd;
    int gzip;       /* 1: inflate; 0: raw bytes */
    int z_live;     /* inflateInit2 succeeded */
    int in_member;  /* inside a gzip member (its trailer not seen yet) */
    int eof;        /* the file has no more bytes */
    int done;       /* no more output */
    uint64_t member_start;  /* file offset of the current member, for messages */
    uint64_t consumed;      /* file bytes handed to inflate or out as raw */
    z_stream z;
    uint8_t in[ZSRC_IN];
    size_t in_pos, in_len;
};

/* Refill the input buffer when empty; sets eof at the end of the file. */
static snn_status fill(snn_zsrc *s) {
    if (s->in_pos < s->in_len || s->eof) return SNN_OK;
    for (;;) {
        ssize_t r = read(s->fd, s->in, sizeof s->in);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return snn_error(SNN_E_IO, "%s: read error: %s", s->name, strerror(errno));
        s->in_pos = 0;
        s->in_len = (size_t)r;
        if (r == 0) s->eof = 1;
        return SNN_OK;
    }
}

snn_status snn_zsrc_open(const char *path, const char *what, snn_zsrc **out) {
    *out = NULL;
    int fd;
    SNN_TRY(snn_open_regular(path, what, &fd, NULL));
    snn_zsrc *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return snn_error(SNN_E_NOMEM, "out of memory opening %s", path);
    }
    s->name = path;
    s->fd = fd;
    snn_status st = fill(s);
    /* Two bytes decide; a file whose first read returns one byte is raw either way. */
    if (st == SNN_OK && s->in_len >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
        s->gzip = 1;
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) st = snn_error(SNN_E_NOMEM, "cannot set up zlib to read %s", path);
        else s->z_live = 1;
        s->in_member = 1;
    }
    if (st != SNN_OK) {
        snn_zsrc_close(s);
        return st;
    }
    *out = s;
    return SNN_OK;
}

int snn_zsrc_is_gzip(const snn_zsrc *s) { return s && s->gzip; }

void snn_zsrc_close(snn_zsrc *s) {
    if (!s) return;
    if (s->z_live) inflateEnd(&s->z);
    if (s->fd >= 0) close(s->fd);
    free(s);
}

static snn_status read_raw(snn_zsrc *s, uint8_t *dst, size_t n, size_t *got) {
    while (*got < n) {
        SNN_TRY(fill(s));
        if (s->in_pos == s->in_len) break;
        size_t k = s->in_len - s->in_pos < n - *got ? s->in_len - s->in_pos : n - *got;
        memcpy(dst + *got, s->in + s->in_pos, k);
        s->in_pos += k;
        *got += k;
    }
    return SNN_OK;
}

/* Between members: only the end of the file or another gzip header may follow. */
static snn_status next_member(snn_zsrc *s) {
    SNN_TRY(fill(s));
    if (s->in_pos == s->in_len) {
        s->done = 1;
        return SNN_OK;
    }
    uint8_t b0 = s->in[s->in_pos], b1;
    if (s->in_pos + 1 < s->in_len) {
        b1 = s->in[s->in_pos + 1];
    } else {
        /* The magic straddles a buffer refill: keep b0, read more. */
        s->in[0] = b0;
        ssize_t r;
        do r = read(s->fd, s->in + 1, sizeof s->in - 1);
        while (r < 0 && errno == EINTR);
        if (r < 0) return snn_error(SNN_E_IO, "%s: read error: %s", s->name, strerror(errno));
        s->in_pos = 0;
        s->in_len = 1 + (size_t)r;
        if (r == 0) s->eof = 1;
        b1 = r > 0 ? s->in[1] : 0;
    }
    if (b0 != 0x1f || b1 != 0x8b)
        return snn_error(SNN_E_FORMAT, "%s: unexpected bytes after the gzip data at byte %llu of the file (trailing garbage; `gzip -t` reports it too)",
                         s->name, (unsigned long long)s->consumed);
    if (inflateReset(&s->z) != Z_OK) return snn_error(SNN_E_FORMAT, "%s: cannot restart zlib", s->name);
    s->in_member = 1;
    s->member_start = s->consumed;
    return SNN_OK;
}

snn_status snn_zsrc_read(snn_zsrc *s, void *dst, size_t n, size_t *got) {
    *got = 0;
    if (!s->gzip) return read_raw(s, dst, n, got);
    while (*got < n && !s->done) {
        if (!s->in_member) {
            SNN_TRY(next_member(s));
            continue;
        }
        SNN_TRY(fill(s));
        if (s->in_pos == s->in_len)
            return snn_error(SNN_E_FORMAT, "%s: the gzip stream ends early (truncated file: %s)", s->name,
                             s->consumed - s->member_start < 18 ? "no complete gzip member"
                                                                : "no complete CRC-32/length trailer");
        size_t room = n - *got < (1u << 30) ? n - *got : (1u << 30);
        s->z.next_in = s->in + s->in_pos;
        s->z.avail_in = (uInt)(s->in_len - s->in_pos);
        s->z.next_out = (Bytef *)dst + *got;
        s->z.avail_out = (uInt)room;
        int r = inflate(&s->z, Z_NO_FLUSH);
        size_t used = (s->in_len - s->in_pos) - s->z.avail_in;
        s->in_pos += used;
        s->consumed += used;
        *got += room - s->z.avail_out;
        if (r == Z_STREAM_END) {
            s->in_member = 0;
        } else if (r == Z_DATA_ERROR) {
            return snn_error(SNN_E_FORMAT, "%s: corrupt gzip data (%s)", s->name, s->z.msg ? s->z.msg : "data error");
        } else if (r == Z_MEM_ERROR) {
            return snn_error(SNN_E_NOMEM, "%s: out of memory in zlib", s->name);
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            return snn_error(SNN_E_FORMAT, "%s: corrupt gzip data (zlib status %d)", s->name, r);
        }
    }
    return SNN_OK;
}
