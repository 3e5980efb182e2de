// The exchange's transport over Python collectives (python_collectives_comm.h).
#include "python/src/python_collectives_comm.h"

#include <pybind11/numpy.h>

#include <algorithm>
#include <cstring>

#include "framework/core/check.h"
#include "framework/core/float16.h"

namespace qtrain::python {
namespace {

constexpr size_t kLengthBytes = 8;

// A NumPy array over `count` elements at `data` (no copy; valid while the caller's buffer is).
template <typename T>
py::array_t<T> view(T* data, size_t count) {
  return py::array_t<T>({static_cast<py::ssize_t>(count)}, {static_cast<py::ssize_t>(sizeof(T))}, data,
                        py::capsule(data, [](void*) {}));
}

// The uint8 array a Python collective returned, checked for its length.
py::array_t<uint8_t, py::array::c_style> returned_bytes(const py::object& result, size_t expected, const char* op) {
  auto a = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(result);
  QT_CHECK(a && static_cast<size_t>(a.size()) == expected, "{}: the process group returned {} bytes, expected {}", op,
           a ? a.size() : 0, expected);
  return a;
}

void put_length(uint8_t* at, uint64_t length) { std::memcpy(at, &length, kLengthBytes); }
uint64_t get_length(const uint8_t* at) {
  uint64_t length = 0;
  std::memcpy(&length, at, kLengthBytes);
  return length;
}

}  // namespace

PythonCollectivesComm::PythonCollectivesComm(py::object collectives) : collectives_(std::move(collectives)) {
  rank_ = collectives_.attr("rank").cast<int>();
  size_ = collectives_.attr("size").cast<int>();
  QT_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "process group: rank {} of {}", rank_, size_);
}

void PythonCollectivesComm::all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) {
  QT_CHECK(count >= 0 && (count == 0 || data != nullptr), "all_reduce_sum: {} elements at {}", count, data);
  QT_CHECK(ctx.device().is_cpu(), "all_reduce_sum over a Python process group: CPU memory only");
  const auto n = static_cast<size_t>(count);
  switch (type) {
    case ReduceType::f32: collectives_.attr("all_reduce")(view(static_cast<float*>(data), n)); break;
    case ReduceType::f64: collectives_.attr("all_reduce")(view(static_cast<double*>(data), n)); break;
    case ReduceType::f16: {
      // NumPy's float16 is IEEE binary16, the bits of qtrain's f16_t.
      auto a = py::array(py::dtype("float16"), {static_cast<py::ssize_t>(n)}, {py::ssize_t{2}}, data,
                         py::capsule(data, [](void*) {}));
      collectives_.attr("all_reduce")(a);
      break;
    }
    case ReduceType::bf16: {
      // gloo sums no bfloat16: the sum runs in fp32 and is rounded to bf16 once (nearest even), as
      // the MPI transport's combine does for two values.
      auto* v = static_cast<uint16_t*>(data);
      std::vector<float> wide(n);
      for (size_t i = 0; i < n; ++i) wide[i] = bf16_to_float(v[i]);
      collectives_.attr("all_reduce")(view(wide.data(), n));
      for (size_t i = 0; i < n; ++i) v[i] = float_to_bf16(wide[i]);
      break;
    }
  }
}

void PythonCollectivesComm::unpack(const uint8_t* blocks, size_t block, std::vector<uint8_t>& recv,
                                   std::vector<size_t>& sizes, std::vector<size_t>& offsets, const char* op) const {
  const auto P = static_cast<size_t>(size_);
  sizes.assign(P, 0);
  offsets.assign(P, 0);
  size_t total = 0;
  for (size_t r = 0; r < P; ++r) {
    const uint64_t length = get_length(blocks + r * block);
    QT_CHECK(length <= block - kLengthBytes, "{}: rank {} announced {} bytes in a block of {}", op, r, length,
             block - kLengthBytes);
    sizes[r] = length;
    offsets[r] = total;
    total += length;
  }
  recv.resize(total);
  for (size_t r = 0; r < P; ++r)
    if (sizes[r] > 0) std::memcpy(recv.data() + offsets[r], blocks + r * block + kLengthBytes, sizes[r]);
}

