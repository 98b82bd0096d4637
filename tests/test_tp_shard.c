/* Tensor-parallel shard arithmetic and the pipeline cuts, without MPI: shard -> merge round
 * trips (a plain (8, 4) weight along each dimension, a Spikformer QKV (24, 4) weight sharded
 * by head), the exact head-aware row lists, the stage layouts of vision_stage.h, and the
 * refusals (reference spikingjelly-distributed.md §2.8, §2.15, §8.9 items 68 and 78). */
#include <stdlib.h>
#include <string.h>

#include "dist/vision_stage.h"
#include "harness.h"

static uint64_t rs;

static void round_trip(snn_shard_rule r, int rank, const int *canon, int P) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)canon[i];
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *loc = malloc(n * sizeof(float));
    snn_test_fill_uniform(a, n, -1, 1, &rs);
    snn_test_poison(b, n);
    for (int t = 0; t < P; t++) {
        int local[4];
        CHECK(snn_shard_local_shape("w", r, rank, canon, P, local) == SNN_OK);
        size_t ln = 1;
        for (int i = 0; i < rank; i++) ln *= (size_t)local[i];
        CHECK(r.dim < 0 ? ln == n : ln * (size_t)P == n);
        snn_test_poison(loc, n);
        snn_shard_extract(r, rank, canon, t, P, a, loc);
        for (size_t i = 0; i < ln; i++) CHECK(loc[i] == loc[i]); /* every local value written */
        snn_shard_insert(r, rank, canon, t, P, loc, b);
    }
    CHECK(!memcmp(a, b, n * sizeof(float)));
    free(a);
    free(b);
    free(loc);
}

static void test_shards(void) {
    int w84[2] = {8, 4};
    for (int P = 1; P <= 4; P *= 2) {
        round_trip((snn_shard_rule){0, 1}, 2, w84, P);
        round_trip((snn_shard_rule){1, 1}, 2, w84, P);
        round_trip((snn_shard_rule){-1, 1}, 2, w84, P);
    }
    int qkv[3] = {24, 4, 1};
    round_trip((snn_shard_rule){0, 3}, 3, qkv, 2);
    round_trip((snn_shard_rule){0, 3}, 3, qkv, 4);
    /* head-aware rows: rank 0 of 2 keeps q 0-3, k 8-11, v 16-19; rank 1 the other halves */
    float a[24 * 4], loc[12 * 4];
    for (int i = 0; i < 24 * 4; i++) a[i] = (float)i;
    for (int t = 0; t < 2; t++) {
        snn_shard_extract((snn_shard_rule){0, 3}, 3, qkv, t, 2, a, loc);
        int ok = 1;
        for (int l = 0; l < 12; l++) {
            int want = (l / 4) * 8 + t * 4 + l % 4;
            for (int c = 0; c < 4; c++) ok &= loc[l * 4 + c] == (float)(want * 4 + c);
        }
        CHECK_MSG(ok, "QKV rank %d rows", t);
    }
    /* contiguous slicing would differ (the pitfall the reference warns about) */
    snn_shard_extract((snn_shard_rule){0, 1}, 3, qkv, 1, 2, a, loc);
    CHECK(loc[0] == 12 * 4);
    int bad[2] = {6, 4}, out[2];
    CHECK(snn_shard_local_shape("qkv.weight", (snn_shard_rule){0, 3}, 2, bad, 4, out) == SNN_E_SHAPE &&
          strstr(snn_last_error(), "qkv.weight"));
    CHECK(snn_shard_local_shape("w", (snn_shard_rule){1, 1}, 2, bad, 3, out) == SNN_E_SHAPE);
}

static int stage_blocks(const snn_vision_model_config *m, int pp, int P) {
    snn_vision_stage *s = NULL;
    if (snn_vision_stage_build(m, pp, P, 0, 1, NULL, NULL, &s) != SNN_OK) return -1;
    int b = snn_vision_stage_blocks(s);
    snn_vision_stage_free(s);
    return b;
}

