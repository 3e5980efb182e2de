// Tensor: a shape, a runtime dtype and a device over shared storage. No autograd: layers write their
// backward passes explicitly. Views (view(), reshape()) share storage, which is how parameters and
// gradients become named windows into Net's flat arenas.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/check.h"
#include "framework/core/device.h"

namespace qtrain {

// f64 exists for the float64 gradient checks of the CPU reference paths; f16/bf16/u8/i32 for the
// quantizers' payloads and for labels.
enum class DType : unsigned char { f32, f64, f16, bf16, u8, i32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// 16-bit storage types on the host; conversions belong to quant/.
struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<f16_t>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bf16_t>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw();
  const void* raw() const;
  template <typename T>
  T* data() {
    QT_CHECK(dtype_ == dtype_of<T>(), "tensor is {}, accessed as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    QT_CHECK(dtype_ == dtype_of<T>(), "tensor is {}, accessed as {}", dtype_name(dtype_), dtype_name(dtype_of<T>()));
    return static_cast<const T*>(raw());
  }

  // A window of `shape` starting `element_offset` elements into this tensor (which must be contiguous,
  // as every qtrain tensor is). Shares storage.
  Tensor view(int64_t element_offset, Shape shape) const;
  Tensor reshape(Shape shape) const { return view(0, std::move(shape)); }
  // The first `rows` entries of dimension 0 (a smaller batch in a buffer sized for the largest one).
  Tensor narrow_rows(int64_t rows) const;

  // Deep copies (synchronous).
  Tensor to(Device device) const;
  Tensor clone() const { return to(device_); }
  void copy_from(const Tensor& src);  // same numel and dtype, any devices
  void zero_();
  // Fills with a value (CPU tensors only; f32/f64/i32/u8).
  void fill_(double value);

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace qtrain
