/* Byte-level BPE: training on a corpus and encoding with the learned merges.
 *
 * Training counts the distinct chunks of the text (snn_tok_chunk_end), keeps each as a
 * sequence of ids with its count, and keeps for every adjacent pair its total count and
 * the chunks it occurs in. Each step takes the pair with the highest count (ties: the
 * smallest left id, then the smallest right id) from a max-heap with lazy deletion,
 * rewrites only the chunks that hold it and updates the counts of the pairs around it.
 * The result depends only on the text: hash order never decides anything. */
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "lm/tokenizer_internal.h"

static uint64_t mix64(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return k;
}

/* ---- distinct chunks ---- */
typedef struct { size_t off, len; int64_t count; } chunk;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return mix64(h ^ n);
}

static int by_offset(const void *x, const void *y) {
    size_t a = ((const chunk *)x)->off, b = ((const chunk *)y)->off;
    return a < b ? -1 : a > b;
}

/* ---- pair table ---- */
typedef struct {
    uint64_t key;     /* (a << 32 | b) + 1; 0 = empty */
    int64_t count;
    int32_t *words;   /* chunks that hold (or held) the pair; may repeat */
    int32_t nw, cw;
    uint32_t touched; /* merge step that last changed the count */
} pair;

typedef struct { pair *s; size_t cap, n; } pairs;

static pair *pair_get(pairs *P, int32_t a, int32_t b, int create) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    if (create && 2 * (P->n + 1) > P->cap) {
        size_t cap = P->cap ? 2 * P->cap : 1024;
        pair *s = calloc(cap, sizeof *s);
        if (!s) return NULL;
        for (size_t i = 0; i < P->cap; i++)
            if (P->s[i].key) {
                size_t h = mix64(P->s[i].key) & (cap - 1);
                while (s[h].key) h = (h + 1) & (cap - 1);
                s[h] = P->s[i];
            }
        free(P->s);
        P->s = s;
        P->cap = cap;
    }
    if (!P->cap) return NULL;
    for (size_t h = mix64(key) & (P->cap - 1);; h = (h + 1) & (P->cap - 1)) {
        if (P->s[h].key == key) return &P->s[h];
        if (P->s[h].key == 0) {
            if (!create) return NULL;
            P->s[h].key = key;
            P->n++;
            return &P->s[h];
        }
    }
}

static int pair_note_word(pair *p, int32_t w) {
    if (p->nw && p->words[p->nw - 1] == w) return 0;
    if (p->nw == p->cw) {
        int32_t cw = p->cw ? 2 * p->cw : 4;
        int32_t *x = realloc(p->words, (size_t)cw * sizeof *x);
        if (!x) return -1;
        p->words = x;
        p->cw = cw;
    }
    p->words[p->nw++] = w;
    return 0;
}

/* ---- max-heap of (count, a, b) ---- */
typedef struct { int64_t count; int32_t a, b; } hent;
typedef struct { hent *e; size_t n, cap; } heap;

static int before(const hent *x, const hent *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(heap *H, hent v) {
    if (H->n == H->cap) {
        size_t cap = H->cap ? 2 * H->cap : 1024;
        hent *e = realloc(H->e, cap * sizeof *e);
        if (!e) return -1;
        H->e = e;
        H->cap = cap;
    }
    size_t i = H->n++;
    while (i && before(&v, &H->e[(i - 1) / 2])) {
        H->e[i] = H->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    H->e[i] = v;
    return 0;
}

static hent heap_pop(heap *H) {
    hent top = H->e[0], last = H->e[--H->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= H->n) break;
        if (c + 1 < H->n && before(&H->e[c + 1], &H->e[c])) c++;
        if (!before(&H->e[c], &last)) break;
        H->e[i] = H->e[c];
        i = c;
    }
    if (H->n) H->e[i] = last;
    return top;
}

typedef struct {
    int32_t *sym;   /* all chunks' ids, chunk w at sym[start[w] ..) */
    size_t *start;
    int32_t *len;
    int64_t *count;
    int32_t nwords;
    pairs P;
    heap H;
    uint64_t *touched; /* keys (not pointers: the table moves when it grows) */
    size_t ntouched, ctouched;
} trainer;

static int touch(trainer *T, pair *p, uint32_t step) {
    if (p->touched == step) return 0;
    p->touched = step;
    if (T->ntouched == T->ctouched) {
        size_t c = T->ctouched ? 2 * T->ctouched : 1024;
        uint64_t *x = realloc(T->touched, c * sizeof *x);
        if (!x) return -1;
        T->touched = x;
        T->ctouched = c;
    }
    T->touched[T->ntouched++] = p->key;
    return 0;
}

static void trainer_free(trainer *T) {
    free(T->sym); free(T->start); free(T->len); free(T->count);
    for (size_t i = 0; i < T->P.cap; i++) free(T->P.s[i].words);
    free(T->P.s); free(T->H.e); free(T->touched);
}

/* Rewrite chunk w with (a, b) -> z; keep the pair counts and lists in step. */
static int merge_word(trainer *T, int32_t w, int32_t a, int32_t b, int32_t z, uint32_t step) {
    int32_t *s = T->sym + T->start[w];
    int32_t n = T->len[w];
    int found = 0;
    for (int32_t i = 0; i + 1 < n && !found; i++) found = s[i] == a && s[i + 1] == b;
    if (!found) return 0;
    int64_t c = T->count[w];
    for (int32_t i = 0; i + 1 < n; i++) {
        pair *p = pair_get(&T->P, s[i], s[i + 1], 0);
        p->count -= c;
        if (touch(T, p, step)) return -1;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) { s[m++] = z; i += 2; }
        else s[m++] = s[i++];
    }
    T->len[w] = m;
    for (int32_t i = 0; i + 1 < m; i++) {
        pair *p = pair_get(&T->P, s[i], s[i + 1], 1);
        if (!p) return -1;
        p->count += c;
        if (touch(T, p, step)) return -1;
        if ((s[i] == z || s[i + 1] == z) && pair_note_word(p, w)) return -1;
    }
    return 0;
}

