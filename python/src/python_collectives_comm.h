// A Communicator whose collectives are a Python object's (qtrain.torch's process-group collectives:
// torch.distributed on a ProcessGroup, gloo or any other), so that qtrain's gradient exchange runs
// unchanged inside a PyTorch program, over the process group DDP itself uses. CPU memory only.
//
// The object has `rank` and `size`, and methods on NumPy arrays over qtrain's buffers (no copies):
//   all_reduce(a)          in-place sum (float32, float64, float16)
//   all_gather(a) -> b     b: the `size` ranks' arrays (all of one length) back to back, rank order
//   all_to_all(a) -> b     a and b: `size` blocks of equal length; block d of a goes to rank d, block
//                          s of b came from rank s
//   broadcast(a, root)     in place, from rank `root` of the group
//   barrier()
// Payloads of different sizes travel in blocks of the largest (every rank learns it first, or knows
// it from the capacities the exchange gives), each block led by its length. Every call holds the GIL
// (the exchange runs on the thread that called it from Python); a Python exception passes through
// qtrain's code unchanged.
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
  // One collective where every rank knows the largest payload (the capacities are the same list on
  // every rank for an allgather).
  void all_gather_streamed(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& recv_capacity,
                           std::vector<uint8_t>& recv, const Consume& consume) override;
  void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) override;
  std::vector<uint64_t> all_gather_u64(uint64_t value) override;
  void all_reduce_sum_f64(std::span<double> values) override;
  void barrier() override;

 private:
  // The blocks of `block` bytes (a length, then up to block - 8 bytes) of every rank, gathered; their
  // payloads to recv/sizes/offsets.
  void gather_blocks(std::span<const uint8_t> send, size_t block, std::vector<uint8_t>& recv,
                     std::vector<size_t>& sizes, std::vector<size_t>& offsets, const char* op);
  // Unpacks `size_` blocks of `block` bytes (a length, then the payload) into recv/sizes/offsets.
  void unpack(const uint8_t* blocks, size_t block, std::vector<uint8_t>& recv, std::vector<size_t>& sizes,
              std::vector<size_t>& offsets, const char* op) const;

  py::object collectives_;
  int rank_ = 0, size_ = 1;
  std::vector<uint8_t> packed_;  // this rank's blocks, reused
};

}  // namespace qtrain::python
