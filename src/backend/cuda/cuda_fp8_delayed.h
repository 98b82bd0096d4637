/* Transformer Engine's delayed-scaling update of one amax slot on the device (fp8.md §3.1;
 * the CPU rule is snn_fp8_state_update in src/precision/fp8_recipe.c). Shared by the
 * benchmark workloads and the model runner, which keep different per-slot outputs. CUDA C++. */
#ifndef SNN_CUDA_FP8_DELAYED_H
#define SNN_CUDA_FP8_DELAYED_H

#include <float.h>

#include "backend/cuda/cuda_internal.h"

/* Called by every thread of a block that owns `slot` (blockDim a multiple of 32, <= 1024).
 * amax[slot] is this step's max|x| (0: the tensor was not quantised since the last update,
 * then nothing changes and the function returns 0 everywhere). Otherwise the window amax is
 * max(amax[slot], the ring of the previous len-1 amaxes) — or amax[slot] alone with
 * most_recent — taken before the current amax joins the ring (the oldest drops out), and
 * amax[slot] is reset to 0. Returns 1 in thread 0 when the slot was updated, with *scale =
 * fmax·margin_factor / window if that window is finite and > 0 (FLT_MAX if the quotient
 * overflows), else the scale is kept; other threads return 0. hist: [slots][max(len-1, 1)],
 * pos: [slots] next ring position. */
__device__ __forceinline__ int snn_fp8_delayed_roll(int slot, float *amax, float *hist, int *pos, int len,
                                                     int most_recent, float fmax, float margin_factor,
                                                     float *scale) {
    const float c = amax[slot];
    if (c == 0.0f) return 0;
    const int ring = len > 1 ? len - 1 : 0;
    float *h = hist + (size_t)slot * (ring ? ring : 1);
    float m = c;
    if (!most_recent)
        for (int i = threadIdx.x; i < ring; i += blockDim.x) m = fmaxf(m, h[i]);
    __shared__ float red[32];
    m = snn_warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x != 0) return 0;
    float a = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) a = fmaxf(a, red[w]);
    if (ring) {
        const int p = pos[slot];
        h[p] = c;
        pos[slot] = p + 1 == ring ? 0 : p + 1;
    }
    amax[slot] = 0.0f;
    float s = *scale;
    if (isfinite(a) && a > 0.0f) s = __fdiv_rn(fmax * margin_factor, a);
    if (isinf(s)) s = FLT_MAX;
    *scale = s;
    return 1;
}

#endif
