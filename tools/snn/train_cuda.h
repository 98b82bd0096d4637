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
/* Train on the GPU from the position pos (all zero: a fresh run) with the options o,
 * evaluate each epoch, write metrics.jsonl and model.safetensors in o->out_dir: a training
 * checkpoint with the trainer metadata of include/snn/train.h, so --resume continues it on
 * either device. resume: the checkpoint m was loaded from (NULL for a fresh run). Returns
 * the exit code (bad input exits 2 from inside, like the CPU path). */
struct snn_train_opts;
struct snn_train_position;
int train_cuda_run(snn_model *m, const struct snn_train_opts *o, const struct snn_train_position *pos,
                   const struct snn_ckpt *resume, const snn_dataset *train, const snn_dataset *test,
                   const char *model_name, const char *device, const snn_precision_config *pcfg, int quiet,
                   int json);

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

/* GPU data parallelism for mpirun snn train --data-parallel ddp --device cuda: this rank's
 * GPU (cuda: the node-local rank's device; cuda:N: device N), an NCCL communicator over
 * `world` (every rank one replica), and the device model of m whose captured step carries
 * the DDP collectives. open exits through die_* on failure (inside the set-up agreement of
 * the caller); save writes model.safetensors as train_cuda_run does (FP8 state included). */
typedef struct gpu_dp gpu_dp;
struct snn_comm;
struct snn_cuda_model;
gpu_dp *gpu_dp_open(snn_model *m, struct snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse);
struct snn_cuda_model *gpu_dp_model(gpu_dp *s);
snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta);
void gpu_dp_close(gpu_dp *s);

#endif
