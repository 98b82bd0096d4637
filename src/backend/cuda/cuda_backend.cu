/* The CUDA op table (backend.h): every entry on one snn_cuda context and its one stream,
 * built from the backend's existing kernels where they compute what the entry promises
 * (memory helpers, cuBLASLt GEMM, conversions, column sums, GELU, the plain and mixed
 * neuron kernels) and from small kernels here (fill, round, scale, sumsq, nonfinite) and in
 * cuda_rmsnorm.cu / cuda_optim_table.cu; the families of cuda_table_<family>.cu (the GEMM
 * among them) install their entries at the end of snn_backend_cuda_create.
 *
 * The table owns a device workspace, grown on demand and kept until destroy, for what an
 * entry needs besides its arguments: the 16-bit copies of GEMM operands, the storage-type
 * copies of the mixed neurons' FP32 arrays, reduction partials, the dL/dk accumulator.
 * Growing it synchronizes the stream first (earlier work may still read the old one), so
 * steady-state calls with the same shapes never allocate. Host results (sumsq, nonfinite,
 * gk, optim_update's flag) come back through a small device scratch area and a download,
 * which waits for the stream.
 *
 * Entry by entry:
 *   alloc/free/upload/download/copy/fill/synchronize: cudaMalloc + a zeroing memset (waited
 *     for), cudaFree, the context's synchronous upload/download, an async D2D copy, a fill
 *     kernel, a stream synchronize;
 *   gemm: cuda_table_gemm.cu (cuBLASLt);
 *   round, scale: kernels (the hardware RNE casts overflow to inf as snn_round_to does);
 *   gelu: snn_cuda_gelu_forward/backward; colsum_add / colsum16_add: backend.h's lane
 *     order (bit-identical to the CPU);
 *   sumsq: double partials over a fixed grid, summed in order (deterministic); nonfinite:
 *     a flag kernel;
 *   neurons: snn_cuda_neuron_forward/backward with FP32 io and spikes (v0 NULL; dL/dk in
 *     one FP32 on the device, downloaded); the mixed ones through snn_cuda_neuron_*_mp with
 *     x / h_seq / v_last converted to and from the storage type in the workspace;
 *   rmsnorm: cuda_rmsnorm.cu; optim_update: cuda_optim_table.cu (bit-identical);
 *   fp8_qdq: cuda_fp8_qdq.cu (every recipe, bit-identical; the amax word in the scratch);
 *   fp8_codes: the same file (per-tensor scales; the codes an FP8 GEMM reads). */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_fp8_qdq.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_layernorm.h"
#include "backend/cuda/cuda_layers.h"
#include "backend/cuda/cuda_neuron_mp.h"
#include "backend/cuda/cuda_table.h"

/* cuda_rmsnorm.cu and cuda_optim_table.cu (arguments checked here). */
void snn_cuda_rmsnorm_chunks(size_t V, size_t *chunk, int *nch);
snn_status snn_cuda_rmsnorm_forward(snn_cuda *c, size_t V, int F, float eps, const float *x, const float *w,
                                    float *y, double *rstd);
snn_status snn_cuda_rmsnorm_backward(snn_cuda *c, size_t V, int F, const float *x, const float *w,
                                     const double *rstd, const float *dy, float *dx, float *dw, double *part);
snn_status snn_cuda_neuron_io_forward(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                                      snn_dtype spike_type, const void *x, void *s, float *h_seq, float *v_last);
snn_status snn_cuda_neuron_io_backward(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                                       const float *h_seq, const void *gs, void *gx, float *gk);
snn_status snn_cuda_neuron_backward_parts(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                          snn_dtype io_type, const void *h_seq, const float *v0, const void *gs,
                                          const void *gv_seq, const float *gv_last, void *gx, float *gv0,
                                          float *gk, int gk_parts, float *gx_tsum, float *gx_amax);
snn_status snn_cuda_neuron_io_forward_bias(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                           snn_dtype io, snn_dtype sp, const float *x, const float *bias,
                                           size_t period, void *s, float *h_seq, float *v_last);
snn_status snn_cuda_table_optim_update(snn_cuda *c, const snn_optim_update *u, size_t n, float *w,
                                       const float *g, float *s0, float *s1, const uint8_t *mask, int *flag);

namespace {

#define SCRATCH_BYTES SNN_CUDA_TABLE_SCRATCH_BYTES /* device scratch for host results */
#define RED_BLOCKS 1024    /* partials of sumsq */

/* The table and its private state; be is first so the table pointer is the struct's. */
struct cuda_table {
    snn_backend be;
    snn_cuda *c;
    int device;
    void *ws;
    size_t ws_bytes;
    void *scratch; /* SCRATCH_BYTES: flags, the FP32 gk, sumsq's total */
    unsigned *cnt; /* colsum's arrival counters, one per 32-column group, zero between calls */
    int cnt_n;
    snn_cuda_graph_state g; /* recording, replay and dry mode (cuda_graph.cu) */
};

inline cuda_table *tab(const snn_backend *be) { return (cuda_table *)be; }
inline cudaStream_t stream(const snn_backend *be) { return snn_cuda_stream_of(tab(be)->c); }
inline size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

/* A CUDA table, and its GPU current on this thread (tables on several GPUs may be driven
 * from one thread: kernels and allocations go to the current device). */
snn_status check_be(const snn_backend *be, const char *what) {
    if (!be || be->device != SNN_DEVICE_CUDA || !tab(be)->c)
        return snn_error(SNN_E_INVALID, "%s: not a CUDA table", what);
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != tab(be)->device) SNN_CU_TRY(cudaSetDevice(tab(be)->device));
    return SNN_OK;
}

/* The workspace with at least `bytes` (256-byte aligned base). */
snn_status ws_get(const snn_backend *be, size_t bytes, void **out) {
    cuda_table *t = tab(be);
    if (bytes > t->ws_bytes) {
        size_t nb = up256(bytes + bytes / 4); /* some headroom: fewer regrowths */
        SNN_CU_TRY(cudaStreamSynchronize(stream(be)));
        t->g.gen++; /* a graph recorded with the old workspace must not run */
        if (t->ws) cudaFree(t->ws);
        t->ws = NULL;
        t->ws_bytes = 0;
        cudaError_t e = cudaMalloc(&t->ws, nb);
        if (e != cudaSuccess) {
            cudaGetLastError();
            t->ws = NULL;
            return snn_error(SNN_E_NOMEM, "CUDA table: cannot grow the workspace to %zu bytes: %s", nb,
                             cudaGetErrorString(e));
        }
        t->ws_bytes = nb;
    }
    *out = t->ws;
    return SNN_OK;
}

unsigned grid_for(const snn_backend *be, size_t n, unsigned block) {
    unsigned g = snn_grid(n, block), cap = (unsigned)snn_cuda_sm_count(tab(be)->c) * 16u;
    return g < cap ? g : cap;
}

