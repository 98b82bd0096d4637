/* Hostile files below the model layer: gzip integrity (trailer, trailing bytes, flipped
 * bytes; judged against `gzip -t` on the same files), special files (FIFO, directory,
 * device) refused without blocking, and NUL escapes in safetensors names. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "snn/checkpoint.h"
#include "snn/data.h"
#include "snn/lm_config.h"
#include "snn/model.h"
#include "snn/tokenizer.h"
#include "snn/tokens.h"

static char tmpdir[256];
static uint64_t rs;

static uint32_t rnd(uint32_t n) {
    float u;
    snn_test_fill_uniform(&u, 1, 0.0f, 1.0f, &rs);
    uint32_t v = (uint32_t)(u * (float)n);
    return v < n ? v : n - 1;
}

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static void put_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(buf, 1, len, f) != len)) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

static uint8_t *get_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* gzip one buffer in memory (zlib's gzip wrapper, level 6). */
static uint8_t *gz_bytes(const uint8_t *src, size_t n, size_t *out_len) {
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) exit(2);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    uint8_t *out = malloc(cap);
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) exit(2);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static int have_gzip = -1;

/* `gzip -t` on the file: 1 if it calls the file good (exit 0), 0 if not (1 error, 2 warning
 * such as trailing garbage), -1 when gzip is not installed. */
static int gzip_t_ok(const char *path) {
    if (have_gzip < 0) have_gzip = system("gzip --version >/dev/null 2>&1") == 0;
    if (!have_gzip) return -1;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "gzip -t '%s' >/dev/null 2>&1", path);
    return system(cmd) == 0;
}

static uint8_t *idx_images(uint32_t n, uint32_t h, uint32_t w, size_t *len) {
    *len = 16 + (size_t)n * h * w;
    uint8_t *b = malloc(*len);
    uint32_t hdr[4] = {0x803, n, h, w};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (uint8_t)(hdr[i] >> (24 - 8 * k));
    for (size_t i = 16; i < *len; i++) b[i] = (uint8_t)rnd(256);
    return b;
}

/* Load `path` as IDX images; also ask gzip -t and require the two to agree. */
static int load_agrees(const char *path, const char *what, int expect_ok) {
    snn_dataset *ds = NULL;
    snn_status st = snn_dataset_load_idx(path, NULL, &ds);
    snn_dataset_free(ds);
    int g = gzip_t_ok(path);
    CHECK_MSG((st == SNN_OK) == expect_ok, "%s: status %s (%s)", what, snn_status_name(st), snn_last_error());
    if (g >= 0) CHECK_MSG(g == expect_ok, "%s: gzip -t says %d, expected %d", what, g, expect_ok);
    return st == SNN_OK;
}

