/* Driver for tests/oracle_neuron_mp.py: runs the mixed-precision neuron kernels on many
 * cases given in files, in one process.
 *
 *   driver_neuron_mp <dir>
 * reads <dir>/cases.txt (first line: count; then one case per line:
 *   kind surrogate alpha tau vth soft vreset detach decay_input T n S F B use_v0 use_g w)
 * with S, F, B dtype names (f32, f16, bf16, f8e4m3, f8e5m2), use_v0 / use_g 0 or 1 (v0,
 * gs and gv_last passed or NULL) and w the PLIF parameter. <dir>/inputs.bin holds, per
 * case, float32 x[T n], v0[n], gs[T n], gv_last[n]. Writes <dir>/outputs.bin, per case,
 * float32 s[T n], h[T n], v_last[n], gx[T n], gv0[n], k[1], then float64 gk[1] (NaN where
 * not produced). The backward reads the h_seq the forward stored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/neuron.h"

static int read_floats(FILE *f, float *p, size_t n) { return fread(p, sizeof(float), n, f) == n; }
static int write_floats(FILE *f, const float *p, size_t n) { return fwrite(p, sizeof(float), n, f) == n; }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: driver_neuron_mp <dir>\n");
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
        fprintf(stderr, "driver_neuron_mp: cannot open the case files in %s\n", argv[1]);
        return 2;
    }
    int count = 0;
    if (fscanf(fc, "%d", &count) != 1) return 2;
    for (int ci = 0; ci < count; ci++) {
        char kind[32], sg[64], sn[16], fn[16], bn[16];
        float alpha, tau, vth, vreset, w;
        int soft, detach, decay, T, use_v0, use_g;
        size_t n;
        if (fscanf(fc, "%31s %63s %f %f %f %d %f %d %d %d %zu %15s %15s %15s %d %d %f", kind, sg, &alpha, &tau, &vth,
                   &soft, &vreset, &detach, &decay, &T, &n, sn, fn, bn, &use_v0, &use_g, &w) != 17) {
            fprintf(stderr, "driver_neuron_mp: bad case line %d\n", ci);
            return 2;
        }
        snn_neuron_kind kk;
        snn_dtype S, F, B;
        if (snn_neuron_kind_from_name(kind, &kk) != SNN_OK || snn_dtype_from_name(sn, &S) != SNN_OK ||
            snn_dtype_from_name(fn, &F) != SNN_OK || snn_dtype_from_name(bn, &B) != SNN_OK)
            return fprintf(stderr, "%s\n", snn_last_error()), 2;
        snn_neuron_opts o = snn_neuron_defaults(kk);
        if (snn_surrogate_from_name(sg, &o.surrogate) != SNN_OK) return fprintf(stderr, "%s\n", snn_last_error()), 2;
        o.alpha = alpha;
        o.tau = tau;
        o.v_threshold = vth;
        o.soft_reset = soft;
        o.v_reset = vreset;
        o.detach_reset = detach;
        o.decay_input = decay;
        if (snn_neuron_opts_validate(&o) != SNN_OK) return fprintf(stderr, "%s\n", snn_last_error()), 2;
        float k = kk == SNN_NEURON_LIF ? snn_neuron_lif_k(tau) : kk == SNN_NEURON_PLIF ? snn_plif_k(w) : 0.0f;

        size_t Tn = (size_t)T * n;
        float *buf = malloc(sizeof(float) * (6 * Tn + 5 * n + 1));
        if (!buf) return 2;
        float *x = buf, *gs = x + Tn, *s = gs + Tn, *h = s + Tn, *gx = h + Tn, *v0 = gx + Tn, *gvl = v0 + n,
              *vl = gvl + n, *gv0 = vl + n;
        if (!read_floats(fi, x, Tn) || !read_floats(fi, v0, n) || !read_floats(fi, gs, Tn) || !read_floats(fi, gvl, n)) {
            fprintf(stderr, "driver_neuron_mp: inputs.bin is short at case %d\n", ci);
            return 2;
        }
        /* poison every output: an element the kernels skip shows up as NaN */
        for (size_t i = 0; i < 3 * Tn; i++) s[i] = NAN; /* s, h, gx */
        for (size_t i = 0; i < 2 * n; i++) vl[i] = NAN;  /* vl, gv0 */
        double gk = NAN;
        snn_status st = snn_neuron_forward_mp(&o, k, T, n, S, F, x, use_v0 ? v0 : NULL, s, h, vl);
        if (st == SNN_OK)
            st = snn_neuron_backward_mp(&o, k, T, n, S, F, B, h, use_v0 ? v0 : NULL, use_g ? gs : NULL,
                                        use_g ? gvl : NULL, gx, gv0, kk == SNN_NEURON_PLIF ? &gk : NULL);
        if (st != SNN_OK) return fprintf(stderr, "case %d: %s\n", ci, snn_last_error()), 3;
        if (!write_floats(fo, s, Tn) || !write_floats(fo, h, Tn) || !write_floats(fo, vl, n) ||
            !write_floats(fo, gx, Tn) || !write_floats(fo, gv0, n) || !write_floats(fo, &k, 1) ||
            fwrite(&gk, sizeof gk, 1, fo) != 1) {
            fprintf(stderr, "driver_neuron_mp: cannot write outputs\n");
            return 2;
        }
        free(buf);
    }
    fclose(fc);
    fclose(fi);
    return fclose(fo) == 0 ? 0 : 2;
}