/* ---------------------------------------------------------------- kernels */

__global__ void fill_kernel(float *x, float v, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

template <typename T> __global__ void round_kernel(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = snn_rnd16<T>(src[i]);
}
/* Four values a thread (16-byte loads and stores): the rounding passes of the 16-bit modes
 * are pure bandwidth. */
template <typename T> __global__ void round4_kernel(float4 *dst, const float4 *src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 f = src[i];
        f.x = snn_rnd16<T>(f.x), f.y = snn_rnd16<T>(f.y), f.z = snn_rnd16<T>(f.z), f.w = snn_rnd16<T>(f.w);
        dst[i] = f;
    }
}

__global__ void scale_kernel(float *dst, const float *src, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fmul_rn(s, src[i]);
}

__global__ void add_kernel(float *dst, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(a[i], b[i]);
}

/* dst = a + round_to(T, b), four values a thread where the pointers allow (T float: no
 * rounding). The residual sum after a branch whose 16-bit GEMM left its rounding here. */
template <typename T> __global__ void add_rounded4_kernel(float4 *dst, const float4 *a, const float4 *b, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = a[i], y = b[i];
        dst[i] = make_float4(__fadd_rn(x.x, snn_rnd16<T>(y.x)), __fadd_rn(x.y, snn_rnd16<T>(y.y)),
                             __fadd_rn(x.z, snn_rnd16<T>(y.z)), __fadd_rn(x.w, snn_rnd16<T>(y.w)));
    }
}
template <typename T> __global__ void add_rounded_kernel(float *dst, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __fadd_rn(a[i], snn_rnd16<T>(b[i]));
}

/* sumsq: fixed grid of partials in double (grid-stride, then a block tree), then one block
 * sums the partials in index order: deterministic. */

__global__ void __launch_bounds__(256) sumsq_part_kernel(const float *x, size_t n, double *part) {
    __shared__ double red[256];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double a = (double)x[i];
        acc = __dadd_rn(acc, __dmul_rn(a, a));
    }
    acc = snn_block_sum_d(acc, red);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(256) sumsq_final_kernel(const double *part, int np, double *out) {
    __shared__ double red[256];
    double acc = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) acc = __dadd_rn(acc, part[i]);
    acc = snn_block_sum_d(acc, red);
    if (threadIdx.x == 0) *out = acc;
}

/* out[0] = Σ part[0 .. np) in one fixed order (each thread a strided sum, then a fixed tree):
 * PLIF's dL/dk from the neuron kernels' block partials, the same bits on every run. */
__global__ void __launch_bounds__(256) gk_sum_kernel(const float *part, size_t np, float *out) {
    __shared__ float s[256];
    float a = 0.0f;
    for (size_t i = threadIdx.x; i < np; i += 256) a += part[i];
    s[threadIdx.x] = a;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}

__global__ void nonfinite_kernel(const float *x, size_t n, int *flag) {
    bool bad = false;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bad |= !isfinite(x[i]);
    if (bad) *flag = 1;
}

/* ---------------------------------------------------------------- memory */

snn_status t_alloc(const snn_backend *be, size_t bytes, void **out) {
    SNN_TRY(check_be(be, "alloc"));
    if (!out) return snn_error(SNN_E_INVALID, "alloc: NULL output pointer");
    *out = NULL;
    void *p = NULL;
    SNN_TRY(snn_cuda_alloc(tab(be)->c, bytes, &p)); /* cudaMalloc: 256-byte aligned */
    /* zeroed when alloc returns, whatever stream touches the memory next (the table's is
     * non-blocking: no implicit ordering with the legacy default stream) */
    cudaError_t e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, stream(be));
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream(be));
    if (e != cudaSuccess) {
        snn_cuda_free(p);
        return snn_cuda_fail(e, "cudaMemsetAsync (zeroed alloc)");
    }
    *out = p;
    return SNN_OK;
}

void t_free(const snn_backend *be, void *p) {
    if (!p) return;
    if (check_be(be, "free") != SNN_OK) return;
    snn_cuda_free(p); /* cudaFree waits for the work in flight */
}

snn_status t_alloc_host(const snn_backend *be, size_t bytes, void **out) {
    SNN_TRY(check_be(be, "alloc_host"));
    if (!out) return snn_error(SNN_E_INVALID, "alloc_host: NULL output pointer");
    *out = NULL;
    cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        return snn_error(SNN_E_NOMEM, "cudaMallocHost of %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    return SNN_OK;
}

void t_free_host(const snn_backend *be, void *p) {
    if (!p || check_be(be, "free_host") != SNN_OK) return;
    (void)cudaFreeHost(p); /* waits for copies in flight */
}

snn_status t_upload(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    SNN_TRY(check_be(be, "upload"));
    if (bytes == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "upload: NULL pointer with %zu bytes", bytes);
    return snn_cuda_upload(tab(be)->c, dst, src, bytes);
}

snn_status t_download(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    SNN_TRY(check_be(be, "download"));
    if (bytes == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "download: NULL pointer with %zu bytes", bytes);
    return snn_cuda_download(tab(be)->c, dst, src, bytes);
}

snn_status t_copy(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    SNN_TRY(check_be(be, "copy"));
    if (bytes == 0 || dst == src) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "copy: NULL pointer with %zu bytes", bytes);
    SNN_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(be)));
    return SNN_OK;
}

snn_status t_fill(const snn_backend *be, float *x, float value, size_t n) {
    SNN_TRY(check_be(be, "fill"));
    if (n == 0) return SNN_OK;
    if (!x) return snn_error(SNN_E_INVALID, "fill: NULL pointer with n = %zu", n);
    fill_kernel<<<grid_for(be, n, 256), 256, 0, stream(be)>>>(x, value, n);
    SNN_CU_LAUNCHED("fill");
    return SNN_OK;
}

/* Both ends of the range must be device memory of this table's GPU (cudaPointerGetAttributes
 * says where a pointer lives; host and unregistered pointers are refused). */
snn_status t_check_ptr(const snn_backend *be, const void *p, size_t bytes) {
    SNN_TRY(check_be(be, "check_ptr"));
    if (!p) return snn_error(SNN_E_INVALID, "NULL device pointer");
    const char *ends[2] = {(const char *)p, (const char *)p + (bytes ? bytes - 1 : 0)};
    for (int i = 0; i < 2; i++) {
        cudaPointerAttributes a;
        cudaError_t e = cudaPointerGetAttributes(&a, ends[i]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky: clear it */
            return snn_error(SNN_E_INVALID, "pointer %p is not CUDA memory (%s)", (const void *)ends[i],
                             cudaGetErrorString(e));
        }
        if ((a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) || a.device != be->index)
            return snn_error(SNN_E_INVALID, "pointer %p is %s, not memory of cuda:%d", (const void *)ends[i],
                             a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? "another GPU's memory"
                                                                                                 : "host memory",
                             be->index);
    }
    return SNN_OK;
}

