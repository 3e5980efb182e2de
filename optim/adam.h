// Adam (and AMSGrad) with L2 weight decay added to the gradient, with exactly the semantics of
// PyTorch 1.13's torch.optim.Adam (not AdamW's decoupled decay):
//   t += 1;  d = g + weight_decay * p;  m = beta1 * m + (1 - beta1) * d;  v = beta2 * v + (1 - beta2) * d * d;
//   vmax = max(vmax, v) when amsgrad;  denom = sqrt(v or vmax) / sqrt(1 - beta2^t) + eps;
//   p -= lr / (1 - beta1^t) * m / denom.
#pragma once

#include "optim/arena_kind.h"
#include "optim/optimizer.h"

namespace qtrain {

struct AdamOptions {
  double lr = 0.001;
  double beta1 = 0.9;    // [0, 1)
  double beta2 = 0.999;  // [0, 1)
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(AdamOptions options);
  const char* type() const override { return "adam"; }
  void init(int64_t numel, DType dtype, Device device) override;
  int state_arrays() const override { return options_.amsgrad ? 3 : 2; }
  void step(Context& ctx, Tensor& params, const Tensor& grads, double lr) override;
  // "adam.exp_avg", "adam.exp_avg_sq" (arena-shaped), "adam.max_exp_avg_sq" with amsgrad, and
  // "adam.step" (steps taken, one f64 on the CPU: the bias corrections are computed on the host).
  std::vector<std::pair<std::string, Tensor>> state() override;
  double base_lr() const override { return options_.lr; }
  const AdamOptions& options() const { return options_; }

 private:
  AdamOptions options_;
  optim_detail::ArenaKind arena_;
  Tensor exp_avg_, exp_avg_sq_, max_exp_avg_sq_;  // (numel) arena dtype and device
  Tensor step_;                                   // (1) f64, CPU
};

}  // namespace qtrain
