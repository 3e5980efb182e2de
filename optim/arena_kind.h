// The arena an optimizer was initialized for, shared by every optimizer: init() checks and records
// it, step() checks each call's parameters and gradients against it before touching memory.
#pragma once

#include <cstdint>

#include "framework/core/check.h"
#include "framework/core/tensor.h"

namespace qtrain::optim_detail {

struct ArenaKind {
  int64_t numel = -1;  // -1 until init()
  DType dtype = DType::f32;
  Device device;

  // The CPU loops exist for f32 and f64 (f64 for the gradient checks), the kernels for f32.
  void init(const char* type, int64_t n, DType dt, Device dev) {
    QT_CHECK(n >= 0, "{}: negative arena size {}", type, n);
    QT_CHECK(dt == DType::f32 || (dt == DType::f64 && dev.is_cpu()),
             "{}: arenas must be f32 (CPU or CUDA) or f64 (CPU), got {} on {}", type, dtype_name(dt), dev.str());
    numel = n;
    dtype = dt;
    device = dev;
  }

  // init() was called and the arenas match it.
  void check_step(const char* type, const Tensor& params, const Tensor& grads) const {
    QT_CHECK(numel >= 0, "{}: step() before init()", type);
    QT_CHECK(params.numel() == numel && grads.numel() == numel, "{}: initialized for {} values, got params {} grads {}",
             type, numel, params.numel(), grads.numel());
    QT_CHECK(params.dtype() == dtype && grads.dtype() == dtype, "{}: initialized for {}, got params {} grads {}", type,
             dtype_name(dtype), dtype_name(params.dtype()), dtype_name(grads.dtype()));
    QT_CHECK(params.device() == device && grads.device() == device,
             "{}: initialized on {}, got params on {} grads on {}", type, device.str(), params.device().str(),
             grads.device().str());
  }
};

// A state array's data, or null when the option that needs it is off.
template <typename T>
T* data_or_null(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace qtrain::optim_detail
