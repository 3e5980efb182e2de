// The shared entry checks of the transports, prefix offsets, and reduce_type_name/size of
// communicator.h.
#include "comm/transport_common.h"

#include <functional>

#include "framework/core/check.h"

namespace qtrain {

const char* reduce_type_name(ReduceType type) {
  switch (type) {
    case ReduceType::f32: return "f32";
    case ReduceType::f16: return "f16";
    case ReduceType::bf16: return "bf16";
    case ReduceType::f64: return "f64";
  }
  return "?";
}

size_t reduce_type_size(ReduceType type) {
  switch (type) {
    case ReduceType::f32: return 4;
    case ReduceType::f16: return 2;
    case ReduceType::bf16: return 2;
    case ReduceType::f64: return 8;
  }
  return 0;
}

namespace comm_detail {

void check_reduce_args(const char* op, const void* data, int64_t count, ReduceType type) {
  QT_CHECK(reduce_type_size(type) != 0, "{}: unknown reduce type {}", op, static_cast<int>(type));
  QT_CHECK(count >= 0, "{}: count must be >= 0, got {}", op, count);
  QT_CHECK(count == 0 || data != nullptr, "{}: data is null for {} {} elements", op, count, reduce_type_name(type));
}

void check_root(const char* op, int root, int world) {
  QT_CHECK(root >= 0 && root < world, "{}: root {} is not a rank of this world of {}", op, root, world);
}

void check_all_to_all_args(const char* op, size_t send_bytes, const std::vector<size_t>& send_sizes,
                           const std::vector<size_t>& send_offsets, int world) {
  const auto ranks = static_cast<size_t>(world);
  QT_CHECK(send_sizes.size() == ranks, "{}: send_sizes has {} entries, expected one per rank ({})", op,
           send_sizes.size(), ranks);
  QT_CHECK(send_offsets.size() == ranks, "{}: send_offsets has {} entries, expected one per rank ({})", op,
           send_offsets.size(), ranks);
  for (size_t d = 0; d < ranks; ++d) {
    // Written as two comparisons so that a huge size cannot wrap offset + size around.
    QT_CHECK(send_offsets[d] <= send_bytes && send_sizes[d] <= send_bytes - send_offsets[d],
             "{}: the block for rank {} ({} bytes at offset {}) exceeds the send buffer of {} bytes", op, d,
             send_sizes[d], send_offsets[d], send_bytes);
  }
}

void check_capacities(const char* op, const std::vector<size_t>& capacity, const std::vector<size_t>& sizes,
                      int world) {
  QT_CHECK(capacity.size() == static_cast<size_t>(world), "{}: {} receive capacities for {} ranks", op, capacity.size(),
           world);
  for (size_t s = 0; s < sizes.size(); ++s)
    if (sizes[s] > capacity[s])
      input_error("{}: rank {} sent {} bytes, more than the {} this rank expects at most", op, s, sizes[s],
                  capacity[s]);
}

size_t exclusive_offsets(const std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  offsets.resize(sizes.size());
  size_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    offsets[r] = total;
    total += sizes[r];
  }
  return total;
}

void check_send_outside(const char* op, std::span<const uint8_t> send, const std::vector<uint8_t>& recv) {
  if (send.empty() || recv.capacity() == 0) return;
  // std::less gives a total order even for pointers into different allocations.
  const std::less<const uint8_t*> before;
  const uint8_t* storage = recv.data();
  const bool outside = !before(send.data(), storage + recv.capacity()) || !before(storage, send.data() + send.size());
  QT_CHECK(outside, "{}: send ({} bytes) points into recv; pass separate buffers", op, send.size());
}

}  // namespace comm_detail
}  // namespace qtrain
