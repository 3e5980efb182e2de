// The exchange's transport over Python collectives (python_collectives_comm.h).
#include "python/src/python_collectives_comm.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>

#include "comm/transport_common.h"
#include "framework/core/check.h"
#include "framework/core/float16.h"

namespace qtrain::python {
namespace {

constexpr size_t kLengthBytes = 8;

// A NumPy array over `count` bytes at `data` (no copy; valid while the caller's buffer is).
py::array_t<uint8_t> view(const uint8_t* data, size_t count) {
  static uint8_t nothing = 0;  // an empty vector's data() may be null, which a capsule refuses
  auto* p = data != nullptr ? const_cast<uint8_t*>(data) : &nothing;  // writable for torch.from_numpy; only read
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(count)}, {py::ssize_t{1}}, p, py::capsule(p, [](void*) {}));
}

void put_length(uint8_t* at, uint64_t length) { std::memcpy(at, &length, kLengthBytes); }
uint64_t get_length(const uint8_t* at) {
  uint64_t length = 0;
  std::memcpy(&length, at, kLengthBytes);
  return length;
}

size_t total(const std::vector<size_t>& sizes) {
  size_t sum = 0;
  for (size_t s : sizes) sum += s;
  return sum;
}

// Elements [share_begin(n, d, P), share_begin(n, d + 1, P)) are rank d's share of an allreduce of n.
size_t share_begin(size_t n, size_t d, size_t P) { return n * d / P; }

// The float or double sum of the P blocks of `count` values at `blocks`, in rank order.
template <typename T>
void sum_in_order(const uint8_t* blocks, size_t count, size_t P, T* out) {
  const size_t stride = count * sizeof(T);
  for (size_t i = 0; i < count; ++i) {
    T acc;
    std::memcpy(&acc, blocks + i * sizeof(T), sizeof(T));
    for (size_t s = 1; s < P; ++s) {
      T v;
      std::memcpy(&v, blocks + s * stride + i * sizeof(T), sizeof(T));
      acc += v;
    }
    out[i] = acc;
  }
}

// dst = the sum of the P blocks of `count` values at `blocks` (block s from rank s), added in rank
// order: the same bits on every rank. 16-bit values: fp16 rounds after every addition (as a sum of
// fp16 values in fp16 arithmetic does); bf16 sums in fp32 and rounds once (gloo sums no bf16: the
// MPI transport's combine rounds a pair's fp32 sum once as well).
void sum_blocks(ReduceType type, const uint8_t* blocks, size_t count, size_t P, void* dst) {
  const size_t stride = count * reduce_type_size(type);
  switch (type) {
    case ReduceType::f32: sum_in_order(blocks, count, P, static_cast<float*>(dst)); break;
    case ReduceType::f64: sum_in_order(blocks, count, P, static_cast<double*>(dst)); break;
    case ReduceType::f16:
    case ReduceType::bf16: {
      const bool bf = type == ReduceType::bf16;
      auto widen = [bf](const uint8_t* at) {
        uint16_t h;
        std::memcpy(&h, at, 2);
        return bf ? bf16_to_float(h) : half_to_float(h);
      };
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) {
        float acc = widen(blocks + i * 2);
        for (size_t s = 1; s < P; ++s) {
          acc += widen(blocks + s * stride + i * 2);
          if (!bf) acc = half_to_float(float_to_half(acc));
        }
        out[i] = bf ? float_to_bf16(acc) : float_to_half(acc);
      }
      break;
    }
  }
}

}  // namespace

PythonCollectivesComm::PythonCollectivesComm(py::object collectives) : collectives_(std::move(collectives)) {
  rank_ = collectives_.attr("rank").cast<int>();
  size_ = collectives_.attr("size").cast<int>();
  QT_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "process group: rank {} of {}", rank_, size_);
}

void PythonCollectivesComm::all_to_all(std::span<const uint8_t> send, const std::vector<size_t>& send_splits,
                                       uint8_t* recv, const std::vector<size_t>& recv_splits) {
  QT_CHECK(send_splits.size() == static_cast<size_t>(size_) && recv_splits.size() == static_cast<size_t>(size_) &&
               total(send_splits) == send.size(),
           "all_to_all: {} send splits ({} bytes) for {} bytes, {} receive splits, {} ranks", send_splits.size(),
           total(send_splits), send.size(), recv_splits.size(), size_);
  const py::gil_scoped_acquire gil;  // the exchange's thread holds no GIL of its own
  collectives_.attr("all_to_all")(view(send.data(), send.size()), send_splits, view(recv, total(recv_splits)),
                                  recv_splits);
}

