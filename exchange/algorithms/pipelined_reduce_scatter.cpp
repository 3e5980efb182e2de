// Reduce-scatter + allgather with all pieces in flight at once, on point-to-point messages between
// host buffers: piece k+1 is encoded and on the wire while the owners sum, re-encode and allgather
// piece k. The bytes and the order of every sum are those of the piece-by-piece schedule
// (reduce_scatter_allgather.cpp).
#include <algorithm>
#include <utility>

#include "exchange/algorithms/workspace.h"

namespace qtrain::exchange {
namespace {

class PipelinedReduceScatter {
 public:
  PipelinedReduceScatter(Workspace& w, const std::vector<int>& ids, int pieces, const std::vector<size_t>& capacity,
                         StripeTally& tally)
      : w_(w),
        ids_(ids),
        capacity_(capacity),
        tally_(tally),
        P_(w.comm.size()),
        me_(w.comm.rank()),
        K_(static_cast<size_t>(pieces)),
        ranks_(static_cast<size_t>(P_)),
        mine_(static_cast<size_t>(me_)),
        bufs_(w.pipeline_buffers),
        phase1_request_(K_ * ranks_, -1),
        phase2_request_(K_ * ranks_, -1),
        phase1_bytes_(K_ * ranks_, -1),
        phase2_bytes_(K_ * ranks_, -1),
        own_size_(K_, 0),
        own_encoded_(K_, 0),
        summed_(K_, 0),
        phase2_decoded_(K_ * ranks_, 0),
        next_rank_(K_, 0),
        phase2_left_(K_, P_ - 1) {
    if (bufs_.size() < K_ * ranks_ * 4) bufs_.resize(K_ * ranks_ * 4);
  }

  void run() {
    post_receives();
    // Phase 1, piece by piece, owner by owner (from the right neighbour to this rank's own
    // contribution); after each encode, whatever has arrived is processed.
    for (size_t k = 0; k < K_; ++k) {
      produced_ = k + 1;
      for (int j = 1; j <= P_; ++j) {
        encode_for_owner(k, static_cast<size_t>((me_ + j) % P_));
        advance();
      }
    }
    wait_for_the_rest();
    for (size_t k = 0; k < K_; ++k) QT_CHECK(summed_[k] && phase2_left_[k] == 0, "piece {} was not completed", k);
    w_.comm.complete_all();
  }

 private:
  size_t cap(size_t s, size_t k) const { return capacity_[k * ranks_ + s]; }
  // Buffers, alive until complete_all(), four per (piece, rank): the phase-1 payload to owner d, the
  // one from rank s, the phase-2 payload from owner o, and (once per piece) this owner's phase-2
  // payload. Tags: phase 1 of piece k is 2k, phase 2 is 2k + 1 (piece_count keeps them in range).
  size_t to_owner(size_t k, size_t d) const { return (k * ranks_ + d) * 4; }
  size_t from_rank(size_t k, size_t s) const { return (k * ranks_ + s) * 4 + 1; }
  size_t from_owner(size_t k, size_t o) const { return (k * ranks_ + o) * 4 + 2; }
  size_t own_phase2(size_t k) const { return k * ranks_ * 4 + 3; }
  // A slot grows (if it must) before its one message of this exchange is posted, never after.
  std::vector<uint8_t>& buffer(size_t slot, size_t bytes) {
    if (bufs_[slot].size() < bytes) bufs_[slot].resize(bytes);
    return bufs_[slot];
  }
  // Whether `request` has completed; its byte count stays in `bytes` (-1 while pending), as a request
  // that test() or wait_any() reported complete cannot be asked again.
  bool arrived(int request, int64_t& bytes) {
    size_t n = 0;
    if (bytes < 0 && w_.comm.test(request, &n)) bytes = static_cast<int64_t>(n);
    return bytes >= 0;
  }

  // Receives, posted up front, indexed [k * P + s]: from rank s for this owner's piece k (phase 1)
  // and from owner s (phase 2).
  void post_receives() {
    for (size_t k = 0; k < K_; ++k)
      for (size_t s = 0; s < ranks_; ++s) {
        if (s == mine_) continue;
        std::vector<uint8_t>& in1 = buffer(from_rank(k, s), cap(mine_, k));
        phase1_request_[k * ranks_ + s] =
            w_.comm.post_recv({in1.data(), cap(mine_, k)}, static_cast<int>(s), static_cast<int>(2 * k));
        std::vector<uint8_t>& in2 = buffer(from_owner(k, s), cap(s, k));
        phase2_request_[k * ranks_ + s] =
            w_.comm.post_recv({in2.data(), cap(s, k)}, static_cast<int>(s), static_cast<int>(2 * k + 1));
      }
  }

  // Phase 1: this rank's contribution to piece k of owner d's stripe, sent unless d is this rank.
  void encode_for_owner(size_t k, size_t d) {
    const auto t0 = Clock::now();
    std::vector<uint8_t>& out = buffer(to_owner(k, d), cap(d, k));
    const size_t used = w_.encode_piece(ids_, static_cast<int>(d), static_cast<int>(k), /*owner=*/false, out.data(),
                                        tally_.sent, d != mine_ ? 1 : 0);
    tally_.encode_s += since(t0);
    if (d == mine_) {
      own_size_[k] = used;
      own_encoded_[k] = 1;
    } else {
      w_.comm.post_send({out.data(), used}, static_cast<int>(d), static_cast<int>(2 * k));
    }
  }

