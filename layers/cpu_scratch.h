// CpuScratch: a layer's reusable host buffer for the CPU paths (im2col columns, transposed
// gradients). It grows to the largest request and is then reused, so a training step allocates
// nothing; one buffer serves both element types because a layer runs in one dtype at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace qtrain {

class CpuScratch {
 public:
  // At least `count` elements of T, 64-byte aligned; the contents are unspecified.
  template <typename T>
  T* get(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > bytes_) {
      data_.reset(static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64})));
      bytes_ = bytes;
    }
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace qtrain
