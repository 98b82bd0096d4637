/* The language-model trainer on CUDA (snn_lm_trainer_create_on(..., "cuda", ...)) against the
 * same run on the CPU, through the public training API (include/snn/lm_train.h). Exit 77
 * (skip) without a GPU. Fresh random token data every run (SNN_TEST_SEED replays it).
 *
 * For a tiny gpt (RoPE, tied, LayerNorm, gelu) and a tiny spikelm (T 2, RoPE, swiglu):
 *   - 4 AdamW steps of global 8 as 2 microbatches of 4 (gradient accumulation on the device),
 *     clip 0.5, from the same seed on cpu and cuda: per-step lm_loss, grad_norm and token
 *     count, the validation loss, and the parameters after the last step;
 *   - a checkpoint written by the cuda trainer at step 2 and resumed by a new cuda trainer
 *     continues to step 4 identically to the uninterrupted cuda run (losses, norms, every
 *     parameter and the AdamW state bit for bit: the CUDA table's LM kernels are
 *     deterministic and the same shapes take the same GEMM algorithms), and the same
 *     checkpoint resumes on the cpu (the format is the CPU's).
 *
 * Bounds, cpu vs cuda (u = 2^-24; tests/cuda/test_cuda_table_lm.c bounds one step of these
 * models: logits and gradients within 1e-4 of max|ref|, parameters after one AdamW step
 * within 1e-6 + 1e-3 lr for all but 0.1 %):
 *   loss             gpt: 1e-4 relative per step (sums of per-token losses whose logits
 *                    differ by <= 1e-4 of their scale, over 4 steps of AdamW whose updates
 *                    agree to 1e-3 lr); spikelm: 2e-2 (a bi-spike at a rounding tie fires on
 *                    one device only and changes what follows; test_cuda_table_lm allows 1 %
 *                    of the parameters to differ after one step);
 *   grad norm        10x the loss bound: the norm also sees the 0.1 % of elements whose AdamW
 *                    step took another sign (each moved by up to 2 lr), through the next
 *                    gradients, where the loss averages them away;
 *   parameters       hard: every element within 4 steps x 8 lr (each run's AdamW update moves
 *                    an element by at most lr (|m^| / sqrt(v^) + wd |p|), |m^| / sqrt(v^) <=
 *                    (1 - b1) / sqrt(1 - b2) ~ 3.2 with the default betas, and the two runs
 *                    may move it apart); and the update
 *                    itself, ||D_cuda - D_cpu|| / ||D_cpu|| with D = params - initial params,
 *                    within 2e-2 (gpt: elements with a near-zero gradient can take an AdamW
 *                    sign of their own, up to 0.1 % x lr each, sqrt(1e-3) ~ 3e-2 of the
 *                    update in the worst case, typically far less) or 1e-1 (spikelm);
 *   validation loss  the loss bound of the model;
 *   bf16, fp16 gpt,  (bf16: 2 microbatches; fp16: 1, the fused step with its loss scaler;
 *   bf16 spikelm     spikelm's bi-spike writes its output 16-bit for its Linear on the GPU)
 *                    loss 1e-2, grad norm 1e-1, update 2e-1: both devices round the same FP32
 *                    values to the same 16-bit operands, but a GEMM output that differs by one
 *                    FP32 ulp (another summation order) can round to a neighbouring 16-bit
 *                    value (2^-9 bf16, 2^-11 fp16 relative) and that feeds the next layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "harness.h"
#include "lm/lm_train_internal.h"
#include "snn/comm.h"
#include "snn/lm_train.h"
#include "snn/rng.h"
#include "snn/tokens.h"

/* the device under test (-DSNN_TEST_LM_DEVICE='"cuda:1"'; '"cpu"' runs the test's own logic
 * on a machine without a GPU, every bound then holding at 0) */
#ifndef SNN_TEST_LM_DEVICE
#define SNN_TEST_LM_DEVICE "cuda"
#endif
static const char *DEV = SNN_TEST_LM_DEVICE;

enum { V = 29, S = 12, STEPS = 4 };
static const double LR = 3e-3;

