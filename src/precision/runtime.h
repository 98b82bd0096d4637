/* Internal state of a prepared precision (include/snn/prepare.h). */
#ifndef SNN_PRECISION_RUNTIME_H
#define SNN_PRECISION_RUNTIME_H

#include "nn/model_internal.h"
#include "precision/fp8.h"
#include "snn/prepare.h"

typedef enum {
    SNN_PM_GEMM16 = 1,      /* Linear/Conv on 16-bit operands, FP32 accumulation */
    SNN_PM_FP8_LINEAR = 2,  /* Linear as an FP8 GEMM */
    SNN_PM_FP8_CONV1D = 3,  /* pointwise Conv1d as an FP8 GEMM over channels */
    SNN_PM_NEURON = 4       /* neuron with storage / forward / backward dtypes */
} snn_pm_kind;

typedef struct snn_prec_module {
    snn_module *m;
    const snn_module_ops *orig;  /* the module's own table, restored on free */
    snn_pm_kind kind;
    struct snn_precision *p;
    int in, out;                 /* GEMM: reduction and output widths */
    snn_fp8_tensor_state sx, sw, sdy;
    int has_fp8_state;
    int spike_input;             /* input is neuron spikes: E4M3 with unit scale, no amax pass */
    void *w16;                   /* 16-bit GEMM on a gemm_rounds backend, SNN_MODULE_W16 kinds:
                                    the weight in the 16-bit type (device), written by the
                                    forward and read by the backward; NULL otherwise */
    int direct_shared;           /* 16-bit GEMM of a kind whose weight is another module's (a
                                    tied LMHead, snn_module_ops.gemm_weight) on a gemm_rounds
                                    backend: the GEMMs round the FP32 operands, no copy */
    uint64_t w16_version;        /* the model's param_version w16 was cast at (w16_valid) */
    int w16_valid;
    void *b16;                   /* with w16, a kind with a bias (params[1], SNN_MODULE_W16): the
                                    bias rounded to the 16-bit type, as that type (for a 16-bit C,
                                    snn_run.bias16) and as FP32 values (b32: what its GEMMs with an
                                    FP32 C and a defer_bias neuron add); cast with w16 */
    float *b32;
    void *x16;                   /* a direct 16-bit Linear (SNN_MODULE_TYPED_IO) with an FP32 x:
                                    the forward's 16-bit copy of x, which its backward's weight
                                    gradient multiplies again (snn_run.x16); x16_cap elements */
    size_t x16_cap;
    int x16_valid;
    /* An FP8 Linear on codes (prec_fp8_codes.c): its weight's codes row-wise [out][in16] and
     * transposed [in][out16], written by a forward and read by the backward and by later
     * forwards while the weights and the weight's scale stay (w8_version, w8_scale). */
    void *w8, *w8t;
    uint64_t w8_version;
    float w8_scale;
    int w8_valid;
} snn_prec_module;

/* m->precision_flags bits */
#define SNN_PREC_SPIKE_INPUT 1

/* Data-parallel hook (src/dist/ddp.c) into snn_precision_backward, so that the step's own
 * order stays in one place: grads after backward, before unscaling (average over the DP
 * group); overflow after unscaling (FP16: every rank takes the same skip decision); amax
 * before the delayed-scaling update (MAX over DP of every state's amax_history[0], packed
 * in snn_precision_fp8_states order). Any hook may be NULL. */
typedef struct snn_precision_sync {
    void *ctx;
    snn_status (*grads)(void *ctx, float *g, size_t n);
    snn_status (*overflow)(void *ctx, int *found_inf);
    snn_status (*amax)(void *ctx, float *amax, size_t n);
} snn_precision_sync;

struct snn_precision {
    snn_precision_config cfg;
    snn_model *model;
    const struct snn_backend *be; /* the model's op table (its device) */
    char device[32];
    snn_dtype half;               /* F16 or BF16 operand/activation type; F32 in fp32 */
    snn_fp8_recipe_params fp8;    /* valid when cfg.mode == fp8 */
    snn_fp8_recipe resolved_recipe;
    int use_scaler;
    snn_loss_scaler scaler;
    snn_prec_module *mods;
    int n_mods;
    float *scratch;               /* operand copies, sized by snn_precision_plan */
    size_t scratch_cap;           /* floats */
    float *dy_scaled;             /* fp16: the scaled dL/dy */
    size_t dy_cap;
    char *report;                 /* JSON from the analysis, before conversion */
    char *describe;               /* last snn_precision_describe() */
    int neurons_converted;
    int spike_fp8;                /* use the spike path where it applies (default 1) */
    snn_precision_sync sync;      /* data-parallel hook (zero: none) */
    float *amax_pack;             /* [3 * FP8 modules] for sync.amax (prec_sync.c) */
    /* FP8 GEMMs on codes (prec_fp8_codes.c; a table with fp8_codes, per-tensor recipes):
     * device [3 * n_mods][4] (each state's 1/s, 16 bytes apart) then [3 * n_mods] (its amax),
     * the host copy of the amaxes,
     * which states were quantised since the last flush, and whether any was */
    int fp8_emulate;              /* no codes path (SNN_FP8_GEMM unset or 'emulate') */
    float *fp8_dev;
    float *fp8_host;
    unsigned char *fp8_used;
    int fp8_pending;
    /* the weight copies the optimizer's update writes (prec_wcopy.c): [2 * n_mods], sized by
     * snn_precision_plan, and the module of each */
    struct snn_optim_copy *wcopy;
    int *wcopy_pm;
};

