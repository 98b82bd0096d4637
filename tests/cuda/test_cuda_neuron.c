/* GPU neuron kernels vs the CPU reference, every configuration (kinds × decay_input × reset ×
 * detach × 7 surrogates) in f32/bf16/f16 storage with rotating spike types and optional
 * inputs, on vector-friendly, odd and misaligned sizes. Exit 77 (skip) without a GPU. */
#include "snn/cuda.h"
#include "neuron_case.h"

static snn_cuda *g;
static size_t g_offset; /* bytes added to every device pointer: 0, or a misalignment */

#define DEV_TRY(x)                                                                               \
    do {                                                                                         \
        if ((x) != SNN_OK) {                                                                     \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, snn_last_error());        \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

/* A device copy of a host buffer (or poisoned storage when src is NULL). */
typedef struct { void *base; void *p; size_t bytes; } dbuf;

static int dnew(dbuf *d, const void *src, size_t bytes) {
    d->bytes = bytes;
    d->base = NULL;
    d->p = NULL;
    DEV_TRY(snn_cuda_alloc(g, bytes + 64, &d->base));
    d->p = (char *)d->base + g_offset;
    if (src) DEV_TRY(snn_cuda_upload(g, d->p, src, bytes));
    else {
        DEV_TRY(snn_cuda_memset(g, d->p, 0xFF, bytes));
        DEV_TRY(snn_cuda_synchronize(g));
    }
    return 0;
}
static void dfree(dbuf *d) { snn_cuda_free(d->base); }

static int fwd_impl(const ncase *c, nfwd_io *io, void *ctx) {
    (void)ctx;
    const size_t N = (size_t)c->T * c->n, es = snn_dtype_size(c->io), ss = snn_dtype_size(c->sp);
    dbuf x, b, v0, s, h, vs, vl;
    memset(&b, 0, sizeof b);
    memset(&v0, 0, sizeof v0);
    memset(&vs, 0, sizeof vs);
    if (dnew(&x, io->x, N * es) || dnew(&s, NULL, N * ss) || dnew(&h, NULL, N * es) ||
        dnew(&vl, NULL, c->n * 4))
        return 1;
    if (io->bias && dnew(&b, io->bias, io->bias_period * 4)) return 1;
    if (io->v0 && dnew(&v0, io->v0, c->n * 4)) return 1;
    if (io->vseq && dnew(&vs, NULL, N * es)) return 1;
    snn_status st = snn_cuda_neuron_forward(g, &c->o, c->k, c->T, c->n, c->io, c->sp, x.p,
                                            io->bias ? (const float *)b.p : NULL, io->bias_period,
                                            io->v0 ? (const float *)v0.p : NULL, s.p, h.p,
                                            io->vseq ? vs.p : NULL, (float *)vl.p);
    if (st == SNN_OK) st = snn_cuda_synchronize(g);
    if (st == SNN_OK) {
        DEV_TRY(snn_cuda_download(g, io->s, s.p, N * ss));
        DEV_TRY(snn_cuda_download(g, io->h, h.p, N * es));
        if (io->vseq) DEV_TRY(snn_cuda_download(g, io->vseq, vs.p, N * es));
        DEV_TRY(snn_cuda_download(g, io->vlast, vl.p, c->n * 4));
    }
    dfree(&x); dfree(&s); dfree(&h); dfree(&vl);
    if (io->bias) dfree(&b);
    if (io->v0) dfree(&v0);
    if (io->vseq) dfree(&vs);
    return st != SNN_OK;
}

static int bwd_impl(const ncase *c, nbwd_io *io, void *ctx) {
    (void)ctx;
    const size_t N = (size_t)c->T * c->n, es = snn_dtype_size(c->io);
    dbuf h, gs, gv, v0, gvl, gx, gv0, ts, sc;
    memset(&gv, 0, sizeof gv);
    memset(&v0, 0, sizeof v0);
    memset(&gvl, 0, sizeof gvl);
    memset(&ts, 0, sizeof ts);
    float zero2[2] = {0.0f, 0.0f};
    if (dnew(&h, io->h, N * es) || dnew(&gs, io->gs, N * es) || dnew(&gx, NULL, N * es) ||
        dnew(&gv0, NULL, c->n * 4) || dnew(&sc, zero2, 8))
        return 1;
    if (io->gvseq && dnew(&gv, io->gvseq, N * es)) return 1;
    if (io->v0 && dnew(&v0, io->v0, c->n * 4)) return 1;
    if (io->gvlast && dnew(&gvl, io->gvlast, c->n * 4)) return 1;
    if (io->tsum && dnew(&ts, NULL, c->n * 4)) return 1;
    float *gk = (float *)sc.p, *amax = gk + 1;
    snn_status st = snn_cuda_neuron_backward(
        g, &c->o, c->k, c->T, c->n, c->io, h.p, io->v0 ? (const float *)v0.p : NULL, gs.p,
        io->gvseq ? gv.p : NULL, io->gvlast ? (const float *)gvl.p : NULL, gx.p, (float *)gv0.p,
        io->want_gk ? gk : NULL, io->tsum ? (float *)ts.p : NULL, io->want_amax ? amax : NULL);
    if (st == SNN_OK) st = snn_cuda_synchronize(g);
    if (st == SNN_OK) {
        DEV_TRY(snn_cuda_download(g, io->gx, gx.p, N * es));
        DEV_TRY(snn_cuda_download(g, io->gv0, gv0.p, c->n * 4));
        if (io->tsum) DEV_TRY(snn_cuda_download(g, io->tsum, ts.p, c->n * 4));
        float r[2];
        DEV_TRY(snn_cuda_download(g, r, sc.p, 8));
        io->gk = r[0];
        io->amax = r[1];
    }
    dfree(&h); dfree(&gs); dfree(&gx); dfree(&gv0); dfree(&sc);
    if (io->gvseq) dfree(&gv);
    if (io->v0) dfree(&v0);
    if (io->gvlast) dfree(&gvl);
    if (io->tsum) dfree(&ts);
    return st != SNN_OK;
}

/* Benchmark-only launch-shape override (src/backend/cuda/cuda_neuron.cu; not public). */
snn_status snn_cuda_neuron_bench_override(int pack_bytes, int block, int generic);

static uint64_t g_rng;
static int visit(const ncase *c, void *ctx) { return nc_run(c, fwd_impl, bwd_impl, ctx, &g_rng); }

static void check_errors(void) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    void *p = NULL;
    if (snn_cuda_alloc(g, 1024, &p) != SNN_OK) return;
    CHECK(snn_cuda_neuron_forward(g, &o, 0.5f, 0, 16, SNN_F32, SNN_F32, p, NULL, 0, NULL, p, NULL,
                                  NULL, NULL) == SNN_E_SHAPE);
    CHECK(snn_cuda_neuron_forward(g, &o, 0.5f, 2, 16, SNN_F8E4M3, SNN_F32, p, NULL, 0, NULL, p,
                                  NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    CHECK(snn_cuda_neuron_forward(g, &o, 1.5f, 2, 16, SNN_F32, SNN_F32, p, NULL, 0, NULL, p, NULL,
                                  NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_cuda_neuron_forward(g, &o, 0.5f, 2, 16, SNN_F32, SNN_F8E5M2, p, NULL, 0, NULL, p,
                                  NULL, NULL, NULL) == SNN_E_UNSUPPORTED);
    o.surrogate = SNN_SG_COUNT;
    CHECK(snn_cuda_neuron_backward(g, &o, 0.5f, 2, 16, SNN_F32, p, NULL, p, NULL, NULL, p, NULL,
                                   NULL, NULL, NULL) == SNN_E_INVALID);
    snn_cuda_free(p);
}

int main(void) {
    snn_status st = snn_cuda_create(0, 0, &g);
    if (st != SNN_OK) {
        fprintf(stderr, "test_cuda_neuron: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    g_rng = snn_test_seed();
    static const snn_dtype ios[] = {SNN_F32, SNN_BF16, SNN_F16};
    /* every launch shape: pack width (16/8 bytes, or one neuron per thread when sizes or
     * alignment forbid packs) x prefetch depth, on aligned, odd and misaligned buffers */
    /* over: the override (4-byte packs = 2 neurons of 16-bit storage, block size, the
     * runtime-surrogate backward instead of the fixed-surrogate kernels) */
    static const struct { int T; size_t n; size_t offset; int pack, prefetch, over_pack, block, generic; } shapes[] = {
        {16, 4160, 0, 16, 1, 0, 0, 0}, /* 16-byte packs, short prefetch */
        {16, 4160, 0, 8, 2, 0, 0, 0},  /* 8-byte packs, long prefetch */
        {7, 1003, 0, 0, 0, 0, 0, 0},   /* odd n: automatic choice (one neuron per thread) */
        {9, 2048, 4, 16, 1, 0, 0, 0},  /* misaligned pointers: one neuron per thread */
        {33, 520, 0, 16, 2, 0, 0, 0},  /* T not a multiple of either prefetch depth */
        {1, 520, 0, 8, 1, 0, 0, 0},    /* a single step */
        {11, 1034, 0, 0, 1, 4, 128, 0}, /* 4-byte packs (n even, not a multiple of 4) */
        {12, 1040, 0, 8, 1, 0, 64, 1},  /* 8-byte packs, runtime-surrogate backward */
        {10, 2050, 0, 16, 1, 0, 0, 0},  /* 16-byte packs fall back to 4-byte ones (n % 4 = 2) */
    };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int d = 0; d < 3; d++) {
            g_offset = shapes[si].offset;
            if (snn_cuda_set_neuron_tuning(g, shapes[si].pack, shapes[si].prefetch) != SNN_OK ||
                snn_cuda_neuron_bench_override(shapes[si].over_pack, shapes[si].block,
                                               shapes[si].generic) != SNN_OK) {
                CHECK_MSG(0, "set_neuron_tuning: %s", snn_last_error());
                continue;
            }
            nc_all_configs(shapes[si].T, shapes[si].n, ios[d], visit, NULL);
        }
    CHECK(snn_cuda_set_neuron_tuning(g, 4, 0) == SNN_E_INVALID);
    CHECK(snn_cuda_neuron_bench_override(2, 0, 0) == SNN_E_INVALID);
    CHECK(snn_cuda_neuron_bench_override(0, 96, 0) == SNN_E_INVALID);
    snn_cuda_neuron_bench_override(0, 0, 0);
    snn_cuda_set_neuron_tuning(g, 0, 0);
    g_offset = 0;
    check_errors();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_neuron");
}
