/* Driver for tests/oracle_lm_json.py:
 *   driver_lm_json sha256 FILE     lower-case hex SHA-256 of the file's bytes
 *   driver_lm_json canon FILE      the canonical form of the JSON in FILE
 *   driver_lm_json recipe FILE     the recipe of the TrainingConfig in FILE, then its SHA-256 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "snn/lm_config.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    for (size_t r; b && (r = fread(b + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) { cap *= 2; b = realloc(b, cap + 1); }
    }
    fclose(f);
    if (b) b[len] = '\0';
    *n = len;
    return b;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: driver_lm_json sha256|canon|recipe FILE\n"); return 2; }
    size_t n = 0;
    char *buf = slurp(argv[2], &n);
    if (!buf) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    int rc = 0;
    if (strcmp(argv[1], "sha256") == 0) {
        /* through the incremental interface in uneven pieces */
        snn_sha256_ctx s;
        uint8_t d[32];
        snn_sha256_init(&s);
        for (size_t off = 0, step = 1; off < n; off += step, step = step * 3 % 131 + 1)
            snn_sha256_update(&s, buf + off, off + step > n ? n - off : step);
        snn_sha256_final(&s, d);
        for (int i = 0; i < 32; i++) printf("%02x", d[i]);
        char hex[65];
        snn_sha256_hex(buf, n, hex);
        printf(" %s\n", hex);
    } else if (strcmp(argv[1], "canon") == 0) {
        char *out = NULL;
        if (snn_json_canonicalize(buf, &out) != SNN_OK) { fprintf(stderr, "%s\n", snn_last_error()); rc = 1; }
        else { fputs(out, stdout); free(out); }
    } else if (strcmp(argv[1], "recipe") == 0) {
        snn_lm_training_config c;
        char *out = NULL, hex[65];
        if (snn_lm_training_config_load(argv[2], &c) != SNN_OK || snn_lm_recipe_to_json(&c, &out) != SNN_OK ||
            snn_lm_recipe_sha256(&c, hex) != SNN_OK) {
            fprintf(stderr, "%s\n", snn_last_error());
            rc = 1;
        } else {
            printf("%s\n%s\n", out, hex);
            free(out);
        }
    } else {
        rc = 2;
    }
    free(buf);
    return rc;
}
