// NCCL's error strings for NCCL_CHECK (transport_check.h); built with the CUDA paths only.
#include <nccl.h>

#include "comm/transport_check.h"

namespace qtrain::detail {

std::string nccl_error_string(int code) {
  int version = 0;
  ncclGetVersion(&version);
  return fmt::format("{} (NCCL {})", ncclGetErrorString(static_cast<ncclResult_t>(code)), version);
}

}  // namespace qtrain::detail
