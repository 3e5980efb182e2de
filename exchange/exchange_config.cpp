// Parsing of the `communication:` section.
#include "exchange/exchange_config.h"

#include <fmt/ranges.h>

#include "quant/method.h"

namespace qtrain {

const char* reduce_algorithm_name(ReduceAlgorithm a) {
  switch (a) {
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) \
  case ReduceAlgorithm::name:                      \
    return #name;
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  }
  return "?";
}

ReduceAlgorithm default_algorithm(QuantMethod method) {
  const std::string& name = method_info(method).algorithm;
#define QTRAIN_EXCHANGE_ALGORITHM(id, choosable) \
  if (name == #id) return ReduceAlgorithm::id;
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  QT_FAIL("quantization method {}: unknown default algorithm '{}' (exchange/algorithms/algorithms.def)",
          quant_method_name(method), name);
}

ExchangeConfig ExchangeConfig::parse(ConfigNode& section) {
  ExchangeConfig c;
  std::vector<std::string> algorithms{"auto"};
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) \
  if (choosable) algorithms.push_back(#name);
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  c.algorithm = section.get_choice("algorithm", c.algorithm, algorithms);
  c.bucket_mb = section.get_double("bucket_mb", c.bucket_mb, 0.0, 1 << 20, /*min_exclusive=*/true);
  c.overlap = section.get<bool>("overlap", c.overlap);
  c.mean = section.get_choice("reduce", "mean", {"mean", "sum"}) == "mean";
  c.piece_mb = section.get_double("piece_mb", c.piece_mb, 0.0, 1 << 20);
  c.hierarchy = section.get_choice("hierarchy", c.hierarchy, {"auto", "flat", "two_level"});
  c.intra = section.get_choice("intra", c.intra, {"fp32", "bf16"});
  c.payload_path = section.get_choice("payload_path", c.payload_path, {"auto", "host"});
  c.small_tensors = section.get_choice("small_tensors", c.small_tensors, {"native", "with_quantized"});
  c.ranks_per_node = section.get_int("ranks_per_node", c.ranks_per_node, 0, 1 << 20);
  return c;
}

ReduceAlgorithm ExchangeConfig::algorithm_for(const QuantSpec& spec) const {
  // A method the exchange runs itself has no payload that another algorithm could carry.
  if (!method_info(spec.method).payload) return default_algorithm(spec.method);
  if (algorithm == "auto") return default_algorithm(spec.method);
  if (algorithm == "allreduce") {
    // Tensors below min_numel are fp32 and always reduce natively; quantized payloads cannot be
    // summed by MPI or NCCL, except the bodies of the methods whose values sit at positions every
    // rank shares.
    if (method_info(spec.method).summable_body) return ReduceAlgorithm::allreduce_compact;
    if (method_info(spec.method).cast_bits == 0) {
      std::vector<std::string> casts;
      for (const QuantMethodInfo* m : quant_methods())
        if (m->cast_bits != 0 || m->summable_body) casts.push_back(m->name);
      input_error(
          "communication.algorithm: allreduce cannot carry {} payloads (only {} sum natively); use allgather "
          "or reduce_scatter_allgather",
          quant_method_name(spec.method), fmt::join(casts, ", "));
    }
    return ReduceAlgorithm::allreduce;
  }
  // Small fp32 tensors bypass quantization and take the native path under every algorithm.
  if (method_info(spec.method).cast_bits == 32) return ReduceAlgorithm::allreduce;
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) \
  if (choosable && algorithm == #name) return ReduceAlgorithm::name;
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  QT_FAIL("communication.algorithm '{}' names no choosable algorithm", algorithm);
}

}  // namespace qtrain
