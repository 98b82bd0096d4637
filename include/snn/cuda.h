/* snn — CUDA backend (built with -DSNN_CUDA=ON).
 *
 * Everything here works on device pointers and runs asynchronously on the context's stream
 * unless a function says it synchronizes. No function allocates device memory except
 * snn_cuda_create (cuBLASLt workspace) and snn_cuda_alloc, so a sequence of calls can be
 * captured into a CUDA graph (warm each GEMM shape up once before capture: the first call of
 * a shape queries cuBLASLt's heuristic, and with autotuning also times candidates).
 *
 * Layout conventions: matrices are row-major; a multi-step activation is [T][n] with the
 * time dimension outermost (T·batch rows for a Linear layer: time folds into GEMM M). */
#ifndef SNN_CUDA_H
#define SNN_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"
#include "error.h"
#include "neuron.h"
#include "optim.h"
#include "precision.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_cuda snn_cuda;

/* Select `device`, create a stream, a cuBLASLt handle and a GEMM workspace
 * (workspace_bytes 0 = 32 MiB). */
snn_status snn_cuda_create(int device, size_t workspace_bytes, snn_cuda **out);
/* CUDA devices this process sees (SNN_E_UNSUPPORTED, *count 0, when there is no driver). */
snn_status snn_cuda_device_count(int *count);
void snn_cuda_destroy(snn_cuda *c);
/* The context's stream as a cudaStream_t. */
void *snn_cuda_stream(snn_cuda *c);
snn_status snn_cuda_synchronize(snn_cuda *c);
/* Device name, compute capability, multiprocessor count. */
snn_status snn_cuda_device_info(snn_cuda *c, char *name, size_t name_len, int *cc_major,
                                int *cc_minor, int *sm_count);
/* With autotune on, the first call of each GEMM shape (with beta == 0) times up to 8 of
 * cuBLASLt's candidate algorithms on the real operands and keeps the fastest; this
 * synchronizes, so it must not happen during graph capture. Off by default. */
void snn_cuda_set_gemm_autotune(snn_cuda *c, int on);

/* Memory (plain cudaMalloc). upload/download/fill synchronize with the context's stream. */
snn_status snn_cuda_alloc(snn_cuda *c, size_t bytes, void **out);
void snn_cuda_free(void *p);
snn_status snn_cuda_upload(snn_cuda *c, void *dst, const void *src, size_t bytes);
snn_status snn_cuda_download(snn_cuda *c, void *dst, const void *src, size_t bytes);
snn_status snn_cuda_memset(snn_cuda *c, void *dst, int byte, size_t bytes); /* async */

/* ---- Neurons (IF / LIF / PLIF, multi-step, one thread per 1..8 neurons, loop over T) ----
 * k: the decay 1/tau (LIF) or sigmoid(w) (PLIF); ignored for IF.
 * io_type (F32, BF16, F16) is the storage type of x, h_seq, v_seq, gs, gv_seq and gx;
 * arithmetic is FP32 and the membrane stays FP32 across steps. spike_type is F32, BF16, F16
 * or F8E4M3 (spike 1 is the byte 0x38, exact, scale 1). v0, v_last, gv_last, gv0 are FP32.
 * bias (FP32, may be NULL) is added to x: neuron i gets bias[i % bias_period] (a Linear
 * layer's bias when the neurons are [T][batch][features]). */
snn_status snn_cuda_neuron_forward(snn_cuda *c, const snn_neuron_opts *o, float k, int T,
                                   size_t n, snn_dtype io_type, snn_dtype spike_type,
                                   const void *x, const float *bias, size_t bias_period,
                                   const float *v0, void *s, void *h_seq, void *v_seq,
                                   float *v_last);
/* Launch shape of the neuron kernels (a tuning knob; results do not depend on it):
 * pack_bytes 16 or 8 = each thread owns that many bytes of consecutive neurons (falls back to
 * one neuron per thread when sizes or alignment do not allow it), 1 = one neuron per thread,
 * 0 = automatic (16); prefetch 1 = loads of 4 steps in flight (2 for 8-wide backward),
 * 2 = 16 steps (8 backward), 0 = automatic (long when there are too few threads to fill the
 * GPU, e.g. long T with few neurons per step). */
