/* FP8 quantisation on the CPU, exactly as the GPU recipes do it (reference fp8.md §2-4):
 * amax, scale from amax, saturating round-to-nearest-even casts, and the quantised GEMM
 * operand for every recipe (per-tensor delayed/current, 1x128 / 128x128 blocks with FP32
 * scales, 1x32 MX blocks with E8M0 scales). The dequantised output x_hat = q * d is what an
 * FP8 GEMM multiplies, so "qdq, then an FP32 GEMM" emulates it (exactly when the scales
 * are powers of two and the FP32 sums are exact; otherwise within FP32 rounding). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype_internal.h"
#include "core/error_internal.h"
#include "precision/fp8.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float snn_fp8_amax(const float *x, size_t n) {
    float m = 0.0f;
    /* fabsf(NaN) > m is false, so NaN is ignored like fmaxf does on the GPU; inf wins. */
#pragma omp parallel for reduction(max : m) schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

float snn_fp8_scale_from_amax(float amax, float fp8_max, int pow2, float value_for_inf) {
    if (amax == 0.0f || !isfinite(amax)) return 1.0f;
    float s = fp8_max / amax;
    if (isinf(s)) s = value_for_inf;
    /* Keep sign and exponent only: 2^floor(log2 s), so x*s and 1/s are exact. */
    if (pow2) s = bits_f32(f32_bits(s) & 0xFF800000u);
    return s;
}

static inline uint8_t encode(snn_dtype t, float v) {
    return t == SNN_F8E4M3 ? snn_f32_to_e4m3(v, 1) : snn_f32_to_e5m2(v, 1);
}
static inline float decode(snn_dtype t, uint8_t q) {
    return t == SNN_F8E4M3 ? snn_e4m3_to_f32(q) : snn_e5m2_to_f32(q);
}

/* One contiguous run: always saturating (TE's quantisers are SATFINITE, fp8.md §1.3). */
static void quantize_run(snn_dtype t, const float *x, size_t n, float s, float d, uint8_t *codes,
                         float *qdq) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * s;
        uint8_t q = encode(t, v);
        if (codes) codes[i] = q;
        if (qdq) qdq[i] = decode(t, q) * d;
    }
}

void snn_fp8_quantize(snn_dtype t, const float *x, size_t n, float scale, float scale_inv,
                      uint8_t *codes, float *qdq) {
    const size_t chunk = 4096;
    size_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 8)
    for (size_t c = 0; c < nchunks; c++) {
        size_t a = c * chunk, len = n - a < chunk ? n - a : chunk;
        quantize_run(t, x + a, len, scale, scale_inv, codes ? codes + a : NULL,
                     qdq ? qdq + a : NULL);
    }
}

/* Scale of one block from its amax. */
static inline void block_scale(const snn_fp8_recipe_params *p, float fmax, float vfi, float amax,
                               float *s, float *d) {
    if (p->recipe == SNN_FP8_RECIPE_MXFP8) {
        /* E8M0 X = 2^ceil(log2(amax / fmax)) (TE's rule, fp8.md §1.4); multiply by 1/X. */
        uint8_t e = snn_e8m0_from_amax(amax, fmax);
        *s = snn_e8m0_inv_scale(e);
        *d = snn_e8m0_to_f32(e);
    } else {
        *s = snn_fp8_scale_from_amax(amax, fmax, p->pow2_scales, vfi);
        *d = 1.0f / *s;
    }
}

#define TILE_CHUNK 64 /* tiles of one band handled together (stack arrays) */

/* Block recipes: tiles of br x bc over [rows, cols]. Work unit = (band of br rows, chunk
 * of up to TILE_CHUNK tiles of that band); each unit scans its rows in memory order
 * twice, once for the amaxes, once to quantise. Returns the largest block amax. */
