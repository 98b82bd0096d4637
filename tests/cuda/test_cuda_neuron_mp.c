/* GPU mixed-precision neurons (snn_cuda_neuron_forward_mp / backward_mp) against the CPU
 * emulation snn_neuron_forward_mp / backward_mp: every accepted storage / forward / backward
 * dtype combination, IF / LIF / PLIF, every surrogate, hard and soft reset, detach_reset,
 * decay_input, T in {1, 5, 16}, odd n and n = 70001 (several blocks and chunks of the dL/dk
 * sum); spikes, h_seq, v_last, gx, gv0 and dL/dk bit for bit (neuron_mp_case.h). The refused
 * combinations must be refused with SNN_E_INVALID as on the CPU. Exit 77 without a GPU. */
#include <stdio.h>

#include "backend/cuda/cuda_neuron_mp.h"
#include "cuda_test_util.h"
#include "neuron_mp_case.h"

static size_t sz(snn_dtype t) { return snn_dtype_size(t); }

static snn_status gpu_fwd(const mpcase *c, mp_fwd_io *io, void *ctx) {
    (void)ctx;
    const size_t n = c->n, N = (size_t)c->T * n, es = sz(c->S);
    void *x = dcopy(io->x, N * es), *v0 = io->v0 ? dcopy(io->v0, n * es) : NULL;
    void *s = dalloc(N * sz(c->sp)), *h = dalloc(N * es), *vl = dalloc(n * es);
    snn_status st = snn_cuda_neuron_forward_mp(g, &c->o, c->k, c->T, n, c->S, c->F, c->sp, x, v0, s,
                                               io->h ? h : NULL, io->vlast ? vl : NULL);
    if (st == SNN_OK) st = snn_cuda_synchronize(g);
    if (st == SNN_OK) {
        snn_cuda_download(g, io->s, s, N * sz(c->sp));
        if (io->h) snn_cuda_download(g, io->h, h, N * es);
        if (io->vlast) snn_cuda_download(g, io->vlast, vl, n * es);
    }
    snn_cuda_free(x), snn_cuda_free(v0), snn_cuda_free(s), snn_cuda_free(h), snn_cuda_free(vl);
    return st;
}

static snn_status gpu_bwd(const mpcase *c, mp_bwd_io *io, void *ctx) {
    (void)ctx;
    const size_t n = c->n, N = (size_t)c->T * n, es = sz(c->S), glen = snn_cuda_neuron_mp_gk_len(n);
    void *h = dcopy(io->h, N * es), *v0 = io->v0 ? dcopy(io->v0, n * es) : NULL;
    float *gs = io->gs ? dcopy(io->gs, N * 4) : NULL, *gvl = io->gvlast ? dcopy(io->gvlast, n * 4) : NULL;
    float *gx = dalloc(N * 4), *gv0 = dalloc(n * 4);
    double *gk = dalloc(glen * sizeof(double));
    snn_status st = snn_cuda_neuron_backward_mp(g, &c->o, c->k, c->T, n, c->S, c->F, c->B, h, v0, gs, gvl,
                                                io->gx ? gx : NULL, io->gv0 ? gv0 : NULL, io->gk ? gk : NULL);
    if (st == SNN_OK) st = snn_cuda_synchronize(g);
    if (st == SNN_OK) {
        if (io->gx) snn_cuda_download(g, io->gx, gx, N * 4);
        if (io->gv0) snn_cuda_download(g, io->gv0, gv0, n * 4);
        if (io->gk) snn_cuda_download(g, io->gk, gk, sizeof(double));
    }
    snn_cuda_free(h), snn_cuda_free(v0), snn_cuda_free(gs), snn_cuda_free(gvl);
    snn_cuda_free(gx), snn_cuda_free(gv0), snn_cuda_free(gk);
    return st;
}

static snn_status gpu_fwd_status(snn_dtype S, snn_dtype F, void *ctx) {
    (void)ctx;
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    return snn_cuda_neuron_forward_mp(g, &o, 0.5f, 1, 0, S, F, SNN_F32, NULL, NULL, NULL, NULL, NULL);
}

static snn_status gpu_bwd_status(snn_dtype S, snn_dtype F, snn_dtype B, void *ctx) {
    (void)ctx;
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    double *gk = dalloc(sizeof(double));
    snn_status st = snn_cuda_neuron_backward_mp(g, &o, 0.5f, 1, 0, S, F, B, NULL, NULL, NULL, NULL, NULL, NULL, gk);
    snn_cuda_synchronize(g);
    snn_cuda_free(gk);
    return st;
}

