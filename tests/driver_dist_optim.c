/* The distributed optimizer (src/dist/dist_optim.c) against the unsharded AdamW of one
 * process. Every rank contributes its own Philox gradients (stream = step, rank), so every
 * rank can recompute the sum the all-reduce forms and run the reference optimizer over the
 * whole buffer itself. Checked, for a gpt model whose parameter count does not divide by
 * the rank count (uneven slices):
 *   - the slices tile the buffer; state bytes per rank = 8 * slice, sum over ranks = 8 n,
 *     max = 8 * ceil(n / P);
 *   - after 6 clipped AdamW steps (weight decay with the model's mask) every rank's
 *     parameters and the global grad norm equal the reference within 1e-5 relative;
 *   - the state gathered to rank 0 equals the reference's exp_avg / exp_avg_sq and steps;
 *   - a fresh sharded optimizer loaded from the reference's canonical state (reshard) and
 *     stepped once more equals the reference stepped once more;
 *   - a NaN gradient on the last rank skips the step on every rank, parameters unchanged.
 * Prints "dist_optim: N checks, F failures" on rank 0; exit 0 only when no rank failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/dist_optim.h"
#include "snn/lm.h"
#include "snn/optim.h"
#include "snn/rng.h"

static int checks, failures, my_rank;
#define CK(c)                                                                                       \
    do {                                                                                            \
        checks++;                                                                                   \
        if (!(c)) {                                                                                 \
            failures++;                                                                             \
            fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", my_rank, __FILE__, __LINE__, #c); \
        }                                                                                           \
    } while (0)

static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        if (fabs((double)b[i]) > s) s = fabs((double)b[i]);
    }
    return d / s;
}

/* rank r's gradient at step s */
static void grad_of(int s, int r, float *g, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = 0.05f * snn_rng_normal(777, (uint64_t)(1000 * s + r), (uint64_t)i);
}