static void test_gzip_crafted(void) {
    size_t rl, gl;
    uint8_t *raw = idx_images(7, 12, 9, &rl);
    uint8_t *gz = gz_bytes(raw, rl, &gl);
    char p[512];
    path_of(p, sizeof p, "x.idx.gz");

    put_file(p, gz, gl);
    CHECK(load_agrees(p, "intact gzip", 1));
    /* every cut inside the 8-byte trailer, and into the deflate data */
    for (size_t cut = 1; cut <= 8 + 16 && cut < gl; cut++) {
        put_file(p, gz, gl - cut);
        load_agrees(p, "truncated gzip", 0);
        CHECK(strstr(snn_last_error(), "ends early") != NULL || strstr(snn_last_error(), "corrupt gzip") != NULL);
    }
    put_file(p, gz, gl - 8);
    snn_dataset *ds = NULL;
    CHECK(snn_dataset_load_idx(p, NULL, &ds) == SNN_E_FORMAT && !ds);
    CHECK_MSG(strstr(snn_last_error(), "trailer") != NULL, "%s", snn_last_error());
    /* trailing garbage, and a trailing zero byte */
    uint8_t *g2 = malloc(2 * gl + 16);
    memcpy(g2, gz, gl);
    memcpy(g2 + gl, "garbage\n", 8);
    put_file(p, g2, gl + 8);
    load_agrees(p, "trailing garbage", 0);
    CHECK_MSG(strstr(snn_last_error(), "trailing garbage") != NULL, "%s", snn_last_error());
    g2[gl] = 0;
    put_file(p, g2, gl + 1);
    CHECK(snn_dataset_load_idx(p, NULL, &ds) == SNN_E_FORMAT && !ds);
    /* a second member is gzip's own concatenation: the reader follows it, and the IDX
     * check then finds payload bytes past what the header describes */
    memcpy(g2 + gl, gz, gl);
    put_file(p, g2, 2 * gl);
    CHECK(snn_dataset_load_idx(p, NULL, &ds) == SNN_E_FORMAT && !ds);
    CHECK_MSG(strstr(snn_last_error(), "unexpected bytes after the") != NULL, "%s", snn_last_error());
    /* each trailer byte flipped: CRC-32 (4 bytes), then ISIZE (4 bytes) */
    for (size_t k = gl - 8; k < gl; k++) {
        memcpy(g2, gz, gl);
        g2[k] ^= (uint8_t)(1u << rnd(8));
        put_file(p, g2, gl);
        load_agrees(p, "flipped trailer byte", 0);
    }
    /* random flips inside the compressed data: whatever zlib makes of them, we agree with
     * gzip -t (a flip may also hit a Huffman code that decodes to other bytes: CRC) */
    for (int i = 0; i < 12; i++) {
        memcpy(g2, gz, gl);
        size_t k = 10 + rnd((uint32_t)(gl - 18));
        g2[k] ^= (uint8_t)(1u << rnd(8));
        put_file(p, g2, gl);
        snn_dataset_free(ds);
        ds = NULL;
        snn_status st = snn_dataset_load_idx(p, NULL, &ds);
        int g = gzip_t_ok(p);
        if (g >= 0) CHECK_MSG((st == SNN_OK) == (g == 1), "flip at %zu: snn %s, gzip -t %d (%s)", k,
                              snn_status_name(st), g, snn_last_error());
    }
    snn_dataset_free(ds);
    ds = NULL;
    /* the digits CSV loader shares the reader */
    char row[400];
    size_t n = 0;
    for (int i = 0; i < 64; i++) n += (size_t)snprintf(row + n, sizeof row - n, "%u,", rnd(17));
    n += (size_t)snprintf(row + n, sizeof row - n, "%u\n", rnd(10));
    size_t cl;
    uint8_t *cz = gz_bytes((const uint8_t *)row, n, &cl);
    path_of(p, sizeof p, "d.csv.gz");
    put_file(p, cz, cl);
    CHECK_MSG(snn_dataset_load_digits_csv(p, &ds) == SNN_OK, "%s", snn_last_error());
    snn_dataset_free(ds);
    ds = NULL;
    put_file(p, cz, cl - 4);
    CHECK(snn_dataset_load_digits_csv(p, &ds) == SNN_E_FORMAT && !ds);
    CHECK_MSG(strstr(snn_last_error(), "ends early") != NULL, "%s", snn_last_error());
    memcpy(g2, cz, cl);
    g2[cl - 6] ^= 0x10;
    put_file(p, g2, cl);
    CHECK(snn_dataset_load_digits_csv(p, &ds) == SNN_E_FORMAT && !ds);
    CHECK_MSG(strstr(snn_last_error(), "incorrect") != NULL, "%s", snn_last_error());
    memcpy(g2, cz, cl);
    memcpy(g2 + cl, "1,2,3\n", 6);
    put_file(p, g2, cl + 6);
    CHECK(snn_dataset_load_digits_csv(p, &ds) == SNN_E_FORMAT && !ds);
    free(cz);
    free(g2);
    free(gz);
    free(raw);
}

