// MpiComm: Open MPI collectives on a duplicate of MPI_COMM_WORLD. Every entry checks its arguments,
// then maps the call onto host (or CUDA-aware) buffers: GPU data is copied to pinned memory on the
// context's stream, the stream is drained, MPI runs, and in-place results are copied back. Buffers
// larger than max_message_bytes() go in several MPI calls because MPI counts and displacements are
// int.
#include "comm/mpi_comm.h"
#include "comm/transport_check.h"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_CUDA_AWARE_SUPPORT and MPIX_Query_cuda_support()
#endif

#include <algorithm>
#include <climits>
#include <cstring>

#include "comm/transport_common.h"
#include "comm/watchdog.h"
#include "framework/core/check.h"
#include "framework/core/float16.h"

namespace qtrain {

using namespace comm_detail;

namespace {

// The 16-bit sums: inout[i] = round(float(in[i]) + float(inout[i])), with quant's conversions (one
// implementation of fp16/bf16 rounding in qtrain). fp32 has at least 2p + 2 bits for both formats,
// so the double rounding (fp32, then 16 bits) gives the correctly rounded 16-bit sum. Loads go
// through memcpy because MPI may hand over buffers without 2-byte alignment.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (size_t i = 0, n = static_cast<size_t>(*len); i < n; ++i) {
    uint16_t x, y;
    std::memcpy(&x, a + 2 * i, 2);
    std::memcpy(&y, b + 2 * i, 2);
    const uint16_t sum = FromFloat(ToFloat(x) + ToFloat(y));
    std::memcpy(b + 2 * i, &sum, 2);
  }
}

void sum_f16(void* in, void* inout, int* len, MPI_Datatype* type) {
  sum_16bit<half_to_float, float_to_half>(in, inout, len, type);
}

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype* type) {
  sum_16bit<bf16_to_float, float_to_bf16>(in, inout, len, type);
}

bool mpi_is_cuda_aware() {
#if QTRAIN_HAS_CUDA && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  // Compiled with CUDA support; the library may still have it switched off at run time.
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// One tag for every point-to-point piece: messages between a pair on one communicator match in
// posting order (MPI's non-overtaking rule), which is the order of the pieces.
constexpr int kPieceTag = 0;
constexpr int kStreamTag = 0x5354;            // the streaming forms' messages
constexpr int kPointToPointTagBase = 0x6000;  // post_send / post_recv tags start here (below 32767)

}  // namespace

MpiComm::MpiComm(Device device) : device_(device) {
  int initialized = 0, finalized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  MPI_CHECK(MPI_Finalized(&finalized));
  QT_CHECK(initialized && !finalized, "MpiComm: MPI is not running; create an MpiRuntime first");
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  set_up();
}

MpiComm::MpiComm(MPI_Comm comm, const MpiComm& parent)
    : device_(parent.device_),
      comm_(comm),
      max_message_bytes_(parent.max_message_bytes_),
      ring_min_bytes_(parent.ring_min_bytes_),
      ring_segment_bytes_(parent.ring_segment_bytes_) {
  set_up();
}

void MpiComm::set_up() {
  // Errors come back to MPI_CHECK as codes instead of aborting the job (MpiRuntime sets this on
  // MPI_COMM_WORLD, but MPI may have been started by someone else).
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &half_type_));
  MPI_CHECK(MPI_Type_commit(&half_type_));
  MPI_CHECK(MPI_Op_create(&sum_f16, /*commute=*/1, &f16_sum_));
  MPI_CHECK(MPI_Op_create(&sum_bf16, /*commute=*/1, &bf16_sum_));
  cuda_aware_ = mpi_is_cuda_aware();
}