snn_status t_synchronize(const snn_backend *be) {
    SNN_TRY(check_be(be, "synchronize"));
    return snn_cuda_synchronize(tab(be)->c);
}

/* ---------------------------------------------------------------- elementwise */

snn_status t_round(const snn_backend *be, snn_dtype t, float *dst, const float *src, size_t n) {
    SNN_TRY(check_be(be, "round"));
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16)
        return snn_error(SNN_E_INVALID, "round: type %s is not supported (f32, f16, bf16)",
                         snn_cuda_dtype_name(t));
    if (n == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "round: NULL pointer with n = %zu", n);
    if (t == SNN_F32) return t_copy(be, dst, src, n * sizeof(float));
    if (n >= 4 && (uintptr_t)dst % 16 == 0 && (uintptr_t)src % 16 == 0) {
        const size_t n4 = n / 4;
        const unsigned g4 = grid_for(be, n4, 256);
        if (t == SNN_F16) round4_kernel<__half><<<g4, 256, 0, stream(be)>>>((float4 *)dst, (const float4 *)src, n4);
        else round4_kernel<__nv_bfloat16><<<g4, 256, 0, stream(be)>>>((float4 *)dst, (const float4 *)src, n4);
        SNN_CU_LAUNCHED("round");
        dst += n4 * 4, src += n4 * 4, n -= n4 * 4;
        if (n == 0) return SNN_OK;
    }
    const unsigned grid = grid_for(be, n, 256);
    if (t == SNN_F16) round_kernel<__half><<<grid, 256, 0, stream(be)>>>(dst, src, n);
    else round_kernel<__nv_bfloat16><<<grid, 256, 0, stream(be)>>>(dst, src, n);
    SNN_CU_LAUNCHED("round");
    return SNN_OK;
}

snn_status t_cast(const snn_backend *be, snn_dtype t, void *dst, const float *src, size_t n) {
    SNN_TRY(check_be(be, "cast"));
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16)
        return snn_error(SNN_E_INVALID, "cast: type %s is not supported (f32, f16, bf16)", snn_cuda_dtype_name(t));
    if (n == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "cast: NULL buffer");
    if (t == SNN_F32) return t_copy(be, dst, src, n * sizeof(float));
    return snn_cuda_convert(tab(be)->c, t, dst, SNN_F32, src, n, NULL, 0);
}

snn_status t_scale(const snn_backend *be, float *dst, const float *src, float s, size_t n) {
    SNN_TRY(check_be(be, "scale"));
    if (n == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "scale: NULL pointer with n = %zu", n);
    scale_kernel<<<grid_for(be, n, 256), 256, 0, stream(be)>>>(dst, src, s, n);
    SNN_CU_LAUNCHED("scale");
    return SNN_OK;
}

snn_status t_add(const snn_backend *be, float *dst, const float *a, const float *b, size_t n) {
    SNN_TRY(check_be(be, "add"));
    if (n == 0) return SNN_OK;
    if (!dst || !a || !b) return snn_error(SNN_E_INVALID, "add: NULL pointer with n = %zu", n);
    add_kernel<<<grid_for(be, n, 256), 256, 0, stream(be)>>>(dst, a, b, n);
    SNN_CU_LAUNCHED("add");
    return SNN_OK;
}

template <typename T> void add_rounded_launch(const snn_backend *be, float *dst, const float *a, const float *b, size_t n) {
    if (n >= 4 && (uintptr_t)dst % 16 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0) {
        const size_t n4 = n / 4;
        add_rounded4_kernel<T><<<grid_for(be, n4, 256), 256, 0, stream(be)>>>((float4 *)dst, (const float4 *)a,
                                                                               (const float4 *)b, n4);
        dst += n4 * 4, a += n4 * 4, b += n4 * 4, n -= n4 * 4;
        if (n == 0) return;
    }
    add_rounded_kernel<T><<<grid_for(be, n, 256), 256, 0, stream(be)>>>(dst, a, b, n);
}

snn_status t_add_rounded(const snn_backend *be, snn_dtype t, float *dst, const float *a, const float *b, size_t n) {
    SNN_TRY(check_be(be, "add_rounded"));
    if (t != SNN_F32 && t != SNN_F16 && t != SNN_BF16)
        return snn_error(SNN_E_INVALID, "add_rounded: type %s is not supported (f32, f16, bf16)",
                         snn_cuda_dtype_name(t));
    if (t == SNN_F32) return t_add(be, dst, a, b, n);
    if (n == 0) return SNN_OK;
    if (!dst || !a || !b) return snn_error(SNN_E_INVALID, "add_rounded: NULL pointer with n = %zu", n);
    if (t == SNN_F16) add_rounded_launch<__half>(be, dst, a, b, n);
    else add_rounded_launch<__nv_bfloat16>(be, dst, a, b, n);
    SNN_CU_LAUNCHED("add_rounded");
    return SNN_OK;
}

/* LayerNorm: the kernels of the whole-model runner (cuda_layernorm.cu), sums in double; y and
 * dy stored as yt (the _io entries: a 16-bit boundary after the norm). */
