// Parsing of the `communication:` section.
#include "comm/exchange_config.h"

#include <fmt/ranges.h>

#include "quant/method.h"

namespace qtrain {

const char* reduce_algorithm_name(ReduceAlgorithm a) {
  switch (a) {
#define QTRAIN_EXCHANGE_ALGORITHM(name) \
  case ReduceAlgorithm::name:           \
    return #name;
#include "comm/exchange/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  }
  return "?";
}

ReduceAlgorithm default_algorithm(QuantMethod method) {
  const std::string& name = method_info(method).algorithm;
#define QTRAIN_EXCHANGE_ALGORITHM(id) \
  if (name == #id) return ReduceAlgorithm::id;
#include "comm/exchange/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
  QT_CHECK(false, "quantization method {}: unknown default algorithm '{}' (comm/exchange/algorithms.def)",
           quant_method_name(method), name);
  return ReduceAlgorithm::allreduce;
}

CommunicationConfig CommunicationConfig::parse(ConfigNode& section) {
  CommunicationConfig c;
  c.backend = section.get_choice("backend", c.backend, {"auto", "local", "mpi", "nccl"});
  c.algorithm =
      section.get_choice("algorithm", c.algorithm, {"auto", "allreduce", "allgather", "reduce_scatter_allgather"});
  c.bucket_mb = section.get_double("bucket_mb", c.bucket_mb, 0.0, 1 << 20, /*min_exclusive=*/true);
  c.overlap = section.get<bool>("overlap", c.overlap);
  c.mean = section.get_choice("reduce", "mean", {"mean", "sum"}) == "mean";
  c.mpi_allreduce = section.get_choice("mpi_allreduce", c.mpi_allreduce, {"ring", "library"});
  c.piece_mb = section.get_double("piece_mb", c.piece_mb, 0.0, 1 << 20);
  c.timeout_s = section.get_double("timeout_s", c.timeout_s, 0.0, 7 * 86400.0);
  c.hierarchy = section.get_choice("hierarchy", c.hierarchy, {"auto", "flat", "two_level"});
  c.intra = section.get_choice("intra", c.intra, {"fp32", "bf16"});
  c.ranks_per_node = section.get_int("ranks_per_node", c.ranks_per_node, 0, 1 << 20);
  section.finish();
  return c;
}

ReduceAlgorithm CommunicationConfig::algorithm_for(const QuantSpec& spec) const {
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
  return algorithm == "allgather" ? ReduceAlgorithm::allgather : ReduceAlgorithm::reduce_scatter_allgather;
}

}  // namespace qtrain
