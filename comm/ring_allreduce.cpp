// The ring allreduce: chunk bounds, the two phases, and the element-wise sums.
#include "comm/ring_allreduce.h"
#include "comm/transport_check.h"

#include <algorithm>
#include <cstring>

#include "comm/watchdog.h"
#include "framework/core/check.h"
#include "framework/core/float16.h"

namespace qtrain {
namespace {

constexpr int kReduceScatterTag = 0x5249;  // distinct from every other message on the communicator
constexpr int kAllgatherTag = 0x5247;

// out[i] += in[i] for n elements of `type`. Pointers may be unaligned for the 16-bit types only in
// theory (chunks start at element boundaries of an element-aligned buffer), so plain loads are used.
void add_into(uint8_t* out, const uint8_t* in, size_t n, ReduceType type) {
  switch (type) {
    case ReduceType::f32: {
      auto* o = reinterpret_cast<float*>(out);
      const auto* a = reinterpret_cast<const float*>(in);
      for (size_t i = 0; i < n; ++i) o[i] += a[i];
      return;
    }
    case ReduceType::f64: {
      auto* o = reinterpret_cast<double*>(out);
      const auto* a = reinterpret_cast<const double*>(in);
      for (size_t i = 0; i < n; ++i) o[i] += a[i];
      return;
    }
    case ReduceType::f16:
    case ReduceType::bf16: {
      const bool bf16 = type == ReduceType::bf16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t x, y;
        std::memcpy(&x, in + 2 * i, 2);
        std::memcpy(&y, out + 2 * i, 2);
        const uint16_t sum = bf16 ? float_to_bf16(bf16_to_float(x) + bf16_to_float(y))
                                  : float_to_half(half_to_float(x) + half_to_float(y));
        std::memcpy(out + 2 * i, &sum, 2);
      }
      return;
    }
  }
}

}  // namespace

namespace {

// The two phases over chunks given by their element ranges, chunk c = [begin[c], begin[c] + length[c]).
// After the reduce-scatter rank r holds the complete sum of chunk (r + 1) mod P; the allgather then
// passes the finished chunks around the ring. `reduce` false skips the reduce-scatter (each rank
// already holds its chunk), `allgather` false stops after it.
void ring_phases(MPI_Comm comm, int rank, int size, uint8_t* bytes, const std::vector<size_t>& begin,
                 const std::vector<size_t>& length, ReduceType type, size_t segment_bytes, RingScratch& scratch,
                 bool reduce_phase, bool allgather) {
  const size_t element = reduce_type_size(type);
  const size_t seg = std::max<size_t>(1, std::min(segment_bytes, size_t{1} << 30) / element);  // elements
  const auto P = static_cast<size_t>(size);
  const auto me = static_cast<size_t>(rank);
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto chunk_of = [&](size_t shift) { return (me + P - shift % P) % P; };  // (me - shift) mod P

  scratch.incoming.resize(*std::max_element(length.begin(), length.end()) * element);
  CommWatch watch("ring allreduce");
  watch.waiting_for(left);
  for (int phase = reduce_phase ? 0 : 1; phase < (allgather ? 2 : 1); ++phase) {
    const bool reduce = phase == 0;
    const int tag = reduce ? kReduceScatterTag : kAllgatherTag;
    for (size_t step = 0; step + 1 < P; ++step) {
      // Reduce-scatter sends chunk (me - step) and receives (me - step - 1); the allgather sends the
      // finished chunk (me + 1 - step) and receives (me - step) directly into place.
      const size_t send_chunk = reduce ? chunk_of(step) : chunk_of(step + P - 1);
      const size_t recv_chunk = reduce ? chunk_of(step + 1) : chunk_of(step);
      uint8_t* recv_base = reduce ? scratch.incoming.data() : bytes + begin[recv_chunk] * element;
      const size_t recv_n = length[recv_chunk], send_n = length[send_chunk];
      scratch.requests.clear();
      for (size_t at = 0; at < recv_n; at += seg) {
        MPI_Request& r = scratch.requests.emplace_back(MPI_REQUEST_NULL);
        MPI_CHECK(MPI_Irecv(recv_base + at * element, static_cast<int>(std::min(seg, recv_n - at) * element), MPI_BYTE,
                            left, tag, comm, &r));
      }
      const size_t receives = scratch.requests.size();
      for (size_t at = 0; at < send_n; at += seg) {
        MPI_Request& r = scratch.requests.emplace_back(MPI_REQUEST_NULL);
        MPI_CHECK(MPI_Isend(bytes + (begin[send_chunk] + at) * element,
                            static_cast<int>(std::min(seg, send_n - at) * element), MPI_BYTE, right, tag, comm, &r));
      }
      // Segments arrive in order (MPI's non-overtaking rule on one tag): add each as it lands while
      // the next ones are still on the wire.
      for (size_t k = 0; k < receives; ++k) {
        MPI_CHECK(MPI_Wait(&scratch.requests[k], MPI_STATUS_IGNORE));
        watch.progress();
        if (!reduce) continue;
        const size_t at = k * seg;
        add_into(bytes + (begin[recv_chunk] + at) * element, recv_base + at * element, std::min(seg, recv_n - at),
                 type);
      }
      MPI_CHECK(MPI_Waitall(static_cast<int>(scratch.requests.size() - receives), scratch.requests.data() + receives,
                            MPI_STATUSES_IGNORE));
    }
  }
}

}  // namespace