void PythonCollectivesComm::all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) {
  QT_CHECK(ctx.device().is_cpu(), "all_reduce_sum over a Python process group: CPU memory only");
  reduce(data, count, type);
}

void PythonCollectivesComm::reduce(void* data, int64_t count, ReduceType type) {
  comm_detail::check_reduce_args("all_reduce_sum", data, count, type);
  const auto n = static_cast<size_t>(count);
  const auto P = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  if (n == 0 || P == 1) return;
  const size_t elem = reduce_type_size(type);
  auto* bytes = static_cast<uint8_t*>(data);
  // 1. Reduce-scatter: block d of every rank to rank d, which sums them in rank order.
  const size_t mine = share_begin(n, me + 1, P) - share_begin(n, me, P);
  send_splits_.resize(P);
  for (size_t d = 0; d < P; ++d) send_splits_[d] = (share_begin(n, d + 1, P) - share_begin(n, d, P)) * elem;
  recv_splits_.assign(P, mine * elem);
  recv_.resize(P * mine * elem);
  all_to_all({bytes, n * elem}, send_splits_, recv_.data(), recv_splits_);
  uint8_t* my_block = bytes + share_begin(n, me, P) * elem;
  sum_blocks(type, recv_.data(), mine, P, my_block);
  // 2. Allgather of the reduced blocks: this rank's to every rank, rank s's into its place.
  send_.resize(P * mine * elem);
  for (size_t d = 0; d < P; ++d) std::memcpy(send_.data() + d * mine * elem, my_block, mine * elem);
  all_to_all(send_, recv_splits_, bytes, send_splits_);
}

void PythonCollectivesComm::gather_known(std::span<const uint8_t> send, const std::vector<size_t>& sizes,
                                         std::vector<uint8_t>& recv, std::vector<size_t>& offsets) {
  const auto P = static_cast<size_t>(size_);
  send_.resize(P * send.size());
  for (size_t d = 0; d < P; ++d)
    if (!send.empty()) std::memcpy(send_.data() + d * send.size(), send.data(), send.size());
  send_splits_.assign(P, send.size());
  recv.resize(comm_detail::exclusive_offsets(sizes, offsets));
  all_to_all(send_, send_splits_, recv.data(), sizes);
}

void PythonCollectivesComm::all_gather_bytes(Context&, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                                             std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  const std::vector<uint64_t> all = all_gather_u64(send.size());
  sizes.assign(all.begin(), all.end());
  QT_CHECK(sizes[static_cast<size_t>(rank_)] == send.size(),
           "all_gather_bytes: the process group lost this rank's size");
  gather_known(send, sizes, recv, offsets);
}

std::vector<uint64_t> PythonCollectivesComm::all_gather_u64(uint64_t value) {
  const auto P = static_cast<size_t>(size_);
  unit_.assign(P, kLengthBytes);
  std::vector<uint8_t> all;
  std::vector<size_t> offsets;
  gather_known({reinterpret_cast<const uint8_t*>(&value), kLengthBytes}, unit_, all, offsets);
  std::vector<uint64_t> out(P);
  std::memcpy(out.data(), all.data(), P * kLengthBytes);
  return out;
}

void PythonCollectivesComm::all_to_all_bytes(Context&, std::span<const uint8_t> send,
                                             const std::vector<size_t>& send_sizes,
                                             const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                                             std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) {
  const auto P = static_cast<size_t>(size_);
  comm_detail::check_all_to_all_args("all_to_all_bytes", send.size(), send_sizes, send_offsets, size_);
  // The sizes first (one all_to_all of a length per pair), then the blocks, back to back in rank order.
  std::vector<uint64_t> lengths(send_sizes.begin(), send_sizes.end()), incoming(P);
  unit_.assign(P, kLengthBytes);
  all_to_all({reinterpret_cast<const uint8_t*>(lengths.data()), P * kLengthBytes}, unit_,
             reinterpret_cast<uint8_t*>(incoming.data()), unit_);
  recv_sizes.assign(incoming.begin(), incoming.end());
  send_.resize(total(send_sizes));
  size_t at = 0;
  for (size_t d = 0; d < P; ++d) {
    if (send_sizes[d] > 0) std::memcpy(send_.data() + at, send.data() + send_offsets[d], send_sizes[d]);
    at += send_sizes[d];
  }
  recv.resize(comm_detail::exclusive_offsets(recv_sizes, recv_offsets));
  all_to_all(send_, send_sizes, recv.data(), recv_sizes);
}

