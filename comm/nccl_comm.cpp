// NcclComm: NCCL collectives on the context's stream. Sums map to ncclAllReduce; the byte collectives
// learn the sizes over MPI first, then move the data with one ncclAllGather (equal sizes) or a group
// of ncclSend/ncclRecv pairs that land every block at its offset in device scratch, from where it is
// copied into the caller's host vector. Host inputs are staged through device scratch. Compiled only
// with CUDA.
#include "comm/nccl_comm.h"
#include "comm/transport_check.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "comm/cuda_staging.h"
#include "comm/transport_common.h"
#include "comm/watchdog.h"
#include "framework/core/check.h"
#include "framework/core/cuda_context.h"

namespace qtrain {

using namespace comm_detail;

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_comm(Device device) { return std::make_unique<NcclComm>(device); }

namespace {

ncclDataType_t nccl_type(ReduceType type) {
  switch (type) {
    case ReduceType::f32: return ncclFloat32;
    case ReduceType::f16: return ncclFloat16;
    case ReduceType::bf16: return ncclBfloat16;
    case ReduceType::f64: return ncclFloat64;
  }
  return ncclFloat32;
}

// ncclGroupStart/End as a scope: if a call inside the group throws, the destructor still closes the
// group, so this thread's NCCL state is not left inside a half-built group.
class NcclGroup {
 public:
  NcclGroup() { NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();  // only while unwinding; the error already being reported matters more
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

// ctx's stream, after checking that the communicator is still usable and ctx is on its GPU.
cudaStream_t stream_of(const char* op, Context& ctx, Device device, ncclComm_t comm) {
  // NcclComm::wait aborts the communicator on an asynchronous error; NCCL would answer a later call
  // with only "invalid argument".
  QT_CHECK(comm != nullptr, "{}: the NCCL communicator was aborted after an earlier asynchronous error", op);
  QT_CHECK(ctx.device() == device, "{}: the context is on {}, but the NCCL communicator works on {}", op,
           ctx.device().str(), device.str());
  CUDA_CHECK(cudaSetDevice(device.index));
  return ctx.cuda().stream;
}

}  // namespace

NcclComm::NcclComm(Device device) : NcclComm(device, std::make_unique<MpiComm>(Device::cpu())) {}

NcclComm::NcclComm(Device device, std::unique_ptr<MpiComm> host)
    : host_(std::move(host)), device_(device), uncaught_at_construction_(std::uncaught_exceptions()) {
  QT_CHECK(device.is_cuda(), "NcclComm: needs this rank's GPU, got device {}", device.str());
  CUDA_CHECK(cudaSetDevice(device.index));
  // Rank 0 broadcasts its result with the id, so that a failure there is an error on every rank
  // instead of the others waiting in ncclCommInitRank forever.
  struct {
    ncclUniqueId id;
    int result;
  } boot{};
  if (host_->rank() == 0) boot.result = static_cast<int>(ncclGetUniqueId(&boot.id));
  MPI_CHECK(MPI_Bcast(&boot, static_cast<int>(sizeof boot), MPI_BYTE, 0, host_->mpi_comm()));
  QT_CHECK(boot.result == ncclSuccess, "NcclComm: rank 0 could not create the NCCL unique id: {}",
           detail::nccl_error_string(boot.result));
  NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), boot.id, host_->rank()));
}

std::unique_ptr<Communicator> NcclComm::split(int color, int key) {
  std::unique_ptr<Communicator> part = host_->split(color, key);
  QT_CHECK(dynamic_cast<MpiComm*>(part.get()) != nullptr,
           "NcclComm::split: the host split is a {} communicator, expected mpi", part->name());
  return std::make_unique<NcclComm>(device_, std::unique_ptr<MpiComm>(static_cast<MpiComm*>(part.release())));
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  cudaSetDevice(device_.index);  // teardown errors are not actionable
  if (std::uncaught_exceptions() > uncaught_at_construction_)
    ncclCommAbort(comm_);
  else
    ncclCommDestroy(comm_);
}

uint8_t* NcclComm::scratch(Tensor& buffer, size_t bytes) {
  // A quarter of slack so that slowly growing payloads do not reallocate (cudaMalloc) every step.
  if (!buffer.defined() || buffer.nbytes() < bytes)
    buffer = Tensor::empty({static_cast<int64_t>(bytes + bytes / 4)}, DType::u8, device_);
  return static_cast<uint8_t*>(buffer.raw());
}

