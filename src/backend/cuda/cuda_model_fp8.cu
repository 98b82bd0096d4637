/* FP8 model training in the GPU runner: the GEMM modules the CPU's precision mode fp8 would
 * convert (src/precision/prepare.c: a Linear with in % 16 == 0 and out % 8 == 0, or such a
 * pointwise Conv1d) run real FP8 GEMMs; everything else runs as the runner's BF16 mode, as
 * the CPU's fp8 mode runs unconverted GEMMs in BF16.
 *
 * One converted module, as src/precision/prec_exec.c emulates it:
 *   forward   Y = round_bf16(Xq Wq^T + b)          X, W: E4M3
 *   dgrad     dX = round_bf16(dYq Wq)               dY: E5M2 (hybrid) or E4M3
 *   wgrad     dW = dYq^T Xq (FP32)                  db from the unquantised dY (FP32)
 * Spikes (the input of a module that follows a neuron in a Sequential) are E4M3 with scale 1,
 * no amax pass, and no amax recorded (the CPU's spike_fp8, on by default).
 *
 * Hopper FP8 GEMMs take both operands K-contiguous ("TN"), so every quantiser writes the
 * row-major codes and, when a backward GEMM reduces over the other dimension, the transposed
 * codes in the same pass. Per-tensor recipes pad the backward reduction dimensions (rows, out)
 * to multiples of 16 with zeros (planned once; the padding is never written), which changes
 * no sum. The block recipe uses snn_cuda_quantize_fp8_block (bit-identical to the CPU rule)
 * and needs rows, in and out multiples of 128 (checked at create).
 *
 * Scales live on the device, one slot per (module, operand): input 3i, weight 3i+1, output
 * gradient 3i+2. Current scaling: amax pass, scale kernel (snn_fp8_scale_from_amax's rule),
 * quantise. Delayed scaling: quantise with the slot's scale and max its amax into amax[slot]
 * (TE's amax_history[0]); after the optimizer step (the CPU's order in
 * snn_precision_backward) one kernel rolls the histories and computes the new scales
 * (snn_fp8_state_update's rule). The previous amaxes are a ring (the window max does not
 * depend on order); snn_cuda_model_fp8_state unrolls it into the CPU's layout.
 *
 * mxfp8 (1x32 / 32x1 blocks with E8M0 scales) is emulated exactly on any GPU, as the CPU
 * does: snn_cuda_mxfp8_qdq (cuda_mxfp8.cu) quantises each operand per the CPU's rule and
 * dequantises it into FP32 in the same pass, then FP32 GEMMs (TF32 off) multiply the
 * dequantised values, so only the summation order differs from the CPU. The usages are
 * prec_exec.c's: fprop X, W row-wise (along K); dgrad dY row-wise (along out), W column-wise
 * (along out); wgrad dY, X column-wise (along the rows). Spikes are multiplied as they are
 * (the CPU's spike_fp8); partial blocks are blocks of their own, as on the CPU. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_fp8_delayed.h"
#include "backend/cuda/cuda_model_internal.h"
#include "backend/cuda/cuda_mxfp8.h"

struct gm_f8 {
    int K, No, rows, L;          /* token-major GEMM: X [rows][K], W [No][K]; L tokens (Conv1d) */
    int R16, O16;                /* rows and No rounded up to 16 (per-tensor backward padding) */
    int spike, slot, conv;
    uint8_t *xq, *xqt, *wq, *wqt, *dyq, *dyqt;
    float *sx, *sxt, *sw, *swt, *sdy, *sdyt; /* block: cuBLASLt scale arrays */
    float *mxr, *mxc, *mwr, *mwc, *mdyr, *mdyc; /* mxfp8: dequantised row-/column-wise copies */
};

struct gm_fp8 {
    snn_fp8_recipe_params p;
    int nslots, n_mods;
    gnode **mods;                /* converted modules in model order */
    float *amax, *scale, *sinv, *hist, *one;
    int *pos;
    int ring;                    /* history_len - 1 (at least 1 allocated) */
};

static int is_block(const snn_cuda_model *g) { return g->f8->p.recipe == SNN_FP8_RECIPE_BLOCK; }
static int is_mx(const snn_cuda_model *g) { return g->f8->p.recipe == SNN_FP8_RECIPE_MXFP8; }
static int round16(int v) { return (v + 15) / 16 * 16; }

/* ---- kernels ---- */

/* Codes of a token-major [rows][K] view of src (L == 1: src is [rows][K]; else src is
 * [rows/L][K][L], a Conv1d activation) into q [rows][ldq] and/or qt [K][ldqt], with
 * q = sat(x · s) (s = *scale, or 1 without one); amax (may be NULL) max-ed with max|x|. */