/* Install (or with NULL remove) the data-parallel hook; sizes the amax pack up front so
 * that the step allocates nothing. */
snn_status snn_precision_set_sync(struct snn_precision *p, const snn_precision_sync *s);
/* The FP8 tensor states in a fixed order (module order; input, weight, grad each):
 * count, and the i-th (NULL past the end). Delayed scaling's amax histories live here. */
size_t snn_precision_fp8_state_count(const struct snn_precision *p);
snn_fp8_tensor_state *snn_precision_fp8_state(struct snn_precision *p, size_t i);
/* FP8 GEMMs on codes (prec_fp8_codes.c): whether module pm takes them, the scratch floats
 * they need at `rows` rows, the device slots (allocated once, by snn_precision_plan), the
 * module's forward and backward, and the flush of the device amaxes into the host states
 * (before the delayed-scaling update, a checkpoint or an export of the state). */
int snn_prec_fp8_codes_on(const struct snn_precision *p, const snn_prec_module *pm);
size_t snn_prec_fp8_codes_scratch(const struct snn_precision *p, const snn_prec_module *pm, size_t rows);
snn_status snn_prec_fp8_codes_plan(struct snn_precision *p);
/* x, y, dy, dx token-major ([rows][in] / [rows][out]); work: the scratch after the token-major
 * copies (snn_prec_fp8_token_floats) */
snn_status snn_prec_fp8_codes_forward(snn_module *m, const float *x, int xcodes, int defer, int rows, float *y,
                                      void *work);
snn_status snn_prec_fp8_codes_backward(snn_module *m, const float *x, const float *dy, int rows, float *dx,
                                       void *work);
/* Floats at the start of the precision's scratch that an FP8 pointwise Conv1d's token-major
 * copies take (prec_exec.c), rounded up to 256 bytes; 0 for a Linear. */
size_t snn_prec_fp8_token_floats(const snn_prec_module *pm, size_t rows);
snn_status snn_precision_fp8_flush(struct snn_precision *p);
/* The FP8 recipes' part of the end of a training step (after the update): the amaxes from
 * the device, the data-parallel MAX, each state's recipe update (delayed scaling's new scales
 * move the graph epoch). snn_precision_backward and the device step (src/train/step.c). */
snn_status snn_precision_fp8_after_step(struct snn_precision *p);
/* Called by snn_precision_backward before the delayed-scaling update. */
snn_status snn_precision_sync_amax(struct snn_precision *p);

/* The weight a wrapped GEMM module's GEMMs read (snn_module_ops.gemm_weight or params[0]). */
snn_param *snn_prec_gemm_weight(const snn_prec_module *pm);
/* The bias a 16-bit wrapper rounds (params[1] of a SNN_MODULE_W16 kind), NULL if none. */
snn_param *snn_prec_gemm_bias(const snn_prec_module *pm);

/* prec_wcopy.c: the 16-bit weight copies of the direct wrappers as copies for the update of
 * opt (the model's optimizer), in p->wcopy; returns their count, *all = every wrapper's copy
 * is among them. After an update that wrote them, _written marks them current. */
struct snn_optimizer;
int snn_prec_weight_copies(struct snn_precision *p, const struct snn_optimizer *opt, int *all);
void snn_prec_weight_copies_written(struct snn_precision *p, int k, int all);

/* Size the scratch for (T, N); called by snn_model_plan. */
snn_status snn_precision_plan(struct snn_precision *p, int T, int N);
/* prec_store.c: a 16-bit GEMM module that runs on the direct path (prec_exec.c); the
 * 16-bit activation storage between modules, assigned after conversion and cleared when the
 * precision is freed. */
int snn_prec_gemm16_direct(const struct snn_precision *p, const snn_prec_module *pm);
/* A 16-bit GEMM wrapper on its direct path (prec_exec.c): it holds a 16-bit copy of the
 * weight, or the weight is shared and the GEMMs round it. */
static inline int snn_prec_gemm16_on_direct_path(const snn_prec_module *pm) {
    return pm->kind == SNN_PM_GEMM16 && (pm->w16 != NULL || pm->direct_shared);
}
void snn_precision_assign_stores(struct snn_precision *p);
void snn_precision_clear_stores(struct snn_precision *p);
/* The 16-bit type in which module m (a SNN_MODULE_DY16 kind) can take its dy from the loss
 * (snn_model_backward_dy16): the mode's type when m runs inside a direct 16-bit GEMM wrapper
 * on a gemm_rounds table, SNN_F32 (no) otherwise. */
snn_dtype snn_precision_dy16_type(const struct snn_precision *p, const snn_module *m);
/* The module tables that wrap a converted module. */
extern const snn_module_ops snn_prec_gemm16_ops;
extern const snn_module_ops snn_prec_fp8_ops;
extern const snn_module_ops snn_prec_neuron_ops;

#endif
