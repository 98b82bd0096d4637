/* The CUDA table's GEMM entry (backend.h's snn_gemm): cuBLASLt through snn_cuda_gemm, the row-
 * major descriptor mapped onto column-major there, TF32 off. F16 / BF16 operands stored as
 * FP32 are converted into the workspace as that type (exact where the caller rounded them,
 * the rounding itself on this gemm_rounds table); FP8 ab_type runs as F16, which holds every
 * FP8 value. A bias or K = 0: a kernel first makes C = beta C + bias, then the product
 * accumulates with beta 1 (backend.h's order), unless the bias fits cuBLASLt's epilogue;
 * c_round: a rounding pass over the M x N block of C after everything else; a 16-bit C is
 * written once; unaligned 16-bit operands are copied padded with zeros (below). FP8 codes
 * (a_store FP8, snn_gemm.a_scale): cuBLASLt's FP8 GEMM, gemm_fp8. */
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_table.h"

namespace {

inline cudaStream_t st_of(const snn_backend *be) { return snn_cuda_stream_of(snn_cuda_table_ctx(be)); }
inline size_t up256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The bias epilogue and K = 0: C = beta C (not read when beta is 0) + bias[j]. */
__global__ void gemm_pre_kernel(float *C, int ldc, int M, int N, float beta, const float *bias) {
    const size_t total = (size_t)M * (size_t)N;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(e / (size_t)N), j = (int)(e % (size_t)N);
        float *p = C + (size_t)i * (size_t)ldc + (size_t)j;
        const float b = bias ? bias[j] : 0.0f;
        *p = beta == 0.0f ? b : __fadd_rn(__fmul_rn(beta, *p), b);
    }
}

/* c_round: C rounded in place (rows of N inside a leading dimension ldc), after adding a bias
 * (may be NULL: an FP8 product's bias and rounding in one pass). R: 0 none, 1 BF16, 2 F16. */
template <int R> __global__ void round2d_kernel(float *C, int ldc, int M, int N, const float *bias) {
    const size_t total = (size_t)M * (size_t)N;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t j = e % (size_t)N;
        float *p = C + (e / (size_t)N) * (size_t)ldc + j;
        float v = bias ? __fadd_rn(*p, bias[j]) : *p;
        if (R == 1) v = snn_rnd16<__nv_bfloat16>(v);
        if (R == 2) v = snn_rnd16<__half>(v);
        *p = v;
    }
}

snn_status launch_round2d(const snn_backend *be, snn_dtype t, float *C, int ldc, int M, int N,
                          const float *bias = NULL) {
    const unsigned grid = snn_cuda_table_grid(be, (size_t)M * (size_t)N, 256);
    if (t == SNN_BF16) round2d_kernel<1><<<grid, 256, 0, st_of(be)>>>(C, ldc, M, N, bias);
    else if (t == SNN_F16) round2d_kernel<2><<<grid, 256, 0, st_of(be)>>>(C, ldc, M, N, bias);
    else round2d_kernel<0><<<grid, 256, 0, st_of(be)>>>(C, ldc, M, N, bias);
    SNN_CU_LAUNCHED("gemm c_round");
    return SNN_OK;
}

/* C = beta C + P (C not read when beta is 0), then c_round: the copy-out of a product computed
 * in aligned rows of the workspace (t_gemm). R: 0 none, 1 BF16, 2 F16. */
template <int R>
__global__ void gemm_out_kernel(float *C, int ldc, const float *P, int ldp, int M, int N, float beta) {
    for (int i = blockIdx.y; i < M; i += gridDim.y) {
        float *c = C + (size_t)i * (size_t)ldc;
        const float *p = P + (size_t)i * (size_t)ldp;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < N; j += gridDim.x * blockDim.x) {
            float v = beta == 0.0f ? p[j] : beta == 1.0f ? __fadd_rn(c[j], p[j]) : __fadd_rn(__fmul_rn(beta, c[j]), p[j]);
            if (R == 1) v = snn_rnd16<__nv_bfloat16>(v);
            if (R == 2) v = snn_rnd16<__half>(v);
            c[j] = v;
        }
    }
}

