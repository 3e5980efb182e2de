// The algorithms of algorithms.def by id, and what they share by default.
#include "exchange/algorithms/algorithm.h"

#include "quant/method.h"

namespace qtrain::exchange {

const ExchangeAlgorithm& exchange_algorithm(ReduceAlgorithm id) {
  switch (id) {
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) \
  case ReduceAlgorithm::name:                      \
    return algorithm_##name();
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  }
  QT_FAIL("no exchange algorithm has id {}", static_cast<int>(id));
}

void ExchangeAlgorithm::state(TensorPlan&, const std::string&, std::vector<std::pair<std::string, Tensor>>&) const {}

bool ExchangeAlgorithm::sends_fp32(const TensorPlan& p) const { return method_info(p.spec.method).cast_bits == 32; }

void ExchangeAlgorithm::add_state(QuantState& s, const std::string& prefix,
                                  std::vector<std::pair<std::string, Tensor>>& out) {
  for (auto& [name, tensor] : s.state()) out.emplace_back(prefix + "/" + name, tensor);
}

void plan_whole(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc) {
  p.quantizer = make_quantizer(p.spec);
  p.combine = method_info(p.spec.method).combine;
  auto s = std::make_unique<WholeState>();
  s->whole = QuantState(pc.seed, pc.rank, GradientExchange::state_id(index, StreamRole::whole, 0));
  p.quantizer->init_state(s->whole, x.numel, pc.device);
  p.state = std::move(s);
}

WireCost payload_cost(WireCost::Pattern pattern, double bytes, double values) {
  WireCost c;
  c.pattern = pattern;
  c.bytes = bytes;
  c.values = values;
  return c;
}

}  // namespace qtrain::exchange

namespace qtrain {

WireCost GradientExchange::wire_cost(const QuantSpec& spec, const ExchangeTensor& x, ReduceAlgorithm algorithm) {
  return exchange::exchange_algorithm(algorithm).cost(spec, x);
}

}  // namespace qtrain
