/* IEEE single and double operations rounded to nearest even, never contracted into an FMA, for
 * kernel bodies that also run on the host (the emulation tests): on the device the _rn
 * intrinsics (nvcc would otherwise fuse a multiply and an add the CPU reference, C17 without
 * contraction, rounds separately); on the host the plain operators (x86-64's baseline ISA has
 * no FMA to contract into). Private to the CUDA backend and its tests. */
#ifndef SNN_CUDA_RN_H
#define SNN_CUDA_RN_H

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

#endif
