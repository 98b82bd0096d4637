/* FP16 loss scaler against torch.amp.GradScaler's documented rules (reference fp8.md §6.1;
 * torch's CPU build cannot run the CUDA update kernel, so the expectations are derived by
 * hand from those rules and from an independent step model written here). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/error.h"
#include "snn/precision.h"

/* Independent model: the scale as an exponent of two plus a counter of clean steps (valid
 * while every factor is a power of two and nothing overflows). */
typedef struct {
    int log2_scale, clean, interval;
} model;

static void model_step(model *m, int inf) {
    if (inf) {
        m->log2_scale -= 1;
        m->clean = 0;
    } else if (++m->clean == m->interval) {
        if (m->log2_scale + 1 <= 127) m->log2_scale += 1; /* 2^128 is inf in FP32 */
        m->clean = 0;
    }
}

static void test_defaults_and_options(void) {
    snn_loss_scaler s;
    CHECK(snn_loss_scaler_init(&s, NULL) == SNN_OK);
    CHECK(snn_loss_scaler_scale(&s) == 65536.0f && s.growth_tracker == 0);
    CHECK(s.growth_factor == 2.0 && s.backoff_factor == 0.5 && s.growth_interval == 2000);
    snn_loss_scaler_opts o = {0};
    CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK && s.scale == 65536.0f && s.growth_interval == 2000);
    static const struct {
        snn_loss_scaler_opts o;
        const char *sub;
    } bad[] = {
        {{-1.0f, 0, 0, 0}, "init_scale"},  {{INFINITY, 0, 0, 0}, "init_scale"},
        {{NAN, 0, 0, 0}, "init_scale"},    {{0, 1.0, 0, 0}, "growth_factor"},
        {{0, 0.5, 0, 0}, "growth_factor"}, {{0, 0, 1.0, 0}, "backoff_factor"},
        {{0, 0, -0.5, 0}, "backoff_factor"}, {{0, 0, 1.5, 0}, "backoff_factor"},
        {{0, 0, 0, -3}, "growth_interval"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snn_clear_error();
        CHECK_MSG(snn_loss_scaler_init(&s, &bad[i].o) == SNN_E_INVALID && strstr(snn_last_error(), bad[i].sub),
                  "bad option %zu: %s", i, snn_last_error());
    }
}

/* A sequence worked out by hand with interval 3: grow after 3 clean steps, halve and reset
 * the counter on every overflow. */
static void test_hand_sequence(void) {
    snn_loss_scaler s;
    snn_loss_scaler_opts o = {1024.0f, 2.0, 0.5, 3};
    CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK);
    static const int inf[] = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    static const float want_scale[] = {1024, 1024, 2048, 1024, 1024, 1024, 512, 256, 256,
                                       256,  512,  512,  512,  256,  256,  256, 512};
    static const int want_tracker[] = {1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
    for (size_t i = 0; i < sizeof inf / sizeof inf[0]; i++) {
        CHECK(snn_loss_scaler_update(&s, inf[i]) == SNN_OK);
        CHECK_MSG(s.scale == want_scale[i] && s.growth_tracker == want_tracker[i],
                  "step %zu: scale %g tracker %d, want %g %d", i, (double)s.scale, s.growth_tracker,
                  (double)want_scale[i], want_tracker[i]);
    }
    /* default interval: 1999 clean steps keep 2^16, the 2000th doubles it */
    CHECK(snn_loss_scaler_init(&s, NULL) == SNN_OK);
    for (int i = 0; i < 1999; i++) snn_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0f && s.growth_tracker == 1999);
    snn_loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0f && s.growth_tracker == 0);
    /* an overflow after 1999 clean steps resets the counter: 2000 more are needed */
    for (int i = 0; i < 1999; i++) snn_loss_scaler_update(&s, 0);
    snn_loss_scaler_update(&s, 1);
    CHECK(s.scale == 65536.0f && s.growth_tracker == 0);
    for (int i = 0; i < 1999; i++) snn_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0f);
    snn_loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0f);
}

/* Random overflow sequences against the model, including growth capped below inf and
 * non-power-of-two factors (checked against double arithmetic rounded once). */
static void test_random_sequences(uint64_t seed) {
    uint64_t r = seed ^ 0x9E3779B97F4A7C15ull;
    for (int trial = 0; trial < 40; trial++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int interval = 1 + (int)(r % 9);
        int start = (int)((r >> 8) % 28) + 100; /* near the top so growth hits the inf cap */
        snn_loss_scaler s;
        snn_loss_scaler_opts o = {ldexpf(1.0f, start), 2.0, 0.5, interval};
        CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK);
        model m = {start, 0, interval};
        int p_inf = (int)((r >> 20) % 30) + 2; /* overflow probability 1/p_inf */
        for (int step = 0; step < 3000; step++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            int inf = (int)(r % (uint64_t)p_inf) == 0;
            snn_loss_scaler_update(&s, inf);
            model_step(&m, inf);
            if (m.log2_scale < -120) break; /* the model holds for normal scales only */
            if (s.scale != ldexpf(1.0f, m.log2_scale) || s.growth_tracker != m.clean) {
                CHECK_MSG(0, "trial %d step %d: scale %g tracker %d, model 2^%d %d", trial, step,
                          (double)s.scale, s.growth_tracker, m.log2_scale, m.clean);
                break;
            }
        }
    }
    /* factors that are not powers of two: each update is one double product rounded to FP32 */
    snn_loss_scaler s;
    snn_loss_scaler_opts o = {1000.0f, 1.7, 0.3, 2};
    CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK);
    double expect = 1000.0;
    static const int seq[] = {0, 0, 1, 0, 0, 0, 1, 1, 0, 0};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        snn_loss_scaler_update(&s, seq[i]);
        if (seq[i]) expect = (float)(expect * 0.3);
        else if (i == 1 || i == 4 || i == 9) expect = (float)(expect * 1.7);
        CHECK_MSG(s.scale == (float)expect, "step %zu: %.9g vs %.9g", i, (double)s.scale, expect);
    }
    /* no minimum scale: repeated overflows keep halving (torch has no floor) */
    CHECK(snn_loss_scaler_init(&s, NULL) == SNN_OK);
    for (int i = 0; i < 40; i++) snn_loss_scaler_update(&s, 1);
    CHECK(s.scale == ldexpf(1.0f, 16 - 40));
}