snn_status snn_cuda_set_neuron_tuning(snn_cuda *c, int pack_bytes, int prefetch);
/* BPTT backward (SpikingJelly's fused-kernel formulas). gs [T][n]; gv_seq [T][n] or NULL;
 * gv_last [n] or NULL (adds to the gradient of the last step's v). gx [T][n] written.
 * Optional outputs: gv0 [n]; gk: one FP32 on the device, ADDED to (PLIF dL/dk);
 * gx_tsum [n] FP32 = sum over t of gx (for a bias gradient); gx_amax: one FP32 on the
 * device, max-ed with max|gx| as stored (for FP8 current scaling; zero it first). */
snn_status snn_cuda_neuron_backward(snn_cuda *c, const snn_neuron_opts *o, float k, int T,
                                    size_t n, snn_dtype io_type, const void *h_seq,
                                    const float *v0, const void *gs, const void *gv_seq,
                                    const float *gv_last, void *gx, float *gv0, float *gk,
                                    float *gx_tsum, float *gx_amax);

/* ---- mixed-precision neurons ----
 * SpikingJelly's mixed path with storage S, forward arithmetic F and backward arithmetic B,
 * bit-identical to the CPU's snn_neuron_forward_mp / snn_neuron_backward_mp (neuron.h lists
 * the rounding rules and the accepted dtypes: S, F, B each f32 | f16 | bf16 | f8e4m3 |
 * f8e5m2, an FP8 arithmetic dtype equal to S). Device buffers, [T][n] row-major: x, v0,
 * h_seq, v_last in S; s spikes 0/1 in spike_type (f32, bf16 or f16); gs, gv_last, gx, gv0
 * FP32 (gs and gv_last read as B values); gk snn_cuda_neuron_mp_gk_len(n) doubles, gk[0]
 * receiving dL/dk, the rest scratch. v0 NULL starts at V_r; h_seq, v_last, gs, gv_last, gx,
 * gv0, gk may be NULL (the backward needs h_seq when T > 0 and n > 0). Asynchronous on the
 * context's stream. */
size_t snn_cuda_neuron_mp_gk_len(size_t n);
snn_status snn_cuda_neuron_forward_mp(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                      snn_dtype S, snn_dtype F, snn_dtype spike_type, const void *x,
                                      const void *v0, void *s, void *h_seq, void *v_last);
snn_status snn_cuda_neuron_backward_mp(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                       snn_dtype S, snn_dtype F, snn_dtype B, const void *h_seq,
                                       const void *v0, const float *gs, const float *gv_last, float *gx,
                                       float *gv0, double *gk);

/* ---- GEMM through cuBLASLt ----
 * C[M,N] = alpha · scale_a · scale_b · op(A)[M,K] · op(B)[K,N] + beta · C, row-major.
 * Types: F32 (FP32 compute; TF32 only with allow_tf32), BF16/F16 (FP32 accumulation; C F32 or
 * the same 16-bit type), FP8: A,B ∈ {E4M3, E5M2} but not both E5M2, C ∈ {F32, BF16, F16,
 * E4M3, E5M2}. FP8 needs trans_a = 0, trans_b = 1 (both operands K-contiguous: Hopper runs
 * only this "TN" layout), K, lda, ldb multiples of 16 and 16-byte aligned pointers.
 * a_scale/b_scale: device FP32 dequantisation factors (NULL = 1). d_scale: device FP32 factor
 * applied to FP8 outputs (NULL = 1). d_amax: device FP32 receiving max|result| before
 * d_scale (FP8 outputs). fast_accum: FP8 accumulation without periodic FP32 promotion.
 *
 * Block scaling (Transformer Engine's Float8BlockScaling, reference fp8.md §3.3): with
 * a_scale_mode/b_scale_mode not SNN_CUDA_SCALE_TENSOR, a_scale/b_scale point to arrays of
 * FP32 dequantisation factors in cuBLASLt's layouts, which snn_cuda_quantize_fp8_block
 * writes: for an operand stored [R][K] (K the reduction dimension),
 *   VEC128 (one factor per 128 consecutive elements along K): s[(k/128)·R + r];
 *   BLK128 (one per 128x128 tile): s[(r/128)·pad4(K/128) + k/128], pad4 = round up to 4.
 * Both operands must be block-scaled, not both BLK128 (cuBLASLt has no 2D x 2D kernel),
 * M, N and K multiples of 128, fast_accum 0 (block scaling always promotes to FP32),
 * C F32/BF16/F16, scale arrays 16-byte aligned. cuBLASLt 12.9+ on compute capability 9.x;
 * other devices refuse the call with the library's status. */