void NcclComm::wait(void* stream, const char* op) {
  const auto s = static_cast<cudaStream_t>(stream);
  CommWatch watch(op);  // a silent peer leaves the stream busy without an asynchronous error
  for (int polls = 0;; ++polls) {
    const cudaError_t state = cudaStreamQuery(s);
    if (state == cudaSuccess) return;
    if (state != cudaErrorNotReady) CUDA_CHECK(state);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      // Aborting ends the communicator's queued kernels, so the stream can drain; the destructor
      // then has nothing left to tear down.
      ncclCommAbort(comm_);
      comm_ = nullptr;
      QT_FAIL("{}: NCCL reported an asynchronous error ({}): a peer failed or a link broke", op,
              detail::nccl_error_string(static_cast<int>(async)));
    }
    // Most collectives here end within microseconds: spin first, then sleep between polls so that a
    // long wait leaves the core to the rest of the rank.
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

const uint8_t* NcclComm::device_send(std::span<const uint8_t> send, Device where, void* stream) {
  if (where.is_cuda() || send.empty()) return send.data();
  uint8_t* copy = scratch(send_scratch_, send.size());
  CUDA_CHECK(
      cudaMemcpyAsync(copy, send.data(), send.size(), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
  return copy;
}

void NcclComm::all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) {
  const char* op = "all_reduce_sum";
  check_reduce_args(op, data, count, type);
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const size_t bytes = static_cast<size_t>(count) * reduce_type_size(type);
  const Device where = buffer_location(op, "data", data, bytes, ctx);
  if (count == 0) return;
  if (where.is_cuda()) {
    NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(count), nccl_type(type), ncclSum, comm_, stream));
    wait(stream, op);
    return;
  }
  // Host data: through device scratch, back in place before returning (the caller reads it on the host).
  uint8_t* dev = scratch(send_scratch_, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream));
  NCCL_CHECK(ncclAllReduce(dev, dev, static_cast<size_t>(count), nccl_type(type), ncclSum, comm_, stream));
  CUDA_CHECK(cudaMemcpyAsync(data, dev, bytes, cudaMemcpyDeviceToHost, stream));
  wait(stream, op);
}

const uint8_t* NcclComm::all_gather_to_scratch(const char* op, Context& ctx, std::span<const uint8_t> send,
                                               std::vector<size_t>& sizes, std::vector<size_t>& offsets,
                                               bool sizes_given) {
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  if (sizes_given) {
    QT_CHECK(sizes.size() == static_cast<size_t>(size()) && sizes[static_cast<size_t>(rank())] == send.size(),
             "{}: the given sizes ({} of them) must hold this rank's {} bytes at index {}", op, sizes.size(),
             send.size(), rank());
  } else {
    const std::vector<uint64_t> all = host_->all_gather_u64(send.size());
    sizes.assign(all.begin(), all.end());
  }
  const size_t total = exclusive_offsets(sizes, offsets);
  if (total == 0) return nullptr;  // the same decision on every rank: the total is global
  const uint8_t* in = device_send(send, where, stream);
  uint8_t* out = scratch(recv_scratch_, total);
  if (std::all_of(sizes.begin(), sizes.end(), [&](size_t s) { return s == sizes[0]; })) {
    // Fixed-size payloads (the common case): one ring all-gather; block r lands at r * size.
    NCCL_CHECK(ncclAllGather(in, out, sizes[0], ncclUint8, comm_, stream));
  } else {
    // Different sizes: send/receive pairs, every block received straight at its offset (no padded
    // slots to compact afterwards). Empty blocks are skipped on both sides, which know all sizes.
    const int me = rank();
    NcclGroup group;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == me) continue;
      const auto p = static_cast<size_t>(peer);
      if (!send.empty()) NCCL_CHECK(ncclSend(in, send.size(), ncclUint8, peer, comm_, stream));
      if (sizes[p] > 0) NCCL_CHECK(ncclRecv(out + offsets[p], sizes[p], ncclUint8, peer, comm_, stream));
    }
    group.end();
    if (!send.empty())
      CUDA_CHECK(
          cudaMemcpyAsync(out + offsets[static_cast<size_t>(me)], in, send.size(), cudaMemcpyDeviceToDevice, stream));
  }
  return out;
}

