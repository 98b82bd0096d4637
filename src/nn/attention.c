/* Causal self-attention core on a fused q|k|v row.
 *
 * Per sample [S, W] with W = (heads + 2*groups) * hd: q heads first, then the k groups, then
 * the v groups (GPT-2's c_attn layout when groups == heads). Output [S, heads * hd].
 * For every folded row b and head h (group g = h / (heads/groups)):
 *   P = softmax_rowwise(mask(Q K^T * scale)),  O = P V,  scale = 1/sqrt(hd),
 * position i sees keys 0..i. The forward saves P (rows * heads * S * S floats) for the
 * backward:  dP = dO V^T,  dZ = P .* (dP - rowsum(dP .* P)),  dQ = scale dZ K,
 *   dK += scale dZ^T Q,  dV += P^T dO  (heads of one group accumulate into its k and v).
 * The arithmetic is the op table's (attention_forward / attention_backward; the CPU
 * reference is src/backend/cpu/cpu_lm.c, whose folded rows run OpenMP-parallel, each thread
 * on its own S*S scratch, so results do not depend on the thread count); P and the
 * scratch live in the arena. In a 16-bit precision mode the core is wrapped like a Linear
 * (prec_exec.c) and its products take 16-bit operands (backend.h, attention_forward's t).
 *
 * Decoding with a KV cache (snn_attention_attach_cache): the new keys/values of positions
 * offset..offset+S-1 are stored into the cache and the queries attend to all cached
 * positions up to their own; only the cache persists between calls. The cache lives in the
 * memory of the model's device (the op table's attention_cached).
 *
 * Between two 16-bit Linears on a table with attention_io16 (prec_store.c), x, y and their
 * gradients are stored in the products' 16-bit type (snn_module.in_store / out_store): the
 * _io entries read and write that storage, the values being those the FP32 entries and the
 * Linears' roundings give. */
#include <math.h>
#include "backend/backend.h"
#include "backend/cpu/cpu_lm.h"
#include "nn/lm_layers.h"

typedef struct {
    int offset; /* first member: snn_lm_set_offset writes it */
    int heads, groups, hd, seq;
    float *P;            /* [rows][heads][S][S] saved probabilities (arena) */
    void *scratch;       /* the backward's scratch, attention_work_bytes (arena) */
    int have_forward;
    float *kc, *vc;      /* cache [rows][groups][cap][hd] (caller's) */
    int cache_rows, cap;
} attn_impl;

static snn_status attn_setup(snn_module *m, snn_shape in) {
    attn_impl *a = m->impl;
    char b[64];
    if (a->heads <= 0 || a->groups <= 0 || a->heads % a->groups || a->hd <= 0)
        return snn_error(SNN_E_INVALID,
                         "CausalSelfAttention needs heads divisible by query groups and a positive "
                         "head size (got heads %d, groups %d, head size %d)",
                         a->heads, a->groups, a->hd);
    int W = (a->heads + 2 * a->groups) * a->hd;
    if (in.rank != 2 || in.d[1] != W)
        return snn_error(SNN_E_SHAPE, "CausalSelfAttention expects [S, %d] fused q|k|v, got %s", W,
                         snn_shape_str(in, b, sizeof b));
    a->seq = in.d[0];
    m->out = snn_shape2(a->seq, a->heads * a->hd);
    m->n_params = 0;
    return SNN_OK;
}

static void attn_reserve(snn_module *m, snn_arena *ar, int T, int N) {
    attn_impl *a = m->impl;
    size_t SS = (size_t)a->seq * (size_t)a->seq;
    const int R = T * N;
    a->P = snn_arena_floats(ar, (size_t)R * (size_t)a->heads * SS);
    a->scratch = snn_arena_take(ar, m->be->attention_work_bytes(m->be, R, a->heads, a->seq));
    a->have_forward = 0;
}

/* Row-wise masked softmax of Z [rows][ld] in place: row i keeps columns 0..last(i) with
 * last(i) = last[i] (or i + off when last is NULL), the rest of its `cols` become 0. Shared by
 * the context-parallel attention (src/dist), whose rows sit at arbitrary global positions.
 * The CPU table's attention uses the same function (cpu_lm.c). */
void snn_attn_softmax_rows(float *Z, int rows, int cols, int ld, int off, const int *last) {
    snn_cpu_attn_softmax_rows(Z, rows, cols, ld, off, last);
}

/* The products' operand type: FP32, or the 16-bit type of a precision wrapper (prec_exec.c
 * wraps the core in a 16-bit mode; its x and dy then hold such values, or the device's
 * attention rounds them). */
static snn_dtype op_type(const snn_run *r) { return r->gemm_type ? (snn_dtype)r->gemm_type : SNN_F32; }