typedef enum snn_cuda_scale_mode {
    SNN_CUDA_SCALE_TENSOR = 0, /* one FP32 factor for the whole operand (or NULL = 1) */
    SNN_CUDA_SCALE_VEC128 = 1, /* 1x128 blocks along K */
    SNN_CUDA_SCALE_BLK128 = 2  /* 128x128 tiles */
} snn_cuda_scale_mode;

typedef struct snn_cuda_gemm_desc {
    int trans_a, trans_b;
    int M, N, K;
    snn_dtype a_type, b_type, c_type;
    int lda, ldb, ldc;
    int allow_tf32;
    int fast_accum;
    snn_cuda_scale_mode a_scale_mode, b_scale_mode; /* 0 (TENSOR) unless block-scaled FP8 */
} snn_cuda_gemm_desc;

snn_status snn_cuda_gemm(snn_cuda *c, const snn_cuda_gemm_desc *d, float alpha, const void *A,
                         const void *B, float beta, void *C, const float *a_scale,
                         const float *b_scale, const float *d_scale, float *d_amax);

/* ---- Elementwise and reductions ---- */
/* dst = convert(src · scale) (scale: device FP32 or NULL = 1); saturating when
 * flags & SNN_CONVERT_SATURATE (FP8 targets always saturate: hardware SATFINITE).
 * Types F32, BF16, F16, F8E4M3, F8E5M2. */
snn_status snn_cuda_convert(snn_cuda *c, snn_dtype dst_type, void *dst, snn_dtype src_type,
                            const void *src, size_t n, const float *scale, unsigned flags);
/* amax = max(amax, max|x|), NaN ignored. amax is one device FP32 (zero it first). */
snn_status snn_cuda_amax(snn_cuda *c, snn_dtype type, const void *x, size_t n, float *amax);
/* FP8 per-tensor current scaling (Transformer Engine's rule): s = fp8_max / amax (1 if amax is
 * 0 or not finite, FLT_MAX if the quotient overflows), q = sat(x·s). Writes q [rows][cols]
 * and/or its transpose qt [cols][rows] (either may be NULL) and *scale_inv = 1/s (device). */
snn_status snn_cuda_quantize_fp8(snn_cuda *c, snn_dtype q_type, void *q, void *qt,
                                 snn_dtype src_type, const void *src, int rows, int cols,
                                 const float *amax, float *scale_inv);
/* FP8 block scaling (Float8BlockScaling, fp8.md §3.3) of a row-major [rows][cols] source
 * (F32, BF16 or F16; rows and cols multiples of 128) into the operands of block-scaled GEMMs
 * (layouts: snn_cuda_gemm_desc). Per block: amax (NaN ignored), s = fp8_max / amax (1 when
 * amax is 0 or not finite; the source type's largest finite value when the quotient
 * overflows), with pow2 s rounded down to a power of two (TE's default), q = sat(x·s),
 * scale_inv = 1/s — the rule of the CPU's snn_fp8_prepare_operand, bit for bit.
 * tiles 0 (1x128 vectors: inputs and gradients):
 *   q  [rows][cols], blocks of 128 along a row,  q_sinv  VEC128 [cols/128][rows];
 *   qt [cols][rows] (the transpose), blocks of 128 source rows in one column (the operand
 *      of a GEMM that reduces over rows), qt_sinv VEC128 [rows/128][cols].
 * tiles 1 (128x128 tiles: weights): q and its transpose qt share each tile's scale;
 *   q_sinv BLK128 [rows/128][pad4(cols/128)], qt_sinv BLK128 [cols/128][pad4(rows/128)].
 * Either (q, q_sinv) or (qt, qt_sinv) may be NULL. q and qt 16-byte aligned. */
snn_status snn_cuda_quantize_fp8_block(snn_cuda *c, snn_dtype q_type, int tiles, int pow2,
                                       snn_dtype src_type, const void *src, int rows, int cols,
                                       void *q, float *q_sinv, void *qt, float *qt_sinv);
/* Number of FP32 factors of q_sinv for a [rows][cols] source (for qt_sinv: swap them). */
size_t snn_cuda_fp8_block_scale_count(int tiles, int rows, int cols);
/* Byte transpose [rows][cols] -> [cols][rows] for 1-byte types (FP8 spikes). */
snn_status snn_cuda_transpose_u8(snn_cuda *c, void *dst, const void *src, int rows, int cols);
/* x[r][j] += bias[j] for a [rows][cols] tensor of type F32, BF16 or F16. */
snn_status snn_cuda_bias_add(snn_cuda *c, snn_dtype type, void *x, const float *bias, int rows,
                             int cols);
