/* snn — tokenizers for language models.
 *
 * byte: ids 0..255 are the bytes, id 256 is EOS (vocabulary 257).
 * bpe:  byte-level BPE trained on a corpus: ids 0..255 are the bytes, ids 256..V-2 the
 *       learned merges in the order they were learned, id V-1 is EOS. Training splits the
 *       text into chunks (a run of letters — bytes >= 0x80 count as letters so UTF-8
 *       characters stay together —, of digits, of other whitespace, or of other symbols,
 *       each optionally led by one space) and repeatedly merges the most frequent adjacent
 *       pair inside chunks; ties go to the smallest (left id, right id). Encoding applies
 *       the merges by rank inside the same chunks, so decode(encode(x)) == x for any bytes.
 *
 * tokenizer.json:
 *   {"type":"bpe","version":1,"vocab_size":V,"eos_id":V-1,
 *    "merges":[[a,b],...],               (V-257 pairs, merge k makes id 256+k)
 *    "vocab":["00","01",...,"6865",...]}  (hex of each id's bytes; EOS is "")
 * The byte tokenizer writes type "byte" with no merges. Loading checks that the vocab
 * agrees with the merges. */
#ifndef SNN_TOKENIZER_H
#define SNN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_tokenizer snn_tokenizer;

#define SNN_TOKENIZER_MAX_VOCAB (1 << 20)

snn_status snn_tokenizer_byte(snn_tokenizer **out);
/* Train on len bytes of text to a vocabulary of vocab_size ids (257 <= vocab_size <=
 * SNN_TOKENIZER_MAX_VOCAB). Training stops early (fewer merges, smaller vocabulary) when
 * no pair occurs at least twice. Deterministic. */
snn_status snn_tokenizer_bpe_train(const uint8_t *text, size_t len, int vocab_size,
                                   snn_tokenizer **out);
void snn_tokenizer_free(snn_tokenizer *t);

const char *snn_tokenizer_type(const snn_tokenizer *t); /* "byte" or "bpe" */
int snn_tokenizer_vocab_size(const snn_tokenizer *t);
int snn_tokenizer_eos_id(const snn_tokenizer *t);
int snn_tokenizer_num_merges(const snn_tokenizer *t);
/* Merge k: the pair (left, right) that forms id 256 + k. */
snn_status snn_tokenizer_merge(const snn_tokenizer *t, int k, int *left, int *right);
/* The bytes of id (NULL for EOS or out of range); *len gets their count. */
const uint8_t *snn_tokenizer_token_bytes(const snn_tokenizer *t, int id, size_t *len);

/* Encode len bytes; *ids (malloc'd, free()) gets *n ids (no EOS added). */
snn_status snn_tokenizer_encode(const snn_tokenizer *t, const uint8_t *text, size_t len,
                                int32_t **ids, size_t *n);
/* Decode ids to bytes (malloc'd, NUL-terminated for convenience; *len excludes the NUL).
 * EOS ids produce no bytes; an id outside the vocabulary is an error. */
snn_status snn_tokenizer_decode(const snn_tokenizer *t, const int32_t *ids, size_t n,
                                uint8_t **text, size_t *len);

snn_status snn_tokenizer_to_json(const snn_tokenizer *t, char **out); /* malloc'd */
snn_status snn_tokenizer_from_json(const char *json, snn_tokenizer **out);
snn_status snn_tokenizer_save(const snn_tokenizer *t, const char *path);
snn_status snn_tokenizer_load(const char *path, snn_tokenizer **out);

#ifdef __cplusplus
}
#endif
#endif
