// clip_grad_norm: the CPU path sums squares in double in the order of clip_order.h, then scales in
// place.
#include "optim/clip.h"

#include <cmath>

#include "framework/core/check.h"
#include "optim/clip_order.h"

namespace qtrain {
namespace {

template <typename T>
double clip_cpu(T* g, int64_t n, double max_norm) {
  const double sum = clip_order::ordered_sum(n, [g](int64_t i) {
    const auto x = static_cast<double>(g[i]);
    return x * x;
  });
  const double norm = std::sqrt(sum);
  if (norm > max_norm) {
    const T scale = static_cast<T>(max_norm / (norm + 1e-6));
    for (int64_t i = 0; i < n; ++i) g[i] *= scale;
  }
  return norm;
}

}  // namespace

double clip_grad_norm(Context& ctx, Tensor& grads, double max_norm) {
  QT_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  QT_CHECK(grads.device() == ctx.device(), "clip_grad_norm: gradients on {} but the context is on {}",
           grads.device().str(), ctx.device().str());
  if (grads.device().is_cuda()) {
#if QTRAIN_HAS_CUDA
    return clip_grad_norm_cuda(ctx, grads, max_norm);
#else
    QT_FAIL_NO_CUDA("clip_grad_norm: a CUDA tensor arrived");
#endif
  }
  if (grads.dtype() == DType::f64) return clip_cpu(grads.data<double>(), grads.numel(), max_norm);
  QT_CHECK(grads.dtype() == DType::f32, "clip_grad_norm: gradients must be f32 or f64, got {}",
           dtype_name(grads.dtype()));
  return clip_cpu(grads.data<float>(), grads.numel(), max_norm);
}

}  // namespace qtrain