/* out[j] = beta·out[j] + sum_r x[r][j] (FP32 out; x F32, BF16 or F16). */
snn_status snn_cuda_colsum(snn_cuda *c, snn_dtype type, const void *x, int rows, int cols,
                           float beta, float *out);

/* Cross-entropy on the mean over T: logits [T][B][C] (F32, + bias[C] if not NULL),
 * labels [B] int32 on the device. m = mean_t logits; loss = mean_b (logsumexp(m_b) - m_b[y_b]);
 * dlogits[t][b][c] = grad_scale · (softmax(m_b)_c - [c == y_b]) / (B·T), stored as dl_type.
 * loss: one device FP32 (written). work: device scratch of B floats. */
snn_status snn_cuda_ce_mean_t(snn_cuda *c, int T, int B, int C, const float *logits,
                              const float *bias, const int32_t *labels, float *loss, float *work,
                              snn_dtype dl_type, void *dlogits, float grad_scale);

/* SGD with momentum on FP32 master weights (PyTorch's rule, dampening 0):
 * g = grad·grad_scale + weight_decay·w; buf = momentum·buf + g (buf starts at 0);
 * w -= lr · (nesterov ? g + momentum·buf : buf). Then work (BF16/F16, may be NULL) = w rounded,
 * and amax (device FP32, may be NULL) max-ed with max|w| for the next FP8 quantisation.
 * skip (device int, may be NULL): when nonzero the update is skipped (FP16 overflow). */
typedef struct snn_cuda_sgd {
    float lr, momentum, weight_decay, grad_scale;
    int nesterov;
} snn_cuda_sgd;
snn_status snn_cuda_sgd_update(snn_cuda *c, const snn_cuda_sgd *h, size_t n, float *w,
                               const float *grad, float *buf, snn_dtype work_type, void *work,
                               float *amax, const int *skip);

/* Fill with deterministic pseudo-random values (hash of seed and index): uniform in [lo, hi)
 * or, with normal != 0, N(lo, hi²). FP32 output. */
snn_status snn_cuda_fill_random(snn_cuda *c, float *x, size_t n, uint64_t seed, int normal,
                                float lo, float hi);

/* ---- Whole models on the GPU ----
 * A model built on the host (snn_fcsnn_create, snn_model_create_from_config, ...) is mirrored
 * on the device: one FP32 master parameter buffer (each tensor 128-byte aligned), its
 * gradients, the optimizer state, the BN buffers, and every activation and saved state of a
 * training step for T time steps and batch N, all allocated here, once. A training step
 * (forward, loss, BPTT backward, optional global-norm clipping, optimizer update, refresh of
 * the 16-bit weight copies) is captured into one CUDA graph on its first call and replayed
 * after that: no allocation and no host synchronisation inside a step.
 *
 * Supported modules: Sequential, Residual, Linear, Conv2d, pointwise Conv1d, BatchNorm
 * (1d/2d), LayerNorm, MaxPool2d, AvgPool2d, Flatten, Reshape, TokenMean, GELU, IF/LIF neurons
 * and ParametricLIF with its learnable decay (any surrogate, reset and detach setting), the
 * spiking self-attention core, Dropout (in training the CPU's mask: the same Philox draw from
 * the model seed and the model's forward counter, which lives on the device and advances with
 * every forward, training or evaluation, as snn_model_forward's does). Anything else (a
 * general Conv1d, a module carrying a CPU precision wrapper) is refused by create with a
 * message naming the module.
 *
 * Per-step values that change inside the graph live on the device: the learning rate and
 * scalars staged with each step, Adam's completed-step count (advanced only by steps that are
 * not skipped, so after an FP16 overflow the bias correction matches torch's GradScaler +
 * Adam), the loss scaler, the forward counter, PLIF's decay. */
typedef struct snn_cuda_model snn_cuda_model;

typedef enum { SNN_CUDA_LOSS_CE = 0, SNN_CUDA_LOSS_MSE_RATE = 1 } snn_cuda_loss;

