// MpiComm: the Open MPI transport over a duplicate of MPI_COMM_WORLD (so qtrain's messages never
// match anyone else's). Large sums run qtrain's ring allreduce over point-to-point messages; small
// ones MPI_Allreduce, with MPI_SUM for f32/f64 and, for f16/bf16, a commutative user operation that
// adds in fp32 and rounds to nearest even (the ring adds the same way). Counts above the int range of MPI are split
// into several calls. CUDA buffers go through pinned host memory unless the MPI is CUDA-aware.
#pragma once

#include <mpi.h>

#include "comm/communicator.h"
#include "comm/cuda_staging.h"
#include "comm/ring_allreduce.h"

namespace qtrain {

class MpiComm final : public Communicator {
 public:
  // Needs MPI initialized (an MpiRuntime); collective over MPI_COMM_WORLD. `device` is the run's
  // device, reported by device().
  explicit MpiComm(Device device = Device::cpu());
  // Frees the duplicate communicator, datatype and operations (skipped after MPI_Finalize).
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return device_; }

  void all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) override;
  void all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                        std::vector<size_t>& sizes, std::vector<size_t>& offsets) override;
  void all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                        const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                        std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) override;
  void all_to_all_streamed(Context& ctx, const Produce& produce, const std::vector<size_t>& send_capacity,
                           const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                           const Consume& consume) override;
  void all_gather_streamed(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& recv_capacity,
                           std::vector<uint8_t>& recv, const Consume& consume) override;
  bool has_point_to_point() const override { return true; }
  size_t max_point_to_point_bytes() const override { return max_message_bytes_; }
  int post_send(std::span<const uint8_t> bytes, int dest, int tag) override;
  int post_recv(std::span<uint8_t> buffer, int src, int tag) override;
  bool test(int request, size_t* received) override;
  int wait_any(const std::vector<int>& among, size_t* received) override;
  void complete_all() override;
  void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) override;
  std::vector<uint64_t> all_gather_u64(uint64_t value) override;
  void all_reduce_sum_f64(std::span<double> values) override;
  void barrier() override;
  bool has_subgroups() const override { return true; }
  int node_color() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) override;
  void all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) override;

  // values[d] goes to rank d; returns what every rank sent to this one (NcclComm's size exchange).
  std::vector<uint64_t> all_to_all_u64(const std::vector<uint64_t>& values);

  // The most bytes handed to one MPI call (default 1 GiB, safely inside MPI's int counts); larger
  // buffers are split. Tests set a few bytes to exercise the split paths. Same value on every rank.
  void set_max_message_bytes(size_t bytes);
  size_t max_message_bytes() const { return max_message_bytes_; }
  // Sums of at least `min_bytes` use qtrain's pipelined ring (comm/ring_allreduce.h) instead of
  // MPI_Allreduce; 0 turns the ring off. `segment_bytes` is its pipelining unit. Same values on every
  // rank. Default: the ring from 64 KiB, in 512 KiB segments (docs/performance.md).
  void set_ring(size_t min_bytes, size_t segment_bytes);
  size_t ring_min_bytes() const { return ring_min_bytes_; }
  size_t ring_segment_bytes() const { return ring_segment_bytes_; }
  // Whether GPU buffers go to MPI directly (byte movement only; sums are always staged because the
  // 16-bit operations run on the host).
  bool cuda_aware() const { return cuda_aware_; }
  // The duplicated communicator, for bootstrap traffic of other transports (the NCCL unique id).
  MPI_Comm mpi_comm() const { return comm_; }

 private:
  // A communicator over `comm` (a split of another MpiComm's, taken over and freed here), with the
  // parent's transport settings.
  MpiComm(MPI_Comm comm, const MpiComm& parent);
  void set_up();

  // The MPI side of the collectives, on host pointers (or device pointers with a CUDA-aware MPI),
  // one call per max_message_bytes_.
  void reduce_host(void* data, size_t count, ReduceType type);

  void gather_host(const uint8_t* send, const std::vector<size_t>& sizes, const std::vector<size_t>& offsets,
                   size_t total, uint8_t* recv);
  void exchange_host(const uint8_t* send, const std::vector<size_t>& send_sizes,
                     const std::vector<size_t>& send_offsets, uint8_t* recv, const std::vector<size_t>& recv_sizes,
                     const std::vector<size_t>& recv_offsets, bool point_to_point);
  void broadcast_host(uint8_t* data, size_t bytes, int root);
  // Whether every rank's receive capacities fit one MPI message each (a collective decision, so all
  // ranks take the same path); otherwise the streaming forms fall back to the plain collectives.
  bool streamable(const std::vector<size_t>& recv_capacity);
  // Receives posted by the streaming forms: waits for rank s's message and returns its size.
  size_t wait_stream(int s);
  // post_send / post_recv's checks and bookkeeping: a new request slot for a message with `peer`.
  MPI_Request& new_request(const char* op, size_t bytes, int peer, int tag);
  // The byte count of a completed receive; a truncation (the sender sent more than the buffer) is
  // an InputError naming the peer.
  size_t received_bytes(int rc, const MPI_Status& status, int peer);
  // The pointer MPI reads `bytes` of `data` from: data itself (host memory, or GPU memory with a
  // CUDA-aware MPI, once ctx's stream is drained) or a pinned copy.
  const uint8_t* send_view(Context& ctx, Device where, const uint8_t* data, size_t bytes);

  Device device_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;  // 2 contiguous bytes: an f16 or bf16 value
  MPI_Op f16_sum_ = MPI_OP_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool cuda_aware_ = false;
  size_t max_message_bytes_ = size_t{1} << 30;
  size_t ring_min_bytes_ = size_t{64} << 10;
  size_t ring_segment_bytes_ = size_t{512} << 10;
  RingScratch ring_scratch_;
  comm_detail::PinnedBuffer stage_;
  // Per-call scratch kept to avoid allocations (MpiComm serves one call at a time).
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  std::vector<MPI_Request> requests_;
  // Point-to-point requests (post_send / post_recv; completed ones are MPI_REQUEST_NULL) and peers.
  std::vector<MPI_Request> p2p_requests_;
  std::vector<int> p2p_peers_;
};

}  // namespace qtrain
