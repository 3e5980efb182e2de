// add: configuration, shapes and the CPU reference (contiguous loops the compiler vectorizes, split
// into contiguous ranges over the context's CPU threads; each element is computed alone, so the split
// changes no result).
#include "layers/add.h"

#include <algorithm>
#include <string>

#include "layers/activation.h"
#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

namespace {
// Elements per CPU thread at least; smaller tensors run on the calling thread.
constexpr int64_t kGrain = int64_t{1} << 15;
}  // namespace

Shape Add::configure_inputs(const std::vector<Shape>& inputs) {
  for (size_t k = 1; k < inputs.size(); ++k)
    if (inputs[k] != inputs[0])
      input_error("add needs inputs of one shape, but input 1 is {} and input {} is {}", shape_str(inputs[0]), k + 1,
                  shape_str(inputs[k]));
  return inputs[0];
}

void Add::forward_inputs_cpu(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool) {
  dispatch_float(y.dtype(), [&]<typename T>() {
    ctx.cpu_pool().parallel_for(y.numel(), kGrain, [&](int64_t begin, int64_t end) {
      // out may be a (in place, see add.h): no __restrict on either.
      T* out = y.data<T>() + begin;
      const T* a = xs[0].data<T>() + begin;
      const T* __restrict b = xs[1].data<T>() + begin;
      const int64_t n = end - begin;
      if (relu_ && xs.size() == 2) {
        for (int64_t i = 0; i < n; ++i) {
          const T v = a[i] + b[i];
          out[i] = v > T(0) ? v : T(0);  // the relu layer's rule: a NaN becomes 0
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      for (size_t k = 2; k < xs.size(); ++k) {
        const T* __restrict c = xs[k].data<T>() + begin;
        for (int64_t i = 0; i < n; ++i) out[i] += c[i];
      }
      if (relu_)
        for (int64_t i = 0; i < n; ++i) out[i] = out[i] > T(0) ? out[i] : T(0);
    });
  });
}

#if QTRAIN_HAS_CUDA
void Add::forward_inputs_cuda(Context& ctx, std::span<const Tensor> xs, Tensor& y, bool) {
  add_forward_cuda(ctx, xs, y);
  if (relu_) relu_in_place_cuda(ctx, y);
}
#endif

void Add::backward_inputs_cpu(Context& ctx, std::span<const Tensor>, const Tensor& y, const Tensor& dy,
                              std::span<Tensor> dxs) {
  dispatch_float(dy.dtype(), [&]<typename T>() {
    ctx.cpu_pool().parallel_for(dy.numel(), kGrain, [&](int64_t begin, int64_t end) {
      const T* __restrict g = dy.data<T>() + begin;
      const T* __restrict out = y.data<T>() + begin;
      const int64_t n = end - begin;
      // With the fused relu, one pass writes the masked dy (the relu layer's backward) into every
      // input's gradient.
      T* first = nullptr;
      for (Tensor& dx : dxs) {
        if (!dx.defined()) continue;
        T* __restrict gx = dx.data<T>() + begin;
        if (!relu_)
          std::copy(g, g + n, gx);
        else if (first)
          std::copy(first, first + n, gx);
        else
          for (int64_t i = 0; i < n; ++i) gx[i] = out[i] > T(0) ? g[i] : T(0);
        if (!first) first = gx;
      }
    });
  });
}

#if QTRAIN_HAS_CUDA
void Add::backward_inputs_cuda(Context& ctx, std::span<const Tensor>, const Tensor& y, const Tensor& dy,
                               std::span<Tensor> dxs) {
  for (Tensor& dx : dxs) {
    if (!dx.defined()) continue;
    if (relu_)
      activation_backward_cuda(ctx, ActivationKind::relu, y, dy, dx);
    else
      add_copy_cuda(ctx, dy, dx);
  }
}
#endif

std::unique_ptr<Layer> make_add(ConfigNode& cfg) {
  const std::string activation = cfg.get_choice("activation", "none", {"none", "relu"});
  cfg.finish();
  return std::make_unique<Add>(activation == "relu");
}

void add_into(Context& ctx, Tensor& dst, const Tensor& src) {
  layer_detail::check_float("add_into", "dst", dst, ctx);
  layer_detail::check_float("add_into", "src", src, ctx);
  QT_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "add_into: dst {} {} and src {} {} differ",
           dtype_name(dst.dtype()), shape_str(dst.shape()), dtype_name(src.dtype()), shape_str(src.shape()));
#if QTRAIN_HAS_CUDA
  if (dst.device().is_cuda()) return add_into_cuda(ctx, dst, src);
#endif
  dispatch_float(dst.dtype(), [&]<typename T>() {
    ctx.cpu_pool().parallel_for(dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
      T* __restrict d = dst.data<T>() + begin;
      const T* __restrict s = src.data<T>() + begin;
      for (int64_t i = 0; i < end - begin; ++i) d[i] += s[i];
    });
  });
}

}  // namespace qtrain
