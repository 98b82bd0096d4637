/* Host emulation of the fused neuron kernels: runs the exact kernel bodies
 * (src/backend/cuda/cuda_neuron_body.h) on the CPU, thread index by thread index, against the
 * CPU reference. Needs nvcc but no GPU, so the indexing, packing, chunked time loop and every
 * option are checked before any device time is spent. */
#include "backend/cuda/cuda_neuron_body.h"
#include "backend/cuda/cuda_neuron_mp.h"

extern "C" {
#include "neuron_case.h"
#include "neuron_mp_case.h"
}

static int g_pack; /* 16 or 8: bytes of neurons per thread (when the size allows), 1: one */
static int g_long; /* long prefetch (16 steps forward, 8 backward) */

template <typename TI, typename TS, int V> static void emul_fwd(const FwdArgs &a) {
    size_t threads = (a.n + V - 1) / V;
    for (size_t t = 0; t < threads; t++) {
        if (g_long) neuron_fwd_body<TI, TS, V, 16>(a, t);
        else neuron_fwd_body<TI, TS, V, 4>(a, t);
    }
}

template <typename TI, typename TS> static void emul_fwd_v(const FwdArgs &a, int vec) {
    if (vec && g_pack == 16)
        emul_fwd<TI, TS, 16 / sizeof(TI)>(a);
    else if (vec)
        emul_fwd<TI, TS, 8 / sizeof(TI)>(a);
    else
        emul_fwd<TI, TS, 1>(a);
}

template <typename TI> static void emul_fwd_s(const FwdArgs &a, snn_dtype sp, int vec) {
    switch (sp) {
    case SNN_F32: emul_fwd_v<TI, float>(a, vec); break;
    case SNN_BF16: emul_fwd_v<TI, __nv_bfloat16>(a, vec); break;
    case SNN_F16: emul_fwd_v<TI, __half>(a, vec); break;
    default: emul_fwd_v<TI, snn_e4m3>(a, vec); break;
    }
}

static NeuronP params(const ncase *c) {
    NeuronP p;
    static const float da[SNN_SG_COUNT] = {4, 2, 1, 1, 2, 1, 2};
    p.kind = (int)c->o.kind;
    p.decay_input = c->o.decay_input;
    p.soft = c->o.soft_reset;
    p.detach = c->o.detach_reset;
    p.sg = (int)c->o.surrogate;
    p.alpha = c->o.alpha != 0.0f ? c->o.alpha : da[p.sg];
    p.vth = c->o.v_threshold;
    p.vreset = c->o.v_reset;
    p.k = c->k;
    return p;
}


static int fwd_impl(const ncase *c, nfwd_io *io, void *ctx) {
    (void)ctx;
    FwdArgs a;
    memset(&a, 0, sizeof a);
    a.p = params(c);
    a.T = c->T;
    a.n = c->n;
    a.x = io->x;
    a.bias = io->bias;
    a.bias_period = io->bias ? io->bias_period : 1;
    a.v0 = io->v0;
    a.s = io->s;
    a.h = io->h;
    a.vseq = io->vseq;
    a.vlast = io->vlast;
    size_t V = (size_t)g_pack / snn_dtype_size(c->io);
    int vec = g_pack > 1 && c->n % V == 0 && (!io->bias || a.bias_period % V == 0);
    switch (c->io) {
    case SNN_F32: emul_fwd_s<float>(a, c->sp, vec); break;
    case SNN_BF16: emul_fwd_s<__nv_bfloat16>(a, c->sp, vec); break;
    default: emul_fwd_s<__half>(a, c->sp, vec); break;
    }
    return 0;
}

template <typename TI, int V, bool PLIF> static void emul_bwd(const BwdArgs &a, nbwd_io *io) {
    size_t threads = (a.n + V - 1) / V;
    double gk = 0;
    float mx = 0;
    constexpr int US = V >= 8 ? 2 : 4; /* as cuda_neuron_bwd.cu */
    for (size_t t = 0; t < threads; t++) {
        float dk, m;
        if (g_long) neuron_bwd_body<TI, V, 8, PLIF>(a, t, &dk, &m);
        else neuron_bwd_body<TI, V, US, PLIF>(a, t, &dk, &m);
        gk += dk;
        mx = fmaxf(mx, m);
    }
    io->gk = (float)gk;
    io->amax = mx;
}

template <typename TI, bool PLIF> static void emul_bwd_p(const BwdArgs &a, int vec, nbwd_io *io) {
    if (vec && g_pack == 16) emul_bwd<TI, 16 / sizeof(TI), PLIF>(a, io);
    else if (vec) emul_bwd<TI, 8 / sizeof(TI), PLIF>(a, io);
    else emul_bwd<TI, 1, PLIF>(a, io);
}

