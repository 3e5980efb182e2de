// Reduce-scatter + allgather: rank r owns stripe r of every tensor. All ranks encode every stripe and
// send it to its owner; the owner decodes and sums, re-encodes (own residual, fresh random key), and
// the owners' payloads are allgathered and decoded by everyone. Stripes are cut into pieces
// (communication.piece_mb), each quantized on its own.
//
// Two schedules carry the same bytes and sums. This file's runs the pieces one after another on the
// communicator's streaming collectives, which every transport has (NCCL, LocalComm, CUDA buffers,
// messages larger than one point-to-point message). The pipelined one (pipelined_reduce_scatter.cpp)
// overlaps the pieces on point-to-point messages between host buffers, which only MpiComm offers on
// the CPU. Run with one piece, the pipelined one gives this one's bits (the tests, and 4-rank MNIST
// runs of qsgd and onebit, agree bit for bit), yet neither can replace the other: the pipelined one
// needs those messages, and this one cannot overlap pieces, as each collective returns only when
// complete. With one piece there is nothing to overlap, so the collectives take it.
#include <algorithm>
#include <string>

#include "comm/buffer_ops.h"
#include "exchange/algorithms/algorithm.h"
#include "exchange/algorithms/workspace.h"
#include "quant/method.h"
#include "comm/transport_common.h"

