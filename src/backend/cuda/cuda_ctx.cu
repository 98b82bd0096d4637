/* CUDA context: device, stream, cuBLASLt handle and workspace, memory helpers, errors. */
#include <stdlib.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_internal.h"

struct snn_cuda {
    int device;
    int sm_count;
    cudaStream_t stream;
    snn_cuda_gemm_state *gemm; /* cuBLASLt handle, workspace, plan cache (cuda_gemm.cu) */
    int neuron_pack, neuron_prefetch; /* snn_cuda_set_neuron_tuning; 0 = automatic */
};

snn_status snn_cuda_fail(cudaError_t e, const char *what) {
    return snn_error(e == cudaErrorMemoryAllocation ? SNN_E_NOMEM : SNN_E_UNSUPPORTED,
                     "CUDA call %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

const char *snn_cuda_dtype_name(snn_dtype t) {
    switch (t) {
    case SNN_F32: return "f32";
    case SNN_F16: return "f16";
    case SNN_BF16: return "bf16";
    case SNN_F8E4M3: return "f8e4m3";
    case SNN_F8E5M2: return "f8e5m2";
    case SNN_E8M0: return "e8m0";
    default: return "unknown";
    }
}

cudaStream_t snn_cuda_stream_of(snn_cuda *c) { return c->stream; }
void snn_cuda_neuron_tuning_of(snn_cuda *c, int *pack_bytes, int *prefetch) {
    *pack_bytes = c->neuron_pack;
    *prefetch = c->neuron_prefetch;
}

extern "C" snn_status snn_cuda_set_neuron_tuning(snn_cuda *c, int pack_bytes, int prefetch) {
    if (pack_bytes != 0 && pack_bytes != 1 && pack_bytes != 8 && pack_bytes != 16)
        return snn_error(SNN_E_INVALID, "neuron pack size must be 0 (auto), 1, 8 or 16 bytes, got %d",
                         pack_bytes);
    if (prefetch < 0 || prefetch > 2)
        return snn_error(SNN_E_INVALID, "neuron prefetch must be 0 (auto), 1 (short) or 2 (long)");
    c->neuron_pack = pack_bytes;
    c->neuron_prefetch = prefetch;
    return SNN_OK;
}
int snn_cuda_sm_count(snn_cuda *c) { return c->sm_count; }
snn_cuda_gemm_state *snn_cuda_gemm_of(snn_cuda *c) { return c->gemm; }

extern "C" snn_status snn_cuda_device_count(int *count) {
    if (!count) return snn_error(SNN_E_INVALID, "snn_cuda_device_count: count is NULL");
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e != cudaSuccess) {
        *count = 0;
        return snn_error(SNN_E_UNSUPPORTED, "no CUDA device is usable (%s)", cudaGetErrorString(e));
    }
    return SNN_OK;
}

extern "C" snn_status snn_cuda_create(int device, size_t workspace_bytes, snn_cuda **out) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return snn_error(SNN_E_UNSUPPORTED, "no CUDA device is usable (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (device < 0 || device >= count)
        return snn_error(SNN_E_INVALID, "CUDA device %d does not exist (%d found)", device, count);
    snn_cuda *c = (snn_cuda *)calloc(1, sizeof *c);
    if (!c) return snn_error(SNN_E_NOMEM, "out of host memory for the CUDA context");
    c->device = device;
    snn_status st = SNN_OK;
    if ((e = cudaSetDevice(device)) != cudaSuccess) st = snn_cuda_fail(e, "cudaSetDevice");
    if (!st && (e = cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount,
                                           device)) != cudaSuccess)
        st = snn_cuda_fail(e, "cudaDeviceGetAttribute");
    if (!st && (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = snn_cuda_fail(e, "cudaStreamCreate");
    if (!st) st = snn_cuda_gemm_state_create(workspace_bytes ? workspace_bytes : (32u << 20),
                                             &c->gemm);
    if (st) {
        snn_cuda_destroy(c);
        return st;
    }
    *out = c;
    return SNN_OK;
}

extern "C" void snn_cuda_destroy(snn_cuda *c) {
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    snn_cuda_gemm_state_destroy(c->gemm);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void *snn_cuda_stream(snn_cuda *c) { return (void *)c->stream; }

extern "C" snn_status snn_cuda_synchronize(snn_cuda *c) {
    SNN_CU_TRY(cudaStreamSynchronize(c->stream));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_device_info(snn_cuda *c, char *name, size_t name_len,
                                           int *cc_major, int *cc_minor, int *sm_count) {
    cudaDeviceProp p;
    SNN_CU_TRY(cudaGetDeviceProperties(&p, c->device));
    if (name && name_len) {
        strncpy(name, p.name, name_len - 1);
        name[name_len - 1] = '\0';
    }
    if (cc_major) *cc_major = p.major;
    if (cc_minor) *cc_minor = p.minor;
    if (sm_count) *sm_count = p.multiProcessorCount;
    return SNN_OK;
}

extern "C" snn_status snn_cuda_alloc(snn_cuda *c, size_t bytes, void **out) {
    (void)c;
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError(); /* clear the sticky-free allocation error */
        return snn_error(SNN_E_NOMEM, "cudaMalloc of %zu bytes failed: %s", bytes,
                         cudaGetErrorString(e));
    }
    return SNN_OK;
}

extern "C" void snn_cuda_free(void *p) {
    if (p) cudaFree(p);
}

extern "C" snn_status snn_cuda_upload(snn_cuda *c, void *dst, const void *src, size_t bytes) {
    SNN_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    SNN_CU_TRY(cudaStreamSynchronize(c->stream));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_download(snn_cuda *c, void *dst, const void *src, size_t bytes) {
    SNN_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    SNN_CU_TRY(cudaStreamSynchronize(c->stream));
    return SNN_OK;
}

extern "C" snn_status snn_cuda_memset(snn_cuda *c, void *dst, int byte, size_t bytes) {
    SNN_CU_TRY(cudaMemsetAsync(dst, byte, bytes, c->stream));
    return SNN_OK;
}

/* SplitMix64 of (seed, index): the same value for an index whatever the launch shape. */
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void fill_random_kernel(float *x, size_t n, uint64_t seed, int normal, float lo,
                                   float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t r = mix64(seed * 0x9E3779B97F4A7C15ull + i + 1);
        float u1 = ((uint32_t)(r >> 40) + 0.5f) * (1.0f / 16777216.0f); /* (0,1) */
        if (!normal) {
            x[i] = fminf(lo + (hi - lo) * u1, lo < hi ? nextafterf(hi, lo) : hi); /* [lo, hi) */
        } else {
            float u2 = ((uint32_t)(r & 0xFFFFFFu)) * (1.0f / 16777216.0f);
            float rad = sqrtf(-2.0f * logf(u1));
            x[i] = lo + hi * rad * cospif(2.0f * u2);
        }
    }
}

extern "C" snn_status snn_cuda_fill_random(snn_cuda *c, float *x, size_t n, uint64_t seed,
                                           int normal, float lo, float hi) {
    if (n == 0) return SNN_OK;
    unsigned grid = snn_grid(n, 256);
    if (grid > 65536u) grid = 65536u;
    fill_random_kernel<<<grid, 256, 0, c->stream>>>(x, n, seed, normal, lo, hi);
    SNN_CU_LAUNCHED("fill_random");
    return SNN_OK;
}
