// framework/core/pinned_buffer.h in a build without CUDA: nothing can ask for pinned memory or a
// stream copy there, so both are internal errors.
#include "framework/core/check.h"
#include "framework/core/pinned_buffer.h"

namespace qtrain {

PinnedBuffer::~PinnedBuffer() = default;

uint8_t* PinnedBuffer::reserve(size_t bytes) {
  QT_FAIL_NO_CUDA("pinned staging of {} bytes requested", bytes);
  return nullptr;
}

void copy_async(Context&, void*, const void*, size_t bytes) {
  QT_FAIL_NO_CUDA("a CUDA copy of {} bytes requested", bytes);
}

}  // namespace qtrain