namespace qtrain::exchange {
namespace {

// Piece k of every tensor of `ids` through both phases on the streaming collectives.
void reduce_scatter_allgather_piece(Workspace& w, const std::vector<int>& ids, int k, StripeTally& tally) {
  Context& ctx = *w.ctx;
  const int P = w.comm.size();
  const int me = w.comm.rank();
  const bool cuda = w.device.is_cuda();

  // 1. Every rank encodes piece k of stripe d of every tensor for its owner d, one owner at a time,
  //    and each owner's bytes leave while the next owner's are encoded. The owner decodes and sums
  //    its piece from every rank (its own contribution from its own encoding), in rank order.
  w.send_offsets.assign(static_cast<size_t>(P) + 1, 0);
  w.send_capacity.resize(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    w.send_capacity[static_cast<size_t>(s)] = w.piece_capacity(ids, s, k);
    w.send_offsets[static_cast<size_t>(s) + 1] =
        w.send_offsets[static_cast<size_t>(s)] + w.send_capacity[static_cast<size_t>(s)];
  }
  uint8_t* send = w.send_buffer(w.send_offsets.back());
  w.capacity.assign(static_cast<size_t>(P), w.piece_capacity(ids, me, k));
  w.comm.all_to_all_streamed(
      ctx,
      [&](int d) -> std::span<const uint8_t> {
        const auto t0 = Clock::now();
        const size_t offset = w.send_offsets[static_cast<size_t>(d)];
        const size_t used = w.encode_piece(ids, d, k, /*owner=*/false, send + offset, tally.sent, d != me ? 1 : 0);
        const uint8_t* host = send + offset;
        if (cuda) {
          host = w.send_host.data() + offset;
          copy_to_host(ctx, w.send_host.data() + offset, send + offset, used);
        }
        tally.encode_s += since(t0);
        return {host, used};
      },
      w.send_capacity, w.capacity, w.recv_host,
      [&](int s, std::span<const uint8_t> bytes) {
        const auto t0 = Clock::now();
        w.decode_from(s, bytes, ids, /*add=*/s > 0, [&](int t) { return w.piece(t, me, k); });
        tally.decode_s += since(t0);
      });
  auto t0 = Clock::now();
  w.scale_piece(ids, k);
  tally.decode_s += since(t0);

  // 2. The owner re-encodes its reduced piece (own residual, fresh random key) ...
  t0 = Clock::now();
  send = w.send_buffer(w.piece_capacity(ids, me, k));
  const size_t used = w.encode_piece(ids, me, k, /*owner=*/true, send, tally.sent, P - 1);
  if (cuda) copy_to_host(ctx, w.send_host.data(), send, used);
  tally.encode_s += since(t0);

  // ... and the owners' payloads go to everyone, who decode every piece from the same bytes as
  // they arrive.
  for (int s = 0; s < P; ++s) w.capacity[static_cast<size_t>(s)] = w.piece_capacity(ids, s, k);
  w.comm.all_gather_streamed(
      ctx, {w.send_host.data(), used}, w.capacity, w.recv_host, [&](int owner, std::span<const uint8_t> bytes) {
        const auto t1 = Clock::now();
        w.decode_from(
            owner, bytes, ids, /*add=*/false, [&](int t) { return w.piece(t, owner, k); }, /*owner_encoded=*/true);
        tally.decode_s += since(t1);
      });
}

// The same on GPUs over a communicator with device byte collectives (nccl): every payload stays in
// device memory. Each owner's piece is encoded into its slot of one device buffer, the slots are
// exchanged, and every block is decoded where it landed. The host path copies each payload to the
// host after encoding, the communicator stages it back to the GPU and its result to the host, and the
// decoder uploads it again: four crossings of PCIe per payload, each waited for. Same bytes, same
// sums, same order (rank order) as the streamed path.
void reduce_scatter_allgather_piece_on_device(Workspace& w, const std::vector<int>& ids, int k, StripeTally& tally) {
  Context& ctx = *w.ctx;
  const int P = w.comm.size();
  const int me = w.comm.rank();

  // The most bytes of piece k of each owner's stripe: its slot in the send buffer, and what a rank
  // may send for it.
  std::vector<size_t>& capacity = w.capacity;
  capacity.resize(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) capacity[static_cast<size_t>(s)] = w.piece_capacity(ids, s, k);
  const size_t mine = capacity[static_cast<size_t>(me)];
  // Every payload fills a slot of its encoder's largest size (its own size, where it varies, is in its
  // header on the device: adaptive's count): every rank knows what every other sends, so the
  // collectives exchange no sizes and nothing waits (the step's end does: Workspace::settle_checks).

  // 1. Every owner's piece, encoded for it (the right neighbour first, as the streamed path), ...
  auto t0 = Clock::now();
  const size_t slots = comm_detail::exclusive_offsets(capacity, w.send_offsets);
  uint8_t* send = w.device_bytes(w.send_dev, slots);
  w.send_sizes.assign(static_cast<size_t>(P), 0);
  for (int j = 1; j <= P; ++j) {
    const auto d = static_cast<size_t>((me + j) % P);
    w.send_sizes[d] = w.encode_piece(ids, static_cast<int>(d), k, /*owner=*/false, send + w.send_offsets[d], tally.sent,
                                     d != static_cast<size_t>(me) ? 1 : 0, /*slots=*/true);
  }
  tally.encode_s += since(t0);
  w.recv_sizes.assign(static_cast<size_t>(P), w.piece_bytes(ids, me, k, /*owner=*/false));
  const uint8_t* recv = w.comm.all_to_all_device(ctx, {send, slots}, w.send_sizes, w.send_offsets, w.recv_sizes,
                                                 w.recv_offsets, /*sizes_given=*/true);
  comm_detail::check_capacities("gradient exchange (reduce-scatter)", std::vector<size_t>(capacity.size(), mine),
                                w.recv_sizes, P);
  // ... and the owner sums what every rank sent it, in rank order.
  t0 = Clock::now();
  for (int s = 0; s < P; ++s) {
    const auto r = static_cast<size_t>(s);
    w.decode_from_device(
        s, {recv + w.recv_offsets[r], w.recv_sizes[r]}, ids, /*add=*/s > 0, [&](int t) { return w.piece(t, me, k); },
        /*owner_encoded=*/false);
  }
  w.scale_piece(ids, k);
  tally.decode_s += since(t0);

  // 2. The owner re-encodes its reduced piece, and every owner's payload goes to everyone.
  t0 = Clock::now();
  send = w.device_bytes(w.send_dev, mine);
  const size_t used = w.encode_piece(ids, me, k, /*owner=*/true, send, tally.sent, P - 1, /*slots=*/true);
  tally.encode_s += since(t0);
  w.recv_sizes.resize(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) w.recv_sizes[static_cast<size_t>(s)] = w.piece_bytes(ids, s, k, /*owner=*/true);
  recv = w.comm.all_gather_device(ctx, {send, used}, w.recv_sizes, w.recv_offsets, /*sizes_given=*/true);
  comm_detail::check_capacities("gradient exchange (allgather)", capacity, w.recv_sizes, P);
  t0 = Clock::now();
  for (int owner = 0; owner < P; ++owner) {
    const auto r = static_cast<size_t>(owner);
    w.decode_from_device(
        owner, {recv + w.recv_offsets[r], w.recv_sizes[r]}, ids, /*add=*/false,
        [&](int t) { return w.piece(t, owner, k); }, /*owner_encoded=*/true);
  }
  tally.decode_s += since(t0);
}

}  // namespace

void reduce_scatter_allgather(Workspace& w, const std::vector<int>& ids) {
  const auto start = Clock::now();
  int pieces = 0;
  for (int t : ids) pieces = std::max(pieces, w.plan(t).as<StripedState>().pieces());
  StripeTally tally;
  tally.sent.assign(ids.size(), 0.0);
  // Pipelining needs point-to-point messages on host memory, each piece's payload in one message.
  const int P = w.comm.size();
  bool pipelined = pieces > 1 && P > 1 && w.comm.has_point_to_point() && !w.device.is_cuda();
  std::vector<size_t> capacity;  // [k * P + s]: piece k of stripe s
  for (int k = 0; pipelined && k < pieces; ++k)
    for (int s = 0; s < P; ++s) {
      capacity.push_back(w.piece_capacity(ids, s, k));
      pipelined = pipelined && capacity.back() <= w.comm.max_point_to_point_bytes();
    }
  const bool on_device = w.device.is_cuda() && w.comm.device_byte_collectives() && !w.host_payloads;
  if (pipelined)
    reduce_scatter_allgather_pipelined(w, ids, pieces, capacity, tally);
  else if (on_device)
    for (int k = 0; k < pieces; ++k) reduce_scatter_allgather_piece_on_device(w, ids, k, tally);
  else
    for (int k = 0; k < pieces; ++k) reduce_scatter_allgather_piece(w, ids, k, tally);
  for (size_t i = 0; i < ids.size(); ++i) w.stats.bytes_sent_per_tensor[static_cast<size_t>(ids[i])] += tally.sent[i];
  w.stats.phases.add(Phase::encode, tally.encode_s);
  w.stats.phases.add(Phase::decode, tally.decode_s);
  w.stats.phases.add(Phase::communicate, std::max(0.0, since(start) - tally.encode_s - tally.decode_s));
}

namespace {

class ReduceScatterAllgather final : public ExchangeAlgorithm {
 public:
  // Stripes balanced in units of whole columns for the methods that quantize per column, each cut into
  // pieces of at most communication.piece_mb.
  void plan(TensorPlan& p, const ExchangeTensor& x, int index, const PlanContext& pc) const override {
    p.quantizer = make_quantizer(p.spec);
    p.combine = method_info(p.spec.method).combine;
    const QuantSpec owner_spec = method_info(p.spec.method).owner_spec(p.spec);
    if (!(owner_spec == p.spec)) p.owner_quantizer = make_quantizer(owner_spec);
    auto st = std::make_unique<StripedState>();
    const int P = pc.world_size;
    st->unit = GradientExchange::stripe_unit(p.spec, x.column);
    st->stripe_begin = GradientExchange::stripe_bounds(x.numel, st->unit, P);
    const auto piece_values = static_cast<int64_t>(pc.piece_mb * 1024.0 * 1024.0 / 4.0);
    const int K = GradientExchange::piece_count(st->stripe_begin, st->unit, piece_values);
    st->stripes.resize(static_cast<size_t>(P));
    for (int s = 0; s < P; ++s) {
      st->piece_begin.push_back(GradientExchange::piece_bounds(
          st->stripe_begin[static_cast<size_t>(s)], st->stripe_begin[static_cast<size_t>(s) + 1], st->unit, K));
      for (int k = 0; k < K; ++k) {
        QuantState& q = st->stripes[static_cast<size_t>(s)].emplace_back(
            pc.seed, pc.rank, GradientExchange::piece_state_id(index, false, s, k, P));
        p.quantizer->init_state(q, st->piece_len(s, k), pc.device);
      }
    }
    for (int k = 0; k < K; ++k) {
      QuantState& q =
          st->owner.emplace_back(pc.seed, pc.rank, GradientExchange::piece_state_id(index, true, pc.rank, k, P));
      p.owner_q().init_state(q, st->piece_len(pc.rank, k), pc.device);
    }
    p.state = std::move(st);
  }
  void reduce(Workspace& w, const std::vector<int>& ids) const override { reduce_scatter_allgather(w, ids); }
  // Modelled as the whole tensor's payload per rank (one stripe to each owner, the owner's to all).
  WireCost cost(const QuantSpec& spec, const ExchangeTensor& x) const override {
    return payload_cost(WireCost::Pattern::reduce_scatter_allgather,
                        static_cast<double>(make_quantizer(spec)->max_encoded_bytes(x.numel, x.column)),
                        static_cast<double>(x.numel));
  }
  // "<tensor>/stripe<s>/...", "<tensor>/owner/..."; pieces k >= 1 as ".piece<k>" after the role.
  void state(TensorPlan& p, const std::string& name, std::vector<std::pair<std::string, Tensor>>& out) const override {
    StripedState& st = p.as<StripedState>();
    auto piece = [](size_t k) { return k == 0 ? std::string() : ".piece" + std::to_string(k); };
    for (size_t s = 0; s < st.stripes.size(); ++s)
      for (size_t k = 0; k < st.stripes[s].size(); ++k)
        add_state(st.stripes[s][k], name + "/stripe" + std::to_string(s) + piece(k), out);
    for (size_t k = 0; k < st.owner.size(); ++k) add_state(st.owner[k], name + "/owner" + piece(k), out);
  }
};

}  // namespace

const ExchangeAlgorithm& algorithm_reduce_scatter_allgather() {
  static const ReduceScatterAllgather algorithm;
  return algorithm;
}

}  // namespace qtrain::exchange
