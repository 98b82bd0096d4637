/* The CPU table's language-model entries (backend.h, "language-model ops"): the arithmetic
 * the modules of src/nn (embedding, posemb, rope, attention, swiglu, bispike) and the LM
 * loss did in place before they went through the op table, moved here unchanged, so CPU
 * results are what they were, bit for bit. OpenMP runs over independent rows, tokens or
 * elements only; every sum keeps its order, so nothing depends on the thread count. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_lm.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error_internal.h"
#include "snn/dtype.h"

/* ---------------------------------------------------------------- embedding, positions */

snn_status snn_cpu_embedding_forward(const snn_backend *be, size_t n, int D, int vocab, const float *ids,
                                     const float *W, float *y, long long *bad, float *bad_id) {
    (void)be;
    if (!bad || !bad_id) return snn_error(SNN_E_INVALID, "embedding_forward: NULL bad-token outputs");
    *bad = -1;
    *bad_id = 0.0f;
    if (D <= 0 || vocab <= 0) return snn_error(SNN_E_INVALID, "embedding_forward: D and vocab must be positive");
    if (n && (!ids || !W || !y)) return snn_error(SNN_E_INVALID, "embedding_forward: NULL pointer");
    const size_t Dz = (size_t)D;
    for (size_t i = 0; i < n; i++) {
        float f = ids[i];
        if (!(f >= 0.0f && f < (float)vocab) || f != floorf(f)) {
            *bad = (long long)i;
            *bad_id = f;
            return SNN_OK;
        }
        memcpy(y + i * Dz, W + (size_t)f * Dz, Dz * sizeof(float));
    }
    return SNN_OK;
}

snn_status snn_cpu_embedding_backward(const snn_backend *be, size_t n, int D, const float *ids, const float *dy,
                                      float *G) {
    (void)be;
    if (D <= 0) return snn_error(SNN_E_INVALID, "embedding_backward: D must be positive");
    if (n && (!ids || !dy || !G)) return snn_error(SNN_E_INVALID, "embedding_backward: NULL pointer");
    const size_t Dz = (size_t)D;
    for (size_t i = 0; i < n; i++) {
        float *g = G + (size_t)ids[i] * Dz;
        const float *d = dy + i * Dz;
        for (size_t j = 0; j < Dz; j++) g[j] += d[j];
    }
    return SNN_OK;
}

snn_status snn_cpu_posemb_forward(const snn_backend *be, size_t R, size_t L, const float *x, const float *W,
                                  float *y) {
    (void)be;
    if (R && L && (!x || !W || !y)) return snn_error(SNN_E_INVALID, "posemb_forward: NULL pointer");
    for (size_t b = 0; b < R; b++)
        for (size_t i = 0; i < L; i++) y[b * L + i] = x[b * L + i] + W[i];
    return SNN_OK;
}

snn_status snn_cpu_posemb_backward(const snn_backend *be, size_t R, size_t L, const float *dy, float *G) {
    (void)be;
    if (R && L && (!dy || !G)) return snn_error(SNN_E_INVALID, "posemb_backward: NULL pointer");
    for (size_t b = 0; b < R; b++)
        for (size_t i = 0; i < L; i++) G[i] += dy[b * L + i];
    return SNN_OK;
}

/* ---------------------------------------------------------------- RoPE */

