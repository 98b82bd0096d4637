/* snn lm prepare-data TEXT OUT --seq-len S: tokenise real text into a token dataset
 * (OUT/train.npy, valid.npy, test.npy as int32 [N, S+1]) with its tokenizer.json and a
 * meta.json.
 *
 * TEXT is a file or a directory; a directory contributes its regular files (not hidden,
 * not *.dat or *.u8, the index and UTF-8 link files of Debian's fortunes) in name order.
 * Each file is a document, or with --doc-separator LINE each part between lines equal to
 * LINE (fortune files use "%"). Documents are shuffled with --seed and dealt to the valid
 * and test splits until each holds its fraction of the bytes; the rest is train. (With
 * fewer than 3 documents the text is cut by bytes instead: train, then valid, then test.)
 * The BPE tokenizer learns only from the train split. Each split is one token stream,
 * documents ended by EOS, cut into rows of S+1 tokens with stride S, so every token
 * after the first is a target exactly once; the tail shorter than a row is dropped.
 * meta.json records the sizes and the unigram baseline: the cross-entropy (nats/token)
 * of the valid targets under the train targets' add-one-smoothed frequencies. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "snn/json.h"
#include "snn/tokenizer.h"
#include "snn/tokens.h"

int snn_cmd_lm_prepare_data(int argc, char **argv);

#define MAX_TEXT ((size_t)1 << 30)

typedef struct { uint8_t *p; size_t n; } doc;
typedef struct { doc *d; size_t n, cap; size_t bytes; } docs;

static void docs_add(docs *D, const uint8_t *p, size_t n) {
    if (n == 0) return;
    if (D->n == D->cap) {
        D->cap = D->cap ? 2 * D->cap : 256;
        D->d = realloc(D->d, D->cap * sizeof *D->d);
        if (!D->d) die_usage("lm prepare-data: out of memory");
    }
    uint8_t *c = malloc(n);
    if (!c) die_usage("lm prepare-data: out of memory");
    memcpy(c, p, n);
    D->d[D->n++] = (doc){c, n};
    D->bytes += n;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die_usage("lm prepare-data: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    for (size_t r; b && (r = fread(b + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len > MAX_TEXT) die_usage("lm prepare-data: %s is larger than 1 GiB", path);
        if (len == cap) { cap *= 2; b = realloc(b, cap); }
    }
    int err = ferror(f);
    fclose(f);
    if (!b) die_usage("lm prepare-data: out of memory reading %s", path);
    if (err) die_usage("lm prepare-data: cannot read %s", path);
    *n = len;
    return b;
}

/* Split one file's bytes into documents at lines equal to sep (sep NULL: one document). */
static void add_file(docs *D, const uint8_t *b, size_t n, const char *sep) {
    if (!sep) { docs_add(D, b, n); return; }
    size_t sl = strlen(sep), start = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && b[e] != '\n') e++;
        size_t line = e - i - (e > i && b[e - 1] == '\r');
        if (line == sl && memcmp(b + i, sep, sl) == 0) {
            docs_add(D, b + start, i - start);
            start = e < n ? e + 1 : e;
        }
        i = e < n ? e + 1 : e;
    }
    docs_add(D, b + start, n - start);
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int wanted(const char *name) {
    size_t l = strlen(name);
    if (name[0] == '.') return 0;
    if (l >= 4 && (!strcmp(name + l - 4, ".dat") || !strcmp(name + l - 3, ".u8"))) return 0;
    if (l >= 3 && !strcmp(name + l - 3, ".u8")) return 0;
    return 1;
}

static size_t gather(docs *D, const char *text, const char *sep) {
    struct stat st;
    if (stat(text, &st) != 0) die_usage("lm prepare-data: cannot read %s: %s", text, strerror(errno));
    size_t files = 0;
    if (S_ISREG(st.st_mode)) {
        size_t n;
        uint8_t *b = read_all(text, &n);
        add_file(D, b, n, sep);
        free(b);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) die_usage("lm prepare-data: %s is neither a file nor a directory", text);
    DIR *dir = opendir(text);
    if (!dir) die_usage("lm prepare-data: cannot open directory %s: %s", text, strerror(errno));
    char **names = NULL;
    size_t nn = 0, cap = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (!wanted(e->d_name)) continue;
        if (nn == cap) { cap = cap ? 2 * cap : 64; names = realloc(names, cap * sizeof *names); }
        names[nn++] = strdup(e->d_name);
    }
    closedir(dir);
    if (nn) qsort(names, nn, sizeof *names, name_cmp);
    size_t total = 0;
    for (size_t i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", text, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            size_t n;
            uint8_t *b = read_all(path, &n);
            total += n;
            if (total > MAX_TEXT) die_usage("lm prepare-data: %s holds more than 1 GiB of text", text);
            add_file(D, b, n, sep);
            free(b);
            files++;
        }
        free(names[i]);
    }
    free(names);
    if (!files) die_usage("lm prepare-data: %s holds no text files", text);
    return files;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One split's token stream: every document's ids followed by EOS. */
