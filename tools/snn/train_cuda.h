/* snn train on the GPU (tools/snn/train_cuda.c). */
#ifndef SNN_TOOL_TRAIN_CUDA_H
#define SNN_TOOL_TRAIN_CUDA_H

#include "snn/optim.h"
#include "snn/precision.h"
#include "snn/snn.h"

/* FP8 delayed-scaling state of the converted modules in the runner's layout
 * (snn_cuda_model_fp8_state): n modules, history_len (0 for the stateless recipes),
 * scales [n][3], histories [n][3][history_len]. All zero: none. */
typedef struct train_fp8_state {
    int n, history_len;
    float *scales, *histories;
} train_fp8_state;
void train_fp8_state_free(train_fp8_state *s);

typedef struct train_cuda_args {
    snn_model *m;
    const snn_dataset *train, *test;
    const char *dataset, *model_name, *device, *out;
    int T, N, epochs, use_mse, quiet, json;
    long total_steps;
    snn_optim_opts oo;
    snn_lr_sched sched;
    float clip;
    snn_encoding enc;
    uint64_t seed;
    snn_precision_config pcfg;
    /* host optimizer over m (same options as oo): carries the optimizer state in (resume) and
     * out (the training checkpoint) */
    snn_optimizer *opt;
    int start_epoch;          /* 1, or the epoch after a resumed checkpoint's */
    int resumed;              /* opt and scaler hold restored state to put on the device */
    snn_loss_scaler scaler;   /* FP16 loss scaler state (restored, or the defaults) */
    train_fp8_state fp8;      /* --precision fp8 resumed: the checkpoint's FP8 state */
} train_cuda_args;

/* Resume an fp8 training checkpoint for the GPU: parameters, step count, optimizer state and
 * the FP8 state (read through a CPU precision over m, the format of
 * snn_training_checkpoint_save, which is released again: the runner keeps the state). */
snn_status train_cuda_fp8_resume(snn_model *m, const snn_precision_config *pcfg, snn_optimizer *opt,
                                 const struct snn_ckpt *ck, train_fp8_state *out);
/* The precision a GPU eval/predict runs: the flags when given, else the checkpoint's. */
struct precision_flags; /* tools/snn/common.h */
snn_precision_config gpu_precision_config(const struct precision_flags *pf, const struct snn_ckpt *ck);

/* 1 for "cuda" and "cuda:N". */
int device_is_cuda(const char *device);
/* Train, evaluate each epoch, write metrics.jsonl and model.safetensors (a training
 * checkpoint: optimizer and loss-scaler state included, so --resume continues it on either
 * device); returns the exit code (bad input exits 2 from inside, like the CPU path). */
int train_cuda(const train_cuda_args *a);

/* Accuracy and mean cross-entropy of m on ds, run on the GPU in batches of N. ck (may be
 * NULL): the checkpoint m came from, whose FP8 scaling state an fp8 run starts from. */
snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, const struct snn_ckpt *ck, double *acc,
                     double *loss);

/* Inference sessions on the GPU (snn predict): open exits 2 on failure; forward runs `valid`
 * samples of xb [N][F] (direct encoding) and writes y [T][N][C]. */
typedef struct gpu_infer gpu_infer;
gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg,
                          const struct snn_ckpt *ck);
snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y);
void gpu_infer_close(gpu_infer *s);

#endif