template <typename Q>
__global__ void f8_quant_kernel(const float *__restrict__ src, int rows, int K, int L, uint8_t *q,
                                int ldq, uint8_t *qt, int ldqt, const float *scale, float *amax) {
    __shared__ uint8_t tile[32][33];
    __shared__ float red[8];
    const float s = scale ? *scale : 1.0f;
    const int r0 = blockIdx.x * 32, k0 = blockIdx.y * 32; /* rows on x: the long dimension */
    float mx = 0.0f;
    for (int j = threadIdx.y; j < 32; j += 8) {
        const int r = r0 + j, k = k0 + threadIdx.x;
        uint8_t code = 0;
        if (r < rows && k < K) {
            size_t idx = L == 1 ? (size_t)r * K + k : ((size_t)(r / L) * K + k) * L + r % L;
            float v = src[idx];
            mx = fmaxf(mx, fabsf(v)); /* NaN ignored, as the CPU's amax */
            code = Io<Q>::st(v * s).b;
            if (q) q[(size_t)r * ldq + k] = code;
        }
        tile[j][threadIdx.x] = code;
    }
    if (qt) {
        __syncthreads();
        for (int j = threadIdx.y; j < 32; j += 8) {
            const int k = k0 + j, r = r0 + threadIdx.x;
            if (k < K && r < rows) qt[(size_t)k * ldqt + r] = tile[threadIdx.x][j];
        }
    }
    if (!amax) return;
    mx = snn_warp_max(mx);
    const int t = threadIdx.y * 32 + threadIdx.x;
    if ((t & 31) == 0) red[t >> 5] = mx;
    __syncthreads();
    if (t == 0) {
        float m = red[0];
        for (int w = 1; w < 8; w++) m = fmaxf(m, red[w]);
        snn_atomic_max_pos(amax, m);
    }
}

/* Current scaling: snn_fp8_scale_from_amax (value_for_inf FLT_MAX) and 1/s. */
__global__ void f8_current_scale_kernel(const float *amax, float fmax, int pow2, float *scale,
                                        float *sinv) {
    const float a = *amax;
    float s = 1.0f;
    if (a != 0.0f && isfinite(a)) {
        s = __fdiv_rn(fmax, a);
        if (isinf(s)) s = FLT_MAX;
        if (pow2) s = __uint_as_float(__float_as_uint(s) & 0xFF800000u);
    }
    *scale = s;
    *sinv = __fdiv_rn(1.0f, s);
}

/* Delayed scaling after the step, one block per slot (snn_fp8_state_update, the rule in
 * cuda_fp8_delayed.h); slot % 3 == 2 holds a gradient (the backward format's maximum). */
__global__ void f8_delayed_update_kernel(float *amax, float *hist, int *pos, float *scale,
                                         float *sinv, int len, float fwd_max, float grad_max,
                                         float margin_factor, int most_recent) {
    const int slot = blockIdx.x;
    const float fmax = slot % 3 == 2 ? grad_max : fwd_max;
    if (snn_fp8_delayed_roll(slot, amax, hist, pos, len, most_recent, fmax, margin_factor, scale + slot))
        sinv[slot] = __fdiv_rn(1.0f, scale[slot]);
}

__global__ void f8_fill_kernel(float *x, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

/* y = round_bf16(y + bias) in place (the FP8 GEMM's output in the base precision) */
__global__ void f8_round_kernel(float *y, const float *bias, size_t n, int cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + (bias ? bias[i % (size_t)cols] : 0.0f);
        y[i] = __bfloat162float(__float2bfloat16_rn(v));
    }
}

/* db[o] += sum over b, l of dy[b][o][l] (Conv1d bias, one block per channel) */
__global__ void f8_conv_bias_grad_kernel(const float *dy, int B, int O, int L, float *db) {
    const int o = blockIdx.x;
    float s = 0.0f;
    for (int i = threadIdx.x; i < B * L; i += blockDim.x) {
        int b = i / L, l = i % L;
        s += dy[((size_t)b * O + o) * L + l];
    }
    __shared__ float red[32];
    s = snn_warp_sum(s);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += red[w];
        db[o] += t;
    }
}

static unsigned capped(snn_cuda_model *g, size_t n) {
    unsigned b = snn_grid(n, 256), cap = (unsigned)snn_cuda_sm_count(g->c) * 16u;
    return b < cap ? b : cap;
}

static snn_status fill(snn_cuda_model *g, float *x, size_t n, float v) {
    if (!x || !n) return SNN_OK;
    f8_fill_kernel<<<capped(g, n), 256, 0, snn_cuda_stream_of(g->c)>>>(x, n, v);
    SNN_CU_LAUNCHED("fp8 fill");
    return SNN_OK;
}

