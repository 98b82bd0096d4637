/* The operation table: what a device must provide so that modules written once run on it.
 *
 * A module's forward and backward touch their data only through these entries (r->be in
 * src/nn/module.h). Pointers are memory of the table's device: host memory for the CPU
 * table, device memory for the CUDA one. The CPU table (src/backend/cpu/) is the reference;
 * the CUDA table (src/backend/cuda/cuda_backend.cu) implements the same entries and is
 * tested entry by entry against it on random inputs (tests/cuda/test_cuda_backend.c).
 *
 * Conventions:
 *   - every entry returns snn_status and sets the message on failure (snn_last_error);
 *   - work is enqueued in order on the table's one stream; entries that return a value to
 *     the host (sumsq, nonfinite, the neuron gk, download) wait for it;
 *   - activations are FP32 arrays; a 16-bit or FP8 mode keeps values that are exactly
 *     representable in the narrower type in them (see snn_gemm.ab_type), so the CPU table
 *     computes exactly what a device computing in the narrow type does, up to summation order.
 *
 * An entry may be NULL where a backend does not provide it yet; a module kind that needs it
 * declares so (snn_module_ops.devices) and is refused when its model is placed on that
 * device, with the module's name. */
#ifndef SNN_BACKEND_H
#define SNN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/conv_geom.h" /* the convolution and pooling entries' geometry */
#include "snn/dtype.h"
#include "snn/error.h"
#include "snn/neuron.h"
#include "snn/precision.h"

typedef enum snn_device_type { SNN_DEVICE_CPU = 0, SNN_DEVICE_CUDA = 1 } snn_device_type;

/* Bits of snn_module_ops.devices: the devices a module kind runs on. */
#define SNN_DEVMASK(d) (1u << (unsigned)(d))
#define SNN_DEVMASK_ALL (SNN_DEVMASK(SNN_DEVICE_CPU) | SNN_DEVMASK(SNN_DEVICE_CUDA))

/* C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] (+ bias) + beta · C, row-major, FP32 storage.
 *   ab_type  SNN_F32: FP32 products (no TF32). SNN_F16 / SNN_BF16: every value of A and B is
 *            representable in that type (the caller rounded it); the backend may multiply in
 *            that type with FP32 accumulation, which gives the same products.
 *   bias     (may be NULL): C = alpha · op(A) op(B) + (beta · C + bias[j]) for every row: the
 *            bias joins the accumulator before the products (what a Linear layer does).
 *   c_round  epilogue: SNN_F32 none; SNN_F16 / SNN_BF16: C is rounded (RNE, overflow to inf)
 *            to that type after everything else. */
typedef struct snn_gemm {
    int trans_a, trans_b;
    int M, N, K;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb;
    float *C;
    int ldc;
    snn_dtype ab_type;
    const float *bias;
    snn_dtype c_round;
} snn_gemm;

/* One SGD / Adam / AdamW update of n FP32 values with the rules of src/optim/optimizer.c
 * (torch.optim, operation for operation). The scalars are the step's, computed on the host
 * in double and rounded once; a backend does exactly these rounded FP32 operations per
 * element (FMA where written), so every backend gives the same bits.
 *   SGD:  d = l2 && decay ? fma(w, wd, g) : g
 *         momentum 0:  w = fma(d, nlr, w)
 *         else         b = first ? d : fma(d, keep, b·mom); d = nesterov ? fma(b, mom, d) : b;
 *                      w = fma(d, nlr, w)
 *   Adam: g' = l2 && decay ? fma(w, wd, g) : g;  w' = decoupled && decay ? w·shrink : w
 *         m = fma(g', fc1, m·fb1);  v = fma(fc2·g', g', v·fb2)
 *         w = w' + neg_step·m / (sqrt(v) / bc2_sqrt + eps) */
typedef struct snn_optim_update {
    int adam;                      /* 0: SGD, 1: Adam or AdamW */
    float wd;
    int l2;                        /* L2 term in the gradient (SGD, Adam) */
    float nlr, mom, keep;          /* SGD: -lr, momentum, 1 - dampening */
    int nesterov, first;           /* SGD: Nesterov; first step (buffer = d) */
    float fb1, fc1, fb2, fc2, neg_step, bc2_sqrt, eps, shrink; /* Adam */
    int decoupled;                 /* AdamW's decay */
} snn_optim_update;

