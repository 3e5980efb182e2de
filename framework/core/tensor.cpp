// Tensor storage, views and copies.
#include "framework/core/tensor.h"

#include <algorithm>

namespace qtrain {

struct Tensor::Storage {
  Device device;
  void* ptr = nullptr;
  size_t bytes = 0;
  Storage(Device d, size_t n) : device(d), ptr(device_alloc(d, n)), bytes(n) {}
  ~Storage() { device_free(device, ptr); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
  }
  return "?";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    QT_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero_();
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int k = i < 0 ? i + n : i;
  QT_CHECK(k >= 0 && k < n, "dimension {} out of range for a tensor of shape {}", i, shape_str(shape_));
  return shape_[static_cast<size_t>(k)];
}

void* Tensor::raw() { return storage_ ? static_cast<char*>(storage_->ptr) + byte_offset_ : nullptr; }
const void* Tensor::raw() const { return storage_ ? static_cast<const char*>(storage_->ptr) + byte_offset_ : nullptr; }

Tensor Tensor::view(int64_t element_offset, Shape shape) const {
  const int64_t n = shape_numel(shape);
  QT_CHECK(element_offset >= 0 && element_offset + n <= numel_,
           "view of {} elements at offset {} exceeds a tensor of {} elements", n, element_offset, numel_);
  Tensor t = *this;
  t.byte_offset_ = byte_offset_ + static_cast<size_t>(element_offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  t.numel_ = n;
  return t;
}

Tensor Tensor::narrow_rows(int64_t rows) const {
  QT_CHECK(ndim() >= 1 && rows >= 0 && rows <= shape_[0], "cannot take {} rows of a tensor of shape {}", rows,
           shape_str(shape_));
  Shape s = shape_;
  s[0] = rows;
  return view(0, std::move(s));
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  QT_CHECK(src.numel() == numel_ && src.dtype() == dtype_, "copy of {} {} into {} {}", shape_str(src.shape()),
           dtype_name(src.dtype()), shape_str(shape_), dtype_name(dtype_));
  device_copy(device_, raw(), src.device(), src.raw(), nbytes());
}

void Tensor::zero_() { device_memset_zero(device_, raw(), nbytes()); }

void Tensor::fill_(double value) {
  QT_CHECK(device_.is_cpu(), "fill_ works on CPU tensors, this one is on {}", device_.str());
  switch (dtype_) {
    case DType::f32: std::fill_n(data<float>(), numel_, static_cast<float>(value)); break;
    case DType::f64: std::fill_n(data<double>(), numel_, value); break;
    case DType::i32: std::fill_n(data<int32_t>(), numel_, static_cast<int32_t>(value)); break;
    case DType::u8: std::fill_n(data<uint8_t>(), numel_, static_cast<uint8_t>(value)); break;
    default: QT_FAIL("fill_ does not support {}", dtype_name(dtype_));
  }
}

}  // namespace qtrain