template <typename TI> static void emul_bwd_v(const BwdArgs &a, int vec, nbwd_io *io) {
    if (a.p.kind == 2) emul_bwd_p<TI, true>(a, vec, io);
    else emul_bwd_p<TI, false>(a, vec, io);
}

static int bwd_impl(const ncase *c, nbwd_io *io, void *ctx) {
    (void)ctx;
    BwdArgs a;
    memset(&a, 0, sizeof a);
    a.p = params(c);
    a.T = c->T;
    a.n = c->n;
    a.h = io->h;
    a.v0 = io->v0;
    a.gs = io->gs;
    a.gvseq = io->gvseq;
    a.gvlast = io->gvlast;
    a.gx = io->gx;
    a.gv0 = io->gv0;
    a.gxsum = io->tsum;
    a.want_gk = io->want_gk;
    a.want_amax = io->want_amax;
    size_t V = (size_t)g_pack / snn_dtype_size(c->io);
    int vec = g_pack > 1 && c->n % V == 0;
    switch (c->io) {
    case SNN_F32: emul_bwd_v<float>(a, vec, io); break;
    case SNN_BF16: emul_bwd_v<__nv_bfloat16>(a, vec, io); break;
    default: emul_bwd_v<__half>(a, vec, io); break;
    }
    return 0;
}

static uint64_t g_rng;
static int visit(const ncase *c, void *ctx) { return nc_run(c, fwd_impl, bwd_impl, ctx, &g_rng); }

/* ---- Mixed-precision neurons (cuda_neuron_mp.h): the kernel bodies for every neuron index,
 * the dL/dk block sums and the chunk sum exactly as the kernels do them, against the CPU's
 * snn_neuron_forward_mp / backward_mp (cases in neuron_mp_case.h). */

template <int S, int F, typename TSP> static void mp_emf3(const MpFwdArgs &a) {
    for (size_t i = 0; i < a.n; i++) mp_fwd_body<S, F, TSP>(a, i);
}
template <int S, int F> static void mp_emf2(const MpFwdArgs &a, snn_dtype sp) {
    switch (sp) {
    case SNN_BF16: mp_emf3<S, F, __nv_bfloat16>(a); break;
    case SNN_F16: mp_emf3<S, F, __half>(a); break;
    default: mp_emf3<S, F, float>(a); break;
    }
}
template <int S> static void mp_emf1(const MpFwdArgs &a, snn_dtype F, snn_dtype sp) {
    switch (F) {
    case SNN_F32: mp_emf2<S, SNN_F32>(a, sp); break;
    case SNN_F16: mp_emf2<S, SNN_F16>(a, sp); break;
    case SNN_BF16: mp_emf2<S, SNN_BF16>(a, sp); break;
    default: mp_emf2<S, S>(a, sp); break;
    }
}
static snn_status mp_fwd_emul(const mpcase *c, mp_fwd_io *io, void *ctx) {
    (void)ctx;
    MpFwdArgs a;
    snn_status st = snn_cuda_mp_fwd_args(&c->o, c->k, c->T, c->n, c->S, c->F, c->sp, &a);
    if (st != SNN_OK) return st;
    a.x = io->x;
    a.v0 = io->v0;
    a.s = io->s;
    a.h = io->h;
    a.vlast = io->vlast;
    switch (c->S) {
    case SNN_F32: mp_emf1<SNN_F32>(a, c->F, c->sp); break;
    case SNN_F16: mp_emf1<SNN_F16>(a, c->F, c->sp); break;
    case SNN_BF16: mp_emf1<SNN_BF16>(a, c->F, c->sp); break;
    case SNN_F8E4M3: mp_emf1<SNN_F8E4M3>(a, c->F, c->sp); break;
    default: mp_emf1<SNN_F8E5M2>(a, c->F, c->sp); break;
    }
    return SNN_OK;
}