snn_status launch_gemm_out(const snn_backend *be, snn_dtype r, float *C, int ldc, const float *P, int ldp, int M,
                           int N, float beta) {
    const dim3 grid((unsigned)((N + 255) / 256 < 8 ? (N + 255) / 256 : 8), (unsigned)(M < 65535 ? M : 65535));
    if (r == SNN_BF16) gemm_out_kernel<1><<<grid, 256, 0, st_of(be)>>>(C, ldc, P, ldp, M, N, beta);
    else if (r == SNN_F16) gemm_out_kernel<2><<<grid, 256, 0, st_of(be)>>>(C, ldc, P, ldp, M, N, beta);
    else gemm_out_kernel<0><<<grid, 256, 0, st_of(be)>>>(C, ldc, P, ldp, M, N, beta);
    SNN_CU_LAUNCHED("gemm copy-out");
    return SNN_OK;
}

/* Elements of a row-major operand of `rows` rows of `cols` inside leading dimension ld. */
inline size_t span(int rows, int cols, int ld) { return (size_t)(rows - 1) * (size_t)ld + (size_t)cols; }

/* A 16-bit C (already validated: 16-bit t, beta 0, K > 0): the product with its bias in
 * cuBLASLt's epilogue, rounded once into C; without an epilogue-able bias, an FP32 product
 * in the workspace, the bias added and the result rounded into C by one kernel. */
template <typename T, typename Bt>
__global__ void bias_round_kernel(T *C, int ldc, const float *P, int M, int N, const Bt *bias) {
    /* rows over blockIdx.y, four columns a thread where the rows allow (vec: N % 4 == 0 and
     * 16-byte P, 8-byte C rows, FP32 bias; a 16-bit bias, held as T, takes the scalar loop):
     * no division per element */
    const bool vec = N % 4 == 0 && ldc % 4 == 0 && ((uintptr_t)P & 15u) == 0 && ((uintptr_t)C & 7u) == 0 &&
                     (!bias || (sizeof(Bt) == 4 && ((uintptr_t)bias & 15u) == 0));
    for (int i = blockIdx.y; i < M; i += gridDim.y) {
        const float *p = P + (size_t)i * (size_t)N;
        T *c = C + (size_t)i * (size_t)ldc;
        if (vec) {
            for (int j = 4 * (blockIdx.x * blockDim.x + threadIdx.x); j < N; j += 4 * gridDim.x * blockDim.x) {
                const float4 v = *reinterpret_cast<const float4 *>(p + j);
                const float4 b = bias ? *reinterpret_cast<const float4 *>((const float *)bias + j)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
                /* backend.h's order: bias first, then the product */
                union {
                    T h[4];
                    uint2 u;
                } o;
                o.h[0] = Io<T>::st(bias ? __fadd_rn(b.x, v.x) : v.x);
                o.h[1] = Io<T>::st(bias ? __fadd_rn(b.y, v.y) : v.y);
                o.h[2] = Io<T>::st(bias ? __fadd_rn(b.z, v.z) : v.z);
                o.h[3] = Io<T>::st(bias ? __fadd_rn(b.w, v.w) : v.w);
                *reinterpret_cast<uint2 *>(c + j) = o.u;
            }
        } else {
            for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < N; j += gridDim.x * blockDim.x)
                c[j] = Io<T>::st(bias ? __fadd_rn(Io<Bt>::ld(bias[j]), p[j]) : p[j]);
        }
    }
}

snn_status gemm_c16(const snn_backend *be, const snn_gemm *g, snn_dtype t);

inline bool is_fp8(snn_dtype t) { return t == SNN_F8E4M3 || t == SNN_F8E5M2; }

