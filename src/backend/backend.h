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
 *            to that type after everything else.
 *   a_store, b_store, c_store  how A, B and C are stored: SNN_F32 (the default: floats) or
 *            ab_type itself (16-bit values of that type; a backend with gemm_rounds only, see
 *            snn_backend). A 16-bit C is written once, rounded (RNE) from the FP32 result, so
 *            it needs beta = 0 and holds what c_round = ab_type gives. A precision wrapper
 *            keeps such a copy of a weight so that the forward's conversion also serves the
 *            backward, and activations between two 16-bit modules stay 16-bit.
 *   a_zero_pad  a 16-bit A whose rows (lda apart, a multiple of 8) hold zeros from the end of
 *            its contiguous extent up to the next multiple of 8 (the LM loss's gradient rows):
 *            a device that pads unaligned operands with zeros may read it in place.
 *   c_zero_pad  a 16-bit C whose rows (ldc apart) have room up to the next multiple of 8 past
 *            N: a device may write zeros there (it then runs the product on aligned extents).
 *   bias_store  how bias is stored: SNN_F32 (the default), or ab_type with a 16-bit C of that
 *            type (a backend with gemm_rounds only): the bias's values are that type's, as a
 *            16-bit GEMM module rounds its bias (prec_exec.c), and a device adds them in its
 *            epilogue (cuBLASLt takes no FP32 bias with a 16-bit output). */
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
    snn_dtype a_store, b_store, c_store;
    int a_zero_pad;
    int c_zero_pad;
    snn_dtype bias_store;
    /* FP8 codes (a_store and b_store SNN_F8E4M3 / SNN_F8E5M2, on a table with fp8_codes; not
     * both E5M2): A and B hold one byte a value with K contiguous (trans_a 0, trans_b 1: the
     * layout Hopper's FP8 GEMMs take), lda and ldb multiples of 16, K a multiple of 16 (pad
     * with zero codes), C FP32 (c_round as usual), ab_type the A type. The product is the
     * GEMM of the dequantised operands: alpha · a_scale[0] · b_scale[0] · Σ_k decode(a)·decode(b),
     * FP32 accumulation (within the GEMM bound of the FP32 GEMM of fp8_qdq's outputs).
     * a_scale / b_scale: device FP32 (snn_fp8_codes.sinv). */
    const float *a_scale, *b_scale;
} snn_gemm;

/* One SGD / Adam / AdamW update of n FP32 values with the rules of src/optim/optimizer.c
 * (torch.optim, operation for operation). The scalars are the step's, computed on the host
 * in double and rounded once; a backend does exactly these rounded FP32 operations per
 * element (FMA where written), so every backend gives the same bits.
 *   First, with gscale != 1 (the clip's coefficient): g = gscale·g, one rounded product —
 *   the value a scaling pass over the gradients would have stored, without that pass; the
 *   gradient array itself is not written.
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
    float gscale;                  /* the gradient's factor (exactly 1: as it is) */
    const struct snn_optim_copy *copies; /* host array (may be NULL): see snn_optim_copy */
    int n_copies;
} snn_optim_update;

/* A copy of the updated weights w[off, off + n) that the update writes as it goes (a
 * precision wrapper's 16-bit weight and bias copies, which the next forward would otherwise
 * convert in a pass of its own): dst16[i] = round_t(w[off + i]) stored as t, and dst32[i] the
 * same value as a float (either may be NULL); t is F16 or BF16, RNE with overflow to inf: what
 * cast and round write from the updated weights. Copies are sorted by off and do not overlap;
 * n_copies >= 0, and copies is not NULL when n_copies > 0.
 * Written whether or not a weight is finite. */
typedef struct snn_optim_copy {
    size_t off, n;
    snn_dtype t;
    void *dst16;
    float *dst32;
} snn_optim_copy;
/* SNN_E_INVALID (with `what` in the message) unless copies [k] follow these rules over n
 * weights (src/backend/optim_copy.c; every table's optim_update and optim_step call it). */
snn_status snn_optim_copies_check(const char *what, const snn_optim_copy *copies, int k, size_t n);

/* The training step with its values on the device (src/train/step.c): the loss, the gradient
 * norm, the clip, the skip and non-finite flags and the step's scalars stay in the device
 * memory these entries read and write, so that a step runs without the host in between (one
 * graph on a table with graphs) and the host reads one small block at its end.
 *
 * class_loss: the losses of include/snn/loss.h (src/backend/class_loss_body.h, one body for
 * both tables, the same bits): kind 0 cross-entropy of the mean over T, 1 the squared error of
 * the rate. labels [N] int32 in [0, C) (the caller checked them). dx [T][N][C] may be NULL.
 * work [2N] doubles of scratch. res[0] = the loss (the samples' losses summed in increasing n,
 * divided by N, or N·C for the MSE), res[1] = the number of samples whose first argmax is the
 * label. */
typedef struct snn_class_loss {
    int kind;
    const float *x;
    const int32_t *labels;
    int T, N, C;
    float *dx;
    double *work;
    double *res;
} snn_class_loss;

