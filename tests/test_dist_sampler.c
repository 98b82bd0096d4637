/* The distributed sampler and the (dp, pp, tp) rank formulas, on one process:
 *   - every rank's shard has ceil(n / R) samples, the shards interleave the epoch's
 *     permutation (rank r takes positions r, r + R, ...) and together cover every sample,
 *     padded by repeating the permutation's first samples (SpikingJelly's sampler);
 *   - batch k of all ranks together is the single-process batch k of R * b samples;
 *   - the loader's drop rule (ragged last batch dropped only under PP);
 *   - mesh coordinates against a direct enumeration of SpikingJelly's formulas. */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/sampler.h"
#include "harness.h"
#include "snn/data.h"

int main(void) {
    uint64_t seed = snn_test_seed();
    int sizes[] = {1, 7, 64, 101};
    for (int si = 0; si < 4; si++) {
        int n = sizes[si];
        snn_dataset *ds = NULL;
        CHECK(snn_dataset_synthetic(n, 1, 2, 2, 3, seed, &ds) == SNN_OK);
        uint32_t *perm = malloc(sizeof(uint32_t) * (size_t)n), *ref = malloc(sizeof(uint32_t) * (size_t)n);
        for (int R = 1; R <= 5; R++) {
            size_t per = snn_dist_sampler_num_samples((size_t)n, R);
            CHECK(per == (size_t)(n + R - 1) / (size_t)R);
            uint32_t *sh = malloc(sizeof(uint32_t) * per * (size_t)R);
            for (size_t i = 0; i < per * (size_t)R; i++) sh[i] = 0xFFFFFFFFu; /* poison */
            CHECK(snn_dataset_shuffle(ds, seed, 3, ref) == SNN_OK);
            for (int r = 0; r < R; r++)
                CHECK(snn_dist_sampler_epoch(ds, 1, seed, 3, R, r, perm, sh + (size_t)r * per) == SNN_OK);
            int *seen = calloc((size_t)n, sizeof(int));
            int bad = 0;
            for (int r = 0; r < R; r++)
                for (size_t k = 0; k < per; k++) {
                    size_t pos = (size_t)r + k * (size_t)R; /* position in the padded order */
                    uint32_t v = sh[(size_t)r * per + k];
                    bad += v != ref[pos % (size_t)n];
                    if (v < (uint32_t)n) seen[v]++;
                }
            CHECK_MSG(!bad, "n=%d R=%d: %d indices off the interleaved permutation", n, R, bad);
            int missing = 0, extra = 0;
            for (int i = 0; i < n; i++) missing += seen[i] == 0, extra += seen[i] - 1;
            CHECK(missing == 0);
            CHECK(extra == (int)(per * (size_t)R) - n); /* exactly the padding repeats */
            /* batch k of the ranks together == single-process batch k of R*b (as sets) */
            int b = 2;
            for (size_t k = 0; (k + 1) * (size_t)b <= per; k++) {
                int *cnt = calloc((size_t)n, sizeof(int));
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < b; j++) cnt[sh[(size_t)r * per + k * b + j]]++;
                for (size_t j = 0; j < (size_t)R * b; j++) cnt[ref[(k * (size_t)R * b + j) % (size_t)n]]--;
                int off = 0;
                for (int i = 0; i < n; i++) off += cnt[i] != 0;
                CHECK(off == 0);
                free(cnt);
            }
            /* unshuffled: the identity, strided */
            CHECK(snn_dist_sampler_epoch(ds, 0, seed, 3, R, R - 1, perm, sh) == SNN_OK);
            CHECK(sh[0] == (uint32_t)((R - 1) % n));
            free(seen);
            free(sh);
        }
        CHECK(snn_dist_sampler_epoch(ds, 1, seed, 1, 2, 2, perm, ref) == SNN_E_INVALID);
        free(perm);
        free(ref);
        snn_dataset_free(ds);
    }
    /* drop rules: 3 samples, batch 2 -> 1 batch under PP, 2 without; validation 4 -> 2 */
    CHECK(snn_dist_loader_batches(3, 2, 1) == 1);
    CHECK(snn_dist_loader_batches(3, 2, 0) == 2);
    CHECK(snn_dist_loader_batches(4, 2, 0) == 2);
    CHECK(snn_dist_loader_batches(0, 2, 0) == 0);
    /* mesh coordinates: enumerate (dp, pp, tp) in SpikingJelly's order */
    for (int PP = 1; PP <= 3; PP++)
        for (int TP = 1; TP <= 3; TP++)
            for (int DP = 1; DP <= 3; DP++) {
                int W = DP * PP * TP, r = 0;
                for (int d = 0; d < DP; d++)
                    for (int p = 0; p < PP; p++)
                        for (int t = 0; t < TP; t++, r++) {
                            int dp, pp, tp, dps;
                            CHECK(snn_mesh_coords(W, PP, TP, r, &dp, &pp, &tp, &dps) == SNN_OK);
                            CHECK(dp == d && pp == p && tp == t && dps == DP);
                        }
                if (PP * TP > 1) {
                    int x;
                    CHECK(snn_mesh_coords(W + 1, PP, TP, 0, &x, &x, &x, &x) == SNN_E_INVALID);
                }
            }
    /* the one-process communicator: collectives are the identity, the mesh is 1x1x1 */
    snn_comm *c = NULL;
    CHECK(snn_comm_self(&c) == SNN_OK && snn_comm_size(c) == 1 && snn_comm_rank(c) == 0);
    float v[3] = {1.5f, -2.0f, 3.0f};
    CHECK(snn_comm_allreduce(c, v, 3, SNN_COMM_F32, SNN_COMM_SUM) == SNN_OK && v[0] == 1.5f && v[1] == -2.0f);
    snn_mesh m;
    CHECK(snn_mesh_create(c, 1, 1, &m) == SNN_OK && m.dp_size == 1 && snn_comm_size(m.dp_comm) == 1);
    snn_mesh_free(&m);
    CHECK(snn_mesh_create(c, 2, 1, &m) == SNN_E_INVALID);
    CHECK(snn_comm_nccl_create(c, 0, NULL) == SNN_E_UNSUPPORTED);
    snn_comm_free(c);
    return snn_test_finish("test_dist_sampler");
}
