/* Data parallelism in the GPU step: the gradient average in buckets that start while the
 * backward is still running.
 *
 * The gradient buffer follows the module tree in order (one slice per tensor), and the
 * backward visits the leaves in the reverse order, so when a leaf with parameters finishes,
 * every gradient from its slice to the end of the buffer is final. Once that tail holds a
 * bucket's worth (SNN_CUDA_DDP_BUCKET_BYTES, torch's 25 MiB default) it is summed on a
 * second stream, forked from the step's stream by an event and joined back before anything
 * reads a gradient (overflow check, norm, optimizer); the last bucket covers what remains.
 * Forks and joins are events, so the whole pattern is captured into the step's graph with
 * the collectives inside. A leaf whose gradients lie below an already reduced bucket would
 * break the rule; it is reported as an error rather than reduced twice. */
#include "backend/cuda/cuda_model_internal.h"

#define SNN_CUDA_DDP_BUCKET_BYTES ((size_t)25 << 20)

snn_status snn_gm_ddp_init(snn_cuda_model *g) {
    if (!g->o.dp) return SNN_OK;
    g->ddp_bucket = SNN_CUDA_DDP_BUCKET_BYTES / sizeof(float);
    cudaError_t e = cudaStreamCreateWithFlags(&g->ddp_stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->ddp_fork, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->ddp_join, cudaEventDisableTiming);
    return e == cudaSuccess ? SNN_OK : snn_cuda_fail(e, "data-parallel stream");
}

void snn_gm_ddp_free(snn_cuda_model *g) {
    if (g->ddp_stream) cudaStreamSynchronize(g->ddp_stream);
    if (g->ddp_fork) cudaEventDestroy(g->ddp_fork);
    if (g->ddp_join) cudaEventDestroy(g->ddp_join);
    if (g->ddp_stream) cudaStreamDestroy(g->ddp_stream);
}

/* sum grads[lo, hi) over the replicas on the side stream, after everything enqueued so far
 * (the loss gradient carried 1/size, so the sum is the average) */
static snn_status bucket(snn_cuda_model *g, size_t lo, size_t hi) {
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    SNN_CU_TRY(cudaEventRecord(g->ddp_fork, sm));
    SNN_CU_TRY(cudaStreamWaitEvent(g->ddp_stream, g->ddp_fork, 0));
    g->ddp_buckets++;
    return g->o.dp->allreduce(g->o.dp->ctx, g->grads + lo, hi - lo, SNN_CUDA_COLL_SUM, g->ddp_stream);
}

snn_status snn_gm_ddp_begin(snn_cuda_model *g) {
    g->ddp_end = g->n_dev;
    g->ddp_buckets = 0;
    return SNN_OK;
}

snn_status snn_gm_ddp_leaf_done(snn_cuda_model *g, gnode *n) {
    if (!g->o.dp) return SNN_OK;
    size_t lo = g->ddp_end;
    const float *ps[2] = {n->gw, n->gb};
    int any = 0;
    for (int i = 0; i < 2; i++)
        if (ps[i] && ps[i] >= g->grads && ps[i] < g->grads + g->n_dev) {
            size_t off = (size_t)(ps[i] - g->grads);
            if (off < lo) lo = off;
            any = 1;
        }
    if (!any) return SNN_OK;
    if (lo >= g->ddp_end)
        return snn_error(SNN_E_STATE, "GPU data parallelism: the gradients of %s come after their bucket was "
                         "reduced (the module tree's order is not the backward's)", n->m ? n->m->name : "a module");
    if (g->ddp_end - lo >= g->ddp_bucket) {
        SNN_TRY(bucket(g, lo, g->ddp_end));
        g->ddp_end = lo;
    }
    return SNN_OK;
}

snn_status snn_gm_ddp_finish(snn_cuda_model *g) {
    if (!g->o.dp) return SNN_OK;
    if (g->ddp_end > 0) SNN_TRY(bucket(g, 0, g->ddp_end));
    g->ddp_end = 0;
    SNN_CU_TRY(cudaEventRecord(g->ddp_join, g->ddp_stream));
    SNN_CU_TRY(cudaStreamWaitEvent(snn_cuda_stream_of(g->c), g->ddp_join, 0));
    return SNN_OK;
}

extern "C" int snn_cuda_model_ddp_buckets(const snn_cuda_model *g) { return g ? g->ddp_buckets : 0; }