/* optim_step: optim_update (the same rules and bits) with the step's scalars in device memory:
 *   u        the update's scalars (device; its gscale, copies and n_copies are ignored), adam
 *            the host's copy of u->adam;
 *   sumsq    Σ g² (device, from sumsq_to; may be NULL): the gradient's norm is (float)√sumsq,
 *            written to *norm (device; may be NULL) and, with max_norm >= 0 and a finite norm,
 *            the clip: gscale = max_norm / (norm + 1e-6f) where that is below 1
 *            (torch.nn.utils.clip_grad_norm_; optim_step_body.h), else 1; a negative
 *            max_norm only measures;
 *   skip     (device; may be NULL) nonzero: no update at all (FP16's overflow);
 *   copies   as snn_optim_update's (host array);
 *   nonfinite (device int): set to 1 if an updated weight is NaN or infinite, else 0. */
typedef struct snn_optim_step {
    const snn_optim_update *u;
    int adam;                /* the host's copy of u->adam (the state it needs: s0 and s1) */
    const double *sumsq;
    float max_norm;
    const int *skip;
    size_t n;
    float *w;
    const float *g;
    float *s0, *s1;
    const uint8_t *decay_mask;
    const snn_optim_copy *copies;
    int n_copies;
    int *nonfinite;
    float *norm;
} snn_optim_step;

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

/* FP8 codes of one GEMM operand with one per-tensor scale (recipes delayed and current): what
 * an FP8 GEMM (snn_gemm.a_scale) reads, the codes of fp8_qdq's values with the same scale.
 * x [rows][cols] row-major FP32 (device). The scale s: current = 1: snn_fp8_scale_from_amax of
 * this tensor's amax (value_for_inf FLT_MAX, pow2), computed on the device; current = 0: the
 * given scale / scale_inv (delayed scaling's state; 1, 1 for spikes). Outputs (device; any
 * but sinv may be NULL):
 *   q  [rows][ldq] (ldq >= cols): sat_rne(x·s), columns cols..ldq-1 written 0;
 *   qt [cols][ldqt] (ldqt >= rows): the transpose, columns rows..ldqt-1 written 0;
 *   sinv[0] = 1/s (current: IEEE division; else scale_inv as given);
 *   amax[0] = max(amax[0], max|x|) (NaN ignored, as the CPU's amax), no host round trip. */
typedef struct snn_fp8_codes {
    snn_dtype fp8;                 /* SNN_F8E4M3 or SNN_F8E5M2 */
    int rows, cols;
    const float *x;
    int current, pow2;
    float scale, scale_inv;        /* current = 0 */
    void *q;
    int ldq;
    void *qt;
    int ldqt;
    float *sinv, *amax;
} snn_fp8_codes;

typedef struct snn_backend snn_backend;

struct snn_backend {
    const char *name;            /* "cpu", "cuda" */
    snn_device_type device;
    int index;                   /* the device's number ("cuda:N"); 0 on the CPU */
    void *ctx;                   /* the device context (snn_cuda * for CUDA), NULL on the CPU */
    /* 1: gemm multiplies FP32 operands rounded to ab_type itself (RNE, what the caller's
     * rounding would give) and takes a 16-bit B (snn_gemm.b_store); the caller need not round
     * A and B first. 0 (the CPU table): operands arrive rounded, B is FP32. */
    int gemm_rounds;

    /* ---- memory and streams ---- */
    /* Zeroed allocation of `bytes` (at least 256-byte aligned). */
    snn_status (*alloc)(const snn_backend *be, size_t bytes, void **out);
    void (*free)(const snn_backend *be, void *p);
    snn_status (*upload)(const snn_backend *be, void *dst, const void *host_src, size_t bytes);
    snn_status (*download)(const snn_backend *be, void *host_dst, const void *src, size_t bytes);
    snn_status (*copy)(const snn_backend *be, void *dst, const void *src, size_t bytes);
    snn_status (*fill)(const snn_backend *be, float *x, float value, size_t n);
    snn_status (*synchronize)(const snn_backend *be);
    /* Page-locked host memory the device copies at full speed (a model's input buffer);
     * NULL on the CPU, where plain memory is what there is. */
    snn_status (*alloc_host)(const snn_backend *be, size_t bytes, void **out);
    void (*free_host)(const snn_backend *be, void *p);
    /* SNN_OK when [p, p + bytes) is memory of this table's device (a caller's pointer is
     * checked before an entry reads it); NULL on the CPU, where every pointer is host memory. */
    snn_status (*check_ptr)(const snn_backend *be, const void *p, size_t bytes);

