/* The data-parallel collectives of the GPU training step (snn/cuda.h's snn_cuda_collectives)
 * over a communicator of this layer: NCCL across GPUs, or the one-process communicator
 * (identity) for a single replica. */
#include "dist/ddp.h"

static snn_status coll_allreduce(void *ctx, void *buf, size_t count, int op, void *stream) {
    snn_comm_op o = op == SNN_CUDA_COLL_MAX ? SNN_COMM_MAX : op == SNN_CUDA_COLL_AVG ? SNN_COMM_AVG : SNN_COMM_SUM;
    return snn_comm_device_allreduce((snn_comm *)ctx, buf, count, SNN_COMM_F32, o, stream);
}

static snn_status coll_broadcast(void *ctx, void *buf, size_t count, int root, void *stream) {
    return snn_comm_device_broadcast((snn_comm *)ctx, buf, count, SNN_COMM_F32, root, stream);
}

snn_cuda_collectives snn_ddp_cuda_collectives(snn_comm *dp) {
    snn_cuda_collectives c = {.ctx = dp, .size = snn_comm_size(dp), .allreduce = coll_allreduce, .broadcast = coll_broadcast};
    return c;
}