static snn_status round_bf16(snn_cuda_model *g, float *y, const float *bias, size_t n, int cols) {
    f8_round_kernel<<<capped(g, n), 256, 0, snn_cuda_stream_of(g->c)>>>(y, bias, n, cols);
    SNN_CU_LAUNCHED("fp8 output rounding");
    return SNN_OK;
}

/* ---- setup ---- */

static int count_and_mark(snn_cuda_model *g, gnode *n, gnode **out, int k) {
    if (n->kind == GK_SEQ || n->kind == GK_RES) {
        for (int i = 0; i < n->n_kids; i++) {
            /* the CPU's mark_spike_inputs: the previous child of the same Sequential is a neuron */
            if (n->kind == GK_SEQ && i > 0 && n->kids[i - 1]->kind == GK_NEURON) n->kids[i]->spike_in = 1;
            k = count_and_mark(g, n->kids[i], out, k);
        }
        return k;
    }
    int in = 0, outf = 0, conv1d = 0;
    if (n->kind == GK_LINEAR) {
        in = n->d.in_features;
        outf = n->d.out_features;
    } else if (n->kind == GK_CONV && !strcmp(snn_module_own_ops(n->m)->kind, "Conv1d")) {
        in = n->C;
        outf = n->O;
        conv1d = 1;
    } else {
        return k;
    }
    if (in % 16 || outf % 8) return k; /* stays BF16, as the CPU's conversion report says */
    if (out) {
        gm_f8 *f = (gm_f8 *)calloc(1, sizeof *f);
        n->f8 = f;
        if (f) {
            f->K = in;
            f->No = outf;
            f->conv = conv1d;
            f->L = conv1d ? n->P : 1;
            f->rows = conv1d ? g->B * n->P : (int)((size_t)g->B * n->in_numel / (size_t)in);
            f->R16 = round16(f->rows);
            f->O16 = round16(outf);
            f->spike = n->spike_in;
            f->slot = 3 * k;
        }
        out[k] = n;
    }
    return k + 1;
}

snn_status snn_gm_fp8_init(snn_cuda_model *g, const snn_precision_config *cfg_in) {
    snn_precision_config cfg = snn_precision_config_default();
    if (cfg_in) cfg = *cfg_in;
    else cfg.mode = SNN_PRECISION_FP8;
    if (cfg.mode != SNN_PRECISION_FP8)
        return snn_error(SNN_E_INVALID, "GPU model: compute f8e4m3 (FP8 training) needs a precision "
                         "config with mode fp8 (got %s)", snn_precision_mode_name(cfg.mode));
    /* neuron_storage/fwd/bwd: cuda_model_nprec.cu (snn_gm_nprec_init) */
    char name[256] = "?";
    int maj = 0, min = 0, sms = 0;
    SNN_TRY(snn_cuda_device_info(g->c, name, sizeof name, &maj, &min, &sms));
    gm_fp8 *f = (gm_fp8 *)calloc(1, sizeof *f);
    if (!f) return snn_error(SNN_E_NOMEM, "out of memory");
    g->f8 = f;
    SNN_TRY(snn_fp8_recipe_params_init(&f->p, &cfg, maj, min));
    /* mxfp8: the exact emulation (FP32 GEMMs of the dequantised operands) runs anywhere */
    if (f->p.recipe == SNN_FP8_RECIPE_MXFP8 && f->p.block_len != 32)
        return snn_error(SNN_E_UNSUPPORTED, "FP8 recipe mxfp8 on the GPU runs 32-element blocks "
                         "(got block length %d)", f->p.block_len);
    if (f->p.recipe == SNN_FP8_RECIPE_BLOCK && maj != 9)
        return snn_error(SNN_E_UNSUPPORTED,
                         "FP8 recipe block needs cuBLASLt's block-scaled GEMMs, which run on "
                         "compute capability 9.x; %s is sm_%d%d. Use delayed or current", name, maj, min);
    f->n_mods = count_and_mark(g, g->root, NULL, 0);
    if (f->n_mods == 0)
        return snn_error(SNN_E_UNSUPPORTED,
                         "precision='fp8' did not convert any model modules: FP8 needs a Linear with "
                         "in %% 16 == 0 and out %% 8 == 0, or a pointwise Conv1d with the same alignment");
    f->mods = (gnode **)calloc((size_t)f->n_mods, sizeof *f->mods);
    if (!f->mods) return snn_error(SNN_E_NOMEM, "out of memory");
    count_and_mark(g, g->root, f->mods, 0);
    for (int i = 0; i < f->n_mods; i++) {
        gm_f8 *q = f->mods[i]->f8;
        if (!q) return snn_error(SNN_E_NOMEM, "out of memory");
        if (is_block(g) && (q->rows % 128 || q->K % 128 || q->No % 128))
            return snn_error(SNN_E_UNSUPPORTED,
                             "module %s: the FP8 block recipe on the GPU needs rows (T*N%s), in and "
                             "out multiples of 128 (got rows %d, in %d, out %d); the CPU emulation "
                             "handles partial blocks, or use delayed/current on the GPU",
                             f->mods[i]->m->name[0] ? f->mods[i]->m->name : "(root)",
                             q->conv ? "*L" : " times the leading dims", q->rows, q->K, q->No);
    }
    f->nslots = 3 * f->n_mods;
    f->ring = f->p.recipe == SNN_FP8_RECIPE_DELAYED ? f->p.history_len - 1 : 0;
    return SNN_OK;
}