snn_status t_layernorm_forward_io(const snn_backend *be, snn_dtype yt, size_t V, int F, float eps, const float *x,
                                  const float *w, const float *b, void *y, double *mean, double *rstd) {
    SNN_TRY(check_be(be, "layernorm_forward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "layernorm: F must be positive (got %d)", F);
    if (V == 0) return SNN_OK;
    if (!x || !w || !b || !y || !mean || !rstd) return snn_error(SNN_E_INVALID, "layernorm: NULL pointer");
    return snn_cuda_layernorm_forward_t(tab(be)->c, yt, x, y, V, F, w, b, eps, mean, rstd);
}

snn_status t_layernorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                               const float *b, float *y, double *mean, double *rstd) {
    return t_layernorm_forward_io(be, SNN_F32, V, F, eps, x, w, b, y, mean, rstd);
}

snn_status t_layernorm_backward_io(const snn_backend *be, snn_dtype yt, size_t V, int F, const float *x,
                                   const float *w, const double *mean, const double *rstd, const void *dy, float *dx,
                                   const float *dx_add, float *dw, float *db, void *work) {
    SNN_TRY(check_be(be, "layernorm_backward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "layernorm backward: F must be positive (got %d)", F);
    if (V == 0) return SNN_OK;
    if (!x || !w || !mean || !rstd || !dy || !dw || !db || !work)
        return snn_error(SNN_E_INVALID, "layernorm backward: NULL pointer");
    return snn_cuda_layernorm_backward_t(tab(be)->c, yt, x, dy, dx, dx_add, V, F, w, mean, rstd, dw, db, work);
}

snn_status t_layernorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                                const double *mean, const double *rstd, const float *dy, float *dx,
                                const float *dx_add, float *dw, float *db, void *work) {
    return t_layernorm_backward_io(be, SNN_F32, V, F, x, w, mean, rstd, dy, dx, dx_add, dw, db, work);
}

size_t t_layernorm_work_bytes(const snn_backend *be, size_t V, int F) {
    (void)be;
    return snn_cuda_layernorm_work_bytes(V, F);
}

snn_status t_gelu_forward(const snn_backend *be, const float *x, float *y, size_t n) {
    SNN_TRY(check_be(be, "gelu_forward"));
    if (n == 0) return SNN_OK;
    return snn_cuda_gelu_forward(tab(be)->c, x, y, n);
}

snn_status t_gelu_forward_io(const snn_backend *be, snn_dtype xt, snn_dtype yt, const void *x, void *y, size_t n) {
    SNN_TRY(check_be(be, "gelu_forward"));
    return snn_cuda_gelu_io(tab(be)->c, xt, yt, 0, x, NULL, y, n);
}

snn_status t_gelu_backward_io(const snn_backend *be, snn_dtype xt, snn_dtype yt, const void *x, const void *dy,
                              void *dx, size_t n) {
    SNN_TRY(check_be(be, "gelu_backward"));
    return snn_cuda_gelu_io(tab(be)->c, xt, yt, 1, x, dy, dx, n);
}

snn_status t_gelu_backward(const snn_backend *be, const float *x, const float *dy, float *dx, size_t n) {
    SNN_TRY(check_be(be, "gelu_backward"));
    if (n == 0) return SNN_OK;
    return snn_cuda_gelu_backward(tab(be)->c, x, dy, dx, n);
}

/* ---------------------------------------------------------------- reductions */

/* backend.h's column-sum order: a block of 32 columns (x) by 32 lanes (y); lane y adds rows
 * y, y + 32, ... in order (warps read 32 consecutive columns of a row), then the halving tree
 * in shared memory and out[j] += a[0]: the CPU table's bits. */
/* Lane l's partial of column j: rows l, l + 32, ... added in order from 0, U loads in flight
 * (with few columns each lane's chain of rows / 32 adds waits on memory, not on the adds). */
template <typename T, int U>
__device__ __forceinline__ float colsum_lane(const T *x, int rows, int cols, int j, int l) {
    float acc = 0.0f;
    if (j >= cols) return acc;
    const T *p = x + (size_t)l * (size_t)cols + j;
    const size_t step = (size_t)32 * (size_t)cols;
    int r = l;
    for (; r + 32 * (U - 1) < rows; r += 32 * U, p += U * step) {
        float v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = Io<T>::ld(p[u * step]);
#pragma unroll
        for (int u = 0; u < U; u++) acc = __fadd_rn(acc, v[u]);
    }
    for (; r < rows; r += 32, p += step) acc = __fadd_rn(acc, Io<T>::ld(p[0]));
    return acc;
}

template <typename T>
__global__ void __launch_bounds__(1024) colsum_lanes_kernel(const T *x, int rows, int cols, float *out) {
    __shared__ float a[32][33];
    const int j = blockIdx.x * 32 + threadIdx.x, l = threadIdx.y;
    a[l][threadIdx.x] = colsum_lane<T, 16>(x, rows, cols, j, l);
    __syncthreads();
    for (int h = 16; h >= 1; h /= 2) {
        if (l < h) a[l][threadIdx.x] = __fadd_rn(a[l][threadIdx.x], a[l + h][threadIdx.x]);
        __syncthreads();
    }
    if (l == 0 && j < cols) out[j] = __fadd_rn(out[j], a[0][threadIdx.x]);
}

/* The same order with the 32 lanes of a column group split over NS blocks of 32 / NS lanes,
 * so that a narrow sum (768 columns: 24 groups) spreads over the GPU: each block writes its
 * lanes' partials to part[group][lane][32]; the block that arrives last at its group's counter
 * reads the 32 partials back and runs the halving tree and the add into out, then zeroes the
 * counter for the next call. Every partial and every tree add is the one-block kernel's. */
template <typename T>
__global__ void __launch_bounds__(512) colsum_split_kernel(const T *x, int rows, int cols, int lanes, float *part,
                                                           unsigned *cnt, float *out) {
    __shared__ float a[32][33];
    __shared__ bool last;
    const int g = blockIdx.x, j = g * 32 + threadIdx.x, l = blockIdx.y * lanes + threadIdx.y;
    part[((size_t)g * 32 + l) * 32 + threadIdx.x] = colsum_lane<T, 32>(x, rows, cols, j, l);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(&cnt[g], 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int tid = threadIdx.y * 32 + threadIdx.x, nt = blockDim.y * 32;
    for (int k = tid; k < 32 * 32; k += nt) a[k / 32][k % 32] = __ldcg(&part[(size_t)g * 1024 + k]);
    __syncthreads();
    for (int h = 16; h >= 1; h /= 2) {
        for (int k = tid; k < h * 32; k += nt)
            a[k / 32][k % 32] = __fadd_rn(a[k / 32][k % 32], a[k / 32 + h][k % 32]);
        __syncthreads();
    }
    if (tid < 32 && g * 32 + tid < cols) out[g * 32 + tid] = __fadd_rn(out[g * 32 + tid], a[0][tid]);
    if (tid == 0) cnt[g] = 0u;
}

/* The counters of `groups` column groups (zeroed once; each call leaves them zero). */
snn_status colsum_counters(const snn_backend *be, int groups, unsigned **out) {
    cuda_table *t = tab(be);
    if (groups > t->cnt_n) {
        const int n = groups < 256 ? 256 : groups;
        SNN_CU_TRY(cudaStreamSynchronize(stream(be)));
        t->g.gen++;
        if (t->cnt) cudaFree(t->cnt);
        t->cnt = NULL;
        t->cnt_n = 0;
        cudaError_t e = cudaMalloc(&t->cnt, (size_t)n * sizeof(unsigned));
        if (e == cudaSuccess) e = cudaMemset(t->cnt, 0, (size_t)n * sizeof(unsigned));
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (t->cnt) cudaFree(t->cnt);
            t->cnt = NULL;
            return snn_error(SNN_E_NOMEM, "CUDA table: column-sum counters: %s", cudaGetErrorString(e));
        }
        t->cnt_n = n;
    }
    *out = t->cnt;
    return SNN_OK;
}

template <typename T>
static void split_launch(dim3 grid, dim3 block, cudaStream_t st, const void *x, int rows, int cols, int lanes,
                         float *part, unsigned *cnt, float *out) {
    colsum_split_kernel<T><<<grid, block, 0, st>>>((const T *)x, rows, cols, lanes, part, cnt, out);
}

snn_status colsum_lanes(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out) {
    const int groups = (cols + 31) / 32, sms = snn_cuda_sm_count(tab(be)->c);
    /* lanes split over ns blocks until there are about two blocks an SM */
    int ns = 1;
    while (ns < 16 && groups * ns < 2 * sms) ns *= 2;
    if (ns > 1 && rows >= 32 * 32) {
        float *part = NULL;
        unsigned *cnt = NULL;
        SNN_TRY(ws_get(be, (size_t)groups * 32 * 32 * sizeof(float), (void **)&part));
        SNN_TRY(colsum_counters(be, groups, &cnt));
        const dim3 grid((unsigned)groups, (unsigned)ns), block(32, 32 / ns);
        if (t == SNN_F32) split_launch<float>(grid, block, stream(be), x, rows, cols, 32 / ns, part, cnt, out);
        else if (t == SNN_BF16)
            split_launch<__nv_bfloat16>(grid, block, stream(be), x, rows, cols, 32 / ns, part, cnt, out);
        else if (t == SNN_F8E4M3) split_launch<snn_e4m3>(grid, block, stream(be), x, rows, cols, 32 / ns, part, cnt, out);
        else split_launch<__half>(grid, block, stream(be), x, rows, cols, 32 / ns, part, cnt, out);
        SNN_CU_LAUNCHED("colsum_add");
        return SNN_OK;
    }
    const dim3 grid((unsigned)groups), block(32, 32);
    if (t == SNN_F32) colsum_lanes_kernel<float><<<grid, block, 0, stream(be)>>>((const float *)x, rows, cols, out);
    else if (t == SNN_BF16)
        colsum_lanes_kernel<__nv_bfloat16><<<grid, block, 0, stream(be)>>>((const __nv_bfloat16 *)x, rows, cols, out);
    else if (t == SNN_F8E4M3)
        colsum_lanes_kernel<snn_e4m3><<<grid, block, 0, stream(be)>>>((const snn_e4m3 *)x, rows, cols, out);
    else colsum_lanes_kernel<__half><<<grid, block, 0, stream(be)>>>((const __half *)x, rows, cols, out);
    SNN_CU_LAUNCHED("colsum_add");
    return SNN_OK;
}

snn_status t_colsum_add(const snn_backend *be, const float *x, int rows, int cols, float *out) {
    SNN_TRY(check_be(be, "colsum_add"));
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum_add: negative size (%d x %d)", rows, cols);
    if (rows == 0 || cols == 0) return SNN_OK;
    if (!x || !out) return snn_error(SNN_E_INVALID, "colsum_add: NULL pointer");
    return colsum_lanes(be, SNN_F32, x, rows, cols, out);
}

snn_status t_colsum16_add(const snn_backend *be, snn_dtype t, const void *x, int rows, int cols, float *out) {
    SNN_TRY(check_be(be, "colsum16_add"));
    if (t != SNN_F16 && t != SNN_BF16 && t != SNN_F8E4M3)
        return snn_error(SNN_E_INVALID, "colsum16_add: type must be f16, bf16 or f8e4m3");
    if (rows < 0 || cols < 0) return snn_error(SNN_E_INVALID, "colsum16_add: negative size (%d x %d)", rows, cols);
    if (rows == 0 || cols == 0) return SNN_OK;
    if (!x || !out) return snn_error(SNN_E_INVALID, "colsum16_add: NULL pointer");
    return colsum_lanes(be, t, x, rows, cols, out);
}

/* Σ x² left in device memory (the training step's norm): partials over a fixed grid, then one
 * block sums them in order */
snn_status t_sumsq_to(const snn_backend *be, const float *x, size_t n, double *out) {
    SNN_TRY(check_be(be, "sumsq_to"));
    if (!out) return snn_error(SNN_E_INVALID, "sumsq_to: NULL output");
    if (n && !x) return snn_error(SNN_E_INVALID, "sumsq_to: NULL pointer with n = %zu", n);
    if (n == 0) {
        SNN_CU_TRY(cudaMemsetAsync(out, 0, sizeof(double), stream(be)));
        return SNN_OK;
    }
    void *ws;
    SNN_TRY(ws_get(be, RED_BLOCKS * sizeof(double), &ws));
    unsigned np = snn_grid(n, 256);
    if (np > RED_BLOCKS) np = RED_BLOCKS;
    sumsq_part_kernel<<<np, 256, 0, stream(be)>>>(x, n, (double *)ws);
    SNN_CU_LAUNCHED("sumsq partials");
    sumsq_final_kernel<<<1, 256, 0, stream(be)>>>((const double *)ws, (int)np, out);
    SNN_CU_LAUNCHED("sumsq");
    return SNN_OK;
}

/* the same total brought to the host through the scratch area */
snn_status t_sumsq(const snn_backend *be, const float *x, size_t n, double *out) {
    if (!out) return snn_error(SNN_E_INVALID, "sumsq: NULL output");
    double *res = (double *)tab(be)->scratch;
    SNN_TRY(t_sumsq_to(be, x, n, res));
    return snn_cuda_download(tab(be)->c, out, res, sizeof(double));
}

/* *flag (device) = 1 if any x[i] is NaN or infinite, else 0 */
snn_status t_nonfinite_to(const snn_backend *be, const float *x, size_t n, int *flag) {
    SNN_TRY(check_be(be, "nonfinite_to"));
    if (!flag) return snn_error(SNN_E_INVALID, "nonfinite_to: NULL flag");
    if (n && !x) return snn_error(SNN_E_INVALID, "nonfinite_to: NULL pointer with n = %zu", n);
    SNN_CU_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream(be)));
    if (n == 0) return SNN_OK;
    nonfinite_kernel<<<grid_for(be, n, 256), 256, 0, stream(be)>>>(x, n, flag);
    SNN_CU_LAUNCHED("nonfinite");
    return SNN_OK;
}

