/* Shared by the tokenizer files: the tokenizer record, the chunking rule and the pair
 * table (pair of ids -> merge rank). */
#ifndef SNN_LM_TOKENIZER_INTERNAL_H
#define SNN_LM_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "snn/tokenizer.h"

/* Chunks longer than this are cut (merges never cross a cut, in training or encoding), so
 * encoding stays linear in the text length for any input. */
#define SNN_TOK_MAX_CHUNK 64

struct snn_tokenizer {
    int bpe;           /* 0: byte, 1: bpe */
    int vocab, eos, nmerges;
    int32_t *left, *right;     /* merge k makes id 256 + k from (left[k], right[k]) */
    uint32_t *off, *len;       /* bytes of id i: bytes[off[i] .. off[i] + len[i]) */
    uint8_t *bytes;
    uint64_t *hkey;            /* open addressing: key (a << 32 | b) + 1, 0 = empty */
    int32_t *hval;             /* merge rank */
    size_t hcap;
};

/* The end of the chunk that starts at i (i < n). */
size_t snn_tok_chunk_end(const uint8_t *t, size_t n, size_t i);
/* A tokenizer with the given merges (copied): builds the byte table and the pair table and
 * checks that every merge uses ids defined before it and no pair repeats. */
snn_status snn_tok_build(int bpe, int nmerges, const int32_t *left, const int32_t *right, snn_tokenizer **out);
/* Merge rank of (a, b), or -1. */
int snn_tok_rank(const snn_tokenizer *t, int32_t a, int32_t b);

#endif