static snn_status attn_forward_cached(snn_module *m, const snn_run *r, const float *x, float *y) {
    attn_impl *a = m->impl;
    const long R = (long)snn_rows(r);
    if (R != a->cache_rows)
        return snn_error(SNN_E_SHAPE, "%s: the KV cache holds %d rows, the step has %ld", m->name,
                         a->cache_rows, R);
    if (a->offset < 0 || a->offset + a->seq > a->cap)
        return snn_error(SNN_E_INVALID, "%s: positions %d..%d exceed the KV cache of %d", m->name, a->offset,
                         a->offset + a->seq - 1, a->cap);
    a->have_forward = 0;
    if (m->in_store)
        return m->be->attention_cached_io(m->be, (snn_dtype)m->in_store, (int)R, a->seq, a->heads, a->groups, a->hd,
                                          a->cap, a->offset, 1.0f / sqrtf((float)a->hd), x, a->kc, a->vc, y);
    return m->be->attention_cached(m->be, (int)R, a->seq, a->heads, a->groups, a->hd, a->cap, a->offset,
                                   1.0f / sqrtf((float)a->hd), x, a->kc, a->vc, y);
}

/* 16-bit activations on both sides (prec_store.c sets them together, in the products' type)
 * or on neither. */
static snn_status io_check(const snn_module *m, const snn_run *r) {
    if (m->in_store != m->out_store || (m->in_store && m->in_store != (int)op_type(r)))
        return snn_error(SNN_E_STATE, "%s: its input and output are stored as %s and %s with %s products", m->name,
                         snn_dtype_name((snn_dtype)m->in_store), snn_dtype_name((snn_dtype)m->out_store),
                         snn_dtype_name(op_type(r)));
    return SNN_OK;
}

static snn_status attn_forward(snn_module *m, const snn_run *r, const float *x, float *y) {
    attn_impl *a = m->impl;
    if (a->kc) return attn_forward_cached(m, r, x, y);
    if (!a->P) return snn_error(SNN_E_STATE, "%s: reserve must run before forward", m->name);
    SNN_TRY(io_check(m, r));
    if (m->in_store)
        SNN_TRY(m->be->attention_forward_io(m->be, op_type(r), (int)snn_rows(r), a->seq, a->heads, a->groups, a->hd,
                                            1.0f / sqrtf((float)a->hd), x, y, a->P, a->scratch));
    else
        SNN_TRY(m->be->attention_forward(m->be, op_type(r), (int)snn_rows(r), a->seq, a->heads, a->groups, a->hd,
                                         1.0f / sqrtf((float)a->hd), x, y, a->P, a->scratch));
    a->have_forward = 1;
    return SNN_OK;
}

static snn_status attn_backward(snn_module *m, const snn_run *r, const float *x, const float *y,
                                const float *dy, float *dx) {
    (void)y;
    attn_impl *a = m->impl;
    if (a->kc) return snn_error(SNN_E_STATE, "%s: no backward while a KV cache is attached", m->name);
    if (!a->have_forward) return snn_error(SNN_E_STATE, "%s: backward called before forward", m->name);
    if (!dx) return SNN_OK;
    SNN_TRY(io_check(m, r));
    if (m->in_store)
        return m->be->attention_backward_io(m->be, op_type(r), (int)snn_rows(r), a->seq, a->heads, a->groups, a->hd,
                                            1.0f / sqrtf((float)a->hd), x, a->P, dy, dx, a->scratch);
    return m->be->attention_backward(m->be, op_type(r), (int)snn_rows(r), a->seq, a->heads, a->groups, a->hd,
                                     1.0f / sqrtf((float)a->hd), x, a->P, dy, dx, a->scratch);
}

static void attn_describe(const snn_module *m, snn_module_desc *d) {
    const attn_impl *a = m->impl;
    d->heads = a->heads;
    d->in_features = (a->heads + 2 * a->groups) * a->hd;
    d->out_features = a->heads * a->hd;
    d->scale = 1.0f / sqrtf((float)a->hd);
}

static const snn_module_ops attn_ops = {
    .id = SNN_KIND_CAUSAL_SELF_ATTENTION, .kind = "CausalSelfAttention",
    .devices = SNN_DEVMASK_ALL,
    .flags = SNN_MODULE_TYPED_IO, /* both sides 16-bit, where the table has attention_io16 */
    .setup = attn_setup,
    .reserve = attn_reserve,
    .forward = attn_forward,
    .backward = attn_backward,
    .describe = attn_describe,
};

snn_module *snn_attention_new(int heads, int groups, int head_dim) {
    snn_module *m = snn_module_new(&attn_ops, sizeof(attn_impl));
    if (!m) return NULL;
    attn_impl *a = m->impl;
    a->heads = heads;
    a->groups = groups;
    a->hd = head_dim;
    return m;
}

snn_status snn_attention_attach_cache(snn_module *m, float *k, float *v, int rows, int capacity) {
    if (!snn_module_kind_is(m, SNN_KIND_CAUSAL_SELF_ATTENTION))
        return snn_error(SNN_E_INVALID, "%s is not an attention module", m->name);
    attn_impl *a = m->impl;
    if ((k == NULL) != (v == NULL) || (k && (rows <= 0 || capacity <= 0)))
        return snn_error(SNN_E_INVALID, "KV cache: both buffers, positive rows and capacity (got %d, %d)",
                         rows, capacity);
    snn_graph_invalidate_all(); /* the forward takes another path and pointers */
    a->kc = k;
    a->vc = v;
    a->cache_rows = rows;
    a->cap = capacity;
    return SNN_OK;
}
