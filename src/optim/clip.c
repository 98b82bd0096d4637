/* Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_ with the L2 norm). */
#include <math.h>

#include "snn/optim.h"

/* The sum of squares is split into a fixed number of chunks that depends only on n, each
 * summed in double, then the chunk sums are added in order: the norm is the same bits
 * whatever the number of threads. */
#define CLIP_CHUNKS 256
#define CLIP_PAR_MIN 65536

float snn_clip_grad_norm(float *grads, size_t n, float max_norm) {
    if (!grads || n == 0) return 0.0f;
    double part[CLIP_CHUNKS];
    const size_t chunk = (n + CLIP_CHUNKS - 1) / CLIP_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= CLIP_PAR_MIN)
    for (int c = 0; c < CLIP_CHUNKS; c++) {
        size_t lo = (size_t)c * chunk, hi = lo + chunk;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)grads[i] * (double)grads[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < CLIP_CHUNKS; c++) total += part[c];
    const float norm = (float)sqrt(total);
    if (!isfinite(norm)) return norm; /* leave inf/nan gradients to the loss scaler */
    if (!(max_norm >= 0.0f)) return norm; /* negative or NaN limit: measure only */
    /* torch: coef = max_norm / (total_norm + 1e-6), all in FP32, clamped to 1 */
    const float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) {
#pragma omp parallel for simd schedule(static) if (n >= CLIP_PAR_MIN)
        for (size_t i = 0; i < n; i++) grads[i] *= coef;
    }
    return norm;
}
