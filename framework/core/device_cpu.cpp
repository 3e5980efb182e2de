// CPU memory for tensors. CUDA requests are forwarded to device_cuda.cpp / device_nocuda.cpp.
#include <cstdlib>
#include <cstring>

#include "framework/core/check.h"
#include "framework/core/device.h"

namespace qtrain {
namespace cuda_memory {
void* alloc(int index, size_t bytes);
void free(int index, void* ptr) noexcept;
void copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
void memset_zero(int index, void* ptr, size_t bytes);
void set_device(int index);
}  // namespace cuda_memory

void* device_alloc(Device device, size_t bytes) {
  if (device.is_cuda()) return cuda_memory::alloc(device.index, bytes);
  if (bytes == 0) return nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* ptr = std::aligned_alloc(64, rounded);
  QT_CHECK(ptr != nullptr, "out of host memory allocating {} bytes", bytes);
  return ptr;
}

void device_free(Device device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (device.is_cuda()) return cuda_memory::free(device.index, ptr);
  std::free(ptr);
}

void device_copy(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  cuda_memory::copy(dst_device, dst, src_device, src, bytes);
}

void use_device_on_this_thread(Device device) {
  if (device.is_cuda()) cuda_memory::set_device(device.index);
}

void device_memset_zero(Device device, void* ptr, size_t bytes) {
  if (bytes == 0) return;
  if (device.is_cuda()) return cuda_memory::memset_zero(device.index, ptr, bytes);
  std::memset(ptr, 0, bytes);
}

}  // namespace qtrain
