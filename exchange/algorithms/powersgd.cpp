// PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) over the tensors of one bucket, as PyTorch
// DDP's powerSGD_hook runs it. Per compressed tensor, M (rows x cols) is its gradient plus its
// error-feedback residual; Q is the previous step's mean Q (warm start), or a draw of standard
// normal values from a random stream every rank shares:
//
//   orthogonalize Q;  P = M Q;  all-reduce P (sum);  orthogonalize P;  Q = M^T P;  all-reduce Q and
//   take the mean;  M_hat = P Q^T (the gradient every rank ends with);  residual = M - M_hat
//
// The P matrices of all the bucket's compressed tensors travel in one all-reduce, their Q matrices in
// a second. Vectors, matrices whose compression does not pay (GradientExchange::low_rank_shape) and
// every tensor before step start_iter are all-reduced in fp32 (allreduce.cpp). Every rank orthogonalizes
// the same summed P and expands the same P and Q, so every rank ends with the same bits.
#include <cmath>
#include <vector>

#include "comm/buffer_ops.h"
#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/low_rank.h"
#include "exchange/algorithms/workspace.h"
#include "framework/core/philox.h"

namespace qtrain::exchange {
namespace {

// Standard normal values (Box-Muller on two words of the stream per value, in double) for Q^T.
void draw_q(Workspace& w, int t, LowRankState& l) {
  const int64_t n = l.q_t.numel();
  const PhiloxKey key = derive_philox_key(l.seed, w.ctx->step(), GradientExchange::kEveryRank,
                                          GradientExchange::state_id(t, StreamRole::low_rank_q, 0));
  std::vector<float> values(static_cast<size_t>(n));
  auto uniform = [&](int64_t i) {  // (0, 1]
    const PhiloxBlock b = philox_subsequence_block(key, static_cast<uint64_t>(i) / 4);
    return static_cast<double>(b.v[i % 4]) * 0x1p-32 + 0x1p-33;
  };
  for (int64_t i = 0; i < n; ++i)
    values[static_cast<size_t>(i)] =
        static_cast<float>(std::sqrt(-2.0 * std::log(uniform(2 * i))) * std::cos(2.0 * M_PI * uniform(2 * i + 1)));
  copy_from_host(*w.ctx, l.q_t.raw(), values.data(), static_cast<size_t>(n) * 4);
}

// Whether Q^T holds a Q (a drawn or a computed one): all zero before the first compressed step.
bool holds_q(Workspace& w, const LowRankState& l) {
  std::vector<float> host(static_cast<size_t>(l.q_t.numel()));
  copy_to_host(*w.ctx, host.data(), l.q_t.raw(), host.size() * 4);
  for (float v : host)
    if (v != 0.0f) return true;
  return false;
}

// A NaN or Inf in any rank's M reaches every rank's summed P, so every rank stops here with the same
// error (naming the tensor) before it could enter Q (the next step's warm start) or the parameters.
void check_finite(Workspace& w, const std::vector<int>& compressed, const float* p_all, int64_t p_values) {
  std::vector<float> host;
  if (w.device.is_cuda()) {
    host.resize(static_cast<size_t>(p_values));
    copy_to_host(*w.ctx, host.data(), p_all, host.size() * 4);
    p_all = host.data();
  }
  int64_t at = 0;
  for (int t : compressed) {
    const LowRankShape& s = w.plan(t).as<LowRankState>().shape;
    for (int64_t i = 0; i < s.rows * s.rank; ++i)
      if (!std::isfinite(p_all[at + i]))
        throw NonFiniteInputError(fmt::format(
            "powersgd: the gradient of {} (plus its error-feedback residual) holds NaN or Inf on some rank: its "
            "summed P = M Q is not finite",
            w.tensor(t).name));
    at += s.rows * s.rank;
  }
}

}  // namespace

void reduce_powersgd(Workspace& w, const std::vector<int>& ids) {
  std::vector<int> compressed, uncompressed;
  for (int t : ids) {
    const TensorPlan& p = w.plan(t);
    const bool started = w.ctx->step() >= static_cast<uint64_t>(p.spec.integer("start_iter"));
    (started && p.as<LowRankState>().shape.compressed ? compressed : uncompressed).push_back(t);
  }
  if (!uncompressed.empty()) reduce_allreduce(w, uncompressed);
  if (compressed.empty()) return;

  int64_t p_values = 0, q_values = 0;
  for (int t : compressed) {
    const LowRankShape& s = w.plan(t).as<LowRankState>().shape;
    p_values += s.rows * s.rank;
    q_values += s.cols * s.rank;
  }
  auto* p_all = reinterpret_cast<float*>(w.device_bytes(w.low_rank_p, static_cast<size_t>(p_values) * 4));
  auto* q_all = reinterpret_cast<float*>(w.device_bytes(w.low_rank_q, static_cast<size_t>(q_values) * 4));

  // M = gradient + residual, kept in the residual buffer (the gradient is overwritten by M_hat at the
  // end); Q orthogonalized (or drawn); P = M Q.
  auto t0 = Clock::now();
  auto matrix = [&](int t) -> const float* {
    LowRankState& l = w.plan(t).as<LowRankState>();
    return l.residual.defined() ? l.residual.data<float>() : w.grad(t);
  };
  int64_t p_at = 0;
  for (int t : compressed) {
    TensorPlan& p = w.plan(t);
    LowRankState& l = p.as<LowRankState>();
    if (l.residual.defined()) add_into(*w.ctx, l.residual.data<float>(), w.grad(t), w.tensor(t).numel);
    // Q comes from the random stream without warm start, and on the first compressed step (Q^T still
    // zero: looked at once per process, as a checkpoint may have restored it since the plan was made).
    bool draw = p.spec.choice("warm_start") == "false";
    if (!l.q_checked) {
      draw = draw || !holds_q(w, l);
      l.q_checked = true;
    }
    if (draw) draw_q(w, t, l);
    const auto eps = static_cast<float>(p.spec.number("epsilon"));
    orthonormalize_rows(*w.ctx, l.q_t.data<float>(), l.shape.rank, l.shape.cols, eps);
    project_low_rank(*w.ctx, matrix(t), l.shape.rows, l.shape.cols, l.q_t.data<float>(), l.shape.rank, p_all + p_at);
    p_at += l.shape.rows * l.shape.rank;
  }
  w.stats.phases.add(Phase::encode, since(t0));

  // The sum of P: no mean, as the orthogonalization that follows removes every scale.
  t0 = Clock::now();
  w.comm.all_reduce_sum(*w.ctx, p_all, p_values, ReduceType::f32);
  w.stats.phases.add(Phase::communicate, since(t0));

  t0 = Clock::now();
  check_finite(w, compressed, p_all, p_values);
  p_at = 0;
  int64_t q_at = 0;
  for (int t : compressed) {
    const TensorPlan& p = w.plan(t);
    const LowRankShape& s = p.as<LowRankState>().shape;
    orthonormalize_rows(*w.ctx, p_all + p_at, s.rank, s.rows, static_cast<float>(p.spec.number("epsilon")));
    back_project_low_rank(*w.ctx, matrix(t), s.rows, s.cols, p_all + p_at, s.rank, q_all + q_at);
    p_at += s.rows * s.rank;
    q_at += s.cols * s.rank;
  }
  w.stats.phases.add(Phase::encode, since(t0));

  t0 = Clock::now();
  w.comm.all_reduce_sum(*w.ctx, q_all, q_values, ReduceType::f32);
  w.stats.phases.add(Phase::communicate, since(t0));

  // The mean Q becomes the state (the next step's warm start); M_hat = P Q^T, the approximation of
  // the mean of the ranks' M, replaces the gradient, and the residual (holding this rank's M) becomes
  // M - M_hat. The mean whatever communication.reduce says: this rank's M is compared with the mean's
  // approximation; with reduce: sum the gradient is then scaled to the sum's (times the world size).
  t0 = Clock::now();
  const int P = w.comm.size();
  if (P != 1) scale_buffer(*w.ctx, q_all, q_values, 1.0f / static_cast<float>(P));
  const float to_reduce = w.scale * static_cast<float>(P);  // 1 for the mean
  p_at = 0;
  q_at = 0;
  for (int t : compressed) {
    LowRankState& l = w.plan(t).as<LowRankState>();
    const LowRankShape& s = l.shape;
    copy_buffer(*w.ctx, l.q_t.raw(), q_all + q_at, static_cast<size_t>(s.cols * s.rank) * 4);
    expand_low_rank(*w.ctx, p_all + p_at, l.q_t.data<float>(), s.rows, s.cols, s.rank, w.grad(t),
                    l.residual.defined() ? l.residual.data<float>() : nullptr);
    if (to_reduce != 1.0f) scale_buffer(*w.ctx, w.grad(t), w.tensor(t).numel, to_reduce);
    // Two ring all-reduces of (rows + cols) * rank floats: each sends 2(P-1)/P of its data.
    w.stats.bytes_sent_per_tensor[static_cast<size_t>(t)] +=
        2.0 * (P - 1) / P * 4.0 * static_cast<double>((s.rows + s.cols) * s.rank);
    p_at += s.rows * s.rank;
    q_at += s.cols * s.rank;
  }
  w.stats.phases.add(Phase::decode, since(t0));
}

namespace {

class PowerSgd final : public ExchangeAlgorithm {
 public:
  void plan(TensorPlan& p, const ExchangeTensor& x, int, const PlanContext& pc) const override {
    auto l = std::make_unique<LowRankState>();
    l->shape = GradientExchange::low_rank_shape(p.spec, x.rows, x.numel);
    if (l->shape.compressed) {
      l->seed = pc.seed;
      l->q_t = Tensor::zeros({l->shape.rank, l->shape.cols}, DType::f32, pc.device);
      if (p.spec.error_feedback) l->residual = Tensor::zeros({x.numel}, DType::f32, pc.device);
    }
    p.state = std::move(l);
  }
  void reduce(Workspace& w, const std::vector<int>& ids) const override { reduce_powersgd(w, ids); }
  // Steady state (after start_iter): P and Q in two fp32 all-reduces, (rows + cols) * rank values,
  // modelled as one native all-reduce of those bytes; uncompressed tensors in fp32.
  WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const override {
    const LowRankShape s = GradientExchange::low_rank_shape(spec, x.rows, x.numel);
    const auto n = static_cast<double>(x.numel);
    return payload_cost(WireCost::Pattern::allreduce,
                        s.compressed ? 4.0 * static_cast<double>((s.rows + s.cols) * s.rank) : 4.0 * n, n);
  }
  // "<tensor>/powersgd/q" (Q transposed, the same on every rank) and "<tensor>/powersgd/residual".
  void state(TensorPlan& p, const std::string& name, std::vector<std::pair<std::string, Tensor>>& out) const override {
    LowRankState& l = p.as<LowRankState>();
    if (l.q_t.defined()) out.emplace_back(name + "/powersgd/q", l.q_t);
    if (l.residual.defined()) out.emplace_back(name + "/powersgd/residual", l.residual);
  }
  // Vectors and matrices whose compression does not pay travel in fp32.
  bool sends_fp32(const TensorPlan& p) const override {
    return ExchangeAlgorithm::sends_fp32(p) || !p.as<LowRankState>().shape.compressed;
  }
  // The matrix it compresses, or that the tensor travels in fp32.
  std::string describe(const TensorPlan& p) const override {
    const LowRankShape& l = p.as<LowRankState>().shape;
    return fmt::format("powersgd{}", l.compressed ? fmt::format(" {}x{} rank {}", l.rows, l.cols, l.rank)
                                                  : std::string(" (fp32: not compressed)"));
  }
};

}  // namespace

const ExchangeAlgorithm& algorithm_powersgd() {
  static const PowerSgd algorithm;
  return algorithm;
}

}  // namespace qtrain::exchange