snn_status snn_cpu_rope_apply(const snn_backend *be, size_t R, int S, int W, int rot, int hd, const float *cs,
                              const float *sn, float sign, const float *x, float *y) {
    (void)be;
    if (S < 0 || hd <= 0 || hd % 2 || rot < 0 || (size_t)rot * (size_t)hd > (size_t)(W > 0 ? W : 0))
        return snn_error(SNN_E_INVALID, "rope_apply: bad geometry (S %d, W %d, rot %d, hd %d)", S, W, rot, hd);
    if (R && S && (!cs || !sn || !x || !y)) return snn_error(SNN_E_INVALID, "rope_apply: NULL pointer");
    const size_t Sz = (size_t)S, hz = (size_t)hd, h2 = hz / 2, Wz = (size_t)W, rz = (size_t)rot;
    for (size_t b = 0; b < R; b++)
        for (size_t s = 0; s < Sz; s++) {
            const float *xr = x + (b * Sz + s) * Wz;
            float *yr = y + (b * Sz + s) * Wz;
            const float *c = cs + s * h2, *sv = sn + s * h2;
            for (size_t h = 0; h < rz; h++) {
                const float *u = xr + h * hz;
                float *o = yr + h * hz;
                for (size_t i = 0; i < h2; i++) {
                    float a = u[i], w = u[i + h2], si = sign * sv[i];
                    o[i] = a * c[i] - w * si;
                    o[i + h2] = a * si + w * c[i];
                }
            }
            if (yr != xr) memcpy(yr + rz * hz, xr + rz * hz, (Wz - rz * hz) * sizeof(float));
        }
    return SNN_OK;
}

/* ---------------------------------------------------------------- attention */

void snn_cpu_attn_softmax_rows(float *Z, int rows, int cols, int ld, int off, const int *last) {
    for (int i = 0; i < rows; i++) {
        float *z = Z + (size_t)i * ld;
        int n = (last ? last[i] : i + off) + 1;
        float mx = z[0];
        for (int j = 1; j < n; j++) mx = z[j] > mx ? z[j] : mx;
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            z[j] = expf(z[j] - mx);
            sum += z[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < n; j++) z[j] *= inv;
        for (int j = n; j < cols; j++) z[j] = 0.0f;
    }
}

static snn_status attn_check(const char *what, int R, int S, int H, int G, int hd) {
    if (R < 0 || S < 0 || H <= 0 || G <= 0 || H % G || hd <= 0)
        return snn_error(SNN_E_INVALID, "%s: bad geometry (R %d, S %d, heads %d, groups %d, head size %d)", what, R, S,
                         H, G, hd);
    return SNN_OK;
}

static snn_status attn_type_check(const char *what, snn_dtype t) {
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16)
        return snn_error(SNN_E_INVALID, "%s: operand type must be f32, f16 or bf16", what);
    return SNN_OK;
}

/* dst = src rounded to t (RNE, overflow to inf), n values */
static void round_copy(snn_dtype t, float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = snn_round_to(t, src[i], 0);
}

snn_status snn_cpu_attention_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                     float scale, const float *x, float *y, float *P, void *work) {
    (void)be;
    SNN_TRY(attn_check("attention_forward", R, S, H, G, hd));
    SNN_TRY(attn_type_check("attention_forward", t));
    if (!R || !S) return SNN_OK;
    if (!x || !y || !P || (t != SNN_F32 && !work)) return snn_error(SNN_E_INVALID, "attention_forward: NULL pointer");
    const int rep = H / G, W = (H + 2 * G) * hd, OW = H * hd;
    const size_t SS = (size_t)S * S;
#pragma omp parallel for schedule(static) if (R > 1)
    for (long b = 0; b < (long)R; b++) {
        const float *xb = x + (size_t)b * S * W;
        float *P16 = t != SNN_F32 ? (float *)work + (size_t)omp_get_thread_num() * 2 * SS : NULL;
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            float *Pb = P + ((size_t)b * H + h) * SS;
            snn_cpu_gemm_f32(0, 1, S, S, hd, scale, xb + (size_t)h * hd, W, xb + (size_t)(H + g) * hd, W, 0.0f, Pb, S);
            snn_cpu_attn_softmax_rows(Pb, S, S, S, 0, NULL);
            const float *Pm = Pb;
            if (P16) {
                round_copy(t, P16, Pb, SS);
                Pm = P16;
            }
            snn_cpu_gemm_f32(0, 0, S, hd, S, 1.0f, Pm, S, xb + (size_t)(H + G + g) * hd, W, 0.0f,
                             y + (size_t)b * S * OW + (size_t)h * hd, OW);
        }
    }
    return SNN_OK;
}

