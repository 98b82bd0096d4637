/* The tokenizer record and what every tokenizer shares: the byte tokenizer (ids 0..255,
 * EOS 256), the chunking rule, the merge table, accessors and decoding. */
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "lm/tokenizer_internal.h"

enum { C_LETTER, C_DIGIT, C_SPACE, C_WS, C_OTHER };

static int cls(uint8_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return C_LETTER;
    if (c >= '0' && c <= '9') return C_DIGIT;
    if (c == ' ') return C_SPACE;
    if (c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return C_WS;
    return C_OTHER;
}

size_t snn_tok_chunk_end(const uint8_t *t, size_t n, size_t i) {
    size_t lim = n - i > SNN_TOK_MAX_CHUNK ? i + SNN_TOK_MAX_CHUNK : n;
    size_t j = i;
    int c = cls(t[i]);
    if (c == C_SPACE && i + 1 < lim && cls(t[i + 1]) != C_SPACE && cls(t[i + 1]) != C_WS) {
        /* one space leads the word, number or symbol run after it */
        c = cls(t[i + 1]);
        j = i + 1;
    }
    while (j < lim && cls(t[j]) == c) j++;
    /* a run of spaces leaves its last space to lead what follows */
    if (c == C_SPACE && j < n && j - i > 1 && cls(t[j]) != C_WS && j < lim) j--;
    return j;
}

static uint64_t mix(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return k;
}

int snn_tok_rank(const snn_tokenizer *t, int32_t a, int32_t b) {
    if (!t->hcap) return -1;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t h = mix(key) & (t->hcap - 1);; h = (h + 1) & (t->hcap - 1)) {
        if (t->hkey[h] == 0) return -1;
        if (t->hkey[h] == key) return t->hval[h];
    }
}

void snn_tokenizer_free(snn_tokenizer *t) {
    if (!t) return;
    free(t->left); free(t->right); free(t->off); free(t->len); free(t->bytes); free(t->hkey); free(t->hval);
    free(t);
}

snn_status snn_tok_build(int bpe, int nmerges, const int32_t *left, const int32_t *right, snn_tokenizer **out) {
    if (nmerges < 0 || nmerges > SNN_TOKENIZER_MAX_VOCAB - 257)
        return snn_error(SNN_E_INVALID, "tokenizer: %d merges is out of range", nmerges);
    snn_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return snn_error(SNN_E_NOMEM, "out of memory");
    t->bpe = bpe;
    t->nmerges = nmerges;
    t->vocab = 257 + nmerges;
    t->eos = t->vocab - 1;
    size_t nm = (size_t)nmerges, nv = (size_t)t->vocab;
    t->left = malloc((nm ? nm : 1) * sizeof *t->left);
    t->right = malloc((nm ? nm : 1) * sizeof *t->right);
    t->off = malloc(nv * sizeof *t->off);
    t->len = calloc(nv, sizeof *t->len);
    t->hcap = 16;
    while (t->hcap < 2 * nm) t->hcap *= 2;
    t->hkey = calloc(t->hcap, sizeof *t->hkey);
    t->hval = malloc(t->hcap * sizeof *t->hval);
    if (!t->left || !t->right || !t->off || !t->len || !t->hkey || !t->hval) goto oom;
    /* byte lengths first, to size the byte table (checked against 4 GiB) */
    uint64_t total = 256;
    for (int i = 0; i < 256; i++) t->len[i] = 1;
    for (int k = 0; k < nmerges; k++) {
        int32_t a = left[k], b = right[k], id = 256 + k;
        if (a < 0 || b < 0 || a >= id || b >= id) {
            snn_tokenizer_free(t);
            return snn_error(SNN_E_FORMAT, "tokenizer merge %d (%d, %d) uses an id that is not defined before it", k,
                             (int)a, (int)b);
        }
        if (snn_tok_rank(t, a, b) >= 0) {
            snn_tokenizer_free(t);
            return snn_error(SNN_E_FORMAT, "tokenizer merge %d repeats the pair (%d, %d)", k, (int)a, (int)b);
        }
        t->left[k] = a;
        t->right[k] = b;
        t->len[id] = t->len[a] + t->len[b];
        total += t->len[id];
        if (total > UINT32_MAX) {
            snn_tokenizer_free(t);
            return snn_error(SNN_E_FORMAT, "tokenizer tokens are longer than 4 GiB in all");
        }
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        size_t h = mix(key) & (t->hcap - 1);
        while (t->hkey[h]) h = (h + 1) & (t->hcap - 1);
        t->hkey[h] = key;
        t->hval[h] = k;
    }
    t->bytes = malloc(total);
    if (!t->bytes) goto oom;
    uint32_t o = 0;
    for (int i = 0; i < 256; i++) { t->off[i] = o; t->bytes[o++] = (uint8_t)i; }
    for (int k = 0; k < nmerges; k++) {
        int id = 256 + k;
        t->off[id] = o;
        memcpy(t->bytes + o, t->bytes + t->off[left[k]], t->len[left[k]]);
        memcpy(t->bytes + o + t->len[left[k]], t->bytes + t->off[right[k]], t->len[right[k]]);
        o += t->len[id];
    }
    t->off[t->eos] = o;
    t->len[t->eos] = 0;
    *out = t;
    return SNN_OK;
oom:
    snn_tokenizer_free(t);
    return snn_error(SNN_E_NOMEM, "out of memory building a tokenizer");
}

snn_status snn_tokenizer_byte(snn_tokenizer **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_tokenizer_byte: NULL output");
    return snn_tok_build(0, 0, NULL, NULL, out);
}

const char *snn_tokenizer_type(const snn_tokenizer *t) { return !t ? NULL : t->bpe ? "bpe" : "byte"; }
int snn_tokenizer_vocab_size(const snn_tokenizer *t) { return t ? t->vocab : 0; }
int snn_tokenizer_eos_id(const snn_tokenizer *t) { return t ? t->eos : -1; }
int snn_tokenizer_num_merges(const snn_tokenizer *t) { return t ? t->nmerges : 0; }

snn_status snn_tokenizer_merge(const snn_tokenizer *t, int k, int *left, int *right) {
    if (!t || k < 0 || k >= t->nmerges) return snn_error(SNN_E_INVALID, "merge index %d is out of range", k);
    if (left) *left = t->left[k];
    if (right) *right = t->right[k];
    return SNN_OK;
}

const uint8_t *snn_tokenizer_token_bytes(const snn_tokenizer *t, int id, size_t *len) {
    if (len) *len = 0;
    if (!t || id < 0 || id >= t->vocab || id == t->eos) return NULL;
    if (len) *len = t->len[id];
    return t->bytes + t->off[id];
}

snn_status snn_tokenizer_decode(const snn_tokenizer *t, const int32_t *ids, size_t n, uint8_t **text, size_t *len) {
    if (!t || !text || !len || (n && !ids)) return snn_error(SNN_E_INVALID, "snn_tokenizer_decode: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab)
            return snn_error(SNN_E_INVALID, "token id %d at position %zu is outside the vocabulary of %d", (int)ids[i],
                             i, t->vocab);
        total += t->len[ids[i]];
    }
    uint8_t *b = malloc(total + 1);
    if (!b) return snn_error(SNN_E_NOMEM, "cannot allocate %zu bytes", total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(b + o, t->bytes + t->off[ids[i]], t->len[ids[i]]);
        o += t->len[ids[i]];
    }
    b[o] = '\0';
    *text = b;
    *len = o;
    return SNN_OK;
}