MpiComm::~MpiComm() {
  int finalized = 1;
  // After MPI_Finalize every MPI call is erroneous, and MPI has released these objects itself.
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  // Teardown errors are not actionable. MPI_Comm_free marks the communicator for deallocation and
  // Open MPI does not wait for the other ranks there, so a rank unwinding from an error cannot hang.
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (f16_sum_ != MPI_OP_NULL) MPI_Op_free(&f16_sum_);
  if (half_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_type_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiComm::set_max_message_bytes(size_t bytes) {
  QT_CHECK(bytes >= 1 && bytes <= static_cast<size_t>(INT_MAX),
           "set_max_message_bytes: {} is outside 1 .. {} (MPI counts are int)", bytes, INT_MAX);
  max_message_bytes_ = bytes;
}

// ---- staging ---------------------------------------------------------------------------------------

const uint8_t* MpiComm::send_view(Context& ctx, Device where, const uint8_t* data, size_t bytes) {
  if (where.is_cpu()) return data;
  if (cuda_aware_) {
    ctx.synchronize();  // MPI reads device memory directly, so the kernels writing it must be done
    return data;
  }
  uint8_t* host = stage_.reserve(bytes);
  copy_async(ctx, host, data, bytes);
  ctx.synchronize();
  return host;
}

// ---- collectives -------------------------------------------------------------------------------------

void MpiComm::all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) {
  const char* op = "all_reduce_sum";
  CommWatch watch(op);
  check_reduce_args(op, data, count, type);
  const size_t element = reduce_type_size(type);
  const size_t bytes = static_cast<size_t>(count) * element;
  const Device where = buffer_location(op, "data", data, bytes, ctx);
  if (count == 0) return;
  if (where.is_cpu()) return reduce_host(data, static_cast<size_t>(count), type);

  // GPU buffers are staged even with a CUDA-aware MPI, because the 16-bit operations run on the
  // host. Pieces of one message each keep the pinned buffer bounded.
  const size_t piece = std::max(element, max_message_bytes_ / element * element);
  uint8_t* host = stage_.reserve(std::min(bytes, piece));
  auto* device_data = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < bytes; done += piece) {
    const size_t n = std::min(piece, bytes - done);
    copy_async(ctx, host, device_data + done, n);
    // Also completes the previous piece's copy back (same stream) before MPI overwrites `host`.
    ctx.synchronize();
    reduce_host(host, n / element, type);
    copy_async(ctx, device_data + done, host, n);
  }
  ctx.synchronize();
}

void MpiComm::set_ring(size_t min_bytes, size_t segment_bytes) {
  QT_CHECK(segment_bytes >= 1 && segment_bytes <= static_cast<size_t>(INT_MAX),
           "set_ring: a segment of {} bytes is outside 1 .. {} (MPI counts are int)", segment_bytes, INT_MAX);
  ring_min_bytes_ = min_bytes;
  ring_segment_bytes_ = segment_bytes;
}

void MpiComm::reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  const char* op = "reduce_scatter_sum";
  CommWatch watch(op);
  const size_t element = reduce_type_size(type);
  const size_t bytes = static_cast<size_t>(reduce_scatter_total(op, counts)) * element;
  const size_t segment = std::min(ring_segment_bytes_, max_message_bytes_);
  if (buffer_location(op, "data", data, bytes, ctx).is_cpu())
    return ring_reduce_scatter(comm_, data, counts, type, segment, ring_scratch_);
  // A GPU buffer goes through pinned host memory, as all_reduce_sum's (the 16-bit sums run on the
  // host), whole: the ring moves every block. Only this rank's block, the one defined, comes back.
  uint8_t* host = stage_.reserve(bytes);
  copy_async(ctx, host, data, bytes);
  ctx.synchronize();
  ring_reduce_scatter(comm_, host, counts, type, segment, ring_scratch_);
  const size_t mine_at = static_cast<size_t>(block_begin(counts, rank_)) * element;
  copy_async(ctx, static_cast<uint8_t*>(data) + mine_at, host + mine_at,
             static_cast<size_t>(counts[static_cast<size_t>(rank_)]) * element);
  ctx.synchronize();
}

