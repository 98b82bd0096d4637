/* Hostile checkpoints above the container: model configurations with wrong types, fractions,
 * negatives and overflowing sizes; small files whose configuration asks for a huge model;
 * NaN/inf and out-of-range FP8 / optimizer state; text in integer metadata; and misuse of
 * the public API (NULL handles, an optimizer of another model). Each hostile file is made
 * by rewriting a real checkpoint written by the library. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "snn/snn.h"

static char dir[256];
static uint64_t rs;

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Copy checkpoint `src` to `dst`, replacing metadata `key` by `value` (NULL: drop it; key
 * NULL: no change) and, when `tensor` is set, value `index` of that F32 tensor by `v`. */
static snn_status rewrite(const char *src, const char *dst, const char *key, const char *value,
                          const char *tensor, size_t index, float v) {
    snn_ckpt *c = NULL;
    snn_status st0 = snn_ckpt_open(src, &c);
    if (st0 != SNN_OK) return st0;
    snn_ckpt_writer *w = NULL;
    snn_status st = snn_ckpt_writer_begin(&w);
    int found = tensor == NULL;
    for (size_t i = 0; st == SNN_OK && i < snn_ckpt_num_tensors(c); i++) {
        snn_ckpt_tensor t;
        st = snn_ckpt_tensor_at(c, i, &t);
        if (st != SNN_OK) break;
        void *copy = malloc(t.nbytes + 4);
        memcpy(copy, t.data, t.nbytes);
        if (tensor && !strcmp(t.name, tensor) && t.dtype == SNN_CKPT_F32 && index < t.numel) {
            memcpy((char *)copy + 4 * index, &v, 4);
            found = 1;
        }
        st = snn_ckpt_writer_add_tensor(w, t.name, t.dtype, t.rank, t.shape, copy);
        free(copy);
    }
    int replaced = 0;
    for (size_t i = 0; st == SNN_OK && i < snn_ckpt_num_metadata(c); i++) {
        const char *k, *val;
        snn_ckpt_metadata_at(c, i, &k, &val);
        if (key && !strcmp(k, key)) {
            replaced = 1;
            if (!value) continue;
            val = value;
        }
        st = snn_ckpt_writer_add_metadata(w, k, val);
    }
    if (st == SNN_OK && key && value && !replaced) st = snn_ckpt_writer_add_metadata(w, key, value);
    if (st == SNN_OK) st = snn_ckpt_writer_commit(w, dst);
    snn_ckpt_writer_free(w);
    snn_ckpt_close(c);
    if (!found) {
        fprintf(stderr, "rewrite: no tensor %s in %s\n", tensor, src);
        exit(2);
    }
    return st;
}

/* Load `path` as a model; expect failure with `code` and every `needles` word in the message. */
static void expect_refused(const char *path, snn_status code, const char *what, const char *n1, const char *n2) {
    snn_model *m = NULL;
    snn_status st = snn_model_load(path, 1, &m, NULL);
    const char *e = snn_last_error();
    CHECK_MSG(st == code && !m && (!n1 || strstr(e, n1)) && (!n2 || strstr(e, n2)), "%s: got %s: %s", what,
              snn_status_name(st), e);
    snn_model_free(m);
}

/* ---------- model configurations ---------- */

