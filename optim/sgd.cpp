// SGD: option checks, the per-step coefficients, and the CPU loop (templated on float/double, one
// pass over the arena, no allocation). The CUDA kernel with the same arithmetic is in sgd.cu.
#include "optim/sgd.h"

#include "optim/cpu_lanes.h"
#include "optim/kernels.h"
#include "optim/sgd_step.h"

namespace qtrain {
namespace {

using optim_detail::at_or_null;
using optim_detail::data_or_null;
using optim_detail::flush_subnormal;
using optim_detail::for_lanes;
using optim_detail::SgdCoeffs;
using optim_detail::with_flag;

template <typename T>
SgdCoeffs<T> sgd_coeffs(const SgdOptions& o, double lr, bool first_step) {
  SgdCoeffs<T> c;
  c.lr = static_cast<T>(lr);
  c.weight_decay = static_cast<T>(o.weight_decay);
  c.momentum = static_cast<T>(o.momentum);
  c.buf_scale = first_step ? T(0) : static_cast<T>(o.momentum);
  c.grad_scale = first_step ? T(1) : static_cast<T>(1.0 - o.dampening);
  c.decay = o.weight_decay != 0;
  c.use_momentum = o.momentum != 0;
  c.nesterov = o.nesterov;
  return c;
}

template <typename T, bool kDecay, bool kMomentum, bool kNesterov>
void sgd_loop(const SgdCoeffs<T> c, T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + c.weight_decay * p[i];
    if constexpr (kMomentum) {
      const T b = flush_subnormal(c.buf_scale * buf[i] + c.grad_scale * d);
      buf[i] = b;
      if constexpr (kNesterov)
        d = d + c.momentum * b;
      else
        d = b;
    }
    p[i] = p[i] - c.lr * d;
  }
}

template <typename T>
void sgd_step_cpu(Context& ctx, const SgdCoeffs<T>& c, T* p, const T* g, T* buf, int64_t n) {
  for_lanes(ctx, n, [&](int64_t b, int64_t e) {
    with_flag(c.decay, [&](auto decay) {
      with_flag(c.use_momentum, [&](auto momentum) {
        with_flag(c.nesterov, [&](auto nesterov) {
          sgd_loop<T, decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value>(
              c, p + b, g + b, at_or_null(buf, b), e - b);
        });
      });
    });
  });
}

}  // namespace

Sgd::Sgd(SgdOptions options) : options_(options) {
  QT_CHECK(options_.lr > 0, "sgd: lr must be > 0, got {}", options_.lr);
  QT_CHECK(options_.momentum >= 0 && options_.momentum < 1, "sgd: momentum must be in [0, 1), got {}",
           options_.momentum);
  QT_CHECK(options_.dampening >= 0 && options_.dampening <= 1, "sgd: dampening must be in [0, 1], got {}",
           options_.dampening);
  QT_CHECK(options_.weight_decay >= 0, "sgd: weight_decay must be >= 0, got {}", options_.weight_decay);
  QT_CHECK(!options_.nesterov || (options_.momentum > 0 && options_.dampening == 0),
           "sgd: nesterov needs momentum > 0 and dampening 0, got momentum {} dampening {}", options_.momentum,
           options_.dampening);
}

void Sgd::init(int64_t numel, DType dtype, Device device) {
  arena_.init(type(), numel, dtype, device);
  momentum_buffer_ = Tensor();
  step_ = Tensor::zeros({1}, DType::f64);
  if (options_.momentum != 0) momentum_buffer_ = Tensor::zeros({numel}, dtype, device);
}

void Sgd::step(Context& ctx, Tensor& params, const Tensor& grads, double lr) {
  arena_.check_step(type(), params, grads);
  double& steps = *step_.data<double>();
  const bool first = steps == 0;
  if (arena_.device.is_cuda()) {
#if QTRAIN_HAS_CUDA
    optim_detail::sgd_step_cuda(ctx, sgd_coeffs<float>(options_, lr, first), params.data<float>(), grads.data<float>(),
                                data_or_null<float>(momentum_buffer_), arena_.numel);
#else
    optim_detail::refuse_cuda_step("sgd");
#endif
  } else if (arena_.dtype == DType::f32) {
    sgd_step_cpu(ctx, sgd_coeffs<float>(options_, lr, first), params.data<float>(), grads.data<float>(),
                 data_or_null<float>(momentum_buffer_), arena_.numel);
  } else {
    sgd_step_cpu(ctx, sgd_coeffs<double>(options_, lr, first), params.data<double>(), grads.data<double>(),
                 data_or_null<double>(momentum_buffer_), arena_.numel);
  }
  steps += 1;
}

std::vector<std::pair<std::string, Tensor>> Sgd::state() {
  if (!momentum_buffer_.defined()) return {};
  return {{"sgd.momentum_buffer", momentum_buffer_}, {"sgd.step", step_}};
}

}  // namespace qtrain
