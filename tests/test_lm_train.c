/* The language-model trainer through its public API (snn/lm_train.h), on one process:
 *   - microbatch accumulation: global 8 as 1 x 8 and as 4 x 2 give the same weights after 3
 *     steps (1e-5 relative) and the same per-token losses: the loss is normalised by the
 *     global token count, not per microbatch;
 *   - per-step metrics: tokens = global * S, lm_loss = loss_sum / tokens, consumed samples;
 *   - a checkpoint at step 3 resumed by a new trainer continues bit-identically to step 5,
 *     and a wrong recipe is refused;
 *   - validation totals, and snn_lm_evaluate's padding (3 samples in batches of 2 equal
 *     sample-by-sample evaluation, padded rows count no tokens);
 *   - refusals that name the fields: global not divisible by micro, a step past the end;
 *   - the microbatch seam (lm_trainer_set_micro): a replacement sees every microbatch with
 *     grad_scale 1 / (global * S) and, delegating to the local one, changes nothing.
 * Fresh random token data every run (SNN_TEST_SEED replays it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "lm/lm_train_internal.h"
#include "snn/lm_train.h"
#include "snn/rng.h"

enum { V = 23, S = 8 };

static void write_split(const char *dir, const char *split, int rows, uint64_t seed, int stream) {
    int32_t *d = malloc(sizeof(int32_t) * (size_t)rows * (S + 1));
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

static snn_lm_training_config config(const char *data, const char *out, long micro) {
    snn_lm_training_config c = snn_lm_training_config_default(SNN_LM_MODEL_GPT);
    c.model.vocab_size = V;
    c.model.max_sequence_length = S;
    c.model.share_embeddings_and_output_weights = 1;
    /* RoPE: under learned positions the key bias has an exact gradient of 0, and AdamW turns
     * the rounding noise of any other summation order into updates (docs/lm.md) */
    c.model.position_embedding_type = SNN_LM_POS_ROPE;
    c.model.time_steps = 1;
    c.model.transformer.num_layers = 1;
    c.model.transformer.hidden_size = 16;
    c.model.transformer.num_attention_heads = 2;
    c.model.transformer.calculate_per_token_loss = 1;
    c.optimizer.use_distributed_optimizer = 1;
    c.optimizer.lr = 3e-3;
    c.optimizer.min_lr = 3e-4;
    c.optimizer.clip_grad = 0.5;
    c.sequence_length = S;
    c.micro_batch_size = micro;
    c.global_batch_size = 8;
    c.train_steps = 5;
    c.log_interval = 1;
    c.lr_warmup_steps = 1;
    c.eval_interval = 5;
    c.eval_steps = 1;
    snprintf(c.dataset_kwargs.path, sizeof c.dataset_kwargs.path, "%s", data);
    snprintf(c.checkpoint_dir, sizeof c.checkpoint_dir, "%s", out);
    return c;
}

/* max |a - b| / max |b| over the whole parameter vector */
static double rel_all(const float *a, const float *b, size_t n) {
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d)) d = e;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return d / m;
}

typedef struct counting {
    lm_local_micro *inner;
    int calls, bad_scale;
} counting;

static snn_status counting_micro(void *ctx, const int32_t *ids, const int32_t *labels, const float *mask, int n,
                                 float grad_scale, int backward, double *loss_sum, double *tokens) {
    counting *c = ctx;
    c->calls++;
    if (grad_scale != (float)(1.0 / (8.0 * S)) || mask || !backward) c->bad_scale++;
    return lm_micro_local(c->inner, ids, labels, mask, n, grad_scale, backward, loss_sum, tokens);
}

static size_t np_of(snn_lm_trainer *t) { return snn_model_num_params(snn_lm_trainer_model(t)); }
static float *params_of(snn_lm_trainer *t) { return snn_model_params(snn_lm_trainer_model(t)); }

