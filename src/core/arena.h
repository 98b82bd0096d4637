/* Arenas: all activation memory of a (T, N) step is taken from one block that is
 * sized before the first step. Modules reserve from the arena twice: once in measuring
 * mode (no memory, pointers are placeholders that must not be touched) and once for
 * real. No allocation happens inside a training step. */
#ifndef SNN_ARENA_H
#define SNN_ARENA_H

#include <stddef.h>
#include "snn/error.h"

typedef struct snn_arena {
    char *base;      /* NULL while measuring */
    size_t size;     /* bytes available (0 while measuring) */
    size_t used;     /* bytes handed out so far */
    int measuring;
} snn_arena;

#define SNN_ARENA_ALIGN 64

void snn_arena_begin_measure(snn_arena *a);
/* Allocate `bytes` for real (after a measuring pass told how much). */
snn_status snn_arena_allocate(snn_arena *a, size_t bytes);
void snn_arena_reset(snn_arena *a);   /* hand everything out again from the start */
void snn_arena_free(snn_arena *a);
/* Take `bytes` (64-byte aligned). Never fails while measuring; for real, running past the
 * measured size is a programming error and returns NULL. */
void *snn_arena_take(snn_arena *a, size_t bytes);
static inline float *snn_arena_floats(snn_arena *a, size_t n) {
    return (float *)snn_arena_take(a, n * sizeof(float));
}

#endif
