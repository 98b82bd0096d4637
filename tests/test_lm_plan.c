/* The memory planner: SpikingJelly's three test cases (and the other planner tests of its
 * suite), estimates worked out by hand below for the same small models, the PP > 1
 * activation factor and the precision rules, the validation refusals, the "No
 * topology ..." messages with their numbers, topologies refused by snn's own config
 * validation, and that the input config is never written.
 *
 * The reference's test model is a 4-layer transformer with hidden 128, 4 heads in 2 query
 * groups, kv_channels 32, a gated MLP of width 512, RMSNorm, BF16, vocabulary 1024,
 * context 512, T = 4, sequence 128, micro batch 1, global batch 4. snn's SpikeLM requires
 * LayerNorm, so the cases here use LayerNorm (two norm parameters per channel instead of
 * one); the hand computations below show that every outcome stays the reference's (for
 * the 18.25 MiB case the RMSNorm numbers are given next to the LayerNorm ones). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "snn/error.h"
#include "snn/lm_config.h"
#include "snn/lm_plan.h"

#define MIB (1024.0 * 1024.0)

static snn_lm_training_config reference_config(void) {
    snn_lm_training_config c = snn_lm_training_config_default(SNN_LM_MODEL_SPIKELM);
    snn_lm_transformer_config *t = &c.model.transformer;
    t->num_layers = 4; t->hidden_size = 128; t->num_attention_heads = 4; t->num_query_groups = 2;
    t->kv_channels = 32; t->ffn_hidden_size = 512; t->activation = SNN_LM_ACT_SWIGLU;
    t->normalization = SNN_LM_NORM_LAYERNORM; t->calculate_per_token_loss = 1;
    t->bf16 = 1; t->params_dtype = SNN_LM_DTYPE_BFLOAT16; t->pipeline_dtype = SNN_LM_DTYPE_BFLOAT16;
    c.model.vocab_size = 1024; c.model.max_sequence_length = 512; c.model.time_steps = 4;
    c.optimizer.use_distributed_optimizer = 1; c.optimizer.bf16 = 1; c.optimizer.params_dtype = SNN_LM_DTYPE_BFLOAT16;
    c.optimizer.lr = 1e-4; c.optimizer.min_lr = 1e-5;
    strcpy(c.dataset_kwargs.path, "data");
    c.sequence_length = 128; c.micro_batch_size = 1; c.global_batch_size = 4; c.train_steps = 10;
    return c;
}

/* The reference's fallback case: sequence 127, hidden 120, 3 heads (3 groups), kv 40, ffn 480. */
static snn_lm_training_config tiny_budget_config(void) {
    snn_lm_training_config c = reference_config();
    snn_lm_transformer_config *t = &c.model.transformer;
    c.sequence_length = 127;
    t->hidden_size = 120; t->ffn_hidden_size = 480; t->num_attention_heads = 3; t->num_query_groups = 3;
    t->kv_channels = 40;
    return c;
}

static int same(const snn_lm_training_config *a, const snn_lm_training_config *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(fabs(b), 1.0); }

static int msg_is(const char *want) {
    const char *m = snn_last_error();
    if (strcmp(m, want) == 0) return 1;
    fprintf(stderr, "  message: \"%s\"\n  wanted:  \"%s\"\n", m, want);
    return 0;
}

/* Records are compared byte for byte, so the reference copies are made with memcpy
 * (a struct assignment need not copy padding). */
#define COPY(dst, src) memcpy(&(dst), &(src), sizeof(dst))

