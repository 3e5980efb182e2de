// GradientExchange: turns every replica's gradient arena into the same reduced (mean) gradient,
// quantizing each tensor with its configured method on the way. Tensors are grouped into buckets
// (contiguous groups in the order backward finishes them); a bucket is exchanged as soon as all its
// tensors are ready, on a communication thread, so communication overlaps the rest of backward.
//
// Per tensor, the algorithm is one of (quantizers.md part A):
//   allreduce                 native sum of fp32 / fp16 / bf16 values (small tensors always: fp32)
//   allgather                 every rank's payload to every rank, decoded and summed in rank order
//   reduce_scatter_allgather  rank r owns stripe r: all encode every stripe and send it to its owner,
//                             the owner decodes and sums, re-encodes (own residual / fresh random key),
//                             and the owners' payloads are allgathered and decoded by everyone
// In every case each rank decodes the same bytes in the same order, so replicas stay bit-identical.
// The two quantized algorithms run on the communicator's streaming collectives: the payload for one
// owner leaves while the next is encoded, and each arrival is decoded while later ones are in flight.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/exchange_config.h"
#include "framework/phase_timers.h"
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
  int64_t column = 1;      // innermost dimension as stored
};

struct ExchangeStats {
  PhaseTimers phases;            // encode, communicate, decode (seconds on the exchange's thread)
  double wait_s = 0;             // time the training thread waited for the exchange after backward
  double bytes_sent = 0;         // bytes this rank sent (see bytes_sent_per_tensor)
  std::vector<double> bytes_sent_per_tensor;
  int64_t steps = 0;
  // Communication time not covered by the wait: the part hidden under backward.
  double hidden_s() const;
};

class GradientExchange {
 public:
  GradientExchange(Communicator& comm, Device device, uint64_t seed, const CommunicationConfig& config,
                   const QuantizationConfig& quantization, std::vector<ExchangeTensor> tensors);
  // Stops the thread; never runs a collective (a destructor must not block on other ranks).
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // Starts a step over `grads` (the flat gradient arena; it receives the result in place).
  void begin_step(Tensor grads, uint64_t step);
  // Tensor t's gradient is final (call from backward, in any order). `compute` is the context that
  // produced it (a CUDA context is synchronized before its gradient is read).
  void tensor_ready(Context& compute, int t);
  // Waits until every bucket is exchanged; rethrows the exchange's error, if any.
  void finish_step();
  // begin_step + every tensor ready + finish_step.
  void exchange(Context& compute, Tensor grads, uint64_t step);

  ExchangeStats take_stats();  // and reset them
  // Error-feedback residuals by name ("<tensor>/residual", "<tensor>/stripe<s>/residual",
  // "<tensor>/owner/residual", and for pieces k >= 1 "<tensor>/stripe<s>.piece<k>/residual",
  // "<tensor>/owner.piece<k>/residual"): live buffers; copying into them restores the state.
  std::vector<std::pair<std::string, Tensor>> state();

  const std::vector<ExchangeTensor>& tensors() const { return tensors_; }
  const QuantSpec& spec(int t) const { return plans_[static_cast<size_t>(t)].spec; }
  ReduceAlgorithm algorithm(int t) const { return plans_[static_cast<size_t>(t)].algorithm; }
  double fraction_quantized() const;  // of all gradient values, those not sent as fp32
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // One line per tensor: method, algorithm, bucket.
  std::string describe() const;

  // The conventions every rank (and the single-process simulation in the tests) must share:
  // the random-stream identity of a quantization state (role 0: allgather, 1: stripe s of the first
  // quantization, 2: the owner's re-quantization), the unit of stripe boundaries (whole columns for
  // the methods that quantize per column), and the P + 1 stripe boundaries.
  static uint64_t state_id(int tensor, int role, int stripe);
  static int64_t stripe_unit(const QuantSpec& spec, int64_t column);
  static std::vector<int64_t> stripe_bounds(int64_t numel, int64_t unit, int world_size);
  // Pieces of reduce-scatter + allgather (communication.piece_mb): every stripe of a tensor is cut
  // into the same number of pieces, the fewest that keep each within piece_values (at least one; all
  // when piece_values is 0), in whole units and balanced. Piece 0 keeps the stripe's states (the
  // state ids above); piece k >= 1 of stripe s has state id (tensor, 3, k * P + s) for the first
  // quantization and (tensor, 4, k) for the owner's.
  static int piece_count(const std::vector<int64_t>& stripe_begin, int64_t unit, int64_t piece_values);
  static std::vector<int64_t> piece_bounds(int64_t begin, int64_t end, int64_t unit, int pieces);
  static uint64_t piece_state_id(int tensor, bool owner, int stripe, int piece, int world_size);
  // The column argument given to encode for a span of `length` values of a tensor with `column`.
  static int64_t encode_column(const QuantSpec& spec, int64_t length, int64_t column);

