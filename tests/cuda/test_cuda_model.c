/* Whole-model parity: one training step of fcsnn, convsnn, spikformer and the dense MLP on the
 * GPU runner against the same step on the CPU (the reference), from identical initial
 * parameters and inputs: loss, every gradient, the updated parameters, the BN running
 * statistics, then an evaluation forward with the new parameters.
 *
 * Spiking layers make this a threshold test: a membrane within rounding of v_threshold can
 * spike on one side and not the other, and one flipped spike moves gradients far more than
 * rounding does. FP32 GEMMs of a different summation order flip a handful of spikes in
 * millions, so the bounds are relative L2 norms over whole tensors (2e-2), reported per model
 * with the largest offender. BF16 runs are compared with the CPU's BF16 emulation (the same
 * rounding points), not with FP32; FP16 likewise, with the loss scaling of both sides. SGD keeps the update
 * proportional to the gradient (Adam's first step is sign-like and would amplify the
 * difference of near-zero gradients); the optimizers themselves are checked element by
 * element in test_cuda_attn_optim. Exit 77 without a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nn/layers.h"
#include "nn/model_internal.h"
#include "snn/cuda.h"
#include "snn/loss.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/precision.h"
#include "snn/snn.h"

static snn_cuda *g;
static uint64_t rng;

typedef snn_status (*make_fn)(uint64_t seed, snn_model **m);

static snn_status make_fcsnn(uint64_t seed, snn_model **m) {
    snn_fcsnn_opts o = {.in_features = 96, .hidden = 160, .depth = 2, .classes = 10, .tau = 2.0f};
    return snn_fcsnn_create(&o, seed, m);
}
static snn_status make_convsnn(uint64_t seed, snn_model **m) {
    snn_convsnn_opts o = {.in_channels = 1, .height = 12, .width = 12, .channels = 16, .classes = 10};
    return snn_convsnn_create(&o, seed, m);
}
static snn_status make_spikformer(uint64_t seed, snn_model **m) {
    snn_spikformer_opts o = {.in_channels = 3, .image_size = 32, .classes = 10, .embed_dim = 64,
                             .heads = 4, .depth = 1, .mlp_ratio = 2.0f};
    return snn_spikformer_create(&o, seed, m);
}
static snn_status make_mlp(uint64_t seed, snn_model **m) {
    char cfg[160];
    snprintf(cfg, sizeof cfg, "{\"model\":\"mlp\",\"in_features\":72,\"width\":136,\"depth\":3,\"classes\":12}");
    return snn_model_create_from_config(cfg, seed, m);
}

/* Linear -> LayerNorm -> GELU -> Linear (no zoo model has a LayerNorm) */
static snn_status make_ln(uint64_t seed, snn_model **m) {
    snn_module *root = snn_sequential_new();
    if (!root) return SNN_E_NOMEM;
    snn_module *kids[4] = {snn_linear_new(24, 40, 1), snn_layernorm_new(40, 1e-5f), snn_gelu_new(),
                           snn_linear_new(40, 8, 1)};
    for (int i = 0; i < 4; i++) {
        snn_status st = kids[i] ? snn_module_add_child(root, kids[i]) : SNN_E_NOMEM;
        if (st != SNN_OK) {
            snn_module_free(root);
            return st;
        }
    }
    return snn_model_build(root, "lnmlp", "{}", snn_shape1(24), seed, m);
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Worst tensor of a (flat, model-order) comparison. */
static double worst_tensor(snn_model *m, const float *a, const float *b, int buffers, const char **name) {
    double worst = 0;
    size_t off_w = 0, off_b = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const snn_param *p = m->tensors[i].param;
        int isb = p->kind == SNN_PARAM_BUFFER;
        size_t off = isb ? off_b : off_w;
        if (isb) off_b += p->numel;
        else off_w += p->numel;
        if (isb != buffers) continue;
        double e = rel_l2(a + off, b + off, p->numel);
        if (e > worst || isnan(e)) {
            worst = e;
            *name = m->tensors[i].name;
        }
    }
    return worst;
}