snn_status t_upload_async(const snn_backend *be, void *dst, const void *src, size_t bytes) {
    SNN_TRY(check_be(be, "upload_async"));
    if (bytes == 0) return SNN_OK;
    if (!dst || !src) return snn_error(SNN_E_INVALID, "upload_async: NULL pointer with %zu bytes", bytes);
    SNN_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(be)));
    return SNN_OK;
}

/* The scratch flag back on the host (waits for the stream). */
snn_status read_flag(const snn_backend *be, int *flag_host) {
    return snn_cuda_download(tab(be)->c, flag_host, tab(be)->scratch, sizeof(int));
}

/* the same flag brought to the host through the scratch area */
snn_status t_nonfinite(const snn_backend *be, const float *x, size_t n, int *found) {
    if (!found) return snn_error(SNN_E_INVALID, "nonfinite: NULL output");
    *found = 0;
    SNN_TRY(t_nonfinite_to(be, x, n, (int *)tab(be)->scratch));
    if (n == 0) return SNN_OK;
    int f = 0;
    SNN_TRY(read_flag(be, &f));
    *found = f != 0;
    return SNN_OK;
}

/* ---------------------------------------------------------------- FP8 */

snn_status t_fp8_qdq(const snn_backend *be, const snn_fp8_qdq *q, float *amax) {
    SNN_TRY(check_be(be, "fp8_qdq"));
    /* arguments checked there, as the CPU's; the scratch's first word holds the amax */
    return snn_cuda_fp8_qdq(tab(be)->c, q, tab(be)->scratch, amax);
}

