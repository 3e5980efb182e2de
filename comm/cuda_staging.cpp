// The CUDA runtime side of cuda_staging.h: pointer attributes, cudaMallocHost buffers and
// cudaMemcpyAsync on the context's stream. Compiled only in builds with CUDA.
#include "comm/cuda_staging.h"

#include <cuda_runtime.h>

#include "framework/core/check.h"
#include "framework/core/cuda_context.h"

namespace qtrain::comm_detail {

Device pointer_device(const void* ptr) {
  // Asked once: on a machine without a GPU every runtime call fails, and the answer cannot change.
  static const bool any_gpu = cuda_available();
  if (!any_gpu || ptr == nullptr) return Device::cpu();
  cudaPointerAttributes attributes{};
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged)
    return Device::cuda(attributes.device);
  return Device::cpu();  // cudaMemoryTypeHost (pinned) or cudaMemoryTypeUnregistered (pageable)
}

std::string gpu_bus_id(int index) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), index));
  return id;
}

Device buffer_location(const char* op, const char* what, const void* ptr, size_t bytes, const Context& ctx) {
  if (bytes == 0) return Device::cpu();
  const Device where = pointer_device(ptr);
  QT_CHECK(where.is_cpu() || where == ctx.device(),
           "{}: {} is in {} memory; pass a context on {} (its stream orders the copies), not {}", op, what, where.str(),
           where.str(), ctx.device().str());
  return where;
}

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

}  // namespace qtrain::comm_detail