void ring_allreduce(MPI_Comm comm, void* data, size_t count, ReduceType type, size_t segment_bytes,
                    RingScratch& scratch) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size == 1 || count == 0) return;
  const auto P = static_cast<size_t>(size);
  std::vector<size_t>& begin = scratch.begin;
  std::vector<size_t>& length = scratch.length;
  begin.resize(P);
  length.resize(P);
  for (size_t c = 0; c < P; ++c) {  // P equal chunks
    begin[c] = count * c / P;
    length[c] = count * (c + 1) / P - begin[c];
  }
  ring_phases(comm, rank, size, static_cast<uint8_t*>(data), begin, length, type, segment_bytes, scratch, true, true);
}

namespace {

// Blocks of unequal sizes as ring chunks: the reduce-scatter phase leaves rank r with ring chunk
// (r + 1) mod P, so ring chunk c is block (c - 1) mod P. False when the blocks hold nothing.
bool blocks_as_chunks(std::span<const int64_t> counts, size_t P, RingScratch& scratch) {
  std::vector<size_t> offset(P + 1, 0);
  for (size_t r = 0; r < P; ++r) offset[r + 1] = offset[r] + static_cast<size_t>(counts[r]);
  if (offset[P] == 0) return false;
  scratch.begin.resize(P);
  scratch.length.resize(P);
  for (size_t c = 0; c < P; ++c) {
    const size_t block = (c + P - 1) % P;
    scratch.begin[c] = offset[block];
    scratch.length[c] = offset[block + 1] - offset[block];
  }
  return true;
}

void ring_blocks(const char* op, MPI_Comm comm, void* data, std::span<const int64_t> counts, ReduceType type,
                 size_t segment_bytes, RingScratch& scratch, bool reduce) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const auto P = static_cast<size_t>(size);
  QT_CHECK(counts.size() == P, "{}: {} counts for {} ranks", op, counts.size(), P);
  if (size == 1 || !blocks_as_chunks(counts, P, scratch)) return;
  ring_phases(comm, rank, size, static_cast<uint8_t*>(data), scratch.begin, scratch.length, type, segment_bytes,
              scratch, reduce, !reduce);
}

}  // namespace

void ring_reduce_scatter(MPI_Comm comm, void* data, std::span<const int64_t> counts, ReduceType type,
                         size_t segment_bytes, RingScratch& scratch) {
  ring_blocks("ring_reduce_scatter", comm, data, counts, type, segment_bytes, scratch, true);
}

void ring_all_gather(MPI_Comm comm, void* data, std::span<const int64_t> counts, ReduceType type, size_t segment_bytes,
                     RingScratch& scratch) {
  ring_blocks("ring_all_gather", comm, data, counts, type, segment_bytes, scratch, false);
}

}  // namespace qtrain