typedef struct snn_cuda_model_opts {
    int T, N;              /* time steps and batch size (the step's shapes are fixed) */
    snn_dtype compute;     /* GEMM operands: SNN_F32 (TF32 off), SNN_BF16 or SNN_F16, FP32
                              accumulation and FP32 master weights in every case; F16 adds
                              dynamic loss scaling on the device (GradScaler's rule: scale
                              65536, x0.5 on overflow with the step skipped, x2 after 2000
                              clean steps). SNN_F8E4M3: FP8 training as the CPU's precision
                              mode fp8 (see fp8 below) */
    int allow_tf32;        /* F32 only: let cuBLASLt use TF32 */
    snn_cuda_loss loss;
    float clip;            /* > 0: clip the global gradient norm to this (before the update) */
    int no_graph;          /* 1: launch kernel by kernel (debugging); default 0 = CUDA graph */
    /* compute SNN_F8E4M3 only: the precision config (mode fp8; NULL = fp8 with the defaults;
     * copied at create). The GEMM modules the CPU's fp8 preparation converts (a Linear with
     * in % 16 == 0 and out % 8 == 0, or such a pointwise Conv1d) run FP8 GEMMs with the
     * recipe's scaling (delayed, current, block; "auto" resolves for the device); every other
     * GEMM runs BF16, as on the CPU. The input of a module that follows a neuron in a
     * Sequential is taken as spikes (E4M3, scale 1, as the CPU's spike_fp8 default). Delayed
     * scaling keeps its amax histories and scales on the device and updates them after the
     * optimizer step, inside the graph. mxfp8 is the CPU's exact emulation on any GPU
     * (dequantised 1x32 / 32x1 E8M0 blocks, FP32 GEMMs). Refused by create: block
     * on a device other than compute capability 9.x or with a converted module whose rows
     * (T*N times its leading dims), in or out is not a multiple of 128. */
    const snn_precision_config *fp8;
    /* Neuron mixed precision (NULL, or neuron_storage unset: the FP32 neurons; with compute
     * SNN_F8E4M3 and neuron NULL, fp8's neuron fields are used; the neuron fields are copied
     * at create, the rest of the config is only validated). With neuron_storage set, every IF/LIF/PLIF neuron
     * runs the CPU's converted-neuron semantics (src/precision/prec_exec.c) on the mixed
     * kernels of cuda_neuron_mp: x (FP32) rounded to the storage dtype, h_seq saved in it,
     * charge and reset in neuron_fwd, BPTT in neuron_bwd, spikes FP32, dL/dx FP32 holding
     * neuron_bwd values; the neuron part is bit-identical to the CPU. create refuses what
     * the CPU refuses: an invalid combination (snn_precision_config_validate) and a model
     * without neurons. */
    const snn_precision_config *neuron;
    /* Data parallelism (NULL: one replica). The step calls these inside its CUDA graph, on the
     * step's stream: BatchNorm buffers broadcast from replica 0 before the forward
     * (SpikingJelly's multi-step DDP rule), the FP32 gradient buffer averaged in buckets
     * that start during the backward (the loss gradient is scaled by 1/size and the buckets
     * summed, as torch's DDP divides before its all-reduce; exact for power-of-two sizes) (FP16: the scaled gradients, so every replica sees the same overflow), and with
     * FP8 delayed scaling this step's amax of every scaled tensor MAX-reduced before the scale
     * update (amax histories and scales stay identical on every replica). The table must
     * outlive the device model; src/dist/ddp_cuda.c builds one over an NCCL communicator. */
    const struct snn_cuda_collectives *dp;
} snn_cuda_model_opts;

/* Collectives on device buffers, enqueued on `stream` (a cudaStream_t) and safe to capture
 * into a CUDA graph. op: 0 sum, 1 max, 2 average. Types: SNN_F32 only here. */
typedef struct snn_cuda_collectives {
    void *ctx;
    int size;             /* replicas (the step scales dL/dy by 1/size and sums) */
    snn_status (*allreduce)(void *ctx, void *buf, size_t count, int op, void *stream);
    snn_status (*broadcast)(void *ctx, void *buf, size_t count, int root, void *stream);
} snn_cuda_collectives;
enum { SNN_CUDA_COLL_SUM = 0, SNN_CUDA_COLL_MAX = 1, SNN_CUDA_COLL_AVG = 2 };
/* Gradient buckets the last step averaged (0 without opts.dp): 25 MiB buckets started as
 * soon as the backward has finished their gradients, on a second stream. */
int snn_cuda_model_ddp_buckets(const snn_cuda_model *g);

/* Mirror m (its current parameters and buffers) on the device. opt: the optimizer (its lr is
 * the default lr of a step). The host model must outlive the device model. */
snn_status snn_cuda_model_create(snn_cuda *c, snn_model *m, const snn_cuda_model_opts *o,
                                 const snn_optim_opts *opt, snn_cuda_model **out);
