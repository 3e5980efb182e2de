#include "tests/cuemu/emu/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "tests/cuemu/emu/scheduler.h"

namespace cuemu {
namespace {

struct Allocation {
  std::size_t bytes;
  MemoryKind kind;
};

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, Allocation> live;  // by start address
  std::size_t device_bytes = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: frees may come from static destructors
  return *r;
}

}  // namespace

void* allocate(std::size_t bytes, MemoryKind kind) {
  // 256-byte aligned like cudaMalloc; at least one byte so every allocation has its own address.
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  std::memset(p, schedule().poison, bytes);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[reinterpret_cast<std::uintptr_t>(p)] = {bytes, kind};
  if (kind == MemoryKind::Device) r.device_bytes += bytes;
  return p;
}

bool release(void* p, MemoryKind kind) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == r.live.end() || it->second.kind != kind) return false;
    if (kind == MemoryKind::Device) r.device_bytes -= it->second.bytes;
    r.live.erase(it);
  }
  std::free(p);
  return true;
}

MemoryKind kind_of(const void* p, std::size_t bytes) {
  if (!p) return MemoryKind::Unregistered;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.upper_bound(a);
  if (it == r.live.begin()) return MemoryKind::Unregistered;
  --it;
  const std::uintptr_t begin = it->first, end = begin + it->second.bytes;
  // A range of zero bytes may start one past the end (an empty tensor's view at the end of an arena).
  if (a < begin || a + bytes > end) return MemoryKind::Unregistered;
  return it->second.kind;
}

std::size_t bytes_to_allocation_end(const void* p) {
  if (!p) return 0;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.upper_bound(a);
  if (it == r.live.begin()) return 0;
  --it;
  const std::uintptr_t end = it->first + it->second.bytes;
  return a < end ? end - a : 0;
}

std::size_t device_bytes_in_use() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.device_bytes;
}

}  // namespace cuemu