int main(void) {
    snn_comm *w;
    if (snn_comm_init_world(&w) != SNN_OK) {
        fprintf(stderr, "init: %s\n", snn_last_error());
        return 1;
    }
    const int R = snn_comm_rank(w), P = snn_comm_size(w);
    my_rank = R;
    snn_gpt_opts o = snn_gpt_defaults(0);
    o.vocab = 38, o.context = 8, o.seq = 8, o.layers = 1, o.hidden = 16, o.heads = 2, o.groups = 2, o.ffn = 23;
    snn_model *m, *ref, *m2;
    if (snn_gpt_create(&o, 5, &m) || snn_gpt_create(&o, 5, &ref) || snn_gpt_create(&o, 5, &m2)) {
        fprintf(stderr, "model: %s\n", snn_last_error());
        return 1;
    }
    const size_t n = snn_model_num_params(m);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 1e-2f;
    oo.weight_decay = 0.1f;
    snn_dist_optim *d;
    snn_optimizer *ro;
    CK(snn_dist_optim_create(w, &oo, m, &d) == SNN_OK);
    CK(snn_optimizer_create_for_model(&oo, ref, &ro) == SNN_OK);
    /* slices */
    size_t shard = (n + (size_t)P - 1) / (size_t)P;
    CK(snn_dist_optim_total(d) == n);
    CK(snn_dist_optim_begin(d) == (size_t)R * shard);
    CK(snn_dist_optim_len(d) == (R == P - 1 ? n - (size_t)(P - 1) * shard : shard));
    double bytes[2] = {(double)snn_dist_optim_state_bytes(d), (double)snn_dist_optim_state_bytes(d)};
    CK(snn_comm_allreduce(w, &bytes[0], 1, SNN_COMM_F64, SNN_COMM_SUM) == SNN_OK);
    CK(snn_comm_allreduce(w, &bytes[1], 1, SNN_COMM_F64, SNN_COMM_MAX) == SNN_OK);
    CK(bytes[0] == 8.0 * (double)n && snn_dist_optim_full_state_bytes(d) == 8 * n);
    CK(bytes[1] == 8.0 * (double)shard);
    if (R == 0 && P > 1) CK(n % (size_t)P != 0); /* the uneven case is the one under test */
    float *tmp = malloc(n * sizeof(float));
    const float clip = 0.5f;
    double worst = 0;
    for (int s = 0; s < 6; s++) {
        grad_of(s, R, snn_model_grads(m), n);
        float *rg = snn_model_grads(ref);
        memset(rg, 0, n * sizeof(float));
        for (int r = 0; r < P; r++) {
            grad_of(s, r, tmp, n);
            for (size_t i = 0; i < n; i++) rg[i] += tmp[i];
        }
        float gn = 0, rn = snn_clip_grad_norm(rg, n, clip);
        int skipped = -1;
        CK(snn_dist_optim_step(d, 1e-2f, clip, 0, &gn, &skipped) == SNN_OK);
        CK(skipped == 0);
        CK(snn_optimizer_step(ro, 1e-2f, 0) == SNN_OK);
        CK(rn > clip && fabsf(gn - rn) <= 1e-5f * rn);
        double e = rel_diff(snn_model_params(m), snn_model_params(ref), n);
        if (e > worst) worst = e;
        CK(e <= 1e-5);
    }
    /* canonical state on rank 0 */
    snn_optimizer *full = NULL;
    if (R == 0) CK(snn_optimizer_create(&oo, n, snn_model_params(m), snn_model_grads(m), NULL, &full) == SNN_OK);
    CK(snn_dist_optim_gather(d, 0, full) == SNN_OK);
    if (R == 0) {
        for (size_t i = 0; i < snn_optimizer_num_states(ro); i++) {
            snn_optim_state a, b;
            CK(snn_optimizer_state(full, i, &a) == SNN_OK && snn_optimizer_state(ro, i, &b) == SNN_OK);
            double e = rel_diff(a.data, b.data, n);
            CK(!strcmp(a.name, b.name) && e <= 1e-5);
            if (e > worst) worst = e;
        }
        CK(snn_optimizer_steps(full) == 6);
    }
    snn_optimizer_free(full);
    /* reshard: a fresh sharded optimizer from the reference's canonical state */
    memcpy(snn_model_params(m2), snn_model_params(ref), n * sizeof(float));
    snn_dist_optim *d2;
    CK(snn_dist_optim_create(w, &oo, m2, &d2) == SNN_OK);
    const void *st[2];
    snn_optim_state a, b;
    CK(snn_optimizer_state(ro, 0, &a) == SNN_OK && snn_optimizer_state(ro, 1, &b) == SNN_OK);
    st[0] = a.data, st[1] = b.data;
    CK(snn_dist_optim_load_slice(d2, st, 2, snn_optimizer_steps(ro), "reference") == SNN_OK);
    grad_of(6, R, snn_model_grads(m2), n);
    float *rg = snn_model_grads(ref);
    memset(rg, 0, n * sizeof(float));
    for (int r = 0; r < P; r++) {
        grad_of(6, r, tmp, n);
        for (size_t i = 0; i < n; i++) rg[i] += tmp[i];
    }
    snn_clip_grad_norm(rg, n, clip);
    CK(snn_optimizer_step(ro, 1e-2f, 0) == SNN_OK);
    CK(snn_dist_optim_step(d2, 1e-2f, clip, 0, NULL, NULL) == SNN_OK);
    double e = rel_diff(snn_model_params(m2), snn_model_params(ref), n);
    CK(e <= 1e-5);
    if (e > worst) worst = e;
    /* a state holding a negative second moment is refused before anything is written */
    float *badv = malloc(n * sizeof(float));
    memcpy(badv, b.data, n * sizeof(float));
    badv[n - 1] = -1.0f;
    st[1] = badv;
    snn_optim_state mine;
    CK(snn_optimizer_state(snn_dist_optim_local(d2), 1, &mine) == SNN_OK);
    float keep = mine.data[0];
    snn_status ls = snn_dist_optim_load_slice(d2, st, 2, 3, "bad");
    CK(R == P - 1 ? ls == SNN_E_NUMERIC : ls == SNN_OK);
    if (R == P - 1) CK(mine.data[0] == keep);
    free(badv);
    /* a NaN on the last rank: every rank skips, nothing changes */
    memcpy(tmp, snn_model_params(m2), n * sizeof(float));
    grad_of(7, R, snn_model_grads(m2), n);
    if (R == P - 1) snn_model_grads(m2)[3] = NAN;
    int skipped = 0;
    float gn = 0;
    CK(snn_dist_optim_step(d2, 1e-2f, clip, 0, &gn, &skipped) == SNN_OK);
    CK(skipped == 1 && !isfinite(gn));
    CK(memcmp(tmp, snn_model_params(m2), n * sizeof(float)) == 0);

    int32_t f = failures;
    snn_comm_allreduce(w, &f, 1, SNN_COMM_I32, SNN_COMM_SUM);
    if (R == 0)
        printf("dist_optim: %d ranks, %zu parameters (slice %zu), worst relative difference %.3g; %d checks, %d failures\n",
               P, n, shard, worst, checks, (int)f);
    free(tmp);
    snn_dist_optim_free(d);
    snn_dist_optim_free(d2);
    snn_optimizer_free(ro);
    snn_model_free(m);
    snn_model_free(ref);
    snn_model_free(m2);
    snn_comm_free(w);
    return f ? 1 : 0;
}