void MpiComm::all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  const char* op = "all_gather_blocks";
  CommWatch watch(op);
  const size_t element = reduce_type_size(type);
  const size_t bytes = static_cast<size_t>(reduce_scatter_total(op, counts)) * element;
  const size_t segment = std::min(ring_segment_bytes_, max_message_bytes_);
  if (buffer_location(op, "data", data, bytes, ctx).is_cpu())
    return ring_all_gather(comm_, data, counts, type, segment, ring_scratch_);
  // A GPU buffer: this rank's block to pinned host memory, the ring there, every block back.
  uint8_t* host = stage_.reserve(bytes);
  const size_t mine_at = static_cast<size_t>(block_begin(counts, rank_)) * element;
  copy_async(ctx, host + mine_at, static_cast<const uint8_t*>(data) + mine_at,
             static_cast<size_t>(counts[static_cast<size_t>(rank_)]) * element);
  ctx.synchronize();
  ring_all_gather(comm_, host, counts, type, segment, ring_scratch_);
  copy_async(ctx, data, host, bytes);
  ctx.synchronize();
}

void MpiComm::reduce_host(void* data, size_t count, ReduceType type) {
  const size_t element = reduce_type_size(type);
  if (ring_min_bytes_ > 0 && count * element >= ring_min_bytes_ && size_ > 1)
    return ring_allreduce(comm_, data, count, type, std::min(ring_segment_bytes_, max_message_bytes_), ring_scratch_);
  MPI_Datatype datatype = MPI_FLOAT;
  MPI_Op sum = MPI_SUM;
  switch (type) {
    case ReduceType::f32: datatype = MPI_FLOAT; break;
    case ReduceType::f64: datatype = MPI_DOUBLE; break;
    case ReduceType::f16:
      datatype = half_type_;
      sum = f16_sum_;
      break;
    case ReduceType::bf16:
      datatype = half_type_;
      sum = bf16_sum_;
      break;
  }
  const size_t per_call = std::max<size_t>(1, max_message_bytes_ / element);
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < count; done += per_call) {
    const size_t n = std::min(per_call, count - done);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + done * element, static_cast<int>(n), datatype, sum, comm_));
  }
}

void MpiComm::all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                               std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  const char* op = "all_gather_bytes";
  CommWatch watch(op);
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  check_send_outside(op, send, recv);

  const std::vector<uint64_t> all = all_gather_u64(send.size());
  sizes.assign(all.begin(), all.end());
  const size_t total = exclusive_offsets(sizes, offsets);
  recv.resize(total);
  if (total == 0) return;  // the same decision on every rank: the total is global
  gather_host(send_view(ctx, where, send.data(), send.size()), sizes, offsets, total, recv.data());
}

void MpiComm::gather_host(const uint8_t* send, const std::vector<size_t>& sizes, const std::vector<size_t>& offsets,
                          size_t total, uint8_t* recv) {
  // The output is cut into windows of max_message_bytes_; in each window every rank contributes the
  // part of its block that falls inside it (often nothing), so counts and displacements relative to
  // the window's start always fit an int.
  const auto ranks = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  counts_.resize(ranks);
  displs_.resize(ranks);
  for (size_t window = 0; window < total; window += max_message_bytes_) {
    const size_t end = std::min(total, window + max_message_bytes_);
    for (size_t r = 0; r < ranks; ++r) {
      const size_t lo = std::max(offsets[r], window);
      const size_t hi = std::min(offsets[r] + sizes[r], end);
      counts_[r] = hi > lo ? static_cast<int>(hi - lo) : 0;
      displs_[r] = hi > lo ? static_cast<int>(lo - window) : 0;
    }
    const uint8_t* mine = counts_[me] > 0 ? send + (std::max(offsets[me], window) - offsets[me]) : send;
    MPI_CHECK(
        MPI_Allgatherv(mine, counts_[me], MPI_BYTE, recv + window, counts_.data(), displs_.data(), MPI_BYTE, comm_));
  }
}

void MpiComm::all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                               const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                               std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) {
  const char* op = "all_to_all_bytes";
  CommWatch watch(op);
  check_all_to_all_args(op, send.size(), send_sizes, send_offsets, size_);
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  check_send_outside(op, send, recv);

  // Every rank sends each peer (its block size, whether its blocks need splitting). All flags reach
  // every rank, so all take the same path. Without a flag, every displacement and count fits an int:
  // a rank receives at most size_ blocks of max_message_bytes_ / size_ bytes.
  const auto ranks = static_cast<size_t>(size_);
  const size_t per_peer = max_message_bytes_ / ranks;
  bool split = false;
  for (size_t d = 0; d < ranks; ++d)
    split = split || send_sizes[d] > per_peer || send_offsets[d] + send_sizes[d] > max_message_bytes_;
  std::vector<uint64_t> announce(2 * ranks), heard(2 * ranks);
  for (size_t d = 0; d < ranks; ++d) {
    announce[2 * d] = send_sizes[d];
    announce[2 * d + 1] = split ? 1 : 0;
  }
  MPI_CHECK(MPI_Alltoall(announce.data(), 2, MPI_UINT64_T, heard.data(), 2, MPI_UINT64_T, comm_));
  recv_sizes.resize(ranks);
  bool any_split = false;
  for (size_t s = 0; s < ranks; ++s) {
    recv_sizes[s] = heard[2 * s];
    any_split = any_split || heard[2 * s + 1] != 0;
  }
  recv.resize(exclusive_offsets(recv_sizes, recv_offsets));
  exchange_host(send_view(ctx, where, send.data(), send.size()), send_sizes, send_offsets, recv.data(), recv_sizes,
                recv_offsets, any_split);
}

void MpiComm::exchange_host(const uint8_t* send, const std::vector<size_t>& send_sizes,
                            const std::vector<size_t>& send_offsets, uint8_t* recv,
                            const std::vector<size_t>& recv_sizes, const std::vector<size_t>& recv_offsets,
                            bool point_to_point) {
  const auto ranks = static_cast<size_t>(size_);
  if (!point_to_point) {
    counts_.resize(ranks);
    displs_.resize(ranks);
    recv_counts_.resize(ranks);
    recv_displs_.resize(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      counts_[r] = static_cast<int>(send_sizes[r]);
      displs_[r] = static_cast<int>(send_offsets[r]);
      recv_counts_[r] = static_cast<int>(recv_sizes[r]);
      recv_displs_[r] = static_cast<int>(recv_offsets[r]);
    }
    MPI_CHECK(MPI_Alltoallv(send, counts_.data(), displs_.data(), MPI_BYTE, recv, recv_counts_.data(),
                            recv_displs_.data(), MPI_BYTE, comm_));
    return;
  }
  // Split path: nonblocking messages of at most max_message_bytes_, addressed by pointer, so no
  // displacement has to fit an int. Self-messages are legal and keep the code uniform.
  requests_.clear();
  for (size_t s = 0; s < ranks; ++s) {
    for (size_t done = 0; done < recv_sizes[s]; done += max_message_bytes_) {
      const size_t n = std::min(max_message_bytes_, recv_sizes[s] - done);
      MPI_Request& request = requests_.emplace_back(MPI_REQUEST_NULL);
      MPI_CHECK(MPI_Irecv(recv + recv_offsets[s] + done, static_cast<int>(n), MPI_BYTE, static_cast<int>(s), kPieceTag,
                          comm_, &request));
    }
  }
  for (size_t d = 0; d < ranks; ++d) {
    for (size_t done = 0; done < send_sizes[d]; done += max_message_bytes_) {
      const size_t n = std::min(max_message_bytes_, send_sizes[d] - done);
      MPI_Request& request = requests_.emplace_back(MPI_REQUEST_NULL);
      MPI_CHECK(MPI_Isend(send + send_offsets[d] + done, static_cast<int>(n), MPI_BYTE, static_cast<int>(d), kPieceTag,
                          comm_, &request));
    }
  }
  MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
}

// ---- streaming forms: nonblocking point-to-point messages -------------------------------------------

bool MpiComm::streamable(const std::vector<size_t>& recv_capacity) {
  QT_CHECK(recv_capacity.size() == static_cast<size_t>(size_), "{} receive capacities for {} ranks",
           recv_capacity.size(), size_);
  int fits = 1;
  for (size_t c : recv_capacity) fits = fits && c <= max_message_bytes_;
  int all_fit = 0;
  MPI_CHECK(MPI_Allreduce(&fits, &all_fit, 1, MPI_INT, MPI_LAND, comm_));
  return all_fit != 0;
}

size_t MpiComm::received_bytes(int rc, const MPI_Status& status, int peer) {
  if (rc != MPI_SUCCESS) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      input_error("MpiComm: rank {} sent more bytes than this rank expects at most from it (a malformed exchange)",
                  peer);
    MPI_CHECK(rc);
  }
  int count = 0;
  MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
  return static_cast<size_t>(count);
}

size_t MpiComm::wait_stream(int s) {
  CommWatch watch("a streamed message");
  watch.waiting_for(s);
  MPI_Status status;
  const int rc = MPI_Wait(&requests_[static_cast<size_t>(s)], &status);
  watch.progress();
  return received_bytes(rc, status, s);
}

// ---- point-to-point messages ---------------------------------------------------------------------

MPI_Request& MpiComm::new_request(const char* op, size_t bytes, int peer, int tag) {
  QT_CHECK(tag >= 0 && tag < kMaxPointToPointTag, "{}: tag {} out of range", op, tag);
  QT_CHECK(bytes <= max_message_bytes_, "{}: {} bytes exceed one message", op, bytes);
  p2p_peers_.push_back(peer);
  return p2p_requests_.emplace_back(MPI_REQUEST_NULL);
}

int MpiComm::post_send(std::span<const uint8_t> bytes, int dest, int tag) {
  MPI_Request& r = new_request("post_send", bytes.size(), dest, tag);
  MPI_CHECK(
      MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, kPointToPointTagBase + tag, comm_, &r));
  return static_cast<int>(p2p_requests_.size()) - 1;
}

int MpiComm::post_recv(std::span<uint8_t> buffer, int src, int tag) {
  MPI_Request& r = new_request("post_recv", buffer.size(), src, tag);
  MPI_CHECK(
      MPI_Irecv(buffer.data(), static_cast<int>(buffer.size()), MPI_BYTE, src, kPointToPointTagBase + tag, comm_, &r));
  return static_cast<int>(p2p_requests_.size()) - 1;
}

bool MpiComm::test(int request, size_t* received) {
  QT_CHECK(request >= 0 && static_cast<size_t>(request) < p2p_requests_.size(), "test: no request {}", request);
  MPI_Status status;
  int done = 0;
  const int rc = MPI_Test(&p2p_requests_[static_cast<size_t>(request)], &done, &status);
  if (rc == MPI_SUCCESS && !done) return false;
  const size_t n = received_bytes(rc, status, p2p_peers_[static_cast<size_t>(request)]);
  if (received) *received = n;
  return true;
}

int MpiComm::wait_any(const std::vector<int>& among, size_t* received) {
  QT_CHECK(!among.empty(), "wait_any: no requests");
  std::vector<MPI_Request> pending;  // MPI_Waitany takes an array; the completed one becomes NULL
  pending.reserve(among.size());
  for (int r : among) {
    QT_CHECK(r >= 0 && static_cast<size_t>(r) < p2p_requests_.size(), "wait_any: no request {}", r);
    pending.push_back(p2p_requests_[static_cast<size_t>(r)]);
  }
  // The watchdog names the peer when every awaited message comes from the same one.
  CommWatch watch("wait_any");
  int peer = p2p_peers_[static_cast<size_t>(among[0])];
  for (int r : among)
    if (p2p_peers_[static_cast<size_t>(r)] != peer) peer = -1;
  watch.waiting_for(peer);
  int index = MPI_UNDEFINED;
  MPI_Status status;
  const int rc = MPI_Waitany(static_cast<int>(pending.size()), pending.data(), &index, &status);
  if (index == MPI_UNDEFINED) {
    MPI_CHECK(rc);
    QT_FAIL("wait_any: every request had completed already");
  }
  const int r = among[static_cast<size_t>(index)];
  p2p_requests_[static_cast<size_t>(r)] = pending[static_cast<size_t>(index)];
  const size_t n = received_bytes(rc, status, p2p_peers_[static_cast<size_t>(r)]);
  if (received) *received = n;
  return r;
}