static float quantize_blocks(const snn_fp8_recipe_params *p, snn_dtype t,
                             const snn_fp8_scale_layout *L, const float *x, int rows, int cols,
                             float *qdq, uint8_t *codes, float *scale_inv) {
    const float fmax = snn_fp8_max(t);
    const float vfi = (float)snn_dtype_max(p->hp_dtype);
    const int br = L->block_rows, bc = L->block_cols;
    const int nchunks = (L->grid_cols + TILE_CHUNK - 1) / TILE_CHUNK;
    const long long units = (long long)L->grid_rows * nchunks;
    float gmax = 0.0f;
#pragma omp parallel for reduction(max : gmax) schedule(static) if (units > 1 && (long long)rows * cols > (1 << 15))
    for (long long u = 0; u < units; u++) {
        int ti = (int)(u / nchunks), ch = (int)(u % nchunks);
        int r0 = ti * br, r1 = r0 + br < rows ? r0 + br : rows;
        int t0 = ch * TILE_CHUNK, t1 = t0 + TILE_CHUNK < L->grid_cols ? t0 + TILE_CHUNK : L->grid_cols;
        float amax[TILE_CHUNK], s[TILE_CHUNK], d[TILE_CHUNK];
        for (int k = 0; k < t1 - t0; k++) amax[k] = 0.0f;
        for (int r = r0; r < r1; r++) {
            const float *row = x + (size_t)r * cols;
            for (int k = 0; k < t1 - t0; k++) {
                int a = (t0 + k) * bc, b = a + bc < cols ? a + bc : cols;
                float m = amax[k];
                for (int c = a; c < b; c++) {
                    float v = fabsf(row[c]);
                    if (v > m) m = v; /* NaN ignored */
                }
                amax[k] = m;
            }
        }
        for (int k = 0; k < t1 - t0; k++) {
            block_scale(p, fmax, vfi, amax[k], &s[k], &d[k]);
            if (scale_inv) scale_inv[(size_t)ti * L->grid_cols + t0 + k] = d[k];
            if (amax[k] > gmax) gmax = amax[k];
        }
        for (int r = r0; r < r1; r++) {
            size_t off = (size_t)r * cols;
            for (int k = 0; k < t1 - t0; k++) {
                int a = (t0 + k) * bc, b = a + bc < cols ? a + bc : cols;
                quantize_run(t, x + off + a, (size_t)(b - a), s[k], d[k],
                             codes ? codes + off + a : NULL, qdq ? qdq + off + a : NULL);
            }
        }
    }
    return gmax;
}

float snn_fp8_quantize_blocks(const snn_fp8_recipe_params *p, snn_dtype t, const snn_fp8_scale_layout *L,
                              const float *x, int rows, int cols, float *qdq) {
    return quantize_blocks(p, t, L, x, rows, cols, qdq, NULL, NULL);
}

snn_status snn_fp8_prepare_operand(snn_fp8_tensor_state *st, snn_fp8_role role,
                                   const snn_fp8_recipe_params *p, snn_fp8_usage usage,
                                   const float *x, int rows, int cols, float *out_qdq,
                                   uint8_t *out_codes, float *out_scale_inv) {
    if (!p || !x) return snn_error(SNN_E_INVALID, "FP8 operand: recipe parameters and input are required");
    if ((unsigned)role >= SNN_FP8_ROLE_COUNT)
        return snn_error(SNN_E_INVALID, "FP8 operand: unknown role %d", (int)role);
    if (usage != SNN_FP8_ROWWISE && usage != SNN_FP8_COLWISE)
        return snn_error(SNN_E_INVALID, "FP8 operand: unknown usage %d", (int)usage);
    if (!out_qdq && !out_codes && !out_scale_inv)
        return snn_error(SNN_E_INVALID, "FP8 operand: no output requested");
    snn_dtype t = snn_fp8_role_dtype(p, role);
    if (st && (st->role != role || st->dtype != t))
        return snn_error(SNN_E_STATE, "FP8 operand: the state was made for another role or "
                         "format (state role %d, requested %d)", (int)st->role, (int)role);
    snn_fp8_scale_layout L;
    SNN_TRY(snn_fp8_scale_layout_of(p, role, usage, rows, cols, &L));
    size_t n = (size_t)rows * (size_t)cols;

    if (p->recipe == SNN_FP8_RECIPE_DELAYED || p->recipe == SNN_FP8_RECIPE_CURRENT) {
        float amax = snn_fp8_amax(x, n), s, d;
        if (p->recipe == SNN_FP8_RECIPE_DELAYED) {
            if (!st || !st->amax_history || st->history_len < 1)
                return snn_error(SNN_E_STATE, "FP8 delayed scaling needs the operand's state "
                                 "(snn_fp8_state_init with the delayed recipe)");
            /* The step quantises with the scale of earlier steps and records its amax. */
            s = st->scale;
            d = st->scale_inv;
            st->amax_history[0] = fmaxf(st->amax_history[0], amax);
        } else {
            s = snn_fp8_scale_from_amax(amax, snn_fp8_max(t), p->pow2_scales, FLT_MAX);
            d = 1.0f / s;
        }
        snn_fp8_quantize(t, x, n, s, d, out_codes, out_qdq);
        if (out_scale_inv) out_scale_inv[0] = d;
        if (st) st->last_amax = amax;
        return SNN_OK;
    }
    if (p->block_len <= 0)
        return snn_error(SNN_E_INVALID, "FP8 %s recipe needs a block length",
                         snn_fp8_recipe_name(p->recipe));
    float gmax = quantize_blocks(p, t, &L, x, rows, cols, out_qdq, out_codes, out_scale_inv);
    if (st) st->last_amax = gmax;
    return SNN_OK;
}

snn_status snn_fp8_qdq_gemm_operand(snn_fp8_tensor_state *st, snn_fp8_role role,
                                    const snn_fp8_recipe_params *p, const float *x, int rows,
                                    int cols, float *out_qdq) {
    if (!out_qdq) return snn_error(SNN_E_INVALID, "FP8 operand: out_qdq is required");
    return snn_fp8_prepare_operand(st, role, p, SNN_FP8_ROWWISE, x, rows, cols, out_qdq, NULL,
                                   NULL);
}