static void test_configs(void) {
    char good[512], bad[512];
    path_of(good, sizeof good, "good.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    snn_fcsnn_opts fo = {.in_features = 12, .hidden = 8, .depth = 1, .classes = 3};
    snn_model *m = NULL;
    CHECK(snn_fcsnn_create(&fo, rs, &m) == SNN_OK);
    CHECK_MSG(snn_model_save(m, good, NULL) == SNN_OK, "%s", snn_last_error());
    snn_model_free(m);
    m = NULL;
    CHECK_MSG(snn_model_load(good, 1, &m, NULL) == SNN_OK, "%s", snn_last_error());
    snn_model_free(m);

    static const struct {
        const char *cfg, *needle;
    } cases[] = {
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":\"8\",\"depth\":1,\"classes\":3,\"tau\":2}", "\"hidden\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8.5,\"depth\":1,\"classes\":3,\"tau\":2}", "\"hidden\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":-8,\"depth\":1,\"classes\":3,\"tau\":2}", "1..1048576"},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":-5,\"classes\":3,\"tau\":2}", "\"depth\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":4294967304,\"depth\":1,\"classes\":3,\"tau\":2}", "\"hidden\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":1e300,\"depth\":1,\"classes\":3,\"tau\":2}", "\"hidden\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":null,\"depth\":1,\"classes\":3,\"tau\":2}", "\"hidden\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":1,\"classes\":3,\"tau\":\"x\"}", "\"tau\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":1,\"classes\":3,\"tau\":1e39}", "\"tau\""},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":1,\"classes\":3,\"tau\":2,\"extra\":1}", "unknown field"},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"hidden\":9,\"depth\":1,\"classes\":3}", "twice"},
        {"{\"model\":\"fcsnn\",\"in_features\":12,\"hid\\u0000den\":8,\"depth\":1,\"classes\":3}", "NUL"},
        {"{\"model\":\"convsnn\",\"in_channels\":1,\"height\":28,\"width\":28,\"channels\":2147483647,\"classes\":10}", "\"channels\""},
        {"{\"model\":\"convsnn\",\"in_channels\":1,\"height\":2147483632,\"width\":28,\"channels\":4,\"classes\":10}", "\"height\""},
        {"{\"model\":\"convsnn\",\"in_channels\":4096,\"height\":16384,\"width\":16384,\"channels\":4,\"classes\":10}", "exceeds the limit"},
        {"{\"model\":\"convsnn\",\"in_channels\":1,\"height\":30,\"width\":28,\"channels\":4,\"classes\":10}", "multiples of 4"},
        {"{\"model\":\"spikformer\",\"in_channels\":3,\"image_size\":2147483632,\"classes\":10,\"embed_dim\":64,\"heads\":4,\"depth\":1,\"mlp_ratio\":4}", "\"image_size\""},
        {"{\"model\":\"spikformer\",\"in_channels\":3,\"image_size\":32,\"classes\":10,\"embed_dim\":2147483640,\"heads\":4,\"depth\":1,\"mlp_ratio\":4}", "\"embed_dim\""},
        {"{\"model\":\"spikformer\",\"in_channels\":3,\"image_size\":32,\"classes\":10,\"embed_dim\":64,\"heads\":0,\"depth\":1,\"mlp_ratio\":4}", "\"heads\""},
        {"{\"model\":\"spikformer\",\"in_channels\":3,\"image_size\":32,\"classes\":10,\"embed_dim\":64,\"heads\":4,\"depth\":1,\"mlp_ratio\":1e30}", "\"mlp_ratio\""},
        {"{\"model\":\"spikformer\",\"in_channels\":3,\"image_size\":16384,\"classes\":10,\"embed_dim\":65536,\"heads\":1,\"depth\":1,\"mlp_ratio\":4}", "exceeds the limit"},
        {"{\"model\":\"mlp\",\"in_features\":12,\"width\":8,\"depth\":1e3,\"classes\":3,\"bias\":1}", "unknown field"},
        {"{\"model\":\"mlp\",\"in_features\":12,\"width\":8,\"depth\":1001,\"classes\":3}", "\"depth\""},
        {"{\"model\":\"rnn\"}", "unknown model"},
        {"[1,2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(rewrite(good, bad, "snn_model_config", cases[i].cfg, NULL, 0, 0) == SNN_OK);
        snn_model *mm = NULL;
        snn_status st = snn_model_load(bad, 1, &mm, NULL);
        CHECK_MSG(st != SNN_OK && !mm && strstr(snn_last_error(), cases[i].needle), "config %zu: %s: %s", i,
                  snn_status_name(st), snn_last_error());
        snn_model_free(mm);
        /* the library entry point directly, too */
        st = snn_model_create_from_config(cases[i].cfg, 1, &mm);
        CHECK_MSG(st != SNN_OK && !mm, "config %zu accepted by snn_model_create_from_config", i);
        snn_model_free(mm);
    }
    /* constructors with the values that used to overflow */
    snn_convsnn_opts co = {.channels = 2147483647};
    CHECK(snn_convsnn_create(&co, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "channels"));
    co = (snn_convsnn_opts){.height = 2147483632, .width = 28};
    CHECK(snn_convsnn_create(&co, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "height"));
    snn_spikformer_opts so = {.image_size = 2147483632};
    CHECK(snn_spikformer_create(&so, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "image_size"));
    so = (snn_spikformer_opts){.embed_dim = 2147483640, .heads = 8};
    CHECK(snn_spikformer_create(&so, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "embed_dim"));
    fo = (snn_fcsnn_opts){.hidden = 1 << 20, .depth = 1000};
    CHECK_MSG(snn_fcsnn_create(&fo, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "limit"), "%s",
              snn_last_error());
    fo = (snn_fcsnn_opts){.in_features = -1};
    CHECK(snn_fcsnn_create(&fo, 1, &m) == SNN_E_INVALID && !m && strstr(snn_last_error(), "in_features"));
}

