/* The CPU table's language-model entries (backend.h, "language-model ops"; cpu_lm.c). */
#ifndef SNN_CPU_LM_H
#define SNN_CPU_LM_H

#include "backend/backend.h"

snn_status snn_cpu_embedding_forward(const snn_backend *be, size_t n, int D, int vocab, const float *ids,
                                     const float *W, float *y, long long *bad, float *bad_id);
snn_status snn_cpu_embedding_backward(const snn_backend *be, size_t n, int D, const float *ids, const float *dy,
                                      float *G);
snn_status snn_cpu_posemb_forward(const snn_backend *be, size_t R, size_t L, const float *x, const float *W,
                                  float *y);
snn_status snn_cpu_posemb_backward(const snn_backend *be, size_t R, size_t L, const float *dy, float *G);
snn_status snn_cpu_rope_apply(const snn_backend *be, size_t R, int S, int W, int rot, int hd, const float *cs,
                              const float *sn, float sign, const float *x, float *y);
snn_status snn_cpu_attention_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                     float scale, const float *x, float *y, float *P, void *work);
snn_status snn_cpu_attention_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                      float scale, const float *x, const float *P, const float *dy, float *dx,
                                      void *work);
size_t snn_cpu_attention_work_bytes(const snn_backend *be, int R, int H, int S);
snn_status snn_cpu_attention_cached(const snn_backend *be, int R, int S, int H, int G, int hd, int cap, int off,
                                    float scale, const float *x, float *kcache, float *vcache, float *y);
snn_status snn_cpu_swiglu_forward(const snn_backend *be, size_t V, int F, const float *x, float *y);
snn_status snn_cpu_swiglu_backward(const snn_backend *be, size_t V, int F, const float *x, const float *dy,
                                   float *dx);
snn_status snn_cpu_bispike_forward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *x,
                                   float *y, float *v);
snn_status snn_cpu_bispike_backward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *v,
                                    const float *y, const float *dy, float *dx);
snn_status snn_cpu_lm_cross_entropy(const snn_backend *be, const float *logits, const int32_t *labels,
                                    const float *mask, int T, int N, int S, int V, int reduce_sum, double *token_loss,
                                    double *loss_sum, double *count, float *dlogits, float grad_scale);
/* The attention core's masked row softmax (snn_attn_softmax_rows of nn/lm_layers.h). */
void snn_cpu_attn_softmax_rows(float *Z, int rows, int cols, int ld, int off, const int *last);

#endif
