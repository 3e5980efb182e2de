// Checked calls of the transports' libraries, MPI_CHECK(call) and NCCL_CHECK(call): a failure throws
// the Error of framework/core/check.h with the library's own message, the call, the location, and the
// rank and host. Here rather than in framework/core, which links neither library.
#pragma once

#include <string>

#include "framework/core/check.h"

namespace qtrain::detail {
std::string mpi_error_string(int code);   // transport_check.cpp
std::string nccl_error_string(int code);  // nccl_error.cpp, built with CUDA only (the only callers are)
}  // namespace qtrain::detail

#define MPI_CHECK(call) QT_LIBRARY_CHECK_("MPI", 0, mpi_error_string, call)
#define NCCL_CHECK(call) QT_LIBRARY_CHECK_("NCCL", 0, nccl_error_string, call)
