/* Tokenizers: the byte tokenizer; BPE training against a naive reference implementation
 * (recount every pair after every merge) on real text, its determinism and merge count;
 * exact encode/decode round trips on fresh random bytes and on real text; the JSON form
 * and its refusals. The real text is Debian's fortunes corpus (scripts/deps --test). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lm/tokenizer_internal.h"
#include "snn/tokenizer.h"

static uint64_t rs;
static uint64_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static int round_trip(const snn_tokenizer *t, const uint8_t *x, size_t n, size_t *nids) {
    int32_t *ids = NULL;
    size_t m = 0;
    uint8_t *back = NULL;
    size_t bl = 0;
    if (snn_tokenizer_encode(t, x, n, &ids, &m) != SNN_OK) return 0;
    int ok = 1;
    for (size_t i = 0; i < m; i++) ok &= ids[i] >= 0 && ids[i] < snn_tokenizer_vocab_size(t) && ids[i] != snn_tokenizer_eos_id(t);
    ok &= snn_tokenizer_decode(t, ids, m, &back, &bl) == SNN_OK && bl == n && memcmp(back, x, n) == 0;
    if (nids) *nids = m;
    free(ids);
    free(back);
    return ok;
}

/* The reference: chunks as id lists; every step counts all pairs from scratch. */
static int naive_bpe(const uint8_t *text, size_t len, int merges, int32_t *left, int32_t *right) {
    size_t nc = 0, cap = 1024;
    int32_t **ch = malloc(cap * sizeof *ch);
    int *cl = malloc(cap * sizeof *cl);
    for (size_t i = 0; i < len;) {
        size_t j = snn_tok_chunk_end(text, len, i);
        if (nc == cap) { cap *= 2; ch = realloc(ch, cap * sizeof *ch); cl = realloc(cl, cap * sizeof *cl); }
        ch[nc] = malloc((j - i) * sizeof **ch);
        for (size_t k = i; k < j; k++) ch[nc][k - i] = text[k];
        cl[nc++] = (int)(j - i);
        i = j;
    }
    int V = 256 + merges;
    int64_t *cnt = malloc((size_t)V * (size_t)V * sizeof *cnt);
    int got = 0;
    for (; got < merges; got++) {
        memset(cnt, 0, (size_t)V * (size_t)V * sizeof *cnt);
        for (size_t c = 0; c < nc; c++)
            for (int k = 0; k + 1 < cl[c]; k++) cnt[(size_t)ch[c][k] * (size_t)V + (size_t)ch[c][k + 1]]++;
        int64_t best = 1;
        int ba = -1, bb = -1;
        for (int a = 0; a < V; a++)
            for (int b = 0; b < V; b++)
                if (cnt[(size_t)a * (size_t)V + (size_t)b] > best) { best = cnt[(size_t)a * (size_t)V + (size_t)b]; ba = a; bb = b; }
        if (ba < 0) break;
        left[got] = ba;
        right[got] = bb;
        for (size_t c = 0; c < nc; c++) {
            int w = 0;
            for (int k = 0; k < cl[c];) {
                if (k + 1 < cl[c] && ch[c][k] == ba && ch[c][k + 1] == bb) { ch[c][w++] = 256 + got; k += 2; }
                else ch[c][w++] = ch[c][k++];
            }
            cl[c] = w;
        }
    }
    for (size_t c = 0; c < nc; c++) free(ch[c]);
    free(ch); free(cl); free(cnt);
    return got;
}

static uint8_t *fortunes(size_t *n) {
    /* a few files of the corpus, concatenated in name order */
    static const char *names[] = {"computers", "linux", "science", "wisdom"};
    size_t tot = 0;
    uint8_t *all = NULL;
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, "/usr/share/games/fortunes/%s", names[i]);
        size_t m = 0;
        uint8_t *b = read_file(p, &m);
        if (!b) continue;
        all = realloc(all, tot + m);
        memcpy(all + tot, b, m);
        tot += m;
        free(b);
    }
    *n = tot;
    return all;
}

