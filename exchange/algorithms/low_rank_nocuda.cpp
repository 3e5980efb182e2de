// Builds without CUDA: PowerSGD's CUDA arithmetic is never reachable (no CUDA context can exist), but
// a clear error beats a link failure.
#include "exchange/algorithms/low_rank.h"
#include "framework/core/check.h"

namespace qtrain::exchange::low_rank_cuda {
[[noreturn]] static void unavailable() { QT_FAIL_NO_CUDA("powersgd on CUDA"); }
void project(Context&, const float*, int64_t, int64_t, const float*, int, float*) { unavailable(); }
void back_project(Context&, const float*, int64_t, int64_t, const float*, int, float*) { unavailable(); }
void expand(Context&, const float*, const float*, int64_t, int64_t, int, float*, float*) { unavailable(); }
void orthonormalize(Context&, float*, int, int64_t, float) { unavailable(); }
void add_into(Context&, float*, const float*, int64_t) { unavailable(); }
}  // namespace qtrain::exchange::low_rank_cuda
