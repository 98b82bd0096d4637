/* Data: IDX and digits CSV loaders against files written here with zlib, their error
 * messages on truncated/corrupt/mismatched/hostile files, the real Fashion-MNIST and
 * digits files when installed (decoded independently with zlib here), the seeded shuffle
 * and split, batching, and the spike encoders. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "harness.h"
#include "snn/data.h"
#include "snn/rng.h"

static char tmpdir[256];
static uint64_t rs;  /* test-local random state */

static uint32_t rnd(uint32_t n) {
    float u;
    snn_test_fill_uniform(&u, 1, 0.0f, 1.0f, &rs);
    uint32_t v = (uint32_t)(u * (float)n);
    return v < n ? v : n - 1;
}

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* Write bytes raw or gzip-compressed. */
static void write_file(const char *path, const void *buf, size_t len, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) { perror(path); exit(2); }
        if (len) gzwrite(f, buf, (unsigned)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f) { perror(path); exit(2); }
        fwrite(buf, 1, len, f);
        fclose(f);
    }
}

static uint8_t *read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len ? *len : 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

/* IDX images [n][h][w] and labels [n] as raw bytes. */
static uint8_t *make_idx_images(uint32_t n, uint32_t h, uint32_t w, const uint8_t *pix, size_t *len) {
    *len = 16 + (size_t)n * h * w;
    uint8_t *b = malloc(*len);
    put_be32(b, 0x803); put_be32(b + 4, n); put_be32(b + 8, h); put_be32(b + 12, w);
    memcpy(b + 16, pix, (size_t)n * h * w);
    return b;
}

static uint8_t *make_idx_labels(uint32_t n, const uint8_t *lab, size_t *len) {
    *len = 8 + n;
    uint8_t *b = malloc(*len);
    put_be32(b, 0x801); put_be32(b + 4, n);
    memcpy(b + 8, lab, n);
    return b;
}

#define CHECK_ERR(st, code, needle)                                                              \
    CHECK_MSG((st) == (code) && strstr(snn_last_error(), (needle)) != NULL,                     \
              "status %s, message \"%s\", expected %s mentioning \"%s\"", snn_status_name(st),   \
              snn_last_error(), #code, (needle))

static void check_idx_dataset(const snn_dataset *ds, uint32_t n, uint32_t h, uint32_t w,
                              const uint8_t *pix, const uint8_t *lab) {
    int c, hh, ww;
    snn_dataset_shape(ds, &c, &hh, &ww);
    CHECK(snn_dataset_size(ds) == (int)n && c == 1 && hh == (int)h && ww == (int)w);
    CHECK(snn_dataset_features(ds) == (size_t)h * w);
    size_t bad = 0, total = (size_t)n * h * w;
    const float *x = snn_dataset_data(ds);
    for (size_t i = 0; i < total; i++) bad += x[i] != (float)pix[i] / 255.0f;
    CHECK_MSG(bad == 0, "%zu pixels differ from byte/255", bad);
    int maxl = -1;
    bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        bad += snn_dataset_labels(ds)[i] != (lab ? lab[i] : -1);
        if (lab && lab[i] > maxl) maxl = lab[i];
    }
    CHECK_MSG(bad == 0, "%zu labels differ", bad);
    CHECK(snn_dataset_classes(ds) == maxl + 1);
}

