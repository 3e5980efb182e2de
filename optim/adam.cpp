// Adam: option checks, the per-step coefficients (bias corrections, on the host in double), and the
// CPU loop (templated on float/double, one pass over the arena, no allocation). The CUDA kernel with
// the same arithmetic is in adam.cu.
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "optim/cpu_lanes.h"
#include "optim/kernels.h"
#include "optim/adam_step.h"

namespace qtrain {
namespace {

using optim_detail::AdamCoeffs;
using optim_detail::at_or_null;
using optim_detail::data_or_null;
using optim_detail::flush_subnormal;
using optim_detail::for_lanes;
using optim_detail::with_flag;

// `t` is the 1-based number of this step.
template <typename T>
AdamCoeffs<T> adam_coeffs(const AdamOptions& o, double lr, double t) {
  AdamCoeffs<T> c;
  c.weight_decay = static_cast<T>(o.weight_decay);
  c.beta1 = static_cast<T>(o.beta1);
  c.one_minus_beta1 = static_cast<T>(1.0 - o.beta1);
  c.beta2 = static_cast<T>(o.beta2);
  c.one_minus_beta2 = static_cast<T>(1.0 - o.beta2);
  c.eps = static_cast<T>(o.eps);
  c.step_size = static_cast<T>(lr / (1.0 - std::pow(o.beta1, t)));
  c.bias_correction2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  c.decay = o.weight_decay != 0;
  c.amsgrad = o.amsgrad;
  return c;
}

template <typename T, bool kDecay, bool kAmsgrad>
void adam_loop(const AdamCoeffs<T> c, T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + c.weight_decay * p[i];
    const T mi = flush_subnormal(c.beta1 * m[i] + c.one_minus_beta1 * d);
    const T vi = flush_subnormal(c.beta2 * v[i] + c.one_minus_beta2 * d * d);
    m[i] = mi;
    v[i] = vi;
    T denom_v = vi;
    if constexpr (kAmsgrad) {
      denom_v = std::max(vmax[i], vi);
      vmax[i] = denom_v;
    }
    const T denom = std::sqrt(denom_v) / c.bias_correction2_sqrt + c.eps;
    p[i] = p[i] - c.step_size * (mi / denom);
  }
}

template <typename T>
void adam_step_cpu(Context& ctx, const AdamCoeffs<T>& c, T* p, const T* g, T* m, T* v, T* vmax, int64_t n) {
  for_lanes(ctx, n, [&](int64_t b, int64_t e) {
    with_flag(c.decay, [&](auto decay) {
      with_flag(c.amsgrad, [&](auto amsgrad) {
        adam_loop<T, decltype(decay)::value, decltype(amsgrad)::value>(c, p + b, g + b, m + b, v + b,
                                                                       at_or_null(vmax, b), e - b);
      });
    });
  });
}

}  // namespace

Adam::Adam(AdamOptions options) : options_(options) {
  QT_CHECK(options_.lr > 0, "adam: lr must be > 0, got {}", options_.lr);
  QT_CHECK(options_.beta1 >= 0 && options_.beta1 < 1, "adam: beta1 must be in [0, 1), got {}", options_.beta1);
  QT_CHECK(options_.beta2 >= 0 && options_.beta2 < 1, "adam: beta2 must be in [0, 1), got {}", options_.beta2);
  QT_CHECK(options_.eps >= 0, "adam: eps must be >= 0, got {}", options_.eps);
  QT_CHECK(options_.weight_decay >= 0, "adam: weight_decay must be >= 0, got {}", options_.weight_decay);
}

void Adam::init(int64_t numel, DType dtype, Device device) {
  arena_.init(type(), numel, dtype, device);
  exp_avg_ = Tensor::zeros({numel}, dtype, device);
  exp_avg_sq_ = Tensor::zeros({numel}, dtype, device);
  max_exp_avg_sq_ = options_.amsgrad ? Tensor::zeros({numel}, dtype, device) : Tensor();
  step_ = Tensor::zeros({1}, DType::f64);
}

void Adam::step(Context& ctx, Tensor& params, const Tensor& grads, double lr) {
  arena_.check_step(type(), params, grads);
  double& steps = *step_.data<double>();
  const double t = steps + 1;
  if (arena_.device.is_cuda()) {
#if QTRAIN_HAS_CUDA
    optim_detail::adam_step_cuda(ctx, adam_coeffs<float>(options_, lr, t), params.data<float>(), grads.data<float>(),
                                 exp_avg_.data<float>(), exp_avg_sq_.data<float>(),
                                 data_or_null<float>(max_exp_avg_sq_), arena_.numel);
#else
    optim_detail::refuse_cuda_step("adam");
#endif
  } else if (arena_.dtype == DType::f32) {
    adam_step_cpu(ctx, adam_coeffs<float>(options_, lr, t), params.data<float>(), grads.data<float>(),
                  exp_avg_.data<float>(), exp_avg_sq_.data<float>(), data_or_null<float>(max_exp_avg_sq_),
                  arena_.numel);
  } else {
    adam_step_cpu(ctx, adam_coeffs<double>(options_, lr, t), params.data<double>(), grads.data<double>(),
                  exp_avg_.data<double>(), exp_avg_sq_.data<double>(), data_or_null<double>(max_exp_avg_sq_),
                  arena_.numel);
  }
  steps = t;
}

std::vector<std::pair<std::string, Tensor>> Adam::state() {
  std::vector<std::pair<std::string, Tensor>> out{{"adam.exp_avg", exp_avg_}, {"adam.exp_avg_sq", exp_avg_sq_}};
  if (max_exp_avg_sq_.defined()) out.emplace_back("adam.max_exp_avg_sq", max_exp_avg_sq_);
  out.emplace_back("adam.step", step_);
  return out;
}

}  // namespace qtrain
