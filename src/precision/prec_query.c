/* Public queries of a prepared precision (include/snn/prepare.h): its scratch size, its FP8
 * delayed-scaling state as flat arrays, and a preparation that only carries checkpoint state.
 * They read the internal state (precision/runtime.h) so that callers need not. */
#include <stdlib.h>
#include <string.h>

#include "core/error_internal.h"
#include "nn/model_internal.h"
#include "precision/runtime.h"
#include "snn/prepare.h"

size_t snn_precision_scratch_bytes(const snn_precision *p) {
    return p ? (p->scratch_cap + p->dy_cap) * sizeof(float) : 0;
}

/* The states come in snn_precision_fp8_state order (module order; input, weight, gradient),
 * three per module that keeps FP8 state: the runner's [n_modules][3] layout. */
snn_status snn_precision_fp8_export_state(const snn_precision *p, int *n_modules, int *history_len,
                                          float *scales, float *histories) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_fp8_export_state: precision is NULL");
    /* the internal accessor takes a mutable precision; nothing is written through it here */
    snn_precision *q = (snn_precision *)p;
    SNN_TRY(snn_precision_fp8_flush(q)); /* amaxes still on the device (FP8 codes) */
    size_t ns = snn_precision_fp8_state_count(q);
    if (ns / 3 > (size_t)0x7fffffff) return snn_error(SNN_E_INVALID, "too many FP8 modules (%zu)", ns / 3);
    int n = (int)(ns / 3);
    /* the history length of the last module's input state: every state of one recipe has the
     * same (checked below before anything is copied) */
    int hl = n ? snn_precision_fp8_state(q, ns - 3)->history_len : 0;
    for (size_t i = 0; hl && i < ns; i++)
        if (snn_precision_fp8_state(q, i)->history_len != hl)
            return snn_error(SNN_E_STATE, "FP8 state %zu has a history of %d values, the others %d", i,
                             snn_precision_fp8_state(q, i)->history_len, hl);
    if (n_modules) *n_modules = n;
    if (history_len) *history_len = hl;
    for (size_t i = 0; i < ns; i++) {
        const snn_fp8_tensor_state *t = snn_precision_fp8_state(q, i);
        if (scales) scales[i] = t->scale;
        if (histories && hl) memcpy(histories + i * (size_t)hl, t->amax_history, sizeof(float) * (size_t)hl);
    }
    return SNN_OK;
}

snn_status snn_precision_fp8_load_state(snn_precision *p, int n_modules, int history_len, const float *scales,
                                        const float *histories) {
    if (!p) return snn_error(SNN_E_INVALID, "snn_precision_fp8_load_state: precision is NULL");
    /* the stateless recipes keep nothing across steps: the initial state is what they save */
    if (history_len == 0) return SNN_OK;
    if (history_len < 0 || n_modules < 0 || !scales || !histories)
        return snn_error(SNN_E_INVALID, "snn_precision_fp8_load_state: needs scales, histories and non-negative "
                         "sizes (got %d modules, history %d)", n_modules, history_len);
    SNN_TRY(snn_precision_fp8_flush(p)); /* nothing of the old state left on the device */
    size_t ns = snn_precision_fp8_state_count(p), hl = (size_t)history_len;
    for (size_t i = 0; i < ns; i++) {
        snn_fp8_tensor_state *t = snn_precision_fp8_state(p, i);
        if (i / 3 >= (size_t)n_modules || t->history_len != history_len)
            return snn_error(SNN_E_STATE, "FP8 state of %d modules with history %d does not match the "
                             "precision's conversion of the model (%zu modules, history %d)", n_modules,
                             history_len, ns / 3, t->history_len);
        SNN_TRY(snn_fp8_state_load(t, scales[i], histories + i * hl, history_len));
    }
    return SNN_OK;
}

snn_status snn_prepare_model_for_state(snn_model *m, const snn_precision_config *cfg, snn_precision **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_prepare_model_for_state: out is NULL");
    *out = NULL;
    if (!m) return snn_error(SNN_E_INVALID, "snn_prepare_model_for_state: model is NULL");
    /* preparation refuses a model with an optimizer (the order rule of training set-up); a
     * precision that only carries state trains nothing, so the flag is lifted for the call */
    int bound = m->optimizer_bound;
    m->optimizer_bound = 0;
    snn_status st = snn_prepare_model_for_precision(m, "cpu", cfg, out);
    m->optimizer_bound = bound;
    return st;
}