static void test_idx(void) {
    uint32_t n = 20 + rnd(30), h = 1 + rnd(9), w = 1 + rnd(9);
    size_t np = (size_t)n * h * w;
    uint8_t *pix = malloc(np), *lab = malloc(n);
    for (size_t i = 0; i < np; i++) pix[i] = (uint8_t)rnd(256);
    pix[0] = 255;
    pix[np - 1] = 0;
    for (uint32_t i = 0; i < n; i++) lab[i] = (uint8_t)rnd(7);
    size_t il, ll;
    uint8_t *img = make_idx_images(n, h, w, pix, &il), *lb = make_idx_labels(n, lab, &ll);
    char ip[512], lp[512], igz[512], lgz[512];
    path_of(ip, sizeof ip, "img.idx"); path_of(lp, sizeof lp, "lab.idx");
    path_of(igz, sizeof igz, "img.idx.gz"); path_of(lgz, sizeof lgz, "lab.idx.gz");
    write_file(ip, img, il, 0); write_file(lp, lb, ll, 0);
    write_file(igz, img, il, 1); write_file(lgz, lb, ll, 1);

    /* round trips: raw, gzip, mixed, memory, unlabelled */
    const char *pairs[3][2] = {{ip, lp}, {igz, lgz}, {igz, lp}};
    for (int k = 0; k < 3; k++) {
        snn_dataset *ds = NULL;
        snn_status st = snn_dataset_load_idx(pairs[k][0], pairs[k][1], &ds);
        CHECK_MSG(st == SNN_OK, "%s", snn_last_error());
        if (ds) check_idx_dataset(ds, n, h, w, pix, lab);
        snn_dataset_free(ds);
    }
    snn_dataset *ds = NULL;
    CHECK(snn_dataset_from_idx_memory(img, il, "a", lb, ll, "b", &ds) == SNN_OK);
    if (ds) check_idx_dataset(ds, n, h, w, pix, lab);
    snn_dataset_free(ds);
    ds = NULL;
    CHECK(snn_dataset_load_idx(igz, NULL, &ds) == SNN_OK);
    if (ds) check_idx_dataset(ds, n, h, w, pix, NULL);
    snn_dataset_free(ds);

    /* every truncation of the raw images file, from memory and (sampled) from disk */
    char tp[512];
    path_of(tp, sizeof tp, "trunc.idx");
    for (size_t cut = 0; cut < il; cut++) {
        ds = (snn_dataset *)1;
        snn_status st = snn_dataset_from_idx_memory(img, cut, "cut-images", lb, ll, "b", &ds);
        CHECK_ERR(st, SNN_E_FORMAT, "cut-images");
        CHECK(ds == NULL);
        if (cut >= 16) CHECK_ERR(st, SNN_E_FORMAT, "expected");
        if (cut % 7 == 0 || cut == il - 1) {
            write_file(tp, img, cut, cut % 2);
            st = snn_dataset_load_idx(tp, lp, &ds);
            CHECK_ERR(st, SNN_E_FORMAT, tp);
            CHECK_ERR(st, SNN_E_FORMAT, "truncated");
        }
    }
    /* a truncated gzip stream (cut inside the compressed data) */
    size_t gl = 0;
    uint8_t *gzb = read_file(igz, &gl);
    write_file(tp, gzb, gl / 2, 0);
    snn_status st = snn_dataset_load_idx(tp, lp, &ds);
    CHECK_ERR(st, SNN_E_FORMAT, tp);
    /* corrupt gzip: flip bits in the compressed body (caught by inflate or the CRC) */
    for (size_t i = 12; i < gl - 8; i += 3) gzb[i] ^= 0x5A;
    write_file(tp, gzb, gl, 0);
    st = snn_dataset_load_idx(tp, lp, &ds);
    CHECK_ERR(st, SNN_E_FORMAT, tp);
    free(gzb);
    /* trailing bytes after the data */
    uint8_t *longer = malloc(il + 3);
    memcpy(longer, img, il);
    memset(longer + il, 7, 3);
    CHECK_ERR(snn_dataset_from_idx_memory(longer, il + 3, "long-images", NULL, 0, NULL, &ds), SNN_E_FORMAT,
              "long-images");
    write_file(tp, longer, il + 3, 1);
    CHECK_ERR(snn_dataset_load_idx(tp, NULL, &ds), SNN_E_FORMAT, "unexpected bytes");
    free(longer);
    /* swapped files: labels given as images and images as labels */
    CHECK_ERR(snn_dataset_load_idx(lgz, igz, &ds), SNN_E_FORMAT, lgz);
    CHECK_ERR(snn_dataset_load_idx(igz, igz, &ds), SNN_E_FORMAT, "0x00000801");
    /* image/label count mismatch names both files */
    size_t l2;
    uint8_t *lb2 = make_idx_labels(n - 1, lab, &l2);
    char lp2[512];
    path_of(lp2, sizeof lp2, "lab-short.idx.gz");
    write_file(lp2, lb2, l2, 1);
    st = snn_dataset_load_idx(igz, lp2, &ds);
    CHECK_ERR(st, SNN_E_FORMAT, igz);
    CHECK_ERR(st, SNN_E_FORMAT, lp2);
    free(lb2);
    /* hostile headers: dims beyond the cap, zero dims, a huge claim with a tiny gzip body */
    uint8_t hdr[32];
    put_be32(hdr, 0x803); put_be32(hdr + 4, 0x7fffffffu); put_be32(hdr + 8, 0x7fffffffu); put_be32(hdr + 12, 4);
    CHECK_ERR(snn_dataset_from_idx_memory(hdr, 32, "huge", NULL, 0, NULL, &ds), SNN_E_FORMAT, "limit");
    put_be32(hdr + 4, 0);
    CHECK_ERR(snn_dataset_from_idx_memory(hdr, 32, "zero", NULL, 0, NULL, &ds), SNN_E_FORMAT, "dimension 0");
    put_be32(hdr + 4, 1000000); put_be32(hdr + 8, 32); put_be32(hdr + 12, 32); /* ~1 GB, under the cap */
    write_file(tp, hdr, 32, 1);
    st = snn_dataset_load_idx(tp, NULL, &ds);
    CHECK_ERR(st, SNN_E_FORMAT, "found 32");
    put_be32(hdr, 0x0D03); /* float IDX */
    CHECK_ERR(snn_dataset_from_idx_memory(hdr, 32, "float", NULL, 0, NULL, &ds), SNN_E_FORMAT, "unsigned-byte");
    /* missing file, directory */
    char missing[512];
    path_of(missing, sizeof missing, "nope.idx");
    CHECK_ERR(snn_dataset_load_idx(missing, NULL, &ds), SNN_E_IO, missing);
    CHECK_ERR(snn_dataset_load_idx(tmpdir, NULL, &ds), SNN_E_IO, "directory");
    CHECK_ERR(snn_dataset_load_fashion_mnist(tmpdir, 1, &ds), SNN_E_IO, "apt-get install dataset-fashion-mnist");
    CHECK_ERR(snn_dataset_load_fashion_mnist(tmpdir, 0, &ds), SNN_E_IO, tmpdir);
    free(img); free(lb); free(pix); free(lab);
}

