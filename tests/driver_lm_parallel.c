/* Tensor, sequence and pipeline parallel language-model training equals the dense model on
 * one process.
 *
 * Every rank also trains the dense gpt / spikelm model (the oracle, built with the same
 * seed) on the same random global batch, microbatch by microbatch as `snn lm train` does
 * (per-token loss over the global token count, global-norm clip 0.5, AdamW lr 3e-3, weight
 * decay 0.1, eps 1e-4). Checks, all reduced over the ranks:
 *   - the gradients of a first step before any update, merged over TP / PP / DP into
 *     canonical tensors: max |a - b| / max |b| of EVERY tensor <= 1e-5;
 *   - the per-step losses and global gradient norms of 5 AdamW steps <= 1e-5 relative;
 *   - after the 5 steps the shards gathered into canonical tensors (snn_lm_stage_gather):
 *     all weights together relative L2 <= 1e-5, every tensor's relative L2 <= 1e-4 (the
 *     worst max-abs ratio is printed too);
 *   - a forward-only pipeline pass on a fresh batch: the loss within 1e-5;
 *   - the weights moved, the clip engaged, TP communicated (TP > 1), and the norms run on
 *     the whole sequence without SP and on a sequence shard with it.
 *
 *   driver_lm_parallel MODEL PP TP GROUPS TIED POS ACT [sp] [bf16]    (mpirun -np DP*PP*TP)
 *     MODEL gpt | spikelm, TIED 0 | 1, POS learned | rope, ACT gelu | swiglu (gpt + swiglu
 *     uses RMSNorm), sp: sequence parallel; bf16: both models computed in BF16 and the
 *     pipeline messages in BF16, every bound 3e-2 (a smoke bound: the messages, gradients
 *     included, are rounded to BF16) and no per-tensor bound
 *   driver_lm_parallel --refuse        the topology rules' messages (one process)
 * SNN_TEST_SEED fixes the seed (printed); SNN_TEST_EPS / SNN_TEST_LR override the AdamW eps
 * and lr (for measurements); SNN_TEST_VERBOSE prints the steps and the tensors
 * off by more than 1e-6. Prints one line on rank 0; exit 0 when every check holds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/lm_stage.h"
#include "dist/tp.h"
#include "nn/model_internal.h"
#include "snn/optim.h"
#include "snn/prepare.h"
#include "snn/rng.h"

static int fail(snn_comm *w, const char *what) {
    fprintf(stderr, "rank %d: %s: %s\n", w ? snn_comm_rank(w) : 0, what, snn_last_error());
    if (w) snn_comm_abort(w, 1);
    exit(1);
}

static snn_gpt_opts small(int spiking) {
    snn_gpt_opts o = snn_gpt_defaults(spiking);
    o.vocab = 96;
    o.context = 32;
    o.seq = 16;
    o.layers = 4;
    o.hidden = 64;
    o.heads = 4;
    o.groups = 4;
    o.ffn = 128;
    o.time_steps = spiking ? 2 : 1;
    return o;
}

/* Each bad topology is refused with a message naming the fields. */
static int refuse(void) {
    struct {
        int heads, groups, hidden, layers, vocab, pp, tp, seq, sp;
        const char *msg;
    } cases[] = {
        {4, 4, 64, 4, 96, 1, 3, 16, 0, "tensor_parallel_size 3 must divide num_attention_heads 4"},
        {12, 3, 96, 4, 96, 1, 2, 16, 0, "num_query_groups 3 and tensor_parallel_size 2"},
        {8, 2, 64, 4, 96, 1, 8, 16, 0, "ffn_hidden_size"},
        {4, 4, 64, 4, 90, 1, 4, 16, 0, "must divide vocab_size 90"},
        {4, 4, 64, 4, 96, 3, 1, 16, 0, "pipeline_parallel_size 3 must divide num_layers 4"},
        {4, 4, 64, 4, 96, 0, 1, 16, 0, "must be > 0"},
        {4, 4, 64, 4, 96, 1, 2, 15, 1, "sequence_parallel: tensor_parallel_size 2 must divide the sequence length 15"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snn_gpt_opts o = small(1);
        o.heads = cases[i].heads;
        o.groups = cases[i].groups;
        o.hidden = cases[i].hidden;
        o.layers = cases[i].layers;
        o.vocab = cases[i].vocab;
        o.seq = cases[i].seq;
        o.ffn = 4 * 5 * 7; /* 140: not divisible by 8 */
        if (cases[i].tp != 8) o.ffn = 128;
        snn_lm_stage *s = NULL;
        snn_status st = snn_lm_stage_build(&o, 0, cases[i].pp, 0, cases[i].tp, cases[i].sp, NULL, NULL, &s);
        int ok = st != SNN_OK && s == NULL && strstr(snn_last_error(), cases[i].msg);
        printf("refused PP %d TP %d%s (heads %d, groups %d, vocab %d, seq %d): %s -> %s\n", cases[i].pp, cases[i].tp,
               cases[i].sp ? " SP" : "", cases[i].heads, cases[i].groups, cases[i].vocab, cases[i].seq, st == SNN_OK ? "(accepted)" : snn_last_error(),
               ok ? "ok" : "FAIL");
        bad += !ok;
        snn_lm_stage_free(s);
    }
    /* the GQA rule accepts replicated key/value groups (groups 2 < TP 4) */
    snn_gpt_opts o = small(0);
    o.groups = 2;
    snn_lm_stage *s = NULL;
    if (snn_lm_stage_build(&o, 0, 1, 3, 4, 1, NULL, NULL, &s) != SNN_OK) {
        printf("groups 2 with TP 4 refused: %s FAIL\n", snn_last_error());
        bad++;
    } else {
        /* and a BF16 pipeline over FP32 parameters is not */
        snn_status st = snn_lm_pipeline_plan(s, 2, 4, 1);
        int ok = st != SNN_OK && strstr(snn_last_error(), "pipeline_dtype bf16 must equal params_dtype fp32");
        printf("pipeline_dtype bf16 with fp32 params: %s -> %s\n", snn_last_error(), ok ? "ok" : "FAIL");
        bad += !ok;
    }
    snn_lm_stage_free(s);
    /* fewer microbatches than pipeline stages */
    s = NULL;
    o = small(1);
    if (snn_lm_stage_build(&o, 1, 2, 0, 1, 0, NULL, NULL, &s) != SNN_OK) {
        printf("PP 2 stage refused: %s FAIL\n", snn_last_error());
        bad++;
    } else {
        snn_status st = snn_lm_pipeline_plan(s, 2, 1, 0);
        int ok = st != SNN_OK && strstr(snn_last_error(), "num_microbatches 1");
        printf("1 microbatch with PP 2: %s -> %s\n", snn_last_error(), ok ? "ok" : "FAIL");
        bad += !ok;
    }
    snn_lm_stage_free(s);
    printf("%s\n", bad ? "FAIL" : "all refusals ok");
    return bad ? 1 : 0;
}

/* Norms of the stage: how many see the whole sequence and how many a shard of it. */
typedef struct {
    int seq, full, shard;
} norm_count;

static void norm_visit(snn_module *m, void *ctx) {
    norm_count *c = ctx;
    const char *k = snn_module_own_ops(m)->kind;
    if (strcmp(k, "LayerNorm") && strcmp(k, "RMSNorm")) return;
    if (m->in.d[0] == c->seq) c->full++;
    else c->shard++;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void tile(const int32_t *ids, int T, int N, int S, float *x) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < N * S; i++) x[(size_t)t * N * S + i] = (float)ids[i];
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--refuse")) return refuse();
    if (argc < 8) {
        fprintf(stderr, "usage: driver_lm_parallel MODEL PP TP GROUPS TIED POS ACT | --refuse\n");
        return 2;
    }
    snn_gpt_opts o = small(!strcmp(argv[1], "spikelm"));
    const int PP = atoi(argv[2]), TP = atoi(argv[3]);
    o.groups = atoi(argv[4]);
    o.tied = atoi(argv[5]);
    o.pos = !strcmp(argv[6], "rope") ? SNN_LM_POS_ROPE : SNN_LM_POS_LEARNED_ABSOLUTE;
    o.act = !strcmp(argv[7], "swiglu") ? SNN_LM_ACT_SWIGLU : SNN_LM_ACT_GELU;
    int sp = 0, bf16 = 0;
    for (int i = 8; i < argc; i++) {
        if (!strcmp(argv[i], "sp")) sp = 1;
        else if (!strcmp(argv[i], "bf16")) bf16 = 1;
    }
    if (!o.spiking && o.act == SNN_LM_ACT_SWIGLU) o.norm = SNN_LM_NORM_RMSNORM; /* gpt + SwiGLU: LLaMA-like */
    const int T = o.time_steps, S = o.seq, V = o.vocab, micro = 2, global = 8;
    const int steps = getenv("SNN_TEST_STEPS") ? atoi(getenv("SNN_TEST_STEPS")) : 5;
    const float clip = 0.5f, lr = 3e-3f;

    snn_comm *w = NULL;
    if (snn_comm_init_world(&w) != SNN_OK) return fail(NULL, "init");
    snn_mesh mesh;
    if (snn_mesh_create(w, PP, TP, &mesh) != SNN_OK) return fail(w, "mesh");
    const int DP = mesh.dp_size;
    if (global % (micro * DP)) {
        fprintf(stderr, "global batch %d is not divisible by micro %d x DP %d\n", global, micro, DP);
        return 2;
    }
    const int K = global / (micro * DP), N = global / DP;
    uint64_t seed = 0;
    if (snn_comm_rank(w) == 0) {
        const char *e = getenv("SNN_TEST_SEED");
        seed = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
        fprintf(stderr, "test seed: SNN_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    if (snn_comm_broadcast(w, &seed, 1, SNN_COMM_I64, 0) != SNN_OK) return fail(w, "seed");

    snn_lm_stage *st = NULL;
    snn_model *dense = NULL, *merged = NULL;
    if (snn_lm_stage_create(&o, &mesh, sp, seed, &st) != SNN_OK) return fail(w, "stage");
    if (snn_gpt_create(&o, seed, &dense) != SNN_OK) return fail(w, "dense");
    if (snn_gpt_create(&o, seed + 1, &merged) != SNN_OK) return fail(w, "merged");
    snn_precision *pst = NULL, *pde = NULL;
    if (bf16) { /* both models computed in BF16, the stage's messages in BF16 */
        snn_precision_config pc = snn_precision_config_default();
        pc.mode = SNN_PRECISION_BF16;
        if (snn_prepare_model_for_precision(st->model, "cpu", &pc, &pst) != SNN_OK) return fail(w, "prepare stage");
        if (snn_prepare_model_for_precision(dense, "cpu", &pc, &pde) != SNN_OK) return fail(w, "prepare dense");
    }
    if (snn_lm_pipeline_plan(st, micro, K, bf16) != SNN_OK) return fail(w, "plan");
    if (snn_model_plan(dense, T, micro) != SNN_OK) return fail(w, "dense plan");
    snn_optim_opts oo = snn_optim_defaults(SNN_OPTIM_ADAMW);
    oo.lr = lr;
    oo.weight_decay = 0.1f;
    /* eps 1e-4 rather than 1e-8: Adam divides each gradient element by its own magnitude, so
     * near a zero gradient (a token seen once; a key bias, whose gradient is 0 in exact
     * arithmetic) the update moves by up to lr / eps times a gradient difference: a 1e-8
     * difference of summation order becomes an update difference of the order of lr with
     * eps 1e-8, and still ~1e-5 of the weights with eps 1e-6 (docs/lm.md has the numbers);
     * with eps 1e-4 (lr / eps = 30) the updates stay in Adam's normalising regime for the
     * gradients of these models while such elements stay linear */
    oo.eps = 1e-4f;
    if (getenv("SNN_TEST_EPS")) oo.eps = (float)atof(getenv("SNN_TEST_EPS"));
    if (getenv("SNN_TEST_LR")) oo.lr = (float)atof(getenv("SNN_TEST_LR"));
    snn_optimizer *opt = NULL, *dopt = NULL;
    if (snn_optimizer_create_for_model(&oo, st->model, &opt) != SNN_OK) return fail(w, "opt");
    if (snn_optimizer_create_for_model(&oo, dense, &dopt) != SNN_OK) return fail(w, "dense opt");

    const size_t nd = snn_model_num_params(dense);
    float *p0 = malloc(sizeof(float) * nd), *x = malloc(sizeof(float) * (size_t)T * micro * S);
    float *dl = malloc(sizeof(float) * (size_t)T * micro * S * V);
    double *tl = malloc(sizeof(double) * (size_t)micro * S);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)global * S), *lab = malloc(sizeof(int32_t) * (size_t)global * S);
    memcpy(p0, snn_model_params(dense), sizeof(float) * nd);
    uint64_t c0, b0;
    snn_tp_comm_stats(&c0, &b0);
    c0 += snn_lm_tp_comm_calls();
    /* first, the gradients of one step before any update: merged over the ranks (a second
     * stage holds the first's gradients as its values) against the dense gradients,
     * max |a - b| / max |b| per tensor */
    double worst_grad = 0;
    char worst_grad_name[160] = "";
    {
        snn_lm_stage *gs = NULL;
        if (snn_lm_stage_create(&o, &mesh, sp, seed, &gs) != SNN_OK) return fail(w, "grad stage");
        for (int i = 0; i < global * S; i++) {
            ids[i] = (int32_t)(snn_rng_uniform(seed, 9, (uint64_t)i) * V) % V;
            lab[i] = (int32_t)(snn_rng_uniform(seed, 10, (uint64_t)i) * V) % V;
        }
        double ls, cn;
        const float scale = (float)(1.0 / ((double)global * S));
        snn_model_zero_grad(st->model);
        if (snn_lm_pipeline_train(st, st->first ? ids + (size_t)mesh.dp * N * S : NULL,
                                  st->last ? lab + (size_t)mesh.dp * N * S : NULL, scale, &ls, &cn) != SNN_OK ||
            snn_lm_stage_reduce_grads(st) != SNN_OK)
            return fail(w, "grad step");
        memcpy(snn_model_params(gs->model), snn_model_grads(st->model), sizeof(float) * snn_model_num_params(st->model));
        if (snn_lm_stage_gather(gs, merged) != SNN_OK) return fail(w, "grad gather");
        snn_model_zero_grad(dense);
        for (int k = 0; k < global / micro; k++) {
            const float *y;
            double l, c;
            tile(ids + (size_t)k * micro * S, T, micro, S, x);
            if (snn_model_forward(dense, x, 1, &y) != SNN_OK ||
                snn_lm_cross_entropy(y, lab + (size_t)k * micro * S, NULL, T, micro, S, V, o.reduce_sum, tl, &l, &c, dl,
                                     scale) != SNN_OK ||
                snn_model_backward(dense, dl) != SNN_OK)
                return fail(w, "dense grad step");
        }
        for (size_t i = 0; i < snn_model_num_tensors(dense); i++) {
            snn_tensor_info a, b;
            snn_model_tensor(merged, i, &a);
            snn_model_tensor(dense, i, &b);
            double top = 0, diff = 0;
            size_t at = 0;
            for (size_t j = 0; j < b.numel; j++) {
                top = fmax(top, fabs(b.grad[j]));
                double d = isnan(a.data[j]) ? INFINITY : fabs((double)a.data[j] - b.grad[j]);
                if (d > diff) {
                    diff = d;
                    at = j;
                }
            }
            double e = diff / (top > 0 ? top : 1.0);
            if (getenv("SNN_TEST_VERBOSE") && snn_comm_rank(w) == 0 && e > 1e-5)
                fprintf(stderr, "  gradient %s[%zu]: %.9g vs dense %.9g (max %.3g)\n", b.name, at, (double)a.data[at],
                        (double)b.grad[at], top);
            if (e > worst_grad) {
                worst_grad = e;
                snprintf(worst_grad_name, sizeof worst_grad_name, "%s", b.name);
            }
        }
        snn_lm_stage_free(gs);
    }
    double worst_loss = 0, worst_gn = 0, t_stage = 0, t_dense = 0;
    int clipped = 0;
    for (int s = 0; s <= steps; s++) {
        /* fresh random tokens and labels every step (Philox: every rank draws the same) */
        for (int i = 0; i < global * S; i++) {
            ids[i] = (int32_t)(snn_rng_uniform(seed, 11 + 2 * (uint64_t)s, (uint64_t)i) * V) % V;
            lab[i] = (int32_t)(snn_rng_uniform(seed, 12 + 2 * (uint64_t)s, (uint64_t)i) * V) % V;
        }
        const int32_t *my_ids = ids + (size_t)mesh.dp * N * S, *my_lab = lab + (size_t)mesh.dp * N * S;
        if (s == steps) { /* forward-only pipeline on a fresh batch */
            double ls, cn, dls = 0, dcn = 0;
            if (snn_lm_pipeline_eval(st, st->first ? my_ids : NULL, st->last ? my_lab : NULL, &ls, &cn) != SNN_OK)
                return fail(w, "eval");
            double t2[2] = {ls, cn};
            if (mesh.dp_size > 1 && snn_comm_allreduce(mesh.dp_comm, t2, 2, SNN_COMM_F64, SNN_COMM_SUM) != SNN_OK)
                return fail(w, "eval dp");
            for (int k = 0; k < global / micro; k++) {
                const float *y;
                double l, c;
                tile(ids + (size_t)k * micro * S, T, micro, S, x);
                if (snn_model_forward(dense, x, 0, &y) != SNN_OK) return fail(w, "dense eval");
                if (snn_lm_cross_entropy(y, lab + (size_t)k * micro * S, NULL, T, micro, S, V, o.reduce_sum, tl, &l,
                                         &c, NULL, 1.0f) != SNN_OK)
                    return fail(w, "dense eval loss");
                dls += l;
                dcn += c;
            }
            double e = fabs(t2[0] / t2[1] - dls / dcn) / (dls / dcn);
            if (e > worst_loss) worst_loss = e;
            break;
        }
        double loss;
        float gn;
        double t0 = now();
        if (snn_lm_stage_train_step(st, opt, st->first ? my_ids : NULL, st->last ? my_lab : NULL, -1.0f, clip, &loss,
                                    &gn) != SNN_OK)
            return fail(w, "train step");
        t_stage += now() - t0;
        t0 = now();
        /* the oracle: one process, the global batch in microbatches */
        snn_model_zero_grad(dense);
        double dls = 0, dcn = 0;
        const float scale = (float)(1.0 / ((double)global * S));
        for (int k = 0; k < global / micro; k++) {
            const float *y;
            double l, c;
            tile(ids + (size_t)k * micro * S, T, micro, S, x);
            if (snn_model_forward(dense, x, 1, &y) != SNN_OK) return fail(w, "dense fwd");
            if (snn_lm_cross_entropy(y, lab + (size_t)k * micro * S, NULL, T, micro, S, V, o.reduce_sum, tl, &l, &c,
                                     dl, scale) != SNN_OK)
                return fail(w, "dense loss");
            if (snn_model_backward(dense, dl) != SNN_OK) return fail(w, "dense bwd");
            dls += l;
            dcn += c;
        }
        float dgn = snn_clip_grad_norm(snn_model_grads(dense), nd, clip);
        clipped += dgn > clip;
        if (snn_optimizer_step(dopt, -1.0f, 0) != SNN_OK) return fail(w, "dense step");
        t_dense += now() - t0;
        double le = fabs(loss - dls / dcn) / (dls / dcn), ge = fabs((double)gn - dgn) / dgn;
        if (le > worst_loss) worst_loss = le;
        if (ge > worst_gn) worst_gn = ge;
        if (snn_comm_rank(w) == 0 && getenv("SNN_TEST_VERBOSE"))
            fprintf(stderr, "step %d: loss %.9g (dense %.9g), grad norm %.7g (dense %.7g)\n", s + 1, loss, dls / dcn,
                    (double)gn, (double)dgn);
    }
    /* every canonical tensor, merged from the shards, against the oracle */
    if (snn_lm_stage_gather(st, merged) != SNN_OK) return fail(w, "gather");
    double worst = 0, worst_max = 0, gsum[2] = {0, 0}; /* per tensor: relative L2 distance; max |a - b| / max |b| */
    char worst_name[160] = "";
    size_t nt = snn_model_num_tensors(dense);
    for (size_t i = 0; i < nt; i++) {
        snn_tensor_info a, b;
        snn_model_tensor(merged, i, &a);
        snn_model_tensor(dense, i, &b);
        double top = 0, diff = 0, num = 0, nrm = 0;
        for (size_t j = 0; j < b.numel; j++) {
            double d = fabs((double)a.data[j] - b.data[j]);
            top = fmax(top, fabs(b.data[j]));
            diff = isnan(a.data[j]) ? INFINITY : fmax(diff, d);
            num += d * d;
            nrm += (double)b.data[j] * b.data[j];
        }
        double e = strcmp(a.name, b.name) || isinf(diff) ? INFINITY : sqrt(num / (nrm > 0 ? nrm : 1.0));
        gsum[0] += num;
        gsum[1] += nrm;
        double em = diff / (top > 0 ? top : 1.0);
        if (getenv("SNN_TEST_VERBOSE") && snn_comm_rank(w) == 0 && em > 1e-6)
            fprintf(stderr, "  %s: rel L2 %.3g, max diff %.3g of max %.3g\n", b.name, e, diff, top);
        worst_max = fmax(worst_max, em);
        if (e > worst) {
            worst = e;
            snprintf(worst_name, sizeof worst_name, "%s", b.name);
        }
    }
    double moved = 0, den = 0;
    for (size_t i = 0; i < nd; i++) {
        moved += ((double)snn_model_params(dense)[i] - p0[i]) * ((double)snn_model_params(dense)[i] - p0[i]);
        den += (double)p0[i] * p0[i];
    }
    moved = sqrt(moved / den);
    uint64_t calls, bytes;
    snn_tp_comm_stats(&calls, &bytes);
    calls += snn_lm_tp_comm_calls();
    double red[7] = {worst, worst_loss, worst_gn, (double)(calls - c0), worst_max, sqrt(gsum[0] / gsum[1]),
                     worst_grad};
    if (snn_comm_allreduce(w, red, 7, SNN_COMM_F64, SNN_COMM_MAX) != SNN_OK) return fail(w, "reduce");
    norm_count ncount = {S, 0, 0};
    snn_module_walk(st->model->root, norm_visit, &ncount);
    /* BF16: the messages between stages are rounded to 8 bits of mantissa, gradients included;
     * a smoke bound, not an equality */
    const double tol = bf16 ? 3e-2 : 1e-5, tensor_tol = bf16 ? 1.0 : 10 * tol;
    int ok = red[5] <= tol && red[0] <= tensor_tol && red[6] <= tol && red[1] <= tol && red[2] <= tol && moved > 1e-3 && clipped > 0 &&
             (TP == 1 ? red[3] == 0 : red[3] > 0) && ncount.full + ncount.shard > 0 &&
             (st->sp ? ncount.full == 0 : ncount.shard == 0);
    /* BF16 messages are rounded: a pipeline then differs from the dense BF16 run (which a
     * one-stage pipeline equals bit for bit) */
    if (bf16 && PP > 1) ok = ok && red[5] > 1e-6;
    if (snn_comm_rank(w) == 0)
        printf("%s DP%d PP%d TP%d%s groups %d %s %s %s K%d: %d AdamW steps, %zu canonical tensors, all weights rel L2 %.3g, worst tensor %.3g "
               "(%s; max-abs %.3g), first-step gradients %.3g (%s), losses rel %.3g, grad norm rel %.3g (clipped %d of %d steps), TP all-reduces %.0f, weights "
               "moved %.3g: %s\n",
               argv[1], DP, PP, TP, st->sp ? " SP" : bf16 ? " BF16" : "", o.groups, o.tied ? "tied" : "untied", argv[6], argv[7], K, steps, nt, red[5], red[0],
               worst_name, red[4], red[6], worst_grad_name, red[1], red[2], clipped, steps, red[3], moved, ok ? "ok" : "FAIL");
    if (snn_comm_rank(w) == 0 && getenv("SNN_TEST_VERBOSE"))
        fprintf(stderr, "step time: stage %.3f ms, dense (one process) %.3f ms (mean of %d steps, rank 0)\n",
                1e3 * t_stage / steps, 1e3 * t_dense / steps, steps);
    snn_optimizer_free(opt);
    snn_optimizer_free(dopt);
    snn_lm_stage_free(st);
    snn_model_free(dense);
    snn_model_free(merged);
    snn_precision_free(pst);
    snn_precision_free(pde);
    free(p0);
    free(x);
    free(dl);
    free(tl);
    free(ids);
    free(lab);
    snn_mesh_free(&mesh);
    snn_comm_free(w);
    return ok ? 0 : 1;
}
