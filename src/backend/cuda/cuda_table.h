/* What CUDA op-table entries defined outside cuda_backend.cu need from the table.
 *
 * The table (cuda_backend.cu) owns one snn_cuda context and stream per device, a workspace
 * and a small scratch area. Entries for a family of ops live in their own file
 * (cuda_table_<family>.cu) and are put into the table by that file's install function,
 * which snn_backend_cuda_create calls. An entry:
 *   - calls snn_cuda_table_check first (it also makes the table's GPU current);
 *   - enqueues on snn_cuda_stream_of(snn_cuda_table_ctx(be)) only;
 *   - may use the workspace for the duration of the call only: the GEMM entry and other
 *     entries reuse it (so an entry that calls be->gemm must not hold a workspace pointer
 *     across that call), and growing it waits for the stream. */
#ifndef SNN_CUDA_TABLE_H
#define SNN_CUDA_TABLE_H

#include "backend/cuda/cuda_internal.h"
extern "C" {
#include "backend/backend.h"
}

/* Bytes of the scratch area: room for flags and host results of one entry at a time. */
#define SNN_CUDA_TABLE_SCRATCH_BYTES 4096

snn_cuda *snn_cuda_table_ctx(const snn_backend *be);
snn_status snn_cuda_table_check(const snn_backend *be, const char *what);
snn_status snn_cuda_table_ws(const snn_backend *be, size_t bytes, void **out);
void *snn_cuda_table_scratch(const snn_backend *be);
/* A grid-stride grid for n elements: enough blocks to fill the GPU, no more. */
unsigned snn_cuda_table_grid(const snn_backend *be, size_t n, unsigned block);

/* A 2-D launch over `lines` rows of `per_line` elements each: blockIdx.y walks the lines
 * (grid-stride), blockIdx.x and the threads a line's elements, so per-line indices are
 * computed once; a short line gets a narrower block (whole warps) so few threads idle, and the
 * thread total stays within what snn_cuda_table_grid allows. */
struct snn_cuda_lines {
    dim3 grid;
    unsigned block;
};
snn_cuda_lines snn_cuda_table_lines(const snn_backend *be, size_t lines, size_t per_line);

/* SNN_CUDA_CONV_VEC=0 in the environment (read once): the convolution, pooling and BatchNorm
 * entries take their one-element walks instead of the vectorised and special ones, which give
 * the same bits (an A/B switch for measurements). */
int snn_cuda_table_vec_off(void);

/* Causal attention through cuBLASLt (cuda_attn_gemm.cu): attention_forward / _backward's
 * contract; dZ is the backward's work (R H S S floats). */
snn_status snn_cuda_attn_gemm_forward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                      float scale, const float *x, float *y, float *P);
snn_status snn_cuda_attn_gemm_backward(const snn_backend *be, snn_dtype t, int R, int S, int H, int G, int hd,
                                       float scale, const float *x, const float *P, const float *dy, float *dx,
                                       float *dZ);

/* Flash-style attention for 16-bit products (cuda_attn_flash.cu): snn_cuda_attn_flash_ok says
 * whether attention_forward / _backward take it for these arguments; the forward then saves
 * (row max, 1 / row sum) [R][H][S][2] in P instead of the probabilities and its FP32 output
 * in work, where the backward also keeps rowsum(dP P) [R][H][S]: work holds
 * snn_cuda_attn_flash_work_floats(R, H, S) floats (head sizes up to 64). */
int snn_cuda_attn_flash_ok(snn_dtype t, int R, int S, int H, int hd);
size_t snn_cuda_attn_flash_work_floats(int R, int H, int S);
/* io16: x, y, dy and dx are stored as t (16-bit activations, attention_forward_io) instead
 * of FP32. */
snn_status snn_cuda_attn_flash_forward(const snn_backend *be, snn_dtype t, int io16, int R, int S, int H, int G,
                                       int hd, float scale, const void *x, void *y, float *P, float *work);
snn_status snn_cuda_attn_flash_backward(const snn_backend *be, snn_dtype t, int io16, int R, int S, int H, int G,
                                        int hd, float scale, const void *x, const float *P, const void *dy,
                                        void *dx, float *work);

/* Graphs (cuda_graph.cu): the real entries while the table is dry, how many dry entries
 * refused, and the generation of the memory recorded graphs point at. */
struct snn_cuda_graph_state {
    snn_backend real;
    int dry;
    int refused; /* entries that refused while dry */
    uint64_t gen;
};
snn_cuda_graph_state *snn_cuda_table_graph(const snn_backend *be);
void snn_cuda_graph_release(snn_backend *be); /* leaves dry mode if a caller did not */

/* The families' install functions (each in its own file). */
void snn_cuda_install_gemm(snn_backend *be);  /* cuda_table_gemm.cu: the GEMM entry */
void snn_cuda_install_conv(snn_backend *be);  /* cuda_table_conv.cu: im2col, pooling */
void snn_cuda_install_norm(snn_backend *be);  /* cuda_table_norm.cu: BatchNorm, dropout, token mean, SSA */
void snn_cuda_install_lm(snn_backend *be);    /* cuda_table_lm.cu: the language-model ops */
void snn_cuda_install_lm_loss(snn_backend *be); /* cuda_table_lm_loss.cu: the LM cross-entropy */
void snn_cuda_install_step(snn_backend *be);    /* cuda_step.cu: class_loss, optim_step */
void snn_cuda_install_graph(snn_backend *be);   /* cuda_graph.cu: graphs and dry mode */

#endif
