// Internal to optim/: the CPU loops of the optimizers run on the context's CPU lanes. Each lane takes
// a contiguous range of the arena; every value's update reads and writes only its own index, so the
// bits do not depend on how [0, n) is split (the same as one lane, and as the CUDA kernels).
#pragma once

#include <cstdint>

#include "framework/core/context.h"

namespace qtrain::optim_detail {

// Below this many values per lane a range stays on one lane: waking a thread costs more than the
// step of 64K values takes.
constexpr int64_t kLaneGrain = int64_t{1} << 16;

// Calls f(begin, end) for the lanes' ranges of [0, n), returning when all are done.
template <typename F>
void for_lanes(Context& ctx, int64_t n, F&& f) {
  ctx.cpu_pool().parallel_for(n, kLaneGrain, f);
}

// p + i, or null for an optional state that is off.
template <typename T>
T* at_or_null(T* p, int64_t i) {
  return p != nullptr ? p + i : nullptr;
}

}  // namespace qtrain::optim_detail
