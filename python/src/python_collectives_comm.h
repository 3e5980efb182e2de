// A Communicator whose collectives are a Python object's (qtrain.torch's process-group collectives:
// torch.distributed on a ProcessGroup, gloo or any other), so that qtrain's gradient exchange runs
// unchanged inside a PyTorch program, over the process group DDP itself uses. CPU memory only.
//
// The object has `rank` and `size`, and methods on NumPy arrays over qtrain's buffers (no copies):
//   all_to_all(send, send_splits, recv, recv_splits)
//                          uint8 arrays: the first send_splits[0] bytes of `send` go to rank 0, the
//                          next send_splits[1] to rank 1, ...; rank s's bytes for this rank land in
//                          `recv` at the prefix sum of recv_splits[:s] (recv_splits[s] of them)
//   broadcast(a, root)     in place, from rank `root` of the group
//   barrier()
// Every other collective is built on all_to_all, because each call of a process group's collective
// costs its rounds of messages, and on loaded hosts a round costs milliseconds (the ranks' threads
// wait to be scheduled): gloo's ring allreduce takes 2(P - 1) rounds and its allgather P - 1, an
// all_to_all one. So an allreduce is a reduce-scatter and an allgather of the reduced blocks, two
// all_to_alls with the ring's bytes (2(P - 1)/P of the data from each rank), each rank summing its
// block in rank order (every rank gets the same bits); an allgather is an all_to_all of P copies of
// the block. Block lengths come from the capacities the exchange gives (all_to_all_streamed,
// all_gather_streamed: no round of sizes; each block is led by the length used) or from one
// all_to_all of the sizes first (all_gather_bytes, all_to_all_bytes). The calls into Python take the
// GIL (the exchange may run them on its own thread, under backward, while the thread that called it
// waits without the GIL); a Python exception passes through qtrain's code unchanged.
#pragma once

#include <pybind11/pybind11.h>

#include "comm/communicator.h"

namespace qtrain::python {

namespace py = pybind11;

class PythonCollectivesComm final : public Communicator {
 public:
  explicit PythonCollectivesComm(py::object collectives);

  const char* name() const override { return "torch.distributed"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu(); }

  void all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) override;
  void all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                        std::vector<size_t>& sizes, std::vector<size_t>& offsets) override;
  void all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                        const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                        std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) override;
  // One all_to_all of blocks sized by the capacities (every rank knows them): no round of sizes.
  void all_to_all_streamed(Context& ctx, const Produce& produce, const std::vector<size_t>& send_capacity,
                           const std::vector<size_t>& recv_capacity, std::vector<uint8_t>& recv,
                           const Consume& consume) override;
  void all_gather_streamed(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& recv_capacity,
                           std::vector<uint8_t>& recv, const Consume& consume) override;
  void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) override;
  std::vector<uint64_t> all_gather_u64(uint64_t value) override;
  void all_reduce_sum_f64(std::span<double> values) override;
  void barrier() override;

 private:
  // all_reduce_sum: a reduce-scatter and an allgather, two all_to_alls.
  void reduce(void* data, int64_t count, ReduceType type);
  // The process group's all_to_all: send_splits[d] bytes of `send` (back to back in rank order) to
  // rank d; rank s's recv_splits[s] bytes into `recv` (back to back in rank order).
  void all_to_all(std::span<const uint8_t> send, const std::vector<size_t>& send_splits, uint8_t* recv,
                  const std::vector<size_t>& recv_splits);
  // Every rank's `send` (sizes[s] bytes from rank s, known everywhere) into recv at offsets.
  void gather_known(std::span<const uint8_t> send, const std::vector<size_t>& sizes, std::vector<uint8_t>& recv,
                    std::vector<size_t>& offsets);
  // The streamed forms' arrivals: block s of `recv` (at stream_offsets_[s]) is a length, at most
  // capacity[s], and then rank s's payload, consumed where it arrived.
  void consume_blocks(const std::vector<uint8_t>& recv, const std::vector<size_t>& capacity, const Consume& consume,
                      const char* op);

  py::object collectives_;
  int rank_ = 0, size_ = 1;
  std::vector<uint8_t> send_, recv_;                      // blocks to send, an allreduce's shares: reused
  std::vector<size_t> send_splits_, recv_splits_, unit_;  // bytes per rank, reused
};

}  // namespace qtrain::python
