// MPI's error strings for MPI_CHECK (transport_check.h).
#include "comm/transport_check.h"

#include <mpi.h>

namespace qtrain::detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace qtrain::detail
