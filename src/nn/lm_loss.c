/* Per-token cross-entropy of a language model on logits reduced over T (include/snn/lm.h):
 * host memory, computed by the CPU table's lm_cross_entropy (src/backend/cpu/cpu_lm.c; each
 * token is independent and runs OpenMP-parallel, the totals are summed over the per-token
 * values in order, so they do not depend on the thread count). A device table's entry of
 * the same name computes it on that device's memory. */
#include <stdint.h>

#include "backend/backend.h"
#include "nn/lm_layers.h"

snn_status snn_lm_cross_entropy(const float *logits, const int32_t *labels, const float *mask, int T,
                                int N, int S, int V, int reduce_sum, double *token_loss,
                                double *loss_sum, double *count, float *dlogits, float grad_scale) {
    const snn_backend *be = snn_backend_cpu();
    return be->lm_cross_entropy(be, logits, labels, mask, T, N, S, V, reduce_sum, token_loss, loss_sum, count,
                                dlogits, grad_scale);
}