    /* ---- graphs (NULL on a table without them: the CPU) ----
     * A graph is the device work of a region of host code (a model's forward or backward),
     * recorded once and replayed with one launch (src/nn/model_graph.c decides when).
     * graph_begin starts recording the table's stream; graph_end stops, and with keep returns
     * the instantiated graph in *graph. A region that synchronises, allocates or copies from
     * pageable memory cannot be recorded: graph_end then fails, nothing of the region ran, and
     * the caller runs it again eagerly. graph_free waits for the stream first.
     * dry(be, 1): until dry(be, 0), every entry that enqueues device work returns SNN_OK and
     * enqueues nothing, and every entry that would bring a device value to the host, wait, or
     * allocate fails: the host pass of a region whose device work a graph replays (host
     * bookkeeping runs exactly as eagerly). dry(be, 0) fails if work reached the stream
     * meanwhile anyway (a table entry that dry mode does not cover: a bug of the table).
     * generation: bumped whenever memory a recorded graph may point at moves (the table's
     * workspace growing); a graph recorded at another generation must not run. */
    snn_status (*graph_begin)(const snn_backend *be);
    snn_status (*graph_end)(const snn_backend *be, int keep, void **graph);
    snn_status (*graph_launch)(const snn_backend *be, void *graph);
    void (*graph_free)(const snn_backend *be, void *graph);
    snn_status (*dry)(const snn_backend *be, int on);
    uint64_t (*generation)(const snn_backend *be);

