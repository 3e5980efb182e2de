// Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay, with
// exactly the semantics of PyTorch 1.13's torch.optim.SGD (so runs can be compared with it):
//   d = g + weight_decay * p;  buf = d (first step) or momentum * buf + (1 - dampening) * d;
//   d = nesterov ? d + momentum * buf : buf;  p -= lr * d.
#pragma once

#include "optim/arena_kind.h"
#include "optim/optimizer.h"

namespace qtrain {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;   // [0, 1)
  double dampening = 0;  // [0, 1]
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0 (as in PyTorch)
};

class Sgd final : public Optimizer {
 public:
  explicit Sgd(SgdOptions options);
  const char* type() const override { return "sgd"; }
  void init(int64_t numel, DType dtype, Device device) override;
  int state_arrays() const override { return options_.momentum != 0 ? 1 : 0; }
  void step(Context& ctx, Tensor& params, const Tensor& grads, double lr) override;
  // "sgd.momentum_buffer" (arena-shaped) and "sgd.step" (steps taken, one f64 on the CPU: the first
  // momentum step copies the gradient instead of dampening it), both only with momentum.
  std::vector<std::pair<std::string, Tensor>> state() override;
  double base_lr() const override { return options_.lr; }
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  optim_detail::ArenaKind arena_;
  Tensor momentum_buffer_;  // (numel) arena dtype and device
  Tensor step_;             // (1) f64, CPU
};

}  // namespace qtrain