static void reference_world2(void) {
    snn_lm_training_config in = reference_config(), keep, out;
    COPY(keep, in);
    memset(&out, 0xa5, sizeof out);
    snn_lm_plan_report r;
    /* Hand count for this model (h 128, q = 32*4 = 128, groups/heads = 1/2, f 512 gated):
     * attention 2*128*128*1.5 = 49152, mlp 2*128*512*1.5 = 196608 -> 245760 sharded per layer;
     * norms 2*128*2 = 512 per layer, final 256; embedding = output = 128*1024 = 131072; rope: no
     * position table. World 2: TP 1 or 2 (4 heads, 2 groups), PP 1 or 2, CP 1 or 2 -> 4 topologies.
     * Throughput: PP 1, CP 1, TP 1 (DP 2): bytes/param 6 + 12/2 = 12;
     * parameters (245760*4 + 512*4 + 131072 + 256 + 131072) * 12 = 1247488 * 12 = 14969856;
     * activations s*b*h = 128*4*128 = 65536: 65536*(10+24)*4 + 8*512 + 65536 = 8982528,
     * + 2*(512*1024 + 65536) = 10162176, * 1.05 = 10670284.8 (BF16: no doubling). */
    CHECK(snn_lm_plan_training(&in, 2, (uint64_t)8 << 30, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_OK);
    CHECK(same(&in, &keep));
    const snn_lm_transformer_config *t = &out.model.transformer;
    CHECK(t->tensor_model_parallel_size == 1 && t->pipeline_model_parallel_size == 1 && t->context_parallel_size == 1);
    CHECK(r.data_parallel_size == 2 && r.num_microbatches == 2);
    CHECK(t->recompute_granularity == SNN_LM_RECOMPUTE_NONE && out.use_snn_memopt == 0 && !r.selective_recompute);
    CHECK(t->sequence_parallel == 0);
    CHECK(near(r.parameter_bytes, 14969856.0));
    CHECK_MSG(near(r.activation_bytes, 10670284.8), "%.17g", r.activation_bytes);
    CHECK(near(r.estimate_bytes, 14969856.0 + 10670284.8));
    CHECK(r.budget_bytes == 8.0 * 1024 * MIB * 0.9);
    CHECK(r.topologies == 4 && r.estimates == 4 && r.feasible == 4 && r.refused_by_validation == 0);
    CHECK(snn_lm_training_config_validate(&out) == SNN_OK);
    /* everything but the planned fields is the input's */
    snn_lm_training_config back = out;
    back.model.transformer = in.model.transformer;
    back.use_snn_memopt = in.use_snn_memopt;
    CHECK(same(&back, &keep));

    /* Objective memory: the smallest estimate, memopt on, still no Megatron recompute.
     * TP 2 (DP 1): bytes/param 6 + 12 = 18; parameters (245760*4/2 + 2048 + 65536 + 256 +
     * 65536) * 18 = 624896 * 18 = 11248128; activations 65536*(10+12)*4 + 4096 + 65536 =
     * 5836800, + 2*(262144 + 65536) = 6492160, * 1.05 = 6816768. (PP 2 and CP 2 hold more.) */
    COPY(in, keep);
    CHECK(snn_lm_plan_training(&in, 2, (uint64_t)8 << 30, SNN_LM_PLAN_MEMORY, 0.9, &out, &r) == SNN_OK);
    CHECK(same(&in, &keep));
    CHECK(out.use_snn_memopt == 1 && t->recompute_granularity == SNN_LM_RECOMPUTE_NONE);
    CHECK(t->recompute_modules == SNN_LM_RECOMPUTE_CORE_ATTN); /* inert: Megatron Core's default */
    CHECK(t->tensor_model_parallel_size == 2 && t->pipeline_model_parallel_size == 1 && t->context_parallel_size == 1);
    CHECK(t->sequence_parallel == 1);
    CHECK(near(r.parameter_bytes, 11248128.0) && near(r.activation_bytes, 6816768.0));

    /* A requested memopt is kept (world 1, throughput). */
    COPY(in, keep);
    in.use_snn_memopt = 1;
    CHECK(snn_lm_plan_training(&in, 1, (uint64_t)8 << 30, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_OK);
    CHECK(out.use_snn_memopt == 1 && t->recompute_granularity == SNN_LM_RECOMPUTE_NONE && r.topologies == 1);

    /* A recompute policy of the input's own is replaced (full -> none; method and layers cleared). */
    COPY(in, keep);
    in.model.transformer.recompute_granularity = SNN_LM_RECOMPUTE_FULL;
    in.model.transformer.recompute_method = SNN_LM_RECOMPUTE_METHOD_BLOCK;
    in.model.transformer.recompute_num_layers = 2;
    in.model.transformer.recompute_modules = SNN_LM_RECOMPUTE_MLP;
    CHECK(snn_lm_plan_training(&in, 2, (uint64_t)8 << 30, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_OK);
    CHECK(t->recompute_granularity == SNN_LM_RECOMPUTE_NONE && t->recompute_method == SNN_LM_RECOMPUTE_METHOD_NONE &&
          t->recompute_num_layers == 0 && t->recompute_modules == SNN_LM_RECOMPUTE_CORE_ATTN);

    /* out may be the input itself */
    COPY(in, keep);
    CHECK(snn_lm_plan_training(&in, 2, (uint64_t)8 << 30, SNN_LM_PLAN_MEMORY, 0.9, &in, &r) == SNN_OK);
    CHECK(in.model.transformer.tensor_model_parallel_size == 2 && in.use_snn_memopt == 1);
}

static void tiny_budget(void) {
    /* h 120, q 120, 3 heads = 3 groups, f 480 gated, LayerNorm: attention 2*120*120*2 = 57600,
     * mlp 2*120*480*1.5 = 172800 -> 230400 per layer; norms 480, final 240; embedding 122880.
     * World 2: TP 1 only (3 heads); CP 2 needs 127 % 4 == 0: no. Topologies (PP 1, DP 2), (PP 2, DP 1).
     * s*b = 127*4 = 508, s*b*h = 60960, 4f/h = 16.
     * Pass 1, PP 1: params 1169520*12 = 14034240, acts (60960*34*4 + 4064 + 60960 + 2*(520192 + 60960))*1.05
     *   = 9993782.4 -> 24028022.4.
     * Pass 1, PP 2: params (460800 + 960 + max(122880, 123120))*18 = 10527840, acts (8290560 + 8128 + 121920)
     *   * 1.05 = 8841638.4 -> 19369478.4 > 18.25 MiB = 19136512.
     * Pass 2 (selective core_attn), PP 2: acts 60960*(18+16)*4 + 8128 + 121920 = 8420608 -> 18948448: fits.
     * Pass 2, PP 1: acts 8355584 + 243840*(1 + 1024/120) = 10680192 -> 24714432: does not.
     * (With the reference's RMSNorm: 10517040 + 8841638.4 = 19358678.4 does not fit, 10517040 + 8420608 =
     * 18937648 does: the same outcome.) */
    snn_lm_training_config in = tiny_budget_config(), keep, out;
    COPY(keep, in);
    snn_lm_plan_report r;
    uint64_t mem = (uint64_t)(18.25 * MIB);
    CHECK(mem == 19136512u);
    CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_THROUGHPUT, 1.0, &out, &r) == SNN_OK);
    CHECK(same(&in, &keep));
    const snn_lm_transformer_config *t = &out.model.transformer;
    CHECK(out.use_snn_memopt == 1);
    CHECK(t->recompute_granularity == SNN_LM_RECOMPUTE_SELECTIVE && t->recompute_modules == SNN_LM_RECOMPUTE_CORE_ATTN);
    CHECK(t->recompute_method == SNN_LM_RECOMPUTE_METHOD_NONE && t->recompute_num_layers == 0);
    CHECK(t->pipeline_model_parallel_size == 2 && t->tensor_model_parallel_size == 1 && t->context_parallel_size == 1);
    CHECK(t->pipeline_dtype == t->params_dtype);
    CHECK(r.selective_recompute == 1 && r.topologies == 2 && r.estimates == 4 && r.feasible == 1);
    CHECK(near(r.parameter_bytes, 10527840.0) && near(r.activation_bytes, 8420608.0));
    CHECK(near(r.smallest_estimate_bytes, 18948448.0));
    CHECK(snn_lm_training_config_validate(&out) == SNN_OK);
    /* the same with the memory objective */
    CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_MEMORY, 1.0, &out, &r) == SNN_OK);
    CHECK(t->recompute_granularity == SNN_LM_RECOMPUTE_SELECTIVE && t->pipeline_model_parallel_size == 2);

    /* FP8 "hybrid": the selective pass is not tried, nothing fits; the smallest estimate is
     * pass 1's PP 2, 19369478.4, printed truncated as the reference's int() does. */
    in.model.transformer.fp8 = SNN_LM_FP8_HYBRID;
    COPY(keep, in);
    memset(&out, 0xa5, sizeof out);
    snn_lm_training_config out_keep;
    COPY(out_keep, out);
    CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_THROUGHPUT, 1.0, &out, &r) == SNN_E_INVALID);
    CHECK(msg_is("No topology fits the memory budget: budget=19136512 bytes, smallest estimate=19369478 bytes."));
    CHECK(same(&in, &keep) && same(&out, &out_keep));
    CHECK(r.estimates == 2 && r.feasible == 0 && r.tensor_parallel_size == 0);
    CHECK(r.budget_bytes == 19136512.0 && near(r.smallest_estimate_bytes, 19369478.4));
    /* and CP > 1 also skips the selective pass: sequence 128 at world 4 (TP 1, CP 2 or 4 allowed) */
}

