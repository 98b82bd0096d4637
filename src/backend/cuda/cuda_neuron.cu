/* Fused multi-step IF/LIF/PLIF forward and BPTT backward: argument checks and the choice of
 * launch shape (kernels in cuda_neuron_fwd.cu / cuda_neuron_bwd.cu, bodies in
 * cuda_neuron_body.h). Packs of 16 (or 8) bytes of consecutive neurons per thread when n and
 * every pointer allow it, one neuron per thread otherwise; a long prefetch (16 steps in
 * flight) when there are too few threads to keep the memory system busy. */
#include "backend/cuda/cuda_neuron.h"

/* Automatic launch shape, from the first H200 measurements (docs/performance.md):
 * 16-byte packs when that still gives >= 64k threads (T=16 x 2^20 neurons: best), else 8-byte
 * packs (T=500 x 65k..262k neurons: 8-byte packs were 1.3-2.3x faster); the long prefetch
 * only when even then there are very few threads (it costs registers and was slower in every
 * measured case); blocks of 64 threads when 256-thread blocks would leave multiprocessors
 * idle (T=500 x 65k neurons used 32 of 132 SMs). */
#define PACK16_MIN_THREADS 65536
#define LONG_PREFETCH_THREADS 8192
#define LONG_T 64                /* "long recurrence" for the launch-shape rule */
#define LONG_T_THREADS 131072

static int g_over_pack, g_over_block, g_over_generic; /* snn_cuda_neuron_bench_override */

extern "C" snn_status snn_cuda_neuron_bench_override(int pack_bytes, int block, int generic) {
    if (pack_bytes != 0 && pack_bytes != 1 && pack_bytes != 4 && pack_bytes != 8 &&
        pack_bytes != 16)
        return snn_error(SNN_E_INVALID, "neuron pack override must be 0, 1, 4, 8 or 16 bytes");
    if (block != 0 && block != 64 && block != 128 && block != NEURON_BLOCK)
        return snn_error(SNN_E_INVALID, "neuron block override must be 0, 64, 128 or 256");
    g_over_pack = pack_bytes;
    g_over_block = block;
    g_over_generic = generic != 0;
    return SNN_OK;
}

/* Pack width (bytes), prefetch and block size for n neurons whose pointers are in ptrs. */
static void choose_shape(snn_cuda *c, int T, size_t n, size_t es, const void *const *ptrs,
                         const size_t *elem, int np, size_t period, int *pack, int *lng,
                         int *block) {
    int want, pf;
    snn_cuda_neuron_tuning_of(c, &want, &pf);
    if (g_over_pack) want = g_over_pack;
    /* f32: 8-byte packs (2 neurons) were faster than 16-byte ones on the H200 (fwd+bwd at
     * 95 % vs 86 % of the copy ceiling, T=16 x 2^20) */
    if (want == 0) want = es == 4 ? 8 : n / (16 / es) >= PACK16_MIN_THREADS ? 16 : 8;
    /* Long recurrences over few neurons are latency-bound: T dependent steps per thread, so the
     * more threads the better. H200, BF16, T 500 (fwd + bwd): 65,536 neurons 0.486 ms with
     * 8-byte packs vs 0.252 ms with one neuron per thread; 262,144 neurons 0.629 ms vs 0.597 ms
     * with 4-byte packs. Take the widest pack that still gives LONG_T_THREADS threads. */
    int one_per_thread = 0;
    if (g_over_pack == 0 && T >= LONG_T && es == 2) {
        want = 0;
        for (int b = 16; b >= 4 && !want; b /= 2)
            if (n / ((size_t)b / es) >= LONG_T_THREADS) want = b;
        if (!want) {
            want = 4;
            one_per_thread = n / 2 < LONG_T_THREADS / 2;
        }
    }
    *pack = 1;
    for (int b = one_per_thread ? 0 : want; b >= 4; b /= 2) {
        size_t V = (size_t)b / es;
        if (V < 2) continue;
        int ok = n % V == 0 && period % V == 0;
        for (int i = 0; i < np && ok; i++)
            ok = !ptrs[i] || snn_aligned(ptrs[i], V * elem[i]);
        if (ok) {
            *pack = b;
            break;
        }
    }
    size_t V = *pack == 1 ? 1 : (size_t)*pack / es;
    size_t threads = (n + V - 1) / V;
    *lng = pf == 2 || (pf == 0 && threads < LONG_PREFETCH_THREADS);
    *block = threads < (size_t)snn_cuda_sm_count(c) * 2 * NEURON_BLOCK ? 64 : NEURON_BLOCK;
    if (g_over_block) *block = g_over_block;
}

