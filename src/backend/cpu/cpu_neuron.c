/* Neuron entries of the CPU table: the kernels of src/neuron/ (include/snn/neuron.h). */
#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"

snn_status snn_cpu_neuron_forward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                  const float *x, float *y, float *h_seq, float *v_last) {
    (void)be;
    if (!o || T < 0 || (T && n && (!x || !y))) return snn_error(SNN_E_INVALID, "neuron forward: bad arguments");
    snn_neuron_forward(o, k, T, n, x, NULL, y, h_seq, NULL, v_last);
    return SNN_OK;
}

snn_status snn_cpu_neuron_backward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                   const float *h_seq, const float *dy, float *dx, double *gk) {
    (void)be;
    if (!o || T < 0 || (T && n && !h_seq)) return snn_error(SNN_E_INVALID, "neuron backward: bad arguments");
    snn_neuron_backward(o, k, T, n, h_seq, NULL, dy, NULL, NULL, dx, NULL, gk);
    return SNN_OK;
}

snn_status snn_cpu_neuron_forward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                     snn_dtype S, snn_dtype F, const float *x, float *y, float *h_seq,
                                     float *v_last) {
    (void)be;
    if (!o || T < 0 || (T && n && (!x || !y))) return snn_error(SNN_E_INVALID, "neuron forward (mixed): bad arguments");
    return snn_neuron_forward_mp(o, k, T, n, S, F, x, NULL, y, h_seq, v_last);
}

snn_status snn_cpu_neuron_backward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                      snn_dtype S, snn_dtype F, snn_dtype B, const float *h_seq, const float *dy,
                                      float *dx, double *gk) {
    (void)be;
    if (!o || T < 0 || (T && n && !h_seq)) return snn_error(SNN_E_INVALID, "neuron backward (mixed): bad arguments");
    return snn_neuron_backward_mp(o, k, T, n, S, F, B, h_seq, NULL, dy, NULL, dx, NULL, gk);
}
