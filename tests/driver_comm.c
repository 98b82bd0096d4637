/* Collectives of the communicator checked against values every rank can recompute on its
 * own: rank r's data are Philox draws under (seed, r), so each rank knows what the others
 * contributed. Run under mpirun (the MPI backend) or alone (the one-process backend).
 * Prints "comm: N checks, F failures" on rank 0; exit 0 only when no rank failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error_internal.h"
#include "dist/comm.h"
#include "snn/rng.h"

static int checks, failures, my_rank;
#define CK(c)                                                                                    \
    do {                                                                                         \
        checks++;                                                                                \
        if (!(c)) {                                                                              \
            failures++;                                                                          \
            fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", my_rank, __FILE__, __LINE__, #c); \
        }                                                                                        \
    } while (0)

static float valf(uint64_t seed, int rank, int i) { return snn_rng_normal(seed, 100 + (uint64_t)rank, (uint64_t)i); }
static int64_t vali(uint64_t seed, int rank, int i) {
    uint32_t w[4];
    snn_philox(seed, 200 + (uint64_t)rank, (uint64_t)i, w);
    return (int64_t)(((uint64_t)w[0] << 32) | w[1]) >> 8; /* room to sum without overflow */
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--have-mpi")) return snn_comm_have_mpi() ? 0 : 1;
    snn_comm *w = NULL;
    if (snn_comm_init_world(&w) != SNN_OK) {
        fprintf(stderr, "init: %s\n", snn_last_error());
        return 1;
    }
    int R = snn_comm_rank(w), P = snn_comm_size(w);
    my_rank = R;
    if (argc > 1 && !strcmp(argv[1], "--abort-last")) {
        /* the last rank fails between collectives and aborts; the others wait in an
         * all-reduce that can never complete: the abort must end them too */
        if (R == P - 1) {
            fprintf(stderr, "rank %d: failing on purpose\n", R);
            snn_comm_abort(w, 3);
        }
        float x = 1;
        snn_comm_allreduce(w, &x, 1, SNN_COMM_F32, SNN_COMM_SUM);
        fprintf(stderr, "rank %d: the all-reduce returned although a rank aborted\n", R);
        return 0;
    }
    CK(R >= 0 && R < P);
    CK(snn_comm_local_rank(w) >= 0 && snn_comm_local_rank(w) < P);
    CK(!strcmp(snn_comm_backend_name(w), P > 1 || snn_comm_launched_by_mpi() ? "mpi" : "self"));

    /* a fresh seed from rank 0's clock, shared by broadcast */
    uint64_t seed = R == 0 ? (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20) : 0;
    if (getenv("SNN_TEST_SEED")) seed = strtoull(getenv("SNN_TEST_SEED"), NULL, 10);
    CK(snn_comm_broadcast(w, &seed, 1, SNN_COMM_I64, 0) == SNN_OK);
    if (R == 0) printf("comm: %d ranks, backend %s, seed %llu\n", P, snn_comm_backend_name(w), (unsigned long long)seed);

    enum { N = 1000 };
    float f[N], fmax_[N], fmin_[N];
    double d[N], dsum[N];
    int64_t qsum[N], qmax[N];
    for (int i = 0; i < N; i++) {
        f[i] = fmax_[i] = fmin_[i] = valf(seed, R, i);
        d[i] = (double)valf(seed, R, i) * 1e-3;
        qsum[i] = qmax[i] = vali(seed, R, i);
    }
    memcpy(dsum, d, sizeof d);
    CK(snn_comm_allreduce(w, f, N, SNN_COMM_F32, SNN_COMM_SUM) == SNN_OK);
    CK(snn_comm_allreduce(w, fmax_, N, SNN_COMM_F32, SNN_COMM_MAX) == SNN_OK);
    CK(snn_comm_allreduce(w, fmin_, N, SNN_COMM_F32, SNN_COMM_MIN) == SNN_OK);
    CK(snn_comm_allreduce(w, dsum, N, SNN_COMM_F64, SNN_COMM_SUM) == SNN_OK);
    CK(snn_comm_allreduce(w, qsum, N, SNN_COMM_I64, SNN_COMM_SUM) == SNN_OK);
    CK(snn_comm_allreduce(w, qmax, N, SNN_COMM_I64, SNN_COMM_MAX) == SNN_OK);
    int bad_sum = 0, bad_max = 0, bad_min = 0, bad_d = 0, bad_q = 0, bad_qm = 0;
    for (int i = 0; i < N; i++) {
        double s = 0, sd = 0, mx = -INFINITY, mn = INFINITY;
        int64_t sq = 0, mq = INT64_MIN;
        for (int r = 0; r < P; r++) {
            float v = valf(seed, r, i);
            s += v;
            sd += (double)v * 1e-3;
            mx = fmax(mx, v);
            mn = fmin(mn, v);
            sq += vali(seed, r, i);
            if (vali(seed, r, i) > mq) mq = vali(seed, r, i);
        }
        bad_sum += fabs(f[i] - s) > 1e-5 * (1 + fabs(s));
        bad_max += fmax_[i] != (float)mx;
        bad_min += fmin_[i] != (float)mn;
        bad_d += fabs(dsum[i] - sd) > 1e-14;
        bad_q += qsum[i] != sq;
        bad_qm += qmax[i] != mq;
    }
    CK(!bad_sum); CK(!bad_max); CK(!bad_min); CK(!bad_d); CK(!bad_q); CK(!bad_qm);

    /* non-blocking: two buckets in flight at once */
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (float)(R + 1) * (float)(i % 7);
    int ra = -1, rb = -1;
    CK(snn_comm_iallreduce(w, a, N, SNN_COMM_F32, SNN_COMM_SUM, &ra) == SNN_OK);
    CK(snn_comm_iallreduce(w, b, N / 2, SNN_COMM_F32, SNN_COMM_MAX, &rb) == SNN_OK);
    CK(snn_comm_wait(w, rb) == SNN_OK);
    CK(snn_comm_wait(w, ra) == SNN_OK);
    CK(snn_comm_wait(w, ra) != SNN_OK); /* completed requests cannot be waited twice */
    int bad_i = 0;
    for (int i = 0; i < N; i++) {
        bad_i += a[i] != (float)(P * (P + 1) / 2) * (float)(i % 7);
        bad_i += i < N / 2 ? b[i] != (float)P * (float)(i % 7) : b[i] != (float)(R + 1) * (float)(i % 7);
    }
    CK(!bad_i);

    /* broadcast from the last rank, all-gather */
    int64_t bc[3] = {R, R * 10, -R};
    CK(snn_comm_broadcast(w, bc, 3, SNN_COMM_I64, P - 1) == SNN_OK);
    CK(bc[0] == P - 1 && bc[1] == (P - 1) * 10 && bc[2] == -(P - 1));
    float mine[5], *all = malloc(sizeof(float) * 5 * (size_t)P);
    for (int i = 0; i < 5; i++) mine[i] = valf(seed ^ 7, R, i);
    for (int i = 0; i < 5 * P; i++) all[i] = NAN;
    CK(snn_comm_allgather(w, mine, 5, SNN_COMM_F32, all) == SNN_OK);
    int bad_g = 0;
    for (int r = 0; r < P; r++)
        for (int i = 0; i < 5; i++) bad_g += all[r * 5 + i] != valf(seed ^ 7, r, i);
    CK(!bad_g);
    free(all);

    /* a ring of send/recv (even ranks send first, so no rank waits on a cycle) */
    if (P > 1) {
        float out[4], in[4];
        for (int i = 0; i < 4; i++) out[i] = valf(seed ^ 9, R, i), in[i] = NAN;
        int nx = (R + 1) % P, pv = (R + P - 1) % P;
        if (R % 2 == 0) {
            CK(snn_comm_send(w, out, 4, SNN_COMM_F32, nx, 5) == SNN_OK);
            CK(snn_comm_recv(w, in, 4, SNN_COMM_F32, pv, 5) == SNN_OK);
        } else {
            CK(snn_comm_recv(w, in, 4, SNN_COMM_F32, pv, 5) == SNN_OK);
            CK(snn_comm_send(w, out, 4, SNN_COMM_F32, nx, 5) == SNN_OK);
        }
        for (int i = 0; i < 4; i++) CK(in[i] == valf(seed ^ 9, pv, i));
    } else {
        float x = 1;
        CK(snn_comm_send(w, &x, 1, SNN_COMM_F32, 0, 0) != SNN_OK); /* no self-send on one process */
    }
    /* invalid arguments are values, not crashes */
    CK(snn_comm_broadcast(w, bc, 1, SNN_COMM_I64, P) == SNN_E_INVALID);
    CK(snn_comm_allreduce(w, bc, 1, (snn_comm_dtype)99, SNN_COMM_SUM) == SNN_E_INVALID);
    CK(snn_comm_send(w, bc, 1, SNN_COMM_I64, -1, 0) == SNN_E_INVALID);

    /* split: even and odd ranks, reversed order by key */
    snn_comm *half = NULL;
    CK(snn_comm_split(w, R % 2, -R, &half) == SNN_OK && half);
    if (half) {
        int expect_size = (P + 1 - R % 2) / 2;
        CK(snn_comm_size(half) == expect_size);
        int64_t who = R, sum = R;
        CK(snn_comm_allreduce(half, &sum, 1, SNN_COMM_I64, SNN_COMM_SUM) == SNN_OK);
        int64_t exp = 0;
        for (int r = R % 2; r < P; r += 2) exp += r;
        CK(sum == exp);
        /* key -R: the highest world rank is rank 0 of the half */
        CK(snn_comm_broadcast(half, &who, 1, SNN_COMM_I64, 0) == SNN_OK);
        int top = R % 2;
        while (top + 2 < P) top += 2;
        CK(who == top);
        snn_comm_free(half);
    }
    snn_comm *none = (snn_comm *)1;
    CK(snn_comm_split(w, R == 0 ? 0 : -1, 0, &none) == SNN_OK);
    CK(R == 0 ? none != NULL : none == NULL);
    snn_comm_free(none);

    /* the mesh, for every (PP, TP) that divides the world */
    for (int pp = 1; pp <= P; pp++)
        for (int tp = 1; pp * tp <= P; tp++) {
            if (P % (pp * tp)) {
                int x;
                CK(snn_mesh_coords(P, pp, tp, R, &x, &x, &x, &x) == SNN_E_INVALID);
                continue;
            }
            snn_mesh m;
            CK(snn_mesh_create(w, pp, tp, &m) == SNN_OK);
            CK(m.tp == R % tp && m.pp == (R / tp) % pp && m.dp == R / (pp * tp) && m.dp_size == P / (pp * tp));
            CK(snn_mesh_rank_of(&m, m.dp, m.pp, m.tp) == R);
            CK(snn_comm_size(m.tp_comm) == tp && snn_comm_size(m.pp_comm) == pp && snn_comm_size(m.dp_comm) == m.dp_size);
            CK(snn_comm_rank(m.tp_comm) == m.tp && snn_comm_rank(m.pp_comm) == m.pp && snn_comm_rank(m.dp_comm) == m.dp);
            /* members of each axis group: world ranks that differ only in that coordinate */
            int64_t g[64];
            if (P <= 64) {
                int64_t me = R;
                CK(snn_comm_allgather(m.dp_comm, &me, 1, SNN_COMM_I64, g) == SNN_OK);
                for (int k = 0; k < m.dp_size; k++) CK(g[k] == snn_mesh_rank_of(&m, k, m.pp, m.tp));
                CK(snn_comm_allgather(m.pp_comm, &me, 1, SNN_COMM_I64, g) == SNN_OK);
                for (int k = 0; k < pp; k++) CK(g[k] == snn_mesh_rank_of(&m, m.dp, k, m.tp));
                CK(snn_comm_allgather(m.tp_comm, &me, 1, SNN_COMM_I64, g) == SNN_OK);
                for (int k = 0; k < tp; k++) CK(g[k] == snn_mesh_rank_of(&m, m.dp, m.pp, k));
            }
            snn_mesh_free(&m);
        }
    /* formulas against a worked example: world 8, PP 2, TP 2: rank 5 -> tp 1, pp 0, dp 1 */
    int dp, pp, tp, dps;
    CK(snn_mesh_coords(8, 2, 2, 5, &dp, &pp, &tp, &dps) == SNN_OK && tp == 1 && pp == 0 && dp == 1 && dps == 2);
    CK(snn_mesh_coords(8, 2, 2, 6, &dp, &pp, &tp, &dps) == SNN_OK && tp == 0 && pp == 1 && dp == 1);
    CK(snn_mesh_coords(3, 2, 1, 0, &dp, &pp, &tp, &dps) == SNN_E_INVALID);
    CK(strstr(snn_last_error(), "world_size=3") != NULL);
    CK(snn_mesh_coords(4, 0, 1, 0, &dp, &pp, &tp, &dps) == SNN_E_INVALID);

    /* failure agreement: the last rank fails, every rank gets its status and message */
    snn_status mine_st = SNN_OK;
    if (R == P - 1) mine_st = snn_error(SNN_E_FORMAT, "bad file on rank %d", R);
    snn_status v = snn_comm_agree(w, mine_st);
    CK(v == SNN_E_FORMAT);
    char expect[64];
    snprintf(expect, sizeof expect, "bad file on rank %d", P - 1);
    CK(strstr(snn_last_error(), expect) != NULL);
    CK(snn_comm_agree(w, SNN_OK) == SNN_OK);

    /* every rank's verdict */
    int64_t fails = failures;
    snn_comm_allreduce(w, &fails, 1, SNN_COMM_I64, SNN_COMM_SUM);
    int64_t nchecks = checks;
    snn_comm_allreduce(w, &nchecks, 1, SNN_COMM_I64, SNN_COMM_SUM);
    if (R == 0) printf("comm: %lld checks, %lld failures\n", (long long)nchecks, (long long)fails);
    snn_comm_free(w);
    return fails ? 1 : 0;
}