snn_status snn_tokenizer_bpe_train(const uint8_t *text, size_t len, int vocab_size, snn_tokenizer **out) {
    if (!out || (len && !text)) return snn_error(SNN_E_INVALID, "snn_tokenizer_bpe_train: NULL argument");
    if (vocab_size < 257 || vocab_size > SNN_TOKENIZER_MAX_VOCAB)
        return snn_error(SNN_E_INVALID, "BPE vocab_size %d must be in [257, %d] (256 bytes + EOS + merges)", vocab_size,
                         SNN_TOKENIZER_MAX_VOCAB);
    if (len > ((size_t)1 << 31)) return snn_error(SNN_E_INVALID, "BPE training text is larger than 2 GiB");
    trainer T;
    memset(&T, 0, sizeof T);
    snn_status st = SNN_OK;
    int want = vocab_size - 257, got = 0;
    int32_t *left = malloc((size_t)(want ? want : 1) * sizeof *left);
    int32_t *right = malloc((size_t)(want ? want : 1) * sizeof *right);
    /* 1. distinct chunks with their counts */
    size_t ccap = 1024, nchunks = 0;
    chunk *ch = calloc(ccap, sizeof *ch);
    size_t *slot = NULL;
    if (!left || !right || !ch) goto oom;
    for (size_t i = 0; i < len;) {
        size_t j = snn_tok_chunk_end(text, len, i);
        if (2 * (nchunks + 1) > ccap) {
            size_t cap = 2 * ccap;
            chunk *x = calloc(cap, sizeof *x);
            if (!x) goto oom;
            for (size_t k = 0; k < ccap; k++)
                if (ch[k].count) {
                    size_t h = hash_bytes(text + ch[k].off, ch[k].len) & (cap - 1);
                    while (x[h].count) h = (h + 1) & (cap - 1);
                    x[h] = ch[k];
                }
            free(ch);
            ch = x;
            ccap = cap;
        }
        size_t h = hash_bytes(text + i, j - i) & (ccap - 1);
        while (ch[h].count && !(ch[h].len == j - i && memcmp(text + ch[h].off, text + i, j - i) == 0))
            h = (h + 1) & (ccap - 1);
        if (!ch[h].count) { ch[h].off = i; ch[h].len = j - i; nchunks++; }
        ch[h].count++;
        i = j;
    }
    /* 2. chunks as id sequences, in order of first appearance (deterministic) */
    slot = malloc((nchunks ? nchunks : 1) * sizeof *slot);
    if (!slot) goto oom;
    {
        size_t k = 0, total = 0;
        for (size_t h = 0; h < ccap; h++)
            if (ch[h].count) { ch[k++] = ch[h]; total += ch[h].len; } /* compact in place: k <= h */
        qsort(ch, k, sizeof *ch, by_offset); /* first-appearance order */
        for (size_t w = 0; w < k; w++) slot[w] = w;
        T.nwords = (int32_t)k;
        T.sym = malloc((total ? total : 1) * sizeof *T.sym);
        T.start = malloc((k ? k : 1) * sizeof *T.start);
        T.len = malloc((k ? k : 1) * sizeof *T.len);
        T.count = malloc((k ? k : 1) * sizeof *T.count);
        if (!T.sym || !T.start || !T.len || !T.count) goto oom;
        size_t o = 0;
        for (size_t w = 0; w < k; w++) {
            const chunk *c = &ch[slot[w]];
            T.start[w] = o;
            T.len[w] = (int32_t)c->len;
            T.count[w] = c->count;
            for (size_t i = 0; i < c->len; i++) T.sym[o + i] = text[c->off + i];
            for (size_t i = 0; i + 1 < c->len; i++) {
                pair *p = pair_get(&T.P, T.sym[o + i], T.sym[o + i + 1], 1);
                if (!p || pair_note_word(p, (int32_t)w)) goto oom;
                p->count += c->count;
            }
            o += c->len;
        }
    }
    free(ch);
    ch = NULL;
    free(slot);
    slot = NULL;
    for (size_t i = 0; i < T.P.cap; i++)
        if (T.P.s[i].key) {
            uint64_t k = T.P.s[i].key - 1;
            if (heap_push(&T.H, (hent){T.P.s[i].count, (int32_t)(k >> 32), (int32_t)(k & 0xffffffffu)})) goto oom;
        }
    /* 3. merges */
    int32_t *stamp = calloc((size_t)(T.nwords ? T.nwords : 1), sizeof *stamp);
    if (!stamp) goto oom;
    while (got < want && T.H.n) {
        hent top = heap_pop(&T.H);
        pair *p = pair_get(&T.P, top.a, top.b, 0);
        if (!p || p->count != top.count) continue; /* stale entry */
        if (top.count < 2) break;
        int32_t z = 256 + got;
        uint32_t step = (uint32_t)got + 1;
        left[got] = top.a;
        right[got] = top.b;
        got++;
        T.ntouched = 0;
        /* p's list may grow (if z pairs with itself) and the table may move: copy it */
        int32_t nw = p->nw;
        int32_t *ws = malloc((size_t)(nw ? nw : 1) * sizeof *ws);
        if (!ws) { free(stamp); goto oom; }
        memcpy(ws, p->words, (size_t)nw * sizeof *ws);
        free(p->words);
        p->words = NULL;
        p->nw = p->cw = 0;
        int bad = 0;
        for (int32_t i = 0; i < nw && !bad; i++) {
            if (stamp[ws[i]] == (int32_t)step) continue;
            stamp[ws[i]] = (int32_t)step;
            bad = merge_word(&T, ws[i], top.a, top.b, z, step) != 0;
        }
        free(ws);
        for (size_t i = 0; i < T.ntouched && !bad; i++) {
            uint64_t k = T.touched[i] - 1;
            pair *q = pair_get(&T.P, (int32_t)(k >> 32), (int32_t)(k & 0xffffffffu), 0);
            if (q && q->count > 0)
                bad = heap_push(&T.H, (hent){q->count, (int32_t)(k >> 32), (int32_t)(k & 0xffffffffu)}) != 0;
        }
        if (bad) { free(stamp); goto oom; }
    }
    free(stamp);
    st = snn_tok_build(1, got, left, right, out);
    goto done;
oom:
    st = snn_error(SNN_E_NOMEM, "out of memory training BPE");
done:
    free(ch);
    free(slot);
    free(left);
    free(right);
    trainer_free(&T);
    return st;
}

