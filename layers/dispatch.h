// The dispatch from a tensor's runtime dtype to the templated CPU reference, and the operand checks
// of the functions of this folder outside the layer contract (the losses, add_into); layers get
// theirs from Layer's entry points (framework/core/layer.h). The CUDA paths take f32 only; an f64 tensor
// there is an error, never a conversion. The checks allocate nothing unless they fail.
#pragma once

#include <string>

#include "framework/core/check.h"
#include "framework/core/context.h"
#include "framework/core/tensor.h"

namespace qtrain::layer_detail {

inline std::string describe(const char* who) { return who; }

// A float tensor on the context's device, in a dtype this device's path implements.
template <typename Who>
void check_float(const Who& who, const char* what, const Tensor& t, const Context& ctx) {
  QT_CHECK(t.defined(), "{}: {} is undefined", describe(who), what);
  QT_CHECK(t.device() == ctx.device(), "{}: {} is on {} but the context is on {}", describe(who), what,
           t.device().str(), ctx.device().str());
  if (t.device().is_cuda()) {
    QT_CHECK(t.dtype() == DType::f32, "{}: the CUDA path supports f32 only, {} is {}", describe(who), what,
             dtype_name(t.dtype()));
  } else {
    QT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, "{}: {} must be f32 or f64, got {}", describe(who),
             what, dtype_name(t.dtype()));
  }
}

// t is (batch, dims[0], ..., dims[n-1]) of `dtype`.
template <typename Who>
void check_batch(const Who& who, const char* what, const Tensor& t, int64_t batch, const int64_t* dims, size_t n,
                 DType dtype) {
  bool ok = t.ndim() == static_cast<int>(n) + 1 && t.shape()[0] == batch;
  for (size_t d = 0; ok && d < n; ++d) ok = t.shape()[d + 1] == dims[d];
  QT_CHECK(ok, "{}: {} has shape {}, expected {} rows of {}", describe(who), what, shape_str(t.shape()), batch,
           shape_str(Shape(dims, dims + n)));
  QT_CHECK(t.dtype() == dtype, "{}: {} is {} but the input is {}", describe(who), what, dtype_name(t.dtype()),
           dtype_name(dtype));
}
template <typename Who>
void check_batch(const Who& who, const char* what, const Tensor& t, int64_t batch, const Shape& per_sample,
                 DType dtype) {
  check_batch(who, what, t, batch, per_sample.data(), per_sample.size(), dtype);
}
template <typename Who>
void check_batch(const Who& who, const char* what, const Tensor& t, int64_t batch, int64_t features, DType dtype) {
  check_batch(who, what, t, batch, &features, 1, dtype);
}

// Calls f.template operator()<T>() with T = float or double per `dtype` (the CPU reference paths).
template <typename F>
void dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    default: QT_FAIL("no CPU layer path for dtype {}", dtype_name(dtype));
  }
}

}  // namespace qtrain::layer_detail
