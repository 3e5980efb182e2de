// Builds without the CUDA toolkit: a CUDA context is a clear error.
#include "framework/core/check.h"
#include "framework/core/context.h"

namespace qtrain {

struct CudaHandles {};

CudaHandles* make_cuda_handles(int index, uint64_t) { QT_FAIL_NO_CUDA("device cuda:{} requested", index); }
void CudaHandlesDeleter::operator()(CudaHandles* handles) const noexcept { delete handles; }
void synchronize_cuda_handles(CudaHandles&) {}

// No CUDA context can exist: only CPU contexts, whose calls complete in order.
StreamEvent::~StreamEvent() = default;
void StreamEvent::record(Context&) {}
void StreamEvent::make_wait(Context&) const {}

}  // namespace qtrain
