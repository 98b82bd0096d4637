/* The CUDA table's entries for the training step with device values (backend.h's class_loss
 * and optim_step; sumsq_to, nonfinite_to and upload_async are in cuda_backend.cu beside their
 * host-valued forms). Nothing here waits for the device, so a graph can hold a whole step.
 *
 * class_loss computes what class_loss_body.h, the CPU table's body, computes: the same double
 * operations on the same operands, the same exp and log, the sums in the body's order. Rows of
 * up to CL_MAX_C classes get a block per sample (the classes in parallel, the two sums by one
 * thread); wider rows a thread per sample running the body itself. Then one thread adds the
 * samples' losses in increasing n. The bits are the CPU's. */
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

/* A block per sample, for rows that fit in shared memory: the class means, the exps and the
 * gradient in parallel over the classes, the two sums by one thread in increasing class (the
 * body's order), the first argmax by a reduction that keeps the sequential scan's answer (the
 * largest value, the smallest index among equals, NaNs never chosen unless class 0 is one).
 * Every value is the per-sample body's: the same functions of the same operands. */
#define CL_BLOCK 256
#define CL_MAX_C 2816 /* 2 · C doubles of dynamic shared memory, plus the kernel's 3 KB of static, within 48 KB */

__global__ void __launch_bounds__(CL_BLOCK) class_loss_block_kernel(snn_class_loss q, double gscale) {
    extern __shared__ double sm[];
    double *mean = sm, *term = sm + q.C;
    __shared__ double red_v[CL_BLOCK];
    __shared__ int red_i[CL_BLOCK];
    __shared__ double lse_s;
    const int n = blockIdx.x, tid = threadIdx.x, C = q.C, mse = q.kind == 1;
    const int label = q.labels[n];
    const size_t NC = (size_t)q.N * (size_t)C, row = (size_t)n * (size_t)C;
    if (label < 0 || label >= C) { /* the caller checked the labels: a NaN loss, no gradient row */
        if (tid == 0) q.work[n] = __longlong_as_double(0x7ff8000000000000ll), q.work[q.N + n] = 0.0;
        return;
    }
    double bv = 0.0;
    int bi = -1;
    for (int c = tid; c < C; c += CL_BLOCK) {
        const double v = snn_cl_mean_t(q.x, q.T, NC, row + (size_t)c);
        mean[c] = v;
        if (v == v && (bi < 0 || v > bv)) bv = v, bi = c; /* increasing c: equals keep the first */
    }
    red_v[tid] = bv;
    red_i[tid] = bi;
    __syncthreads();
    for (int h = CL_BLOCK / 2; h > 0; h >>= 1) {
        if (tid < h) {
            const double v2 = red_v[tid + h];
            const int i2 = red_i[tid + h];
            if (i2 >= 0 && (red_i[tid] < 0 || v2 > red_v[tid] || (v2 == red_v[tid] && i2 < red_i[tid])))
                red_v[tid] = v2, red_i[tid] = i2;
        }
        __syncthreads();
    }
    /* the scan starts from class 0: a NaN there stays the maximum */
    const double m0 = mean[0];
    const double mx = m0 != m0 ? m0 : red_v[0];
    const int arg = m0 != m0 ? 0 : red_i[0];
    for (int c = tid; c < C; c += CL_BLOCK) {
        if (mse) {
            const double d = SNN_MATHD_SUB(mean[c], c == label ? 1.0 : 0.0);
            term[c] = SNN_MATHD_MUL(d, d);
        } else {
            term[c] = snn_exp_det(SNN_MATHD_SUB(mean[c], mx));
        }
    }
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum = SNN_MATHD_ADD(sum, term[c]);
        double loss;
        if (mse) {
            loss = sum;
            lse_s = 0.0; /* unused by the MSE's gradient */
        } else {
            const double lse = SNN_MATHD_ADD(mx, snn_log_det(sum));
            lse_s = lse;
            loss = SNN_MATHD_SUB(lse, mean[label]);
        }
        q.work[n] = loss;
        q.work[q.N + n] = arg == label ? 1.0 : 0.0;
    }
    if (!q.dx) return;
    __syncthreads();
    const double lse = lse_s;
    for (int c = tid; c < C; c += CL_BLOCK) {
        const double y = c == label ? 1.0 : 0.0;
        const double d = mse ? SNN_MATHD_SUB(mean[c], y) : SNN_MATHD_SUB(snn_exp_det(SNN_MATHD_SUB(mean[c], lse)), y);
        const float g = (float)SNN_MATHD_MUL(d, gscale);
        for (int t = 0; t < q.T; t++) q.dx[(size_t)t * NC + row + (size_t)c] = g;
    }
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
    if (q->C <= CL_MAX_C && q->N <= 0x7fffffff) {
        class_loss_block_kernel<<<(unsigned)q->N, CL_BLOCK, 2 * (size_t)q->C * sizeof(double), st>>>(*q, gscale);
    } else { /* wider rows: a thread per sample walks its row */
        class_loss_rows_kernel<<<(unsigned)((q->N + 63) / 64), 64, 0, st>>>(*q, gscale);
    }
    SNN_CU_LAUNCHED("class_loss rows");
    class_loss_total_kernel<<<1, 32, 0, st>>>(*q);
    SNN_CU_LAUNCHED("class_loss total");
    return SNN_OK;
}

snn_status t_optim_step(const snn_backend *be, const snn_optim_step *s) {
    SNN_TRY(snn_cuda_table_check(be, "optim_step"));
    if (!s || !s->u || !s->nonfinite) return snn_error(SNN_E_INVALID, "optim_step: NULL argument");
    if (s->n && (!s->w || !s->g)) return snn_error(SNN_E_INVALID, "optim_step: NULL weights or gradient");
    SNN_TRY(snn_optim_copies_check("optim_step", s->copies, s->n_copies, s->n));
    /* the kernel reads the kind from the device: the host's copy says which state it needs */
    if (s->adam && (!s->s0 || !s->s1)) return snn_error(SNN_E_INVALID, "optim_step: Adam needs m (s0) and v (s1)");
    SNN_CU_TRY(cudaMemsetAsync(s->nonfinite, 0, sizeof(int), snn_cuda_stream_of(snn_cuda_table_ctx(be))));
    return snn_cuda_table_optim_step(snn_cuda_table_ctx(be), s);
}

} // namespace

void snn_cuda_install_step(snn_backend *be) {
    be->class_loss = t_class_loss;
    be->optim_step = t_optim_step;
}
