/* Helper for tests/oracle_norms.py: runs one operation on raw float32/int32 files.
 *
 *   driver_norms bn RANK D0 D1 D2 T N EPS MOMENTUM IN OUT
 *       IN : x[B*numel] w[C] b[C] running_mean[C] running_var[C] dy[B*numel]
 *       OUT: training forward/backward: y rm' rv' dx dw db, then eval forward/backward
 *            with the updated running statistics: y dx dw db
 *   driver_norms ln RANK D0 D1 D2 T N EPS IN OUT
 *       IN : x w[F] b[F] dy        OUT: y dx dw db
 *   driver_norms ce|mse T N C IN OUT
 *       IN : x[T*N*C] labels[N] (int32)      OUT: loss grad[T*N*C] correct (as float)
 *   driver_norms softmax|logsoftmax ROWS K IN OUT
 *       IN : x[ROWS*K]             OUT: y
 * Exit status 0 on success; a library error is printed and gives 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_reduce.h"
#include "nn/layers.h"
#include "snn/loss.h"

static FILE *fin, *fout;

static void *rd(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, fin) != bytes) {
        fprintf(stderr, "driver_norms: short input\n");
        exit(3);
    }
    return p;
}
static void wr(const void *p, size_t bytes) { fwrite(p, 1, bytes, fout); }

static int fail(snn_status st) {
    fprintf(stderr, "driver_norms: %s: %s\n", snn_status_name(st), snn_last_error());
    return 2;
}

static snn_shape parse_shape(char **a) {
    snn_shape s = {atoi(a[0]), {atoi(a[1]), atoi(a[2]), atoi(a[3]), 1}};
    for (int i = s.rank; i < SNN_MAX_RANK; i++) s.d[i] = 1;
    return s;
}

/* Host a single module like snn_model: flat params/grads/buffers, arena. */
static snn_status host(snn_module *m, snn_shape in, int T, int N, float **params, float **grads,
                       float **bufs, snn_arena *a) {
    m->in = in;
    SNN_TRY(m->ops->setup(m, in));
    size_t np = 0, nb = 0;
    for (int i = 0; i < m->n_params; i++)
        *(m->params[i].kind == SNN_PARAM_WEIGHT ? &np : &nb) += m->params[i].numel;
    *params = calloc(np + 1, sizeof(float));
    *grads = calloc(np + 1, sizeof(float));
    *bufs = calloc(nb + 1, sizeof(float));
    np = nb = 0;
    for (int i = 0; i < m->n_params; i++) {
        snn_param *p = &m->params[i];
        if (p->kind == SNN_PARAM_WEIGHT) {
            p->data = *params + np;
            p->grad = *grads + np;
            np += p->numel;
        } else {
            p->data = *bufs + nb;
            nb += p->numel;
        }
    }
    snn_arena_begin_measure(a);
    m->ops->reserve(m, a, T, N);
    SNN_TRY(snn_arena_allocate(a, a->used));
    m->ops->reserve(m, a, T, N);
    return SNN_OK;
}

static int run_norm(int bn, char **argv) {
    snn_shape in = parse_shape(argv + 2);
    int T = atoi(argv[6]), N = atoi(argv[7]);
    float eps = strtof(argv[8], NULL), mom = bn ? strtof(argv[9], NULL) : 0;
    int C = bn ? in.d[0] : in.d[in.rank - 1];
    size_t n = (size_t)T * N * snn_shape_numel(in);
    snn_module *m = bn ? snn_batchnorm_new(C, eps, mom) : snn_layernorm_new(C, eps);
    float *params, *grads, *bufs;
    snn_arena a;
    snn_status st = host(m, in, T, N, &params, &grads, &bufs, &a);
    if (st != SNN_OK) return fail(st);
    float *x = rd(n * sizeof(float));
    float *wb = rd(2 * (size_t)C * sizeof(float)); /* weight then bias, as laid out in params */
    memcpy(params, wb, 2 * (size_t)C * sizeof(float));
    free(wb);
    if (bn) {
        float *rs = rd(2 * (size_t)C * sizeof(float)); /* running_mean then running_var */
        memcpy(bufs, rs, 2 * (size_t)C * sizeof(float));
        free(rs);
    }
    float *dy = rd(n * sizeof(float));
    float *y = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
    snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    for (int pass = 0; pass < (bn ? 2 : 1); pass++) {
        r.training = pass == 0;
        memset(grads, 0, 2 * (size_t)C * sizeof(float));
        for (size_t i = 0; i < n; i++) y[i] = dx[i] = NAN;
        if ((st = m->ops->forward(m, &r, x, y)) != SNN_OK) return fail(st);
        if ((st = m->ops->backward(m, &r, x, y, dy, dx)) != SNN_OK) return fail(st);
        wr(y, n * sizeof(float));
        if (bn && pass == 0) wr(bufs, 2 * (size_t)C * sizeof(float));
        wr(dx, n * sizeof(float));
        wr(grads, 2 * (size_t)C * sizeof(float));
    }
    snn_module_free(m);
    snn_arena_free(&a);
    free(params);
    free(grads);
    free(bufs);
    free(x);
    free(dy);
    free(y);
    free(dx);
    return 0;
}

static int run_loss(int ce, char **argv) {
    int T = atoi(argv[2]), N = atoi(argv[3]), C = atoi(argv[4]);
    size_t n = (size_t)T * N * C;
    float *x = rd(n * sizeof(float));
    int32_t *lab = rd((size_t)N * sizeof(int32_t));
    float *g = malloc(n * sizeof(float)), loss = NAN;
    for (size_t i = 0; i < n; i++) g[i] = NAN;
    int correct = -1;
    snn_status st = ce ? snn_loss_cross_entropy_mean_t(x, lab, T, N, C, &loss, g, &correct)
                       : snn_loss_mse_rate(x, lab, T, N, C, &loss, g, &correct);
    if (st != SNN_OK) return fail(st);
    float cf = (float)correct;
    wr(&loss, sizeof loss);
    wr(g, n * sizeof(float));
    wr(&cf, sizeof cf);
    free(x);
    free(lab);
    free(g);
    return 0;
}

static int run_softmax(int logsm, char **argv) {
    size_t R = (size_t)atol(argv[2]);
    int K = atoi(argv[3]);
    float *x = rd(R * (size_t)K * sizeof(float)), *y = malloc(R * (size_t)K * sizeof(float));
    if (logsm) snn_cpu_log_softmax_rows(x, y, R, K);
    else snn_cpu_softmax_rows(x, y, R, K);
    wr(y, R * (size_t)K * sizeof(float));
    free(x);
    free(y);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    const char *op = argv[1];
    int nargs = !strcmp(op, "bn") ? 12 : !strcmp(op, "ln") ? 11 : !strcmp(op, "ce") || !strcmp(op, "mse") ? 7 : 6;
    if (argc != nargs) {
        fprintf(stderr, "driver_norms: wrong arguments for %s (see the comment at the top)\n", op);
        return 1;
    }
    fin = fopen(argv[argc - 2], "rb");
    fout = fopen(argv[argc - 1], "wb");
    if (!fin || !fout) return 4;
    int rc;
    if (!strcmp(op, "bn") || !strcmp(op, "ln")) rc = run_norm(op[0] == 'b', argv);
    else if (!strcmp(op, "ce") || !strcmp(op, "mse")) rc = run_loss(op[0] == 'c', argv);
    else if (!strcmp(op, "softmax") || !strcmp(op, "logsoftmax")) rc = run_softmax(op[0] == 'l', argv);
    else rc = 1;
    fclose(fin);
    if (fclose(fout) != 0) return 4;
    return rc;
}