void snn_gm_fp8_free(snn_cuda_model *g) {
    if (!g->f8) return;
    free(g->f8->mods);
    free(g->f8);
    g->f8 = NULL;
}

/* Buffers of one converted module (measuring and assigning pass alike); the forward output
 * and the token-major scratch are the caller's business. */
static size_t f8_scratch_bytes(const gm_f8 *q) {
    return (size_t)q->rows * (size_t)(q->K > q->No ? q->K : q->No) * sizeof(float);
}

size_t snn_gm_fp8_plan_node(snn_cuda_model *g, gnode *n) {
    gm_f8 *q = n->f8;
    n->rows = q->rows;
    const size_t rows = (size_t)q->rows, K = (size_t)q->K, No = (size_t)q->No;
    if (is_mx(g)) {
        q->mxr = (float *)g->act.take(rows * K * 4);
        q->mxc = q->spike ? q->mxr : (float *)g->act.take(rows * K * 4); /* spikes: as they are */
        q->mwr = (float *)g->act.take(No * K * 4);
        q->mwc = (float *)g->act.take(No * K * 4);
        q->mdyr = (float *)g->act.take(rows * No * 4);
        q->mdyc = (float *)g->act.take(rows * No * 4);
        return q->conv ? f8_scratch_bytes(q) : 0;
    }
    if (is_block(g)) {
        q->xq = (uint8_t *)g->act.take(rows * K);
        q->xqt = (uint8_t *)g->act.take(rows * K);
        q->wq = (uint8_t *)g->act.take(No * K);
        q->wqt = (uint8_t *)g->act.take(No * K);
        q->dyq = (uint8_t *)g->act.take(rows * No);
        q->dyqt = (uint8_t *)g->act.take(rows * No);
        q->sx = (float *)g->act.take(snn_cuda_fp8_block_scale_count(0, q->rows, q->K) * 4);
        q->sxt = (float *)g->act.take(snn_cuda_fp8_block_scale_count(0, q->K, q->rows) * 4);
        q->sw = (float *)g->act.take(snn_cuda_fp8_block_scale_count(1, q->No, q->K) * 4);
        q->swt = (float *)g->act.take(snn_cuda_fp8_block_scale_count(1, q->K, q->No) * 4);
        q->sdy = (float *)g->act.take(snn_cuda_fp8_block_scale_count(0, q->rows, q->No) * 4);
        q->sdyt = (float *)g->act.take(snn_cuda_fp8_block_scale_count(0, q->No, q->rows) * 4);
    } else {
        q->xq = (uint8_t *)g->act.take(rows * K);
        q->xqt = (uint8_t *)g->act.take(K * (size_t)q->R16);
        q->wq = (uint8_t *)g->act.take(No * K);
        q->wqt = (uint8_t *)g->act.take(K * (size_t)q->O16);
        q->dyq = (uint8_t *)g->act.take(rows * (size_t)q->O16);
        q->dyqt = (uint8_t *)g->act.take(No * (size_t)q->R16);
    }
    return q->conv || is_block(g) ? f8_scratch_bytes(q) : 0;
}

void snn_gm_fp8_plan_model(snn_cuda_model *g) {
    gm_fp8 *f = g->f8;
    size_t ns = (size_t)f->nslots;
    f->amax = (float *)g->act.take(ns * 4);
    f->scale = (float *)g->act.take(ns * 4);
    f->sinv = (float *)g->act.take(ns * 4);
    f->hist = (float *)g->act.take(ns * (size_t)(f->ring > 0 ? f->ring : 1) * 4);
    f->pos = (int *)g->act.take(ns * sizeof(int));
    f->one = (float *)g->act.take(4);
}