/* Fashion-MNIST, checked against a direct zlib decode of the same files. */
static void test_fashion_mnist(void) {
    struct stat sb;
    if (stat(SNN_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", &sb) != 0) {
        fprintf(stderr, "SKIP: %s not installed (apt-get install dataset-fashion-mnist): real Fashion-MNIST not tested\n",
                SNN_FASHION_MNIST_DIR);
        return;
    }
    for (int train = 0; train < 2; train++) {
        snn_dataset *ds = NULL;
        snn_status st = snn_dataset_load_fashion_mnist(NULL, train, &ds);
        CHECK_MSG(st == SNN_OK, "%s", snn_last_error());
        if (!ds) continue;
        int n = train ? 60000 : 10000, c, h, w;
        snn_dataset_shape(ds, &c, &h, &w);
        CHECK(snn_dataset_size(ds) == n && c == 1 && h == 28 && w == 28 && snn_dataset_classes(ds) == 10);
        /* independent decode: gunzip whole files and compare random samples */
        const char *pre = train ? "train" : "t10k";
        char p[256];
        snprintf(p, sizeof p, SNN_FASHION_MNIST_DIR "/%s-images-idx3-ubyte.gz", pre);
        gzFile g = gzopen(p, "rb");
        size_t il = 16 + (size_t)n * 784;
        uint8_t *raw = malloc(il + 1);
        CHECK(g && gzread(g, raw, (unsigned)il + 1) == (int)il);
        if (g) gzclose(g);
        snprintf(p, sizeof p, SNN_FASHION_MNIST_DIR "/%s-labels-idx1-ubyte.gz", pre);
        g = gzopen(p, "rb");
        uint8_t *lab = malloc((size_t)n + 9);
        CHECK(g && gzread(g, lab, (unsigned)n + 9) == n + 8);
        if (g) gzclose(g);
        int counts[10] = {0};
        size_t bad = 0;
        for (int i = 0; i < n; i++) {
            int l = snn_dataset_labels(ds)[i];
            if (l >= 0 && l < 10) counts[l]++;
            bad += l != lab[8 + i];
        }
        for (int k = 0; k < 200; k++) {
            int i = (int)rnd((uint32_t)n);
            for (int j = 0; j < 784; j++)
                bad += snn_dataset_data(ds)[(size_t)i * 784 + j] != (float)raw[16 + (size_t)i * 784 + j] / 255.0f;
        }
        CHECK_MSG(bad == 0, "%zu values differ from the direct decode", bad);
        for (int k = 0; k < 10; k++) CHECK(counts[k] == n / 10);  /* the set is balanced */
        free(raw);
        free(lab);
        snn_dataset_free(ds);
    }
}

static void test_digits(void) {
    /* a random CSV in the sklearn layout, written both plain and gzip */
    int n = 30 + (int)rnd(40);
    uint8_t *px = malloc((size_t)n * 64);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    size_t cap = (size_t)n * 64 * 4 + 1024, len = 0;
    char *csv = malloc(cap);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 64; j++) {
            px[i * 64 + j] = (uint8_t)rnd(17);
            len += (size_t)sprintf(csv + len, "%d,", px[i * 64 + j]);
        }
        lab[i] = (int32_t)rnd(10);
        len += (size_t)sprintf(csv + len, "%d\n", lab[i]);
    }
    char p[512], pg[512];
    path_of(p, sizeof p, "digits.csv");
    path_of(pg, sizeof pg, "digits.csv.gz");
    write_file(p, csv, len, 0);
    write_file(pg, csv, len, 1);
    for (int k = 0; k < 2; k++) {
        snn_dataset *ds = NULL;
        snn_status st = snn_dataset_load_digits_csv(k ? pg : p, &ds);
        CHECK_MSG(st == SNN_OK, "%s", snn_last_error());
        if (!ds) continue;
        int c, h, w, maxl = 0;
        snn_dataset_shape(ds, &c, &h, &w);
        CHECK(snn_dataset_size(ds) == n && c == 1 && h == 8 && w == 8);
        size_t bad = 0;
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < 64; j++) bad += snn_dataset_data(ds)[i * 64 + j] != (float)px[i * 64 + j] / 16.0f;
            bad += snn_dataset_labels(ds)[i] != lab[i];
            if (lab[i] > maxl) maxl = lab[i];
        }
        CHECK_MSG(bad == 0, "%zu digits values differ", bad);
        CHECK(snn_dataset_classes(ds) == maxl + 1);
        snn_dataset_free(ds);
    }
    /* malformed lines: the message names the file and the line */
    const char *bad_lines[] = {"1,2,3\n", "17" /* pixel > 16 */, "x" /* not a number */,
                               "-1" /* negative pixel */, "label-frac", "extra-field"};
    for (int b = 0; b < 6; b++) {
        char line[1024];
        size_t l = 0;
        if (b == 0) {
            l = (size_t)sprintf(line, "%s", bad_lines[0]);
        } else {
            for (int j = 0; j < 64; j++) {
                const char *v = "3";
                if (j == 10 && b >= 1 && b <= 3) v = bad_lines[b];
                l += (size_t)sprintf(line + l, "%s,", v);
            }
            l += (size_t)sprintf(line + l, "%s\n", b == 4 ? "2.5" : b == 5 ? "2,4" : "1");
        }
        size_t tot = 0;
        char *buf = malloc(len + l + 1);
        memcpy(buf, csv, len);   /* valid lines first, the bad one last */
        memcpy(buf + len, line, l);
        tot = len + l;
        write_file(p, buf, tot, b % 2);
        snn_dataset *ds = (snn_dataset *)1;
        snn_status st = snn_dataset_load_digits_csv(p, &ds);
        char needle[64];
        snprintf(needle, sizeof needle, "line %d", n + 1);
        CHECK_ERR(st, SNN_E_FORMAT, needle);
        CHECK_ERR(st, SNN_E_FORMAT, p);
        CHECK(ds == NULL);
        free(buf);
    }
    snn_dataset *ds;
    write_file(p, "", 0, 0);
    CHECK_ERR(snn_dataset_load_digits_csv(p, &ds), SNN_E_FORMAT, "no samples");
    char missing[512];
    path_of(missing, sizeof missing, "none.csv");
    CHECK_ERR(snn_dataset_load_digits_csv(missing, &ds), SNN_E_IO, missing);
    free(px); free(lab); free(csv);

    /* the real file from scikit-learn, parsed independently with sscanf */
    FILE *probe = fopen(SNN_DIGITS_CSV_PATH, "rb");
    if (!probe) {
        fprintf(stderr, "SKIP: %s not installed (apt-get install python3-sklearn): real digits not tested\n",
                SNN_DIGITS_CSV_PATH);
        return;
    }
    fclose(probe);
    ds = NULL;
    snn_status st = snn_dataset_load_digits_csv(NULL, &ds);
    CHECK_MSG(st == SNN_OK, "%s", snn_last_error());
    if (!ds) return;
    CHECK(snn_dataset_size(ds) == 1797 && snn_dataset_classes(ds) == 10 && snn_dataset_features(ds) == 64);
    gzFile g = gzopen(SNN_DIGITS_CSV_PATH, "rb");
    char line[2048];
    int i = 0, bad = 0;
    while (g && gzgets(g, line, sizeof line) && i < snn_dataset_size(ds)) {
        char *q = line;
        for (int j = 0; j <= 64; j++) {
            long v = strtol(q, &q, 10);
            q++;
            if (j < 64) bad += snn_dataset_data(ds)[i * 64 + j] != (float)v / 16.0f;
            else bad += snn_dataset_labels(ds)[i] != v;
        }
        i++;
    }
    if (g) gzclose(g);
    CHECK(i == 1797);
    CHECK_MSG(bad == 0, "%d values differ from the direct parse", bad);
    snn_dataset_free(ds);
}

