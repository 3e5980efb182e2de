// Internal to the gradient exchange: what every reduction algorithm works on (the communicator, the
// exchange's own context, the tensors with their plans, this step's gradients, buffers reused across
// steps and the statistics), the payload helpers they share, and the algorithms' entry points
// (allreduce.cpp, allgather.cpp, reduce_scatter_allgather.cpp, pipelined_reduce_scatter.cpp, powersgd.cpp,
// allreduce_compact.cpp).
// Every algorithm runs on one thread at a time: the exchange's thread, or finish_step's.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "exchange/algorithms/plan.h"
#include "exchange/gradient_exchange.h"
#include "quant/deferred_checks.h"

namespace qtrain::exchange {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Workspace {
  Workspace(Communicator& comm, Device device, std::unique_ptr<Context> ctx, float scale,
            std::vector<ExchangeTensor> tensors, std::vector<TensorPlan> plans);

  Communicator& comm;
  Device device;
  std::unique_ptr<Context> ctx;  // the exchange's own context (its own CUDA stream)
  // On CUDA: the quantizers' checks, read back once per step (settle_checks) instead of per call.
  std::unique_ptr<DeferredChecks> checks;
  float scale;  // applied to every sum: 1/P for the mean, else 1
  // communication.payload_path host: GPU payloads through host memory even where the communicator has
  // device byte collectives.
  bool host_payloads = false;
  std::vector<ExchangeTensor> tensors;
  std::vector<TensorPlan> plans;
  Tensor grads;  // this step's gradient arena: the input, and the result in place
  ExchangeStats stats;

  // Buffers reused across steps (no allocation in steady state).
  Tensor send_dev, recv_dev, stage_dev;
  std::vector<uint8_t> send_host, recv_host;
  std::vector<size_t> send_offsets, send_capacity, capacity, send_sizes, recv_sizes, recv_offsets;
  std::vector<std::vector<uint8_t>> pipeline_buffers;  // the pipelined reduce-scatter's messages
  Tensor low_rank_p, low_rank_q;                       // powersgd: the P and the Q matrices of a bucket, back to back

  TensorPlan& plan(int t) { return plans[static_cast<size_t>(t)]; }
  const TensorPlan& plan(int t) const { return plans[static_cast<size_t>(t)]; }
  const ExchangeTensor& tensor(int t) const { return tensors[static_cast<size_t>(t)]; }
  float* grad(int t) { return grads.data<float>() + tensor(t).offset; }

  // Ensures the device-side staging buffer `buffer` holds `bytes`.
  uint8_t* device_bytes(Tensor& buffer, size_t bytes);
  // The buffer encoders write to (device memory on CUDA, else the host send buffer), >= capacity.
  uint8_t* send_buffer(size_t capacity);
  // Decodes the payloads rank `from_rank` sent for `ids` (in that order, skipping tensors whose span
  // where(t) is empty: those are never sent), from host bytes, into span where(t) of tensor t: adding
  // (decode_add) when `add`, else overwriting. Every length is validated before a decoder reads. The
  // payloads were encoded by each tensor's owner quantizer when `owner_encoded`, else its first one;
  // on CUDA their headers are then checked on the device (the lengths come from the host's copy).
  void decode_from(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids, bool add,
                   const std::function<Span(int tensor)>& where, bool owner_encoded = false);
  // The same for a block of slots in device memory (a device byte collective's result: each payload
  // in a slot of its encoder's largest size, Quantizer::encode_slot), encoded by each tensor's owner
  // quantizer when `owner_encoded`, else its first one. The slots' sizes come from the plan and the
  // decoders check the headers on the device: nothing crosses to the host.
  void decode_from_device(int from_rank, std::span<const uint8_t> bytes, const std::vector<int>& ids, bool add,
                          const std::function<Span(int tensor)>& where, bool owner_encoded);

  // The end of a step: waits for the exchange's stream, and raises the first error the quantizers'
  // deferred checks found, naming the tensor and the peer.
  void settle_checks();
  // After an error: drops the pending checks (the step is abandoned).
  void discard_checks();
  // What a deferred check's tag names: "tensor fc1.weight, the payload from rank 1".
  std::string describe_check(uint64_t tag) const;

