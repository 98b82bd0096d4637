/* mpirun snn train --data-parallel ddp --device cuda: the data-parallel GPU model (one replica
 * a rank, NCCL collectives inside its captured step) over the whole-model runner of
 * include/snn/cuda.h, and its checkpoint in the CPU's training-checkpoint format. Single-GPU
 * train, eval and predict run on the engine (snn_model_to) and do not come here. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "snn/checkpoint.h"
#include "snn/prepare.h"
#include "snn/train.h"
#include "train_cuda.h"

#ifndef SNN_HAVE_CUDA

/* device_parse exits 2 with "built without CUDA" before any of these could run */
gpu_dp *gpu_dp_open(snn_model *m, struct snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse) {
    (void)m; (void)world; (void)T; (void)N; (void)pcfg; (void)oo; (void)clip; (void)use_mse;
    device_parse(NULL, device);
    return NULL;
}
struct snn_cuda_model *gpu_dp_model(gpu_dp *s) { (void)s; return NULL; }
snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta) {
    (void)s; (void)m; (void)opt; (void)path; (void)meta;
    return SNN_E_UNSUPPORTED;
}
void gpu_dp_close(gpu_dp *s) { (void)s; }

#else

#include "snn/cuda.h"
#include "snn/dist.h"

static snn_dtype compute_type(const snn_precision_config *p) {
    switch (p->mode) {
    case SNN_PRECISION_FP32: return SNN_F32;
    case SNN_PRECISION_BF16: return SNN_BF16;
    case SNN_PRECISION_FP16: return SNN_F16;
    case SNN_PRECISION_FP8: return SNN_F8E4M3; /* the recipe travels in opts.fp8 */
    default:
        die_usage("--precision %s is not available with --device cuda", snn_precision_mode_name(p->mode));
    }
    return SNN_F32;
}

/* ---- FP8 state and checkpoints ----
 * The checkpoint format of FP8 training is the CPU's (snn_training_checkpoint_save: per
 * converted module and operand a scale and an amax history). The tool reads and writes it
 * through a CPU precision prepared over the host model just for that and released again
 * (the runner refuses a model that still carries one): snn_prepare_model_for_state, which
 * accepts the model's optimizer since that precision only carries state in and out. */
static snn_status prepare_for_state(snn_model *m, const snn_precision_config *pcfg, snn_precision **p) {
    return snn_prepare_model_for_state(m, pcfg, p);
}

/* The training checkpoint of an fp8 run: the runner's FP8 state into a CPU precision, then
 * the CPU's writer. A runner whose recipe keeps no state (current, block) leaves the CPU
 * precision's initial state, which is what the CPU saves for those recipes. */
static snn_status save_fp8_checkpoint(snn_cuda_model *g, snn_model *m, const snn_precision_config *pcfg,
                                      snn_optimizer *opt, const char *path, const char *const *meta) {
    int n = 0, hl = 0;
    SNN_TRY_TOOL(snn_cuda_model_fp8_state(g, &n, &hl, NULL, NULL));
    float *sc = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1));
    float *hs = malloc(sizeof(float) * 3 * (size_t)(n ? n : 1) * (size_t)(hl ? hl : 1));
    snn_precision *p = NULL;
    snn_status st = sc && hs ? SNN_OK : SNN_E_NOMEM;
    if (st == SNN_OK) st = snn_cuda_model_fp8_state(g, NULL, NULL, sc, hl ? hs : NULL);
    if (st == SNN_OK) st = prepare_for_state(m, pcfg, &p);
    /* history 0 (current, block scaling) loads nothing: the CPU precision's initial state */
    if (st == SNN_OK) st = snn_precision_fp8_load_state(p, n, hl, sc, hs);
    if (st == SNN_OK) st = snn_training_checkpoint_save(m, p, opt, path, meta);
    snn_precision_free(p);
    free(sc);
    free(hs);
    return st;
}

struct gpu_dp {
    snn_cuda *c;
    snn_comm *nccl;
    snn_cuda_collectives coll;
    snn_cuda_model *g;
    snn_precision_config pcfg;
    snn_dtype ct;
};

gpu_dp *gpu_dp_open(snn_model *m, snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse) {
    gpu_dp *s = calloc(1, sizeof *s);
    if (!s) die_status(SNN_E_NOMEM, "allocating");
    s->pcfg = *pcfg;
    s->ct = compute_type(&s->pcfg);
    int dev = device_parse(NULL, device);
    if (!strcmp(device, "cuda")) dev = snn_comm_local_rank(world);
    snn_status st = snn_comm_nccl_create(world, dev, &s->nccl);
    if (st != SNN_OK) die_status(st, "creating the NCCL communicator");
    st = snn_cuda_create(dev, 0, &s->c);
    if (st != SNN_OK) die_status(st, "opening the GPU");
    s->coll = snn_ddp_cuda_collectives(s->nccl);
    snn_cuda_model_opts o = {.T = T, .N = N, .compute = s->ct, .loss = use_mse ? SNN_CUDA_LOSS_MSE_RATE : SNN_CUDA_LOSS_CE,
                             .clip = clip, .fp8 = &s->pcfg, .neuron = &s->pcfg, .dp = &s->coll};
    st = snn_cuda_model_create(s->c, m, &o, oo, &s->g);
    if (st != SNN_OK) die_status(st, "putting the model on the GPU");
    return s;
}

snn_cuda_model *gpu_dp_model(gpu_dp *s) { return s ? s->g : NULL; }

snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta) {
    SNN_TRY_TOOL(snn_cuda_model_download(s->g));
    float scale;
    int tracker;
    SNN_TRY_TOOL(snn_cuda_model_save_state(s->g, opt, &scale, &tracker));
    SNN_TRY_TOOL(snn_model_check_finite(m));
    if (s->ct == SNN_F8E4M3) return save_fp8_checkpoint(s->g, m, &s->pcfg, opt, path, meta);
    snn_loss_scaler scaler;
    snn_loss_scaler_init(&scaler, NULL);
    if (s->ct == SNN_F16) SNN_TRY_TOOL(snn_loss_scaler_set_state(&scaler, scale, tracker));
    return snn_training_checkpoint_save_cfg(m, &s->pcfg, &scaler, opt, path, meta);
}

void gpu_dp_close(gpu_dp *s) {
    if (!s) return;
    snn_cuda_model_destroy(s->g);
    snn_cuda_destroy(s->c);
    snn_comm_free(s->nccl);
    free(s);
}

#endif
