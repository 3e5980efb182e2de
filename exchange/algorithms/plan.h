// Internal to the gradient exchange: how one tensor is reduced (its method, algorithm, stripes,
// pieces and quantization states), and the small questions about a quantization method that the
// exchange asks. The stripe and random-stream conventions themselves are GradientExchange's public
// static functions (the tests' simulation shares them).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "exchange/exchange_config.h"
#include "exchange/gradient_exchange.h"
#include "quant/method.h"
#include "quant/quantizer.h"

namespace qtrain::exchange {

// Whether the method quantizes per column (stripes and pieces then hold whole columns).
bool uses_columns(const QuantSpec& spec);

// A span of one tensor's values, in elements.
struct Span {
  int64_t begin = 0, length = 0;
};

// What an algorithm keeps per tensor (quantization states, stripes, matrices): each algorithm its own
// kind, made by its ExchangeAlgorithm::plan; a TensorPlan holds the one its algorithm made.
struct PlanState {
  virtual ~PlanState() = default;
};

// allgather and allreduce_compact: one quantization state for the whole tensor.
struct WholeState final : PlanState {
  QuantState whole;
};

// reduce_scatter_allgather: P stripes, each cut into the same number of pieces, with a first
// quantization state per stripe and piece and the owner's re-quantization state per piece.
struct StripedState final : PlanState {
  int64_t unit = 1;                   // stripe boundaries are multiples of this (the column for column methods)
  std::vector<int64_t> stripe_begin;  // P + 1 boundaries
  std::vector<std::vector<int64_t>> piece_begin;  // per stripe: pieces + 1 boundaries
  std::vector<std::vector<QuantState>> stripes;   // first quantization, [stripe][piece]
  std::vector<QuantState> owner;                  // re-quantization of the own stripe, [piece]

  int pieces() const { return static_cast<int>(owner.size()); }
  int64_t piece_at(int s, int k) const { return piece_begin[static_cast<size_t>(s)][static_cast<size_t>(k)]; }
  int64_t piece_len(int s, int k) const { return piece_at(s, k + 1) - piece_at(s, k); }
  // Piece k of stripe s (empty when this tensor has fewer pieces than k + 1).
  Span piece(int s, int k) const { return k < pieces() ? Span{piece_at(s, k), piece_len(s, k)} : Span{}; }
};

// PowerSGD's state of one tensor (algorithm powersgd; powersgd.cpp). Q is kept transposed (row k is
// column k of Q), so that every column the orthogonalization walks is contiguous.
struct LowRankState final : PlanState {
  LowRankShape shape;
  uint64_t seed =
      0;       // the run's seed: Q's draws use derive_philox_key(seed, step, kEveryRank, state_id(t, low_rank_q, 0))
  Tensor q_t;  // rank x cols: the mean Q of the last compressed step (zero before the first), identical on every rank
  Tensor residual;  // numel values: this rank's M - M_hat (error feedback on), else undefined
  // Whether q_t has been looked at since this process built the plan: the first compressed step reads
  // it once (all zero: no Q yet, draw one), as a checkpoint may have restored it in between.
  bool q_checked = false;
};

struct TensorPlan {
  QuantSpec spec;
  ReduceAlgorithm algorithm = ReduceAlgorithm::allreduce;
  std::unique_ptr<Quantizer> quantizer;  // null for allreduce and powersgd
  // The owner's re-encoding of its combined stripe (reduce_scatter_allgather), when the method's
  // owner_spec differs from its spec (signsgd without momentum); else null and `quantizer` does it.
  std::unique_ptr<Quantizer> owner_quantizer;
  QuantCombine combine = QuantCombine::sum;  // how the summed decodes are finished (quant/method.h)
  std::unique_ptr<PlanState> state;          // the algorithm's (null for allreduce)

  const Quantizer& owner_q() const { return owner_quantizer ? *owner_quantizer : *quantizer; }
  // The algorithm's state, of the kind it made.
  template <typename State>
  State& as() {
    return const_cast<State&>(std::as_const(*this).as<State>());
  }
  template <typename State>
  const State& as() const {
    const auto* s = dynamic_cast<const State*>(state.get());
    QT_CHECK(s != nullptr, "a {} plan holds no state of the kind asked for", reduce_algorithm_name(algorithm));
    return *s;
  }
  // The column argument of encode for a span of `length` values of a tensor with `column`.
  int64_t column_for(int64_t length, int64_t column) const {
    return GradientExchange::encode_column(spec, length, column);
  }
};

// Where the plan's quantization states come from: the run's seed, this rank and the world.
struct PlanContext {
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
  double piece_mb = 0;  // communication.piece_mb
  Device device;
};

// The plan of tensor `index` (`x`), quantized with `spec` and reduced with `algorithm`, its states
// initialized on the plan context's device.
TensorPlan make_plan(const ExchangeTensor& x, int index, const QuantSpec& spec, ReduceAlgorithm algorithm,
                     const PlanContext& pc);

}  // namespace qtrain::exchange
