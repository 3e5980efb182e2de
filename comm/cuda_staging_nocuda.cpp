// cuda_staging.h in builds without CUDA: every pointer is host memory, so the transports never stage
// and these bodies only reject requests that cannot be served.
#include "comm/cuda_staging.h"

#include "framework/core/check.h"

namespace qtrain::comm_detail {

Device pointer_device(const void*) { return Device::cpu(); }

std::string gpu_bus_id(int index) {
  QT_FAIL_NO_CUDA("the bus id of cuda:{} requested", index);
  return {};
}

Device buffer_location(const char*, const char*, const void*, size_t, const Context&) { return Device::cpu(); }

}  // namespace qtrain::comm_detail
