/* The CPU operation table: the reference every other backend is tested against.
 * Memory is the host's; every entry runs to completion before it returns (OpenMP inside). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h" /* the convolution and pooling entries */
#include "backend/cpu/cpu_lm.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_layers.h" /* BatchNorm, dropout, token mean, SSA */
#include "core/error_internal.h"

static snn_status cpu_alloc(const snn_backend *be, size_t bytes, void **out) {
    (void)be;
    if (!out) return snn_error(SNN_E_INVALID, "cpu backend: alloc needs an output pointer");
    *out = NULL;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    if (rounded < bytes) return snn_error(SNN_E_NOMEM, "cannot allocate %zu bytes", bytes);
    void *p = aligned_alloc(256, rounded ? rounded : 256);
    if (!p) return snn_error(SNN_E_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
    memset(p, 0, rounded ? rounded : 256);
    *out = p;
    return SNN_OK;
}

static void cpu_free(const snn_backend *be, void *p) {
    (void)be;
    free(p);
}

/* Host memory is the device memory: upload, download and copy are the same memmove. */
static snn_status cpu_move(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && (!dst || !src)) return snn_error(SNN_E_INVALID, "cpu backend: copy of %zu bytes with a NULL pointer", bytes);
    if (bytes && dst != src) memmove(dst, src, bytes);
    return SNN_OK;
}

static snn_status cpu_fill(const snn_backend *be, float *x, float v, size_t n) {
    (void)be;
    if (n && !x) return snn_error(SNN_E_INVALID, "cpu backend: fill of a NULL buffer");
    for (size_t i = 0; i < n; i++) x[i] = v;
    return SNN_OK;
}

static snn_status cpu_synchronize(const snn_backend *be) {
    (void)be;
    return SNN_OK;
}

static const snn_backend cpu_backend = {
    .name = "cpu",
    .device = SNN_DEVICE_CPU,
    .ctx = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_move,
    .download = cpu_move,
    .copy = cpu_move,
    .fill = cpu_fill,
    .synchronize = cpu_synchronize,
    .gemm = snn_cpu_gemm,
    .gemm_f32 = snn_cpu_gemm_f32,
    .round = snn_cpu_round,
    .cast = snn_cpu_cast,
    .scale = snn_cpu_scale,
    .add = snn_cpu_add,
    .add_rounded = snn_cpu_add_rounded,
    .gelu_forward = snn_cpu_gelu_forward,
    .gelu_backward = snn_cpu_gelu_backward,
    .colsum_add = snn_cpu_colsum_add,
    .colsum16_add = snn_cpu_colsum16_add,
    .sumsq = snn_cpu_sumsq,
    .nonfinite = snn_cpu_nonfinite,
    .fp8_qdq = snn_cpu_fp8_qdq,
    .neuron_forward = snn_cpu_neuron_forward,
    .neuron_backward = snn_cpu_neuron_backward,
    .neuron_forward_mp = snn_cpu_neuron_forward_mp,
    .neuron_backward_mp = snn_cpu_neuron_backward_mp,
    .rmsnorm_forward = snn_cpu_rmsnorm_forward,
    .rmsnorm_backward = snn_cpu_rmsnorm_backward,
    .layernorm_forward = snn_cpu_layernorm_forward,
    .layernorm_backward = snn_cpu_layernorm_backward,
    .layernorm_work_bytes = snn_cpu_layernorm_work_bytes,
    .optim_update = snn_cpu_optim_update,
    .upload_async = snn_cpu_upload_async,
    .class_loss = snn_cpu_class_loss,
    .sumsq_to = snn_cpu_sumsq_to,
    .nonfinite_to = snn_cpu_nonfinite_to,
    .optim_step = snn_cpu_optim_step,
    /* convolution and pooling */
    .im2col = snn_cpu_im2col,
    .col2im = snn_cpu_col2im,
    .conv_scatter = snn_cpu_conv_scatter,
    .conv_gather = snn_cpu_conv_gather,
    .conv_bias_grad = snn_cpu_conv_bias_grad,
    .sum_groups_add = snn_cpu_sum_groups_add,
    .transpose = snn_cpu_transpose,
    .maxpool_forward = snn_cpu_maxpool_forward,
    .maxpool_backward = snn_cpu_maxpool_backward,
    .avgpool_forward = snn_cpu_avgpool_forward,
    .avgpool_backward = snn_cpu_avgpool_backward,
    /* end of convolution and pooling */

    /* BatchNorm, dropout, token mean, spiking self-attention */
    .batchnorm_stats = snn_cpu_batchnorm_stats,
    .batchnorm_forward = snn_cpu_batchnorm_forward,
    .batchnorm_backward_sums = snn_cpu_batchnorm_backward_sums,
    .batchnorm_backward_input = snn_cpu_batchnorm_backward_input,
    .dropout_mask = snn_cpu_dropout_mask,
    .dropout_apply = snn_cpu_dropout_apply,
    .token_mean_forward = snn_cpu_token_mean_forward,
    .token_mean_backward = snn_cpu_token_mean_backward,
    .ssa_forward = snn_cpu_ssa_forward,
    .ssa_backward = snn_cpu_ssa_backward,
    .ssa_work_bytes = snn_cpu_ssa_work_bytes,
    /* end of BatchNorm, dropout, token mean, spiking self-attention */

    /* language-model ops */
    .embedding_forward = snn_cpu_embedding_forward,
    .embedding_backward = snn_cpu_embedding_backward,
    .posemb_forward = snn_cpu_posemb_forward,
    .posemb_backward = snn_cpu_posemb_backward,
    .rope_apply = snn_cpu_rope_apply,
    .attention_forward = snn_cpu_attention_forward,
    .attention_backward = snn_cpu_attention_backward,
    .attention_work_bytes = snn_cpu_attention_work_bytes,
    .attention_cached = snn_cpu_attention_cached,
    .swiglu_forward = snn_cpu_swiglu_forward,
    .swiglu_backward = snn_cpu_swiglu_backward,
    .bispike_forward = snn_cpu_bispike_forward,
    .bispike_backward = snn_cpu_bispike_backward,
    .lm_cross_entropy = snn_cpu_lm_cross_entropy,
    /* end of language-model ops */
};

const snn_backend *snn_backend_cpu(void) { return &cpu_backend; }

#ifndef SNN_HAVE_CUDA
snn_status snn_backend_cuda_create(int device, snn_backend **out) {
    if (out) *out = NULL;
    return snn_error(SNN_E_UNSUPPORTED,
                     "device 'cuda:%d': this snn was built without CUDA (configure with -DSNN_CUDA=ON on a machine "
                     "with the CUDA toolkit)",
                     device);
}
void snn_backend_cuda_destroy(snn_backend *be) { (void)be; }
#endif