 private:
  struct Plan {
    QuantSpec spec;
    ReduceAlgorithm algorithm = ReduceAlgorithm::allreduce;
    std::unique_ptr<Quantizer> quantizer;
    int64_t unit = 1;                      // stripe boundaries are multiples of this (the column for column methods)
    std::vector<int64_t> stripe_begin;     // P + 1 boundaries (reduce_scatter_allgather)
    std::vector<std::vector<int64_t>> piece_begin;  // per stripe: pieces + 1 boundaries
    QuantState whole;                      // allgather
    std::vector<std::vector<QuantState>> stripes;  // reduce_scatter_allgather, first quantization, [stripe][piece]
    std::vector<QuantState> owner;         // reduce_scatter_allgather, re-quantization of the own stripe, [piece]
    int pieces() const { return static_cast<int>(owner.size()); }
    int64_t piece_at(int s, int k) const { return piece_begin[static_cast<size_t>(s)][static_cast<size_t>(k)]; }
    int64_t piece_len(int s, int k) const { return piece_at(s, k + 1) - piece_at(s, k); }
    int bucket = 0;
  };
  struct Bucket {
    std::vector<int> tensors;
    int pending = 0;
  };

  void run_thread();
  void process_bucket(int b);
  void reduce_native(const std::vector<int>& ids);
  void reduce_allgather(const std::vector<int>& ids);
  void reduce_scatter_allgather(const std::vector<int>& ids);
  // One piece of every tensor of `ids` through both phases on the streaming collectives.
  void reduce_scatter_allgather_piece(const std::vector<int>& ids, int piece, double& encode_s, double& decode_s,
                                      std::vector<double>& sent);
  // All pieces at once on point-to-point messages (CPU tensors, MPI): piece k+1 is encoded and on
  // the wire while the owners sum, re-encode and allgather piece k. The same bytes and sums as
  // reduce_scatter_allgather_piece for every piece.
  // `capacity[k * P + s]` is piece_capacity(ids, s, k).
  void reduce_scatter_allgather_pipelined(const std::vector<int>& ids, int pieces, const std::vector<size_t>& capacity,
                                          double& encode_s, double& decode_s, std::vector<double>& sent);
  float* grad(int t) { return grads_.data<float>() + tensors_[static_cast<size_t>(t)].offset; }
  int64_t column_for(const Plan& p, int64_t length, int64_t column) const;
  // The payload for tensor `t` at `cursor` in host bytes `bytes` from rank `from_rank`: its length,
  // validated against what is left.
  size_t payload_length(std::span<const uint8_t> bytes, size_t cursor, int t, int from_rank) const;
  struct Span {
    int64_t begin, length;  // elements of a tensor
  };
  // Decodes the payloads rank `from_rank` sent for `ids` (in that order, skipping tensors whose span
  // where(t) is empty: those are never sent), from host bytes, into span where(t) of tensor t: adding
  // (decode_add) when `add`, else overwriting. Every length is validated before a decoder reads.
  void decode_from(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids, bool add,
                   const std::function<Span(int tensor)>& where);
  // The buffer encoders write to (device memory on CUDA, else the host send buffer), >= capacity.
  uint8_t* send_buffer(size_t capacity);
  // Ensures the device-side staging buffer holds `bytes`.
  uint8_t* device_bytes(Tensor& buffer, size_t bytes);
  // Piece k of stripe s of tensor t (empty when t has fewer pieces), and the most bytes the
  // payload of piece k of stripe s of the tensors `ids` can take (the same figure on every rank).
  Span piece(int t, int s, int k) const;
  size_t piece_capacity(const std::vector<int>& ids, int s, int k) const;
  // Encodes piece k of stripe s of every tensor of `ids` back to back into `out` (the owner's
  // re-quantization states when `owner`, else stripe s's first-quantization states); adds each
  // payload's bytes times `copies` to sent[i]. Returns the bytes written.
  size_t encode_piece(const std::vector<int>& ids, int s, int k, bool owner, uint8_t* out, std::vector<double>* sent,
                      int copies);
  // Multiplies this owner's piece k of every tensor by the mean's 1/P.
  void scale_piece(const std::vector<int>& ids, int k);

  Communicator& comm_;
  Device device_;
  std::unique_ptr<Context> ctx_;  // the exchange's own context (its own CUDA stream)
  CommunicationConfig config_;
  std::vector<ExchangeTensor> tensors_;
  std::vector<Plan> plans_;
  std::vector<Bucket> buckets_;
  Tensor grads_;
  // Without overlap: the context of the tensor_ready calls, synchronized once in finish_step before
  // the exchange's own stream reads the gradients (null until the step's first tensor_ready).
  Context* compute_ = nullptr;
  uint64_t step_ = 0;
  float scale_ = 1.0f;

  // Buffers reused across steps (no allocation in steady state).
  Tensor send_dev_, recv_dev_, stage_dev_;
  std::vector<uint8_t> send_host_, recv_host_;
  std::vector<size_t> send_offsets_, capacity_;
  std::vector<std::vector<uint8_t>> pipeline_buffers_;  // reduce_scatter_allgather_pipelined's messages

  ExchangeStats stats_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<int> queue_;
  int done_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace qtrain
