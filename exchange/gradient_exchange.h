// GradientExchange: turns every replica's gradient arena into the same reduced (mean) gradient,
// quantizing each tensor with its configured method on the way. Tensors are grouped into buckets
// (contiguous groups in the order backward finishes them); a bucket is exchanged as soon as all its
// tensors are ready, on a communication thread, so communication overlaps the rest of backward.
//
// Per tensor, the algorithm is one of (quantizers.md part A):
//   allreduce                 native sum of fp32 / fp16 / bf16 values (small tensors always: fp32),
//                             one collective per format in a bucket
//   allgather                 every rank's payload to every rank, decoded and summed in rank order
//   reduce_scatter_allgather  rank r owns stripe r: all encode every stripe and send it to its owner,
//                             the owner decodes and sums, re-encodes (own residual / fresh random key),
//                             and the owners' payloads are allgathered and decoded by everyone
//   allreduce_compact         every rank encodes; the payload bodies (values at positions every rank
//                             shares: randomk) are summed with one native allreduce and decoded once
// The sums of decodes are finished by the method's combine: times 1/P for the mean, or (signsgd) the
// majority vote's +-1.
// In every case each rank decodes the same bytes in the same order, so replicas stay bit-identical.
// The two quantized algorithms run on the communicator's streaming collectives: the payload for one
// owner leaves while the next is encoded, and each arrival is decoded while later ones are in flight.
// This class chooses between the flat exchange (exchange/flat_exchange.h: buckets and the communication
// thread) and the two-level one (exchange/hierarchical_exchange.h); the algorithms are in exchange/algorithms/
// (internal).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "exchange/exchange_config.h"
#include "framework/core/phase_timers.h"
#include "quant/policy.h"
#include "quant/quantizer.h"

namespace qtrain {

// One gradient tensor's place in the arena (Net's ParamEntry, without the framework dependency).
struct ExchangeTensor {
  std::string name;        // "dense1.weight"
  std::string layer_name;  // "dense1"
  std::string layer_type;  // "dense"
  int64_t offset = 0;      // in the gradient arena, in elements
  int64_t numel = 0;
  int64_t column = 1;  // innermost dimension as stored
  // The leading dimension of a tensor of two or more dimensions (a conv weight [out, in, kh, kw]:
  // out), 0 for vectors and scalars: PowerSGD sees the tensor as a rows x (numel / rows) matrix.
  int64_t rows = 0;
  // The size the quantization policy decides on (min_numel, overrides by size) when this is a part
  // of a larger tensor (a piece in a range of the two-level exchange); 0: numel.
  int64_t decided_numel = 0;
  // The bucket this tensor belongs to, when the caller groups the tensors itself (the two-level
  // exchange's chunks): tensors of one value form one bucket, buckets numbered 0, 1, ... without gaps.
  // -1 everywhere: buckets by communication.bucket_mb.
  int bucket = -1;
};

// PowerSGD's view of one tensor (the powersgd method; exchange/algorithms/powersgd.cpp): the matrix
// rows x cols (the leading dimension by the rest, as stored), the rank of its approximation
// min(rows, cols, spec rank), and whether it is compressed: never a vector or scalar, and a matrix
// only where compression pays, (rows + cols) * rank * min_compression_rate < rows * cols (the rule
// of PyTorch's powerSGD_hook). An uncompressed tensor is all-reduced in fp32.
struct LowRankShape {
  int64_t rows = 0, cols = 0;
  int rank = 0;
  bool compressed = false;
};

// One tensor's traffic per step in the cost model's terms (tools/qtrain/predict_model.h), as its
// algorithm sends it: the collective pattern that carries it, the bytes each rank puts into it, and
// the gradient values those bytes stand for (0 where the model adds no per-value cost: only summed).
struct WireCost {
  enum class Pattern { allreduce, allgather, reduce_scatter_allgather };
  Pattern pattern = Pattern::allreduce;
  double bytes = 0;
  double values = 0;
  bool sixteen_bit = false;  // allreduce of fp16/bf16 values