size_t snn_cpu_attention_work_bytes(const snn_backend *be, int R, int H, int S) {
    (void)be;
    (void)R;
    (void)H;
    /* per thread: dP (dZ) and a rounded copy of P, S x S each */
    return (size_t)omp_get_max_threads() * 2 * (size_t)S * (size_t)S * sizeof(float);
}

snn_status snn_cpu_attention_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                      float scale, const float *x, const float *P, const float *dy, float *dx,
                                      void *work) {
    (void)be;
    SNN_TRY(attn_check("attention_backward", R, S, H, G, hd));
    SNN_TRY(attn_type_check("attention_backward", t));
    if (!R || !S) return SNN_OK;
    if (!x || !P || !dy || !dx || !work) return snn_error(SNN_E_INVALID, "attention_backward: NULL pointer");
    const int rep = H / G, W = (H + 2 * G) * hd, OW = H * hd;
    const size_t SS = (size_t)S * S;
    float *scratch = work;
#pragma omp parallel for schedule(static) if (R > 1)
    for (long b = 0; b < (long)R; b++) {
        float *dP = scratch + (size_t)omp_get_thread_num() * 2 * SS, *P16 = dP + SS;
        const float *xb = x + (size_t)b * S * W;
        float *dxb = dx + (size_t)b * S * W;
        const float *dyb = dy + (size_t)b * S * OW;
        for (int s = 0; s < S; s++) memset(dxb + (size_t)s * W + (size_t)H * hd, 0, 2 * (size_t)G * hd * sizeof(float));
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            const float *Pb = P + ((size_t)b * H + h) * SS, *Pm = Pb;
            const float *q = xb + (size_t)h * hd, *k = xb + (size_t)(H + g) * hd, *v = xb + (size_t)(H + G + g) * hd;
            if (t != SNN_F32) {
                round_copy(t, P16, Pb, SS);
                Pm = P16;
            }
            /* dV += P^T dO */
            snn_cpu_gemm_f32(1, 0, S, hd, S, 1.0f, Pm, S, dyb + (size_t)h * hd, OW, 1.0f,
                             dxb + (size_t)(H + G + g) * hd, W);
            /* dP = dO V^T */
            snn_cpu_gemm_f32(0, 1, S, S, hd, 1.0f, dyb + (size_t)h * hd, OW, v, W, 0.0f, dP, S);
            for (int i = 0; i < S; i++) {
                const float *p = Pb + (size_t)i * S;
                float *d = dP + (size_t)i * S;
                double acc = 0.0;
                for (int j = 0; j <= i; j++) acc += (double)d[j] * p[j];
                float c = (float)acc;
                for (int j = 0; j <= i; j++) d[j] = p[j] * (d[j] - c);
                for (int j = i + 1; j < S; j++) d[j] = 0.0f;
            }
            if (t != SNN_F32) round_copy(t, dP, dP, SS);
            /* dQ = scale dZ K (overwrite), dK += scale dZ^T Q */
            snn_cpu_gemm_f32(0, 0, S, hd, S, scale, dP, S, k, W, 0.0f, dxb + (size_t)h * hd, W);
            snn_cpu_gemm_f32(1, 0, S, hd, S, scale, dP, S, q, W, 1.0f, dxb + (size_t)(H + g) * hd, W);
        }
    }
    return SNN_OK;
}