/* The base state (after the arena was zeroed): scales 1, empty histories, unit scales for
 * block-scaled spike operands. */
snn_status snn_gm_fp8_reset(snn_cuda_model *g) {
    gm_fp8 *f = g->f8;
    SNN_TRY(fill(g, f->scale, (size_t)f->nslots, 1.0f));
    SNN_TRY(fill(g, f->sinv, (size_t)f->nslots, 1.0f));
    SNN_TRY(fill(g, f->one, 1, 1.0f));
    if (!is_block(g)) return SNN_OK;
    for (int i = 0; i < f->n_mods; i++) {
        gm_f8 *q = f->mods[i]->f8;
        if (!q->spike) continue;
        SNN_TRY(fill(g, q->sx, snn_cuda_fp8_block_scale_count(0, q->rows, q->K), 1.0f));
        SNN_TRY(fill(g, q->sxt, snn_cuda_fp8_block_scale_count(0, q->K, q->rows), 1.0f));
    }
    return SNN_OK;
}

/* ---- quantisation of one operand ---- */

/* Per-tensor: codes of the token-major view of src into q/qt; slot < 0: spikes (scale 1). */
static snn_status quant_tensor(snn_cuda_model *g, snn_dtype t, const float *src, int rows, int K,
                               int L, uint8_t *q, int ldq, uint8_t *qt, int ldqt, int slot) {
    gm_fp8 *f = g->f8;
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    const float *scale = NULL;
    float *amax = NULL;
    if (slot >= 0) {
        scale = f->scale + slot;
        if (f->p.recipe == SNN_FP8_RECIPE_CURRENT) {
            SNN_CU_TRY(cudaMemsetAsync(f->amax + slot, 0, sizeof(float), sm));
            SNN_TRY(snn_cuda_amax(g->c, SNN_F32, src, (size_t)rows * K, f->amax + slot));
            f8_current_scale_kernel<<<1, 1, 0, sm>>>(f->amax + slot, snn_fp8_max(t), f->p.pow2_scales,
                                                     f->scale + slot, f->sinv + slot);
            SNN_CU_LAUNCHED("fp8 current scale");
        } else {
            amax = f->amax + slot; /* delayed: this step's amax (history row 0) */
        }
    }
    dim3 grid((unsigned)((rows + 31) / 32), (unsigned)((K + 31) / 32)), block(32, 8);
    if (t == SNN_F8E4M3)
        f8_quant_kernel<snn_e4m3><<<grid, block, 0, sm>>>(src, rows, K, L, q, ldq, qt, ldqt, scale, amax);
    else
        f8_quant_kernel<snn_e5m2><<<grid, block, 0, sm>>>(src, rows, K, L, q, ldq, qt, ldqt, scale, amax);
    SNN_CU_LAUNCHED("fp8 quantise");
    return SNN_OK;
}

/* Block recipe: a row-major FP32 source (Conv1d activations go through a token-major copy
 * first). Spikes: codes with unit scales (the scale arrays were filled with 1 at reset). */
static snn_status quant_block(snn_cuda_model *g, snn_dtype t, int tiles, const float *src, int rows,
                              int K, uint8_t *q, float *qs, uint8_t *qt, float *qts, int spike) {
    if (spike) return quant_tensor(g, t, src, rows, K, 1, q, K, qt, rows, -1);
    return snn_cuda_quantize_fp8_block(g->c, t, tiles, g->f8->p.pow2_scales, SNN_F32, src, rows, K, q,
                                       qs, qt, qts);
}

static snn_status fp8_gemm(snn_cuda_model *g, int M, int N, int K, snn_dtype at, const void *A,
                           int lda, const void *Bm, int ldb, float *C, int ldc, const float *as,
                           const float *bs, snn_cuda_scale_mode am, snn_cuda_scale_mode bm) {
    snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, N, K, at, SNN_F8E4M3, SNN_F32, lda, ldb, ldc, 0);
    d.a_scale_mode = am;
    d.b_scale_mode = bm;
    return snn_cuda_gemm(g->c, &d, 1.0f, A, Bm, 0.0f, C, as, bs, NULL, NULL);
}

/* FP32 GEMM, TF32 off: exact products of the dequantised operands */
static snn_status f32_gemm(snn_cuda_model *g, int ta, int tb, int M, int N, int K, const float *A, int lda,
                           const float *Bm, int ldb, float *C, int ldc) {
    snn_cuda_gemm_desc d = snn_cuda_gd(ta, tb, M, N, K, SNN_F32, SNN_F32, SNN_F32, lda, ldb, ldc, 0);
    d.allow_tf32 = 0;
    return snn_cuda_gemm(g->c, &d, 1.0f, A, Bm, 0.0f, C, NULL, NULL, NULL, NULL);
}

