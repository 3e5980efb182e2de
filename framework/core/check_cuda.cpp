// Error strings of the CUDA libraries, for the CUDA_/CUBLAS_/CUDNN_/CURAND_CHECK macros.
// Compiled only when the CUDA paths are built (check_nocuda.cpp otherwise).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <curand.h>

#include "framework/core/check.h"

namespace qtrain::detail {

std::string cuda_error_string(int code) {
  const auto err = static_cast<cudaError_t>(code);
  return fmt::format("{} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
}

std::string cublas_error_string(int code) { return cublasGetStatusString(static_cast<cublasStatus_t>(code)); }

std::string cudnn_error_string(int code) { return cudnnGetErrorString(static_cast<cudnnStatus_t>(code)); }

std::string curand_error_string(int code) {
  switch (static_cast<curandStatus_t>(code)) {
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
    default: return fmt::format("cuRAND status {}", code);
  }
}

}  // namespace qtrain::detail
