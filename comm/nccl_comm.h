// NcclComm: NCCL collectives between one GPU per rank (the run's device, chosen by local rank), set
// up with a unique id that rank 0 creates and broadcasts over MPI. Data collectives run on the
// context's stream (host buffers go through device scratch memory); sizes of the byte collectives
// and the host helpers go over an MpiComm. Every collective returns when its work on the stream is
// done, waiting while it watches NCCL's asynchronous errors: a failed peer or a broken link is then
// an exception (and an aborted communicator) instead of a wait that never ends.
// nccl_comm.cpp implements it; builds without CUDA link nccl_comm_nocuda.cpp instead.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace qtrain {

// Whether this build has NCCL (false in builds without CUDA).
bool nccl_built();
// An NcclComm on `device` (cuda:N); make_communicator has checked that it can work. In builds
// without NCCL an InputError.
std::unique_ptr<Communicator> make_nccl_comm(Device device);

class NcclComm final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD (an MpiRuntime must exist); `device` is this rank's GPU and no
  // other rank may use the same one.
  explicit NcclComm(Device device);
  // Collective over `host`'s ranks: an NCCL communicator of those ranks, bootstrapped over `host`.
  NcclComm(Device device, std::unique_ptr<MpiComm> host);
  // ncclCommDestroy, or ncclCommAbort while an exception is unwinding (the other ranks may never
  // reach their teardown, and destroy would wait for them).
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  const char* name() const override { return "nccl"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const override { return device_; }

  void all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) override;
  void all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                        std::vector<size_t>& sizes, std::vector<size_t>& offsets) override;
  void all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                        const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                        std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) override;
  // The same collectives leaving the received blocks in device scratch: no host round trip.
  bool device_byte_collectives() const override { return true; }
  const uint8_t* all_to_all_device(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                                   const std::vector<size_t>& send_offsets, std::vector<size_t>& recv_sizes,
                                   std::vector<size_t>& recv_offsets, bool sizes_given) override;
  const uint8_t* all_gather_device(Context& ctx, std::span<const uint8_t> send, std::vector<size_t>& sizes,
                                   std::vector<size_t>& offsets, bool sizes_given) override;
  void wait_stream(Context& ctx) override;
  void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) override;
  // ncclAllGather from GPU memory into GPU memory; host buffers take the default.
  // ncclReduceScatter for a buffer in this GPU's memory; host buffers take the default (an allreduce).
  void reduce_scatter_sum(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) override;
  void all_gather_blocks(Context& ctx, void* data, std::span<const int64_t> counts, ReduceType type) override;
  std::vector<uint64_t> all_gather_u64(uint64_t value) override { return host_->all_gather_u64(value); }
  void all_reduce_sum_f64(std::span<double> values) override { host_->all_reduce_sum_f64(values); }
  void barrier() override { host_->barrier(); }

  // Subgroups for the two-level exchange: nodes by MPI's shared-memory split, and NCCL communicators
  // over MPI splits (collective over this communicator's ranks).
  bool has_subgroups() const override { return true; }
  int node_color() override { return host_->node_color(); }
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  // `bytes` of device scratch in `buffer`, grown on demand and kept: host buffers are staged through
  // it, and received bytes land there before the copy into the host vector.
  uint8_t* scratch(Tensor& buffer, size_t bytes);
  // `send` in device memory: itself, or its copy in send_scratch_ (queued on `stream`).
  const uint8_t* device_send(std::span<const uint8_t> send, Device where, void* stream);
  // The byte collectives up to the received blocks in recv_scratch_ (queued on the context's stream,
  // not waited for); null when nothing is received. The *_bytes forms copy them to the host. With
  // sizes_given the sizes are the caller's (the device forms), else they are exchanged over MPI.
  const uint8_t* all_gather_to_scratch(const char* op, Context& ctx, std::span<const uint8_t> send,
                                       std::vector<size_t>& sizes, std::vector<size_t>& offsets,
                                       bool sizes_given = false);
  const uint8_t* all_to_all_to_scratch(const char* op, Context& ctx, std::span<const uint8_t> send,
                                       const std::vector<size_t>& send_sizes, const std::vector<size_t>& send_offsets,
                                       std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets,
                                       bool sizes_given = false);
  // Waits until `stream` (a cudaStream_t) has run its work, polling NCCL's asynchronous error state
  // meanwhile; on an error, aborts the communicator and throws, naming `op`.
  void wait(void* stream, const char* op);

  std::unique_ptr<MpiComm> host_;
  Device device_;
  Tensor send_scratch_, recv_scratch_;
  ncclComm* comm_ = nullptr;
  int uncaught_at_construction_ = 0;
};

}  // namespace qtrain