/* ---- forward and backward of a converted module ---- */

snn_status snn_gm_fp8_forward(snn_cuda_model *g, gnode *n, int training) {
    gm_fp8 *f = g->f8;
    gm_f8 *q = n->f8;
    const int rows = q->rows, K = q->K, No = q->No;
    const snn_dtype e4 = SNN_F8E4M3;
    float *Y = q->conv ? (float *)g->scratch_a : n->y;
    if (is_mx(g)) {
        const snn_dtype ft = f->p.fwd_dtype;
        SNN_TRY(snn_cuda_mxfp8_qdq(g->c, ft, 0, n->x, rows, K, q->L, q->spike, q->mxr));
        if (training && !q->spike) SNN_TRY(snn_cuda_mxfp8_qdq(g->c, ft, 1, n->x, rows, K, q->L, 0, q->mxc));
        SNN_TRY(snn_cuda_mxfp8_qdq(g->c, ft, 0, n->w, No, K, 1, 0, q->mwr));
        SNN_TRY(f32_gemm(g, 0, 1, rows, No, K, q->mxr, K, q->mwr, K, Y, No));
    } else if (is_block(g)) {
        const float *X = n->x;
        if (q->conv && !q->spike) {
            SNN_TRY(snn_cuda_nchw_to_nhwc(g->c, SNN_F32, g->scratch_a, n->x, g->B, K, q->L));
            X = (const float *)g->scratch_a;
        }
        if (q->conv && q->spike) /* the quantiser reads the Conv1d layout itself */
            SNN_TRY(quant_tensor(g, e4, n->x, rows, K, q->L, q->xq, K, training ? q->xqt : NULL, rows, -1));
        else
            SNN_TRY(quant_block(g, e4, 0, X, rows, K, q->xq, q->spike ? NULL : q->sx,
                                training ? q->xqt : NULL, training && !q->spike ? q->sxt : NULL, q->spike));
        SNN_TRY(snn_cuda_quantize_fp8_block(g->c, e4, 1, f->p.pow2_scales, SNN_F32, n->w, No, K, q->wq,
                                            q->sw, training ? q->wqt : NULL, training ? q->swt : NULL));
        SNN_TRY(fp8_gemm(g, rows, No, K, e4, q->xq, K, q->wq, K, Y, No, q->sx, q->sw, SNN_CUDA_SCALE_VEC128,
                         SNN_CUDA_SCALE_BLK128));
    } else {
        const int xs = q->spike ? -1 : q->slot;
        SNN_TRY(quant_tensor(g, e4, n->x, rows, K, q->L, q->xq, K, training ? q->xqt : NULL, q->R16, xs));
        SNN_TRY(quant_tensor(g, e4, n->w, No, K, 1, q->wq, K, training ? q->wqt : NULL, q->O16, q->slot + 1));
        SNN_TRY(fp8_gemm(g, rows, No, K, e4, q->xq, K, q->wq, K, Y, No, xs < 0 ? f->one : f->sinv + xs,
                         f->sinv + q->slot + 1, SNN_CUDA_SCALE_TENSOR, SNN_CUDA_SCALE_TENSOR));
    }
    /* the FP8 GEMM writes its output in the BF16 base precision (bias added in FP32 first) */
    if (q->conv) return snn_cuda_nhwc_to_nchw_round(g->c, n->y, Y, n->b, g->B, No, q->L, SNN_BF16);
    return round_bf16(g, n->y, n->b, (size_t)rows * No, No);
}

