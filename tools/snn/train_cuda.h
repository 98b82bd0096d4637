/* mpirun snn train --data-parallel ddp --device cuda (tools/snn/train_cuda.c). Single-GPU
 * train, eval and predict do not use it: they place the model with snn_model_to and run the
 * same library calls as on the CPU. */
#ifndef SNN_TOOL_TRAIN_CUDA_H
#define SNN_TOOL_TRAIN_CUDA_H

#include "snn/optim.h"
#include "snn/precision.h"
#include "snn/snn.h"

/* GPU data parallelism for mpirun snn train --data-parallel ddp --device cuda: this rank's
 * GPU (cuda: the node-local rank's device; cuda:N: device N), an NCCL communicator over
 * `world` (every rank one replica), and the device model of m whose captured step carries
 * the DDP collectives. open exits through die_* on failure (inside the set-up agreement of
 * the caller); save writes model.safetensors in the training-checkpoint format of
 * snn_training_checkpoint_save (FP8 state included), which snn train --resume, snn eval and
 * snn predict read on either device. */
typedef struct gpu_dp gpu_dp;
struct snn_comm;
struct snn_cuda_model;
gpu_dp *gpu_dp_open(snn_model *m, struct snn_comm *world, int T, int N, const char *device,
                    const snn_precision_config *pcfg, const snn_optim_opts *oo, float clip, int use_mse);
struct snn_cuda_model *gpu_dp_model(gpu_dp *s);
snn_status gpu_dp_save(gpu_dp *s, snn_model *m, snn_optimizer *opt, const char *path, const char *const *meta);
void gpu_dp_close(gpu_dp *s);

#endif
