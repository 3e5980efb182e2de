// "Device" memory of the emulator: host allocations, filled with the poison byte when allocated (a
// GPU's fresh cudaMalloc holds whatever was there before; reading it before writing must change a
// result, not read zeros), and registered, so that copies and kernel arguments can be checked to
// point where they claim (cudaPointerGetAttributes, cudaMemcpy's kinds, host pointers passed to
// kernels). Under AddressSanitizer every allocation is exactly its size, so out-of-bounds device
// accesses are reported as compute-sanitizer's memcheck would.
#pragma once

#include <cstddef>

namespace cuemu {

enum class MemoryKind { Unregistered, Device, PinnedHost };

void* allocate(std::size_t bytes, MemoryKind kind);
// False when p is not the start of a live allocation of that kind.
bool release(void* p, MemoryKind kind);
// The kind of the allocation [p, p + bytes) lies in (the whole range), or Unregistered.
MemoryKind kind_of(const void* p, std::size_t bytes = 1);
// The bytes from p to the end of the allocation it lies in (device or pinned), or 0.
std::size_t bytes_to_allocation_end(const void* p);
// Device bytes allocated now.
std::size_t device_bytes_in_use();

}  // namespace cuemu
