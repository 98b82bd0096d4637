/* The geometry of a 2-D convolution or pooling window over FP32 NCHW planes, shared by the
 * op table's convolution and pooling entries (backend.h), their CPU implementations
 * (src/backend/cpu/cpu_conv.c, cpu_im2col.c) and the CUDA ones (cuda_table_conv.cu).
 * A 1-D convolution is the 2-D case with H = 1, kh = 1, sh = 1, ph = 0. */
#ifndef SNN_BACKEND_CONV_GEOM_H
#define SNN_BACKEND_CONV_GEOM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snn_conv_geom {
    int C, H, W;      /* input channels (pooling: planes) and image size */
    int kh, kw;       /* kernel */
    int sh, sw;       /* stride */
    int ph, pw;       /* zero padding */
    int Ho, Wo;       /* output size: (H + 2ph - kh) / sh + 1, likewise for W */
} snn_conv_geom;

/* Fill Ho and Wo from the rest; returns 0 when the output would be empty. */
int snn_conv_geom_finish(snn_conv_geom *g);

#ifdef __cplusplus
}
#endif
#endif