void PythonCollectivesComm::gather_blocks(std::span<const uint8_t> send, size_t block, std::vector<uint8_t>& recv,
                                          std::vector<size_t>& sizes, std::vector<size_t>& offsets, const char* op) {
  QT_CHECK(send.size() + kLengthBytes <= block, "{}: {} bytes to send, blocks of {}", op, send.size(), block);
  packed_.assign(block, 0);
  put_length(packed_.data(), send.size());
  if (!send.empty()) std::memcpy(packed_.data() + kLengthBytes, send.data(), send.size());
  const py::object result = collectives_.attr("all_gather")(view(packed_.data(), block));
  const auto all = returned_bytes(result, block * static_cast<size_t>(size_), op);
  unpack(all.data(), block, recv, sizes, offsets, op);
}

void PythonCollectivesComm::all_gather_bytes(Context&, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                                             std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  // The largest payload first, so that every rank gathers blocks of one size.
  size_t largest = 0;
  for (uint64_t s : all_gather_u64(send.size())) largest = std::max<size_t>(largest, s);
  gather_blocks(send, largest + kLengthBytes, recv, sizes, offsets, "all_gather_bytes");
}

void PythonCollectivesComm::all_gather_streamed(Context&, std::span<const uint8_t> send,
                                                const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                                const Consume& consume) {
  QT_CHECK(recv_capacity.size() == static_cast<size_t>(size_), "all_gather_streamed: {} capacities for {} ranks",
           recv_capacity.size(), size_);
  // The exchange gives every rank the same capacities, so the largest is known everywhere.
  const size_t largest = *std::max_element(recv_capacity.begin(), recv_capacity.end());
  gather_blocks(send, largest + kLengthBytes, recv, stream_sizes_, stream_offsets_, "all_gather_streamed");
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<size_t>(r);
    QT_CHECK(stream_sizes_[i] <= recv_capacity[i], "all_gather_streamed: rank {} sent {} bytes, at most {} expected", r,
             stream_sizes_[i], recv_capacity[i]);
    consume(r, {recv.data() + stream_offsets_[i], stream_sizes_[i]});
  }
}

void PythonCollectivesComm::all_to_all_bytes(Context&, std::span<const uint8_t> send,
                                             const std::vector<size_t>& send_sizes,
                                             const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                                             std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) {
  const auto P = static_cast<size_t>(size_);
  QT_CHECK(send_sizes.size() == P && send_offsets.size() >= P, "all_to_all_bytes: {} sizes and {} offsets for {} ranks",
           send_sizes.size(), send_offsets.size(), P);
  size_t mine = 0;
  for (size_t d = 0; d < P; ++d) {
    QT_CHECK(send_offsets[d] + send_sizes[d] <= send.size(),
             "all_to_all_bytes: the block for rank {} lies outside "
             "the {} bytes to send",
             d, send.size());
    mine = std::max(mine, send_sizes[d]);
  }
  size_t largest = 0;
  for (uint64_t s : all_gather_u64(mine)) largest = std::max<size_t>(largest, s);
  const size_t block = largest + kLengthBytes;
  packed_.assign(block * P, 0);
  for (size_t d = 0; d < P; ++d) {
    put_length(packed_.data() + d * block, send_sizes[d]);
    if (send_sizes[d] > 0)
      std::memcpy(packed_.data() + d * block + kLengthBytes, send.data() + send_offsets[d], send_sizes[d]);
  }
  const py::object result = collectives_.attr("all_to_all")(view(packed_.data(), packed_.size()));
  const auto all = returned_bytes(result, packed_.size(), "all_to_all_bytes");
  unpack(all.data(), block, recv, recv_sizes, recv_offsets, "all_to_all_bytes");
}

void PythonCollectivesComm::broadcast_bytes(Context&, std::span<uint8_t> data, int root) {
  QT_CHECK(root >= 0 && root < size_, "broadcast_bytes: root {} of {} ranks", root, size_);
  collectives_.attr("broadcast")(view(data.data(), data.size()), root);
}

std::vector<uint64_t> PythonCollectivesComm::all_gather_u64(uint64_t value) {
  const py::object result = collectives_.attr("all_gather")(view(reinterpret_cast<uint8_t*>(&value), kLengthBytes));
  const auto all = returned_bytes(result, kLengthBytes * static_cast<size_t>(size_), "all_gather_u64");
  std::vector<uint64_t> out(static_cast<size_t>(size_));
  std::memcpy(out.data(), all.data(), out.size() * kLengthBytes);
  return out;
}

void PythonCollectivesComm::all_reduce_sum_f64(std::span<double> values) {
  collectives_.attr("all_reduce")(view(values.data(), values.size()));
}

void PythonCollectivesComm::barrier() { collectives_.attr("barrier")(); }

}  // namespace qtrain::python
