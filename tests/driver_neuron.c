/* Driver for tests/oracle_neuron.py: runs many neuron cases given in files and writes
 * the results, so one process answers the whole batch.
 *
 *   driver_neuron <dir>
 * reads <dir>/cases.txt (first line: count; then one case per line:
 *   kind surrogate alpha tau vth soft vreset detach decay_input T n N path use_vseq)
 * where path is "kernel" (snn_neuron_forward/backward with a given v0 and w) or "module"
 * (the neuron module: v0 = reset value, w from the module's own init, gradient only on
 * spikes). <dir>/inputs.bin holds, per case, float32 x[T n], v0[n], gs[T n], gv_last[n],
 * gv_seq[T n], w[1]. Writes <dir>/outputs.bin, per case, float32 s[T n], h[T n],
 * v_seq[T n], v_last[n], gx[T n], gv0[n], gw[1], w_used[1] (NaN where not produced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "neuron/neuron_module.h"
#include "snn/neuron.h"

static int read_floats(FILE *f, float *p, size_t n) { return fread(p, sizeof(float), n, f) == n; }
static int write_floats(FILE *f, const float *p, size_t n) { return fwrite(p, sizeof(float), n, f) == n; }
static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

typedef struct {
    float *x, *v0, *gs, *gvl, *gvs, w;
    float *s, *h, *vseq, *vlast, *gx, *gv0, gw, w_used;
} case_io;

static int run_module(const snn_neuron_opts *o, int T, int N, size_t n, case_io *c) {
    snn_module *m = snn_neuron_module_new(o);
    if (!m) return 0;
    int numel = (int)(n / (size_t)N);
    if (m->ops->setup(m, snn_shape1(numel)) != SNN_OK) {
        fprintf(stderr, "setup: %s\n", snn_last_error());
        snn_module_free(m);
        return 0;
    }
    float wdata = NAN, wgrad = 0.0f;
    if (m->n_params == 1) {
        m->params[0].data = &wdata;
        m->params[0].grad = &wgrad;
    }
    snn_rng rng = snn_rng_make(1, 0);
    m->ops->init(m, &rng);
    c->w_used = wdata;
    snn_arena a;
    snn_arena_begin_measure(&a);
    m->ops->reserve(m, &a, T, N);
    if (snn_arena_allocate(&a, a.used) != SNN_OK) {
        snn_module_free(m);
        return 0;
    }
    m->ops->reserve(m, &a, T, N);
    snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    int ok = m->ops->forward(m, &r, c->x, c->s) == SNN_OK;
    if (ok) {
        memcpy(c->h, snn_neuron_module_h_seq(m), sizeof(float) * (size_t)T * n);
        memcpy(c->vlast, snn_neuron_module_v(m), sizeof(float) * n);
        ok = m->ops->backward(m, &r, c->x, c->s, c->gs, c->gx) == SNN_OK;
    }
    if (!ok) fprintf(stderr, "module: %s\n", snn_last_error());
    c->gw = m->n_params == 1 ? wgrad : NAN;
    snn_arena_free(&a);
    snn_module_free(m);
    return ok;
}

static void run_kernel(const snn_neuron_opts *o, int T, size_t n, int use_vseq, case_io *c) {
    float k = o->kind == SNN_NEURON_LIF ? snn_neuron_lif_k(o->tau)
            : o->kind == SNN_NEURON_PLIF ? snn_plif_k(c->w) : 0.0f;
    snn_neuron_forward(o, k, T, n, c->x, c->v0, c->s, c->h, use_vseq ? c->vseq : NULL, c->vlast);
    double gk = NAN;
    snn_neuron_backward(o, k, T, n, c->h, c->v0, c->gs, use_vseq ? c->gvs : NULL, c->gvl, c->gx,
                        c->gv0, o->kind == SNN_NEURON_PLIF ? &gk : NULL);
    if (o->kind == SNN_NEURON_PLIF) {
        double kd = 1.0 / (1.0 + exp(-(double)c->w));
        c->gw = (float)(gk * kd * (1.0 - kd));
        c->w_used = c->w;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: driver_neuron <dir>\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/cases.txt", argv[1]);
    FILE *fc = fopen(path, "r");
    snprintf(path, sizeof path, "%s/inputs.bin", argv[1]);
    FILE *fi = fopen(path, "rb");
    snprintf(path, sizeof path, "%s/outputs.bin", argv[1]);
    FILE *fo = fopen(path, "wb");
    if (!fc || !fi || !fo) {
        fprintf(stderr, "driver_neuron: cannot open the case files in %s\n", argv[1]);
        return 2;
    }
    int count = 0;
    if (fscanf(fc, "%d", &count) != 1) return 2;
    for (int ci = 0; ci < count; ci++) {
        char kind[32], sg[64], pathk[16];
        float alpha, tau, vth, vreset;
        int soft, detach, decay, T, N, use_vseq;
        size_t n;
        if (fscanf(fc, "%31s %63s %f %f %f %d %f %d %d %d %zu %d %15s %d", kind, sg, &alpha, &tau, &vth,
                   &soft, &vreset, &detach, &decay, &T, &n, &N, pathk, &use_vseq) != 14) {
            fprintf(stderr, "driver_neuron: bad case line %d\n", ci);
            return 2;
        }
        snn_neuron_opts o;
        snn_neuron_kind kk;
        if (snn_neuron_kind_from_name(kind, &kk) != SNN_OK) return fprintf(stderr, "%s\n", snn_last_error()), 2;
        o = snn_neuron_defaults(kk);
        if (snn_surrogate_from_name(sg, &o.surrogate) != SNN_OK) return fprintf(stderr, "%s\n", snn_last_error()), 2;
        o.alpha = alpha;
        o.tau = tau;
        o.v_threshold = vth;
        o.soft_reset = soft;
        o.v_reset = vreset;
        o.detach_reset = detach;
        o.decay_input = decay;
        if (snn_neuron_opts_validate(&o) != SNN_OK) return fprintf(stderr, "%s\n", snn_last_error()), 2;

        size_t Tn = (size_t)T * n;
        case_io c = {0};
        float **tn_arrays[] = {&c.x, &c.gs, &c.gvs, &c.s, &c.h, &c.vseq, &c.gx};
        float **n_arrays[] = {&c.v0, &c.gvl, &c.vlast, &c.gv0};
        float *buf = malloc(sizeof(float) * (7 * Tn + 4 * n));
        if (!buf) return 2;
        for (int i = 0; i < 7; i++) *tn_arrays[i] = buf + (size_t)i * Tn;
        for (int i = 0; i < 4; i++) *n_arrays[i] = buf + 7 * Tn + (size_t)i * n;
        if (!read_floats(fi, c.x, Tn) || !read_floats(fi, c.v0, n) || !read_floats(fi, c.gs, Tn) ||
            !read_floats(fi, c.gvl, n) || !read_floats(fi, c.gvs, Tn) || !read_floats(fi, &c.w, 1)) {
            fprintf(stderr, "driver_neuron: inputs.bin is short at case %d\n", ci);
            return 2;
        }
        /* Poison every output so an element the code under test skips shows up as NaN. */
        fill_nan(c.s, 4 * Tn);       /* s, h, vseq, gx */
        fill_nan(c.vlast, 2 * n);    /* vlast, gv0 */
        c.gw = NAN;
        c.w_used = NAN;
        if (strcmp(pathk, "module") == 0) {
            if (!run_module(&o, T, N, n, &c)) return 3;
        } else {
            run_kernel(&o, T, n, use_vseq, &c);
        }
        if (!write_floats(fo, c.s, Tn) || !write_floats(fo, c.h, Tn) || !write_floats(fo, c.vseq, Tn) ||
            !write_floats(fo, c.vlast, n) || !write_floats(fo, c.gx, Tn) || !write_floats(fo, c.gv0, n) ||
            !write_floats(fo, &c.gw, 1) || !write_floats(fo, &c.w_used, 1)) {
            fprintf(stderr, "driver_neuron: cannot write outputs\n");
            return 2;
        }
        free(buf);
    }
    fclose(fc);
    fclose(fi);
    return fclose(fo) == 0 ? 0 : 2;
}
