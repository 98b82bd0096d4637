/* Per-token cross-entropy of a language model on logits reduced over T (lm_layers.h).
 * The T reduction is recomputed where it is needed instead of being stored (no scratch
 * memory); each token is independent and runs OpenMP-parallel; the totals are summed over
 * the per-token values in order, so they do not depend on the thread count. */
#include <math.h>
#include <stdint.h>

#include "nn/lm_layers.h"

static inline float zred(const float *l, int T, size_t stride, float inv) {
    float s = 0.0f;
    for (int t = 0; t < T; t++) s += l[(size_t)t * stride];
    return s * inv;
}

snn_status snn_lm_cross_entropy(const float *logits, const int32_t *labels, const float *mask, int T,
                                int N, int S, int V, int reduce_sum, double *token_loss,
                                double *loss_sum, double *count, float *dlogits, float grad_scale) {
    if (!logits || !labels || !token_loss || !loss_sum || !count)
        return snn_error(SNN_E_INVALID, "LM loss: logits, labels and outputs must not be NULL");
    if (T <= 0 || N <= 0 || S <= 0 || V <= 0)
        return snn_error(SNN_E_INVALID, "LM loss: T, N, S and V must be positive (got %d, %d, %d, %d)", T,
                         N, S, V);
    const long long NS = (long long)N * S;
    for (long long i = 0; i < NS; i++)
        if (labels[i] < 0 || labels[i] >= V)
            return snn_error(SNN_E_INVALID, "LM loss: label %d at token %lld is outside [0, %d)",
                             (int)labels[i], i, V);
    const size_t stride = (size_t)NS * (size_t)V; /* between time steps */
    const float inv = reduce_sum ? 1.0f : 1.0f / (float)T;
    const float gt = reduce_sum ? 1.0f : 1.0f / (float)T; /* dz/dlogits_t */
#pragma omp parallel for schedule(static) if (NS * V >= 32768)
    for (long long i = 0; i < NS; i++) {
        const float *l = logits + (size_t)i * V;
        const float mk = mask ? mask[i] : 1.0f;
        const int lab = labels[i];
        if (dlogits) {
            /* the t = 0 slice of this token's gradient holds z, then exp(z - max) */
            float *d = dlogits + (size_t)i * V;
            float mx = -INFINITY;
            for (int v = 0; v < V; v++) {
                d[v] = zred(l + v, T, stride, inv);
                mx = d[v] > mx ? d[v] : mx;
            }
            const float zl = d[lab];
            double se = 0.0;
            for (int v = 0; v < V; v++) {
                d[v] = expf(d[v] - mx);
                se += d[v];
            }
            token_loss[i] = mk * (mx + log(se) - (double)zl);
            const float c = grad_scale * mk * gt, is = (float)(1.0 / se);
            for (int v = 0; v < V; v++) {
                float g = c * (d[v] * is - (v == lab ? 1.0f : 0.0f));
                for (int t = 0; t < T; t++) d[(size_t)t * stride + v] = g;
            }
        } else {
            float mx = -INFINITY;
            for (int v = 0; v < V; v++) {
                float z = zred(l + v, T, stride, inv);
                mx = z > mx ? z : mx;
            }
            double se = 0.0;
            for (int v = 0; v < V; v++) se += expf(zred(l + v, T, stride, inv) - mx);
            token_loss[i] = mk * (mx + log(se) - (double)zred(l + lab, T, stride, inv));
        }
    }
    double ls = 0.0, cn = 0.0;
    for (long long i = 0; i < NS; i++) {
        ls += token_loss[i];
        cn += mask ? mask[i] : 1.0;
    }
    *loss_sum = ls;
    *count = cn;
    return SNN_OK;
}