static void one_model(const char *label, make_fn make, int T, int N, int mse, snn_dtype ct,
                      double tol) {
    uint64_t seed = snn_test_seed() ^ 0x5eed;
    snn_model *mc = NULL, *mg = NULL;
    CHECK(make(seed, &mc) == SNN_OK && make(seed, &mg) == SNN_OK);
    if (!mc || !mg) return;
    size_t F = snn_model_input_numel(mc), C = snn_model_output_numel(mc);
    size_t np = snn_model_num_params(mc), nbuf = snn_model_num_buffers(mc);
    float *x = malloc(sizeof(float) * F * (size_t)(T * N)), *dy = malloc(sizeof(float) * C * (size_t)(T * N));
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)N);
    float *p0 = malloc(sizeof(float) * np), *gc = malloc(sizeof(float) * np);
    float *outc = malloc(sizeof(float) * C * (size_t)(T * N)), *outg = malloc(sizeof(float) * C * (size_t)(T * N));
    snn_test_fill_uniform(x, F * (size_t)(T * N), 0.0f, 1.0f, &rng);
    for (int i = 0; i < N; i++) {
        float u;
        snn_test_fill_uniform(&u, 1, 0.0f, (float)C, &rng);
        lab[i] = (int32_t)u % (int32_t)C;
    }
    memcpy(p0, snn_model_params(mc), sizeof(float) * np);
    const float lr = 0.05f;
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    oo.lr = lr;
    oo.momentum = 0.9f;
    oo.weight_decay = 1e-3f;

    /* CPU step, under the CPU's emulation of the same precision (16-bit GEMM operands and
     * outputs, FP32 accumulation: src/precision/prec_exec.c) */
    snn_optimizer *opt = NULL;
    snn_precision *prec = NULL;
    snn_precision_config pc;
    const char *pname = ct == SNN_BF16 ? "bf16" : ct == SNN_F16 ? "fp16" : "fp32";
    CHECK(snn_precision_config_parse(pname, NULL, NULL, NULL, NULL, &pc) == SNN_OK);
    CHECK(snn_prepare_model_for_precision(mc, "cpu", &pc, &prec) == SNN_OK);
    CHECK(snn_model_plan(mc, T, N) == SNN_OK);
    CHECK(snn_optimizer_create_for_model(&oo, mc, &opt) == SNN_OK);
    const float *y = NULL;
    float loss_c = 0;
    int corr = 0, skipped = 0;
    CHECK(snn_model_forward(mc, x, 1, &y) == SNN_OK);
    CHECK((mse ? snn_loss_mse_rate(y, lab, T, N, (int)C, &loss_c, dy, &corr)
               : snn_loss_cross_entropy_mean_t(y, lab, T, N, (int)C, &loss_c, dy, &corr)) == SNN_OK);
    CHECK(snn_precision_backward(prec, dy, opt, lr, 0.0f, NULL, &skipped) == SNN_OK && !skipped);
    memcpy(gc, snn_model_grads(mc), sizeof(float) * np);

    /* GPU step */
    snn_cuda_model_opts go = {.T = T, .N = N, .compute = ct, .loss = mse ? SNN_CUDA_LOSS_MSE_RATE : SNN_CUDA_LOSS_CE};
    snn_cuda_model *gm = NULL;
    snn_status st = snn_cuda_model_create(g, mg, &go, &oo, &gm);
    CHECK_MSG(st == SNN_OK, "%s: create: %s", label, snn_last_error());
    if (st != SNN_OK) goto done;
    /* poison the host copies the GPU results land in */
    snn_test_poison(snn_model_grads(mg), np);
    CHECK(snn_cuda_model_train_step(gm, x, 1, lab, lr) == SNN_OK);
    double loss_g = 0;
    long cg = 0, steps = 0;
    CHECK(snn_cuda_model_take_stats(gm, &loss_g, &cg, &steps) == SNN_OK);
    CHECK(snn_cuda_model_download_grads(gm) == SNN_OK);
    {
        /* FP16: the device keeps the scaled gradients (the optimizer unscales them); the CPU
         * unscaled its copy in place. No overflow in one step, so the scale is unchanged. */
        float ls = 0.0f;
        CHECK(snn_cuda_model_loss_scale(gm, &ls) == SNN_OK && ls > 0.0f);
        CHECK_MSG(ct != SNN_F16 || ls == 65536.0f, "%s: loss scale %g after one step", label, (double)ls);
        for (size_t i = 0; i < np; i++) snn_model_grads(mg)[i] /= ls;
    }
    snn_test_poison(snn_model_params(mg), np);
    snn_test_poison(snn_model_buffers(mg), nbuf);
    CHECK(snn_cuda_model_download(gm) == SNN_OK);
    const char *wg = "-", *wp = "-", *wb = "-";
    double eg = worst_tensor(mc, snn_model_grads(mg), gc, 0, &wg);
    /* compare the updates, not the parameters (which are mostly p0) */
    float *dc = malloc(sizeof(float) * np), *dg = malloc(sizeof(float) * np);
    for (size_t i = 0; i < np; i++) {
        dc[i] = snn_model_params(mc)[i] - p0[i];
        dg[i] = snn_model_params(mg)[i] - p0[i];
    }
    double ep = worst_tensor(mc, dg, dc, 0, &wp);
    double eb = nbuf ? worst_tensor(mc, snn_model_buffers(mg), snn_model_buffers(mc), 1, &wb) : 0;
    double el = fabs(loss_g - loss_c) / fmax(fabs(loss_c), 1e-6);
    /* evaluation forward with the updated parameters */
    CHECK(snn_model_forward(mc, x, 0, &y) == SNN_OK);
    memcpy(outc, y, sizeof(float) * C * (size_t)(T * N));
    snn_test_poison(outg, C * (size_t)(T * N));
    CHECK(snn_cuda_model_forward(gm, x, 1, N, outg) == SNN_OK);
    double eo = rel_l2(outg, outc, C * (size_t)(T * N));
    printf("%-22s %-4s loss %.6f/%.6f (rel %.1e) steps %ld | grad %.2e (%s) | update %.2e (%s) | "
           "buffers %.2e (%s) | eval out %.2e | %.1f MiB\n",
           label, snn_dtype_name(ct), loss_g, (double)loss_c, el, steps, eg, wg, ep, wp, eb, wb, eo,
           (double)snn_cuda_model_device_bytes(gm) / 1048576.0);
    CHECK_MSG(steps == 1, "%s: %ld steps counted", label, steps);
    CHECK_MSG(el <= tol, "%s: loss differs (%g vs %g)", label, loss_g, (double)loss_c);
    CHECK_MSG(eg <= tol, "%s: gradient of %s differs (rel L2 %.3g)", label, wg, eg);
    CHECK_MSG(ep <= tol, "%s: update of %s differs (rel L2 %.3g)", label, wp, ep);
    CHECK_MSG(eb <= tol, "%s: buffer %s differs (rel L2 %.3g)", label, wb, eb);
    CHECK_MSG(eo <= tol, "%s: evaluation output differs (rel L2 %.3g)", label, eo);
    CHECK_MSG(labs(cg - corr) <= 1 + N / 50, "%s: correct count %ld vs %d", label, cg, corr);
    free(dc);
    free(dg);
    snn_cuda_model_destroy(gm);
