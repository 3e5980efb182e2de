// The CUDA resources of a Context: one stream and the library handles bound to it.
// Include only from CUDA-enabled sources (*.cu, *_cuda.cpp).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <curand.h>

namespace qtrain {

struct CudaHandles {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  curandGenerator_t curand = nullptr;  // Philox4x32-10, bound to `stream`

  CudaHandles(int device, unsigned long long seed);
  ~CudaHandles();
  CudaHandles(const CudaHandles&) = delete;
  CudaHandles& operator=(const CudaHandles&) = delete;
};

// Grid size for a grid-stride kernel over n elements.
inline int blocks_for(long long n, int threads = 256) {
  long long b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 8) b = 65535LL * 8;
  return static_cast<int>(b);
}

}  // namespace qtrain
