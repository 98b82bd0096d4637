/* IEEE single and double operations rounded to nearest even, never contracted into an FMA, for
 * kernel bodies that also run on the host (the emulation tests): on the device the _rn
 * intrinsics (nvcc would otherwise fuse a multiply and an add the CPU reference, C17 without
 * contraction, rounds separately); on the host the plain operators (x86-64's baseline ISA has
 * no FMA to contract into). Private to the CUDA backend and its tests. */
#ifndef SNN_CUDA_RN_H
#define SNN_CUDA_RN_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef SNN_HD
#define SNN_HD __host__ __device__ __forceinline__
#endif

#ifdef __CUDA_ARCH__
#define SNN_RN_OP(name, type, intrin, op) \
    SNN_HD type name(type a, type b) { return intrin(a, b); }
#else
#define SNN_RN_OP(name, type, intrin, op) \
    SNN_HD type name(type a, type b) { return a op b; }
#endif

SNN_RN_OP(rn_fadd, float, __fadd_rn, +)
SNN_RN_OP(rn_fsub, float, __fsub_rn, -)
SNN_RN_OP(rn_fmul, float, __fmul_rn, *)
SNN_RN_OP(rn_fdiv, float, __fdiv_rn, /)
SNN_RN_OP(rn_dadd, double, __dadd_rn, +)
SNN_RN_OP(rn_dsub, double, __dsub_rn, -)
SNN_RN_OP(rn_dmul, double, __dmul_rn, *)
SNN_RN_OP(rn_ddiv, double, __ddiv_rn, /)

#undef SNN_RN_OP

/* A value stored as FP32, BF16 or F16, as FP32 (exact); an FP32 value stored as O (RNE,
 * overflow to inf). */
SNN_HD float rn_widen(float v) { return v; }
SNN_HD float rn_widen(__nv_bfloat16 v) { return __bfloat162float(v); }
SNN_HD float rn_widen(__half v) { return __half2float(v); }
template <typename O> SNN_HD O rn_narrow(float v);
template <> SNN_HD float rn_narrow<float>(float v) { return v; }
template <> SNN_HD __nv_bfloat16 rn_narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> SNN_HD __half rn_narrow<__half>(float v) { return __float2half_rn(v); }

#endif
