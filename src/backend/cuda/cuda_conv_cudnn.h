/* Conv2d through cuDNN (the legacy convolution API), an alternative to the explicit lowering
 * of cuda_conv.cu (im2col + GEMM + layout change). Private to the CUDA backend.
 *
 * Semantics are the CPU Conv2d's (src/nn/conv2d.c): x [B][C][H][W], weight [O][C][k][k]
 * (PyTorch's layout, the runner's flat parameter layout), optional bias [O], square kernel,
 * equal stride and zero padding on both axes, y [B][O][Ho][Wo] with
 * Ho = (H + 2 pad - k) / stride + 1. Activations and gradients the caller sees are FP32.
 *
 * Compute types (snn_cudnn_conv_desc.compute):
 *  - F32: FP32 operands, FMA math (TF32 off unless allow_tf32): FP32 parity with the CPU.
 *  - BF16 / F16, store SNN_CUDNN_STORE_16: x, w and dy are tensors of the compute type
 *    (half the bytes); cuDNN accumulates in FP32 (compute type CUDNN_DATA_FLOAT, tensor-op
 *    algorithms only: cuDNN's default-math kernels on 16-bit data were seen to round
 *    intermediate results to 16 bits) and writes y, dx and dW in the compute type,
 *    which this file widens to FP32: y = round16(round16(conv) + bias) (one rounding less
 *    when bias is NULL, as in convsnn and Spikformer), dx = round16(FP32 sum) (the CPU
 *    reference's rounding), dW += round16(FP32 sum of this call) (the CPU keeps dW FP32).
 *  - BF16 / F16, store SNN_CUDNN_STORE_F32: x, w and dy are FP32 tensors holding values of
 *    the compute type (snn_cudnn_round makes them); TF32 tensor-core math, whose 10-bit
 *    mantissa holds every BF16 and FP16 value exactly, so products are exact and sums FP32:
 *    y = round16(conv + bias), dx = round16(conv), dW += FP32 sum — the CPU reference's
 *    semantics (src/precision/prec_exec.c), up to the order of the FP32 additions.
 * Algorithms: FFT and Winograd are never used (they transform and round the operands);
 * only deterministic algorithms are used, so a replayed step repeats its bits.
 *
 * Every call after plan creation only enqueues work on the context's stream with the
 * caller's workspace (no allocation, no synchronisation), so it can be captured into a CUDA
 * graph. Run each direction once eagerly before capturing (the runner's first step does):
 * the first call of a cuDNN kernel may load its module.
 *
 * Built without cuDNN (SNN_HAVE_CUDNN undefined), every function returns SNN_E_UNSUPPORTED
 * with the message "built without cuDNN" and the size queries return 0. */
#ifndef SNN_CUDA_CONV_CUDNN_H
#define SNN_CUDA_CONV_CUDNN_H

#include <stddef.h>

#include "snn/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN handle bound to a context's stream (one per snn_cuda, destroyed before it). */
typedef struct snn_cudnn snn_cudnn;
/* One convolution shape: descriptors, the algorithm of each direction, workspace size. */
typedef struct snn_cudnn_conv snn_cudnn_conv;

/* 1 when this build has the cuDNN path, else 0. */
int snn_cudnn_built(void);

snn_status snn_cudnn_create(snn_cuda *c, snn_cudnn **out);
void snn_cudnn_destroy(snn_cudnn *h); /* NULL is a no-op */

typedef enum snn_cudnn_store {
    SNN_CUDNN_STORE_16 = 0,  /* 16-bit compute: operands stored in the compute type */
    SNN_CUDNN_STORE_F32 = 1  /* 16-bit compute: FP32 operands holding 16-bit values, TF32 math */
} snn_cudnn_store;

typedef struct snn_cudnn_conv_desc {
    int B, C, H, W;        /* input [B][C][H][W] (B = T*N rows) */
    int O, k, stride, pad; /* output channels, square kernel, stride, zero padding */
    snn_dtype compute;     /* SNN_F32, SNN_BF16 or SNN_F16 */
    snn_cudnn_store store; /* 16-bit compute only */
    int allow_tf32;        /* F32 only: permit TF32 tensor cores (no CPU parity then) */
    int tune;              /* 0: cuDNN's heuristic ranking (same choice every run);
                            * 1: time the candidates once (cudnnFind*Ex) at creation, which
                            * allocates temporary tensors and synchronises */
    size_t workspace_limit; /* most cuDNN workspace bytes an algorithm may use; 0 = 256 MiB */
} snn_cudnn_conv_desc;

/* Validates the shape, builds the descriptors and picks the algorithms. Not capturable
 * (queries, and with tune allocations): call it at model-create time. */
snn_status snn_cudnn_conv_create(snn_cudnn *h, const snn_cudnn_conv_desc *d,
                                 snn_cudnn_conv **out);
void snn_cudnn_conv_destroy(snn_cudnn_conv *p); /* NULL is a no-op */
/* Device scratch the three calls below need (cuDNN workspace, 16-bit staging of outputs,
 * bias-gradient partials), 256-byte aligned regions inside; one buffer of the largest size
 * can be shared by every plan whose calls run on the same stream. */
size_t snn_cudnn_conv_work_bytes(const snn_cudnn_conv *p);
/* Storage type of x, w and dy: the compute type for STORE_16, else F32. */
snn_dtype snn_cudnn_conv_operand_type(const snn_cudnn_conv *p);
/* The chosen algorithms, math types, workspace sizes and accumulation type, for logs
 * ("fwd IMPLICIT_PRECOMP_GEMM/tensor-op ws 0 B; ..."); "(fallback)" marks a direction whose
 * algorithm came from the fixed list because cuDNN's ranking offered nothing usable. */
const char *snn_cudnn_conv_describe(const snn_cudnn_conv *p);

/* y [B][O][Ho][Wo] FP32 = conv(x, w) + bias (bias FP32 [O] or NULL), rounded to the compute
 * type for 16-bit compute (stored as FP32). x, w of the operand type. */
snn_status snn_cudnn_conv_forward(snn_cudnn_conv *p, const void *x, const void *w,
                                  const float *bias, float *y, void *work);
/* dx [B][C][H][W] FP32 (overwritten) = the adjoint of the forward applied to dy, rounded to
 * the compute type for 16-bit compute. w, dy of the operand type. */
snn_status snn_cudnn_conv_backward_data(snn_cudnn_conv *p, const void *w, const void *dy,
                                        float *dx, void *work);
/* dw [O][C][k][k] FP32 += the weight gradient; db [O] FP32 += sum over b, y, x of dy
 * (db may be NULL; deterministic two-pass sum in FP32). x, dy of the operand type. */
snn_status snn_cudnn_conv_backward_filter(snn_cudnn_conv *p, const void *x, const void *dy,
                                          float *dw, float *db, void *work);

/* dst[i] = src[i] rounded to nearest even in t (BF16 or F16), stored as FP32 (dst may equal
 * src): the operands of a STORE_F32 plan. t = F32 copies. */
snn_status snn_cudnn_round(snn_cuda *c, snn_dtype t, float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif
