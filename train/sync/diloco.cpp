// DiLoCo and Streaming DiLoCo as a SyncStrategy (see diloco.h).
#include "train/sync/diloco.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

// The tensors cut into `count` fragments, contiguous ranges of the arena as even in bytes on the wire
// (`cost[t]`: what tensor t's exchange sends per rank, spread evenly over its values) as the tensors'
// leading dimension allows: boundary f sits at f / count of the bytes, moved to the nearest boundary
// between two slabs of its tensor's leading dimension (rows of a matrix, output channels of a
// convolution); a vector is never cut. Bytes rather than values, because a tensor sent in fp32 (a
// bias below quantization.min_numel) costs eight times a 4-bit one. A cut tensor's parts are tensors
// of their own for the exchange ("dense2.weight[0:512]": the rows they hold, their own quantization
// states), quantized as the whole tensor would be (decided_numel). A fragment comes out empty only
// when count exceeds the cuts the tensors offer: an error for the caller.
std::vector<std::vector<ExchangeTensor>> cut_fragments(const std::vector<ExchangeTensor>& tensors,
                                                       const std::vector<double>& cost, int64_t count) {
  double total = 0;
  for (double c : cost) total += c;
  // Where fragment j begins, in bytes of the tensors laid end to end.
  auto boundary = [&](int64_t j) { return total * static_cast<double>(j) / static_cast<double>(count); };
  std::vector<std::vector<ExchangeTensor>> fragments(static_cast<size_t>(count));
  int64_t f = 0;
  double before = 0;  // bytes of the tensors before this one
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ExchangeTensor& x = tensors[t];
    const int64_t rows = x.rows > 0 ? x.rows : 1;  // a vector is one slab
    const int64_t slab = x.numel / rows;           // values per leading-dimension index
    const double row_cost = cost[t] / static_cast<double>(rows);
    int64_t row = 0;
    while (row < rows) {
      while (f + 1 < count && before + static_cast<double>(row) * row_cost >= boundary(f + 1)) ++f;
      int64_t end_row = rows;
      if (f + 1 < count && boundary(f + 1) - before < cost[t])
        end_row = std::clamp(static_cast<int64_t>(std::llround((boundary(f + 1) - before) / row_cost)), row + 1, rows);
      ExchangeTensor part = x;
      part.offset = x.offset + row * slab;
      part.numel = (end_row - row) * slab;
      if (part.numel != x.numel) {
        part.name = fmt::format("{}[{}:{}]", x.name, row, end_row);
        part.rows = end_row - row;
        part.decided_numel = x.decided_numel > 0 ? x.decided_numel : x.numel;
      }
      fragments[static_cast<size_t>(f)].push_back(std::move(part));
      if (end_row < rows) ++f;  // cut at fragment f + 1's boundary
      row = end_row;
    }
    before += cost[t];
  }
  return fragments;
}

// One fragment: a contiguous range of the arena synced on its own schedule, with its own exchange, outer
// optimizer and pseudo-gradient buffer (which the exchange owns while it is in flight).
struct Fragment {
  std::vector<ExchangeTensor> tensors;  // offsets relative to `begin`
  int64_t begin = 0, numel = 0;         // the range of the arena
  int64_t shift = 0;                    // synced when (steps + shift) % H == 0
  std::unique_ptr<GradientExchange> exchange;
  std::unique_ptr<Sgd> outer, difference;
  Tensor delta;         // numel values: theta_global - theta_local, then its average across ranks
  bool flying = false;  // its exchange runs on the exchange's thread (sync.overlap > 0)
};