void PythonCollectivesComm::consume_blocks(const std::vector<uint8_t>& recv, const std::vector<size_t>& capacity,
                                           const Consume& consume, const char* op) {
  const auto P = static_cast<size_t>(size_);
  stream_sizes_.resize(P);
  for (size_t s = 0; s < P; ++s) stream_sizes_[s] = get_length(recv.data() + stream_offsets_[s]);
  comm_detail::check_capacities(op, capacity, stream_sizes_, size_);
  for (size_t s = 0; s < P; ++s)
    consume(static_cast<int>(s), {recv.data() + stream_offsets_[s] + kLengthBytes, stream_sizes_[s]});
}

void PythonCollectivesComm::all_to_all_streamed(Context&, const Produce& produce,
                                                const std::vector<size_t>& send_capacity,
                                                const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                                const Consume& consume) {
  const auto P = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  QT_CHECK(send_capacity.size() == P && recv_capacity.size() == P,
           "all_to_all_streamed: {} send and {} receive capacities for {} ranks", send_capacity.size(),
           recv_capacity.size(), P);
  send_splits_.resize(P);
  recv_splits_.resize(P);
  for (size_t d = 0; d < P; ++d) {
    send_splits_[d] = send_capacity[d] + kLengthBytes;
    recv_splits_[d] = recv_capacity[d] + kLengthBytes;
  }
  std::vector<size_t> at;
  send_.assign(comm_detail::exclusive_offsets(send_splits_, at), 0);
  for (size_t k = 1; k <= P; ++k) {
    const size_t d = (me + k) % P;
    const std::span<const uint8_t> bytes = produce(static_cast<int>(d));
    QT_CHECK(bytes.size() <= send_capacity[d], "all_to_all_streamed: {} bytes produced for rank {}, capacity {}",
             bytes.size(), d, send_capacity[d]);
    put_length(send_.data() + at[d], bytes.size());
    if (!bytes.empty()) std::memcpy(send_.data() + at[d] + kLengthBytes, bytes.data(), bytes.size());
  }
  recv.resize(comm_detail::exclusive_offsets(recv_splits_, stream_offsets_));
  all_to_all(send_, send_splits_, recv.data(), recv_splits_);
  consume_blocks(recv, recv_capacity, consume, "all_to_all_streamed");
}

void PythonCollectivesComm::all_gather_streamed(Context&, std::span<const uint8_t> send,
                                                const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                                const Consume& consume) {
  const auto P = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  QT_CHECK(recv_capacity.size() == P, "all_gather_streamed: {} capacities for {} ranks", recv_capacity.size(), P);
  if (send.size() > recv_capacity[me])
    input_error("all_gather_streamed: this rank sends {} bytes, more than its capacity {}", send.size(),
                recv_capacity[me]);
  // This rank's block (its length, its payload, zeros up to its capacity) once for every rank.
  const size_t block = recv_capacity[me] + kLengthBytes;
  send_.assign(P * block, 0);
  for (size_t d = 0; d < P; ++d) {
    put_length(send_.data() + d * block, send.size());
    if (!send.empty()) std::memcpy(send_.data() + d * block + kLengthBytes, send.data(), send.size());
  }
  send_splits_.assign(P, block);
  recv_splits_.resize(P);
  for (size_t s = 0; s < P; ++s) recv_splits_[s] = recv_capacity[s] + kLengthBytes;
  recv.resize(comm_detail::exclusive_offsets(recv_splits_, stream_offsets_));
  all_to_all(send_, send_splits_, recv.data(), recv_splits_);
  consume_blocks(recv, recv_capacity, consume, "all_gather_streamed");
}

void PythonCollectivesComm::broadcast_bytes(Context&, std::span<uint8_t> data, int root) {
  comm_detail::check_root("broadcast_bytes", root, size_);
  const py::gil_scoped_acquire gil;
  collectives_.attr("broadcast")(view(data.data(), data.size()), root);
}

void PythonCollectivesComm::all_reduce_sum_f64(std::span<double> values) {
  reduce(values.data(), static_cast<int64_t>(values.size()), ReduceType::f64);
}

void PythonCollectivesComm::barrier() {
  const py::gil_scoped_acquire gil;
  collectives_.attr("barrier")();
}

}  // namespace qtrain::python
