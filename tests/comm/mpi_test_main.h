// The MPI runtime of an MPI test executable (mpi_test_main.cpp), for tests that need the local rank.
#pragma once

#include "comm/mpi_runtime.h"

namespace qtrain::comm_test {
const MpiRuntime& test_mpi();
}  // namespace qtrain::comm_test
