// HierarchicalExchange: the gradient exchange for nodes of several ranks (communication.hierarchy),
// as ZeRO++ and SDP4Bit do it. With L ranks on each of N nodes, one step is:
//   1. every tensor is cut into L stripes (whole columns for the per-column methods); a
//      reduce-scatter over the node's communicator (fp32, or bf16 with communication.intra: bf16)
//      leaves local rank l with the node's sum of its stripes, l's stripe of every tensor;
//   2. local rank l exchanges its stripes with local rank l of every other node, through a flat
//      GradientExchange over that cross-node group: the configured quantizer, algorithm, buckets
//      and error feedback, summing the N node sums;
//   3. inside each node the stripes are allgathered, and the result divided by N L (reduce: mean).
// Per rank, 1/L of each tensor crosses the slow links, quantized, and every node's L links (or
// NIC queues) are busy at once. Every rank ends with the same bits: stripe l is decided by the
// cross-node exchange, which gives its N ranks identical bits, and each node copies it from its
// local rank l. Error-feedback state is the cross-node exchange's (names "inter/<tensor>/...").
// Ranks on the CPU or on GPUs, over a transport with subgroups (MPI, or NCCL communicators split
// over MPI). On GPUs over NCCL every step stays in device memory (ncclReduceScatter, the cross-node
// exchange, ncclAllGather of blocks padded to the largest); MpiComm stages GPU buffers through host
// memory, as it does for every collective.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/gradient_exchange.h"

namespace qtrain {

// Where this rank sits: its node (0..nodes-1, in order of the nodes' lowest ranks) and local rank.
struct NodeLayout {
  int node = 0, nodes = 1, local_rank = 0, ranks_per_node = 1;
};

// Collective: nodes are the ranks that share memory, or consecutive groups of `ranks_per_node`
// ranks when it is > 0. Every node must hold the same number of ranks (an InputError otherwise).
NodeLayout node_layout(Communicator& world, int64_t ranks_per_node);

// Whether `config` asks for the two levels on this world (collective: it may detect the nodes). The
// two levels sum the gradients inside a node before any method sees them, so they carry only the
// methods whose result is a sum of payload decodes: not the majority vote (signsgd) and not
// powersgd's own algorithm; with those, auto stays flat and two_level is an error naming the method.
bool wants_two_levels(Communicator& world, Device device, const CommunicationConfig& config,
                      const QuantizationConfig& quantization, const std::vector<ExchangeTensor>& tensors,
                      NodeLayout& layout);

class HierarchicalExchange {
 public:
  HierarchicalExchange(Communicator& world, Device device, uint64_t seed, const CommunicationConfig& config,
                       const QuantizationConfig& quantization, const std::vector<ExchangeTensor>& tensors,
                       const NodeLayout& layout);
  ~HierarchicalExchange();

  // Sums (and with reduce: mean, averages) `grads` over every rank, in place.
  void exchange(Tensor& grads, uint64_t step);

  // Error-feedback state of the cross-node exchange, names prefixed "inter/".
  std::vector<std::pair<std::string, Tensor>> state();
  // Phases of the three levels; bytes are those this rank sent to other nodes (the node-local sums
  // go over shared memory and are not counted).
  ExchangeStats take_stats();
  double fraction_quantized() const { return inter_->fraction_quantized(); }
  int num_buckets() const { return inter_->num_buckets(); }
  // Tensor t's algorithm between nodes (allreduce for a tensor too small to have a stripe here).
  ReduceAlgorithm algorithm(int t) const {
    const int i = inter_index_[static_cast<size_t>(t)];
    return i >= 0 ? inter_->algorithm(i) : ReduceAlgorithm::allreduce;
  }
  std::string describe() const;
  const NodeLayout& layout() const { return layout_; }

 private:
  // Tensor t's stripe for local rank l: [begin, begin + length) of the tensor's values.
  struct Stripe {
    int64_t begin = 0, length = 0;
  };

  // The node's sum of this rank's stripes of `grads`, into mine_ (step 1).
  void sum_own_stripes_in_node(const Tensor& grads);
  void pack_stripes(int l, const float* g, float* out);
  void unpack_stripes(int l, const float* in, float* g);
  void gather_stripes_in_node(const float* own, float* g);

  Device device_;
  CommunicationConfig config_;
  NodeLayout layout_;
  int world_size_ = 1;
  std::vector<ExchangeTensor> tensors_;
  std::vector<std::vector<Stripe>> stripes_;  // [tensor][local rank]
  std::vector<int> inter_index_;              // tensor -> index in the cross-node exchange (-1: empty stripe)
  std::unique_ptr<Communicator> node_, cross_;
  std::unique_ptr<GradientExchange> inter_;
  std::unique_ptr<Context> ctx_;
  Tensor mine_;                       // this rank's stripes, back to back (the cross-node exchange's arena)
  std::vector<int64_t> node_counts_;  // values of local rank l's stripes, all tensors
  Tensor packed_;                     // the gradients in stripe order: local rank 0's stripes, then 1's, ...
  Tensor half_;                       // intra: bf16, in stripe order
  std::vector<uint8_t> gathered_;     // the node's allgather on the CPU
  Tensor gathered_device_;            // on a GPU: L receive slots and the send slot, of the largest block
  std::vector<size_t> sizes_, offsets_;
  ExchangeStats stats_;
};

}  // namespace qtrain