snn_status snn_cpu_attention_cached(const snn_backend *be, int R, int S, int H, int G, int hd, int cap, int off,
                                    float scale, const float *x, float *kcache, float *vcache, float *y) {
    (void)be;
    SNN_TRY(attn_check("attention_cached", R, S, H, G, hd));
    if (cap <= 0 || off < 0 || (long)off + S > cap)
        return snn_error(SNN_E_INVALID, "attention_cached: positions %d..%d do not fit the cache of %d", off,
                         off + S - 1, cap);
    if (!R || !S) return SNN_OK;
    if (!x || !kcache || !vcache || !y) return snn_error(SNN_E_INVALID, "attention_cached: NULL pointer");
    const int rep = H / G, W = (H + 2 * G) * hd, OW = H * hd;
#pragma omp parallel for schedule(static) if (R > 1)
    for (long b = 0; b < (long)R; b++) {
        const float *xb = x + (size_t)b * S * W;
        for (int g = 0; g < G; g++) {
            float *kc = kcache + (((size_t)b * G + g) * cap) * hd, *vc = vcache + (((size_t)b * G + g) * cap) * hd;
            for (int s = 0; s < S; s++) {
                memcpy(kc + (size_t)(off + s) * hd, xb + (size_t)s * W + (size_t)(H + g) * hd, hd * sizeof(float));
                memcpy(vc + (size_t)(off + s) * hd, xb + (size_t)s * W + (size_t)(H + G + g) * hd, hd * sizeof(float));
            }
        }
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            const float *kc = kcache + (((size_t)b * G + g) * cap) * hd;
            const float *vc = vcache + (((size_t)b * G + g) * cap) * hd;
            for (int s = 0; s < S; s++) {
                const float *q = xb + (size_t)s * W + (size_t)h * hd;
                float *o = y + ((size_t)b * S + s) * OW + (size_t)h * hd;
                int n = off + s + 1;
                /* one query row against n cached keys with an online softmax (running max
                 * and sum, the output rescaled when the max grows): no score buffer */
                float mx = -INFINITY, sum = 0.0f;
                for (int e = 0; e < hd; e++) o[e] = 0.0f;
                for (int j = 0; j < n; j++) {
                    float d = 0.0f;
                    for (int e = 0; e < hd; e++) d += q[e] * kc[(size_t)j * hd + e];
                    d *= scale;
                    if (d > mx) {
                        float r = expf(mx - d); /* 0 on the first key */
                        sum *= r;
                        for (int e = 0; e < hd; e++) o[e] *= r;
                        mx = d;
                    }
                    float p = expf(d - mx);
                    sum += p;
                    for (int e = 0; e < hd; e++) o[e] += p * vc[(size_t)j * hd + e];
                }
                const float inv = 1.0f / sum;
                for (int e = 0; e < hd; e++) o[e] *= inv;
            }
        }
    }
    return SNN_OK;
}

/* ---------------------------------------------------------------- SwiGLU */

snn_status snn_cpu_swiglu_forward(const snn_backend *be, size_t V, int F, const float *x, float *y) {
    (void)be;
    if (F <= 0) return snn_error(SNN_E_INVALID, "swiglu_forward: F must be positive (got %d)", F);
    if (V && (!x || !y)) return snn_error(SNN_E_INVALID, "swiglu_forward: NULL pointer");
    const long long Vl = (long long)V;
    const size_t Fz = (size_t)F;
#pragma omp parallel for schedule(static) if ((size_t)Vl * Fz >= 32768)
    for (long long v = 0; v < Vl; v++) {
        const float *a = x + (size_t)v * 2 * Fz, *u = a + Fz;
        float *o = y + (size_t)v * Fz;
        for (size_t j = 0; j < Fz; j++) o[j] = a[j] / (1.0f + expf(-a[j])) * u[j];
    }
    return SNN_OK;
}

snn_status snn_cpu_swiglu_backward(const snn_backend *be, size_t V, int F, const float *x, const float *dy,
                                   float *dx) {
    (void)be;
    if (F <= 0) return snn_error(SNN_E_INVALID, "swiglu_backward: F must be positive (got %d)", F);
    if (V && (!x || !dy || !dx)) return snn_error(SNN_E_INVALID, "swiglu_backward: NULL pointer");
    const long long Vl = (long long)V;
    const size_t Fz = (size_t)F;
#pragma omp parallel for schedule(static) if ((size_t)Vl * Fz >= 32768)
    for (long long v = 0; v < Vl; v++) {
        const float *a = x + (size_t)v * 2 * Fz, *u = a + Fz, *g = dy + (size_t)v * Fz;
        float *da = dx + (size_t)v * 2 * Fz, *du = da + Fz;
        for (size_t j = 0; j < Fz; j++) {
            float sg = 1.0f / (1.0f + expf(-a[j]));
            da[j] = g[j] * u[j] * sg * (1.0f + a[j] * (1.0f - sg));
            du[j] = g[j] * a[j] * sg;
        }
    }
    return SNN_OK;
}

