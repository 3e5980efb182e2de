// CUDA device memory for tensors (cudaMalloc, synchronous copies on the legacy stream).
#include <cuda_runtime.h>

#include "framework/core/check.h"
#include "framework/core/device.h"

namespace qtrain {

int cuda_device_count() {
  int count = 0;
  // On a machine without a GPU this returns cudaErrorInsufficientDriver or cudaErrorNoDevice and may
  // leave count undefined (device.md): any error means zero devices.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later checks do not report it
    return 0;
  }
  return count;
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace cuda_memory {

void* alloc(int index, size_t bytes) {
  if (bytes == 0) return nullptr;
  CUDA_CHECK(cudaSetDevice(index));
  void* ptr = nullptr;
  CUDA_CHECK(cudaMalloc(&ptr, bytes));
  return ptr;
}

void free(int index, void* ptr) noexcept {
  cudaSetDevice(index);
  cudaFree(ptr);  // errors at teardown are not actionable
}

// These helpers run on the legacy default stream, which is NOT ordered with the contexts' non-blocking
// streams, and a pageable host-to-device cudaMemcpy (or any cudaMemset) may return before the device
// has the data. Synchronizing the legacy stream makes them truly synchronous, so a kernel queued on a
// context stream afterwards always sees the data. Hot paths use async copies on the context stream.
void copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes) {
  CUDA_CHECK(cudaSetDevice(dst_device.is_cuda() ? dst_device.index : src_device.index));
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void memset_zero(int index, void* ptr, size_t bytes) {
  CUDA_CHECK(cudaSetDevice(index));
  CUDA_CHECK(cudaMemset(ptr, 0, bytes));
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void set_device(int index) { CUDA_CHECK(cudaSetDevice(index)); }

int64_t free_bytes(int index) {
  CUDA_CHECK(cudaSetDevice(index));
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

}  // namespace cuda_memory
}  // namespace qtrain