void NcclComm::all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                                std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  const char* op = "all_gather_bytes";
  check_send_outside(op, send, recv);
  const uint8_t* out = all_gather_to_scratch(op, ctx, send, sizes, offsets);
  recv.resize(offsets.empty() ? 0 : offsets.back() + sizes.back());
  if (out == nullptr) return;
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  CUDA_CHECK(cudaMemcpyAsync(recv.data(), out, recv.size(), cudaMemcpyDeviceToHost, stream));
  wait(stream, op);
}

const uint8_t* NcclComm::all_gather_device(Context& ctx, std::span<const uint8_t> send, std::vector<size_t>& sizes,
                                           std::vector<size_t>& offsets, bool sizes_given) {
  const char* op = "all_gather_device";
  const uint8_t* out = all_gather_to_scratch(op, ctx, send, sizes, offsets, sizes_given);
  if (out != nullptr && !sizes_given) wait(stream_of(op, ctx, device_, comm_), op);
  return out;
}

const uint8_t* NcclComm::all_to_all_to_scratch(const char* op, Context& ctx, std::span<const uint8_t> send,
                                               const std::vector<size_t>& send_sizes,
                                               const std::vector<size_t>& send_offsets, std::vector<size_t>& recv_sizes,
                                               std::vector<size_t>& recv_offsets, bool sizes_given) {
  check_all_to_all_args(op, send.size(), send_sizes, send_offsets, size());
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  if (sizes_given) {
    QT_CHECK(recv_sizes.size() == static_cast<size_t>(size()), "{}: {} given receive sizes for {} ranks", op,
             recv_sizes.size(), size());
  } else {
    const std::vector<uint64_t> heard =
        host_->all_to_all_u64(std::vector<uint64_t>(send_sizes.begin(), send_sizes.end()));
    recv_sizes.assign(heard.begin(), heard.end());
  }
  const size_t total = exclusive_offsets(recv_sizes, recv_offsets);
  const uint8_t* in = device_send(send, where, stream);
  uint8_t* out = total > 0 ? scratch(recv_scratch_, total) : nullptr;  // every receive and the self copy need total > 0
  const auto me = static_cast<size_t>(rank());
  NcclGroup group;
  for (size_t peer = 0; peer < send_sizes.size(); ++peer) {
    if (peer == me) continue;
    const int p = static_cast<int>(peer);
    if (send_sizes[peer] > 0)
      NCCL_CHECK(ncclSend(in + send_offsets[peer], send_sizes[peer], ncclUint8, p, comm_, stream));
    if (recv_sizes[peer] > 0)
      NCCL_CHECK(ncclRecv(out + recv_offsets[peer], recv_sizes[peer], ncclUint8, p, comm_, stream));
  }
  group.end();
  if (send_sizes[me] > 0)
    CUDA_CHECK(cudaMemcpyAsync(out + recv_offsets[me], in + send_offsets[me], send_sizes[me], cudaMemcpyDeviceToDevice,
                               stream));
  return out;
}

void NcclComm::all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                                const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                                std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) {
  const char* op = "all_to_all_bytes";
  check_send_outside(op, send, recv);
  const uint8_t* out = all_to_all_to_scratch(op, ctx, send, send_sizes, send_offsets, recv_sizes, recv_offsets);
  const size_t total = recv_offsets.empty() ? 0 : recv_offsets.back() + recv_sizes.back();
  recv.resize(total);
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  if (total > 0) CUDA_CHECK(cudaMemcpyAsync(recv.data(), out, total, cudaMemcpyDeviceToHost, stream));
  wait(stream, op);  // also when nothing came in: this rank's sends must be done before it returns
}

const uint8_t* NcclComm::all_to_all_device(Context& ctx, std::span<const uint8_t> send,
                                           const std::vector<size_t>& send_sizes,
                                           const std::vector<size_t>& send_offsets, std::vector<size_t>& recv_sizes,
                                           std::vector<size_t>& recv_offsets, bool sizes_given) {
  const char* op = "all_to_all_device";
  const uint8_t* out =
      all_to_all_to_scratch(op, ctx, send, send_sizes, send_offsets, recv_sizes, recv_offsets, sizes_given);
  // Without given sizes: this rank's sends are done, and a failed peer is reported here. With them the
  // caller's next wait_stream does both.
  if (!sizes_given) wait(stream_of(op, ctx, device_, comm_), op);
  return out;
}

void NcclComm::wait_stream(Context& ctx) {
  const char* op = "gradient exchange (the step's collectives)";
  wait(stream_of(op, ctx, device_, comm_), op);
}

void NcclComm::reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  const char* op = "reduce_scatter_sum";
  const int64_t total = reduce_scatter_total(op, counts);
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const size_t element = reduce_type_size(type);
  if (!buffer_location(op, "data", data, static_cast<size_t>(total) * element, ctx).is_cuda())
    return Communicator::reduce_scatter_sum(ctx, data, counts, type);
  if (total == 0) return;
  const auto me = static_cast<size_t>(rank());
  auto* bytes = static_cast<uint8_t*>(data);
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == largest; })) {
    // In place: NCCL's receive buffer is the send buffer's block of this rank.
    NCCL_CHECK(ncclReduceScatter(data, bytes + me * static_cast<size_t>(largest) * element,
                                 static_cast<size_t>(largest), nccl_type(type), ncclSum, comm_, stream));
    wait(stream, op);
    return;
  }
  // Blocks of different sizes (stripes of whole columns): each in a slot of the largest size, the
  // padding zero, so that one ncclReduceScatter moves (P-1)/P of the padded buffer.
  const size_t slot = static_cast<size_t>(largest) * element;
  uint8_t* padded = scratch(send_scratch_, slot * counts.size());
  CUDA_CHECK(cudaMemsetAsync(padded, 0, slot * counts.size(), stream));
  size_t at = 0, mine_at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    const size_t n = static_cast<size_t>(counts[r]) * element;
    if (r == me) mine_at = at;
    if (n > 0) CUDA_CHECK(cudaMemcpyAsync(padded + r * slot, bytes + at, n, cudaMemcpyDeviceToDevice, stream));
    at += n;
  }
  NCCL_CHECK(ncclReduceScatter(padded, padded + me * slot, static_cast<size_t>(largest), nccl_type(type), ncclSum,
                               comm_, stream));
  if (counts[me] > 0)
    CUDA_CHECK(cudaMemcpyAsync(bytes + mine_at, padded + me * slot, static_cast<size_t>(counts[me]) * element,
                               cudaMemcpyDeviceToDevice, stream));
  wait(stream, op);
}

void NcclComm::all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) {
  const char* op = "all_gather_blocks";
  const int64_t total = reduce_scatter_total(op, counts);
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const size_t element = reduce_type_size(type);
  if (!buffer_location(op, "data", data, static_cast<size_t>(total) * element, ctx).is_cuda())
    return Communicator::all_gather_blocks(ctx, data, counts, type);
  if (total == 0) return;
  const auto me = static_cast<size_t>(rank());
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<size_t> at(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) at[r + 1] = at[r] + static_cast<size_t>(counts[r]) * element;
  const size_t mine = at[me + 1] - at[me];
  if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; })) {
    // In place: NCCL's send buffer is this rank's block of the receive buffer.
    NCCL_CHECK(ncclAllGather(bytes + at[me], data, mine, ncclUint8, comm_, stream));
  } else {
    // Blocks of different sizes: send/receive pairs, each block received at its place.
    NcclGroup group;
    for (size_t peer = 0; peer < counts.size(); ++peer) {
      if (peer == me) continue;
      if (mine > 0) NCCL_CHECK(ncclSend(bytes + at[me], mine, ncclUint8, static_cast<int>(peer), comm_, stream));
      if (at[peer + 1] > at[peer])
        NCCL_CHECK(
            ncclRecv(bytes + at[peer], at[peer + 1] - at[peer], ncclUint8, static_cast<int>(peer), comm_, stream));
    }
    group.end();
  }
  wait(stream, op);
}

void NcclComm::broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) {
  const char* op = "broadcast_bytes";
  check_root(op, root, size());
  cudaStream_t stream = stream_of(op, ctx, device_, comm_);
  const Device where = buffer_location(op, "data", data.data(), data.size(), ctx);
  if (data.empty()) return;
  if (where.is_cuda()) {
    NCCL_CHECK(ncclBroadcast(data.data(), data.data(), data.size(), ncclUint8, root, comm_, stream));
    wait(stream, op);
    return;
  }
  uint8_t* dev = scratch(send_scratch_, data.size());
  if (rank() == root) CUDA_CHECK(cudaMemcpyAsync(dev, data.data(), data.size(), cudaMemcpyHostToDevice, stream));
  NCCL_CHECK(ncclBroadcast(dev, dev, data.size(), ncclUint8, root, comm_, stream));
  if (rank() != root) CUDA_CHECK(cudaMemcpyAsync(data.data(), dev, data.size(), cudaMemcpyDeviceToHost, stream));
  wait(stream, op);
}

}  // namespace qtrain
