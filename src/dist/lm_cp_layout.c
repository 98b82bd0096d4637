/* The load-balanced causal layout of context parallel: chunks i and 2*CP-1-i on rank i. */
#include <string.h>

#include "core/error_internal.h"
#include "dist/lm_cp.h"

snn_status snn_lm_cp_check(int seq, int cp) {
    if (cp < 1) return snn_error(SNN_E_INVALID, "context_parallel_size must be >= 1 (got %d)", cp);
    if (seq < 1) return snn_error(SNN_E_INVALID, "sequence_length must be >= 1 (got %d)", seq);
    if (cp > 1 && seq % (2 * cp) != 0)
        return snn_error(SNN_E_INVALID,
                         "sequence_length %d is not divisible by 2 * context_parallel_size = 2 * %d "
                         "(the load-balanced layout cuts the sequence into 2 * CP chunks)",
                         seq, cp);
    return SNN_OK;
}

int snn_lm_cp_position(int seq, int cp, int rank, int l) {
    if (cp == 1) return l;
    const int c = seq / (2 * cp);
    return l < c ? rank * c + l : (2 * cp - 1 - rank) * c + (l - c);
}

void snn_lm_cp_shard(const void *full, void *local, size_t rows, int seq, int cp, int rank, size_t elem) {
    const int sl = seq / cp;
    const char *src = full;
    char *dst = local;
    for (size_t b = 0; b < rows; b++)
        for (int l = 0; l < sl; l++)
            memcpy(dst + (b * (size_t)sl + (size_t)l) * elem,
                   src + (b * (size_t)seq + (size_t)snn_lm_cp_position(seq, cp, rank, l)) * elem, elem);
}

void snn_lm_cp_unshard(const void *parts, void *full, size_t rows, int seq, int cp, size_t elem) {
    const int sl = seq / cp;
    const char *src = parts;
    char *dst = full;
    for (int r = 0; r < cp; r++)
        for (size_t b = 0; b < rows; b++)
            for (int l = 0; l < sl; l++)
                memcpy(dst + (b * (size_t)seq + (size_t)snn_lm_cp_position(seq, cp, r, l)) * elem,
                       src + (((size_t)r * rows + b) * (size_t)sl + (size_t)l) * elem, elem);
}
