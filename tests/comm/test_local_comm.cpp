// Unit tests of comm/ without MPI: LocalComm (a world of one) and its entry checks,
// make_communicator's answers in a process without an MpiRuntime, and the Open MPI transport defaults. (The fp16/bf16
// conversions of the 16-bit MPI sums are quant/numerics.h's, tested against the CPU's F16C in tests/quant.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>

#include "comm/communicator.h"
#include "comm/local_comm.h"
#include "comm/mpi_transport_defaults.h"
#include "framework/core/device.h"

using namespace qtrain;
using Catch::Contains;

namespace {

std::vector<uint8_t> iota_bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST_CASE("LocalComm is a world of one: sums keep the data, gathers and exchanges copy", "[comm][local]") {
  LocalComm comm;
  Context ctx = Context::cpu(1);
  CHECK(std::string(comm.name()) == "local");
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.device() == Device::cpu());

  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  comm.all_reduce_sum(ctx, data.data(), 3, ReduceType::f32);
  CHECK(data == std::vector<float>{1.5f, -2.0f, 3.25f});

  const std::vector<uint8_t> send = iota_bytes(17, 3);
  std::vector<uint8_t> recv;
  std::vector<size_t> sizes, offsets;
  comm.all_gather_bytes(ctx, send, recv, sizes, offsets);
  CHECK(sizes == std::vector<size_t>{17});
  CHECK(offsets == std::vector<size_t>{0});
  CHECK(recv == send);

  // all_to_all: the one block starts at an offset inside the send buffer.
  std::vector<size_t> recv_sizes, recv_offsets;
  comm.all_to_all_bytes(ctx, send, {5}, {4}, recv, recv_sizes, recv_offsets);
  CHECK(recv_sizes == std::vector<size_t>{5});
  CHECK(recv_offsets == std::vector<size_t>{0});
  CHECK(recv == std::vector<uint8_t>(send.begin() + 4, send.begin() + 9));

  std::vector<uint8_t> bytes = iota_bytes(9, 1);
  comm.broadcast_bytes(ctx, bytes, 0);
  CHECK(bytes == iota_bytes(9, 1));
  CHECK(comm.all_gather_u64(42) == std::vector<uint64_t>{42});
  std::vector<double> values = {0.5, 7.0};
  comm.all_reduce_sum_f64(values);
  CHECK(values == std::vector<double>{0.5, 7.0});
  comm.barrier();

  // Empty contributions are fine.
  comm.all_gather_bytes(ctx, {}, recv, sizes, offsets);
  CHECK(sizes == std::vector<size_t>{0});
  CHECK(recv.empty());
  comm.all_reduce_sum(ctx, nullptr, 0, ReduceType::f16);
}

TEST_CASE("the receive vector keeps its storage, and send must not point into it", "[comm][local]") {
  LocalComm comm;
  Context ctx = Context::cpu(1);
  std::vector<size_t> sizes, offsets;
  std::vector<uint8_t> recv;
  recv.reserve(64);
  const void* before = recv.data();
  comm.all_gather_bytes(ctx, iota_bytes(10, 0), recv, sizes, offsets);
  CHECK(static_cast<const void*>(recv.data()) == before);
  CHECK(recv.size() == 10);

  // A span into recv (even past its size, inside its capacity) would move when recv is resized.
  std::span<const uint8_t> inside(recv.data() + 2, 8);
  CHECK_THROWS_WITH(comm.all_gather_bytes(ctx, inside, recv, sizes, offsets),
                    Contains("all_gather_bytes: send (8 bytes) points into recv"));
  std::vector<size_t> rs, ro;
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, inside, {8}, {0}, recv, rs, ro),
                    Contains("all_to_all_bytes: send (8 bytes) points into recv"));
}

