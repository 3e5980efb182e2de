// Builds without CUDA: DeMo's kernels are never reachable (no CUDA context can exist), but a clear
// error beats a link failure.
#include "framework/core/check.h"
#include "train/sync/demo_codec.h"

namespace qtrain::demo::demo_cuda {
[[noreturn]] static void unavailable() { QT_FAIL_NO_CUDA("sync.type demo on CUDA"); }
void encode(Context&, const Args&, float*, const float*, uint8_t*) { unavailable(); }
void decode(Context&, const Args&, const uint8_t*, int, size_t, float*) { unavailable(); }
}  // namespace qtrain::demo::demo_cuda