typedef struct { int32_t *t; size_t n, cap; size_t bytes, docs; } stream;

static void stream_add(stream *s, const snn_tokenizer *tok, const doc *d) {
    int32_t *ids = NULL;
    size_t m = 0;
    if (snn_tokenizer_encode(tok, d->p, d->n, &ids, &m) != SNN_OK) die_status(SNN_E_NOMEM, "tokenising");
    if (s->n + m + 1 > s->cap) {
        while (s->n + m + 1 > s->cap) s->cap = s->cap ? 2 * s->cap : 4096;
        s->t = realloc(s->t, s->cap * sizeof *s->t);
        if (!s->t) die_usage("lm prepare-data: out of memory");
    }
    memcpy(s->t + s->n, ids, m * sizeof *ids);
    s->n += m;
    s->t[s->n++] = snn_tokenizer_eos_id(tok);
    s->bytes += d->n;
    s->docs++;
    free(ids);
}

/* Rows [N, S+1] with stride S; N = 0 when the stream is shorter than a row. */
static int64_t rows_of(const stream *s, int64_t S) {
    return s->n < (size_t)S + 1 ? 0 : (int64_t)((s->n - 1) / (size_t)S);
}

static void write_split(const char *out, const char *name, const stream *s, int64_t S) {
    int64_t N = rows_of(s, S);
    int32_t *rows = malloc((size_t)N * (size_t)(S + 1) * sizeof *rows + 1);
    if (!rows) die_usage("lm prepare-data: out of memory");
    for (int64_t r = 0; r < N; r++) memcpy(rows + r * (S + 1), s->t + r * S, (size_t)(S + 1) * sizeof *rows);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", out, name);
    snn_status st = snn_npy_write(path, SNN_NPY_INT32, N, S + 1, rows);
    free(rows);
    if (st != SNN_OK) die_status(st, "writing the token dataset");
}

/* The shortest decimal that reads back as the float the user typed (0.05, not 0.0500000007). */
static double float_decimal(float f) {
    char b[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, (double)f);
        if ((float)strtod(b, NULL) == f) break;
    }
    return strtod(b, NULL);
}

static cJSON *split_meta(const stream *s, int64_t S) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "rows", snn_json_int(rows_of(s, S)));
    cJSON_AddItemToObject(o, "tokens", snn_json_int((long long)s->n));
    cJSON_AddItemToObject(o, "bytes", snn_json_int((long long)s->bytes));
    cJSON_AddItemToObject(o, "documents", snn_json_int((long long)s->docs));
    return o;
}

/* Cross-entropy of the valid rows' targets under the train rows' target frequencies. */
static double unigram_baseline(const stream *tr, const stream *va, int64_t S, int V) {
    double *cnt = calloc((size_t)V, sizeof *cnt);
    if (!cnt) die_usage("lm prepare-data: out of memory");
    int64_t Nt = rows_of(tr, S), Nv = rows_of(va, S);
    double total = 0;
    for (int64_t r = 0; r < Nt; r++)
        for (int64_t j = 1; j <= S; j++) { cnt[tr->t[r * S + j]] += 1; total += 1; }
    double loss = 0;
    for (int64_t r = 0; r < Nv; r++)
        for (int64_t j = 1; j <= S; j++) loss -= log((cnt[va->t[r * S + j]] + 1) / (total + V));
    free(cnt);
    return loss / (double)(Nv * S);
}

