/* The CPU table's entries for the training step with device values (backend.h's class_loss,
 * optim_step and their neighbours): the CPU's "device" memory is host memory, so each is the
 * host computation writing its result where the device's would be. The loss and the clip rule
 * are the bodies the CUDA table runs (class_loss_body.h, optim_step_body.h): the same bits. */
#include <string.h>

#include "backend/class_loss_body.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/optim_step_body.h"
#include "core/error_internal.h"

snn_status snn_cpu_upload_async(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && (!dst || !src)) return snn_error(SNN_E_INVALID, "upload_async: NULL pointer with %zu bytes", bytes);
    if (bytes && dst != src) memmove(dst, src, bytes);
    return SNN_OK;
}

snn_status snn_cpu_class_loss(const snn_backend *be, const snn_class_loss *q) {
    (void)be;
    if (!q || !q->x || !q->labels || !q->work || !q->res)
        return snn_error(SNN_E_INVALID, "class_loss: NULL argument");
    if ((q->kind != 0 && q->kind != 1) || q->T <= 0 || q->N <= 0 || q->C <= 0)
        return snn_error(SNN_E_INVALID, "class_loss: kind %d, T %d, N %d, C %d (kind 0 or 1, sizes positive)",
                         q->kind, q->T, q->N, q->C);
    const int mse = q->kind == 1;
    const size_t NC = (size_t)q->N * (size_t)q->C;
    const double gscale = snn_cl_gscale(mse, q->T, q->N, q->C);
    double total = 0.0, hits = 0.0;
    for (int n = 0; n < q->N; n++) {
        const int label = q->labels[n];
        if (label < 0 || label >= q->C)
            return snn_error(SNN_E_INVALID, "class_loss: label %d of sample %d is outside [0, %d)", label, n, q->C);
        int hit = 0;
        const size_t row = (size_t)n * (size_t)q->C;
        total += mse ? snn_cl_mse_rate(q->x, label, q->T, NC, row, q->C, gscale, q->dx, &hit)
                     : snn_cl_cross_entropy(q->x, label, q->T, NC, row, q->C, gscale, q->dx, &hit);
        hits += hit;
    }
    q->res[0] = total / snn_cl_divisor(mse, q->N, q->C);
    q->res[1] = hits;
    return SNN_OK;
}

snn_status snn_cpu_sumsq_to(const snn_backend *be, const float *x, size_t n, double *out) {
    return snn_cpu_sumsq(be, x, n, out);
}

snn_status snn_cpu_nonfinite_to(const snn_backend *be, const float *x, size_t n, int *flag) {
    if (!flag) return snn_error(SNN_E_INVALID, "nonfinite_to: NULL flag");
    return snn_cpu_nonfinite(be, x, n, flag);
}

snn_status snn_cpu_optim_step(const snn_backend *be, const snn_optim_step *s) {
    if (!s || !s->u || !s->nonfinite) return snn_error(SNN_E_INVALID, "optim_step: NULL argument");
    if (s->adam != (s->u->adam != 0))
        return snn_error(SNN_E_INVALID, "optim_step: adam %d, the update's %d", s->adam, s->u->adam);
    SNN_TRY(snn_optim_copies_check("optim_step", s->copies, s->n_copies, s->n));
    float norm = 0.0f, gscale = 1.0f;
    if (s->sumsq) gscale = snn_clip_factor(*s->sumsq, s->max_norm, &norm);
    if (s->norm) *s->norm = s->sumsq ? norm : 0.0f;
    *s->nonfinite = 0;
    if (s->skip && *s->skip) return SNN_OK;
    snn_optim_update u = *s->u;
    u.gscale = gscale;
    u.copies = s->copies;
    u.n_copies = s->n_copies;
    return snn_cpu_optim_update(be, &u, s->n, s->w, s->g, s->s0, s->s1, s->decay_mask, s->nonfinite);
}
