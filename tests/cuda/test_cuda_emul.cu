/* Host emulation of the fused neuron kernels: runs the exact kernel bodies
 * (src/backend/cuda/cuda_neuron_body.h) on the CPU, thread index by thread index, against the
 * CPU reference. Needs nvcc but no GPU, so the indexing, packing, chunked time loop and every
 * option are checked before any device time is spent. */
#include "backend/cuda/cuda_neuron_body.h"

extern "C" {
#include "neuron_case.h"
}

template <typename TI, typename TS, int V> static void emul_fwd(const FwdArgs &a) {
    size_t threads = (a.n + V - 1) / V;
    for (size_t t = 0; t < threads; t++) neuron_fwd_body<TI, TS, V>(a, t);
}

template <typename TI, typename TS> static void emul_fwd_v(const FwdArgs &a, int vec) {
    if (vec)
        emul_fwd<TI, TS, 16 / sizeof(TI)>(a);
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

static int g_vec; /* 1: 16-byte packs (when the size allows), 0: one neuron per thread */

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
    size_t V = 16 / snn_dtype_size(c->io);
    int vec = g_vec && c->n % V == 0 && (!io->bias || a.bias_period % V == 0);
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
    for (size_t t = 0; t < threads; t++) {
        float dk, m;
        neuron_bwd_body<TI, V, PLIF>(a, t, &dk, &m);
        gk += dk;
        mx = fmaxf(mx, m);
    }
    io->gk = (float)gk;
    io->amax = mx;
}

template <typename TI> static void emul_bwd_v(const BwdArgs &a, int vec, nbwd_io *io) {
    constexpr int V = 16 / sizeof(TI);
    if (a.p.kind == 2) {
        if (vec) emul_bwd<TI, V, true>(a, io);
        else emul_bwd<TI, 1, true>(a, io);
    } else {
        if (vec) emul_bwd<TI, V, false>(a, io);
        else emul_bwd<TI, 1, false>(a, io);
    }
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
    size_t V = 16 / snn_dtype_size(c->io);
    int vec = g_vec && c->n % V == 0;
    switch (c->io) {
    case SNN_F32: emul_bwd_v<float>(a, vec, io); break;
    case SNN_BF16: emul_bwd_v<__nv_bfloat16>(a, vec, io); break;
    default: emul_bwd_v<__half>(a, vec, io); break;
    }
    return 0;
}

static uint64_t g_rng;
static int visit(const ncase *c, void *ctx) { return nc_run(c, fwd_impl, bwd_impl, ctx, &g_rng); }

int main(void) {
    g_rng = snn_test_seed();
    static const snn_dtype ios[] = {SNN_F32, SNN_BF16, SNN_F16};
    /* sizes: vector path (n % 8 == 0), scalar path (odd n), T not a multiple of the unroll */
    static const struct { int T; size_t n; int vec; } shapes[] = {
        {7, 96, 1}, {16, 64, 1}, {5, 61, 1}, {9, 40, 0}, {1, 24, 1}, {2, 13, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int d = 0; d < 3; d++) {
            g_vec = shapes[si].vec;
            nc_all_configs(shapes[si].T, shapes[si].n, ios[d], visit, NULL);
        }
    return snn_test_finish("test_cuda_emul");
}