  // The bytes one rank sends for it among `world_size` ranks, as the exchange counts them (the user
  // guide, "What is measured"): a ring allreduce sends 2 (P - 1) / P of the data, an allgather the
  // payload to P - 1 ranks, reduce-scatter + allgather P - 1 stripes to their owners and its own stripe
  // to P - 1 ranks (each 1/P of the payload).
  double sent_per_rank(int world_size) const {
    const double P = world_size;
    switch (pattern) {
      case Pattern::allgather: return bytes * (P - 1);
      case Pattern::allreduce:
      case Pattern::reduce_scatter_allgather: break;
    }
    return bytes * 2 * (P - 1) / P;
  }
};

struct ExchangeStats {
  PhaseTimers phases;     // encode, communicate, decode (seconds on the exchange's thread)
  double bytes_sent = 0;  // bytes this rank sent (see bytes_sent_per_tensor)
  std::vector<double> bytes_sent_per_tensor;
  int64_t steps = 0;
};

// The roles of the random streams of an exchange: every quantization state draws from the stream
// (seed, step, rank, state_id(tensor, role, index)), so every role must be distinct. The numbers are
// part of the format: they key the draws of runs whose checkpoints resume bit for bit.
enum class StreamRole : int {
  whole = 0,         // allgather and allreduce_compact: the tensor's one state (index 0)
  stripe = 1,        // reduce-scatter + allgather: piece 0 of stripe `index`, the first quantization
  owner = 2,         // reduce-scatter + allgather: piece 0 of the owner's re-quantization (index 0)
  stripe_piece = 3,  // piece k >= 1 of stripe s: index k * P + s
  owner_piece = 4,   // piece k >= 1 of the owner's re-quantization: index k
  low_rank_q = 5,    // PowerSGD's draws of Q, the same on every rank (index 0)
};

// What a GradientExchange runs: one flat exchange among all ranks, or two levels (inside the nodes,
// then between them). The facade forwards every call to it.
class ExchangeImpl {
 public:
  virtual ~ExchangeImpl() = default;
  virtual void begin_step(Tensor grads, uint64_t step) = 0;
  virtual void tensor_ready(Context& compute, int t) = 0;
  virtual void finish_step() = 0;
  virtual void wait_buckets(int n, Context& consumer) = 0;
  virtual void exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids) = 0;
  virtual ExchangeStats take_stats() = 0;
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;
  virtual const std::vector<ExchangeTensor>& tensors() const = 0;
  virtual ReduceAlgorithm algorithm(int t) const = 0;
  virtual double fraction_quantized() const = 0;
  virtual bool two_levels() const = 0;
  virtual int num_buckets() const = 0;
  virtual std::string describe() const = 0;
};

class GradientExchange {
 public:
  // Collective (it may detect the nodes, communication.hierarchy).
  GradientExchange(Communicator& comm, Device device, uint64_t seed, const ExchangeConfig& config,
                   const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors);
  // Stops the thread; never runs a collective (a destructor must not block on other ranks).
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // Starts a step over `grads` (the flat gradient arena; it receives the result in place).
  void begin_step(Tensor grads, uint64_t step);
  // Tensor t's gradient is final (call from backward, in any order). `compute` is the context that
  // produced it (the exchange's stream is ordered after its work so far by an event; the host does
  // not wait).
  void tensor_ready(Context& compute, int t);
  // Waits until every bucket is exchanged; rethrows the exchange's error, if any.
  void finish_step();
  // With overlap: waits until the first `n` buckets to become ready this step are exchanged (the
  // communication thread takes them in that order), and orders `consumer`'s stream after their
  // device work (events: the exchange's kernels may still run when the host learns a bucket is done);
  // rethrows the exchange's error, if any.
  void wait_buckets(int n, Context& consumer);
  // begin_step + every tensor ready + finish_step.
  void exchange(Context& compute, Tensor grads, uint64_t step);
  // For callers that group the tensors into buckets themselves, step by step (PyTorch's DDP reducer,
  // whose buckets change after its first iteration: python/): exchanges the tensors `ids` of `grads`
  // now, on this thread, as one bucket (in tensor order, whatever the order of `ids`), and returns
  // when their results are in place (on CUDA: waited for). Between steps only (no begin_step
  // pending). Every tensor has its own payloads, random streams and states, so the grouping changes
  // no quantized tensor's bits; a native allreduce (fp32 tensors, PowerSGD's factors) may sum a
  // bucket of other tensors in another order. Flat exchange only.
  void exchange_now(Tensor grads, uint64_t step, const std::vector<int>& ids);

