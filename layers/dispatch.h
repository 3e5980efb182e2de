// How a layer call reaches its implementation: the cheap per-call argument checks every layer
// shares (device, dtype, batch shape) and the dispatch from a tensor's runtime dtype to the templated
// CPU reference. The CUDA paths take f32 only; an f64 tensor there is an error, never a conversion.
// The checks allocate nothing unless they fail (messages are built only then), so they cost a few
// comparisons per call.
#pragma once

#include <string>

#include "framework/check.h"
#include "framework/context.h"
#include "framework/layer.h"
#include "framework/tensor.h"

namespace qtrain::layer_detail {

// "dense 'dense1'" for messages; just the type when the layer has no name (tests, tools).
inline std::string describe(const Layer& layer) {
  return layer.name().empty() ? std::string(layer.type()) : fmt::format("{} '{}'", layer.type(), layer.name());
}
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

// check_float and check_batch together: the usual check of one operand of forward or backward.
template <typename Who>
void check_operand(const Who& who, const char* what, const Tensor& t, const Context& ctx, int64_t batch,
                   const int64_t* dims, size_t n, DType dtype) {
  check_float(who, what, t, ctx);
  check_batch(who, what, t, batch, dims, n, dtype);
}

// The operands of a backward whose input and output are images of `in` and `out` (C, H, W) dims: x,
// dy and, when the caller asks for it, dx, all on the context's device in x's float type.
template <typename Who>
void check_image_backward(const Who& who, const Context& ctx, int64_t batch, const int64_t* in, const int64_t* out,
                          const Tensor& x, const Tensor& dy, const Tensor& dx) {
  check_operand(who, "x", x, ctx, batch, in, 3, x.dtype());
  check_operand(who, "dy", dy, ctx, batch, out, 3, x.dtype());
  if (dx.defined()) check_operand(who, "dx", dx, ctx, batch, in, 3, x.dtype());
}

// The batch size of x, which must have at least one dimension.
template <typename Who>
int64_t batch_of(const Who& who, const Tensor& x) {
  QT_CHECK(x.ndim() >= 1, "{}: input has shape {}, expected a batch dimension first", describe(who),
           shape_str(x.shape()));
  return x.shape()[0];
}

// Calls f.template operator()<T>() with T = float or double per `dtype` (the CPU reference paths).
template <typename F>
void dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    default: QT_CHECK(false, "no CPU layer path for dtype {}", dtype_name(dtype));
  }
}

}  // namespace qtrain::layer_detail