/* FP8 quantise-dequantise of one GEMM operand (the rules of snn_fp8_prepare_operand,
 * src/precision/fp8.h): x [rows][cols] row-major FP32 -> out [rows][cols] FP32 holding
 * decode(sat_rne(x · s)) · (1/s), what an FP8 GEMM multiplies. The scales:
 *   per-tensor (recipe delayed or current, block_rows = block_cols = 0):
 *     delayed: s = scale, 1/s = scale_inv as given (the operand's state, kept by the caller);
 *     current: s from this tensor's amax (TE's rule, pow2 as the recipe says);
 *   blocks (recipe block or mxfp8): one scale per block_rows x block_cols block from its own
 *     amax (block: TE's rule, overflow to the high-precision max; mxfp8: E8M0 powers of two).
 * *amax (host) receives max|x| (per tensor) or the largest block amax. */
typedef struct snn_fp8_qdq {
    snn_fp8_recipe recipe;         /* never AUTO */
    snn_dtype fp8;                 /* SNN_F8E4M3 or SNN_F8E5M2 */
    int rows, cols;
    int block_rows, block_cols;    /* 0, 0 per tensor */
    int pow2;                      /* scales rounded down to powers of two (current, block) */
    snn_dtype hp_dtype;            /* block: a scale that overflows becomes this type's max */
    float scale, scale_inv;        /* delayed */
    const float *x;
    float *out;
} snn_fp8_qdq;

typedef struct snn_backend snn_backend;

struct snn_backend {
    const char *name;            /* "cpu", "cuda" */
    snn_device_type device;
    void *ctx;                   /* the device context (snn_cuda * for CUDA), NULL on the CPU */

    /* ---- memory and streams ---- */
    /* Zeroed allocation of `bytes` (at least 256-byte aligned). */
    snn_status (*alloc)(const snn_backend *be, size_t bytes, void **out);
    void (*free)(const snn_backend *be, void *p);
    snn_status (*upload)(const snn_backend *be, void *dst, const void *host_src, size_t bytes);
    snn_status (*download)(const snn_backend *be, void *host_dst, const void *src, size_t bytes);
    snn_status (*copy)(const snn_backend *be, void *dst, const void *src, size_t bytes);
    snn_status (*fill)(const snn_backend *be, float *x, float value, size_t n);
    snn_status (*synchronize)(const snn_backend *be);

    /* ---- GEMM ---- */
    snn_status (*gemm)(const snn_backend *be, const snn_gemm *g);
    /* The FP32 product alone (modules not yet on the descriptor; CPU only). No context:
     * NULL on backends whose memory is not the host's. */
    void (*gemm_f32)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

    /* ---- elementwise ---- */
    /* dst[i] = round_to(t, src[i]) (RNE, overflow to inf); t F32 copies. dst may be src. */
    snn_status (*round)(const snn_backend *be, snn_dtype t, float *dst, const float *src, size_t n);
    /* dst[i] = s · src[i] (one FP32 multiply). dst may be src. */
    snn_status (*scale)(const snn_backend *be, float *dst, const float *src, float s, size_t n);
    /* dst[i] = a[i] + b[i] (one FP32 add; dst may be a or b). */
    snn_status (*add)(const snn_backend *be, float *dst, const float *a, const float *b, size_t n);
    /* y = x Φ(x) (exact GELU, erf form); dx = dy (Φ(x) + x φ(x)). */
    snn_status (*gelu_forward)(const snn_backend *be, const float *x, float *y, size_t n);
    snn_status (*gelu_backward)(const snn_backend *be, const float *x, const float *dy, float *dx, size_t n);

    /* ---- reductions ---- */
    /* out[j] += Σ_i x[i][j] over rows i in increasing order (FP32 adds, as a bias gradient). */
    snn_status (*colsum_add)(const snn_backend *be, const float *x, int rows, int cols, float *out);
    /* *out = Σ x[i]² in double (host value). */
    snn_status (*sumsq)(const snn_backend *be, const float *x, size_t n, double *out);
    /* *found = 1 if any x[i] is NaN or infinite (host value). */
    snn_status (*nonfinite)(const snn_backend *be, const float *x, size_t n, int *found);

    /* ---- FP8 ---- */
    snn_status (*fp8_qdq)(const snn_backend *be, const snn_fp8_qdq *q, float *amax);