snn_status t_fp8_codes(const snn_backend *be, const snn_fp8_codes *q) {
    SNN_TRY(check_be(be, "fp8_codes"));
    /* the scratch's first word holds the current recipe's amax (stream-ordered) */
    return snn_cuda_fp8_codes(tab(be)->c, q, tab(be)->scratch);
}

/* ---------------------------------------------------------------- neurons */

snn_status check_neuron(const snn_neuron_opts *o, int T, const char *what) {
    if (!o) return snn_error(SNN_E_INVALID, "%s: NULL neuron options", what);
    if (T < 0) return snn_error(SNN_E_INVALID, "%s: negative T (%d)", what, T);
    return SNN_OK;
}

snn_status t_neuron_forward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                            const float *x, float *y, float *h_seq, float *v_last) {
    SNN_TRY(check_be(be, "neuron_forward"));
    SNN_TRY(check_neuron(o, T, "neuron_forward"));
    if (n == 0) return SNN_OK;
    if (T == 0) /* no step: the membrane is still its reset value */
        return v_last ? t_fill(be, v_last, o->soft_reset ? 0.0f : o->v_reset, n) : SNN_OK;
    if (!x || !y) return snn_error(SNN_E_INVALID, "neuron_forward: NULL x or y");
    /* FP32 io and spikes, no bias, v0 NULL: every neuron starts from its reset value */
    return snn_cuda_neuron_forward(tab(be)->c, o, k, T, n, SNN_F32, SNN_F32, x, NULL, 0, NULL, y, h_seq, NULL,
                                   v_last);
}

snn_status t_neuron_backward(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                             const float *h_seq, const float *dy, float *dx, double *gk) {
    SNN_TRY(check_be(be, "neuron_backward"));
    SNN_TRY(check_neuron(o, T, "neuron_backward"));
    if (gk) *gk = 0.0;
    const size_t N = (size_t)T * n;
    if (N == 0) return SNN_OK;
    if (!h_seq) return snn_error(SNN_E_INVALID, "neuron_backward: NULL h_seq");
    /* the CPU's dL/dk exists for LIF too (any decaying neuron); the CUDA kernel computes it
     * for the PLIF kind, whose dynamics with the same k are LIF's */
    snn_neuron_opts ok = *o;
    const int want_k = gk && o->kind != SNN_NEURON_IF;
    if (!dx && !want_k) return SNN_OK; /* nothing asked for (IF's dL/dk is 0) */
    if (want_k) ok.kind = SNN_NEURON_PLIF;
    /* the kernel needs gs and gx: a zero gradient and a throw-away dx from the workspace;
     * dL/dk: one partial a block (blocks of at least 32 threads), summed in order after */
    const size_t n_parts = want_k ? (n + 31) / 32 : 0;
    size_t need = up256(n_parts * sizeof(float)), off_dy = 0, off_dx = 0;
    if (!dy) {
        off_dy = need;
        need += up256(N * sizeof(float));
    }
    if (!dx) {
        off_dx = need;
        need += up256(N * sizeof(float));
    }
    void *ws = NULL;
    if (need) SNN_TRY(ws_get(be, need, &ws));
    if (!dy) {
        SNN_CU_TRY(cudaMemsetAsync((char *)ws + off_dy, 0, N * sizeof(float), stream(be)));
        dy = (const float *)((char *)ws + off_dy);
    }
    if (!dx) dx = (float *)((char *)ws + off_dx);
    float *gk_dev = (float *)tab(be)->scratch, *parts = (float *)ws;
    if (want_k) SNN_CU_TRY(cudaMemsetAsync(parts, 0, n_parts * sizeof(float), stream(be)));
    SNN_TRY(snn_cuda_neuron_backward_parts(tab(be)->c, &ok, k, T, n, SNN_F32, h_seq, NULL, dy, NULL, NULL, dx, NULL,
                                           want_k ? parts : NULL, 1, NULL, NULL));
    if (want_k) {
        gk_sum_kernel<<<1, 256, 0, stream(be)>>>(parts, n_parts, gk_dev);
        SNN_CU_LAUNCHED("gk_sum");
        float f = 0.0f;
        SNN_TRY(snn_cuda_download(tab(be)->c, &f, gk_dev, sizeof f));
        *gk = (double)f;
    }
    return SNN_OK;
}

snn_status t_neuron_forward_io(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                               const void *x, void *y, float *h_seq, float *v_last) {
    SNN_TRY(check_be(be, "neuron_forward_io"));
    SNN_TRY(check_neuron(o, T, "neuron_forward_io"));
    if (n == 0) return SNN_OK;
    if (T == 0) return v_last ? t_fill(be, v_last, o->soft_reset ? 0.0f : o->v_reset, n) : SNN_OK;
    return snn_cuda_neuron_io_forward(tab(be)->c, o, k, T, n, io, io, x, y, h_seq, v_last);
}

snn_status t_neuron_forward_io_bias(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                    snn_dtype io, snn_dtype sp, const float *x, const float *bias, size_t period,
                                    void *y, float *h_seq, float *v_last) {
    SNN_TRY(check_be(be, "neuron_forward_io_bias"));
    SNN_TRY(check_neuron(o, T, "neuron_forward_io_bias"));
    if (n == 0) return SNN_OK;
    if (T == 0) return v_last ? t_fill(be, v_last, o->soft_reset ? 0.0f : o->v_reset, n) : SNN_OK;
    return snn_cuda_neuron_io_forward_bias(tab(be)->c, o, k, T, n, io, sp, x, bias, period, y, h_seq, v_last);
}

