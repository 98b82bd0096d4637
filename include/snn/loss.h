/* snn — classification losses on the [T][N][C] output of a spiking network.
 *
 * Both follow SpikingJelly's training recipes: the network output is averaged over the T
 * time steps first (out.mean(0), the firing rate for spiking outputs), the loss is taken
 * on that mean, and the gradient is handed back to every time step divided by T.
 *
 * logits/out and the gradient array must not overlap. Labels are class indices in
 * [0, C); any other label is refused with SNN_E_INVALID before anything is written.
 * Non-finite inputs are not refused: they make the loss non-finite, which the caller (the
 * FP16 loss scaler, the training loop) is expected to check. */
#ifndef SNN_LOSS_H
#define SNN_LOSS_H

#include <stdint.h>
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cross-entropy of softmax(mean_t logits) against labels, averaged over the N samples
 * (F.cross_entropy(logits.mean(0), labels)).
 *   logits  [T][N][C]
 *   labels  [N]
 *   loss    out: the scalar loss
 *   dlogits out, may be NULL: dL/dlogits [T][N][C] = (softmax - onehot) / (N * T)
 *   correct out, may be NULL: how many samples have argmax(mean_t logits) == label
 *           (ties go to the first maximal class, as torch.argmax). */
snn_status snn_loss_cross_entropy_mean_t(const float *logits, const int32_t *labels, int T, int N,
                                         int C, float *loss, float *dlogits, int *correct);

/* Mean squared error between the firing rate r = mean_t out and one_hot(labels), averaged
 * over N*C (F.mse_loss(out.mean(0), one_hot(labels, C))).
 *   out   [T][N][C];  dout (may be NULL) = 2 (r - onehot) / (N * C * T) for every t;
 *   correct as above on the firing rate. */
snn_status snn_loss_mse_rate(const float *out, const int32_t *labels, int T, int N, int C,
                             float *loss, float *dout, int *correct);

#ifdef __cplusplus
}
#endif
#endif
