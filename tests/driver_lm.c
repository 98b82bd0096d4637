/* Helper for tests/oracle_lm.py: runs the language-model modules and models on raw
 * float32 / int32 files.
 *
 *   driver_lm mod KIND A B C D S T N IN OUT
 *       one module on a per-sample input; KIND and A..D:
 *         emb V D - -        ([S] ids -> [S, D])
 *         pos L D off -      (learned positions at offset off)
 *         rope H G HD off    (fused q|k|v [S, (H+2G)HD])
 *         attn H G HD -      (causal core)
 *         rms F - - -        ([S, F])
 *         ln F - - -         ([S, F], LayerNorm, for the block check)
 *         swiglu F - - -     ([S, 2F] -> [S, F])
 *         head D V - -       (untied output head)
 *         bis DECAY AMP F -  (bi-spiking over T on [S, F]; DECAY/AMP as x1000)
 *       IN : x[T*N*in] params (declaration order) dy[T*N*out]
 *       OUT: y dx param-grads (declaration order)
 *   driver_lm loss T N S V SUM IN OUT
 *       IN : logits[T*N*S*V] labels[N*S] int32 mask[N*S]
 *       OUT: token_loss[N*S] (as float) loss_sum count dlogits (grad_scale 1/count)
 *   driver_lm names SPIKING V CTX S L H HEADS G FFN NORM ACT POS BIAS TIED T SUM
 *       prints "name d0 d1 ..." for every parameter in flat order
 *   driver_lm gpt (same 16 numbers) N IN OUT
 *       IN : params[n] ids[N*S] int32 labels[N*S] int32 mask[N*S]
 *       OUT: reduced logits [N*S*V] loss grads[n]
 *   driver_lm gen (same 16 numbers) B P NEW IN OUT
 *       IN : params[n] prompt[B*P] int32      OUT: tokens[B*(P+NEW)] int32 (greedy, cached)
 * Exit status 0 on success; a library error is printed and gives 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/lm_layers.h"
#include "snn/lm.h"
#include "snn/model.h"

static FILE *fin, *fout;

static void *rd(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, fin) != bytes) {
        fprintf(stderr, "driver_lm: short input\n");
        exit(3);
    }
    return p;
}
static void wr(const void *p, size_t bytes) { fwrite(p, 1, bytes, fout); }

static int fail(snn_status st) {
    fprintf(stderr, "driver_lm: %s: %s\n", snn_status_name(st), snn_last_error());
    return 2;
}

static int run_mod(char **a) {
    const char *k = a[0];
    int A = atoi(a[1]), Bv = atoi(a[2]), C = atoi(a[3]), D = atoi(a[4]);
    int S = atoi(a[5]), T = atoi(a[6]), N = atoi(a[7]);
    snn_module *m = NULL;
    snn_shape in;
    int off = -1;
    if (!strcmp(k, "emb")) m = snn_embedding_new(A, Bv), in = snn_shape1(S);
    else if (!strcmp(k, "pos")) m = snn_posemb_new(A, Bv), in = snn_shape2(S, Bv), off = C;
    else if (!strcmp(k, "rope")) m = snn_rope_new(A, Bv, C, 10000.0f, 64), in = snn_shape2(S, (A + 2 * Bv) * C), off = D;
    else if (!strcmp(k, "attn")) m = snn_attention_new(A, Bv, C), in = snn_shape2(S, (A + 2 * Bv) * C);
    else if (!strcmp(k, "rms")) m = snn_rmsnorm_new(A, 1e-5f), in = snn_shape2(S, A);
    else if (!strcmp(k, "ln")) m = snn_layernorm_new(A, 1e-5f), in = snn_shape2(S, A);
    else if (!strcmp(k, "swiglu")) m = snn_swiglu_new(A), in = snn_shape2(S, 2 * A);
    else if (!strcmp(k, "head")) m = snn_lm_head_new(A, Bv, NULL), in = snn_shape2(S, A);
    else if (!strcmp(k, "bis")) m = snn_bispike_new(A / 1000.0f, Bv / 1000.0f), in = snn_shape2(S, C);
    else return fprintf(stderr, "driver_lm: unknown module %s\n", k), 3;
    snprintf(m->name, sizeof m->name, "%s", k);
    m->in = in;
    snn_status st = m->ops->setup(m, in);
    if (st != SNN_OK) return fail(st);
    if (off >= 0 && (st = snn_lm_set_offset(m, off)) != SNN_OK) return fail(st);
    size_t np = 0;
    for (int i = 0; i < m->n_params; i++) np += m->params[i].numel;
    float *P = calloc(np + 1, sizeof(float)), *G = calloc(np + 1, sizeof(float));
    np = 0;
    for (int i = 0; i < m->n_params; i++) {
        m->params[i].data = P + np;
        m->params[i].grad = G + np;
        np += m->params[i].numel;
    }
    snn_arena ar = {0};
    snn_arena_begin_measure(&ar);
    if (m->ops->reserve) m->ops->reserve(m, &ar, T, N);
    if ((st = snn_arena_allocate(&ar, ar.used)) != SNN_OK) return fail(st);
    if (m->ops->reserve) m->ops->reserve(m, &ar, T, N);
    size_t B = (size_t)T * N, ni = B * snn_shape_numel(in), no = B * snn_shape_numel(m->out);
    float *x = rd(ni * sizeof(float));
    float *pin = rd(np * sizeof(float));
    memcpy(P, pin, np * sizeof(float));
    float *dy = rd(no * sizeof(float));
    float *y = malloc(no * sizeof(float)), *dx = malloc(ni * sizeof(float));
    for (size_t i = 0; i < no; i++) y[i] = NAN;
    for (size_t i = 0; i < ni; i++) dx[i] = NAN;
    snn_run r = {.T = T, .N = N, .training = 1, .be = snn_backend_cpu()};
    if ((st = m->ops->forward(m, &r, x, y)) != SNN_OK) return fail(st);
    if ((st = m->ops->backward(m, &r, x, y, dy, dx)) != SNN_OK) return fail(st);
    wr(y, no * sizeof(float));
    wr(dx, ni * sizeof(float));
    wr(G, np * sizeof(float));
    snn_arena_free(&ar);
    snn_module_free(m);
    free(P), free(G), free(x), free(pin), free(dy), free(y), free(dx);
    return 0;
}

static int run_loss(char **a) {
    int T = atoi(a[0]), N = atoi(a[1]), S = atoi(a[2]), V = atoi(a[3]), sum = atoi(a[4]);
    size_t n = (size_t)T * N * S * V, ns = (size_t)N * S;
    float *l = rd(n * sizeof(float));
    int32_t *lab = rd(ns * sizeof(int32_t));
    float *mask = rd(ns * sizeof(float));
    double *tl = malloc(ns * sizeof(double)), ls, cn;
    float *d = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) d[i] = NAN;
    /* the count is known before the call: the mask sum */
    double c0 = 0;
    for (size_t i = 0; i < ns; i++) c0 += mask[i];
    snn_status st = snn_lm_cross_entropy(l, lab, mask, T, N, S, V, sum, tl, &ls, &cn, d, (float)(1.0 / c0));
    if (st != SNN_OK) return fail(st);
    for (size_t i = 0; i < ns; i++) {
        float f = (float)tl[i];
        wr(&f, 4);
    }
    float f = (float)ls, g = (float)cn;
    wr(&f, 4);
    wr(&g, 4);
    wr(d, n * sizeof(float));
    free(l), free(lab), free(mask), free(tl), free(d);
    return 0;
}