  // Everything that can be done with what has arrived. Pieces [first_open, produced) are the ones
  // with work left that can have any: a piece is only summed after this rank encoded its own
  // contribution, and other owners' phase 2 needs it too.
  void advance() {
    while (first_open_ < produced_ && summed_[first_open_] && phase2_left_[first_open_] == 0) ++first_open_;
    for (size_t k = first_open_; k < produced_; ++k) {
      sum_arrived(k);
      if (next_rank_[k] == P_ && !summed_[k]) send_sum(k);
      decode_other_owners(k);
    }
  }

  // The owner sums piece k from the contributions in rank order, and only after this rank has
  // encoded its own (the sum overwrites the values it encodes).
  void sum_arrived(size_t k) {
    while (own_encoded_[k] && next_rank_[k] < P_) {
      const auto s = static_cast<size_t>(next_rank_[k]);
      const size_t i = k * ranks_ + s;
      if (s != mine_ && !arrived(phase1_request_[i], phase1_bytes_[i])) break;
      const std::span<const uint8_t> bytes =
          s == mine_ ? std::span<const uint8_t>{bufs_[to_owner(k, s)].data(), own_size_[k]}
                     : std::span<const uint8_t>{bufs_[from_rank(k, s)].data(), static_cast<size_t>(phase1_bytes_[i])};
      const auto t0 = Clock::now();
      w_.decode_from(static_cast<int>(s), bytes, ids_, /*add=*/s > 0,
                     [&](int t) { return w_.piece(t, me_, static_cast<int>(k)); });
      tally_.decode_s += since(t0);
      ++next_rank_[k];
    }
  }

  // Piece k is summed: scale it, re-encode it (own residual, fresh key), send it to every rank and
  // decode it here too, so that every rank holds the values of the same bytes.
  void send_sum(size_t k) {
    const int ki = static_cast<int>(k);
    summed_[k] = 1;
    auto t0 = Clock::now();
    w_.scale_piece(ids_, ki);
    std::vector<uint8_t>& out = buffer(own_phase2(k), cap(mine_, k));
    const size_t used = w_.encode_piece(ids_, me_, ki, /*owner=*/true, out.data(), tally_.sent, P_ - 1);
    tally_.encode_s += since(t0);
    for (int j = 1; j < P_; ++j) w_.comm.post_send({out.data(), used}, (me_ + j) % P_, static_cast<int>(2 * k + 1));
    t0 = Clock::now();
    w_.decode_from(
        me_, {out.data(), used}, ids_, /*add=*/false, [&](int t) { return w_.piece(t, me_, ki); },
        /*owner_encoded=*/true);
    tally_.decode_s += since(t0);
  }

  // Other owners' pieces, in any order: they write disjoint values.
  void decode_other_owners(size_t k) {
    for (size_t o = 0; o < ranks_; ++o) {
      const size_t i = k * ranks_ + o;
      if (o == mine_ || phase2_decoded_[i] || !arrived(phase2_request_[i], phase2_bytes_[i])) continue;
      phase2_decoded_[i] = 1;
      --phase2_left_[k];
      const auto t0 = Clock::now();
      w_.decode_from(
          static_cast<int>(o), {bufs_[from_owner(k, o)].data(), static_cast<size_t>(phase2_bytes_[i])}, ids_,
          /*add=*/false, [&](int t) { return w_.piece(t, static_cast<int>(o), static_cast<int>(k)); },
          /*owner_encoded=*/true);
      tally_.decode_s += since(t0);
    }
  }

  // Blocks on whatever is still missing until every piece is summed, sent and received (each round's
  // advance() handles the previous round's arrival).
  void wait_for_the_rest() {
    for (;;) {
      advance();
      std::vector<int> waiting;
      std::vector<int64_t*> bytes_of;
      for (size_t i = 0; i < K_ * ranks_; ++i) {
        if (i % ranks_ == mine_) continue;
        for (auto [request, bytes] :
             {std::pair{phase1_request_[i], &phase1_bytes_[i]}, std::pair{phase2_request_[i], &phase2_bytes_[i]}})
          if (*bytes < 0) {
            waiting.push_back(request);
            bytes_of.push_back(bytes);
          }
      }
      if (waiting.empty()) return;
      size_t n = 0;
      const int r = w_.comm.wait_any(waiting, &n);
      *bytes_of[static_cast<size_t>(std::find(waiting.begin(), waiting.end(), r) - waiting.begin())] =
          static_cast<int64_t>(n);
    }
  }

  Workspace& w_;
  const std::vector<int>& ids_;
  const std::vector<size_t>& capacity_;  // [k * P + s]
  StripeTally& tally_;
  const int P_, me_;
  const size_t K_, ranks_, mine_;
  std::vector<std::vector<uint8_t>>& bufs_;
  std::vector<int> phase1_request_, phase2_request_;
  std::vector<int64_t> phase1_bytes_, phase2_bytes_;
  std::vector<size_t> own_size_;
  std::vector<char> own_encoded_, summed_, phase2_decoded_;
  std::vector<int> next_rank_;    // the next contribution the owner sums, per piece
  std::vector<int> phase2_left_;  // other owners' payloads not yet decoded, per piece
  size_t first_open_ = 0, produced_ = 0;
};

}  // namespace

void reduce_scatter_allgather_pipelined(Workspace& w, const std::vector<int>& ids, int pieces,
                                        const std::vector<size_t>& capacity, StripeTally& tally) {
  PipelinedReduceScatter(w, ids, pieces, capacity, tally).run();
}

}  // namespace qtrain::exchange