snn_status t_neuron_backward_io(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                snn_dtype io, const float *h_seq, const void *dy, void *dx, double *gk) {
    SNN_TRY(check_be(be, "neuron_backward_io"));
    SNN_TRY(check_neuron(o, T, "neuron_backward_io"));
    if (gk) *gk = 0.0;
    if ((size_t)T * n == 0) return SNN_OK;
    if (!dy || !dx) return snn_error(SNN_E_INVALID, "neuron_backward_io: NULL dy or dx");
    const int want_k = gk && o->kind == SNN_NEURON_PLIF;
    float *gk_dev = (float *)tab(be)->scratch, *parts = NULL;
    const size_t n_parts = (n + 31) / 32; /* one partial a block, summed in order after */
    if (want_k) {
        SNN_TRY(ws_get(be, n_parts * sizeof(float), (void **)&parts));
        SNN_CU_TRY(cudaMemsetAsync(parts, 0, n_parts * sizeof(float), stream(be)));
    }
    SNN_TRY(snn_cuda_neuron_io_backward(tab(be)->c, o, k, T, n, io, h_seq, dy, dx, parts));
    if (want_k) {
        gk_sum_kernel<<<1, 256, 0, stream(be)>>>(parts, n_parts, gk_dev);
        SNN_CU_LAUNCHED("gk_sum");
        float f = 0.0f;
        SNN_TRY(snn_cuda_download(tab(be)->c, &f, gk_dev, sizeof f));
        *gk = (double)f;
    }
    return SNN_OK;
}

unsigned sat_flag(snn_dtype t) { return snn_cuda_is_fp8(t) ? (unsigned)SNN_CONVERT_SATURATE : 0u; }

bool known_storage(snn_dtype t) { return t >= SNN_F32 && t <= SNN_F8E5M2; }

snn_status t_neuron_forward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                               snn_dtype S, snn_dtype F, const float *x, float *y, float *h_seq, float *v_last) {
    SNN_TRY(check_be(be, "neuron_forward_mp"));
    SNN_TRY(check_neuron(o, T, "neuron_forward_mp"));
    if (!known_storage(S)) return snn_error(SNN_E_INVALID, "neuron_forward_mp: unknown storage dtype %d", (int)S);
    snn_cuda *c = tab(be)->c;
    const size_t N = (size_t)T * n;
    if (N > 0 && (!x || !y)) return snn_error(SNN_E_INVALID, "neuron_forward_mp: NULL x or y");
    if (S == SNN_F32) /* FP32 storage: the table's arrays are the kernel's */
        return snn_cuda_neuron_forward_mp(c, o, k, T, n, S, F, SNN_F32, x, NULL, y, h_seq, v_last);
    /* x, h_seq and v_last live in S on the device kernel: copies in the workspace */
    const size_t es = snn_cuda_dsize(S);
    const size_t off_h = up256(N * es), off_v = off_h + up256(h_seq ? N * es : 0);
    void *ws;
    SNN_TRY(ws_get(be, off_v + (v_last ? n * es : 0) + 256, &ws));
    void *xs = ws, *hs = (char *)ws + off_h, *vs = (char *)ws + off_v;
    if (N > 0) SNN_TRY(snn_cuda_convert(c, S, xs, SNN_F32, x, N, NULL, sat_flag(S)));
    SNN_TRY(snn_cuda_neuron_forward_mp(c, o, k, T, n, S, F, SNN_F32, N ? xs : NULL, NULL, y, h_seq ? hs : NULL,
                                       v_last ? vs : NULL));
    if (h_seq && N > 0) SNN_TRY(snn_cuda_convert(c, SNN_F32, h_seq, S, hs, N, NULL, 0));
    if (v_last && n > 0) SNN_TRY(snn_cuda_convert(c, SNN_F32, v_last, S, vs, n, NULL, 0));
    return SNN_OK;
}

snn_status t_neuron_backward_mp(const snn_backend *be, const snn_neuron_opts *o, float k, int T, size_t n,
                                snn_dtype S, snn_dtype F, snn_dtype B, const float *h_seq, const float *dy,
                                float *dx, double *gk) {
    SNN_TRY(check_be(be, "neuron_backward_mp"));
    SNN_TRY(check_neuron(o, T, "neuron_backward_mp"));
    if (!known_storage(S)) return snn_error(SNN_E_INVALID, "neuron_backward_mp: unknown storage dtype %d", (int)S);
    snn_cuda *c = tab(be)->c;
    const size_t N = (size_t)T * n, es = snn_cuda_dsize(S);
    if (N > 0 && !h_seq) return snn_error(SNN_E_INVALID, "neuron_backward_mp: NULL h_seq");
    const size_t glen = snn_cuda_neuron_mp_gk_len(n);
    const size_t off_gk = 0, off_h = up256(glen * sizeof(double));
    void *ws;
    SNN_TRY(ws_get(be, off_h + (S == SNN_F32 ? 0 : N * es) + 256, &ws));
    double *gk_dev = gk ? (double *)((char *)ws + off_gk) : NULL;
    const void *hs = h_seq;
    if (S != SNN_F32 && N > 0) {
        /* h_seq holds values of S (the forward stored them): the conversion is exact */
        void *h16 = (char *)ws + off_h;
        SNN_TRY(snn_cuda_convert(c, S, h16, SNN_F32, h_seq, N, NULL, sat_flag(S)));
        hs = h16;
    }
    SNN_TRY(snn_cuda_neuron_backward_mp(c, o, k, T, n, S, F, B, N ? hs : NULL, NULL, dy, NULL, dx, NULL, gk_dev));
    if (gk) SNN_TRY(snn_cuda_download(c, gk, gk_dev, sizeof(double)));
    return SNN_OK;
}

/* ---------------------------------------------------------------- norms */

snn_status t_rmsnorm_forward(const snn_backend *be, size_t V, int F, float eps, const float *x, const float *w,
                             float *y, double *rstd) {
    SNN_TRY(check_be(be, "rmsnorm_forward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "rmsnorm_forward: features must be positive (got %d)", F);
    if (V == 0) return SNN_OK;
    if (!x || !w || !y || !rstd) return snn_error(SNN_E_INVALID, "rmsnorm_forward: NULL pointer");
    return snn_cuda_rmsnorm_forward(tab(be)->c, V, F, eps, x, w, y, rstd);
}

snn_status t_rmsnorm_backward(const snn_backend *be, size_t V, int F, const float *x, const float *w,
                              const double *rstd, const float *dy, float *dx, float *dw) {
    SNN_TRY(check_be(be, "rmsnorm_backward"));
    if (F <= 0) return snn_error(SNN_E_INVALID, "rmsnorm_backward: features must be positive (got %d)", F);
    if (V == 0) return SNN_OK;
    if (!x || !w || !rstd || !dy || !dw) return snn_error(SNN_E_INVALID, "rmsnorm_backward: NULL pointer");
    size_t chunk;
    int nch;
    snn_cuda_rmsnorm_chunks(V, &chunk, &nch);
    void *ws;
    SNN_TRY(ws_get(be, (size_t)nch * (size_t)F * sizeof(double), &ws));
    return snn_cuda_rmsnorm_backward(tab(be)->c, V, F, x, w, rstd, dy, dx, dw, (double *)ws);
}

/* ---------------------------------------------------------------- optimizers */

snn_status t_optim_update(const snn_backend *be, const snn_optim_update *u, size_t n, float *w, const float *g,
                          float *s0, float *s1, const uint8_t *decay_mask, int *nonfinite) {
    SNN_TRY(check_be(be, "optim_update"));
    if (!u) return snn_error(SNN_E_INVALID, "optim_update: NULL update");
    if (nonfinite) *nonfinite = 0;
    if (n == 0) return SNN_OK;
    if (!w || !g) return snn_error(SNN_E_INVALID, "optim_update: NULL weights or gradient");
    if (u->adam && (!s0 || !s1)) return snn_error(SNN_E_INVALID, "optim_update: Adam needs m (s0) and v (s1)");
    SNN_TRY(snn_optim_copies_check("optim_update", u->copies, u->n_copies, n));
    /* SGD with momentum but no buffer runs without momentum, as on the CPU */
    int *flag = (int *)tab(be)->scratch;
    SNN_CU_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream(be)));
    SNN_TRY(snn_cuda_table_optim_update(tab(be)->c, u, n, w, g, s0, s1, decay_mask, flag));
    if (!nonfinite) return SNN_OK;
    int f = 0;
    SNN_TRY(read_flag(be, &f));
    *nonfinite = f != 0;
    return SNN_OK;
}

} // namespace

