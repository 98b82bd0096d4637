/* Helper for tests/oracle_optim.py: runs our optimizer, clipping and schedules on data the
 * oracle wrote, and writes the results back as raw little-endian float32.
 *
 *   driver_optim optim KIND LR WD MOMENTUM DAMPENING NESTEROV BETA1 BETA2 EPS N STEPS IN OUT
 *       IN:  params[N], mask[N] (0/1), lrs[STEPS], grads[STEPS][N]
 *       OUT: params[N] after the steps, then each state tensor [N] in snn_optimizer_state order
 *   driver_optim clip MAX_NORM N IN OUT
 *       IN:  grads[N];  OUT: norm, grads[N] after clipping
 *   driver_optim sched KIND BASE WARMUP START_FACTOR TOTAL MIN_LR STEP_SIZE GAMMA NSTEPS OUT
 *       OUT: lr[0..NSTEPS)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snn/optim.h"

static int read_floats(FILE *f, float *x, size_t n) { return fread(x, sizeof(float), n, f) == n ? 0 : -1; }

static int write_floats(FILE *f, const float *x, size_t n) {
    return fwrite(x, sizeof(float), n, f) == n ? 0 : -1;
}

static int fail(const char *what) {
    fprintf(stderr, "driver_optim: %s: %s\n", what, snn_last_error());
    return 1;
}

static int run_optim(char **a) {
    int kind = snn_optim_kind_parse(a[0]);
    if (kind < 0) return fprintf(stderr, "driver_optim: unknown kind %s\n", a[0]), 2;
    snn_optim_opts o = snn_optim_defaults((snn_optim_kind)kind);
    o.lr = strtof(a[1], NULL);
    o.weight_decay = strtof(a[2], NULL);
    o.momentum = strtof(a[3], NULL);
    o.dampening = strtof(a[4], NULL);
    o.nesterov = atoi(a[5]);
    o.beta1 = strtof(a[6], NULL);
    o.beta2 = strtof(a[7], NULL);
    o.eps = strtof(a[8], NULL);
    size_t n = strtoull(a[9], NULL, 10);
    int steps = atoi(a[10]);
    FILE *in = fopen(a[11], "rb");
    if (!in) return fprintf(stderr, "driver_optim: cannot open %s\n", a[11]), 2;
    float *params = malloc(n * sizeof(float)), *maskf = malloc(n * sizeof(float));
    float *grads = malloc(n * sizeof(float)), *lrs = malloc((size_t)steps * sizeof(float));
    uint8_t *mask = malloc(n);
    int rc = 1;
    snn_optimizer *opt = NULL;
    if (!params || !maskf || !grads || !lrs || !mask) goto done;
    if (read_floats(in, params, n) || read_floats(in, maskf, n) || read_floats(in, lrs, (size_t)steps)) goto done;
    for (size_t i = 0; i < n; i++) mask[i] = maskf[i] != 0;
    if (snn_optimizer_create(&o, n, params, grads, mask, &opt) != SNN_OK) {
        rc = fail("create");
        goto done;
    }
    for (int s = 0; s < steps; s++) {
        /* fresh gradients each step, written into the array the optimizer reads */
        if (read_floats(in, grads, n)) goto done;
        if (snn_optimizer_step(opt, lrs[s], 0) != SNN_OK) {
            rc = fail("step");
            goto done;
        }
    }
    FILE *out = fopen(a[12], "wb");
    if (!out) goto done;
    int bad = write_floats(out, params, n);
    for (size_t k = 0; k < snn_optimizer_num_states(opt); k++) {
        snn_optim_state st;
        if (snn_optimizer_state(opt, k, &st) != SNN_OK) bad = 1;
        else bad |= write_floats(out, st.data, st.numel);
    }
    bad |= fclose(out);
    rc = bad ? 1 : 0;
done:
    fclose(in);
    snn_optimizer_free(opt);
    free(params);
    free(maskf);
    free(grads);
    free(lrs);
    free(mask);
    return rc;
}

static int run_clip(char **a) {
    float max_norm = strtof(a[0], NULL);
    size_t n = strtoull(a[1], NULL, 10);
    float *g = malloc(n * sizeof(float));
    FILE *in = fopen(a[2], "rb");
    if (!g || !in || read_floats(in, g, n)) return fprintf(stderr, "driver_optim: cannot read %s\n", a[2]), 2;
    fclose(in);
    float norm = snn_clip_grad_norm(g, n, max_norm);
    FILE *out = fopen(a[3], "wb");
    if (!out) return 2;
    int bad = write_floats(out, &norm, 1) | write_floats(out, g, n);
    bad |= fclose(out);
    free(g);
    return bad ? 1 : 0;
}

static int run_sched(char **a) {
    snn_lr_sched s;
    memset(&s, 0, sizeof s);
    int kind = snn_lr_kind_parse(a[0]);
    if (kind < 0) return fprintf(stderr, "driver_optim: unknown schedule %s\n", a[0]), 2;
    s.kind = (snn_lr_kind)kind;
    s.base_lr = strtof(a[1], NULL);
    s.warmup_steps = atol(a[2]);
    s.warmup_start_factor = strtof(a[3], NULL);
    s.total_steps = atol(a[4]);
    s.min_lr = strtof(a[5], NULL);
    s.step_size = atol(a[6]);
    s.gamma = strtof(a[7], NULL);
    long nsteps = atol(a[8]);
    if (snn_lr_sched_check(&s) != SNN_OK) return fail("schedule");
    FILE *out = fopen(a[9], "wb");
    if (!out) return 2;
    int bad = 0;
    for (long k = 0; k < nsteps; k++) {
        float lr = snn_lr_schedule(&s, k);
        bad |= write_floats(out, &lr, 1);
    }
    bad |= fclose(out);
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 15 && strcmp(argv[1], "optim") == 0) return run_optim(argv + 2);
    if (argc == 6 && strcmp(argv[1], "clip") == 0) return run_clip(argv + 2);
    if (argc == 12 && strcmp(argv[1], "sched") == 0) return run_sched(argv + 2);
    fprintf(stderr, "usage: see the comment at the top of tests/driver_optim.c\n");
    return 2;
}