/* FP8 codes (snn_gemm.a_scale): cuBLASLt's FP8 GEMM with one factor per operand into an FP32
 * C; the bias, K = 0 and c_round as for FP32 operands. */
snn_status gemm_fp8(const snn_backend *be, const snn_gemm *g) {
    if (!is_fp8(g->a_store) || !is_fp8(g->b_store) || (g->a_store == SNN_F8E5M2 && g->b_store == SNN_F8E5M2))
        return snn_error(SNN_E_INVALID, "gemm: FP8 codes need both operands FP8, not both E5M2 (A %s, B %s)",
                         snn_cuda_dtype_name(g->a_store), snn_cuda_dtype_name(g->b_store));
    if (g->trans_a || !g->trans_b)
        return snn_error(SNN_E_INVALID, "gemm: FP8 codes are K-contiguous (trans_a 0, trans_b 1)");
    if (g->K % 16 || g->lda % 16 || g->ldb % 16 || g->lda < g->K || g->ldb < g->K || g->ldc < g->N)
        return snn_error(SNN_E_SHAPE, "gemm: FP8 codes need K, lda, ldb multiples of 16 (K=%d lda=%d ldb=%d, "
                                      "ldc=%d for N=%d)", g->K, g->lda, g->ldb, g->ldc, g->N);
    /* cuBLASLt 13 on an H100 has no FP8 algorithm for N = 29 or 50 (C's rows, its m), with any
     * ldc, and has for N = 72: the engine's FP8 GEMMs have N = out or in (multiples of 8 by
     * the conversion rule) */
    if (g->N % 8)
        return snn_error(SNN_E_SHAPE, "gemm: FP8 codes need N a multiple of 8 (N=%d)", g->N);
    if (g->c_store != SNN_F32 || g->bias_store != SNN_F32)
        return snn_error(SNN_E_INVALID, "gemm: FP8 codes write an FP32 C");
    if (!g->a_scale || !g->b_scale)
        return snn_error(SNN_E_INVALID, "gemm: FP8 codes need their factors (a_scale, b_scale)");
    if (!g->C || (g->K > 0 && (!g->A || !g->B || !snn_aligned(g->A, 16) || !snn_aligned(g->B, 16))))
        return snn_error(SNN_E_INVALID, "gemm: FP8 codes need 16-byte aligned operands");
    float beta = g->beta;
    const int M = g->M, N = g->N, K = g->K;
    /* cuBLASLt's FP8 kernels write 16-byte aligned rows of D only (no algorithm otherwise: seen
     * on an H100 with cuBLASLt 13 for ldc 29 and for a gradient at an 8-byte offset of the
     * parameter buffer): such a C gets the product in aligned rows of the workspace and one
     * pass writes beta C + P (and c_round) into it */
    const bool pad = K > 0 && (g->ldc % 4 || !snn_aligned(g->C, 16));
    /* beta 0: the product first, then one pass adds the bias and rounds (round(P + bias): the
     * CPU's bias-then-product sum, an FP32 add either way); otherwise C = beta C + bias before
     * the product, as for FP32 operands */
    const bool post_bias = g->bias && beta == 0.0f && K > 0 && !pad;
    if ((g->bias && !post_bias) || K == 0) {
        const size_t total = (size_t)M * (size_t)N;
        gemm_pre_kernel<<<snn_cuda_table_grid(be, total, 256), 256, 0, st_of(be)>>>(g->C, g->ldc, M, N, beta, g->bias);
        SNN_CU_LAUNCHED("gemm bias");
        beta = 1.0f;
    }
    if (pad) { /* dense rows of N (a multiple of 8: 16-byte rows) */
        void *ws;
        SNN_TRY(snn_cuda_table_ws(be, (size_t)M * (size_t)N * sizeof(float) + 256, &ws));
        float *P = (float *)ws;
        snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, N, K, g->a_store, g->b_store, SNN_F32, g->lda, g->ldb, N, 0);
        SNN_TRY(snn_cuda_gemm(snn_cuda_table_ctx(be), &d, g->alpha, g->A, g->B, 0.0f, P, g->a_scale, g->b_scale, NULL,
                              NULL));
        return launch_gemm_out(be, g->c_round, g->C, g->ldc, P, N, M, N, beta);
    }
    if (K > 0) {
        snn_cuda_gemm_desc d = snn_cuda_gd(0, 1, M, N, K, g->a_store, g->b_store, SNN_F32, g->lda, g->ldb, g->ldc, 0);
        SNN_TRY(snn_cuda_gemm(snn_cuda_table_ctx(be), &d, g->alpha, g->A, g->B, beta, g->C, g->a_scale, g->b_scale,
                              NULL, NULL));
    }
    if (post_bias) return launch_round2d(be, g->c_round, g->C, g->ldc, M, N, g->bias);
    if (g->c_round != SNN_F32) SNN_TRY(launch_round2d(be, g->c_round, g->C, g->ldc, M, N));
    return SNN_OK;
}