/* ---------- a small file that claims a big model ---------- */

static void test_small_file_big_model(void) {
    char good[512], bad[512];
    path_of(good, sizeof good, "good.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    /* 40000^2 x 15 layers: 24 G parameters (refused by the limit) and a 4.3 GB model
     * (hidden 32768, depth 2: 1.07 G parameters) refused against the file size */
    const char *cfgs[2] = {
        "{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":40000,\"depth\":16,\"classes\":3,\"tau\":2}",
        "{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":32768,\"depth\":2,\"classes\":3,\"tau\":2}",
    };
    const char *needles[2] = {"limit", "file holds only"};
    for (int i = 0; i < 2; i++) {
        CHECK(rewrite(good, bad, "snn_model_config", cfgs[i], NULL, 0, 0) == SNN_OK);
        double t0 = now_s();
        expect_refused(bad, i == 0 ? SNN_E_INVALID : SNN_E_FORMAT, "small file, big model", needles[i], NULL);
        double dt = now_s() - t0;
        CHECK_MSG(dt < 0.5, "refusing the %d-th big model took %.3f s (allocated first?)", i, dt);
        if (i == 1) CHECK_MSG(strstr(snn_last_error(), "4297195532 bytes"), "the size asked is not named: %s", snn_last_error());
    }
    /* the right size but a tensor of the wrong shape or name: refused before allocating */
    snn_fcsnn_opts fo = {.in_features = 12, .hidden = 9, .depth = 1, .classes = 3};
    snn_model *m = NULL;
    CHECK(snn_fcsnn_create(&fo, rs, &m) == SNN_OK);
    char other[512];
    path_of(other, sizeof other, "other.safetensors");
    CHECK(snn_model_save(m, other, NULL) == SNN_OK);
    snn_model_free(m);
    CHECK(rewrite(other, bad, "snn_model_config",
                  "{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":1,\"classes\":3,\"tau\":2}", NULL, 0,
                  0) == SNN_OK);
    expect_refused(bad, SNN_E_FORMAT, "shape mismatch", "has shape", "the model expects");
    CHECK(rewrite(good, bad, "snn_model_config",
                  "{\"model\":\"fcsnn\",\"in_features\":12,\"hidden\":8,\"depth\":2,\"classes\":3,\"tau\":2}", NULL, 0,
                  0) == SNN_OK);
    expect_refused(bad, SNN_E_FORMAT, "missing tensor", "bytes of tensor data", NULL);
}

/* ---------- NaN / inf ---------- */

static void test_nonfinite(void) {
    char good[512], bad[512];
    path_of(good, sizeof good, "conv.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    snn_convsnn_opts co = {.in_channels = 1, .height = 8, .width = 8, .channels = 2, .classes = 3};
    snn_model *m = NULL;
    CHECK(snn_convsnn_create(&co, rs, &m) == SNN_OK);
    CHECK(snn_model_check_finite(m) == SNN_OK);
    CHECK(snn_model_save(m, good, NULL) == SNN_OK);
    /* in memory: each tensor in turn gets a NaN or an inf at a random index */
    for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
        snn_tensor_info ti;
        CHECK(snn_model_tensor(m, i, &ti) == SNN_OK);
        size_t k = (size_t)(rs = rs * 6364136223846793005ull + 1442695040888963407ull) % ti.numel;
        float keep = ti.data[k];
        ti.data[k] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        snn_status st = snn_model_check_finite(m);
        char want[160];
        snprintf(want, sizeof want, "\"%s\" holds %s at index %zu", ti.name, i % 3 == 0 ? "NaN" : i % 3 == 1 ? "+inf" : "-inf", k);
        CHECK_MSG(st == SNN_E_NUMERIC && strstr(snn_last_error(), want), "%s: %s", want, snn_last_error());
        ti.data[k] = keep;
    }
    CHECK(snn_model_check_finite(m) == SNN_OK);
    CHECK(snn_model_check_finite(NULL) == SNN_E_INVALID);
    /* in a file: a weight and a BatchNorm buffer */
    const char *names[2] = {"conv_fc.0.weight", "conv_fc.1.running_var"};
    for (int i = 0; i < 2; i++) {
        CHECK(rewrite(good, bad, NULL, NULL, names[i], 1, i ? INFINITY : NAN) == SNN_OK);
        expect_refused(bad, SNN_E_NUMERIC, "non-finite tensor", names[i], i ? "+inf" : "NaN");
        /* snn_model_load_weights into an existing model: refused, the model unchanged */
        snn_ckpt *c = NULL;
        CHECK(snn_ckpt_open(bad, &c) == SNN_OK);
        float *before = malloc(snn_model_num_params(m) * sizeof(float));
        memcpy(before, snn_model_params(m), snn_model_num_params(m) * sizeof(float));
        for (size_t k = 0; k < snn_model_num_params(m); k++) snn_model_params(m)[k] += 1.0f;
        memcpy(before, snn_model_params(m), snn_model_num_params(m) * sizeof(float));
        CHECK(snn_model_load_weights(m, c) == SNN_E_NUMERIC);
        CHECK(!memcmp(before, snn_model_params(m), snn_model_num_params(m) * sizeof(float)));
        free(before);
        snn_ckpt_close(c);
    }
    snn_model_free(m);
}

/* ---------- training checkpoints: FP8 state, loss scaler, optimizer, metadata ---------- */

static snn_model *tiny_fcsnn(void) {
    snn_fcsnn_opts fo = {.in_features = 32, .hidden = 16, .depth = 1, .classes = 8};
    snn_model *m = NULL;
    if (snn_fcsnn_create(&fo, 7, &m) != SNN_OK) exit(2);
    return m;
}

static void train_steps(snn_model *m, snn_precision *p, snn_optimizer *opt, int steps) {
    const int T = 2, N = 3;
    CHECK(snn_model_plan(m, T, N) == SNN_OK);
    float x[2 * 3 * 32], dy[2 * 3 * 8];
    for (int s = 0; s < steps; s++) {
        snn_test_fill_uniform(x, sizeof x / sizeof *x, 0, 1, &rs);
        snn_test_fill_uniform(dy, sizeof dy / sizeof *dy, -0.1f, 0.1f, &rs);
        const float *y;
        CHECK(snn_model_forward(m, x, 1, &y) == SNN_OK);
        CHECK_MSG(snn_precision_backward(p, dy, opt, 0.01f, 0, NULL, NULL) == SNN_OK, "%s", snn_last_error());
    }
}

static void test_training_state(void) {
    char good[512], bad[512];
    path_of(good, sizeof good, "train.safetensors");
    path_of(bad, sizeof bad, "bad.safetensors");
    snn_model *m = tiny_fcsnn();
    snn_precision_config cfg;
    CHECK(snn_precision_config_parse("fp8", "delayed", NULL, NULL, NULL, &cfg) == SNN_OK);
    cfg.amax_history_len = 4;
    snn_precision *p = NULL;
    CHECK_MSG(snn_prepare_model_for_precision(m, "cpu", &cfg, &p) == SNN_OK, "%s", snn_last_error());
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAM);
    snn_optimizer *opt = NULL;
    CHECK(snn_optimizer_create_for_model(&oo, m, &opt) == SNN_OK);
    train_steps(m, p, opt, 3);
    CHECK_MSG(snn_training_checkpoint_save(m, p, opt, good, NULL) == SNN_OK, "%s", snn_last_error());
    snn_ckpt *c = NULL;
    CHECK(snn_ckpt_open(good, &c) == SNN_OK);
    CHECK_MSG(snn_training_checkpoint_restore(m, p, opt, c) == SNN_OK, "%s", snn_last_error());
    snn_ckpt_close(c);
    const char *scale = "__precision__.layers.0.weight.scale", *hist = "__precision__.layers.0.input.amax_history";
    static const struct {
        const char *key, *value, *tensor;
        size_t index;
        float v;
        const char *needle;
    } cases[] = {
        {NULL, NULL, "__precision__.layers.0.weight.scale", 0, 1e-45f, "scale"},
        {NULL, NULL, "__precision__.layers.0.weight.scale", 0, NAN, "NaN or an infinity"},
        {NULL, NULL, "__precision__.layers.0.input.scale", 0, -2.0f, "scale"},
        {NULL, NULL, "__precision__.layers.0.input.amax_history", 2, INFINITY, "NaN or an infinity"},
        {NULL, NULL, "__precision__.layers.0.input.amax_history", 1, -1.0f, ">= 0"},
        {NULL, NULL, "__optim__.exp_avg", 5, NAN, "__optim__.exp_avg"},
        {NULL, NULL, "__optim__.exp_avg_sq", 3, -1e-3f, ">= 0"},
        {NULL, NULL, "layers.0.weight", 0, -INFINITY, "-inf"},
        {"optimizer_steps", "abc", NULL, 0, 0, "optimizer_steps"},
        {"optimizer_steps", "-3", NULL, 0, 0, "optimizer_steps"},
        {"optimizer_steps", "99999999999999999999", NULL, 0, 0, "optimizer_steps"},
        {"model_step", "12x", NULL, 0, 0, "model_step"},
        {"optimizer", "sgd", NULL, 0, 0, "optimizer"},
        {"snn_precision_config", "{\"mode\":\"fp8\",\"fp8_recipe\":\"delayed\",\"amax_history_len\":4,\"mo\\u0000x\":1}", NULL, 0, 0, "NUL"},
    };
    (void)scale;
    (void)hist;
    size_t np = snn_model_num_params(m);
    float *w0 = malloc(np * sizeof(float));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CHECK(rewrite(good, bad, cases[i].key, cases[i].value, cases[i].tensor, cases[i].index, cases[i].v) == SNN_OK);
        /* perturb the live state so "unchanged" is observable */
        train_steps(m, p, opt, 1);
        memcpy(w0, snn_model_params(m), np * sizeof(float));
        long steps0 = snn_optimizer_steps(opt);
        uint64_t ms0 = snn_model_step_count(m);
        CHECK(snn_ckpt_open(bad, &c) == SNN_OK);
        snn_status st = snn_training_checkpoint_restore(m, p, opt, c);
        CHECK_MSG(st != SNN_OK && strstr(snn_last_error(), cases[i].needle), "case %zu: %s: %s", i,
                  snn_status_name(st), snn_last_error());
        CHECK_MSG(!memcmp(w0, snn_model_params(m), np * sizeof(float)) && steps0 == snn_optimizer_steps(opt) &&
                  ms0 == snn_model_step_count(m), "case %zu: a refused restore changed the training state", i);
        snn_ckpt_close(c);
    }
    free(w0);
    /* misuse: NULL handles and an optimizer of another model */
    snn_model *other = tiny_fcsnn();
    snn_optimizer *oopt = NULL;
    CHECK(snn_optimizer_create_for_model(&oo, other, &oopt) == SNN_OK);
    float dy[2 * 3 * 8] = {0};
    CHECK(snn_precision_backward(NULL, dy, opt, 0.1f, 0, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_precision_backward(p, NULL, opt, 0.1f, 0, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_precision_backward(p, dy, NULL, 0.1f, 0, NULL, NULL) == SNN_E_INVALID);
    CHECK_MSG(snn_precision_backward(p, dy, oopt, 0.1f, 0, NULL, NULL) == SNN_E_INVALID &&
              strstr(snn_last_error(), "another model"), "%s", snn_last_error());
    CHECK(snn_ckpt_open(good, &c) == SNN_OK);
    CHECK(snn_training_checkpoint_restore(m, p, oopt, c) == SNN_E_INVALID && strstr(snn_last_error(), "another model"));
    CHECK(snn_training_checkpoint_restore(other, p, NULL, c) == SNN_E_INVALID);
    CHECK(snn_training_checkpoint_restore(NULL, p, opt, c) == SNN_E_INVALID);
    CHECK(snn_training_checkpoint_restore(m, p, opt, NULL) == SNN_E_INVALID);
    char other_path[512];
    path_of(other_path, sizeof other_path, "bad.safetensors");
    CHECK(snn_training_checkpoint_save(m, p, oopt, other_path, NULL) == SNN_E_INVALID);
    CHECK(snn_training_checkpoint_save(other, p, NULL, other_path, NULL) == SNN_E_INVALID);
    CHECK(snn_training_checkpoint_save(NULL, p, opt, other_path, NULL) == SNN_E_INVALID);
    CHECK(snn_prepare_model_for_precision(other, "cpu", NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_precision_check_checkpoint(NULL, NULL) == SNN_E_INVALID);
    snn_ckpt_close(c);
    CHECK(snn_precision_set_spike_fp8(NULL, 1) == SNN_E_INVALID);
    CHECK(snn_precision_describe(NULL) == NULL && snn_precision_config_of(NULL) == NULL);
    CHECK(snn_model_plan(NULL, 1, 1) == SNN_E_INVALID);
    const float *y;
    CHECK(snn_model_forward(NULL, dy, 1, &y) == SNN_E_INVALID && snn_model_backward(NULL, dy) == SNN_E_INVALID);
    CHECK(snn_model_num_params(NULL) == 0 && snn_model_params(NULL) == NULL && snn_model_kind(NULL) == NULL);
    snn_tensor_info ti;
    CHECK(snn_model_tensor(NULL, 0, &ti) == SNN_E_INVALID && snn_model_tensor(m, 0, NULL) == SNN_E_INVALID);
    snn_model_zero_grad(NULL);
    snn_model_reset(NULL);
    CHECK(snn_model_create_from_config(NULL, 1, NULL) == SNN_E_INVALID);
    snn_optimizer_free(oopt);
    snn_model_free(other);
    /* the precision outlives its model: refused, not a use after free */
    snn_model_free(m);
    CHECK(snn_precision_backward(p, dy, NULL, 0.1f, 0, NULL, NULL) == SNN_E_INVALID);
    CHECK(snn_precision_backward(p, dy, opt, 0.1f, 0, NULL, NULL) == SNN_E_STATE);
    snn_optimizer_free(opt);
    snn_precision_free(p);
}

/* snn_error given its own buffer (a caller re-wrapping the current message) */
static void test_error_self_reference(void) {
    snn_model *m = NULL;
    snn_model_create_from_config("{\"model\":\"fcsnn\",\"hidden\":\"x\"}", 1, &m);
    char before[1024];
    snprintf(before, sizeof before, "%s", snn_last_error());
    CHECK(strlen(before) > 10);
    /* the restore path re-wraps a precision-config error this way */
    snn_precision_config cfg = snn_precision_config_default();
    char path[512];
    path_of(path, sizeof path, "good.safetensors");
    char bad[512];
    path_of(bad, sizeof bad, "badcfg.safetensors");
    CHECK(rewrite(path, bad, "snn_precision_config", "{\"mode\":\"fp9\"}", NULL, 0, 0) == SNN_OK);
    snn_ckpt *c = NULL;
    CHECK(snn_ckpt_open(bad, &c) == SNN_OK);
    snn_status st = snn_precision_check_checkpoint(&cfg, c);
    CHECK_MSG(st == SNN_E_FORMAT && strstr(snn_last_error(), "snn_precision_config metadata is invalid: ") &&
              strlen(strstr(snn_last_error(), "invalid: ")) > 12, "%s", snn_last_error());
    snn_ckpt_close(c);
    unlink(bad);
}

int main(void) {
    uint64_t seed = snn_test_seed();
    rs = seed;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/snn_test_hmodel_XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_configs();
    test_small_file_big_model();
    test_nonfinite();
    test_training_state();
    test_error_self_reference();
    const char *names[] = {"good.safetensors", "bad.safetensors", "other.safetensors", "conv.safetensors",
                           "train.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[512];
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return snn_test_finish("test_hostile_model");
}