snn_status snn_gm_fp8_backward(snn_cuda_model *g, gnode *n) {
    gm_fp8 *f = g->f8;
    gm_f8 *q = n->f8;
    const int rows = q->rows, K = q->K, No = q->No;
    const snn_dtype gt = f->p.bwd_dtype;
    cudaStream_t sm = snn_cuda_stream_of(g->c);
    /* bias gradient from the unquantised dY, in FP32 */
    if (n->gb) {
        if (q->conv) {
            f8_conv_bias_grad_kernel<<<(unsigned)No, 256, 0, sm>>>(n->gy, g->B, No, q->L, n->gb);
            SNN_CU_LAUNCHED("fp8 conv1d bias gradient");
        } else {
            SNN_TRY(snn_cuda_colsum(g->c, SNN_F32, n->gy, rows, No, 1.0f, n->gb));
        }
    }
    float *DX = q->conv ? (float *)g->scratch_a : n->gin;
    if (is_mx(g)) {
        /* the conv1d dY is read in its own layout (L); DX goes through scratch_a */
        if (n->gin) {
            SNN_TRY(snn_cuda_mxfp8_qdq(g->c, gt, 0, n->gy, rows, No, q->L, 0, q->mdyr));
            SNN_TRY(snn_cuda_mxfp8_qdq(g->c, f->p.fwd_dtype, 1, n->w, No, K, 1, 0, q->mwc));
            SNN_TRY(f32_gemm(g, 0, 0, rows, K, No, q->mdyr, No, q->mwc, K, DX, K));
        }
        SNN_TRY(snn_cuda_mxfp8_qdq(g->c, gt, 1, n->gy, rows, No, q->L, 0, q->mdyc));
        SNN_TRY(f32_gemm(g, 1, 0, No, K, rows, q->mdyc, No, q->mxc, K, n->gw, K));
    } else if (is_block(g)) {
        const float *DY = n->gy;
        if (q->conv) {
            SNN_TRY(snn_cuda_nchw_to_nhwc(g->c, SNN_F32, g->scratch_a, n->gy, g->B, No, q->L));
            DY = (const float *)g->scratch_a;
        }
        SNN_TRY(snn_cuda_quantize_fp8_block(g->c, gt, 0, f->p.pow2_scales, SNN_F32, DY, rows, No,
                                            n->gin ? q->dyq : NULL, n->gin ? q->sdy : NULL, q->dyqt, q->sdyt));
        /* wgrad: dW = dY^T X, both reduced over the rows (1x128 blocks of the transposes) */
        SNN_TRY(fp8_gemm(g, No, K, rows, gt, q->dyqt, rows, q->xqt, rows, n->gw, K, q->sdyt, q->sxt,
                         SNN_CUDA_SCALE_VEC128, SNN_CUDA_SCALE_VEC128));
        if (n->gin)
            SNN_TRY(fp8_gemm(g, rows, K, No, gt, q->dyq, No, q->wqt, No, DX, K, q->sdy, q->swt,
                             SNN_CUDA_SCALE_VEC128, SNN_CUDA_SCALE_BLK128));
    } else {
        const int ds = q->slot + 2, xs = q->spike ? -1 : q->slot;
        SNN_TRY(quant_tensor(g, gt, n->gy, rows, No, q->L, n->gin ? q->dyq : NULL, q->O16, q->dyqt,
                             q->R16, ds));
        SNN_TRY(fp8_gemm(g, No, K, q->R16, gt, q->dyqt, q->R16, q->xqt, q->R16, n->gw, K, f->sinv + ds,
                         xs < 0 ? f->one : f->sinv + xs, SNN_CUDA_SCALE_TENSOR, SNN_CUDA_SCALE_TENSOR));
        if (n->gin)
            SNN_TRY(fp8_gemm(g, rows, K, q->O16, gt, q->dyq, q->O16, q->wqt, q->O16, DX, K, f->sinv + ds,
                             f->sinv + q->slot + 1, SNN_CUDA_SCALE_TENSOR, SNN_CUDA_SCALE_TENSOR));
    }
    if (!n->gin) return SNN_OK;
    if (q->conv) return snn_cuda_nhwc_to_nchw_round(g->c, n->gin, DX, NULL, g->B, K, q->L, SNN_BF16);
    return round_bf16(g, n->gin, NULL, (size_t)rows * K, K);
}