  // Piece k of stripe s of tensor t (empty when t has fewer pieces).
  Span piece(int t, int s, int k) const { return plan(t).as<StripedState>().piece(s, k); }
  // The most bytes the payload of piece k of stripe s of the tensors `ids` can take (the same figure
  // on every rank).
  size_t piece_capacity(const std::vector<int>& ids, int s, int k) const;
  // The slots of piece k of stripe s of the tensors `ids` (the owner's quantizers when `owner`, else
  // the first ones): what encode_piece with `slots` writes, known on every rank in advance.
  size_t piece_bytes(const std::vector<int>& ids, int s, int k, bool owner) const;
  // Encodes piece k of stripe s of every tensor of `ids` back to back into `out` (the owner's
  // re-quantization states when `owner`, else stripe s's first-quantization states); adds each
  // payload's bytes times `copies` to sent[i]. Returns the bytes written. With `slots` (the device
  // collectives), each payload fills a slot of its encoder's largest size (Quantizer::encode_slot:
  // a size that varies, adaptive's, stays in its header on the device), and the slots are what is
  // sent and counted.
  size_t encode_piece(const std::vector<int>& ids, int s, int k, bool owner, uint8_t* out, std::vector<double>& sent,
                      int copies, bool slots = false);
  // Finishes the sum of the decodes of tensor t's values [x, x + n) by its method's combine: times
  // `scale` (sum), or the vote's +-1 (vote: the mean's 1/P does not apply).
  void finish_sum(int t, float* x, int64_t n);
  // finish_sum of this owner's piece k of every tensor.
  void scale_piece(const std::vector<int>& ids, int k);

 private:
  // The most bytes a payload of `len` values of tensor t takes: from its owner's quantizer when
  // `owner`, else its first one (exactly that many for fixed-size methods).
  size_t encoded_bound(int t, int64_t len, bool owner) const;
  // The payload for tensor `t` at `cursor` in host bytes `bytes` from rank `from_rank`: its length,
  // validated against what is left.
  size_t payload_length(std::span<const uint8_t> bytes, size_t cursor, int t, int from_rank) const;
  // The decoding loop of both: `base` (device memory on CUDA) holds `size` bytes, and length(t, cursor)
  // gives tensor t's payload length at `cursor`, validated.
  // `owner_encoded` picks each tensor's decoding quantizer as decode_from_device says; `sender_spec`
  // says that every payload is exactly what that quantizer writes for its span, so that the decoders
  // may check the headers on the device (Quantizer::decode's column).
  void decode_payloads(int from_rank, const uint8_t* base, size_t size, const std::vector<int>& ids, bool add,
                       const std::function<Span(int tensor)>& where,
                       const std::function<size_t(int tensor, size_t cursor)>& length, bool owner_encoded = false,
                       bool sender_spec = false);
  // Tags the deferred checks of the calls that follow with tensor t and the peer.
  void tag_checks(int t, int peer, bool decode);
};

// Seconds and bytes of one bucket's reduce-scatter + allgather, added to the statistics at its end.
struct StripeTally {
  double encode_s = 0, decode_s = 0;
  std::vector<double> sent;  // per tensor of the bucket, in `ids` order
};

// The algorithms, each over the tensors `ids` of one bucket that use it.
void reduce_allreduce(Workspace& w, const std::vector<int>& ids);
void reduce_allgather(Workspace& w, const std::vector<int>& ids);
void reduce_scatter_allgather(Workspace& w, const std::vector<int>& ids);
// PowerSGD (powersgd.cpp): the bucket's compressed tensors' P in one all-reduce, their Q in a second;
// the rest in fp32 (reduce_allreduce).
void reduce_powersgd(Workspace& w, const std::vector<int>& ids);
void reduce_allreduce_compact(Workspace& w, const std::vector<int>& ids);
// All pieces at once on point-to-point messages (CPU tensors, MPI): piece k+1 is encoded and on the
// wire while the owners sum, re-encode and allgather piece k. The same bytes and sums as
// reduce_scatter_allgather's piece-by-piece schedule. `capacity[k * P + s]` is piece_capacity(ids, s, k).
void reduce_scatter_allgather_pipelined(Workspace& w, const std::vector<int>& ids, int pieces,
                                        const std::vector<size_t>& capacity, StripeTally& tally);

}  // namespace qtrain::exchange
