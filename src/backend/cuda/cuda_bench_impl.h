/* Internals shared by the GPU benchmark workloads (cuda_bench_linear.cu, cuda_bench_fcsnn.cu)
 * and the protocol runner (cuda_bench_common.cu). CUDA C++ only. */
#ifndef SNN_CUDA_BENCH_IMPL_H
#define SNN_CUDA_BENCH_IMPL_H

#include "backend/cuda/cuda_bench.h"
#include "backend/cuda/cuda_internal.h"

/* Propagate a failed snn_status. */
#define BT(x)                                                                                    \
    do {                                                                                         \
        snn_status bt_s_ = (x);                                                                  \
        if (bt_s_ != SNN_OK) return bt_s_;                                                       \
    } while (0)

/* Every device buffer of one run, counted (training: all of them; inference: those an
 * inference step touches) and freed together. */
typedef struct snn_bench_alloc {
    snn_cuda *c;
    void **ptr;
    int n, cap;
    size_t train_bytes, infer_bytes;
} snn_bench_alloc;

/* Allocate into *out (NULL first); infer = 1 when an inference step uses the buffer. */
snn_status snn_bench_alloc_get(snn_bench_alloc *a, size_t bytes, int infer, void **out);
template <typename P> static inline snn_status bench_alloc(snn_bench_alloc *a, size_t bytes, int infer, P **out) {
    void *p = NULL;
    snn_status st = snn_bench_alloc_get(a, bytes, infer, &p);
    *out = (P *)p;
    return st;
}
void snn_bench_alloc_free_all(snn_bench_alloc *a);

/* out = max(out, max |p - host|) over n floats, the host values staged through `scratch` (n
 * device floats, overwritten); NaN wins (it orders above every finite value and infinity as
 * an unsigned bit pattern). out: one device float, zero it first. */
snn_status snn_bench_drift_max(snn_cuda *c, const float *p, float *scratch, const float *host, size_t n, float *out);

/* What a workload hands the protocol runner. Every step function only enqueues work on the
 * context's stream (it is captured into a graph); load runs eagerly. */
typedef struct snn_bench_ops {
    void *net;
    snn_status (*load)(void *net);        /* weights from the host, optimizer state 0, working copies */
    snn_status (*train_forward)(void *net);
    snn_status (*train_loss)(void *net);
    snn_status (*train_backward)(void *net); /* backward + SGD (+ FP8 weight re-quantisation) */
    snn_status (*infer)(void *net);
    snn_status (*optimizer_lr0)(void *net);  /* the SGD updates alone, with lr 0 */
    /* out = max |p - p_base| over every parameter (may overwrite gradient buffers) */
    snn_status (*update_max)(void *net, float *dev_out);
    snn_status (*diag)(void *net, int after_training, snn_cuda_bench_result *r); /* may be NULL */
    const float *loss;   /* device: the last training loss */
    const float *logits; /* device: the inference output [T][N][C] FP32 */
    size_t n_logits;
} snn_bench_ops;

/* The protocol of one (trial, precision) run after the workload allocated its buffers:
 * load, eager training step and forward (cuBLASLt plans, autotune), graph capture, reload
 * (prep_ms ends), warm-up, timed training with the step split, update check, warm-up and
 * timed inference, checksum, optimizer timing. t0: host time when the run started;
 * free0: free device memory before the workload allocated. */
snn_status snn_bench_protocol(snn_cuda *c, const snn_cuda_bench_cfg *cfg, const snn_bench_ops *ops,
                              snn_bench_alloc *a, double t0, size_t free0, snn_cuda_bench_result *r);

double snn_bench_now(void); /* monotonic seconds */

/* What a run's precision and FP8 configuration select (cuda_bench.h): FP8 GEMMs, block scaling
 * (power-of-two scales unless fp8_block_fp32_scales), delayed scaling (not with block; the
 * history parameters go into *dl), the storage type between the GEMMs, the static loss scale. */
typedef struct snn_bench_mode {
    int fp8, block, pow2, delayed;
    snn_dtype act;
    float loss_scale;
} snn_bench_mode;

/* FP8 delayed scaling on the device (fp8.md §3.1, the rule of src/precision/fp8_recipe.c).
 * Each quantised tensor has a slot. amax[slot] (the workload's array, "row 0" of the
 * history) collects this step's max|x| (unscaled) from whatever kernel produces or quantises
 * the tensor; snn_bench_delayed_update, enqueued first in a step, turns it into the scale:
 * if amax[slot] == 0 the slot is skipped (history and scale kept); else the window amax is
 * max(amax[slot], the previous len-1 amaxes) ("max") or amax[slot] ("most_recent"), the
 * current amax joins the ring (the oldest drops out), amax[slot] = 0, and
 * scale = fp8_max·2^-margin / window when that is finite and > 0 (else kept; +Inf ->
 * FLT_MAX). Scales start at 1 (the first step quantises with 1, as TE and the CPU do).
 * Slots >= grad0 hold gradients (E5M2, max 57344), the others E4M3 (448).
 * qamax[slot] = fp8_max / scale: handed to snn_cuda_quantize_fp8 as its "amax", it makes
 * that quantiser (s = fp8_max / amax) use the history's scale. Everything stays on the
 * device: no host synchronisation inside a step. */
typedef struct snn_bench_fp8_delayed {
    int nslots, grad0, hlen, margin, most_recent;
    float *hist;  /* [nslots][max(hlen-1, 1)] previous amaxes (a ring; order is irrelevant to max) */
    int *pos;     /* [nslots] next ring position */
    float *scale; /* [nslots] */
    float *qamax; /* [nslots] */
} snn_bench_fp8_delayed;

snn_bench_mode snn_bench_mode_of(const snn_cuda_bench_cfg *cfg, snn_cuda_bench_precision p, snn_bench_fp8_delayed *dl);

snn_status snn_bench_delayed_alloc(snn_bench_alloc *a, snn_bench_fp8_delayed *d, int nslots, int grad0, int hlen,
                                   int margin, int most_recent);
/* Empty histories, scale 1 (the base state). Asynchronous. */
snn_status snn_bench_delayed_reset(snn_cuda *c, const snn_bench_fp8_delayed *d);
/* The scale update at the start of a step (one small kernel, one block per slot). */
snn_status snn_bench_delayed_update(snn_cuda *c, const snn_bench_fp8_delayed *d, float *amax);
/* q = sat(src·scale[0]) (src F32 or BF16, q E4M3 or E5M2, n % 4 == 0, 16-byte aligned),
 * *scale_inv = 1/scale[0], and amax (may be NULL) max-ed with max|src| in the same pass: the
 * delayed-scaling quantiser, one read of the source instead of an amax pass plus a
 * quantisation pass. */
snn_status snn_bench_quantize_scaled(snn_cuda *c, snn_dtype q_type, void *q, snn_dtype src_type, const void *src,
                                     size_t n, const float *scale, float *scale_inv, float *amax);

#endif
