// The per-step gradient exchange as a SyncStrategy (see every_step.h).
#include "train/sync/every_step.h"

#include <fmt/format.h>

namespace qtrain {
namespace {

class EveryStepSync final : public SyncStrategy {
 public:
  explicit EveryStepSync(SyncSetup& s)
      : exchange_(s.comm, s.device, s.config.seed, s.config.exchange, s.config.quantization, s.tensors),
        overlap_(s.config.exchange.overlap) {
    s.options.finish();
  }

  void before_backward(Tensor grads, uint64_t step) override { exchange_.begin_step(std::move(grads), step); }
  void tensor_ready(Context& compute, int t) override { exchange_.tensor_ready(compute, t); }
  void after_backward(Context&) override { exchange_.finish_step(); }
  void after_optimizer_step(Context&, Tensor&, uint64_t) override {}
  bool replicas_identical(int64_t) const override { return true; }
  bool optimizer_state_per_rank() const override { return false; }
  const Tensor* global_parameters() const override { return nullptr; }

  // The exchange's error-feedback residuals and PowerSGD state, each rank's own.
  std::vector<SyncState> state() override {
    std::vector<SyncState> out;
    for (auto& [name, t] : exchange_.state()) out.push_back({std::string(kPrefix) + name, t, true});
    return out;
  }

  ExchangeStats take_stats() override { return exchange_.take_stats(); }
  const std::vector<ExchangeTensor>& tensors() const override { return exchange_.tensors(); }
  double fraction_quantized() const override { return exchange_.fraction_quantized(); }
  std::string summary() const override {
    return fmt::format("{:.2f}% of gradient values quantized, {} bucket(s), overlap {}",
                       100 * exchange_.fraction_quantized(), exchange_.num_buckets(), overlap_ ? "on" : "off");
  }
  std::string describe() const override { return "gradient exchange:\n" + exchange_.describe(); }

  static constexpr const char* kPrefix = "exchange/";

 private:
  GradientExchange exchange_;
  bool overlap_;
};

}  // namespace

std::unique_ptr<SyncStrategy> make_every_step_sync(SyncSetup& setup) { return std::make_unique<EveryStepSync>(setup); }

}  // namespace qtrain
