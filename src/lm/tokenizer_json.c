/* tokenizer.json: the merges (what defines the tokenizer) and the vocabulary as hex bytes
 * (for people and other tools; checked against the merges on load). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/file_internal.h"
#include "core/error_internal.h"
#include "core/json_canon.h"
#include "lm/tokenizer_internal.h"

snn_status snn_tokenizer_to_json(const snn_tokenizer *t, char **out) {
    if (!t || !out) return snn_error(SNN_E_INVALID, "snn_tokenizer_to_json: NULL argument");
    cJSON *o = cJSON_CreateObject(), *merges = cJSON_CreateArray(), *vocab = cJSON_CreateArray();
    int ok = o && merges && vocab;
    ok = ok && cJSON_AddStringToObject(o, "type", t->bpe ? "bpe" : "byte");
    ok = ok && cJSON_AddItemToObject(o, "version", snn_json_int(1));
    ok = ok && cJSON_AddItemToObject(o, "vocab_size", snn_json_int(t->vocab));
    ok = ok && cJSON_AddItemToObject(o, "eos_id", snn_json_int(t->eos));
    for (int k = 0; ok && k < t->nmerges; k++) {
        cJSON *p = cJSON_CreateArray();
        ok = p && cJSON_AddItemToArray(p, snn_json_int(t->left[k])) && cJSON_AddItemToArray(p, snn_json_int(t->right[k])) &&
             cJSON_AddItemToArray(merges, p);
    }
    char *hex = NULL;
    size_t hcap = 0;
    for (int id = 0; ok && id < t->vocab; id++) {
        size_t n = t->len[id];
        if (2 * n + 1 > hcap) {
            hcap = 2 * n + 1;
            char *x = realloc(hex, hcap);
            if (!x) { ok = 0; break; }
            hex = x;
        }
        for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", t->bytes[t->off[id] + i]);
        hex[2 * n] = '\0';
        ok = cJSON_AddItemToArray(vocab, cJSON_CreateString(hex));
    }
    free(hex);
    if (ok) { ok = cJSON_AddItemToObject(o, "merges", merges); if (ok) merges = NULL; }
    if (ok) { ok = cJSON_AddItemToObject(o, "vocab", vocab); if (ok) vocab = NULL; }
    cJSON_Delete(merges);
    cJSON_Delete(vocab);
    if (!ok) { cJSON_Delete(o); return snn_error(SNN_E_NOMEM, "out of memory writing the tokenizer"); }
    snn_status st = snn_json_print_canonical(o, out);
    cJSON_Delete(o);
    return st;
}

static int as_int(const cJSON *v, int lo, int hi, int *out) {
    /* range first: converting an out-of-range double to int is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) return 0;
    if (v->valuedouble != floor(v->valuedouble)) return 0;
    *out = (int)v->valuedouble;
    return 1;
}

snn_status snn_tokenizer_from_json(const char *json, snn_tokenizer **out) {
    if (!json || !out) return snn_error(SNN_E_INVALID, "snn_tokenizer_from_json: NULL argument");
    cJSON *o = cJSON_Parse(json);
    if (!o) return snn_error(SNN_E_FORMAT, "tokenizer JSON is malformed");
    snn_status st = SNN_OK;
    int32_t *left = NULL, *right = NULL;
    snn_tokenizer *t = NULL;
    if (!cJSON_IsObject(o)) { st = snn_error(SNN_E_FORMAT, "tokenizer JSON is not an object"); goto done; }
    for (const cJSON *c = o->child; c; c = c->next) {
        static const char *const keys[] = {"type", "version", "vocab_size", "eos_id", "merges", "vocab"};
        int known = 0;
        for (size_t i = 0; i < 6; i++) known |= strcmp(c->string, keys[i]) == 0;
        if (!known) { st = snn_error(SNN_E_FORMAT, "tokenizer JSON: unknown key \"%.40s\"", c->string); goto done; }
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(o, "merges");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(o, "vocab");
    int version, vs, eos;
    if (!cJSON_IsString(type) || (strcmp(type->valuestring, "byte") && strcmp(type->valuestring, "bpe"))) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: type must be \"byte\" or \"bpe\"");
        goto done;
    }
    int bpe = strcmp(type->valuestring, "bpe") == 0;
    if (!as_int(cJSON_GetObjectItemCaseSensitive(o, "version"), 1, 1, &version)) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: version must be 1");
        goto done;
    }
    if (!as_int(cJSON_GetObjectItemCaseSensitive(o, "vocab_size"), 257, SNN_TOKENIZER_MAX_VOCAB, &vs) ||
        !as_int(cJSON_GetObjectItemCaseSensitive(o, "eos_id"), 0, SNN_TOKENIZER_MAX_VOCAB, &eos)) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: vocab_size / eos_id missing or out of range");
        goto done;
    }
    if (!cJSON_IsArray(merges) || !cJSON_IsArray(vocab)) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: merges and vocab must be lists");
        goto done;
    }
    int nm = cJSON_GetArraySize(merges);
    if (vs != 257 + nm || eos != vs - 1 || (!bpe && nm != 0)) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: vocab_size %d and eos_id %d do not fit %d merges (%s)", vs, eos,
                       nm, type->valuestring);
        goto done;
    }
    left = malloc((size_t)(nm ? nm : 1) * sizeof *left);
    right = malloc((size_t)(nm ? nm : 1) * sizeof *right);
    if (!left || !right) { st = snn_error(SNN_E_NOMEM, "out of memory"); goto done; }
    int k = 0;
    for (const cJSON *m = merges->child; m; m = m->next, k++) {
        int a, b;
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !as_int(m->child, 0, vs, &a) ||
            !as_int(m->child->next, 0, vs, &b)) {
            st = snn_error(SNN_E_FORMAT, "tokenizer JSON: merge %d is not a pair of ids", k);
            goto done;
        }
        left[k] = a;
        right[k] = b;
    }
    st = snn_tok_build(bpe, nm, left, right, &t);
    if (st != SNN_OK) goto done;
    if (cJSON_GetArraySize(vocab) != vs) {
        st = snn_error(SNN_E_FORMAT, "tokenizer JSON: vocab lists %d tokens, vocab_size is %d", cJSON_GetArraySize(vocab), vs);
        goto done;
    }
    int id = 0;
    for (const cJSON *v = vocab->child; v; v = v->next, id++) {
        size_t n = t->len[id];
        int good = cJSON_IsString(v) && strlen(v->valuestring) == 2 * n;
        for (size_t i = 0; good && i < n; i++) {
            unsigned x;
            good = sscanf(v->valuestring + 2 * i, "%2x", &x) == 1 && x == t->bytes[t->off[id] + i] &&
                   strchr("0123456789abcdef", v->valuestring[2 * i]) && strchr("0123456789abcdef", v->valuestring[2 * i + 1]);
        }
        if (!good) {
            st = snn_error(SNN_E_FORMAT, "tokenizer JSON: vocab entry %d does not match its merges", id);
            goto done;
        }
    }
done:
    cJSON_Delete(o);
    free(left);
    free(right);
    if (st != SNN_OK) { snn_tokenizer_free(t); return st; }
    *out = t;
    return SNN_OK;
}

snn_status snn_tokenizer_save(const snn_tokenizer *t, const char *path) {
    if (!path) return snn_error(SNN_E_INVALID, "snn_tokenizer_save: NULL path");
    char *j = NULL;
    SNN_TRY(snn_tokenizer_to_json(t, &j));
    FILE *f = fopen(path, "wb");
    if (!f) { free(j); return snn_error(SNN_E_IO, "cannot create %s", path); }
    size_t n = strlen(j);
    int ok = fwrite(j, 1, n, f) == n && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    free(j);
    return ok ? SNN_OK : snn_error(SNN_E_IO, "cannot write %s", path);
}

snn_status snn_tokenizer_load(const char *path, snn_tokenizer **out) {
    if (!path || !out) return snn_error(SNN_E_INVALID, "snn_tokenizer_load: NULL argument");
    FILE *f;
    SNN_TRY(snn_fopen_regular(path, "tokenizer file", &f));
    const size_t cap = (size_t)256 << 20;
    size_t n = 0, sz = 1 << 16;
    char *b = malloc(sz + 1);
    for (size_t r; b && (r = fread(b + n, 1, sz - n, f)) > 0;) {
        n += r;
        if (n == sz) {
            if (sz >= cap) { free(b); fclose(f); return snn_error(SNN_E_FORMAT, "%s is larger than 256 MiB", path); }
            char *x = realloc(b, 2 * sz + 1);
            if (!x) { free(b); b = NULL; break; }
            b = x;
            sz *= 2;
        }
    }
    fclose(f);
    if (!b) return snn_error(SNN_E_NOMEM, "out of memory reading %s", path);
    b[n] = '\0';
    snn_status st = snn_tokenizer_from_json(b, out);
    free(b);
    return st == SNN_OK ? SNN_OK : snn_error_prefix(st, "%s", path);
}