/* After the optimizer step (delayed scaling only). */
snn_status snn_gm_fp8_after_step(snn_cuda_model *g) {
    gm_fp8 *f = g->f8;
    if (f->p.recipe != SNN_FP8_RECIPE_DELAYED) return SNN_OK;
    /* data parallel: the step's amax is the maximum over the replicas (the CPU's DDP hook
     * does the same), so histories and scales stay identical */
    const snn_cuda_collectives *dp = g->o.dp;
    if (dp) SNN_TRY(dp->allreduce(dp->ctx, f->amax, (size_t)f->nslots, SNN_CUDA_COLL_MAX, snn_cuda_stream_of(g->c)));
    f8_delayed_update_kernel<<<(unsigned)f->nslots, 256, 0, snn_cuda_stream_of(g->c)>>>(
        f->amax, f->hist, f->pos, f->scale, f->sinv, f->p.history_len, snn_fp8_max(f->p.fwd_dtype),
        snn_fp8_max(f->p.bwd_dtype), ldexpf(1.0f, -f->p.margin),
        f->p.algo == SNN_AMAX_COMPUTE_MOST_RECENT);
    SNN_CU_LAUNCHED("fp8 delayed scaling update");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_model_fp8_state(snn_cuda_model *g, int *n_modules, int *history_len,
                                               float *scales, float *histories) {
    if (!g) return snn_error(SNN_E_INVALID, "snn_cuda_model_fp8_state: NULL model");
    gm_fp8 *f = g->f8;
    if (n_modules) *n_modules = f ? f->n_mods : 0;
    if (history_len) *history_len = f && f->p.recipe == SNN_FP8_RECIPE_DELAYED ? f->p.history_len : 0;
    if (!f || (!scales && !histories)) return SNN_OK;
    const size_t ns = (size_t)f->nslots, rl = (size_t)(f->ring > 0 ? f->ring : 1);
    float *a = (float *)malloc(ns * 4 * 2 + ns * rl * 4);
    int *pos = (int *)malloc(ns * sizeof(int));
    if (!a || !pos) {
        free(a);
        free(pos);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    float *sc = a + ns, *ring = sc + ns;
    snn_status st = snn_cuda_synchronize(g->c);
    if (st == SNN_OK) st = snn_cuda_download(g->c, a, f->amax, ns * 4);
    if (st == SNN_OK) st = snn_cuda_download(g->c, sc, f->scale, ns * 4);
    if (st == SNN_OK) st = snn_cuda_download(g->c, ring, f->hist, ns * rl * 4);
    if (st == SNN_OK) st = snn_cuda_download(g->c, pos, f->pos, ns * sizeof(int));
    if (st == SNN_OK && scales) memcpy(scales, sc, ns * 4);
    if (st == SNN_OK && histories && f->p.recipe == SNN_FP8_RECIPE_DELAYED) {
        const int len = f->p.history_len;
        for (size_t s = 0; s < ns; s++) {
            float *h = histories + s * (size_t)len;
            h[0] = a[s];
            /* the ring's oldest entry is at pos: the CPU keeps [1..len-1] oldest first */
            for (int i = 0; i < len - 1; i++) h[1 + i] = ring[s * rl + (size_t)((pos[s] + i) % (len - 1))];
        }
    }
    free(a);
    free(pos);
    return st;
}

extern "C" snn_status snn_cuda_model_fp8_load_state(snn_cuda_model *g, int n_modules, int history_len,
                                                    const float *scales, const float *histories) {
    if (!g || !scales) return snn_error(SNN_E_INVALID, "snn_cuda_model_fp8_load_state: NULL argument");
    gm_fp8 *f = g->f8;
    if (!f) return snn_error(SNN_E_STATE, "FP8 state given to a GPU model that does not train in FP8");
    if (f->p.recipe != SNN_FP8_RECIPE_DELAYED) return SNN_OK; /* stateless recipes */
    const int len = f->p.history_len;
    if (n_modules != f->n_mods || history_len != len || !histories)
        return snn_error(SNN_E_FORMAT,
                         "FP8 state for %d modules with amax_history_len %d does not fit this model "
                         "(%d converted modules, delayed scaling with amax_history_len %d)",
                         n_modules, history_len, f->n_mods, len);
    const size_t ns = (size_t)f->nslots, rl = (size_t)(f->ring > 0 ? f->ring : 1);
    float *buf = (float *)calloc(ns * (3 + rl), sizeof(float));
    int *pos = (int *)calloc(ns, sizeof(int));
    if (!buf || !pos) {
        free(buf);
        free(pos);
        return snn_error(SNN_E_NOMEM, "out of memory");
    }
    float *a = buf, *sc = a + ns, *si = sc + ns, *ring = si + ns;
    snn_status st = SNN_OK;
    for (size_t s = 0; s < ns && st == SNN_OK; s++) {
        const float *h = histories + s * (size_t)len;
        if (!isfinite(scales[s]) || scales[s] <= 0.0f)
            st = snn_error(SNN_E_FORMAT, "FP8 scale %zu must be finite and > 0, got %g", s, (double)scales[s]);
        sc[s] = scales[s];
        si[s] = 1.0f / scales[s];
        a[s] = h[0];
        /* oldest first from ring position 0 (pos 0 = the oldest) */
        for (int i = 0; i < len - 1; i++) ring[s * rl + (size_t)i] = h[1 + i];
    }
    if (st == SNN_OK) st = snn_cuda_upload(g->c, f->amax, a, ns * 4);
    if (st == SNN_OK) st = snn_cuda_upload(g->c, f->scale, sc, ns * 4);
    if (st == SNN_OK) st = snn_cuda_upload(g->c, f->sinv, si, ns * 4);
    if (st == SNN_OK) st = snn_cuda_upload(g->c, f->hist, ring, ns * rl * 4);
    if (st == SNN_OK) st = snn_cuda_upload(g->c, f->pos, pos, ns * sizeof(int));
    if (st == SNN_OK) st = snn_cuda_synchronize(g->c);
    free(buf);
    free(pos);
    return st;
}
