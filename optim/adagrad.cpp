// Adagrad: option checks, the per-step coefficients, and the CPU loop (templated on float/double,
// one pass over the arena, no allocation). The CUDA kernel with the same arithmetic is in adagrad.cu.
#include "optim/adagrad.h"

#include <cmath>

#include "optim/cpu_lanes.h"
#include "optim/kernels.h"
#include "optim/adagrad_step.h"

namespace qtrain {
namespace {

using optim_detail::AdagradCoeffs;
using optim_detail::for_lanes;
using optim_detail::with_flag;

template <typename T>
AdagradCoeffs<T> adagrad_coeffs(const AdagradOptions& o, double lr, double t) {
  AdagradCoeffs<T> c;
  c.clr = static_cast<T>(lr / (1.0 + (t - 1.0) * o.lr_decay));
  c.weight_decay = static_cast<T>(o.weight_decay);
  c.eps = static_cast<T>(o.eps);
  c.decay = o.weight_decay != 0;
  return c;
}

template <typename T, bool kDecay>
void adagrad_loop(const AdagradCoeffs<T> c, T* __restrict p, const T* __restrict g, T* __restrict sum, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + c.weight_decay * p[i];
    const T s = sum[i] + d * d;
    sum[i] = s;
    p[i] = p[i] - c.clr * (d / (std::sqrt(s) + c.eps));
  }
}

template <typename T>
void adagrad_step_cpu(Context& ctx, const AdagradCoeffs<T>& c, T* p, const T* g, T* sum, int64_t n) {
  for_lanes(ctx, n, [&](int64_t b, int64_t e) {
    with_flag(c.decay, [&](auto decay) { adagrad_loop<T, decltype(decay)::value>(c, p + b, g + b, sum + b, e - b); });
  });
}

}  // namespace

Adagrad::Adagrad(AdagradOptions options) : options_(options) {
  QT_CHECK(options_.lr > 0, "adagrad: lr must be > 0, got {}", options_.lr);
  QT_CHECK(options_.lr_decay >= 0, "adagrad: lr_decay must be >= 0, got {}", options_.lr_decay);
  QT_CHECK(options_.weight_decay >= 0, "adagrad: weight_decay must be >= 0, got {}", options_.weight_decay);
  QT_CHECK(options_.initial_accumulator_value >= 0, "adagrad: initial_accumulator_value must be >= 0, got {}",
           options_.initial_accumulator_value);
  QT_CHECK(options_.eps >= 0, "adagrad: eps must be >= 0, got {}", options_.eps);
}

void Adagrad::init(int64_t numel, DType dtype, Device device) {
  arena_.init(type(), numel, dtype, device);
  if (options_.initial_accumulator_value == 0) {
    sum_ = Tensor::zeros({numel}, dtype, device);
  } else {  // fill_ works on host tensors only
    Tensor host = Tensor::empty({numel}, dtype, Device::cpu());
    host.fill_(options_.initial_accumulator_value);
    sum_ = host.to(device);
  }
  step_ = Tensor::zeros({1}, DType::f64);
}

void Adagrad::step(Context& ctx, Tensor& params, const Tensor& grads, double lr) {
  arena_.check_step(type(), params, grads);
  double& steps = *step_.data<double>();
  const double t = steps + 1;
  if (arena_.device.is_cuda()) {
#if QTRAIN_HAS_CUDA
    optim_detail::adagrad_step_cuda(ctx, adagrad_coeffs<float>(options_, lr, t), params.data<float>(),
                                    grads.data<float>(), sum_.data<float>(), arena_.numel);
#else
    optim_detail::refuse_cuda_step("adagrad");
#endif
  } else if (arena_.dtype == DType::f32) {
    adagrad_step_cpu(ctx, adagrad_coeffs<float>(options_, lr, t), params.data<float>(), grads.data<float>(),
                     sum_.data<float>(), arena_.numel);
  } else {
    adagrad_step_cpu(ctx, adagrad_coeffs<double>(options_, lr, t), params.data<double>(), grads.data<double>(),
                     sum_.data<double>(), arena_.numel);
  }
  steps = t;
}

std::vector<std::pair<std::string, Tensor>> Adagrad::state() {
  return {{"adagrad.sum", sum_}, {"adagrad.step", step_}};
}

}  // namespace qtrain
