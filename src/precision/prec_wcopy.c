/* The 16-bit weight copies written by the optimizer's update (backend.h's snn_optim_copy).
 *
 * A direct 16-bit GEMM wrapper keeps its weight (and bias) converted to the mode's type
 * (pm->w16, b16, b32), cast again by the first forward after the parameters move. After a
 * training step that forward is the next one, so the cast is a pass over every weight per
 * step: read 4 bytes, write 2 (or 4 + 4 for the bias's FP32 copy). The update reads and writes
 * those weights anyway; handed the copies, it writes them from the values it has just
 * computed, with the rounding the cast uses, and the pass goes. The wrapper then finds its
 * copy current (w16_version), and when every copy of the model was written this way the
 * model's weight copies follow the new version (snn_model.fwd_version: the next forward is
 * not "fresh", so its graph, recorded without casts, stays the one that runs). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "optim/optim_internal.h"
#include "precision/runtime.h"
#include "snn/optim.h"

/* *off = where parameter q starts in the optimizer's array [n] at base; 0 when it is not a
 * view of it (a shared weight, another array) */
static int offset_in(const float *base, size_t n, const snn_param *q, size_t *off) {
    const float *d = q->data;
    if (d < base || (size_t)(d - base) > n || q->numel > n - (size_t)(d - base)) return 0;
    *off = (size_t)(d - base);
    return 1;
}

/* The copies of p's direct 16-bit wrappers over opt's parameters (the model's own
 * optimizer), sorted by offset; the array is p->wcopy (sized by snn_precision_plan). *all:
 * every wrapper's copy is among them. Returns their count (0: none, the plain update). */
int snn_prec_weight_copies(snn_precision *p, const snn_optimizer *opt, int *all) {
    *all = 1;
    /* only with SNN_WEIGHT_COPY_UPDATE=1 until the fused copies have run on a GPU (the only
     * tables with 16-bit copies; written 2026-12-08 without one): the forward casts as before */
    const char *env = getenv("SNN_WEIGHT_COPY_UPDATE");
    if (!p->wcopy || !snn_optimizer_for_model(opt, p->model) || !(env && !strcmp(env, "1"))) {
        *all = 0;
        return 0;
    }
    const float *base = snn_optimizer_params(opt);
    const size_t n = snn_optimizer_numel(opt);
    int k = 0;
    for (int i = 0; i < p->n_mods; i++) {
        snn_prec_module *pm = &p->mods[i];
        if (!pm->w16) continue;
        const snn_param *w = &pm->m->params[0];
        const snn_param *b = pm->b16 ? &pm->m->params[1] : NULL;
        size_t wo = 0, bo = 0;
        /* a weight outside the optimizer's array (shared, or not a view of it): cast as before */
        if (!offset_in(base, n, w, &wo) || (b && !offset_in(base, n, b, &bo))) {
            *all = 0;
            continue;
        }
        const snn_optim_copy c = {.off = wo, .n = w->numel, .t = p->half, .dst16 = pm->w16};
        const snn_optim_copy cb = {.off = bo, .n = b ? b->numel : 0, .t = p->half, .dst16 = pm->b16,
                                   .dst32 = pm->b32};
        /* insert in offset order; a range that overlaps one already taken keeps its cast */
        int ok = 1;
        for (int j = 0; j < k && ok; j++) {
            const snn_optim_copy *o = &p->wcopy[j];
            ok = (c.off + c.n <= o->off || o->off + o->n <= c.off) &&
                 (!b || cb.off + cb.n <= o->off || o->off + o->n <= cb.off);
        }
        if (!ok || (b && !(c.off + c.n <= cb.off || cb.off + cb.n <= c.off))) {
            *all = 0;
            continue;
        }
        for (int h = 0; h < (b ? 2 : 1); h++) {
            const snn_optim_copy x = h ? cb : c;
            int at = k++;
            while (at > 0 && p->wcopy[at - 1].off > x.off) {
                p->wcopy[at] = p->wcopy[at - 1];
                p->wcopy_pm[at] = p->wcopy_pm[at - 1];
                at--;
            }
            p->wcopy[at] = x;
            p->wcopy_pm[at] = i;
        }
    }
    return k;
}

/* After an update that wrote the k copies of snn_prec_weight_copies (not a skipped step):
 * their wrappers' copies follow the new parameter version. */
void snn_prec_weight_copies_written(snn_precision *p, int k, int all) {
    snn_model *m = p->model;
    for (int j = 0; j < k; j++) {
        snn_prec_module *pm = &p->mods[p->wcopy_pm[j]];
        pm->w16_version = m->param_version;
        pm->w16_valid = 1;
    }
    /* no weight copy of the model is stale: the next forward makes none */
    if (all && k > 0 && p->cfg.mode != SNN_PRECISION_FP8) m->fwd_version = m->param_version;
}
