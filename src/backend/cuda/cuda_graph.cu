/* Graphs of the CUDA table (backend.h's graph_* entries and dry mode).
 *
 * Recording is stream capture of the table's one stream in thread-local mode: a region that
 * waits for the stream, allocates or frees fails to record (CUDA refuses those calls while
 * capturing), and graph_end then reports it; nothing of the region ran.
 *
 * Dry mode is how a replay keeps the host's bookkeeping exact: the region's host code runs
 * as it would eagerly (caches, flags, the FP8 amax bookkeeping), but against a table whose
 * entries enqueue nothing, and the recorded graph does the device work. The table's entries
 * are swapped for stubs of the same types (generated from the entry's type, so a stub cannot
 * disagree with its entry's signature) and swapped back after. Entries that would hand a
 * device value to the host, wait or allocate refuse in dry mode: a region that did so could
 * not have been recorded, so reaching one means the host took another path than when the graph
 * was recorded, and the caller must run the region eagerly instead. As a net for an entry
 * added to the table but not to the lists below, the stream is captured while dry: work that
 * reaches it is recorded into a graph that is thrown away (never run), and dry(be, 0) reports
 * it. */
#include <string.h>

#include "backend/cuda/cuda_table.h"

namespace {

/* A stub of the entry type F that succeeds and does nothing. */
template <typename F> struct dry_ok;
template <typename... A> struct dry_ok<snn_status (*)(A...)> {
    static snn_status fn(A...) { return SNN_OK; }
};
/* A stub of the entry type F that refuses, and marks the dry pass as failed: a caller that
 * swallows the error (PLIF's host parameter reads as NaN) still does not get a replay. */
snn_status dry_refuse(const snn_backend *be) {
    snn_cuda_table_graph(be)->refused++;
    return snn_error(SNN_E_STATE, "CUDA graph replay: the host pass reached an entry that waits for the device, "
                                  "returns a device value or allocates (the region differs from the recorded one)");
}
template <typename F> struct dry_no;
template <typename... A> struct dry_no<snn_status (*)(const snn_backend *, A...)> {
    static snn_status fn(const snn_backend *be, A...) { return dry_refuse(be); }
};
template <typename... A> struct dry_ok<void (*)(A...)> {
    static void fn(A...) {}
};

/* The neuron backward hands PLIF's dL/dk to the host when gk is given. */
snn_status dry_neuron_backward(const snn_backend *be, const snn_neuron_opts *, float, int, size_t, const float *,
                               const float *, float *, double *gk) {
    return gk ? dry_refuse(be) : SNN_OK;
}
snn_status dry_neuron_backward_mp(const snn_backend *be, const snn_neuron_opts *, float, int, size_t, snn_dtype,
                                  snn_dtype, snn_dtype, const float *, const float *, float *, double *gk) {
    return gk ? dry_refuse(be) : SNN_OK;
}
snn_status dry_neuron_backward_io(const snn_backend *be, const snn_neuron_opts *, float, int, size_t, snn_dtype,
                                  const float *, const void *, void *, double *gk) {
    return gk ? dry_refuse(be) : SNN_OK;
}

#define OK_(f) be->f = dry_ok<decltype(be->f)>::fn
#define NO_(f) be->f = dry_no<decltype(be->f)>::fn

/* Every entry of backend.h that takes device work or hands a device value back, in the
 * header's order; host queries (work sizes, check_ptr, the attention path) stay real. */
void make_dry(snn_backend *be) {
    NO_(alloc);
    OK_(free); /* never reached by a recorded region (freeing waits); a stub leaks, never frees under a graph */
    NO_(upload);
    NO_(download);
    OK_(copy);
    OK_(fill);
    NO_(synchronize);
    NO_(alloc_host);
    OK_(free_host);
    OK_(gemm);
    OK_(round);
    OK_(cast);
    OK_(scale);
    OK_(add);
    OK_(add_rounded);
    OK_(gelu_forward);
    OK_(gelu_backward);
    OK_(gelu_forward_io);
    OK_(gelu_backward_io);
    OK_(colsum_add);
    OK_(colsum16_add);
    NO_(sumsq);
    NO_(nonfinite);
    NO_(fp8_qdq); /* returns the amax to the host */
    OK_(fp8_codes);
    OK_(neuron_forward);
    be->neuron_backward = dry_neuron_backward;
    OK_(neuron_forward_mp);
    be->neuron_backward_mp = dry_neuron_backward_mp;
    OK_(neuron_forward_io);
    be->neuron_backward_io = dry_neuron_backward_io;
    OK_(neuron_forward_io_bias);
    OK_(rmsnorm_forward);
    OK_(rmsnorm_backward);
    OK_(layernorm_forward);
    OK_(layernorm_backward);
    OK_(layernorm_forward_io);
    OK_(layernorm_backward_io);
    NO_(optim_update); /* its non-finite flag comes back to the host */
    OK_(upload_async);
    OK_(class_loss);
    OK_(sumsq_to);
    OK_(nonfinite_to);
    OK_(optim_step);
    OK_(im2col);
    OK_(im2col16);
    OK_(col2im);
    OK_(conv_scatter);
    OK_(conv_gather);
    OK_(conv_gather16);
    OK_(conv_scatter16);
    OK_(conv_bias_grad);
    OK_(sum_groups_add);
    OK_(transpose);
    OK_(maxpool_forward);
    OK_(maxpool_backward);
    OK_(avgpool_forward);
    OK_(avgpool_backward);
    OK_(batchnorm_stats);
    OK_(batchnorm_forward);
    OK_(batchnorm_backward_sums);
    OK_(batchnorm_backward_input);
    OK_(dropout_mask);
    OK_(dropout_apply);
    OK_(token_mean_forward);
    OK_(token_mean_backward);
    OK_(ssa_forward);
    OK_(ssa_backward);
    NO_(embedding_forward); /* checks the ids on the host */
    OK_(embedding_backward);
    OK_(posemb_forward);
    OK_(posemb_backward);
    OK_(rope_apply);
    OK_(attention_forward);
    OK_(attention_backward);
    OK_(attention_forward_io);
    OK_(attention_backward_io);
    OK_(attention_cached);
    OK_(attention_cached_io);
    OK_(swiglu_forward);
    OK_(swiglu_backward);
    OK_(bispike_forward);
    OK_(bispike_backward);
    OK_(bispike_forward_io);
    OK_(bispike_backward_io);
    NO_(lm_cross_entropy);
    NO_(lm_cross_entropy16);
}

#undef OK_
#undef NO_

cudaStream_t stream_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }

snn_status t_graph_begin(const snn_backend *be) {
    SNN_TRY(snn_cuda_table_check(be, "graph_begin"));
    if (snn_cuda_table_graph(be)->dry) return snn_error(SNN_E_STATE, "graph_begin: the table is dry");
    SNN_CU_TRY(cudaStreamBeginCapture(stream_of(be), cudaStreamCaptureModeThreadLocal));
    return SNN_OK;
}

snn_status t_graph_end(const snn_backend *be, int keep, void **out) {
    if (out) *out = NULL;
    SNN_TRY(snn_cuda_table_check(be, "graph_end"));
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(stream_of(be), &g);
    if (e != cudaSuccess || !g) {
        cudaGetLastError(); /* capture errors are not sticky: clear the last error */
        if (g) cudaGraphDestroy(g);
        return snn_error(SNN_E_UNSUPPORTED, "graph_end: the region could not be recorded (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "empty capture");
    }
    cudaGetLastError(); /* an entry refused while recording (its error was handled) */
    if (!keep || !out) {
        cudaGraphDestroy(g);
        return SNN_OK;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return snn_error(SNN_E_UNSUPPORTED, "graph_end: instantiating the recorded region failed: %s",
                         cudaGetErrorString(e));
    }
    *out = (void *)x;
    return SNN_OK;
}

snn_status t_graph_launch(const snn_backend *be, void *graph) {
    SNN_TRY(snn_cuda_table_check(be, "graph_launch"));
    if (!graph) return snn_error(SNN_E_INVALID, "graph_launch: NULL graph");
    SNN_CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, stream_of(be)));
    return SNN_OK;
}

void t_graph_free(const snn_backend *be, void *graph) {
    if (!graph || snn_cuda_table_check(be, "graph_free") != SNN_OK) return;
    cudaStreamSynchronize(stream_of(be)); /* a launch of it may still run */
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    cudaGetLastError();
}

snn_status t_dry(const snn_backend *cbe, int on) {
    snn_backend *be = (snn_backend *)cbe; /* the table is the struct the factory allocated */
    snn_cuda_graph_state *gs = snn_cuda_table_graph(be);
    if (on) {
        if (gs->dry) return snn_error(SNN_E_STATE, "dry mode: the table is dry already");
        SNN_TRY(snn_cuda_table_check(be, "dry"));
        SNN_CU_TRY(cudaStreamBeginCapture(stream_of(be), cudaStreamCaptureModeThreadLocal));
        gs->real = *be;
        make_dry(be);
        gs->dry = 1;
        gs->refused = 0;
        return SNN_OK;
    }
    if (!gs->dry) return SNN_OK;
    *be = gs->real;
    gs->dry = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(stream_of(be), &g);
    size_t nodes = 0;
    if (e == cudaSuccess && g) e = cudaGraphGetNodes(g, NULL, &nodes);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return snn_error(SNN_E_STATE, "dry mode: the stream was used while dry (%s)", cudaGetErrorString(e));
    }
    if (nodes)
        return snn_error(SNN_E_STATE, "dry mode: %zu operations reached the stream while the table was dry (an entry "
                                      "dry mode does not cover)", nodes);
    if (gs->refused)
        return snn_error(SNN_E_STATE, "dry mode: %d entries that need the device were called while dry", gs->refused);
    return SNN_OK;
}

uint64_t t_generation(const snn_backend *be) { return snn_cuda_table_graph(be)->gen; }

} // namespace

void snn_cuda_graph_release(snn_backend *be) {
    if (snn_cuda_table_graph(be)->dry) (void)t_dry(be, 0);
}

void snn_cuda_install_graph(snn_backend *be) {
    be->graph_begin = t_graph_begin;
    be->graph_end = t_graph_end;
    be->graph_launch = t_graph_launch;
    be->graph_free = t_graph_free;
    be->dry = t_dry;
    be->generation = t_generation;
}