void MpiComm::complete_all() {
  CommWatch watch("complete_all");
  MPI_CHECK(MPI_Waitall(static_cast<int>(p2p_requests_.size()), p2p_requests_.data(), MPI_STATUSES_IGNORE));
  p2p_requests_.clear();
  p2p_peers_.clear();
}

void MpiComm::all_to_all_streamed(Context& ctx, const Produce& produce, const std::vector<size_t>& send_capacity,
                                  const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                                  const Consume& consume) {
  CommWatch watch("all_to_all_streamed");
  if (!streamable(recv_capacity))
    return Communicator::all_to_all_streamed(ctx, produce, send_capacity, recv_capacity, recv, consume);
  QT_CHECK(send_capacity.size() == static_cast<size_t>(size_), "all_to_all_streamed: {} send capacities for {} ranks",
           send_capacity.size(), size_);
  const auto P = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  recv.resize(exclusive_offsets(recv_capacity, stream_recv_offsets_));
  stream_recv_sizes_.assign(P, 0);
  requests_.assign(2 * P, MPI_REQUEST_NULL);  // receives from s at [s], sends to d at [P + d]
  for (size_t s = 0; s < P; ++s)
    if (s != me)
      MPI_CHECK(MPI_Irecv(recv.data() + stream_recv_offsets_[s], static_cast<int>(recv_capacity[s]), MPI_BYTE,
                          static_cast<int>(s), kStreamTag, comm_, &requests_[s]));
  for (size_t k = 1; k <= P; ++k) {
    const size_t d = (me + k) % P;
    const std::span<const uint8_t> bytes = produce(static_cast<int>(d));
    if (d == me) {
      if (bytes.size() > recv_capacity[me])
        input_error("all_to_all_streamed: this rank produced {} bytes for itself, more than its capacity {}",
                    bytes.size(), recv_capacity[me]);
      if (!bytes.empty()) std::memcpy(recv.data() + stream_recv_offsets_[me], bytes.data(), bytes.size());
      stream_recv_sizes_[me] = bytes.size();
    } else {
      QT_CHECK(bytes.size() <= max_message_bytes_ && bytes.size() <= send_capacity[d],
               "all_to_all_streamed: {} bytes for rank {} exceed one message ({}) or its capacity ({})", bytes.size(),
               d, max_message_bytes_, send_capacity[d]);
      MPI_CHECK(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, static_cast<int>(d), kStreamTag,
                          comm_, &requests_[P + d]));
    }
  }
  for (size_t s = 0; s < P; ++s) {
    if (s != me) stream_recv_sizes_[s] = wait_stream(static_cast<int>(s));
    consume(static_cast<int>(s), {recv.data() + stream_recv_offsets_[s], stream_recv_sizes_[s]});
  }
  MPI_CHECK(MPI_Waitall(static_cast<int>(P), requests_.data() + P, MPI_STATUSES_IGNORE));
}