static void formulas(void) {
    snn_lm_training_config c = reference_config();
    double p, a;
    /* PP 4 with 2 microbatches (DP 2 at world 8): the factor min(1, 2/4) = 1/2 and no logits term:
     * (65536*34*4 + 8*512*4 + 65536*4) * 0.5 * 1.05 = 9191424 * 0.525 = 4825497.6.
     * Parameters: 4 layers / 4 stages = 1 layer per stage, D = 2: (245760 + 512 + max(131072, 131072 + 256)) * 12. */
    CHECK(snn_lm_plan_estimate(&c, 1, 4, 1, 2, 0, &p, &a) == SNN_OK);
    CHECK_MSG(near(a, 4825497.6), "%.17g", a);
    CHECK(near(p, (245760.0 + 512 + 131328) * 12));
    /* selective with PP 2, TP 2, CP 2, DP 1 (4 microbatches): s = 64, b = 4, s*b*h = 32768, 4f/h = 16:
     * 32768*34*4/2 + 8*256*2 + 32768*2 = 2228224 + 4096 + 65536 = 2297856 (no 1.05 factor, no logits).
     * Parameters D = DP*CP = 2: (245760*2/2 + 512*2 + max(131072/2, 65536 + 256)) * 12. */
    CHECK(snn_lm_plan_estimate(&c, 2, 2, 2, 1, 1, &p, &a) == SNN_OK);
    CHECK(near(a, 2297856.0));
    CHECK(near(p, (245760.0 + 1024 + 65792) * 12));
    /* tied embeddings at PP 1 drop the output matrix: TP 2, DP 1 -> (491520 + 2048 + 65536 + 256) * 18 */
    c.model.share_embeddings_and_output_weights = 1;
    CHECK(snn_lm_plan_estimate(&c, 2, 1, 1, 1, 0, &p, &a) == SNN_OK);
    CHECK(near(p, (491520.0 + 2048 + 65536 + 256) * 18));
    c.model.share_embeddings_and_output_weights = 0;
    /* learned positions add h * max_sequence_length = 128*512 to the input stage */
    c.model.position_embedding_type = SNN_LM_POS_LEARNED_ABSOLUTE;
    CHECK(snn_lm_plan_estimate(&c, 2, 1, 1, 1, 0, &p, &a) == SNN_OK);
    CHECK(near(p, (624896.0 + 65536) * 18));
    c.model.position_embedding_type = SNN_LM_POS_ROPE;
    /* precision: FP32 params 8 + 8/D and activations doubled; FP16 4 + 16/D (TP 2, DP 1) */
    snn_lm_training_config f = c;
    f.model.transformer.bf16 = f.optimizer.bf16 = 0;
    f.model.transformer.params_dtype = f.optimizer.params_dtype = SNN_LM_DTYPE_FLOAT32;
    f.model.transformer.pipeline_dtype = SNN_LM_DTYPE_FLOAT32;
    CHECK(snn_lm_plan_estimate(&f, 2, 1, 1, 1, 0, &p, &a) == SNN_OK);
    CHECK(near(p, 624896.0 * 16) && near(a, 6816768.0 * 2));
    f.model.transformer.fp16 = f.optimizer.fp16 = 1;
    f.model.transformer.params_dtype = f.optimizer.params_dtype = SNN_LM_DTYPE_FLOAT16;
    f.model.transformer.pipeline_dtype = SNN_LM_DTYPE_FLOAT16;
    CHECK(snn_lm_plan_estimate(&f, 2, 1, 1, 1, 0, &p, &a) == SNN_OK);
    CHECK(near(p, 624896.0 * 20) && near(a, 6816768.0));
    /* not gated, default ffn (4h = 512), default groups (4), default kv (h/heads = 32):
     * attention 2*128*128*2 = 65536, mlp 2*128*512 = 131072 */
    snn_lm_training_config g = c;
    g.model.transformer.activation = SNN_LM_ACT_GELU;
    g.model.transformer.ffn_hidden_size = 0;
    g.model.transformer.num_query_groups = 0;
    g.model.transformer.kv_channels = 0;
    CHECK(snn_lm_plan_estimate(&g, 1, 1, 1, 2, 0, &p, &a) == SNN_OK);
    CHECK(near(p, (196608.0 * 4 + 2048 + 131072 + 256 + 131072) * 12) && near(a, 10670284.8));
    /* the arithmetic's own refusals */
    CHECK(snn_lm_plan_estimate(&c, 0, 1, 1, 1, 0, &p, &a) == SNN_E_INVALID);
    CHECK(snn_lm_plan_estimate(&c, 1, 1, 1, 3, 0, &p, &a) == SNN_E_INVALID); /* 4 % 3 */
    CHECK(snn_lm_plan_estimate(NULL, 1, 1, 1, 1, 0, &p, &a) == SNN_E_INVALID);
}

