/* Cached generation for gpt / spikelm (snn_gpt_generate in snn/lm.h).
 *
 * Two instances of the network share the caller's weights (copied in): one with S = P for
 * the prefill, one with S = 1 for the decode steps. Every attention core of layer i in both
 * points at the same KV cache [T*B][groups][P + max_new][head_dim]; the position modules
 * and the cores get the offset of the step. Each forward runs a complete T window from the
 * neuron reset state, so nothing but the KV cache carries over between steps. The next
 * token comes from the last position's logits reduced over T (mean or sum, the model's
 * temporal reduction). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "models/gpt_gen.h"
#include "nn/lm_layers.h"
#include "nn/model_internal.h"
#include "snn/lm.h"

typedef snn_gen_mods gen_mods;

static void collect(snn_module *m, void *ctx) {
    gen_mods *g = ctx;
    const int attn = snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION);
    if (attn && g->n_core < 1024) g->core[g->n_core++] = m;
    if ((attn || snn_module_kind_is(m, SNN_KIND_POSITION_EMBEDDING) || snn_module_kind_is(m, SNN_KIND_ROPE)) &&
        g->n_pos < 2048)
        g->pos[g->n_pos++] = m;
}

void snn_gen_collect(snn_model *m, snn_gen_mods *g) {
    memset(g, 0, sizeof *g);
    snn_module_walk(m->root, collect, g);
}

snn_status snn_gen_set_offset(const snn_gen_mods *g, int off) {
    for (int i = 0; i < g->n_pos; i++) SNN_TRY(snn_lm_set_offset(g->pos[i], off));
    return SNN_OK;
}

static snn_status set_offset(gen_mods *g, int off) { return snn_gen_set_offset(g, off); }

typedef struct {
    float p;
    int id;
} cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

size_t snn_gen_scratch_bytes(int V) { return (size_t)(V > 0 ? V : 1) * sizeof(cand); }

int snn_gen_pick(const float *z, int V, const snn_lm_sampling *s, snn_rng *rng, void *scratch) {
    cand *c = scratch;
    if (s->temperature == 0.0f) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (z[v] > z[best]) best = v;
        return best;
    }
    float mx = z[0];
    for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        c[v].p = expf((z[v] - mx) / s->temperature);
        c[v].id = v;
        sum += c[v].p;
    }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int keep = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double acc = 0.0, kept = 0.0;
    int n = 0;
    for (; n < keep; n++) {
        kept += c[n].p;
        acc = kept / sum;
        if (acc >= s->top_p) {
            n++;
            break;
        }
    }
    double u = (double)snn_rng_next_uniform(rng) * kept, run = 0.0;
    for (int i = 0; i < n; i++) {
        run += c[i].p;
        if (u < run) return c[i].id;
    }
    return c[n - 1].id;
}

/* z[b][v] = T-reduction of logits[t][b][pos][v] for a [T][B][S][V] array. */
static void reduce_last(const float *logits, int T, int B, int S, int pos, int V, int sum, float *z) {
    for (int b = 0; b < B; b++)
        for (int v = 0; v < V; v++) {
            float a = 0.0f;
            for (int t = 0; t < T; t++) a += logits[(((size_t)t * B + b) * S + pos) * V + v];
            z[(size_t)b * V + v] = sum ? a : a / (float)T;
        }
}