/* T = 0: the forward writes v_last = S(v0), the backward gv0 = B(gv_last) and dL/dk = 0. */
static void test_t0(void) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_PLIF);
    const size_t n = 37;
    float v0[37], gvl[37], vl_ref[37], gv0_ref[37], back[37];
    snn_test_fill_uniform(v0, n, -0.5f, 0.9f, &rng);
    snn_test_fill_uniform(gvl, n, -0.5f, 0.5f, &rng);
    double gk_ref = NAN, gk = NAN;
    OK(snn_neuron_forward_mp(&o, 0.5f, 0, n, SNN_BF16, SNN_F16, NULL, v0, NULL, NULL, vl_ref));
    OK(snn_neuron_backward_mp(&o, 0.5f, 0, n, SNN_BF16, SNN_F16, SNN_BF16, NULL, v0, NULL, gvl, NULL, gv0_ref, &gk_ref));
    uint16_t v0b[37], vlb[37];
    snn_convert(SNN_BF16, v0b, SNN_F32, v0, n, 0);
    void *dv0 = dcopy(v0b, n * 2), *dvl = dalloc(n * 2);
    float *dgvl = dcopy(gvl, n * 4), *dgv0 = dalloc(n * 4);
    double *dgk = dalloc(snn_cuda_neuron_mp_gk_len(n) * sizeof(double));
    OK(snn_cuda_neuron_forward_mp(g, &o, 0.5f, 0, n, SNN_BF16, SNN_F16, SNN_F32, NULL, dv0, NULL, NULL, dvl));
    OK(snn_cuda_neuron_backward_mp(g, &o, 0.5f, 0, n, SNN_BF16, SNN_F16, SNN_BF16, NULL, dv0, NULL, dgvl, NULL, dgv0,
                                   dgk));
    OK(snn_cuda_synchronize(g));
    snn_cuda_download(g, vlb, dvl, n * 2);
    snn_convert(SNN_F32, back, SNN_BF16, vlb, n, 0);
    CHECK(memcmp(back, vl_ref, n * 4) == 0);
    snn_cuda_download(g, back, dgv0, n * 4);
    CHECK(memcmp(back, gv0_ref, n * 4) == 0);
    snn_cuda_download(g, &gk, dgk, sizeof gk);
    CHECK(gk == 0.0 && gk_ref == 0.0);
    snn_cuda_free(dv0), snn_cuda_free(dvl), snn_cuda_free(dgvl), snn_cuda_free(dgv0), snn_cuda_free(dgk);
}

/* Arguments the GPU refuses beyond the dtype rules. */
static void test_bad_args(void) {
    snn_neuron_opts o = snn_neuron_defaults(SNN_NEURON_LIF);
    void *p = dalloc(64);
    CHECK(snn_cuda_neuron_forward_mp(g, &o, 0.5f, 2, 4, SNN_F16, SNN_F32, SNN_F8E4M3, p, NULL, p, NULL, NULL) ==
          SNN_E_INVALID); /* spike dtype */
    CHECK(snn_cuda_neuron_forward_mp(g, &o, 0.5f, 2, 4, SNN_F16, SNN_F32, SNN_F32, NULL, NULL, p, NULL, NULL) ==
          SNN_E_INVALID); /* no x */
    CHECK(snn_cuda_neuron_backward_mp(g, &o, 0.5f, 2, 4, SNN_F16, SNN_F32, SNN_F32, NULL, NULL, NULL, NULL, NULL,
                                      NULL, NULL) == SNN_E_INVALID); /* no h_seq */
    snn_neuron_opts bad = o;
    bad.surrogate = SNN_SG_COUNT;
    CHECK(snn_cuda_neuron_forward_mp(g, &bad, 0.5f, 2, 4, SNN_F16, SNN_F32, SNN_F32, p, NULL, p, NULL, NULL) ==
          SNN_E_INVALID);
    snn_cuda_free(p);
}

int main(void) {
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        fprintf(stderr, "test_cuda_neuron_mp: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    rng = snn_test_seed();
    mpc_refusals(gpu_fwd_status, gpu_bwd_status, NULL);
    int cases = mpc_all(gpu_fwd, gpu_bwd, NULL, &rng, 1);
    fprintf(stderr, "test_cuda_neuron_mp: %d cases\n", cases);
    test_t0();
    test_bad_args();
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_neuron_mp");
}
