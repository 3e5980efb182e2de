// CPU memory for tensors. CUDA requests are forwarded to device_cuda.cpp / device_nocuda.cpp.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

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

namespace {

// Host tensors of at least kHugeFrom bytes ask the kernel for transparent huge pages (2 MiB) over the
// part of their memory that covers whole huge pages. Training streams through activations of several
// MiB per layer, several times per step: with 4 KiB pages each page is a TLB miss, and the hardware
// prefetchers stop at every page (a 32x32 float plane is one page). Linux grants them where
// /sys/kernel/mm/transparent_hugepage/enabled is "madvise" (Debian's default) or "always"; elsewhere
// the call changes nothing. Only whole huge pages inside the allocation are asked for, so no memory is
// added. QTRAIN_HUGE_PAGES=0 turns it off (as PyTorch's THP_MEM_ALLOC_ENABLE turns its own on).
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeFrom = 2 * kHugePage;

bool huge_pages_wanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("QTRAIN_HUGE_PAGES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return wanted;
}

void ask_for_huge_pages(void* ptr, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t first = (begin + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t last = (begin + bytes) / kHugePage * kHugePage;
  // A refusal (a kernel without THP) costs nothing but the huge pages: the memory is fine either way.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace

void* device_alloc(Device device, size_t bytes) {
  if (device.is_cuda()) return cuda_memory::alloc(device.index, bytes);
  if (bytes == 0) return nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* ptr = std::aligned_alloc(64, rounded);
  QT_CHECK(ptr != nullptr, "out of host memory allocating {} bytes", bytes);
  if (bytes >= kHugeFrom && huge_pages_wanted()) ask_for_huge_pages(ptr, rounded);
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