static void test_byte(void) {
    snn_tokenizer *t = NULL;
    CHECK(snn_tokenizer_byte(&t) == SNN_OK);
    CHECK(snn_tokenizer_vocab_size(t) == 257 && snn_tokenizer_eos_id(t) == 256 && snn_tokenizer_num_merges(t) == 0);
    CHECK(strcmp(snn_tokenizer_type(t), "byte") == 0);
    uint8_t x[1000];
    for (size_t i = 0; i < sizeof x; i++) x[i] = (uint8_t)rnd();
    size_t m = 0;
    CHECK(round_trip(t, x, sizeof x, &m) && m == sizeof x);
    int32_t *ids = NULL;
    CHECK(snn_tokenizer_encode(t, x, 10, &ids, &m) == SNN_OK && m == 10);
    int same = 1;
    for (int i = 0; i < 10; i++) same &= ids[i] == x[i];
    CHECK(same);
    free(ids);
    int32_t with_eos[4] = {'h', 256, 'i', 256};
    uint8_t *s = NULL;
    size_t sl = 0;
    CHECK(snn_tokenizer_decode(t, with_eos, 4, &s, &sl) == SNN_OK && sl == 2 && memcmp(s, "hi", 2) == 0);
    free(s);
    int32_t bad[1] = {257};
    CHECK(snn_tokenizer_decode(t, bad, 1, &s, &sl) == SNN_E_INVALID && strstr(snn_last_error(), "257"));
    snn_tokenizer_free(t);
}

