// NcclComm's asynchronous-error path, run under the CUDA emulator only (2 ranks, 2 emulated GPUs):
// the emulator's NCCL (tests/cuemu/shims/nccl.cpp) fails one rank's call on request
// (CUEMU_NCCL_FAIL_AFTER, read when the communicator starts). That rank's stream never drains and
// ncclCommGetAsyncError reports ncclRemoteError, as on a GPU whose link broke; its abort reaches the
// peer, which fails alike. Every rank must end in a clear Error instead of waiting for ever, and the
// aborted communicator must refuse further calls. (A real GPU cannot inject this; on hardware the
// path is exercised by killing a rank, see docs/gpu-checklist.md.)
#include <catch2/catch.hpp>

#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/comm/mpi_test_main.h"

using namespace qtrain;
using Catch::Contains;

namespace {

Device my_gpu() { return Device::cuda(comm_test::test_mpi().local_rank() % cuda_device_count()); }

// A communicator of which `failing_rank`'s (fail_after + 1)-th NCCL data call fails.
std::unique_ptr<Communicator> communicator_failing(int failing_rank, int fail_after) {
  const bool me = comm_test::test_mpi().rank() == failing_rank;
  if (me) ::setenv("CUEMU_NCCL_FAIL_AFTER", std::to_string(fail_after).c_str(), 1);
  auto comm = make_communicator("nccl", my_gpu());
  if (me) ::unsetenv("CUEMU_NCCL_FAIL_AFTER");
  return comm;
}

}  // namespace

TEST_CASE("NcclComm: a failed NCCL call ends every rank's collective with an error, not a hang", "[nccl][fault]") {
  REQUIRE(comm_test::test_mpi().size() == 2);
  Context ctx = Context::cuda(my_gpu().index, 1);
  for (int failing : {0, 1}) {
    INFO("the NCCL call of rank " << failing << " fails");
    auto comm = communicator_failing(failing, /*fail_after=*/1);
    // The first call works on both ranks.
    Tensor x = Tensor::zeros({64}, DType::f32, my_gpu());
    CHECK_NOTHROW(comm->all_reduce_sum(ctx, x.raw(), 64, ReduceType::f32));
    // The second fails on `failing`; its peer learns of it from the abort.
    CHECK_THROWS_WITH(
        comm->all_reduce_sum(ctx, x.raw(), 64, ReduceType::f32),
        Contains("all_reduce_sum: NCCL reported an asynchronous error") && Contains("a peer failed or a link broke"));
    // The communicator is aborted: using it again is an error too, never a wait.
    const auto aborted = Contains("the NCCL communicator was aborted after an earlier asynchronous error");
    CHECK_THROWS_WITH(comm->all_reduce_sum(ctx, x.raw(), 64, ReduceType::f32), aborted);
    CHECK_THROWS_WITH(comm->broadcast_bytes(ctx, std::span<uint8_t>(static_cast<uint8_t*>(x.raw()), 16), 0), aborted);
  }
}
