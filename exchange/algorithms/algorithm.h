// Internal to the gradient exchange: the contract of a reduction algorithm. One object per algorithm
// (no state of its own: what it keeps per tensor is the PlanState its plan() makes), listed in
// algorithms.def; the exchange asks it for everything that differs between algorithms, so that the
// exchange, the log, the checkpoint and the cost model (GradientExchange::wire_cost) never switch on
// the algorithm.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "exchange/algorithms/plan.h"

namespace qtrain::exchange {

struct Workspace;

class ExchangeAlgorithm {
 public:
  virtual ~ExchangeAlgorithm() = default;
  // Fills p's quantizers and state for tensor `index` (`x`), whose spec and algorithm are set.
  virtual void plan(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc) const = 0;
  // Reduces the tensors `ids` of one bucket (all of this algorithm) in place in w.grads.
  virtual void reduce(Workspace& w, const std::vector<int>& ids) const = 0;
  // One tensor's traffic per step in the cost model's terms (steady state).
  virtual WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const = 0;
  // Its checkpointed state of tensor `name`: (name + suffix, live buffer) pairs.
  virtual void state(TensorPlan& p, const std::string& name, std::vector<std::pair<std::string, Tensor>>& out) const;
  // Whether the tensor's values travel as fp32 (fraction_quantized).
  virtual bool sends_fp32(const TensorPlan& p) const;
  // The algorithm column of the exchange's description.
  virtual std::string describe(const TensorPlan& p) const { return reduce_algorithm_name(p.algorithm); }

 protected:
  // The checkpoint names of one quantization state.
  static void add_state(QuantState& s, const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out);
};

const ExchangeAlgorithm& exchange_algorithm(ReduceAlgorithm id);

// Each algorithm's object, defined in its own file.
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) const ExchangeAlgorithm& algorithm_##name();
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM

// A cost of `bytes` per rank carrying `values` gradient values over `pattern`.
WireCost payload_cost(WireCost::Pattern pattern, double bytes, double values);
// The plan of the algorithms that quantize a tensor whole (allgather, allreduce_compact): its
// quantizer, its combine and one WholeState.
void plan_whole(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc);

}  // namespace qtrain::exchange