int snn_cmd_lm_prepare_data(int argc, char **argv) {
    int seq_len = 0, vocab = 4096;
    float valid_f = 0.05f, test_f = 0.05f;
    uint64_t seed = 1234;
    const char *tokname = "byte", *sep = NULL;
    opt t[] = {
        opt_num("--seq-len", OPT_INT, &seq_len, "tokens per sample S (rows hold S+1; required)", NULL, 1, 1 << 20),
        {.name = "--tokenizer", .type = OPT_STRING, .dst = &tokname,
         .help = "byte (256 bytes + EOS, default) or bpe (trained on train)"},
        opt_num("--vocab-size", OPT_INT, &vocab, "bpe: vocabulary incl. bytes and EOS (default 4096)", NULL, 257,
                SNN_TOKENIZER_MAX_VOCAB),
        {.name = "--valid-fraction", .type = OPT_FLOAT, .dst = &valid_f,
         .help = "share of the text for valid.npy, in (0, 0.5] (default 0.05)"},
        {.name = "--test-fraction", .type = OPT_FLOAT, .dst = &test_f,
         .help = "share of the text for test.npy, in (0, 0.5] (default 0.05)"},
        {.name = "--seed", .type = OPT_U64, .dst = &seed, .help = "document shuffle seed (default 1234)"},
        {.name = "--doc-separator", .type = OPT_STRING, .dst = &sep,
         .help = "a line that separates documents inside a file ('%' for fortunes)"},
    };
    int nt = (int)(sizeof t / sizeof *t);
    if (args_wants_help(argc, argv, 3)) {
        args_help("snn lm prepare-data TEXT OUT --seq-len S [options]",
                  "Tokenise a text file or a directory of text files into OUT/train.npy, valid.npy\n"
                  "and test.npy (int32 [N, S+1]), OUT/tokenizer.json and OUT/meta.json.", t, nt);
        return 0;
    }
    if (argc < 5 || !strncmp(argv[3], "--", 2) || !strncmp(argv[4], "--", 2))
        die_usage("lm prepare-data: needs TEXT and OUT (snn lm prepare-data TEXT OUT --seq-len S)");
    const char *text = argv[3], *out = argv[4];
    args_parse("lm prepare-data", t, nt, argc, argv, 5);
    if (!t[0].seen) die_usage("lm prepare-data: --seq-len is required");
    if (seq_len < 1 || seq_len > (1 << 20)) die_usage("lm prepare-data: --seq-len must be in [1, 1048576], got %d", seq_len);
    int bpe = !strcmp(tokname, "bpe");
    if (!bpe && strcmp(tokname, "byte")) die_usage("lm prepare-data: --tokenizer must be byte or bpe, got '%s'", tokname);
    if (!bpe && t[2].seen) die_usage("lm prepare-data: --vocab-size needs --tokenizer bpe (byte has 257 ids)");
    if (bpe && (vocab < 257 || vocab > SNN_TOKENIZER_MAX_VOCAB))
        die_usage("lm prepare-data: --vocab-size must be in [257, %d], got %d", SNN_TOKENIZER_MAX_VOCAB, vocab);
    if (!(valid_f > 0 && valid_f <= 0.5f)) die_usage("lm prepare-data: --valid-fraction must be in (0, 0.5]");
    if (!(test_f > 0 && test_f <= 0.5f)) die_usage("lm prepare-data: --test-fraction must be in (0, 0.5]");
    if (valid_f + test_f >= 0.9f) die_usage("lm prepare-data: --valid-fraction + --test-fraction must be < 0.9");
    if (sep && (!*sep || strchr(sep, '\n'))) die_usage("lm prepare-data: --doc-separator must be a non-empty line");
    /* refuse to overwrite before doing any work */
    static const char *const outs[] = {"train.npy", "valid.npy", "test.npy", "tokenizer.json", "meta.json"};
    struct stat st;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) die_usage("lm prepare-data: %s exists and is not a directory", out);
    for (size_t i = 0; i < 5; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", out, outs[i]);
        if (stat(p, &st) == 0) die_usage("lm prepare-data: %s exists (remove it first)", p);
    }

    docs D = {0};
    size_t files = gather(&D, text, sep);
    if (D.bytes == 0) die_usage("lm prepare-data: %s holds no text", text);
    /* deal documents to the splits */
    docs split[3] = {{0}, {0}, {0}}; /* train, valid, test: views onto D's documents */
    for (int k = 0; k < 3; k++) { split[k].d = malloc(D.n * sizeof *D.d + sizeof *D.d); split[k].cap = D.n; }
    double want[3] = {0, valid_f * (double)D.bytes, test_f * (double)D.bytes};
    uint8_t *all = NULL; /* the concatenation, when cutting by bytes */
    if (D.n >= 3) {
        uint64_t s = seed;
        for (size_t i = D.n - 1; i > 0; i--) {
            size_t j = (size_t)(splitmix(&s) % (i + 1));
            doc x = D.d[i]; D.d[i] = D.d[j]; D.d[j] = x;
        }
        /* valid, then test, each until it holds its share (at least one document); the
         * rest is train */
        size_t i = 0;
        for (int k = 1; k <= 2; k++) {
            do {
                split[k].d[split[k].n++] = D.d[i];
                split[k].bytes += D.d[i].n;
                i++;
            } while (i < D.n && (double)split[k].bytes < want[k]);
        }
        for (; i < D.n; i++) {
            split[0].d[split[0].n++] = D.d[i];
            split[0].bytes += D.d[i].n;
        }
        if (split[0].n == 0)
            die_usage("lm prepare-data: no document is left for the train split (%zu documents; lower the fractions)",
                      D.n);
    } else {
        /* too few documents to deal: cut the concatenation by bytes */
        all = malloc(D.bytes);
        if (!all) die_usage("lm prepare-data: out of memory");
        size_t o = 0;
        for (size_t i = 0; i < D.n; i++) { memcpy(all + o, D.d[i].p, D.d[i].n); o += D.d[i].n; }
        size_t nv = (size_t)want[1], nte = (size_t)want[2], ntr = D.bytes - nv - nte;
        split[0].d[split[0].n++] = (doc){all, ntr};
        split[1].d[split[1].n++] = (doc){all + ntr, nv};
        split[2].d[split[2].n++] = (doc){all + ntr + nv, nte};
    }
    /* the tokenizer, from the train split only */
    snn_tokenizer *tok = NULL;
    snn_status s;
    if (bpe) {
        size_t n = 0;
        for (size_t i = 0; i < split[0].n; i++) n += split[0].d[i].n;
        uint8_t *tr = malloc(n + 1);
        size_t o = 0;
        for (size_t i = 0; i < split[0].n; i++) { memcpy(tr + o, split[0].d[i].p, split[0].d[i].n); o += split[0].d[i].n; }
        s = snn_tokenizer_bpe_train(tr, n, vocab, &tok);
        free(tr);
    } else {
        s = snn_tokenizer_byte(&tok);
    }
    if (s != SNN_OK) die_status(s, "building the tokenizer");
    stream S[3] = {{0}, {0}, {0}};
    static const char *const names[3] = {"train", "valid", "test"};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < split[k].n; i++) stream_add(&S[k], tok, &split[k].d[i]);
        if (rows_of(&S[k], seq_len) < 1)
            die_usage("lm prepare-data: the %s split has %zu tokens, fewer than one row of %d (lower --seq-len or "
                      "raise the fractions)", names[k], S[k].n, seq_len + 1);
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) die_usage("lm prepare-data: cannot create %s: %s", out, strerror(errno));
    for (int k = 0; k < 3; k++) write_split(out, names[k], &S[k], seq_len);
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    if ((s = snn_tokenizer_save(tok, p)) != SNN_OK) die_status(s, "writing the tokenizer");

    cJSON *m = cJSON_CreateObject(), *sp = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", "snn-lm-tokens");
    cJSON_AddItemToObject(m, "version", snn_json_int(1));
    cJSON_AddStringToObject(m, "source", text);
    cJSON_AddItemToObject(m, "source_files", snn_json_int((long long)files));
    cJSON_AddItemToObject(m, "documents", snn_json_int((long long)D.n));
    if (sep) cJSON_AddStringToObject(m, "doc_separator", sep);
    else cJSON_AddNullToObject(m, "doc_separator");
    cJSON_AddStringToObject(m, "tokenizer", snn_tokenizer_type(tok));
    cJSON_AddItemToObject(m, "vocab_size", snn_json_int(snn_tokenizer_vocab_size(tok)));
    cJSON_AddItemToObject(m, "eos_id", snn_json_int(snn_tokenizer_eos_id(tok)));
    cJSON_AddItemToObject(m, "seq_len", snn_json_int(seq_len));
    cJSON_AddItemToObject(m, "dtype", cJSON_CreateString("int32"));
    cJSON_AddItemToObject(m, "seed", snn_json_int((long long)seed));
    cJSON_AddItemToObject(m, "valid_fraction", snn_json_float(float_decimal(valid_f)));
    cJSON_AddItemToObject(m, "test_fraction", snn_json_float(float_decimal(test_f)));
    for (int k = 0; k < 3; k++) cJSON_AddItemToObject(sp, names[k], split_meta(&S[k], seq_len));
    cJSON_AddItemToObject(m, "splits", sp);
    double ub = unigram_baseline(&S[0], &S[1], seq_len, snn_tokenizer_vocab_size(tok));
    cJSON_AddItemToObject(m, "unigram_valid_loss", snn_json_float(ub));
    cJSON_AddItemToObject(m, "bytes_per_token",
                          snn_json_float((double)(S[0].bytes + S[1].bytes + S[2].bytes) / (double)(S[0].n + S[1].n + S[2].n)));
    char *js = NULL;
    if ((s = snn_json_print_canonical(m, &js)) != SNN_OK) die_status(s, "writing meta.json");
    cJSON_Delete(m);
    snprintf(p, sizeof p, "%s/meta.json", out);
    FILE *f = fopen(p, "wb");
    if (!f || fprintf(f, "%s\n", js) < 0 || fclose(f) != 0) die_usage("lm prepare-data: cannot write %s", p);
    printf("%s\n", js);
    free(js);
    for (int k = 0; k < 3; k++) { free(S[k].t); free(split[k].d); }
    free(all);
    for (size_t i = 0; i < D.n; i++) free(D.d[i].p);
    free(D.d);
    snn_tokenizer_free(tok);
    return 0;
}
