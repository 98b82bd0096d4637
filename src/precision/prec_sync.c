/* The data-parallel hook of a prepared precision (runtime.h): the FP8 tensor states in a
 * fixed order, and the MAX-reduction of this step's amax (amax_history[0]) of every state
 * before the delayed-scaling update, so that every rank computes the same scales. */
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "precision/runtime.h"

size_t snn_precision_fp8_state_count(const snn_precision *p) {
    size_t n = 0;
    for (int i = 0; p && i < p->n_mods; i++) n += p->mods[i].has_fp8_state ? 3 : 0;
    return n;
}

snn_fp8_tensor_state *snn_precision_fp8_state(snn_precision *p, size_t i) {
    for (int k = 0; p && k < p->n_mods; k++) {
        snn_prec_module *pm = &p->mods[k];
        if (!pm->has_fp8_state) continue;
        if (i < 3) return i == 0 ? &pm->sx : i == 1 ? &pm->sw : &pm->sdy;
        i -= 3;
    }
    return NULL;
}

snn_status snn_precision_set_sync(snn_precision *p, const snn_precision_sync *s) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_set_sync needs a precision");
    free(p->amax_pack);
    p->amax_pack = NULL;
    memset(&p->sync, 0, sizeof p->sync);
    if (!s) return SNN_OK;
    size_t n = snn_precision_fp8_state_count(p);
    if (s->amax && n) {
        p->amax_pack = malloc(sizeof(float) * n);
        if (!p->amax_pack) return snn_error(SNN_E_NOMEM, "no memory for %zu FP8 amax values", n);
    }
    p->sync = *s;
    return SNN_OK;
}

snn_status snn_precision_sync_amax(snn_precision *p) {
    size_t n = snn_precision_fp8_state_count(p);
    /* only delayed scaling carries amax from one step into the next one's scale */
    if (!n || !p->sync.amax || p->fp8.recipe != SNN_FP8_RECIPE_DELAYED) return SNN_OK;
    if (!p->amax_pack) return snn_error(SNN_E_STATE, "FP8 amax sync was installed without its buffer");
    for (size_t i = 0; i < n; i++) {
        snn_fp8_tensor_state *st = snn_precision_fp8_state(p, i);
        p->amax_pack[i] = st->history_len ? st->amax_history[0] : 0.0f;
    }
    SNN_TRY(p->sync.amax(p->sync.ctx, p->amax_pack, n));
    for (size_t i = 0; i < n; i++) {
        snn_fp8_tensor_state *st = snn_precision_fp8_state(p, i);
        if (st->history_len) st->amax_history[0] = p->amax_pack[i];
    }
    return SNN_OK;
}