static void choice_rules(void) {
    snn_lm_training_config in = reference_config(), out;
    snn_lm_plan_report r;
    /* Throughput takes the fewest pipeline stages, then CP, then TP, whatever their estimates:
     * world 8, global 16: at 8 GiB everything fits and TP 1 PP 1 CP 1 (DP 8) wins. */
    in.global_batch_size = 16;
    CHECK(snn_lm_plan_training(&in, 8, (uint64_t)8 << 30, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_OK);
    CHECK(r.tensor_parallel_size == 1 && r.pipeline_parallel_size == 1 && r.context_parallel_size == 1 &&
          r.data_parallel_size == 8);
    /* with a budget just below that estimate, PP 1 CP 1 TP 2 (the next key) must win if it fits */
    double first = r.estimate_bytes, tp2p, tp2a;
    CHECK(snn_lm_plan_estimate(&in, 2, 1, 1, 4, 0, &tp2p, &tp2a) == SNN_OK);
    CHECK(tp2p + tp2a < first);
    uint64_t mem = (uint64_t)floor(first) - 1;
    CHECK(snn_lm_plan_training(&in, 8, mem, SNN_LM_PLAN_THROUGHPUT, 1.0, &out, &r) == SNN_OK);
    CHECK(r.tensor_parallel_size == 2 && r.pipeline_parallel_size == 1 && r.context_parallel_size == 1);
    CHECK(near(r.estimate_bytes, tp2p + tp2a));
    /* memory: the smallest of all estimates: compare with every topology of the rules */
    CHECK(snn_lm_plan_training(&in, 8, (uint64_t)8 << 30, SNN_LM_PLAN_MEMORY, 0.9, &out, &r) == SNN_OK);
    double best = INFINITY;
    for (int tp = 1; tp <= 8; tp *= 2)
        for (int pp = 1; tp * pp <= 8; pp *= 2)
            for (int cp = 1; tp * pp * cp <= 8; cp *= 2) {
                int dp = 8 / (tp * pp * cp);
                if (tp > 2 || 4 % pp || 16 % dp || 16 / dp < pp) continue; /* TP 4 is refused (2 groups); 4 layers; nmb >= PP */
                double p, a;
                CHECK(snn_lm_plan_estimate(&in, tp, pp, cp, dp, 0, &p, &a) == SNN_OK);
                if (p + a < best) best = p + a;
            }
    CHECK(near(r.estimate_bytes, best));
    /* CP > 1 skips the selective pass: world 2 with only CP 2 possible (3 heads, 3 layers,
     * global 1 -> DP must be 1) and a budget below its pass-1 estimate -> no fit, one estimate. */
    snn_lm_training_config cp = tiny_budget_config();
    cp.model.transformer.num_layers = 3;
    cp.sequence_length = 128;
    cp.global_batch_size = 1;
    CHECK(snn_lm_plan_training(&cp, 2, 1024, SNN_LM_PLAN_THROUGHPUT, 1.0, &out, &r) == SNN_E_INVALID);
    CHECK(r.topologies == 1 && r.estimates == 1);
    CHECK(strstr(snn_last_error(), "No topology fits the memory budget: budget=1024 bytes, smallest estimate=") != NULL);
}

static void refusals(void) {
    snn_lm_training_config in = reference_config(), keep, out;
    COPY(keep, in);
    memset(&out, 0xa5, sizeof out);
    snn_lm_training_config out_keep;
    COPY(out_keep, out);
    snn_lm_plan_report r;
    uint64_t mem = (uint64_t)8 << 30;
    CHECK(snn_lm_plan_training(&in, 0, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(msg_is("world_size and device_memory_bytes must be positive."));
    CHECK(snn_lm_plan_training(&in, -3, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(snn_lm_plan_training(&in, 2, 0, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(msg_is("world_size and device_memory_bytes must be positive."));
    CHECK(snn_lm_plan_training(&in, 2, mem, (snn_lm_plan_objective)2, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(msg_is("objective must be 'throughput' or 'memory'."));
    CHECK(snn_lm_plan_training(&in, 2, mem, (snn_lm_plan_objective)-1, 0.9, &out, &r) == SNN_E_INVALID);
    const double bad_fraction[] = {0.0, -0.5, 1.0000001, NAN, INFINITY};
    for (int i = 0; i < 5; i++) {
        CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_THROUGHPUT, bad_fraction[i], &out, &r) == SNN_E_INVALID);
        CHECK(msg_is("memory_fraction must be in (0, 1]."));
    }
    CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_THROUGHPUT, 1.0, &out, NULL) == SNN_OK); /* 1 is allowed */
    out = out_keep;
    CHECK(snn_lm_plan_training(NULL, 2, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(snn_lm_plan_training(&in, 2, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, NULL, &r) == SNN_E_INVALID);
    /* an invalid config is refused by the config rules */
    snn_lm_training_config bad = in;
    bad.global_batch_size = 3; /* not a multiple of micro 2 */
    bad.micro_batch_size = 2;
    CHECK(snn_lm_plan_training(&bad, 2, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "divisible") != NULL);
    bad = in;
    bad.model.transformer.num_layers = 0;
    CHECK(snn_lm_plan_training(&bad, 2, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "num_layers") != NULL);
    CHECK(same(&out, &out_keep) && same(&in, &keep));
    /* No topology: world 3 with 4 heads and 4 layers leaves TP 1 PP 1; CP 1 needs 4 % 3 == 0
     * (global over micro*DP 3), CP 3 needs 128 % 6 == 0: neither. */
    CHECK(snn_lm_plan_training(&in, 3, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(msg_is("No topology satisfies the model and batch constraints."));
    CHECK(r.topologies == 0 && r.estimates == 0);
    /* num_microbatches >= PP: world 4, global 1 -> only DP 1, PP 1 allowed (PP 2 or 4 would need 2 or 4
     * microbatches); TP 4 (4 heads, 2 groups: max 4 % min 2 == 0) is refused by snn's own validation
     * (groups 2 % TP 4), TP 2 PP 1 CP 2 and TP 1 PP 1 CP 4 remain. */
    snn_lm_training_config g1 = in;
    g1.global_batch_size = 1;
    CHECK(snn_lm_plan_training(&g1, 4, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_OK);
    CHECK(r.topologies == 2 && r.refused_by_validation == 1);
    CHECK(r.pipeline_parallel_size == 1 && r.data_parallel_size == 1);
    CHECK(r.context_parallel_size == 2 && r.tensor_parallel_size == 2); /* CP 2 before CP 4 */
    /* only refused topologies left: 2 heads in 1 group at world 2 with global 1 -> TP 2 only */
    g1.model.transformer.num_attention_heads = 2;
    g1.model.transformer.num_query_groups = 1;
    g1.model.transformer.kv_channels = 64;
    g1.sequence_length = 127;
    CHECK(snn_lm_plan_training(&g1, 2, mem, SNN_LM_PLAN_THROUGHPUT, 0.9, &out, &r) == SNN_E_INVALID);
    CHECK(strstr(snn_last_error(), "No topology satisfies the model and batch constraints. (The config validation refuses all 1 ") ==
          snn_last_error());
    CHECK_MSG(r.refused_by_validation == 1 && r.topologies == 0, "%d %d: %s", r.refused_by_validation, r.topologies,
              snn_last_error());
    CHECK(snn_lm_plan_objective_parse("memory") == SNN_LM_PLAN_MEMORY);
    CHECK(snn_lm_plan_objective_parse("throughput") == SNN_LM_PLAN_THROUGHPUT);
    CHECK(snn_lm_plan_objective_parse("Memory") == -1 && snn_lm_plan_objective_parse(NULL) == -1);
    CHECK(!strcmp(snn_lm_plan_objective_name(SNN_LM_PLAN_MEMORY), "memory"));
    CHECK(snn_lm_plan_objective_name((snn_lm_plan_objective)7) == NULL);
}

int main(void) {
    reference_world2();
    tiny_budget();
    formulas();
    choice_rules();
    refusals();
    return snn_test_finish("test_lm_plan");
}
