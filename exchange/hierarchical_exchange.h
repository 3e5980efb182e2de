// HierarchicalExchange: the gradient exchange for nodes of several ranks (communication.hierarchy),
// as ZeRO++ and SDP4Bit do it. With L ranks on each of N nodes, one step is:
//   1. the gradient arena is cut into L contiguous ranges of about equal size (at whole columns of
//      the tensor a cut falls in, for the per-column methods); a reduce-scatter over the node's
//      communicator (fp32, or bf16 with communication.intra: bf16), in place in the arena, leaves
//      local rank l with the node's sum of range l;
//   2. local rank l exchanges range l with local rank l of every other node, through a flat
//      GradientExchange over that cross-node group whose tensors are the pieces of the model's
//      tensors inside the range: the configured quantizer (decided on the whole tensor's size),
//      algorithm, buckets and error feedback, summing the N node sums in place;
//   3. inside each node the ranges are allgathered in place, and the result divided by N L (reduce:
//      mean).
// On the CPU the arena is first cut into chunks of about communication.piece_mb, each cut into L
// ranges, and the steps run as a pipeline: chunk c's node sum while the cross-node exchange (on its
// own thread) works on chunk c - 1, then chunk c - 1's gather. On a GPU there is one chunk.
// Per rank, 1/L of the gradients crosses the slow links, quantized, and every node's L links (or
// NIC queues) are busy at once. Ranges rather than a stripe of every tensor keep the arena in
// place: the node's collectives and the cross-node exchange work on it directly, with no packing
// or unpacking (on a CPU those copies cost as much as the sums). Every rank ends with the same
// bits: range l is decided by the cross-node exchange, which gives its N ranks identical bits, and
// each node copies it from its local rank l. Error-feedback state is the cross-node exchange's
// (names "inter/<tensor>/..."; its shape depends on the ranges, so a checkpoint resumes with the
// same ranks per node). Ranks on the CPU or on GPUs, over a transport with subgroups (MPI, or NCCL
// communicators split over MPI). On GPUs over NCCL every step stays in device memory.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "exchange/gradient_exchange.h"

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
bool wants_two_levels(Communicator& world, Device device, const ExchangeConfig& config,
                      const QuantizationConfig& quantization, const std::vector<ExchangeTensor>& tensors,
                      NodeLayout& layout);

class HierarchicalExchange final : public ExchangeImpl {
 public:
  HierarchicalExchange(Communicator& world, Device device, uint64_t seed, const ExchangeConfig& config,
                       const QuantizationConfig& quantization, const std::vector<ExchangeTensor>& tensors,
                       const NodeLayout& layout);
  ~HierarchicalExchange() override;

  // One step sums (and with reduce: mean, averages) the gradient arena over every rank, in place:
  // begin_step, every tensor_ready, then finish_step, as GradientExchange's. With several chunks
  // and communication.overlap, a chunk thread starts each chunk as soon as backward has finished its
  // tensors (the last chunk first); otherwise all of it runs in finish_step.
  void begin_step(Tensor grads, uint64_t step) override;
  void tensor_ready(Context& compute, int t) override;
  void finish_step() override;
  // Not offered: a bucket of the cross-node exchange is not a bucket of the model's tensors.
  void wait_buckets(int n, Context& consumer) override;
  void exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids) override;

  // Error-feedback state of the cross-node exchange, names prefixed "inter/".
  std::vector<std::pair<std::string, Tensor>> state() override;
  // Phases of the three levels (communicate: the node's collectives on the calling thread, which
  // overlap the cross-node exchange's phases when there are several chunks); bytes are those this
  // rank sent to other nodes (the node-local sums go over shared memory and are not counted).
  ExchangeStats take_stats() override;
  const std::vector<ExchangeTensor>& tensors() const override { return tensors_; }
  double fraction_quantized() const override { return fraction_quantized_; }
  bool two_levels() const override { return true; }
  int num_buckets() const override { return inter_->num_buckets(); }
  // Tensor t's algorithm between nodes (as its method decides it on the whole tensor, also where
  // this rank's range holds none of it).
  ReduceAlgorithm algorithm(int t) const override { return algorithms_[static_cast<size_t>(t)]; }
  std::string describe() const override;
  const NodeLayout& layout() const { return layout_; }

 private:
  static constexpr int64_t kMaxChunks = 256;
  // Where range l of chunk c begins in the arena (range L of chunk c is chunk c + 1's first).
  int64_t range_begin(int c, int l) const {
    return cuts_[static_cast<size_t>(c) * static_cast<size_t>(layout_.ranks_per_node) + static_cast<size_t>(l)];
  }
  int64_t node_values(int l) const;  // the values of local rank l's ranges
  void sum_in_node(float* g, int c);
  void gather_in_node(float* g, int c);
  std::exception_ptr run_steps(bool wait_ready);
  void run_chunks(bool wait_ready);
  void run_thread();

  Device device_;
  ExchangeConfig config_;
  NodeLayout layout_;
  int world_size_ = 1;
  std::vector<ExchangeTensor> tensors_;
  std::vector<ReduceAlgorithm> algorithms_;
  double fraction_quantized_ = 0;  // of all values, as every tensor's method is decided
  int chunks_ = 1;
  std::vector<int64_t> cuts_;                       // chunk c's range l: [range_begin(c, l), range_begin(c, l + 1))
  std::vector<std::vector<int64_t>> chunk_counts_;  // chunk -> the values of its L ranges
  std::vector<std::vector<int>> chunk_pieces_;      // chunk -> this rank's pieces (cross-node exchange tensors)
  std::vector<int> buckets_through_;  // i -> the cross-node exchange's buckets of the first i + 1 chunks taken
  std::vector<int> piece_tensor_;     // piece -> its tensor
  std::unique_ptr<Communicator> node_, cross_;
  std::unique_ptr<GradientExchange> inter_;
  std::unique_ptr<Context> ctx_;
  Tensor half_;  // intra: bf16, the whole arena
  ExchangeStats stats_;

  // The step in flight, and the chunk thread that overlaps it with backward.
  std::vector<std::vector<int>> chunks_of_tensor_;  // tensor -> the chunks it overlaps
  std::vector<int> chunk_tensors_;                  // chunk -> the tensors it overlaps
  std::vector<int> chunk_pending_;                  // chunk -> its tensors not yet ready this step
  // chunk -> the compute stream's position when its last tensor became ready: the exchange's stream
  // waits for it before reading the chunk (the host does not).
  std::vector<std::unique_ptr<StreamEvent>> chunk_ready_;
  StreamEvent backward_done_;  // without the chunk thread: compute_'s position at finish_step
  Tensor grads_;
  uint64_t step_ = 0;
  Context* compute_ = nullptr;  // of the last tensor_ready, ordered before the exchange reads
  bool step_open_ = false, step_done_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace qtrain