static float default_alpha(int sg) {
    static const float d[SNN_SG_COUNT] = {4.0f, 2.0f, 1.0f, 1.0f, 2.0f, 1.0f, 2.0f};
    return (sg >= 0 && sg < SNN_SG_COUNT) ? d[sg] : 0.0f;
}

static snn_status make_params(const snn_neuron_opts *o, float k, int T, size_t n, NeuronP *p) {
    if (!o) return snn_error(SNN_E_INVALID, "neuron options are NULL");
    if (o->kind < SNN_NEURON_IF || o->kind > SNN_NEURON_PLIF)
        return snn_error(SNN_E_INVALID, "unknown neuron kind %d", (int)o->kind);
    if ((int)o->surrogate < 0 || o->surrogate >= SNN_SG_COUNT)
        return snn_error(SNN_E_INVALID, "unknown surrogate id %d (0..%d)", (int)o->surrogate,
                         SNN_SG_COUNT - 1);
    if (T <= 0 || n == 0)
        return snn_error(SNN_E_SHAPE, "neuron kernels need T > 0 and n > 0 (T=%d n=%zu)", T, n);
    if (o->kind != SNN_NEURON_IF && !(k > 0.0f && k < 1.0f))
        return snn_error(SNN_E_INVALID, "neuron decay k must lie in (0, 1) (1/tau or sigmoid(w)), "
                                        "got %g",
                         (double)k);
    p->kind = (int)o->kind;
    p->decay_input = o->decay_input;
    p->soft = o->soft_reset;
    p->detach = o->detach_reset;
    p->sg = (int)o->surrogate;
    p->alpha = o->alpha != 0.0f ? o->alpha : default_alpha(p->sg);
    p->vth = o->v_threshold;
    p->vreset = o->v_reset;
    p->k = k;
    if (p->sg == SNN_SG_SOFTSIGN && !(p->alpha > 0.0f))
        return snn_error(SNN_E_INVALID, "SoftSign surrogate needs alpha > 0");
    if (!isfinite(p->vth) || !isfinite(p->vreset) || !isfinite(p->alpha))
        return snn_error(SNN_E_INVALID, "neuron threshold, reset and alpha must be finite");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_neuron_forward(snn_cuda *c, const snn_neuron_opts *o, float k,
                                              int T, size_t n, snn_dtype io_type,
                                              snn_dtype spike_type, const void *x,
                                              const float *bias, size_t bias_period,
                                              const float *v0, void *s, void *h_seq,
                                              void *v_seq, float *v_last) {
    FwdArgs a;
    memset(&a, 0, sizeof a);
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!x || !s) return snn_error(SNN_E_INVALID, "neuron forward needs x and s");
    if (bias && bias_period == 0)
        return snn_error(SNN_E_INVALID, "neuron forward: bias given with bias_period 0");
    size_t es = snn_cuda_dsize(io_type);
    if (io_type != SNN_F32 && !snn_cuda_is_16(io_type))
        return snn_error(SNN_E_UNSUPPORTED, "neuron storage type %s is not supported (f32, bf16, "
                                            "f16)",
                         snn_cuda_dtype_name(io_type));
    a.T = T;
    a.n = n;
    a.x = x;
    a.bias = bias;
    a.bias_period = bias ? bias_period : 1;
    a.v0 = v0;
    a.s = s;
    a.h = h_seq;
    a.vseq = v_seq;
    a.vlast = v_last;
    const void *ptrs[4] = {x, s, h_seq, v_seq};
    const size_t elem[4] = {es, snn_cuda_dsize(spike_type), es, es};
    int pack, lng, block;
    choose_shape(c, T, n, es, ptrs, elem, 4, bias ? a.bias_period : 8, &pack, &lng, &block);
    if (spike_type != SNN_F32 && spike_type != SNN_BF16 && spike_type != SNN_F16 &&
        spike_type != SNN_F8E4M3)
        return snn_error(SNN_E_UNSUPPORTED, "spike type %s is not supported (f32, bf16, f16, "
                                            "f8e4m3)",
                         snn_cuda_dtype_name(spike_type));
    snn_neuron_fwd_launch(snn_cuda_stream_of(c), a, io_type, spike_type, pack, lng, block);
    SNN_CU_LAUNCHED("neuron_forward");
    return SNN_OK;
}