static void test_cuts(void) {
    snn_vision_model_config s6 = snn_vision_model_config_default(SNN_VISION_MODEL_SPIKFORMER);
    s6.spikformer.image_size = 32;
    s6.spikformer.embed_dim = 64;
    s6.spikformer.heads = 4;
    s6.num_classes = 10;
    int want[4] = {0, 2, 2, 2};
    for (int p = 0; p < 4; p++) CHECK_MSG(stage_blocks(&s6, p, 4) == want[p], "spikformer-6 PP4 stage %d", p);
    CHECK(stage_blocks(&s6, 0, 2) == 2 && stage_blocks(&s6, 1, 2) == 4);
    snn_vision_model_config s4 = s6;
    s4.spikformer.depth = 4;
    snn_vision_stage *st = NULL;
    CHECK(snn_vision_stage_build(&s4, 3, 4, 0, 1, NULL, NULL, &st) == SNN_E_INVALID &&
          strstr(snn_last_error(), "4-block Spikformer"));
    CHECK(stage_blocks(&s4, 0, 2) == 2 && stage_blocks(&s4, 1, 2) == 2);
    CHECK(snn_vision_stage_build(&s6, 0, 3, 0, 1, NULL, NULL, &st) == SNN_E_INVALID &&
          strstr(snn_last_error(), "pipeline_parallel_size"));
    /* the stage shapes chain: each stage's input is the previous stage's output */
    snn_vision_model_config cv = snn_vision_model_config_default(SNN_VISION_MODEL_CONVSNN);
    for (int P = 1; P <= 4; P *= 2) {
        size_t prev = 0;
        for (int p = 0; p < P; p++) {
            CHECK(snn_vision_stage_build(&cv, p, P, 1, 2, NULL, NULL, &st) == SNN_OK);
            if (!st) continue;
            if (p) CHECK(st->in_numel == prev);
            CHECK(st->first == (p == 0) && st->last == (p == P - 1));
            prev = st->out_numel;
            snn_vision_stage_free(st);
            st = NULL;
        }
        CHECK(prev == 10);
    }
    /* convsnn PP4: the boundaries are [C/TP, 14, 14], [C, 7, 7], [2048/TP], classes */
    size_t outs[4] = {64 * 14 * 14, 128 * 7 * 7, 1024, 10};
    for (int p = 0; p < 4; p++) {
        CHECK(snn_vision_stage_build(&cv, p, 4, 0, 2, NULL, NULL, &st) == SNN_OK);
        if (st) CHECK_MSG(st->out_numel == outs[p], "convsnn PP4 TP2 stage %d out %zu", p, st->out_numel);
        snn_vision_stage_free(st);
        st = NULL;
    }
    snn_vision_model_config fc = snn_vision_model_config_default(SNN_VISION_MODEL_FCSNN);
    fc.fcsnn.depth = 2;
    CHECK(snn_vision_stage_build(&fc, 0, 4, 0, 1, NULL, NULL, &st) == SNN_E_INVALID && strstr(snn_last_error(), "depth"));
    fc.fcsnn.depth = 3;
    CHECK(snn_vision_stage_build(&fc, 3, 4, 0, 1, NULL, NULL, &st) == SNN_OK && st && st->last && st->in_numel == 512);
    snn_vision_stage_free(st);
    st = NULL;
    /* TP divisibility, named */
    CHECK(snn_vision_stage_build(&s6, 0, 1, 0, 3, NULL, NULL, &st) == SNN_E_INVALID && strstr(snn_last_error(), "heads"));
    cv.convsnn.channels = 6;
    CHECK(snn_vision_stage_build(&cv, 0, 1, 0, 4, NULL, NULL, &st) == SNN_E_INVALID &&
          strstr(snn_last_error(), "channels"));
    CHECK(snn_vision_stage_build(&cv, 0, 1, 2, 2, NULL, NULL, &st) == SNN_E_INVALID);
}

int main(void) {
    rs = snn_test_seed();
    test_shards();
    test_cuts();
    return snn_test_finish("test_tp_shard");
}
