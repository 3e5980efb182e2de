// LocalComm: the communicator of a world of one (a single process without mpirun, or any run that
// asks for backend "local"). Every collective is a copy or nothing, behind the same entry checks as
// the real transports, so code tested against it fails the same way on a cluster.
#pragma once

#include "comm/communicator.h"

namespace qtrain {

class LocalComm final : public Communicator {
 public:
  explicit LocalComm(Device device = Device::cpu()) : device_(device) {}

  const char* name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Device device() const override { return device_; }

  void all_reduce_sum(Context& ctx, void* data, int64_t count, ReduceType type) override;
  void all_gather_bytes(Context& ctx, std::span<const uint8_t> send, std::vector<uint8_t>& recv,
                        std::vector<size_t>& sizes, std::vector<size_t>& offsets) override;
  void all_to_all_bytes(Context& ctx, std::span<const uint8_t> send, const std::vector<size_t>& send_sizes,
                        const std::vector<size_t>& send_offsets, std::vector<uint8_t>& recv,
                        std::vector<size_t>& recv_sizes, std::vector<size_t>& recv_offsets) override;
  void broadcast_bytes(Context& ctx, std::span<uint8_t> data, int root) override;
  std::vector<uint64_t> all_gather_u64(uint64_t value) override { return {value}; }
  void all_reduce_sum_f64(std::span<double> values) override {}
  void barrier() override {}
  bool has_subgroups() const override { return true; }
  int node_color() override { return 0; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<LocalComm>(device_); }

 private:
  Device device_;
};

}  // namespace qtrain
