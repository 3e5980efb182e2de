// Emulator stand-in for cuDNN: handles only, for now. cuDNN has no exact CPU equivalent, so its
// layers (conv2d, batch norm, LRN, LSTM, cuDNN's CTC) stay GPU-only: every computing call returns
// CUDNN_STATUS_NOT_SUPPORTED (shims/cudnn.cpp) and their emulated tests skip with that reason.
#pragma once

#include <cuda_runtime.h>

struct cudnnContext;
using cudnnHandle_t = cudnnContext*;

enum cudnnStatus_t {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
};

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
const char* cudnnGetErrorString(cudnnStatus_t status);