extern "C" snn_status snn_cuda_neuron_backward(snn_cuda *c, const snn_neuron_opts *o, float k,
                                               int T, size_t n, snn_dtype io_type,
                                               const void *h_seq, const float *v0,
                                               const void *gs, const void *gv_seq,
                                               const float *gv_last, void *gx, float *gv0,
                                               float *gk, float *gx_tsum, float *gx_amax) {
    return snn_cuda_neuron_backward_parts(c, o, k, T, n, io_type, h_seq, v0, gs, gv_seq, gv_last, gx, gv0, gk, 0,
                                          gx_tsum, gx_amax);
}

snn_status snn_cuda_neuron_backward_parts(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                          snn_dtype io_type, const void *h_seq, const float *v0, const void *gs,
                                          const void *gv_seq, const float *gv_last, void *gx, float *gv0,
                                          float *gk, int gk_parts, float *gx_tsum, float *gx_amax) {
    BwdArgs a;
    memset(&a, 0, sizeof a);
    a.gk_parts = gk_parts;
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!h_seq || !gs || !gx) return snn_error(SNN_E_INVALID, "neuron backward needs h_seq, gs and gx");
    if (io_type != SNN_F32 && !snn_cuda_is_16(io_type))
        return snn_error(SNN_E_UNSUPPORTED, "neuron storage type %s is not supported (f32, bf16, "
                                            "f16)",
                         snn_cuda_dtype_name(io_type));
    a.T = T;
    a.n = n;
    a.h = h_seq;
    a.v0 = v0;
    a.gs = gs;
    a.gvseq = gv_seq;
    a.gvlast = gv_last;
    a.gx = gx;
    a.gv0 = gv0;
    a.gxsum = gx_tsum;
    a.want_gk = gk != NULL && o->kind == SNN_NEURON_PLIF;
    a.want_amax = gx_amax != NULL;
    const size_t es = snn_cuda_dsize(io_type);
    const void *ptrs[4] = {h_seq, gs, gx, gv_seq};
    const size_t elem[4] = {es, es, es, es};
    int pack, lng, block;
    choose_shape(c, T, n, es, ptrs, elem, 4, 8, &pack, &lng, &block);
    snn_neuron_bwd_launch(snn_cuda_stream_of(c), a, io_type, pack, lng, block, gk, gx_amax,
                          !g_over_generic);
    SNN_CU_LAUNCHED("neuron_backward");
    return SNN_OK;
}

/* ---- the engine's typed activations (backend.h: neuron_forward_io / neuron_backward_io) ---- */

static int io_wide(size_t n, snn_dtype io, const void *const *p, int np) {
    const size_t W = 16 / snn_cuda_dsize(io);
    if (n % W) return 0;
    for (int i = 0; i < np; i++) /* FP32 h packs of W floats: 4 W bytes */
        if (p[i] && !snn_aligned(p[i], 4 * W)) return 0;
    return 1;
}

