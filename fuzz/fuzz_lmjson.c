/* libFuzzer target: the JSON readers of the language-model configs (every record type),
 * the canonicaliser and tokenizer.json; whatever parses is written back and re-read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "snn/lm_config.h"
#include "snn/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *out = NULL;
    if (snn_json_canonicalize(s, &out) == SNN_OK) free(out);
    snn_lm_training_config tc;
    if (snn_lm_training_config_from_json(s, &tc) == SNN_OK) {
        char hex[65], *j = NULL;
        snn_lm_recipe_sha256(&tc, hex);
        if (snn_lm_training_config_to_json(&tc, &j) == SNN_OK) {
            snn_lm_training_config back;
            if (snn_lm_training_config_from_json(j, &back) != SNN_OK || memcmp(&back, &tc, sizeof tc) != 0) abort();
            free(j);
        }
    }
    snn_lm_evaluation_config ec;
    snn_lm_generation_config gc;
    snn_lm_model_config mc;
    snn_lm_transformer_config xc;
    snn_lm_optimizer_config oc;
    (void)snn_lm_evaluation_config_from_json(s, &ec);
    (void)snn_lm_generation_config_from_json(s, &gc);
    (void)snn_lm_model_config_from_json(s, &mc);
    (void)snn_lm_transformer_config_from_json(s, &xc);
    (void)snn_lm_optimizer_config_from_json(s, &oc);
    snn_tokenizer *t = NULL;
    if (snn_tokenizer_from_json(s, &t) == SNN_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        uint8_t *back = NULL;
        size_t bl = 0;
        if (snn_tokenizer_encode(t, data, size, &ids, &n) == SNN_OK) {
            if (snn_tokenizer_decode(t, ids, n, &back, &bl) != SNN_OK || bl != size || memcmp(back, data, size)) abort();
            free(back);
            free(ids);
        }
        snn_tokenizer_free(t);
    }
    free(s);
    return 0;
}