static snn_gpt_opts parse_opts(char **a) {
    snn_gpt_opts o = snn_gpt_defaults(atoi(a[0]));
    o.vocab = atoi(a[1]);
    o.context = atoi(a[2]);
    o.seq = atoi(a[3]);
    o.layers = atoi(a[4]);
    o.hidden = atoi(a[5]);
    o.heads = atoi(a[6]);
    o.groups = atoi(a[7]);
    o.ffn = atoi(a[8]);
    o.norm = (snn_lm_normalization)atoi(a[9]);
    o.act = (snn_lm_activation)atoi(a[10]);
    o.pos = atoi(a[11]) ? SNN_LM_POS_ROPE : SNN_LM_POS_LEARNED_ABSOLUTE; /* 0 learned, 1 rope */
    o.bias = atoi(a[12]);
    o.tied = atoi(a[13]);
    o.time_steps = atoi(a[14]);
    o.reduce_sum = atoi(a[15]);
    return o;
}

int main(int argc, char **argv) {
    if (argc < 2) return 3;
    if (!strcmp(argv[1], "names") && argc == 18) {
        snn_gpt_opts o = parse_opts(argv + 2);
        snn_model *m;
        snn_status st = snn_gpt_create(&o, 1, &m);
        if (st != SNN_OK) return fail(st);
        for (size_t i = 0; i < snn_model_num_tensors(m); i++) {
            snn_tensor_info t;
            snn_model_tensor(m, i, &t);
            printf("%s", t.name);
            for (int k = 0; k < t.rank; k++) printf(" %d", t.shape[k]);
            printf("\n");
        }
        snn_model_free(m);
        return 0;
    }
    const char *inp = argv[argc - 2], *outp = argv[argc - 1];
    fin = fopen(inp, "rb");
    fout = fopen(outp, "wb");
    if (!fin || !fout) return 3;
    int rc;
    if (!strcmp(argv[1], "mod") && argc == 12) rc = run_mod(argv + 2);
    else if (!strcmp(argv[1], "loss") && argc == 9) rc = run_loss(argv + 2);
    else if ((!strcmp(argv[1], "gpt") && argc == 21) || (!strcmp(argv[1], "gen") && argc == 23)) {
        snn_gpt_opts o = parse_opts(argv + 2);
        snn_model *m;
        snn_status st = snn_gpt_create(&o, 1, &m);
        if (st != SNN_OK) return fail(st);
        size_t np = snn_model_num_params(m);
        float *p = rd(np * sizeof(float));
        memcpy(snn_model_params(m), p, np * sizeof(float));
        if (!strcmp(argv[1], "gpt")) {
            int N = atoi(argv[18]), S = o.seq, T = o.time_steps, V = o.vocab;
            size_t ns = (size_t)N * S;
            int32_t *ids = rd(ns * 4), *lab = rd(ns * 4);
            float *mask = rd(ns * 4);
            float *x = malloc((size_t)T * ns * sizeof(float));
            for (int t = 0; t < T; t++)
                for (size_t i = 0; i < ns; i++) x[t * ns + i] = (float)ids[i];
            if ((st = snn_model_plan(m, T, N)) != SNN_OK) return fail(st);
            const float *y;
            snn_model_zero_grad(m);
            if ((st = snn_model_forward(m, x, 1, &y)) != SNN_OK) return fail(st);
            double *tl = malloc(ns * sizeof(double)), ls, cn, c0 = 0;
            for (size_t i = 0; i < ns; i++) c0 += mask[i];
            float *d = malloc((size_t)T * ns * V * sizeof(float));
            st = snn_lm_cross_entropy(y, lab, mask, T, N, S, V, o.reduce_sum, tl, &ls, &cn, d, (float)(1.0 / c0));
            if (st != SNN_OK) return fail(st);
            if ((st = snn_model_backward(m, d)) != SNN_OK) return fail(st);
            for (size_t i = 0; i < ns * V; i++) {
                float a = 0;
                for (int t = 0; t < T; t++) a += y[t * ns * V + i];
                if (!o.reduce_sum) a /= (float)T;
                wr(&a, 4);
            }
            float L = (float)(ls / cn);
            wr(&L, 4);
            wr(snn_model_grads(m), np * sizeof(float));
            free(ids), free(lab), free(mask), free(x), free(tl), free(d);
        } else {
            int B = atoi(argv[18]), P = atoi(argv[19]), NEW = atoi(argv[20]);
            int32_t *pr = rd((size_t)B * P * 4), *out = malloc((size_t)B * (P + NEW) * 4);
            snn_lm_sampling s = {.temperature = 0, .top_k = -1, .top_p = 1, .seed = 1, .eos = -1};
            if ((st = snn_gpt_generate(m, pr, B, P, NEW, &s, out)) != SNN_OK) return fail(st);
            wr(out, (size_t)B * (P + NEW) * 4);
            free(pr), free(out);
        }
        free(p);
        snn_model_free(m);
        rc = 0;
    } else {
        fprintf(stderr, "driver_lm: bad arguments\n");
        rc = 3;
    }
    fclose(fout);
    return rc;
}
