/* The CPU table's entries (src/backend/backend.h says what each computes). */
#ifndef SNN_CPU_OPS_H
#define SNN_CPU_OPS_H

#include "backend/backend.h"

snn_status snn_cpu_gemm(const snn_backend *be, const snn_gemm *g);
void snn_cpu_gemm_f32(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
snn_status snn_cpu_round(const snn_backend *be, snn_dtype t, float *dst, const float *src, size_t n);
snn_status snn_cpu_colsum16_add(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out);
snn_status snn_cpu_cast(const snn_backend *be, snn_dtype t, void *dst, const float *src, size_t n);
snn_status snn_cpu_scale(const snn_backend *be, float *dst, const float *src, float s, size_t n);
snn_status snn_cpu_gelu_forward(const snn_backend *be, const float *x, float *y, size_t n);
snn_status snn_cpu_gelu_backward(const snn_backend *be, const float *x, const float *dy, float *dx, size_t n);
snn_status snn_cpu_colsum_add(const snn_backend *be, const float *x, int rows, int cols, float *out);
snn_status snn_cpu_sumsq(const snn_backend *be, const float *x, size_t n, double *out);
snn_status snn_cpu_nonfinite(const snn_backend *be, const float *x, size_t n, int *found);
snn_status snn_cpu_fp8_qdq(const snn_backend *be, const snn_fp8_qdq *q, float *amax);
snn_status snn_cpu_neuron_forward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                  const float *x, float *y, float *h_seq, float *v_last);
snn_status snn_cpu_neuron_backward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                   const float *h_seq, const float *dy, float *dx, double *gk);
snn_status snn_cpu_neuron_forward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                     snn_dtype S, snn_dtype F, const float *x, float *y, float *h_seq,
                                     float *v_last);
snn_status snn_cpu_neuron_backward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                      snn_dtype S, snn_dtype F, snn_dtype B, const float *h_seq, const float *dy,
                                      float *dx, double *gk);
snn_status snn_cpu_rmsnorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x,
                                   const float *w, float *y, double *rstd);
snn_status snn_cpu_rmsnorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                    const double *rstd, const float *dy, float *dx, float *dw);
snn_status snn_cpu_add(const snn_backend *be, float *dst, const float *a, const float *b, size_t n);
snn_status snn_cpu_add_rounded(const snn_backend *be, snn_dtype t, float *dst, const float *a, const float *b,
                               size_t n);
snn_status snn_cpu_layernorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                                     const float *b, float *y, double *mean, double *rstd);
snn_status snn_cpu_layernorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                      const double *mean, const double *rstd, const float *dy, float *dx,
                                      const float *dx_add, float *dw,
                                      float *db, void *work);
size_t snn_cpu_layernorm_work_bytes(const snn_backend *be, size_t V, int F);
snn_status snn_cpu_optim_update(const snn_backend *be, const snn_optim_update *u, size_t n, float *w,
                                const float *g, float *s0, float *s1, const uint8_t *decay_mask,
                                int *nonfinite);
snn_status snn_cpu_upload_async(const snn_backend *be, void *dst, const void *src, size_t bytes);
snn_status snn_cpu_class_loss(const snn_backend *be, const snn_class_loss *q);
snn_status snn_cpu_sumsq_to(const snn_backend *be, const float *x, size_t n, double *out);
snn_status snn_cpu_nonfinite_to(const snn_backend *be, const float *x, size_t n, int *flag);
snn_status snn_cpu_optim_step(const snn_backend *be, const snn_optim_step *s);

#endif
