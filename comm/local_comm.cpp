// LocalComm: a world of one. Sums are the identity, gathers and exchanges are one copy into the host
// vector (from the GPU on ctx's stream when `send` is device memory), broadcasts are nothing; only
// the argument checks do real work.
#include "comm/local_comm.h"

#include <cstring>

#include "comm/cuda_staging.h"
#include "comm/transport_common.h"

namespace qtrain {

using namespace comm_detail;

namespace {

// recv <- `bytes` at src (host or ctx's GPU). The GPU copy runs on ctx's stream, after the kernels
// that wrote src, and is waited for because the host reads recv next.
void copy_to_recv(Context& ctx, Device where, uint8_t* recv, const uint8_t* src, size_t bytes) {
  if (bytes == 0) return;
  if (where.is_cpu()) {
    std::memcpy(recv, src, bytes);
    return;
  }
  copy_async(ctx, recv, src, bytes);
  ctx.synchronize();
}

}  // namespace

void LocalComm::all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) {
  const char* op = "all_reduce_sum";
  check_reduce_args(op, data, count, type);
  buffer_location(op, "data", data, static_cast<size_t>(count) * reduce_type_size(type), ctx);
}

void LocalComm::all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                                 std::vector<size_t>& sizes, std::vector<size_t>& offsets) {
  const char* op = "all_gather_bytes";
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  check_send_outside(op, send, recv);
  sizes.assign(1, send.size());
  recv.resize(exclusive_offsets(sizes, offsets));
  copy_to_recv(ctx, where, recv.data(), send.data(), send.size());
}

void LocalComm::all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                                 const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                                 std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) {
  const char* op = "all_to_all_bytes";
  check_all_to_all_args(op, send.size(), send_sizes, send_offsets, 1);
  const Device where = buffer_location(op, "send", send.data(), send.size(), ctx);
  check_send_outside(op, send, recv);
  recv_sizes = send_sizes;
  recv.resize(exclusive_offsets(recv_sizes, recv_offsets));
  copy_to_recv(ctx, where, recv.data(), send.data() + send_offsets[0], send_sizes[0]);
}

void LocalComm::broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) {
  const char* op = "broadcast_bytes";
  check_root(op, root, 1);
  buffer_location(op, "data", data.data(), data.size(), ctx);
}

}  // namespace qtrain
