/* The CUDA table's entries for the training step with device values (backend.h's class_loss
 * and optim_step; sumsq_to, nonfinite_to and upload_async are in cuda_backend.cu beside their
 * host-valued forms). Nothing here waits for the device, so a graph can hold a whole step.
 *
 * class_loss runs class_loss_body.h, the CPU table's body: one thread per sample walks its
 * row as the host does (the same double operations, the same exp and log), then one thread
 * adds the samples' losses in increasing n. The bits are the CPU's. One thread per sample is
 * slow for wide rows (Spikformer's 1024 classes: about 0.1-0.2 ms a step) but the loss is a
 * small part of a step; a warp per sample would need the CPU to follow its order. */
#include "backend/class_loss_body.h"
#include "backend/cuda/cuda_table.h"

snn_status snn_cuda_table_optim_step(snn_cuda *c, const snn_optim_step *s);

namespace {

__global__ void class_loss_rows_kernel(snn_class_loss q, double gscale) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= q.N) return;
    const int label = q.labels[n];
    const size_t NC = (size_t)q.N * (size_t)q.C, row = (size_t)n * (size_t)q.C;
    int hit = 0;
    double l;
    if (label < 0 || label >= q.C) { /* the caller checked the labels: a NaN loss, no gradient row */
        l = __longlong_as_double(0x7ff8000000000000ll);
    } else {
        l = q.kind == 1 ? snn_cl_mse_rate(q.x, label, q.T, NC, row, q.C, gscale, q.dx, &hit)
                        : snn_cl_cross_entropy(q.x, label, q.T, NC, row, q.C, gscale, q.dx, &hit);
    }
    q.work[n] = l;
    q.work[q.N + n] = hit;
}

/* the host's order: Σ over n in increasing n, then the divisor */
__global__ void class_loss_total_kernel(snn_class_loss q) {
    if (threadIdx.x != 0) return;
    double total = 0.0, hits = 0.0;
    for (int n = 0; n < q.N; n++) {
        total = __dadd_rn(total, q.work[n]);
        hits = __dadd_rn(hits, q.work[q.N + n]);
    }
    q.res[0] = __ddiv_rn(total, snn_cl_divisor(q.kind == 1, q.N, q.C));
    q.res[1] = hits;
}

snn_status t_class_loss(const snn_backend *be, const snn_class_loss *q) {
    SNN_TRY(snn_cuda_table_check(be, "class_loss"));
    if (!q || !q->x || !q->labels || !q->work || !q->res) return snn_error(SNN_E_INVALID, "class_loss: NULL argument");
    if ((q->kind != 0 && q->kind != 1) || q->T <= 0 || q->N <= 0 || q->C <= 0)
        return snn_error(SNN_E_INVALID, "class_loss: kind %d, T %d, N %d, C %d (kind 0 or 1, sizes positive)",
                         q->kind, q->T, q->N, q->C);
    cudaStream_t st = snn_cuda_stream_of(snn_cuda_table_ctx(be));
    const double gscale = snn_cl_gscale(q->kind == 1, q->T, q->N, q->C);
    class_loss_rows_kernel<<<(unsigned)((q->N + 63) / 64), 64, 0, st>>>(*q, gscale);
    SNN_CU_LAUNCHED("class_loss rows");
    class_loss_total_kernel<<<1, 32, 0, st>>>(*q);
    SNN_CU_LAUNCHED("class_loss total");
    return SNN_OK;
}

snn_status t_optim_step(const snn_backend *be, const snn_optim_step *s) {
    SNN_TRY(snn_cuda_table_check(be, "optim_step"));
    if (!s || !s->u || !s->nonfinite) return snn_error(SNN_E_INVALID, "optim_step: NULL argument");
    if (s->n && (!s->w || !s->g)) return snn_error(SNN_E_INVALID, "optim_step: NULL weights or gradient");
    const int n_copies = s->copies ? s->n_copies : 0;
    for (int i = 0; i < n_copies; i++) {
        const snn_optim_copy *c = &s->copies[i];
        if (c->off > s->n || c->n > s->n - c->off || (c->t != SNN_F16 && c->t != SNN_BF16) ||
            (i && c->off < c[-1].off + c[-1].n))
            return snn_error(SNN_E_INVALID, "optim_step: weight copy %d is outside the %zu weights, overlaps the "
                             "one before, or has a type other than f16 / bf16", i, s->n);
    }
    /* Adam's m and v and SGD's buffer are the caller's: the kernel reads the kind from the
     * device, so both state pointers must be valid for an Adam update */
    SNN_CU_TRY(cudaMemsetAsync(s->nonfinite, 0, sizeof(int), snn_cuda_stream_of(snn_cuda_table_ctx(be))));
    return snn_cuda_table_optim_step(snn_cuda_table_ctx(be), s);
}

} // namespace

void snn_cuda_install_step(snn_backend *be) {
    be->class_loss = t_class_loss;
    be->optim_step = t_optim_step;
}
