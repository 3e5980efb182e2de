// The main of the MPI test executables: MPI starts before Catch and ends after it, every rank runs
// every test case, and every rank exits with the worst result of all ranks, so a failure on any rank
// fails mpirun and hence the CTest test. Built with QTRAIN_TEST_NEEDS_GPU for the CUDA tests: then,
// without a GPU, it exits with 77 (CTest's "Skipped") before starting MPI.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdio>
#include <memory>

#include "framework/core/check.h"
#include "comm/transport_check.h"
#include "framework/core/device.h"
#include "tests/comm/mpi_test_main.h"

namespace {
std::unique_ptr<qtrain::MpiRuntime> g_mpi;  // lives from MPI_Init to MPI_Finalize, like main's runtime
}

const qtrain::MpiRuntime& qtrain::comm_test::test_mpi() { return *g_mpi; }

int main(int argc, char** argv) {
#ifdef QTRAIN_TEST_NEEDS_GPU
  if (!qtrain::cuda_available()) {
    std::printf("SKIPPED: no CUDA GPU on this machine (QTRAIN_HAS_CUDA=%d); CUDA tests need one\n", QTRAIN_HAS_CUDA);
    return 77;
  }
#endif
  g_mpi = std::make_unique<qtrain::MpiRuntime>(&argc, &argv);
  qtrain::start_mpi_on_demand();  // run without mpirun: a world of one, MPI running all the same
  Catch::Session session;
  int result = session.run(argc, argv);
  int worst = result;
  // Tests use CHECK rather than REQUIRE where a rank could otherwise leave a test case early and
  // start the next test's collectives while the others are still in this one.
  MPI_CHECK(MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (worst != 0 && result == 0) std::printf("rank %d: passed here, but another rank failed\n", g_mpi->rank());
  g_mpi.reset();
  return worst;
}
