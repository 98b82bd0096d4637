/* The public construction API (include/snn/nn.h), through public headers only:
 *  - FC-SNN built here equals the zoo's snn_fcsnn_create with the same seed bit for bit
 *    (parameters, names, outputs, gradients; and one AdamW step under fp32, bf16, fp8 delayed);
 *  - a small Spikformer built here has the zoo's tensor names and shapes, loads the zoo's
 *    checkpoint and then computes the same outputs and gradients bit for bit;
 *  - every module kind builds and trains; a training checkpoint of a built model resumes
 *    bit-identically;
 *  - every misuse is an error with a message, never a crash. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/snn.h"

#define OK(x) CHECK_MSG((x) == SNN_OK, "%s", snn_last_error())

/* st is the expected failure and the message mentions `word`. */
#define REFUSED(expr, code, word)                                                                \
    do {                                                                                         \
        snn_clear_error();                                                                       \
        snn_status st_ = (expr);                                                                 \
        CHECK_MSG(st_ == (code), "%s gave %s (%s)", #expr, snn_status_name(st_), snn_last_error()); \
        CHECK_MSG(strstr(snn_last_error(), (word)) != NULL, "%s: message \"%s\" lacks \"%s\"", #expr, \
                  snn_last_error(), (word));                                                     \
    } while (0)

/* The child is passed by address: the constructor in `st` writes it, and the order in which
 * arguments are evaluated is unspecified. */
static snn_module *add(snn_module *seq, snn_status st, snn_module **childp, const char *name) {
    CHECK_MSG(st == SNN_OK, "%s", snn_last_error());
    snn_module *child = *childp;
    if (name) OK(snn_module_set_name(child, name));
    OK(snn_sequential_add(seq, child));
    return child;
}

static snn_module *seq_new(void) {
    snn_module *s = NULL;
    OK(snn_sequential_create(&s));
    return s;
}

/* flatten -> [Linear -> LIF] x depth -> Linear under "layers", as src/models/fcsnn.c. */
static snn_module *fcsnn_tree(int in, int hidden, int depth, int classes, float tau) {
    snn_module *root = seq_new(), *layers = seq_new(), *m;
    OK(snn_module_set_name(layers, "layers"));
    OK(snn_sequential_add(root, layers));
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.tau = tau;
    int w = in;
    for (int i = 0; i < depth; i++) {
        add(layers, snn_linear_create(w, hidden, 1, &m), &m, NULL);
        add(layers, snn_neuron_create(&lif, &m), &m, NULL);
        w = hidden;
    }
    add(layers, snn_linear_create(w, classes, 1, &m), &m, NULL);
    return root;
}

static int same_tensors(const snn_model *a, const snn_model *b, int grads) {
    if (snn_model_num_tensors(a) != snn_model_num_tensors(b)) return 0;
    for (size_t i = 0; i < snn_model_num_tensors(a); i++) {
        snn_tensor_info x, y;
        if (snn_model_tensor(a, i, &x) != SNN_OK || snn_model_tensor(b, i, &y) != SNN_OK) return 0;
        if (strcmp(x.name, y.name) || x.numel != y.numel || x.rank != y.rank || x.is_buffer != y.is_buffer ||
            x.decay != y.decay)
            return 0;
        for (int k = 0; k < x.rank; k++)
            if (x.shape[k] != y.shape[k]) return 0;
        if (memcmp(x.data, y.data, x.numel * sizeof(float))) return 0;
        if (grads && x.grad && memcmp(x.grad, y.grad, x.numel * sizeof(float))) return 0;
    }
    return 1;
}

/* Forward (training) + backward of random x, dy on both models; outputs must agree bitwise. */
static void same_step(snn_model *a, snn_model *b, int T, int N, uint64_t *rs, const char *what) {
    size_t F = snn_model_input_numel(a), C = snn_model_output_numel(a), B = (size_t)T * N;
    CHECK(F == snn_model_input_numel(b) && C == snn_model_output_numel(b));
    float *x = malloc(sizeof(float) * B * F), *dy = malloc(sizeof(float) * B * C);
    snn_test_fill_uniform(x, B * F, 0.0f, 1.5f, rs);
    snn_test_fill_uniform(dy, B * C, -1.0f, 1.0f, rs);
    OK(snn_model_plan(a, T, N));
    OK(snn_model_plan(b, T, N));
    const float *ya = NULL, *yb = NULL;
    OK(snn_model_forward(a, x, 1, &ya));
    OK(snn_model_forward(b, x, 1, &yb));
    int nonzero = 0;
    for (size_t i = 0; ya && i < B * C; i++) nonzero |= ya[i] != 0.0f;
    CHECK_MSG(nonzero, "%s: the output is all zeros (the comparison would be empty)", what);
    CHECK_MSG(ya && yb && !memcmp(ya, yb, sizeof(float) * B * C), "%s: outputs differ", what);
    snn_model_zero_grad(a);
    snn_model_zero_grad(b);
    OK(snn_model_backward(a, dy));
    OK(snn_model_backward(b, dy));
    CHECK_MSG(same_tensors(a, b, 1), "%s: parameters, buffers or gradients differ", what);
    free(x);
    free(dy);
}

static void test_fcsnn_equals_zoo(uint64_t *rs) {
    uint64_t seed = *rs ^ 0x5eed;
    const char *modes[3][2] = {{"fp32", NULL}, {"bf16", NULL}, {"fp8", "delayed"}};
    for (int k = 0; k < 3; k++) {
        snn_model *zoo = NULL, *mine = NULL;
        snn_fcsnn_opts fo = {.in_features = 64, .hidden = 48, .depth = 2, .classes = 8, .tau = 2.5f};
        OK(snn_fcsnn_create(&fo, seed, &zoo));
        int shape[1] = {64};
        OK(snn_model_create_from_module(fcsnn_tree(64, 48, 2, 8, 2.5f), 1, shape, seed, &mine));
        if (!zoo || !mine) return;
        CHECK(!strcmp(snn_model_kind(mine), "custom"));
        CHECK_MSG(same_tensors(zoo, mine, 0), "fcsnn: the parameters drawn from the same seed differ");
        same_step(zoo, mine, 4, 6, rs, "fcsnn fp32 forward/backward");
        /* prepare both, one AdamW step of the same batch, compare the weights */
        snn_precision_config cfg;
        OK(snn_precision_config_parse(modes[k][0], modes[k][1], NULL, NULL, NULL, &cfg));
        snn_precision *pz = NULL, *pm = NULL;
        OK(snn_prepare_model_for_precision(zoo, "cpu", &cfg, &pz));
        OK(snn_prepare_model_for_precision(mine, "cpu", &cfg, &pm));
        snn_optim_opts o = snn_optim_defaults(SNN_OPTIM_ADAMW);
        o.lr = 1e-2f;
        snn_optimizer *oz = NULL, *om = NULL;
        OK(snn_optimizer_create_for_model(&o, zoo, &oz));
        OK(snn_optimizer_create_for_model(&o, mine, &om));
        same_step(zoo, mine, 4, 6, rs, modes[k][0]);
        /* snn_precision_backward runs its own backward from dy: use a fresh forward */
        size_t B = 24, F = 64, C = 8;
        float *x = malloc(sizeof(float) * B * F), *dy = malloc(sizeof(float) * B * C);
        snn_test_fill_uniform(x, B * F, 0.0f, 1.5f, rs);
        snn_test_fill_uniform(dy, B * C, -1.0f, 1.0f, rs);
        const float *y;
        for (int s = 0; s < 2; s++) {
            OK(snn_model_forward(zoo, x, 1, &y));
            OK(snn_model_forward(mine, x, 1, &y));
            OK(snn_precision_backward(pz, dy, oz, -1, 1.0f, NULL, NULL));
            OK(snn_precision_backward(pm, dy, om, -1, 1.0f, NULL, NULL));
        }
        CHECK_MSG(same_tensors(zoo, mine, 1), "fcsnn %s: weights after two AdamW steps differ", modes[k][0]);
        CHECK(!strcmp(snn_precision_describe(pz), snn_precision_describe(pm)));
        free(x);
        free(dy);
        snn_optimizer_free(oz);
        snn_optimizer_free(om);
        snn_precision_free(pz);
        snn_precision_free(pm);
        snn_model_free(zoo);
        snn_model_free(mine);
    }
}

/* conv3x3 (no bias) - BN - MaxPool(3,2,1) - LIF, as the Spikformer stem does it. */
static void stem_stage(snn_module *stem, int i, int in, int out, const snn_neuron_opts *lif) {
    char n[32];
    snn_module *m;
    snprintf(n, sizeof n, "proj_conv%d", i);
    add(stem, snn_conv2d_create(in, out, 3, 1, 1, 0, &m), &m, n);
    snprintf(n, sizeof n, "proj_bn%d", i);
    add(stem, snn_batchnorm_create(out, 1e-5f, 0.1f, &m), &m, n);
    snprintf(n, sizeof n, "maxpool%d", i);
    add(stem, snn_maxpool2d_create(3, 2, 1, &m), &m, n);
    snprintf(n, sizeof n, "proj_lif%d", i);
    add(stem, snn_neuron_create(lif, &m), &m, n);
}

static void proj(snn_module *seq, const char *name, int in, int out, const snn_neuron_opts *lif) {
    char n[48];
    snn_module *m;
    add(seq, snn_conv1d_create(in, out, 1, 1, 0, 0, &m), &m, name);
    snprintf(n, sizeof n, "%s_bn", name);
    add(seq, snn_batchnorm_create(out, 1e-5f, 0.1f, &m), &m, n);
    snprintf(n, sizeof n, "%s_lif", name);
    add(seq, snn_neuron_create(lif, &m), &m, n);
}

static snn_module *spikformer_tree(int C, int img, int D, int heads, int depth, int classes, float ratio) {
    snn_neuron_opts lif = snn_neuron_defaults(SNN_NEURON_LIF);
    lif.detach_reset = 1;
    snn_module *root = seq_new(), *stem = seq_new(), *m;
    add(root, SNN_OK, &stem, "patch_embed");
    int ch[4] = {D / 8, D / 4, D / 2, D}, in = C;
    for (int i = 0; i < 4; i++) {
        stem_stage(stem, i, in, ch[i], &lif);
        in = ch[i];
    }
    snn_module *rpe = seq_new(), *res;
    add(rpe, snn_conv2d_create(D, D, 3, 1, 1, 0, &m), &m, "conv");
    add(rpe, snn_batchnorm_create(D, 1e-5f, 0.1f, &m), &m, "bn");
    add(rpe, snn_neuron_create(&lif, &m), &m, "lif");
    add(stem, snn_residual_create(rpe, &res), &res, "rpe");
    int side = img / 16, tok[2] = {D, side * side};
    add(root, snn_reshape_create(2, tok, &m), &m, "tokens");
    snn_module *blocks = seq_new();
    add(root, SNN_OK, &blocks, "blocks");
    for (int b = 0; b < depth; b++) {
        snn_module *blk = seq_new(), *mlp = seq_new();
        add(blocks, SNN_OK, &blk, NULL);
        add(blk, snn_spiking_self_attention_create(D, heads, 0.125f, &m), &m, "attn");
        proj(mlp, "fc1", D, (int)(D * ratio), &lif);
        proj(mlp, "fc2", (int)(D * ratio), D, &lif);
        add(blk, snn_residual_create(mlp, &res), &res, "mlp");
    }
    add(root, snn_token_mean_create(&m), &m, "pool");
    add(root, snn_linear_create(D, classes, 1, &m), &m, "head");
    return root;
}

static void test_spikformer_loads_zoo(uint64_t *rs) {
    snn_spikformer_opts so = {.in_channels = 2, .image_size = 32, .classes = 5, .embed_dim = 16, .heads = 2,
                              .depth = 2, .mlp_ratio = 2.0f};
    snn_model *zoo = NULL, *mine = NULL;
    OK(snn_spikformer_create(&so, *rs, &zoo));
    int shape[3] = {2, 32, 32};
    OK(snn_model_create_from_module(spikformer_tree(2, 32, 16, 2, 2, 5, 2.0f), 3, shape, *rs + 1, &mine));
    if (!zoo || !mine) return;
    CHECK(snn_model_num_params(zoo) == snn_model_num_params(mine));
    const char *path = "test_nn_api_spikformer.safetensors";
    OK(snn_model_save(zoo, path, NULL));
    snn_ckpt *c = NULL;
    OK(snn_ckpt_open(path, &c));
    OK(snn_model_load_weights(mine, c)); /* by name: every tensor of mine must be in the file */
    snn_ckpt_close(c);
    remove(path);
    CHECK_MSG(same_tensors(zoo, mine, 0), "spikformer: names, shapes or loaded values differ from the zoo's");
    same_step(zoo, mine, 2, 3, rs, "spikformer forward/backward");
    const snn_module *r = snn_model_root(mine);
    CHECK(r && !strcmp(snn_module_kind(r), "Sequential") && snn_module_num_children(r) == 5);
    snn_model_free(zoo);
    snn_model_free(mine);
}

/* Every other kind once: Conv1d with kernel 3, AvgPool, Dropout, LayerNorm, GELU, Flatten,
 * IF with soft reset, PLIF with every option; a few AdamW steps lower a squared loss, and a
 * training checkpoint taken midway resumes bit-identically. */
static snn_module *zoo_of_kinds(void) {
    snn_module *root = seq_new(), *m, *res;
    add(root, snn_conv2d_create(3, 8, 3, 1, 1, 1, &m), &m, "conv");
    add(root, snn_avgpool2d_create(2, 0, 0, &m), &m, NULL);
    snn_neuron_opts ifn = snn_neuron_defaults(SNN_NEURON_IF);
    ifn.soft_reset = 1;
    ifn.v_threshold = 0.5f;
    ifn.surrogate = SNN_SG_ATAN;
    add(root, snn_neuron_create(&ifn, &m), &m, "if_soft");
    int to[2] = {8, 16};
    add(root, snn_reshape_create(2, to, &m), &m, NULL);
    add(root, snn_conv1d_create(8, 16, 3, 1, 1, 1, &m), &m, "c1");
    add(root, snn_layernorm_create(16, 1e-5f, &m), &m, "ln");
    snn_module *inner = seq_new();
    add(inner, snn_linear_create(16, 16, 1, &m), &m, NULL);
    add(inner, snn_gelu_create(&m), &m, NULL);
    add(root, snn_residual_create(inner, &res), &res, "ffn");
    snn_neuron_opts plif = snn_neuron_defaults(SNN_NEURON_PLIF);
    plif.tau = 3.0f;
    plif.decay_input = 0;
    plif.v_threshold = 0.8f;
    plif.v_reset = -0.1f;
    plif.detach_reset = 1;
    plif.surrogate = SNN_SG_PIECEWISE_QUADRATIC;
    plif.alpha = 1.5f;
    add(root, snn_neuron_create(&plif, &m), &m, "plif");
    add(root, snn_dropout_create(0.25f, &m), &m, "drop");
    add(root, snn_token_mean_create(&m), &m, NULL);
    add(root, snn_flatten_create(&m), &m, NULL);
    add(root, snn_linear_create(16, 4, 0, &m), &m, "out");
    return root;
}

static void train_steps(snn_model *m, snn_precision *p, snn_optimizer *o, const float *x, int T, int N, int steps,
                        float *loss) {
    size_t C = snn_model_output_numel(m), n = (size_t)T * N * C;
    float *dy = malloc(sizeof(float) * n);
    for (int s = 0; s < steps; s++) {
        const float *y;
        OK(snn_model_forward(m, x, 1, &y));
        double l = 0;
        for (size_t i = 0; i < n; i++) {
            l += (double)y[i] * y[i];
            dy[i] = 2.0f * y[i] / (float)n;
        }
        loss[s] = (float)(l / (double)n);
        OK(snn_precision_backward(p, dy, o, -1, 0, NULL, NULL));
    }
    free(dy);
}

static snn_status build_kinds(uint64_t seed, snn_model **m, snn_precision **p, snn_optimizer **o) {
    int shape[3] = {3, 8, 8};
    snn_status st = snn_model_create_from_module(zoo_of_kinds(), 3, shape, seed, m);
    snn_precision_config cfg;
    if (st == SNN_OK) st = snn_precision_config_parse("fp16", NULL, NULL, NULL, NULL, &cfg);
    if (st == SNN_OK) st = snn_prepare_model_for_precision(*m, "cpu", &cfg, p);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = 3e-2f;
    if (st == SNN_OK) st = snn_optimizer_create_for_model(&oo, *m, o);
    return st;
}

static void test_every_kind_and_resume(uint64_t *rs) {
    int T = 2, N = 4;
    snn_model *a = NULL, *b = NULL;
    snn_precision *pa = NULL, *pb = NULL;
    snn_optimizer *oa = NULL, *ob = NULL;
    OK(build_kinds(*rs, &a, &pa, &oa));
    /* The same seed (Dropout masks are keyed by it, as for any model; the CLI records it), but
     * b trains on other data first: the restore must overwrite weights, moments, BatchNorm
     * statistics, the loss scale and the step count. */
    OK(build_kinds(*rs, &b, &pb, &ob));
    if (!oa || !ob) return;
    size_t F = snn_model_input_numel(a);
    CHECK(F == 3 * 8 * 8 && snn_model_output_numel(a) == 4);
    float *x = malloc(sizeof(float) * T * N * F);
    snn_test_fill_uniform(x, (size_t)T * N * F, 0.0f, 2.0f, rs);
    OK(snn_model_plan(a, T, N));
    OK(snn_model_plan(b, T, N));
    float la[40], lb[40];
    train_steps(a, pa, oa, x, T, N, 20, la);
    float *x2 = malloc(sizeof(float) * T * N * F);
    snn_test_fill_uniform(x2, (size_t)T * N * F, 0.0f, 2.0f, rs);
    train_steps(b, pb, ob, x2, T, N, 7, lb);
    free(x2);
    CHECK(!same_tensors(a, b, 0));
    const char *path = "test_nn_api_resume.safetensors";
    OK(snn_training_checkpoint_save(a, pa, oa, path, NULL));
    snn_ckpt *c = NULL;
    OK(snn_ckpt_open(path, &c));
    if (c) OK(snn_training_checkpoint_restore(b, pb, ob, c));
    snn_ckpt_close(c);
    remove(path);
    train_steps(a, pa, oa, x, T, N, 20, la + 20);
    train_steps(b, pb, ob, x, T, N, 20, lb);
    CHECK_MSG(!memcmp(la + 20, lb, sizeof(float) * 20), "resumed losses differ: %g vs %g", la[20], lb[0]);
    CHECK_MSG(same_tensors(a, b, 1), "resumed weights differ");
    CHECK_MSG(la[39] < 0.5f * la[0], "squared loss %g -> %g did not fall", la[0], la[39]);
    /* the PLIF parameter starts at -ln(tau - 1) */
    int found = 0;
    for (size_t i = 0; i < snn_model_num_tensors(a); i++) {
        snn_tensor_info ti;
        OK(snn_model_tensor(a, i, &ti));
        if (!strcmp(ti.name, "plif.w")) found++;
        if (!strcmp(ti.name, "ffn.0.weight")) found++; /* the Residual adds no level */
        CHECK(strcmp(ti.name, "ffn.0.0.weight"));
    }
    CHECK(found == 2);
    snn_model *fresh = NULL;
    int shape[3] = {3, 8, 8};
    OK(snn_model_create_from_module(zoo_of_kinds(), 3, shape, 1, &fresh));
    for (size_t i = 0; fresh && i < snn_model_num_tensors(fresh); i++) {
        snn_tensor_info ti;
        OK(snn_model_tensor(fresh, i, &ti));
        if (!strcmp(ti.name, "plif.w")) CHECK(fabsf(ti.data[0] - snn_plif_w0(3.0f)) == 0.0f);
    }
    snn_model_free(fresh);
    free(x);
    snn_optimizer_free(oa);
    snn_optimizer_free(ob);
    snn_precision_free(pa);
    snn_precision_free(pb);
    snn_model_free(a);
    snn_model_free(b);
}

static void test_misuse(void) {
    snn_module *m = NULL, *s = NULL, *t = NULL, *l = NULL;
    /* NULL handles and bad arguments */
    REFUSED(snn_linear_create(4, 4, 1, NULL), SNN_E_INVALID, "output pointer");
    REFUSED(snn_sequential_add(NULL, NULL), SNN_E_INVALID, "NULL");
    REFUSED(snn_linear_create(0, 4, 1, &m), SNN_E_INVALID, "in_features");
    CHECK(m == NULL);
    REFUSED(snn_linear_create(4, -3, 1, &m), SNN_E_INVALID, "out_features");
    REFUSED(snn_conv2d_create(3, 8, 0, 1, 0, 1, &m), SNN_E_INVALID, "kernel");
    REFUSED(snn_conv1d_create(3, 8, 3, 1, -1, 1, &m), SNN_E_INVALID, "padding");
    REFUSED(snn_maxpool2d_create(2, 2, 2, &m), SNN_E_INVALID, "padding");
    REFUSED(snn_batchnorm_create(8, -1.0f, 0.1f, &m), SNN_E_INVALID, "eps");
    REFUSED(snn_batchnorm_create(8, 1e-5f, 1.5f, &m), SNN_E_INVALID, "momentum");
    REFUSED(snn_layernorm_create(8, NAN, &m), SNN_E_INVALID, "eps");
    REFUSED(snn_dropout_create(1.0f, &m), SNN_E_INVALID, "[0, 1)");
    REFUSED(snn_ssa_core_create(0, 0.1f, &m), SNN_E_INVALID, "heads");
    REFUSED(snn_spiking_self_attention_create(10, 4, 0, &m), SNN_E_INVALID, "divisible");
    int bad_shape[2] = {4, 0};
    REFUSED(snn_reshape_create(2, bad_shape, &m), SNN_E_INVALID, "dimension 1");
    REFUSED(snn_reshape_create(5, bad_shape, &m), SNN_E_INVALID, "rank");
    snn_neuron_opts bad = snn_neuron_defaults(SNN_NEURON_LIF);
    bad.tau = 0.5f;
    REFUSED(snn_neuron_create(&bad, &m), SNN_E_INVALID, "tau");
    CHECK(m == NULL);
    /* ownership */
    OK(snn_sequential_create(&s));
    OK(snn_sequential_create(&t));
    OK(snn_linear_create(4, 4, 1, &l));
    REFUSED(snn_sequential_add(l, s), SNN_E_INVALID, "only be added to a Sequential");
    OK(snn_sequential_add(s, l));
    REFUSED(snn_sequential_add(s, l), SNN_E_STATE, "already belongs");
    REFUSED(snn_sequential_add(t, l), SNN_E_STATE, "already belongs");
    REFUSED(snn_module_destroy(l), SNN_E_STATE, "belongs to a Sequential");
    REFUSED(snn_sequential_add(s, s), SNN_E_INVALID, "itself");
    OK(snn_sequential_add(t, s));
    REFUSED(snn_sequential_add(s, t), SNN_E_INVALID, "descendants");
    REFUSED(snn_residual_create(l, &m), SNN_E_STATE, "already belongs");
    snn_module *named = NULL;
    OK(snn_gelu_create(&named));
    OK(snn_module_set_name(named, "act"));
    REFUSED(snn_residual_create(named, &m), SNN_E_INVALID, "name the Residual instead");
    OK(snn_module_destroy(named));
    snn_neuron_opts badk = snn_neuron_defaults(SNN_NEURON_LIF);
    badk.kind = (snn_neuron_kind)7;
    REFUSED(snn_neuron_create(&badk, &m), SNN_E_INVALID, "snn_neuron_create");
    badk = snn_neuron_defaults(SNN_NEURON_LIF);
    badk.v_threshold = NAN;
    REFUSED(snn_neuron_create(&badk, &m), SNN_E_INVALID, "snn_neuron_create");
    /* names */
    REFUSED(snn_module_set_name(l, "3x"), SNN_E_INVALID, "not a module name");
    REFUSED(snn_module_set_name(l, "a.b"), SNN_E_INVALID, "not a module name");
    REFUSED(snn_module_set_name(l, NULL), SNN_E_INVALID, "NULL");
    snn_module *l2 = NULL;
    OK(snn_linear_create(4, 4, 1, &l2));
    OK(snn_module_set_name(l, "fc"));
    OK(snn_module_set_name(l2, "fc"));
    REFUSED(snn_sequential_add(s, l2), SNN_E_INVALID, "already has a child named");
    OK(snn_module_set_name(l2, "fc2"));
    OK(snn_sequential_add(s, l2));
    REFUSED(snn_module_set_name(l2, "fc"), SNN_E_INVALID, "already has a child named");
    CHECK(!strcmp(snn_module_name(l2), "fc2"));
    /* models: a child is not a root; a shape error frees the tree and names the module */
    int in4[1] = {4}, in5[1] = {5};
    snn_model *model = NULL, *other = NULL;
    REFUSED(snn_model_create_from_module(s, 1, in4, 1, &model), SNN_E_STATE, "already belongs");
    REFUSED(snn_model_create_from_module(t, 0, in4, 1, &model), SNN_E_INVALID, "rank");
    REFUSED(snn_model_create_from_module(t, 1, NULL, 1, &model), SNN_E_INVALID, "shape");
    REFUSED(snn_model_create_from_module(NULL, 1, in4, 1, &model), SNN_E_INVALID, "NULL");
    REFUSED(snn_model_create_from_module(t, 1, in5, 1, &model), SNN_E_SHAPE, "0.fc (Linear)");
    CHECK(model == NULL); /* t and everything under it are freed now */
    /* a sealed tree */
    OK(snn_sequential_create(&s));
    OK(snn_linear_create(4, 3, 1, &l));
    OK(snn_sequential_add(s, l));
    OK(snn_model_create_from_module(s, 1, in4, 1, &model));
    OK(snn_linear_create(3, 3, 1, &l2));
    REFUSED(snn_sequential_add(s, l2), SNN_E_STATE, "part of a model");
    REFUSED(snn_module_set_name(l, "late"), SNN_E_STATE, "part of a model");
    REFUSED(snn_module_destroy(s), SNN_E_STATE, "snn_model_free");
    REFUSED(snn_model_create_from_module(s, 1, in4, 1, &other), SNN_E_STATE, "part of a model");
    REFUSED(snn_residual_create(l, &m), SNN_E_STATE, "part of a model");
    CHECK(snn_model_root(model) == s && !strcmp(snn_module_name(l), "0"));
    /* the zoo's trees are sealed too */
    snn_model *zoo = NULL;
    snn_fcsnn_opts fo = {.in_features = 4, .hidden = 4, .depth = 1, .classes = 2};
    OK(snn_fcsnn_create(&fo, 1, &zoo));
    REFUSED(snn_sequential_add((snn_module *)snn_model_root(zoo), l2), SNN_E_STATE, "part of a model");
    /* an optimizer before prepare, a second prepare (the precision layer's checks) */
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_optimizer *opt = NULL;
    snn_precision *p = NULL, *p2 = NULL;
    snn_precision_config cfg;
    OK(snn_precision_config_parse("bf16", NULL, NULL, NULL, NULL, &cfg));
    OK(snn_optimizer_create_for_model(&oo, zoo, &opt));
    CHECK(snn_prepare_model_for_precision(zoo, "cpu", &cfg, &p) != SNN_OK);
    snn_optimizer_free(opt);
    OK(snn_prepare_model_for_precision(model, "cpu", &cfg, &p));
    CHECK(snn_prepare_model_for_precision(model, "cpu", &cfg, &p2) != SNN_OK);
    /* the device the CUDA runner has not taken over yet is refused, not ignored */
    snn_precision_free(p);
    snn_model_free(zoo);
    /* still usable */
    OK(snn_module_destroy(l2));
    OK(snn_module_destroy(NULL));
    CHECK(snn_module_kind(NULL) == NULL && snn_module_name(NULL) == NULL && snn_module_num_children(NULL) == 0);
    CHECK(snn_model_root(NULL) == NULL);
    /* duplicate tensor names: two transparent levels can collide only through renaming,
     * which is refused; a long dotted path is refused when the model is built */
    snn_module *deep = NULL, *cur = NULL;
    OK(snn_sequential_create(&deep));
    cur = deep;
    for (int i = 0; i < 5; i++) {
        snn_module *n = NULL;
        OK(snn_sequential_create(&n));
        OK(snn_module_set_name(n, "a_rather_long_module_name_xx"));
        OK(snn_sequential_add(cur, n));
        cur = n;
    }
    OK(snn_linear_create(4, 4, 1, &l));
    OK(snn_sequential_add(cur, l));
    REFUSED(snn_model_create_from_module(deep, 1, in4, 1, &other), SNN_E_INVALID, "longer than");
    /* nesting deeper than the recursion limit */
    OK(snn_sequential_create(&deep));
    cur = deep;
    snn_status last = SNN_OK;
    for (int i = 0; i < 100 && last == SNN_OK; i++) {
        snn_module *n = NULL;
        OK(snn_sequential_create(&n));
        last = snn_sequential_add(cur, n);
        if (last == SNN_OK) cur = n;
        else {
            CHECK(strstr(snn_last_error(), "nested deeper") != NULL);
            OK(snn_module_destroy(n));
        }
    }
    CHECK(last == SNN_E_INVALID);
    OK(snn_module_destroy(deep));
    snn_model_free(model);
}

int main(void) {
    uint64_t rs = snn_test_seed();
    test_misuse();
    test_fcsnn_equals_zoo(&rs);
    test_spikformer_loads_zoo(&rs);
    test_every_kind_and_resume(&rs);
    return snn_test_finish("test_nn_api");
}
