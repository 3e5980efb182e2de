// DiLoCo as a SyncStrategy (see diloco.h).
#include "train/sync/diloco.h"

#include <fmt/format.h>

#include "optim/sgd.h"

namespace qtrain {
namespace {

SgdOptions parse_outer(ConfigNode outer) {
  SgdOptions o;
  o.lr = outer.get_double("lr", 0.7, 0.0, 1e6, /*min_exclusive=*/true);
  o.momentum = outer.get_double("momentum", 0.9, 0.0, 1.0);
  if (o.momentum >= 1.0) outer.fail("momentum", fmt::format("must be < 1, got {}", o.momentum));
  o.nesterov = outer.get<bool>("nesterov", true);
  if (o.nesterov && o.momentum == 0)
    outer.fail("nesterov", "needs momentum > 0 (set sync.outer.momentum, e.g. 0.9, or nesterov: false)");
  outer.finish();
  return o;
}

class DiLoCoSync final : public SyncStrategy {
 public:
  explicit DiLoCoSync(SyncSetup& s)
      : inner_steps_(s.options.get_int("inner_steps", 500, 1, INT64_MAX)),
        outer_(parse_outer(s.options.child("outer"))),
        difference_(SgdOptions{.lr = 1.0}),
        exchange_(s.comm, s.device, s.config.seed, s.config.exchange, s.config.quantization, s.tensors) {
    s.options.finish();
    global_ = s.params.clone();  // the initial parameters, the same on every rank
    delta_ = Tensor::zeros(s.params.shape(), s.params.dtype(), s.device);
    outer_.init(s.params.numel(), s.params.dtype(), s.device);
    difference_.init(s.params.numel(), s.params.dtype(), s.device);
  }

  void before_backward(Tensor, uint64_t) override {}
  void tensor_ready(Context&, int) override {}
  void after_backward(Context&) override {}

  void after_optimizer_step(Context& ctx, Tensor& params, uint64_t step) override {
    const uint64_t steps = step + 1;
    if (steps % static_cast<uint64_t>(inner_steps_) != 0) return;
    // delta = theta_global - theta_local: an SGD step of lr 1 from theta_global along theta_local, the
    // one rounding of the subtraction on both devices (Tensor::copy_from runs outside ctx's stream).
    ctx.synchronize();
    delta_.copy_from(global_);
    difference_.step(ctx, delta_, params, 1.0);
    exchange_.exchange(ctx, delta_, steps / static_cast<uint64_t>(inner_steps_) - 1);
    outer_.step(ctx, global_, delta_, outer_.base_lr());
    ctx.synchronize();
    params.copy_from(global_);
  }

  bool replicas_identical(int64_t steps) const override { return steps % inner_steps_ == 0; }
  bool optimizer_state_per_rank() const override { return true; }
  const Tensor* global_parameters() const override { return &global_; }

  std::vector<SyncState> state() override {
    std::vector<SyncState> out{{"diloco/global", global_, false}};
    for (auto& [name, t] : outer_.state()) out.push_back({"diloco/outer/" + name, t, false});
    for (auto& [name, t] : exchange_.state()) out.push_back({"diloco/exchange/" + name, t, true});
    return out;
  }

  ExchangeStats take_stats() override { return exchange_.take_stats(); }
  const std::vector<ExchangeTensor>& tensors() const override { return exchange_.tensors(); }
  double fraction_quantized() const override { return exchange_.fraction_quantized(); }
  std::string summary() const override {
    return fmt::format(
        "DiLoCo every {} steps (outer SGD lr {}, momentum {}{}), {:.2f}% of pseudo-gradient values "
        "quantized",
        inner_steps_, outer_.options().lr, outer_.options().momentum, outer_.options().nesterov ? ", Nesterov" : "",
        100 * exchange_.fraction_quantized());
  }
  std::string describe() const override { return "pseudo-gradient exchange:\n" + exchange_.describe(); }

 private:
  int64_t inner_steps_;
  Sgd outer_, difference_;
  GradientExchange exchange_;
  Tensor global_, delta_;
};

}  // namespace

std::unique_ptr<SyncStrategy> make_diloco_sync(SyncSetup& setup) { return std::make_unique<DiLoCoSync>(setup); }

}  // namespace qtrain