/* ---- encoding ---- */

snn_status snn_tokenizer_encode(const snn_tokenizer *t, const uint8_t *text, size_t len, int32_t **ids, size_t *n) {
    if (!t || !ids || !n || (len && !text)) return snn_error(SNN_E_INVALID, "snn_tokenizer_encode: NULL argument");
    int32_t *out = malloc((len ? len : 1) * sizeof *out); /* never more ids than bytes */
    if (!out) return snn_error(SNN_E_NOMEM, "cannot allocate %zu ids", len);
    size_t m = 0;
    if (!t->bpe || t->nmerges == 0) {
        for (size_t i = 0; i < len; i++) out[i] = text[i];
        m = len;
    } else {
        int32_t s[SNN_TOK_MAX_CHUNK];
        for (size_t i = 0; i < len;) {
            size_t j = snn_tok_chunk_end(text, len, i);
            int k = 0;
            for (size_t q = i; q < j; q++) s[k++] = text[q];
            /* apply the lowest-ranked merge present, all its occurrences, until none applies */
            for (;;) {
                int best = -1;
                for (int q = 0; q + 1 < k; q++) {
                    int r = snn_tok_rank(t, s[q], s[q + 1]);
                    if (r >= 0 && (best < 0 || r < best)) best = r;
                }
                if (best < 0) break;
                int32_t a = t->left[best], b = t->right[best], z = 256 + best, w = 0;
                for (int q = 0; q < k;) {
                    if (q + 1 < k && s[q] == a && s[q + 1] == b) { s[w++] = z; q += 2; }
                    else s[w++] = s[q++];
                }
                k = w;
            }
            memcpy(out + m, s, (size_t)k * sizeof *s);
            m += (size_t)k;
            i = j;
        }
    }
    *ids = out;
    *n = m;
    return SNN_OK;
}
