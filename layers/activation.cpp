// Activations: the CPU reference. The kind is switched once per call, outside the loop, so each loop
// is a tight elementwise kernel the compiler can vectorize (no per-element branch on the kind and no
// virtual call per element).
#include "layers/activation.h"

#include <cmath>

#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::batch_of;
using layer_detail::check_batch;
using layer_detail::check_float;
using layer_detail::dispatch_float;

const char* activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::relu: return "relu";
    case ActivationKind::tanh: return "tanh";
    case ActivationKind::sigmoid: return "sigmoid";
  }
  return "?";
}

namespace {

template <typename T>
void forward_cpu(ActivationKind kind, const T* __restrict x, T* __restrict y, int64_t n) {
  switch (kind) {
    case ActivationKind::relu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
      break;
    case ActivationKind::tanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
    case ActivationKind::sigmoid:
      // exp(-x) overflows to inf for x < -88 (f32), giving 1/inf = 0: the correct limit.
      for (int64_t i = 0; i < n; ++i) y[i] = T(1) / (T(1) + std::exp(-x[i]));
      break;
  }
}

template <typename T>
void backward_cpu(ActivationKind kind, const T* __restrict y, const T* __restrict dy, T* __restrict dx, int64_t n) {
  switch (kind) {
    case ActivationKind::relu:
      for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
      break;
    case ActivationKind::tanh:
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (T(1) - y[i] * y[i]);
      break;
    case ActivationKind::sigmoid:
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (y[i] * (T(1) - y[i]));
      break;
  }
}

}  // namespace

Shape Activation::setup(const Shape& input) {
  for (int64_t d : input)
    if (d <= 0) throw Error(fmt::format("{} got an input shape {} with an empty dimension", type(), shape_str(input)));
  shape_ = input;
  ready_ = true;
  return input;
}

void Activation::forward(Context& ctx, const Tensor& x, Tensor& y, bool) {
  QT_CHECK(ready_, "{}: forward() before setup()", layer_detail::describe(*this));
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "x", x, ctx);
  check_batch(*this, "x", x, batch, shape_, x.dtype());
  check_float(*this, "y", y, ctx);
  check_batch(*this, "y", y, batch, shape_, x.dtype());
  if (x.device().is_cuda()) return activation_forward_cuda(ctx, kind_, x, y);
  dispatch_float(x.dtype(), [&]<typename T>() { forward_cpu<T>(kind_, x.data<T>(), y.data<T>(), x.numel()); });
}

void Activation::backward(Context& ctx, const Tensor&, const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (!dx.defined()) return;  // no parameters: nothing to do without an input gradient
  QT_CHECK(ready_, "{}: backward() before setup()", layer_detail::describe(*this));
  const int64_t batch = batch_of(*this, y);
  check_float(*this, "y", y, ctx);
  check_batch(*this, "y", y, batch, shape_, y.dtype());
  check_float(*this, "dy", dy, ctx);
  check_batch(*this, "dy", dy, batch, shape_, y.dtype());
  check_float(*this, "dx", dx, ctx);
  check_batch(*this, "dx", dx, batch, shape_, y.dtype());
  if (y.device().is_cuda()) return activation_backward_cuda(ctx, kind_, y, dy, dx);
  dispatch_float(y.dtype(),
                 [&]<typename T>() { backward_cpu<T>(kind_, y.data<T>(), dy.data<T>(), dx.data<T>(), y.numel()); });
}

std::unique_ptr<Layer> make_activation(ConfigNode& cfg, ActivationKind kind) {
  cfg.accept("type");
  cfg.accept("name");
  cfg.finish();
  return std::make_unique<Activation>(kind);
}

}  // namespace qtrain
