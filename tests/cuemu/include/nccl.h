// Emulator stand-in for NCCL: placeholder until the NCCL-over-MPI shim lands (shims/nccl.cpp).
#pragma once

#include <cuda_runtime.h>

enum ncclResult_t { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 };
const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetVersion(int* version);
