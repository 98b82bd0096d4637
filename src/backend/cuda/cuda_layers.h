/* Layer kernels of the CUDA backend that the whole-model runner (cuda_model.cu) composes:
 * convolution lowering, pooling, batch norm, token mean, spiking self-attention, GELU, loss
 * on the firing rate, and the optimizer updates. C interface over device pointers; every
 * function only enqueues work on the context's stream (no allocation, no host sync), so a
 * training step built from them can be captured into a CUDA graph.
 *
 * Layout: activations are FP32 [B][per-sample shape] with B = T*N rows, per-sample shapes
 * channel-major like the CPU modules: [C][H][W] for images, [C][L] for token sequences.
 * Shapes are validated (positive sizes, matching output sizes); a bad argument returns
 * SNN_E_INVALID with a message, never launches. */
#ifndef SNN_CUDA_LAYERS_H
#define SNN_CUDA_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "snn/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Convolution lowering (conv = im2col + one GEMM + a layout change) ----
 * Output size Ho = (H + 2 pad - k) / stride + 1 (same for Wo); P = Ho*Wo.
 * col is [B*P][ldcol] row-major (row = output pixel (b, oy, ox); column (c*k + ky)*k + kx,
 * the order of a PyTorch weight [O][C][k][k]); ldcol >= C*k*k; columns C*k*k..ldcol-1 are
 * written as 0; taps in the padding read 0. col_type: F32, BF16 or F16 (rounded to
 * nearest even). With k = 1, stride 1, pad 0 this is the NCHW -> NHWC transpose. */
snn_status snn_cuda_im2col(snn_cuda *c, snn_dtype col_type, void *col, int ldcol, const float *x,
                           int B, int C, int H, int W, int k, int stride, int pad);
/* The adjoint: dx[b][c][y][x] = sum of dcol over every (pixel, tap) that read x[b][c][y][x]
 * (dx overwritten; a gather, no atomics: deterministic). dcol FP32 [B*P][ldcol]. */
snn_status snn_cuda_col2im(snn_cuda *c, float *dx, const float *dcol, int ldcol, int B, int C,
                           int H, int W, int k, int stride, int pad);
/* [B][P][O] (the GEMM's output, pixel-major) -> [B][O][P], adding bias[o] if bias != NULL. */
snn_status snn_cuda_nhwc_to_nchw(snn_cuda *c, float *dst, const float *src, const float *bias,
                                 int B, int O, int P);
/* The same with the result rounded: round_to F32 = no rounding (the calls above); BF16 or
 * F16 = each value (after adding bias) is rounded to nearest even in that type and stored
 * back as FP32, as a 16-bit layer's output / input gradient is (saves a separate pass). */
snn_status snn_cuda_nhwc_to_nchw_round(snn_cuda *c, float *dst, const float *src,
                                       const float *bias, int B, int O, int P, snn_dtype round_to);
snn_status snn_cuda_col2im_round(snn_cuda *c, float *dx, const float *dcol, int ldcol, int B,
                                 int C, int H, int W, int k, int stride, int pad,
                                 snn_dtype round_to);
/* [B][O][P] FP32 -> [B][P][O] as dst_type (F32, BF16, F16). */
snn_status snn_cuda_nchw_to_nhwc(snn_cuda *c, snn_dtype dst_type, void *dst, const float *src,
                                 int B, int O, int P);

/* ---- Pooling on [B][C][H][W] (PyTorch semantics: padding is -inf for max, windows that
 * start in the padding are allowed; Ho = (H + 2 pad - k) / stride + 1) ----
 * Max: arg[b][c][oy][ox] = index ky*k + kx of the first maximum in scan order (the CPU
 * module's tie rule), k*k <= 255. Backward: dx = sum over windows whose argmax is this
 * element of dy (overwrites dx; gather, deterministic). */
snn_status snn_cuda_maxpool2d_forward(snn_cuda *c, const float *x, float *y, uint8_t *arg, int B,
                                      int C, int H, int W, int k, int stride, int pad);
snn_status snn_cuda_maxpool2d_backward(snn_cuda *c, const float *dy, const uint8_t *arg,
                                       float *dx, int B, int C, int H, int W, int k, int stride,
                                       int pad);

/* ---- BatchNorm over [B][C][S] (S = H*W for 2d, L for 1d on [C][L], 1 for [C]) ----
 * Training: mean and biased variance per channel over the B*S values, y = (x - mean) *
 * invstd * gamma + beta, invstd = 1/sqrt(var + eps); running_mean/var updated as
 * running = (1 - momentum) running + momentum stat with the UNBIASED variance (B*S > 1);
 * save_mean/save_invstd [C] written for the backward. Eval (training 0): uses the running
 * statistics, leaves them alone, save_* may be NULL. Statistics accumulate in FP64 or a
 * two-pass FP32 scheme: the CPU module (FP64) is the reference.
 * work: device scratch of snn_cuda_batchnorm_work_bytes(B, C, S) bytes (may be 0). */