class DiLoCoSync final : public SyncStrategy {
 public:
  explicit DiLoCoSync(SyncSetup& s, const DiLoCoPeriod& period)
      : inner_steps_(period.inner_steps),
        outer_options_(parse_outer(s.options.child("outer"))),
        overlap_(period.overlap) {
    const int64_t count = period.fragments;
    mix_ = s.options.get_double("mix", 0.5, 0.0, 1.0);
    s.options.finish();

    global_ = s.params.clone();  // the initial parameters, the same on every rank
    // An exchange with overlap runs on the exchange's thread; without, the step waits for it.
    ExchangeConfig exchange_config = s.config.exchange;
    exchange_config.overlap = overlap_ > 0;
    std::vector<double> cost;
    for (const ExchangeTensor& x : s.tensors) {
      const QuantSpec spec = s.config.quantization.resolve(x.layer_name, x.layer_type, x.numel);
      // Relative weights: a world of one sends nothing, and is cut as two ranks would be.
      cost.push_back(GradientExchange::wire_cost(spec, x, s.config.exchange.algorithm_for(spec))
                         .sent_per_rank(std::max(s.comm.size(), 2)));
    }
    const std::vector<std::vector<ExchangeTensor>> parts = cut_fragments(s.tensors, cost, count);
    for (int64_t f = 0; f < count; ++f)
      if (parts[static_cast<size_t>(f)].empty())
        s.options.fail("fragments", fmt::format("the model's tensors cut into at most {} fragments of consecutive "
                                                "rows here, got {}",
                                                f, count));
    // The fragments tile the whole arena: the first begins at 0, the last ends at its end, the others
    // at their first part (one fragment: the arena, as plain DiLoCo has always stepped it).
    for (int64_t f = 0; f < count; ++f) {
      Fragment& fr = fragments_.emplace_back();
      const auto& mine = parts[static_cast<size_t>(f)];
      fr.begin = f == 0 ? 0 : mine.front().offset;
      fr.numel = (f + 1 < count ? parts[static_cast<size_t>(f) + 1].front().offset : s.params.numel()) - fr.begin;
      for (ExchangeTensor x : mine) {
        all_tensors_.push_back(x);
        x.offset -= fr.begin;
        fr.tensors.push_back(std::move(x));
      }
      fr.shift = f * inner_steps_ / count;
      fr.exchange = std::make_unique<GradientExchange>(s.comm, s.device, s.config.seed, exchange_config,
                                                       s.config.quantization, fr.tensors);
      fr.outer = std::make_unique<Sgd>(outer_options_);
      fr.difference = std::make_unique<Sgd>(SgdOptions{.lr = 1.0});
      fr.outer->init(fr.numel, s.params.dtype(), s.device);
      fr.difference->init(fr.numel, s.params.dtype(), s.device);
      fr.delta = Tensor::zeros({fr.numel}, s.params.dtype(), s.device);
    }
    // Where each fragment's exchange, started at step s of its schedule, is merged: at s + overlap
    // (0: none pending). The source of truth, checkpointed: a resume inside a flight merges the
    // checkpoint's averaged pseudo-gradient at the same step.
    merge_at_ = Tensor::zeros({count}, DType::f64);
  }

  ~DiLoCoSync() override = default;

  void before_backward(Tensor, uint64_t) override {}
  void tensor_ready(Context&, int) override {}
  void after_backward(Context&) override {}

  void after_optimizer_step(Context& ctx, Tensor& params, uint64_t step) override {
    const uint64_t steps = step + 1;
    const auto H = static_cast<uint64_t>(inner_steps_);
    double* merge_at = merge_at_.data<double>();
    // Every fragment due lands first, then the due ones are sent: the fragments' exchanges share the
    // communicator, so one must not begin while another is in flight (read_diloco_period bounds the
    // overlap so that the previous one is due by then); the ranges are disjoint, so the order of a
    // merge and a send at one step does not change the bits.
    for (size_t f = 0; f < fragments_.size(); ++f) {
      if (merge_at[f] != 0 && static_cast<uint64_t>(merge_at[f]) == steps) {
        land(fragments_[f]);
        merge(ctx, fragments_[f], params);
        merge_at[f] = 0;
      }
    }
    for (size_t f = 0; f < fragments_.size(); ++f) {
      Fragment& fr = fragments_[f];
      if ((steps + static_cast<uint64_t>(fr.shift)) % H != 0) continue;
      // delta = theta_global - theta_local: an SGD step of lr 1 from theta_global along theta_local, the
      // one rounding of the subtraction on both devices (Tensor::copy_from runs outside ctx's stream).
      ctx.synchronize();
      fr.delta.copy_from(global_view(fr));
      Tensor local = params.view(fr.begin, {fr.numel});
      fr.difference->step(ctx, fr.delta, local, 1.0);
      // The random streams of the exchange: one step number per fragment and outer step, never shared.
      const uint64_t outer_index = (steps + static_cast<uint64_t>(fr.shift)) / H - 1;
      const uint64_t key = outer_index * fragments_.size() + f;
      if (overlap_ == 0) {
        fr.exchange->exchange(ctx, fr.delta, key);
        merge(ctx, fr, params);
        continue;
      }
      for (const Fragment& other : fragments_)
        QT_CHECK(!other.flying,
                 "diloco: fragment {} begins its exchange while another's is in flight (they share the "
                 "communicator)",
                 f);
      fr.exchange->begin_step(fr.delta, key);
      for (int t = static_cast<int>(fr.tensors.size()) - 1; t >= 0; --t) fr.exchange->tensor_ready(ctx, t);
      fr.flying = true;
      merge_at[f] = static_cast<double>(steps + static_cast<uint64_t>(overlap_));
    }
  }