TEST_CASE("LocalComm rejects bad arguments with the operation's name", "[comm][local]") {
  LocalComm comm;
  Context ctx = Context::cpu(1);
  float x = 0;
  CHECK_THROWS_WITH(comm.all_reduce_sum(ctx, &x, -1, ReduceType::f32),
                    Contains("all_reduce_sum: count must be >= 0, got -1"));
  CHECK_THROWS_WITH(comm.all_reduce_sum(ctx, nullptr, 4, ReduceType::bf16),
                    Contains("all_reduce_sum: data is null for 4 bf16 elements"));
  CHECK_THROWS_WITH(comm.all_reduce_sum(ctx, &x, 1, static_cast<ReduceType>(9)),
                    Contains("all_reduce_sum: unknown reduce type 9"));

  std::vector<uint8_t> bytes(8);
  CHECK_THROWS_WITH(comm.broadcast_bytes(ctx, bytes, 1), Contains("broadcast_bytes: root 1 is not a rank"));
  CHECK_THROWS_WITH(comm.broadcast_bytes(ctx, bytes, -1), Contains("broadcast_bytes: root -1"));

  std::vector<uint8_t> recv;
  std::vector<size_t> rs, ro;
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, bytes, {1, 2}, {0, 1}, recv, rs, ro),
                    Contains("all_to_all_bytes: send_sizes has 2 entries, expected one per rank (1)"));
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, bytes, {1}, {}, recv, rs, ro),
                    Contains("all_to_all_bytes: send_offsets has 0 entries"));
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, bytes, {5}, {4}, recv, rs, ro),
                    Contains("all_to_all_bytes: the block for rank 0 (5 bytes at offset 4) exceeds the send buffer"));
  // A size that would wrap offset + size around is still caught.
  CHECK_THROWS_WITH(comm.all_to_all_bytes(ctx, bytes, {std::numeric_limits<size_t>::max()}, {2}, recv, rs, ro),
                    Contains("exceeds the send buffer of 8 bytes"));
}

TEST_CASE("make_communicator without MPI: a world of one, clear errors otherwise", "[comm][factory]") {
  CHECK(std::string(make_communicator("auto", Device::cpu())->name()) == "local");
  CHECK(std::string(make_communicator("local", Device::cpu())->name()) == "local");
  CHECK_THROWS_AS(make_communicator("gloo", Device::cpu()), InputError);
  CHECK_THROWS_WITH(make_communicator("gloo", Device::cpu()),
                    Contains("communication.backend: unknown backend 'gloo' (known: auto, local, mpi, nccl)"));
  CHECK_THROWS_WITH(make_communicator("mpi", Device::cpu()), Contains("create an MpiRuntime first"));
}

TEST_CASE("make_communicator(\"nccl\") without a GPU is a clear InputError", "[comm][factory]") {
  if (QTRAIN_HAS_CUDA && cuda_available()) return;  // a GPU machine: covered by test_comm_cuda
  const char* expected = QTRAIN_HAS_CUDA
                             ? "communication.backend: nccl needs a CUDA GPU on every rank; this machine has none"
                             : "this qtrain was built without CUDA/NCCL";
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    CHECK_THROWS_AS(make_communicator("nccl", device), InputError);
    CHECK_THROWS_WITH(make_communicator("nccl", device), Contains(expected));
  }
}

TEST_CASE("The Open MPI transport defaults fill unset variables and leave the user's alone", "[comm][mpi_defaults]") {
  const auto& defaults = mpi_transport_defaults();
  REQUIRE(defaults.size() == 3);
  for (const auto& [name, value] : defaults) unsetenv(std::string(name).c_str());
  const std::string user_name(defaults.front().first);
  setenv(user_name.c_str(), "65536", 1);  // as `mpirun --mca btl_tcp_eager_limit 65536` leaves it
  set_mpi_transport_defaults();
  CHECK(std::string(std::getenv(user_name.c_str())) == "65536");
  for (size_t i = 1; i < defaults.size(); ++i) {
    const char* got = std::getenv(std::string(defaults[i].first).c_str());
    REQUIRE(got != nullptr);
    CHECK(std::string(got) == "67108864");
  }
  for (const auto& [name, value] : defaults) unsetenv(std::string(name).c_str());
}