size_t snn_cuda_batchnorm_work_bytes(int B, int C, int S);
snn_status snn_cuda_batchnorm_forward(snn_cuda *c, int training, const float *x, float *y, int B,
                                      int C, int S, const float *gamma, const float *beta,
                                      float *running_mean, float *running_var, float eps,
                                      float momentum, float *save_mean, float *save_invstd,
                                      void *work);
/* dgamma, dbeta [C] are ADDED to; dx overwritten:
 * dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)), means over the B*S values. */
snn_status snn_cuda_batchnorm_backward(snn_cuda *c, const float *x, const float *dy, float *dx,
                                       int B, int C, int S, const float *gamma,
                                       const float *save_mean, const float *save_invstd,
                                       float *dgamma, float *dbeta, void *work);

/* ---- Token mean: [B][D][L] -> [B][D] (mean over L); backward broadcasts dy/L ---- */
snn_status snn_cuda_token_mean_forward(snn_cuda *c, const float *x, float *y, int B, int D, int L);
snn_status snn_cuda_token_mean_backward(snn_cuda *c, const float *dy, float *dx, int B, int D,
                                        int L);

/* ---- Spiking self-attention core (src/models/spikformer_parts.c is the reference) ----
 * qkv [B][3D][L] (rows 0..D-1 q, D..2D-1 k, 2D..3D-1 v; head h owns channels h*dh..h*dh+dh-1
 * of each, dh = D/heads); per (b, h) with Q, K, V the [L][dh] matrices:
 * Y = (Q K^T) V * scale, written back channel-major: y [B][D][L].
 * Backward: dqkv [B][3D][L] overwritten. FP32 arithmetic (spike inputs make the forward
 * exact). work: device scratch of snn_cuda_ssa_work_bytes bytes (may be 0). */
size_t snn_cuda_ssa_work_bytes(int B, int D, int L, int heads);
snn_status snn_cuda_ssa_forward(snn_cuda *c, const float *qkv, float *y, int B, int D, int L,
                                int heads, float scale, void *work);
snn_status snn_cuda_ssa_backward(snn_cuda *c, const float *qkv, const float *dy, float *dqkv,
                                 int B, int D, int L, int heads, float scale, void *work);

/* ---- GELU, exact erf form (src/nn/gelu.c), FP32, n elements; dx overwritten ---- */
snn_status snn_cuda_gelu_forward(snn_cuda *c, const float *x, float *y, size_t n);
snn_status snn_cuda_gelu_backward(snn_cuda *c, const float *x, const float *dy, float *dx,
                                  size_t n);
/* GELU with typed storage: x and the backward's dx as xt, y and dy as yt; out is y or dx. */
snn_status snn_cuda_gelu_io(snn_cuda *c, snn_dtype xt, snn_dtype yt, int backward, const void *x, const void *dy,
                            void *out, size_t n);

/* ---- MSE on the firing rate (src/train/loss.c's snn_loss_mse_rate is the reference):
 * out [T][B][C], labels [B] int32 on the device; r = mean_t out;
 * loss = mean over b, c of (r[b][c] - onehot(y_b)[c])^2 (one device FP32, written);
 * dout[t][b][c] = grad_scale * 2 (r - onehot) / (B*C*T) (FP32, written); correct (device
 * int, may be NULL) receives the number of b whose argmax_c r (first maximum) is y_b. ---- */
snn_status snn_cuda_mse_rate(snn_cuda *c, int T, int B, int C, const float *out,
                             const int32_t *labels, float *loss, float *dout, float grad_scale,
                             int *correct);

/* ---- Optimizer updates on the flat FP32 parameter buffer ----
 * Scalars that change per step live on the device (a CUDA graph replays them as they are at
 * launch time): s->lr, s->bc1 = 1 - beta1^t, s->bc2 = 1 - beta2^t (Adam), s->grad_scale
 * (multiplies grad: 1/loss_scale), s->skip (nonzero: the step is skipped, e.g. an FP16
 * overflow). decay_mask [n] (may be NULL = decay everywhere): weight decay applies where 1.
 * The rules are PyTorch's (torch.optim.SGD with dampening 0, Adam with L2 added to the
 * gradient, AdamW with decoupled decay w -= lr*wd*w); src/optim/optimizer.c is the reference. */
typedef struct snn_cuda_step_scalars {
    float lr, bc1, bc2, grad_scale;
    int skip;
} snn_cuda_step_scalars;

typedef struct snn_cuda_opt {
    int kind; /* 0 SGD, 1 Adam, 2 AdamW */
    float momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
} snn_cuda_opt;

/* state: SGD uses state[0..n) (momentum buffer, start at 0); Adam uses state[0..2n) (m, v). */
snn_status snn_cuda_opt_update(snn_cuda *c, const snn_cuda_opt *o,
                               const snn_cuda_step_scalars *s_dev, size_t n, float *w,
                               const float *grad, float *state, const uint8_t *decay_mask);

#ifdef __cplusplus
}
#endif
#endif