/* ---------------------------------------------------------------- for entries in other files */

snn_cuda *snn_cuda_table_ctx(const snn_backend *be) { return tab(be)->c; }
snn_cuda_graph_state *snn_cuda_table_graph(const snn_backend *be) { return &tab(be)->g; }
snn_status snn_cuda_table_check(const snn_backend *be, const char *what) { return check_be(be, what); }
snn_status snn_cuda_table_ws(const snn_backend *be, size_t bytes, void **out) { return ws_get(be, bytes, out); }
void *snn_cuda_table_scratch(const snn_backend *be) { return tab(be)->scratch; }
unsigned snn_cuda_table_grid(const snn_backend *be, size_t n, unsigned block) { return grid_for(be, n, block); }
int snn_cuda_table_vec_off(void) {
    static int off = -1;
    if (off < 0) {
        const char *e = getenv("SNN_CUDA_CONV_VEC");
        off = e && !strcmp(e, "0");
    }
    return off;
}

snn_cuda_lines snn_cuda_table_lines(const snn_backend *be, size_t lines, size_t per_line) {
    unsigned bd = 256;
    if (per_line < 256) bd = per_line <= 32 ? 32u : (unsigned)((per_line + 31) / 32 * 32);
    const size_t cap = (size_t)grid_for(be, (size_t)1 << 40, 256) * (256 / bd);
    size_t gx = (per_line + bd - 1) / bd;
    if (gx > cap) gx = cap;
    if (gx < 1) gx = 1;
    size_t gy = cap / gx;
    if (gy < 1) gy = 1;
    if (gy > lines) gy = lines;
    if (gy > 65535) gy = 65535;
    snn_cuda_lines l = {dim3((unsigned)gx, (unsigned)gy, 1), bd};
    return l;
}

/* ---------------------------------------------------------------- factory */

extern "C" snn_status snn_backend_cuda_create(int device, snn_backend **out) {
    if (!out) return snn_error(SNN_E_INVALID, "snn_backend_cuda_create: NULL output pointer");
    *out = NULL;
    cuda_table *t = (cuda_table *)calloc(1, sizeof *t);
    if (!t) return snn_error(SNN_E_NOMEM, "out of host memory for the CUDA table");
    t->device = device;
    snn_status st = snn_cuda_create(device, 0, &t->c);
    if (st == SNN_OK) st = snn_cuda_alloc(t->c, SCRATCH_BYTES, &t->scratch);
    if (st != SNN_OK) {
        if (t->c) snn_cuda_destroy(t->c);
        free(t);
        return st;
    }
    snn_backend *be = &t->be;
    be->name = "cuda";
    be->device = SNN_DEVICE_CUDA;
    be->index = device;
    be->ctx = t->c;
    be->alloc = t_alloc;
    be->free = t_free;
    be->upload = t_upload;
    be->download = t_download;
    be->copy = t_copy;
    be->fill = t_fill;
    be->synchronize = t_synchronize;
    be->check_ptr = t_check_ptr;
    be->alloc_host = t_alloc_host;
    be->free_host = t_free_host;
    be->gemm_f32 = NULL; /* no context on that entry: host memory only */
    be->gemm_rounds = 1;
    be->round = t_round;
    be->cast = t_cast;
    be->scale = t_scale;
    be->add = t_add;
    be->add_rounded = t_add_rounded;
    be->layernorm_forward = t_layernorm_forward;
    be->layernorm_backward = t_layernorm_backward;
    be->layernorm_forward_io = t_layernorm_forward_io;
    be->layernorm_backward_io = t_layernorm_backward_io;
    be->layernorm_work_bytes = t_layernorm_work_bytes;
    be->gelu_forward = t_gelu_forward;
    be->gelu_backward = t_gelu_backward;
    be->gelu_forward_io = t_gelu_forward_io;
    be->gelu_backward_io = t_gelu_backward_io;
    be->colsum_add = t_colsum_add;
    be->sumsq = t_sumsq;
    be->nonfinite = t_nonfinite;
    be->fp8_qdq = t_fp8_qdq;
    be->fp8_codes = t_fp8_codes;
    be->neuron_forward = t_neuron_forward;
    be->neuron_backward = t_neuron_backward;
    be->neuron_forward_io = t_neuron_forward_io;
    be->neuron_forward_io_bias = t_neuron_forward_io_bias;
    be->neuron_backward_io = t_neuron_backward_io;
    be->colsum16_add = t_colsum16_add;
    be->neuron_forward_mp = t_neuron_forward_mp;
    be->neuron_backward_mp = t_neuron_backward_mp;
    be->rmsnorm_forward = t_rmsnorm_forward;
    be->rmsnorm_backward = t_rmsnorm_backward;
    be->optim_update = t_optim_update;
    be->sumsq_to = t_sumsq_to;
    be->nonfinite_to = t_nonfinite_to;
    be->upload_async = t_upload_async;
    snn_cuda_install_step(be);
    snn_cuda_install_gemm(be);
    snn_cuda_install_conv(be);
    snn_cuda_install_norm(be);
    snn_cuda_install_lm(be);
    snn_cuda_install_lm_loss(be);
    snn_cuda_install_graph(be); /* last: dry mode covers every entry installed before it */
    *out = be;
    return SNN_OK;
}

extern "C" void snn_backend_cuda_destroy(snn_backend *be) {
    if (!be) return;
    cuda_table *t = tab(be);
    if (check_be(be, "destroy") == SNN_OK) snn_cuda_synchronize(t->c);
    snn_cuda_graph_release(be);
    if (t->ws) cudaFree(t->ws);
    if (t->scratch) snn_cuda_free(t->scratch);
    if (t->cnt) cudaFree(t->cnt);
    snn_cuda_destroy(t->c);
    free(t);
}
