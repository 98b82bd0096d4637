/* The CUDA table's entries for BatchNorm, dropout masks, token mean and spiking self-attention (backend.h). */
#include "backend/cuda/cuda_table.h"

void snn_cuda_install_norm(snn_backend *be) { (void)be; }
