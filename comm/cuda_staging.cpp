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

}  // namespace qtrain::comm_detail
