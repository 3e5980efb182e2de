// Parsing of the `communication:` section.
#include "comm/exchange_config.h"

namespace qtrain {

const char* reduce_algorithm_name(ReduceAlgorithm a) {
  switch (a) {
    case ReduceAlgorithm::allreduce: return "allreduce";
    case ReduceAlgorithm::allgather: return "allgather";
    case ReduceAlgorithm::reduce_scatter_allgather: return "reduce_scatter_allgather";
  }
  return "?";
}

namespace {
bool is_cast(QuantMethod m) { return m == QuantMethod::fp32 || m == QuantMethod::fp16 || m == QuantMethod::bf16; }
}  // namespace

ReduceAlgorithm default_algorithm(QuantMethod method) {
  switch (method) {
    case QuantMethod::fp32:
    case QuantMethod::fp16:
    case QuantMethod::bf16: return ReduceAlgorithm::allreduce;
    case QuantMethod::dettmers8:
    case QuantMethod::topk: return ReduceAlgorithm::allgather;
    case QuantMethod::onebit:
    case QuantMethod::qsgd:
    case QuantMethod::adaptive: return ReduceAlgorithm::reduce_scatter_allgather;
  }
  return ReduceAlgorithm::allgather;
}

CommunicationConfig CommunicationConfig::parse(ConfigNode& section) {
  CommunicationConfig c;
  c.backend = section.get_choice("backend", c.backend, {"auto", "local", "mpi", "nccl"});
  c.algorithm = section.get_choice("algorithm", c.algorithm, {"auto", "allreduce", "allgather", "reduce_scatter_allgather"});
  c.bucket_mb = section.get_double("bucket_mb", c.bucket_mb, 0.0, 1 << 20, /*min_exclusive=*/true);
  c.overlap = section.get<bool>("overlap", c.overlap);
  c.mean = section.get_choice("reduce", "mean", {"mean", "sum"}) == "mean";
  c.mpi_allreduce = section.get_choice("mpi_allreduce", c.mpi_allreduce, {"ring", "library"});
  c.piece_mb = section.get_double("piece_mb", c.piece_mb, 0.0, 1 << 20);
  section.finish();
  return c;
}

ReduceAlgorithm CommunicationConfig::algorithm_for(const QuantSpec& spec) const {
  if (algorithm == "auto") return default_algorithm(spec.method);
  if (algorithm == "allreduce") {
    // Tensors below min_numel are fp32 and always reduce natively; quantized payloads cannot be
    // summed by MPI or NCCL.
    if (!is_cast(spec.method))
      input_error("communication.algorithm: allreduce cannot carry {} payloads (only fp32, fp16 and bf16 sum "
                  "natively); use allgather or reduce_scatter_allgather",
                  quant_method_name(spec.method));
    return ReduceAlgorithm::allreduce;
  }
  // Small fp32 tensors bypass quantization and take the native path under every algorithm.
  if (spec.method == QuantMethod::fp32) return ReduceAlgorithm::allreduce;
  return algorithm == "allgather" ? ReduceAlgorithm::allgather : ReduceAlgorithm::reduce_scatter_allgather;
}

}  // namespace qtrain