  // Plain DiLoCo (one fragment, no overlap) leaves every replica at the global parameters after each
  // outer step; fragments synced in turn, or merged into replicas that went on training, never do.
  bool replicas_identical(int64_t steps) const override {
    return fragments_.size() == 1 && overlap_ == 0 && steps % inner_steps_ == 0;
  }
  bool optimizer_state_per_rank() const override { return true; }
  const Tensor* global_parameters() const override { return &global_; }

  std::vector<SyncState> state() override {
    // A checkpoint inside a flight holds the flight's result: it is waited for here (the bits do not
    // change, only when the host learns them) and merged at its step, by this run or a resumed one.
    for (Fragment& fr : fragments_) land(fr);
    std::vector<SyncState> out{{"diloco/global", global_, false}};
    const bool one = fragments_.size() == 1;
    for (size_t f = 0; f < fragments_.size(); ++f) {
      Fragment& fr = fragments_[f];
      const std::string prefix = one ? "diloco/" : fmt::format("diloco/fragment{}/", f);
      for (auto& [name, t] : fr.outer->state()) out.push_back({prefix + "outer/" + name, t, false});
      if (overlap_ > 0) out.push_back({prefix + "in_flight", fr.delta, false});
      for (auto& [name, t] : fr.exchange->state()) out.push_back({"diloco/exchange/" + name, t, true});
    }
    if (overlap_ > 0) out.push_back({"diloco/merge_at", merge_at_, false});
    return out;
  }

  ExchangeStats take_stats() override {
    ExchangeStats all;
    for (Fragment& fr : fragments_) {
      ExchangeStats s = fr.exchange->take_stats();
      s.bytes_sent_per_tensor.resize(fr.tensors.size(), 0.0);
      for (Phase p : {Phase::encode, Phase::communicate, Phase::decode}) all.phases.add(p, s.phases.seconds(p));
      all.bytes_sent += s.bytes_sent;
      all.bytes_sent_per_tensor.insert(all.bytes_sent_per_tensor.end(), s.bytes_sent_per_tensor.begin(),
                                       s.bytes_sent_per_tensor.end());
      all.steps += s.steps;
    }
    return all;
  }
  const std::vector<ExchangeTensor>& tensors() const override { return all_tensors_; }
  double fraction_quantized() const override {
    double total = 0, quantized = 0;
    for (const Fragment& fr : fragments_) {
      total += static_cast<double>(fr.numel);
      quantized += static_cast<double>(fr.numel) * fr.exchange->fraction_quantized();
    }
    return total > 0 ? quantized / total : 0;
  }
  std::string summary() const override {
    std::string streaming;
    if (fragments_.size() > 1 || overlap_ > 0)
      streaming = fmt::format(", streaming: {} fragments synced in turn, each merged {} steps after it is sent{}",
                              fragments_.size(), overlap_, overlap_ > 0 ? fmt::format(" (mix {})", mix_) : "");
    return fmt::format(
        "DiLoCo every {} steps (outer SGD lr {}, momentum {}{}){}, {:.2f}% of pseudo-gradient values quantized",
        inner_steps_, outer_options_.lr, outer_options_.momentum, outer_options_.nesterov ? ", Nesterov" : "",
        streaming, 100 * fraction_quantized());
  }
  std::string describe() const override {
    std::string s;
    for (size_t f = 0; f < fragments_.size(); ++f)
      s += (fragments_.size() == 1
                ? std::string("pseudo-gradient exchange:\n")
                : fmt::format("pseudo-gradient exchange of fragment {} (synced at steps {} mod {}):\n", f,
                              (inner_steps_ - fragments_[f].shift) % inner_steps_, inner_steps_)) +
           fragments_[f].exchange->describe();
    return s;
  }