static void test_bpe(void) {
    size_t n = 0;
    uint8_t *text = fortunes(&n);
    CHECK_MSG(text && n > 100000, "the fortunes corpus is missing (scripts/deps --test installs it)");
    if (!text || n < 100000) return;
    /* against the naive reference on the first 40 kB */
    size_t small = 40000;
    int want = 200;
    int32_t rl[200], rr[200];
    int rg = naive_bpe(text, small, want, rl, rr);
    snn_tokenizer *t = NULL;
    CHECK(snn_tokenizer_bpe_train(text, small, 257 + want, &t) == SNN_OK);
    CHECK(snn_tokenizer_num_merges(t) == rg && rg == want);
    int same = 1;
    for (int k = 0; k < rg && k < snn_tokenizer_num_merges(t); k++) {
        int a, b;
        snn_tokenizer_merge(t, k, &a, &b);
        if (a != rl[k] || b != rr[k]) {
            if (same) fprintf(stderr, "  merge %d: (%d,%d), reference (%d,%d)\n", k, a, b, rl[k], rr[k]);
            same = 0;
        }
    }
    CHECK(same);
    snn_tokenizer_free(t);
    /* the whole sample, larger vocabulary: count, determinism, round trips, compression */
    size_t train = n * 9 / 10;
    snn_tokenizer *t1 = NULL, *t2 = NULL;
    CHECK(snn_tokenizer_bpe_train(text, train, 2048, &t1) == SNN_OK);
    CHECK(snn_tokenizer_bpe_train(text, train, 2048, &t2) == SNN_OK);
    CHECK(snn_tokenizer_num_merges(t1) == 2048 - 257 && snn_tokenizer_vocab_size(t1) == 2048 && snn_tokenizer_eos_id(t1) == 2047);
    char *j1 = NULL, *j2 = NULL;
    CHECK(snn_tokenizer_to_json(t1, &j1) == SNN_OK && snn_tokenizer_to_json(t2, &j2) == SNN_OK && strcmp(j1, j2) == 0);
    free(j2);
    size_t m = 0;
    CHECK(round_trip(t1, text + train, n - train, &m));
    CHECK_MSG(m < (n - train) * 2 / 5, "held-out text: %zu ids for %zu bytes", m, n - train);
    for (int trial = 0; trial < 20; trial++) {
        size_t k = (size_t)(rnd() % 5000);
        uint8_t *x = malloc(k + 1);
        for (size_t i = 0; i < k; i++) x[i] = trial % 2 ? (uint8_t)rnd() : (uint8_t)" etaoinshr\n\xc3\xa9"[rnd() % 13];
        CHECK(round_trip(t1, x, k, NULL));
        free(x);
    }
    /* every token's bytes are its merge's two parts */
    int parts = 1;
    for (int k = 0; k < snn_tokenizer_num_merges(t1); k++) {
        int a, b;
        size_t la, lb, lz;
        snn_tokenizer_merge(t1, k, &a, &b);
        const uint8_t *pa = snn_tokenizer_token_bytes(t1, a, &la), *pb = snn_tokenizer_token_bytes(t1, b, &lb);
        const uint8_t *pz = snn_tokenizer_token_bytes(t1, 256 + k, &lz);
        parts &= lz == la + lb && memcmp(pz, pa, la) == 0 && memcmp(pz + la, pb, lb) == 0;
    }
    CHECK(parts);
    /* JSON round trip through a file */
    snn_tokenizer *t3 = NULL;
    const char *path = "test_tokenizer.json";
    CHECK(snn_tokenizer_save(t1, path) == SNN_OK && snn_tokenizer_load(path, &t3) == SNN_OK);
    CHECK(t3 && snn_tokenizer_to_json(t3, &j2) == SNN_OK && strcmp(j1, j2) == 0);
    CHECK(t3 && strcmp(snn_tokenizer_type(t3), "bpe") == 0);
    free(j2);
    remove(path);
    snn_tokenizer_free(t3);
    char first_merge[64];
    {
        const char *q = strstr(j1, "\"merges\":[[");
        int a = -1, b = -1;
        if (q) sscanf(q, "\"merges\":[[%d,%d]", &a, &b);
        snprintf(first_merge, sizeof first_merge, "\"merges\":[[%d,%d]", a, b);
    }
    /* refusals: a corrupted vocab entry, a merge using a later id, a wrong count, unknown key */
    struct { const char *from, *to, *msg; } bad[] = {
        {"\"type\":\"bpe\"", "\"type\":\"wordpiece\"", "type"},
        {"\"version\":1", "\"version\":2", "version"},
        {"\"vocab_size\":2048", "\"vocab_size\":2047", "do not fit"},
        {"\"eos_id\":2047", "\"eos_id\":256", "do not fit"},
        {first_merge, "\"merges\":[[2000,1]", "not defined before"},
        {"\"vocab\":[\"00\"", "\"vocab\":[\"01\"", "vocab entry 0"},
        {"\"type\"", "\"extra\":1,\"type\"", "unknown key"},
        {"{", "[", "malformed"},
        {"\"vocab_size\":2048", "\"vocab_size\":2048.5", "out of range"},
        {"\"eos_id\":2047", "\"eos_id\":8888888888258", "out of range"}, /* found by fuzz_lmjson */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *p = strstr(j1, bad[i].from);
        CHECK_MSG(p != NULL, "%s", bad[i].from);
        if (!p) continue;
        size_t pre = (size_t)(p - j1);
        char *e = malloc(strlen(j1) + strlen(bad[i].to) + 1);
        memcpy(e, j1, pre);
        strcpy(e + pre, bad[i].to);
        strcat(e, p + strlen(bad[i].from));
        snn_tokenizer *x = (snn_tokenizer *)0x1;
        snn_status st = snn_tokenizer_from_json(e, &x);
        CHECK_MSG(st != SNN_OK && strstr(snn_last_error(), bad[i].msg) && x == (snn_tokenizer *)0x1, "%s: %s", bad[i].to,
                  snn_last_error());
        free(e);
    }
    free(j1);
    snn_tokenizer_free(t1);
    snn_tokenizer_free(t2);
    /* early stop: a text with few distinct pairs cannot fill a large vocabulary */
    CHECK(snn_tokenizer_bpe_train((const uint8_t *)"abababab cdcd", 13, 5000, &t) == SNN_OK);
    CHECK(t && snn_tokenizer_num_merges(t) < 10 && snn_tokenizer_vocab_size(t) == 257 + snn_tokenizer_num_merges(t));
    CHECK(t && round_trip(t, (const uint8_t *)"abababab cdcd", 13, NULL));
    snn_tokenizer_free(t);
    CHECK(snn_tokenizer_bpe_train(text, 100, 256, &t) == SNN_E_INVALID);
    free(text);
}

int main(void) {
    rs = snn_test_seed() | 1;
    test_byte();
    test_bpe();
    return snn_test_finish("test_tokenizer");
}
