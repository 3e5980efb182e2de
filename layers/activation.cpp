// Activations: the CPU reference. The kind is switched once per call, outside the loop, so each loop
// is a tight elementwise kernel the compiler can vectorize (no per-element branch on the kind and no
// virtual call per element), run on contiguous ranges split over the context's CPU threads.
#include "layers/activation.h"

#include <cmath>

#include "layers/dispatch.h"

namespace qtrain {

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

// Elements per CPU thread at least: the elementwise loops are split over the context's threads in
// contiguous ranges (each element computed alone, so the split does not change any result); smaller
// tensors run on the calling thread, where a wake-up would cost more than the loop.
constexpr int64_t kGrain = int64_t{1} << 15;

template <typename T>
void forward_reference(ActivationKind kind, const T* __restrict x, T* __restrict y, int64_t n) {
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
void backward_reference(ActivationKind kind, const T* __restrict y, const T* __restrict dy, T* __restrict dx,
                        int64_t n) {
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

Shape Activation::configure(const Shape& input) {
  for (int64_t d : input)
    if (d <= 0) input_error("{} got an input shape {} with an empty dimension", type(), shape_str(input));
  return input;
}

void Activation::forward_cpu(Context& ctx, const Tensor& x, Tensor& y, bool) {
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    ctx.cpu_pool().parallel_for(x.numel(), kGrain,
                                [&](int64_t b, int64_t e) { forward_reference<T>(kind_, in + b, out + b, e - b); });
  });
}

#if QTRAIN_HAS_CUDA
void Activation::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  activation_forward_cuda(ctx, kind_, x, y);
}
#endif

void Activation::backward_cpu(Context& ctx, const Tensor&, const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), [&]<typename T>() {
    const T* out = y.data<T>();
    const T* g = dy.data<T>();
    T* gx = dx.data<T>();
    ctx.cpu_pool().parallel_for(
        y.numel(), kGrain, [&](int64_t b, int64_t e) { backward_reference<T>(kind_, out + b, g + b, gx + b, e - b); });
  });
}

#if QTRAIN_HAS_CUDA
void Activation::backward_cuda(Context& ctx, const Tensor&, const Tensor& y, const Tensor& dy, Tensor& dx) {
  activation_backward_cuda(ctx, kind_, y, dy, dx);
}
#endif

std::unique_ptr<Layer> make_activation(ConfigNode& cfg, ActivationKind kind) {
  cfg.finish();
  return std::make_unique<Activation>(kind);
}

}  // namespace qtrain
