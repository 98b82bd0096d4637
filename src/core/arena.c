#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/error_internal.h"

void snn_arena_begin_measure(snn_arena *a) {
    memset(a, 0, sizeof *a);
    a->measuring = 1;
}

snn_status snn_arena_allocate(snn_arena *a, size_t bytes) {
    if (bytes == 0) bytes = SNN_ARENA_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, SNN_ARENA_ALIGN, bytes) != 0 || !p)
        return snn_error(SNN_E_NOMEM, "cannot allocate %.1f MiB of activation memory",
                         (double)bytes / 1048576.0);
    a->base = p;
    a->size = bytes;
    a->used = 0;
    a->measuring = 0;
    return SNN_OK;
}

void snn_arena_reset(snn_arena *a) { a->used = 0; }

void snn_arena_free(snn_arena *a) {
    if (!a->measuring) free(a->base);
    memset(a, 0, sizeof *a);
}

void *snn_arena_take(snn_arena *a, size_t bytes) {
    size_t start = (a->used + SNN_ARENA_ALIGN - 1) & ~(size_t)(SNN_ARENA_ALIGN - 1);
    size_t end = start + ((bytes + SNN_ARENA_ALIGN - 1) & ~(size_t)(SNN_ARENA_ALIGN - 1));
    a->used = end;
    if (a->measuring) return (void *)(uintptr_t)(SNN_ARENA_ALIGN + start); /* placeholder */
    if (end > a->size) return NULL;
    return a->base + start;
}