static void write_split(const char *dir, const char *split, int rows, uint64_t seed, int stream) {
    int32_t *d = malloc(sizeof(int32_t) * (size_t)rows * (S + 1));
    if (!d) exit(2);
    for (int r = 0; r < rows; r++) {
        /* a learnable pattern plus noise */
        int start = (int)(snn_rng_uniform(seed, (uint64_t)stream, (uint64_t)r * 31) * V) % V;
        int step = 1 + (int)(snn_rng_uniform(seed, (uint64_t)stream, (uint64_t)r * 31 + 1) * 3) % 3;
        for (int k = 0; k <= S; k++) {
            int noise = snn_rng_uniform(seed, (uint64_t)stream + 7, (uint64_t)(r * (S + 1) + k)) < 0.2f
                            ? (int)(snn_rng_uniform(seed, (uint64_t)stream + 9, (uint64_t)(r * (S + 1) + k)) * V) % V
                            : 0;
            d[r * (S + 1) + k] = (start + step * k + noise) % V;
        }
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.npy", dir, split);
    CHECK(snn_npy_write(p, SNN_NPY_INT32, rows, S + 1, d) == SNN_OK);
    free(d);
}

/* precision: 0 fp32, 1 bf16, 2 fp16 (one microbatch per step: its step is fused) */
static int g_prec;

static snn_lm_training_config config(snn_lm_model_type type, const char *data, const char *out) {
    snn_lm_training_config c = snn_lm_training_config_default(type);
    if (g_prec) {
        snn_lm_dtype d = g_prec == 1 ? SNN_LM_DTYPE_BFLOAT16 : SNN_LM_DTYPE_FLOAT16;
        c.model.transformer.bf16 = c.optimizer.bf16 = g_prec == 1;
        c.model.transformer.fp16 = c.optimizer.fp16 = g_prec == 2;
        c.model.transformer.params_dtype = c.optimizer.params_dtype = d;
    }
    c.model.vocab_size = V;
    c.model.max_sequence_length = S;
    c.model.share_embeddings_and_output_weights = 1;
    c.model.position_embedding_type = SNN_LM_POS_ROPE;
    c.model.time_steps = type == SNN_LM_MODEL_SPIKELM ? 2 : 1;
    c.model.transformer.num_layers = 2;
    c.model.transformer.hidden_size = 32;
    c.model.transformer.num_attention_heads = 4;
    if (type == SNN_LM_MODEL_SPIKELM) c.model.transformer.activation = SNN_LM_ACT_SWIGLU;
    c.model.transformer.calculate_per_token_loss = 1;
    c.optimizer.use_distributed_optimizer = 1;
    c.optimizer.lr = LR;
    c.optimizer.min_lr = LR / 10;
    c.optimizer.clip_grad = 0.5;
    c.sequence_length = S;
    c.micro_batch_size = g_prec == 2 ? 8 : 4;
    c.global_batch_size = 8;
    c.train_steps = STEPS;
    c.log_interval = 1;
    c.lr_warmup_steps = 1;
    c.eval_interval = STEPS;
    c.eval_steps = 1;
    c.seed = 4321;
    snprintf(c.dataset_kwargs.path, sizeof c.dataset_kwargs.path, "%s", data);
    snprintf(c.checkpoint_dir, sizeof c.checkpoint_dir, "%s", out);
    return c;
}

static size_t np_of(snn_lm_trainer *t) { return snn_model_num_params(snn_lm_trainer_model(t)); }
/* a host copy of the parameters (a device model's view is refreshed on every call) */
static float *params_copy(snn_lm_trainer *t) {
    size_t n = np_of(t);
    float *p = malloc(n * sizeof(float));
    if (!p) exit(2);
    memcpy(p, snn_model_params(snn_lm_trainer_model(t)), n * sizeof(float));
    return p;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static void run_model(snn_lm_model_type type, const char *name, const char *data, const char *root, snn_comm *self) {
    const int spiking = type == SNN_LM_MODEL_SPIKELM;
    double tol_loss = spiking ? 2e-2 : 1e-4, tol_update = spiking ? 1e-1 : 2e-2;
    if (g_prec) tol_loss = 1e-2, tol_update = 2e-1; /* 16-bit bounds: see the header */
    const double tol_norm = 10 * tol_loss;
    char oc[4200], og[4200], orr[4200], ocr[4200];
    snprintf(oc, sizeof oc, "%s/%s.cpu", root, name);
    snprintf(og, sizeof og, "%s/%s.cuda", root, name);
    snprintf(orr, sizeof orr, "%s/%s.resumed", root, name);
    snprintf(ocr, sizeof ocr, "%s/%s.cpu-resumed", root, name);
    snn_lm_training_config cc = config(type, data, oc), cg = config(type, data, og);
    snn_lm_trainer *c = NULL, *g = NULL;
    CHECK(snn_lm_trainer_create_on(&cc, self, "cpu", &c) == SNN_OK);
    snn_status st = snn_lm_trainer_create_on(&cg, self, DEV, &g);
    CHECK_MSG(st == SNN_OK, "%s on cuda: %s", name, snn_last_error());
    if (!c || !g) {
        snn_lm_trainer_free(c);
        snn_lm_trainer_free(g);
        return;
    }
    CHECK(strcmp(snn_model_device(snn_lm_trainer_model(g)), strncmp(DEV, "cuda", 4) ? "cpu" : "cuda") == 0);
    CHECK(np_of(c) == np_of(g) && snn_lm_trainer_info(g)->num_microbatches == (g_prec == 2 ? 1 : 2));
    const size_t n = np_of(c);
    float *init = params_copy(c), *ginit = params_copy(g);
    CHECK_MSG(memcmp(init, ginit, n * sizeof(float)) == 0, "%s: the placed model's weights differ from the seed's", name);
    double worst_loss = 0, worst_norm = 0;
    char ckdir[SNN_LM_PATH_MAX] = "";
    for (int s = 0; s < STEPS; s++) {
        snn_lm_step_metrics mc, mg;
        CHECK(snn_lm_trainer_step(c, &mc) == SNN_OK);
        st = snn_lm_trainer_step(g, &mg);
        CHECK_MSG(st == SNN_OK, "%s cuda step %d: %s", name, s + 1, snn_last_error());
        CHECK(mg.tokens == 8.0 * S && mg.optimizer_step == s + 1 && mg.update_successful == 1);
        CHECK_MSG(rel(mg.lm_loss, mc.lm_loss) <= tol_loss, "%s step %d: loss cuda %.9g cpu %.9g", name, s + 1, mg.lm_loss,
                  mc.lm_loss);
        CHECK_MSG(rel(mg.grad_norm, mc.grad_norm) <= tol_norm, "%s step %d: grad norm cuda %.9g cpu %.9g", name, s + 1,
                  mg.grad_norm, mc.grad_norm);
        worst_loss = fmax(worst_loss, rel(mg.lm_loss, mc.lm_loss));
        worst_norm = fmax(worst_norm, rel(mg.grad_norm, mc.grad_norm));
        if (s + 1 == 2) CHECK(snn_lm_trainer_save(g, ckdir, sizeof ckdir, NULL) == SNN_OK);
    }
    float *pc = params_copy(c), *pg = params_copy(g);
    double hard = 0, dd = 0, du = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)pg[i] - (double)pc[i]);
        hard = fmax(hard, e);
        double uc = (double)pc[i] - init[i], ug = (double)pg[i] - init[i];
        dd += (ug - uc) * (ug - uc);
        du += uc * uc;
    }
    double upd = sqrt(dd) / fmax(sqrt(du), 1e-30);
    CHECK_MSG(hard <= STEPS * 8 * LR, "%s: a parameter differs by %.3g (bound %.3g)", name, hard, STEPS * 8 * LR);
    CHECK_MSG(upd <= tol_update, "%s: the update differs by %.3g relative (bound %.3g)", name, upd, tol_update);
    double vlc, vcc, vlg, vcg;
    CHECK(snn_lm_trainer_validate(c, &vlc, &vcc) == SNN_OK);
    CHECK(snn_lm_trainer_validate(g, &vlg, &vcg) == SNN_OK);
    CHECK(vcc == vcg && vcg == 8.0 * S);
    CHECK_MSG(rel(vlg / vcg, vlc / vcc) <= tol_loss, "%s validation: cuda %.9g cpu %.9g", name, vlg / vcg, vlc / vcc);
    printf("%s: cpu vs %s over %d steps: loss %.3g, grad norm %.3g relative (worst step), parameters %.3g max, update "
           "%.3g relative, validation %.3g\n",
           name, DEV, STEPS, worst_loss, worst_norm, hard, upd, rel(vlg / vcg, vlc / vcc));

    /* resume the cuda checkpoint of step 2 on cuda: identical to the uninterrupted cuda run */
    snn_lm_training_config cr = config(type, data, orr);
    snprintf(cr.resume, sizeof cr.resume, "%s", ckdir);
    snn_lm_trainer *r = NULL;
    st = snn_lm_trainer_create_on(&cr, self, DEV, &r);
    CHECK_MSG(st == SNN_OK && r, "%s: resuming %s on cuda: %s", name, ckdir, snn_last_error());
    /* the uninterrupted reference: a second cuda run to step 4 (g went on past the save) */
    snn_lm_training_config cg2 = config(type, data, og);
    snn_lm_trainer *g2 = NULL;
    CHECK(snn_lm_trainer_create_on(&cg2, self, DEV, &g2) == SNN_OK);
    if (r && g2) {
        CHECK(snn_lm_trainer_step_count(r) == 2 && snn_lm_trainer_info(r)->start_step == 2);
        snn_lm_step_metrics m2[STEPS], mr[STEPS];
        for (int s = 0; s < STEPS; s++) CHECK(snn_lm_trainer_step(g2, &m2[s]) == SNN_OK);
        for (int s = 2; s < STEPS; s++) {
            CHECK(snn_lm_trainer_step(r, &mr[s]) == SNN_OK);
            CHECK_MSG(mr[s].lm_loss == m2[s].lm_loss && mr[s].grad_norm == m2[s].grad_norm &&
                          mr[s].consumed_samples == 8L * (s + 1),
                      "%s resumed step %d: loss %.9g vs %.9g, norm %.9g vs %.9g", name, s + 1, mr[s].lm_loss, m2[s].lm_loss,
                      mr[s].grad_norm, m2[s].grad_norm);
        }
        float *p2 = params_copy(g2), *pr = params_copy(r);
        CHECK_MSG(memcmp(p2, pr, n * sizeof(float)) == 0, "%s: the resumed cuda run's parameters differ", name);
        /* and the uninterrupted run g, which saved along the way, took the same steps */
        CHECK_MSG(memcmp(p2, pg, n * sizeof(float)) == 0, "%s: two cuda runs from one seed differ", name);
        free(p2);
        free(pr);
        /* the AdamW state (host copies of the device optimizer's) and its step count */
        snn_optimizer *o2 = snn_dist_optim_local(g2->opt), *orr_ = snn_dist_optim_local(r->opt);
        CHECK(snn_optimizer_steps(o2) == STEPS && snn_optimizer_steps(orr_) == STEPS);
        for (size_t k = 0; k < snn_optimizer_num_states(o2); k++) {
            snn_optim_state a, b;
            CHECK(snn_optimizer_state(o2, k, &a) == SNN_OK && snn_optimizer_state(orr_, k, &b) == SNN_OK);
            CHECK_MSG(a.numel == n && b.numel == n && memcmp(a.data, b.data, n * sizeof(float)) == 0,
                      "%s: the resumed run's %s differs", name, a.name);
        }
    }
    snn_lm_trainer_free(g2);
    snn_lm_trainer_free(r);
    /* the cuda checkpoint resumes on the cpu too (the CPU's format) */
    snn_lm_training_config ccr = config(type, data, ocr);
    snprintf(ccr.resume, sizeof ccr.resume, "%s", ckdir);
    snn_lm_trainer *rc = NULL;
    CHECK(snn_lm_trainer_create_on(&ccr, self, "cpu", &rc) == SNN_OK && rc && snn_lm_trainer_step_count(rc) == 2);
    if (rc) CHECK(snn_lm_trainer_step(rc, NULL) == SNN_OK);
    snn_lm_trainer_free(rc);
    free(init), free(ginit), free(pc), free(pg);
    snn_lm_trainer_free(c);
    snn_lm_trainer_free(g);
}

