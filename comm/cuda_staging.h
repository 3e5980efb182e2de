// What the transports need from CUDA without including it: which device a pointer's memory is on,
// pinned host buffers to stage CUDA data through a host-only MPI, and copies on a context's stream.
// cuda_staging.cpp implements it with the CUDA runtime; cuda_staging_disabled.cpp is the build
// without CUDA, where every pointer is host memory and staging is an error. Internal to comm/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/core/context.h"
#include "framework/core/device.h"

namespace qtrain::comm_detail {

// cuda:N for device (or managed) memory of GPU N; cpu for everything else (pageable or pinned host
// memory), and always cpu in builds without CUDA or on machines without a GPU.
Device pointer_device(const void* ptr);

// The PCI bus id of GPU `index` ("0000:3b:00.0"): the identity of a physical GPU, which a device
// index is not when ranks see different CUDA_VISIBLE_DEVICES.
std::string gpu_bus_id(int index);

// Where the `bytes` at `ptr` live (cpu for an empty buffer). GPU memory needs a CUDA context on that
// GPU, whose stream will order the copies: otherwise an error naming `op` and `what`.
Device buffer_location(const char* op, const char* what, const void* ptr, size_t bytes, const Context& ctx);

// Page-locked host memory, grown on demand and kept so that steady-state calls allocate nothing
// (cudaMallocHost costs milliseconds). Contents are not preserved when it grows.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  uint8_t* reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// An asynchronous copy (host <-> device or device <-> device) on ctx's stream; ctx is a CUDA context.
// ctx.synchronize() waits for it.
void copy_async(Context& ctx, void* dst, const void* src, size_t bytes);

}  // namespace qtrain::comm_detail
