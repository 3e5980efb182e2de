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

#include "comm/buffer_ops.h"
#include "comm/exchange/workspace.h"

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
  for (int s = 0; s < P; ++s)
    w.send_offsets[static_cast<size_t>(s) + 1] = w.send_offsets[static_cast<size_t>(s)] + w.piece_capacity(ids, s, k);
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
      w.capacity, w.recv_host,
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
        w.decode_from(owner, bytes, ids, /*add=*/false, [&](int t) { return w.piece(t, owner, k); });
        tally.decode_s += since(t1);
      });
}

}  // namespace

void reduce_scatter_allgather(Workspace& w, const std::vector<int>& ids) {
  const auto start = Clock::now();
  int pieces = 0;
  for (int t : ids) pieces = std::max(pieces, w.plan(t).pieces());
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
  if (pipelined)
    reduce_scatter_allgather_pipelined(w, ids, pieces, capacity, tally);
  else
    for (int k = 0; k < pieces; ++k) reduce_scatter_allgather_piece(w, ids, k, tally);
  for (size_t i = 0; i < ids.size(); ++i) w.stats.bytes_sent_per_tensor[static_cast<size_t>(ids[i])] += tally.sent[i];
  w.stats.phases.add(Phase::encode, tally.encode_s);
  w.stats.phases.add(Phase::decode, tally.decode_s);
  w.stats.phases.add(Phase::communicate, std::max(0.0, since(start) - tally.encode_s - tally.decode_s));
}

}  // namespace qtrain::exchange