template <int S, int B> static void mp_emb2(const MpBwdArgs &a, double *part) {
    for (size_t i = 0; i < a.n; i++) part[i] = mp_bwd_body<S, B>(a, i);
}
template <int S> static void mp_emb1(const MpBwdArgs &a, snn_dtype B, double *part) {
    switch (B) {
    case SNN_F32: mp_emb2<S, SNN_F32>(a, part); break;
    case SNN_F16: mp_emb2<S, SNN_F16>(a, part); break;
    case SNN_BF16: mp_emb2<S, SNN_BF16>(a, part); break;
    default: mp_emb2<S, S>(a, part); break;
    }
}
static snn_status mp_bwd_emul(const mpcase *c, mp_bwd_io *io, void *ctx) {
    (void)ctx;
    MpBwdArgs a;
    snn_status st = snn_cuda_mp_bwd_args(&c->o, c->k, c->T, c->n, c->S, c->F, c->B, io->gk != NULL, &a);
    if (st != SNN_OK) return st;
    a.h = io->h;
    a.v0 = io->v0;
    a.gs = io->gs;
    a.gvlast = io->gvlast;
    a.gx = io->gx;
    a.gv0 = io->gv0;
    double *part = (double *)mpc_alloc(c->n * sizeof(double));
    switch (c->S) {
    case SNN_F32: mp_emb1<SNN_F32>(a, c->B, part); break;
    case SNN_F16: mp_emb1<SNN_F16>(a, c->B, part); break;
    case SNN_BF16: mp_emb1<SNN_BF16>(a, c->B, part); break;
    case SNN_F8E4M3: mp_emb1<SNN_F8E4M3>(a, c->B, part); break;
    default: mp_emb1<SNN_F8E5M2>(a, c->B, part); break;
    }
    if (io->gk && !a.want_k) *io->gk = 0.0;
    if (io->gk && a.want_k) {
        /* the kernels' reduction: block sums (mp_bwd_kernel), then chunks (mp_gk_finish) */
        const long long nb = (long long)((c->n + SNN_CUDA_MP_BLOCK - 1) / SNN_CUDA_MP_BLOCK);
        double *blk = (double *)mpc_alloc((size_t)nb * sizeof(double) + 8);
        for (long long b = 0; b < nb; b++) {
            size_t i0 = (size_t)b * SNN_CUDA_MP_BLOCK;
            blk[b] = mp_seq_sum(part + i0, c->n - i0 < SNN_CUDA_MP_BLOCK ? c->n - i0 : SNN_CUDA_MP_BLOCK);
        }
        double chunk[SNN_CUDA_MP_MAX_CHUNKS];
        const int nch = mp_chunks(nb);
        for (int ch = 0; ch < nch; ch++) {
            long long b0, b1;
            mp_chunk_range(nb, nch, ch, &b0, &b1);
            chunk[ch] = mp_seq_sum(blk + b0, (size_t)(b1 - b0));
        }
        *io->gk = mp_gk_total(chunk, nch, a.mode == MPK_DECAY, c->k);
        free(blk);
    }
    free(part);
    return SNN_OK;
}

static snn_status mp_fwd_status(snn_dtype S, snn_dtype F, void *ctx) {
    (void)ctx;
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    MpFwdArgs a;
    return snn_cuda_mp_fwd_args(&o, 0.5f, 1, 0, S, F, SNN_F32, &a);
}
static snn_status mp_bwd_status(snn_dtype S, snn_dtype F, snn_dtype B, void *ctx) {
    (void)ctx;
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    MpBwdArgs a;
    return snn_cuda_mp_bwd_args(&o, 0.5f, 1, 0, S, F, B, 1, &a);
}

int main(void) {
    g_rng = snn_test_seed();
    static const snn_dtype ios[] = {SNN_F32, SNN_BF16, SNN_F16};
    /* sizes: vector path (n % 8 == 0), scalar path (odd n), T not a multiple of the unroll */
    /* sizes: packed paths (n % 8 == 0), one neuron per thread (odd n), T not a multiple of
     * the prefetch depth; every pack width and prefetch depth the GPU code can pick */
    static const struct { int T; size_t n; int pack, lng; } shapes[] = {
        {7, 96, 16, 0}, {16, 64, 16, 1}, {21, 48, 8, 0}, {19, 40, 8, 1}, {5, 61, 16, 0},
        {9, 40, 1, 0},  {17, 24, 1, 1},  {1, 24, 16, 0}, {2, 13, 16, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int d = 0; d < 3; d++) {
            g_pack = shapes[si].pack;
            g_long = shapes[si].lng;
            nc_all_configs(shapes[si].T, shapes[si].n, ios[d], visit, NULL);
        }
    mpc_refusals(mp_fwd_status, mp_bwd_status, NULL);
    int mpn = mpc_all(mp_fwd_emul, mp_bwd_emul, NULL, &g_rng, 1);
    fprintf(stderr, "test_cuda_emul: %d mixed-precision neuron cases\n", mpn);
    return snn_test_finish("test_cuda_emul");
}