snn_status t_gemm(const snn_backend *be, const snn_gemm *g) {
    SNN_TRY(snn_cuda_table_check(be, "gemm"));
    if (!g) return snn_error(SNN_E_INVALID, "gemm: NULL descriptor");
    if (g->M < 0 || g->N < 0 || g->K < 0)
        return snn_error(SNN_E_INVALID, "gemm: negative size (M=%d N=%d K=%d)", g->M, g->N, g->K);
    if (g->ab_type != SNN_F32 && g->ab_type != SNN_F16 && g->ab_type != SNN_BF16 && g->ab_type != SNN_F8E4M3 &&
        g->ab_type != SNN_F8E5M2)
        return snn_error(SNN_E_UNSUPPORTED, "gemm: operand type %s is not supported", snn_cuda_dtype_name(g->ab_type));
    if (g->c_round != SNN_F32 && g->c_round != SNN_F16 && g->c_round != SNN_BF16)
        return snn_error(SNN_E_INVALID, "gemm: c_round %s is not supported (f32, f16, bf16)",
                         snn_cuda_dtype_name(g->c_round));
    if (g->M == 0 || g->N == 0) return SNN_OK; /* nothing to write (cblas quick return) */
    if (is_fp8(g->a_store) || is_fp8(g->b_store)) return gemm_fp8(be, g);
    const int ra = g->trans_a ? g->K : g->M, ca = g->trans_a ? g->M : g->K;
    const int rb = g->trans_b ? g->N : g->K, cb = g->trans_b ? g->K : g->N;
    if (g->ldc < g->N || (g->K > 0 && (g->lda < (ca > 1 ? ca : 1) || g->ldb < (cb > 1 ? cb : 1))))
        return snn_error(SNN_E_SHAPE, "gemm: leading dimensions too small (lda=%d needs %d, ldb=%d needs %d, "
                                      "ldc=%d needs %d)", g->lda, ca, g->ldb, cb, g->ldc, g->N);
    if (!g->C || (g->K > 0 && (!g->A || !g->B)))
        return snn_error(SNN_E_INVALID, "gemm: NULL operand (A %p, B %p, C %p)", (const void *)g->A,
                         (const void *)g->B, (void *)g->C);
    const snn_dtype t = g->ab_type == SNN_F32 ? SNN_F32 : g->ab_type == SNN_BF16 ? SNN_BF16 : SNN_F16;
    const snn_dtype st3[3] = {g->a_store, g->b_store, g->c_store};
    for (int i = 0; i < 3; i++)
        if (st3[i] != SNN_F32 && (st3[i] != g->ab_type || t == SNN_F32 || g->ab_type != t))
            return snn_error(SNN_E_INVALID, "gemm: %c stored as %s needs ab_type %s (16-bit operands)", "ABC"[i],
                             snn_cuda_dtype_name(st3[i]), snn_cuda_dtype_name(st3[i]));
    if (g->c_store != SNN_F32 && (g->beta != 0.0f || g->K == 0))
        return snn_error(SNN_E_INVALID, "gemm: a 16-bit C is written once (beta 0, K > 0)");
    if (g->bias_store != SNN_F32 && (!g->bias || g->bias_store != g->c_store || g->c_store != g->ab_type))
        return snn_error(SNN_E_INVALID, "gemm: a bias stored as %s needs a C stored as that type (C: %s)",
                         snn_cuda_dtype_name(g->bias_store), snn_cuda_dtype_name(g->c_store));
    if (g->c_store != SNN_F32) return gemm_c16(be, g, t);
    snn_cuda *c = snn_cuda_table_ctx(be);
    float beta = g->beta;
    /* 16-bit operands converted here whose extents or rows are not aligned (a vocabulary of
     * 50257, odd test shapes): the copies are padded to multiples of 8 in M (a transposed A),
     * N and K with zeros, the product goes to aligned rows of the workspace, and one pass
     * writes beta C + P (and c_round) into C. cuBLASLt runs such a GEMM on its align1 kernels
     * otherwise (about a tenth of the tensor-core rate on the GPT-2 head). */
    const int M = g->M, N = g->N, K = g->K;
    const int Mp = g->trans_a ? (M + 7) / 8 * 8 : M, Np = (N + 7) / 8 * 8, Kp = (K + 7) / 8 * 8;
    /* a 16-bit A already padded with zeros (a_zero_pad) is the copy itself when its rows need
     * no padding (they are K of a transposed A, M otherwise: only M is never padded) */
    const int a_ready = g->a_store != SNN_F32 && g->a_zero_pad && g->lda % 8 == 0 && snn_aligned(g->A, 16) &&
                        (!g->trans_a || Kp == K);
    const int pad = t != SNN_F32 && K > 0 && (g->a_store == SNN_F32 || a_ready) && g->b_store == SNN_F32 &&
                    (Mp != M || Np != N || Kp != K || g->lda % 8 || g->ldb % 8 || g->ldc % 4 ||
                     (uintptr_t)g->C % 16);
    /* bias: in cuBLASLt's epilogue (C = alpha A B + beta C + bias: the same sum in another
     * order, within the GEMM bound) when it can; otherwise C = beta C + bias first, then
     * C += alpha A B (backend.h's order). The padded product has Np columns: its bias is
     * added first, never in the epilogue. */
    const int bias_epilogue = g->bias && K > 0 && !pad && snn_aligned(g->bias, 16);
    if ((g->bias && !bias_epilogue) || K == 0) {
        const size_t total = (size_t)M * (size_t)N;
        gemm_pre_kernel<<<snn_cuda_table_grid(be, total, 256), 256, 0, st_of(be)>>>(g->C, g->ldc, M, N, beta, g->bias);
        SNN_CU_LAUNCHED("gemm bias epilogue");
        beta = 1.0f;
    }
    if (K > 0 && pad) {
        const int rap = g->trans_a ? Kp : Mp, cap = g->trans_a ? Mp : Kp; /* A's copy: rap x cap */
        const int rbp = g->trans_b ? Np : Kp, cbp = g->trans_b ? Kp : Np;
        const size_t off_b = a_ready ? 0 : up256((size_t)rap * cap * 2), off_p = off_b + up256((size_t)rbp * cbp * 2);
        void *ws;
        SNN_TRY(snn_cuda_table_ws(be, off_p + (size_t)Mp * Np * 4 + 256, &ws));
        const void *a16 = ws;
        void *b16 = (char *)ws + off_b;
        float *P = (float *)((char *)ws + off_p);
        if (a_ready) a16 = g->A;
        else SNN_TRY(snn_cuda_convert_2d(c, t, ws, (size_t)cap, rap, cap, g->A, (size_t)g->lda, ra, ca));
        SNN_TRY(snn_cuda_convert_2d(c, t, b16, (size_t)cbp, rbp, cbp, g->B, (size_t)g->ldb, rb, cb));
        snn_cuda_gemm_desc d = snn_cuda_gd(g->trans_a ? 1 : 0, g->trans_b ? 1 : 0, Mp, Np, Kp, t, t, SNN_F32,
                                           a_ready ? g->lda : cap, cbp, Np, 0);
        d.allow_tf32 = 0;
        SNN_TRY(snn_cuda_gemm_bias(c, &d, g->alpha, a16, b16, 0.0f, P, NULL, NULL, NULL, NULL, NULL));
        return launch_gemm_out(be, g->c_round, g->C, g->ldc, P, Np, M, N, beta);
    }
    if (K > 0) {
        /* FP8 values are all exact in FP16, so an FP8 ab_type runs as an FP16 GEMM */
        const void *A = g->A, *B = g->B;
        if (t != SNN_F32) {
            /* the conversion rounds to t (RNE): exact for operands the caller rounded, the
             * rounding itself otherwise (gemm_rounds); padding between rows is converted too
             * and never read */
            const size_t na = g->a_store == SNN_F32 ? span(ra, ca, g->lda) : 0;
            const size_t nb = g->b_store == SNN_F32 ? span(rb, cb, g->ldb) : 0;
            const size_t off_b = up256(na * 2);
            void *ws;
            SNN_TRY(snn_cuda_table_ws(be, off_b + nb * 2 + 256, &ws));
            void *a16 = ws, *b16 = (char *)ws + off_b;
            if (na) {
                SNN_TRY(snn_cuda_convert(c, t, a16, SNN_F32, g->A, na, NULL, 0));
                A = a16;
            }
            if (nb) {
                SNN_TRY(snn_cuda_convert(c, t, b16, SNN_F32, g->B, nb, NULL, 0));
                B = b16;
            }
        }
        snn_cuda_gemm_desc d = snn_cuda_gd(g->trans_a ? 1 : 0, g->trans_b ? 1 : 0, M, N, K, t, t, SNN_F32, g->lda,
                                           g->ldb, g->ldc, 0);
        d.allow_tf32 = 0; /* FP32 products */
        SNN_TRY(snn_cuda_gemm_bias(c, &d, g->alpha, A, B, beta, g->C, NULL, NULL, NULL, NULL,
                                   bias_epilogue ? g->bias : NULL));
    }
    if (g->c_round != SNN_F32) SNN_TRY(launch_round2d(be, g->c_round, g->C, g->ldc, g->M, g->N));
    return SNN_OK;
}

