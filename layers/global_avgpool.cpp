// global_avgpool: configuration and the CPU reference; every (sample, channel) plane is one row.
#include "layers/global_avgpool.h"

#include <algorithm>

#include "layers/conv_geometry.h"
#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::batch_of;
using layer_detail::check_batch;
using layer_detail::check_float;
using layer_detail::describe;
using layer_detail::dispatch_float;

Shape GlobalAvgPool::setup(const Shape& input) {
  check_image_input(describe(*this), input);
  input_ = input;
  plane_ = input[1] * input[2];
  return {input[0]};
}

void GlobalAvgPool::forward(Context& ctx, const Tensor& x, Tensor& y, bool) {
  QT_CHECK(plane_ > 0, "{}: called before setup()", describe(*this));
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "x", x, ctx);
  check_batch(*this, "x", x, batch, input_, x.dtype());
  check_float(*this, "y", y, ctx);
  check_batch(*this, "y", y, batch, input_[0], x.dtype());
  const int64_t rows = batch * input_[0];
  if (x.device().is_cuda()) return global_avgpool_forward_cuda(ctx, x, y, rows, plane_);
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* __restrict xs = x.data<T>();
    T* __restrict ys = y.data<T>();
    const T inv = T(1) / static_cast<T>(plane_);
    for (int64_t r = 0; r < rows; ++r) {
      T sum = 0;
      for (int64_t i = 0; i < plane_; ++i) sum += xs[r * plane_ + i];
      ys[r] = sum * inv;
    }
  });
}

void GlobalAvgPool::backward(Context& ctx, const Tensor& x, const Tensor&, const Tensor& dy, Tensor& dx) {
  QT_CHECK(plane_ > 0, "{}: called before setup()", describe(*this));
  if (!dx.defined()) return;
  const int64_t batch = batch_of(*this, x);
  check_float(*this, "dy", dy, ctx);
  check_batch(*this, "dy", dy, batch, input_[0], dy.dtype());
  check_float(*this, "dx", dx, ctx);
  check_batch(*this, "dx", dx, batch, input_, dy.dtype());
  const int64_t rows = batch * input_[0];
  if (dy.device().is_cuda()) return global_avgpool_backward_cuda(ctx, dy, dx, rows, plane_);
  dispatch_float(dy.dtype(), [&]<typename T>() {
    const T* ds = dy.data<T>();
    T* out = dx.data<T>();
    const T inv = T(1) / static_cast<T>(plane_);
    for (int64_t r = 0; r < rows; ++r) std::fill_n(out + r * plane_, plane_, ds[r] * inv);
  });
}

std::unique_ptr<Layer> make_global_avgpool(ConfigNode& cfg) {
  cfg.accept("type");
  cfg.accept("name");
  cfg.finish();
  return std::make_unique<GlobalAvgPool>();
}

}  // namespace qtrain