void snn_cuda_model_destroy(snn_cuda_model *g);
/* One training step on x [T][N][F] host FP32 (x_has_time 1) or [N][F] repeated over T
 * (direct encoding, x_has_time 0) and labels [N]. lr < 0: the optimizer's lr. Asynchronous:
 * the loss and the number of correct predictions are summed on the device; read them (and
 * reset the sums) with snn_cuda_model_take_stats. */
snn_status snn_cuda_model_train_step(snn_cuda_model *g, const float *x, int x_has_time,
                                     const int32_t *labels, float lr);
/* Sum of the per-step losses and correct predictions since the last call, steps counted;
 * synchronizes. */
snn_status snn_cuda_model_take_stats(snn_cuda_model *g, double *loss_sum, long *correct,
                                     long *steps);
/* Evaluation forward (BN running statistics, no state saved) of n <= N samples; out: host
 * [T][N][C] FP32 (only the first n samples of each step are meaningful); synchronizes. */
snn_status snn_cuda_model_forward(snn_cuda_model *g, const float *x, int x_has_time, int n,
                                  float *out);
/* Copy parameters, buffers and the forward counter back into the host model (for
 * checkpoints); synchronizes. */
snn_status snn_cuda_model_download(snn_cuda_model *g);
/* Copy the gradients of the last step into the host model's gradient array (tests). */
snn_status snn_cuda_model_download_grads(snn_cuda_model *g);
/* Time each module of a training step (eager, one synchronisation per module) over `steps`
 * steps that leave the parameters unchanged (the update is skipped; BN running statistics
 * still move), and write a table (module,
 * kind, forward and backward ms per step) into report. For finding where a step's time goes. */
snn_status snn_cuda_model_profile(snn_cuda_model *g, const float *x, int x_has_time,
                                  const int32_t *labels, int steps, char *report, size_t cap);
/* Training state besides parameters and buffers, for checkpoints and resuming; both
 * synchronize. opt (may be NULL): a host optimizer of the same kind over the host model
 * (snn_optimizer_create_for_model), whose state tensors (SGD momentum buffer; Adam/AdamW
 * exp_avg, exp_avg_sq) and step count are in the CPU optimizer's flat layout: save_state
 * copies the device's into it, load_state copies it to the device. The loss scaler (FP16:
 * scale and growth tracker; save gives 65536 and 0 for other compute types) goes through
 * loss_scale / growth_tracker (either may be NULL in save_state). load_state also takes the
 * host model's forward counter (snn_model_step_count); snn_cuda_model_download writes it back.
 * Parameters and buffers are taken at create and copied back by snn_cuda_model_download, so
 * a resume is: restore the host model and optimizer (snn_training_checkpoint_restore_cfg),
 * create, load_state. */
snn_status snn_cuda_model_save_state(snn_cuda_model *g, snn_optimizer *opt, float *loss_scale,
                                     int *growth_tracker);
snn_status snn_cuda_model_load_state(snn_cuda_model *g, snn_optimizer *opt, float loss_scale,
                                     int growth_tracker);
/* The current FP16 loss scale (1 for other compute types); synchronizes. */
snn_status snn_cuda_model_loss_scale(snn_cuda_model *g, float *scale);
/* FP8 (compute SNN_F8E4M3): the recipe state of the converted modules, in model order (the
 * order of the CPU's converted modules). *n_modules: their count (0 in other modes);
 * *history_len: delayed scaling's amax_history_len, else 0. scales [n_modules][3] (input,
 * weight, output gradient; 1 for the stateless recipes' slots until they run, then their
 * last scale) and histories [n_modules][3][history_len] (delayed: the CPU's layout, [0] the
 * running max of the steps since the last update, then the previous amaxes oldest first) may
 * be NULL. Synchronizes. */
snn_status snn_cuda_model_fp8_state(snn_cuda_model *g, int *n_modules, int *history_len,
                                    float *scales, float *histories);
/* Put saved delayed-scaling state (the layout of snn_cuda_model_fp8_state, e.g. from a CPU
 * training checkpoint) on the device; a no-op for the stateless recipes. Synchronizes. */
snn_status snn_cuda_model_fp8_load_state(snn_cuda_model *g, int n_modules, int history_len,
                                         const float *scales, const float *histories);
/* Bytes of device memory the model holds (parameters, state, activations, workspaces). */
size_t snn_cuda_model_device_bytes(const snn_cuda_model *g);

#ifdef __cplusplus
}
#endif
#endif