snn_status snn_gen_check_sampling(const snn_lm_sampling *s, int vocab) {
    if (s->eos < -1 || s->eos >= vocab)
        return snn_error(SNN_E_INVALID, "generate: eos_token_id %d is not in the vocabulary [0, %d)", s->eos, vocab);
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return snn_error(SNN_E_INVALID, "generate: temperature must be finite and >= 0");
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return snn_error(SNN_E_INVALID, "generate: top_p must be in (0, 1] (got %g)", (double)s->top_p);
    if (s->first_row < 0) return snn_error(SNN_E_INVALID, "generate: first_row must be >= 0");
    if (s->top_k < -1 || s->top_k == 0)
        return snn_error(SNN_E_INVALID, "generate: top_k must be -1 or positive (got %d)", s->top_k);
    return SNN_OK;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

snn_status snn_gpt_generate(snn_model *m, const int32_t *prompt, int B, int P, int max_new,
                            const snn_lm_sampling *s, int32_t *out) {
    return snn_gpt_generate_timed(m, prompt, B, P, max_new, s, out, NULL);
}

snn_status snn_gpt_generate_timed(snn_model *m, const int32_t *prompt, int B, int P, int max_new,
                                  const snn_lm_sampling *s, int32_t *out, snn_lm_generate_stats *stats) {
    snn_lm_generate_stats tm = {0};
    const double t_start = wall_seconds();
    snn_gpt_opts o;
    SNN_TRY(snn_gpt_opts_of(m, &o));
    if (!prompt || !out || !s) return snn_error(SNN_E_INVALID, "generate: NULL argument");
    if (B <= 0 || B > 4096 || P <= 0 || max_new <= 0)
        return snn_error(SNN_E_INVALID, "generate: batch (1..4096), prompt length and max_new_tokens must be "
                         "positive (got %d, %d, %d)", B, P, max_new);
    if ((long)P + max_new > o.context)
        return snn_error(SNN_E_INVALID, "generate: prompt (%d) + max_new_tokens (%d) exceed the context %d", P,
                         max_new, o.context);
    SNN_TRY(snn_gen_check_sampling(s, o.vocab));
    for (long i = 0; i < (long)B * P; i++)
        if (prompt[i] < 0 || prompt[i] >= o.vocab)
            return snn_error(SNN_E_INVALID, "generate: prompt token %d is not in [0, %d)", prompt[i], o.vocab);

    const int T = o.time_steps, V = o.vocab, R = T * B, cap = P + max_new;
    const int hd = o.hidden / o.heads;
    snn_model *pre = NULL, *dec = NULL;
    float *kv = NULL, *x = NULL, *z = NULL;
    cand *c = NULL;
    snn_rng *rng = NULL;
    const snn_backend *kv_be = NULL; /* set when the cache is device memory */
    snn_status st;
    o.seq = P;
    if ((st = snn_gpt_create_empty(&o, &pre)) != SNN_OK) goto done;
    o.seq = 1;
    if ((st = snn_gpt_create_empty(&o, &dec)) != SNN_OK) goto done;
    if (snn_model_num_params(pre) != snn_model_num_params(m) || snn_model_num_params(dec) != snn_model_num_params(m)) {
        st = snn_error(SNN_E_STATE, "generate: the model's parameters do not match its configuration");
        goto done;
    }
    const float *src = snn_model_params(m); /* a device model's weights, downloaded */
    if (!src) {
        st = snn_error(SNN_E_STATE, "generate: reading the model's parameters failed: %s", snn_last_error());
        goto done;
    }
    memcpy(snn_model_params(pre), src, snn_model_num_params(m) * sizeof(float));
    memcpy(snn_model_params(dec), src, snn_model_num_params(m) * sizeof(float));
    /* a model on a device generates there: both instances and the KV cache move to it */
    const char *dev = snn_model_device(m);
    const int on_device = strcmp(dev, "cpu") != 0;
    if (on_device && ((st = snn_model_to(pre, dev)) != SNN_OK || (st = snn_model_to(dec, dev)) != SNN_OK)) goto done;
    if ((st = snn_model_plan(pre, T, B)) != SNN_OK || (st = snn_model_plan(dec, T, B)) != SNN_OK) goto done;
    size_t per = (size_t)R * (size_t)o.groups * (size_t)cap * (size_t)hd;
    const size_t kv_bytes = 2 * per * (size_t)o.layers * sizeof(float);
    if (on_device) {
        kv_be = dec->run.be;
        if ((st = kv_be->alloc(kv_be, kv_bytes, (void **)&kv)) != SNN_OK) {
            kv_be = NULL;
            goto done;
        }
    } else {
        kv = malloc(kv_bytes);
    }
    x = malloc((size_t)R * P * sizeof(float));
    z = malloc((size_t)B * V * sizeof(float));
    c = malloc((size_t)V * sizeof *c);
    if (!kv || !x || !z || !c) {
        st = snn_error(SNN_E_NOMEM, "generate: cannot allocate the KV cache (%zu floats)", 2 * per * (size_t)o.layers);
        goto done;
    }
    static gen_mods gp, gd; /* large tables: off the stack */
    memset(&gp, 0, sizeof gp);
    memset(&gd, 0, sizeof gd);
    snn_module_walk(pre->root, collect, &gp);
    snn_module_walk(dec->root, collect, &gd);
    for (int l = 0; l < o.layers && st == SNN_OK; l++) {
        float *k = kv + 2 * per * (size_t)l, *v = k + per;
        st = snn_attention_attach_cache(gp.core[l], k, v, R, cap);
        if (st == SNN_OK) st = snn_attention_attach_cache(gd.core[l], k, v, R, cap);
    }
    if (st != SNN_OK) goto done;

    for (int b = 0; b < B; b++) memcpy(out + (size_t)b * cap, prompt + (size_t)b * P, (size_t)P * sizeof(int32_t));
    for (int t = 0; t < T; t++)
        for (long i = 0; i < (long)B * P; i++) x[(size_t)t * B * P + i] = (float)prompt[i];
    rng = malloc(sizeof(snn_rng) * (size_t)B);
    if (!rng) {
        st = snn_error(SNN_E_NOMEM, "out of memory for %d sampling streams", B);
        goto done;
    }
    for (int b = 0; b < B; b++) rng[b] = snn_rng_make(s->seed, 0x9e11 + (uint64_t)(s->first_row + b));
    const float *y;
    double t_mark = wall_seconds();
    tm.setup_seconds = t_mark - t_start;
    if ((st = set_offset(&gp, 0)) != SNN_OK || (st = snn_model_forward(pre, x, 0, &y)) != SNN_OK) goto done;
    reduce_last(y, T, B, P, P - 1, V, o.reduce_sum, z);
    for (int step = 0; step < max_new; step++) {
        const double t_now = wall_seconds();
        if (step == 0) tm.prefill_seconds = t_now - t_mark;
        else tm.decode_seconds += t_now - t_mark;
        t_mark = t_now;
        int all_done = 1;
        for (int b = 0; b < B; b++) {
            int prev = out[(size_t)b * cap + P + step - 1];
            int finished = step > 0 && s->eos >= 0 && prev == s->eos;
            int tok = finished ? s->eos : snn_gen_pick(z + (size_t)b * V, V, s, &rng[b], c);
            out[(size_t)b * cap + P + step] = tok;
            all_done &= s->eos >= 0 && tok == s->eos;
        }
        if (step + 1 == max_new) break;
        if (all_done) {
            for (int b = 0; b < B; b++)
                for (int i = P + step + 1; i < cap; i++) out[(size_t)b * cap + i] = s->eos;
            break;
        }
        for (int t = 0; t < T; t++)
            for (int b = 0; b < B; b++) x[(size_t)t * B + b] = (float)out[(size_t)b * cap + P + step];
        if ((st = set_offset(&gd, P + step)) != SNN_OK || (st = snn_model_forward(dec, x, 0, &y)) != SNN_OK) goto done;
        reduce_last(y, T, B, 1, 0, V, o.reduce_sum, z);
        tm.decode_steps++;
    }
    if (tm.decode_steps) tm.decode_seconds += wall_seconds() - t_mark; /* the last step's pick */
    if (stats) *stats = tm;
done:
    free(rng);
    if (kv_be) kv_be->free(kv_be, kv);
    else free(kv);
    snn_model_free(pre);
    snn_model_free(dec);
    free(x);
    free(z);
    free(c);
    return st;
}