/* Prefixes of the real Fashion-MNIST test labels and images (.gz as shipped). */
static void test_gzip_fashion(void) {
    const char *files[2] = {SNN_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz",
                            SNN_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz"};
    size_t il, ll;
    uint8_t *img = get_file(files[0], &il), *lab = get_file(files[1], &ll);
    if (!img || !lab) {
        fprintf(stderr, "SKIP: Fashion-MNIST not installed: real-file gzip prefixes not tested\n");
        free(img);
        free(lab);
        return;
    }
    char ip[512], lp[512];
    path_of(ip, sizeof ip, "fi.gz");
    path_of(lp, sizeof lp, "fl.gz");
    put_file(ip, img, il);
    snn_dataset *ds = NULL;
    /* every cut of the labels file's last 40 bytes, plus random cuts anywhere */
    for (int i = 0; i < 48; i++) {
        size_t cut = i < 40 ? (size_t)i + 1 : 1 + rnd((uint32_t)ll - 1);
        put_file(lp, lab, ll - cut);
        snn_status st = snn_dataset_load_idx(ip, lp, &ds);
        CHECK_MSG(st == SNN_E_FORMAT && !ds, "labels cut by %zu: %s", cut, snn_last_error());
        int g = gzip_t_ok(lp);
        if (g >= 0) CHECK(g == 0);
        snn_dataset_free(ds);
        ds = NULL;
    }
    /* images: the trailer cut, and a flipped byte in the ISIZE field */
    put_file(lp, lab, ll);
    CHECK_MSG(snn_dataset_load_idx(ip, lp, &ds) == SNN_OK, "%s", snn_last_error());
    snn_dataset_free(ds);
    ds = NULL;
    for (int k = 0; k < 2; k++) {
        if (k == 0) put_file(ip, img, il - 8);
        else {
            img[il - 2] ^= 0x01;
            put_file(ip, img, il);
        }
        CHECK(snn_dataset_load_idx(ip, lp, &ds) == SNN_E_FORMAT && !ds);
        int g = gzip_t_ok(ip);
        if (g >= 0) CHECK(g == 0);
    }
    free(img);
    free(lab);
}

static volatile sig_atomic_t alarmed;
static void on_alarm(int s) {
    (void)s;
    alarmed = 1;
}

/* FIFOs, directories and devices: refused at once, with a message naming the kind. */
static void test_special_files(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);  /* no SA_RESTART: a blocked open() returns EINTR */
    char fifo[512];
    path_of(fifo, sizeof fifo, "fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    const char *paths[3] = {fifo, tmpdir, "/dev/null"};
    const char *kinds[3] = {"FIFO", "directory", "character device"};
    for (int i = 0; i < 3; i++) {
        alarmed = 0;
        alarm(5);
        snn_ckpt *c = NULL;
        snn_dataset *ds = NULL;
        snn_model *m = NULL;
        snn_status s1 = snn_ckpt_open(paths[i], &c);
        CHECK_MSG(s1 == SNN_E_IO && !c && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        snn_status s2 = snn_dataset_load_idx(paths[i], NULL, &ds);
        CHECK_MSG(s2 == SNN_E_IO && !ds && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        snn_status s3 = snn_dataset_load_digits_csv(paths[i], &ds);
        CHECK_MSG(s3 == SNN_E_IO && !ds && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        snn_status s4 = snn_model_load(paths[i], 1, &m, NULL);
        CHECK_MSG(s4 == SNN_E_IO && !m, "%s: %s", paths[i], snn_last_error());
        snn_npy_array arr;
        memset(&arr, 0, sizeof arr);
        snn_status s5 = snn_npy_read(paths[i], &arr);
        CHECK_MSG(s5 == SNN_E_IO && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        if (s5 == SNN_OK) snn_npy_free(&arr);
        snn_lm_training_config *tc = calloc(1, sizeof *tc);
        snn_status s6 = snn_lm_training_config_load(paths[i], tc);
        CHECK_MSG(s6 == SNN_E_IO && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        free(tc);
        snn_tokenizer *tok = NULL;
        snn_status s7 = snn_tokenizer_load(paths[i], &tok);
        CHECK_MSG(s7 == SNN_E_IO && !tok && strstr(snn_last_error(), kinds[i]), "%s: %s", paths[i], snn_last_error());
        snn_tokenizer_free(tok);
        /* the labels file of a good images file goes through the same check */
        alarm(0);
        CHECK_MSG(!alarmed, "%s: a load blocked until the alarm", paths[i]);
    }
    unlink(fifo);
}

/* safetensors with a name or value holding \u0000 (Python keeps the whole name; cJSON
 * would cut it at the NUL). */
static void test_nul_names(void) {
    const char *headers[] = {
        "{\"layers.0.weight\\u0000evil\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"__metadata__\":{\"k\\u0000x\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"__metadata__\":{\"k\":\"v\\u0000\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
        size_t hl = strlen(headers[i]), pad = (8 - hl % 8) % 8, n = 8 + hl + pad + 4;
        uint8_t *b = calloc(1, n);
        for (int k = 0; k < 8; k++) b[k] = (uint8_t)((uint64_t)(hl + pad) >> (8 * k));
        memcpy(b + 8, headers[i], hl);
        memset(b + 8 + hl, ' ', pad);
        snn_ckpt *c = NULL;
        snn_status st = snn_ckpt_open_memory(b, n, "nul", &c);
        CHECK_MSG(st == SNN_E_FORMAT && !c && strstr(snn_last_error(), "NUL"), "header %zu: %s", i, snn_last_error());
        snn_ckpt_close(c);
        /* the same header with the escape written as an escaped backslash is a legal name */
        char *fixed = malloc(hl + 2);
        char *q = strstr(headers[i], "\\u0000");
        size_t at = (size_t)(q - headers[i]);
        memcpy(fixed, headers[i], at);
        fixed[at] = '\\';
        memcpy(fixed + at + 1, headers[i] + at, hl - at + 1);
        size_t hl2 = hl + 1, pad2 = (8 - hl2 % 8) % 8, n2 = 8 + hl2 + pad2 + 4;
        uint8_t *b2 = calloc(1, n2);
        for (int k = 0; k < 8; k++) b2[k] = (uint8_t)((uint64_t)(hl2 + pad2) >> (8 * k));
        memcpy(b2 + 8, fixed, hl2);
        memset(b2 + 8 + hl2, ' ', pad2);
        st = snn_ckpt_open_memory(b2, n2, "escaped", &c);
        if (i == 3) CHECK(st == SNN_E_FORMAT); /* dtype "F32\\u0000" is simply unknown */
        else CHECK_MSG(st == SNN_OK, "escaped header %zu: %s", i, snn_last_error());
        if (st == SNN_OK && i == 0) CHECK(snn_ckpt_has(c, "layers.0.weight\\u0000evil"));
        snn_ckpt_close(c);
        free(b2);
        free(fixed);
        free(b);
    }
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rs = seed;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/snn_test_hostile_XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_gzip_crafted();
    test_gzip_fashion();
    test_special_files();
    test_nul_names();
    const char *names[] = {"x.idx.gz", "d.csv.gz", "fi.gz", "fl.gz", "fifo"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[512];
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    return snn_test_finish("test_hostile_files");
}
