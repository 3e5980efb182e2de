// Builds without CUDA: the CUDA helpers are never reachable (no CUDA context can exist), but a clear
// error beats a link failure.
#include "comm/buffer_ops.h"
#include "framework/core/check.h"

namespace qtrain::cuda_ops {
[[noreturn]] static void unavailable() { QT_FAIL_NO_CUDA("gradient exchange on CUDA"); }
void copy_buffer(Context&, void*, const void*, size_t) { unavailable(); }
void copy_to_host(Context&, void*, const void*, size_t) { unavailable(); }
void copy_from_host(Context&, void*, const void*, size_t) { unavailable(); }
void scale_buffer(Context&, float*, int64_t, float) { unavailable(); }
void vote_buffer(Context&, float*, int64_t) { unavailable(); }
void pack_16bit(Context&, const float*, uint16_t*, int64_t, bool) { unavailable(); }
void unpack_16bit(Context&, const uint16_t*, float*, int64_t, bool, float) { unavailable(); }
}  // namespace qtrain::cuda_ops