done:
    snn_optimizer_free(opt);
    snn_precision_free(prec);
    snn_model_free(mc);
    snn_model_free(mg);
    free(x); free(dy); free(lab); free(p0); free(gc); free(outc); free(outg);
}

/* Refusals name the module. */
static void test_refusals(void) {
    snn_fcsnn_opts fo = {.in_features = 16, .hidden = 16, .depth = 1, .classes = 4, .tau = 2.0f};
    snn_model *m = NULL;
    CHECK(snn_fcsnn_create(&fo, 3, &m) == SNN_OK);
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_SGD);
    snn_cuda_model *gm = NULL;
    snn_cuda_model_opts go = {.T = 2, .N = 4, .compute = SNN_F8E5M2};
    CHECK(snn_cuda_model_create(g, m, &go, &oo, &gm) == SNN_E_UNSUPPORTED && gm == NULL);
    go.compute = SNN_F8E4M3; /* FP8 training without a recipe configuration: the defaults */
    CHECK(snn_cuda_model_create(g, m, &go, &oo, &gm) == SNN_OK && gm != NULL);
    snn_cuda_model_destroy(gm);
    gm = NULL;
    go.compute = SNN_F32;
    go.T = 0;
    CHECK(snn_cuda_model_create(g, m, &go, &oo, &gm) == SNN_E_INVALID && gm == NULL);
    go.T = 2;
    CHECK(snn_cuda_model_create(g, m, &go, &oo, &gm) == SNN_OK);
    float x[2 * 4 * 16] = {0};
    int32_t bad[4] = {0, 1, 9, 2};
    CHECK(snn_cuda_model_train_step(gm, x, 1, bad, 0.1f) == SNN_E_INVALID);
    snn_cuda_model_destroy(gm);
    snn_model_free(m);
}

int main(void) {
    rng = snn_test_seed();
    if (snn_cuda_create(0, 0, &g) != SNN_OK) {
        printf("no usable GPU (%s): skipped\n", snn_last_error());
        return 77;
    }
    test_refusals();
    one_model("fcsnn", make_fcsnn, 4, 24, 0, SNN_F32, 2e-2);
    one_model("fcsnn", make_fcsnn, 4, 24, 0, SNN_BF16, 2e-2);
    one_model("convsnn (mse)", make_convsnn, 4, 12, 1, SNN_F32, 2e-2);
    one_model("convsnn (mse)", make_convsnn, 4, 12, 1, SNN_BF16, 2e-2);
    one_model("spikformer-tiny", make_spikformer, 2, 6, 0, SNN_F32, 2e-2);
    one_model("spikformer-tiny", make_spikformer, 2, 6, 0, SNN_BF16, 2e-2);
    one_model("mlp (gelu)", make_mlp, 1, 40, 0, SNN_F32, 2e-2);
    one_model("mlp (gelu)", make_mlp, 1, 40, 0, SNN_BF16, 2e-2);
    one_model("layernorm mlp", make_ln, 3, 20, 0, SNN_F32, 2e-2);
    one_model("layernorm mlp", make_ln, 3, 20, 0, SNN_BF16, 2e-2);
    one_model("fcsnn", make_fcsnn, 4, 24, 0, SNN_F16, 2e-2);
    one_model("convsnn (mse)", make_convsnn, 4, 12, 1, SNN_F16, 2e-2);
    one_model("spikformer-tiny", make_spikformer, 2, 6, 0, SNN_F16, 2e-2);
    snn_cuda_destroy(g);
    return snn_test_finish("test_cuda_model");
}
