// The `communication:` config section: which transport, which reduction algorithm, how gradients
// are grouped into buckets, and whether communication overlaps backward.
//
//   communication: {backend: auto, algorithm: auto, bucket_mb: 25, overlap: true, reduce: mean,
//                   mpi_allreduce: ring, piece_mb: 4, timeout_s: 600, hierarchy: auto, intra: fp32,
//                   ranks_per_node: 0}
#pragma once

#include <string>

#include "framework/core/config_node.h"
#include "quant/quantizer.h"

namespace qtrain {

// powersgd is not a choice of communication.algorithm: it is the algorithm of the powersgd method
// (quant/method.h, payload = false), whatever the section says.
// allreduce_compact: the payloads of a method whose bodies sum elementwise (randomk: k values at
// indices every rank shares) are encoded by every rank, their bodies summed with one native
// allreduce, and the summed payload decoded once.
enum class ReduceAlgorithm { allreduce, allgather, reduce_scatter_allgather, powersgd, allreduce_compact };

const char* reduce_algorithm_name(ReduceAlgorithm a);
// The method's default: its descriptor's `algorithm` (quant/method.h), set in the method's own .cpp
// file (quant/methods.def lists the methods).
ReduceAlgorithm default_algorithm(QuantMethod method);

struct CommunicationConfig {
  std::string backend = "auto";    // auto | local | mpi | nccl
  std::string algorithm = "auto";  // auto | allreduce | allgather | reduce_scatter_allgather
  double bucket_mb = 25;           // gradient bytes (fp32) per bucket
  bool overlap = true;             // exchange buckets on a communication thread during backward
  bool mean = true;                // reduce: mean (divide by the world size) or sum
  // How the mpi backend sums buffers of 64 KiB and more: qtrain's pipelined ring
  // (comm/ring_allreduce.h) or the MPI library's MPI_Allreduce (its own algorithm choice).
  std::string mpi_allreduce = "ring";  // ring | library
  // reduce_scatter_allgather splits each stripe into pieces of at most this many MB of fp32 values
  // (whole stripe units), each its own quantized span, and pipelines them: piece k+1 is encoded and
  // sent while the owners already sum, re-encode and allgather piece k. 0: one piece per stripe.
  double piece_mb = 4;
  // The watchdog (comm/watchdog.h): a rank that waits this long in one collective without progress
  // ends the job with a message naming the operation and the peer. 0: wait for ever. The default is
  // PyTorch's NCCL timeout: long enough for rank 0 to write a large checkpoint while the others wait.
  double timeout_s = 600;
  // The two-level exchange for nodes of several ranks (comm/hierarchical_exchange.h): inside a node
  // a sum at `intra` precision, between nodes the configured quantizer on one stripe per local rank,
  // then an allgather inside the node. flat: every rank a peer; two_level: always (an error on a
  // transport without subgroups); auto: two_level when the ranks span several nodes of several ranks.
  std::string hierarchy = "auto";  // auto | flat | two_level
  std::string intra = "fp32";      // fp32 | bf16
  // 0: nodes are the ranks that share memory (MPI_COMM_TYPE_SHARED); N: consecutive groups of N ranks
  // (to try the two levels on one machine).
  int64_t ranks_per_node = 0;

  static CommunicationConfig parse(ConfigNode& section);
  // The algorithm for a tensor quantized with `spec` (errors when the configured algorithm cannot
  // carry the method, e.g. allreduce of qsgd payloads). A method without a payload (powersgd) always
  // gets its own algorithm. `allreduce` of a method whose payload bodies sum elementwise
  // (summable_body: randomk) is allreduce_compact.
  ReduceAlgorithm algorithm_for(const QuantSpec& spec) const;
};

}  // namespace qtrain