    /* ---- neurons (the kernels of include/snn/neuron.h on [T][n] arrays) ---- */
    /* Plain FP32: spikes y, h_seq (may be NULL in inference), v_last [n] written; every
     * neuron starts from its reset value. */
    snn_status (*neuron_forward)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                 const float *x, float *y, float *h_seq, float *v_last);
    /* dx [T][n] written; *gk (host, may be NULL) receives PLIF's dL/dk. */
    snn_status (*neuron_backward)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                  const float *h_seq, const float *dy, float *dx, double *gk);
    /* Mixed precision (storage S, forward F, backward B; snn_neuron_forward_mp's rules). */
    snn_status (*neuron_forward_mp)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                    snn_dtype S, snn_dtype F, const float *x, float *y, float *h_seq,
                                    float *v_last);
    snn_status (*neuron_backward_mp)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                     snn_dtype S, snn_dtype F, snn_dtype B, const float *h_seq, const float *dy,
                                     float *dx, double *gk);

    /* ---- norms ---- */
    /* RMSNorm over V vectors of F: y = x / sqrt(mean(x²) + eps) · w; rstd [V] (double) saved.
     * Sums in double. */
    snn_status (*rmsnorm_forward)(const snn_backend *be, size_t V, int F, float eps, const float *x,
                                  const float *w, float *y, double *rstd);
    /* dx (may be NULL) written; dw += Σ_v dy · x̂ (vectors in increasing order, double). */
    snn_status (*rmsnorm_backward)(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                   const double *rstd, const float *dy, float *dx, float *dw);

    /* LayerNorm over V vectors of F (biased variance, in double): y = (x - μ) · rstd · w + b;
     * mean and rstd [V] (double) saved. Backward: dx (may be NULL) written; dw, db += the
     * sums over vectors (each feature walks the vectors in order). work: scratch of
     * layernorm_work_bytes(V, F) bytes on the device. */
    snn_status (*layernorm_forward)(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                                    const float *b, float *y, double *mean, double *rstd);
    snn_status (*layernorm_backward)(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                     const double *mean, const double *rstd, const float *dy, float *dx, float *dw,
                                     float *db, void *work);
    size_t (*layernorm_work_bytes)(const snn_backend *be, size_t V, int F);

    /* ---- optimizers ---- */
    /* One update of w [n] with gradient g. s0: SGD's momentum buffer or Adam's m; s1: Adam's
     * v (NULL otherwise). decay_mask [n] (1 = decay applies; may be NULL = everywhere).
     * *nonfinite (host) = 1 if any updated weight is NaN or infinite. */
    snn_status (*optim_update)(const snn_backend *be, const snn_optim_update *u, size_t n, float *w,
                               const float *g, float *s0, float *s1, const uint8_t *decay_mask,
                               int *nonfinite);

    /* ---- convolution and pooling (cpu_conv.c, cuda_table_conv.cu) ---- */
    /* Images are FP32 NCHW: a sample is x[C][H][W] (g->C, g->H, g->W), in_n = C*H*W floats,
     * the nb samples of a batch consecutive. A column matrix has K = C*kh*kw rows, `ld` floats
     * apart (ld >= nb*P, P = Ho*Wo); sample s occupies columns [s*P, (s+1)*P) and row
     * r = (c*kh + i)*kw + j holds x[c][oh*sh - ph + i][ow*sw - pw + j] at column s*P + oh*Wo + ow
     * (0 outside the image): a Conv2d is im2col, the gemm entry W[O][K] · col[K][nb*P] and
     * conv_scatter. A 1-D convolution is H = 1, kh = 1, sh = 1, ph = 0. Everything below is
     * exact (copies, comparisons, or the same FP32 operations in the same order on every
     * backend) except conv_bias_grad, whose double sum may run in another order. */
    /* col <- the unfolded columns of nb samples of x; every entry of the K rows in
     * [0, nb*P) is written (the columns of a row beyond nb*P are left alone). Exact. */
    snn_status (*im2col)(const snn_backend *be, const snn_conv_geom *g, int nb, const float *x, float *col,
                         size_t ld);
    /* The adjoint: dx (nb samples, overwritten) = for every pixel the sum of the column
     * entries that read it, added in increasing row r (tap) order starting from +0.0f
     * (0 + a first, as dx = 0; dx += ...); pixels no window reads become 0. Exact. */
    snn_status (*col2im)(const snn_backend *be, const snn_conv_geom *g, int nb, const float *col, size_t ld,
                         float *dx);
    /* The GEMM output of nb samples, src[O][ld] (sample s at columns s*P), into y[nb][O][P]:
     * y[s][o][p] = src[o*ld + s*P + p] + (bias ? bias[o] : 0.0f) (one FP32 add; without a bias
     * the + 0.0f still runs, so -0 becomes +0). src NULL: y[s][o][p] = bias[o] (a copy; bias
     * required), the start of a GEMM that accumulates onto its bias (beta 1). Exact. */
    snn_status (*conv_scatter)(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld,
                               const float *bias, float *y);
    /* The inverse layout change: dst[o*ld + s*P + p] = src[s][o][p] for nb samples (copies). */
    snn_status (*conv_gather)(const snn_backend *be, int nb, int O, size_t P, const float *src, float *dst,
                              size_t ld);
    /* A convolution's bias gradient over B samples dy[B][O][P]:
     * db[o] += (float)(Σ_b Σ_p dy[b][o][p]) with the sum in double. The CPU sums b then p in
     * increasing order; another backend may sum in another (fixed) order, so the double sums
     * differ by a few double ulps and the result by at most one FP32 rounding of them. */
    snn_status (*conv_bias_grad)(const snn_backend *be, size_t B, int O, size_t P, const float *dy, float *db);
    /* dst[i] += (Σ_g part[g*n + i]) for i < n: the FP32 sum starts at +0.0f and adds the
     * groups g = 0 .. groups-1 in order, then joins dst in one add (the grouped dW of a
     * convolution: partial sums of fixed sample groups). Exact. */
    snn_status (*sum_groups_add)(const snn_backend *be, int groups, size_t n, const float *part, float *dst);
    /* y[b][c][r] = x[b][r][c] for B matrices of R x C (copies; x and y must not overlap). */
    snn_status (*transpose)(const snn_backend *be, size_t B, int R, int C, const float *x, float *y);
    /* Pooling over g->C planes of g->H x g->W (every (sample, channel) plane of a batch: C is
     * the number of planes), kernel kh x kw, stride sh x sw, padding ph x pw with
     * ph <= kh/2, pw <= kw/2 (every window overlaps the image), floor mode: y[C][Ho][Wo].
     * Windows are clipped to the image and scanned row by row.
     * Max: y = the first maximum of the window (a NaN wins at once and propagates);
     * argmax[C][Ho][Wo] (int32) = its index ih*W + iw in its plane (a window of -inf only:
     * the first pixel's). Exact. */
    snn_status (*maxpool_forward)(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y,
                                  int32_t *argmax);
    /* dx (overwritten) = for every pixel the sum of dy over the outputs whose argmax it is,
     * added in increasing output order starting from +0.0f. Exact. */
    snn_status (*maxpool_backward)(const snn_backend *be, const snn_conv_geom *g, const float *dy,
                                   const int32_t *argmax, float *dx);
    /* Average (padding counts as 0 and in the divisor): acc = +0.0f plus the window's pixels
     * in scan order (FP32 adds), y = acc · (1.0f / (kh·kw)). Exact. */
    snn_status (*avgpool_forward)(const snn_backend *be, const snn_conv_geom *g, const float *x, float *y);
    /* dx (overwritten) = for every pixel, starting from +0.0f, the sum over the windows that
     * hold it, in increasing output order, of dy · (1.0f / (kh·kw)) (one FP32 multiply each,
     * then the add). Exact. */
    snn_status (*avgpool_backward)(const snn_backend *be, const snn_conv_geom *g, const float *dy, float *dx);
    /* ---- end of convolution and pooling ---- */

    /* ---- BatchNorm, dropout, token mean, spiking self-attention (cpu_layers.c, cuda_table_norm.cu) ---- */
    /* ---- end of BatchNorm, dropout, token mean, spiking self-attention ---- */

    /* ---- language-model ops (cpu_lm.c, cuda_table_lm.cu) ---- */
    /* ---- end of language-model ops ---- */
};

const snn_backend *snn_backend_cpu(void);

/* The CUDA table on GPU `device` with its own context and stream (built with SNN_HAVE_CUDA;
 * otherwise these refuse with SNN_E_UNSUPPORTED). Destroy frees the context. */
snn_status snn_backend_cuda_create(int device, snn_backend **out);
void snn_backend_cuda_destroy(snn_backend *be);

#endif
