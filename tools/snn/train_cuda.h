/* snn train on the GPU (tools/snn/train_cuda.c). */
#ifndef SNN_TOOL_TRAIN_CUDA_H
#define SNN_TOOL_TRAIN_CUDA_H

#include "snn/optim.h"
#include "snn/precision.h"
#include "snn/snn.h"

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
} train_cuda_args;

/* 1 for "cuda" and "cuda:N". */
int device_is_cuda(const char *device);
/* Train, evaluate each epoch, write metrics.jsonl and model.safetensors (a training
 * checkpoint: optimizer and loss-scaler state included, so --resume continues it on either
 * device); returns the exit code (bad input exits 2 from inside, like the CPU path). */
int train_cuda(const train_cuda_args *a);

/* Accuracy and mean cross-entropy of m on ds, run on the GPU in batches of N. */
snn_status eval_cuda(snn_model *m, const snn_dataset *ds, int T, int N, snn_encoding enc, uint64_t seed,
                     const char *device, snn_precision_config pcfg, double *acc, double *loss);

/* Inference sessions on the GPU (snn predict): open exits 2 on failure; forward runs `valid`
 * samples of xb [N][F] (direct encoding) and writes y [T][N][C]. */
typedef struct gpu_infer gpu_infer;
gpu_infer *gpu_infer_open(snn_model *m, int T, int N, const char *device, snn_precision_config pcfg);
snn_status gpu_infer_forward(gpu_infer *s, const float *xb, int valid, float *y);
void gpu_infer_close(gpu_infer *s);

#endif
