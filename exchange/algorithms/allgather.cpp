// Allgather: every rank encodes each tensor whole, every rank's payload goes to every rank, and each
// rank decodes and sums them all in rank order, then finishes the sum by the method's combine (the
// mean's scaling, or signsgd's vote). On GPUs over NCCL the payloads stay in device memory (as
// reduce-scatter + allgather's); elsewhere they travel through host memory.
#include <algorithm>

#include "comm/buffer_ops.h"
#include "comm/transport_common.h"
#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/workspace.h"

namespace qtrain::exchange {

namespace {

// Tensor t whole: what every rank's payload holds for it.
Span whole(const Workspace& w, int t) { return Span{0, w.tensor(t).numel}; }

// The host path: the payloads travel through host memory (MPI, or NCCL's host staging where device
// payloads are off); every rank's payload goes to every rank, each decoded as soon as it and those of
// the lower ranks have arrived, in rank order: the first overwrites, the others add, so every rank sums
// the same bytes in the same order. Returns the seconds spent decoding.
double gather_on_host(Workspace& w, const std::vector<int>& ids, size_t capacity, size_t used) {
  double decode_s = 0;
  w.capacity.assign(static_cast<size_t>(w.comm.size()), capacity);
  w.comm.all_gather_streamed(*w.ctx, {w.send_host.data(), used}, w.capacity, w.recv_host,
                             [&](int r, std::span<const uint8_t> bytes) {
                               const auto t0 = Clock::now();
                               w.decode_from(r, bytes, ids, /*add=*/r > 0, [&](int t) { return whole(w, t); });
                               decode_s += since(t0);
                             });
  return decode_s;
}

// The device path (NCCL with device payloads): every rank's payloads, each in a slot of its largest
// size (Quantizer::encode_slot), land in one device buffer and are decoded there, in the same rank
// order. Each rank knows every size, so the collective exchanges none and nothing waits (the step's
// end does: Workspace::settle_checks), and the decoders check the headers on the device. Returns the
// seconds spent decoding.
double gather_on_device(Workspace& w, const std::vector<int>& ids, size_t capacity, const uint8_t* send, size_t used) {
  const int P = w.comm.size();
  w.recv_sizes.assign(static_cast<size_t>(P), used);  // the same tensors in the same slots
  const uint8_t* recv =
      w.comm.all_gather_device(*w.ctx, {send, used}, w.recv_sizes, w.recv_offsets, /*sizes_given=*/true);
  comm_detail::check_capacities("gradient exchange (allgather)", std::vector<size_t>(static_cast<size_t>(P), capacity),
                                w.recv_sizes, P);
  const auto t0 = Clock::now();
  for (int r = 0; r < P; ++r) {
    const auto i = static_cast<size_t>(r);
    w.decode_from_device(
        r, {recv + w.recv_offsets[i], w.recv_sizes[i]}, ids, /*add=*/r > 0, [&](int t) { return whole(w, t); },
        /*owner_encoded=*/false);
  }
  return since(t0);
}

}  // namespace

void reduce_allgather(Workspace& w, const std::vector<int>& ids) {
  Context& ctx = *w.ctx;
  const int P = w.comm.size();
  // Encode every tensor of the bucket, back to back, into one send buffer.
  const auto start = Clock::now();
  size_t capacity = 0;
  for (int t : ids) {
    const ExchangeTensor& x = w.tensor(t);
    capacity += w.plan(t).quantizer->max_encoded_bytes(x.numel, w.plan(t).column_for(x.numel, x.column));
  }
  uint8_t* send = w.send_buffer(capacity);
  const bool on_device = w.device.is_cuda() && w.comm.device_byte_collectives() && !w.host_payloads;
  size_t used = 0;
  std::vector<size_t> own(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    TensorPlan& p = w.plan(t);
    const ExchangeTensor& x = w.tensor(t);
    const int64_t col = p.column_for(x.numel, x.column);
    const std::span<const float> in{w.grad(t), static_cast<size_t>(x.numel)};
    const std::span<uint8_t> slot{send + used, p.quantizer->max_encoded_bytes(x.numel, col)};
    // On the device path the slot travels (its size known on every rank), elsewhere the payload.
    own[i] = on_device ? p.quantizer->encode_slot(ctx, in, col, p.as<WholeState>().whole, slot)
                       : p.quantizer->encode(ctx, in, col, p.as<WholeState>().whole, slot);
    used += own[i];
  }
  if (w.device.is_cuda() && !on_device) copy_to_host(ctx, w.send_host.data(), send, used);
  const double encode_s = since(start);

  const auto exchange_start = Clock::now();
  double decode_s = on_device ? gather_on_device(w, ids, capacity, send, used) : gather_on_host(w, ids, capacity, used);
  // Then each sum is finished by the method's combine (the mean's scaling, or signsgd's vote).
  const auto t0 = Clock::now();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int t = ids[i];
    w.finish_sum(t, w.grad(t), w.tensor(t).numel);
    w.stats.bytes_sent_per_tensor[static_cast<size_t>(t)] += static_cast<double>(own[i]) * (P - 1);
  }
  decode_s += since(t0);
  w.stats.phases.add(Phase::encode, encode_s);
  w.stats.phases.add(Phase::decode, decode_s);
  w.stats.phases.add(Phase::communicate, std::max(0.0, since(exchange_start) - decode_s));
}

namespace {

class Allgather final : public ExchangeAlgorithm {
 public:
  void plan(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc) const override {
    plan_whole(p, x, index, pc);
  }
  void reduce(Workspace& w, const std::vector<int>& ids) const override { reduce_allgather(w, ids); }
  // Every rank's whole payload to every rank.
  WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const override {
    return payload_cost(WireCost::Pattern::allgather,
                        static_cast<double>(make_quantizer(spec)->max_encoded_bytes(x.numel, x.column)),
                        static_cast<double>(x.numel));
  }
  void state(TensorPlan& p, const std::string& name, std::vector<std::pair<std::string, Tensor>>& out) const override {
    add_state(p.as<WholeState>().whole, name, out);
  }
};

}  // namespace

const ExchangeAlgorithm& algorithm_allgather() {
  static const Allgather algorithm;
  return algorithm;
}

}  // namespace qtrain::exchange
