/* Helper for tests/oracle_layers_conv.py: runs one module forward and backward on raw
 * float32 files (little-endian, row-major, [T][N][per-sample] rows).
 *
 *   driver_layers_conv conv2d T N C H W O K S P BIAS CHUNK STRATEGY IN OUT
 *       IN : x[B*C*H*W] weight[O*C*K*K] bias[O] (only if BIAS) dy[B*O*H'*W']
 *       OUT: y dx dweight dbias (only if BIAS)
 *   driver_layers_conv conv1d T N C L O K S P BIAS CHUNK STRATEGY IN OUT   ([C, L] samples)
 *   driver_layers_conv maxpool2d|avgpool2d T N C H W K S P IN OUT
 *       IN : x dy          OUT: y dx
 *   driver_layers_conv gelu T N NUMEL IN OUT
 *       IN : x dy          OUT: y dx
 * CHUNK: samples per batched GEMM (0: automatic); STRATEGY: 0 automatic, 1 batched,
 * 2 per-sample (see snn_conv_set_strategy). Exit 0 on success, 2 on a library
 * error (printed), 3 on bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers_conv.h"

static FILE *fin, *fout;

static float *rd(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    if (!p || fread(p, sizeof(float), n, fin) != n) {
        fprintf(stderr, "driver_layers_conv: short input\n");
        exit(3);
    }
    return p;
}
static void wr(const float *p, size_t n) { fwrite(p, sizeof(float), n, fout); }

static int fail(snn_status st) {
    fprintf(stderr, "driver_layers_conv: %s: %s\n", snn_status_name(st), snn_last_error());
    return 2;
}

static int usage(void) {
    fprintf(stderr, "usage: see the comment at the top of tests/driver_layers_conv.c\n");
    return 3;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *op = argv[1];
    int a[16] = {0};
    int nint;
    snn_module *m = NULL;
    snn_shape in;
    int bias = 0;
    if (!strcmp(op, "conv2d") || !strcmp(op, "conv1d")) {
        int is2 = !strcmp(op, "conv2d");
        nint = is2 ? 12 : 11;
        if (argc != 2 + nint + 2) return usage();
        for (int i = 0; i < nint; i++) a[i] = atoi(argv[2 + i]);
        /* T N C H W O K S P BIAS CHUNK STRATEGY  or  T N C L O K S P BIAS CHUNK STRATEGY */
        const int *c = a + 2;
        if (is2) {
            in = snn_shape3(c[0], c[1], c[2]);
            bias = c[7];
            snn_conv_set_max_chunk(c[8]);
            snn_conv_set_strategy(c[9]);
            m = snn_conv2d_new(c[0], c[3], c[4], c[5], c[6], bias);
        } else {
            in = snn_shape2(c[0], c[1]);
            bias = c[6];
            snn_conv_set_max_chunk(c[7]);
            snn_conv_set_strategy(c[8]);
            m = snn_conv1d_new(c[0], c[2], c[3], c[4], c[5], bias);
        }
    } else if (!strcmp(op, "maxpool2d") || !strcmp(op, "avgpool2d")) {
        nint = 8;
        if (argc != 2 + nint + 2) return usage();
        for (int i = 0; i < nint; i++) a[i] = atoi(argv[2 + i]);
        in = snn_shape3(a[2], a[3], a[4]);
        m = op[0] == 'm' ? snn_maxpool2d_new(a[5], a[6], a[7]) : snn_avgpool2d_new(a[5], a[6], a[7]);
    } else if (!strcmp(op, "gelu")) {
        nint = 3;
        if (argc != 2 + nint + 2) return usage();
        for (int i = 0; i < nint; i++) a[i] = atoi(argv[2 + i]);
        in = snn_shape1(a[2]);
        m = snn_gelu_new();
    } else {
        return usage();
    }
    if (!m) return fail(SNN_E_NOMEM);
    fin = fopen(argv[2 + nint], "rb");
    fout = fopen(argv[3 + nint], "wb");
    if (!fin || !fout) {
        fprintf(stderr, "driver_layers_conv: cannot open the input or output file\n");
        return 3;
    }
    const int T = a[0], N = a[1];
    snn_module_name_tree(m, "layer");
    m->in = in;
    snn_status st = m->ops->setup(m, in);
    if (st != SNN_OK) return fail(st);
    size_t B = (size_t)T * N, in_n = snn_shape_numel(in), out_n = snn_shape_numel(m->out);
    size_t np = 0;
    for (int i = 0; i < m->n_params; i++) np += m->params[i].numel;
    float *x = rd(B * in_n), *params = rd(np), *dy = rd(B * out_n);
    float *grads = calloc(np ? np : 1, sizeof(float));
    for (size_t i = 0, off = 0; i < (size_t)m->n_params; off += m->params[i].numel, i++) {
        m->params[i].data = params + off;
        m->params[i].grad = grads + off;
    }
    snn_arena arena;
    snn_arena_begin_measure(&arena);
    if (m->ops->reserve) m->ops->reserve(m, &arena, T, N);
    st = snn_arena_allocate(&arena, arena.used);
    if (st != SNN_OK) return fail(st);
    if (m->ops->reserve) m->ops->reserve(m, &arena, T, N);
    float *y = malloc(sizeof(float) * B * out_n), *dx = malloc(sizeof(float) * B * in_n);
    snn_run r = {.T = T, .N = N, .training = 1, .seed = 1, .step = 0, .be = snn_backend_cpu()};
    st = m->ops->forward(m, &r, x, y);
    if (st != SNN_OK) return fail(st);
    st = m->ops->backward(m, &r, x, y, dy, dx);
    if (st != SNN_OK) return fail(st);
    wr(y, B * out_n);
    wr(dx, B * in_n);
    wr(grads, np);
    fclose(fout);
    fclose(fin);
    snn_module_free(m);
    snn_arena_free(&arena);
    free(params);
    free(grads);
    free(x);
    free(dy);
    free(y);
    free(dx);
    return 0;
}