void MpiComm::all_gather_streamed(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& recv_capacity,
                                  std::vector<uint8_t>& recv, const Consume& consume) {
  CommWatch watch("all_gather_streamed");
  if (!streamable(recv_capacity)) return Communicator::all_gather_streamed(ctx, send, recv_capacity, recv, consume);
  const auto P = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  check_send_outside("all_gather_streamed", send, recv);
  QT_CHECK(send.size() <= max_message_bytes_, "all_gather_streamed: {} bytes exceed one message", send.size());
  if (send.size() > recv_capacity[me])
    input_error("all_gather_streamed: this rank sends {} bytes, more than its capacity {}", send.size(),
                recv_capacity[me]);
  recv.resize(exclusive_offsets(recv_capacity, stream_recv_offsets_));
  stream_recv_sizes_.assign(P, 0);
  requests_.assign(2 * P, MPI_REQUEST_NULL);
  for (size_t s = 0; s < P; ++s)
    if (s != me)
      MPI_CHECK(MPI_Irecv(recv.data() + stream_recv_offsets_[s], static_cast<int>(recv_capacity[s]), MPI_BYTE,
                          static_cast<int>(s), kStreamTag, comm_, &requests_[s]));
  for (size_t k = 1; k < P; ++k) {
    const size_t d = (me + k) % P;
    MPI_CHECK(MPI_Isend(send.data(), static_cast<int>(send.size()), MPI_BYTE, static_cast<int>(d), kStreamTag, comm_,
                        &requests_[P + d]));
  }
  if (!send.empty()) std::memcpy(recv.data() + stream_recv_offsets_[me], send.data(), send.size());
  stream_recv_sizes_[me] = send.size();
  for (size_t s = 0; s < P; ++s) {
    if (s != me) stream_recv_sizes_[s] = wait_stream(static_cast<int>(s));
    consume(static_cast<int>(s), {recv.data() + stream_recv_offsets_[s], stream_recv_sizes_[s]});
  }
  MPI_CHECK(MPI_Waitall(static_cast<int>(P), requests_.data() + P, MPI_STATUSES_IGNORE));
}

void MpiComm::broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) {
  const char* op = "broadcast_bytes";
  CommWatch watch(op);
  watch.waiting_for(root);
  check_root(op, root, size_);
  const Device where = buffer_location(op, "data", data.data(), data.size(), ctx);
  if (data.empty()) return;
  if (where.is_cpu() || cuda_aware_) {
    if (where.is_cuda()) ctx.synchronize();  // MPI touches device memory the stream may still use
    return broadcast_host(data.data(), data.size(), root);
  }
  uint8_t* host = stage_.reserve(data.size());
  if (rank_ == root) {
    copy_async(ctx, host, data.data(), data.size());
    ctx.synchronize();
  }
  broadcast_host(host, data.size(), root);
  if (rank_ != root) {
    copy_async(ctx, data.data(), host, data.size());
    ctx.synchronize();  // the result is in place when the call returns, and `host` is reused
  }
}

void MpiComm::broadcast_host(uint8_t* data, size_t bytes, int root) {
  for (size_t done = 0; done < bytes; done += max_message_bytes_) {
    const size_t n = std::min(max_message_bytes_, bytes - done);
    MPI_CHECK(MPI_Bcast(data + done, static_cast<int>(n), MPI_BYTE, root, comm_));
  }
}

// ---- host helpers ------------------------------------------------------------------------------------

std::vector<uint64_t> MpiComm::all_gather_u64(uint64_t value) {
  CommWatch watch("all_gather_u64");
  std::vector<uint64_t> values(static_cast<size_t>(size_));
  MPI_CHECK(MPI_Allgather(&value, 1, MPI_UINT64_T, values.data(), 1, MPI_UINT64_T, comm_));
  return values;
}

std::vector<uint64_t> MpiComm::all_to_all_u64(const std::vector<uint64_t>& values) {
  CommWatch watch("all_to_all_u64");
  QT_CHECK(values.size() == static_cast<size_t>(size_), "all_to_all_u64: {} values, expected one per rank ({})",
           values.size(), size_);
  std::vector<uint64_t> received(values.size());
  MPI_CHECK(MPI_Alltoall(values.data(), 1, MPI_UINT64_T, received.data(), 1, MPI_UINT64_T, comm_));
  return received;
}

void MpiComm::all_reduce_sum_f64(std::span<double> values) {
  CommWatch watch("all_reduce_sum_f64");
  if (!values.empty()) reduce_host(values.data(), values.size(), ReduceType::f64);
}

int MpiComm::node_color() {
  CommWatch watch("node_color");
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int lowest = rank_;
  const int rc = MPI_Allreduce(&rank_, &lowest, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  MPI_CHECK(rc);
  return lowest;
}

std::unique_ptr<Communicator> MpiComm::split(int color, int key) {
  CommWatch watch("split");
  MPI_Comm part = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
  return std::unique_ptr<Communicator>(new MpiComm(part, *this));
}

void MpiComm::barrier() {
  CommWatch watch("barrier");
  MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace qtrain
