// RMSprop: option checks, the per-step coefficients, and the CPU loop (templated on float/double,
// one pass over the arena, no allocation). The CUDA kernel with the same arithmetic is in rmsprop.cu.
#include "optim/rmsprop.h"

#include <cmath>

#include "optim/cpu_lanes.h"
#include "optim/kernels.h"
#include "optim/rmsprop_step.h"

namespace qtrain {
namespace {

using optim_detail::at_or_null;
using optim_detail::data_or_null;
using optim_detail::flush_subnormal;
using optim_detail::for_lanes;
using optim_detail::RmsPropCoeffs;
using optim_detail::with_flag;

template <typename T>
RmsPropCoeffs<T> rmsprop_coeffs(const RmsPropOptions& o, double lr) {
  RmsPropCoeffs<T> c;
  c.lr = static_cast<T>(lr);
  c.weight_decay = static_cast<T>(o.weight_decay);
  c.alpha = static_cast<T>(o.alpha);
  c.one_minus_alpha = static_cast<T>(1.0 - o.alpha);
  c.eps = static_cast<T>(o.eps);
  c.momentum = static_cast<T>(o.momentum);
  c.decay = o.weight_decay != 0;
  c.centered = o.centered;
  c.use_momentum = o.momentum > 0;
  return c;
}

template <typename T, bool kDecay, bool kCentered, bool kMomentum>
void rmsprop_loop(const RmsPropCoeffs<T> c, T* __restrict p, const T* __restrict g, T* __restrict sq, T* __restrict ga,
                  T* __restrict buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + c.weight_decay * p[i];
    const T s = flush_subnormal(c.alpha * sq[i] + c.one_minus_alpha * d * d);
    sq[i] = s;
    T avg;
    if constexpr (kCentered) {
      const T a = flush_subnormal(c.alpha * ga[i] + c.one_minus_alpha * d);
      ga[i] = a;
      const T var = s - a * a;
      avg = std::sqrt(var < 0 ? T{0} : var) + c.eps;
    } else {
      avg = std::sqrt(s) + c.eps;
    }
    if constexpr (kMomentum) {
      const T b = flush_subnormal(c.momentum * buf[i] + d / avg);
      buf[i] = b;
      p[i] = p[i] - c.lr * b;
    } else {
      p[i] = p[i] - c.lr * (d / avg);
    }
  }
}

template <typename T>
void rmsprop_step_cpu(Context& ctx, const RmsPropCoeffs<T>& c, T* p, const T* g, T* sq, T* ga, T* buf, int64_t n) {
  for_lanes(ctx, n, [&](int64_t b, int64_t e) {
    with_flag(c.decay, [&](auto decay) {
      with_flag(c.centered, [&](auto centered) {
        with_flag(c.use_momentum, [&](auto momentum) {
          rmsprop_loop<T, decltype(decay)::value, decltype(centered)::value, decltype(momentum)::value>(
              c, p + b, g + b, sq + b, at_or_null(ga, b), at_or_null(buf, b), e - b);
        });
      });
    });
  });
}

}  // namespace

RmsProp::RmsProp(RmsPropOptions options) : options_(options) {
  QT_CHECK(options_.lr > 0, "rmsprop: lr must be > 0, got {}", options_.lr);
  QT_CHECK(options_.alpha >= 0 && options_.alpha <= 1, "rmsprop: alpha must be in [0, 1], got {}", options_.alpha);
  QT_CHECK(options_.eps >= 0, "rmsprop: eps must be >= 0, got {}", options_.eps);
  QT_CHECK(options_.weight_decay >= 0, "rmsprop: weight_decay must be >= 0, got {}", options_.weight_decay);
  QT_CHECK(options_.momentum >= 0 && options_.momentum < 1, "rmsprop: momentum must be in [0, 1), got {}",
           options_.momentum);
}

void RmsProp::init(int64_t numel, DType dtype, Device device) {
  arena_.init(type(), numel, dtype, device);
  square_avg_ = Tensor::zeros({numel}, dtype, device);
  grad_avg_ = options_.centered ? Tensor::zeros({numel}, dtype, device) : Tensor();
  momentum_buffer_ = options_.momentum > 0 ? Tensor::zeros({numel}, dtype, device) : Tensor();
}

void RmsProp::step(Context& ctx, Tensor& params, const Tensor& grads, double lr) {
  arena_.check_step(type(), params, grads);
  if (arena_.device.is_cuda()) {
#if QTRAIN_HAS_CUDA
    optim_detail::rmsprop_step_cuda(ctx, rmsprop_coeffs<float>(options_, lr), params.data<float>(), grads.data<float>(),
                                    square_avg_.data<float>(), data_or_null<float>(grad_avg_),
                                    data_or_null<float>(momentum_buffer_), arena_.numel);
#else
    optim_detail::refuse_cuda_step("rmsprop");
#endif
  } else if (arena_.dtype == DType::f32) {
    rmsprop_step_cpu(ctx, rmsprop_coeffs<float>(options_, lr), params.data<float>(), grads.data<float>(),
                     square_avg_.data<float>(), data_or_null<float>(grad_avg_), data_or_null<float>(momentum_buffer_),
                     arena_.numel);
  } else {
    rmsprop_step_cpu(ctx, rmsprop_coeffs<double>(options_, lr), params.data<double>(), grads.data<double>(),
                     square_avg_.data<double>(), data_or_null<double>(grad_avg_),
                     data_or_null<double>(momentum_buffer_), arena_.numel);
  }
}

std::vector<std::pair<std::string, Tensor>> RmsProp::state() {
  std::vector<std::pair<std::string, Tensor>> out{{"rmsprop.square_avg", square_avg_}};
  if (momentum_buffer_.defined()) out.emplace_back("rmsprop.momentum_buffer", momentum_buffer_);
  if (grad_avg_.defined()) out.emplace_back("rmsprop.grad_avg", grad_avg_);
  return out;
}

}  // namespace qtrain
