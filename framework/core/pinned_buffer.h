// Page-locked host memory and copies on a context's stream: what lets the host hand data to a GPU
// (a training batch, a payload for a host-only MPI) without waiting for the copy. device_cuda.cpp
// implements them with the CUDA runtime; device_nocuda.cpp is the build without CUDA, where both are
// errors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/core/context.h"

namespace qtrain {

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
// ctx.synchronize() waits for it. Host memory must be pinned for the host not to wait, and must stay
// unchanged until the stream has passed the copy.
void copy_async(Context& ctx, void* dst, const void* src, size_t bytes);

}  // namespace qtrain