snn_status gemm_c16(const snn_backend *be, const snn_gemm *g0, snn_dtype t) {
    snn_cuda *c = snn_cuda_table_ctx(be);
    /* c_zero_pad with an FP32 B and no bias (the tied GPT-2 head: N = 50257): N rounded up to
     * a multiple of 8, B converted with zero rows (columns) there, so the product runs on
     * aligned extents and writes zeros into C's padding */
    snn_gemm gp = *g0;
    const snn_gemm *g = g0;
    const int Np = (g0->N + 7) / 8 * 8;
    const int padn = g0->c_zero_pad && Np != g0->N && g0->ldc >= Np && g0->ldc % 8 == 0 && snn_aligned(g0->C, 16) &&
                     g0->b_store == SNN_F32 && !g0->bias;
    if (padn) {
        gp.N = Np;
        g = &gp;
    }
    const int ra = g->trans_a ? g->K : g->M, ca = g->trans_a ? g->M : g->K;
    const int rb = g->trans_b ? g->N : g->K, cb = g->trans_b ? g->K : g->N;
    const size_t na = g->a_store == SNN_F32 ? span(ra, ca, g->lda) : 0;
    const size_t nb = g->b_store == SNN_F32 ? (padn ? (size_t)rb * (size_t)cb : span(rb, cb, g->ldb)) : 0;
    const int epi = !g->bias || snn_aligned(g->bias, 16);
    const size_t off_b = up256(na * 2), off_p = off_b + up256(nb * 2);
    const size_t np = g->bias ? (size_t)g->M * (size_t)g->N : 0; /* the fallback's FP32 product */
    void *ws;
    SNN_TRY(snn_cuda_table_ws(be, off_p + np * 4 + 256, &ws));
    const void *A = g->A, *B = g->B;
    if (na) {
        SNN_TRY(snn_cuda_convert(c, t, ws, SNN_F32, g->A, na, NULL, 0));
        A = ws;
    }
    if (padn) {
        /* the source has g0's extents; the copy is dense (ldb = its columns) */
        const int rb0 = g0->trans_b ? g0->N : g0->K, cb0 = g0->trans_b ? g0->K : g0->N;
        SNN_TRY(snn_cuda_convert_2d(c, t, (char *)ws + off_b, (size_t)cb, rb, cb, g0->B, (size_t)g0->ldb, rb0, cb0));
        B = (char *)ws + off_b;
        gp.ldb = cb;
    } else if (nb) {
        SNN_TRY(snn_cuda_convert(c, t, (char *)ws + off_b, SNN_F32, g->B, nb, NULL, 0));
        B = (char *)ws + off_b;
    }
    if (epi) {
        snn_cuda_gemm_desc d = snn_cuda_gd(g->trans_a ? 1 : 0, g->trans_b ? 1 : 0, g->M, g->N, g->K, t, t, t, g->lda,
                                           g->ldb, g->ldc, 0);
        /* a 16-bit bias (bias_store: the rounded bias of a 16-bit module) in the epilogue */
        snn_status st = snn_cuda_gemm_bias_t(c, &d, g->alpha, A, B, 0.0f, g->C, g->bias, g->bias_store);
        /* a cuBLASLt without an FP32-bias epilogue for 16-bit outputs: the kernel below */
        if (st != SNN_E_UNSUPPORTED || !g->bias) return st;
        snn_clear_error();
    }
    float *P = (float *)((char *)ws + off_p);
    snn_cuda_gemm_desc d = snn_cuda_gd(g->trans_a ? 1 : 0, g->trans_b ? 1 : 0, g->M, g->N, g->K, t, t, SNN_F32,
                                       g->lda, g->ldb, g->N, 0);
    SNN_TRY(snn_cuda_gemm(c, &d, g->alpha, A, B, 0.0f, P, NULL, NULL, NULL, NULL));
    const unsigned gx = (unsigned)((g->N + 1023) / 1024 < 8 ? (g->N + 1023) / 1024 : 8);
    const dim3 grid(gx, (unsigned)(g->M < 65535 ? g->M : 65535));
    const bool b16 = g->bias && g->bias_store != SNN_F32;
    if (t == SNN_BF16 && b16)
        bias_round_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, 256, 0, st_of(be)>>>(
            (__nv_bfloat16 *)g->C, g->ldc, P, g->M, g->N, (const __nv_bfloat16 *)(const void *)g->bias);
    else if (t == SNN_BF16)
        bias_round_kernel<__nv_bfloat16, float><<<grid, 256, 0, st_of(be)>>>((__nv_bfloat16 *)g->C, g->ldc, P, g->M,
                                                                              g->N, g->bias);
    else if (b16)
        bias_round_kernel<__half, __half><<<grid, 256, 0, st_of(be)>>>((__half *)g->C, g->ldc, P, g->M, g->N,
                                                                        (const __half *)(const void *)g->bias);
    else
        bias_round_kernel<__half, float><<<grid, 256, 0, st_of(be)>>>((__half *)g->C, g->ldc, P, g->M, g->N, g->bias);
    SNN_CU_LAUNCHED("gemm 16-bit output");
    return SNN_OK;
}

} // namespace

void snn_cuda_install_gemm(snn_backend *be) { be->gemm = t_gemm; }