  ExchangeStats take_stats();  // and reset them
  // Error-feedback residuals by name ("<tensor>/residual", "<tensor>/stripe<s>/residual",
  // "<tensor>/owner/residual", and for pieces k >= 1 "<tensor>/stripe<s>.piece<k>/residual",
  // "<tensor>/owner.piece<k>/residual"), and PowerSGD's state of each compressed tensor:
  // "<tensor>/powersgd/q" (the warm-start Q, stored transposed: rank x cols, the same on every rank)
  // and "<tensor>/powersgd/residual" (this rank's error feedback, numel values). Live buffers:
  // copying into them restores the state (before the first step).
  std::vector<std::pair<std::string, Tensor>> state();

  const std::vector<ExchangeTensor>& tensors() const { return impl_->tensors(); }
  ReduceAlgorithm algorithm(int t) const { return impl_->algorithm(t); }
  double fraction_quantized() const { return impl_->fraction_quantized(); }  // of all values, those not sent as fp32
  bool two_levels() const { return impl_->two_levels(); }                    // communication.hierarchy chose two levels
  int num_buckets() const { return impl_->num_buckets(); }
  // One line per tensor: method, algorithm, bucket.
  std::string describe() const { return impl_->describe(); }

  // The conventions every rank (and the single-process simulation in the tests) must share:
  // the random-stream identity of a quantization state (StreamRole), the unit of stripe boundaries
  // (whole columns for the methods that quantize per column), and the P + 1 stripe boundaries.
  static uint64_t state_id(int tensor, StreamRole role, int index);
  static int64_t stripe_unit(const QuantSpec& spec, int64_t column);
  static std::vector<int64_t> stripe_bounds(int64_t numel, int64_t unit, int world_size);
  // Pieces of reduce-scatter + allgather (communication.piece_mb): every stripe of a tensor is cut
  // into the same number of pieces, the fewest that keep each within piece_values (at least one; all
  // when piece_values is 0), in whole units and balanced. Piece 0 keeps the stripe's states (roles
  // stripe and owner); piece k >= 1 has roles stripe_piece (index k * P + s) and owner_piece (index k).
  static int piece_count(const std::vector<int64_t>& stripe_begin, int64_t unit, int64_t piece_values);
  static std::vector<int64_t> piece_bounds(int64_t begin, int64_t end, int64_t unit, int pieces);
  static uint64_t piece_state_id(int tensor, bool owner, int stripe, int piece, int world_size);
  // The column argument given to encode for a span of `length` values of a tensor with `column`.
  static int64_t encode_column(const QuantSpec& spec, int64_t length, int64_t column);
  // The traffic of tensor `x` quantized with `spec` and reduced with `algorithm`, per step, as that
  // algorithm counts it: what `qtrain predict` and run records model.
  static WireCost wire_cost(const QuantSpec& spec, const ExchangeTensor& x, ReduceAlgorithm algorithm);
  // Buckets as the exchange makes them without given ones: filled from the last tensor to the first
  // (the order backward finishes them) up to bucket_mb of fp32 values; the bucket of every tensor.
  static std::vector<int> bucket_of(const std::vector<ExchangeTensor>& tensors, double bucket_mb);
  // PowerSGD's matrix of a tensor with leading dimension `rows` (0: a vector) and `numel` values.
  static LowRankShape low_rank_shape(const QuantSpec& spec, int64_t rows, int64_t numel);
  // The identity of PowerSGD's random draws of Q for tensor t: derive_philox_key(seed, step, every_rank,
  // state_id(t, StreamRole::low_rank_q, 0)), the same stream on every rank.
  static constexpr uint64_t kEveryRank = ~uint64_t{0};

 private:
  Device device_;
  // The flat exchange (exchange/flat_exchange.h) or the two-level one (exchange/hierarchical_exchange.h).
  std::unique_ptr<ExchangeImpl> impl_;
};

}  // namespace qtrain
