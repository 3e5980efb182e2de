// Adagrad with L2 weight decay added to the gradient, with exactly the semantics of PyTorch 1.13's
// torch.optim.Adagrad (the optimizer of Seide et al.'s 1-bit SGD and of Dryden et al.'s one-bit runs):
//   t += 1;  d = g + weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay);
//   sum = sum + d * d;  p -= clr * d / (sqrt(sum) + eps),  with sum starting at initial_accumulator_value.
#pragma once

#include "optim/arena_kind.h"
#include "optim/optimizer.h"

namespace qtrain {

struct AdagradOptions {
  double lr = 0.01;
  double lr_decay = 0;  // >= 0: the step's lr is lr / (1 + (t - 1) * lr_decay)
  double weight_decay = 0;
  double initial_accumulator_value = 0;  // >= 0: the sum of squares every value starts from
  double eps = 1e-10;                    // added after the square root, as in PyTorch
};

class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(AdagradOptions options);
  const char* type() const override { return "adagrad"; }
  void init(int64_t numel, DType dtype, Device device) override;
  int state_arrays() const override { return 1; }
  void step(Context& ctx, Tensor& params, const Tensor& grads, double lr) override;
  // "adagrad.sum" (arena-shaped) and "adagrad.step" (steps taken, one f64 on the CPU: lr_decay's
  // factor is computed on the host).
  std::vector<std::pair<std::string, Tensor>> state() override;
  double base_lr() const override { return options_.lr; }
  const AdagradOptions& options() const { return options_; }

 private:
  AdagradOptions options_;
  optim_detail::ArenaKind arena_;
  Tensor sum_;   // (numel) arena dtype and device
  Tensor step_;  // (1) f64, CPU
};

}  // namespace qtrain