/* A dataset whose sample i has first feature i (exact in float) to track samples. */
static snn_dataset *indexed_dataset(int n, int classes) {
    float *x = malloc((size_t)n * 3 * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    for (int i = 0; i < n; i++) {
        x[i * 3] = (float)i / 65536.0f;
        x[i * 3 + 1] = 0.25f;
        x[i * 3 + 2] = 0.5f;
        y[i] = i % classes;
    }
    snn_dataset *ds = NULL;
    CHECK(snn_dataset_create(n, 1, 1, 3, classes, x, y, &ds) == SNN_OK);
    free(x);
    free(y);
    return ds;
}

static int is_permutation(const uint32_t *o, int n) {
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (o[i] >= (uint32_t)n || seen[o[i]]) ok = 0;
        else seen[o[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_shuffle_split_batch(uint64_t seed) {
    int n = 1000 + (int)rnd(500);
    snn_dataset *ds = indexed_dataset(n, 7);
    uint32_t *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    CHECK(snn_dataset_shuffle(ds, seed, 3, a) == SNN_OK && is_permutation(a, n));
    CHECK(snn_dataset_shuffle(ds, seed, 3, b) == SNN_OK && !memcmp(a, b, (size_t)n * 4));
    CHECK(snn_dataset_shuffle(ds, seed, 4, b) == SNN_OK && is_permutation(b, n) && memcmp(a, b, (size_t)n * 4));
    CHECK(snn_dataset_shuffle(ds, seed + 1, 3, b) == SNN_OK && memcmp(a, b, (size_t)n * 4));
    /* uniformity: over 24000 epochs each of the 24 orders of 4 items appears ~1000 times */
    snn_dataset *small = indexed_dataset(4, 2);
    int counts[256] = {0};
    for (int e = 0; e < 24000; e++) {
        uint32_t o[4];
        snn_dataset_shuffle(small, seed, (uint64_t)e, o);
        counts[o[0] * 64 + o[1] * 16 + o[2] * 4 + o[3]]++;
    }
    double chi2 = 0;
    int distinct = 0;
    for (int k = 0; k < 256; k++)
        if (counts[k]) {
            distinct++;
            chi2 += (counts[k] - 1000.0) * (counts[k] - 1000.0) / 1000.0;
        }
    CHECK(distinct == 24);
    CHECK_MSG(chi2 < 60.0, "chi2 %.1f over 23 degrees of freedom", chi2); /* p ~ 3e-5 */
    snn_dataset_free(small);

    /* batch: gather, labels, out-of-range index */
    int N = 17;
    float *x = malloc((size_t)N * 3 * sizeof *x);
    int32_t y[17];
    snn_test_poison(x, (size_t)N * 3);
    CHECK(snn_dataset_batch(ds, a + 5, N, x, y) == SNN_OK);
    int bad = 0;
    for (int k = 0; k < N; k++)
        bad += x[k * 3] != (float)a[5 + k] / 65536.0f || x[k * 3 + 2] != 0.5f || y[k] != (int32_t)a[5 + k] % 7;
    CHECK(bad == 0);
    uint32_t oob[2] = {0, (uint32_t)n};
    CHECK_ERR(snn_dataset_batch(ds, oob, 2, x, y), SNN_E_INVALID, "out of range");

    /* split: sizes, disjoint cover, reproducible */
    snn_dataset *tr = NULL, *te = NULL, *tr2 = NULL, *te2 = NULL;
    CHECK(snn_dataset_split(ds, 0.2, seed, &tr, &te) == SNN_OK);
    CHECK(snn_dataset_split(ds, 0.2, seed, &tr2, &te2) == SNN_OK);
    if (tr && te && tr2 && te2) {
        int nte = (int)(0.2 * n + 0.5);
        CHECK(snn_dataset_size(te) == nte && snn_dataset_size(tr) == n - nte);
        CHECK(snn_dataset_classes(tr) == 7 && snn_dataset_features(te) == 3);
        char *seen = calloc((size_t)n, 1);
        int dup = 0;
        for (int k = 0; k < n; k++) {
            const snn_dataset *s = k < n - nte ? tr : te;
            int i = k < n - nte ? k : k - (n - nte);
            int id = (int)(snn_dataset_data(s)[i * 3] * 65536.0f);
            if (id < 0 || id >= n || seen[id]) dup++;
            else seen[id] = 1;
            if (snn_dataset_labels(s)[i] != id % 7) dup++;
        }
        CHECK_MSG(dup == 0, "split is not a partition (%d problems)", dup);
        free(seen);
        CHECK(!memcmp(snn_dataset_data(te), snn_dataset_data(te2), (size_t)nte * 3 * sizeof(float)));
    }
    snn_dataset_free(tr); snn_dataset_free(te); snn_dataset_free(tr2); snn_dataset_free(te2);
    CHECK_ERR(snn_dataset_split(ds, 1.0, seed, &tr, &te), SNN_E_INVALID, "fraction");
    int32_t badlab[3] = {0, 9, 1};
    float xx[9] = {0};
    CHECK_ERR(snn_dataset_create(3, 1, 1, 3, 5, xx, badlab, &tr), SNN_E_INVALID, "label 9");
    free(a); free(b); free(x);
    snn_dataset_free(ds);
}

static void test_synthetic(uint64_t seed) {
    snn_dataset *a = NULL, *b = NULL, *c = NULL;
    int n = 2000, classes = 5;
    CHECK(snn_dataset_synthetic(n, 2, 3, 4, classes, seed, &a) == SNN_OK);
    CHECK(snn_dataset_synthetic(n, 2, 3, 4, classes, seed, &b) == SNN_OK);
    CHECK(snn_dataset_synthetic(n, 2, 3, 4, classes, seed + 1, &c) == SNN_OK);
    if (!a || !b || !c) return;
    CHECK(snn_dataset_features(a) == 24 && snn_dataset_classes(a) == classes);
    CHECK(!memcmp(snn_dataset_data(a), snn_dataset_data(b), (size_t)n * 24 * sizeof(float)));
    CHECK(memcmp(snn_dataset_data(a), snn_dataset_data(c), (size_t)n * 24 * sizeof(float)));
    double sum = 0;
    int out = 0, counts[5] = {0};
    for (size_t i = 0; i < (size_t)n * 24; i++) {
        float v = snn_dataset_data(a)[i];
        out += !(v >= 0.0f && v < 1.0f);
        sum += v;
    }
    for (int i = 0; i < n; i++) {
        int l = snn_dataset_labels(a)[i];
        if (l < 0 || l >= classes) out++;
        else counts[l]++;
    }
    CHECK(out == 0);
    double mean = sum / (n * 24.0);
    CHECK_MSG(fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / (n * 24.0)), "pixel mean %f", mean);
    for (int k = 0; k < classes; k++) CHECK_MSG(abs(counts[k] - n / classes) < 5 * 18, "class %d: %d", k, counts[k]);
    snn_dataset_free(a); snn_dataset_free(b); snn_dataset_free(c);
}

static void test_encoders(uint64_t seed) {
    int N = 5, T = 400;
    size_t F = 37;
    float *x = malloc(N * F * sizeof *x), *o = malloc((size_t)T * N * F * sizeof *o),
          *o2 = malloc((size_t)T * N * F * sizeof *o2);
    snn_test_fill_uniform(x, N * F, 0.0f, 1.0f, &rs);
    x[0] = 0.0f;
    x[1] = 1.0f;
    x[2] = -0.5f;
    x[3] = 2.0f;
    snn_test_poison(o, (size_t)T * N * F);
    CHECK(snn_encode(SNN_ENCODING_DIRECT, x, N, F, T, 0, 0, o) == SNN_OK);
    int bad = 0;
    for (int t = 0; t < T; t++) bad += memcmp(o + (size_t)t * N * F, x, N * F * sizeof(float)) != 0;
    CHECK(bad == 0);

    uint64_t stream = ((uint64_t)3 << 32) | 9;
    snn_test_poison(o, (size_t)T * N * F);
    CHECK(snn_encode(SNN_ENCODING_POISSON, x, N, F, T, seed, stream, o) == SNN_OK);
    /* rate: the count over T steps is Binomial(T, p) */
    int far = 0, nonbinary = 0;
    for (size_t e = 0; e < N * F; e++) {
        double k = 0;
        for (int t = 0; t < T; t++) {
            float v = o[(size_t)t * N * F + e];
            nonbinary += v != 0.0f && v != 1.0f;
            k += v;
        }
        double p = x[e] < 0 ? 0 : x[e] > 1 ? 1 : x[e];
        double sd = sqrt(T * p * (1 - p));
        /* +3: for p near 0 or 1 the binomial tail is heavier than 5 normal sigmas */
        if (fabs(k - T * p) > 5 * sd + 3) far++;
        if ((p == 0 && k != 0) || (p == 1 && k != T)) far++;  /* clamps are exact */
    }
    CHECK(nonbinary == 0);
    CHECK_MSG(far == 0, "%d elements off their Poisson rate by more than 5 sigma", far);
    /* overall rate against the mean probability, tighter */
    double tot = 0, psum = 0;
    for (size_t i = 0; i < (size_t)T * N * F; i++) tot += o[i];
    for (size_t e = 0; e < N * F; e++) psum += x[e] < 0 ? 0 : x[e] > 1 ? 1 : x[e];
    CHECK(fabs(tot / T - psum) < 5 * sqrt(psum / 4 * T) / T + 1e-9);
    /* the documented draw: element e uses word e%4 of philox(seed, stream, e/4) */
    for (int k = 0; k < 50; k++) {
        size_t e = rnd((uint32_t)(T * N * F));
        uint32_t r[4];
        snn_philox(seed, stream, e / 4, r);
        float u = (float)(r[e % 4] >> 8) / 16777216.0f;
        float p = x[e % (N * F)];
        CHECK(o[e] == (u < p ? 1.0f : 0.0f));
    }
    /* reproducible, and a different stream gives different spikes */
    snn_encode_poisson(x, N, F, T, seed, stream, o2);
    CHECK(!memcmp(o, o2, (size_t)T * N * F * sizeof(float)));
    snn_encode_poisson(x, N, F, T, seed, stream + 1, o2);
    CHECK(memcmp(o, o2, (size_t)T * N * F * sizeof(float)));
    snn_encoding enc;
    CHECK(snn_encoding_from_name("Poisson", &enc) == SNN_OK && enc == SNN_ENCODING_POISSON);
    CHECK(snn_encoding_from_name("rate", &enc) == SNN_OK && enc == SNN_ENCODING_POISSON);
    CHECK(snn_encoding_from_name("direct", &enc) == SNN_OK && enc == SNN_ENCODING_DIRECT);
    CHECK_ERR(snn_encoding_from_name("latency", &enc), SNN_E_INVALID, "latency");
    CHECK(!strcmp(snn_encoding_name(SNN_ENCODING_POISSON), "poisson"));
    free(x); free(o); free(o2);
}

static void rm_tree(void) {
    const char *names[] = {"img.idx", "lab.idx", "img.idx.gz", "lab.idx.gz", "trunc.idx",
                           "lab-short.idx.gz", "digits.csv", "digits.csv.gz"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[512];
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(tmpdir);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rs = seed;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/snn_test_data_XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_idx();
    test_digits();
    test_shuffle_split_batch(seed);
    test_synthetic(seed);
    test_encoders(seed);
    test_fashion_mnist();
    rm_tree();
    return snn_test_finish("test_data");
}