/* ---------------------------------------------------------------- elastic bi-spike */

static inline float bis_fire(float v, float a) {
    float z = v / a;
    z = z > 1.0f ? 1.0f : (z < -1.0f ? -1.0f : z);
    return a * rintf(z);
}

snn_status snn_cpu_bispike_forward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *x,
                                   float *y, float *v) {
    (void)be;
    if (T < 0) return snn_error(SNN_E_INVALID, "bispike_forward: negative T (%d)", T);
    if (T && E && (!x || !y || !v)) return snn_error(SNN_E_INVALID, "bispike_forward: NULL pointer");
    const long long El = (long long)E;
    const float a = amp, d = decay;
#pragma omp parallel for schedule(static) if ((size_t)El * (size_t)T >= 32768)
    for (long long e = 0; e < El; e++) {
        float vv = 0.0f, sp = 0.0f;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)t * (size_t)El + (size_t)e;
            vv = (t == 0) ? x[i] : vv * d * (a - sp) + x[i];
            sp = bis_fire(vv, a);
            v[i] = vv;
            y[i] = sp;
        }
    }
    return SNN_OK;
}

snn_status snn_cpu_bispike_backward(const snn_backend *be, int T, size_t E, float decay, float amp, const float *v,
                                    const float *y, const float *dy, float *dx) {
    (void)be;
    if (T < 0) return snn_error(SNN_E_INVALID, "bispike_backward: negative T (%d)", T);
    if (T && E && (!v || !y || !dy || !dx)) return snn_error(SNN_E_INVALID, "bispike_backward: NULL pointer");
    const long long El = (long long)E;
    const float a = amp, d = decay;
#pragma omp parallel for schedule(static) if ((size_t)El * (size_t)T >= 32768)
    for (long long e = 0; e < El; e++) {
        float carry = 0.0f; /* dL/dv_{t+1} * dv_{t+1}/dv_t */
        for (int t = T - 1; t >= 0; t--) {
            size_t i = (size_t)t * (size_t)El + (size_t)e;
            float dv = (fabsf(v[i] / a) <= 1.0f ? dy[i] : 0.0f) + carry;
            dx[i] = dv;
            if (t > 0) carry = dv * d * (a - y[i - (size_t)El]); /* dv_t/dv_{t-1} = d (a - s_{t-1}) */
        }
    }
    return SNN_OK;
}

/* ---------------------------------------------------------------- LM loss */

/* The T reduction of one logit, recomputed where it is needed instead of being stored. */
static inline float zred(const float *l, int T, size_t stride, float inv) {
    float s = 0.0f;
    for (int t = 0; t < T; t++) s += l[(size_t)t * stride];
    return s * inv;
}

snn_status snn_cpu_lm_cross_entropy(const snn_backend *be, const float *logits, const int32_t *labels,
                                    const float *mask, int T, int N, int S, int V, int reduce_sum, double *token_loss,
                                    double *loss_sum, double *count, float *dlogits, float grad_scale) {
    (void)be;
    if (!logits || !labels || !token_loss || !loss_sum || !count)
        return snn_error(SNN_E_INVALID, "LM loss: logits, labels and outputs must not be NULL");
    if (T <= 0 || N <= 0 || S <= 0 || V <= 0)
        return snn_error(SNN_E_INVALID, "LM loss: T, N, S and V must be positive (got %d, %d, %d, %d)", T, N, S, V);
    const long long NS = (long long)N * S;
    for (long long i = 0; i < NS; i++)
        if (labels[i] < 0 || labels[i] >= V)
            return snn_error(SNN_E_INVALID, "LM loss: label %d at token %lld is outside [0, %d)", (int)labels[i], i,
                             V);
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