 private:
  Tensor global_view(const Fragment& fr) { return global_.view(fr.begin, {fr.numel}); }

  // Waits for a fragment's exchange in flight; its averaged pseudo-gradient is then in fr.delta.
  static void land(Fragment& fr) {
    if (!fr.flying) return;
    fr.flying = false;
    fr.exchange->finish_step();
  }

  // The outer step on the fragment's global parameters, and the replica's fragment from them: replaced
  // (no overlap: every replica continues from the global parameters) or, after an overlap (the replica
  // trained on meanwhile), mixed: local = mix * local + (1 - mix) * global (Streaming DiLoCo's merge,
  // its alpha), as two SGD steps: d = local - global, local -= (1 - mix) d.
  void merge(Context& ctx, Fragment& fr, Tensor& params) {
    Tensor global = global_view(fr);
    fr.outer->step(ctx, global, fr.delta, fr.outer->base_lr());
    ctx.synchronize();
    Tensor local = params.view(fr.begin, {fr.numel});
    if (overlap_ == 0) {
      local.copy_from(global);
      return;
    }
    // fr.delta is free again: it holds d.
    fr.delta.copy_from(local);
    fr.difference->step(ctx, fr.delta, global, 1.0);
    fr.difference->step(ctx, local, fr.delta, 1.0 - mix_);
    ctx.synchronize();
  }

  int64_t inner_steps_;
  SgdOptions outer_options_;
  int64_t overlap_ = 0;
  double mix_ = 0.5;
  std::vector<Fragment> fragments_;
  std::vector<ExchangeTensor> all_tensors_;  // every fragment's, with their arena offsets
  Tensor global_;
  Tensor merge_at_;  // per fragment, f64 on the CPU
};

}  // namespace

DiLoCoPeriod read_diloco_period(ConfigNode& sync) {
  DiLoCoPeriod p;
  p.inner_steps = sync.get_int("inner_steps", p.inner_steps, 1, INT64_MAX);
  p.fragments = sync.get_int("fragments", p.fragments, 1, INT64_MAX);
  if (p.fragments > p.inner_steps)
    sync.fail("fragments", fmt::format("at most sync.inner_steps ({}) fragments, each synced at its own step "
                                       "of the period, got {}",
                                       p.inner_steps, p.fragments));
  p.overlap = sync.get_int("overlap", p.overlap, 0, INT64_MAX);
  if (p.overlap >= p.inner_steps)
    sync.fail("overlap", fmt::format("a fragment's exchange must land before its next sync: less than "
                                     "sync.inner_steps ({}), got {}",
                                     p.inner_steps, p.overlap));
  // Fragments are sent inner_steps / fragments steps apart (rounded down at the least), and their
  // exchanges share one communicator: each must land before the next one begins.
  if (p.fragments > 1 && p.overlap > p.inner_steps / p.fragments)
    sync.fail("overlap", fmt::format("a fragment's exchange must land before the next fragment's begins: at most "
                                     "sync.inner_steps / sync.fragments ({} / {} = {} steps), got {}",
                                     p.inner_steps, p.fragments, p.inner_steps / p.fragments, p.overlap));
  return p;
}

std::unique_ptr<SyncStrategy> make_diloco_sync(SyncSetup& setup) {
  const DiLoCoPeriod period = read_diloco_period(setup.options);
  return std::make_unique<DiLoCoSync>(setup, period);
}

}  // namespace qtrain
