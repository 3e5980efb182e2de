// flatten's CUDA path: the reshape is free, so only the copy into the caller's buffer remains, queued
// on the context's stream like every other layer call (Tensor::copy_from would use the legacy
// default stream, which the context's non-blocking stream does not wait for).
#include "framework/core/cuda_context.h"
#include "layers/flatten.h"

namespace qtrain {

void flatten_copy_cuda(Context& ctx, const Tensor& src, Tensor& dst) {
  QT_CHECK(src.nbytes() == dst.nbytes(), "flatten: copy of {} bytes into {}", src.nbytes(), dst.nbytes());
  if (src.nbytes() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, ctx.cuda().stream));
}

}  // namespace qtrain
