// framework/core/pinned_buffer.h with the CUDA runtime.
#include <cuda_runtime.h>

#include "framework/core/check.h"
#include "framework/core/cuda_context.h"
#include "framework/core/pinned_buffer.h"

namespace qtrain {

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);  // teardown errors are not actionable
}

uint8_t* PinnedBuffer::reserve(size_t bytes) {
  if (bytes > capacity_) {
    if (data_ != nullptr) {
      CUDA_CHECK(cudaFreeHost(data_));
      data_ = nullptr;
      capacity_ = 0;
    }
    // Rounded up to 1 MiB so that slowly growing payloads do not reallocate on every step.
    const size_t rounded = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    CUDA_CHECK(cudaMallocHost(&data_, rounded));
    capacity_ = rounded;
  }
  return static_cast<uint8_t*>(data_);
}

void copy_async(Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.cuda().stream));
}

}  // namespace qtrain