static void test_unscale(uint64_t seed) {
    uint64_t st = seed;
    const size_t n = 200000; /* above the parallel threshold */
    float *g = malloc(n * sizeof *g), *orig = malloc(n * sizeof *orig);
    snn_test_fill_uniform(orig, n, -3.0e4f, 3.0e4f, &st);
    snn_loss_scaler s;
    /* a power-of-two scale divides exactly */
    CHECK(snn_loss_scaler_init(&s, NULL) == SNN_OK);
    memcpy(g, orig, n * sizeof *g);
    int found = 0;
    CHECK(snn_loss_scaler_unscale(&s, g, n, &found) == SNN_OK && found == 0);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += (double)g[i] != (double)orig[i] / 65536.0;
    CHECK_MSG(bad == 0, "%d values not exactly divided by 2^16", bad);
    /* any other scale: g * fl(1/scale), within one rounding of g / scale, and the same as
     * the multiply by the FP32 reciprocal computed in double */
    snn_loss_scaler_opts o = {3.0f, 0, 0, 0};
    CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK);
    memcpy(g, orig, n * sizeof *g);
    CHECK(snn_loss_scaler_unscale(&s, g, n, &found) == SNN_OK && found == 0);
    float inv = (float)(1.0 / 3.0);
    double worst = 0;
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += g[i] != orig[i] * inv;
        double rel = fabs((double)g[i] - (double)orig[i] / 3.0) / fabs((double)orig[i] / 3.0);
        if (rel > worst) worst = rel;
    }
    CHECK(bad == 0);
    CHECK_MSG(worst <= 2.0 * FLT_EPSILON, "relative error %g", worst);
    /* non-finite values anywhere set found_inf; the buffer is still unscaled */
    static const float specials[3] = {INFINITY, -INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        for (int rep = 0; rep < 3; rep++) {
            memcpy(g, orig, n * sizeof *g);
            size_t pos = rep == 0 ? 0 : rep == 1 ? n - 1 : (size_t)(st % n);
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            g[pos] = specials[k];
            found = 0;
            CHECK(snn_loss_scaler_unscale(&s, g, n, &found) == SNN_OK && found == 1);
            size_t other = (pos + 1) % n;
            CHECK(g[other] == orig[other] * inv);
            CHECK(k == 2 ? isnan(g[pos]) : isinf(g[pos]));
        }
    }
    /* found_inf is OR-ed across buffers: a clean buffer leaves a 1 and a 0 alone */
    memcpy(g, orig, n * sizeof *g);
    found = 1;
    CHECK(snn_loss_scaler_unscale(&s, g, 1000, &found) == SNN_OK && found == 1);
    found = 0;
    CHECK(snn_loss_scaler_unscale(&s, g, 0, &found) == SNN_OK && found == 0);
    /* large finite gradients that overflow FP16 are not infinite for the scaler */
    g[0] = 1.0e30f;
    CHECK(snn_loss_scaler_unscale(&s, g, 1, &found) == SNN_OK && found == 0);
    CHECK(snn_loss_scaler_unscale(&s, NULL, 5, &found) == SNN_E_INVALID);
    CHECK(snn_loss_scaler_unscale(&s, g, 5, NULL) == SNN_E_INVALID);
    free(g);
    free(orig);
}

static void test_state(void) {
    snn_loss_scaler s, t;
    snn_loss_scaler_opts o = {0, 0, 0, 10};
    CHECK(snn_loss_scaler_init(&s, &o) == SNN_OK);
    for (int i = 0; i < 7; i++) snn_loss_scaler_update(&s, i == 2);
    float sc;
    int tr;
    snn_loss_scaler_get_state(&s, &sc, &tr);
    CHECK(sc == 32768.0f && tr == 4);
    CHECK(snn_loss_scaler_init(&t, &o) == SNN_OK && snn_loss_scaler_set_state(&t, sc, tr) == SNN_OK);
    /* the restored scaler continues exactly like the original */
    for (int i = 0; i < 30; i++) {
        snn_loss_scaler_update(&s, i % 11 == 5);
        snn_loss_scaler_update(&t, i % 11 == 5);
        CHECK(s.scale == t.scale && s.growth_tracker == t.growth_tracker);
    }
    CHECK(snn_loss_scaler_set_state(&t, 0.0f, 0) == SNN_E_FORMAT);
    CHECK(snn_loss_scaler_set_state(&t, NAN, 0) == SNN_E_FORMAT);
    CHECK(snn_loss_scaler_set_state(&t, INFINITY, 0) == SNN_E_FORMAT);
    CHECK(snn_loss_scaler_set_state(&t, 8.0f, 10) == SNN_E_FORMAT);
    CHECK(snn_loss_scaler_set_state(&t, 8.0f, -1) == SNN_E_FORMAT);
    CHECK(t.scale == s.scale && t.growth_tracker == s.growth_tracker);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    test_defaults_and_options();
    test_hand_sequence();
    test_random_sequences(seed);
    test_unscale(seed);
    test_state();
    return snn_test_finish("test_loss_scaler");
}
