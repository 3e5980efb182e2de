// RMSprop with optional momentum, centering and L2 weight decay, with exactly the semantics of
// PyTorch 1.13's torch.optim.RMSprop:
//   d = g + weight_decay * p;  sq = alpha * sq + (1 - alpha) * d * d;
//   avg = sqrt(sq - ga * ga) + eps with ga = alpha * ga + (1 - alpha) * d when centered, else sqrt(sq) + eps;
//   momentum > 0: buf = momentum * buf + d / avg, p -= lr * buf;  otherwise p -= lr * d / avg.
// One deliberate difference: a negative sq - ga * ga counts as 0 (PyTorch takes its square root, NaN).
// The variance estimate is >= 0 in exact arithmetic, but rounding can take it below, and the flush of
// subnormal states (optim/kernels.h) does for gradients near 1e-20: sq flushes to 0 while ga * ga
// stays a subnormal, and the parameters would all become NaN (seen on a GPU run of test_optim_cuda).
// NaN inputs stay NaN (the comparison is false for them).
#pragma once

#include "optim/arena_kind.h"
#include "optim/optimizer.h"

namespace qtrain {

struct RmsPropOptions {
  double lr = 0.01;
  double alpha = 0.99;  // [0, 1]
  double eps = 1e-8;    // added after the square root, as in PyTorch (not inside it as in Keras)
  double weight_decay = 0;
  double momentum = 0;  // [0, 1)
  bool centered = false;
};

class RmsProp final : public Optimizer {
 public:
  explicit RmsProp(RmsPropOptions options);
  const char* type() const override { return "rmsprop"; }
  void init(int64_t numel, DType dtype, Device device) override;
  int state_arrays() const override { return 1 + (options_.centered ? 1 : 0) + (options_.momentum > 0 ? 1 : 0); }
  void step(Context& ctx, Tensor& params, const Tensor& grads, double lr) override;
  // "rmsprop.square_avg", plus "rmsprop.momentum_buffer" with momentum and "rmsprop.grad_avg" when
  // centered; all arena-shaped. No step count: RMSprop's update does not depend on it.
  std::vector<std::pair<std::string, Tensor>> state() override;
  double base_lr() const override { return options_.lr; }
  const RmsPropOptions& options() const { return options_; }

 private:
  RmsPropOptions options_;
  optim_detail::ArenaKind arena_;
  Tensor square_avg_, grad_avg_, momentum_buffer_;  // (numel) arena dtype and device
};

}  // namespace qtrain
