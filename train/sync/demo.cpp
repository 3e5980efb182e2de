// DeMo as a SyncStrategy (see demo.h).
#include "train/sync/demo.h"

#include <fmt/format.h>

#include <chrono>

#include "quant/quantizer.h"
#include "train/sync/demo_codec.h"

namespace qtrain {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

demo::CodecOptions parse_options(ConfigNode& s) {
  demo::CodecOptions o;
  o.chunk = s.get_int("chunk", o.chunk, 1, demo::kMaxChunk);
  o.topk = s.get_int("topk", o.topk, 1, INT64_MAX);
  if (o.topk > o.chunk)
    s.fail("topk", fmt::format("is the number of DCT coefficients kept per chunk of sync.chunk = {} values: at "
                               "most {}, got {}",
                               o.chunk, o.chunk, o.topk));
  const double beta = s.get_double("momentum", o.beta, 0.0, 1.0);
  if (beta >= 1.0) s.fail("momentum", fmt::format("must be < 1 (the paper uses 0.999), got {}", beta));
  o.beta = static_cast<float>(beta);
  o.sign = s.get<bool>("sign", o.sign);
  s.finish();
  return o;
}

// DeMo is the optimizer: the run's `optimizer` may only be plain SGD, which takes its step.
void check_optimizer(const RunConfig& config) {
  ConfigNode opt = config.optimizer;
  const std::string type = opt.get<std::string>("type", "");
  if (type != "sgd")
    opt.fail("type", fmt::format("is {}, but sync.type demo is an optimizer of its own (signum over the decoded "
                                 "momentum components): set optimizer.type: sgd without momentum; its lr, "
                                 "schedule and weight_decay apply",
                                 type));
  if (opt.get_double("momentum", 0.0, 0.0, 1.0) != 0.0)
    opt.fail("momentum", "must be 0 under sync.type demo, which keeps the momentum itself (sync.momentum)");
  if (opt.get_double("clip_norm", 0.0, 0.0, 1e300) != 0.0)
    opt.fail("clip_norm",
             "must be 0 under sync.type demo: the optimizer sees the signs of the decoded update, whose norm "
             "clipping would only shrink the step");
}

// The `quantization` section belongs to the gradient exchange, which DeMo replaces by its own payload.
void check_quantization(const RunConfig& config) {
  const QuantizationConfig& q = config.quantization;
  if (q.base.method != QuantMethod::fp32 || !q.overrides.empty())
    input_error(
        "{}: quantization.method {}{}: sync.type demo sends its own payload (sync.topk DCT coefficients per "
        "chunk, sync.sign for signs); remove the quantization section",
        config.file, quant_method_name(q.base.method), q.overrides.empty() ? "" : " (with overrides)");
}

std::vector<demo::ArenaSpan> spans(const std::vector<ExchangeTensor>& tensors) {
  std::vector<demo::ArenaSpan> out;
  for (const ExchangeTensor& t : tensors) out.push_back({t.offset, t.numel});
  return out;
}

class DeMoSync final : public SyncStrategy {
 public:
  explicit DeMoSync(SyncSetup& s)
      : comm_(s.comm), tensors_(s.tensors), codec_(spans(s.tensors), parse_options(s.options), s.device) {
    check_optimizer(s.config);
    check_quantization(s.config);
    momentum_ = Tensor::zeros(s.params.shape(), DType::f32, s.device);
    payload_.resize(codec_.payload_bytes());
    stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
  }

  void before_backward(Tensor grads, uint64_t) override { grads_ = std::move(grads); }
  void tensor_ready(Context&, int) override {}

  void after_backward(Context& ctx) override {
    auto t = std::chrono::steady_clock::now();
    codec_.encode(ctx, momentum_.data<float>(), grads_.data<float>(), payload_.data());
    stats_.phases.add(Phase::encode, seconds_since(t));
    t = std::chrono::steady_clock::now();
    comm_.all_gather_bytes(ctx, payload_, gathered_, sizes_, offsets_);
    stats_.phases.add(Phase::communicate, seconds_since(t));
    t = std::chrono::steady_clock::now();
    for (size_t r = 0; r < sizes_.size(); ++r)
      if (sizes_[r] != codec_.payload_bytes())
        input_error("demo payload from rank {}: {} bytes, this plan's payload has {} (do all ranks run one config?)", r,
                    sizes_[r], codec_.payload_bytes());
    codec_.decode(ctx, gathered_.data(), comm_.size(), grads_.data<float>());
    stats_.phases.add(Phase::decode, seconds_since(t));
    // An allgather delivers this rank's payload to each other rank once.
    const auto others = static_cast<double>(comm_.size() - 1);
    stats_.bytes_sent += others * static_cast<double>(codec_.payload_bytes());
    for (size_t i = 0; i < tensors_.size(); ++i)
      stats_.bytes_sent_per_tensor[i] += others * static_cast<double>(codec_.tensor_body_bytes(i));
    ++stats_.steps;
  }

  void after_optimizer_step(Context&, Tensor&, uint64_t) override {}
  bool replicas_identical(int64_t) const override { return true; }
  bool optimizer_state_per_rank() const override { return false; }
  const Tensor* global_parameters() const override { return nullptr; }

  std::vector<SyncState> state() override { return {{"demo/momentum", momentum_, true}}; }

  ExchangeStats take_stats() override {
    ExchangeStats out = stats_;
    stats_ = ExchangeStats{};
    stats_.bytes_sent_per_tensor.assign(tensors_.size(), 0.0);
    return out;
  }
  const std::vector<ExchangeTensor>& tensors() const override { return tensors_; }
  double fraction_quantized() const override { return 1.0; }  // no value crosses the wire as fp32 gradient

  std::string summary() const override {
    const demo::CodecOptions& o = codec_.options();
    return fmt::format(
        "DeMo: DCT-II over chunks of {} values, top {} coefficients per chunk sent as {}, momentum {}, signum "
        "update; {} bytes per rank per step ({:.3f} bits per value)",
        o.chunk, o.topk, o.sign ? "signs with a scale per chunk" : "fp32 values", o.beta, codec_.payload_bytes(),
        8.0 * static_cast<double>(codec_.payload_bytes()) / static_cast<double>(std::max<int64_t>(codec_.values(), 1)));
  }
  std::string describe() const override {
    std::string out = "DeMo payload per rank and step (" + codec_.describe_bases() + "):";
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const ExchangeTensor& t = tensors_[i];
      out += fmt::format("\n  {} ({} values, {} chunk(s)): {} bytes", t.name, t.numel,
                         (t.numel + codec_.options().chunk - 1) / codec_.options().chunk, codec_.tensor_body_bytes(i));
    }
    out += fmt::format("\n  header and padding: {} bytes", codec_.payload_bytes() - body_bytes());
    return out;
  }

 private:
  size_t body_bytes() const {
    size_t total = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) total += codec_.tensor_body_bytes(i);
    return total;
  }

  Communicator& comm_;
  std::vector<ExchangeTensor> tensors_;
  demo::Codec codec_;
  Tensor momentum_, grads_;
  std::vector<uint8_t> payload_, gathered_;
  std::vector<size_t> sizes_, offsets_;
  ExchangeStats stats_;
};

}  // namespace

std::unique_ptr<SyncStrategy> make_demo_sync(SyncSetup& setup) { return std::make_unique<DeMoSync>(setup); }

}  // namespace qtrain