int main(void) {
    snn_backend *probe = NULL;
    int index = !strncmp(DEV, "cuda:", 5) ? atoi(DEV + 5) : 0;
    if (strcmp(DEV, "cpu") && snn_backend_cuda_create(index, &probe) != SNN_OK) {
        fprintf(stderr, "test_cuda_lm_train: skipped, no usable GPU: %s\n", snn_last_error());
        return 77;
    }
    if (probe) snn_backend_cuda_destroy(probe);
    uint64_t seed = snn_test_seed();
    char root[] = "/tmp/snn-test-cuda-lm-train-XXXXXX";
    if (!mkdtemp(root)) return 1;
    char data[4200];
    snprintf(data, sizeof data, "%s/data", root);
    mkdir(data, 0777);
    write_split(data, "train", 40, seed, 1);
    write_split(data, "valid", 8, seed, 2);
    snn_comm *self;
    CHECK(snn_comm_self(&self) == SNN_OK);
    /* a device run is one process: model parallel sizes are refused, not run wrong */
    {
        char o[4200];
        snprintf(o, sizeof o, "%s/refused", root);
        snn_lm_training_config ct = config(SNN_LM_MODEL_GPT, data, o);
        ct.model.transformer.context_parallel_size = 2;
        snn_lm_trainer *w = NULL;
        CHECK(snn_lm_trainer_create_on(&ct, self, DEV, &w) != SNN_OK && !w);
    }
    run_model(SNN_LM_MODEL_GPT, "gpt", data, root, self);
    run_model(SNN_LM_MODEL_SPIKELM, "spikelm", data, root, self);
    g_prec = 1;
    run_model(SNN_LM_MODEL_GPT, "gpt-bf16", data, root, self);
    /* the bi-spike's output stored 16-bit before its 16-bit Linear on the GPU */
    run_model(SNN_LM_MODEL_SPIKELM, "spikelm-bf16", data, root, self);
    g_prec = 2; /* the fused backward + step of snn_precision_backward, its loss scaler in the checkpoint */
    run_model(SNN_LM_MODEL_GPT, "gpt-fp16", data, root, self);
    snn_comm_free(self);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", root);
    return snn_test_finish("test_cuda_lm_train");
}