    /* ---- GEMM ---- */
    snn_status (*gemm)(const snn_backend *be, const snn_gemm *g);
    /* The FP32 product alone (modules not yet on the descriptor; CPU only). No context:
     * NULL on backends whose memory is not the host's. */
    void (*gemm_f32)(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

    /* ---- elementwise ---- */
    /* dst[i] = round_to(t, src[i]) (RNE, overflow to inf); t F32 copies. dst may be src. */
    snn_status (*round)(const snn_backend *be, snn_dtype t, float *dst, const float *src, size_t n);
    /* dst [n] of type t (F32, F16 or BF16 storage) = src[i] rounded to t (RNE, overflow to inf). */
    snn_status (*cast)(const snn_backend *be, snn_dtype t, void *dst, const float *src, size_t n);
    /* dst[i] = s · src[i] (one FP32 multiply). dst may be src. */
    snn_status (*scale)(const snn_backend *be, float *dst, const float *src, float s, size_t n);
    /* dst[i] = a[i] + b[i] (one FP32 add; dst may be a or b). */
    snn_status (*add)(const snn_backend *be, float *dst, const float *a, const float *b, size_t n);
    /* dst[i] = a[i] + round_to(t, b[i]) (b rounded RNE to t, overflow to inf, then one FP32
     * add; t F32: add). dst may be a or b. A residual connection whose branch ends in a 16-bit
     * GEMM module: the module's output rounding and the sum in one pass (prec_store.c). */
    snn_status (*add_rounded)(const snn_backend *be, snn_dtype t, float *dst, const float *a, const float *b,
                              size_t n);
    /* y = x Φ(x) (exact GELU, erf form); dx = dy (Φ(x) + x φ(x)). */
    snn_status (*gelu_forward)(const snn_backend *be, const float *x, float *y, size_t n);
    snn_status (*gelu_backward)(const snn_backend *be, const float *x, const float *dy, float *dx, size_t n);
    /* The same with typed storage (a 16-bit boundary on either side, snn_module.in_store /
     * out_store): x and dx stored as xt, y and dy as yt (F32, F16 or BF16); the arithmetic is
     * gelu_forward / gelu_backward's on the widened values, each result rounded (RNE) to its
     * storage. NULL on a table without 16-bit storage (the CPU). */
    snn_status (*gelu_forward_io)(const snn_backend *be, snn_dtype xt, snn_dtype yt, const void *x, void *y,
                                  size_t n);
    snn_status (*gelu_backward_io)(const snn_backend *be, snn_dtype xt, snn_dtype yt, const void *x, const void *dy,
                                   void *dx, size_t n);

    /* ---- reductions ---- */
    /* out[j] += Σ_i x[i][j] (FP32 adds, a bias gradient) in one order on every backend, the
     * BatchNorm sums' shape: 32 lane partials per column (lane l adds the rows i ≡ l mod 32
     * in increasing i, from 0), then the halving tree a[l] += a[l + h] for h = 16, 8, 4, 2,
     * 1, then out[j] += a[0]. A GPU block of 32 columns x 32 lanes computes exactly this with
     * coalesced loads: the CPU and CUDA tables give the same bits. */
    snn_status (*colsum_add)(const snn_backend *be, const float *x, int rows, int cols, float *out);
    /* colsum_add of x stored as t (F16, BF16, or E4M3: spike codes): the same sums of the stored values. */
    snn_status (*colsum16_add)(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out);
    /* *out = Σ x[i]² in double (host value). */
    snn_status (*sumsq)(const snn_backend *be, const float *x, size_t n, double *out);
    /* *found = 1 if any x[i] is NaN or infinite (host value). */
    snn_status (*nonfinite)(const snn_backend *be, const float *x, size_t n, int *found);

    /* ---- FP8 ---- */
    snn_status (*fp8_qdq)(const snn_backend *be, const snn_fp8_qdq *q, float *amax);
    /* snn_fp8_codes (above), stream-ordered, no host wait; NULL where the GEMM takes no FP8
     * codes (the CPU, which multiplies fp8_qdq's values in FP32: the exact reference). */
    snn_status (*fp8_codes)(const snn_backend *be, const snn_fp8_codes *q);

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

    /* Typed activations (may be NULL): x, the spikes y, dy and dx stored as io (F16 or BF16),
     * h_seq FP32. The values are neuron_forward's / neuron_backward's on the same values held
     * in FP32 arrays (spikes are exact in io), dx rounded to io (RNE). gk: PLIF only. */
    snn_status (*neuron_forward_io)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                    snn_dtype io, const void *x, void *y, float *h_seq, float *v_last);
    snn_status (*neuron_backward_io)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                     snn_dtype io, const float *h_seq, const void *dy, void *dx, double *gk);
    /* neuron_forward_io on x_i = round_io(bias[i % period] + p_i): p is FP32 (the product of a
     * Linear that left its bias and its rounding to this entry, prec_store.c), the value the
     * neuron sees is that Linear's rounded output exactly. period divides n. The spikes y are
     * stored as sp: io, F32, or E4M3 codes (1.0 is 0x38: the codes an FP8 GEMM reads for
     * spikes at unit scale). NULL where the table has no typed io (the CPU). */
    snn_status (*neuron_forward_io_bias)(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                         snn_dtype io, snn_dtype sp, const float *p, const float *bias, size_t period,
                                         void *y, float *h_seq, float *v_last);

    /* ---- norms ---- */
    /* RMSNorm over V vectors of F: y = x / sqrt(mean(x²) + eps) · w; rstd [V] (double) saved.
     * Sums in double. */
    snn_status (*rmsnorm_forward)(const snn_backend *be, size_t V, int F, float eps, const float *x,
                                  const float *w, float *y, double *rstd);
    /* dx (may be NULL) written; dw += Σ_v dy · x̂ (vectors in increasing order, double). */
    snn_status (*rmsnorm_backward)(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                   const double *rstd, const float *dy, float *dx, float *dw);

    /* LayerNorm over V vectors of F (biased variance, in double): y = (x - μ) · rstd · w + b;
     * mean and rstd [V] (double) saved. Backward: dx (may be NULL) written, plus dx_add when
     * that is not NULL (dx = dx_add + the gradient, one FP32 add after its rounding; dx_add,
     * a residual's skip gradient, does not overlap dx); dw, db += the sums over vectors (each feature
     * walks the vectors in order). work: scratch of layernorm_work_bytes(V, F) bytes on the
     * device. */
    snn_status (*layernorm_forward)(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                                    const float *b, float *y, double *mean, double *rstd);
    snn_status (*layernorm_backward)(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                     const double *mean, const double *rstd, const float *dy, float *dx,
                                     const float *dx_add, float *dw, float *db, void *work);
    /* The same with y and dy stored as yt (F32, F16 or BF16; y rounded to it, RNE): a 16-bit
     * boundary after the norm (snn_module.out_store). x and dx stay FP32. NULL on a table
     * without 16-bit storage (the CPU). */
    snn_status (*layernorm_forward_io)(const snn_backend *be, snn_dtype yt, size_t V, int F, float eps,
                                       const float *x, const float *w, const float *b, void *y, double *mean,
                                       double *rstd);
    snn_status (*layernorm_backward_io)(const snn_backend *be, snn_dtype yt, size_t V, int F, const float *x,
                                        const float *w, const double *mean, const double *rstd, const void *dy,
                                        float *dx, const float *dx_add, float *dw, float *db, void *work);
    size_t (*layernorm_work_bytes)(const snn_backend *be, size_t V, int F);

    /* ---- optimizers ---- */
    /* One update of w [n] with gradient g. s0: SGD's momentum buffer or Adam's m; s1: Adam's
     * v (NULL otherwise). decay_mask [n] (1 = decay applies; may be NULL = everywhere).
     * *nonfinite (host) = 1 if any updated weight is NaN or infinite. */
    snn_status (*optim_update)(const snn_backend *be, const snn_optim_update *u, size_t n, float *w,
                               const float *g, float *s0, float *s1, const uint8_t *decay_mask,
                               int *nonfinite);

    /* ---- the training step with device values (snn_class_loss, snn_optim_step above;
     * cpu_step.c, cuda_step.cu). Stream-ordered, no host wait: a graph can hold them. ---- */
    /* Copy `bytes` from page-locked host memory (alloc_host) to the device, in stream order:
     * src must not change until the stream has passed the copy (a recorded copy reads it when
     * its graph runs). */
    snn_status (*upload_async)(const snn_backend *be, void *dst, const void *host_src, size_t bytes);
    snn_status (*class_loss)(const snn_backend *be, const snn_class_loss *q);
    /* *out (device) = Σ x[i]², sumsq's value and order, left on the device. */
    snn_status (*sumsq_to)(const snn_backend *be, const float *x, size_t n, double *out);
    /* *flag (device int) = 1 if any x[i] is NaN or infinite, else 0. */
    snn_status (*nonfinite_to)(const snn_backend *be, const float *x, size_t n, int *flag);
    snn_status (*optim_step)(const snn_backend *be, const snn_optim_step *s);

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
    /* im2col with the columns stored in t (SNN_F16 / SNN_BF16, RNE from the FP32 values):
     * exactly the cast of what im2col writes, so a 16-bit GEMM (b_store = t) reads it without a
     * conversion pass. NULL on a backend without gemm_rounds (the CPU). */
    snn_status (*im2col16)(const snn_backend *be, snn_dtype t, const snn_conv_geom *g, int nb, const float *x,
                           void *col, size_t ld);
    /* The adjoint: dx (nb samples, overwritten) = for every pixel the sum of the column
     * entries that read it, added in increasing row r (tap) order starting from +0.0f
     * (0 + a first, as dx = 0; dx += ...); pixels no window reads become 0. Exact. */
    snn_status (*col2im)(const snn_backend *be, const snn_conv_geom *g, int nb, const float *col, size_t ld,
                         snn_dtype round, float *dx);
    /* The GEMM output of nb samples, src[O][ld] (sample s at columns s*P), into y[nb][O][P]:
     * y[s][o][p] = src[o*ld + s*P + p] + (bias ? bias[o] : 0.0f) (one FP32 add; without a bias
     * the + 0.0f still runs, so -0 becomes +0). src NULL: y[s][o][p] = bias[o] (a copy; bias
     * required), the start of a GEMM that accumulates onto its bias (beta 1). Exact.
     * col2im and conv_scatter take `round`: SNN_F32 none; SNN_F16 / SNN_BF16: every value
     * written is rounded (RNE, overflow to inf) to that type last, what a 16-bit module's
     * output rounding would do in a pass of its own. */
    snn_status (*conv_scatter)(const snn_backend *be, int nb, int O, size_t P, const float *src, size_t ld,
                               const float *bias, snn_dtype round, float *y);
    /* The inverse layout change: dst[o*ld + s*P + p] = src[s][o][p] for nb samples (copies). */
    snn_status (*conv_gather)(const snn_backend *be, int nb, int O, size_t P, const float *src, float *dst,
                              size_t ld);
    /* conv_gather with dst stored in t (RNE), the A operand of a 16-bit dW GEMM; src stored as
     * src_t (SNN_F32, or t). NULL on the CPU. */
    snn_status (*conv_gather16)(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, snn_dtype src_t,
                                const void *src, void *dst, size_t ld);
    /* conv_scatter with round = t (SNN_F16 / SNN_BF16) and y stored in t: a convolution's
     * output kept 16-bit for the module after it (a BatchNorm with batchnorm_x16), the same
     * values. conv_gather16's src_t = t reads such a gradient (copies); SNN_F32 converts as
     * above. NULL on the CPU. */
    snn_status (*conv_scatter16)(const snn_backend *be, snn_dtype t, int nb, int O, size_t P, const float *src,
                                 size_t ld, const float *bias, void *y);
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
    /* BatchNorm over x [B][C][S] (channel c of row i is x[(i·C + c)·S + k], k < S). Every sum
     * is in double and runs in one order on every backend: per (row, channel) 32 lane partials,
     * partial l adding the values k = l, l + 32, l + 64, ... in increasing k from +0.0, combined
     * by the halving tree a[l] += a[l + h] for h = 16, 8, 4, 2, 1 (one GPU warp per row and
     * channel: coalesced loads, a shuffle tree); then those row partials added in increasing i
     * from +0.0. With that order and the per-element formulas below (each operation rounded
     * once, no FMA) every backend gives the same bits.
     * batchnorm_stats: acc[c] = Σ x when sum is NULL; else the second pass around the mean,
     * acc[c] = Σ d·d with d = x - sum[c]/count (sum[c]/count in double).
     * xt is how x (and the backward's dx) is stored: SNN_F32, or SNN_F16 / SNN_BF16 on a table
     * with batchnorm_x16 (a 16-bit convolution's output, kept in its type: every value is
     * widened exactly, so the results are those of the same values in FP32; dx is written as
     * the RNE of the FP32 value below, what the convolution's GEMM would convert it to). */
    snn_status (*batchnorm_stats)(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, const void *x,
                                  const double *sum, double count, double *acc);
    /* Forward. training: mean = sum/count, invstd = 1/sqrt(sqsum/count + eps) (biased
     * variance), running_mean = (float)((1 - mom)·running_mean + mom·mean), running_var the
     * same with the unbiased sqsum/(count - 1) (count > 1); eval (sum, sqsum unused, may be
     * NULL): mean = running_mean, invstd = 1/sqrt(running_var + eps), running stats untouched.
     * mean, invstd [C] written (what the backward needs); y = (float)((x - mean)·(invstd·w) + b)
     * in double. eps and momentum enter as doubles of the floats. */
    snn_status (*batchnorm_forward)(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S, int training,
                                    float eps, float momentum, double count, const double *sum, const double *sqsum,
                                    const void *x, const float *w, const float *b, float *running_mean,
                                    float *running_var, double *mean, double *invstd, float *y);
    /* Backward sums (the order above): gsum[c] = Σ dy, gdot[c] = Σ dy·((x - mean)·invstd);
     * then db[c] += (float)gsum[c], dw[c] += (float)gdot[c]. */
    snn_status (*batchnorm_backward_sums)(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                          const void *x, const float *dy, const double *mean, const double *invstd,
                                          double *gsum, double *gdot, float *dw, float *db);
    /* dx written, in double with k = w·invstd: training (the forward normalised with batch
     * statistics over count values per channel): (float)(k·(dy - gsum/count - x̂·(gdot/count)))
     * with x̂ = (x - mean)·invstd; eval: (float)(k·dy) (gsum, gdot unused). */
    snn_status (*batchnorm_backward_input)(const snn_backend *be, snn_dtype xt, size_t B, int C, size_t S,
                                           int training, double count, const void *x, const float *dy,
                                           const float *w, const double *mean, const double *invstd,
                                           const double *gsum, const double *gdot, void *dx);
    /* 1: the BatchNorm entries take x and dx stored as SNN_F16 / SNN_BF16 (xt); 0 (the CPU
     * table): SNN_F32 only, anything else is refused. */
    int batchnorm_x16;

    /* Dropout mask [n]: mask[i] = snn_rng_uniform(seed, stream, base + i) >= p ? scale : 0 with
     * scale = p < 1 ? 1/(1 - p) : 0 (FP32). A pure function of its arguments: bit-identical. */
    snn_status (*dropout_mask)(const snn_backend *be, uint64_t seed, uint64_t stream, uint64_t base, float p,
                               size_t n, float *mask);
    /* y[t][i] = x[t][i] · mask[i] for t < T, i < n (one FP32 multiply; the mask of all steps,
     * as SpikingJelly's multi-step dropout; also its backward, with dy and dx). Bit-identical. */
    snn_status (*dropout_apply)(const snn_backend *be, int T, size_t n, const float *x, const float *mask,
                                float *y);

    /* Token mean over rows of L: y[i] = (Σ_l x[i][l], FP32 adds in increasing l from 0) · (1/L)
     * with 1/L rounded to FP32 first; backward dx[i][l] = dy[i] · (1/L). Bit-identical. */
    snn_status (*token_mean_forward)(const snn_backend *be, size_t rows, int L, const float *x, float *y);
    snn_status (*token_mean_backward)(const snn_backend *be, size_t rows, int L, const float *dy, float *dx);

    /* Spiking self-attention core (Spikformer's SSA without softmax) on B rows of x [3C][L]:
     * q, k, v are channels [0, C), [C, 2C), [2C, 3C), head h owns d = C/heads channels of each.
     * Per (row, head), with Q, K, V its [d][L] slices: A = V Kᵀ (d x d), Y = scale · A Q,
     * y [B][C][L]. Backward (dx [B][3C][L] written): dA = scale · dY Qᵀ, dQ = scale · Aᵀ dY,
     * dV = dA K, dK = dAᵀ V. FP32 products and sums in the backend's order (GEMM-like, not
     * bit-identical across backends; 0/1 spikes make A's sums integers, exact below 2^24).
     * work: ssa_work_bytes(B, C, L, heads) bytes on the device, kept intact from a forward to
     * the backward of the same x (the CPU saves A there; a backend may recompute it). */
    snn_status (*ssa_forward)(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                              const float *x, float *y, void *work);
    snn_status (*ssa_backward)(const snn_backend *be, size_t B, int C, int L, int heads, float scale,
                               const float *x, const float *dy, float *dx, void *work);
    size_t (*ssa_work_bytes)(const snn_backend *be, size_t B, int C, int L, int heads);
    /* ---- end of BatchNorm, dropout, token mean, spiking self-attention ---- */

    /* ---- language-model ops (cpu_lm.c, cuda_table_lm.cu) ---- */
    /* Token embedding gather: y[i][:] = W[ids[i]][:] for n tokens of D values (W [vocab][D]).
     * ids hold FP32 integer values; *bad (host) receives the index of the first token whose
     * id is not an integer in [0, vocab) and *bad_id its value, or -1 when all are valid.
     * With a bad id the rows of y are unspecified (nothing is read out of bounds). */
    snn_status (*embedding_forward)(const snn_backend *be, size_t n, int D, int vocab, const float *ids,
                                    const float *W, float *y, long long *bad, float *bad_id);
    /* Its gradient: G[ids[i]][j] += dy[i][j] (ids valid: the forward checked them). Every
     * element of G adds its tokens in increasing i, so the sums are the CPU's, bit for bit. */
    snn_status (*embedding_backward)(const snn_backend *be, size_t n, int D, const float *ids, const float *dy,
                                     float *G);
    /* Learned positions over R rows of L values: y[b][i] = x[b][i] + W[i] (y may be x);
     * backward G[i] += dy[b][i] over b in increasing order (dx is dy: the caller copies). */
    snn_status (*posemb_forward)(const snn_backend *be, size_t R, size_t L, const float *x, const float *W,
                                 float *y);
    snn_status (*posemb_backward)(const snn_backend *be, size_t R, size_t L, const float *dy, float *G);
    /* Rotary embedding, rotate-half pairing, on R x S rows of W values (heads of hd): the first
     * `rot` heads of every row rotate, (u, w) = (x[i], x[i + hd/2]) -> (u c - w s', u s' + w c)
     * with c = cs[s][i], s' = sign · sn[s][i] (cs, sn [S][hd/2]: the rows of this call's
     * positions, device memory); the rest of the row is copied (y may be x). sign 1 forward,
     * -1 backward (the inverse rotation). Plain FP32 multiplies and adds, no FMA. */
    snn_status (*rope_apply)(const snn_backend *be, size_t R, int S, int W, int rot, int hd, const float *cs,
                             const float *sn, float sign, const float *x, float *y);
    /* Causal softmax attention on fused q|k|v rows x [R][S][(H + 2G) hd] -> y [R][S][H hd];
     * query head h reads group g = h / (H / G):  Z = scale q k^T (row i sees keys 0..i),
     * P = softmax(Z) (max subtracted, the sum of the exps in double, zeros above the
     * diagonal) saved into P [R][H][S][S];  y = P v.
     * t: the products' operand type. SNN_F32: FP32 products. SNN_F16 / SNN_BF16 (a 16-bit
     * precision mode): q, k, v (and the backward's dy) are t values (the caller rounded them;
     * a gemm_rounds backend rounds FP32 ones itself), P is rounded to t where it multiplies
     * (P v, P^T dy) and dZ where it does (dZ k, dZ^T q); the scores, the softmax, dP and
     * rowsum stay FP32 / double and P is saved unrounded. A table may round exp(Z - running
     * row max) instead of P where it multiplies v and divide by the row sum after the product
     * (the CUDA flash path: FlashAttention's single sweep; the same 16-bit rounding taken
     * before the division, so y agrees to that rounding, not bit for bit). work:
     * attention_work_bytes. */
    snn_status (*attention_forward)(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                    float scale, const float *x, float *y, float *P, void *work);
    /* dx [R][S][(H + 2G) hd] overwritten from dy [R][S][H hd] and the forward's P:
     *   dP = dy v^T, dZ = P (dP - rowsum(dP P)) (rowsum in double), dq = scale dZ k,
     *   dk = scale Σ_heads of the group dZ^T q, dv = Σ_heads P^T dy.
     * work: attention_work_bytes(R, H, S) bytes of device scratch, the forward's work (a
     * table may keep state there from the forward to the backward, as the flash path does).
     * A table may compute rowsum(dP P) as dy . (P16 v) with the P its forward multiplied
     * (the flash path): the same sum with P at its 16-bit rounding. */
    snn_status (*attention_backward)(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                     float scale, const float *x, const float *P, const float *dy, float *dx,
                                     void *work);
    size_t (*attention_work_bytes)(const snn_backend *be, int R, int H, int S);
    /* 1: attention_forward saves the probabilities P [R][H][S][S] for these arguments (the CPU
     * table always; NULL means always); 0: it keeps its own state in the first floats of P
     * (the CUDA table's flash path for 16-bit products: the row max and 1 / row sum,
     * [R][H][S][2], and its FP32 output in work; the products then never materialise P, see
     * cuda_attn_flash.cu). Either way P must hold R H S S floats and only attention_backward
     * reads it. */
    int (*attention_saves_probs)(const snn_backend *be, snn_dtype t, int R, int S, int H, int hd);
    /* 16-bit activations around the attention (snn_module.in_store / out_store, between two
     * 16-bit Linears): attention_io16 says whether attention_forward_io / _backward_io take
     * these arguments (any R); they are attention_forward / _backward with x, y, dy and dx
     * stored as t, each output rounded (RNE) to t where the FP32 entries write it unrounded.
     * NULL on a table without 16-bit storage (the CPU). */
    int (*attention_io16)(const snn_backend *be, snn_dtype t, int S, int H, int hd);
    snn_status (*attention_forward_io)(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                       float scale, const void *x, void *y, float *P, void *work);
    snn_status (*attention_backward_io)(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                        float scale, const void *x, const float *P, const void *dy, void *dx,
                                        void *work);
    /* Decoding against a KV cache kc, vc [R][G][cap][hd]: the keys and values of this call's
     * positions off..off+S-1 are copied from x [R][S][(H + 2G) hd] into the cache (bit for
     * bit), then query s of head h attends to cached positions 0..off+s of its group:
     * y = softmax(scale q k^T) v into y [R][S][H hd]. Needs 0 <= off, off + S <= cap. Nothing
     * is saved for a backward. The CPU folds the softmax online (a running max, the output
     * rescaled when it grows); the CUDA table keeps the scores in shared memory and sums in
     * another order: the two agree to rounding, the caches bit for bit. */
    snn_status (*attention_cached)(const snn_backend *be, int R, int S, int H, int G, int hd, int cap, int off,
                                   float scale, const float *x, float *kc, float *vc, float *y);
    /* attention_cached with x and y stored as t (F16 / BF16: 16-bit activations around the
     * attention, attention_io16); the cache stays FP32 (x's values widened, exact). NULL on a
     * table without 16-bit storage. */
    snn_status (*attention_cached_io)(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                      int cap, int off, float scale, const void *x, float *kcache, float *vcache,
                                      void *y);
    /* SwiGLU over V vectors: x [V][2F] = gate a | up u -> y [V][F] = a / (1 + exp(-a)) u;
     * backward da = dy u σ (1 + a (1 - σ)), du = dy a σ with σ = 1 / (1 + exp(-a)). */
    snn_status (*swiglu_forward)(const snn_backend *be, size_t V, int F, const float *x, float *y);
    snn_status (*swiglu_backward)(const snn_backend *be, size_t V, int F, const float *x, const float *dy,
                                  float *dx);
    /* Elastic bi-spike over T steps of E elements ([T][E], from reset; lm_layers.h):
     *   v_0 = x_0, v_t = v_{t-1} d (a - s_{t-1}) + x_t, s_t = a rint(clamp(v_t / a, -1, 1));
     * y = s, v saved. Backward (v, y of the forward): dv_t = [|v_t / a| <= 1] dy_t + c_{t+1},
     * c_t = dv_t d (a - s_{t-1}); dx = dv. Plain FP32 operations in that order, no FMA. */
    snn_status (*bispike_forward)(const snn_backend *be, int T, size_t E, float decay, float amp, const float *x,
                                  float *y, float *v);
    snn_status (*bispike_backward)(const snn_backend *be, int T, size_t E, float decay, float amp, const float *v,
                                   const float *y, const float *dy, float *dx);
    /* CUDA only (NULL elsewhere): y and dy stored as yt (FP32, or 16-bit: y rounded RNE once,
     * the value a 16-bit GEMM reading it would round it to); x, v and dx FP32. The backward
     * takes s_{t-1} again from the saved v (s is a function of v: the forward's values), so
     * it reads no y. With yt FP32 the results are the plain entries', bit for bit. */
    snn_status (*bispike_forward_io)(const snn_backend *be, int T, size_t E, float decay, float amp, snn_dtype yt,
                                     const float *x, void *y, float *v);
    snn_status (*bispike_backward_io)(const snn_backend *be, int T, size_t E, float decay, float amp, snn_dtype yt,
                                      const float *v, const void *dy, float *dx);
    /* The LM cross-entropy of include/snn/lm.h (snn_lm_cross_entropy) on the table's memory:
     * logits [T][N][S][V], labels [N][S] (int32), mask [N][S] (may be NULL), token_loss
     * [N][S] (double), dlogits (may be NULL) [T][N][S][V] = grad_scale d(loss_sum)/d(logits);
     * *loss_sum (Σ token_loss in order) and *count (Σ mask) are host values. Labels outside
     * [0, V) are refused (the same message) before anything is written. */
    snn_status (*lm_cross_entropy)(const snn_backend *be, const float *logits, const int32_t *labels,
                                   const float *mask, int T, int N, int S, int V, int reduce_sum,
                                   double *token_loss, double *loss_sum, double *count, float *dlogits,
                                   float grad_scale);
    /* lm_cross_entropy with dlogits (not NULL) written as t values (F16 / BF16, RNE of what
     * lm_cross_entropy writes) in rows of ld >= V elements, [T][N][S] rows, columns V..ld-1
     * zero: the output gradient a 16-bit LM head multiplies in place (snn_model_backward_dy16).
     * The logits are stored as lt: SNN_F32 (rows of lld = V floats, as lm_cross_entropy
     * reads them) or t itself (rows of lld >= V values, columns past V not read: a 16-bit
     * head's output, snn_model_forward_y16); 16-bit logits give exactly the results of the
     * same values in FP32. NULL on a table without 16-bit storage (the CPU). */
    snn_status (*lm_cross_entropy16)(const snn_backend *be, const void *logits, snn_dtype lt, size_t lld,
                                     const int32_t *labels, const float *mask, int T, int N, int S, int V,
                                     int reduce_sum, double *token_loss, double *loss_sum, double *count,
                                     snn_dtype t, void *dlogits, size_t ld, float grad_scale);
    /* ---- end of language-model ops ---- */
};

const snn_backend *snn_backend_cpu(void);

/* The CUDA table on GPU `device` with its own context and stream (built with SNN_HAVE_CUDA;
 * otherwise these refuse with SNN_E_UNSUPPORTED). Destroy frees the context. */
snn_status snn_backend_cuda_create(int device, snn_backend **out);
void snn_backend_cuda_destroy(snn_backend *be);

#endif
