// The gradient exchange's keys of the `communication:` config section: which reduction algorithm, how
// gradients are grouped into buckets, whether communication overlaps backward, and the two levels.
//
//   communication: {backend: auto, algorithm: auto, bucket_mb: 25, overlap: true, reduce: mean,
//                   mpi_allreduce: ring, piece_mb: 4, timeout_s: 600, hierarchy: auto, intra: fp32,
//                   ranks_per_node: 0}
#pragma once

#include <string>

#include "framework/core/config_node.h"
#include "quant/quantizer.h"

namespace qtrain {

// The reduction algorithms of exchange/algorithms/algorithms.def. powersgd is not a choice of
// communication.algorithm: it is the algorithm of the powersgd method (quant/method.h, payload =
// false), whatever the section says. allreduce_compact: the payloads of a method whose bodies sum
// elementwise (randomk: k values at indices every rank shares) are encoded by every rank, their
// bodies summed with one native allreduce, and the summed payload decoded once.
enum class ReduceAlgorithm {
#define QTRAIN_EXCHANGE_ALGORITHM(name, choosable) name,
#include "exchange/algorithms/algorithms.def"
#undef QTRAIN_EXCHANGE_ALGORITHM
};

const char* reduce_algorithm_name(ReduceAlgorithm a);
// The method's default: its descriptor's `algorithm` (quant/method.h), set in the method's own .cpp
// file (quant/methods.def lists the methods).
ReduceAlgorithm default_algorithm(QuantMethod method);

// The exchange's keys of the `communication:` section (the transport's are comm/transport_config.h).
struct ExchangeConfig {
  std::string algorithm = "auto";  // auto or a choosable algorithm of exchange/algorithms/algorithms.def
  double bucket_mb = 25;           // gradient bytes (fp32) per bucket
  bool overlap = true;             // exchange buckets on a communication thread during backward
  bool mean = true;                // reduce: mean (divide by the world size) or sum
  // reduce_scatter_allgather splits each stripe into pieces of at most this many MB of fp32 values
  // (whole stripe units), each its own quantized span, and pipelines them: piece k+1 is encoded and
  // sent while the owners already sum, re-encode and allgather piece k. 0: one piece per stripe.
  double piece_mb = 4;
  // The two-level exchange for nodes of several ranks (exchange/hierarchical_exchange.h): inside a node
  // a sum at `intra` precision, between nodes the configured quantizer on one stripe per local rank,
  // then an allgather inside the node. flat: every rank a peer; two_level: always (an error on a
  // transport without subgroups); auto: two_level when the ranks span several nodes of several ranks.
  std::string hierarchy = "auto";  // auto | flat | two_level
  std::string intra = "fp32";      // fp32 | bf16
  // 0: nodes are the ranks that share memory (MPI_COMM_TYPE_SHARED); N: consecutive groups of N ranks
  // (to try the two levels on one machine).
  int64_t ranks_per_node = 0;
  // Where reduce-scatter + allgather keeps GPU payloads: auto keeps them in device memory where the
  // communicator has device byte collectives (nccl); host sends them through host memory (the path
  // before those collectives), for measuring one path against the other and for checking that both
  // give the same bits (tests/e2e/cuda_emu_train.sh, tools/gpu_check.sh). CPU runs have one path.
  std::string payload_path = "auto";  // auto | host
  // The fp32 tensors (those below quantization.min_numel): native sums them with the transport's
  // allreduce, one collective of their own per bucket; with_quantized sends them as fp32 payloads
  // in the collectives of the bucket's quantized tensors (their algorithm, where all of them share
  // allgather or reduce_scatter_allgather; else natively), so that a bucket takes one set of
  // collectives. The sums are the same fp32 additions in rank order where the transport's allreduce
  // adds in rank order (the DDP hook's does); for transports where every collective costs rounds of
  // latency (python/: ranks that share cores). Flat exchange only.
  std::string small_tensors = "native";  // native | with_quantized

  // Reads its keys of `section`; the caller finishes the section (it holds the transport's keys too).
  static ExchangeConfig parse(ConfigNode& section);
  // The algorithm for a tensor quantized with `spec` (errors when the configured algorithm cannot
  // carry the method, e.g. allreduce of qsgd payloads). A method without a payload (powersgd) always
  // gets its own algorithm. `allreduce` of a method whose payload bodies sum elementwise
  // (summable_body: randomk) is allreduce_compact.
  ReduceAlgorithm algorithm_for(const QuantSpec& spec) const;
};

}  // namespace qtrain