int main(void) {
    uint64_t seed = snn_test_seed();
    char root[] = "/tmp/snn-test-lm-train-XXXXXX";
    if (!mkdtemp(root)) return 1;
    char data[4200], o1[4200], o2[4200], o3[4200];
    snprintf(data, sizeof data, "%s/data", root);
    snprintf(o1, sizeof o1, "%s/o1", root);
    snprintf(o2, sizeof o2, "%s/o2", root);
    snprintf(o3, sizeof o3, "%s/o3", root);
    mkdir(data, 0777);
    write_split(data, "train", 24, seed, 1);
    write_split(data, "valid", 8, seed, 2);
    snn_comm *self;
    CHECK(snn_comm_self(&self) == SNN_OK);

    /* 1 x 8 against 4 x 2 */
    snn_lm_training_config c8 = config(data, o1, 8), c2 = config(data, o2, 2);
    snn_lm_trainer *a, *b;
    CHECK(snn_lm_trainer_create(&c8, self, &a) == SNN_OK);
    CHECK(snn_lm_trainer_create(&c2, self, &b) == SNN_OK);
    CHECK(snn_lm_trainer_info(a)->num_microbatches == 1 && snn_lm_trainer_info(b)->num_microbatches == 4);
    CHECK(snn_lm_trainer_info(b)->optimizer_state_bytes == 8 * np_of(b));
    for (int s = 0; s < 3; s++) {
        snn_lm_step_metrics ma, mb;
        memset(&mb, 0xff, sizeof mb);
        CHECK(snn_lm_trainer_step(a, &ma) == SNN_OK);
        CHECK(snn_lm_trainer_step(b, &mb) == SNN_OK);
        CHECK(mb.optimizer_step == s + 1 && mb.consumed_samples == 8L * (s + 1));
        CHECK(mb.tokens == 8.0 * S && fabs(mb.lm_loss - mb.loss_sum / mb.tokens) <= 1e-12 * mb.lm_loss);
        CHECK_MSG(fabs(ma.lm_loss - mb.lm_loss) <= 1e-6 * ma.lm_loss, "step %d: %.9g vs %.9g", s, ma.lm_loss, mb.lm_loss);
        CHECK(fabs(ma.grad_norm - mb.grad_norm) <= 1e-5 * ma.grad_norm);
        CHECK(mb.update_successful == 1 && isfinite(mb.grad_norm));
    }
    double e = rel_all(params_of(b), params_of(a), np_of(a));
    CHECK_MSG(e <= 1e-5, "microbatch accumulation: %.3g", e);
    printf("microbatch accumulation, 1 x 8 vs 4 x 2 after 3 steps: %.3g relative\n", e);
    /* resume: b saves at 3, a fresh trainer continues; both to 5 */
    char dir[4200];
    CHECK(snn_lm_trainer_save(b, dir, sizeof dir, NULL) == SNN_OK);
    CHECK(strstr(dir, "step_0000003") != NULL);
    CHECK(snn_lm_trainer_save(b, NULL, 0, NULL) == SNN_E_INVALID); /* exists already */
    snn_lm_training_config cr = config(data, o3, 2);
    snprintf(cr.resume, sizeof cr.resume, "%s", dir);
    snn_lm_trainer *r;
    CHECK(snn_lm_trainer_create(&cr, self, &r) == SNN_OK);
    CHECK(r && snn_lm_trainer_step_count(r) == 3 && snn_lm_trainer_info(r)->start_step == 3);
    for (int s = 0; s < 2; s++) {
        snn_lm_step_metrics mb, mr;
        CHECK(snn_lm_trainer_step(b, &mb) == SNN_OK);
        CHECK(r && snn_lm_trainer_step(r, &mr) == SNN_OK);
        CHECK(mb.lm_loss == mr.lm_loss && mb.grad_norm == mr.grad_norm && mr.consumed_samples == 8L * (4 + s));
    }
    CHECK(r && memcmp(params_of(b), params_of(r), np_of(b) * sizeof(float)) == 0);
    CHECK(snn_lm_trainer_step(b, NULL) == SNN_E_INVALID); /* past train_steps */
    /* validation: eval_steps * global samples of S tokens */
    double vl, vc;
    CHECK(snn_lm_trainer_validate(b, &vl, &vc) == SNN_OK);
    CHECK(vc == 8.0 * S && vl > 0 && isfinite(vl));
    /* a wrong recipe */
    snn_lm_training_config cw = config(data, o3, 2);
    cw.model.transformer.hidden_size = 32;
    snprintf(cw.resume, sizeof cw.resume, "%s", dir);
    snn_lm_trainer *w = NULL;
    CHECK(snn_lm_trainer_create(&cw, self, &w) == SNN_E_INVALID && !w);
    CHECK(strstr(snn_last_error(), "recipe") != NULL);
    /* topology */
    snn_lm_training_config ct = config(data, o3, 3);
    CHECK(snn_lm_trainer_create(&ct, self, &w) == SNN_E_INVALID && !w);
    CHECK_MSG(strstr(snn_last_error(), "global_batch_size") && strstr(snn_last_error(), "micro_batch_size"), "%s",
              snn_last_error());
    /* the seam */
    snn_lm_training_config cs = config(data, o3, 2);
    snn_lm_trainer *p = NULL, *q = NULL;
    CHECK(snn_lm_trainer_create(&cs, self, &p) == SNN_OK && snn_lm_trainer_create(&cs, self, &q) == SNN_OK);
    if (p && q) {
        counting cnt = {&p->local, 0, 0};
        CHECK(lm_trainer_set_micro(p, counting_micro, &cnt) == SNN_OK);
        for (int k = 0; k < 2; k++) CHECK(snn_lm_trainer_step(p, NULL) == SNN_OK && snn_lm_trainer_step(q, NULL) == SNN_OK);
        CHECK(cnt.calls == 8 && cnt.bad_scale == 0);
        CHECK(memcmp(params_of(p), params_of(q), np_of(p) * sizeof(float)) == 0);
    }
    snn_lm_trainer_free(p);
    snn_lm_trainer_free(q);
    /* evaluate: padding */
    snn_model *m = snn_lm_trainer_model(b);
    snn_gpt_opts o;
    CHECK(snn_gpt_opts_of(m, &o) == SNN_OK);
    snn_token_dataset *ds;
    CHECK(snn_token_dataset_open(data, "valid", V, &ds) == SNN_OK);
    snn_lm_eval_scratch *s2, *s1;
    CHECK(snn_lm_eval_scratch_create(1, 2, S, &s2) == SNN_OK && snn_lm_eval_scratch_create(1, 1, S, &s1) == SNN_OK);
    double l3, c3, l1 = 0, c1 = 0;
    CHECK(snn_model_plan(m, 1, 2) == SNN_OK);
    CHECK(snn_lm_evaluate(m, &o, ds, 2, 1, 3, s2, &l3, &c3) == SNN_OK);
    CHECK(snn_model_plan(m, 1, 1) == SNN_OK);
    for (int i = 1; i <= 3; i++) {
        double l, cc;
        CHECK(snn_lm_evaluate(m, &o, ds, 1, i, 1, s1, &l, &cc) == SNN_OK);
        l1 += l, c1 += cc;
    }
    CHECK(c3 == 3.0 * S && c1 == c3);
    CHECK_MSG(fabs(l3 - l1) <= 1e-5 * l1, "padded evaluation %.9g vs %.9g", l3, l1);
    CHECK(snn_lm_evaluate(m, &o, ds, 2, 0, 2, s1, &l3, &c3) == SNN_E_INVALID); /* scratch of another shape */
    snn_lm_eval_scratch_free(s1);
    snn_lm_eval_scratch_free(s2);
    snn_token_dataset_free(ds);
    snn_lm_trainer_free(a);
    snn_lm_trainer_free(b);
    snn_lm_trainer_free(r);
    snn_comm_free(self);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return snn_test_finish("test_lm_train");
}
