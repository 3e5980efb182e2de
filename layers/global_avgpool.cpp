// global_avgpool: configuration and the CPU reference; every (sample, channel) plane is one row.
#include "layers/global_avgpool.h"

#include <algorithm>

#include "layers/conv_geometry.h"
#include "layers/dispatch.h"

namespace qtrain {

using layer_detail::dispatch_float;

Shape GlobalAvgPool::configure(const Shape& input) {
  check_image_input(describe(), input);
  plane_ = input[1] * input[2];
  return {input[0]};
}

void GlobalAvgPool::forward_cpu(Context&, const Tensor& x, Tensor& y, bool) {
  const int64_t rows = y.numel();
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

#if QTRAIN_HAS_CUDA
void GlobalAvgPool::forward_cuda(Context& ctx, const Tensor& x, Tensor& y, bool) {
  global_avgpool_forward_cuda(ctx, x, y, y.numel(), plane_);
}
#endif

void GlobalAvgPool::backward_cpu(Context&, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  const int64_t rows = dy.numel();
  dispatch_float(dy.dtype(), [&]<typename T>() {
    const T* ds = dy.data<T>();
    T* out = dx.data<T>();
    const T inv = T(1) / static_cast<T>(plane_);
    for (int64_t r = 0; r < rows; ++r) std::fill_n(out + r * plane_, plane_, ds[r] * inv);
  });
}

#if QTRAIN_HAS_CUDA
void GlobalAvgPool::backward_cuda(Context& ctx, const Tensor&, const Tensor&, const Tensor& dy, Tensor& dx) {
  global_avgpool_backward_cuda(ctx, dy, dx, dy.numel(), plane_);
}
#endif

std::unique_ptr<Layer> make_global_avgpool(ConfigNode& cfg) {
  cfg.finish();
  return std::make_unique<GlobalAvgPool>();
}

}  // namespace qtrain