snn_status snn_cuda_neuron_io_forward(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                                      snn_dtype spike_type, const void *x, void *s, float *h_seq, float *v_last) {
    FwdArgs a;
    memset(&a, 0, sizeof a);
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!x || !s) return snn_error(SNN_E_INVALID, "neuron forward needs x and s");
    if (!snn_cuda_is_16(io) || (spike_type != io && spike_type != SNN_F32))
        return snn_error(SNN_E_UNSUPPORTED, "typed neuron io: x %s, spikes %s (x f16 or bf16, spikes that type or f32)",
                         snn_cuda_dtype_name(io), snn_cuda_dtype_name(spike_type));
    a.T = T;
    a.n = n;
    a.x = x;
    a.bias_period = 1;
    a.s = s;
    a.h = h_seq;
    a.vlast = v_last;
    const void *ptrs[3] = {x, s, h_seq};
    snn_neuron_io_fwd_launch(snn_cuda_stream_of(c), a, io, spike_type, io_wide(n, io, ptrs, 3));
    SNN_CU_LAUNCHED("neuron_forward_io");
    return SNN_OK;
}

snn_status snn_cuda_neuron_io_forward_bias(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n,
                                           snn_dtype io, snn_dtype sp, const float *x, const float *bias,
                                           size_t period, void *s, float *h_seq, float *v_last) {
    FwdArgs a;
    memset(&a, 0, sizeof a);
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!x || !s || !bias) return snn_error(SNN_E_INVALID, "neuron forward (bias) needs x, bias and s");
    if (!snn_cuda_is_16(io) || (sp != io && sp != SNN_F32 && sp != SNN_F8E4M3))
        return snn_error(SNN_E_UNSUPPORTED, "neuron forward (bias): io %s, spikes %s (io f16 or bf16; spikes io, f32 "
                         "or f8e4m3)", snn_cuda_dtype_name(io), snn_cuda_dtype_name(sp));
    if (period == 0 || period > n || n % period)
        return snn_error(SNN_E_INVALID, "neuron forward (bias): bias period %zu does not divide %zu neurons", period, n);
    a.T = T;
    a.n = n;
    a.x = x;
    a.bias = bias;
    a.bias_period = period;
    a.s = s;
    a.h = h_seq;
    a.vlast = v_last;
    /* packs of 4: x and h_seq 16 bytes, the spikes 4 of their size */
    const size_t sb = sp == SNN_F32 ? 16 : sp == SNN_F8E4M3 ? 4 : 8;
    int wide = n % 4 == 0 && snn_aligned(x, 16) && (!h_seq || snn_aligned(h_seq, 16)) && snn_aligned(s, sb);
    snn_neuron_io_fwd32_launch(snn_cuda_stream_of(c), a, io, sp, wide);
    SNN_CU_LAUNCHED("neuron_forward_io_bias");
    return SNN_OK;
}

snn_status snn_cuda_neuron_io_backward(snn_cuda *c, const snn_neuron_opts *o, float k, int T, size_t n, snn_dtype io,
                                       const float *h_seq, const void *gs, void *gx, float *gk) {
    BwdArgs a;
    memset(&a, 0, sizeof a);
    a.gk_parts = 1; /* gk: one partial a block (the engine's entry sums them in order) */
    SNN_TRY(make_params(o, k, T, n, &a.p));
    if (!h_seq || !gs || !gx) return snn_error(SNN_E_INVALID, "neuron backward needs h_seq, gs and gx");
    if (!snn_cuda_is_16(io))
        return snn_error(SNN_E_UNSUPPORTED, "typed neuron io: gradients in %s (f16 or bf16)", snn_cuda_dtype_name(io));
    a.T = T;
    a.n = n;
    a.h = h_seq;
    a.gs = gs;
    a.gx = gx;
    a.want_gk = gk != NULL && o->kind == SNN_NEURON_PLIF;
    const void *ptrs[3] = {h_seq, gs, gx};
    snn_neuron_io_bwd_launch(snn_cuda_stream_of(c), a, io, io_wide(n, io, ptrs, 3), gk);
    SNN_CU_LAUNCHED("neuron_backward_io");
    return SNN_OK;
}
